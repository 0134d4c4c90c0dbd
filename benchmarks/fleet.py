"""``python -m benchmarks.fleet --partitions 200``: a store of many small partitions, as a CDC deployment has.

Measured in one run, on one warm Spark session:

* **one Delta commit of one partition** (a 100-record append): the reference the issue sets (the marginal cost of
  cleaning a small partition should be at most 3x it);
* **cleaning N small partitions** (each three closed segments of a few keys: a small dirty section), one pass at a
  time (``shared_jobs=False``, the loop before shared jobs) and in rounds whose Spark work is shared
  (:mod:`deltalog.cleaner.shared_jobs`), each on two store sizes so the marginal cost per partition is the
  difference over the difference in partitions (the fixed costs cancel);
* **an idle cycle** of the cleaned store in a fresh process (``deltalog.jobs.cleaner_job --once``): the cycle's
  time, the process's, and whether a JVM started (it must not).

Prints one JSON object; docs/scale.md carries the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

from deltalog import Record, Store

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(root: str, partitions: int, spark: object) -> Store:
    """``partitions`` partitions of one topic, each with a small dirty section (3 closed segments of 5 keys)."""
    store = Store(root, spark=spark)
    store.create_topic("cdc", partitions, config={"cleanup.policy": "compact"})
    for p in range(partitions):
        for r in range(3):
            store.append("cdc", p, [Record(f"k{i}", f"v{r}") for i in range(5)])
            store.roll("cdc", p)
        store.append("cdc", p, [Record("active", "a")])
    return store


def commit_reference(store: Store, repeats: int = 7) -> float:
    """The median time of one Delta commit of one partition: a 100-record append."""
    times = []
    for i in range(repeats):
        batch = pa.table({"key": [b"c%d" % j for j in range(100)], "value": [b"x" * 50] * 100})
        t = time.perf_counter()
        store.append("cdc", i % 2, batch)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def clean_time(work: str, name: str, partitions: int, spark: object, shared: bool) -> tuple[float, list]:
    store = build(os.path.join(work, name), partitions, spark)
    cleaner = store.log_cleaner(shared_jobs=shared)
    t = time.perf_counter()
    round_ = cleaner.clean_filthiest_logs()
    seconds = time.perf_counter() - t
    if len(round_.cleans) != partitions or round_.outcomes:
        raise SystemExit(f"{name}: cleaned {len(round_.cleans)} of {partitions}: {round_.outcomes}")
    return seconds, cleaner.rounds


def idle_cycle(root: str) -> dict[str, object]:
    """A cycle of the job in a fresh process on an idle store: its time, the process's, and whether Spark started."""
    probe = ("import sys, time, json\n"
             "t0 = time.perf_counter()\n"
             "from deltalog import Store\n"
             "cleaner = Store(sys.argv[1]).log_cleaner()\n"
             "t1 = time.perf_counter()\n"
             "cycle = cleaner.run_cycle()\n"
             "t2 = time.perf_counter()\n"
             "ctx = sys.modules.get('pyspark.core.context') or sys.modules.get('pyspark.context')\n"
             "jvm = ctx is not None and ctx.SparkContext._active_spark_context is not None\n"
             "print(json.dumps({'open_s': t1 - t0, 'cycle_s': t2 - t1, 'passes': len(cycle.cleans), 'jvm': jvm}))\n")
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe, root], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": REPO})
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - t
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    p.add_argument("--partitions", type=int, default=200, help="the larger store (the smaller has a fifth)")
    p.add_argument("--cores", type=int, default=None)
    p.add_argument("--no-serial", action="store_true", help="skip cleaning one pass at a time (slow: ~0.7 s each)")
    args = p.parse_args(argv)
    from deltalog.sql.session import local_session

    cores = args.cores or os.cpu_count() or 2
    spark = local_session(master=f"local[{cores}]", app_name="deltalog-fleet-benchmark")
    work = tempfile.mkdtemp(prefix="deltalog-fleet-")
    big, small = args.partitions, max(2, args.partitions // 5)
    out: dict[str, object] = {"partitions": [small, big], "cores": cores}
    try:
        clean_time(work, "warm-up", 4, spark, True)  # Spark's first jobs and the workers' imports, untimed
        out["commit_s"] = commit_reference(Store(os.path.join(work, "warm-up"), spark=spark))
        kinds = [("shared", True)] + ([] if args.no_serial else [("one_at_a_time", False)])
        for kind, shared in kinds:
            s_small, _ = clean_time(work, f"{kind}-{small}", small, spark, shared)
            s_big, rounds = clean_time(work, f"{kind}-{big}", big, spark, shared)
            marginal = (s_big - s_small) / (big - small)
            out[kind] = {"seconds": [s_small, s_big], "marginal_s": marginal,
                         "marginal_vs_commit": marginal / out["commit_s"], "rounds": rounds}
        out["idle_cycle"] = idle_cycle(os.path.join(work, f"shared-{big}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
