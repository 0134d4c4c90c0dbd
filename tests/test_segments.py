"""Segments roll by segment.bytes, by segment.ms (strictly longer, as Kafka's shouldRoll), and on request."""

from __future__ import annotations

import pytest

from deltalog import ManualClock, Record, Store


def one(key: str, size: int = 10) -> list[Record]:
    return [Record(key=key.encode(), value=b"x" * size)]


def bases(store: Store, topic: str = "t") -> list[int]:
    return [s.base_offset for s in store.describe(topic)[0].segments]


def test_a_new_partition_has_one_empty_active_segment(store):
    store.create_topic("t")
    (seg,) = store.describe("t")[0].segments
    assert (seg.base_offset, seg.end_offset, seg.is_active, seg.size_bytes, seg.files) == (0, 0, True, 0, ())


def test_smallest_segment_bytes_puts_every_batch_in_its_own_segment(store):
    store.create_topic("t", config={"segment.bytes": 14})
    for i in range(4):
        store.append("t", 0, one(f"k{i}") * 2)
    assert bases(store) == [0, 2, 4, 6]
    segs = store.describe("t")[0].segments
    assert [s.is_active for s in segs] == [False, False, False, True]
    assert [s.end_offset for s in segs] == [2, 4, 6, 8]


def test_segment_rolls_once_it_reaches_segment_bytes(store):
    """The check is made when appending (Kafka's maybeRoll): a segment closes with the batch that makes it
    reach segment.bytes, so every closed segment is >= segment.bytes and < segment.bytes + its last file."""
    store.create_topic("probe")
    store.append("probe", 0, one("k"))
    file_size = store.describe("probe")[0].size_bytes
    limit = 3 * file_size - file_size // 2  # two and a half files
    store.create_topic("t", config={"segment.bytes": limit})
    for i in range(10):
        store.append("t", 0, one(f"k{i}"))
    segs = store.describe("t")[0].segments
    closed = [s for s in segs if not s.is_active]
    assert len(closed) >= 2
    for s in closed:
        last = max(s.files, key=lambda f: f.min_offset)
        assert s.size_bytes >= limit > s.size_bytes - last.size_bytes
    assert segs[-1].is_active and segs[-1].size_bytes < limit + max(f.size_bytes for f in segs[-1].files)
    assert bases(store) == [0, 3, 6, 9]


def test_segment_rolls_when_open_strictly_longer_than_segment_ms(store, clock):
    store.create_topic("t", config={"segment.ms": 1000})
    store.append("t", 0, one("a"))  # opens segment 0 at t0
    clock.advance(600)
    store.append("t", 0, one("b"))
    clock.advance(400)  # exactly segment.ms since the segment opened: not yet
    store.append("t", 0, one("c"))
    assert bases(store) == [0]
    clock.advance(1)  # now strictly longer
    store.append("t", 0, one("d"))
    assert bases(store) == [0, 3]
    assert store.describe("t")[0].active_segment_base_offset == 3


def test_segment_ms_counts_from_the_first_append_not_from_the_roll(store, clock):
    store.create_topic("t", config={"segment.ms": 1000})
    store.append("t", 0, one("a"))
    store.roll("t", 0)  # active segment 1 is empty; its clock starts with its first record
    clock.advance(5000)
    store.append("t", 0, one("b"))  # an empty active segment never rolls
    clock.advance(1000)
    store.append("t", 0, one("c"))
    assert bases(store) == [0, 1]
    clock.advance(1)
    store.append("t", 0, one("d"))
    assert bases(store) == [0, 1, 3]


def test_time_based_roll_survives_reopening_the_store(tmp_path):
    clock = ManualClock(10_000)
    Store(tmp_path / "s", clock=clock).create_topic("t", config={"segment.ms": 100})
    Store(tmp_path / "s", clock=clock).append("t", 0, one("a"))
    clock.advance(101)
    reopened = Store(tmp_path / "s", clock=clock)
    assert reopened.append("t", 0, one("b")) == [1]
    assert bases(reopened) == [0, 1]


def test_roll_on_request(store):
    store.create_topic("t")
    store.append("t", 0, one("a") * 3)
    assert store.roll("t", 0) == 3
    state = store.describe("t")[0]
    assert [(s.base_offset, s.end_offset, s.is_active, s.num_records) for s in state.segments] == [
        (0, 3, False, 3), (3, 3, True, 0)]
    assert store.roll("t", 0) == 3  # idempotent while the active segment is empty
    store.append("t", 0, one("b"))
    assert bases(store) == [0, 3]


def test_segments_sum_to_the_partition(store):
    store.create_topic("t", config={"segment.bytes": 14})
    for i in range(5):
        store.append("t", 0, one(f"k{i}", size=i + 1))
    state = store.describe("t")[0]
    assert sum(s.size_bytes for s in state.segments) == state.size_bytes
    assert sum(s.num_records for s in state.segments) == state.num_records == 5
    # Offsets in a segment lie within [base, end)
    for s in state.segments:
        for f in s.files:
            assert s.base_offset <= f.min_offset <= f.max_offset < s.end_offset


def test_describe_shows_a_rolled_partition_as_dirty(store, clock):
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, one("a"))
    state = store.describe("t")[0]
    assert state.dirty_ratio == 0.0 and not state.eligible_for_cleaning  # only the active segment
    store.roll("t", 0)
    state = store.describe("t")[0]
    assert state.dirty_ratio == 1.0 and state.eligible_for_cleaning
    assert state["dirty_bytes"] == state.segments[0].size_bytes
    assert state.as_dict()["segments"][0]["active"] is False


@pytest.mark.parametrize("segment_ms", [1, 60_000])
def test_roll_by_time_does_not_lose_or_reorder_records(store, clock, segment_ms):
    store.create_topic("t", config={"segment.ms": segment_ms})
    for i in range(6):
        store.append("t", 0, one(f"k{i}"))
        clock.advance(segment_ms // 2 + 1)
    assert [r.key for r in store.read("t", 0)] == [f"k{i}".encode() for i in range(6)]
    assert len(bases(store)) == 3
