"""Issue 15's cleaner row, alone: a forced pass over a log with 10% of its records in aborted transactions (and
10% in committed ones) vs a pass over the same records appended without transactions.

``python -m benchmarks.aborted_pass [ROUNDS]`` (default 3) prints each pass's seconds and the ratio of the
medians (target <= 1.2). 400,000 records of 100-byte values over 100,000 keys, in batches of 10,000, on
``local[2]``; the two logs are built once, and each round cleans a fresh copy of each, alternately.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

from deltalog import ManualClock, Store
from deltalog.cleaner.cleaner import CleanResult

RECORDS, BATCH, KEYS = 400_000, 10_000, 100_000
NOW_MS = 1_700_000_000_000


def batches(seed: int = 7) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(RECORDS // BATCH):
        keys = rng.integers(0, KEYS, BATCH)
        out.append(pa.table({"key": pa.array([b"key-%08d" % k for k in keys], pa.binary()),
                             "value": pa.array([b"v" * 100] * BATCH, pa.binary())}))
    return out


def build(root: str, data: list[pa.Table], spark, *, transactions: bool) -> str:
    """A one-partition compacted log of ``data``; with ``transactions``, every tenth batch in an aborted
    transaction and every tenth in a committed one, the rest plain appends."""
    store = Store(root, clock=ManualClock(NOW_MS), spark=spark)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    producer = None
    if transactions:
        producer = store.producer(transactional_id="bench")
        producer.init_transactions()
    for i, table in enumerate(data):
        if producer is not None and i % 10 in (5, 6):
            producer.begin_transaction()
            producer.send("t", table, partition=0)
            (producer.abort_transaction if i % 10 == 5 else producer.commit_transaction)()
        else:
            store.produce("t", table, partition=0)
    store.roll("t", 0)
    return root


def time_pass(pristine: str, spark, rnd: int) -> tuple[float, CleanResult]:
    copy = f"{pristine}-run{rnd}"
    shutil.copytree(pristine, copy)
    try:
        store = Store(copy, clock=ManualClock(NOW_MS + 1 + rnd), spark=spark)
        started = time.perf_counter()
        result = store.clean_partition("t", 0, force=True)
        return time.perf_counter() - started, result
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def main(rounds: int) -> float:
    from deltalog.sql.session import local_session

    spark = local_session(master="local[2]", conf={}, app_name="aborted-pass-bench")
    work = tempfile.mkdtemp(prefix="aborted-pass-")
    try:
        data = batches()
        plain = build(os.path.join(work, "plain"), data, spark, transactions=False)
        txn = build(os.path.join(work, "txn"), data, spark, transactions=True)
        time_pass(plain, spark, 99)  # warm-up, untimed
        time_pass(txn, spark, 98)
        plain_s, txn_s = [], []
        for rnd in range(rounds):
            s, a = time_pass(plain, spark, rnd)
            plain_s.append(s)
            s, b = time_pass(txn, spark, rnd)
            txn_s.append(s)
        ratio = statistics.median(txn_s) / statistics.median(plain_s)
        print(f"plain pass: {[round(x, 2) for x in plain_s]} s; {a.records_read} read, {a.records_written} written")
        print(f"10% aborted: {[round(x, 2) for x in txn_s]} s; {b.records_read} read, {b.records_written} written, "
              f"{b.aborted_dropped} aborted dropped, {b.markers_stamped} markers stamped")
        print(f"ratio of medians (10% aborted / plain): {ratio:.3f} (target <= 1.2)")
        return ratio
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
