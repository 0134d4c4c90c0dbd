"""VACUUM: unreferenced files go only after file.delete.delay.ms; readers of old versions keep working."""

from __future__ import annotations

import glob
import os
import shutil
import time

import pytest

from deltalog import ManualClock, Record, Store
from deltalog.log.partition_log import read_files
from deltalog.log.vacuum import ORPHAN_MIN_AGE_MS, removal_times, vacuum

DELAY = 60_000


def three_segments(store, clock, **config):
    # Kafka's 60 s delay, set explicitly: deltalog's default is Delta's 7 days
    store.create_topic("t", 1, config={"cleanup.policy": "delete", "retention.ms": 1000,
                                       "file.delete.delay.ms": DELAY, **config})
    for s in range(3):
        store.append("t", 0, [Record(f"k{s}", f"v{s}")])
        store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])
    return store.log("t", 0)


def on_disk(log):
    return {os.path.relpath(p, log.uri) for p in glob.glob(os.path.join(log.uri, "**", "*.parquet"), recursive=True)}


def test_removed_files_stay_until_the_delay_has_passed(store, clock):
    log = three_segments(store, clock)
    old = log.snapshot()
    clock.advance(1001)
    store.delete_old_segments("t")
    removed = {f.path for f in old.files} - {f.path for f in log.snapshot().files}
    assert len(removed) == 3
    # a dry run (the default) and a real run inside the delay remove nothing
    assert store.vacuum("t")[0].files == ()
    clock.advance(DELAY - 1)
    result = store.vacuum("t", dry_run=False)[0]
    assert result.files == () and result.files_waiting == 3
    assert removed <= on_disk(log)
    # the delay has passed: a dry run lists them and leaves them ...
    clock.advance(1)
    dry = store.vacuum("t")[0]
    assert set(dry.files) == removed and dry.dry_run and dry.files_deleted == 0
    assert removed <= on_disk(log)
    # ... and a real run removes exactly those, never a file the current version uses
    real = store.vacuum("t", dry_run=False)[0]
    assert set(real.files) == removed and real.files_deleted == 3
    assert real.bytes == sum(f.size_bytes for f in old.files if f.path in removed)
    assert on_disk(log) == {f.path for f in log.snapshot().files}
    assert [r.key for r in store.read("t", 0, "earliest")] == [b"active"]
    assert store.vacuum("t", dry_run=False)[0].files == ()


def test_reader_of_an_old_snapshot_and_time_travel_work_until_vacuum(store, clock):
    log = three_segments(store, clock)
    old = log.snapshot()  # an in-flight reader planned its read on this version
    clock.advance(1001)
    store.delete_old_segments("t")
    clock.advance(DELAY // 2)
    store.vacuum("t", dry_run=False)
    # the reader's files are still there, and Delta time travel to the old version reads every record
    assert read_files(log.storage, log.uri, old.files, 0).num_rows == 4
    travelled = log.snapshot(version=old.version)
    assert [f.path for f in travelled.files] == [f.path for f in old.files]
    assert read_files(log.storage, log.uri, travelled.files, 0).column("offset").to_pylist() == [0, 1, 2, 3]
    clock.advance(DELAY)
    store.vacuum("t", dry_run=False)
    with pytest.raises(FileNotFoundError):
        read_files(log.storage, log.uri, log.snapshot(version=old.version).files, 0)
    # the current version is untouched
    assert [r.offset for r in store.read("t", 0, "earliest")] == [3]


def test_the_delay_is_the_topics_file_delete_delay(store, clock):
    log = three_segments(store, clock, **{"file.delete.delay.ms": 0})
    clock.advance(1001)
    store.delete_old_segments("t")
    assert len(store.vacuum("t", dry_run=False)[0].files) == 3
    assert on_disk(log) == {f.path for f in log.snapshot().files}


def test_orphans_of_an_unfinished_pass_go_by_their_written_time(store, clock):
    """A dead pass's output is aged from the clock time in its directory name (cleaned-<ms>-<id>), a stray
    append file from its modification time."""
    log = three_segments(store, clock)
    # a cleaning pass that wrote output and died before committing, and an append that lost its race
    src = os.path.join(log.uri, log.snapshot().files[0].path)
    written = clock.now_ms()
    dead_dir = f"cleaned-{written}-dead"
    os.makedirs(os.path.join(log.uri, dead_dir, "cleaned_segment=0"))
    pass_file = os.path.join(dead_dir, "cleaned_segment=0", "part-00000.parquet")
    shutil.copy(src, os.path.join(log.uri, pass_file))
    stray = "00000000000000000000-00000000000000000000-orphan.parquet"
    shutil.copy(src, os.path.join(log.uri, stray))
    os.utime(os.path.join(log.uri, stray), (written / 1000, written / 1000))
    clock.advance(max(DELAY, ORPHAN_MIN_AGE_MS) - 1)
    result = vacuum(log, clock.now_ms(), dry_run=False)
    assert result.files == () and result.files_waiting == 2
    clock.advance(1)
    result = vacuum(log, clock.now_ms(), dry_run=False)
    assert set(result.files) == {pass_file, stray}
    assert not os.path.exists(os.path.join(log.uri, dead_dir))  # empty directories go too
    assert on_disk(log) == {f.path for f in log.snapshot().files}


def test_a_file_written_in_the_future_of_the_clock_is_kept(store, clock):
    """Orphans are judged by mtime; a clock behind the file system never deletes them early."""
    log = three_segments(store, clock, **{"file.delete.delay.ms": 0})
    stray = os.path.join(log.uri, "stray.parquet")
    shutil.copy(os.path.join(log.uri, log.snapshot().files[0].path), stray)
    assert vacuum(log, clock.now_ms(), dry_run=False).files == ()  # mtime is the wall clock, after the clock
    assert os.path.exists(stray)


def test_a_partition_under_lease_is_skipped(store, clock):
    three_segments(store, clock, **{"file.delete.delay.ms": 0})
    clock.advance(1001)
    store.delete_old_segments("t")
    other = Store(store.root, clock=clock)
    with other.leases.hold("t", 0, "clean"):
        assert store.vacuum("t", dry_run=False) == []
    assert len(store.vacuum("t", dry_run=False)[0].files) == 3


def test_removal_times_come_from_the_checkpoint_once_commits_are_gone(tmp_path):
    """After a checkpoint and log cleanup, the remove actions are read from the checkpoint Parquet."""
    clock = ManualClock(time.time_ns() // 1_000_000)  # checkpoints keep tombstones younger than a week
    store = Store(tmp_path / "s", clock=clock)
    log = three_segments(store, clock)
    clock.advance(1001)
    [result] = store.delete_old_segments("t")
    removed = {f.path for f in log.snapshot(version=result.version - 1).files} - {f.path for f in log.snapshot().files}
    dt = log.table()
    dt.create_checkpoint()
    for p in glob.glob(os.path.join(log.uri, "_delta_log", "*.json")):
        if int(os.path.basename(p)[:20]) <= dt.version():
            os.remove(p)
    times = removal_times(log.storage, log.uri)
    assert {p: times[p] for p in removed} == {p: clock.now_ms() for p in removed}
    clock.advance(DELAY)
    assert set(store.vacuum("t", dry_run=False)[0].files) == removed


def test_staged_files_of_unfinished_sink_writes_go_after_a_day(tmp_path, capsys):
    """A ``format("deltalog")`` write whose job died leaves its staged Arrow files under ``_deltalog/sink``: the
    store-wide VACUUM (CLI) and the cleaner's cycle remove them once a day old, never a younger one (a write
    may still be running), and a per-topic VACUUM leaves them alone."""
    from conftest import run_cli

    from deltalog.log.vacuum import SINK_STAGING_DIR, STAGED_MAX_AGE_MS
    from deltalog.sql.kafka.writes import STAGING_DIR

    assert SINK_STAGING_DIR == STAGING_DIR
    store = Store(tmp_path / "store")
    store.create_topic("t", 1)
    old, young = store.storage.location(STAGING_DIR, "old.arrow"), store.storage.location(STAGING_DIR, "young.arrow")
    for location in (old, young):
        store.storage.write_bytes(location, b"staged records")
    day_ago = time.time() - STAGED_MAX_AGE_MS / 1000 - 60
    os.utime(old, (day_ago, day_ago))
    assert store.vacuum_staged().files == ("old.arrow",) and os.path.exists(old)  # a dry run by default
    assert [r.topic for r in store.vacuum("t", dry_run=False)] == ["t"] and os.path.exists(old)
    code, out, _ = run_cli(capsys, "cleaner", "vacuum", "--apply", "--store", str(tmp_path / "store"))
    assert code == 0 and "_deltalog/sink: removed 1 staged file(s) of unfinished writes" in out, out
    assert not os.path.exists(old) and os.path.exists(young)


def test_the_cleaners_cycle_sweeps_the_staging_directory(spark, tmp_path):
    from deltalog.sql.kafka.writes import STAGING_DIR

    store = Store(tmp_path / "store", spark=spark)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    location = store.storage.location(STAGING_DIR, "dead-task.arrow")
    store.storage.write_bytes(location, b"staged records")
    two_days_ago = time.time() - 2 * 86_400
    os.utime(location, (two_days_ago, two_days_ago))
    cycle = store.log_cleaner(metrics=False).run_cycle()
    assert not os.path.exists(location)
    assert [(v.topic, v.files) for v in cycle.vacuum] == [("_deltalog/sink", ("dead-task.arrow",))]
