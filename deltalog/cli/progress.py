"""Progress of long cleaning passes on stderr: a bar redrawn in place on a terminal, a log line otherwise.

``deltalog clean`` hands a :class:`CleanProgress` to the cleaning loop as its progress listener
(:mod:`deltalog.cleaner.progress`): each pass reports when it starts, every interval while its Spark jobs run
(tasks done / tasks so far), and when it ends. Progress never goes to stdout, which holds the results.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

from deltalog.cleaner.progress import PassStatus

#: Seconds between redraws of the bar on a terminal.
BAR_INTERVAL_S = 0.5
#: Seconds between progress lines when stderr is not a terminal (a log file, CI).
DEFAULT_LINE_INTERVAL_S = 10.0
BAR_WIDTH = 24


class CleanProgress:
    """A :data:`~deltalog.cleaner.progress.ProgressListener` that shows passes on ``stream``."""

    def __init__(self, stream: TextIO, *, interval_s: float | None = None, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.interval_s = interval_s if interval_s is not None else (BAR_INTERVAL_S if self.tty else
                                                                      DEFAULT_LINE_INTERVAL_S)
        self._active: dict[str, PassStatus] = {}
        self._lock = threading.Lock()
        self._drawn = False

    def __call__(self, status: PassStatus) -> None:
        with self._lock:
            if status.state in ("finished", "failed"):
                self._active.pop(status.partition, None)
            else:
                self._active[status.partition] = status
            if self.tty:
                self._redraw(status)
            else:
                self.stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line(status)}\n")
            self.stream.flush()

    def _redraw(self, status: PassStatus) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")  # back to the start of the line and clear it
        if status.state in ("finished", "failed"):
            self.stream.write(line(status) + "\n")
        self._drawn = bool(self._active)
        if self._active:
            self.stream.write("  ".join(bar(s) for s in self._active.values()))

    def close(self) -> None:
        """Clear a bar left on the terminal (when the loop stops between a pass's statuses)."""
        with self._lock:
            if self.tty and self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._drawn = False
            self._active.clear()


def line(s: PassStatus) -> str:
    """A status as one log line."""
    if s.state == "started":
        return (f"cleaning {s.partition}: dirty section [{s.first_dirty_offset}, {s.first_uncleanable_offset}), "
                f"{s.cleanable_bytes:,} bytes")
    if s.state == "finished":
        return f"cleaned {s.partition} in {s.elapsed_s:.1f}s ({s.tasks_done} Spark tasks)"
    if s.state == "failed":
        return f"cleaning {s.partition} failed after {s.elapsed_s:.1f}s"
    return f"cleaning {s.partition}: {s.elapsed_s:.0f}s, {s.tasks_done}/{s.tasks_total} Spark tasks done"


def bar(s: PassStatus) -> str:
    """A status as a progress bar: tasks done of the tasks Spark has planned so far."""
    if s.tasks_total:
        filled = BAR_WIDTH * s.tasks_done // s.tasks_total
        gauge = "#" * filled + "-" * (BAR_WIDTH - filled)
        return f"cleaning {s.partition} [{gauge}] {s.tasks_done}/{s.tasks_total} tasks {s.elapsed_s:.0f}s"
    return f"cleaning {s.partition} [{'.' * BAR_WIDTH}] starting {s.elapsed_s:.0f}s"
