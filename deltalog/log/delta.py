"""The Delta edge: everything deltalog says to delta-rs lives here.

A partition is one Delta table. Its log positions are kept in the Delta log itself, as app-transaction
(``txn``) actions, so they are read in O(1) from the snapshot and committed atomically with the data they
describe:

==============================  ============================================================
app id                          version holds
==============================  ============================================================
``deltalog.log_end_offset``     the next offset to assign; never goes backwards
``deltalog.log_start_offset``   the lowest readable offset (raised by retention/DeleteRecords)
``deltalog.active_segment``     the active segment's base offset
``deltalog.active_segment.opened_ms``  when the first record went into the active segment
``deltalog.active_segment.bytes``  bytes of the active segment's files (for ``segment.bytes``)
``deltalog.cleaner.checkpoint`` the first dirty offset (Kafka's cleaner-offset-checkpoint)
==============================  ============================================================

Every commit that moves the head of the log (append, roll) carries ``deltalog.log_end_offset``; delta-rs
refuses the second of two commits that carry the same app id, so two appenders can never both commit
offsets assigned from the same log end. A cleaning pass carries only the cleaner checkpoint: it rebases
over concurrent appends, and two cleaners on one partition cannot both commit.

Every commit carries a commit id of its own in its commit info (:data:`COMMIT_ID`): an object store can apply a
write and lose its answer, and a commit call that fails is resolved by finding that id in the log (see
:func:`commit`) before anything is retried or removed.

Files are written by pyarrow (appends) or Spark (cleaning) and committed as ``AddAction`` s whose stats
(min/max offset, segment, timestamp, delete horizon; null counts of key and value) come from the data or
the Parquet footer, so planning never scans data.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import (
    CommitFailedError,
    DeltaError,
    DeltaProtocolError,
    SchemaMismatchError,
    TableNotFoundError,
)
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from deltalog.errors import CommitConflictError, CommitOutcomeUnknownError, CorruptLogError, StorageError, plain
from deltalog.log import commit_infos, damage, faults, foreign_commits
from deltalog.log.data_file import DataFile  # noqa: F401 - re-exported: delta.DataFile, as before
from deltalog.log.key_hash import with_key_hash
from deltalog.log.record import (
    KEY_HASH_FIELDS,
    NULL_COUNT_COLUMNS,
    OFFSET,
    PRODUCER_FIELDS,
    SEGMENT,
    STATS_COLUMNS,
    TABLE_SCHEMA,
    new_file_name,
    parquet_write_options,
    row_group_rows,
)
from deltalog.storage import Storage, join
from deltalog.storage_faults import full_storage_error, is_storage_full

T = TypeVar("T")

TXN_LOG_END_OFFSET = "deltalog.log_end_offset"
TXN_LOG_START_OFFSET = "deltalog.log_start_offset"
TXN_ACTIVE_SEGMENT = "deltalog.active_segment"
TXN_ACTIVE_SEGMENT_OPENED = "deltalog.active_segment.opened_ms"
TXN_ACTIVE_SEGMENT_BYTES = "deltalog.active_segment.bytes"
TXN_CLEANER_CHECKPOINT = "deltalog.cleaner.checkpoint"
#: App ids that expire (a producer's state in the partition, see :mod:`deltalog.log.producer_state`): they are
#: committed with their ``lastUpdated`` time, so Delta's ``delta.setTransactionRetentionDuration`` (the topic's
#: ``producer.id.expiration.ms``) drops them from snapshots once unused that long. The log positions above carry
#: no time and never expire.
EXPIRING_APP_PREFIX = "deltalog.producer."
#: Delta's table property for how long an app id with a ``lastUpdated`` time lives.
SET_TXN_RETENTION = "delta.setTransactionRetentionDuration"

#: The commit-info key of every deltalog commit's own id: how a commit whose answer was lost is found in the log.
COMMIT_ID = "deltalog.commit_id"
#: The commit-info key of the version a deltalog commit was based on (what it checked, see foreign_commits).
READ_VERSION = "deltalog.read_version"
#: Reads of the log to resolve a failed commit before its outcome is declared unknown.
RESOLVE_ATTEMPTS = 3
#: Versions a commit that removes files tries in a row (see :func:`_commit_removing`): each one lost means another
#: commit landed first, which is read and checked before the next.
REMOVE_COMMIT_ATTEMPTS = 50

#: Table properties that hold topic configs are prefixed so they never clash with ``delta.*`` ones.
CONFIG_PREFIX = "deltalog.topic."
PROP_TOPIC = "deltalog.topic"
PROP_PARTITION = "deltalog.partition"
#: The topic id (KIP-516) every partition of a topic shares; a topic created again gets a new one.
PROP_TOPIC_ID = "deltalog.topic_id"
PROP_FORMAT = "deltalog.format.version"
FORMAT_VERSION = "1"

#: Table properties that tell other Delta engines, and their users, what a partition table is and what not to
#: do with it (see docs/lakehouse.md). Deletion vectors off: a DELETE that only marks rows would leave files whose
#: stats still count them. Optimized writes and auto-compaction off: deltalog lays out its own files (one segment
#: per file, offset order); an OPTIMIZE is tolerated, but each one makes the next clean rewrite the files back.
ENGINE_PROPERTIES = {
    "delta.enableDeletionVectors": "false",
    "delta.autoOptimize.optimizeWrite": "false",
    "delta.autoOptimize.autoCompact": "false",
    "deltalog.other_engines": "read; OPTIMIZE and VACUUM only; DELETE, UPDATE, MERGE, RESTORE and writes are refused "
                              "by deltalog until restored",
}


def table_description(topic: str, partition: int) -> str:
    """The Delta table description of a partition table: what it is and what other engines may do with it."""
    return (f"deltalog topic {topic} partition {partition}: a Kafka log (offsets, compaction) kept by deltalog. "
            "Read it freely; OPTIMIZE and VACUUM are safe. Do not DELETE, UPDATE, MERGE, RESTORE, write to or "
            "alter it: deltalog stops using the partition until such a commit is undone. Produce through deltalog.")


#: A cleaning pass writes into ``<table>/cleaned-<clock ms>-<pass id>/``: the clock time in the name lets VACUUM
#: age the output of a pass that never committed on the store's clock (see :mod:`deltalog.log.vacuum`).
CLEANED_DIR_PREFIX = "cleaned-"



def open_table(storage: Storage, uri: str) -> DeltaTable:
    """The Delta table at ``uri`` (a location of ``storage``), opened with the store's storage options."""
    storage.key(uri)
    try:
        with damage.reading_log(storage, uri):
            return DeltaTable(uri, storage_options=storage.delta_options)
    except TableNotFoundError as e:
        raise CorruptLogError(f"no Delta table at {uri}: {plain(str(e))}") from None


def create_table(storage: Storage, uri: str, properties: Mapping[str, str], txns: Mapping[str, int],
                 description: str | None = None) -> DeltaTable:
    """Create an empty partition table with its properties and initial log positions in version 0.

    Version 0 carries a commit id, like every commit (see :func:`commit`): a create whose answer the store lost
    (the client retried the PUT of version 0 and found it there) is told from a table someone else created by
    reading version 0 back."""
    storage.key(uri)
    commit_id = new_commit_id()
    try:
        return DeltaTable.create(
            uri,
            TABLE_SCHEMA,
            mode="error",
            configuration=dict(properties),
            description=description,
            raise_if_key_not_exists=False,
            storage_options=storage.delta_options,
            # No retry at a later version: delta-rs would write a second "create" as version 1 when the retried
            # PUT of version 0 finds its own file (measured); version 0 is resolved below instead.
            commit_properties=CommitProperties(
                custom_metadata={"deltalog.operation": "create", COMMIT_ID: commit_id}, max_commit_retries=0,
                app_transactions=[Transaction(k, int(v)) for k, v in txns.items()]),
        )
    except Exception as e:  # noqa: BLE001 - any failure: version 0 says whether this create landed
        error = e
    for attempt in range(RESOLVE_ATTEMPTS):
        try:
            dt = DeltaTable(uri, storage_options=storage.delta_options, version=0)
            ours = any(entry.get(COMMIT_ID) == commit_id for entry in commit_infos.history(dt, 1))
        except TableNotFoundError:
            if is_storage_full(error):
                raise full_storage_error(error, uri, f"creating the Delta table {uri}") from error
            if _local(uri):
                raise StorageError(f"creating the Delta table at {uri} failed and it was not created: "
                                   f"{plain(str(error))}. Nothing was written; try again") from error
            raise StorageError(f"creating the Delta table at {uri} failed and it is not there yet: "
                               f"{plain(str(error))}. A write the store did not answer may still create it; creating "
                               "it again is safe (a Delta table's version 0 is written once)") from error
        except Exception:  # noqa: BLE001 - the store still fails: try again, then say it is unknown
            time.sleep(0.2 * (attempt + 1))
            continue
        if ours:
            return DeltaTable(uri, storage_options=storage.delta_options)
        raise error
    raise CommitOutcomeUnknownError(
        f"creating the Delta table at {uri} failed ({error}) and its log could not be read to tell whether it was "
        "created; look again once the store answers"
    ) from error


def alter_properties(dt: DeltaTable, properties: Mapping[str, str], *, operation: str = "alter_config") -> None:
    """Set table properties (one metadata commit), resolved like :func:`commit` when the call fails: setting the
    same properties is idempotent, but a landed change must not be reported as failed."""
    _metadata_commit(dt, operation, operation, lambda props: dt.alter.set_table_properties(
        dict(properties), raise_if_not_exists=False, commit_properties=props))


def set_description(dt: DeltaTable, description: str, *, operation: str) -> None:
    """Set the table description (one metadata commit: delta-rs sets it apart from the properties), resolved like
    :func:`alter_properties`."""
    _metadata_commit(dt, operation, operation, lambda props: dt.alter.set_table_description(
        description, commit_properties=props))


def _metadata_commit(dt: DeltaTable, operation: str, what: str, change: Callable[[CommitProperties], None]) -> None:
    """One metadata commit made by ``change`` (given its commit properties: deltalog's ``operation`` and a fresh
    commit id); a failed call is resolved from the log (:func:`resolve_commit`, naming ``what``)."""
    commit_id = new_commit_id()
    read_version = dt.version()
    try:
        change(CommitProperties(custom_metadata={"deltalog.operation": operation, COMMIT_ID: commit_id}))
    except Exception as e:  # noqa: BLE001 - any failure: the log says whether the change landed
        resolve_commit(dt, read_version, commit_id, what, e)


def app_transactions(txns: Mapping[str, int]) -> list[Transaction]:
    """The app-transaction actions of a commit; expiring ones (:data:`EXPIRING_APP_PREFIX`) carry the wall-clock
    time as their ``lastUpdated``, which Delta's retention compares with the wall clock."""
    now = int(time.time() * 1000)
    return [Transaction(k, int(v), now if k.startswith(EXPIRING_APP_PREFIX) else None) for k, v in txns.items()]


def txn_version(dt: DeltaTable, app_id: str) -> int | None:
    return dt.transaction_version(app_id)


def has_producer_columns(dt: DeltaTable) -> bool:
    """Whether the table's schema has the producer columns (tables created before transactions existed do not)."""
    names = {f.name for f in dt.schema().fields}
    return all(f.name in names for f in PRODUCER_FIELDS)


def add_producer_columns(dt: DeltaTable) -> None:
    """Upgrade a table made before transactions existed: add the producer columns to its schema (one metadata
    commit; its files keep their columns and read the new ones as null). A concurrent upgrade, or any commit that
    races it, makes this raise :class:`CommitConflictError`; the caller looks again."""
    _add_columns(dt, PRODUCER_FIELDS, "add_producer_columns", "adding the producer columns")


def has_key_hash_columns(dt: DeltaTable) -> bool:
    """Whether the table's schema has the key-hash columns (tables created before they existed do not)."""
    names = {f.name for f in dt.schema().fields}
    return all(f.name in names for f in KEY_HASH_FIELDS)


def add_key_hash_columns(dt: DeltaTable) -> None:
    """Upgrade a table made before the key-hash columns existed: add them to its schema, one metadata commit of
    deltalog's own (its commit id tells :mod:`deltalog.log.foreign_commits` it is not another engine's schema
    change). Its older files keep their columns and are hashed by the cleaner as before until a pass rewrites
    them. A lost race raises :class:`CommitConflictError`; the caller looks again."""
    _add_columns(dt, KEY_HASH_FIELDS, "add_key_hash_columns", "adding the key-hash columns")


def _add_columns(dt: DeltaTable, fields: Sequence[pa.Field], operation: str, what: str) -> None:
    from deltalake.schema import Field, PrimitiveType

    types = {"int64": "long", "int32": "integer", "bool": "boolean", "string": "string"}
    names = {f.name for f in dt.schema().fields}
    missing = [Field(f.name, PrimitiveType(types[str(f.type)]), nullable=True) for f in fields
               if f.name not in names]
    if not missing:
        return
    _metadata_commit(dt, operation, what, lambda props: dt.alter.add_columns(missing, commit_properties=props))


def data_files(dt: DeltaTable) -> list[DataFile]:
    """The live files of the snapshot, in offset order."""
    # Through the Arrow stream interface: pa.table() first asks whether its argument is a pandas DataFrame, which
    # imports pandas (a cost on every command's start, deltalog sql's included).
    actions = pa.RecordBatchReader.from_stream(dt.get_add_actions(flatten=True)).read_all()
    files = [DataFile.from_add_row(row) for row in actions.to_pylist()]
    files.sort(key=lambda f: f.min_offset)
    return files


def _stats_from_table(table: pa.Table) -> dict[str, Any]:
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    names = set(table.column_names)
    for col in STATS_COLUMNS:
        if col not in names:
            continue  # a plain file has no producer columns: no stats, read as all null
        mm = pc.min_max(table.column(col))
        if mm["min"].is_valid:
            mins[col] = mm["min"].as_py()
            maxs[col] = mm["max"].as_py()
    nulls = {col: table.column(col).null_count for col in NULL_COUNT_COLUMNS if col in names}
    return {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def stats_from_parquet_footer(storage: Storage, path: str) -> dict[str, Any]:
    """Delta stats for a file someone else wrote (a cleaner task), from its Parquet footer: no data read."""
    try:
        with storage.open_input(path) as f:
            meta = pq.read_metadata(f)
    except Exception as e:  # pyarrow raises several types for a damaged footer
        raise CorruptLogError(f"cannot read the Parquet footer of {path}: {e}") from None
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for j in range(group.num_columns):
            column = group.column(j)
            name = column.path_in_schema  # leaf path: nested headers columns are "headers.list.element.key"
            if name not in NULL_COUNT_COLUMNS and name not in STATS_COLUMNS:
                continue
            st = column.statistics
            if st is None:
                raise CorruptLogError(f"{path} has no statistics for column {name}")
            if name in NULL_COUNT_COLUMNS:
                nulls[name] = nulls.get(name, 0) + (st.null_count or 0)
            if name in STATS_COLUMNS and st.has_min_max:
                mins[name] = st.min if name not in mins else min(mins[name], st.min)
                maxs[name] = st.max if name not in maxs else max(maxs[name], st.max)
    return {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def write_data_file(storage: Storage, table_uri: str, table: pa.Table, now_ms: int,
                    row_group_size: int | None = None, *, key_hash: bool = True) -> AddAction:
    """Write ``table`` (rows in offset order, one segment) as a new file and describe it as an add action
    (in row groups of ``row_group_size`` rows if given, else of :func:`~deltalog.log.record.row_group_rows`: small
    enough that a read of a few records reads little, see :mod:`deltalog.log.row_groups`). The file gets each
    record's key hash (:func:`~deltalog.log.key_hash.with_key_hash`) unless ``table`` already carries it whole;
    ``key_hash=False`` writes the file as deltalog did before those columns existed (the benchmarks' and tests'
    files of an older store)."""
    table = with_key_hash(table) if key_hash else table.drop_columns(
        [f.name for f in KEY_HASH_FIELDS if f.name in table.column_names])
    segment = table.column(SEGMENT)[0].as_py()
    first = table.column(OFFSET)[0].as_py()
    name = new_file_name(segment, first)
    size = storage.write_parquet(join(table_uri, name), table,
                                 row_group_size=row_group_size or row_group_rows(table), **parquet_write_options(table))
    return AddAction(name, size, {}, now_ms, True, json.dumps(_stats_from_table(table)))


def add_action_for_file(storage: Storage, table_uri: str, relative_path: str, now_ms: int,
                        size: int | None = None) -> AddAction:
    """An add action for a file already written inside the table (by a cleaner task), with its stats from
    the footer; ``size`` when the writer knows it (else it is looked up)."""
    path = join(table_uri, relative_path)
    stats = stats_from_parquet_footer(storage, path)
    if size is None:
        info = storage.info(path)
        if info is None:
            raise CorruptLogError(f"{path} was written but is not there")
        size = info.size
    return AddAction(relative_path, size, {}, now_ms, True, json.dumps(stats))


def remove_action(f: DataFile, now_ms: int) -> RemoveAction:
    return RemoveAction(f.path, True, now_ms, f.size_bytes, {})


def commit(
    dt: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    *,
    txns: Mapping[str, int],
    metadata: Mapping[str, Any] | None = None,
    operation: str,
    retries: int | None = None,
) -> str:
    """One atomic Delta commit of data actions and log positions, based on ``dt``'s version; returns its commit
    id (:func:`committed_version` finds the version it landed as; :func:`commit_version` says it when it is known).

    Every commit carries a commit id of its own (``deltalog.commit_id`` in its commit info), so that a commit
    whose answer the store lost is told apart from a concurrent writer's by reading the log (see
    :func:`resolve_commit`): the object store's client retries a commit-file PUT whose answer was lost and then
    finds the file there (its own), and delta-rs takes that for a concurrent commit. This is the store-side half
    of what Kafka's idempotence gives a producer whose acknowledgement was lost: the broker
    (``ProducerStateManager``'s duplicate check) answers the retried batch with its original offsets rather than
    append it again or call it a failure. Raises
    :class:`CommitConflictError` only when the log proves the commit did not land and a concurrent writer won
    (same app id, or a file this commit removes is already gone): then the caller may remove the files it wrote
    for it, and decide whether to retry from a fresh snapshot. A full disk proven not landed raises
    :class:`StorageFullError`: the caller removes what it wrote too, so that it holds no space. Another I/O
    failure proven not landed raises :class:`StorageError`; one whose outcome the log cannot tell raises
    :class:`CommitOutcomeUnknownError`. In those two cases the caller keeps what it wrote: VACUUM removes files
    no version references.
    """
    return commit_version(dt, actions, txns=txns, metadata=metadata, operation=operation, retries=retries)[0]


def commit_version(
    dt: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    *,
    txns: Mapping[str, int],
    metadata: Mapping[str, Any] | None = None,
    operation: str,
    retries: int | None = None,
    plan_version: int | None = None,
    planned_txns: Mapping[str, int | None] | None = None,
) -> tuple[str, int | None]:
    """:func:`commit`, returning its commit id and the version it landed as when that is known without reading the log
    back: a commit that removes files is made as exactly the next version of the one it checked (None otherwise).

    ``plan_version``: the version the caller planned the commit on, its removes being files of that version, and
    ``planned_txns`` the values its snapshot of that version holds for ``txns``' app ids. When ``dt`` is at that
    version, the removes' first attempt has nothing to check again (every file it removes is live there, and no app
    id or metadata can have moved between a version and itself): only an attempt after a lost version checks."""
    commit_id = new_commit_id()
    read_version = dt.version()
    # The version this commit is based on: deltalog checked every commit up to it for other engines' changes
    # (see deltalog.log.foreign_commits), so a later check needs to read only the commits after it.
    custom: dict[str, Any] = {"deltalog.operation": operation, COMMIT_ID: commit_id, READ_VERSION: read_version}
    if metadata:
        custom.update({f"deltalog.{k}": v for k, v in metadata.items()})
    props = CommitProperties(
        custom_metadata=custom,
        max_commit_retries=retries,
        app_transactions=app_transactions(txns),
    )
    faults.point(f"{operation}:before-commit")  # inert unless the reliability harness asks (see faults)
    removed = [a.path for a in actions if isinstance(a, RemoveAction)]
    version: int | None = None
    if removed:
        planned = plan_version is not None and plan_version == read_version
        version = _commit_removing(dt, actions, removed, custom, txns, operation,
                                   planned_txns if planned else None, checked=planned)
    else:
        try:
            dt.create_write_transaction(list(actions), mode="append", schema=TABLE_SCHEMA, commit_properties=props)
        except Exception as e:  # noqa: BLE001 - any failure: the log says whether the commit landed
            version = resolve_commit(dt, read_version, commit_id, operation, e)
    faults.point(f"{operation}:after-commit")
    return commit_id, version


def _commit_removing(dt: DeltaTable, actions: Sequence[AddAction | RemoveAction], removed: Sequence[str],
                     custom: Mapping[str, Any], txns: Mapping[str, int], operation: str,
                     planned_txns: Mapping[str, int | None] | None = None, *, checked: bool = False) -> int:
    """A commit that removes files, made only at the version right after one whose files it checked.

    delta-rs refuses a commit removing a file a concurrent commit removed only when that remove had
    ``dataChange=true``: after another engine's OPTIMIZE or Z-order (``dataChange=false``) it rebases a stale
    removal over it and accepts it, which leaves the merged file and this commit's new files both in the table,
    every record of them twice. So the conflicts are checked here, as Delta's ``ConflictChecker`` does (a file
    this commit removes that a concurrent commit removed: ``ConcurrentDeleteReadException``; an app id both set:
    ``ConcurrentTransactionException``; a metadata or protocol change: ``MetadataChangedException``), against
    the table at the version the commit is then made on with ``max_commit_retries=0``: delta-rs writes it as
    exactly the next version or fails, so no commit can land between the check and the commit. A version taken
    in between (a concurrent append, anything) is read and checked again; a conflict raises
    :class:`CommitConflictError` and the caller plans again from a fresh snapshot. ``checked``: ``dt`` is at the
    version the caller planned on (see :func:`commit_version`), so the first attempt checks nothing. Returns the
    version the commit landed as."""
    commit_id = custom[COMMIT_ID]
    planned_txns = ({k: planned_txns[k] for k in txns} if planned_txns is not None and all(k in planned_txns for k in txns)
                    else {k: dt.transaction_version(k) for k in txns})
    planned_shape = _table_shape(dt)
    seen = dt.version()  # the caller read the table up to here through the check of other engines' commits
    for attempt in range(REMOVE_COMMIT_ATTEMPTS):
        if attempt:
            _check_foreign(dt, seen, operation)
            seen = dt.version()
        if attempt or not checked:
            _check_removes(dt, removed, planned_txns, planned_shape, operation)
        faults.point(f"{operation}:checked")
        props = CommitProperties(custom_metadata=dict(custom), max_commit_retries=0,
                                 app_transactions=app_transactions(txns))
        base = dt.version()  # an earlier attempt lost its version to another commit: it is not in the log
        try:
            dt.create_write_transaction(list(actions), mode="append", schema=TABLE_SCHEMA, commit_properties=props)
            return base + 1  # with no retries, delta-rs writes exactly the next version or fails
        except Exception as e:  # noqa: BLE001 - any failure: the log says whether the commit landed
            try:
                return resolve_commit(dt, base, commit_id, operation, e)  # it landed; its answer was lost
            except CommitConflictError:
                pass  # the version was taken: find_commit moved dt to the latest version; check that one
    raise CommitConflictError(f"{operation} on {dt.table_uri} found the next version taken {REMOVE_COMMIT_ATTEMPTS} "
                              "times in a row (concurrent commits); it plans again from a fresh snapshot")


def _check_foreign(dt: DeltaTable, seen: int, operation: str) -> None:
    """Raise :class:`CommitConflictError` when a commit after ``seen`` up to ``dt``'s version is another engine's
    change of records (:func:`deltalog.log.foreign_commits.classify`): a commit made right after it would land on
    top of a DELETE, UPDATE, MERGE or RESTORE nothing of deltalog's checked, and make the RESTORE that undoes it
    drop deltalog's commit. The caller plans again; its fresh snapshot raises the ``ForeignCommitError``."""
    newer = dt.version() - seen
    if newer <= 0:
        return
    for entry in commit_infos.history(dt, newer):
        if int(entry["version"]) > seen and foreign_commits.classify(entry) == foreign_commits.DETECTED:
            raise CommitConflictError(
                f"{operation} on {dt.table_uri}: another engine changed records at version {entry['version']} "
                f"({entry.get('operation')}) after this commit was planned; it plans again from a fresh snapshot")


def _table_shape(dt: DeltaTable) -> tuple[Any, ...]:
    """What a concurrent metadata or protocol change alters: the table id, properties, schema and protocol."""
    meta = dt.metadata()
    return meta.id, sorted(meta.configuration.items()), dt.schema().to_json(), repr(dt.protocol())


def _check_removes(dt: DeltaTable, removed: Sequence[str], planned_txns: Mapping[str, int | None],
                   planned_shape: tuple[Any, ...], operation: str) -> None:
    """Raise :class:`CommitConflictError` unless every file in ``removed`` is live at ``dt``'s version, no app id
    this commit sets moved since the plan and the table's metadata and protocol are the plan's."""
    live = set(pa.RecordBatchReader.from_stream(dt.get_add_actions(flatten=True)).read_all()
               .column("path").to_pylist())
    gone = [p for p in removed if p not in live]
    if gone:
        raise CommitConflictError(
            f"{operation} on {dt.table_uri} would remove {len(gone)} file(s) no longer in the table at version "
            f"{dt.version()} (a concurrent commit removed them: another engine's OPTIMIZE or Z-order, or another "
            f"deltalog process), e.g. {gone[0]}; it plans again from a fresh snapshot")
    moved = [k for k, v in planned_txns.items() if dt.transaction_version(k) != v]
    if moved:
        raise CommitConflictError(f"{operation} on {dt.table_uri}: a concurrent commit set {', '.join(moved)} at or "
                                  f"before version {dt.version()}; it plans again from a fresh snapshot")
    if _table_shape(dt) != planned_shape:
        raise CommitConflictError(f"{operation} on {dt.table_uri}: a concurrent commit changed the table's metadata "
                                  f"or protocol at or before version {dt.version()}; it plans again from a fresh "
                                  "snapshot")


def new_commit_id() -> str:
    return uuid.uuid4().hex


def committed_version(dt: DeltaTable, read_version: int, commit_id: str) -> int:
    """The version of the commit with ``commit_id`` made on ``read_version`` (Delta may have rebased it over
    others), found in the history written since."""
    version = find_commit(dt, read_version, commit_id)
    if version is None:
        raise CorruptLogError(f"the commit with {COMMIT_ID}={commit_id!r} is not in the history of {dt.table_uri}")
    return version


def find_commit(dt: DeltaTable, read_version: int, commit_id: str) -> int | None:
    """The version after ``read_version`` whose commit info carries ``commit_id``, or None when none does (read
    from the table's history, which :meth:`DeltaTable.history` lists newest first)."""
    dt.update_incremental()
    newer = dt.version() - read_version
    if newer <= 0:
        return None
    for entry in commit_infos.history(dt, newer):
        if entry.get(COMMIT_ID) == commit_id:
            return int(entry["version"])
    return None


def resolve_commit(dt: DeltaTable, read_version: int, commit_id: str, operation: str, error: BaseException) -> int:
    """After a commit call failed with ``error``: the version the commit landed as, if it did (its answer was
    lost and the retried write found its own file, or a hook after the commit failed); else the error it stands
    for. Reading the log is tried a few times: until it answers, nothing is known."""
    last: Exception | None = None
    for attempt in range(RESOLVE_ATTEMPTS):
        try:
            version = find_commit(dt, read_version, commit_id)
        except Exception as e:  # noqa: BLE001 - the store still fails: try again, then say it is unknown
            last = e
            time.sleep(0.2 * (attempt + 1))
            continue
        if version is not None:
            return version
        if isinstance(error, CommitFailedError):
            raise CommitConflictError(f"{operation} lost a race with a concurrent commit: {plain(str(error))}") from error
        if is_storage_full(error):  # a full disk under the Delta log: one clear error, without colour codes
            raise full_storage_error(error, dt.table_uri, f"the {operation} commit to {dt.table_uri}") from error
        refused = isinstance(error, (SchemaMismatchError, DeltaProtocolError))
        if refused or not isinstance(error, (OSError, DeltaError)):
            raise error  # refused for what it is, not for the store: not landed, and not a storage failure
        if _local(dt.table_uri):  # a local write's call returned: it cannot land later
            raise StorageError(
                f"the {operation} commit to {dt.table_uri} failed and did not land (the Delta log has no version "
                f"with its commit id after version {read_version}): {plain(str(error))}. Nothing of it is in the log "
                "(on a local file system a failed write does not land later); sending it again writes it once"
            ) from error
        raise CommitOutcomeUnknownError(write_may_still_land(operation, dt.table_uri, read_version, error)) from error
    raise CommitOutcomeUnknownError(
        f"the {operation} commit to {dt.table_uri} failed ({error}) and the Delta log could not be read to tell "
        f"whether it landed ({last}). The files written for it are kept (VACUUM removes them if no version "
        "references them); read the partition once the store answers to see whether it is there"
    ) from error


def _local(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri


def write_may_still_land(operation: str, uri: str, read_version: int, error: BaseException) -> str:
    """The message of a commit to an object store that got no answer and is not in the log yet: a request the
    store has not answered may still be applied, so "it did not land" cannot be said, and a plain resend can
    write the records twice. Kafka's answer to the same uncertainty is the idempotent producer (enabled by default
    since Kafka 3.0): its retry carries the batch's sequence, and a batch that landed is answered with its
    original offsets (``ProducerStateManager``'s duplicate check), never written again."""
    return (
        f"the {operation} commit to {uri} got no answer from the store ({plain(str(error))}), and the Delta log "
        f"shows no version with its commit id after version {read_version} yet. The store may still apply the "
        "write: it can land later. Do not send the same records again with a plain append (store.append, "
        "produce), which writes them twice if it does; send them with the idempotent producer (store.producer(), "
        "enable.idempotence=true, the default as in Kafka since 3.0), whose retry returns the original offsets "
        "if the first write landed, or read the partition after a while to see whether they are there. The files "
        "written for it are kept (VACUUM removes them if no version references them)")


def retry_on_conflict(what: str, attempts: int, step: Callable[[int], T], *, backoff: bool = True) -> T:
    """``step(attempt)`` until it commits: a :class:`CommitConflictError` means a concurrent writer won, and the
    step plans again from a fresh snapshot (after a short random sleep when ``backoff``, so racing producers
    spread out). After ``attempts`` lost races one ``CommitConflictError`` says so."""
    last: CommitConflictError | None = None
    for attempt in range(attempts):
        try:
            return step(attempt)
        except CommitConflictError as e:
            last = e
            if backoff:
                time.sleep(random.uniform(0.001, 0.005 * min(attempt + 1, 20)))
    raise CommitConflictError(f"{what} lost the race with concurrent commits {attempts} times in a row; "
                              f"last error: {last}")


def delete_quietly(storage: Storage, table_uri: str, paths: Iterable[str]) -> None:
    """Remove files this process wrote for a commit the log proved did not land (a :class:`CommitConflictError`
    from :func:`commit`); VACUUM would remove them later anyway. Never call it for a commit whose outcome is
    unknown: a file its landed version references would be gone."""
    try:
        storage.delete_many([join(table_uri, p) for p in paths])
    except Exception:  # noqa: BLE001 - best effort: the commit's own error is the one to report
        pass
