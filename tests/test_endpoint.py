"""The Kafka endpoint (deltalog.server, `deltalog serve`) against real Kafka clients: kafka-python's producer, consumer
and admin client, confluent-kafka (librdkafka) and kcat, and against hostile bytes on a raw socket.

Quick tests run the endpoint in this process on an ephemeral port (its connection threads); the `subprocess` ones start
`deltalog serve` and kcat as processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, NewTopic
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from deltalog import Record
from deltalog.server import protocol
from deltalog.server.socket_server import SocketServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def endpoint(store):
    with SocketServer(store, "127.0.0.1", 0) as server:
        yield server


def bootstrap(server: SocketServer) -> str:
    return f"127.0.0.1:{server.port}"


def producer(server: SocketServer, **configs) -> KafkaProducer:
    # plain batches (no producer id): what store.append writes; idempotent ones are tested on their own
    return KafkaProducer(bootstrap_servers=bootstrap(server), enable_idempotence=False, **configs)


def consume_all(server: SocketServer, topic: str, partitions: list[int], **configs) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(server), consumer_timeout_ms=1000,
                             auto_offset_reset="earliest", **configs)
    consumer.assign([TopicPartition(topic, p) for p in partitions])
    try:
        return sorted(consumer, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def as_rows(records) -> list[tuple]:
    return [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in records]


# -- kafka-python ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_writes_what_store_append_writes(store, endpoint, codec):
    store.create_topic("wire", 2)
    store.create_topic("api", 2)
    sent = [(p, b"k%d" % i if i % 4 != 1 else None, b"v%d" % i if i % 4 else None, [("h", b"%d" % i)], 1_700_000_000_000 + i)
            for i in range(40) for p in [i % 2]]
    prod = producer(endpoint, compression_type=codec, linger_ms=20)
    futures = [prod.send("wire", key=k, value=v, headers=h, partition=p, timestamp_ms=ts) for p, k, v, h, ts in sent]
    prod.flush()
    metas = [f.get(timeout=10) for f in futures]
    prod.close()
    for p in (0, 1):
        mine = [s for s in sent if s[0] == p]
        store.append("api", p, [Record(key=k, value=v, headers=h, timestamp_ms=ts) for _, k, v, h, ts in mine])
        assert as_rows(store.read("wire", p)) == as_rows(store.read("api", p))
        assert [m.offset for m in metas if m.partition == p] == list(range(len(mine)))
    got = consume_all(endpoint, "wire", [0, 1])
    assert [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (p, r.offset, r.key, r.value, list(r.headers), r.timestamp_ms) for p in (0, 1) for r in store.read("api", p)]


def test_fetch_pages_by_max_partition_fetch_bytes(store, endpoint):
    store.create_topic("big", 1)
    store.append("big", 0, [Record(key=b"k%d" % i, value=b"x" * 1000) for i in range(300)])
    got = consume_all(endpoint, "big", [0], max_partition_fetch_bytes=4096, fetch_max_bytes=8192)
    assert [r.offset for r in got] == list(range(300))


def test_read_committed_leaves_aborted_records_out_and_passes_their_offsets(store, endpoint):
    """Aborted records and transaction markers have offsets but no visible row: the fetch's batch covers them, so the
    consumer's position reaches the last stable offset (as Kafka's consumer passes aborted and control batches)."""
    store.create_topic("txn", 1)
    store.append("txn", 0, [Record(key=b"a", value=b"1")])
    tx = store.producer(transactional_id="endpoint-test")
    tx.init_transactions()
    tx.begin_transaction()
    tx.send("txn", key=b"b", value=b"aborted", partition=0)
    tx.flush()
    tx.abort_transaction()
    store.append("txn", 0, [Record(key=b"c", value=b"3")])
    end = store.log("txn", 0).head().log_end_offset
    for level, values in (("read_committed", [b"1", b"3"]), ("read_uncommitted", [b"1", b"aborted", b"3"])):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap(endpoint), consumer_timeout_ms=1000,
                                 auto_offset_reset="earliest", isolation_level=level)
        tp = TopicPartition("txn", 0)
        consumer.assign([tp])
        assert [r.value for r in consumer] == values
        assert consumer.position(tp) == end
        consumer.close()
    # an aborted transaction last in the log: nothing visible follows it, and an empty batch still moves the
    # read_committed consumer to the end
    tx.begin_transaction()
    tx.send("txn", key=b"d", value=b"aborted too", partition=0)
    tx.flush()
    tx.abort_transaction()
    end = store.log("txn", 0).head().log_end_offset
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(endpoint), consumer_timeout_ms=1000,
                             auto_offset_reset="earliest", isolation_level="read_committed")
    consumer.assign([tp])
    assert [r.value for r in consumer] == [b"1", b"3"]
    assert consumer.position(tp) == end
    consumer.close()
    # an open transaction: read_committed stops at the last stable offset, read_uncommitted reads to the end
    tx.begin_transaction()
    tx.send("txn", key=b"e", value=b"open", partition=0)
    tx.flush()
    stable, end = end, store.log("txn", 0).head().log_end_offset
    for level, last, value in (("read_committed", stable, b"3"), ("read_uncommitted", end, b"open")):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap(endpoint), consumer_timeout_ms=1000,
                                 auto_offset_reset="earliest", isolation_level=level)
        consumer.assign([tp])
        assert consumer.end_offsets([tp]) == {tp: last}  # ListOffsets latest at the consumer's isolation level
        assert [r.value for r in consumer][-1] == value and consumer.position(tp) == last
        consumer.close()
    tx.abort_transaction()


def test_list_offsets_earliest_latest_and_by_timestamp(store, endpoint):
    store.create_topic("times", 1)
    store.append("times", 0, [Record(key=b"k", value=b"v", timestamp_ms=1000 * i) for i in range(1, 6)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(endpoint))
    tp = TopicPartition("times", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 5}
    found = consumer.offsets_for_times({tp: 2500})[tp]
    assert (found.offset, found.timestamp) == (2, 3000)
    assert consumer.offsets_for_times({tp: 9000})[tp] is None
    consumer.close()


def test_admin_client_creates_describes_and_deletes_topics(store, endpoint):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(endpoint))
    admin.create_topics([NewTopic("made", 3, 1, topic_configs={"cleanup.policy": "compact"})])
    assert store.partitions("made") == [0, 1, 2]
    assert store.topic_config("made").cleanup_policy == ("compact",)
    assert "made" in admin.list_topics()
    configs = admin.describe_configs([ConfigResource("TOPIC", "made")])
    assert configs["topic"]["made"]["cleanup.policy"]["value"] == "compact"
    result = admin.create_topics([NewTopic("made", 1, 1)], raise_errors=False)
    assert result["topics"][0]["error_code"] == protocol.TOPIC_ALREADY_EXISTS
    result = admin.create_topics([NewTopic("bad", 1, 1, topic_configs={"cleanup.policy": "squash"})],
                                 raise_errors=False)
    assert result["topics"][0]["error_code"] == protocol.INVALID_CONFIG
    assert not store.topic_exists("bad")
    admin.alter_configs([ConfigResource("TOPIC", "made", configs={"min.cleanable.dirty.ratio": "0.1"})])
    assert store.topic_config("made").min_cleanable_dirty_ratio == 0.1
    result = admin.alter_configs([ConfigResource("TOPIC", "made", configs={"segment.ms": "soon"})])
    assert "[Error 40] InvalidConfigurationError" in result["topic"]["made"] and "segment.ms" in result["topic"]["made"]
    assert store.topic_config("made").segment_ms == 604_800_000  # nothing of a refused change lands
    store.append("made", 0, [Record(key=b"k%d" % i, value=b"v") for i in range(10)])
    deleted = admin.delete_records({TopicPartition("made", 0): 4})
    assert [v["low_watermark"] for v in deleted.values()] == [4]
    assert store.log("made", 0).head().log_start_offset == 4
    assert [r.offset for r in consume_all(endpoint, "made", [0])] == list(range(4, 10))
    with pytest.raises(Exception, match="OffsetOutOfRange"):
        admin.delete_records({TopicPartition("made", 0): 99})
    admin.delete_topics(["made"])
    assert not store.topic_exists("made")
    admin.close()


def test_group_offsets_commit_to_consumer_offsets_and_fetch_back(store, endpoint):
    """kafka-python commits through the coordinator (this broker) into __consumer_offsets, as store.consumer does;
    confluent-kafka reads the same commit back and adds its own; the Python API sees both."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    store.create_topic("g", 2)
    store.append("g", 0, [Record(key=b"k%d" % i, value=b"v") for i in range(5)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(endpoint), group_id="readers", enable_auto_commit=False,
                             consumer_timeout_ms=1000, auto_offset_reset="earliest")
    tp = TopicPartition("g", 0)
    consumer.assign([tp])
    assert len(list(consumer)) == 5
    consumer.commit()
    assert consumer.committed(tp) == 5
    consumer.close()
    rd = Consumer({"bootstrap.servers": bootstrap(endpoint), "group.id": "readers", "enable.auto.commit": False})
    got = rd.committed([CTopicPartition("g", 0), CTopicPartition("g", 1)], timeout=10)
    assert [(t.partition, t.offset) for t in got] == [(0, 5), (1, -1001)]  # -1001: librdkafka's OFFSET_INVALID
    rd.commit(offsets=[CTopicPartition("g", 1, 0)], asynchronous=False)
    rd.close()
    assert {tp.partition: om.offset for tp, om in store.list_consumer_group_offsets("readers").items()} == {0: 5, 1: 0}
    assert store.consumer("g", group_id="readers").committed(tp) == 5


def test_kafka_python_group_member_commits_and_the_next_member_resumes(store, endpoint):
    store.create_topic("events", 3)
    store.produce("events", [Record(key=b"k%d" % i, value=b"first") for i in range(30)])
    first = KafkaConsumer("events", bootstrap_servers=bootstrap(endpoint), group_id="svc", auto_offset_reset="earliest",
                          enable_auto_commit=False, consumer_timeout_ms=2000)
    assert len(list(first)) == 30 and len(first.assignment()) == 3
    first.commit()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(endpoint))
    [member] = admin.describe_groups(["svc"])["svc"]["members"]
    assert member["member_assignment"]["assigned_partitions"] == [{"topic": "events", "partitions": [0, 1, 2]}]
    first.close()  # LeaveGroup
    described = admin.describe_groups(["svc", "nobody"])
    assert (described["svc"]["group_state"], described["svc"]["members"]) == ("Empty", [])
    assert described["nobody"]["group_state"] == "Dead"
    assert {g["group_id"]: g["group_state"] for g in admin.list_groups()} == {"svc": "Empty"}
    admin.close()
    assert sum(om.offset for om in store.list_consumer_group_offsets("svc").values()) == 30
    store.produce("events", [Record(key=b"k%d" % i, value=b"second") for i in range(6)])
    second = KafkaConsumer("events", bootstrap_servers=bootstrap(endpoint), group_id="svc",
                           auto_offset_reset="earliest", consumer_timeout_ms=2000)
    assert sorted(r.value for r in second) == [b"second"] * 6
    second.close()


def test_group_coordinator_rebalances_joins_and_expires_members():
    from deltalog.coordinator.group import group_coordinator as gc

    now = [0.0]
    groups = gc.GroupCoordinator(clock=lambda: now[0])
    a = groups.join("g", "", "a", 6000, 10_000, "consumer", [("range", b"A")])
    assert (a.error_code, a.generation_id, a.leader, a.members) == (0, 1, a.member_id, [(a.member_id, b"A")])
    assert groups.sync("g", a.member_id, 1, {a.member_id: b"all"})[:2] == (0, b"all")
    assert groups.check_commit("g", a.member_id, 1) == 0
    assert groups.check_commit("g", "", -1) == gc.ILLEGAL_GENERATION  # the group has members
    import threading

    joined = {}
    t = threading.Thread(target=lambda: joined.setdefault("b", groups.join("g", "", "b", 6000, 10_000, "consumer",
                                                                           [("range", b"B")])))
    t.start()
    deadline = time.monotonic() + 5
    while groups.heartbeat("g", a.member_id, 1) != gc.REBALANCE_IN_PROGRESS and time.monotonic() < deadline:
        time.sleep(0.01)
    a2 = groups.join("g", a.member_id, "a", 6000, 10_000, "consumer", [("range", b"A")])
    t.join(5)
    b = joined["b"]
    assert (a2.generation_id, b.generation_id, a2.leader, b.leader) == (2, 2, a.member_id, a.member_id)
    assert sorted(a2.members) == sorted([(a.member_id, b"A"), (b.member_id, b"B")]) and b.members == []
    assert groups.check_commit("g", a.member_id, 1) == gc.ILLEGAL_GENERATION
    t = threading.Thread(target=lambda: joined.setdefault("sync", groups.sync("g", b.member_id, 2, {})))
    t.start()
    assert groups.sync("g", a.member_id, 2, {a.member_id: b"p0", b.member_id: b"p1"})[:2] == (0, b"p0")
    t.join(5)
    assert joined["sync"][:2] == (0, b"p1")
    now[0] += 4  # b stays silent past its session timeout (6 s); a heartbeats and finds the group rebalancing
    assert groups.heartbeat("g", a.member_id, 2) == 0
    now[0] += 4  # b last seen 8 s ago, a 4 s ago
    assert groups.heartbeat("g", a.member_id, 2) == gc.REBALANCE_IN_PROGRESS
    assert groups.heartbeat("g", b.member_id, 2) == gc.UNKNOWN_MEMBER_ID
    a3 = groups.join("g", a.member_id, "a", 6000, 10_000, "consumer", [("range", b"A")])
    assert (a3.generation_id, a3.members) == (3, [(a.member_id, b"A")])
    assert groups.leave("g", [a.member_id, "nobody"]) == [0, gc.UNKNOWN_MEMBER_ID]
    assert groups.describe("g").state == gc.EMPTY
    assert groups.check_commit("g", "", -1) == 0


@pytest.mark.slow  # a cleaner pass and the Great Expectations suites: about two minutes on 2 busy cores
def test_after_a_cleaner_pass_clients_read_the_compacted_topic(spark_store):
    """Records produced by a Kafka client are cleaned like any others: after a pass the endpoint serves the offsets
    that survive (the latest per key, the tombstone until its horizon), exactly what store.read returns, and the
    compaction checks pass on the cleaned topic."""
    store = spark_store
    store.create_topic("prices", 1, config={"cleanup.policy": "compact"})
    with SocketServer(store, "127.0.0.1", 0) as server:
        prod = producer(server)
        for key, value in [(b"grape", b"2.69"), (b"lime", b"0.49"), (b"grape", None), (b"lime", b"1.59")]:
            prod.send("prices", key=key, value=value, partition=0).get(timeout=10)
        store.roll("prices", 0)
        prod.send("prices", key=b"lime", value=b"1.99", partition=0).get(timeout=10)
        prod.close()
        [result] = store.clean("prices")
        assert (result.records_read, result.records_written) == (4, 2)
        got = consume_all(server, "prices", [0])
    assert [(r.offset, r.key, r.value) for r in got] == [(2, b"grape", None), (3, b"lime", b"1.59"),
                                                         (4, b"lime", b"1.99")]
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in store.read("prices", 0)]
    assert store.check("prices").success


# -- confluent-kafka (librdkafka) -------------------------------------------------------------------------

def test_confluent_kafka_produces_and_consumes(store, endpoint):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    store.create_topic("rd", 3)
    prod = Producer({"bootstrap.servers": bootstrap(endpoint), "compression.type": "zstd", "linger.ms": 5})
    delivered = []
    for i in range(30):
        prod.produce("rd", key=b"key-%d" % i, value=b"value-%d" % i, headers=[("n", str(i).encode())],
                     on_delivery=lambda err, msg: delivered.append((err, msg.partition(), msg.offset())))
    assert prod.flush(10) == 0
    assert all(err is None for err, _, _ in delivered) and len(delivered) == 30
    # librdkafka's default partitioner for keyed records is consistent_random (CRC32), not murmur2; partitions differ
    # from the Java client's, offsets are dense per partition
    for p in range(3):
        assert sorted(o for _, q, o in delivered if q == p) == list(range(len(store.read("rd", p))))
    cons = Consumer({"bootstrap.servers": bootstrap(endpoint), "group.id": "unused-no-commit",
                     "enable.auto.commit": False, "enable.auto.offset.store": False})
    cons.assign([CTopicPartition("rd", p, 0) for p in range(3)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 30 and time.monotonic() < deadline:
        msg = cons.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))
    cons.close()
    expected = [(p, r.offset, r.key, r.value, list(r.headers)) for p in range(3) for r in store.read("rd", p)]
    assert sorted(got) == sorted(expected)


def test_confluent_kafka_group_member_commits_and_the_next_member_resumes(store, endpoint):
    from confluent_kafka import Consumer

    store.create_topic("cresume", 2)
    store.produce("cresume", [Record(key=b"k%d" % i, value=b"first") for i in range(10)])
    conf = {"bootstrap.servers": bootstrap(endpoint), "group.id": "cgroup", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}

    def drain(consumer: Consumer, n: int) -> list:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got.extend(m for m in consumer.consume(100, 0.5) if m.error() is None)
        return got

    first = Consumer(conf)
    first.subscribe(["cresume"])
    assert len(drain(first, 10)) == 10
    first.commit(asynchronous=False)
    first.close()  # LeaveGroup
    assert sum(om.offset for om in store.list_consumer_group_offsets("cgroup").values()) == 10
    store.produce("cresume", [Record(key=b"k%d" % i, value=b"second") for i in range(4)])
    second = Consumer(conf)
    second.subscribe(["cresume"])
    got = drain(second, 4)
    time.sleep(0.5)
    got += [m for m in second.consume(100, 0.5) if m.error() is None]
    second.close()
    assert sorted(m.value() for m in got) == [b"second"] * 4


def test_confluent_kafka_group_of_two_rebalances_when_one_leaves(store, endpoint):
    from confluent_kafka import Consumer

    store.create_topic("shared", 4)
    store.produce("shared", [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(40)])
    conf = {"bootstrap.servers": bootstrap(endpoint), "group.id": "pair", "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    one, two = Consumer(conf), Consumer(conf)
    one.subscribe(["shared"])
    two.subscribe(["shared"])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (one.assignment() and two.assignment() and len(seen) == 40):
        for c in (one, two):
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.append((msg.partition(), msg.offset()))
    mine = {p.partition for p in one.assignment()}
    theirs = {p.partition for p in two.assignment()}
    assert mine and theirs and not mine & theirs and mine | theirs == {0, 1, 2, 3}
    assert sorted(seen) == sorted((p, o) for p in range(4) for o in range(len(store.read("shared", p))))
    one.close()  # LeaveGroup: the other member takes every partition
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(two.assignment()) < 4:
        two.poll(0.1)
    assert {p.partition for p in two.assignment()} == {0, 1, 2, 3}
    two.close()


# -- errors ------------------------------------------------------------------------------------------------

def produce_request(topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9) -> ProduceRequest:
    cls = ProduceRequest[version]
    return cls(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.TopicProduceData.PartitionProduceData(index=partition, records=records)])])


def batch(*records: tuple[bytes | None, bytes | None], producer: tuple[int, int, int] | None = None) -> bytes:
    pid, epoch, seq = producer or (-1, -1, -1)
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq)
    for key, value in records:
        builder.append(timestamp=1234, key=key, value=value, headers=[])
    builder.close()
    return bytes(builder.buffer())


def send(sock: socket.socket, request, correlation_id: int = 1) -> None:
    request.with_header(correlation_id=correlation_id, client_id="raw")
    sock.sendall(bytes(request.encode(header=True, framed=True)))


def receive(sock: socket.socket, cls, version: int):
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return cls.decode(data, version=version, header=True)


def connect(server: SocketServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return sock


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def produce_raw(server: SocketServer, topic: str, records: bytes) -> tuple[int, str | None]:
    with connect(server) as sock:
        send(sock, produce_request(topic, 0, records))
        resp = receive(sock, ProduceResponse, 9)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.error_message


def test_keyless_record_on_a_compacted_topic_is_invalid_record_and_nothing_is_written(store, endpoint):
    store.create_topic("compacted", 1, config={"cleanup.policy": "compact"})
    code, message = produce_raw(endpoint, "compacted", batch((b"k", b"v"), (None, b"keyless")))
    assert code == protocol.INVALID_RECORD and "key" in message
    assert store.log("compacted", 0).head().log_end_offset == 0
    assert produce_raw(endpoint, "compacted", batch((b"k", b"v")))[0] == protocol.NONE
    assert produce_raw(endpoint, "nowhere", batch((b"k", b"v")))[0] == protocol.UNKNOWN_TOPIC_OR_PARTITION


def test_max_message_bytes_is_checked_per_batch_as_kafkas_log_validator(store, endpoint):
    """Each record fits max.message.bytes, the batch does not: MESSAGE_TOO_LARGE, nothing written (Kafka checks a
    batch's size against the topic's max.message.bytes)."""
    store.create_topic("small", 1, config={"max.message.bytes": "2000"})
    records = [(b"k%d" % i, b"v" * 100) for i in range(40)]  # ~4.7 KB in one batch, each record ~110 bytes
    code, message = produce_raw(endpoint, "small", batch(*records))
    assert code == protocol.MESSAGE_TOO_LARGE and "max.message.bytes=2000" in message
    assert store.log("small", 0).head().log_end_offset == 0
    assert produce_raw(endpoint, "small", batch(*records[:10]))[0] == protocol.NONE


def test_idempotent_producers_get_ids_and_a_retried_batch_lands_once(store, endpoint):
    from confluent_kafka import Producer
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

    store.create_topic("idem", 1)
    with connect(endpoint) as sock:
        send(sock, InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                            producer_epoch=-1))
        init = receive(sock, InitProducerIdResponse, 4)
    assert init.error_code == 0 and init.producer_id >= 0 and init.producer_epoch == 0
    pid = init.producer_id
    first = batch((b"a", b"1"), (b"b", b"2"), producer=(pid, 0, 0))
    assert produce_raw(endpoint, "idem", first)[0] == protocol.NONE
    assert produce_raw(endpoint, "idem", first)[0] == protocol.NONE  # the retry: acknowledged, not written again
    assert [r.value for r in store.read("idem", 0)] == [b"1", b"2"]
    gap = batch((b"c", b"3"), producer=(pid, 0, 5))  # sequence 5 where 2 is next
    assert produce_raw(endpoint, "idem", gap)[0] == protocol.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce_raw(endpoint, "idem", batch((b"c", b"3"), producer=(pid, 0, 2)))[0] == protocol.NONE
    assert [r.offset for r in store.read("idem", 0)] == [0, 1, 2]
    # librdkafka's idempotent producer, and kafka-python's default (enable_idempotence=True), end to end
    rd = Producer({"bootstrap.servers": bootstrap(endpoint), "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for i in range(20):
        rd.produce("idem", key=b"k%d" % i, value=b"rd", on_delivery=lambda err, msg: errors.append(err))
    assert rd.flush(10) == 0 and errors == [None] * 20
    kp = KafkaProducer(bootstrap_servers=bootstrap(endpoint))
    assert kp.send("idem", key=b"k", value=b"kp").get(timeout=10).offset == 23
    kp.close()
    assert len(store.read("idem", 0)) == 24


def test_a_wrong_crc_is_corrupt_message_and_nothing_is_written(store, endpoint):
    store.create_topic("crc", 1)
    data = bytearray(batch((b"k", b"v")))
    data[-1] ^= 0xFF  # the last byte of the last record: covered by the batch's CRC-32C
    assert produce_raw(endpoint, "crc", bytes(data))[0] == protocol.CORRUPT_MESSAGE
    assert produce_raw(endpoint, "crc", batch((b"k", b"v"))[:-3])[0] == protocol.CORRUPT_MESSAGE
    assert store.log("crc", 0).head().log_end_offset == 0


def test_api_versions_negotiates_and_unsupported_versions_get_unsupported_version(endpoint):
    with connect(endpoint) as sock:
        send(sock, ApiVersionsRequest[3](client_software_name="raw", client_software_version="1"))
        resp = receive(sock, ApiVersionsResponse, 3)
        assert resp.error_code == 0
        served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert served == {a.key: (a.min_version, a.max_version) for a in protocol.SERVED.values()}
        assert set(served) == {int(c.API_KEY) for c in endpoint.apis.handlers}  # every advertised API has its handler, and only those
        send(sock, ApiVersionsRequest[4](client_software_name="raw", client_software_version="1"), 2)
        resp = receive(sock, ApiVersionsResponse, 0)  # answered at v0, as Kafka's broker does
        assert resp.error_code == protocol.UNSUPPORTED_VERSION and resp.api_keys
        send(sock, MetadataRequest[12](topics=None), 3)  # the connection still serves
        assert receive(sock, MetadataResponse, 12).brokers[0].node_id == 0
    with connect(endpoint) as sock:  # an API key not served (DescribeTransactions here): the connection is closed
        sock.sendall(struct.pack(">ihhih", 10, 65, 0, 4, -1))
        assert closed(sock)


def test_oversized_truncated_and_undecodable_frames_close_only_their_connection(store):
    store.create_topic("t", 1)
    with SocketServer(store, "127.0.0.1", 0, max_request_bytes=4096) as server:
        with connect(server) as other:
            with connect(server) as sock:  # a frame announcing more than socket.request.max.bytes
                sock.sendall(struct.pack(">i", 5000) + b"x" * 100)
                assert closed(sock)
            with connect(server) as sock:  # a produce cut short by a disconnect: nothing is written
                request = produce_request("t", 0, batch((b"k", b"v")))
                request.with_header(correlation_id=1, client_id="raw")
                frame = bytes(request.encode(header=True, framed=True))
                sock.sendall(frame[:-5])
            with connect(server) as sock:  # a whole frame whose body is cut: not decoded, nothing written
                body = frame[4:-20]
                sock.sendall(struct.pack(">i", len(body)) + body)
                assert closed(sock)
            time.sleep(0.2)
            assert store.log("t", 0).head().log_end_offset == 0
            send(other, MetadataRequest[12](topics=None))
            assert [t.name for t in receive(other, MetadataResponse, 12).topics] == ["t"]


def test_acks_zero_gets_no_response_and_bad_acks_are_refused(store, endpoint):
    store.create_topic("acks", 1)
    with connect(endpoint) as sock:
        send(sock, produce_request("acks", 0, batch((b"k", b"v")), acks=0), 1)
        send(sock, produce_request("acks", 0, batch((b"k", b"w")), acks=2), 2)
        resp = receive(sock, ProduceResponse, 9)  # the first answer is the second request's
        assert resp.header.correlation_id == 2
        assert resp.responses[0].partition_responses[0].error_code == protocol.INVALID_REQUIRED_ACKS
    assert [r.value for r in store.read("acks", 0)] == [b"v"]


# -- deltalog serve, kcat ---------------------------------------------------------------------------------

def kcat() -> str:
    path = shutil.which("kcat")
    assert path, "kcat is missing: the project installs it (tooling/services.py ensure_kcat, .ci/run); apt-get install kcat"
    return path


@pytest.mark.subprocess
def test_deltalog_serve_with_kcat(tmp_path):
    from tooling.services import ensure_kcat, free_port

    ensure_kcat()
    store = tmp_path / "store"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-m", "deltalog", "topics", "create", "changes", "--partitions", "2",
                    "--config", "cleanup.policy=compact", "--store", str(store)], check=True, env=env,
                   capture_output=True)
    server = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--store", str(store),
                               "--listen", f"127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        health = server.stdout.readline()
        assert f"listening on 127.0.0.1:{port}" in health and "loopback only" in health
        broker = f"127.0.0.1:{port}"
        listing = subprocess.run([kcat(), "-b", broker, "-L", "-t", "changes"], capture_output=True, text=True,
                                 timeout=30, check=True).stdout
        assert "broker 0 at" in listing and 'topic "changes" with 2 partitions' in listing
        lines = "user1:alice\nuser2:bob\nuser1:alice2\n"
        subprocess.run([kcat(), "-b", broker, "-P", "-t", "changes", "-K:", "-p", "0", "-z", "lz4"], input=lines,
                       text=True, timeout=30, check=True)
        out = subprocess.run([kcat(), "-b", broker, "-C", "-t", "changes", "-p", "0", "-o", "beginning", "-e",
                              "-f", "%k=%s@%o\n"], capture_output=True, text=True, timeout=30, check=True).stdout
        assert out.splitlines() == ["user1=alice@0", "user2=bob@1", "user1=alice2@2"]
        group = [kcat(), "-b", broker, "-G", "kgroup", "-X", "auto.offset.reset=earliest", "-e", "-f",
                 "%k=%s@%p:%o\n", "-X", "session.timeout.ms=6000", "changes"]  # balanced: commits when it closes
        first = subprocess.run(group, capture_output=True, text=True, timeout=60, check=True).stdout
        assert sorted(first.splitlines()) == ["user1=alice2@0:2", "user1=alice@0:0", "user2=bob@0:1"]
        subprocess.run([kcat(), "-b", broker, "-P", "-t", "changes", "-K:", "-p", "0"], input="user3:carol\n",
                       text=True, timeout=30, check=True)
        again = subprocess.run(group, capture_output=True, text=True, timeout=60, check=True).stdout
        assert again.splitlines() == ["user3=carol@0:3"]  # the group resumed where its commit left it
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    from deltalog import Store

    assert [(r.key, r.value) for r in Store(store).read("changes", 0)] == [
        (b"user1", b"alice"), (b"user2", b"bob"), (b"user1", b"alice2"), (b"user3", b"carol")]
    assert {tp.partition: om.offset for tp, om in Store(store).list_consumer_group_offsets("kgroup").items()}[0] == 4


@pytest.mark.subprocess
def test_deltalog_serve_json_health_line_and_sigterm(tmp_path):
    import json

    server = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--store", str(tmp_path / "s"),
                               "--listen", "127.0.0.1:0", "--output", "json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        health = json.loads(server.stdout.readline())
        host, port = health["listening"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0 and "Produce" in health["apis"] and health["node_id"] == 0
        socket.create_connection((host, int(port)), timeout=5).close()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.subprocess
def test_deltalog_serve_refuses_a_non_loopback_address(tmp_path):
    done = subprocess.run([sys.executable, "-m", "deltalog", "serve", "--store", str(tmp_path / "s"),
                           "--listen", "0.0.0.0:9092"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and "loopback" in done.stderr


def test_a_store_is_what_the_endpoint_needs_of_one(store):
    """deltalog.server.served_store.ServedStore lists what the server uses of the Store facade: every member is
    there, a method with the parameters the protocol names."""
    import inspect

    from deltalog.server.served_store import ServedStore
    attributes = set(inspect.get_annotations(ServedStore))
    methods = {n for n, v in vars(ServedStore).items() if callable(v) and not n.startswith("_")}
    assert {"storage", "clock", "log_manager", "root"} <= attributes and {"log", "create_topic"} <= methods
    for name in attributes | {"offsets_topic"}:
        assert getattr(store, name) is not None, name
    for name in methods:
        wanted = list(inspect.signature(getattr(ServedStore, name)).parameters)[1:]
        have = inspect.signature(getattr(store, name)).parameters
        assert all(p in have for p in wanted), (name, wanted, list(have))


def test_metadata_creates_a_topic_a_client_asks_for_unless_auto_create_is_off(store):
    from kafka.admin import ConfigResourceType

    from deltalog.server.broker_config import BrokerConfig

    with SocketServer(store, "127.0.0.1", 0, config=BrokerConfig.from_properties({"num.partitions": "3"})) as server:
        prod = producer(server)
        prod.send("made-on-demand", key=b"k", value=b"v").get(timeout=10)
        prod.close()
        assert store.partitions("made-on-demand") == [0, 1, 2]
        admin = KafkaAdminClient(bootstrap_servers=bootstrap(server))
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(server.node_id))],
                                           config_filter="all")
        configs = described["broker"][str(server.node_id)]
        assert configs["num.partitions"]["value"] == "3" and configs["socket.listen.backlog.size"]["value"] == "50"
        admin.close()
    off = BrokerConfig.from_properties({"auto.create.topics.enable": "false"})
    with SocketServer(store, "127.0.0.1", 0, config=off) as server:
        prod = producer(server, max_block_ms=2000)
        with pytest.raises(Exception, match="(?i)topic|metadata|timeout"):
            prod.send("never-made", key=b"k", value=b"v").get(timeout=5)
        prod.close(timeout=1)
    assert not store.topic_exists("never-made")
