"""The partition log: one Delta table of records with their offsets (Kafka's UnifiedLog).

:class:`PartitionLog` appends, rolls and reads one partition. Every decision is taken from a
:class:`LogSnapshot`, an immutable view of one Delta version: the log positions kept in the Delta log
(see :mod:`deltalog.log.delta`), the topic config kept in the table properties, and the segments derived from
the file stats. A snapshot is cheap (no data read), so policies such as the cleaner's range planning are
pure functions of a snapshot and a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from deltalog.config import TopicConfig
from deltalog.errors import (
    CommitConflictError,
    CorruptLogError,
    OffsetOutOfRangeError,
    StorageFullError,
    VersionNotAvailableError,
)
from deltalog.log import (
    app_txns,
    arrow_records,
    damage,
    delta,
    delta_retention,
    duplicates,
    foreign_commits,
    layout,
    row_groups,
    table_upgrade,
    transactions,
)
from deltalog.log.delta import DataFile
from deltalog.log.producer_state import ProducerBatch, ProducerStateEntry, check_batch
from deltalog.log.record import (
    KEY_HASH_HI,
    KEY_HASH_LO,
    OFFSET,
    RECORD_SCHEMA,
    SEGMENT,
    TABLE_SCHEMA,
    Record,
    conform,
    table_to_records,
    written_by_deltalog,
)
from deltalog.log.segment import Segment, build_segments
from deltalog.storage import Storage, join

#: How many times an append retries after losing the race for the log end offset to another producer.
APPEND_MAX_ATTEMPTS = 200


@dataclass(frozen=True)
class LogSnapshot:
    """Everything about a partition at one Delta version that planning needs, without reading data."""

    topic: str
    partition: int
    version: int
    config: TopicConfig
    topic_id: str | None
    log_start_offset: int
    log_end_offset: int
    active_segment_base: int
    active_segment_opened_ms: int | None
    cleaner_checkpoint: int | None
    files: tuple[DataFile, ...]
    segments: tuple[Segment, ...] = field(repr=False)

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def first_dirty_offset(self) -> int:
        """The cleaner checkpoint, reset to the log start when it lies outside [log start, log end]."""
        cp = self.cleaner_checkpoint
        if cp is None or cp < self.log_start_offset or cp > self.log_end_offset:
            return self.log_start_offset
        return cp

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def num_records(self) -> int:
        return sum(f.num_records for f in self.files)

    def files_from(self, offset: int) -> list[DataFile]:
        """Files that may hold offsets >= ``offset``, in offset order (stats-based skipping)."""
        return [f for f in self.files if f.max_offset >= offset]


@dataclass(frozen=True)
class LogHead:
    """What an append needs: the log end and the active segment, from the Delta log's app ids alone."""

    config: TopicConfig
    log_start_offset: int
    log_end_offset: int
    active_segment_base: int
    active_segment_opened_ms: int | None
    active_segment_bytes: int

    @property
    def active_segment_empty(self) -> bool:
        return self.log_end_offset == self.active_segment_base

    def segment_for_append(self, now_ms: int) -> tuple[int, int | None, bool]:
        """Kafka's ``maybeRoll``: the segment a new batch goes into, its opened time if that changes, and
        whether the active segment rolled.

        A non-empty active segment rolls when it has reached ``segment.bytes`` or has been open longer
        than ``segment.ms`` (strictly longer, as Kafka's ``LogSegment.shouldRoll``). An empty active
        segment never rolls; the batch that first fills it stamps its opened time.
        """
        if self.active_segment_empty:
            return self.active_segment_base, now_ms, False
        opened = self.active_segment_opened_ms
        full = self.active_segment_bytes >= self.config.segment_bytes
        old = opened is not None and now_ms - opened > self.config.segment_ms
        if full or old:
            return self.log_end_offset, now_ms, True
        return self.active_segment_base, None, False


class PartitionLog:
    """Appends to, rolls and reads one partition table: the table at ``uri``, a location of ``storage``."""

    def __init__(self, storage: Storage, uri: str, topic: str, partition: int) -> None:
        storage.key(uri)  # refuses a location outside the store
        self.storage = storage
        self.uri = uri
        self.topic = topic
        self.partition = partition
        self._dt: DeltaTable | None = None
        self._latest: LogSnapshot | None = None  # the last latest snapshot built, reused while the version holds
        self._cycle: object | None = None  # the walk whose first look refreshed ``_latest`` (see cycle_snapshot)
        self._next_head: tuple[int, LogHead] | None = None  # (version, head) this process's last append left
        self._head: tuple[int, LogHead] | None = None  # (version, head) last read back, reused while the version holds
        self._watch = foreign_commits.ForeignCommitWatch()  # other engines' commits, checked up to a version
        self._key_hash_columns = False  # whether the table's schema is known to have the key-hash columns
        self._seed: LogSnapshot | None = None  # a snapshot another process checkpointed (see seed), while unopened

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition}, {self.uri})"

    # -- creation -----------------------------------------------------------------------------------

    @classmethod
    def create(cls, storage: Storage, uri: str, topic: str, partition: int, config: TopicConfig, *,
               topic_id: str | None = None) -> PartitionLog:
        props = {delta.PROP_TOPIC: topic, delta.PROP_PARTITION: str(partition), delta.PROP_FORMAT: delta.FORMAT_VERSION}
        if topic_id is not None:
            props[delta.PROP_TOPIC_ID] = topic_id
        props.update(config_to_table_properties(config))
        props.update(delta.ENGINE_PROPERTIES)
        delta.create_table(
            storage,
            uri,
            props,
            {delta.TXN_LOG_END_OFFSET: 0, delta.TXN_LOG_START_OFFSET: 0, delta.TXN_ACTIVE_SEGMENT: 0},
            description=delta.table_description(topic, partition),
        )
        return cls(storage, uri, topic, partition)

    # -- snapshots ------------------------------------------------------------------------------------

    def table(self, *, refresh: bool = True) -> DeltaTable:
        """The Delta table handle, brought up to the latest version unless ``refresh`` is False.

        A table this process read before is brought up to date only when it has moved: one look for the next
        commit's file (:meth:`has_commit_after`) instead of a listing of ``_delta_log`` and a read of
        ``_last_checkpoint``, so the snapshot and head of an unchanged partition are answered from what was
        read (Kafka's ``UnifiedLog`` holds its log end in memory). A log that moved goes through delta-rs and
        the check of other engines' commits as before, and a partition with another engine's commit pending is
        checked again each time."""
        if self._dt is None:
            self._dt = delta.open_table(self.storage, self.uri)
            self._check_foreign_commits(self._dt)
            self._upgrade(self._dt)
        elif refresh and not self._unmoved(self._dt):
            with damage.reading_log(self.storage, self.uri):
                self._dt.update_incremental()
            self._check_foreign_commits(self._dt)
        return self._dt

    def _unmoved(self, dt: DeltaTable) -> bool:
        """Whether ``dt`` (this process's handle) is still the latest version, checked and free of other engines'
        commits: nothing to refresh."""
        version = dt.version()
        watch = self._watch
        return not watch.pending and watch.checked_version == version and not self.has_commit_after(version)

    @property
    def opened(self) -> bool:
        """Whether this process has read the table yet (its first read replays the Delta log)."""
        return self._dt is not None

    @property
    def unread(self) -> bool:
        """Whether this process knows nothing of the partition yet: not read, not seeded (:meth:`seed`)."""
        return self._dt is None and self._latest is None and self._seed is None

    def has_commit_after(self, version: int) -> bool:
        """Whether the table has a commit after ``version``: one look for the next commit's file (every Delta commit
        writes ``_delta_log/<version + 1>.json``), far cheaper than bringing the table up to date. A Fetch waiting
        for records asks it (:mod:`deltalog.server.socket_server`)."""
        return self.storage.exists(join(self.uri, damage.DELTA_LOG_DIR, f"{version + 1:020d}.json"))

    def _upgrade(self, dt: DeltaTable) -> None:
        """Bring a table an earlier deltalog made up to this version's table properties and description, once, on
        first open (:mod:`deltalog.log.table_upgrade`: free when current, never failing a read)."""
        meta = dt.metadata()
        props = meta.configuration
        if not table_upgrade.is_partition(props) or table_upgrade.is_current(props, meta.description, self.topic,
                                                                               self.partition):
            return  # current; or not a partition at all, which head_of says
        wanted = config_to_table_properties(config_from_table_properties(props))
        if table_upgrade.bring_up_to_date(dt, self.uri, self.topic, self.partition, wanted):
            self._next_head = None

    def foreign_commits(self) -> tuple[foreign_commits.ForeignCommit, ...]:
        """Other engines' commits that changed this partition's records and still stand (empty: none), without
        raising: what ``deltalog doctor`` reports. See :mod:`deltalog.log.foreign_commits`."""
        dt = self._dt if self._dt is not None else delta.open_table(self.storage, self.uri)
        if self._dt is None:
            self._dt = dt
        else:
            with damage.reading_log(self.storage, self.uri):
                dt.update_incremental()
        with damage.reading_log(self.storage, self.uri):
            return self._watch.check(dt)

    def _check_foreign_commits(self, dt: DeltaTable) -> None:
        """Raise :class:`~deltalog.errors.ForeignCommitError` when another engine changed records (DELETE, UPDATE,
        MERGE, a plain append...): every operation on the partition refreshes the table through here, so none
        reads or writes on top of such a change. Only the commits after the last version checked are read; the
        one this process's own last append made is known without reading it."""
        watch = self._watch
        version = dt.version()
        known = self._next_head
        if (not watch.pending and known is not None and known[0] == version
                and watch.checked_version == version - 1):
            watch.checked_version = version
            return
        with damage.reading_log(self.storage, self.uri):
            pending = watch.check(dt)
        if pending:
            raise foreign_commits.error_for(f"{self.topic}-{self.partition}", self.uri, pending)

    def own_commit(self, version: int) -> None:
        """A commit of this process's own made ``version`` through another handle (a pass's, pinned at its plan): the
        next refresh that finds it need not read it to tell whether another engine made it."""
        watch = self._watch
        if not watch.pending and watch.checked_version == version - 1:
            watch.checked_version = version

    def table_at(self, version: int) -> DeltaTable:
        """A separate handle pinned at ``version``: commits made through it are checked for conflicts
        against everything committed after ``version`` (the snapshot a plan was made from)."""
        dt = delta.open_table(self.storage, self.uri)
        with damage.reading_log(self.storage, self.uri):
            dt.load_as_version(version)
        return dt

    def snapshot(self, version: int | None = None) -> LogSnapshot:
        """The latest snapshot, or the one at ``version`` (Delta time travel).

        A snapshot is immutable for its version, so the latest one is rebuilt only when the table has
        moved on: ranking every partition before each cleaning pass (Kafka's ``grabFilthiestCompactedLog``)
        then costs a listing of each ``_delta_log``, not a reload of its files and log positions.
        """
        if version is not None:
            with damage.reading_log(self.storage, self.uri):
                return snapshot_of(self.table_at(version), self.topic, self.partition, self.storage, self.uri)
        seed = self._seed
        if seed is not None and self._dt is None:
            if not self.has_commit_after(seed.version):
                self._latest = seed
                return seed
            self._seed = None  # the log moved on (any engine's commit): read it
        dt = self.table()
        cached = self._latest
        if cached is not None and cached.version == dt.version():
            return cached
        try:
            with damage.reading_log(self.storage, self.uri):
                self._latest = snapshot_of(dt, self.topic, self.partition, self.storage, self.uri)
        except CorruptLogError:
            # A handle kept while the log did not move still names the commit files it listed; Delta's log
            # retention may have removed them since (a checkpoint holds their actions). List the log again once:
            # a log that is really damaged fails the same way again.
            with damage.reading_log(self.storage, self.uri):
                dt.update_incremental()
                self._latest = snapshot_of(dt, self.topic, self.partition, self.storage, self.uri)
        return self._latest

    def cycle_snapshot(self, cycle: object | None) -> LogSnapshot:
        """The latest snapshot as of ``cycle``'s first look at this partition (None: :meth:`snapshot`, refreshed).

        A cleaner cycle looks at every partition several times (retention's check, the ranking, VACUUM's check,
        the metrics), as Kafka's cleaner reads its in-memory logs; refreshing each time cost a listing of the
        Delta log per look. Within one cycle the partition is refreshed once; a commit this process makes through
        this log (an append, a marker, a roll), a lease released on the partition (the cycle's work on it:
        :meth:`forget_cycle`), or the shared handle moving past the snapshot's version makes the next look refresh.
        A step that changes the partition still plans under its lease from :meth:`snapshot`, never from this."""
        if cycle is None:
            return self.snapshot()
        cached = self._latest
        if (cached is not None and self._cycle is cycle
                and (self._dt is None or self._dt.version() == cached.version)):
            return cached
        self._cycle = None  # a failed refresh leaves no cycle's mark behind
        snap = self.snapshot()
        self._cycle = cycle
        return snap

    def seed(self, snap: LogSnapshot) -> bool:
        """Take ``snap``, a snapshot a cleaner cycle checkpointed (:mod:`deltalog.log.snapshot_checkpoint`), as this
        partition's latest while its Delta log has no commit after ``snap.version``: each look is then one check for
        the next commit's file instead of delta-rs's first read of the log. Only a partition this process has not
        read yet is seeded (what it read is at least as new); the first commit after ``snap.version``, by any
        engine, drops the seed and the partition is read from its Delta log as before. Whether it was taken."""
        if self._dt is not None or self._latest is not None or snap.topic != self.topic \
                or snap.partition != self.partition:
            return False
        self._seed = snap
        return True

    def checkpointable(self) -> LogSnapshot | None:
        """The snapshot a checkpoint may hold for this partition: the latest this process took, when it is the
        one its seed gave or one this process checked free of other engines' standing commits at its very version
        and laid out by deltalog alone (another engine's layout needs its data read); else None."""
        snap = self._latest
        if snap is None:
            return None
        if self._dt is None:
            return snap if snap is self._seed else None
        watch = self._watch
        if watch.pending or watch.checked_version != snap.version or not all(f.deltalog_layout for f in snap.files):
            return None
        return snap

    def forget_cycle(self) -> None:
        """The next :meth:`cycle_snapshot` refreshes: this process worked on the partition under a lease."""
        self._cycle = None

    def topic_id(self) -> str | None:
        """The topic id recorded when the topic was created (None for tables made before ids existed)."""
        return self.table(refresh=False).metadata().configuration.get(delta.PROP_TOPIC_ID)

    # -- appends --------------------------------------------------------------------------------------

    def append(self, records: Sequence[Record] | pa.Table | pa.RecordBatch, now_ms: int, *,
               app_transaction: tuple[str, int] | None = None, producer: ProducerBatch | None = None) -> list[int]:
        """Append records as one batch and return their offsets.

        ``records`` are :class:`Record` s, or a ``pyarrow.Table``/``RecordBatch`` of them (see
        :mod:`deltalog.log.arrow_records`: checked column-wise, no Python object per record).
        Offsets are assigned from the log end offset of the version the commit is based on; a
        concurrent producer that commits first makes this commit fail (both carry the log-end app id),
        and the batch is rewritten with fresh offsets and tried again. Nothing is written before every
        record has passed validation.

        ``producer`` makes the append idempotent (:mod:`deltalog.log.producer_state`): the batch's sequence is
        checked against the producer's state in the version the commit is based on, a retry of the producer's
        last batch returns that batch's original offsets without writing, and the new state is committed with
        the batch.
        """
        arrow = records if arrow_records.is_arrow(records) else arrow_records.from_records(records)
        n = arrow.num_rows
        if not n:
            return []
        validated: list[pa.Table] = []

        def attempt(i: int) -> list[int]:
            head = self.head()  # brings the table to the latest version
            if app_transaction is not None:
                done = delta.txn_version(self.table(refresh=False), app_transaction[0])
                if done is not None and done >= app_transaction[1]:
                    return []
            if producer is not None:
                dt = self.table(refresh=False)
                original, adopt = check_batch(dt.transaction_version, producer, n, self.topic, self.partition)
                if adopt:  # a new epoch re-sent the old epoch's last batch: the state moves on, nothing is written
                    delta.commit(dt, [], txns=producer.txns(original.start, n), operation="producer_state",
                                 metadata={"producer_id": producer.producer_id})
                if original is not None:
                    return list(original)
            if not validated:  # once, on the first attempt: nothing is written before every record passed
                validated.append(arrow_records.validated(arrow, head.config, self.topic, now_ms))
            base, opened, rolled = head.segment_for_append(now_ms)
            leo = head.log_end_offset
            offsets = range(leo, leo + n)
            rows = arrow_records.with_log_columns(validated[0], offsets, base)
            self._ensure_key_hash_columns()
            if producer is not None and producer.in_transaction:
                self._ensure_producer_columns()
                rows = transactions.with_producer(rows, producer.producer_id, producer.producer_epoch)
            add = delta.write_data_file(self.storage, self.uri, rows, now_ms)
            txns, active_bytes = _positions_after(head, add, n, base, opened, rolled)
            if app_transaction is not None:
                txns[app_transaction[0]] = app_transaction[1]
            if producer is not None:
                txns.update(producer.txns(leo, n))
            read_version = self.table(refresh=False).version()
            try:
                delta.commit(
                    self.table(refresh=False), [add], txns=txns, operation="append",
                    metadata={"records": n, "offset": leo, "rolled": rolled},
                )
            except (CommitConflictError, StorageFullError):  # proven not landed: the file is nobody's
                delta.delete_quietly(self.storage, self.uri, [add.path])
                raise
            # If the next refresh finds exactly one new version, it is this commit: its head is this.
            self._cycle = None
            self._next_head = (read_version + 1, replace(
                head, log_end_offset=leo + n, active_segment_base=base, active_segment_bytes=active_bytes,
                active_segment_opened_ms=opened if opened is not None else head.active_segment_opened_ms))
            return list(offsets)

        return delta.retry_on_conflict(f"append to {self.topic}-{self.partition} (the race for the log end offset)",
                                       APPEND_MAX_ATTEMPTS, attempt)

    def _ensure_producer_columns(self) -> None:
        """Give a table made before transactions existed the producer columns (one metadata commit, once), so
        that its Delta stats carry them: the transaction index is read from those stats."""
        dt = self.table(refresh=False)
        if not delta.has_producer_columns(dt):
            delta.add_producer_columns(dt)  # a lost race raises CommitConflictError: the append plans again
            self._next_head = None

    def _ensure_key_hash_columns(self) -> None:
        """Give a table made before the key-hash columns existed those columns (one metadata commit of deltalog's
        own, once), so that its schema declares what every file written from now on holds (the records' key
        hashes, :mod:`deltalog.log.key_hash`) and other engines' OPTIMIZE keeps them. Asked once per process."""
        if self._key_hash_columns:
            return
        dt = self.table(refresh=False)
        if not delta.has_key_hash_columns(dt):
            delta.add_key_hash_columns(dt)  # a lost race raises CommitConflictError: the append plans again
            self._next_head = None
        self._key_hash_columns = True

    def txn_index(self, snap: LogSnapshot | None = None) -> transactions.TxnIndex:
        """The partition's ongoing and aborted transactions and its last stable offset (see
        :mod:`deltalog.log.transactions`), from the snapshot's file stats."""
        snap = snap if snap is not None else self.snapshot()
        return transactions.txn_index(self.storage, self.uri, snap.files, snap.first_dirty_offset,
                                      snap.log_end_offset)

    def write_marker(self, producer_id: int, producer_epoch: int, control: str, now_ms: int) -> int | None:
        """End the producer's ongoing transaction in this partition with a COMMIT or ABORT marker (Kafka's
        WriteTxnMarkers) and return the marker's offset; None when the producer has no ongoing transaction here
        (its marker is already written, or it never wrote here), so completing a transaction twice is safe.

        A marker written at a newer epoch than the producer's state here (a transaction aborted by a new
        ``init_transactions`` or by its timeout) moves the state to that epoch: a zombie with the old epoch
        is fenced by this partition from then on."""
        def attempt(i: int) -> int | None:
            head = self.head()
            dt = self.table(refresh=False)
            snap = snapshot_of(dt, self.topic, self.partition, self.storage, self.uri)
            first = self.txn_index(snap).ongoing.get(producer_id)
            if first is None:
                return None
            self._ensure_producer_columns()
            self._ensure_key_hash_columns()
            dt = self.table(refresh=False)
            base, opened, rolled = head.segment_for_append(now_ms)
            leo = head.log_end_offset
            add = delta.write_data_file(self.storage, self.uri, transactions.marker_row(
                leo, base, producer_id, producer_epoch, control, first, now_ms), now_ms)
            txns, _ = _positions_after(head, add, 1, base, opened, rolled)
            entry = ProducerStateEntry.read(dt.transaction_version, producer_id)
            if entry is None or entry.producer_epoch < producer_epoch:  # a new epoch starts at sequence 0
                txns.update(ProducerBatch(producer_id, producer_epoch, 0).txns(leo, 0))
            try:
                delta.commit(dt, [add], txns=txns, operation="txn_marker",
                             metadata={"control": control, "producer_id": producer_id, "offset": leo})
            except (CommitConflictError, StorageFullError):  # proven not landed: the file is nobody's
                delta.delete_quietly(self.storage, self.uri, [add.path])
                raise
            self._next_head = None
            self._cycle = None
            return leo

        return delta.retry_on_conflict(f"{control} marker in {self.topic}-{self.partition}", APPEND_MAX_ATTEMPTS,
                                       attempt)

    def appended_head(self) -> LogHead | None:
        """The head this process's last append left (None when unknown: nothing appended yet, or a later change
        of this handle's own), without bringing the table up to date. A Produce answer's log start offset is the
        one its append saw, as Kafka's ``LogAppendInfo`` carries it; reading the table again for it would cost a
        Delta log listing per commit."""
        known = self._next_head
        return None if known is None else known[1]

    def head(self) -> LogHead:
        """The head of the log at the latest version, read from the Delta log alone (O(1) in files).

        When the latest version is the one this process's last append committed (the version it read plus
        one: no other commit came between or after), the head that append left is known without reading
        the five log positions back (~0.5 ms each through delta-rs, a sixth of an append of 10,000 records).
        """
        dt = self.table()
        version = dt.version()
        for known in (self._next_head, self._head):
            if known is not None and known[0] == version:
                return known[1]
        try:
            with damage.reading_log(self.storage, self.uri):
                head = head_of(dt, self.topic, self.storage, self.uri)
        except CorruptLogError:
            # As :meth:`snapshot`: a handle kept while the log did not move names the commit files it listed, which
            # Delta's log retention may have removed since (delta-rs is asked only when app_txns cannot answer from
            # the commits). List the log again once: a log that is really damaged fails the same way again.
            with damage.reading_log(self.storage, self.uri):
                dt.update_incremental()
            if dt.version() != version:
                self._check_foreign_commits(dt)
            version = dt.version()
            with damage.reading_log(self.storage, self.uri):
                head = head_of(dt, self.topic, self.storage, self.uri)
        self._head = (version, head)
        return head

    def roll(self, now_ms: int) -> int:
        """Close the active segment now; the next append opens a new one at the log end offset.

        Rolling an empty active segment does nothing. Returns the active segment's base offset.
        """
        def attempt(i: int) -> int:
            head = self.head()
            if head.active_segment_empty:
                return head.active_segment_base
            leo = head.log_end_offset
            delta.commit(
                self.table(refresh=False), [],
                txns={delta.TXN_LOG_END_OFFSET: leo, delta.TXN_ACTIVE_SEGMENT: leo, delta.TXN_ACTIVE_SEGMENT_BYTES: 0},
                operation="roll", metadata={"base_offset": leo},
            )
            self._cycle = None
            return leo

        return delta.retry_on_conflict(f"roll of {self.topic}-{self.partition}", APPEND_MAX_ATTEMPTS, attempt)

    # -- other engines' layouts -----------------------------------------------------------------------

    def relayout(self, now_ms: int, snap: LogSnapshot | None = None) -> int:
        """Rewrite the files another engine laid out (OPTIMIZE bin-packing or Z-order: several segments in one
        file, rows in any order) back into deltalog's layout, one file per segment in offset order, and return how
        many files were rewritten (0: none to do, and nothing is committed).

        One Delta commit removes those files and adds the new ones. The adds carry ``dataChange`` false, as
        OPTIMIZE's own do (no record changes); the removes carry it true, as a cleaning pass's do, because delta-rs
        refuses a concurrent commit that removes the same file only when this commit's remove has ``dataChange``
        true: another engine's OPTIMIZE planned on the files this rewrite replaces must fail, not land beside it
        with every record of them a second time. The cleaner and retention run it first, under the partition's
        lease, because they replace or drop whole segments' files: a merged file also holding records of a segment
        they keep must not go with them. A concurrent append is rebased over; another engine's OPTIMIZE of the same
        files that commits first makes the rewrite plan again (:func:`deltalog.log.delta.commit` checks the removes).
        ``snap``: the latest snapshot, when the caller just took it (an attempt after a lost race reads a fresh one).
        """
        given = snap

        def attempt(i: int) -> int:
            snap = given if i == 0 and given is not None else self.snapshot()
            foreign = layout.foreign_layout(snap.files)
            if not foreign:
                return 0
            adds = []
            try:
                for f in foreign:
                    rows = self.storage.parquet_file(join(self.uri, f.path)).read()
                    if not written_by_deltalog(f.path):  # that engine's copy of the key hashes: recomputed
                        rows = rows.drop_columns([c for c in (KEY_HASH_HI, KEY_HASH_LO) if c in rows.column_names])
                    rows = conform(rows, TABLE_SCHEMA).sort_by(OFFSET)
                    for seg in sorted(set(rows.column(SEGMENT).to_pylist())):
                        part = rows.filter(pc.equal(rows.column(SEGMENT), seg))
                        add = delta.write_data_file(self.storage, self.uri, part, now_ms)
                        adds.append(AddAction(add.path, add.size, add.partition_values, add.modification_time,
                                              False, add.stats))
                removes = [delta.remove_action(f, now_ms) for f in foreign]
                delta.commit(self.table_at(snap.version), [*removes, *adds], txns={}, operation="relayout",
                             metadata={"files_rewritten": len(foreign), "files_written": len(adds)})
            except (CommitConflictError, StorageFullError):  # proven not landed: the files are nobody's
                delta.delete_quietly(self.storage, self.uri, [a.path for a in adds])
                raise
            return len(foreign)

        return delta.retry_on_conflict(f"relayout of {self.topic}-{self.partition}", APPEND_MAX_ATTEMPTS, attempt)

    def duplicated_offsets(self, snap: LogSnapshot | None = None) -> duplicates.DuplicatedOffsets | None:
        """The offsets the latest version (or ``snap``'s) holds more than once at or above its log start, or None
        (see :mod:`deltalog.log.duplicates`: file stats first, then the offsets of overlapping files only)."""
        snap = snap or self.snapshot()
        return duplicates.find(self.storage, self.uri, self.topic, self.partition, snap.version, snap.files,
                               snap.log_start_offset)

    def repair_duplicates(self, now_ms: int, snap: LogSnapshot | None = None) -> int:
        """Keep one copy of each offset the table holds twice (:mod:`deltalog.log.duplicates`) and return how many
        rows were dropped (0: nothing held twice, and nothing is committed).

        The files holding them are read, the rows sorted by offset with one row kept per offset, and written back
        one file per segment in one commit that removes those files: every offset is then served once, as Kafka
        serves it. The copies are the same record (an offset is assigned once); where a cleaning pass stamped a
        tombstone's delete horizon on one copy, the first in offset order is kept. The cleaner runs it first,
        under the partition's lease; a concurrent commit that removes the same files makes it plan again.
        ``snap``: the latest snapshot, when the caller just took it (an attempt after a lost race reads a fresh one).
        """
        given = snap

        def attempt(i: int) -> int:
            snap = given if i == 0 and given is not None else self.snapshot()
            found = self.duplicated_offsets(snap)
            if found is None:
                return 0
            by_path = {f.path: f for f in snap.files}
            chosen = [by_path[p] for p in dict.fromkeys(found.files)]
            adds = []
            try:
                rows = pa.concat_tables([
                    conform(self.storage.parquet_file(join(self.uri, f.path)).read(), TABLE_SCHEMA)
                    for f in chosen]).sort_by(OFFSET)
                offsets = rows.column(OFFSET).to_numpy()
                keep = np.ones(len(offsets), dtype=bool)
                keep[1:] = offsets[1:] != offsets[:-1]
                kept = rows.filter(pa.array(keep))
                for seg in sorted(set(kept.column(SEGMENT).to_pylist())):
                    part = kept.filter(pc.equal(kept.column(SEGMENT), seg))
                    adds.append(delta.write_data_file(self.storage, self.uri, part, now_ms))
                removes = [delta.remove_action(f, now_ms) for f in chosen]
                delta.commit(self.table_at(snap.version), [*removes, *adds], txns={}, operation="repair_duplicates",
                             metadata={"offsets_repaired": found.count, "rows_dropped": len(rows) - len(kept),
                                       "files_rewritten": len(chosen), "files_written": len(adds)})
            except (CommitConflictError, StorageFullError):  # proven not landed: the files are nobody's
                delta.delete_quietly(self.storage, self.uri, [a.path for a in adds])
                raise
            return len(rows) - len(kept)

        return delta.retry_on_conflict(f"repair of the offsets {self.topic}-{self.partition} holds twice",
                                       APPEND_MAX_ATTEMPTS, attempt)

    # -- reads ----------------------------------------------------------------------------------------

    def read(self, from_offset: int, max_records: int | None = None, *,
             isolation_level: str = transactions.READ_UNCOMMITTED, at: LogSnapshot | None = None) -> list[Record]:
        """Records with offset >= ``from_offset`` in offset order (Kafka's fetch).

        An offset that compaction removed is a valid position: the read continues at the next record
        that exists (Kafka's compaction guarantee: the fetch returns the next offset that exists). Offsets below the log start, or past the log end, are out of range.
        ``read_committed`` stops below the last stable offset and leaves out aborted transactions' records;
        ``read_uncommitted`` (Kafka's consumer default) reads to the log end. Markers are never returned.
        ``at``: read that snapshot (Delta time travel, see :mod:`deltalog.log.time_travel`) instead of the latest.
        """
        return table_to_records(self.read_table(from_offset, max_records, isolation_level=isolation_level, at=at))

    def read_table(self, from_offset: int, max_records: int | None = None, *,
                   isolation_level: str = transactions.READ_UNCOMMITTED, at: LogSnapshot | None = None) -> pa.Table:
        """Like :meth:`read`, as an Arrow table in the partition schema."""
        level = transactions.isolation_level(isolation_level, transactions.READ_UNCOMMITTED)
        snap, index, rows = self.read_rows(from_offset, max_records, level, at=at)
        aborted = index.aborted_between(from_offset, None) if level == transactions.READ_COMMITTED else ()
        return transactions.visible(rows, aborted)

    def read_rows(self, from_offset: int, max_records: int | None, isolation_level: str, *,
                  at: LogSnapshot | None = None) -> tuple[LogSnapshot, transactions.TxnIndex, pa.Table]:
        """The snapshot read, its transaction index and at most ``max_records`` rows from ``from_offset`` up to
        the bound of ``isolation_level`` (the last stable offset or the log end), markers and aborted records
        included: what a fetch pages through (see :func:`deltalog.log.transactions.visible`). ``at``: that
        snapshot (an older version) rather than the latest."""
        for attempt in range(3):
            snap = self.snapshot() if at is None else at
            check_offset_in_range(snap, from_offset)
            start = max(from_offset, snap.log_start_offset)
            index = self.txn_index(snap)
            upper = index.upper_offset(isolation_level)
            files = [f for f in snap.files_from(start) if f.min_offset < upper]
            # Rows below ``start`` in the first file are at most ``start - min_offset`` (offsets are unique).
            skip = max(0, start - files[0].min_offset) if files else 0
            chosen: list[DataFile] = []
            count = 0
            for f in files:
                chosen.append(f)
                count += f.num_records
                if max_records is not None and count >= max_records + skip:
                    break
            bound = None  # with files another engine laid out, rows are complete only up to this offset
            if max_records is not None and any(not f.deltalog_layout for f in files):
                chosen, bound = _complete_up_to(files, chosen)
            try:  # the row groups the range needs, up to max_records rows: a poll costs what it returns
                to = upper if upper < snap.log_end_offset else None
                if bound is not None:
                    to = bound + 1 if to is None else min(to, bound + 1)
                table = read_files(self.storage, self.uri, chosen, start, to, max_records)
            except FileNotFoundError as e:
                if at is not None:  # an older version: VACUUM removed its files (a pinned read has no newer one)
                    raise VersionNotAvailableError(
                        f"version {snap.version} of {self.topic}-{self.partition} can no longer be read: VACUUM "
                        f"removed its data file {e.filename or e} after file.delete.delay.ms (the Delta table "
                        "property delta.deletedFileRetentionDuration)") from None
                if attempt == 2:  # not a VACUUM race: the current version names a file that is gone
                    damage.raise_data_damage(self.storage, self.uri, chosen)
                    raise damage.data_file_error(str(e.filename or e), e) from None
                continue  # a VACUUM removed a file of this snapshot; read a newer one
            except CorruptLogError:  # name the damaged file(s), not only pyarrow's words
                damage.raise_data_damage(self.storage, self.uri, chosen, footers=True)
                raise
            if upper < snap.log_end_offset and table.num_rows:
                table = table.filter(pc.less(table.column(OFFSET), upper))
            if bound is not None and table.num_rows:
                table = table.filter(pc.less_equal(table.column(OFFSET), bound))
            if max_records is not None:
                table = table.slice(0, max_records)
            self._refuse_duplicates(snap, table)
            return snap, index, table
        raise AssertionError("unreachable")

    def _refuse_duplicates(self, snap: LogSnapshot, table: pa.Table) -> None:
        """Raise :class:`CorruptLogError` naming the partition, the version and the offsets when ``table`` (rows in
        offset order, about to be served) holds an offset twice: a fetch never serves one offset twice (see
        :mod:`deltalog.log.duplicates`). One comparison per row served."""
        if table.num_rows < 2:
            return
        offsets = table.column(OFFSET).to_numpy()
        if (offsets[1:] > offsets[:-1]).all():
            return
        found = self.duplicated_offsets(snap)
        if found is None:  # the rows read hold it, though the files' check did not name it: say what was read
            twice = np.unique(offsets[1:][offsets[1:] == offsets[:-1]])
            found = duplicates.DuplicatedOffsets(self.topic, self.partition, snap.version, len(twice), len(twice),
                                                 tuple(int(o) for o in twice[:duplicates.SHOWN]), ())
        raise CorruptLogError(found.message())


def _positions_after(head: LogHead, add: Any, n: int, base: int, opened: int | None, rolled: bool
                     ) -> tuple[dict[str, int], int]:
    """The log positions an append of ``n`` offsets in file ``add`` commits (app ids), and the active segment's
    bytes after it."""
    active_bytes = add.size + (0 if rolled or head.active_segment_empty else head.active_segment_bytes)
    txns = {delta.TXN_LOG_END_OFFSET: head.log_end_offset + n, delta.TXN_ACTIVE_SEGMENT: base,
            delta.TXN_ACTIVE_SEGMENT_BYTES: active_bytes}
    if opened is not None:
        txns[delta.TXN_ACTIVE_SEGMENT_OPENED] = opened
    return txns, active_bytes


def _complete_up_to(files: Sequence[DataFile], chosen: list[DataFile]) -> tuple[list[DataFile], int]:
    """``chosen`` (a prefix of ``files``, in min-offset order) grown by every file that may hold an offset up to
    the highest one chosen, and that offset: below it, the rows read are all the log holds. A file another engine
    merged (OPTIMIZE) may span the offsets of files after it, so the first ``max_records`` of the chosen files alone
    may skip a record a later file holds."""
    bound = max(f.max_offset for f in chosen) if chosen else -1
    grown = list(chosen)
    for f in files[len(chosen):]:
        if f.min_offset > bound:
            break
        grown.append(f)
    return grown, bound


def read_files(storage: Storage, uri: str, files: Sequence[DataFile], from_offset: int,
               to_offset: int | None = None, limit: int | None = None) -> pa.Table:
    """Rows of ``files`` with ``from_offset <= offset < to_offset``, the first ``limit`` of them, in offset order;
    deltalog's own files hold disjoint offset ranges in order, so offset order is file order (a file another
    engine's OPTIMIZE wrote is read row group by row group over the range, then sorted, see
    :mod:`deltalog.log.layout`). With a ``limit``, only the row groups that hold wanted
    rows are read, a batch at a time, until the limit (:mod:`deltalog.log.row_groups`); without one, everything
    from ``from_offset`` on is returned anyway and the files are scanned as one dataset, in parallel (faster than one
    file after the other: docs/performance.md). ``FileNotFoundError``
    when a file is gone (a VACUUM removed it)."""
    if not files:
        return RECORD_SCHEMA.empty_table()
    locations = list(dict.fromkeys(join(uri, f.path) for f in files))
    ordered = all(f.deltalog_layout for f in files)
    try:
        if limit is not None and not ordered:
            # Another engine's file holds its rows in any order: every row group whose offset statistics overlap
            # the range is read (no stopping at the limit), then sorted and cut below.
            table = row_groups.read_ranges(storage, locations, from_offset, to_offset, None)
        elif limit is None:
            import pyarrow.dataset as ds  # here, not at the top: it imports pandas (deltalog sql's start)

            wanted = ds.field(OFFSET) >= from_offset
            if to_offset is not None:
                wanted = wanted & (ds.field(OFFSET) < to_offset)
            table = storage.read_parquet(locations, schema=RECORD_SCHEMA, filter=wanted)
        else:
            table = row_groups.read_ranges(storage, locations, from_offset, to_offset, limit)
    except (pa.ArrowInvalid, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CorruptLogError(f"cannot read data files of {uri}: {e}") from None
    table = table.sort_by(OFFSET)
    return table if limit is None or ordered else table.slice(0, limit)


def check_offset_in_range(snap: LogSnapshot, offset: int) -> None:
    if offset < snap.log_start_offset or offset > snap.log_end_offset:
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for {snap.topic}-{snap.partition}: readable offsets are "
            f"[{snap.log_start_offset}, {snap.log_end_offset}] (log start to log end)",
            log_start_offset=snap.log_start_offset,
            log_end_offset=snap.log_end_offset,
        )


def validate_records(records: Sequence[Record] | pa.Table | pa.RecordBatch, config: TopicConfig, topic: str,
                     now_ms: int) -> None:
    """Refuse the whole batch if any record is invalid (what an append checks before writing anything); ``now_ms``
    is the clock ``message.timestamp.before.max.ms`` / ``after.max.ms`` are measured from."""
    arrow = records if arrow_records.is_arrow(records) else arrow_records.from_records(records)
    arrow_records.validated(arrow, config, topic, now_ms)


def config_to_table_properties(config: TopicConfig) -> dict[str, str]:
    """The table properties of a topic config: each key under :data:`delta.CONFIG_PREFIX`, and
    ``producer.id.expiration.ms`` also as Delta's own ``delta.setTransactionRetentionDuration``, which makes
    the producers' app ids (stamped with their last update) expire from every snapshot, and
    ``file.delete.delay.ms`` also as Delta's ``delta.deletedFileRetentionDuration`` (with
    ``delta.logRetentionDuration`` at least as long; see :mod:`deltalog.log.delta_retention`)."""
    props = {delta.CONFIG_PREFIX + k: v for k, v in config.to_properties().items()}
    props[delta.SET_TXN_RETENTION] = f"interval {config.producer_id_expiration_ms} milliseconds"
    props.update(delta_retention.table_properties(config.file_delete_delay_ms))
    return props


def config_from_table_properties(props: dict[str, str]) -> TopicConfig:
    """The topic config a partition table holds; ``file.delete.delay.ms`` is Delta's
    ``delta.deletedFileRetentionDuration`` when another engine changed that (the value every VACUUM honours)."""
    ours = {k[len(delta.CONFIG_PREFIX):]: v for k, v in props.items() if k.startswith(delta.CONFIG_PREFIX)}
    known = {k.name for k in TopicConfig.KEYS}
    config = TopicConfig.from_properties({k: v for k, v in ours.items() if k in known})
    effective = delta_retention.effective_file_delete_delay_ms(props, config.file_delete_delay_ms)
    if effective != config.file_delete_delay_ms:
        config = replace(config, file_delete_delay_ms=effective)
    return config


def head_of(dt: DeltaTable, topic: str, storage: Storage | None = None, uri: str | None = None) -> LogHead:
    """The head of ``dt``'s version; with ``storage`` and ``uri`` (the table's), its log positions are read once per
    process and then from the new commits only (:mod:`deltalog.log.app_txns`), else asked of delta-rs."""
    props = dt.metadata().configuration
    if props.get(delta.PROP_TOPIC) is None:
        raise CorruptLogError(f"{dt.table_uri} is a Delta table but not a deltalog partition")
    positions = (delta.TXN_LOG_START_OFFSET, delta.TXN_LOG_END_OFFSET, delta.TXN_ACTIVE_SEGMENT,
                 delta.TXN_ACTIVE_SEGMENT_OPENED, delta.TXN_ACTIVE_SEGMENT_BYTES)
    if storage is not None and uri is not None:
        txns = app_txns.txn_versions(dt, storage, uri, positions)
    else:
        txns = {a: delta.txn_version(dt, a) for a in positions}
    return LogHead(
        config=config_from_table_properties(props),
        log_start_offset=txns[delta.TXN_LOG_START_OFFSET] or 0,
        log_end_offset=txns[delta.TXN_LOG_END_OFFSET] or 0,
        active_segment_base=txns[delta.TXN_ACTIVE_SEGMENT] or 0,
        active_segment_opened_ms=txns[delta.TXN_ACTIVE_SEGMENT_OPENED],
        active_segment_bytes=txns[delta.TXN_ACTIVE_SEGMENT_BYTES] or 0,
    )


def snapshot_of(dt: DeltaTable, topic: str, partition: int, storage: Storage | None = None,
                uri: str | None = None) -> LogSnapshot:
    """The snapshot of ``dt``'s version. Files another engine laid out (OPTIMIZE, Z-order: several segments in one
    file, rows in any order) get their figures from their data through ``storage`` (the table at ``uri``), and the segments are derived
    from the ``segment`` column of their rows (:mod:`deltalog.log.layout`)."""
    props = dt.metadata().configuration
    if props.get(delta.PROP_TOPIC) is None:
        raise CorruptLogError(f"{dt.table_uri} is a Delta table but not a deltalog partition")
    files = tuple(delta.data_files(dt))
    parts = files
    if storage is not None and uri is not None and layout.foreign_layout(files):
        files, parts = layout.with_data_figures(storage, uri, files)
    positions = (delta.TXN_LOG_END_OFFSET, delta.TXN_ACTIVE_SEGMENT, delta.TXN_LOG_START_OFFSET,
                 delta.TXN_ACTIVE_SEGMENT_OPENED, delta.TXN_CLEANER_CHECKPOINT)
    if storage is not None and uri is not None:  # one read of the log since this process last read it
        txns = app_txns.txn_versions(dt, storage, uri, positions)
    else:
        txns = {a: delta.txn_version(dt, a) for a in positions}
    leo = txns[delta.TXN_LOG_END_OFFSET] or 0
    active = txns[delta.TXN_ACTIVE_SEGMENT] or 0
    return LogSnapshot(
        topic=topic,
        partition=partition,
        version=dt.version(),
        config=config_from_table_properties(props),
        topic_id=props.get(delta.PROP_TOPIC_ID),
        log_start_offset=txns[delta.TXN_LOG_START_OFFSET] or 0,
        log_end_offset=leo,
        active_segment_base=active,
        active_segment_opened_ms=txns[delta.TXN_ACTIVE_SEGMENT_OPENED],
        cleaner_checkpoint=txns[delta.TXN_CLEANER_CHECKPOINT],
        files=files,
        segments=build_segments(parts, active, leo),
    )
