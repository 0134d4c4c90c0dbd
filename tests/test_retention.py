"""Retention (Kafka's deleteOldSegments): whole segments, oldest first, by time, by bytes, log start breach."""

from __future__ import annotations

import threading

import pytest

from deltalog import OffsetOutOfRangeError, Record
from deltalog.log.retention import (
    REASON_BYTES,
    REASON_LOG_START,
    REASON_TIME,
    deletable_segments,
    delete_old_segments,
)

HOUR = 3_600_000


def make_segments(store, clock, topic, n, *, step_ms, policy="delete", per_segment=2, **config):
    """``n`` closed segments of ``per_segment`` records (one batch each), ``step_ms`` apart, then an active one."""
    store.create_topic(topic, 1, config={"cleanup.policy": policy, **config})
    for s in range(n):
        store.append(topic, 0, [Record(f"k{s}-{i}", f"v{s}-{i}") for i in range(per_segment)])
        store.roll(topic, 0)
        clock.advance(step_ms)
    store.append(topic, 0, [Record("active", "a")])
    return store.log(topic, 0)


def test_time_retention_deletes_old_segments_and_advances_log_start(store, clock):
    log = make_segments(store, clock, "t", 3, step_ms=HOUR, **{"retention.ms": 2 * HOUR})
    # segments [0,2) at t0, [2,4) at t0+1h, [4,6) at t0+2h; active [6,7) at now = t0+3h
    result = delete_old_segments(log, clock.now_ms())
    assert [s.base_offset for s in result.segments] == [0]  # 3h old; [2,4) is exactly 2h old: kept
    assert {s.reason for s in result.segments} == {REASON_TIME}
    assert result.log_start_offset_before == 0 and result.log_start_offset == 2
    assert result.records_deleted == 2 and result.bytes_deleted > 0 and result.files_deleted == 1
    snap = log.snapshot()
    assert snap.log_start_offset == 2 and snap.log_end_offset == 7
    assert result.version == snap.version  # the retention commit's own version
    assert log.table().history(1)[0]["deltalog.operation"] == "retention"
    assert [r.offset for r in store.read("t", 0, "earliest")] == [2, 3, 4, 5, 6]
    with pytest.raises(OffsetOutOfRangeError) as e:
        store.read("t", 0, 1)
    assert e.value.log_start_offset == 2 and e.value.log_end_offset == 7
    # running again deletes nothing more until the next segment ages out
    assert delete_old_segments(log, clock.now_ms()).segments_deleted == 0
    clock.advance(1)
    assert [s.base_offset for s in delete_old_segments(log, clock.now_ms()).segments] == [2]
    assert log.snapshot().log_start_offset == 4


def test_time_retention_boundary_is_strictly_older(store, clock):
    store.create_topic("t", 1, config={"retention.ms": 1000})
    store.append("t", 0, [Record("a", "1")])
    store.roll("t", 0)
    store.append("t", 0, [Record("b", "2")])
    log = store.log("t", 0)
    t0 = log.snapshot().segments[0].largest_timestamp_ms
    assert deletable_segments(log.snapshot(), t0 + 1000) == []
    assert [s.base_offset for s in deletable_segments(log.snapshot(), t0 + 1001)] == [0]


def test_active_segment_is_never_deleted(store, clock):
    log = make_segments(store, clock, "t", 2, step_ms=1, **{"retention.ms": 10})
    clock.advance(365 * 24 * HOUR)
    result = delete_old_segments(log, clock.now_ms())
    assert [s.base_offset for s in result.segments] == [0, 2]
    snap = log.snapshot()
    assert snap.log_start_offset == 4 and snap.active_segment_base == 4
    assert [r.key for r in store.read("t", 0, "earliest")] == [b"active"]
    # the active segment is still there, and the next append continues the offsets; that append rolls
    # it (open longer than segment.ms), and once closed it ages out like any other segment
    assert store.append("t", 0, [Record("x", "y")]) == [5]
    assert [s.base_offset for s in delete_old_segments(log, clock.now_ms()).segments] == [4]
    assert log.snapshot().log_start_offset == 5
    assert delete_old_segments(log, clock.now_ms()).segments_deleted == 0
    assert [r.key for r in store.read("t", 0, "earliest")] == [b"x"]


def test_walk_stops_at_first_segment_that_is_not_old_enough(store, clock):
    """A future-dated record keeps its segment, and every later segment, from time-based deletion."""
    store.create_topic("t", 1, config={"retention.ms": HOUR})
    store.append("t", 0, [Record("future", "f", timestamp_ms=clock.now_ms() + 100 * HOUR)])
    store.roll("t", 0)
    store.append("t", 0, [Record("old", "o")])
    store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])
    clock.advance(10 * HOUR)
    assert delete_old_segments(store.log("t", 0), clock.now_ms()).segments == ()
    assert store.log("t", 0).snapshot().log_start_offset == 0


def test_size_retention_deletes_oldest_while_over_retention_bytes(store, clock):
    log = make_segments(store, clock, "t", 4, step_ms=1)
    sizes = [s.size_bytes for s in log.snapshot().segments]  # 4 closed + the active one
    # room for the newest two closed segments and the active one: the oldest two go
    store.alter_topic_config("t", {"retention.bytes": sum(sizes[2:])})
    result = delete_old_segments(log, clock.now_ms())
    assert [s.base_offset for s in result.segments] == [0, 2]
    assert {s.reason for s in result.segments} == {REASON_BYTES}
    after = log.snapshot()
    assert after.size_bytes == sum(sizes[2:]) and after.log_start_offset == 4
    # Kafka deletes a segment only while the excess covers all of it: one byte over keeps the segment
    store.alter_topic_config("t", {"retention.bytes": after.size_bytes - 1})
    assert delete_old_segments(log, clock.now_ms()).segments_deleted == 0
    store.alter_topic_config("t", {"retention.bytes": after.size_bytes - sizes[2]})
    assert [s.base_offset for s in delete_old_segments(log, clock.now_ms()).segments] == [4]
    store.alter_topic_config("t", {"retention.bytes": -1})  # unbounded
    assert delete_old_segments(log, clock.now_ms()).segments_deleted == 0
    assert [r.offset for r in store.read("t", 0, "earliest")] == [6, 7, 8]


def test_size_then_time_predicates_apply_in_order(store, clock):
    log = make_segments(store, clock, "t", 4, step_ms=HOUR)
    sizes = [s.size_bytes for s in log.snapshot().segments]
    # bytes alone would take segment 0; time alone segments 0 and 1 (older than 2.5h at now = t0+4h)
    store.alter_topic_config("t", {"retention.bytes": sum(sizes) - sizes[0], "retention.ms": int(2.5 * HOUR)})
    result = delete_old_segments(log, clock.now_ms())
    assert [(s.base_offset, s.reason) for s in result.segments] == [(0, REASON_BYTES), (2, REASON_TIME)]
    assert log.snapshot().log_start_offset == 4


def test_compact_only_topic_keeps_old_segments_but_drops_those_below_log_start(store, clock):
    log = make_segments(store, clock, "t", 3, step_ms=HOUR, policy="compact", **{"retention.ms": 1})
    clock.advance(100 * HOUR)
    assert delete_old_segments(log, clock.now_ms()).segments_deleted == 0  # compact: no time retention
    store.delete_records("t", 0, 3)  # mid segment [2, 4)
    result = delete_old_segments(log, clock.now_ms())
    # segment [0,2) was already removed by DeleteRecords (its files lay below 3); nothing left to breach
    assert result.segments_deleted == 0
    assert log.snapshot().log_start_offset == 3
    assert [r.offset for r in store.read("t", 0, "earliest")] == [3, 4, 5, 6]


def test_log_start_breach_deletes_segments_wholly_below_log_start(store, clock):
    """A segment whose files straddle nothing but lie below the log start goes, reason log-start-offset."""
    log = make_segments(store, clock, "t", 3, step_ms=1, per_segment=1, **{"retention.ms": -1})
    # move the log start without removing files (as a Kafka DeleteRecords followed by retention does)
    from deltalog.log import delta

    snap = log.snapshot()
    dt = delta.open_table(log.storage, log.uri)
    delta.commit(dt, [], txns={delta.TXN_LOG_START_OFFSET: 2}, operation="test")
    result = delete_old_segments(log, clock.now_ms())
    assert [(s.base_offset, s.reason) for s in result.segments] == [(0, REASON_LOG_START), (1, REASON_LOG_START)]
    assert log.snapshot().log_start_offset == 2
    assert len(log.snapshot().files) == len(snap.files) - 2


def test_compact_delete_drops_old_unique_keys(store, clock):
    """Kafka's compact,delete: even the only record of a key goes once it is older than retention.ms."""
    store.create_topic("prices", 1, config={"cleanup.policy": "compact,delete", "retention.ms": 3 * 7 * 24 * HOUR})
    store.append("prices", 0, [Record("discontinued-fruit", "1.00")])
    store.roll("prices", 0)
    clock.advance(2 * 7 * 24 * HOUR)
    store.append("prices", 0, [Record("apple", "2.00")])
    store.roll("prices", 0)
    clock.advance(7 * 24 * HOUR + 1)
    store.append("prices", 0, [Record("banana", "3.00")])
    result = delete_old_segments(store.log("prices", 0), clock.now_ms())
    assert [s.base_offset for s in result.segments] == [0]
    keys = [r.key for r in store.read("prices", 0, "earliest")]
    assert keys == [b"apple", b"banana"]


def test_retention_commit_carries_only_the_log_start_and_producers_keep_appending(store, clock):
    log = make_segments(store, clock, "t", 6, step_ms=HOUR, per_segment=1, **{"retention.ms": HOUR})
    errors: list[BaseException] = []
    offsets: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        try:
            while not stop.is_set() and len(offsets) < 40:
                offsets.extend(store.append("t", 0, [Record("p", "x")]))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        result = delete_old_segments(log, clock.now_ms())
    finally:
        stop.set()
        producer.join()
    assert not errors
    assert result.segments_deleted == 5
    snap = log.snapshot()
    assert snap.log_start_offset == 5
    assert offsets == list(range(7, 7 + len(offsets)))
    assert snap.log_end_offset == 7 + len(offsets)
    assert [r.offset for r in store.read("t", 0, "earliest")] == list(range(5, snap.log_end_offset))
