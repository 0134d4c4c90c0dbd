"""Cold and warm pass, fresh process to exit (row 22): what a scheduled cleaner job pays, which is always the
first pass of its process.

The parent copies the generated partition twice, then starts a child process (``python -m benchmarks.cold_pass
--child ...``) that imports deltalog, starts the embedded Spark session and waits for its warm-up
(:mod:`deltalog.sql.warm_up`, run in the background from the session's start, as a pass waits for it), runs a
forced pass over the first copy (the cold pass), then the same pass over the second (the warm pass), and prints
its phases as JSON: ``import``, ``session`` (the session's start), ``warm-up wait``, ``cold`` / ``warm`` (each with
pass 1's map phase and pass 2's copy phase from the pass's own figures). The parent measures ``process``: what a
process of one pass costs, spawn to exit (the warm pass left out). Beside it, DuckDB's dedupe of the same files as
a whole process of its own (``python -c``: import, connect, the query, exit), which is what the pass's process
competes with. ``python -m benchmarks.cold_pass --preset medium --rounds 3 --data DIR`` runs the row alone and
prints the medians; ``DELTALOG_WARM_WORKERS=0`` runs it without the warm-up.
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

from benchmarks.check import BenchmarkFailure, check_offsets

if TYPE_CHECKING:
    from benchmarks.runner import Bench
    from benchmarks.workload import Workload

PROCESS = "deltalog clean, fresh process to exit"
SESSION = "  of which Spark's start (session and its warm-up)"
COLD = "  of which the cold pass (first in the process)"
WARM = "deltalog clean, warm pass (second in the same process)"
DUCKDB_PROCESS = "duckdb dedupe, fresh process to exit"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "DELTALOG_STORE")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def child(work: str, workload: str) -> dict[str, Any]:
    """In the fresh process: import, start Spark (and wait for its warm-up), two passes on the copies the parent
    made in ``work`` (``cold``, ``warm``); their phases in seconds, and wall-clock marks for the parent."""
    started = time.perf_counter()
    from benchmarks import workload as wl
    from deltalog.clock import ManualClock
    from deltalog.sql.session import await_warm_up, local_session
    from deltalog.store import Store

    w = wl.Workload(**json.loads(workload))
    out: dict[str, Any] = {"import": time.perf_counter() - started}
    t = time.perf_counter()
    spark = local_session(app_name="deltalog-cold-pass")
    out["session"] = time.perf_counter() - t
    # The embedded session's warm-up (deltalog.sql.warm_up) runs in the background from here; a pass waits for it
    # (Store's cleaner does): Spark's start is the session's start plus this wait. DELTALOG_WARM_WORKERS=0: none.
    t = time.perf_counter()
    took = await_warm_up(spark)
    out["warm-up wait"] = time.perf_counter() - t
    out["warm-up"] = took or 0.0
    for rnd, name in ((1, "cold"), (2, "warm")):
        store = Store(os.path.join(work, name), spark=spark, clock=ManualClock(wl.NOW_MS + rnd),
                      config=w.store_config())
        t = time.perf_counter()
        result = store.clean_partition(wl.TOPIC, 0, force=True)
        seconds = time.perf_counter() - t
        if result is None:
            raise BenchmarkFailure(f"the {name} pass found nothing to clean")
        out[name] = {"seconds": seconds, "map": result.map_ms / 1000, "copy": result.copy_ms / 1000,
                     "started_wall": time.time() - seconds, "done_wall": time.time()}
    spark.stop()
    return out


def spark_start(figures: dict[str, Any]) -> float:
    """Spark's start as the pass's process saw it: the session's start and the wait for its warm-up."""
    return figures["session"] + figures.get("warm-up wait", 0.0)


def run_child(pristine: str, work: str, w: Workload, *, warm_up: bool = True) -> dict[str, Any]:
    """One fresh process of two passes over copies of ``pristine`` (generated from ``w``), made before it starts.

    ``process`` is what a process of one pass costs, spawn to exit: the time from spawn to the end of the cold
    pass, plus the time from the end of the warm pass to exit (stopping Spark, the interpreter's exit); the warm
    pass between is left out. ``process, both passes`` is the whole child, spawn to exit."""
    for name in ("cold", "warm"):
        shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        shutil.copytree(pristine, os.path.join(work, name))
    os.sync()  # the copies on disk before the child starts: their write-back would slow its first pass, not its second
    argv = [sys.executable, "-m", "benchmarks.cold_pass", "--child", work, json.dumps(asdict(w))]
    spawned = time.time()
    started = time.perf_counter()
    env = {**_env(), **({} if warm_up else {"DELTALOG_WARM_WORKERS": "0"})}
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, cwd=REPO)
    seconds = time.perf_counter() - started
    exited = time.time()
    for name in ("cold", "warm"):
        shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    if p.returncode != 0:
        raise BenchmarkFailure(f"the cold-pass process failed: {p.stderr.strip()[-800:]}")
    figures = json.loads(p.stdout.strip().splitlines()[-1])
    figures["process, both passes"] = seconds
    figures["process"] = (figures["cold"]["done_wall"] - spawned) + (exited - figures["warm"]["done_wall"])
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
    bench.t.add(SESSION, spark_start(figures))
    bench.t.add(COLD, figures["cold"]["seconds"])
    bench.t.add(WARM, figures["warm"]["seconds"])
    bench.t.figures.setdefault("cold pass", []).append(figures)
    out = bench.fresh("duckdb-process")
    os.makedirs(out)
    seconds = run_duckdb(bench.paths, os.path.join(out, "survivors.parquet"), bench.cores)
    check_offsets(os.path.join(out, "survivors.parquet"), bench.expected, "DuckDB's dedupe as a process")
    shutil.rmtree(out, ignore_errors=True)
    bench.t.add(DUCKDB_PROCESS, seconds)
    bench.log(f"  cold pass process: {figures['process']:.1f} s (Spark's start {spark_start(figures):.1f} s, cold pass "
              f"{figures['cold']['seconds']:.1f} s, warm pass {figures['warm']['seconds']:.1f} s); "
              f"DuckDB process {seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cold_pass", description=__doc__)
    p.add_argument("--preset", default="small")
    p.add_argument("--workload", default="random")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--without-warm-up", action="store_true",
                   help="also run, each round, a process whose session has no warm-up (the rows marked 'none')")
    p.add_argument("--data", metavar="DIR", help="keep the generated partition in DIR and reuse it on the next run "
                   "(generating the medium preset takes minutes)")
    p.add_argument("--child", nargs=2, metavar=("WORK", "WORKLOAD"), help=argparse.SUPPRESS)
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
        pristine = os.path.join(args.data, f"{w.name}-{w.values}") if args.data else os.path.join(work, "pristine")
        if not os.path.exists(pristine + ".generated"):
            shutil.rmtree(pristine, ignore_errors=True)
            t = time.perf_counter()
            wl.generate(Store(pristine, clock=ManualClock(wl.NOW_MS), config=w.store_config()), w)
            with open(pristine + ".generated", "w") as f:
                f.write(json.dumps(asdict(w)))
            print(f"generated {w.name} in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        log = Store(pristine, config=w.store_config()).log(wl.TOPIC, 0)
        paths = [os.path.join(log.uri, f.path) for f in log.snapshot().files]
        rows: dict[str, list[float]] = {}
        kinds = [True, False] if args.without_warm_up else [True]
        for rnd in range(args.rounds):
            d = run_duckdb(paths, os.path.join(work, f"duckdb-{rnd}.parquet"), os.cpu_count() or 2)
            for warm_up in kinds if rnd % 2 == 0 else kinds[::-1]:
                f = run_child(pristine, os.path.join(work, f"run-{rnd}"), w, warm_up=warm_up)
                line = {"load": round(os.getloadavg()[0], 1), "process": f["process"], "import": f["import"],
                        "session": f["session"], "warm-up": f["warm-up"], "warm-up wait": f["warm-up wait"],
                        "spark start": spark_start(f), "process, both passes": f["process, both passes"],
                        "cold": f["cold"]["seconds"], "cold map": f["cold"]["map"], "cold copy": f["cold"]["copy"],
                        "warm": f["warm"]["seconds"], "warm map": f["warm"]["map"], "warm copy": f["warm"]["copy"],
                        "cold/warm": f["cold"]["seconds"] / f["warm"]["seconds"], "duckdb process": d,
                        "process/duckdb": f["process"] / d}
                tag = "" if warm_up else "none: "
                print(tag + json.dumps({k: round(v, 2) for k, v in line.items()}), flush=True)
                for k, v in line.items():
                    rows.setdefault(tag + k, []).append(v)
        print("medians: " + json.dumps({k: round(statistics.median(v), 2) for k, v in rows.items()}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
