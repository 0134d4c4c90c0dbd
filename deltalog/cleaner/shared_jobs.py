"""The Spark jobs of many partitions' passes, shared: one job for their pass 1, one more for their pass 2.

A pass over a small partition spends most of its time on the fixed costs of its two Spark jobs (scheduling, a
Python worker's round trip, the result path), not on its records; a store of many small partitions (one per
source table of a change-data-capture feed) then pays those costs once per partition. Kafka's cleaner threads
have no such cost to share: a pass there is a loop in the broker's own process.

So the cleaning loop plans a round of partitions (:meth:`LogCleanerManager.grab_filthiest_batch
<deltalog.cleaner.cleaner_manager.LogCleanerManager.grab_filthiest_batch>`) and runs each one's pass on a thread of
its own, as before: each partition is still planned, leased, committed, checked and marked uncleanable on its own.
Only their Spark tasks meet here. :class:`SharedJobs` holds the tasks each pass submits
(:func:`deltalog.cleaner.tasks.run_tasks`, routed here while the pass's thread is bound with :func:`sharing`)
until every pass of the round still running has submitted, then runs them all as one Spark job
(:func:`deltalog.cleaner.tasks.run_task_groups`), a failing task failing only its own pass. Passes that reach
Spark in step (the round's pass 1, then its pass 2) therefore share two jobs; a pass with nothing for Spark, or
one that finished or failed, leaves the round so no one waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from deltalog.cleaner import tasks
from deltalog.config import StoreConfig
from deltalog.spark import default_parallelism
from deltalog.storage import Storage

#: Passes of a round doing their driver work (lease, plan, commit, reads of the log) at a time when the caller gives no
#: number: ``background.threads``' default (Kafka's, 10). The cleaner gives its store's ``background.threads``, the
#: requests its cycle's walk keeps in flight: a pass's driver work is mostly round trips to the store too (on an
#: object store tens of milliseconds each, the interpreter and delta-rs's runtime free meanwhile), so the same number
#: bounds them. Every pass of a round must reach the shared job, so each has a thread of its own; the slots keep
#: those not waiting for a job few enough that they do not contend for the interpreter more than they work.
DRIVER_SLOTS = StoreConfig.background_threads

#: A shared job has at most this many Spark tasks a core (one wave): past that, small partitions' tasks share Spark
#: tasks, while a large partition's tasks, each a core's share of its input, still land on different ones. A Spark
#: task's own cost (scheduling, a Python worker's round trip) is what sharing saves: 40 payloads in 40 Spark tasks
#: took several times as long as in 2 on two cores.
TASKS_PER_CORE = 1


@dataclass
class _Submitted:
    fn: Callable[[Any], Any]
    payloads: Sequence[Any]
    storage: Storage
    work_dir: str
    done: bool = False
    results: list[Any] | None = None
    error: BaseException | None = field(default=None, repr=False)


class SharedJobs:
    """The Spark tasks of ``parties`` passes running side by side, run together one job at a time."""

    def __init__(self, spark: Any, parties: int, *, driver_slots: int | None = None) -> None:
        self.spark = spark
        self._active = parties
        #: Passes doing driver work (planning, committing) at a time; a pass waiting for its shared job holds none.
        self.driver_slots = driver_slots or DRIVER_SLOTS
        self._slots = threading.Semaphore(self.driver_slots)
        self._cond = threading.Condition()
        self._waiting: list[_Submitted] = []
        #: How many Spark jobs ran, and for how many submissions (what the benchmark reports).
        self.jobs_run = 0
        self.submissions = 0
        #: The session's task slots, asked once for the round (:func:`deltalog.cleaner.tasks.parallelism`).
        self.parallelism = max(default_parallelism(spark), 1)
        #: Spark tasks of the round's jobs that finished, and that were planned so far: each pass's progress.
        self.tasks_done = 0
        self.tasks_planned = 0

    def task_counts(self) -> tuple[int, int]:
        """(done, planned so far) Spark tasks of the round's shared jobs, which every pass of the round shares."""
        with self._cond:
            return self.tasks_done, self.tasks_planned

    def run(self, fn: Callable[[Any], Any], payloads: Sequence[Any], *, storage: Storage, work_dir: str) -> list[Any]:
        """``[fn(p) for p in payloads]`` in a job shared with the other passes' tasks (blocks until it ran)."""
        mine = _Submitted(fn, payloads, storage, work_dir)
        self._slots.release()  # waiting for the job (or running it) is no driver work: another pass takes the slot
        try:
            with self._cond:
                self._waiting.append(mine)
                batch = self._take_if_all_in()
                while batch is None and not mine.done:
                    self._cond.wait()
                    batch = self._take_if_all_in() if not mine.done else None
            if batch is not None:
                self._run(batch)
        finally:
            self._slots.acquire()
        if mine.error is not None:
            raise mine.error
        assert mine.results is not None
        return mine.results

    def leave(self) -> None:
        """A pass is done with Spark (it finished, failed, or has nothing to submit): no one waits for it."""
        with self._cond:
            self._active -= 1
            batch = self._take_if_all_in()
        if batch is not None:
            self._run(batch)

    def _take_if_all_in(self) -> list[_Submitted] | None:
        """The waiting submissions, taken, once every pass still running has submitted (called under the lock)."""
        if self._waiting and len(self._waiting) >= self._active:
            batch, self._waiting = self._waiting, []
            return batch
        return None

    def _run(self, batch: list[_Submitted]) -> None:
        max_tasks = TASKS_PER_CORE * self.parallelism
        spark_tasks = min(sum(len(s.payloads) for s in batch), max_tasks)
        with self._cond:
            self.tasks_planned += spark_tasks
        try:
            outcomes: list[Any] = tasks.run_task_groups(
                self.spark, [(s.fn, s.payloads, s.storage, s.work_dir) for s in batch], isolate=len(batch) > 1,
                max_tasks=max_tasks)
        except BaseException as e:  # noqa: BLE001 - the job itself failed (not one task): every pass in it failed
            outcomes = [e] * len(batch)
        with self._cond:
            self.tasks_done += spark_tasks
            self.jobs_run += 1
            self.submissions += len(batch)
            for s, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    s.error = outcome
                else:
                    s.results = outcome
                s.done = True
            self._cond.notify_all()


@contextmanager
def sharing(jobs: SharedJobs) -> Iterator[None]:
    """Route the current thread's :func:`~deltalog.cleaner.tasks.run_tasks` calls through ``jobs``, its driver work
    taking one of the round's driver slots; the thread leaves the round at the end, however its pass ended."""
    jobs._slots.acquire()
    tasks.bind(jobs)
    try:
        yield
    finally:
        tasks.bind(None)
        jobs._slots.release()
        jobs.leave()
