"""Offsets by time: the earliest offset whose timestamp is at or after T (Kafka's ListOffsets by timestamp), from
the Delta file statistics, through the consumer's ``offsets_for_times`` (kafka-python's shape),
``get_watermark_offsets`` and ``highwater``."""

from __future__ import annotations

import pytest

from deltalog import Record
from deltalog.errors import IllegalStateError, InvalidArgumentError
from deltalog.log.offsets_by_time import offset_and_timestamp_for_time, offset_for_time
from deltalog.structs import OffsetAndTimestamp, TopicPartition

TP = TopicPartition("t", 0)


def _batch(stamps, start=0):
    return [Record(key=b"k%d" % (start + i), value=b"v", timestamp_ms=ts) for i, ts in enumerate(stamps)]


@pytest.fixture
def timed(store):
    """Three files: timestamps out of offset order inside the second file, and across files."""
    store.create_topic("t", 1)
    store.append("t", 0, _batch([1000, 1100, 1200]))          # offsets 0-2
    store.append("t", 0, _batch([5000, 2000, 4000], 3))       # offsets 3-5: 5000 comes before 2000
    store.append("t", 0, _batch([3000, 6000], 6))             # offsets 6-7
    return store


@pytest.mark.parametrize(("ts", "want"), [
    (0, (0, 1000)), (1000, (0, 1000)), (1001, (1, 1100)), (1201, (3, 5000)), (2000, (3, 5000)),
    (5000, (3, 5000)), (5001, (7, 6000)), (6000, (7, 6000)), (6001, None),
])
def test_earliest_offset_at_or_after_the_time_in_offset_order(timed, ts, want):
    log = timed.log("t", 0)
    found = offset_and_timestamp_for_time(log, ts)
    assert (None if found is None else tuple(found)) == want
    assert offset_for_time(log, ts) == (None if want is None else want[0])


def test_records_below_the_log_start_are_never_the_answer(timed):
    timed.delete_records("t", 0, 4)  # offset 3 (ts 5000) stays in its file, below the log start
    assert tuple(offset_and_timestamp_for_time(timed.log("t", 0), 1500)) == (4, 2000)
    assert tuple(offset_and_timestamp_for_time(timed.log("t", 0), 4500)) == (7, 6000)


def test_an_empty_partition_has_no_offset_for_any_time(store):
    store.create_topic("e", 1)
    assert offset_for_time(store.log("e", 0), 0) is None


def test_a_negative_or_non_integer_time_is_refused(timed):
    for bad in (-1, 1.5, "2020", True):
        with pytest.raises(InvalidArgumentError, match="epoch milliseconds"):
            offset_for_time(timed.log("t", 0), bad)


def test_consumer_offsets_for_times_has_kafka_pythons_shape(timed):
    c = timed.consumer(group_id="g")
    got = c.offsets_for_times({TP: 1500, ("t", 0): 1500})
    assert got == {TP: OffsetAndTimestamp(3, 5000)}
    assert got[TP].offset == 3 and got[TP].timestamp == 5000 and got[TP].leader_epoch == -1
    assert c.offsets_for_times({TP: 7000}) == {TP: None}
    with pytest.raises(InvalidArgumentError, match="timestamp for t-0"):
        c.offsets_for_times({TP: -5})


def test_seek_to_the_offset_for_a_time_reads_from_there(timed):
    c = timed.consumer(group_id="g", enable_auto_commit=False)
    c.assign([TP])
    c.seek(TP, c.offsets_for_times({TP: 4500})[TP].offset)
    assert [r.offset for r in c.poll(0)[TP]] == [3, 4, 5, 6, 7]


def test_an_offset_past_the_last_stable_offset_is_none_at_read_committed(timed):
    p = timed.producer(transactional_id="tx")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"open", key=b"k", partition=0, timestamp_ms=9000)
    rc = timed.consumer(isolation_level="read_committed")
    ru = timed.consumer(isolation_level="read_uncommitted")
    assert rc.offsets_for_times({TP: 8000}) == {TP: None}
    assert ru.offsets_for_times({TP: 8000}) == {TP: OffsetAndTimestamp(8, 9000)}
    p.abort_transaction()


def test_watermarks_and_highwater(timed):
    c = timed.consumer(enable_auto_commit=False)
    assert c.get_watermark_offsets(TP) == (0, 8)
    timed.delete_records("t", 0, 2)
    assert c.get_watermark_offsets(TP, timeout=1.0, cached=True) == (2, 8)
    with pytest.raises(IllegalStateError, match="not assigned"):
        c.highwater(TP)
    c.assign([TP])
    assert c.highwater(TP) is None  # nothing fetched yet
    c.seek_to_beginning()
    c.poll(0, max_records=1)
    assert c.highwater(TP) == 8
    timed.append("t", 0, _batch([7000], 8))
    c.poll(0)  # what the first fetch buffered
    assert c.highwater(TP) == 8
    assert [r.offset for r in c.poll(0)[TP]] == [8]  # a new fetch, which sees the new high watermark
    assert c.highwater(TP) == 9
