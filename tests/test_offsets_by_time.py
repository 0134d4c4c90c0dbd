"""The earliest offset at or after a time from Delta file statistics (deltalog/log/offsets_by_time.py): Kafka's
ListOffsets by timestamp, with timestamps that do not grow with the offset and rows out of order in a file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import Record
from deltalog.errors import InvalidArgumentError
from deltalog.log.offsets_by_time import OffsetAndTimestamp, offset_and_timestamp_for_time, offset_for_time
from deltalog.storage import join


def _produce(store, stamps):
    store.produce("t", [Record(key=b"k%d" % i, value=b"v", timestamp_ms=ts) for i, ts in enumerate(stamps)])


def test_earliest_offset_at_or_after_the_time_across_files(store):
    store.create_topic("t")
    _produce(store, [100, 200, 300])      # offsets 0-2, one file
    _produce(store, [150, 400, 50])       # offsets 3-5: not monotonic
    _produce(store, [500])                # offset 6
    log = store.log("t", 0)
    assert offset_for_time(log, 0) == 0
    assert offset_for_time(log, 100) == 0
    assert offset_for_time(log, 101) == 1
    assert offset_for_time(log, 250) == 2
    assert offset_and_timestamp_for_time(log, 301) == OffsetAndTimestamp(4, 400)
    assert offset_for_time(log, 450) == 6
    assert offset_for_time(log, 501) is None          # Kafka: no such offset
    assert offset_for_time(log, 450, upto=6) is None  # beyond the last fetchable offset


def test_the_log_start_offset_bounds_the_answer(store):
    store.create_topic("t")
    _produce(store, [100, 200, 300, 400])
    store.delete_records("t", 0, 2)
    assert offset_for_time(store.log("t", 0), 0) == 2


def test_files_with_no_candidate_are_never_opened(store):
    store.create_topic("t")
    _produce(store, [100, 110])
    _produce(store, [300, 310])
    log = store.log("t", 0)
    first = min(log.snapshot().files, key=lambda f: f.min_offset)
    import os
    path = join(log.uri, first.path)
    os.remove(path)  # a file the statistics rule out may be gone: it is not read
    assert offset_for_time(log, 200) == 2


def test_rows_out_of_offset_order_within_a_file(store, tmp_path):
    store.create_topic("t")
    _produce(store, [100, 200, 300, 400])
    log = store.log("t", 0)
    (f,) = log.snapshot().files
    path = join(log.uri, f.path)
    table = pq.read_table(path)
    reordered = table.take(pa.array([3, 1, 2, 0]))  # as another engine's OPTIMIZE may leave them
    pq.write_table(reordered, path)
    assert offset_for_time(log, 150) == 1
    assert offset_for_time(log, 50) == 0


def test_a_negative_time_is_refused(store):
    store.create_topic("t")
    with pytest.raises(InvalidArgumentError, match="milliseconds"):
        offset_for_time(store.log("t", 0), -5)
