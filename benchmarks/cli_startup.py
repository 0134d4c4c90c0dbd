"""The command line's start (row 21): ``deltalog --help`` and a store-only command, each a fresh process timed from
the spawn to the exit, beside the interpreter's own start and delta-rs opening the same table in a process of its own.

Every process runs as an installed ``deltalog`` does: with its bytecode cached (the harness compiles once, untimed,
as pip does at install time; ``$PYTHONDONTWRITEBYTECODE`` is dropped). Target: ``deltalog --help`` well under
0.5 s (what a shell user waits for before the help appears); a store-only command (``topics describe``) is shown
beside delta-rs's own open of the partition table, which imports less (no numpy, no pyarrow.compute). ``python -m benchmarks.cli_startup`` runs the row alone
on a small store of its own and prints the medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from benchmarks.check import BenchmarkFailure

if TYPE_CHECKING:
    from benchmarks.runner import Bench

HELP = "deltalog --help (process)"
CLEANER_HELP = "deltalog-cleaner --help (process)"
PYTHON_START = "python -c pass (process)"
DESCRIBE = "deltalog topics describe (process)"
DELTA_OPEN = "delta-rs: open the partition table (process)"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "PYTHONDONTWRITEBYTECODE",
                                                              "DELTALOG_STORE")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(argv: list[str]) -> float:
    started = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=600)
    seconds = time.perf_counter() - started
    if p.returncode != 0:
        raise BenchmarkFailure(f"{' '.join(argv)} failed: {p.stderr.strip()[-500:]}")
    return seconds


def commands(store: str, topic: str) -> dict[str, list[str]]:
    """The processes of the row, by name."""
    table = os.path.join(store, "topics", topic, "0") if "://" not in store else f"{store}/topics/{topic}/0"
    return {
        HELP: [sys.executable, "-m", "deltalog", "--help"],
        CLEANER_HELP: [sys.executable, "-m", "deltalog.jobs.cleaner_job", "--help"],
        PYTHON_START: [sys.executable, "-c", "pass"],
        DESCRIBE: [sys.executable, "-m", "deltalog", "--store", store, "topics", "describe", topic],
        DELTA_OPEN: [sys.executable, "-c", f"import deltalake; deltalake.DeltaTable({table!r}).version()"],
    }


def warm(store: str, topic: str) -> None:
    """Compile the bytecode once, untimed, as an install does."""
    for argv in commands(store, topic).values():
        _run(argv)


def cli_startup(bench: Bench, rnd: int) -> None:
    """Row 21: its processes once a round."""
    if rnd == 0:
        warm(bench.pristine, "bench")
    for name, argv in commands(bench.pristine, "bench").items():
        seconds = _run(argv)
        bench.t.add(name, seconds)
        bench.log(f"  {name}: {seconds:.2f} s")


def main() -> int:
    """The row alone, on a small store of its own: medians of 7 rounds."""
    with tempfile.TemporaryDirectory(prefix="deltalog-cli-startup-") as work:
        store = os.path.join(work, "store")
        for argv in (["topics", "create", "bench", "--config", "cleanup.policy=compact"],):
            subprocess.run([sys.executable, "-m", "deltalog", "--store", store, *argv], check=True, env=_env(),
                           capture_output=True)
        subprocess.run([sys.executable, "-m", "deltalog", "--store", store, "produce", "bench"], check=True,
                       env=_env(), capture_output=True,
                       input="".join(f'{{"key": "k{i % 100}", "value": "v{i}"}}\n' for i in range(1000)).encode())
        if not os.path.isdir(os.path.join(store, "topics", "bench", "0")):
            raise BenchmarkFailure(f"no partition table under {store}/topics/bench/0: the layout moved")
        warm(store, "bench")
        seconds: dict[str, list[float]] = {name: [] for name in commands(store, "bench")}
        for _ in range(7):
            for name, argv in commands(store, "bench").items():
                seconds[name].append(_run(argv))
        for name, values in seconds.items():
            print(f"{name}: median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
