"""The log cleaner: the one loop around cleaning passes (Kafka's ``LogCleaner``; orchestration, not policy).

Kafka has exactly one loop: each ``CleanerThread.doWork`` calls ``tryCleanFilthiestLog``, whose
``cleanFilthiestLog`` asks the ``LogCleanerManager`` for the filthiest log (``grabFilthiestCompactedLog``) and
cleans it (``cleanLog``); on an unexpected error ``tryCleanFilthiestLog`` marks the partition uncleanable and the
thread carries on. deltalog has the same single loop in the same four steps (:meth:`LogCleaner._do_work`,
:meth:`~LogCleaner._try_clean_filthiest_log`, :meth:`~LogCleaner._clean_filthiest_log`,
:meth:`~LogCleaner.clean_log`), entered through :meth:`LogCleaner.clean_filthiest_logs`, and every way of
cleaning goes through it: ``store.clean()``, ``deltalog clean``, ``deltalog cleaner run`` and the Databricks job. It runs
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
its background threads. The cleaning loop is the cleaner's; the rest is the store's scheduled maintenance
(:class:`~deltalog.cleaner.maintenance.StoreMaintenance`, Kafka's ``LogManager`` tasks and the coordinators'
timers): retention and the expiry timers before the loop, VACUUM of files past ``file.delete.delay.ms`` after
it; then the cycle's metrics are appended to the store's metrics table. Every step on a partition holds its
lease (:mod:`deltalog.log.lease`), so two overlapping runs never work on one partition at once.

:meth:`LogCleaner.run` repeats cycles, sleeping ``log.cleaner.backoff.ms`` after a cycle that cleaned
nothing (Kafka's ``CleanerThread.doWork``); sleeping goes through an injectable function so tests drive
it with the manual clock.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltalog.cleaner import metrics, tasks
from deltalog.cleaner.cleaner import Cleaner, CleanResult
from deltalog.cleaner.cleaner_manager import LogCleanerManager
from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.cleaner.maintenance import StoreMaintenance
from deltalog.cleaner.metrics import LastCleans, StoreMetrics
from deltalog.cleaner.progress import DEFAULT_PROGRESS_INTERVAL_S, PassProgress, ProgressListener
from deltalog.cleaner.shared_jobs import SharedJobs, sharing
from deltalog.cleaner.uncleanable import PartitionId
from deltalog.config import StoreConfig
from deltalog.coordinator.group.offsets_topic import OffsetsTopic
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
from deltalog.log import duplicates, snapshot_checkpoint
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import PartitionLog
from deltalog.log.retention import RetentionResult, delete_old_segments
from deltalog.log.vacuum import VacuumResult
from deltalog.storage_faults import is_transient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: What Spark's errors say when its context was stopped under a running job (its JVM's shutdown hook ran).
_SPARK_STOPPED = ("SparkContext was shut down", "Cannot call methods on a stopped SparkContext")
#: Upper bound on passes in one run of the loop, so a bug can never spin forever.
MAX_PASSES = 100_000
#: Partitions one round cleans side by side at most (a driver thread each, their Spark work in shared jobs). Each round
#: pays its two jobs' fixed cost; rounds of 256 spread it further but cost more a partition on 1,000 partitions
#: (docs/scale.md), so a round stays at 64.
MAX_ROUND_PARTITIONS = 64

#: Returns the Spark session passes run on; called only when a pass is about to run, so a loop with
#: nothing to clean never starts Spark.
SparkProvider = Callable[[], "SparkSession"]
#: ``deltalog.check.after.clean``: given the passes of one run of the loop (one topic's at a time), returns
#: the partitions whose guarantees broke, each with the error that says how.
CheckAfterClean = Callable[[str, Sequence[CleanResult]], dict[int, CheckFailedError]]


#: The kinds of :class:`PassOutcome`: what became of a partition the loop did not (only) clean.
FAILED = "failed"  # its pass (or the check after it) threw: now uncleanable
RETRIED = "retried"  # the storage failed its pass (a full disk): not marked, tried again next time
CONFLICT = "conflict"  # its pass lost a commit race: tried again next time
BUSY = "busy"  # another run held its lease
INTERRUPTED = "interrupted"  # its pass was cut short by the cleaner stopping: not a failure
UNCLEANABLE = "uncleanable"  # skipped: marked uncleanable before this round
OUTCOME_KINDS = (FAILED, RETRIED, CONFLICT, BUSY, INTERRUPTED, UNCLEANABLE)


@dataclass(frozen=True)
class PassOutcome:
    """What became of one partition in a round, other than a clean: its ``kind`` (one of
    :data:`OUTCOME_KINDS`) and, for a pass that threw, the error (its type and message kept as text too, for
    the job's output and the uncleanable mark). A new kind of outcome is a new constant here, nothing else."""

    topic: str
    partition: int
    kind: str
    error_type: str = ""
    message: str = ""
    error: BaseException | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of_error(cls, tp: PartitionId, kind: str, error: BaseException, *, error_type: str | None = None,
                 message: str | None = None) -> PassOutcome:
        return cls(tp[0], tp[1], kind, error_type or type(error).__name__,
                   plain(str(error)) if message is None else message, error)

    @property
    def tp(self) -> PartitionId:
        return (self.topic, self.partition)


@dataclass(frozen=True, kw_only=True)
class Outcomes:
    """The passes that committed and one list of what became of the other partitions; the views by kind
    (``failures``, ``busy``, ...) are read from that list."""

    cleans: tuple[CleanResult, ...] = ()
    outcomes: tuple[PassOutcome, ...] = ()

    def of_kind(self, kind: str) -> tuple[PassOutcome, ...]:
        return tuple(o for o in self.outcomes if o.kind == kind)

    def _partitions(self, kind: str) -> tuple[PartitionId, ...]:
        return tuple(o.tp for o in self.of_kind(kind))

    @property
    def failures(self) -> tuple[PassOutcome, ...]:
        """Newly uncleanable partitions, each with its error."""
        return self.of_kind(FAILED)

    @property
    def errors(self) -> tuple[BaseException, ...]:
        return tuple(o.error for o in self.failures if o.error is not None)

    @property
    def retried(self) -> tuple[PassOutcome, ...]:
        """Passes the storage failed (a full disk): not marked uncleanable, tried again next time."""
        return self.of_kind(RETRIED)

    @property
    def retried_errors(self) -> tuple[BaseException, ...]:
        return tuple(o.error for o in self.retried if o.error is not None)

    @property
    def conflicts(self) -> tuple[PartitionId, ...]:
        """Passes that lost a commit race; tried again next time."""
        return self._partitions(CONFLICT)

    @property
    def busy(self) -> tuple[PartitionId, ...]:
        """Partitions another run held."""
        return self._partitions(BUSY)

    @property
    def interrupted(self) -> tuple[PartitionId, ...]:
        """Passes cut short by the cleaner being stopped; not failures."""
        return self._partitions(INTERRUPTED)

    @property
    def uncleanable(self) -> tuple[PartitionId, ...]:
        """Skipped: marked uncleanable before this round."""
        return self._partitions(UNCLEANABLE)

    @property
    def did_clean(self) -> bool:
        return bool(self.cleans)

    @property
    def newly_uncleanable(self) -> list[PartitionId]:
        return list(self._partitions(FAILED))


@dataclass(frozen=True, kw_only=True)
class CleaningRound(Outcomes):
    """What one run of the loop did, as data."""


@dataclass(frozen=True, kw_only=True)
class CycleResult(Outcomes):
    """What one cycle did, as data (also summarised in the metrics table): its cleaning round's passes and
    outcomes, and the store's maintenance around it."""

    started_ms: int
    finished_ms: int
    retention: tuple[RetentionResult, ...] = ()
    vacuum: tuple[VacuumResult, ...] = ()
    #: Committed offsets removed by ``offsets.retention.minutes`` this cycle.
    offsets_expired: int = 0
    #: What the cycle's refresh of the state tables did (the ``state_tables`` hook), None without one.
    state_tables: Any = None

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
                f"{self.offsets_expired} committed offset(s) expired, "
                f"{len(self.failures)} newly uncleanable, {len(self.uncleanable)} skipped as uncleanable, "
                f"{len(self.busy)} busy, {len(self.conflicts)} lost race(s), "
                f"{len(self.retried)} failed on the storage (tried again next cycle); "
                f"{self.finished_ms - self.started_ms} ms")


class _RoundState:
    """What one run of the loop has done so far, shared by its cleaner threads under one lock (Kafka's
    ``LogCleanerManager`` keeps the in-progress set; what a round saw of each partition is the loop's own)."""

    def __init__(self, uncleanable: set[PartitionId]) -> None:
        self.lock = threading.Lock()
        self.uncleanable = uncleanable  # marked before this round: skipped
        self.done_for_now: set[PartitionId] = set()  # busy, failed, lost a race, or made no progress
        self.passes = 0
        self.cleans: list[CleanResult] = []
        self.outcomes: list[PassOutcome] = []

    def next_pass(self, more: int = 0) -> set[PartitionId] | None:
        """The partitions the next grab leaves out, counting the pass (and ``more`` of a round's other passes);
        None once :data:`MAX_PASSES` ran."""
        with self.lock:
            if self.passes >= MAX_PASSES:
                return None
            self.passes += 1 + more
            return self.done_for_now | self.uncleanable

    def set_aside(self, tp: PartitionId, outcome: PassOutcome | None = None) -> None:
        """``tp``'s turn is over for this round (with ``outcome`` when there is one to report)."""
        with self.lock:
            if outcome is not None:
                self.outcomes.append(outcome)
            self.done_for_now.add(tp)

    def claim(self, tp: PartitionId) -> bool:
        """Set ``tp`` aside, unless it already was (False)."""
        with self.lock:
            if tp in self.done_for_now:
                return False
            self.done_for_now.add(tp)
            return True

    def add(self, outcome: PassOutcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def cleaned(self, ltc: LogToClean, result: CleanResult | None) -> None:
        with self.lock:
            if result is None or result.end_offset <= ltc.first_dirty_offset:
                self.done_for_now.add((ltc.snapshot.topic, ltc.snapshot.partition))  # no progress: turn over
            else:
                self.cleans.append(result)

    def result(self) -> CleaningRound:
        skipped = tuple(PassOutcome(t, p, UNCLEANABLE) for t, p in sorted(self.uncleanable))
        return CleaningRound(cleans=tuple(self.cleans), outcomes=tuple(self.outcomes) + skipped)


@contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """The objects that exist before a round left out of the garbage collector's passes while it runs (``gc.freeze``).

    A round's passes allocate a lot that lives a while (snapshots, plans, Delta actions), which makes the collector
    run full collections, each a walk over every object of the process (the Spark session's, the store's) with the
    interpreter held: they stopped every pass of the round for a large share of its time. The round's own garbage is
    still collected; the frozen objects go back to the collector when the round ends."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _sleep_wall(ms: int, stop: threading.Event) -> None:
    stop.wait(ms / 1000.0)


class LogCleaner:
    """The cleaning loop over one store's partitions, and the job's cycles around it.

    It takes what it needs: the store's :class:`~deltalog.log.log_manager.LogManager`, a way to get the
    Spark session, and the cleaner-wide settings.
    """

    def __init__(self, logs: LogManager, spark: SparkProvider, config: StoreConfig, *,
                 threads: int | None = None, vacuum: bool = True, metrics: bool = True,
                 progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S, progress: ProgressListener | None = None,
                 check_after_clean: CheckAfterClean | None = None,
                 sleep: Callable[[int], None] | None = None, map_slots: int | None = None,
                 offsets: OffsetsTopic | None = None, shared_jobs: bool = True,
                 state_tables: Callable[[], Any] | None = None, state_lag: metrics.StateLagSource | None = None
                 ) -> None:
        self.logs = logs
        #: The store's scheduled tasks around the loop (retention, VACUUM, the coordinators' timers), run by
        #: each cycle; it keeps when each timer last ran for as long as this cleaner lives.
        self.maintenance = StoreMaintenance(logs, config, offsets=offsets, vacuum=vacuum)
        self.spark = spark
        self.config = config
        self.threads = config.cleaner_threads if threads is None else threads
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise InvalidConfigError(f"threads must be an integer >= 1 (log.cleaner.threads), not {self.threads!r}")
        self.manager = LogCleanerManager(logs)
        self.metrics = metrics
        self.progress_interval_s = progress_interval_s
        #: Told how each pass is going (None: the progress is logged); see :mod:`deltalog.cleaner.progress`.
        self.progress = progress
        self.check_after_clean = check_after_clean
        #: Offset map slots per pass, when set: Kafka's tests build a Cleaner on a small map the same way.
        self.map_slots = map_slots
        #: Whether a round cleans its partitions side by side with their Spark work in shared jobs
        #: (:mod:`deltalog.cleaner.shared_jobs`); False: ``threads`` cleaner threads, a pass and its jobs at a time.
        self.shared_jobs = shared_jobs
        #: Each round of side-by-side passes so far: (partitions, Spark jobs they shared).
        self.rounds: list[tuple[int, int]] = []
        #: The threads of a round's passes (one each: every pass must reach the round's shared jobs).
        self._round_threads: ThreadPoolExecutor | None = None
        self.stop_event = threading.Event()
        self._sleep = sleep
        self.cycles_run = 0
        #: Run by each cycle after VACUUM and before its metrics (the store's state tables refreshed, so that the
        #: metrics show their lag after it); the cleaner sits below the state tables and does not import them.
        self.state_tables = state_tables
        #: Each topic's state-table lag, for the metrics table (:func:`deltalog.cleaner.metrics.collect`).
        self.state_lag = state_lag
        #: Called by each cycle once it has read every partition's snapshot, before retention: the scheduled job
        #: starts Spark there, in the background, when a pass may run (:func:`deltalog.jobs.cleaner_job.run`).
        self.on_snapshots: Callable[[], None] | None = None
        #: The last-pass figures the cycles' metrics read, kept from cycle to cycle (read again only when changed).
        self._last_cleans = LastCleans(logs)
        #: The metrics the last cycle recorded (None before, or with ``metrics`` off).
        self.last_metrics: StoreMetrics | None = None

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
        """Kafka's ``cleanLog``: one pass over the partition ``ltc`` was planned on, under the partition's lease.

        Raises :class:`PartitionBusyError` when another run holds the lease. Under the lease the range is
        planned again if the table moved since ``ltc`` (None when nothing is left to clean), the pass's
        figures are recorded for the metrics, and a ``compact,delete`` partition has retention applied right
        after the pass, as Kafka's cleaner does.
        """
        topic, partition = ltc.snapshot.topic, ltc.snapshot.partition
        plog = self.logs.log(topic, partition)
        with self.logs.leases.hold(topic, partition, "clean", heartbeat=True):
            snap = plog.snapshot()  # the table as of the lease; read again only after a commit of the two below
            # An offset the table holds twice is kept once first: a pass keeps both copies of a key's latest.
            if plog.repair_duplicates(self.clock.now_ms(), snap):
                snap = plog.snapshot()
            # A pass replaces whole segments' files: files another engine's OPTIMIZE merged across segments are
            # first put back into deltalog's layout (no record changes), so none also holds records it keeps.
            if plog.relayout(self.clock.now_ms(), snap):
                snap = plog.snapshot()
            if snap.version != ltc.snapshot.version:
                ltc = LogToClean.for_log(plog, snap, self.clock.now_ms())
                if ltc.first_uncleanable_offset <= ltc.first_dirty_offset:
                    return None
            merged = [f.path for f in snap.files
                      if not f.deltalog_layout and f.min_offset < ltc.first_uncleanable_offset]
            if merged:  # another engine's OPTIMIZE merged the pass's segments again since the relayout
                raise CommitConflictError(f"cleaning {topic}-{partition}: another engine merged segments again at "
                                          f"version {snap.version} ({merged[0]}); the next round lays them out again")
            cleaner = self._cleaner()
            shared = tasks.bound()  # a round's pass: its Spark work is in the round's shared jobs
            with PassProgress(cleaner.spark, ltc, self.progress_interval_s, self.progress,
                              shared_tasks=None if shared is None else shared.task_counts):
                result = cleaner.clean(ltc, plog)
            metrics.record_clean(self.logs, result)
            if snap.config.delete:
                try:
                    delete_old_segments(plog, self.clock.now_ms())
                except CommitConflictError as e:  # the pass itself committed; retention runs again next time
                    log.info("retention after cleaning %s-%d lost a race: %s", topic, partition, e)
        return result

    # -- the loop ----------------------------------------------------------------------------------------

    def clean_filthiest_logs(self, topics: Iterable[str] | None = None) -> CleaningRound:
        """Clean, filthiest partition first, until no partition (of ``topics``, or of the store) is eligible.

        ``log.cleaner.threads`` cleaner threads, each running Kafka's ``CleanerThread.doWork`` until nothing is
        left (:meth:`_do_work`), after the ``TransactionCoordinator``'s timer aborted the transactions that
        timed out (they hold the last stable offset, and so the dirty section, back). Nothing raises out of here
        for a partition's sake: failures, lost races and busy partitions are in the returned round.
        """
        wanted = list(topics) if topics is not None else None
        self.maintenance.abort_timed_out_transactions()
        self.repair_duplicated_offsets(wanted)
        state = _RoundState(self.manager.uncleanable_partitions())
        if self.shared_jobs:
            self._do_rounds(state, wanted)
        elif self.threads == 1:
            self._do_work(state, wanted)
        else:
            workers = [threading.Thread(target=self._do_work, args=(state, wanted),
                                        name=f"deltalog-cleaner-thread-{i}") for i in range(self.threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        if state.passes >= MAX_PASSES:
            log.error("the cleaning loop stopped after %d passes with partitions still eligible", MAX_PASSES)
        state.outcomes += self._check(state.cleans)
        return state.result()

    def repair_duplicated_offsets(self, topics: Sequence[str] | None = None) -> int:
        """Keep one copy of every offset a partition (of ``topics``, or of the store) holds twice
        (:meth:`~deltalog.log.partition_log.PartitionLog.repair_duplicates`), whatever its dirty ratio: a
        partition that serves an offset twice is never clean. Only partitions whose file stats show overlapping
        offsets are looked at further (:func:`deltalog.log.duplicates.suspects`), each under its lease; one
        another run holds, or one that fails, is left for the next round. Returns the rows dropped."""
        dropped = 0
        for topic in (topics if topics is not None else [None]):
            try:
                plogs = self.logs.logs(topic)
            except DeltalogError:  # a topic deleted meanwhile: the cleaning loop skips it too
                continue
            for plog in plogs:
                try:
                    if not duplicates.suspects(self.logs.snapshot(plog).files):
                        continue
                    lease = self.logs.leases.acquire(plog.topic, plog.partition, "repair")
                    if lease is None:
                        continue
                    try:
                        n = plog.repair_duplicates(self.clock.now_ms())
                    finally:
                        lease.release()
                except DeltalogError as e:  # damaged, busy, a lost race: the cleaning loop says what it is
                    log.warning("repairing the offsets %s-%d holds twice failed; tried again next round: %s",
                                plog.topic, plog.partition, e)
                    continue
                if n:
                    log.warning("%s-%d held offsets twice: %d duplicate row(s) dropped, one copy of each offset "
                                "kept", plog.topic, plog.partition, n)
                dropped += n
        return dropped

    def _do_work(self, state: _RoundState, wanted: list[str] | None) -> None:
        """Kafka's ``CleanerThread.doWork``, repeated until no partition is eligible (or the cleaner stops);
        backing off when there was nothing to clean is the cycle's (:meth:`run`)."""
        while not self.stop_event.is_set() and self._try_clean_filthiest_log(state, wanted):
            pass

    def _try_clean_filthiest_log(self, state: _RoundState, wanted: list[str] | None) -> bool:
        """Kafka's ``tryCleanFilthiestLog`` with the grab of ``cleanFilthiestLog``: take the filthiest eligible
        partition (``grabFilthiestCompactedLog``, which marks it in progress) and clean it; a pass that throws
        (Kafka's ``LogCleaningException``) marks its partition uncleanable (:meth:`_pass_failed`) and the loop
        carries on. The mark is made before the partition leaves the in-progress set (Kafka's ``doneCleaning``
        comes first), so no other cleaner thread takes it up in between. False when no partition is left."""
        exclude = state.next_pass()
        if exclude is None:
            return False
        ltc = self.manager.grab_filthiest(self.clock.now_ms(), wanted, exclude=exclude,
                                          on_damage=lambda plog, error: self._damaged(state, plog, error))
        if ltc is None:
            return False
        self._clean_grabbed(state, ltc)
        return True

    def _clean_grabbed(self, state: _RoundState, ltc: LogToClean) -> None:
        """Clean a partition taken in progress; a pass that throws (Kafka's ``LogCleaningException``) marks it
        uncleanable before it leaves the in-progress set."""
        tp = (ltc.snapshot.topic, ltc.snapshot.partition)
        try:
            self._clean_filthiest_log(state, ltc)
        except Exception as e:  # Kafka's LogCleaningException: mark uncleanable, carry on
            self._pass_failed(state, ltc, e)
        finally:
            self.manager.done_cleaning(tp)

    def _do_rounds(self, state: _RoundState, wanted: list[str] | None) -> None:
        """The loop with shared Spark jobs: each round takes the filthiest eligible partitions that fit in the
        dedupe buffer together (:meth:`LogCleanerManager.grab_filthiest_batch`, from what the last ranking left while it
        leaves any), cleans each on a thread of its own (planned, leased, committed and marked on its own, as in
        :meth:`_try_clean_filthiest_log`), their Spark tasks run in shared jobs (:mod:`deltalog.cleaner.shared_jobs`);
        until no partition is eligible."""
        budget = self.config.offset_map_capacity_for(1)
        capacity = (int(self.map_slots * self.config.io_buffer_load_factor) if self.map_slots is not None
                    else self.config.offset_map_capacity_for(self.threads))
        backlog: list[LogToClean] = []  # ranked and not yet taken: the next rounds come from it
        while not self.stop_event.is_set():
            exclude = state.next_pass()
            if exclude is None:
                return
            batch = self.manager.grab_filthiest_batch(
                self.clock.now_ms(), wanted, exclude=exclude,
                on_damage=lambda plog, error: self._damaged(state, plog, error),
                budget=budget, pass_capacity=capacity, limit=MAX_ROUND_PARTITIONS, backlog=backlog)
            if not batch:
                return
            if len(batch) == 1:  # nothing to share: the pass runs its own jobs, on this thread
                self._clean_grabbed(state, batch[0])
                continue
            state.next_pass(len(batch) - 2)
            self._clean_round(state, batch)

    def _clean_round(self, state: _RoundState, batch: list[LogToClean]) -> None:
        jobs = SharedJobs(self.spark(), len(batch))
        first = len(state.cleans)

        def clean(ltc: LogToClean) -> None:
            with sharing(jobs):
                self._clean_grabbed(state, ltc)

        if self._round_threads is None:  # kept for the cleaner's life: later rounds reuse the threads
            self._round_threads = ThreadPoolExecutor(MAX_ROUND_PARTITIONS, thread_name_prefix="deltalog-cleaner-round")
        with _old_objects_frozen():
            for done in [self._round_threads.submit(clean, ltc) for ltc in batch]:
                done.result()
        rank = {(ltc.snapshot.topic, ltc.snapshot.partition): i for i, ltc in enumerate(batch)}
        with state.lock:  # the round's passes in its order (filthiest first), not in the order they finished
            state.cleans[first:] = sorted(state.cleans[first:], key=lambda r: rank.get((r.topic, r.partition), 0))
        self.rounds.append((len(batch), jobs.jobs_run))
        log.info("a round cleaned %d partition(s) side by side in %d shared Spark job(s)", len(batch), jobs.jobs_run)

    def _clean_filthiest_log(self, state: _RoundState, ltc: LogToClean) -> None:
        """The rest of Kafka's ``cleanFilthiestLog``: ``cleanLog`` on the partition taken (:meth:`clean_log`). A
        partition another run holds and a lost commit race are not faults (as Kafka lets a
        ``LogCleaningAbortedException`` go): they end the partition's turn this round."""
        tp = (ltc.snapshot.topic, ltc.snapshot.partition)
        try:
            result = self.clean_log(ltc)
        except PartitionBusyError:
            state.set_aside(tp, PassOutcome(*tp, BUSY))
        except CommitConflictError as e:
            log.info("cleaning %s-%d lost a commit race; it is tried again next time: %s", *tp, e)
            state.set_aside(tp, PassOutcome.of_error(tp, CONFLICT, e))
        else:
            state.cleaned(ltc, result)

    def _pass_failed(self, state: _RoundState, ltc: LogToClean, error: Exception) -> None:
        """A pass that threw: cut short by the cleaner stopping, or failed by the storage (a full disk), it is
        tried next time; any other error marks the partition uncleanable (not when its topic was deleted)."""
        tp = (ltc.snapshot.topic, ltc.snapshot.partition)
        if self._stopping(error):
            log.warning("cleaning %s-%d was cut short because the cleaner is stopping; it is not marked "
                        "uncleanable and is cleaned next time: %s", *tp, error)
            state.set_aside(tp, PassOutcome.of_error(tp, INTERRUPTED, error))
        elif is_transient(error):
            log.warning("cleaning %s-%d failed on the storage; it is not marked uncleanable and is cleaned next "
                        "time: %s", *tp, error)
            state.set_aside(tp, PassOutcome.of_error(tp, RETRIED, error))
        else:
            mark = self.manager.mark_uncleanable(ltc, error, self.clock.now_ms(), self.logs.leases.owner)
            state.set_aside(tp, None if mark is None else PassOutcome.of_error(
                tp, FAILED, error, error_type=mark.error_type, message=mark.message))

    def _damaged(self, state: _RoundState, plog: PartitionLog, error: CorruptLogError) -> None:
        """A partition whose Delta log cannot be read while ranking: marked uncleanable, the others still
        cleaned."""
        if not state.claim((plog.topic, plog.partition)):
            return
        mark = self.manager.mark_damaged(plog, error, self.clock.now_ms(), self.logs.leases.owner)
        if mark is not None:
            state.add(PassOutcome.of_error((plog.topic, plog.partition), FAILED, error, error_type=mark.error_type,
                                           message=mark.message))

    def _stopping(self, error: BaseException) -> bool:
        """Whether a pass failed because the cleaner is being stopped rather than because of its partition.

        SIGTERM or Ctrl-C reaches the job's whole process group: the Python side sets :attr:`stop_event`, and
        Spark's JVM runs its shutdown hook, which stops the SparkContext under the running pass (Kafka's
        cleaner likewise ends a pass aborted by shutdown without marking the partition uncleanable)."""
        if self.stop_event.is_set():
            return True
        return any(sign in str(e) for e in error_chain(error) for sign in _SPARK_STOPPED)

    def _check(self, cleans: list[CleanResult]) -> list[PassOutcome]:
        """``deltalog.check.after.clean``: check every partition the loop cleaned; a broken guarantee marks it
        uncleanable (the clean has committed by then: the mark keeps the cleaner off it until someone looks)."""
        if self.check_after_clean is None or not cleans:
            return []
        failures: list[PassOutcome] = []
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
                    failures.append(PassOutcome.of_error((topic, partition), FAILED, error,
                                                         error_type=mark.error_type, message=mark.message))
        return failures

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
            failures = self._check([result])
            if failures:
                raise failures[0].error  # type: ignore[misc] - a failure always carries its error
        return result

    # -- a cycle -------------------------------------------------------------------------------------------

    def run_cycle(self) -> CycleResult:
        """One full cycle over the store: the store's maintenance before the loop (retention, the coordinators'
        timers), cleaning until nothing is eligible, VACUUM, then the cycle's metrics.

        The cycle reads each partition's Delta log once, at its start, ``background.threads`` partitions at a time
        (:meth:`LogManager.refresh_snapshots`), and its steps share those snapshots (:meth:`LogManager.cycle`); a
        partition one of them works on under its lease is read again afterwards. The uncleanable marks are listed
        once (:meth:`UncleanablePartitions.listed`)."""
        started = self.clock.now_ms()
        with self.logs.cycle(), self.manager.uncleanable.listed():
            snapshot_checkpoint.load(self.logs)  # a fresh process: what the last cycle learnt, while still true
            self.logs.refresh_snapshots()
            if self.on_snapshots is not None:
                self.on_snapshots()
            retention = self.maintenance.delete_old_segments()
            expired = self.maintenance.expire_offsets()
            self.maintenance.expire_transactional_ids()
            cleaning = self.clean_filthiest_logs()
            vacuumed = self.maintenance.vacuum()
            states = self.state_tables() if self.state_tables is not None else None
            result = CycleResult(started_ms=started, finished_ms=self.clock.now_ms(), cleans=cleaning.cleans,
                                 outcomes=cleaning.outcomes, retention=tuple(retention), vacuum=tuple(vacuumed),
                                 offsets_expired=expired, state_tables=states)
            self.cycles_run += 1
            if self.metrics:
                try:
                    self.last_metrics = metrics.record_cycle(self.logs, result, self.state_lag, manager=self.manager,
                                                             last_cleans=self._last_cleans)
                except StorageFullError as e:  # the cycle's work is committed; its figures wait for space, said aloud
                    log.warning("the figures of this cleaner cycle were not recorded: %s", e)
            snapshot_checkpoint.save(self.logs)
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
