"""Which partition to clean next, and the cleaning state of every partition (Kafka's LogCleanerManager).

Kafka's LogCleanerManager owns three things (its ``inProgress`` map, ``uncleanablePartitions`` and the checkpoints it reads for ``grabFilthiestCompactedLog``):

* the **in-progress** set: a partition being cleaned is never handed to a second cleaner thread. Here that
  is an in-process set for the threads of one cleaner, and the partition's lease
  (:mod:`deltalog.log.lease`) across processes;
* the **uncleanable** set (:mod:`deltalog.cleaner.uncleanable`), durable here;
* the **checkpoints** (first dirty offsets), which deltalog keeps in each partition's Delta log, committed
  with the data they describe (:mod:`deltalog.log.delta`).

:meth:`LogCleanerManager.grab_filthiest` is Kafka's ``grabFilthiestCompactedLog``: it ranks every compacted
partition that is neither in progress nor uncleanable by cleanable ratio, keeps the eligible ones (ratio
above ``min.cleanable.dirty.ratio``, or ``max.compaction.lag.ms`` passed with cleanable bytes), marks the
filthiest in progress and returns it. Everything is planned from Delta snapshots: no data is read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.cleaner.uncleanable import PartitionId, UncleanableMark, UncleanablePartitions
from deltalog.errors import CorruptLogError, ForeignCommitError, UnknownTopicOrPartitionError
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import PartitionLog
from deltalog.storage_faults import is_transient

log = logging.getLogger(__name__)


class LogCleanerManager:
    """The cleaning state of one store's partitions, shared by the threads of one cleaner."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        self.uncleanable = UncleanablePartitions(logs.storage)
        self._lock = threading.Lock()
        self._in_progress: set[PartitionId] = set()
        #: Partitions the last ranking skipped because another engine changed their records, with the error.
        self.foreign_skipped: dict[PartitionId, ForeignCommitError] = {}
        #: Told each ranking's eligible partitions (:meth:`logs_to_clean`): ``store.clean`` starts Spark there when
        #: a pass will run, from the ranking its loop makes anyway instead of a ranking of its own before it.
        self.on_ranked: Callable[[list[LogToClean]], None] | None = None

    # -- selection -------------------------------------------------------------------------------------

    def logs_to_clean(self, now_ms: int, topics: Iterable[str] | None = None,
                      exclude: Iterable[PartitionId] = (),
                      on_damage: Callable[[PartitionLog, CorruptLogError], None] | None = None) -> list[LogToClean]:
        """Eligible partitions that are neither uncleanable nor excluded, filthiest first.

        A partition whose Delta log cannot be read is left out and given to ``on_damage`` (the loop marks it
        uncleanable), so one damaged partition never stops the others being ranked; without ``on_damage`` its
        :class:`CorruptLogError` propagates."""
        skip = set(exclude)
        candidates = []
        for plog in self.logs.logs_of(topics):
            if (plog.topic, plog.partition) in skip:
                continue
            try:
                snap = self.logs.snapshot(plog)  # in a cycle, the one its first look took
            except ForeignCommitError as e:
                # Another engine changed records (DELETE, UPDATE, MERGE...): never clean on top of that, and
                # do not mark the partition uncleanable either (nothing of deltalog's failed; a RESTORE by
                # the user makes it cleanable again). Skipped and reported, every loop while it stands.
                log.warning("not cleaning %s-%d: %s", plog.topic, plog.partition, e)
                self.foreign_skipped[(plog.topic, plog.partition)] = e
                continue
            except CorruptLogError as e:
                if on_damage is None:
                    raise
                on_damage(plog, e)
                continue
            if not snap.config.compact:
                continue
            if self.uncleanable.get(snap.topic, snap.partition, snap.topic_id) is not None:
                continue
            ltc = LogToClean.for_log(plog, snap, now_ms)
            if ltc.eligible:
                candidates.append(ltc)
        ranked = sorted(candidates, reverse=True)
        if self.on_ranked is not None:
            self.on_ranked(ranked)
        return ranked

    def grab_filthiest(self, now_ms: int, topics: Iterable[str] | None = None,
                       exclude: Iterable[PartitionId] = (),
                       on_damage: Callable[[PartitionLog, CorruptLogError], None] | None = None
                       ) -> LogToClean | None:
        """The eligible partition with the highest cleanable ratio, now marked in progress; None if none."""
        with self._lock:
            ranked = self.logs_to_clean(now_ms, topics, set(exclude) | self._in_progress, on_damage)
            if not ranked:
                return None
            chosen = ranked[0]
            self._in_progress.add((chosen.snapshot.topic, chosen.snapshot.partition))
            return chosen

    def grab_filthiest_batch(self, now_ms: int, topics: Iterable[str] | None = None,
                             exclude: Iterable[PartitionId] = (),
                             on_damage: Callable[[PartitionLog, CorruptLogError], None] | None = None, *,
                             budget: int, pass_capacity: int, limit: int,
                             backlog: list[LogToClean] | None = None) -> list[LogToClean]:
        """The eligible partitions a round cleans side by side (their Spark work in shared jobs), filthiest first,
        now marked in progress: as many as ``limit``, while the keys their maps may hold (each pass's cleanable
        records, at most ``pass_capacity``: its share of the dedupe buffer) stay within ``budget`` (the whole
        buffer); always at least the filthiest one. Empty if none is eligible.

        ``backlog`` (the loop's own list, kept between its rounds) holds what an earlier call ranked and did not take:
        a round is taken from it, each partition planned again at ``now_ms`` from the snapshot it was ranked on (its
        pass plans again under its lease if the table moved since), and every partition is ranked again only once
        the backlog has none left. A store of many partitions is then walked once per run of the loop, not once per
        round; a partition dirtied meanwhile waits for that next ranking, as one dirtied during Kafka's pass waits
        for the next ``grabFilthiestCompactedLog``."""
        with self._lock:
            skip = set(exclude) | self._in_progress
            ranked = [ltc for ltc in (backlog or ()) if (ltc.snapshot.topic, ltc.snapshot.partition) not in skip]
            ranked = [ltc for ltc in (ltc.at(now_ms) for ltc in ranked) if ltc.eligible]
            if not ranked:
                ranked = self.logs_to_clean(now_ms, topics, skip, on_damage)
            chosen: list[LogToClean] = []
            left: list[LogToClean] = []
            used = 0
            for ltc in ranked:
                need = min(_cleanable_records(ltc), pass_capacity)
                if len(chosen) >= limit or (chosen and used + need > budget):
                    left.append(ltc)  # a smaller one further down may still fit
                    continue
                chosen.append(ltc)
                used += need
            for ltc in chosen:
                self._in_progress.add((ltc.snapshot.topic, ltc.snapshot.partition))
            if backlog is not None:
                backlog[:] = left
            return chosen

    def done_cleaning(self, tp: PartitionId) -> None:
        """Kafka's ``doneCleaning``: the partition may be chosen again."""
        with self._lock:
            self._in_progress.discard(tp)

    # -- the uncleanable set ---------------------------------------------------------------------------

    def mark_uncleanable(self, ltc: LogToClean, error: BaseException, now_ms: int, owner: str
                         ) -> UncleanableMark | None:
        """Kafka's ``markPartitionUncleanable``, for a partition whose pass threw.

        Not when the topic was deleted (or deleted and created again) meanwhile: the error is then about a
        partition that no longer exists, and Kafka drops deleted partitions from the set. Returns the
        mark, or None when nothing was marked.
        """
        snap = ltc.snapshot
        if is_transient(error):  # the storage's trouble (a full disk), not the log's: tried again next time
            log.warning("cleaning %s-%d failed on the storage; not marking it uncleanable: %s", snap.topic,
                        snap.partition, error)
            return None
        if not self._still_exists(snap.topic, snap.partition, snap.topic_id):
            log.info("cleaning %s-%d failed after its topic was deleted; not marking it uncleanable: %s",
                     snap.topic, snap.partition, error)
            return None
        # A damaged file is named by its error, which is all there is to say: no stack (Spark's would be pages).
        damaged = isinstance(error, CorruptLogError)
        log.error("%s when cleaning log %s-%d (log start %d, log end %d). Marking its partition (%s-%d) as "
                  "uncleanable%s", "Damage found" if damaged else "Unexpected exception thrown", snap.topic,
                  snap.partition, snap.log_start_offset, snap.log_end_offset, snap.topic, snap.partition,
                  f": {error}" if damaged else "", exc_info=None if damaged else error)
        return self.uncleanable.mark(
            snap.topic, snap.partition, error, now_ms, owner=owner, topic_id=snap.topic_id,
            first_dirty_offset=ltc.first_dirty_offset, first_uncleanable_offset=ltc.first_uncleanable_offset,
        )

    def mark_damaged(self, plog: PartitionLog, error: CorruptLogError, now_ms: int, owner: str
                     ) -> UncleanableMark | None:
        """``markPartitionUncleanable`` for a partition whose Delta log cannot be read at all (no snapshot, so
        no offsets to record); not when its topic was deleted meanwhile, nor when the store could not be reached
        (the log may be intact: it is looked at again next time)."""
        if is_transient(error):
            log.warning("the Delta log of %s-%d could not be read from the storage; not marking it uncleanable: %s",
                        plog.topic, plog.partition, error)
            return None
        try:
            topic_id = self.logs.topic_id(plog.topic)
        except UnknownTopicOrPartitionError:
            return None
        if plog.partition not in self.logs.partitions(plog.topic):
            return None
        log.error("The Delta log of %s-%d cannot be read. Marking its partition as uncleanable: %s",
                  plog.topic, plog.partition, error)
        return self.uncleanable.mark(plog.topic, plog.partition, error, now_ms, owner=owner, topic_id=topic_id)

    def uncleanable_partitions(self) -> set[PartitionId]:
        """The partitions of existing topics that are marked uncleanable."""
        out = set()
        for mark in self.uncleanable.marks():
            if self._current_mark(mark.topic, mark.partition) is not None:
                out.add((mark.topic, mark.partition))
        return out

    def _current_mark(self, topic: str, partition: int) -> UncleanableMark | None:
        try:
            topic_id = self.logs.topic_id(topic)
        except UnknownTopicOrPartitionError:
            return None
        return self.uncleanable.get(topic, partition, topic_id)

    def uncleanable_mark(self, topic: str, partition: int) -> UncleanableMark | None:
        """The mark on a partition of the topic as it exists now, if any."""
        return self._current_mark(topic, partition)

    def _still_exists(self, topic: str, partition: int, topic_id: str | None) -> bool:
        try:
            return partition in self.logs.partitions(topic) and self.logs.topic_id(topic) == topic_id
        except UnknownTopicOrPartitionError:
            return False


def _cleanable_records(ltc: LogToClean) -> int:
    """The records of the cleanable section, from the Delta stats: the most keys its pass's map can hold."""
    start, stop = ltc.first_dirty_offset, ltc.first_uncleanable_offset
    return sum(f.num_records for f in ltc.snapshot.files if f.min_offset < stop and f.max_offset >= start)
