"""Kafka's message.timestamp.type and its bounds (LogConfig, LogValidator.validateTimestamp): CreateTime keeps the
producer's timestamp when it lies within [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]
of the appending writer's clock and refuses the batch otherwise; LogAppendTime stamps every record with that clock."""

from __future__ import annotations

import time

import confluent_kafka
import kafka.errors
import pytest
from kafka import KafkaProducer

from deltalog import Record
from deltalog.errors import InvalidConfigError, InvalidRecordError, InvalidTimestampError
from deltalog.server.socket_server import SocketServer
from deltalog.structs import TopicPartition
from tests.conftest import run_cli

HOUR_MS = 3_600_000


def _stamps(store, topic="t"):
    return [r.timestamp_ms for r in store.read(topic, 0, "earliest")]


def test_create_time_keeps_the_producers_timestamp_and_log_append_time_replaces_it(store, clock):
    now = clock.now_ms()
    store.create_topic("c", 1)
    store.create_topic("l", 1, config={"message.timestamp.type": "LogAppendTime"})
    for t in ("c", "l"):
        store.append(t, 0, [Record(b"k", b"v", timestamp_ms=HOUR_MS), Record(b"k", b"w")])
    assert _stamps(store, "c") == [HOUR_MS, now]
    assert _stamps(store, "l") == [now, now]
    assert store.topic_config("l").message_timestamp_type == "LogAppendTime"
    assert store.producer().send("l", b"x", key=b"k", timestamp_ms=HOUR_MS).get().timestamp == now


def test_a_timestamp_outside_before_and_after_max_ms_refuses_the_batch(store, clock):
    now = clock.now_ms()
    store.create_topic("t", 1, config={"message.timestamp.before.max.ms": HOUR_MS,
                                       "message.timestamp.after.max.ms": 60_000})
    store.append("t", 0, [Record(b"k", b"v", timestamp_ms=now - HOUR_MS),
                          Record(b"k", b"w", timestamp_ms=now + 60_000)])
    with pytest.raises(InvalidTimestampError, match=rf"record 1: timestamp_ms {now + 60_001} is out of range.*"
                                                    r"message.timestamp.after.max.ms=60000") as e:
        store.append("t", 0, [Record(b"k", b"x"), Record(b"k", b"y", timestamp_ms=now + 60_001)])
    assert e.value.index == 1 and e.value.errno == 32 and isinstance(e.value, InvalidRecordError)  # INVALID_TIMESTAMP
    with pytest.raises(InvalidTimestampError, match="before.max.ms=3600000"):
        store.append("t", 0, [Record(b"k", b"z", timestamp_ms=now - HOUR_MS - 1)])
    assert _stamps(store) == [now - HOUR_MS, now + 60_000]  # nothing of a refused batch was written


def test_the_deprecated_difference_max_ms_bounds_both_sides_unless_they_are_set(store, clock):
    now = clock.now_ms()
    store.create_topic("t", 1, config={"message.timestamp.difference.max.ms": 1_000,
                                       "message.timestamp.after.max.ms": HOUR_MS})
    store.append("t", 0, [Record(b"k", b"v", timestamp_ms=now + HOUR_MS)])
    with pytest.raises(InvalidTimestampError, match="message.timestamp.before.max.ms=1000"):
        store.append("t", 0, [Record(b"k", b"v", timestamp_ms=now - 1_001)])


def test_log_append_time_ignores_the_bounds_and_a_bad_type_is_refused(store, clock):
    now = clock.now_ms()
    store.create_topic("t", 1, config={"message.timestamp.type": "LogAppendTime",
                                       "message.timestamp.after.max.ms": 0})
    store.append("t", 0, [Record(b"k", b"v", timestamp_ms=now + 10 * HOUR_MS)])
    assert _stamps(store) == [now]
    with pytest.raises(InvalidConfigError, match="message.timestamp.type.*CreateTime, LogAppendTime"):
        store.create_topic("u", 1, config={"message.timestamp.type": "BrokerTime"})


def test_a_kafka_producer_sees_the_log_append_time_and_invalid_timestamp(store, clock):
    now = clock.now_ms()
    store.create_topic("l", 1, config={"message.timestamp.type": "LogAppendTime"})
    store.create_topic("b", 1, config={"message.timestamp.after.max.ms": 60_000})
    with SocketServer(store, "127.0.0.1", 0) as server:
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{server.port}", enable_idempotence=False, retries=0)
        assert producer.send("l", b"v", key=b"k", timestamp_ms=1_000).get(30).timestamp == now  # not the producer's
        assert producer.send("b", b"v", key=b"k", timestamp_ms=now + 60_000).get(30).timestamp == now + 60_000
        with pytest.raises(kafka.errors.InvalidTimestampError):
            producer.send("b", b"v", key=b"k", timestamp_ms=now + 60_001).get(30)
        producer.close()
    assert _stamps(store, "l") == [now] and _stamps(store, "b") == [now + 60_000]


def test_consumers_report_the_topics_timestamp_type(store, clock):
    now = clock.now_ms()
    for topic, kind in (("c", "CreateTime"), ("l", "LogAppendTime")):
        store.create_topic(topic, 1, config={"message.timestamp.type": kind})
        store.append(topic, 0, [Record(b"k", b"v", timestamp_ms=HOUR_MS)])
    got = {}
    for topic in ("c", "l"):
        (record,) = store.consumer(topic, auto_offset_reset="earliest").poll(0)[TopicPartition(topic, 0)]
        message = store.consumer({"group.id": "g" + topic, "auto.offset.reset": "earliest"})
        message.subscribe([topic])
        got[topic] = (record.timestamp_type, record.timestamp, message.consume(1, 5)[0].timestamp())
    assert got == {"c": (0, HOUR_MS, (confluent_kafka.TIMESTAMP_CREATE_TIME, HOUR_MS)),
                   "l": (1, now, (confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, now))}


def test_deltalog_produce_checks_the_bounds_on_the_wall_clock(tmp_path, capsys, monkeypatch):
    """The CLI checks a batch before producing it; that check once ran at time 0, so any bound refused every line."""
    root = str(tmp_path / "store")
    assert run_cli(capsys, "--store", root, "topics", "create", "b", "--config",
                   "message.timestamp.after.max.ms=60000")[0] == 0
    lines = f'{{"key": "k", "value": "v"}}\n{{"key": "k", "value": "w", "timestamp_ms": {int(time.time() * 1000)}}}\n'
    code, out, _ = run_cli(capsys, "--store", root, "produce", "b", "--input", "json", stdin=lines,
                           monkeypatch=monkeypatch)
    assert code == 0 and "2 record(s)" in out
    code, _, err = run_cli(capsys, "--store", root, "produce", "b", "--input", "json", monkeypatch=monkeypatch,
                           stdin='{"key": "k", "value": "v", "timestamp_ms": 99999999999999}\n')
    assert code == 1 and "stdin line 1: timestamp_ms 99999999999999 is out of range" in err
