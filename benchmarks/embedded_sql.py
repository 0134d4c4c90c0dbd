"""``deltalog sql`` without Spark (row 15): counting the current state of the partition, process start to exit,
side by side with DuckDB's own dedupe of the same Parquet files in a process of its own.

Both sides are fresh Python processes, timed from the spawn to the exit, so both pay for the interpreter and
their imports: ``python -m deltalog sql "SELECT count(*) FROM bench_current"`` (the embedded engine: the
partition's snapshot from delta-rs, the DuckDB views of :mod:`deltalog.sql.ddl` over its files) and
``python -c "import duckdb; ..."`` with the ``row_number()`` dedupe a DuckDB user writes over the snapshot's
files (the file list given, as DuckDB's delta extension cannot be downloaded here). Both counts are checked
against the live keys of the workload. Targets: under 1.5 s, and within 2x DuckDB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from benchmarks.check import BenchmarkFailure

if TYPE_CHECKING:
    from benchmarks.runner import Bench

EMBEDDED_SQL = "deltalog sql: count of the current state (process)"
DUCKDB_COUNT = "duckdb: row_number() dedupe count of the same files (process)"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}  # the embedded engine, as a laptop runs it
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _timed(bench: Bench, name: str, argv: list[str]) -> None:
    started = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=600)
    seconds = time.perf_counter() - started
    if p.returncode != 0:
        raise BenchmarkFailure(f"{name} failed: {p.stderr.strip()[-500:]}")
    numbers = [int(w) for line in p.stdout.splitlines() for w in line.replace("|", " ").split() if w.isdigit()]
    if bench.live_keys not in numbers:
        raise BenchmarkFailure(f"{name} printed {p.stdout.strip()!r}, expected the count {bench.live_keys}")
    bench.t.add(name, seconds)
    bench.log(f"  {name}: {seconds:.2f} s")


def embedded_sql(bench: Bench, rnd: int) -> None:
    """Row 15: both processes once a round, deltalog first."""
    _timed(bench, EMBEDDED_SQL, [sys.executable, "-m", "deltalog", "--store", bench.pristine, "sql",
                                 "SELECT count(*) FROM bench_current"])
    files = ", ".join(f"'{p}'" for p in bench.paths)
    code = ("import duckdb; print(duckdb.sql(\"SELECT count(*) FROM (SELECT value, row_number() OVER (PARTITION BY "
            "key ORDER BY \\\"offset\\\" DESC) AS rn FROM read_parquet([" + files + "])) WHERE rn = 1 AND value IS "
            "NOT NULL\").fetchall()[0][0])")
    _timed(bench, DUCKDB_COUNT, [sys.executable, "-c", code])
