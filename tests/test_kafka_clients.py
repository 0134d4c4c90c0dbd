"""Kafka's Python clients' habits: the producer and the consumer treat Kafka's client settings alike (network and
buffering settings accepted and ignored by both, unknown ones refused by both with the list), kafka-python's
serializers on the producer, and confluent-kafka's consumer shape from ``store.consumer(conf)``: code written for
``confluent_kafka.Consumer`` runs after changing only its construction."""

from __future__ import annotations

import json

import confluent_kafka
import pytest

from deltalog.errors import DeltalogError, InvalidArgumentError, InvalidConfigError
from deltalog.groups.confluent_consumer import ConfluentConsumer, Message
from deltalog.ignored_configs import CONSUMER_IGNORED, NETWORK, PRODUCER_IGNORED
from deltalog.structs import TopicPartition

NETWORK_CONF = {"bootstrap.servers": "broker-1:9092,broker-2:9092", "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p", "request.timeout.ms": 30_000,
                "client.dns.lookup": "use_all_dns_ips", "reconnect_backoff_ms": 50}


def test_network_settings_are_accepted_and_ignored_by_producer_and_consumer_alike(store):
    store.create_topic("t", 1)
    p = store.producer(NETWORK_CONF, linger_ms=5, batch_size=16384, **{"compression.type": "lz4"})
    assert p.send("t", value=b"v", key=b"k").get().offset == 0
    c = store.consumer("t", auto_offset_reset="earliest", session_timeout_ms=10_000, fetch_max_bytes=1 << 20,
                       heartbeat_interval_ms=3_000, max_partition_fetch_bytes=1 << 20, **NETWORK_CONF)
    assert [r.value for r in c.poll(0)[TopicPartition("t", 0)]] == [b"v"]
    assert {"bootstrap_servers", "security_protocol", "request_timeout_ms"} <= NETWORK
    assert NETWORK <= PRODUCER_IGNORED and NETWORK <= CONSUMER_IGNORED


@pytest.mark.parametrize("name", ["bootstrap_server", "enable.partition.eof", "partitioner", "linger.msec"])
def test_unknown_settings_are_refused_by_both_with_the_list(store, name):
    store.create_topic("t", 1)
    with pytest.raises(InvalidConfigError, match=rf"'{name}' is not a producer config deltalog knows; known: acks, "
                                                 r"client_id, .*accepted and ignored"):
        store.producer({name: 1})
    with pytest.raises(InvalidConfigError, match=rf"'{name}' is not a consumer config deltalog knows; known: "
                                                 r"auto_commit_interval_ms, .*accepted and ignored"):
        store.consumer(**{name: 1})


def test_kafka_python_serializers_on_the_producer(store):
    store.create_topic("t", 1)

    class KeySerializer:  # kafka-python's Serializer: serialize(topic, value)
        def serialize(self, topic, key):
            return None if key is None else f"{topic}/{key}".encode()

    p = store.producer(value_serializer=lambda v: json.dumps(v).encode(), key_serializer=KeySerializer())
    p.send("t", {"price": 2.5}, key="grape").get()
    p.send("t", value=[1, 2], key=None).get()
    c = store.consumer("t", auto_offset_reset="earliest", value_deserializer=json.loads)
    got = [(r.key, r.value) for r in c.poll(0)[TopicPartition("t", 0)]]
    assert got == [(b"t/grape", {"price": 2.5}), (None, [1, 2])]
    with pytest.raises(InvalidConfigError, match="value_serializer must be a callable"):
        store.producer(value_serializer="json")


def process(consumer, topic: str, want: int) -> list[tuple[int, bytes, bytes, int]]:
    """A loop written for confluent-kafka's Consumer: subscribe, poll one message at a time, skip errors, commit
    each message synchronously, then consume a batch from a seek, and look up offsets by time."""
    seen, assigned = [], []
    consumer.subscribe([topic], on_assign=lambda c, partitions: assigned.extend(partitions))
    while len(seen) < want:
        msg = consumer.poll(timeout=1.0)
        if msg is None:
            continue
        if msg.error():
            raise confluent_kafka.KafkaException(msg.error())
        seen.append((msg.partition(), msg.key(), msg.value(), msg.offset()))
        assert msg.topic() == topic and msg.timestamp()[0] == confluent_kafka.TIMESTAMP_CREATE_TIME
        done = consumer.commit(message=msg, asynchronous=False)
        assert [(tp.topic, tp.partition, tp.offset) for tp in done] == [(topic, msg.partition(), msg.offset() + 1)]
    assert consumer.poll(0.05) is None
    assert [(tp.topic, tp.partition) for tp in assigned] == [(topic, 0)]
    committed = consumer.committed([confluent_kafka.TopicPartition(topic, 0)])
    assert committed[0].offset == want
    low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0))
    consumer.seek(confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING))
    batch = consumer.consume(num_messages=100, timeout=0.5)
    assert [m.offset() for m in batch] == list(range(low, high))
    by_time = consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, 0, 2_000),
                                          confluent_kafka.TopicPartition(topic, 0, 10**13)])
    seen.append(tuple(tp.offset for tp in by_time))
    consumer.close()
    return seen


def test_code_for_confluent_kafkas_consumer_runs_after_changing_only_its_construction(store):
    store.create_topic("orders", 1)
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        store.append("orders", 0, [confluent_record(i, ts)])
    conf = {"bootstrap.servers": "localhost:9092", "group.id": "billing", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    confluent_kafka.Consumer(conf).close()  # the same configuration is a valid confluent-kafka one
    consumer = store.consumer(conf)
    assert isinstance(consumer, ConfluentConsumer)
    assert process(consumer, "orders", 3) == [(0, b"k0", b"v0", 0), (0, b"k1", b"v1", 1), (0, b"k2", b"v2", 2),
                                              (1, -1)]
    # every call the loop made is a confluent-kafka Consumer method of the same name
    for name in ("subscribe", "poll", "consume", "commit", "committed", "seek", "get_watermark_offsets",
                 "offsets_for_times", "close", "assign", "assignment", "position", "pause", "resume", "unassign",
                 "store_offsets", "consumer_group_metadata", "incremental_assign", "incremental_unassign", "memberid"):
        assert hasattr(confluent_kafka.Consumer, name) and callable(getattr(consumer, name))
    # the group's commits are the ones a kafka-python consumer and the CLI see
    assert store.list_consumer_group_offsets("billing")[TopicPartition("orders", 0)].offset == 3


def confluent_record(i: int, ts: int):
    from deltalog import Record

    return Record(key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=ts)


def test_confluent_assign_with_logical_offsets_and_auto_commit(store):
    store.create_topic("t", 2)
    for p in (0, 1):
        store.append("t", p, [confluent_record(i, 1000 + i) for i in range(3)])
    c = store.consumer({"group.id": "g", "auto.offset.reset": "smallest", "auto.commit.interval.ms": 0})
    c.assign([confluent_kafka.TopicPartition("t", 0, 1), confluent_kafka.TopicPartition("t", 1,
                                                                                       confluent_kafka.OFFSET_END)])
    assert sorted((tp.topic, tp.partition) for tp in c.assignment()) == [("t", 0), ("t", 1)]
    got = c.consume(10, timeout=0.2)
    assert all(isinstance(m, Message) for m in got) and [(m.partition(), m.offset()) for m in got] == [(0, 1), (0, 2)]
    assert got[0].headers() is None and len(got[0]) == 2
    assert [tp.offset for tp in c.position([confluent_kafka.TopicPartition("t", 0),
                                            confluent_kafka.TopicPartition("t", 1)])] == [3, 3]
    assert c.commit() is None  # asynchronous by default: None, and committed already
    assert [tp.offset for tp in c.committed([confluent_kafka.TopicPartition("t", 0)])] == [3]
    c.close()
    with pytest.raises(DeltalogError, match="closed"):
        c.poll(0)


@pytest.mark.parametrize(("conf", "message"), [
    ({"bootstrap.servers": "x"}, "needs a 'group.id'"),
    ({"group.id": "g", "auto.offset.reset": "sometimes"}, "Invalid value 'sometimes' for configuration "
                                                           "auto.offset.reset"),
    ({"group.id": "g", "enable.auto.offset.store": False}, "enable.auto.offset.store=false is not supported"),
    ({"group.id": "g", "enable.partition.eof": True}, "'enable.partition.eof' is not a consumer config"),
])
def test_confluent_configurations_deltalog_cannot_honour_are_refused(store, conf, message):
    with pytest.raises(InvalidConfigError, match=message):
        store.consumer(conf)


def test_confluent_calls_with_bad_arguments(store):
    store.create_topic("t", 1)
    c = store.consumer({"group.id": "g"})
    with pytest.raises(InvalidArgumentError, match="num_messages must be between 1 and 1000000"):
        c.consume(0)
    with pytest.raises(InvalidArgumentError, match="assign\\(\\) takes a list of TopicPartition"):
        c.assign(confluent_kafka.TopicPartition("t", 0))
    with pytest.raises(AttributeError, match="implements subscribe"):
        c.list_groups()
