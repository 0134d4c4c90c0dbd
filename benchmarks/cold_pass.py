"""Cold and warm pass, fresh process to exit (row 22): what a scheduled cleaner job pays, which is always the
first pass of its process.

A child process (``python -m benchmarks.cold_pass --child ...``) imports deltalog, starts the embedded Spark
session, runs a forced pass over a fresh copy of the generated partition (the cold pass), then the same pass over
another fresh copy (the warm pass), and prints its phases as JSON: ``import``, ``session`` (Spark's own start),
``cold`` / ``warm`` (each with pass 1's map phase and pass 2's copy phase from the pass's own figures) and
``process`` (spawn to exit, measured by the parent). Beside it, DuckDB's dedupe of the same files as a whole
process of its own (``python -c``: import, connect, the query, exit), which is what the pass's process competes
with. ``python -m benchmarks.cold_pass --preset small --rounds 3`` runs the row alone and prints the medians.
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
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from benchmarks.check import BenchmarkFailure

if TYPE_CHECKING:
    from benchmarks.runner import Bench
    from benchmarks.workload import Workload

PROCESS = "deltalog clean, fresh process to exit"
SESSION = "  of which Spark's start (session)"
COLD = "  of which the cold pass (first in the process)"
WARM = "deltalog clean, warm pass (second in the same process)"
DUCKDB_PROCESS = "duckdb dedupe, fresh process to exit"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "DELTALOG_STORE")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def child(pristine: str, work: str, workload: str) -> dict[str, Any]:
    """In the fresh process: import, start Spark, two passes on fresh copies; their phases in seconds."""
    started = time.perf_counter()
    from benchmarks import workload as wl
    from deltalog.clock import ManualClock
    from deltalog.sql.session import local_session
    from deltalog.store import Store

    w = wl.Workload(**json.loads(workload))
    out: dict[str, Any] = {"import": time.perf_counter() - started}
    t = time.perf_counter()
    spark = local_session(app_name="deltalog-cold-pass")
    out["session"] = time.perf_counter() - t
    if os.environ.get("COLD_PASS_JOIN_WARM_UP"):  # an experiment's switch: wait for the workers' warm-up, timed apart
        from deltalog.sql.session import _EMBEDDED

        t = time.perf_counter()
        for _, warm in _EMBEDDED:
            if warm is not None:
                warm.join()
        out["warm-up"] = time.perf_counter() - t
    for rnd, name in ((1, "cold"), (2, "warm")):
        root = os.path.join(work, name)
        shutil.copytree(pristine, root)
        store = Store(root, spark=spark, clock=ManualClock(wl.NOW_MS + rnd), config=w.store_config())
        t = time.perf_counter()
        result = store.clean_partition(wl.TOPIC, 0, force=True)
        seconds = time.perf_counter() - t
        if result is None:
            raise BenchmarkFailure(f"the {name} pass found nothing to clean")
        out[name] = {"seconds": seconds, "map": result.map_ms / 1000, "copy": result.copy_ms / 1000}
        shutil.rmtree(root, ignore_errors=True)
    spark.stop()
    return out


def run_child(pristine: str, work: str, w: Workload) -> dict[str, Any]:
    """One fresh process of the pass over ``pristine`` (generated from ``w``), timed from spawn to exit."""
    os.makedirs(work, exist_ok=True)
    argv = [sys.executable, "-m", "benchmarks.cold_pass", "--child", pristine, work, json.dumps(asdict(w))]
    started = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=1800, cwd=REPO)
    seconds = time.perf_counter() - started
    if p.returncode != 0:
        raise BenchmarkFailure(f"the cold-pass process failed: {p.stderr.strip()[-800:]}")
    figures = json.loads(p.stdout.strip().splitlines()[-1])
    figures["process"] = seconds
    return figures


DUCKDB_SCRIPT = """
import sys, duckdb
files, target, cores = sys.argv[1].split(','), sys.argv[2], int(sys.argv[3])
con = duckdb.connect()
con.execute(f"SET threads = {cores}")
con.execute("COPY (SELECT * FROM read_parquet(" + repr(files) + ") QUALIFY row_number() OVER "
            "(PARTITION BY key ORDER BY \\"offset\\" DESC) = 1) TO '" + target + "' (FORMAT parquet, COMPRESSION snappy)")
"""


def run_duckdb(paths: list[str], target: str, cores: int) -> float:
    """DuckDB's dedupe of ``paths`` as a process of its own, spawn to exit."""
    argv = [sys.executable, "-c", DUCKDB_SCRIPT, ",".join(paths), target, str(cores)]
    started = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=1800)
    seconds = time.perf_counter() - started
    if p.returncode != 0:
        raise BenchmarkFailure(f"the DuckDB process failed: {p.stderr.strip()[-800:]}")
    return seconds


def cold_pass(bench: Bench, rnd: int) -> None:
    """Row 22: one fresh pass process and one fresh DuckDB process a round, on the bench's generated files."""
    figures = run_child(bench.pristine, bench.fresh("cold-pass"), bench.w)
    shutil.rmtree(bench.path("cold-pass"), ignore_errors=True)
    bench.t.add(PROCESS, figures["process"])
    bench.t.add(SESSION, figures["session"])
    bench.t.add(COLD, figures["cold"]["seconds"])
    bench.t.add(WARM, figures["warm"]["seconds"])
    bench.t.figures.setdefault("cold pass", []).append(figures)
    out = bench.fresh("duckdb-process")
    os.makedirs(out)
    seconds = run_duckdb(bench.paths, os.path.join(out, "survivors.parquet"), bench.cores)
    bench._count(out, bench.expected.num_rows)
    shutil.rmtree(out, ignore_errors=True)
    bench.t.add(DUCKDB_PROCESS, seconds)
    bench.log(f"  cold pass process: {figures['process']:.1f} s (session {figures['session']:.1f} s, cold pass "
              f"{figures['cold']['seconds']:.1f} s, warm pass {figures['warm']['seconds']:.1f} s); "
              f"DuckDB process {seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cold_pass", description=__doc__)
    p.add_argument("--preset", default="small")
    p.add_argument("--workload", default="random")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--child", nargs=3, metavar=("PRISTINE", "WORK", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0

    from benchmarks import workload as wl
    from deltalog.clock import ManualClock
    from deltalog.store import Store

    w = wl.with_values(wl.PRESETS[args.preset], args.workload)
    work = tempfile.mkdtemp(prefix="deltalog-cold-pass-")
    try:
        pristine = os.path.join(work, "pristine")
        wl.generate(Store(pristine, clock=ManualClock(wl.NOW_MS), config=w.store_config()), w)
        log = Store(pristine, config=w.store_config()).log(wl.TOPIC, 0)
        paths = [os.path.join(log.uri, f.path) for f in log.snapshot().files]
        rows: dict[str, list[float]] = {}
        for rnd in range(args.rounds):
            f = run_child(pristine, os.path.join(work, f"run-{rnd}"), w)
            d = run_duckdb(paths, os.path.join(work, f"duckdb-{rnd}.parquet"), os.cpu_count() or 2)
            line = {"load": round(os.getloadavg()[0], 1), "process": f["process"], "import": f["import"],
                    "session": f["session"], "cold": f["cold"]["seconds"], "cold map": f["cold"]["map"],
                    "cold copy": f["cold"]["copy"], "warm": f["warm"]["seconds"], "warm map": f["warm"]["map"],
                    "warm copy": f["warm"]["copy"], "duckdb process": d}
            if "warm-up" in f:
                line["warm-up"] = f["warm-up"]
            print(json.dumps({k: round(v, 2) for k, v in line.items()}), flush=True)
            for k, v in line.items():
                rows.setdefault(k, []).append(v)
        print("medians: " + json.dumps({k: round(statistics.median(v), 2) for k, v in rows.items()}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
