"""Injectable time, in milliseconds since the epoch.

Every time-based rule (segment.ms, min/max.compaction.lag.ms, delete.retention.ms, retention.ms,
file.delete.delay.ms) reads a :class:`Clock`; the logic never reads the wall clock itself, so tests
drive time with a :class:`ManualClock` (a pass is a function of snapshot, range and now, as Kafka's
``Cleaner.clean`` takes ``currentTime`` from its ``Time``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from deltalog.errors import InvalidArgumentError


@runtime_checkable
class Clock(Protocol):
    """Anything that can say what time it is, in epoch milliseconds."""

    def now_ms(self) -> int: ...


class WallClock:
    """The system clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "WallClock()"


class ManualClock:
    """A clock that only moves when told to; the tests' way of making days pass in microseconds."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now = int(now_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` milliseconds and return the new time."""
        if ms < 0:
            raise InvalidArgumentError(f"a clock only moves forward; advance({ms}) is negative")
        with self._lock:
            self._now += int(ms)
            return self._now

    def set(self, now_ms: int) -> None:
        """Set the time; it may not go backwards."""
        with self._lock:
            if now_ms < self._now:
                raise InvalidArgumentError(f"a clock only moves forward; {now_ms} < {self._now}")
            self._now = int(now_ms)

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"
