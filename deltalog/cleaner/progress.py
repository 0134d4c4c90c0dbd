"""Progress of a long cleaning pass: a log line every so often with the Spark tasks done so far.

A pass over a big partition can run for minutes; Kafka's cleaner logs nothing until it is done, but a
scheduled job that is silent for ten minutes looks hung. The pass's Spark jobs run in a job group of their
own, so the line counts only this pass's tasks even when several passes run side by side.

Whoever runs the loop may listen instead (:data:`ProgressListener`): it gets a :class:`PassStatus` when a pass
starts, every interval, and when it ends, and draws what it likes (``deltalog clean`` draws a progress bar on
a terminal); without a listener the statuses are logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deltalog.cleaner.log_to_clean import LogToClean

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

    The pass's Spark jobs run in a job group of their own, so the line counts only this pass's tasks even
    when several passes run side by side.
    """

    def __init__(self, spark: Any, ltc: LogToClean, interval_s: float, listener: ProgressListener | None = None
                 ) -> None:
        snap = ltc.snapshot
        self.name = f"{snap.topic}-{snap.partition}"
        self.group = f"deltalog-clean-{snap.topic}-{snap.partition}-{id(self):x}"
        self.section = (ltc.first_dirty_offset, ltc.first_uncleanable_offset)
        self.bytes = ltc.cleanable_bytes
        self.spark = spark
        self.interval_s = interval_s
        self.listener = listener
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

    def status(self, state: str) -> PassStatus:
        try:
            done, total = self.tasks()
        except Exception:  # the status tracker is best effort (a session stopping, Spark Connect)
            done = total = 0
        return PassStatus(self.name, self.section[0], self.section[1], self.bytes, time.monotonic() - self._started,
                          done, total, state)

    def line(self) -> str:
        done, total = self.tasks()
        return (f"cleaning {self.name}: {time.monotonic() - self._started:,.0f}s, dirty section "
                f"[{self.section[0]}, {self.section[1]}) of {self.bytes:,} bytes, {done}/{total} Spark tasks done")

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
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group, f"deltalog: clean {self.name}", interruptOnCancel=False)
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
        sc = self.spark.sparkContext
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
