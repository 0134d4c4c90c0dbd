"""Retention: whole old segments deleted and the log start offset advanced (Kafka's ``deleteOldSegments``).

Kafka's ``UnifiedLog.deleteOldSegments`` (``deleteRetentionMsBreachedSegments``,
``deleteRetentionSizeBreachedSegments``, ``deleteLogStartOffsetBreachedSegments``), which also runs on
``compact,delete`` topics. For ``delete`` and ``compact,delete`` topics three predicates run in order,
each walking the closed segments oldest first and stopping at the first segment that fails it:

1. log start breach: the whole segment lies below the log start offset (DeleteRecords raised it);
2. ``retention.bytes`` breach: while the partition minus the segment is still at least ``retention.bytes``;
3. ``retention.ms`` breach: the segment's largest record timestamp is older than ``now - retention.ms``.

A ``compact``-only topic runs only the first. The active segment is never deleted (the seed's invariant:
a log always keeps its active segment, so the log start never passes the log end; Kafka would roll a new
active segment and delete the old one, deltalog keeps it). The log start offset advances to the base
offset of the first surviving segment.

The deletion is ONE Delta commit: a remove action per file and the ``deltalog.log_start_offset``
app-transaction. It never carries the log end offset's app id, so producers keep appending while it
commits; a concurrent cleaner that rewrote the same files, or a concurrent DeleteRecords, makes it fail
and it is planned again from a fresh snapshot. The removed files stay on disk for readers that already
hold the old snapshot until VACUUM (:mod:`deltalog.log.vacuum`) removes them after ``file.delete.delay.ms``.

:func:`delete_records` is Kafka's DeleteRecords: it raises the log start offset to a given offset and
removes the files that lie entirely below it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from deltalog.errors import CommitConflictError, ForeignCommitError, InvalidConfigError, OffsetOutOfRangeError
from deltalog.log import delta, layout
from deltalog.log.delta import DataFile
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.segment import Segment

log = logging.getLogger(__name__)

#: How often a retention or DeleteRecords commit is planned again after losing a race.
MAX_ATTEMPTS = 10
#: Kafka's ``DeleteRecordsRequest.HIGH_WATERMARK``: delete everything up to the log end.
HIGH_WATERMARK = -1

REASON_LOG_START = "log-start-offset"
REASON_BYTES = "retention.bytes"
REASON_TIME = "retention.ms"


@dataclass(frozen=True)
class DeletedSegment:
    """One segment retention deleted, and why."""

    base_offset: int
    end_offset: int
    size_bytes: int
    num_records: int
    largest_timestamp_ms: int | None
    reason: str


@dataclass(frozen=True)
class RetentionResult:
    """What one retention run did to one partition (nothing, when ``segments`` is empty)."""

    topic: str
    partition: int
    log_start_offset_before: int
    log_start_offset: int
    segments: tuple[DeletedSegment, ...]
    files_deleted: int
    version: int | None  # the version of the retention commit; None when nothing was deleted
    now_ms: int

    @property
    def segments_deleted(self) -> int:
        return len(self.segments)

    @property
    def bytes_deleted(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    @property
    def records_deleted(self) -> int:
        return sum(s.num_records for s in self.segments)


@dataclass(frozen=True)
class DeleteRecordsResult:
    """Kafka's DeleteRecords answer (the new low watermark), plus what was removed."""

    topic: str
    partition: int
    low_watermark: int
    files_deleted: int
    bytes_deleted: int
    records_deleted: int
    version: int | None


def deletable_segments(snap: LogSnapshot, now_ms: int) -> list[DeletedSegment]:
    """The segments retention would delete now, oldest first, each with the predicate that chose it."""
    closed = [s for s in snap.segments if not s.is_active]
    chosen: list[DeletedSegment] = []

    def take(seg: Segment, reason: str) -> None:
        chosen.append(DeletedSegment(seg.base_offset, seg.end_offset, seg.size_bytes, seg.num_records,
                                     seg.largest_timestamp_ms, reason))

    i = 0
    # 1. log start breach: the next segment's base (this segment's end) is at or below the log start.
    while i < len(closed) and closed[i].end_offset <= snap.log_start_offset:
        take(closed[i], REASON_LOG_START)
        i += 1
    config = snap.config
    if not config.delete:
        return chosen
    # 2. retention.bytes breach, over the size of the whole log (active segment included), as Kafka.
    if config.retention_bytes >= 0:
        # the size of what survived step 1: the closed segments left plus the active segment
        diff = sum(s.size_bytes for s in closed[i:]) + snap.active_segment.size_bytes - config.retention_bytes
        while i < len(closed) and diff - closed[i].size_bytes >= 0:
            diff -= closed[i].size_bytes
            take(closed[i], REASON_BYTES)
            i += 1
    # 3. retention.ms breach: the segment's newest record is older than the retention time.
    if config.retention_ms >= 0:
        while i < len(closed):
            ts = closed[i].largest_timestamp_ms
            if ts is None or now_ms - ts <= config.retention_ms:
                break
            take(closed[i], REASON_TIME)
            i += 1
    return chosen


def delete_old_segments(log_: PartitionLog, now_ms: int) -> RetentionResult:
    """Apply the topic's retention to one partition now; one Delta commit, retried after a lost race.

    Callers that must not overlap a cleaning pass hold the partition's lease (:mod:`deltalog.log.lease`).
    """
    def attempt(_: int) -> RetentionResult:
        snap = log_.snapshot()
        doomed = deletable_segments(snap, now_ms)
        if doomed and layout.foreign_layout(snap.files):  # whole segments' files go: first one segment a file
            log_.relayout(now_ms)
            snap = log_.snapshot()
            doomed = deletable_segments(snap, now_ms)
        if not doomed:
            return RetentionResult(snap.topic, snap.partition, snap.log_start_offset, snap.log_start_offset,
                                   (), 0, None, now_ms)
        bases = {d.base_offset for d in doomed}
        files = list({f.path: f for s in snap.segments if s.base_offset in bases for f in s.files}.values())
        merged = [f.path for f in files if not f.deltalog_layout]
        if merged:  # another engine's OPTIMIZE merged segments again since the relayout: its file holds kept ones
            raise CommitConflictError(f"retention of {snap.topic}-{snap.partition}: another engine merged segments "
                                      f"again at version {snap.version} ({merged[0]}); laying them out again")
        new_start = max(snap.log_start_offset, doomed[-1].end_offset)
        version = _commit_removal(log_, snap, files, new_start, now_ms, "retention", {
            "segments_deleted": len(doomed),
            "bytes_deleted": sum(d.size_bytes for d in doomed),
            "records_deleted": sum(d.num_records for d in doomed),
            "reasons": ",".join(sorted({d.reason for d in doomed})),
            "log_start_offset": new_start,
            "now_ms": now_ms,
        })
        log.info("retention deleted %d segment(s) of %s-%d (%d bytes, %d records); log start offset %d -> %d",
                 len(doomed), snap.topic, snap.partition, sum(d.size_bytes for d in doomed),
                 sum(d.num_records for d in doomed), snap.log_start_offset, new_start)
        return RetentionResult(snap.topic, snap.partition, snap.log_start_offset, new_start, tuple(doomed),
                               len(files), version, now_ms)

    return delta.retry_on_conflict(f"retention of {log_.topic}-{log_.partition}", MAX_ATTEMPTS, attempt,
                                   backoff=False)


def delete_records(log_: PartitionLog, before_offset: int, now_ms: int) -> DeleteRecordsResult:
    """Kafka's DeleteRecords: make ``before_offset`` the log start offset (``-1``: the log end).

    Files entirely below the new log start are removed in the same commit; a file that straddles it stays
    and reads skip its rows below the log start. Deleting up to the log end leaves an empty partition
    whose next append still gets the old log end offset. A ``before_offset`` at or below the current log
    start changes nothing (the log start never goes backwards).
    """
    if isinstance(before_offset, bool) or not isinstance(before_offset, int):
        raise InvalidConfigError(
            f"before_offset must be an int offset (or {HIGH_WATERMARK} for the log end), not {before_offset!r}"
        )
    def attempt(_: int) -> DeleteRecordsResult:
        snap = log_.snapshot()
        target = snap.log_end_offset if before_offset == HIGH_WATERMARK else before_offset
        if target < 0 or target > snap.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {snap.topic}-{snap.partition} before offset {before_offset}: it must "
                f"be in [0, {snap.log_end_offset}] (at most the log end offset), or {HIGH_WATERMARK} for the log end",
                log_start_offset=snap.log_start_offset,
                log_end_offset=snap.log_end_offset,
            )
        if target <= snap.log_start_offset:
            return DeleteRecordsResult(snap.topic, snap.partition, snap.log_start_offset, 0, 0, 0, None)
        files = [f for f in snap.files if f.max_offset < target]
        version = _commit_removal(log_, snap, files, target, now_ms, "delete_records", {
            "before_offset": target,
            "files_deleted": len(files),
            "now_ms": now_ms,
        })
        return DeleteRecordsResult(snap.topic, snap.partition, target, len(files),
                                   sum(f.size_bytes for f in files), sum(f.num_records for f in files), version)

    return delta.retry_on_conflict(f"DeleteRecords on {log_.topic}-{log_.partition}", MAX_ATTEMPTS, attempt,
                                   backoff=False)


def _commit_removal(log_: PartitionLog, snap: LogSnapshot, files: list[DataFile], new_start: int, now_ms: int,
                    operation: str, metadata: dict[str, object]) -> int:
    """Remove ``files`` and set the log start offset in one commit based on ``snap``'s version.

    The commit is built on a handle loaded at exactly that version (not the partition's shared handle,
    which a concurrent reader may have moved on), so the commit's conflict check (:func:`deltalog.log.delta.commit`)
    sees every commit since the plan: a concurrent append is rebased over, a concurrent removal of the same files
    (another engine's OPTIMIZE included) or a concurrent move of the log start fails it, and retention plans again
    over the files then in the table. Returns the commit's own version.
    """
    dt = delta.open_table(log_.storage, log_.uri)
    dt.load_as_version(snap.version)
    commit_id = delta.commit(
        dt, [delta.remove_action(f, now_ms) for f in files],
        txns={delta.TXN_LOG_START_OFFSET: new_start}, metadata=metadata, operation=operation,
    )
    return delta.committed_version(dt, snap.version, commit_id)


def apply_retention(logs: LogManager, topic: str | None = None, *, keep_going: bool = False,
                    only_due: bool = False, progress: Callable[[int, int, str], None] | None = None
                    ) -> list[RetentionResult]:
    """Kafka's ``cleanupLogs``: retention over every partition (of ``topic``, or of the store).

    Each partition is done under its lease, so never while a cleaning pass runs on it; one whose lease
    another run holds is skipped this time (see :meth:`~deltalog.log.log_manager.LogManager.each_leased`).
    With ``only_due`` (the cleaner's cycle) a partition whose latest snapshot has no segment to delete is
    neither leased nor reported: its cost is the refresh of its snapshot (nothing read when no commit
    landed since this process last read it; in a cycle, :meth:`LogManager.snapshot`'s, shared with the cycle's
    other steps). Partitions go :attr:`LogManager.walk_threads` at a time with ``keep_going``.
    ``progress``: told ``(done, total, partition)`` as it goes.
    """
    def due(log_: PartitionLog) -> bool:
        try:
            snap = logs.snapshot(log_)
        except ForeignCommitError:  # deltalog deletes nothing on top of another engine's change: the cycle names it
            return False
        return bool(deletable_segments(snap, logs.clock.now_ms()))

    return logs.each_leased(topic, "retention", lambda log_: delete_old_segments(log_, logs.clock.now_ms()),
                            keep_going=keep_going, needed=due if only_due else None, progress=progress)
