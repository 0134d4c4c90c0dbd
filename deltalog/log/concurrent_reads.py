"""One read of each of many partition logs, side by side: what a request over many partitions waits for.

A Kafka broker answers ListOffsets or a consumer group's lag from log ends it holds in memory. deltalog holds them
per process too (:meth:`PartitionLog.head` and :meth:`PartitionLog.snapshot`, reused while the Delta version holds,
one look for the next commit's file to know it does), so what is left to wait for is the partitions whose Delta log
moved and, in a fresh process, the first read of every one. Those reads are I/O in delta-rs and the storage
(both release the GIL), so :func:`read_each` runs them on a bounded pool of threads, each taking the next partition
as it finishes one: the unchanged partitions cost a file check each and the moved ones overlap their reads. The
bound is the store's ``background.threads`` (:attr:`LogManager.walk_threads`), Kafka's pool for a broker's log tasks,
which the cycle's walk uses too: the reads wait on storage (a Delta log's files, an object store's round trips), not
on the CPU, so more than the cores; bounded so a request over thousands of partitions does not open thousands of
connections.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from deltalog.errors import DeltalogError
from deltalog.log.partition_log import PartitionLog

T = TypeVar("T")


def read_each(logs: Sequence[PartitionLog], read: Callable[[PartitionLog], T], *,
              threads: int) -> list[T | DeltalogError]:
    """``read(log)`` for each of ``logs``, in their order, at most ``threads`` at a time (the store's
    ``background.threads``): its result, or the :class:`DeltalogError` it raised (a partition's error is its own, as in
    a Kafka response; any other exception is raised). Each log is read by one thread at a time; a log given twice is
    read twice by the same thread."""
    results: list[T | DeltalogError | None] = [None] * len(logs)
    failures: list[BaseException] = []
    # A log listed twice goes to the same worker: a PartitionLog is not shared between threads.
    by_log: dict[int, list[int]] = {}
    for i, log in enumerate(logs):
        by_log.setdefault(id(log), []).append(i)
    work = iter(list(by_log.values()))
    lock = threading.Lock()

    def worker() -> None:
        while not failures:
            with lock:
                indexes = next(work, None)
            if indexes is None:
                return
            for i in indexes:
                try:
                    results[i] = read(logs[i])
                except DeltalogError as e:
                    results[i] = e
                except BaseException as e:  # noqa: BLE001 - raised in the calling thread below
                    failures.append(e)
                    return

    n = min(threads, len(by_log))
    if n <= 1:
        worker()
    else:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="deltalog-read") as pool:
            for f in [pool.submit(worker) for _ in range(n)]:
                f.result()
    if failures:
        raise failures[0]
    return results  # type: ignore[return-value]


__all__ = ["read_each"]
