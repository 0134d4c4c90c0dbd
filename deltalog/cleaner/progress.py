"""Progress of a long cleaning pass: a log line every so often with the Spark tasks done so far.

A pass over a big partition can run for minutes; Kafka's cleaner logs nothing until it is done, but a
scheduled job that is silent for ten minutes looks hung. The pass's Spark jobs carry a job tag of their own
(and, on a classic session, a job group of the same name), so the line counts only this pass's tasks even
when several passes run side by side: on a classic session from the status tracker, on Spark Connect from
the progress the server streams back with each query's results (which arrive in the thread that runs it). A pass
in a round whose Spark work is shared (:mod:`deltalog.cleaner.shared_jobs`) starts no job of its own: it counts the
round's shared jobs' tasks, from the round, with no call to Spark.

Whoever runs the loop may listen instead (:data:`ProgressListener`): it gets a :class:`PassStatus` when a pass
starts, every interval, and when it ends, and draws what it likes (``deltalog clean`` draws a progress bar on
a terminal); without a listener the statuses are logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.spark import is_connect, job_tag

log = logging.getLogger("deltalog.cleaner.log_cleaner")

#: Seconds between the progress lines a long pass logs.
DEFAULT_PROGRESS_INTERVAL_S = 30.0


@dataclass(frozen=True)
class PassStatus:
    """One look at a running cleaning pass."""

    partition: str  # "topic-partition"
    first_dirty_offset: int
    first_uncleanable_offset: int
    cleanable_bytes: int
    elapsed_s: float
    tasks_done: int  # of this pass's Spark jobs so far (more jobs may follow: the total grows)
    tasks_total: int
    state: str  # "started", "running", "finished" or "failed"


#: Called with a pass's status when it starts, every progress interval (from another thread), and when it ends.
ProgressListener = Callable[[PassStatus], None]


class PassProgress:
    """Logs a line every ``interval_s`` while a pass runs: elapsed time and the Spark tasks done so far.

    The pass's Spark jobs are tagged (and grouped) as its own, so the line counts only this pass's tasks
    even when several passes run side by side.
    """

    def __init__(self, spark: Any, ltc: LogToClean, interval_s: float, listener: ProgressListener | None = None,
                 *, shared_tasks: Callable[[], tuple[int, int]] | None = None) -> None:
        snap = ltc.snapshot
        self.name = f"{snap.topic}-{snap.partition}"
        self.group = f"deltalog-clean-{snap.topic}-{snap.partition}-{id(self):x}"
        self.section = (ltc.first_dirty_offset, ltc.first_uncleanable_offset)
        self.bytes = ltc.cleanable_bytes
        self.spark = spark
        self.interval_s = interval_s
        self.listener = listener
        #: (done, planned) tasks of the round's shared jobs, for a pass in such a round (then nothing is tagged).
        self.shared_tasks = shared_tasks
        self.connect = shared_tasks is None and is_connect(spark)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._tag: Any = None
        self._owner = 0
        # Spark Connect: operation id -> (tasks done, tasks) of this pass's queries, from the server's reports.
        self._operations: dict[str, tuple[int, int]] = {}

    def tasks(self) -> tuple[int, int]:
        """(completed, total) tasks of this pass's Spark jobs so far."""
        if self.shared_tasks is not None:
            return self.shared_tasks()
        if self.connect:
            ops = list(self._operations.values())
            return sum(d for d, _ in ops), sum(t for _, t in ops)
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

    def __call__(self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        """A Spark Connect progress handler: the session calls it with a query's stages in the thread that
        runs the query, so a report from another thread is another pass's (or the user's). The server reports
        every ``spark.connect.progress.reportInterval`` (a query shorter than that shows no tasks), and a
        finished query's tasks all count as done."""
        if threading.get_ident() != self._owner or operation_id is None:
            return
        stages = list(stages or ())
        if stages:
            self._operations[operation_id] = (sum(s.num_completed_tasks for s in stages),
                                              sum(s.num_tasks for s in stages))
        if done and operation_id in self._operations:  # the last report may predate the last tasks
            total = self._operations[operation_id][1]
            self._operations[operation_id] = (total, total)

    def status(self, state: str) -> PassStatus:
        try:
            done, total = self.tasks()
        except Exception:  # the status tracker is best effort (a session stopping)
            done = total = 0
        return PassStatus(self.name, self.section[0], self.section[1], self.bytes, time.monotonic() - self._started,
                          done, total, state)

    def line(self) -> str:
        done, total = self.tasks()
        tasks = f"{done} Spark tasks done ({total} planned so far)" if total else "planning its first Spark job"
        return (f"cleaning {self.name}: {time.monotonic() - self._started:,.0f}s, dirty section "
                f"[{self.section[0]}, {self.section[1]}) of {self.bytes:,} bytes, {tasks}")

    def _tell(self, state: str) -> None:
        try:
            if self.listener is not None:
                self.listener(self.status(state))
            elif state == "started":
                log.info("cleaning %s: dirty section [%d, %d), %d bytes", self.name, *self.section, self.bytes)
            elif state == "running":
                log.info("%s", self.line())
        except Exception as e:  # progress must never fail a pass
            log.debug("no progress for %s: %s", self.name, e)

    def __enter__(self) -> PassProgress:
        self._started = time.monotonic()
        self._owner = threading.get_ident()
        self._tag = (job_tag(self.spark, self.group, f"deltalog: clean {self.name}") if self.shared_tasks is None
                     else nullcontext())
        self._tag.__enter__()
        if self.connect:
            self.spark.registerProgressHandler(self)
        self._tell("started")

        def report() -> None:
            while not self._stop.wait(self.interval_s):
                self._tell("running")

        self._thread = threading.Thread(target=report, name=f"progress-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._tell("finished" if exc[0] is None else "failed")
        if self.connect:
            try:
                self.spark.removeProgressHandler(self)
            except ValueError:  # already gone (the session's handlers were cleared)
                pass
        self._tag.__exit__(*exc)
