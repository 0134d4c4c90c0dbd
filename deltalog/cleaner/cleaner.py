"""One cleaning pass over one partition: Kafka's ``Cleaner.doClean`` as a Spark job.

The algorithm, following Kafka's ``Cleaner.doClean`` (``buildOffsetMap``, ``groupSegmentsBySize``,
``cleanSegments``):

1. **Plan** from the Delta snapshot alone (:mod:`deltalog.cleaner.log_to_clean`): the cleanable section is
   ``[first dirty, first uncleanable)``; the active segment, the segment holding the last stable offset and
   later ones, and segments younger than ``min.compaction.lag.ms`` are never in it. The pass's transaction
   work (:mod:`deltalog.cleaner.txn_plan`): the aborted transactions whose records it drops (never mapped),
   and the markers it stamps with a delete horizon.
2. **Pass 1** (:mod:`deltalog.cleaner.offset_map`) reads only ``key`` and ``offset`` of the cleanable section,
   as Spark tasks that hash the keys and reduce them to partial maps, and merges those on the driver into
   the bounded key-hash -> latest-offset map (24 bytes an entry, as Kafka's); a full map ends the mapped
   range early, and the next pass continues from there. Beside the map, its latest offsets as a bitmap
   (:mod:`deltalog.cleaner.offset_bitmap`).
3. **Pass 2** (:mod:`deltalog.cleaner.recopy`) recopies every closed segment from the log start up to the end of
   the mapped range (Kafka recopies the clean section too: that is where superseded keys and expired
   tombstones are), as Spark tasks over runs of consecutive files. A record survives (Kafka's
   ``shouldRetainRecord``) if its offset is past the mapped range, or if it is its key's latest record (in
   the dirty section: its offset is in the bitmap; in the clean section: its key is not in the map) and
   not a tombstone whose delete horizon has passed; keyless records are dropped and counted. A surviving
   tombstone inside the mapped range with no horizon yet gets ``delete_horizon_ms = now +
   delete.retention.ms`` (KIP-534), so a tombstone is removed on its second clean at the earliest,
   whatever its own timestamp.
4. **Write** the survivors as new Parquet files, consecutive old segments grouped so a group stays within
   ``segment.bytes`` (Kafka's ``groupSegmentsBySize``); each group becomes one segment named by the first
   offset it holds (``002.log`` after the first clean of ``fruit-prices``, whose first record left is offset 2).
5. **Commit** in one Delta commit: remove the replaced files, add the new ones, and move the cleaner
   checkpoint (app id ``deltalog.cleaner.checkpoint``) to the end of the mapped range, with the pass's
   figures in the commit metadata. Producers appending meanwhile are rebased over (their commits
   touch no file this one removes); a second cleaner on the same partition loses (both remove the same
   files and carry the same app id). Files of a pass that never commits are garbage for VACUUM.

Spark executors read, hash, filter and write; the driver plans, merges the map, names the new segments
and commits. No record is collected to the driver and no Python runs per record: the tasks work on whole
Arrow batches with numpy. Each output file holds a contiguous, ordered run of offsets from one task's input.

Deliberate differences from Kafka: a dirty record is kept by its offset (is it in the map's set of latest
offsets?) rather than by looking its key up again, which keeps the same records; the cleaned segment is
named by its first offset (so a segment's name is an offset it holds) where Kafka's code keeps the base offset of the group's first
segment; and the mapped range ends before the first key that does not fit rather than at the first record
after the map is full.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from deltalog.cleaner.log_to_clean import LogToClean, first_uncleanable_offset
from deltalog.cleaner.offset_map import OffsetMap, build_offset_map
from deltalog.cleaner.recopy import (
    TASKS_DIR,
    RecopyChunk,
    RecopyCounts,
    RecopyParams,
    RetainRule,
    read_batches,
    recopy_chunk,
    save_keys,
)
from deltalog.cleaner.task_plan import FileSlice, plan_runs
from deltalog.cleaner.tasks import INLINE_PAYLOAD_BYTES, parallelism, run_tasks
from deltalog.cleaner.txn_plan import TxnCleaning, plan_txn_cleaning
from deltalog.config import StoreConfig
from deltalog.errors import (
    CleaningFailedError,
    CommitConflictError,
    CorruptLogError,
    DeltalogError,
    StorageFullError,
)
from deltalog.log import delta
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.record import CONTROL, DELETE_HORIZON, KEY, OFFSET, PRODUCER_ID
from deltalog.log.segment import Segment
from deltalog.log.transactions import TxnIndex, may_hold_aborted, wholly_aborted
from deltalog.storage import Storage, join
from deltalog.storage_faults import full_storage_error, is_storage_full

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

#: Directory (inside the partition table) of one pass's output.
CLEANED_DIR_PREFIX = delta.CLEANED_DIR_PREFIX


@dataclass(frozen=True)
class CleanResult:
    """The figures of one pass: what Kafka's cleaner log line shows, as data.

    The same figures are in the Delta commit's metadata (keys prefixed ``deltalog.``), so the table
    history shows every clean.
    """

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    first_uncleanable_offset: int
    records_read: int
    records_written: int
    bytes_read: int
    bytes_written: int
    map_entries: int
    map_capacity: int  # Kafka's maxDesiredMapSize: slots x load factor
    map_utilization: float  # entries / slots, Kafka's "Buffer utilization"
    map_ms: int
    copy_ms: int
    tombstones_stamped: int
    tombstones_removed: int
    keyless_dropped: int
    segments_read: int
    segments_written: int
    version: int
    now_ms: int
    #: Transactions: records of aborted transactions dropped, markers given a delete horizon, markers removed.
    aborted_dropped: int = 0
    markers_stamped: int = 0
    markers_removed: int = 0

    @property
    def size_reduction(self) -> float:
        """Fraction of bytes removed, as Kafka's "48.6% size reduction"."""
        return 1.0 - self.bytes_written / self.bytes_read if self.bytes_read else 0.0

    @property
    def records_reduction(self) -> float:
        return 1.0 - self.records_written / self.records_read if self.records_read else 0.0

    @property
    def dirty_section(self) -> tuple[int, int]:
        """The offsets cleaned this pass, as Kafka's ``dirty section = [first, end)``."""
        return (self.first_dirty_offset, self.end_offset)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["size_reduction"] = self.size_reduction
        d["records_reduction"] = self.records_reduction
        return d

    def _reduction_text(self) -> str:
        """Kafka's "48.6% size reduction"; a pass whose files came out larger than it read (a small section, whose
        rewritten Parquet footers, statistics and stamped columns outweigh the records removed) says so instead of
        a negative reduction."""
        fewer = f"{100 * self.records_reduction:.1f}% fewer messages"
        if self.size_reduction >= 0:
            return f"{100 * self.size_reduction:.1f}% size reduction ({fewer})"
        return (f"no size reduction: {-100 * self.size_reduction:.1f}% larger with {fewer} (on a section this small "
                "the rewritten files' Parquet metadata outweighs the records removed)")

    def summary(self) -> str:
        """Kafka's cleaner log line, in deltalog's words."""
        total_ms = max(self.map_ms + self.copy_ms, 1)
        return (
            f"Cleaned log {self.topic}-{self.partition} (dirty section = [{self.first_dirty_offset}, "
            f"{self.end_offset}), delta version {self.version})\n"
            f"  {self.bytes_read / 1e6:,.3f} MB of log processed in {total_ms / 1000:,.1f} seconds.\n"
            f"  Indexed in {self.map_ms / 1000:,.1f} seconds ({100 * self.map_ms / total_ms:.1f}% of total time)\n"
            f"  Buffer utilization: {100 * self.map_utilization:.1f}% "
            f"({self.map_entries:,} entries; a pass maps at most {self.map_capacity:,})\n"
            f"  Cleaned in {self.copy_ms / 1000:,.1f} seconds ({100 * self.copy_ms / total_ms:.1f}% of total time)\n"
            f"  Start size: {self.bytes_read / 1e6:,.3f} MB ({self.records_read:,} messages)\n"
            f"  End size: {self.bytes_written / 1e6:,.3f} MB ({self.records_written:,} messages)\n"
            f"  {self._reduction_text()}\n"
            f"  Tombstones stamped: {self.tombstones_stamped}, removed: {self.tombstones_removed}; "
            f"keyless records dropped: {self.keyless_dropped}"
            + (f"\n  Aborted records dropped: {self.aborted_dropped}; transaction markers stamped: "
               f"{self.markers_stamped}, removed: {self.markers_removed}"
               if self.aborted_dropped or self.markers_stamped or self.markers_removed else "")
        )


def group_segments_by_size(segments: Sequence[Segment], max_bytes: int) -> list[list[Segment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose combined size stays within ``max_bytes``
    (a group always takes at least one segment), so repeated cleaning merges small segments."""
    groups: list[list[Segment]] = []
    current: list[Segment] = []
    size = 0
    for seg in segments:
        if current and size + seg.size_bytes > max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(seg)
        size += seg.size_bytes
    if current:
        groups.append(current)
    return groups


@dataclass
class _Pass:
    """One pass's plan and timings, shared by the steps of :meth:`Cleaner.clean`."""

    log: PartitionLog
    snap: LogSnapshot
    now: int
    start: int  # the first dirty offset
    stop: int  # the first uncleanable offset, never past the last stable offset
    index: TxnIndex
    pass_id: str
    out_dir: str  # the pass's directory, relative to the table
    started: float  # time.monotonic() at the start
    copy_started: float = 0.0
    map_ms: int = 0
    copy_ms: int = 0

    @property
    def storage(self) -> Storage:
        return self.log.storage

    @property
    def uri(self) -> str:
        return self.log.uri

    @property
    def out_path(self) -> str:
        return join(self.log.uri, self.out_dir)

    def figures(self, offset_map: OffsetMap, capacity: int, segments: list[Segment], names: list[int | None],
                adds: list[delta.AddAction], counts: RecopyCounts) -> dict[str, Any]:
        """The pass's figures (:class:`CleanResult` but the commit's version), also written into the commit."""
        return dict(
            topic=self.snap.topic,
            partition=self.snap.partition,
            first_dirty_offset=self.start,
            end_offset=offset_map.end_offset,
            first_uncleanable_offset=self.stop,
            records_read=counts.records_read,
            records_written=counts.records_written,
            bytes_read=sum(f.size_bytes for s in segments for f in s.files),
            bytes_written=sum(a.size for a in adds),
            map_entries=offset_map.entries,
            map_capacity=capacity,
            map_utilization=offset_map.utilization,
            map_ms=self.map_ms,
            copy_ms=self.copy_ms,
            tombstones_stamped=counts.tombstones_stamped,
            tombstones_removed=counts.tombstones_removed,
            keyless_dropped=counts.keyless_dropped,
            aborted_dropped=counts.aborted_dropped,
            markers_stamped=counts.markers_stamped,
            markers_removed=counts.markers_removed,
            segments_read=len(segments),
            segments_written=sum(1 for name in names if name is not None),
        )


class Cleaner:
    """Runs one pass. Its time is the plan's (``LogToClean.now_ms``), never the wall clock; the Spark
    session is the caller's.

    The offset map has Kafka's geometry: ``slots`` = the thread's share of ``log.cleaner.dedupe.buffer.size``
    / 24 bytes, of which a pass fills at most slots x ``log.cleaner.io.buffer.load.factor``. ``map_slots``
    sets the slots directly, as Kafka's own tests build a Cleaner on a small SkimpyOffsetMap (the config
    refuses a buffer of 1 MiB or less per thread, as Kafka's broker does).
    """

    def __init__(self, spark: SparkSession, config: StoreConfig, *, threads: int | None = None,
                 map_slots: int | None = None) -> None:
        self.spark = spark
        self.config = config
        self.map_slots = map_slots if map_slots is not None else config.offset_map_slots(threads)
        self.map_capacity = config.offset_map_capacity_for(slots=self.map_slots)
        if not self.map_slots * config.io_buffer_load_factor > 1:  # Kafka: require(slots * loadFactor > 1)
            raise CleaningFailedError(
                f"the offset map ({self.map_slots} slots x load factor {config.io_buffer_load_factor}) is too small "
                "to fit in even a single key, so log cleaning will never make progress"
            )

    def clean(self, ltc: LogToClean, log: PartitionLog) -> CleanResult:
        """Clean ``[first dirty, first uncleanable)`` of the partition ``ltc`` was planned on, as of ``ltc.now_ms``.

        Kafka's ``Cleaner.doClean`` in its three steps: build the offset map, group the segments, clean the
        groups and commit. A step that fails leaves nothing behind: the pass's directory is removed once, here,
        unless the commit may have landed (then its files are the table's, or VACUUM's once proven orphaned).
        """
        p = self._start(ltc, log)
        committing = False
        try:
            offset_map = self._build_offset_map(p)
            segments, groups, txn = self._group_segments(p, offset_map)
            names, adds, counts = self._clean_segments(p, offset_map, segments, groups, txn)
            if not adds:  # nothing survived: leave no empty pass directory behind
                _remove_tree(p.storage, p.out_path)
            figures = p.figures(offset_map, self.map_capacity, segments, names, adds, counts)
            committing = True
            commit_id, version = self._commit(p, segments, adds, figures)
        except Exception as e:
            # Never committed, or proven not landed (a lost race, a full disk): the pass's files are nobody's. A
            # commit whose outcome is unknown keeps them; VACUUM removes them once no version references them.
            if not committing or isinstance(e, (CommitConflictError, StorageFullError)):
                _remove_tree(p.storage, p.out_path)
            raise
        if version is None:
            version = delta.committed_version(log.table(), p.snap.version, commit_id)
        else:
            log.own_commit(version)
        result = CleanResult(**figures, version=version, now_ms=p.now)
        logger.info("%s", result.summary())
        self._throttle(p.started, result.bytes_read + result.bytes_written)
        return result

    def _start(self, ltc: LogToClean, log: PartitionLog) -> _Pass:
        """The pass's range, never past the last stable offset whoever planned ``ltc`` (every transaction the pass
        sees is decided; the index of the plan's snapshot, when the plan has it, is this pass's)."""
        snap = ltc.snapshot
        start, stop = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        index = ltc.txn_index if ltc.txn_index is not None else log.txn_index(snap)
        stop = min(stop, max(first_uncleanable_offset(snap, ltc.now_ms, index.last_stable_offset), start))
        if stop <= start:
            raise CleaningFailedError(f"nothing to clean in {snap.topic}-{snap.partition}: [{start}, {stop}) is empty")
        pass_id = uuid.uuid4().hex[:12]
        return _Pass(log, snap, ltc.now_ms, start, stop, index, pass_id, f"{CLEANED_DIR_PREFIX}{ltc.now_ms}-{pass_id}",
                     time.monotonic())

    def _build_offset_map(self, p: _Pass) -> OffsetMap:
        """Step 1, Kafka's ``buildOffsetMap``: pass 1 over the dirty section (:mod:`deltalog.cleaner.offset_map`)."""
        try:
            offset_map = build_offset_map(self.spark, p.storage, p.uri, p.snap.files, p.start, p.stop,
                                          self.map_capacity, join(p.out_path, "_map"), slots=self.map_slots,
                                          aborted=p.index.aborted)
        except Exception as e:
            raise _failure(p.snap, "pass 1 (building the offset map)", e, p.uri)  # noqa: B904 - chained in _failure
        p.map_ms = int((time.monotonic() - p.started) * 1000)
        return offset_map

    def _group_segments(self, p: _Pass, offset_map: OffsetMap) -> tuple[list[Segment], list[list[Segment]], TxnCleaning]:
        """Step 2, Kafka's ``groupSegmentsBySize`` over the closed segments from the log start to the end of the
        mapped range, and the transaction work of those segments (Kafka's ``CleanedTransactionMetadata``)."""
        p.copy_started = time.monotonic()
        end = offset_map.end_offset
        segments = [s for s in p.snap.segments if not s.is_active and s.files and s.base_offset < end]
        groups = group_segments_by_size(segments, p.snap.config.segment_bytes)
        inputs = [f for s in segments for f in s.files]
        log_start = p.snap.log_start_offset
        try:
            txn = plan_txn_cleaning(p.storage, p.uri, inputs, p.index, log_start,
                                    max((f.max_offset + 1 for f in inputs), default=log_start))
        except Exception as e:
            raise _failure(p.snap, "planning the transactions of pass 2", e, p.uri)  # noqa: B904 - chained in _failure
        return segments, groups, txn

    def _clean_segments(self, p: _Pass, offset_map: OffsetMap, segments: list[Segment], groups: list[list[Segment]],
                        txn: TxnCleaning) -> tuple[list[int | None], list[delta.AddAction], RecopyCounts]:
        """Step 3, Kafka's ``cleanSegments`` for every group: pass 2 recopies the survivors (Kafka's
        ``shouldRetainRecord``, :mod:`deltalog.cleaner.recopy`) into one new segment per group, named by the
        first offset it keeps; returns the names, the Delta add actions of the new files, and the counts."""
        snap = p.snap
        params = RecopyParams(p.storage, p.uri, p.out_dir, snap.log_start_offset, p.start, offset_map.end_offset,
                              p.now, p.now + snap.config.delete_retention_ms, aborted=txn.aborted,
                              stamp_markers=txn.stamp_markers)
        try:
            rule = params.rule(offset_map.latest, offset_map.keys)
            names = [_first_survivor(p.storage, p.uri, group, rule) for group in groups]
            new_files, counts = self._recopy(params, groups, names, offset_map)
            adds = [delta.add_action_for_file(p.storage, p.uri, path, p.now, size) for path, size in new_files]
        except Exception as e:
            raise _failure(snap, "pass 2 (recopying the segments)", e, p.uri)  # noqa: B904 - chained in _failure
        p.copy_ms = int((time.monotonic() - p.copy_started) * 1000)
        return names, adds, counts

    @staticmethod
    def _commit(p: _Pass, segments: list[Segment], adds: list[delta.AddAction], figures: dict[str, Any]
                ) -> tuple[str, int | None]:
        """The swap, in one Delta commit (Kafka's ``replaceSegments`` and the checkpoint update): remove the
        replaced files, add the new ones and move the cleaner checkpoint to the end of the mapped range.
        Conflicts are checked against the commits since the plan. Returns the commit id and, when known, the version
        it landed as."""
        removes = [delta.remove_action(f, p.now) for s in segments for f in s.files]
        return delta.commit_version(
            p.log.table_at(p.snap.version),
            [*removes, *adds],
            txns={delta.TXN_CLEANER_CHECKPOINT: figures["end_offset"]},
            metadata={"pass_id": p.pass_id, "now_ms": p.now,
                      **{k: v for k, v in figures.items() if k not in ("topic", "partition")}},
            operation="clean",
            plan_version=p.snap.version,
            planned_txns={delta.TXN_CLEANER_CHECKPOINT: p.snap.cleaner_checkpoint},
        )

    # -- Spark parts ----------------------------------------------------------------------------------

    def _recopy(self, params: RecopyParams, groups: list[list[Segment]], names: list[int | None],
                offset_map: OffsetMap) -> tuple[list[tuple[str, int]], RecopyCounts]:
        """Pass 2: one Spark task per run of consecutive files (see :mod:`deltalog.cleaner.recopy`).

        Each task gets the slice of the latest-offset bitmap that covers its files; the map's hashes go only
        to tasks with files in the clean section. Files wholly below the log start are not read (the commit
        removes them all the same), nor are files whose stats say every record is of an aborted transaction
        (all dropped: counted from the stats).
        """
        name_of = {f.path: (-1 if name is None else name) for group, name in zip(groups, names, strict=True)
                   for s in group for f in s.files}
        counts = RecopyCounts()
        files = []
        for f in (f for group in groups for s in group for f in s.files if f.max_offset >= params.log_start):
            if f.min_offset >= params.log_start and wholly_aborted(f, params.aborted):
                counts.records_read += f.num_records
                counts.aborted_dropped += f.num_records
            else:
                files.append(f)
        if not files:
            return [], counts
        runs = plan_runs(params.storage, params.table_uri, files, parallelism(self.spark),
                         max_bytes=COPY_TASK_BYTES, cost=_copy_cost(offset_map, params.first_dirty))
        chunks = [
            RecopyChunk(tuple((piece, name_of[piece.path]) for piece in run),
                        offset_map.latest.slice(run[0].min_offset, run[-1].max_offset + 1),
                        needs_keys=run[0].min_offset < params.first_dirty)
            for run in runs
        ]
        # The map's hashes ride with the task when at most two tasks need them and they are small (one copy
        # each, ~10 ms on the small benchmark preset); else the driver writes them once to the pass's
        # directory and the tasks that need them read them (Spark Connect has no broadcast variables, and a
        # task's closure is shipped with every task).
        work_dir = join(params.table_uri, params.out_dir, TASKS_DIR)
        needing = sum(c.needs_keys for c in chunks)
        if needing > 2 or needing * offset_map.keys.nbytes > INLINE_PAYLOAD_BYTES:
            params = dataclasses.replace(params, keys_location=join(work_dir, "keys.arrays"))
            save_keys(params.storage, params.keys_location, offset_map.keys)
        else:
            chunks = [dataclasses.replace(c, keys=offset_map.keys) if c.needs_keys else c for c in chunks]
        try:
            outputs = run_tasks(self.spark, partial(recopy_chunk, params), chunks, storage=params.storage,
                                work_dir=work_dir)
        finally:
            _remove_tree(params.storage, work_dir)
        new_files: list[tuple[str, int]] = []  # (path relative to the table, size in bytes)
        for out in outputs:
            counts.add(out.counts)
            new_files.extend(zip(out.files, out.sizes, strict=True))
        return new_files, counts

    def _throttle(self, started: float, io_bytes: int) -> None:
        """``log.cleaner.io.max.bytes.per.second``: sleep so the pass's average I/O rate stays within it."""
        limit = self.config.io_max_bytes_per_second
        if limit == float("inf") or io_bytes <= 0:
            return
        wanted = io_bytes / limit
        elapsed = time.monotonic() - started
        if wanted > elapsed:
            time.sleep(wanted - elapsed)


#: Input bytes of a pass-2 task at most. A task streams its slices a row group at a time (its memory does not grow
#: with its share), so this only keeps a retried task short; pass 2 is one wave of one task a core below it.
COPY_TASK_BYTES = 4 << 30


def _copy_cost(offset_map: OffsetMap, first_dirty: int) -> Callable[[FileSlice], float]:
    """What a pass-2 task spends on a slice, for balancing the runs: its bytes, read, and again for the share of them
    it writes (writing a record costs about what reading one does, on random and JSON values alike: the benchmarks'
    profile, docs/performance.md). Dirty records survive where the map holds their offset (counted from the latest-offset
    bitmap), and the latest records cluster at the log's end, so the runs of the last files write most. A clean record
    survives unless its key is mapped, which the driver cannot count without the lookups: its slices are weighed as
    read, with their lookups (a fifth more)."""

    def cost(s: FileSlice) -> float:
        if s.min_offset < first_dirty:
            return s.size_bytes * 1.2
        kept = len(offset_map.latest.slice(s.min_offset, s.max_offset + 1))
        return s.size_bytes * (1.0 + kept / max(s.max_offset - s.min_offset + 1, 1))

    return cost


def _first_survivor(storage: Storage, table_uri: str, group: Sequence[Segment], rule: RetainRule) -> int | None:
    """The offset of the first record a segment group keeps, which names its new segment (so its name
    is an offset it holds: ``002.log`` when offset 2 is the first it keeps); None if it keeps none.

    Decided on the driver before pass 2 writes a row. A dirty file with no delete horizons answers from
    the latest-offset bitmap, and a file past the mapped range keeps its first record; any other file is
    read a batch at a time (offsets, keys and horizons only) until a record survives, usually in the
    first batch.
    """
    for f in (f for s in group for f in s.files if f.max_offset >= rule.log_start):
        lo = max(f.min_offset, rule.log_start)
        if wholly_aborted(f, rule.aborted):
            continue  # every record of it is dropped
        # A file that may hold aborted records (dropped wherever they are) or markers (kept though keyless and
        # never in the map) is read; a plain one answers from its stats and the bitmap.
        plain = not f.control_rows and not may_hold_aborted(f, rule.aborted)
        if plain and lo >= rule.end:
            return lo  # past the mapped range: kept as it is (uncleaned files hold every offset)
        if plain and f.min_offset >= rule.first_dirty and f.max_delete_horizon_ms is None:
            found = rule.latest.first_at_or_after(lo, min(f.max_offset + 1, rule.end))
            if found is not None:
                return found
            if f.max_offset >= rule.end:
                return rule.end
            continue
        columns = [OFFSET, KEY, DELETE_HORIZON] if plain else [OFFSET, KEY, DELETE_HORIZON, PRODUCER_ID, CONTROL]
        for table in read_batches(storage, join(table_uri, f.path), columns, 8192):
            offsets = table.column(OFFSET).to_numpy()
            retain, _mapped, _latest = rule.retain(
                offsets, table.column(KEY), table.column(DELETE_HORIZON),
                None if plain else table.column(PRODUCER_ID), None if plain else table.column(CONTROL))
            kept = np.flatnonzero(retain)
            if len(kept):
                return int(offsets[kept[0]])
    return None


_RAISED = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Invalid)): (.+)$")


def _failure(snap: LogSnapshot, phase: str, error: Exception, uri: str) -> Exception:
    """Spark's error as a :class:`CleaningFailedError` that names the partition and the phase, caused by it
    (deltalog's own errors pass through unchanged, with their own cause: ``raise error from error`` would make
    the error its own cause, a chain with no end; a task's arrive as their own class, see
    :func:`~deltalog.cleaner.tasks.worker_error`, from a pass's own job and a round's shared one alike); a
    damaged file as a :class:`CorruptLogError` that also names the pass; a full disk under a task (its error
    reaches the driver as text) as the :class:`~deltalog.errors.StorageFullError` the loop retries instead of
    marking the partition uncleanable."""
    if is_storage_full(error):
        full = full_storage_error(error, uri, f"cleaning {snap.topic}-{snap.partition} ({phase})")
        if full is not error:
            full.__cause__ = error
        return full
    if isinstance(error, CorruptLogError):  # a task's names the damaged file: keep its type and words, name the pass
        failure: Exception = CorruptLogError(f"cleaning {snap.topic}-{snap.partition} failed in {phase}: {error}; "
                                             "nothing was committed")
        failure.__cause__ = error
        return failure
    if isinstance(error, DeltalogError):
        return error
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # A task's Python error reaches the driver as text ending in the worker's traceback: its last
    # "SomeError: message" line says what went wrong (deltalog's workers name the file they could not read).
    raised = [m.group(2) for m in map(_RAISED.match, lines) if m]
    detail = raised[-1] if raised else (lines[0] if lines else type(error).__name__)
    failure = CleaningFailedError(
        f"cleaning {snap.topic}-{snap.partition} failed in {phase}: {detail[:600]}; nothing was committed"
    )
    failure.__cause__ = error
    return failure


def _remove_tree(storage: Storage, path: str) -> None:
    """Remove a pass's directory (best effort: VACUUM removes what is left, as orphans)."""
    try:
        storage.delete_tree(path)
    except Exception as e:  # noqa: BLE001 - the pass's own error is the one to report
        logger.warning("could not remove %s: %s", path, e)
