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
from deltalake import DeltaTable

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


OPTIMIZE = """
import sys
from deltalake import DeltaTable
for uri in sys.argv[1:]:
    if uri.startswith("zorder:"):  # rewrites even a table of one file, rows in another order
        DeltaTable(uri.removeprefix("zorder:")).optimize.z_order(["partition", "offset"])
    else:
        DeltaTable(uri).optimize.compact()
print("optimized", flush=True)
"""


def _optimize_in_another_process(*uris: str) -> None:
    """delta-rs's OPTIMIZE of ``uris`` in a process of its own (another engine, as Databricks' would be); a uri
    prefixed ``zorder:`` is Z-ordered by partition and offset."""
    done = subprocess.run([sys.executable, "-c", OPTIMIZE, *uris], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0 and "optimized" in done.stdout, done.stderr


def test_a_rebuild_that_loses_the_race_to_another_writer_says_so(tmp_path, monkeypatch, capsys):
    """Another process commits to the state table (an OPTIMIZE) while a rebuild reads the log: the rebuild commits
    nothing and raises deltalog's CommitConflictError naming the topic and what to do, not delta-rs's error."""
    from deltalog.errors import CommitConflictError
    from deltalog.state import refresh as state_refresh

    store = Store(tmp_path / "s")
    store.create_topic("t", 2, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    for i in range(3):  # three commits, three files: something for OPTIMIZE to compact
        store.append("t", i % 2, [Record(f"k{i}{j}", f"v{i}") for j in range(5)])
        store.refresh_state("t")
    location = store.state_table_location("t")
    before = store.state_history("t", limit=1)[0].version
    real_read = state_refresh.read_partition
    calls = []

    def read_while_another_writer_commits(log, applied):  # noqa: ANN001, ANN202
        if not calls:
            _optimize_in_another_process(location)  # lands after the rebuild opened the table
        calls.append(log.partition)
        return real_read(log, applied)

    monkeypatch.setattr(state_refresh, "read_partition", read_while_another_writer_commits)
    with pytest.raises(CommitConflictError) as raised:
        store.refresh_state("t", full=True)
    text = str(raised.value)
    assert "state table of topic 't'" in text and "deltalog state refresh t --full" in text, text
    history = store.state_history("t", limit=3)
    assert history[0].version == before + 1 and history[0].operation != state_refresh.REBUILD  # only the OPTIMIZE
    monkeypatch.undo()
    assert store.compare_state("t").equal  # the other writer's commit left the rows as they were
    result = store.refresh_state("t", full=True)  # run again, as the error says: it lands
    assert result.rebuilt and store.compare_state("t").equal
    # through the command line: the same message, deltalog's error, exit code not 0
    for i in range(2):
        store.append("t", 0, [Record(f"n{i}", "v")])
        store.refresh_state("t")
    monkeypatch.setattr(state_refresh, "read_partition", read_while_another_writer_commits)
    calls.clear()
    from deltalog.cli import main as cli

    code = cli(["--store", str(store.root), "state", "refresh", "t", "--full"])
    err = capsys.readouterr().err
    assert code != 0 and "lost a race" in err and "deltalog state refresh t --full" in err, err
    assert "CommitFailedError" not in err and "Traceback" not in err


def test_stays_equal_through_appends_transactions_kills_and_other_processes_optimize(tmp_path):
    """Rounds of appends, committed and aborted transactions, a refresh killed with kill -9, delta-rs OPTIMIZE of
    the state table and of the log's partitions in another process between refreshes: after every refresh the
    table equals the log (cleans: tests/test_state_table_spark.py)."""
    store = Store(tmp_path / "s")
    store.create_topic("t", 2, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    rnd = random.Random(3535)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    tx = store.producer(transactional_id="tx")
    tx.init_transactions()
    killed = 0
    for i in range(5):
        _append_round(store, rnd, 200)
        tx.begin_transaction()
        tx.send("t", [Record(f"k{rnd.randrange(300)}", f"tx{i}") for _ in range(20)], partition=i % 2)
        if i % 2:
            tx.abort_transaction()
        else:
            tx.commit_transaction()
        _append_round(store, rnd, 200)
        proc = subprocess.Popen([sys.executable, "-c", REFRESH, str(store.root)], stdout=subprocess.PIPE, env=env,
                                text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.05, 0.5))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        killed += "done" not in proc.stdout.read()
        store.refresh_state("t")
        assert store.compare_state("t").equal, i
        # another engine compacts the state table and both partitions between refreshes
        _optimize_in_another_process("zorder:" + store.state_table_location("t"), store.log("t", 0).uri,
                                     store.log("t", 1).uri)
        assert store.compare_state("t").equal, i
    assert killed >= 1, "no refresh was killed midway: the test proves nothing"
    _append_round(store, rnd, 50)
    result = store.refresh_state("t")
    comparison = store.compare_state("t")
    assert comparison.equal and comparison.pending_keys == 0, comparison
    assert result.offsets == {p: store.log("t", p).snapshot().log_end_offset for p in (0, 1)}
    assert sum(h.operation == "optimize" for h in store.state_history("t")) == 5
    assert sum(h.get("operation") == "OPTIMIZE" for h in DeltaTable(store.log("t", 0).uri).history()) >= 1
    rows = {(r["partition"], r["key"]): r["value"] for r in store.state("t").to_pylist()}
    aborted = {f"tx{i}".encode() for i in range(5) if i % 2}
    assert not aborted & set(rows.values())  # no aborted record ever became a row
