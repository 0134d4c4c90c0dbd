"""The embedded session's warm-up: the first pass of a process, run once on a tiny partition of its own.

A scheduled cleaner job is a fresh process, so its pass is always the first of its session, and a session's
first Spark jobs cost far more than the same jobs later (docs/scale.md, "Cold vs warm"): the JVM loads and
compiles the classes of the plan (``range``, ``mapInArrow``, the Arrow collect) the first time it runs them, and
starts its Python daemon and workers, which import pyarrow, numpy and the cleaner's modules. None of that is
deltalog's own work, and all of it is paid once per process. The warm-up pays it on a partition of a few
records, while the caller does its Spark-free work, so the pass over the real partition finds the JVM and the
workers warm:

1. as the session starts, one task per core through the cleaner's own task runner (:func:`~deltalog.cleaner.tasks.run_tasks`: the
   same plan, schema and collect as every pass's jobs), each importing the cleaner's task modules and hashing
   a few keys, so every core's Python worker is started and has those modules loaded
   (``spark.python.worker.reuse`` keeps them for the pass);
2. before the session's first pass (a session that only queries never runs it), a real cleaning round
   (:class:`~deltalog.cleaner.log_cleaner.LogCleaner`) over one tiny compacted partition per core in a temporary local store: pass 1's map tasks reading Parquet in every worker, the driver's merge,
   pass 2's recopy writing Parquet, the Delta commits through delta-rs on the driver's side too.

The warm-up moves that cost, it does not remove it: a caller that waits for it waits about as long as the first
pass would have lost. What it buys is that the cost can overlap other work, and that the pass itself runs at
its warm speed. Its failure is harmless: the pass then pays the first-job costs itself.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

#: Records of the warm-up partition's closed segment (over :data:`_KEYS` keys) and of its active one.
_RECORDS = 256
_KEYS = 32
TOPIC = "deltalog-warm-up"


def start_workers(session: Any, cores: int) -> int:
    """Step 1: ``cores`` tasks through the cleaner's task runner; returns how many ran the cleaner's code."""
    from deltalog.cleaner.tasks import run_tasks
    from deltalog.storage import Storage

    work = tempfile.mkdtemp(prefix="deltalog-warm-up-")
    try:
        return sum(run_tasks(session, warm_task, list(range(cores)), storage=Storage(work), work_dir=work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def warm_task(_index: int) -> int:
    """In a Python worker: import the cleaner's task modules and run the key hash once (numpy, pyarrow, xxhash)."""
    import pyarrow as pa  # runs in a Spark worker: everything it imports is for the worker's module cache

    from deltalog.cleaner import offset_map, recopy  # noqa: F401 - imported for the worker's module cache
    from deltalog.log.key_hash import key_hashes

    key_hashes(pa.array([b"a", b"bb", b"a" * 40]))
    return 1


def tiny_round(session: Any, cores: int) -> int:
    """Step 2, before the first pass: a cleaning round over ``cores`` partitions of a few hundred records each in a temporary store, deleted
    after: the round shares its Spark jobs among them (:mod:`~deltalog.cleaner.shared_jobs`), so each job has a
    task per core and every worker runs pass 1's map and pass 2's recopy once."""
    import pyarrow as pa

    from deltalog.cleaner.log_cleaner import LogCleaner
    from deltalog.clock import ManualClock
    from deltalog.config import StoreConfig
    from deltalog.log.log_manager import LogManager
    from deltalog.storage import Storage

    root = tempfile.mkdtemp(prefix="deltalog-warm-up-store-")
    try:
        clock = ManualClock(1_000_000)
        logs = LogManager(Storage(root), clock, create=True)
        logs.create_topic(TOPIC, max(cores, 1), {"cleanup.policy": "compact"})
        keys = [f"k{i % _KEYS}".encode() for i in range(_RECORDS)]
        values = [None if i % 50 == 7 else b"v" * 16 for i in range(_RECORDS)]  # a few tombstones too
        for plog in logs.logs(TOPIC):
            plog.append(pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}),
                        clock.now_ms())
            plog.roll(clock.now_ms())
            plog.append(pa.table({"key": pa.array([b"k0"], pa.binary()), "value": pa.array([b"v"], pa.binary())}),
                        clock.now_ms())
        cleaner = LogCleaner(logs, lambda: session, StoreConfig.from_properties({}), vacuum=False)
        return len(cleaner.clean_filthiest_logs().cleans)  # how many passes it made
    finally:
        shutil.rmtree(root, ignore_errors=True)
