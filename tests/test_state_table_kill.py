"""A refresh killed at any point (kill -9 of a real process) neither loses nor applies a record twice: the rows
and the offsets they were applied up to are one Delta commit (deltalog.state.refresh)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from deltalog import Record, Store

pytestmark = pytest.mark.subprocess

REFRESH = """
import sys
from deltalog import Store
store = Store(sys.argv[1])
print("ready", flush=True)
store.refresh_state("t")
print("done", flush=True)
"""


def _append_round(store: Store, rnd: random.Random, n: int) -> None:
    for p in (0, 1):
        store.append("t", p, [Record(f"k{rnd.randrange(300)}", None if rnd.random() < 0.1 else f"v{rnd.random()}")
                              for _ in range(n)])


def test_kill_9_during_refresh_loses_nothing_and_applies_nothing_twice(tmp_path):
    store = Store(tmp_path / "s")
    store.create_topic("t", 2, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    rnd = random.Random(35)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    killed = finished = 0
    for i in range(6):
        for _ in range(3):
            _append_round(store, rnd, 400)
        proc = subprocess.Popen([sys.executable, "-c", REFRESH, str(store.root)], stdout=subprocess.PIPE, env=env,
                                text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.0, 0.6) if i else 0.0)  # the first is killed before it reads anything
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        out = proc.stdout.read()
        finished += "done" in out
        killed += "done" not in out
        comparison = store.compare_state("t") if store.state_history("t") else None
        assert comparison is None or comparison.equal, comparison  # what a killed refresh left is consistent
    assert killed >= 2, "no refresh was killed midway: the test proves nothing"
    result = store.refresh_state("t")
    comparison = store.compare_state("t")
    assert comparison.equal and comparison.pending_keys == 0, comparison
    ends = {p: store.log("t", p).snapshot().log_end_offset for p in (0, 1)}
    assert result.offsets == ends
    # every commit that applied records moved the offsets forward: none was applied twice
    applied = [h.offsets for h in reversed(store.state_history("t")) if h.offsets]
    for before, after in zip(applied, applied[1:], strict=False):
        assert all(after[p] > before[p] or after[p] == before[p] for p in before)
        assert after != before
