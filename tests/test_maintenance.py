"""The store's scheduled maintenance around the cleaning loop (Kafka's LogManager tasks, the coordinators' timers),
run without Spark: retention, VACUUM after ``file.delete.delay.ms``, and the timers' intervals."""

from __future__ import annotations

import glob
import os

from deltalog import Record
from deltalog.cleaner.maintenance import StoreMaintenance

DELAY = 60_000  # file.delete.delay.ms, set on the topic (Kafka's default; deltalog's is Delta's 7 days)


def parquet_on_disk(log):
    return {os.path.relpath(p, log.uri) for p in glob.glob(os.path.join(log.uri, "**", "*.parquet"), recursive=True)}


def aged_segments(store, clock):
    store.create_topic("t", 1, config={"cleanup.policy": "delete", "retention.ms": 1000, "file.delete.delay.ms": DELAY})
    for s in range(2):
        store.append("t", 0, [Record(f"k{s}", f"v{s}")])
        store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])
    clock.advance(1001)
    return store.log("t", 0)


def test_retention_then_vacuum_after_the_delay(store, clock):
    log = aged_segments(store, clock)
    maintenance = StoreMaintenance(store.log_manager, store.config)
    before = parquet_on_disk(log)
    [retention] = maintenance.delete_old_segments()
    assert (retention.topic, retention.partition, retention.segments_deleted) == ("t", 0, 2)
    assert log.snapshot().log_start_offset == 2
    assert maintenance.delete_old_segments() == []  # nothing more is old enough: partitions that lost none are left out
    assert maintenance.vacuum() == []  # replaced just now: kept for file.delete.delay.ms
    clock.advance(DELAY)
    [vacuumed] = maintenance.vacuum()
    assert set(vacuumed.files) == before - parquet_on_disk(log) and vacuumed.files_deleted == 2
    assert parquet_on_disk(log) == {f.path for f in log.snapshot().files}


def test_vacuum_off_removes_nothing(store, clock):
    log = aged_segments(store, clock)
    maintenance = StoreMaintenance(store.log_manager, store.config, vacuum=False)
    maintenance.delete_old_segments()
    clock.advance(DELAY)
    before = parquet_on_disk(log)
    assert maintenance.vacuum() == [] and parquet_on_disk(log) == before


def test_each_timer_runs_at_its_first_look_then_once_an_interval(store, clock):
    maintenance = StoreMaintenance(store.log_manager, store.config)
    interval = store.config.offsets_retention_check_interval_ms
    assert maintenance._timer_due("offsets", interval) == clock.now_ms()
    clock.advance(interval - 1)
    assert maintenance._timer_due("offsets", interval) is None
    assert maintenance._timer_due("transactional ids", interval) == clock.now_ms()  # timers are apart
    clock.advance(1)
    assert maintenance._timer_due("offsets", interval) == clock.now_ms()
    assert maintenance.expire_offsets() == 0  # not due again yet, and no offsets anyway
