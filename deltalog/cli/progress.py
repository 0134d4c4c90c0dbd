"""Progress of long commands on stderr, through tqdm: a bar (or a counter) redrawn in place on a terminal, nothing
or a log line every so often otherwise. Progress never goes to stdout, which holds the results.

* :func:`counter`: what ``produce`` (records read, and bytes of a ``--file``) and ``consume`` (records printed while
  stdout goes to a file or a pipe) show: tqdm's own bar or counter, shown only when stderr is a terminal.
* :class:`CleanProgress`: ``deltalog clean`` hands it to the cleaning loop as its progress listener
  (:mod:`deltalog.cleaner.progress`): each pass reports when it starts, every interval while its Spark jobs run, and
  when it ends. A pass's Spark jobs come one after another and their tasks are known only once a job is planned, so
  the total grows while the pass runs: the terminal shows a counter of the tasks done (with those planned so far
  beside it), which never goes backwards, rather than a fraction that would fall each time a job is planned.
* :class:`Steps`: ``check``, ``vacuum`` and ``state refresh`` count their work in steps (partitions, topics) with
  what runs now beside the bar; the library calls it as a :data:`StepListener` ``(done, total, now)``.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from deltalog.cleaner.progress import PassStatus

#: Seconds between redraws of the bar on a terminal.
BAR_INTERVAL_S = 0.5
#: Seconds between progress lines when stderr is not a terminal (a log file, CI).
DEFAULT_LINE_INTERVAL_S = 10.0


def counter(description: str, *, unit: str, total: int | None = None, stream: TextIO | None = None,
            show: bool | None = None, unit_scale: bool = True) -> Any:
    """A tqdm progress on ``stream`` (default stderr): a bar when ``total`` is known, else a counter with its rate.
    ``show``: None shows it only when ``stream`` is a terminal (tqdm's own rule), so a log or CI stays quiet."""
    from tqdm import tqdm  # the progress library: imported by the commands that draw one

    class _Progress(tqdm):
        """tqdm, drawing its last count once before ``leave=False`` clears it: work that ends within one redraw
        interval still shows where it ended (100% of a file), not only its start."""

        def close(self) -> None:
            if not self.disable:
                self.refresh()
            super().close()

    return _Progress(total=total, desc=description, unit=unit, unit_scale=unit_scale, file=stream or sys.stderr,
                disable=None if show is None else not show, leave=False, mininterval=BAR_INTERVAL_S,
                dynamic_ncols=True)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal; a stream without ``isatty`` (a replaced ``sys.stdin``, a generator of
    lines) is not."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


class Steps:
    """A bar of steps on ``stream`` (default stderr), shown only on a terminal: the library calls it as its
    ``progress`` listener with ``(steps done, steps in all, what runs now)``. Neither count ever falls: a step
    tried again (a refresh retried after a conflict) keeps the count shown, and a total only grows.
    ``before``: what is shown until the first step (starting Spark, importing a library)."""

    def __init__(self, description: str, *, unit: str = " partitions", before: str | None = None,
                 stream: TextIO | None = None, show: bool | None = None) -> None:
        self.bar = counter(description, unit=unit, stream=stream, show=show, unit_scale=False)
        if before:
            self.bar.set_postfix_str(before)

    def __call__(self, done: int, total: int, now: str) -> None:
        bar = self.bar
        if bar.disable:
            return
        if total > (bar.total or 0):
            bar.total = total
        bar.set_postfix_str(now, refresh=False)
        if done > bar.n:
            bar.update(done - bar.n)
        bar.refresh()

    def finish(self, now: str = "done") -> None:
        """Every step done (the work ended: a refresh with nothing to read, a check's last suite)."""
        if not self.bar.disable and self.bar.total:
            self(self.bar.total, self.bar.total, now)

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


class CleanProgress:
    """A :data:`~deltalog.cleaner.progress.ProgressListener` that shows passes on ``stream``: one tqdm counter of
    tasks done per running pass on a terminal, a log line per status otherwise."""

    def __init__(self, stream: TextIO, *, interval_s: float | None = None, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = is_terminal(stream) if tty is None else tty
        self.interval_s = interval_s if interval_s is not None else (BAR_INTERVAL_S if self.tty else
                                                                      DEFAULT_LINE_INTERVAL_S)
        self._bars: dict[str, Any] = {}
        self._done: dict[str, int] = {}  # the most tasks each pass has shown done: shown counts never fall
        self._planned: dict[str, int] = {}  # the most tasks each pass has had planned
        self._lock = threading.Lock()

    def __call__(self, status: PassStatus) -> None:
        with self._lock:
            done = max(status.tasks_done, self._done.get(status.partition, 0))
            planned = max(status.tasks_total, self._planned.get(status.partition, 0))
            ended = status.state in ("finished", "failed")
            if ended:
                self._done.pop(status.partition, None)
                self._planned.pop(status.partition, None)
            else:
                self._done[status.partition] = done
                self._planned[status.partition] = planned
            if not self.tty:
                self.stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line(status, done)}\n")
                self.stream.flush()
                return
            from tqdm import tqdm

            if ended:
                bar = self._bars.pop(status.partition, None)
                if bar is not None:
                    bar.close()
                tqdm.write(line(status, done), file=self.stream)
                return
            bar = self._bars.get(status.partition)
            if bar is None:
                bar = self._bars[status.partition] = counter(f"cleaning {status.partition}", unit=" tasks",
                                                             stream=self.stream, show=True, unit_scale=False)
            bar.update(done - bar.n)
            bar.set_postfix_str(f"{planned} planned so far" if planned else "planning")

    def close(self) -> None:
        """Clear the bars left on the terminal (when the loop stops between a pass's statuses)."""
        with self._lock:
            for bar in self._bars.values():
                bar.close()
            self._bars.clear()
            self._done.clear()
            self._planned.clear()


def line(s: PassStatus, done: int | None = None) -> str:
    """A status as one log line (``done``: the tasks done to show, when more than the status says)."""
    done = s.tasks_done if done is None else done
    if s.state == "started":
        return (f"cleaning {s.partition}: dirty section [{s.first_dirty_offset}, {s.first_uncleanable_offset}), "
                f"{s.cleanable_bytes:,} bytes")
    if s.state == "finished":
        return f"cleaned {s.partition} in {s.elapsed_s:.1f}s ({done} Spark tasks)"
    if s.state == "failed":
        return f"cleaning {s.partition} failed after {s.elapsed_s:.1f}s"
    if not s.tasks_total:
        return f"cleaning {s.partition}: {s.elapsed_s:.0f}s, planning its first Spark job"
    return f"cleaning {s.partition}: {s.elapsed_s:.0f}s, {done} Spark tasks done ({s.tasks_total} planned so far)"
