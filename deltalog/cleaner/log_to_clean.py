"""Which range of a partition is cleanable, and how dirty it is (Kafka's LogToClean / cleanableOffsets).

Pure functions of a :class:`~deltalog.log.partition_log.LogSnapshot` and a time: no Spark, no data read. Seed 001,
"Choosing the filthiest log":

* clean section ``[log start, first dirty)``; the first dirty offset is the cleaner checkpoint, reset to
  the log start when it lies outside ``[log start, log end]``;
* cleanable section ``[first dirty, first uncleanable)``, where first uncleanable is the minimum of the
  active segment's base offset, the last stable offset (the first offset of the earliest open transaction,
  aligned down to its segment's base as Kafka's ``LogToClean`` does, so the cleaner only ever sees decided
  transactions) and, when ``min.compaction.lag.ms > 0``, the base offset of the first segment whose largest
  timestamp is newer than ``now - min.compaction.lag.ms``;
* cleanable ratio = cleanable bytes / (clean bytes + cleanable bytes), from file sizes in the Delta log;
* eligible when the ratio exceeds ``min.cleanable.dirty.ratio``, or when ``max.compaction.lag.ms`` has
  passed for the oldest dirty segment and there are cleanable bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.segment import Segment
from deltalog.log.transactions import TxnIndex


def first_uncleanable_offset(snap: LogSnapshot, now_ms: int, last_stable_offset: int | None = None) -> int:
    """Kafka's ``cleanableOffsets`` then ``LogToClean``'s alignment: the active segment, the segment holding
    the last stable offset and every later one, and segments younger than the min lag are off limits.

    ``last_stable_offset`` None means the log has no open transaction (callers that clean get it from
    :meth:`LogToClean.for_log`).
    """
    bound = snap.active_segment_base
    if last_stable_offset is not None and last_stable_offset < bound:
        bound = max((s.base_offset for s in snap.segments if s.base_offset <= last_stable_offset),
                    default=snap.log_start_offset)
    lag = snap.config.min_compaction_lag_ms
    if lag > 0:
        for seg in snap.segments:
            if seg.is_active or seg.base_offset < snap.first_dirty_offset:
                continue
            ts = seg.largest_timestamp_ms
            if ts is not None and ts > now_ms - lag:
                bound = min(bound, seg.base_offset)
                break
    return max(bound, snap.first_dirty_offset)


def _overlapping(segments: tuple[Segment, ...], start: int, end: int) -> list[Segment]:
    """Kafka's ``logSegments(from, to)``: closed segments that hold any offset in ``[start, end)``."""
    return [s for s in segments if not s.is_active and s.base_offset < end and s.end_offset > start]


@dataclass(frozen=True)
class LogToClean:
    """A partition's clean/cleanable split at one time; ordered by cleanable ratio (filthiest last)."""

    snapshot: LogSnapshot
    now_ms: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    #: The snapshot's transaction index when the plan had it (:meth:`for_log`): the pass reuses it.
    txn_index: TxnIndex | None = field(default=None, compare=False)

    @classmethod
    def for_log(cls, plog: PartitionLog, snap: LogSnapshot, now_ms: int) -> LogToClean:
        """The split of ``snap`` with its last stable offset (from the snapshot's transaction index, built from
        file stats alone for a log without transactional rows): what every cleaning path plans with."""
        index = plog.txn_index(snap)
        return cls.of(snap, now_ms, last_stable_offset=index.last_stable_offset, txn_index=index)

    @classmethod
    def of(cls, snap: LogSnapshot, now_ms: int, *, last_stable_offset: int | None = None,
           txn_index: TxnIndex | None = None) -> LogToClean:
        first_dirty = snap.first_dirty_offset
        first_uncleanable = first_uncleanable_offset(snap, now_ms, last_stable_offset)
        clean = [s for s in snap.segments if not s.is_active and s.base_offset < first_dirty]
        cleanable = _overlapping(snap.segments, first_dirty, first_uncleanable)
        return cls(
            snapshot=snap,
            now_ms=now_ms,
            first_dirty_offset=first_dirty,
            first_uncleanable_offset=first_uncleanable,
            clean_bytes=sum(s.size_bytes for s in clean),
            cleanable_bytes=sum(s.size_bytes for s in cleanable),
            max_compaction_delay_ms=_max_compaction_delay(snap, first_dirty, now_ms),
            txn_index=txn_index,
        )

    def at(self, now_ms: int) -> LogToClean:
        """The same snapshot's split planned again at ``now_ms`` (a plan kept from an earlier ranking)."""
        if now_ms == self.now_ms:
            return self
        index = self.txn_index
        return LogToClean.of(self.snapshot, now_ms, last_stable_offset=None if index is None else
                             index.last_stable_offset, txn_index=index)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        """``max.compaction.lag.ms`` has passed for the oldest dirty segment."""
        return self.max_compaction_delay_ms > 0

    @property
    def eligible(self) -> bool:
        """Kafka's filter in ``grabFilthiestCompactedLog``."""
        if not self.snapshot.config.compact or self.first_uncleanable_offset <= self.first_dirty_offset:
            return False
        if self.needs_compaction_now and self.cleanable_bytes > 0:
            return True
        return self.cleanable_ratio > self.snapshot.config.min_cleanable_dirty_ratio

    def __lt__(self, other: LogToClean) -> bool:
        return self.cleanable_ratio < other.cleanable_ratio


def _max_compaction_delay(snap: LogSnapshot, first_dirty: int, now_ms: int) -> int:
    """How long the earliest dirty closed segment has waited beyond ``max.compaction.lag.ms`` (0: not yet).

    Kafka's ``maxCompactionDelay`` (LogCleanerManager): over the closed segments from the one holding the first
    dirty offset, the timestamp of each segment's *first batch* (its largest record timestamp), ignoring
    timestamps <= 0; a segment's first batch here is its first data file (one append is one file), whose
    largest timestamp the Delta stats hold.
    """
    max_lag = max(snap.config.max_compaction_lag_ms, 0)
    firsts = []
    for seg in snap.segments:
        if seg.is_active or seg.end_offset <= first_dirty or not seg.files:
            continue
        ts = seg.files[0].max_timestamp_ms  # files are in offset order
        if ts is not None and ts > 0:
            firsts.append(ts)
    if not firsts:
        return 0
    clean_until = now_ms - max_lag
    earliest = min(firsts)
    return clean_until - earliest if earliest < clean_until else 0
