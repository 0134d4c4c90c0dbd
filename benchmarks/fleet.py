"""``python -m benchmarks.fleet --partitions 200``: a store of many small partitions, as a CDC deployment has.

Measured in one run, on one warm Spark session:

* **one Delta commit of one partition** (a 100-record append): the reference the issue sets (the marginal cost of
  cleaning a small partition should be at most 3x it);
* **cleaning N small partitions** (each three closed segments of a few keys: a small dirty section), one pass at a
  time (``shared_jobs=False``, the loop before shared jobs) and in rounds whose Spark work is shared
  (:mod:`deltalog.cleaner.shared_jobs`), each on two store sizes so the marginal cost per partition is the
  difference over the difference in partitions (the fixed costs cancel);
* **an idle cycle** of the cleaned store in a fresh process (the cycle ``deltalog.jobs.cleaner_job --once`` runs): the
  cycle's time and CPU time, the process's, and whether a JVM started (it must not); twice, the first process reading
  every Delta log (the store was cleaned outside a cycle, so no log-snapshot checkpoint), the second from the
  checkpoint the first wrote (the scheduled job's usual case).

``python -m benchmarks`` runs the same measurement as its rows 23 and 24 (:func:`fleet`), on 1,000 partitions (200 at
the tiny preset) built in one commit each (:func:`build_fast`).

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
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from benchmarks.check import BenchmarkFailure
from deltalog import Record, Store
from deltalog.log import arrow_records, delta

if TYPE_CHECKING:
    from benchmarks.runner import Bench

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(root: str, partitions: int, spark: object) -> Store:
    """``partitions`` partitions of one topic, each with a small dirty section (3 closed segments of 5 keys), made
    through ``store.append`` and ``store.roll`` (seven Delta commits a partition)."""
    store = Store(root, spark=spark)
    store.create_topic("cdc", partitions, config={"cleanup.policy": "compact"})
    for p in range(partitions):
        for r in range(3):
            store.append("cdc", p, [Record(f"k{i}", f"v{r}") for i in range(5)])
            store.roll("cdc", p)
        store.append("cdc", p, [Record("active", "a")])
    return store


def build_fast(root: str, partitions: int, spark: object) -> Store:
    """The partitions :func:`build` makes, each in one Delta commit instead of seven: the same four data files (three
    closed segments of five keys and an active segment of one record, written as an append writes them) and the log
    positions the appends and rolls leave, committed together (as the workload generates its large presets). A
    1,000-partition store then takes a fraction of the time to build; its partitions are real deltalog partitions."""
    store = Store(root, spark=spark)
    store.create_topic("cdc", partitions, config={"cleanup.policy": "compact"})
    now = store.clock.now_ms()
    batches = [[Record(f"k{i}", f"v{r}") for i in range(5)] for r in range(3)] + [[Record("active", "a")]]
    for p in range(partitions):
        log = store.log("cdc", p)
        config = log.snapshot().config
        adds, offset = [], 0
        for records in batches:
            rows = arrow_records.validated(arrow_records.from_records(records), config, "cdc", now)
            rows = arrow_records.with_log_columns(rows, range(offset, offset + len(records)), offset)
            adds.append(delta.write_data_file(log.storage, log.uri, rows, now))
            offset += len(records)
        active = offset - 1
        delta.commit(log.table(), adds, operation="append", metadata={"records": offset, "benchmark": "fleet"},
                     txns={delta.TXN_LOG_END_OFFSET: offset, delta.TXN_ACTIVE_SEGMENT: active,
                           delta.TXN_ACTIVE_SEGMENT_BYTES: adds[-1].size, delta.TXN_ACTIVE_SEGMENT_OPENED: now})
    return store


def commit_times(store: Store, repeats: int = 7) -> list[float]:
    """Seconds of ``repeats`` Delta commits of one partition each: a 100-record append."""
    times = []
    for i in range(repeats):
        batch = pa.table({"key": [b"c%d" % j for j in range(100)], "value": [b"x" * 50] * 100})
        t = time.perf_counter()
        store.append("cdc", i % 2, batch)
        times.append(time.perf_counter() - t)
    return times


def commit_reference(store: Store, repeats: int = 7) -> float:
    """The median time of one Delta commit of one partition: a 100-record append."""
    return statistics.median(commit_times(store, repeats))


def cpu_seconds() -> float:
    """CPU seconds this process and its children (Spark's JVM, its Python workers) have used so far, from /proc (0
    where there is none): beside the wall times, a figure a loaded machine's other work does not inflate as much."""
    def of(pid: str) -> tuple[int, float]:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        procs = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                procs[int(pid)] = of(pid)
            except OSError:
                continue
    except OSError:
        return 0.0
    mine, total, todo = {os.getpid()}, 0.0, [os.getpid()]
    while todo:
        parent = todo.pop()
        total += procs.get(parent, (0, 0.0))[1]
        kids = [pid for pid, (ppid, _) in procs.items() if ppid == parent and pid not in mine]
        mine.update(kids)
        todo += kids
    return total


def clean_time(work: str, name: str, partitions: int, spark: object, shared: bool,
               make: Callable[[str, int, object], Store] = build) -> tuple[float, list, float]:
    """Seconds to clean a store of ``partitions`` built by ``make``, its rounds, and the CPU seconds it took."""
    store = make(os.path.join(work, name), partitions, spark)
    cleaner = store.log_cleaner(shared_jobs=shared)
    cpu = cpu_seconds()
    t = time.perf_counter()
    round_ = cleaner.clean_filthiest_logs()
    seconds = time.perf_counter() - t
    cpu = cpu_seconds() - cpu
    if len(round_.cleans) != partitions or round_.outcomes:
        raise BenchmarkFailure(f"{name}: cleaned {len(round_.cleans)} of {partitions}: {round_.outcomes}")
    return seconds, cleaner.rounds, cpu


def idle_cycle(root: str) -> dict[str, object]:
    """A cycle of the job in a fresh process on an idle store, twice: its time and CPU time, the process's, and
    whether Spark started (it must not). The store was cleaned outside a cycle, so the first process reads every
    partition's Delta log (``first_read``) and its cycle writes the log-snapshot checkpoint; the second is the
    scheduled job's usual case, a fresh process after a cycle (:mod:`deltalog.log.snapshot_checkpoint`)."""
    probe = ("import sys, time, json\n"
             "t0 = time.perf_counter()\n"
             "from deltalog import Store\n"
             "cleaner = Store(sys.argv[1]).log_cleaner()\n"
             "t1 = time.perf_counter()\n"
             "c1 = time.process_time()\n"
             "cycle = cleaner.run_cycle()\n"
             "t2 = time.perf_counter()\n"
             "c2 = time.process_time()\n"
             "ctx = sys.modules.get('pyspark.core.context') or sys.modules.get('pyspark.context')\n"
             "jvm = ctx is not None and ctx.SparkContext._active_spark_context is not None\n"
             "print(json.dumps({'open_s': t1 - t0, 'cycle_s': t2 - t1, 'cycle_cpu_s': c2 - c1,\n"
             "                  'process_cpu_s': c2, 'passes': len(cycle.cleans), 'jvm': jvm}))\n")
    runs = []
    for _ in range(2):
        load = os.getloadavg()
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", probe, root], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": REPO})
        out = json.loads(done.stdout.strip().splitlines()[-1])
        out["process_s"] = time.perf_counter() - t
        out["load_average"] = load
        runs.append(out)
    first, out = runs
    out["first_read"] = first
    out["jvm"] = first["jvm"] or out["jvm"]
    out["passes"] = first["passes"] + out["passes"]
    return out


def measure(spark: object, partitions: int, work: str, *, serial: bool = False,
            make: Callable[[str, int, object], Store] = build) -> dict[str, object]:
    """The figures of one run (what ``main`` prints): the commit reference (the median of commits made before, between
    and after the cleanings), the shared rounds' marginal cost per partition (and one pass at a time's, with
    ``serial``), in wall time and in CPU time of the process and its children beside a commit's CPU time, and the idle
    cycle over the larger store, cleaned."""
    big, small = partitions, max(2, partitions // 5)
    out: dict[str, object] = {"partitions": [small, big], "load_average": os.getloadavg()}
    clean_time(work, "warm-up", 4, spark, True, make)  # Spark's first jobs and the workers' imports, untimed
    reference = Store(os.path.join(work, "warm-up"), spark=spark)
    commits: list[float] = []
    commit_cpu = [0.0]

    def more_commits() -> None:  # before, between and after the cleanings: the machine's load moves
        cpu = cpu_seconds()
        commits.extend(commit_times(reference))
        commit_cpu[0] += cpu_seconds() - cpu

    more_commits()
    cleaned = {}
    for kind, shared in [("shared", True)] + ([("one_at_a_time", False)] if serial else []):
        cleaned[kind] = [clean_time(work, f"{kind}-{small}", small, spark, shared, make)]
        more_commits()
        cleaned[kind].append(clean_time(work, f"{kind}-{big}", big, spark, shared, make))
        more_commits()
    out["commit_s"] = statistics.median(commits)
    out["commit_cpu_s"] = commit_cpu = commit_cpu[0] / len(commits)
    for kind, ((s_small, _, c_small), (s_big, rounds, c_big)) in cleaned.items():
        marginal = (s_big - s_small) / (big - small)
        marginal_cpu = (c_big - c_small) / (big - small)
        out[kind] = {"seconds": [s_small, s_big], "marginal_s": marginal,
                     "marginal_vs_commit": marginal / out["commit_s"], "cpu_s": [c_small, c_big],
                     "marginal_cpu_s": marginal_cpu, "marginal_cpu_vs_commit_cpu": marginal_cpu / max(commit_cpu, 1e-9),
                     "rounds": rounds}
    out["idle_cycle"] = idle_cycle(os.path.join(work, f"shared-{big}"))
    out["load_average_after"] = os.getloadavg()
    return out


#: Partitions of the larger store in ``python -m benchmarks`` (the issue's 1,000), and at the tiny preset.
HARNESS_PARTITIONS = 1000
TINY_PARTITIONS = 200
MARGINAL = "cleaning many small partitions: marginal cost of one, shared rounds"
COMMIT = "one Delta commit of one such partition (a 100-record append)"
IDLE_CYCLE = "idle cycle over the cleaned partitions, fresh process (no JVM)"


def fleet(bench: Bench, rnd: int) -> None:
    """Rows 23 and 24 of ``python -m benchmarks``: :func:`measure` on stores built by :func:`build_fast`."""
    n = TINY_PARTITIONS if bench.w.name == "tiny" else HARNESS_PARTITIONS
    work = bench.fresh("fleet")
    os.makedirs(work)
    try:
        out = measure(bench.spark, n, work, make=build_fast)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cycle = out["idle_cycle"]
    if cycle["jvm"] or cycle["passes"]:
        raise BenchmarkFailure(f"the idle cycle over {n} partitions started a JVM or ran a pass: {cycle}")
    shared = out["shared"]
    bench.t.add(MARGINAL, shared["marginal_s"])
    bench.t.add(COMMIT, out["commit_s"])
    bench.t.add(IDLE_CYCLE, cycle["cycle_s"])
    bench.t.figures["fleet_partitions"] = n
    bench.t.figures.setdefault("fleet", []).append(out)
    bench.log(f"  {n} small partitions: marginal {1000 * shared['marginal_s']:.1f} ms a partition, one commit "
              f"{1000 * out['commit_s']:.1f} ms ({shared['marginal_vs_commit']:.1f}x); idle cycle "
              f"{cycle['cycle_s']:.1f} s (process {cycle['process_s']:.1f} s; the first after the cleaning, every "
              f"Delta log read: {cycle['first_read']['cycle_s']:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    p.add_argument("--partitions", type=int, default=200, help="the larger store (the smaller has a fifth)")
    p.add_argument("--cores", type=int, default=None)
    p.add_argument("--no-serial", action="store_true", help="skip cleaning one pass at a time (slow: ~0.7 s each)")
    p.add_argument("--fast-build", action="store_true",
                   help="build each partition in one Delta commit (build_fast) instead of seven appends and rolls")
    args = p.parse_args(argv)
    from deltalog.sql.session import local_session

    cores = args.cores or os.cpu_count() or 2
    spark = local_session(master=f"local[{cores}]", app_name="deltalog-fleet-benchmark")
    work = tempfile.mkdtemp(prefix="deltalog-fleet-")
    try:
        out = {"cores": cores, **measure(spark, args.partitions, work, serial=not args.no_serial,
                                         make=build_fast if args.fast_build else build)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
