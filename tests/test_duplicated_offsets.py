"""Offsets held twice are a damage: reads refuse to serve them, describe and doctor name the partition and version,
the next clean keeps one copy of each; nothing reports the partition clean over them.

The damaged table is made the way the race made it before deltalog checked its removes: a commit planned before
another engine's OPTIMIZE, removing the files that OPTIMIZE merged (delta-rs accepts it over ``dataChange=false``
removes), lands beside the merged file.
"""

from __future__ import annotations

import json

import pytest

from deltalog import Record, Store
from deltalog.cli.doctor_checks import FAIL, OK, check_store_damage, scan_store
from deltalog.errors import CorruptLogError
from deltalog.log import duplicates
from deltalog.log.data_file import DataFile
from tooling.reliability.other_engines import duplicate_by_stale_commit

SEGMENT_MS = 1000


def _fill(store: Store, clock, topic: str = "t") -> None:
    store.create_topic(topic, 1, config={"cleanup.policy": "compact", "segment.ms": SEGMENT_MS,
                                          "min.cleanable.dirty.ratio": 0.99, "delete.retention.ms": 0})
    for i in range(4):
        store.append(topic, 0, [Record(key=f"k{j}".encode(), value=f"v{i}.{j}".encode()) for j in range(5)])
        clock.advance(2 * SEGMENT_MS)


def _file(path: str, lo: int, hi: int, n: int) -> DataFile:
    return DataFile(path, 100, n, lo, hi, 0, None, None, 0, 0, None, 0)


def test_suspects_come_from_the_offset_statistics_alone():
    assert duplicates.suspects([_file("a", 0, 9, 10), _file("b", 10, 19, 10)]) == []
    assert duplicates.suspects([_file("a", 0, 9, 10), _file("b", 5, 19, 10), _file("c", 30, 39, 10)]) == [
        [_file("a", 0, 9, 10), _file("b", 5, 19, 10)]]
    # a chain of overlaps is one group; a file with more rows than offsets in its range is one on its own
    assert len(duplicates.suspects([_file("a", 0, 9, 10), _file("b", 8, 12, 3), _file("c", 12, 20, 4)])[0]) == 3
    assert duplicates.suspects([_file("a", 0, 9, 11)]) == [[_file("a", 0, 9, 11)]]


def test_a_partition_holding_offsets_twice_is_named_by_every_reader(store, clock):
    _fill(store, clock)
    version = duplicate_by_stale_commit(store, "t")
    assert store.log("t", 0).snapshot().version == version
    with pytest.raises(CorruptLogError, match=rf"t-0 serves 20 offset\(s\) twice at version {version}"):
        store.read("t", 0, 0)
    with pytest.raises(CorruptLogError, match="the next clean repairs it"):
        store.read("t", 0, 3, max_records=4)  # a poll
    consumer = store.consumer("t", group_id="g", auto_offset_reset="earliest")
    with pytest.raises(CorruptLogError, match=f"twice at version {version}"):
        consumer.poll(timeout_ms=0)
    pytest.importorskip("duckdb")
    with pytest.raises(CorruptLogError, match=f"twice at version {version}"):
        store.sql("SELECT count(*) FROM t", engine="embedded")  # the embedded SQL engine
    state = store.describe("t")[0]
    assert state.duplicated_offsets == 20 and f"version {version}" in state.duplicates
    assert state.eligible_for_cleaning  # never "clean" over it
    scan = scan_store(store.storage)
    assert [(d.partition_name, "twice" in d.problem) for d in scan.damages] == [("t-0", True)]
    checks = check_store_damage(store.root)
    assert checks[0].status == FAIL and f"version {version}" in checks[0].detail


def test_repair_keeps_one_copy_of_each_offset(store, clock):
    _fill(store, clock)
    duplicate_by_stale_commit(store, "t")
    log = store.log("t", 0)
    assert log.repair_duplicates(clock.now_ms()) == 20
    assert log.repair_duplicates(clock.now_ms()) == 0
    assert [(r.offset, r.value) for r in store.read("t", 0, 0)] == [
        (5 * i + j, f"v{i}.{j}".encode()) for i in range(4) for j in range(5)]
    assert store.describe("t")[0].duplicated_offsets == 0
    assert scan_store(store.storage).damages == ()
    assert check_store_damage(store.root)[0].status == OK
    history = [e for e in store.history("t") if e.kind == "repair_duplicates"]
    assert len(history) == 1 and history[0].by_deltalog


def test_the_next_clean_repairs_it_whatever_the_dirty_ratio(spark_store, clock):
    store = spark_store
    _fill(store, clock)
    duplicate_by_stale_commit(store, "t")
    store.clean("t")
    offsets = [r.offset for r in store.read("t", 0, 0)]
    assert offsets == sorted(set(offsets)) and offsets[-5:] == list(range(15, 20))  # once each; every key's latest
    assert store.describe("t")[0].duplicated_offsets == 0


def test_a_partition_in_deltalogs_layout_is_checked_from_the_stats_alone(store, clock, monkeypatch):
    _fill(store, clock)
    log = store.log("t", 0)
    monkeypatch.setattr(log.storage, "parquet_file", lambda *a: pytest.fail("a data file was read"))
    assert log.duplicated_offsets() is None


@pytest.mark.spark
def test_the_data_quality_check_fails_on_offsets_held_twice(spark_store, clock):
    pytest.importorskip("great_expectations")
    store = spark_store
    _fill(store, clock)
    duplicate_by_stale_commit(store, "t")
    result = store.check("t", cleans="none", save=False)
    assert "offsets_unique" in result.failed_expectations(), json.dumps(result.as_dict(), default=str)[:2000]
