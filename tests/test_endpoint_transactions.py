"""Kafka transactions over the wire (deltalog serve, deltalog.server.txn_apis) against real clients: kafka-python's and
confluent-kafka's transactional producers and consumers at both isolation levels, consume-transform-produce with
send_offsets_to_transaction, fencing by a second producer with the same transactional.id, Kafka's error codes on a raw
socket, and the Python API reading (and fencing) what the wire wrote.

The two quick tests run the endpoint in this process; the `subprocess` ones start `deltalog serve` as a process, as
a user runs it, and read the store from this one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.record.memory_records import MemoryRecordsBuilder

from deltalog import Record, Store
from deltalog.coordinator.group.offsets_topic import OFFSETS_TOPIC
from deltalog.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from deltalog.log.producer_state import ProducerStateEntry
from deltalog.server import protocol
from deltalog.server.socket_server import SocketServer
from tests.test_endpoint import bootstrap, connect, receive, send
from tooling.services import stop_process

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def endpoint(store):
    with SocketServer(store, "127.0.0.1", 0) as server:
        yield server


def txn_state(store: Store, transactional_id: str):
    return TransactionCoordinator(store.log_manager).describe(transactional_id)


def commits(store: Store, topic: str, partition: int) -> list[tuple]:
    """The partition's Delta commits after its creation, oldest first: what each did, without times."""
    entries = [e for e in store.history(topic) if e.partition == partition and e.kind != "create"]
    return [(e.kind, e.parameters.get("records"), e.parameters.get("offset"), e.parameters.get("control"))
            for e in sorted(entries, key=lambda e: e.version)]


def rows(store: Store, topic: str, partition: int) -> list[tuple]:
    t = store.log(topic, partition).read_table(0)
    return [(r["offset"], r["key"], r["value"], r["producer_epoch"], r["producer_id"] is not None)
            for r in t.select(["offset", "key", "value", "producer_id", "producer_epoch"]).to_pylist()]


def producer_state(store: Store, topic: str, partition: int, producer_id: int) -> tuple:
    entry = ProducerStateEntry.read(store.log(topic, partition).table().transaction_version, producer_id)
    return entry.producer_epoch, entry.base_sequence, entry.next_sequence, entry.base_offset


# -- quick: in this process ----------------------------------------------------------------------------------

def test_kafka_python_transactions_write_what_the_python_api_writes(store, endpoint):
    """The same transactions, one over the wire with kafka-python and one with store.producer: the same Delta commits
    (appends, COMMIT/ABORT markers at the same offsets), rows (producer id and epoch on each), producer state and
    coordinator state; kafka-python's consumers see what Kafka's would at each isolation level."""
    store.create_topic("wire", 2)
    store.create_topic("api", 2)
    transactions = [(True, [(0, b"k0", b"c0"), (1, b"k1", b"c1"), (0, b"k2", b"c2")]),
                    (False, [(0, b"a0", b"x0"), (1, b"a1", b"x1")]),
                    (True, [(1, b"k3", b"c3")])]
    wire = KafkaProducer(bootstrap_servers=bootstrap(endpoint), transactional_id="wire-tx")
    api = store.producer(transactional_id="api-tx")
    wire.init_transactions()
    api.init_transactions()
    for commit, records in transactions:
        wire.begin_transaction()
        api.begin_transaction()
        for p, k, v in records:
            wire.send("wire", key=k, value=v, partition=p)
            wire.flush()  # one batch per record, as each api.send is one append
            api.send("api", key=k, value=v, partition=p)
        if commit:
            wire.commit_transaction()
            api.commit_transaction()
        else:
            wire.abort_transaction()
            api.abort_transaction()
    wire.close()
    w, a = txn_state(store, "wire-tx"), txn_state(store, "api-tx")
    assert (w.state, w.producer_epoch, w.partitions) == (a.state, a.producer_epoch, a.partitions) == (
        "CompleteCommit", 0, ())
    for p in (0, 1):
        assert commits(store, "wire", p) == commits(store, "api", p)
        assert rows(store, "wire", p) == rows(store, "api", p)
        assert producer_state(store, "wire", p, w.producer_id) == producer_state(store, "api", p, a.producer_id)
        for level in ("read_committed", "read_uncommitted"):
            assert [(r.offset, r.value) for r in store.read("wire", p, isolation_level=level)] == [
                (r.offset, r.value) for r in store.read("api", p, isolation_level=level)]
    for level, values in (("read_committed", [b"c0", b"c1", b"c2", b"c3"]),
                          ("read_uncommitted", [b"c0", b"c1", b"c2", b"c3", b"x0", b"x1"])):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap(endpoint), consumer_timeout_ms=1000,
                                 auto_offset_reset="earliest", isolation_level=level)
        consumer.assign([TopicPartition("wire", 0), TopicPartition("wire", 1)])
        assert sorted(r.value for r in consumer) == values
        consumer.close()


def request(server: SocketServer, req, response_cls, version: int):
    with connect(server) as sock:
        send(sock, req)
        return receive(sock, response_cls, version)


def txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, transactional=True,
                                   producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for v in values:
        builder.append(timestamp=1234, key=b"k", value=v, headers=[])
    builder.close()
    return bytes(builder.buffer())


def produce(server, tid, topic, partition, records) -> int:
    cls = ProduceRequest[9]
    resp = request(server, cls(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.TopicProduceData.PartitionProduceData(index=partition, records=records)])]),
        ProduceResponse, 9)
    return resp.responses[0].partition_responses[0].error_code


def init(server, tid, *, version=4, expected=(-1, -1), timeout_ms=60_000):
    resp = request(server, InitProducerIdRequest[version](transactional_id=tid, transaction_timeout_ms=timeout_ms,
                                                          producer_id=expected[0], producer_epoch=expected[1]),
                   InitProducerIdResponse, version)
    return resp.error_code, resp.producer_id, resp.producer_epoch


def add_partitions(server, tid, pid, epoch, partitions, *, version=3) -> dict:
    cls = AddPartitionsToTxnRequest[version]
    topics = {}
    for t, q in partitions:
        topics.setdefault(t, []).append(q)
    resp = request(server, cls(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                               v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                                   cls.AddPartitionsToTxnTopic(name=t, partitions=qs) for t, qs in topics.items()]),
                   AddPartitionsToTxnResponse, version)
    return {(t.name, r.partition_index): r.partition_error_code for t in resp.results_by_topic_v3_and_below
            for r in t.results_by_partition}


def end(server, tid, pid, epoch, commit, *, version=3) -> int:
    return request(server, EndTxnRequest[version](transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                  committed=commit), EndTxnResponse, version).error_code


def test_kafka_error_codes_and_any_endpoint_serves_any_transactional_id(store, endpoint, tmp_path):
    """Kafka's codes for each wrong step, on a raw socket; a transaction begun on one endpoint goes on and ends on
    another endpoint of the same store (no state in either), and the Python API's init_transactions fences a wire
    producer (one coordinator: the store's)."""
    p = protocol
    store.create_topic("t", 2)
    resp = request(endpoint, FindCoordinatorRequest[3](key="tx", key_type=1), FindCoordinatorResponse, 3)
    assert (resp.error_code, resp.node_id, resp.port) == (p.NONE, 0, endpoint.port)
    assert init(endpoint, "tx", timeout_ms=0)[0] == p.INVALID_TRANSACTION_TIMEOUT
    code, pid, epoch = init(endpoint, "tx")
    assert (code, epoch) == (p.NONE, 0) and pid >= 0
    assert produce(endpoint, "tx", "t", 0, txn_batch(pid, 0, 0, b"early")) == p.INVALID_TXN_STATE  # not added
    assert produce(endpoint, None, "t", 0, txn_batch(pid, 0, 0, b"no id")) == p.INVALID_REQUEST
    assert add_partitions(endpoint, "tx", pid, 0, [("t", 0), ("nowhere", 0)]) == {
        ("t", 0): p.OPERATION_NOT_ATTEMPTED, ("nowhere", 0): p.UNKNOWN_TOPIC_OR_PARTITION}
    assert txn_state(store, "tx").state == "Empty" and store.log("t", 0).head().log_end_offset == 0
    assert add_partitions(endpoint, "tx", pid + 1, 0, [("t", 0)]) == {("t", 0): p.INVALID_PRODUCER_ID_MAPPING}
    assert add_partitions(endpoint, "tx", pid, 0, [("t", 0)]) == {("t", 0): p.NONE}
    with SocketServer(Store(tmp_path / "store"), "127.0.0.1", 0) as other:  # a second endpoint on the store
        assert produce(other, "tx", "t", 0, txn_batch(pid, 0, 0, b"v0", b"v1")) == p.NONE
        assert produce(other, "tx", "t", 1, txn_batch(pid, 0, 0, b"v2")) == p.INVALID_TXN_STATE
        assert store.read("t", 0, isolation_level="read_committed") == []
        assert end(other, "tx", pid, 0, True) == p.NONE
        assert end(endpoint, "tx", pid, 0, True) == p.NONE  # again, after it completed: Kafka's NONE
        assert end(endpoint, "tx", pid, 0, False) == p.INVALID_TXN_STATE
        assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"v0", b"v1"]
        code, pid2, epoch2 = init(other, "tx")  # a second producer with the id: the first is fenced
        assert (code, pid2, epoch2) == (p.NONE, pid, 1)
    assert add_partitions(endpoint, "tx", pid, 0, [("t", 1)]) == {("t", 1): p.PRODUCER_FENCED}
    assert add_partitions(endpoint, "tx", pid, 0, [("t", 1)], version=1) == {("t", 1): p.INVALID_PRODUCER_EPOCH}
    assert end(endpoint, "tx", pid, 0, True) == p.PRODUCER_FENCED
    assert end(endpoint, "tx", pid, 0, True, version=1) == p.INVALID_PRODUCER_EPOCH
    assert init(endpoint, "tx", expected=(pid, 0))[0] == p.PRODUCER_FENCED  # KIP-360's bump by a fenced producer
    assert init(endpoint, "tx", version=3, expected=(pid, 0))[0] == p.INVALID_PRODUCER_EPOCH
    assert init(endpoint, "tx", expected=(pid, 1)) == (p.NONE, pid, 2)  # the holder bumps its own epoch
    assert add_partitions(endpoint, "tx", pid, 2, [("t", 0)]) == {("t", 0): p.NONE}
    assert produce(endpoint, "tx", "t", 0, txn_batch(pid, 0, 1, b"zombie")) == p.INVALID_PRODUCER_EPOCH
    assert produce(endpoint, "tx", "t", 0, txn_batch(pid, 2, 0, b"v3")) == p.NONE
    assert end(endpoint, "tx", 12345, 2, True) == p.INVALID_PRODUCER_ID_MAPPING
    # the Python API's producer with the same id takes it over: its init aborts the wire producer's transaction
    api = store.producer(transactional_id="tx")
    api.init_transactions()
    assert (api.producer_id, api.producer_epoch) == (pid, 3)
    assert end(endpoint, "tx", pid, 2, True) == p.PRODUCER_FENCED
    assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"v0", b"v1"]
    assert [r.value for r in store.read("t", 0)] == [b"v0", b"v1", b"v3"]
    # offsets in a transaction: AddOffsetsToTxn adds the group's partition, TxnOffsetCommit writes there
    code, pid, epoch = init(endpoint, "offsets-tx")
    cls = TxnOffsetCommitRequest[3]
    commit = cls(transactional_id="offsets-tx", group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1,
                 member_id="", group_instance_id=None, topics=[cls.TxnOffsetCommitRequestTopic(name="t", partitions=[
                     cls.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                         partition_index=0, committed_offset=2, committed_leader_epoch=-1, committed_metadata="m")])])
    resp = request(endpoint, commit, TxnOffsetCommitResponse, 3)
    assert resp.topics[0].partitions[0].error_code == p.INVALID_TXN_STATE  # AddOffsetsToTxn first
    added = request(endpoint, AddOffsetsToTxnRequest[3](transactional_id="offsets-tx", producer_id=pid,
                                                        producer_epoch=epoch, group_id="g"), AddOffsetsToTxnResponse, 3)
    assert added.error_code == p.NONE
    assert txn_state(store, "offsets-tx").partitions == ((OFFSETS_TOPIC, store.offsets_topic.partition_for("g")),)
    assert request(endpoint, commit, TxnOffsetCommitResponse, 3).topics[0].partitions[0].error_code == p.NONE
    assert store.list_consumer_groups() == []  # not committed before the transaction is
    # a read_committed consumer's OffsetFetch (require_stable, KIP-447) waits for the open transaction
    assert offset_fetch(endpoint, "g", stable=True) == (-1, p.UNSTABLE_OFFSET_COMMIT)
    assert offset_fetch(endpoint, "g", stable=False) == (-1, p.NONE)
    assert end(endpoint, "offsets-tx", pid, epoch, True) == p.NONE
    assert store.list_consumer_group_offsets("g")[TopicPartition("t", 0)].offset == 2
    assert offset_fetch(endpoint, "g", stable=True) == (2, p.NONE)


def offset_fetch(server, group: str, *, stable: bool) -> tuple[int, int]:
    cls = OffsetFetchRequest[7]
    resp = request(server, cls(group_id=group, topics=[cls.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
                               require_stable=stable), OffsetFetchResponse, 7)
    part = resp.topics[0].partitions[0]
    return part.committed_offset, part.error_code


def test_the_endpoint_aborts_a_transaction_open_longer_than_its_timeout(store, endpoint):
    """Kafka's coordinator timer: a producer that dies in its transaction (transaction.timeout.ms 1.5 s) holds
    read_committed readers back until the endpoint aborts it, with the epoch bumped so the producer is fenced."""
    store.create_topic("t", 1)
    endpoint.apis.txn.abort_timed_out_interval_ms = 100  # Kafka's default is 10 s
    code, pid, epoch = init(endpoint, "dies", timeout_ms=1500)
    assert add_partitions(endpoint, "dies", pid, epoch, [("t", 0)]) == {("t", 0): protocol.NONE}
    assert produce(endpoint, "dies", "t", 0, txn_batch(pid, epoch, 0, b"orphan")) == protocol.NONE
    store.append("t", 0, [Record(key=b"k", value=b"after")])
    assert store.read("t", 0, isolation_level="read_committed") == []  # held back by the open transaction
    deadline = time.monotonic() + 20
    while txn_state(store, "dies").state != "CompleteAbort" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (txn_state(store, "dies").state, txn_state(store, "dies").producer_epoch) == ("CompleteAbort", epoch + 1)
    assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"after"]
    assert end(endpoint, "dies", pid, epoch, True) == protocol.PRODUCER_FENCED


# -- `deltalog serve` as a process ---------------------------------------------------------------------------

@pytest.fixture
def served(tmp_path):
    """(store, bootstrap) of a `deltalog serve` process on a new store."""
    from tooling.services import free_port

    root = tmp_path / "store"
    store = Store(root)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    server = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--store", str(root), "--listen",
                               f"127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on" in server.stdout.readline()
        yield store, f"127.0.0.1:{port}"
    finally:
        stop_process(server, 20)


def confluent_read(broker: str, topic: str, level: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker, "group.id": f"reader-{level}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": level})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        elif m is None and len(got) >= expected:
            break
    c.close()
    return got


def list_transactions(store: Store) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "deltalog", "transactions", "list", "--store", store.root,
                          "--output", "json"], capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    return {r["transactional_id"]: r for r in map(json.loads, out.stdout.splitlines())}


@pytest.mark.subprocess
def test_confluent_kafka_commits_and_aborts_and_each_isolation_level_sees_what_kafka_shows(served):
    from confluent_kafka import Producer

    store, broker = served
    store.create_topic("orders", 2)
    prod = Producer({"bootstrap.servers": broker, "transactional.id": "orders-tx", "linger.ms": 5})
    prod.init_transactions(30)
    prod.begin_transaction()
    for i in range(6):
        prod.produce("orders", key=b"k%d" % i, value=b"committed-%d" % i, partition=i % 2)
    prod.commit_transaction(30)
    prod.begin_transaction()
    for i in range(4):
        prod.produce("orders", key=b"k%d" % i, value=b"aborted-%d" % i, partition=i % 2)
    prod.flush(30)  # sent, then aborted: read_uncommitted readers see them, as on Kafka
    prod.abort_transaction(30)
    committed = sorted(b"committed-%d" % i for i in range(6))
    assert sorted(confluent_read(broker, "orders", "read_committed", 6)) == committed
    assert sorted(confluent_read(broker, "orders", "read_uncommitted", 10)) == sorted(
        committed + [b"aborted-%d" % i for i in range(4)])
    # the Python API reads what the wire wrote
    consumer = store.consumer("orders", isolation_level="read_committed", auto_offset_reset="earliest",
                              consumer_timeout_ms=500)
    assert sorted(r.value for r in consumer) == committed
    assert sorted(r.value for p in (0, 1) for r in store.read("orders", p, isolation_level="read_committed")) == committed
    state = list_transactions(store)["orders-tx"]
    assert state["state"] == "CompleteAbort" and state["producer_id"] == txn_state(store, "orders-tx").producer_id


@pytest.mark.subprocess
def test_confluent_kafka_consume_transform_produce_commits_offsets_with_the_transaction(served):
    from confluent_kafka import Consumer, Producer

    store, broker = served
    store.create_topic("in", 1)
    store.create_topic("out", 1)
    store.append("in", 0, [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(8)])
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "etl", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe(["in"])
    prod = Producer({"bootstrap.servers": broker, "transactional.id": "etl-tx"})
    prod.init_transactions(30)

    def process(n: int, commit: bool) -> None:
        got = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) == n
        prod.begin_transaction()
        for m in got:
            prod.produce("out", key=m.key(), value=m.value().upper(), partition=0)
        prod.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
        if commit:
            prod.commit_transaction(30)
        else:
            prod.flush(30)
            prod.abort_transaction(30)

    process(5, commit=True)
    assert store.list_consumer_group_offsets("etl")[TopicPartition("in", 0)].offset == 5
    process(3, commit=False)  # aborted: neither the records nor the offsets count
    assert store.list_consumer_group_offsets("etl")[TopicPartition("in", 0)].offset == 5
    consumer.close()
    assert [r.value for r in store.read("out", 0, isolation_level="read_committed")] == [
        b"V%d" % i for i in range(5)]
    assert len(store.read("out", 0)) == 8  # the aborted three are in the log, for read_uncommitted readers
    # the offsets were written as records of the transaction, as send_offsets_to_transaction writes them
    partition = store.offsets_topic.partition_for("etl")
    assert store.log(OFFSETS_TOPIC, partition).txn_index().last_stable_offset == store.log(
        OFFSETS_TOPIC, partition).head().log_end_offset
    assert list_transactions(store)["etl-tx"]["state"] == "CompleteAbort"


@pytest.mark.subprocess
def test_a_second_confluent_producer_with_the_transactional_id_fences_the_first(served):
    from confluent_kafka import KafkaException, Producer

    store, broker = served
    store.create_topic("fenced", 1)
    first = Producer({"bootstrap.servers": broker, "transactional.id": "shared-id"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("fenced", value=b"from the first", partition=0)
    first.flush(30)  # written, in a transaction the second producer's init aborts
    second = Producer({"bootstrap.servers": broker, "transactional.id": "shared-id"})
    second.init_transactions(30)
    assert txn_state(store, "shared-id").producer_epoch == 1
    with pytest.raises(KafkaException) as raised:
        first.produce("fenced", value=b"zombie", partition=0)
        first.commit_transaction(30)
    assert raised.value.args[0].fatal()  # librdkafka's _FENCED: the first producer is done
    second.begin_transaction()
    second.produce("fenced", value=b"from the second", partition=0)
    second.commit_transaction(30)
    assert [r.value for r in store.read("fenced", 0, isolation_level="read_committed")] == [b"from the second"]
    assert b"zombie" not in [r.value for r in store.read("fenced", 0)]


@pytest.mark.subprocess
def test_kafka_python_transactional_producer_with_offsets_and_the_transactions_list(served):
    store, broker = served
    store.create_topic("src", 1)
    store.create_topic("dst", 2)
    prod = KafkaProducer(bootstrap_servers=broker, transactional_id="kp-tx")
    prod.init_transactions()
    prod.begin_transaction()
    for i in range(4):
        prod.send("dst", key=b"k%d" % i, value=b"kp-%d" % i, partition=i % 2)
    prod.send_offsets_to_transaction({TopicPartition("src", 0): OffsetAndMetadata(7, "", -1)},
                                     "kp-group")
    prod.commit_transaction()
    assert list_transactions(store)["kp-tx"]["state"] == "CompleteCommit"
    prod.begin_transaction()
    prod.send("dst", key=b"x", value=b"never", partition=0)
    prod.flush()
    assert list_transactions(store)["kp-tx"]["state"] == "Ongoing"  # open, as kafka-transactions.sh shows it
    prod.abort_transaction()
    prod.close()
    assert store.list_consumer_group_offsets("kp-group")[TopicPartition("src", 0)].offset == 7
    assert sorted(r.value for p in (0, 1) for r in store.read("dst", p, isolation_level="read_committed")) == [
        b"kp-%d" % i for i in range(4)]
    consumer = KafkaConsumer(bootstrap_servers=broker, consumer_timeout_ms=1500, auto_offset_reset="earliest",
                             isolation_level="read_committed")
    consumer.assign([TopicPartition("dst", 0), TopicPartition("dst", 1)])
    assert sorted(r.value for r in consumer) == [b"kp-%d" % i for i in range(4)]
    consumer.close()
    assert list_transactions(store)["kp-tx"]["state"] == "CompleteAbort"
