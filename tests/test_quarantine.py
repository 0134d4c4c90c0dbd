"""Uncleanable partitions: a pass that throws quarantines its partition, durably; the others keep being cleaned."""

from __future__ import annotations

import os
import shutil

import pytest

from deltalog import InvalidConfigError, Record, Store
from deltalog.cleaner.cleaner_manager import LogCleanerManager
from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.cleaner.metrics import collect, format_table
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.cli import main as cli
from deltalog.errors import CorruptLogError


def dirty(store, topic, partition):
    for r in range(2):
        store.append(topic, partition, [Record(f"k{i}", f"v{r}") for i in range(3)])
        store.roll(topic, partition)
    store.append(topic, partition, [Record("active", "a")])


def test_marks_are_durable_and_reset_by_partition_topic_or_all(tmp_path):
    q = UncleanablePartitions(str(tmp_path))
    assert q.marks() == [] and q.get("t", 0) is None
    mark = q.mark("t", 0, ValueError("boom"), 123, owner="me", first_dirty_offset=4, first_uncleanable_offset=9)
    q.mark("t", 2, OSError("disk"), 124)
    q.mark("u", 0, RuntimeError("x"), 125)
    again = UncleanablePartitions(str(tmp_path))  # a new process reads the same marks
    assert again.get("t", 0) == mark and mark.error_type == "ValueError" and "boom" in mark.traceback
    marked = lambda: {(m.topic, m.partition) for m in again.marks()}  # noqa: E731
    assert marked() == {("t", 0), ("t", 2), ("u", 0)}
    assert [(m.topic, m.partition) for m in again.reset("t", 2)] == [("t", 2)]
    assert marked() == {("t", 0), ("u", 0)}
    assert [m.topic for m in again.reset("t")] == ["t"]
    assert [m.topic for m in again.reset()] == ["u"]
    assert again.marks() == []
    with pytest.raises(InvalidConfigError, match="needs its topic"):
        again.reset(None, 1)


@pytest.mark.slow
def test_a_corrupt_or_missing_file_quarantines_only_its_partition(tmp_path, spark, clock):
    root = tmp_path / "store"
    store = Store(root, clock=clock, spark=spark)
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    for p in range(3):
        dirty(store, "t", p)
    corrupt = store.log("t", 0)
    victim = os.path.join(corrupt.uri, corrupt.snapshot().files[0].path)
    backup = str(tmp_path / "backup.parquet")
    shutil.copy(victim, backup)
    with open(victim, "wb") as f:
        f.write(b"this is not parquet" * 10)
    missing = store.log("t", 1)
    os.remove(os.path.join(missing.uri, missing.snapshot().files[1].path))

    cycle = store.log_cleaner(progress_interval_s=60).run_cycle()
    assert [(c.topic, c.partition) for c in cycle.cleans] == [("t", 2)]
    assert sorted((f.topic, f.partition) for f in cycle.failures) == [("t", 0), ("t", 1)]
    assert {r.key: r.value for r in store.read("t", 2, "earliest")} == {
        b"k0": b"v1", b"k1": b"v1", b"k2": b"v1", b"active": b"a"}

    # a restart: the marks are still there, the partitions are skipped and reported, nothing fails again
    store = Store(root, clock=clock, spark=spark)
    marks = {(m.topic, m.partition): m for m in store.log_cleaner().manager.uncleanable.marks()}
    assert set(marks) == {("t", 0), ("t", 1)} and all(m.message for m in marks.values())
    dirty(store, "t", 2)
    cycle = store.log_cleaner(progress_interval_s=60).run_cycle()
    assert cycle.failures == () and cycle.uncleanable == (("t", 0), ("t", 1))
    assert [(c.topic, c.partition) for c in cycle.cleans] == [("t", 2)]
    assert store.clean() == []  # store.clean() skips them too
    metrics = collect(store.log_manager)
    assert metrics.uncleanable_partitions_count == 2
    assert metrics.uncleanable_bytes == sum(LogToClean.of(store.log("t", p).snapshot(), clock.now_ms()).cleanable_bytes
                                            for p in (0, 1)) > 0
    with pytest.raises(CorruptLogError, match=r"partition t-0 is damaged: .*\.parquet is 190 bytes"):
        store.describe("t")  # describe names the damage (a listing: the file's size is not its commit's)
    table = format_table(metrics)
    assert table.count("UNCLEANABLE") == 2

    # repaired and reset: partition 0 is cleaned again; partition 1 stays quarantined
    shutil.copy(backup, victim)
    assert cli(["--store", str(root), "cleaner", "reset-uncleanable", "t", "0"]) == 0
    assert LogCleanerManager(store.log_manager).uncleanable_partitions() == {("t", 1)}
    cycle = store.log_cleaner(progress_interval_s=60).run_cycle()
    assert [(c.topic, c.partition) for c in cycle.cleans] == [("t", 0)]
    assert cycle.uncleanable == (("t", 1),)
    assert cli(["--store", str(root), "cleaner", "reset-uncleanable"]) == 0
    assert LogCleanerManager(store.log_manager).uncleanable.marks() == []
