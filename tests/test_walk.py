"""The cycle's walk over partitions (deltalog/log/walk.py): bounded threads, results in order, errors kept per
partition."""

from __future__ import annotations

import threading
import time

from deltalog.log.walk import each_partition


def test_results_come_in_the_order_given_whatever_order_they_finish_in():
    items = list(range(12))
    walked = each_partition(items, lambda i: time.sleep(0.001 * (12 - i)) or i * i, threads=4)
    assert [w.item for w in walked] == items
    assert [w.result for w in walked] == [i * i for i in items]
    assert all(w.error is None for w in walked)


def test_at_most_threads_items_are_in_flight():
    lock, running, peak = threading.Lock(), [0], [0]

    def step(_: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1

    each_partition(list(range(20)), step, threads=3)
    assert 1 < peak[0] <= 3
    peak[0] = 0
    each_partition(list(range(5)), step, threads=1)
    assert peak[0] == 1  # one thread: one after another, on the caller's thread


def test_an_error_stays_with_its_partition_and_the_others_go_on():
    def step(i: int) -> int:
        if i % 3 == 0:
            raise ValueError(f"partition {i} failed")
        return i

    walked = each_partition(list(range(7)), step, threads=4)
    assert [str(w.error) if w.error else None for w in walked] == [
        "partition 0 failed", None, None, "partition 3 failed", None, None, "partition 6 failed"]
    assert [w.result for w in walked] == [None, 1, 2, None, 4, 5, None]
