"""Appending a pyarrow Table/RecordBatch of records: the same offsets, rows and errors as Records."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltalog import Record
from deltalog.errors import InvalidRecordError, RecordTooLargeError

TOPIC = "bulk"
HEADERS = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))


def rows(store, topic=TOPIC):
    return [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in store.read(topic, 0, "earliest")]


def test_table_and_record_batch_get_consecutive_offsets(store):
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    table = pa.table({"key": [b"a", b"b", b"a"], "value": [b"1", None, b"2"]})
    assert store.append(TOPIC, 0, table) == [0, 1, 2]
    assert store.append(TOPIC, 0, table.to_batches()[0]) == [3, 4, 5]
    assert store.append(TOPIC, 0, [Record(key=b"c", value=b"3")]) == [6]
    assert store.append(TOPIC, 0, table.slice(0, 0)) == []
    assert [r[0] for r in rows(store)] == list(range(7))
    assert store.describe(TOPIC)[0].log_end_offset == 7


def test_arrow_rows_equal_the_record_path(tmp_path, clock):
    from deltalog import Store

    now = clock.now_ms()
    records = [
        Record(key=b"k1", value=b"v1"),
        Record(key="k2", value="text", headers=(("h", b"x"), ("g", None))),
        Record(key=b"k3", value=None, timestamp_ms=5),
    ]
    table = pa.table({
        "key": pa.array(["k1", "k2", "k3"], pa.string()),
        "value": pa.array([b"v1", b"text", None], pa.binary()),
        "headers": pa.array([[], [{"key": "h", "value": b"x"}, {"key": "g", "value": None}], None], HEADERS),
        "timestamp_ms": pa.array([None, None, 5], pa.int64()),
    })
    a, b = Store(tmp_path / "a", clock=clock), Store(tmp_path / "b", clock=clock)
    for s in (a, b):
        s.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    assert a.append(TOPIC, 0, records) == b.append(TOPIC, 0, table) == [0, 1, 2]
    assert rows(a) == rows(b)
    assert rows(b)[0][4] == now and rows(b)[1][3] == (("h", b"x"), ("g", None))


@pytest.mark.parametrize(("columns", "config", "error", "words"), [
    ({"key": [b"a", None], "value": [b"1", b"2"]}, {}, InvalidRecordError, ["record 1 has no key", "compact"]),
    ({"key": [b"a", b"b"], "value": [b"1", b"x" * 200]}, {"max.message.bytes": "100"}, RecordTooLargeError,
     ["record 1 is 201 bytes", "max.message.bytes=100"]),
    ({"key": [b"a", b"b"]}, {}, InvalidRecordError, ["missing: value"]),
    ({"key": [b"a"], "value": [b"1"], "partition": [0]}, {}, InvalidRecordError, ["unknown: partition"]),
    ({"key": [1, 2], "value": [b"1", b"2"]}, {}, InvalidRecordError, ["'key' is int64", "allowed: binary or string"]),
    ({"key": [b"a", b"b"], "value": [b"1", b"2"], "timestamp_ms": [1, -1]}, {}, InvalidRecordError,
     ["record 1", "timestamp_ms must be >= 0"]),
    ({"key": [b"a", b"b"], "value": [b"ok", b"\xff"]}, {"value.encoding": "string"}, InvalidRecordError,
     ["record 1", "value.encoding=string", "UTF-8"]),
    ({"key": [b"a", b"b"], "value": [b'{"p": 1.5}', b'{"p": "x"}']},
     {"value.encoding": "json", "value.schema": "p DOUBLE"}, InvalidRecordError, ["record 1", "value.schema"]),
])
def test_invalid_batches_are_refused_with_nothing_written(store, columns, config, error, words):
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", **config})
    with pytest.raises(error) as e:
        store.append(TOPIC, 0, pa.table(columns))
    for w in words:
        assert w in str(e.value)
    assert store.describe(TOPIC)[0].log_end_offset == 0
    assert store.log(TOPIC, 0).snapshot().files == ()


def test_record_path_and_arrow_path_raise_the_same_messages(store):
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "max.message.bytes": "10"})
    for bad in ([Record(key=b"a", value=b"1"), Record(key=None, value=b"2")],
                [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"x" * 20)]):
        table = pa.table({"key": [r.key for r in bad], "value": [r.value for r in bad]})
        with pytest.raises(InvalidRecordError) as from_records:
            store.append(TOPIC, 0, bad)
        with pytest.raises(InvalidRecordError) as from_arrow:
            store.append(TOPIC, 0, table)
        assert str(from_records.value) == str(from_arrow.value)


def test_keyless_rows_are_fine_on_a_delete_topic_and_headers_count_towards_the_size(store):
    store.create_topic(TOPIC, config={"cleanup.policy": "delete", "max.message.bytes": "10"})
    assert store.append(TOPIC, 0, pa.table({"key": pa.array([None], pa.binary()), "value": [b"1"]})) == [0]
    too_big = pa.table({"key": [b"k"], "value": [b"v"],
                        "headers": pa.array([[{"key": "name", "value": b"12345"}]], HEADERS)})
    with pytest.raises(RecordTooLargeError, match="record 0 is 11 bytes"):
        store.append(TOPIC, 0, too_big)
