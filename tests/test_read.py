"""Reads from every offset: earliest/latest, max_records, out of range, and across gaps left by removal.

Gaps are made for real: a Delta commit that removes one data file, through deltalog's own ``delta``
helpers, which is what a cleaning pass leaves behind (Kafka's compaction guarantee: a read from an offset that compaction
removed continues at the next offset that exists).
"""

from __future__ import annotations

import os

import pytest

from deltalog import OffsetOutOfRangeError, Record, Store
from deltalog.log import delta as deltamod

#: Batches of 1..3 records, a roll in the middle: offsets 0..11 in 6 files and 2 segments.
BATCHES = [1, 3, 2, 1, 3, 2]


@pytest.fixture
def filled(store):
    store.create_topic("t", config={"cleanup.policy": "compact"})
    n = 0
    for i, size in enumerate(BATCHES):
        if i == 3:
            store.roll("t", 0)
        store.append("t", 0, [Record(key=f"k{n + j}".encode(), value=f"v{n + j}".encode(),
                                     headers={"n": str(n + j)}) for j in range(size)])
        n += size
    return store


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def remove_file_holding(store: Store, offset: int) -> tuple[int, int]:
    """Commit a Delta remove of the data file that holds ``offset``; returns its offset range."""
    log = store.log("t", 0)
    f = next(f for f in log.snapshot().files if f.min_offset <= offset <= f.max_offset)
    deltamod.commit(log.table(), [deltamod.remove_action(f, store.clock.now_ms())], txns={}, operation="test-remove")
    return f.min_offset, f.max_offset


def test_read_from_every_offset(filled):
    everything = filled.read("t", 0, from_offset=0)
    assert offsets(everything) == list(range(12))
    assert [r.value for r in everything] == [f"v{i}".encode() for i in range(12)]
    assert all(r.headers == (("n", str(r.offset).encode()),) for r in everything)
    assert all(r.timestamp_ms == filled.clock.now_ms() and r.delete_horizon_ms is None for r in everything)
    for start in range(13):
        assert offsets(filled.read("t", 0, from_offset=start)) == list(range(start, 12))


def test_max_records_from_every_offset(filled):
    for start in range(13):
        for m in (0, 1, 2, 4, 5, 12, 100):
            assert offsets(filled.read("t", 0, from_offset=start, max_records=m)) == list(range(start, min(start + m, 12)))


def test_earliest_and_latest(filled):
    assert offsets(filled.read("t", 0, from_offset="earliest")) == list(range(12))
    assert filled.read("t", 0, from_offset="latest") == []
    assert offsets(filled.read("t", 0, from_offset="earliest", max_records=2)) == [0, 1]
    filled.append("t", 0, [Record(key=b"k", value=b"new")])
    assert offsets(filled.read("t", 0, from_offset=12)) == [12]


def test_out_of_range_below_start_and_after_end(filled):
    for bad in (-1, 13, 1000):
        with pytest.raises(OffsetOutOfRangeError) as e:
            filled.read("t", 0, from_offset=bad)
        assert e.value.log_start_offset == 0 and e.value.log_end_offset == 12
        assert f"offset {bad} is out of range" in str(e.value) and "[0, 12]" in str(e.value)


def test_empty_partition(store):
    store.create_topic("t")
    assert store.read("t", 0) == [] == store.read("t", 0, "earliest") == store.read("t", 0, "latest")
    with pytest.raises(OffsetOutOfRangeError):
        store.read("t", 0, from_offset=1)


def test_read_across_a_gap_continues_at_the_next_existing_offset(filled):
    lo, hi = remove_file_holding(filled, 2)
    assert (lo, hi) == (1, 3)
    assert offsets(filled.read("t", 0, from_offset=0)) == [0] + list(range(4, 12))
    for start in (1, 2, 3, 4):
        assert offsets(filled.read("t", 0, from_offset=start)) == list(range(4, 12))
    assert offsets(filled.read("t", 0, from_offset=0, max_records=3)) == [0, 4, 5]
    assert offsets(filled.read("t", 0, from_offset=2, max_records=2)) == [4, 5]
    state = filled.describe("t")[0]
    assert (state.log_start_offset, state.log_end_offset, state.num_records) == (0, 12, 9)


def test_read_across_several_gaps_and_segments(filled):
    remove_file_holding(filled, 0)
    remove_file_holding(filled, 6)  # offsets 6 (the first file of segment 6)
    remove_file_holding(filled, 9)  # offsets 7..9
    expected = [1, 2, 3, 4, 5, 10, 11]
    assert offsets(filled.read("t", 0, "earliest")) == expected
    for start in range(13):
        assert offsets(filled.read("t", 0, from_offset=start)) == [o for o in expected if o >= start]
        for m in (1, 2, 3):
            assert offsets(filled.read("t", 0, from_offset=start, max_records=m)) == [o for o in expected if o >= start][:m]


def test_a_gap_at_the_end_reads_empty_up_to_the_log_end(filled):
    remove_file_holding(filled, 11)  # offsets 10..11
    assert filled.read("t", 0, from_offset=10) == []
    assert filled.read("t", 0, from_offset=12) == []
    assert offsets(filled.read("t", 0, from_offset=8)) == [8, 9]
    with pytest.raises(OffsetOutOfRangeError):
        filled.read("t", 0, from_offset=13)


def test_reads_below_a_raised_log_start_are_out_of_range(filled):
    """A log start offset raised in the Delta log (as retention will do) bounds reads from below."""
    remove_file_holding(filled, 0)
    log = filled.log("t", 0)
    deltamod.commit(log.table(), [], txns={deltamod.TXN_LOG_START_OFFSET: 1}, operation="test-log-start")
    assert offsets(filled.read("t", 0, "earliest")) == list(range(1, 12))
    with pytest.raises(OffsetOutOfRangeError) as e:
        filled.read("t", 0, from_offset=0)
    assert e.value.log_start_offset == 1 and e.value.log_end_offset == 12


def test_reads_skip_files_by_their_offset_stats(filled):
    """Only files whose max offset reaches the requested offset are opened (Delta stats, no scan)."""
    snap = filled.log("t", 0).snapshot()
    assert [f.path for f in snap.files_from(10)] == [snap.files[-1].path]
    assert len(snap.files_from(0)) == len(BATCHES)
    # A file that is not needed may even be unreadable: the read never opens it.
    import os

    first = snap.files[0]
    with open(os.path.join(filled.log("t", 0).uri, first.path), "wb") as f:
        f.write(b"not parquet")
    assert offsets(filled.read("t", 0, from_offset=first.max_offset + 1)) == list(range(first.max_offset + 1, 12))
    from deltalog import CorruptLogError

    with pytest.raises(CorruptLogError) as e:
        filled.read("t", 0, from_offset=0)
    assert first.path in str(e.value)


def test_a_missing_data_file_is_a_corrupt_log_error_not_a_raw_os_error(store):
    from deltalog import CorruptLogError

    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"a", value=b"1")])
    log = store.log("t", 0)
    os.remove(os.path.join(log.uri, log.snapshot().files[0].path))
    with pytest.raises(CorruptLogError, match="missing"):
        store.read("t", 0, 0)


def test_headers_come_back_in_order_and_compare_with_the_list_or_dict_they_were_given_as(store):
    store.create_topic("h")
    store.append("h", 0, [Record(key=b"a", value=b"1", headers=[("trace", b"x"), ("trace", b"y"), ("src", "till")]),
                          Record(key=b"b", value=b"2", headers={"src": b"web"})])
    first, second = store.read("h", 0, 0)
    assert first.headers == [("trace", b"x"), ("trace", b"y"), ("src", b"till")]
    assert first.headers != {"trace": b"y", "src": b"till"}  # a repeated name is not a dict
    assert second.headers == {"src": b"web"} and second.headers == (("src", b"web"),)
