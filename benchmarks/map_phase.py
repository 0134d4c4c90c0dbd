"""``python -m benchmarks.map_phase --preset small [--workload json]``: pass 1's task body alone, from the key-hash
columns against from the keys.

Generates the preset's log twice, once with the key-hash columns in every file (as appends write them) and once
without (a store written before they existed), then runs pass 1's task body (``offset_map._map_run``: read, hash
or not, group-by, spill) over the whole dirty section of each, in this process, alternating the two for
``--rounds`` rounds so that both see the same load. No Spark: what changes between the two is the task's own
work. Each round also times the parts by hand (the Parquet read of what the task reads, the hashing, the
group-by). The figures are written up in benchmarks/NOTES.md; nothing here is timed for the report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq

from benchmarks import workload as wl


def _phase(store, layout: str) -> tuple:
    from deltalog.cleaner import offset_map
    from deltalog.cleaner.task_plan import FileSlice
    from deltalog.storage import join

    log = store.log(wl.TOPIC, 0)
    snap = log.snapshot()
    dirty = [f for f in snap.files if f.min_offset >= snap.first_dirty_offset]
    slices = tuple(FileSlice(f.path, f.size_bytes, f.min_offset, f.max_offset) for f in dirty)
    task = offset_map._MapTask(store.storage, log.uri, snap.first_dirty_offset, snap.log_end_offset, False,
                               join(log.uri, "_map-phase"))
    return task, slices, [join(log.uri, f.path) for f in dirty]


def _parts(store, paths: list[str], stored: bool) -> dict[str, float]:
    """The task's parts by hand: read, hash (from the keys only), group-by."""
    from deltalog.cleaner.offset_map import _reduce
    from deltalog.log.key_hash import key_hashes
    from deltalog.log.record import KEY, KEY_HASH_HI, KEY_HASH_LO, OFFSET

    t0 = time.perf_counter()
    columns = [OFFSET, KEY_HASH_HI, KEY_HASH_LO] if stored else [KEY, OFFSET]
    tables = []
    for p in paths:
        with store.storage.open_input(p) as f:
            tables.append(pq.ParquetFile(f).read(columns=columns))
    t1 = time.perf_counter()
    if stored:
        his = [t.column(KEY_HASH_HI).to_numpy().view(np.uint64) for t in tables]
        los = [t.column(KEY_HASH_LO).to_numpy().view(np.uint64) for t in tables]
    else:
        pairs = [key_hashes(t.column(KEY)) for t in tables]
        his, los = [p[0] for p in pairs], [p[1] for p in pairs]
    t2 = time.perf_counter()
    _reduce(np.concatenate(his), np.concatenate(los), np.concatenate([t.column(OFFSET).to_numpy() for t in tables]),
            False)
    t3 = time.perf_counter()
    return {"read": t1 - t0, "hash": t2 - t1, "group-by": t3 - t2}


def main(argv: list[str] | None = None) -> int:
    from deltalog import Store
    from deltalog.cleaner import offset_map
    from deltalog.clock import ManualClock

    p = argparse.ArgumentParser(prog="python -m benchmarks.map_phase", description=__doc__)
    p.add_argument("--preset", choices=sorted(wl.PRESETS), default="small")
    p.add_argument("--workload", choices=wl.VALUE_KINDS, default="random")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="deltalog-map-phase-")
    try:
        cases = {}
        for layout in ("all", "none"):
            store = Store(os.path.join(work, layout), clock=ManualClock(wl.NOW_MS))
            w = replace(wl.with_values(wl.PRESETS[args.preset], args.workload), key_hash=layout)
            gen = wl.generate(store, w)
            cases[layout] = (store, *_phase(store, layout))
        print(f"generated {gen}; load {os.getloadavg()}")
        seconds: dict[str, list[float]] = {k: [] for k in cases}
        parts: dict[str, list[dict[str, float]]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for layout, (store, task, slices, paths) in cases.items():
                started = time.perf_counter()
                spilled = offset_map._map_run(task, slices)
                seconds[layout].append(time.perf_counter() - started)
                store.storage.delete(spilled)
                parts[layout].append(_parts(store, paths, layout == "all"))
        for layout, values in seconds.items():
            each = {k: statistics.median(d[k] for d in parts[layout]) for k in parts[layout][0]}
            print(f"{'from the key-hash columns' if layout == 'all' else 'from the keys (older files)'}: "
                  f"{', '.join(f'{v:.3f}' for v in values)} (median {statistics.median(values):.3f} s); parts (median): "
                  + ", ".join(f"{k} {v:.3f}" for k, v in each.items()))
        print(f"ratio: {statistics.median(seconds['all']) / statistics.median(seconds['none']):.2f}x; "
              f"load {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
