"""``store.produce``: each record to the partition Kafka's producer would pick, one append per partition, and
each record's (topic, partition, offset, timestamp) back in input order."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from deltalog import ProduceResult, Record, RecordMetadata
from deltalog.errors import InvalidArgumentError, InvalidRecordError, UnknownTopicOrPartitionError
from deltalog.producer.partitioner import partition_for_key
from deltalog.producer.router import STICKY_BATCH_BYTES, PartitionRouter


def versions(store, topic):
    return [log.snapshot().version for log in store.logs(topic)]


def test_the_issues_example_grape_on_1_lime_on_0(store, clock):
    store.create_topic("fruit-prices", 2, config={"cleanup.policy": "compact"})
    now = clock.now_ms()
    result = store.produce("fruit-prices", [
        Record(key=b"grape", value=b"2.69"),
        Record(key="lime", value="0.49"),
        Record(key=b"grape", value=None, timestamp_ms=5),
    ])
    assert result == [
        RecordMetadata("fruit-prices", 1, 0, now),
        RecordMetadata("fruit-prices", 0, 0, now),
        RecordMetadata("fruit-prices", 1, 1, 5),
    ]
    assert [(r.offset, r.key, r.value) for r in store.read("fruit-prices", 1)] == [(0, b"grape", b"2.69"),
                                                                                  (1, b"grape", None)]
    assert [(r.offset, r.key, r.value) for r in store.read("fruit-prices", 0)] == [(0, b"lime", b"0.49")]


def test_keys_land_where_kafka_puts_them_with_one_commit_per_partition(store):
    store.create_topic("t", 7)
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randint(0, 30)) for _ in range(500)]
    before = versions(store, "t")
    result = store.produce("t", [Record(key=k, value=b"v%d" % i) for i, k in enumerate(keys)])
    assert [m.partition for m in result] == [partition_for_key(k, 7) for k in keys]
    touched = set(result.partitions.tolist())
    assert [v - b for v, b in zip(versions(store, "t"), before, strict=True)] == [int(p in touched) for p in range(7)]
    # offsets are per partition, contiguous, in input order within a partition
    for p, offsets in result.offsets_by_partition().items():
        assert offsets == list(range(len(offsets)))
        got = store.read("t", p)
        assert [r.key for r in got] == [k for k, q in zip(keys, result.partitions.tolist(), strict=True) if q == p]
    # the Arrow form puts them in the same places and returns the same metadata shape
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([b"x"] * len(keys))})
    again = store.produce("t", table)
    assert np.array_equal(again.partitions, result.partitions)
    assert np.array_equal(again.offsets, result.offsets + np.bincount(result.partitions, minlength=7)[result.partitions])


def test_an_explicit_partition_wins(store):
    store.create_topic("t", 3)
    assert [m.partition for m in store.produce("t", [Record(key=b"grape", value=b"1")] * 3, partition=2)] == [2, 2, 2]
    table = pa.table({"key": [b"grape", b"grape", b"lime"], "value": [b"1", b"2", b"3"],
                      "partition": pa.array([0, None, None], pa.int32())})
    got = store.produce("t", table)
    assert got.partitions.tolist() == [0, partition_for_key("grape", 3), partition_for_key("lime", 3)]
    assert got[0] == RecordMetadata("t", 0, 0, got[0].timestamp_ms)
    assert store.produce("t", pa.table({"key": [b"a"], "value": [b"1"], "partition": [1]}).to_batches()[0])[0].partition == 1


@pytest.mark.parametrize(
    ("kwargs", "table", "error", "words"),
    [
        ({"partition": 3}, None, UnknownTopicOrPartitionError, ["Partition 3 of topic 't' does not exist", "0..2"]),
        ({}, {"partition": [0, 5]}, UnknownTopicOrPartitionError, ["record 1: partition 5", "0..2"]),
        ({}, {"partition": [0, -1]}, InvalidRecordError, ["record 1: partition must be >= 0"]),
        ({}, {"partition": ["0", "1"]}, InvalidRecordError, ["'partition' is string", "integers"]),
        ({"partition": 1}, {"partition": [0, 1]}, InvalidArgumentError, ["not both"]),
        ({}, {"key": [b"a", None]}, InvalidRecordError, ["record 1 has no key", "compact"]),
    ],
)
def test_bad_input_writes_nothing(store, kwargs, table, error, words):
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    columns = {"key": [b"a", b"b"], "value": [b"1", b"2"], **(table or {})}
    before = versions(store, "t")
    with pytest.raises(error) as info:
        store.produce("t", pa.table(columns), **kwargs)
    for w in words:
        assert w in str(info.value)
    if isinstance(info.value, InvalidRecordError) and "record 1" in str(info.value):
        assert info.value.index == 1
    assert versions(store, "t") == before


def test_unknown_topic_and_empty_input(store):
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
        store.produce("nope", [Record(key=b"a", value=b"1")])
    store.create_topic("t", 2)
    empty = store.produce("t", [])
    assert len(empty) == 0 and empty == [] and list(empty) == []
    with pytest.raises(InvalidRecordError, match="not a deltalog.Record"):
        store.produce("t", [("a", "b")])


def test_keyless_records_stick_to_a_partition_for_a_batch_then_move_on(store):
    """Kafka's sticky partitioner (KIP-480): about batch.size bytes to one partition, then the next."""
    store.create_topic("events", 4)
    producer = PartitionRouter(store.log_manager, rng=random.Random(5))
    small = [Record(value=b"x" * 100) for _ in range(10)]  # 1,000 bytes: well within one batch
    first = producer.send("events", small, 0)
    assert len(set(first.partitions.tolist())) == 1
    second = producer.send("events", small, 0)  # the position carries over between calls
    assert set(second.partitions.tolist()) == set(first.partitions.tolist())
    start = int(first.partitions[0])
    # 16,384 bytes go to a partition, then the next one takes over, round-robin
    bulk = producer.send("events", pa.table({"key": pa.nulls(400, pa.binary()), "value": [b"y" * 1000] * 400}), 0)
    used = 2 * 1000  # bytes already in the current batch
    want = [(start + (used + 1000 * i) // STICKY_BATCH_BYTES) % 4 for i in range(400)]
    assert bulk.partitions.tolist() == want
    counts = np.bincount(bulk.partitions, minlength=4)
    assert counts.max() - counts.min() <= STICKY_BATCH_BYTES // 1000 + 1  # spread evenly over the partitions
    # keyed and keyless records of one call: the keyed ones still go by their key
    mixed = producer.send("events", [Record(key=b"grape", value=b"1"), Record(value=b"2")], 0)
    assert mixed.partitions[0] == partition_for_key("grape", 4)


def test_the_result_is_a_sequence_of_record_metadata(store, clock):
    store.create_topic("t", 2)
    result = store.produce("t", [Record(key=b"k%d" % i, value=b"v") for i in range(5)])
    assert isinstance(result, ProduceResult) and len(result) == 5
    assert result[-1] == list(result)[4] and result[1:3] == list(result)[1:3]
    assert all(m.topic == "t" and m.timestamp_ms == clock.now_ms() for m in result)
    assert "RecordMetadata(topic='t'" in repr(result)
    with pytest.raises(ValueError, match="read-only"):
        result.offsets[0] = 7
    with pytest.raises(AttributeError):
        result[0].offset = 3  # frozen
    assert result != [result[0]]


def test_route_with_known_topic_metadata_reads_nothing_of_the_store(store, clock):
    """A Spark sink's tasks get the topic's partition count and config from the driver: routing then opens no
    partition table, and routes exactly as reading them would."""
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    batch = pa.table({"key": pa.array([b"grape", b"lime", b"fig"], pa.binary()),
                      "value": pa.array([b"1", b"2", b"3"], pa.binary())})
    known = PartitionRouter(store.log_manager).topic_metadata("t")
    assert known[0] == 3

    class NoStore:
        def __getattr__(self, name):
            raise AssertionError(f"the store was used: {name}")

    rows, targets = PartitionRouter(NoStore(), topics={"t": known}).route("t", batch, clock.now_ms())
    expected_rows, expected = PartitionRouter(store.log_manager).route("t", batch, clock.now_ms())
    assert targets.tolist() == expected.tolist() == [partition_for_key(k, 3) for k in (b"grape", b"lime", b"fig")]
    assert rows.equals(expected_rows)


def test_the_producer_modules_earlier_names_still_work_and_warn():
    """``deltalog.producer.producer`` (its ``Producer``: the router) and ``deltalog.producer.idempotent_producer``
    (``KafkaProducer``) were renamed ``router`` (``PartitionRouter``) and ``kafka_producer``; the earlier names
    answer with the same objects, and warn."""
    from deltalog.producer import kafka_producer, router

    with pytest.warns(DeprecationWarning, match="deltalog.producer.producer.Producer is deprecated.*PartitionRouter"):
        from deltalog.producer.producer import Producer
    assert Producer is router.PartitionRouter
    with pytest.warns(DeprecationWarning, match="deltalog.producer.producer.RecordMetadata is deprecated"):
        from deltalog.producer.producer import RecordMetadata
    assert RecordMetadata is router.RecordMetadata
    with pytest.warns(DeprecationWarning, match="idempotent_producer.KafkaProducer is deprecated.*kafka_producer"):
        from deltalog.producer.idempotent_producer import KafkaProducer
    assert KafkaProducer is kafka_producer.KafkaProducer
    with pytest.raises(ImportError, match="Nope"):
        from deltalog.producer.producer import Nope  # noqa: F401
