"""The log cleaner: the loop around cleaning passes (Kafka's ``LogCleaner``; orchestration, not policy).

One **cycle** over a store does what Kafka's broker does on its background threads (seed 001, "Detailed
mechanics, retention" and "Choosing the filthiest log"):

1. retention (:mod:`deltalog.log.retention`) on every partition: ``delete`` and ``compact,delete`` topics lose
   old segments, any topic loses segments below its log start offset;
2. cleaning passes, filthiest partition first (:class:`~deltalog.cleaner.cleaner_manager.CleanerManager`), until no
   partition is eligible; ``log.cleaner.threads`` passes run side by side as concurrent Spark jobs on the
   one session, each with its share of ``log.cleaner.dedupe.buffer.size``. As in Kafka, a
   ``compact,delete`` partition has retention applied right after it is cleaned;
3. VACUUM (:mod:`deltalog.log.vacuum`) of files past ``file.delete.delay.ms``;
4. metrics (:mod:`deltalog.cleaner.metrics`) appended to the store's metrics table.

Every step on a partition holds its lease (:mod:`deltalog.log.lease`), so two overlapping runs of the job
never work on one partition at once: the second skips what the first holds. A pass that throws marks
its partition uncleanable (:mod:`deltalog.cleaner.uncleanable`) and the cycle goes on with the others, as Kafka's
``tryCleanFilthiestLog`` does; a pass that merely lost a commit race (a concurrent DeleteRecords, say) is
not a fault and is tried again next cycle.

:meth:`LogCleaner.run` repeats cycles, sleeping ``log.cleaner.backoff.ms`` when a cycle found nothing to
clean (Kafka's ``CleanerThread.doWork``); sleeping goes through an injectable function so tests drive it
with the manual clock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.cleaner.uncleanable import Quarantine, UncleanableMark
from deltalog.errors import CommitConflictError, PartitionBusyError

if TYPE_CHECKING:
    from deltalog.cleaner.cleaner import CleanResult
    from deltalog.log.retention import RetentionResult
    from deltalog.log.vacuum import VacuumResult
    from deltalog.store import Store

log = logging.getLogger(__name__)

PartitionId = tuple[str, int]
#: Seconds between the progress lines a long pass logs.
DEFAULT_PROGRESS_INTERVAL_S = 30.0
#: Upper bound on passes in one cycle, so a bug can never spin forever.
MAX_PASSES_PER_CYCLE = 100_000


# -- one pass ---------------------------------------------------------------------------------------------


class PassProgress:
    """Logs a line every ``interval_s`` while a pass runs: elapsed time and the Spark tasks done so far.

    The pass's Spark jobs run in a job group of their own, so the line counts only this pass's tasks even
    when several passes run side by side.
    """

    def __init__(self, spark: Any, ltc: LogToClean, interval_s: float) -> None:
        snap = ltc.snapshot
        self.name = f"{snap.topic}-{snap.partition}"
        self.group = f"deltalog-clean-{snap.topic}-{snap.partition}-{id(self):x}"
        self.section = (ltc.first_dirty_offset, ltc.first_uncleanable_offset)
        self.bytes = ltc.cleanable_bytes
        self.spark = spark
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def tasks(self) -> tuple[int, int]:
        """(completed, total) tasks of this pass's Spark jobs so far."""
        tracker = self.spark.sparkContext.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def line(self) -> str:
        done, total = self.tasks()
        return (f"cleaning {self.name}: {time.monotonic() - self._started:,.0f}s, dirty section "
                f"[{self.section[0]}, {self.section[1]}) of {self.bytes:,} bytes, {done}/{total} Spark tasks done")

    def __enter__(self) -> PassProgress:
        self._started = time.monotonic()
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group, f"deltalog: clean {self.name}", interruptOnCancel=False)
        log.info("cleaning %s: dirty section [%d, %d), %d bytes", self.name, *self.section, self.bytes)

        def report() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    log.info("%s", self.line())
                except Exception as e:  # the status tracker is best effort
                    log.debug("no progress for %s: %s", self.name, e)

        self._thread = threading.Thread(target=report, name=f"progress-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        sc = self.spark.sparkContext
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


def clean_one(store: Store, ltc: LogToClean, *, map_capacity: int | None = None,
              progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S) -> CleanResult | None:
    """One pass over the partition ``ltc`` was planned on, under the partition's lease.

    Raises :class:`PartitionBusyError` when another run holds the lease. Under the lease the range is
    planned again if the table moved since ``ltc`` (None when nothing is left to clean), the pass's
    figures are recorded for the metrics, and a ``compact,delete`` partition has retention applied right
    after the pass, as Kafka's cleaner does.
    """
    from deltalog.cleaner.cleaner import Cleaner
    from deltalog.cleaner.metrics import record_clean
    from deltalog.log.retention import delete_old_segments

    topic, partition = ltc.snapshot.topic, ltc.snapshot.partition
    plog = store.log(topic, partition)
    with store.leases.hold(topic, partition, "clean", heartbeat=True):
        snap = plog.snapshot()
        if snap.version != ltc.snapshot.version:
            ltc = LogToClean.of(snap, store.clock.now_ms())
            if ltc.first_uncleanable_offset <= ltc.first_dirty_offset:
                return None
        with PassProgress(store.spark, ltc, progress_interval_s):
            result = Cleaner(store.spark, store.config).clean(ltc, plog, map_capacity)
        record_clean(store.root, result)
        if snap.config.delete:
            try:
                delete_old_segments(plog, store.clock.now_ms())
            except CommitConflictError as e:  # the pass itself committed; retention runs again next cycle
                log.info("retention after cleaning %s-%d lost a race: %s", topic, partition, e)
    return result


# -- a cycle ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassFailure:
    """A pass that threw: its partition is now uncleanable."""

    topic: str
    partition: int
    error_type: str
    message: str


@dataclass(frozen=True)
class CycleResult:
    """What one cycle did, as data (also summarised in the metrics table)."""

    started_ms: int
    finished_ms: int
    retention: tuple[RetentionResult, ...]
    cleans: tuple[CleanResult, ...]
    failures: tuple[PassFailure, ...]
    conflicts: tuple[PartitionId, ...]  # passes that lost a commit race; tried again next cycle
    busy: tuple[PartitionId, ...]  # partitions another run held
    uncleanable: tuple[PartitionId, ...]  # skipped: marked before this cycle
    vacuum: tuple[VacuumResult, ...] = field(default=())

    @property
    def did_clean(self) -> bool:
        return bool(self.cleans)

    @property
    def segments_deleted(self) -> int:
        return sum(r.segments_deleted for r in self.retention)

    @property
    def files_vacuumed(self) -> int:
        return sum(v.files_deleted for v in self.vacuum)

    def summary(self) -> str:
        return (f"cleaner cycle: {len(self.cleans)} pass(es) on "
                f"{len({(c.topic, c.partition) for c in self.cleans})} partition(s), "
                f"{self.segments_deleted} segment(s) deleted by retention, {self.files_vacuumed} file(s) vacuumed, "
                f"{len(self.failures)} newly uncleanable, {len(self.uncleanable)} skipped as uncleanable, "
                f"{len(self.busy)} busy, {len(self.conflicts)} lost race(s); "
                f"{self.finished_ms - self.started_ms} ms")


def _sleep_wall(ms: int, stop: threading.Event) -> None:
    stop.wait(ms / 1000.0)


class LogCleaner:
    """Runs cleaner cycles over one store: retention, cleaning passes in ``threads`` workers, VACUUM, metrics."""

    def __init__(self, store: Store, *, threads: int | None = None, vacuum: bool = True, metrics: bool = True,
                 progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S,
                 sleep: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.threads = threads or store.config.cleaner_threads
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, not {self.threads}")
        self.vacuum = vacuum
        self.metrics = metrics
        self.progress_interval_s = progress_interval_s
        self.quarantine = Quarantine(store.root)
        self.stop_event = threading.Event()
        self._sleep = sleep
        self.cycles_run = 0

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current step (safe from another thread or a signal handler)."""
        self.stop_event.set()

    def sleep(self, ms: int) -> None:
        """Back off for ``ms`` (wall time by default; tests inject the manual clock's ``advance``)."""
        if self._sleep is not None:
            self._sleep(ms)
        else:
            _sleep_wall(ms, self.stop_event)

    # -- the steps of a cycle ----------------------------------------------------------------------------

    def _clean_all(self) -> tuple[list[CleanResult], list[PassFailure], list[PartitionId], list[PartitionId],
                                  list[PartitionId]]:
        from deltalog.cleaner.cleaner_manager import CleanerManager

        store = self.store
        manager = CleanerManager(store)
        lock = threading.Lock()
        in_progress: set[PartitionId] = set()
        done_for_now: set[PartitionId] = set()  # busy, failed, lost a race, or made no progress
        uncleanable = self.quarantine.partitions()
        cleans: list[CleanResult] = []
        failures: list[PassFailure] = []
        conflicts: list[PartitionId] = []
        busy: list[PartitionId] = []
        passes = [0]
        # each thread's pass gets an equal share of the dedupe buffer (Kafka: buffer size / threads)
        capacity = dataclasses.replace(store.config, cleaner_threads=self.threads).offset_map_capacity

        def worker() -> None:
            while not self.stop_event.is_set():
                with lock:
                    if passes[0] >= MAX_PASSES_PER_CYCLE:
                        return
                    ltc = manager.grab_filthiest(store.clock.now_ms(),
                                                 exclude=in_progress | done_for_now | uncleanable)
                    if ltc is None:
                        return
                    tp = (ltc.snapshot.topic, ltc.snapshot.partition)
                    in_progress.add(tp)
                    passes[0] += 1
                try:
                    result = clean_one(store, ltc, map_capacity=capacity,
                                       progress_interval_s=self.progress_interval_s)
                except PartitionBusyError:
                    with lock:
                        busy.append(tp)
                        done_for_now.add(tp)
                except CommitConflictError as e:
                    log.info("cleaning %s-%d lost a commit race; it is tried again next cycle: %s", *tp, e)
                    with lock:
                        conflicts.append(tp)
                        done_for_now.add(tp)
                except Exception as e:  # Kafka's tryCleanFilthiestLog: mark uncleanable, carry on
                    mark = self._mark_uncleanable(ltc, e)
                    with lock:
                        failures.append(PassFailure(tp[0], tp[1], mark.error_type, mark.message))
                        done_for_now.add(tp)
                else:
                    with lock:
                        if result is None or result.end_offset <= ltc.first_dirty_offset:
                            done_for_now.add(tp)
                        else:
                            cleans.append(result)
                finally:
                    with lock:
                        in_progress.discard(tp)

        if self.threads == 1:
            worker()
        else:
            workers = [threading.Thread(target=worker, name=f"deltalog-cleaner-thread-{i}")
                       for i in range(self.threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        return cleans, failures, conflicts, busy, sorted(uncleanable)

    def _mark_uncleanable(self, ltc: LogToClean, error: BaseException) -> UncleanableMark:
        snap = ltc.snapshot
        log.error("Unexpected exception thrown when cleaning log %s-%d (log start %d, log end %d). "
                  "Marking its partition (%s-%d) as uncleanable", snap.topic, snap.partition,
                  snap.log_start_offset, snap.log_end_offset, snap.topic, snap.partition, exc_info=error)
        return self.quarantine.mark(
            snap.topic, snap.partition, error, self.store.clock.now_ms(), owner=self.store.leases.owner,
            first_dirty_offset=ltc.first_dirty_offset, first_uncleanable_offset=ltc.first_uncleanable_offset,
        )

    def _each_partition(self, purpose: str, step: Callable[[Any], Any]) -> list[Any]:
        """Run ``step(partition log)`` on every partition under its lease; busy ones are skipped and an
        error is logged without stopping the cycle (Kafka's retention task logs and goes on, too)."""
        out = []
        for plog in self.store.logs():
            lease = self.store.leases.acquire(plog.topic, plog.partition, purpose)
            if lease is None:
                log.info("%s skipped %s-%d: another run holds its lease", purpose, plog.topic, plog.partition)
                continue
            try:
                out.append(step(plog))
            except Exception as e:
                log.error("%s of %s-%d failed; it is tried again next cycle", purpose, plog.topic, plog.partition,
                          exc_info=e)
            finally:
                lease.release()
        return out

    def run_cycle(self) -> CycleResult:
        """Retention, cleaning until nothing is eligible, VACUUM, metrics: one full cycle over the store."""
        from deltalog.log.retention import delete_old_segments
        from deltalog.log.vacuum import vacuum

        store = self.store
        started = store.clock.now_ms()
        retention = [r for r in self._each_partition("retention", lambda plog: delete_old_segments(
            plog, store.clock.now_ms())) if r.segments_deleted]
        cleans, failures, conflicts, busy, uncleanable = self._clean_all()
        vacuumed = []
        if self.vacuum:
            vacuumed = [v for v in self._each_partition("vacuum", lambda plog: vacuum(
                plog, store.clock.now_ms(), dry_run=False)) if v.files]
        result = CycleResult(started, store.clock.now_ms(), tuple(retention), tuple(cleans), tuple(failures),
                             tuple(conflicts), tuple(busy), tuple(uncleanable), tuple(vacuumed))
        self.cycles_run += 1
        if self.metrics:
            from deltalog.cleaner.metrics import record_cycle

            record_cycle(store, result)
        log.info("%s", result.summary())
        return result

    def run(self, *, once: bool = False, max_cycles: int | None = None,
            on_cycle: Callable[[CycleResult], None] | None = None) -> int:
        """Run cycles until :meth:`stop`, ``max_cycles``, or (``once``) after the first one; returns how many ran.

        After a cycle that cleaned nothing the cleaner sleeps ``log.cleaner.backoff.ms``; after one that
        did, it looks again at once (new data may have arrived meanwhile), as Kafka's cleaner threads do.
        ``on_cycle`` is called with each cycle's result as it finishes.
        """
        n = 0
        while not self.stop_event.is_set():
            cycle = self.run_cycle()
            n += 1
            if on_cycle is not None:
                on_cycle(cycle)
            if once or (max_cycles is not None and n >= max_cycles):
                break
            if not cycle.did_clean and not self.stop_event.is_set():
                log.info("nothing to clean; backing off %d ms (log.cleaner.backoff.ms)", self.store.config.backoff_ms)
                self.sleep(self.store.config.backoff_ms)
        return n
