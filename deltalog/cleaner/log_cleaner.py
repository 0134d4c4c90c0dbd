"""The log cleaner: the one loop around cleaning passes (Kafka's ``LogCleaner``; orchestration, not policy).

Kafka has exactly one loop: each ``CleanerThread.doWork`` calls ``cleanFilthiestLog``, which asks the
``LogCleanerManager`` for the filthiest log, cleans it, and on an unexpected error marks the partition
uncleanable and carries on (seed 001, "Choosing the filthiest log", "The cleaning state machine"). deltalog
has the same single loop, :meth:`LogCleaner.clean_filthiest_logs`, and every way of cleaning goes through
it: ``store.clean()``, ``deltalog clean``, ``deltalog cleaner run`` and the Databricks job. It runs
``log.cleaner.threads`` workers side by side (concurrent Spark jobs on one session), each pass with its
share of ``log.cleaner.dedupe.buffer.size`` (Kafka: buffer / threads), and has one rule for each outcome:

* **a pass that throws** marks its partition uncleanable (:mod:`deltalog.cleaner.uncleanable`; not when the
  topic was deleted meanwhile) and the loop goes on with the others; the failures are reported at the end
  (``store.clean()`` then raises one :class:`~deltalog.errors.CleaningFailedError` naming them);
* **a pass the storage failed** (a full disk: :mod:`deltalog.storage_faults`) is not a fault of the log either:
  like Kafka, which marks a partition uncleanable only for errors of its log, the partition is not marked and is
  tried again next cycle (after ``log.cleaner.backoff.ms`` when the cycle cleaned nothing); ``store.clean()``
  raises the :class:`~deltalog.errors.StorageFullError` once every other partition was tried;
* **a lost commit race** (a concurrent DeleteRecords, another cleaner) is not a fault: the partition is
  left for the next call or cycle;
* **a partition another run holds** (its lease) is skipped this time;
* **no progress** (a pass that moved the checkpoint nowhere) ends that partition's turn, so the loop
  cannot spin;
* **the check after clean** (``deltalog.check.after.clean``) runs on every partition the loop cleaned;
  a broken guarantee marks the partition uncleanable, like any failure, and is reported.

One **cycle** (:meth:`LogCleaner.run_cycle`, what the scheduled job runs) is what Kafka's broker does on
its background threads: retention on every partition (``delete`` and ``compact,delete`` topics lose old
segments, any topic loses segments below its log start offset), the cleaning loop, VACUUM of files past
``file.delete.delay.ms``, and metrics appended to the store's metrics table. Every step on a partition
holds its lease (:mod:`deltalog.log.lease`), so two overlapping runs never work on one partition at once.

:meth:`LogCleaner.run` repeats cycles, sleeping ``log.cleaner.backoff.ms`` after a cycle that cleaned
nothing (Kafka's ``CleanerThread.doWork``); sleeping goes through an injectable function so tests drive
it with the manual clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from deltalog.cleaner import metrics
from deltalog.cleaner.cleaner import Cleaner, CleanResult
from deltalog.cleaner.cleaner_manager import LogCleanerManager
from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.cleaner.progress import DEFAULT_PROGRESS_INTERVAL_S, PassProgress, ProgressListener
from deltalog.cleaner.uncleanable import PartitionId
from deltalog.config import CleanerConfig
from deltalog.errors import (
    CheckFailedError,
    CleaningFailedError,
    CommitConflictError,
    CorruptLogError,
    DeltalogError,
    InvalidConfigError,
    PartitionBusyError,
    PartitionUncleanableError,
    StorageFullError,
    error_chain,
    plain,
)
from deltalog.groups.offsets_topic import OffsetsTopic
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import PartitionLog
from deltalog.log.retention import RetentionResult, apply_retention, delete_old_segments
from deltalog.log.transaction_coordinator import TransactionCoordinator
from deltalog.log.vacuum import VacuumResult, vacuum_staged, vacuum_store, vacuum_temp_files
from deltalog.storage_faults import is_transient

T = TypeVar("T")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: What Spark's errors say when its context was stopped under a running job (its JVM's shutdown hook ran).
_SPARK_STOPPED = ("SparkContext was shut down", "Cannot call methods on a stopped SparkContext")
#: Upper bound on passes in one run of the loop, so a bug can never spin forever.
MAX_PASSES = 100_000

#: Returns the Spark session passes run on; called only when a pass is about to run, so a loop with
#: nothing to clean never starts Spark.
SparkProvider = Callable[[], "SparkSession"]
#: ``deltalog.check.after.clean``: given the passes of one run of the loop (one topic's at a time), returns
#: the partitions whose guarantees broke, each with the error that says how.
CheckAfterClean = Callable[[str, Sequence[CleanResult]], dict[int, CheckFailedError]]


@dataclass(frozen=True)
class PassFailure:
    """A partition whose pass (or the check after it) threw: it is now uncleanable."""

    topic: str
    partition: int
    error_type: str
    message: str


@dataclass(frozen=True)
class CleaningRound:
    """What one run of the loop did, as data."""

    cleans: tuple[CleanResult, ...]
    failures: tuple[PassFailure, ...]  # newly uncleanable
    conflicts: tuple[PartitionId, ...]  # passes that lost a commit race; tried again next time
    busy: tuple[PartitionId, ...]  # partitions another run held
    uncleanable: tuple[PartitionId, ...]  # skipped: marked uncleanable before this round
    errors: tuple[BaseException, ...] = field(default=(), repr=False, compare=False)
    interrupted: tuple[PartitionId, ...] = ()  # passes cut short by the cleaner being stopped; not failures
    #: Passes the storage failed (a full disk): not marked uncleanable, tried again next time; their errors.
    retried: tuple[PassFailure, ...] = ()
    retried_errors: tuple[BaseException, ...] = field(default=(), repr=False, compare=False)


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
    #: Committed offsets removed by ``offsets.retention.minutes`` this cycle.
    offsets_expired: int = 0
    #: Passes the storage failed (a full disk): not marked uncleanable, tried again next cycle.
    retried: tuple[PassFailure, ...] = ()

    @property
    def did_clean(self) -> bool:
        return bool(self.cleans)

    @property
    def segments_deleted(self) -> int:
        return sum(r.segments_deleted for r in self.retention)

    @property
    def files_vacuumed(self) -> int:
        return sum(v.files_deleted for v in self.vacuum)

    @property
    def newly_uncleanable(self) -> list[PartitionId]:
        return [(f.topic, f.partition) for f in self.failures]

    def summary(self) -> str:
        return (f"cleaner cycle: {len(self.cleans)} pass(es) on "
                f"{len({(c.topic, c.partition) for c in self.cleans})} partition(s), "
                f"{self.segments_deleted} segment(s) deleted by retention, {self.files_vacuumed} file(s) vacuumed, "
                f"{self.offsets_expired} committed offset(s) expired, "
                f"{len(self.failures)} newly uncleanable, {len(self.uncleanable)} skipped as uncleanable, "
                f"{len(self.busy)} busy, {len(self.conflicts)} lost race(s), "
                f"{len(self.retried)} failed on the storage (tried again next cycle); "
                f"{self.finished_ms - self.started_ms} ms")


def _sleep_wall(ms: int, stop: threading.Event) -> None:
    stop.wait(ms / 1000.0)


class LogCleaner:
    """The cleaning loop over one store's partitions, and the job's cycles around it.

    It takes what it needs: the store's :class:`~deltalog.log.log_manager.LogManager`, a way to get the
    Spark session, and the cleaner-wide settings.
    """

    def __init__(self, logs: LogManager, spark: SparkProvider, config: CleanerConfig, *,
                 threads: int | None = None, vacuum: bool = True, metrics: bool = True,
                 progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S, progress: ProgressListener | None = None,
                 check_after_clean: CheckAfterClean | None = None,
                 sleep: Callable[[int], None] | None = None, map_slots: int | None = None,
                 offsets: OffsetsTopic | None = None) -> None:
        self.logs = logs
        #: The store's committed offsets, whose expiry each cycle runs (see :meth:`expire_offsets`).
        self.offsets = offsets if offsets is not None else OffsetsTopic(logs, config)
        #: When each coordinator timer of the cycle last ran (see :meth:`_timer_due`).
        self._timers_ran_ms: dict[str, int] = {}
        self.spark = spark
        self.config = config
        self.threads = config.cleaner_threads if threads is None else threads
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise InvalidConfigError(f"threads must be an integer >= 1 (log.cleaner.threads), not {self.threads!r}")
        self.manager = LogCleanerManager(logs)
        self.vacuum = vacuum
        self.metrics = metrics
        self.progress_interval_s = progress_interval_s
        #: Told how each pass is going (None: the progress is logged); see :mod:`deltalog.cleaner.progress`.
        self.progress = progress
        self.check_after_clean = check_after_clean
        #: Offset map slots per pass, when set: Kafka's tests build a Cleaner on a small map the same way.
        self.map_slots = map_slots
        self.stop_event = threading.Event()
        self._sleep = sleep
        self.cycles_run = 0

    @property
    def clock(self):  # noqa: ANN201 - the log manager's Clock
        return self.logs.clock

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current step (safe from another thread or a signal handler)."""
        self.stop_event.set()

    def sleep(self, ms: int) -> None:
        """Back off for ``ms`` (wall time by default; tests inject the manual clock's ``advance``)."""
        if self._sleep is not None:
            self._sleep(ms)
        else:
            _sleep_wall(ms, self.stop_event)

    # -- one pass ----------------------------------------------------------------------------------------

    def _cleaner(self) -> Cleaner:
        """A pass's Cleaner: its share of the dedupe buffer is buffer / threads, as each Kafka CleanerThread's."""
        return Cleaner(self.spark(), self.config, threads=self.threads, map_slots=self.map_slots)

    def clean_log(self, ltc: LogToClean) -> CleanResult | None:
        """One pass over the partition ``ltc`` was planned on, under the partition's lease.

        Raises :class:`PartitionBusyError` when another run holds the lease. Under the lease the range is
        planned again if the table moved since ``ltc`` (None when nothing is left to clean), the pass's
        figures are recorded for the metrics, and a ``compact,delete`` partition has retention applied right
        after the pass, as Kafka's cleaner does.
        """
        topic, partition = ltc.snapshot.topic, ltc.snapshot.partition
        plog = self.logs.log(topic, partition)
        with self.logs.leases.hold(topic, partition, "clean", heartbeat=True):
            # A pass replaces whole segments' files: files another engine's OPTIMIZE merged across segments are
            # first put back into deltalog's layout (no record changes), so none also holds records it keeps.
            plog.relayout(self.clock.now_ms())
            snap = plog.snapshot()
            if snap.version != ltc.snapshot.version:
                ltc = LogToClean.for_log(plog, snap, self.clock.now_ms())
                if ltc.first_uncleanable_offset <= ltc.first_dirty_offset:
                    return None
            cleaner = self._cleaner()
            with PassProgress(cleaner.spark, ltc, self.progress_interval_s, self.progress):
                result = cleaner.clean(ltc, plog)
            metrics.record_clean(self.logs, result)
            if snap.config.delete:
                try:
                    delete_old_segments(plog, self.clock.now_ms())
                except CommitConflictError as e:  # the pass itself committed; retention runs again next time
                    log.info("retention after cleaning %s-%d lost a race: %s", topic, partition, e)
        return result

    # -- the loop ----------------------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> list[str]:
        """Kafka's coordinator timer, run before each cleaning loop: a transaction open for longer than its
        ``transaction.timeout.ms`` (its producer died) is aborted, so it stops holding its partitions' last
        stable offset, and so the cleaner's dirty section, back. Returns the transactional ids it completed;
        a failure is logged and the loop cleans all the same (the next loop tries again)."""
        done = self._guarded("aborting timed-out transactions", [], lambda: TransactionCoordinator(
            self.logs).abort_timed_out_transactions(self.clock.now_ms()))
        if done:
            log.info("aborted or completed %d timed-out transaction(s): %s", len(done), ", ".join(done))
        return done

    def expire_offsets(self) -> int:
        """Kafka's offset expiration timer (``offsets.retention.check.interval.ms``), run by each cycle: committed
        offsets older than ``offsets.retention.minutes`` go (tombstones in ``__consumer_offsets``, which this same
        loop then compacts). Returns how many went; a failure is logged and the cycle goes on."""
        now = self._timer_due("offsets", self.config.offsets_retention_check_interval_ms)
        if now is None:
            return 0
        return self._guarded("expiring committed offsets", 0,
                             lambda: sum(map(len, self.offsets.expire_offsets(now).values())))

    def expire_transactional_ids(self) -> list[str]:
        """Kafka's coordinator timer for ``transactional.id.expiration.ms`` (every
        ``transaction.remove.expired.transaction.cleanup.interval.ms``), run by each cycle. Returns the ids
        expired; a failure is logged and the cycle goes on."""
        now = self._timer_due("transactional ids",
                              self.config.transaction_remove_expired_transaction_cleanup_interval_ms)
        if now is None:
            return []
        done = self._guarded("expiring transactional ids", [], lambda: TransactionCoordinator(
            self.logs).expire_transactional_ids(now, self.config.transactional_id_expiration_ms))
        if done:
            log.info("expired %d transactional id(s) (transactional.id.expiration.ms): %s", len(done), ", ".join(done))
        return done

    def _timer_due(self, timer: str, interval_ms: int) -> int | None:
        """The time now if ``timer`` is due (at its first look, then once every ``interval_ms``), recording that it
        runs; None if it ran less than ``interval_ms`` ago."""
        now = self.clock.now_ms()
        last = self._timers_ran_ms.get(timer)
        if last is not None and now - last < interval_ms:
            return None
        self._timers_ran_ms[timer] = now
        return now

    @staticmethod
    def _guarded(what: str, empty: T, step: Callable[[], T]) -> T:
        """``step()``, or ``empty`` when it fails with a deltalog error (logged): a timer's failure never stops the
        cycle, and the timer tries again next time."""
        try:
            return step()
        except DeltalogError as e:
            log.warning("%s failed; tried again next time: %s", what, e)
            return empty

    def clean_filthiest_logs(self, topics: Iterable[str] | None = None) -> CleaningRound:
        """Clean, filthiest partition first, until no partition (of ``topics``, or of the store) is eligible.

        Kafka's ``cleanFilthiestLog`` in ``log.cleaner.threads`` workers. Nothing raises out of here for a
        partition's sake: failures, lost races and busy partitions are in the returned round.
        """
        wanted = list(topics) if topics is not None else None
        self.abort_timed_out_transactions()
        lock = threading.Lock()
        done_for_now: set[PartitionId] = set()  # busy, failed, lost a race, or made no progress
        uncleanable = self.manager.uncleanable_partitions()
        cleans: list[CleanResult] = []
        failures: list[PassFailure] = []
        errors: list[BaseException] = []
        conflicts: list[PartitionId] = []
        busy: list[PartitionId] = []
        interrupted: list[PartitionId] = []
        retried: list[PassFailure] = []
        retried_errors: list[BaseException] = []
        passes = [0]

        def fail(ltc: LogToClean, error: BaseException) -> None:
            snap = ltc.snapshot
            mark = self.manager.mark_uncleanable(ltc, error, self.clock.now_ms(), self.logs.leases.owner)
            with lock:
                done_for_now.add((snap.topic, snap.partition))
                if mark is not None:
                    failures.append(PassFailure(snap.topic, snap.partition, mark.error_type, mark.message))
                    errors.append(error)

        def damaged(plog: PartitionLog, error: CorruptLogError) -> None:
            """A partition whose Delta log cannot be read: marked uncleanable, the others still cleaned."""
            tp = (plog.topic, plog.partition)
            with lock:
                if tp in done_for_now:
                    return
                done_for_now.add(tp)
            mark = self.manager.mark_damaged(plog, error, self.clock.now_ms(), self.logs.leases.owner)
            if mark is not None:
                with lock:
                    failures.append(PassFailure(plog.topic, plog.partition, mark.error_type, mark.message))
                    errors.append(error)

        def worker() -> None:
            while not self.stop_event.is_set():
                with lock:
                    if passes[0] >= MAX_PASSES:
                        return
                    passes[0] += 1
                    exclude = done_for_now | uncleanable
                ltc = self.manager.grab_filthiest(self.clock.now_ms(), wanted, exclude=exclude, on_damage=damaged)
                if ltc is None:
                    return
                tp = (ltc.snapshot.topic, ltc.snapshot.partition)
                try:
                    result = self.clean_log(ltc)
                except PartitionBusyError:
                    with lock:
                        busy.append(tp)
                        done_for_now.add(tp)
                except CommitConflictError as e:
                    log.info("cleaning %s-%d lost a commit race; it is tried again next time: %s", *tp, e)
                    with lock:
                        conflicts.append(tp)
                        done_for_now.add(tp)
                except Exception as e:  # Kafka's tryCleanFilthiestLog: mark uncleanable, carry on
                    if self._stopping(e):
                        log.warning("cleaning %s-%d was cut short because the cleaner is stopping; it is not "
                                    "marked uncleanable and is cleaned next time: %s", *tp, e)
                        with lock:
                            interrupted.append(tp)
                            done_for_now.add(tp)
                    elif is_transient(e):
                        log.warning("cleaning %s-%d failed on the storage; it is not marked uncleanable and is "
                                    "cleaned next time: %s", *tp, e)
                        with lock:
                            retried.append(PassFailure(*tp, type(e).__name__, plain(str(e))))
                            retried_errors.append(e)
                            done_for_now.add(tp)
                    else:
                        fail(ltc, e)
                else:
                    with lock:
                        if result is None or result.end_offset <= ltc.first_dirty_offset:
                            done_for_now.add(tp)  # no progress: this partition's turn is over
                        else:
                            cleans.append(result)
                finally:
                    self.manager.done_cleaning(tp)

        if self.threads == 1:
            worker()
        else:
            workers = [threading.Thread(target=worker, name=f"deltalog-cleaner-thread-{i}")
                       for i in range(self.threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        if passes[0] >= MAX_PASSES:
            log.error("the cleaning loop stopped after %d passes with partitions still eligible", MAX_PASSES)
        self._check(cleans, failures, errors)
        return CleaningRound(tuple(cleans), tuple(failures), tuple(conflicts), tuple(busy), tuple(sorted(uncleanable)),
                             tuple(errors), tuple(interrupted), tuple(retried), tuple(retried_errors))

    def _stopping(self, error: BaseException) -> bool:
        """Whether a pass failed because the cleaner is being stopped rather than because of its partition.

        SIGTERM or Ctrl-C reaches the job's whole process group: the Python side sets :attr:`stop_event`, and
        Spark's JVM runs its shutdown hook, which stops the SparkContext under the running pass (Kafka's
        cleaner likewise ends a pass aborted by shutdown without marking the partition uncleanable)."""
        if self.stop_event.is_set():
            return True
        return any(sign in str(e) for e in error_chain(error) for sign in _SPARK_STOPPED)

    def _check(self, cleans: list[CleanResult], failures: list[PassFailure], errors: list[BaseException]) -> None:
        """``deltalog.check.after.clean``: check every partition the loop cleaned; a broken guarantee marks it
        uncleanable (the clean has committed by then: the mark keeps the cleaner off it until someone looks)."""
        if self.check_after_clean is None or not cleans:
            return
        by_topic: dict[str, list[CleanResult]] = {}
        for r in cleans:
            by_topic.setdefault(r.topic, []).append(r)
        for topic, results in by_topic.items():
            try:
                broken = self.check_after_clean(topic, results)
            except DeltalogError as e:
                broken = {p: e for p in sorted({r.partition for r in results})}
            for partition, error in broken.items():
                plog = self.logs.log(topic, partition)
                ltc = LogToClean.for_log(plog, plog.snapshot(), self.clock.now_ms())
                mark = self.manager.mark_uncleanable(ltc, error, self.clock.now_ms(), self.logs.leases.owner)
                if mark is not None:
                    failures.append(PassFailure(topic, partition, mark.error_type, mark.message))
                    errors.append(error)

    def clean_partition(self, topic: str, partition: int, *, force: bool = False) -> CleanResult | None:
        """One pass over one partition if it is eligible (or, with ``force``, if it has any cleanable section
        at all); None when there is nothing to do. The partition must be compacted and not uncleanable; a
        failure marks it uncleanable, as in the loop, and raises."""
        plog = self.logs.log(topic, partition)
        snap = plog.snapshot()
        if not snap.config.compact:
            raise InvalidConfigError(
                f"topic {topic!r} has cleanup.policy={','.join(snap.config.cleanup_policy)}; "
                "only 'compact' topics are cleaned"
            )
        mark = self.manager.uncleanable_mark(topic, partition)
        if mark is not None:
            raise PartitionUncleanableError(
                f"partition {topic}-{partition} is marked uncleanable since a pass failed with {mark.error_type}: "
                f"{mark.message[:300]}; repair it, then clear the mark with "
                f"'deltalog cleaner reset-uncleanable {topic} {partition}'"
            )
        ltc = LogToClean.for_log(plog, snap, self.clock.now_ms())
        if ltc.first_uncleanable_offset <= ltc.first_dirty_offset or not (ltc.eligible or force):
            return None
        try:
            result = self.clean_log(ltc)
        except (PartitionBusyError, CommitConflictError):
            raise
        except Exception as e:
            if not self._stopping(e) and not is_transient(e):
                self.manager.mark_uncleanable(ltc, e, self.clock.now_ms(), self.logs.leases.owner)
            raise
        if result is not None:
            failures: list[PassFailure] = []
            errors: list[BaseException] = []
            self._check([result], failures, errors)
            if errors:
                raise errors[0]
        return result

    # -- a cycle -------------------------------------------------------------------------------------------

    def run_cycle(self) -> CycleResult:
        """Retention, cleaning until nothing is eligible, VACUUM, metrics: one full cycle over the store."""
        started = self.clock.now_ms()
        retention = [r for r in apply_retention(self.logs, keep_going=True) if r.segments_deleted]
        expired = self.expire_offsets()
        self.expire_transactional_ids()
        cleaning = self.clean_filthiest_logs()
        vacuumed = []
        if self.vacuum:
            vacuumed = [v for v in (*vacuum_store(self.logs, dry_run=False, keep_going=True),
                                    vacuum_staged(self.logs.storage, self.clock.now_ms(), dry_run=False),
                                    vacuum_temp_files(self.logs.storage, self.clock.now_ms(), dry_run=False)) if v.files]
        result = CycleResult(started, self.clock.now_ms(), tuple(retention), cleaning.cleans, cleaning.failures,
                             cleaning.conflicts, cleaning.busy, cleaning.uncleanable, tuple(vacuumed), expired,
                             cleaning.retried)
        self.cycles_run += 1
        if self.metrics:
            try:
                metrics.record_cycle(self.logs, result)
            except StorageFullError as e:  # the cycle's work is committed; its figures wait for space, said aloud
                log.warning("the figures of this cleaner cycle were not recorded: %s", e)
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
                log.info("nothing to clean; backing off %d ms (log.cleaner.backoff.ms)", self.config.backoff_ms)
                self.sleep(self.config.backoff_ms)
        return n


def raise_failures(round_: CleaningRound) -> list[CleanResult]:
    """What ``store.clean()`` does with a round: the passes, or (after every partition was tried) one error
    naming each partition that failed. A broken guarantee alone raises :class:`CheckFailedError`; a pass the
    storage failed (a full disk), not marked uncleanable, raises its :class:`~deltalog.errors.StorageFullError`
    when nothing else failed."""
    if not round_.failures:
        if round_.retried_errors:
            first = round_.retried_errors[0]
            if isinstance(first, StorageFullError):
                raise first
            names = ", ".join(f"{f.topic}-{f.partition} ({f.message[:600]})" for f in round_.retried)
            raise CleaningFailedError(f"cleaning failed on the storage for {names}; not marked uncleanable: "
                                      "the next clean tries again", results=round_.cleans) from first
        return list(round_.cleans)
    names = ", ".join(f"{f.topic}-{f.partition} ({f.error_type}: {f.message[:1500]})" for f in round_.failures)
    checks = [e for e in round_.errors if isinstance(e, CheckFailedError)]
    if len(checks) == len(round_.errors):
        raise CheckFailedError(f"data-quality check failed after cleaning, partition(s) now marked uncleanable: "
                               f"{names}", checks[0].result, results=round_.cleans)
    cleaned = sorted({f"{c.topic}-{c.partition}" for c in round_.cleans})
    raise CleaningFailedError(
        f"cleaning failed for {len(round_.failures)} partition(s), now marked uncleanable: {names}. "
        f"The other partitions were cleaned ({', '.join(cleaned) if cleaned else 'none needed it'}); repair the "
        "failed ones, then clear their marks with 'deltalog cleaner reset-uncleanable TOPIC PARTITION'",
        results=round_.cleans, failures=round_.failures,
    ) from round_.errors[0]
