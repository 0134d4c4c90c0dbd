"""Several real processes append to one partition at once: every offset unique and contiguous, every
record present at the offset its producer was told, each batch contiguous (one atomic commit).

On a local disk and on moto's S3 server: on S3 the only arbiter is delta-rs writing each commit file with a
conditional put (``If-None-Match: *``), no lock of any kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from deltalog import Store

WORKER = r"""
import json, os, sys, time
from deltalog import Record, Store

root, options, topic, worker, batches, size, go = sys.argv[1:8]
store = Store(root, storage_options=json.loads(options) or None)
store.log(topic, 0).head()  # open the table before the start line, so the processes really race
open(go + "." + worker, "w").close()
while not os.path.exists(go):
    time.sleep(0.002)
results = []
for b in range(int(batches)):
    records = [Record(key=f"w{worker}-b{b}-r{i}", value=f"{worker}:{b}:{i}") for i in range(int(size))]
    results.append(store.append(topic, 0, records))
print(json.dumps(results))
"""


def race(tmp_path, store: Store, *, workers: int, batches: int, size: int) -> dict[str, list[list[int]]]:
    go = str(tmp_path / "go")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, store.root, json.dumps(store.storage.options), "t", str(w),
                          str(batches), str(size), go],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for w in range(workers)
    ]
    deadline = time.monotonic() + 120
    while not all(os.path.exists(f"{go}.{w}") for w in range(workers)):
        assert time.monotonic() < deadline, "workers did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    open(go, "w").close()  # everyone starts at once
    results = {}
    for w, p in enumerate(procs):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        results[str(w)] = json.loads(out.strip().splitlines()[-1])
    return results


def check(store: Store, results: dict[str, list[list[int]]], *, workers: int, batches: int, size: int) -> None:
    total = workers * batches * size
    told = {}
    for w, per_batch in results.items():
        assert len(per_batch) == batches
        for b, offs in enumerate(per_batch):
            assert offs == list(range(offs[0], offs[0] + size)), f"batch {w}/{b} not contiguous: {offs}"
            for i, o in enumerate(offs):
                told[o] = (f"w{w}-b{b}-r{i}".encode(), f"{w}:{b}:{i}".encode())
    assert sorted(told) == list(range(total)), "offsets are not unique and contiguous"

    records = Store(store.root, storage_options=store.storage.options).read("t", 0, from_offset=0)
    assert [r.offset for r in records] == list(range(total))
    assert {r.offset: (r.key, r.value) for r in records} == told  # every record where its producer was told
    head = store.log("t", 0).head()
    assert head.log_end_offset == total
    # each worker's batches landed in the order it sent them
    for per_batch in results.values():
        firsts = [offs[0] for offs in per_batch]
        assert firsts == sorted(firsts)


@pytest.mark.slow
@pytest.mark.subprocess
def test_processes_racing_on_one_partition(tmp_path, any_store):
    store = any_store
    store.create_topic("t", config={"cleanup.policy": "compact"})
    results = race(tmp_path, store, workers=4, batches=8, size=3)
    check(store, results, workers=4, batches=8, size=3)
    # no file left behind by a losing attempt is part of the table
    snap = store.log("t", 0).snapshot()
    assert snap.num_records == 4 * 8 * 3


@pytest.mark.slow
@pytest.mark.subprocess
def test_processes_racing_while_segments_roll(tmp_path, any_store):
    """segment.bytes=14 makes every append roll, so the race also covers the active-segment bookkeeping."""
    store = any_store
    store.create_topic("t", config={"segment.bytes": 14})
    results = race(tmp_path, store, workers=3, batches=5, size=2)
    check(store, results, workers=3, batches=5, size=2)
    state = store.describe("t")[0]
    for seg in state.segments:
        for f in seg.files:
            assert seg.base_offset <= f.min_offset and f.max_offset < seg.end_offset
    assert [s.base_offset for s in state.segments] == list(range(0, 30, 2))
