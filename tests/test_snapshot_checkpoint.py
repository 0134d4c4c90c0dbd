"""The log-snapshot checkpoint (deltalog/log/snapshot_checkpoint.py): a fresh process's cycle takes each partition's
snapshot from what the last cycle wrote while its Delta log has no later commit, never over the log: another
engine's commit, a topic created again under its name, a damaged checkpoint all mean the partition is read."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltalog import Store
from deltalog.errors import ForeignCommitError
from deltalog.log import app_txns, delta, snapshot_checkpoint, vacuum


def forget_process() -> None:
    """Forget what this process read of every table, as a new process would not know it."""
    app_txns.forget()
    with vacuum._QUIET_LOCK:
        vacuum._QUIET.clear()
    snapshot_checkpoint._last.clear()


def _no_spark():
    raise AssertionError("an idle cycle asked for a Spark session")


def _store(path, clock, partitions=3, topic="t"):
    store = Store(path, clock=clock)
    # a closed segment too young to clean (min.compaction.lag.ms): nothing for the cycle to do
    store.create_topic(topic, partitions, config={"cleanup.policy": "compact", "min.compaction.lag.ms": 86_400_000})
    for p in range(partitions):
        for i in range(2):
            store.append(topic, p, pa.table({"key": [b"k%d" % j for j in range(4)], "value": [b"v%d" % i] * 4}))
        if p == 1:
            store.roll(topic, p)
    return store


def _cycle(path, clock):
    cleaner = Store(path, clock=clock).log_cleaner()
    cleaner.spark = _no_spark
    return cleaner, cleaner.run_cycle()


@pytest.fixture
def opens(monkeypatch):
    """The partitions delta-rs opened a table of (every first read of a Delta log starts there)."""
    seen: list[str] = []
    real = delta.open_table

    def counted(storage, uri, *args, **kwargs):
        seen.append(uri)
        return real(storage, uri, *args, **kwargs)

    monkeypatch.setattr(delta, "open_table", counted)
    return seen


def _snapshots(path, clock, topic="t"):
    forget_process()
    store = Store(path, clock=clock)
    return [store.log(topic, p).snapshot() for p in store.log_manager.partitions(topic)]


def test_a_fresh_process_takes_the_snapshots_the_last_cycle_checkpointed(tmp_path, clock, opens):
    path = tmp_path / "store"
    _store(path, clock)
    forget_process()
    _cycle(path, clock)  # reads every log, writes the checkpoint
    assert len(set(opens)) == 3
    opens.clear()
    forget_process()
    cleaner, cycle = _cycle(path, clock)
    assert opens == []  # no Delta log read: one look for each partition's next commit
    assert cycle.cleans == () and cycle.outcomes == ()
    read = _snapshots(path, clock)
    assert [cleaner.logs.snapshot(cleaner.logs.log("t", p)) for p in range(3)] == read
    assert {(m.partition, m.log_end_offset) for m in cleaner.last_metrics.partitions} == {
        (s.partition, s.log_end_offset) for s in read}


def test_a_commit_after_the_checkpoint_is_read_from_the_log(tmp_path, clock, opens):
    path = tmp_path / "store"
    store = _store(path, clock)
    forget_process()
    _cycle(path, clock)
    store.append("t", 2, pa.table({"key": [b"new"], "value": [b"x"]}))
    opens.clear()
    forget_process()
    cleaner, _ = _cycle(path, clock)
    assert [u.rstrip("/").rsplit("/", 1)[-1] for u in opens] == ["2"]
    assert cleaner.logs.snapshot(cleaner.logs.log("t", 2)).log_end_offset == 9


def _other_engine(code: str, *uris: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), *uris], check=True, timeout=120)


@pytest.mark.subprocess
def test_another_engines_commits_between_two_cycles_are_seen(tmp_path, clock):
    """delta-rs in another process after the cycle that wrote the checkpoint: an OPTIMIZE (tolerated, files laid
    out anew), an OPTIMIZE and a VACUUM (tolerated), then a DELETE (detected); the next process's cycle sees each."""
    path = tmp_path / "store"
    store = _store(path, clock)
    forget_process()
    _cycle(path, clock)
    uris = [store.log("t", p).uri for p in range(3)]
    _other_engine("""
        import sys
        from deltalake import DeltaTable
        DeltaTable(sys.argv[1]).optimize.compact()
        DeltaTable(sys.argv[2]).optimize.compact()
        DeltaTable(sys.argv[2]).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    """, uris[1], uris[2])
    forget_process()
    cleaner, cycle = _cycle(path, clock)
    assert cycle.cleans == () and cycle.outcomes == ()
    for p in (1, 2):
        snap = cleaner.logs.snapshot(cleaner.logs.log("t", p))
        assert snap.version == DeltaTable(uris[p]).version() > 2
        assert not all(f.deltalog_layout for f in snap.files)  # OPTIMIZE's file, seen
    assert {(m.partition, m.log_end_offset) for m in cleaner.last_metrics.partitions} == {(0, 8), (1, 8), (2, 8)}
    forget_process()  # the checkpoint holds no partition in another engine's layout: those are read
    assert snapshot_checkpoint.load(Store(path, clock=clock).log_manager) == 1

    _other_engine("""
        import sys
        from deltalake import DeltaTable
        DeltaTable(sys.argv[1]).delete("offset = 1")
    """, uris[0])
    forget_process()
    _, cycle = _cycle(path, clock)  # seen, as by a cycle that read every log: that partition alone is held back
    [(tp, why)] = [(f.tp, f.message) for f in cycle.foreign_commits]
    assert tp == ("t", 0) and "DELETE" in why
    forget_process()
    with pytest.raises(ForeignCommitError, match="DELETE"):
        Store(path, clock=clock).log("t", 0).snapshot()


def test_a_topic_created_again_under_its_name_does_not_take_the_old_checkpoint(tmp_path, clock):
    path = tmp_path / "store"
    store = _store(path, clock, partitions=1)
    forget_process()
    _cycle(path, clock)
    store.delete_topic("t")
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    for _ in range(2):  # the same Delta version as before, other positions
        store.append("t", 0, pa.table({"key": [b"k"], "value": [b"v"]}))
    forget_process()
    cleaner, _ = _cycle(path, clock)
    assert cleaner.logs.snapshot(cleaner.logs.log("t", 0)).log_end_offset == 2


def test_a_damaged_checkpoint_means_a_full_read(tmp_path, clock, opens):
    path = tmp_path / "store"
    store = _store(path, clock)
    forget_process()
    _cycle(path, clock)
    location = snapshot_checkpoint.location(store.log_manager, "t")
    store.storage.write_bytes(location, b'{"format": 1, "topic": "t", "topic_id": "x", "partitions": {')
    opens.clear()
    forget_process()
    cleaner, cycle = _cycle(path, clock)
    assert len(set(opens)) == 3 and cycle.outcomes == ()
    assert [cleaner.logs.snapshot(cleaner.logs.log("t", p)) for p in range(3)] == _snapshots(path, clock)
    raw = store.storage.read_json(location)  # the cycle wrote a good one again
    assert raw["format"] == snapshot_checkpoint.FORMAT and set(raw["partitions"]) == {"0", "1", "2"}


@pytest.mark.spark
def test_the_cycle_that_cleans_checkpoints_what_its_passes_left(spark_store, clock, opens):
    """The scheduled job's case: one process's cycle cleans, the next process's idle cycle reads no Delta log."""
    store = spark_store
    store.create_topic("c", 2, config={"cleanup.policy": "compact"})
    for p in range(2):
        for r in range(3):
            store.append("c", p, pa.table({"key": [b"k%d" % i for i in range(3)], "value": [b"v%d" % r] * 3}))
            store.roll("c", p)
    forget_process()
    cleaner = Store(store.root, clock=clock, spark=store.spark).log_cleaner()
    assert len(cleaner.run_cycle().cleans) == 2
    opens.clear()
    forget_process()
    cleaner, cycle = _cycle(store.root, clock)
    assert opens == [] and cycle.cleans == () and cycle.vacuum == ()
    read = _snapshots(store.root, clock, "c")
    assert [cleaner.logs.snapshot(cleaner.logs.log("c", p)) for p in range(2)] == read
    assert all(s.cleaner_checkpoint == s.active_segment_base for s in read)


def test_a_partition_of_many_files_is_left_to_its_delta_log(tmp_path, clock, opens, monkeypatch):
    monkeypatch.setattr(snapshot_checkpoint, "MAX_FILES", 2)
    path = tmp_path / "store"
    store = _store(path, clock)  # two files a partition
    store.append("t", 1, pa.table({"key": [b"k"], "value": [b"v"]}))  # a third
    forget_process()
    _cycle(path, clock)
    opens.clear()
    forget_process()
    _cycle(path, clock)
    assert [u.rstrip("/").rsplit("/", 1)[-1] for u in opens] == ["1"]
