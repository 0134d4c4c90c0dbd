"""``python -m benchmarks.profile_pass --preset small [--workload json]``: where one cleaning pass's time goes.

Generates the preset's log (as ``python -m benchmarks`` does), runs one untimed pass to warm the JVM and the
Python workers, then one profiled pass on a fresh copy of the log:

- the driver: ``cProfile`` around ``Store.clean_partition``, reported as the cumulative time of deltalog's own
  functions (planning, the two Spark jobs as the driver waits for them, the merge of the partial maps, the
  bitmap, naming, the commit);
- the Python workers: each Spark task's body (pass 1's ``_map_run``, pass 2's ``recopy_chunk``) run under
  ``cProfile`` inside the task, in the Spark worker that runs it, its stats left in a directory and summed per
  phase here. The tasks are the real ones: only ``run_tasks`` is given the profiled function instead of the
  plain one.

The figures are written up in benchmarks/NOTES.md; nothing here is timed for the report.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

from benchmarks import workload as wl


def profiled(fn: Callable[[Any], Any], out_dir: str, phase: str, payload: Any) -> Any:
    """``fn(payload)`` under cProfile, its stats left in ``out_dir`` as ``<phase>-<pid>-<ns>.prof`` (runs in the
    Spark task, so ``out_dir`` must be on the executors' disk: here the local machine)."""
    profile = cProfile.Profile()
    started = time.perf_counter()
    try:
        return profile.runcall(fn, payload)
    finally:
        profile.dump_stats(os.path.join(out_dir, f"{phase}-{time.perf_counter() - started:.3f}s-{os.getpid()}-"
                                                 f"{time.monotonic_ns()}.prof"))


@contextmanager
def _profiling_tasks(out_dir: str) -> Iterator[None]:
    """While open, the cleaner's two ``run_tasks`` callers get a ``run_tasks`` that profiles each task's body."""
    from deltalog.cleaner import cleaner, offset_map, tasks

    def wrapping(phase: str) -> Callable[..., Any]:
        def run(spark: Any, fn: Callable[[Any], Any], payloads: Any, **kw: Any) -> Any:
            return tasks.run_tasks(spark, partial(profiled, fn, out_dir, phase), payloads, **kw)
        return run

    saved = offset_map.run_tasks, cleaner.run_tasks
    offset_map.run_tasks, cleaner.run_tasks = wrapping("map"), wrapping("copy")
    try:
        yield
    finally:
        offset_map.run_tasks, cleaner.run_tasks = saved


def _summary(profiles: list[Any], limit: int, only: str | None = None) -> str:
    buffer = io.StringIO()
    stats = pstats.Stats(*profiles, stream=buffer)
    stats.sort_stats("cumulative").print_stats(*(x for x in (only, limit) if x is not None))
    lines = buffer.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(line for line in lines[start:] if line.strip())


def profile_pass(spark: Any, w: wl.Workload, work: str, top: int = 25) -> str:
    """Generate ``w`` under ``work``, run a warm-up pass and a profiled one on fresh copies; the report."""
    from deltalog.clock import ManualClock
    from deltalog.sql.session import warm_python_workers
    from deltalog.store import Store

    pristine = os.path.join(work, "pristine")
    gen = wl.generate(Store(pristine, spark=spark, clock=ManualClock(wl.NOW_MS), config=w.store_config()), w)
    out = [f"generated {gen}"]
    prof_dir = os.path.join(work, "task-profiles")
    os.makedirs(prof_dir)
    driver = cProfile.Profile()
    for rnd, profile_it in ((0, False), (1, True)):
        root = os.path.join(work, f"clean-{rnd}")
        shutil.copytree(pristine, root)
        store = Store(root, spark=spark, clock=ManualClock(wl.NOW_MS + 1 + rnd), config=w.store_config())
        warm_python_workers(spark).join()
        started = time.perf_counter()
        if profile_it:
            with _profiling_tasks(prof_dir):
                result = driver.runcall(store.clean_partition, wl.TOPIC, 0, force=True)
        else:
            result = store.clean_partition(wl.TOPIC, 0, force=True)
        if result is None:
            raise RuntimeError(f"pass {rnd} found nothing to clean")
        out.append(f"pass {rnd} ({'profiled' if profile_it else 'warm-up'}): {time.perf_counter() - started:.2f} s, "
                   f"map {result.map_ms} ms, copy {result.copy_ms} ms")
    out += ["", "== driver (cumulative, deltalog's functions) ==", _summary([driver], top, "deltalog")]
    for phase in ("map", "copy"):
        files = sorted(f for f in os.listdir(prof_dir) if f.startswith(phase + "-"))
        out += ["", f"== {phase} tasks: {len(files)} ({', '.join(f.split('-')[1] for f in files)}) =="]
        if files:
            out.append(_summary([os.path.join(prof_dir, f) for f in files], top))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_pass", description=__doc__)
    p.add_argument("--preset", choices=sorted(wl.PRESETS), default="small")
    p.add_argument("--workload", choices=wl.VALUE_KINDS, default="random")
    p.add_argument("--key-hash", choices=wl.KEY_HASH_KINDS, default="all",
                   help="which generated files carry the key-hash columns (see benchmarks/__main__.py)")
    p.add_argument("--top", type=int, default=25, help="lines of each profile")
    args = p.parse_args(argv)

    from deltalog.sql.session import local_session

    spark = local_session(app_name="deltalog-profile")
    work = tempfile.mkdtemp(prefix="deltalog-profile-")
    try:
        w = replace(wl.with_values(wl.PRESETS[args.preset], args.workload), key_hash=args.key_hash)
        print(profile_pass(spark, w, work, args.top))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
