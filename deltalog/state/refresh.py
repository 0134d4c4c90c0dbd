"""Bringing a state table up to date: the new records of each partition, the latest per key, in one merge.

A refresh reads, per partition, what a ``read_committed`` consumer would fetch (:mod:`deltalog.log.fetch`: up
to the last stable offset, aborted records and markers left out) from the offset the table last applied (see
:mod:`deltalog.state.table`) to the partition's last stable offset, as Kafka's consumers resume from their
committed position. Of those records it keeps the latest of each key (:func:`~deltalog.state.rows.latest_per_key`)
and merges them into the table in **one** Delta commit (delta-rs ``MERGE``): an insert or an update for a value, a
delete for a tombstone, each only where its offset is newer than the row's (so applying a record twice changes
nothing), with the new offsets as the commit's app-transaction ids. Its cost follows the new records and the
table files their keys fall in, not the length of the log; it reads the log, never cleans it, so a topic that is
never cleaned has a fresh state table too. A cleaned log gives the same rows: the cleaner removes a record only when
a newer one of its key exists, and that one is read instead.

The commit is made with ``max_commit_retries=0``: any commit since the version the merge read (another refresh,
another engine's OPTIMIZE, whose removes delta-rs would not refuse) makes it fail, and the refresh starts again from
the newer version. Where the log start has moved past rows of the table (``DeleteRecords``, retention), those rows
go in the same merge; where the topic was deleted and made again, or its encodings changed, the table is rebuilt
from the log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from deltalog.errors import CommitConflictError, OffsetOutOfRangeError
from deltalog.log import transactions
from deltalog.log.record import OFFSET
from deltalog.state import table as state_table
from deltalog.state.rows import DELETED, latest_per_key, merge_keys, state_rows, state_schema

if TYPE_CHECKING:
    from deltalog.config import TopicConfig
    from deltalog.log.log_manager import LogManager
    from deltalog.log.partition_log import PartitionLog

#: How many times a refresh starts again after another commit won the race.
ATTEMPTS = 5
OPERATION = "state_refresh"
REBUILD = "state_rebuild"


@dataclass(frozen=True)
class PartitionRead:
    """What a refresh read of one partition: ``records`` (the latest per key) in ``[from_offset, to_offset)``."""

    partition: int
    from_offset: int
    to_offset: int
    log_start_offset: int
    log_version: int
    records_read: int
    records: pa.Table


@dataclass(frozen=True)
class RefreshResult:
    """One refresh of one topic's state table: the version it made (None: nothing new), and its figures."""

    topic: str
    version: int | None
    table_version: int
    offsets: Mapping[int, int]
    records_read: int
    rows_merged: int
    rebuilt: bool = False
    merge_metrics: Mapping[str, object] = field(default_factory=dict)
    duration_ms: int = 0
    #: the version the refresh's commit was made on (None: no commit, or a rebuild)
    previous_version: int | None = None
    #: how the table was proven equal to the log after the refresh: "" (not checked), "incremental" (from the
    #: rows its commit changed, :mod:`deltalog.state.increment`), "full" (against the whole log), "unchanged"
    checked: str = ""

    @property
    def committed(self) -> bool:
        return self.version is not None

    def as_dict(self) -> dict[str, object]:
        return {"topic": self.topic, "version": self.version, "table_version": self.table_version,
                "offsets": {str(p): o for p, o in sorted(self.offsets.items())}, "records_read": self.records_read,
                "rows_merged": self.rows_merged, "rebuilt": self.rebuilt, "duration_ms": self.duration_ms,
                "previous_version": self.previous_version, "checked": self.checked,
                **{f"merge_{k}": v for k, v in self.merge_metrics.items()}}


def read_partition(log: PartitionLog, applied: int) -> PartitionRead:
    """The records of ``log`` a read_committed consumer at ``applied`` fetches, up to the last stable offset,
    reduced to the latest of each key (from the log start when ``applied`` is below it)."""
    for attempt in range(3):
        head = log.head()
        start = max(applied, head.log_start_offset)
        try:
            snap, index, rows = log.read_rows(start, None, transactions.READ_COMMITTED)
        except OffsetOutOfRangeError:  # DeleteRecords moved the log start meanwhile
            if attempt == 2:
                raise
            continue
        start = max(start, snap.log_start_offset)
        bound = max(start, index.last_stable_offset)
        visible = transactions.visible(rows, index.aborted_between(start, bound))
        return PartitionRead(log.partition, start, bound, snap.log_start_offset, snap.version, visible.num_rows,
                             latest_per_key(visible))
    raise AssertionError("unreachable")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _commit_properties(reads: list[PartitionRead], operation: str, records_read: int) -> CommitProperties:
    txns = [Transaction(state_table.applied_app_id(r.partition), r.to_offset) for r in reads]
    txns += [Transaction(state_table.start_app_id(r.partition), r.log_start_offset) for r in reads]
    meta = {state_table.META_OPERATION: operation,
            state_table.META_OFFSETS: json.dumps({str(r.partition): r.to_offset for r in reads}),
            state_table.META_LOG_VERSIONS: json.dumps({str(r.partition): r.log_version for r in reads}),
            "deltalog.state.records_read": str(records_read)}
    return CommitProperties(app_transactions=txns, custom_metadata=meta, max_commit_retries=0)


def merge(dt: DeltaTable, config: TopicConfig, source: pa.Table, reads: list[PartitionRead],
          trimmed: Mapping[int, int], records_read: int) -> dict[str, object]:
    """``source`` (state rows with :data:`DELETED`) merged into ``dt`` in one commit carrying the new offsets;
    rows of a partition in ``trimmed`` below its new log start are deleted by the same commit."""
    columns = [c for c in source.column_names if c != DELETED]
    p, k = (_quoted(c) for c in merge_keys(config))
    off, gone = _quoted(OFFSET), _quoted(DELETED)
    builder = dt.merge(source, f"t.{p} = s.{p} AND t.{k} = s.{k}", source_alias="s", target_alias="t",
                       writer_properties=state_table.writer_properties(config),
                       commit_properties=_commit_properties(reads, OPERATION, records_read))
    updates = {_quoted(c): f"s.{_quoted(c)}" for c in columns}
    builder = (builder.when_matched_update(updates, predicate=f"s.{off} > t.{off} AND NOT s.{gone}")
               .when_matched_delete(predicate=f"s.{off} > t.{off} AND s.{gone}")
               .when_not_matched_insert(updates, predicate=f"NOT s.{gone}"))
    if trimmed:
        below = " OR ".join(f"(t.{p} = {part} AND t.{off} < {start})" for part, start in sorted(trimmed.items()))
        builder = builder.when_not_matched_by_source_delete(predicate=below)
    return dict(builder.execute())


def _append(dt: DeltaTable, config: TopicConfig, source: pa.Table, reads: list[PartitionRead], records_read: int
            ) -> dict[str, object]:
    """The first rows of an empty table (its first refresh): a plain append, which a MERGE into no rows would
    only slow down, in one commit with the offsets."""
    rows = source.filter(pc.invert(source.column(DELETED))).drop_columns([DELETED])
    write_deltalake(dt, rows, mode="append", writer_properties=state_table.writer_properties(config),
                    commit_properties=_commit_properties(reads, OPERATION, records_read))
    return {"num_source_rows": source.num_rows, "num_target_rows_inserted": rows.num_rows}


def _mark_offsets(dt: DeltaTable, reads: list[PartitionRead], records_read: int) -> None:
    """A commit of the new offsets alone: records were read (markers, aborted or keyless records), none changes
    a row."""
    dt.create_write_transaction([], mode="append", schema=dt.schema(), partition_by=None,
                                commit_properties=_commit_properties(reads, OPERATION, records_read))


#: Told ``(steps done, steps in all, what runs now)``: a refresh's steps are its partitions' reads and its commit.
Progress = Callable[[int, int, str], None]


def _read_all(logs: LogManager, topic: str, partitions: list[int], applied: Mapping[int, int],
              progress: Progress | None) -> list[PartitionRead]:
    """Each partition's records past ``applied``, telling ``progress`` before each read and before the commit."""
    reads = []
    for i, p in enumerate(partitions):
        if progress is not None:
            progress(i, len(partitions) + 1, f"reading {topic}-{p}")
        reads.append(read_partition(logs.log(topic, p), applied.get(p, 0)))
    if progress is not None:
        progress(len(partitions), len(partitions) + 1, f"merging into the state table of {topic}")
    return reads


def rebuild(logs: LogManager, topic: str, config: TopicConfig, table: state_table.StateTable,
            dt: DeltaTable | None = None, progress: Progress | None = None) -> RefreshResult:
    """The whole table written again from the log (one overwrite commit): for a new table of a topic made again
    under the same name, or after its encodings changed. Also the baseline the benchmark compares a refresh with.

    The overwrite is committed on top of ``dt`` (the version the rebuild was decided on; opened now when None)
    with no automatic retry: a commit of another writer since then (another refresh, another engine's OPTIMIZE or
    write) wins, nothing of the rebuild lands, and :class:`~deltalog.errors.CommitConflictError` says so."""
    began = time.monotonic()
    dt = dt if dt is not None else table.open()
    reads = _read_all(logs, topic, logs.partitions(topic), {}, progress)
    source = _source(reads, config)
    rows = source.filter(pc.invert(source.column(DELETED))).drop_columns([DELETED])
    records_read = sum(r.records_read for r in reads)
    topic_id = logs.topic_id(topic)
    props = {**state_table.TABLE_PROPERTIES, state_table.PROP_TOPIC: topic,
             state_table.PROP_TOPIC_ID: topic_id or "", state_table.PROP_SHAPE: state_table.shape_of(config)}
    try:
        write_deltalake(dt if dt is not None else table.uri, rows, mode="overwrite", schema_mode="overwrite",
                        storage_options=None if dt is not None else table.storage.delta_options,
                        writer_properties=state_table.writer_properties(config),
                        commit_properties=_commit_properties(reads, REBUILD, records_read))
        dt = table.open()
        assert dt is not None
        if dt.metadata().configuration.get(state_table.PROP_SHAPE) != props[state_table.PROP_SHAPE] or \
                dt.metadata().configuration.get(state_table.PROP_TOPIC_ID) != props[state_table.PROP_TOPIC_ID]:
            dt.alter.set_table_properties(props, raise_if_not_exists=False,
                                          commit_properties=CommitProperties(max_commit_retries=0))
    except (CommitFailedError, DeltaError) as e:
        if not _is_conflict(e):
            raise
        raise CommitConflictError(
            f"the rebuild of the state table of topic {topic!r} ({table.uri}) lost a race: another writer committed "
            f"to the table while the rebuild read the log, so the rebuild committed nothing ({e}). Run "
            f"'deltalog state refresh {topic} --full' again; if another deltalog job was refreshing it, let it "
            "finish first, and stop any other engine writing to the table (only deltalog writes its rows; "
            "OPTIMIZE between refreshes is fine)") from None
    return RefreshResult(topic, dt.version(), dt.version(), {r.partition: r.to_offset for r in reads}, records_read,
                         rows.num_rows, rebuilt=True, duration_ms=int((time.monotonic() - began) * 1000))


def _source(reads: list[PartitionRead], config: TopicConfig) -> pa.Table:
    parts = [state_rows(r.records, r.partition, config) for r in reads if r.records.num_rows]
    if not parts:
        schema = state_schema(config).append(pa.field(DELETED, pa.bool_(), nullable=False))
        return schema.empty_table()
    return pa.concat_tables(parts)


def refresh(logs: LogManager, topic: str, *, full: bool = False, progress: Progress | None = None) -> RefreshResult:
    """Bring the state table of ``topic`` up to each partition's last stable offset (creating it on first use);
    ``full``: rebuild it from the log instead. ``progress``: told how far it is (a command's progress bar)."""
    began = time.monotonic()
    config = logs.topic_config(topic)
    topic_id = logs.topic_id(topic)
    table = state_table.StateTable(logs.storage, topic)
    last_error: Exception | None = None
    for _ in range(ATTEMPTS):
        dt = table.open()
        if dt is None:
            dt = table.create(config, topic_id)
            if not state_table.matches(dt, config, topic_id):
                continue  # another topic's table won the create race: look again
        if full or not state_table.matches(dt, config, topic_id):
            return rebuild(logs, topic, config, table, dt, progress)
        partitions = logs.partitions(topic)
        applied = state_table.applied_offsets(dt, partitions)
        starts = state_table.applied_starts(dt, partitions)
        reads = _read_all(logs, topic, partitions, applied, progress)
        records_read = sum(r.records_read for r in reads)
        changed = [r for r in reads if r.to_offset != applied[r.partition] or r.log_start_offset != starts[r.partition]]
        offsets = {r.partition: r.to_offset for r in reads}
        if not changed:
            return RefreshResult(topic, None, dt.version(), offsets, 0, 0,
                                 duration_ms=int((time.monotonic() - began) * 1000))
        base = dt.version()
        trimmed = {r.partition: r.log_start_offset for r in reads
                   if r.log_start_offset > starts[r.partition] and applied[r.partition] > starts[r.partition]}
        source = _source(reads, config)
        try:
            if source.num_rows and not trimmed and not dt.file_uris():
                metrics = _append(dt, config, source, reads, records_read)  # an empty table: nothing to match
            elif source.num_rows or trimmed:
                metrics = merge(dt, config, source, reads, trimmed, records_read)
            else:
                metrics = {}
                _mark_offsets(dt, reads, records_read)
        except (CommitFailedError, DeltaError) as e:
            if not _is_conflict(e):
                raise
            last_error = e
            continue
        version = table.open().version()  # type: ignore[union-attr]
        return RefreshResult(topic, version, version, offsets, records_read, source.num_rows,
                             merge_metrics={k: v for k, v in metrics.items() if k.startswith("num_")},
                             duration_ms=int((time.monotonic() - began) * 1000), previous_version=base)
    raise CommitConflictError(f"the state table of {topic!r} was changed by other commits during each of "
                              f"{ATTEMPTS} refresh attempts (last: {last_error}); run the refresh again")


def _is_conflict(e: Exception) -> bool:
    if isinstance(e, CommitFailedError):
        return True
    text = str(e).lower()
    return "concurrent" in text or "conflict" in text or "version already exists" in text
