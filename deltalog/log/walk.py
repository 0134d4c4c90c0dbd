"""A walk over many partitions (or topics) with a bounded number in flight: the cleaner cycle's Spark-free steps.

Kafka's broker runs its log tasks (``cleanupLogs``' retention, the ``delete-file`` task, recovery at start) on the
``KafkaScheduler``'s pool of ``background.threads`` threads, and recovers a log directory's logs on
``num.recovery.threads.per.data.dir`` threads. Here each partition's step of a cycle (refreshing its snapshot,
retention's and VACUUM's checks, the metrics) is independent of the others and, when it changes anything, leased
on its own, so partitions can go side by side; what costs is each one's round trips to the store (on an object
store tens of milliseconds each), which threads overlap. The steps are I/O-bound: delta-rs and the object store's
client leave the GIL while they wait.

:func:`each_partition` keeps the results in the order of the partitions given, whatever order they finish in, and
keeps every partition's error with it, so a caller reports or raises them as a walk one partition after another
would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from deltalog.log.concurrent_reads import read_each

T = TypeVar("T")
P = TypeVar("P")


@dataclass(frozen=True)
class Walked(Generic[P, T]):
    """One partition's outcome: its step's result, or the exception it raised (``result`` then None)."""

    item: P
    result: T | None
    error: Exception | None


def each_partition(items: Sequence[P], step: Callable[[P], T], threads: int) -> list[Walked[P, T]]:
    """``step(item)`` for every item, at most ``threads`` at a time, the outcomes in the order of ``items``. An
    exception (not a ``BaseException`` such as ``KeyboardInterrupt``) is kept as that item's outcome. The pool is
    :func:`deltalog.log.concurrent_reads.read_each`'s (an item given twice goes to one thread)."""
    def one(item: P) -> Walked[P, T]:
        try:
            return Walked(item, step(item), None)
        except Exception as e:  # noqa: BLE001 - kept with its partition: the caller raises or logs it
            return Walked(item, None, e)

    if threads <= 1 or len(items) <= 1:
        return [one(item) for item in items]
    return read_each(items, one, threads=threads)  # type: ignore[arg-type,return-value] - one() never raises
