"""Offsets: assigned contiguously at append, kept in the Delta log, never reused, never going backwards."""

from __future__ import annotations

import os

import pytest

from deltalog import ManualClock, Record, Store
from deltalog.errors import CorruptLogError
from deltalog.log import delta as deltamod


def recs(*keys: str) -> list[Record]:
    return [Record(key=k.encode(), value=f"v-{k}".encode()) for k in keys]


def test_offsets_are_contiguous_across_batches_and_partitions(store):
    store.create_topic("t", partitions=2)
    assert store.append("t", 0, recs("a")) == [0]
    assert store.append("t", 0, recs("b", "c", "d")) == [1, 2, 3]
    assert store.append("t", 1, recs("x", "y")) == [0, 1]  # each partition counts on its own
    assert store.append("t", 0, []) == []
    assert store.append("t", 0, Record(key=b"e", value=b"1")) == [4]  # a single record is a batch of one
    assert [r.offset for r in store.read("t", 0)] == [0, 1, 2, 3, 4]
    assert [r.key for r in store.read("t", 0)] == [b"a", b"b", b"c", b"d", b"e"]
    assert store.log("t", 0).head().log_end_offset == 5
    assert store.log("t", 1).head().log_end_offset == 2


def test_rolls_do_not_consume_offsets(store):
    store.create_topic("t")
    store.append("t", 0, recs("a", "b"))
    assert store.roll("t", 0) == 2
    assert store.roll("t", 0) == 2  # rolling an empty active segment does nothing
    assert store.append("t", 0, recs("c")) == [2]
    assert store.roll("t", 0) == 3
    assert store.append("t", 0, recs("d", "e")) == [3, 4]
    assert [r.offset for r in store.read("t", 0)] == [0, 1, 2, 3, 4]


def test_offsets_continue_after_reopening_the_store(tmp_path):
    clock = ManualClock(1_000)
    first = Store(tmp_path / "s", clock=clock)
    first.create_topic("t", partitions=2, config={"cleanup.policy": "compact"})
    assert first.append("t", 0, recs("a", "b", "c")) == [0, 1, 2]
    first.roll("t", 0)
    assert first.append("t", 1, recs("z")) == [0]

    second = Store(tmp_path / "s", clock=clock)
    assert second.append("t", 0, recs("d")) == [3]
    assert second.describe("t")[0].active_segment_base_offset == 3
    assert first.append("t", 0, recs("e")) == [4]  # the old handle sees the new store's commit
    third = Store(tmp_path / "s", clock=clock)
    assert third.append("t", 1, recs("y")) == [1]
    assert [r.offset for r in third.read("t", 0)] == [0, 1, 2, 3, 4]
    assert [r.key for r in third.read("t", 0)] == [b"a", b"b", b"c", b"d", b"e"]


def test_log_end_offset_is_read_from_the_delta_log_not_the_data(store):
    """With every data file gone from disk, the head still knows the log end: no data is scanned."""
    store.create_topic("t")
    store.append("t", 0, recs("a", "b"))
    store.append("t", 0, recs("c"))
    log = store.log("t", 0)
    for f in log.snapshot().files:
        os.remove(os.path.join(log.uri, f.path))
    fresh = Store(store.root, clock=store.clock)
    assert fresh.log("t", 0).head().log_end_offset == 3
    # describe lists the partition's directory once and names the missing files (tests/test_damage.py)
    with pytest.raises(CorruptLogError, match="t-0 is damaged: .* is missing"):
        fresh.describe("t")


def test_log_end_offset_never_goes_backwards_when_the_last_records_are_removed(store, clock):
    """Compaction may remove the records at the end of the log; their offsets are never handed out again."""
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, recs("a", "b"))
    store.append("t", 0, recs("c", "d"))
    log = store.log("t", 0)
    last = log.snapshot().files[-1]
    deltamod.commit(log.table(), [deltamod.remove_action(last, clock.now_ms())], txns={}, operation="test-remove")
    snap = log.snapshot()
    assert snap.num_records == 2 and snap.log_end_offset == 4
    assert store.append("t", 0, recs("e")) == [4]
    assert [r.offset for r in store.read("t", 0)] == [0, 1, 4]


def test_every_commit_carries_the_log_end_offset(store):
    store.create_topic("t")
    store.append("t", 0, recs("a"))
    store.append("t", 0, recs("b", "c"))
    log = store.log("t", 0)
    history = log.table().history()
    ops = [h.get("deltalog.operation") for h in history]
    assert ops.count("append") == 2
    assert log.table().transaction_version(deltamod.TXN_LOG_END_OFFSET) == 3


def test_the_latest_snapshot_is_rebuilt_only_when_the_table_moves(store):
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"a", value=b"1")])
    log = store.log("t", 0)
    first = log.snapshot()
    assert log.snapshot() is first  # same version: the same immutable snapshot
    Store(store.root, clock=store.clock).append("t", 0, [Record(key=b"b", value=b"2")])  # another handle writes
    second = log.snapshot()
    assert second is not first and second.version == first.version + 1 and second.log_end_offset == 2
    assert log.snapshot(first.version) == first  # time travel builds the old one again


def test_the_head_an_append_leaves_is_the_head_the_delta_log_holds(store, clock):
    """After each append this process knows the next head without reading it back; it must always be the
    head read from the Delta log, across rolls by time and size and appends from another handle."""
    from deltalog.log.partition_log import head_of

    store.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": "3000", "segment.ms": "1000"})
    log = store.log("t", 0)
    other = Store(store.root, clock=clock)
    for i in range(12):
        if i % 5 == 3:
            other.append("t", 0, [Record(key=b"o", value=b"x")])
        if i % 4 == 2:
            clock.advance(1001)
        store.append("t", 0, [Record(key=b"k%d" % j, value=b"v" * 200) for j in range(i % 3 + 1)])
        assert log.head() == head_of(log.table(), "t")
