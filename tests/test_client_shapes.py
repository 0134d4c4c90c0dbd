"""The producer speaks Kafka's Python clients' call shapes: kafka-python's ``send(topic, value=, key=, ...)`` and its
future, confluent-kafka's ``Producer(conf)``, ``produce(topic, value, key, on_delivery=...)``, ``poll``/``flush`` and
``send_offsets_to_transaction(positions, consumer_group_metadata())``, on a real store."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from deltalog import InvalidConfigError, Record
from deltalog.structs import TopicPartition


@pytest.fixture
def topic(store):
    store.create_topic("t", 3)
    return "t"


def test_kafka_python_send_of_one_record_returns_a_done_future(store, topic):
    producer = store.producer(bootstrap_servers="ignored:9092", linger_ms=5)
    future = producer.send(topic, value=b"v1", key=b"k", headers=[("trace", b"1")])
    meta = future.get(timeout=10)
    assert (meta.topic, meta.offset, meta.timestamp) == (topic, 0, meta.timestamp_ms)
    assert meta.topic_partition == TopicPartition(topic, meta.partition)
    assert future.is_done and future.succeeded() and not future.failed()
    seen = []
    future.add_callback(seen.append)
    assert seen == [meta]
    # value as the second positional argument, a fixed partition and timestamp
    meta2 = producer.send(topic, b"v2", key=b"k", partition=meta.partition, timestamp_ms=1_000).get()
    assert meta2.offset == 1 and meta2.timestamp_ms == 1_000
    assert producer.send(topic, key=b"k").get().offset == 2  # value None: a tombstone
    assert producer.flush() == 0
    records = store.read(topic, meta.partition)
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in records][:2] == [
        (b"k", b"v1", (("trace", b"1"),), meta.timestamp_ms), (b"k", b"v2", (), 1_000)]
    assert records[2].value is None


def test_confluent_produce_calls_its_delivery_callback_and_takes_a_config_dict(store, topic):
    producer = store.producer({"bootstrap.servers": "ignored:9092", "enable.idempotence": True})
    delivered = []

    def on_delivery(err, msg):
        delivered.append((err, msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))

    producer.produce(topic, b"v", b"k", on_delivery=on_delivery)
    producer.produce(topic, value=b"w", key=b"k", partition=2, callback=on_delivery, headers={"h": b"x"})
    assert producer.poll(0) == 0 and producer.flush(1.0) == 0
    k_partition = delivered[0][2]
    assert delivered == [(None, topic, k_partition, 0, b"k", b"v", None),
                         (None, topic, 2, 1 if k_partition == 2 else 0, b"k", b"w", [("h", b"x")])]
    # a batch as before: the records' metadata, and the callback once per record
    result = producer.produce(topic, [Record(b"a", b"1"), Record(b"b", b"2")], on_delivery=on_delivery)
    assert len(result) == 2 and [d[5] for d in delivered[2:]] == [b"1", b"2"]
    assert len(producer.produce(topic, records=[Record(b"c", b"3")], partition=0)) == 1  # the earlier keyword


def test_mixing_a_batch_with_one_records_arguments_is_refused(store, topic):
    producer = store.producer()
    with pytest.raises(TypeError, match="either a batch"):
        producer.send(topic, [Record(b"a", b"1")], key=b"k")
    with pytest.raises(TypeError, match="at least one of key and value"):
        producer.send(topic)
    with pytest.raises(InvalidConfigError, match="'acks_sometimes' is not a producer config"):
        store.producer(acks_sometimes=1)
    assert store.read(topic, 0) + store.read(topic, 1) + store.read(topic, 2) == []


@dataclass
class Position:  # confluent-kafka's TopicPartition(topic, partition, offset)
    topic: str
    partition: int
    offset: int


def test_confluent_transactional_loop(store, topic):
    """confluent-kafka's read-process-write loop: init_transactions(timeout), produce, send_offsets_to_transaction
    with a list of positions and consumer_group_metadata(), commit_transaction(timeout)."""
    store.producer().send(topic, [Record(b"in", b"1")], partition=0)
    consumer = store.consumer(topic, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                              consumer_timeout_ms=200)
    [record] = list(consumer)
    producer = store.producer({"transactional.id": "app"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"out", b"k", partition=1)
    producer.send_offsets_to_transaction([Position(topic, 0, record.offset + 1)], consumer.consumer_group_metadata(),
                                         10)
    producer.commit_transaction(10)
    assert store.list_consumer_group_offsets("g")[TopicPartition(topic, 0)].offset == 1
    assert [r.value for r in store.read(topic, 1, isolation_level="read_committed")] == [b"out"]
