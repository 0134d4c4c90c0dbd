"""Several Kafka endpoints on one store (deltalog.server.registry, deltalog.server.placement) and the admin APIs of
deltalog.server.admin_apis, against real clients: kafka-python's admin client and raw requests, confluent-kafka's
consumer group, and `deltalog serve` processes.

The two quick tests run endpoints in this process on ephemeral ports; the `subprocess` ones start two `deltalog serve`
processes on one store, kill one, and watch the other carry on."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import InvalidPartitionsError
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from deltalog import Record, Store
from deltalog.coordinator.group.group_metadata import GroupMetadataLog
from deltalog.errors import DuplicateBrokerRegistrationError
from deltalog.server import protocol as p
from deltalog.server.socket_server import SocketServer

REPO = Path(__file__).resolve().parents[1]


def call(port: int, request, response_cls, version: int):
    """One request on a fresh connection, its decoded response."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        request.with_header(correlation_id=7, client_id="cluster-test")
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    return response_cls.decode(data, version=version, header=True)


def metadata(port: int):
    return call(port, MetadataRequest[12](topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False), MetadataResponse, 12)


def coordinator(port: int, key: str, key_type: int = 0) -> int:
    resp = call(port, FindCoordinatorRequest[3](key=key, key_type=key_type), FindCoordinatorResponse, 3)
    assert resp.error_code == 0
    return resp.node_id


def subscription(*topics: str) -> bytes:
    """A consumer protocol member's ConsumerProtocolSubscription v0 (no user data)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def describe(port: int, group: str):
    resp = call(port, DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False),
                DescribeGroupsResponse, 5)
    assert resp.groups[0].error_code == 0
    return resp.groups[0]


def stored_generation(store: Store, group: str) -> int:
    """The generation of the group's latest record in __consumer_offsets (what a new coordinator loads)."""
    loaded = GroupMetadataLog(store, threading.RLock()).load(group)
    return -1 if loaded is None else loaded.generation_id


def loaded(send, timeout: float = 10):
    """``send()``'s response once it is not COORDINATOR_LOAD_IN_PROGRESS (a coordinator that has just gained the
    group from another live endpoint waits out the hand-over; clients retry, as here)."""
    deadline = time.monotonic() + timeout
    while (resp := send()).error_code == p.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
        time.sleep(0.1)
    return resp


def join(port: int, group: str, *topics: str):
    cls = JoinGroupRequest[5]
    return loaded(lambda: call(port, cls(
        group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=subscription(*topics))]),
        JoinGroupResponse, 5))


# -- in this process ----------------------------------------------------------------------------------------

def test_two_endpoints_register_list_each_other_place_coordinators_alike_and_expire(store, clock):
    store.create_topic("spread", 4)
    a = SocketServer(store, "127.0.0.1", 0).start()
    b = SocketServer(store, "127.0.0.1", 0).start()
    try:
        assert (a.node_id, b.node_id) == (0, 1)  # the lowest free node ids
        for server in (a, b):
            md = metadata(server.port)
            assert [(x.node_id, x.port) for x in md.brokers] == [(0, a.port), (1, b.port)]
            assert md.controller_id == 0
            leaders = {q.partition_index: q.leader_id for t in md.topics if t.name == "spread" for q in t.partitions}
            assert set(leaders.values()) == {0, 1}  # leadership is spread, the same from both
        assert leaders == {q.partition_index: q.leader_id for t in metadata(a.port).topics if t.name == "spread"
                           for q in t.partitions}
        # FindCoordinator: one answer per key from every endpoint, spread over both; groups and transactional ids
        groups = [f"group-{i}" for i in range(12)]
        placed = {g: coordinator(a.port, g) for g in groups}
        assert placed == {g: coordinator(b.port, g) for g in groups} and set(placed.values()) == {0, 1}
        assert {coordinator(a.port, f"tx-{i}", 1) for i in range(12)} <= {0, 1}
        assert coordinator(a.port, "tx-0", 1) == coordinator(b.port, "tx-0", 1)
        # the wrong endpoint answers NOT_COORDINATOR; the right one takes the member
        g = groups[0]
        right, wrong = (a, b) if placed[g] == 0 else (b, a)
        assert join(wrong.port, g, "spread").error_code == p.NOT_COORDINATOR
        # the right one has just seen a live set of two: a group it gains from another live endpoint waits out the
        # hand-over (twice the registry's refresh), so the previous coordinator has stopped writing it
        cls = JoinGroupRequest[5]
        first = call(right.port, cls(group_id=g, session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                                     group_instance_id=None, protocol_type="consumer", protocols=[
                                         cls.JoinGroupRequestProtocol(name="range", metadata=subscription("spread"))]),
                     JoinGroupResponse, 5)
        assert first.error_code == p.COORDINATOR_LOAD_IN_PROGRESS
        joined = join(right.port, g, "spread")
        assert joined.error_code == 0 and joined.leader == joined.member_id
        # a Stable group on b: its generation is written to __consumer_offsets
        on_b = next(x for x in groups if placed[x] == 1)
        member = join(b.port, on_b, "spread")
        sync = SyncGroupRequest[3]
        synced = call(b.port, sync(group_id=on_b, generation_id=member.generation_id, member_id=member.member_id,
                                   group_instance_id=None, assignments=[sync.SyncGroupRequestAssignment(
                                       member_id=member.member_id, assignment=b"\x00\x00assigned")]),
                      SyncGroupResponse, 3)
        assert synced.error_code == 0 and synced.assignment == b"\x00\x00assigned"
        # ListGroups: each endpoint lists the groups it coordinates (admin clients ask every broker and merge)
        listed = {s.node_id: {x.group_id for x in call(s.port, ListGroupsRequest[4](states_filter=[]),
                                                        ListGroupsResponse, 4).groups} for s in (a, b)}
        assert on_b in listed[1] and on_b not in listed[0]
        # a node id another live endpoint holds is refused
        with pytest.raises(DuplicateBrokerRegistrationError, match="node.id 1 is held"):
            SocketServer(store, "127.0.0.1", 0, node_id=1)
        # b stops renewing (a hung or partitioned endpoint): after broker.session.timeout.ms it is not live
        b.registry.stop_heartbeat()
        clock.advance(9_001)
        a.registry.renew()
        assert [x.node_id for x in a.registry.live(fresh=True)] == [0]
        assert [x.node_id for x in metadata(a.port).brokers] == [0]
        assert {coordinator(a.port, x) for x in groups} == {0}  # a took over b's groups
        # ... and loaded them: b's member goes on heartbeating with its generation, at a, without joining again
        heartbeat = HeartbeatRequest[3](group_id=on_b, generation_id=member.generation_id, member_id=member.member_id,
                                        group_instance_id=None)
        # (at once: the previous coordinator is not live, there is no hand-over to wait out)
        assert call(a.port, heartbeat, HeartbeatResponse, 3).error_code == 0
        b.registry.live(fresh=True)
        assert call(b.port, HeartbeatRequest[3](group_id=on_b, generation_id=member.generation_id,
                                                member_id=member.member_id, group_instance_id=None),
                    HeartbeatResponse, 3).error_code == p.NOT_COORDINATOR  # b's view: expired itself too
        # its node id may now be taken by a new endpoint; b's late renewal finds it gone and b registers again
        c = SocketServer(store, "127.0.0.1", 0, node_id=1).start()
        try:
            assert not b.registry.renew() and b.registry.node_id == 2
        finally:
            c.shutdown()
            c.close()
        assert [x.node_id for x in a.registry.live(fresh=True)] == [0, 2]
        # a registration file that is not one (torn, foreign) holds nothing: its node id is taken by compare-and-swap
        storage = store.log_manager.storage
        storage.write_bytes(storage.location("_deltalog", "brokers", "7.json"), b'{"node_id": 7, "ho')
        with SocketServer(store, "127.0.0.1", 0, node_id=7) as d:
            assert d.node_id == 7 and 7 in [x.node_id for x in a.registry.live(fresh=True)]
    finally:
        for server in (b, a):
            server.shutdown()
            server.close()
    # a clean shutdown removes its registration at once
    assert not any(store.log_manager.storage.list_files(store.log_manager.storage.location("_deltalog", "brokers")))


def test_endpoints_of_different_listeners_send_clients_only_to_their_own(store):
    """Kafka answers Metadata and FindCoordinator with the endpoints of the listener the client came in on: an
    endpoint of listener INTERNAL and one of PLAINTEXT on one store never name each other."""
    from deltalog.server.security import listener_security

    store.create_topic("split", 4)
    internal = listener_security({"listeners": "INTERNAL://127.0.0.1:0",
                                  "listener.security.protocol.map": "INTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT"})
    a = SocketServer(store, "127.0.0.1", 0).start()
    b = SocketServer(store, "127.0.0.1", 0, security=internal).start()
    c = SocketServer(store, "127.0.0.1", 0).start()
    try:
        assert {x.node_id for x in metadata(a.port).brokers} == {a.node_id, c.node_id}
        assert [x.node_id for x in metadata(b.port).brokers] == [b.node_id]
        leaders = {q.leader_id for t in metadata(b.port).topics if t.name == "split" for q in t.partitions}
        assert leaders == {b.node_id}
        groups = [f"g{i}" for i in range(8)]
        assert {coordinator(b.port, g) for g in groups} == {b.node_id}
        assert {coordinator(a.port, g) for g in groups} <= {a.node_id, c.node_id}
    finally:
        for server in (a, b, c):
            server.shutdown()
            server.close()


def test_admin_apis_from_kafka_python_and_raw_requests(store, endpoint_server):
    port = endpoint_server.port
    store.create_topic("grow", 2, config={"retention.ms": "5000", "cleanup.policy": "compact"})
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
    try:
        # CreatePartitions: only more (kafka-topics --alter --partitions)
        admin.create_partitions({"grow": 4})
        assert store.partitions("grow") == [0, 1, 2, 3]
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"grow": 3})
        admin.create_partitions({"grow": 9}, validate_only=True)
        assert store.partitions("grow") == [0, 1, 2, 3]
        # AlterConfigs, the non-incremental one: kafka-python fills in the other modified configs itself
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "grow", configs={"retention.ms": "7000"})],
                                     incremental=False)
        assert result == {"topic": {"grow": "OK"}}
        props = store.topic_config("grow").to_properties()
        assert props["retention.ms"] == "7000" and props["cleanup.policy"] == "compact"
        # ... and on the wire it resets every config not given to its default, as Kafka's AlterConfigs does
        cls = AlterConfigsRequest[2]
        resp = call(port, cls(resources=[cls.AlterConfigsResource(resource_type=2, resource_name="grow", configs=[
            cls.AlterConfigsResource.AlterableConfig(name="retention.ms", value="8000")])], validate_only=False),
            AlterConfigsResponse, 2)
        assert [r.error_code for r in resp.responses] == [0]
        props = store.topic_config("grow").to_properties()
        assert props["retention.ms"] == "8000" and props["cleanup.policy"] == "delete"
        resp = call(port, cls(resources=[cls.AlterConfigsResource(resource_type=2, resource_name="grow", configs=[
            cls.AlterConfigsResource.AlterableConfig(name="retention.ms", value="-7")])], validate_only=False),
            AlterConfigsResponse, 2)
        assert resp.responses[0].error_code == p.INVALID_CONFIG and "retention.ms" in resp.responses[0].error_message
        assert store.topic_config("grow").to_properties()["retention.ms"] == "8000"
        # DescribeCluster
        cluster = admin.describe_cluster()
        assert [(x["broker_id"], x["port"]) for x in cluster["brokers"]] == [(0, port)] and cluster["controller_id"] == 0

        # OffsetDelete and DeleteGroups: a group with a member subscribed to "grow", offsets on "grow" and "other"
        store.create_topic("other", 1)
        store.offsets_topic.commit("busy", {("grow", 0): 3, ("other", 0): 1}, store.clock.now_ms())
        member = join(port, "busy", "grow")
        assert member.error_code == 0
        deleted = admin.delete_group_offsets("busy", [KTopicPartition("grow", 0), KTopicPartition("other", 0)])
        assert deleted[KTopicPartition("other", 0)].__name__ == "NoError"
        assert deleted[KTopicPartition("grow", 0)].__name__ == "GroupSubscribedToTopicError"
        assert set(store.list_consumer_group_offsets("busy")) == {KTopicPartition("grow", 0)}
        assert admin.delete_groups(["busy", "missing"]) == {"busy": "NonEmptyGroupError",
                                                            "missing": "GroupIdNotFoundError"}
        leave = LeaveGroupRequest[3]
        left = call(port, leave(group_id="busy", members=[leave.MemberIdentity(member_id=member.member_id,
                                                                                group_instance_id=None)]),
                    LeaveGroupResponse, 3)
        assert left.error_code == 0
        resp = call(port, OffsetDeleteRequest[0](group_id="busy", topics=[OffsetDeleteRequest[0].OffsetDeleteRequestTopic(
            name="grow", partitions=[OffsetDeleteRequest[0].OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                partition_index=0)])]), OffsetDeleteResponse, 0)
        assert resp.error_code == 0 and resp.topics[0].partitions[0].error_code == 0  # Empty now: deleted
        store.offsets_topic.commit("busy", {("grow", 1): 2}, store.clock.now_ms())
        assert call(port, DeleteGroupsRequest[2](groups_names=["busy"]), DeleteGroupsResponse, 2).results[0].error_code == 0
        assert "busy" not in store.list_consumer_groups()
    finally:
        admin.close()


@pytest.fixture
def endpoint_server(store):
    with SocketServer(store, "127.0.0.1", 0) as server:
        yield server


# -- deltalog serve processes ------------------------------------------------------------------------------

class Serve:
    """A `deltalog serve` process on ``store`` with a given node id; its port from the health line."""

    def __init__(self, store: Path, node_id: int, *extra: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen([sys.executable, "-m", "deltalog", "serve", "--store", str(store), "--listen",
                                      "127.0.0.1:0", "--node-id", str(node_id), *extra], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        health = self.proc.stdout.readline()
        assert "listening on 127.0.0.1:" in health and f"node id {node_id};" in health, health + self.proc.stderr.read()
        self.port = int(health.split("listening on 127.0.0.1:")[1].split()[0])
        self.node_id = node_id

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def two_endpoints(tmp_path):
    store = tmp_path / "store"
    Store(store).create_topic("shared", 4)
    one = Serve(store, 1, "--broker-session-timeout-ms", "3000")
    two = Serve(store, 2, "--broker-session-timeout-ms", "3000")
    try:
        yield store, one, two
    finally:
        two.stop()
        one.stop()


class GroupRun:
    """Two confluent-kafka members of one group, each bootstrapped on a different endpoint, committing each record
    synchronously after it is consumed (a commit that fails with a retriable error, such as NOT_COORDINATOR while
    the coordinator moves, is retried, as an application would)."""

    def __init__(self, store: Store, group: str, *servers: Serve) -> None:
        from confluent_kafka import Consumer

        self.store, self.group = store, group
        conf = {"group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300, "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000}
        self.members = [Consumer({**conf, "bootstrap.servers": s.bootstrap}) for s in servers]
        for c in self.members:
            c.subscribe(["shared"])
        self.seen: list[tuple[int, int]] = []

    def commit(self, c, msg) -> None:
        from confluent_kafka import KafkaError, KafkaException

        for _ in range(100):
            try:
                c.commit(message=msg, asynchronous=False)
                return
            except KafkaException as e:
                # COORDINATOR_LOAD_IN_PROGRESS is retriable in Kafka's protocol; librdkafka hands it to a sync commit
                if not (e.args[0].retriable() or e.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
                    raise
                time.sleep(0.1)

    def poll_until(self, records: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (len(self.seen) >= records and self.assigned()):
            for c in self.members:
                msg = c.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.seen.append((msg.partition(), msg.offset()))
                    self.commit(c, msg)

    def assigned(self) -> bool:
        return all(c.assignment() for c in self.members)

    def check_every_record_once(self) -> None:
        assert self.assigned()
        assert sorted(self.seen) == sorted((q, r.offset) for q in range(4) for r in self.store.read("shared", q))
        committed = self.store.list_consumer_group_offsets(self.group)
        assert {tp.partition: om.offset for tp, om in committed.items()} == {
            q: self.store.log("shared", q).head().log_end_offset for q in range(4)}

    def produce(self, n: int) -> None:
        base = len(self.seen)
        self.store.produce("shared", [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(base, base + n)])

    def close(self) -> None:
        for c in self.members:
            c.close()


def wait_for_coordinator(server: Serve, group: str, node_id: int, timeout: float) -> float:
    """Seconds until ``server`` names ``node_id`` as the group's coordinator."""
    start = time.monotonic()
    while coordinator(server.port, group) != node_id and time.monotonic() < start + timeout:
        time.sleep(0.1)
    assert coordinator(server.port, group) == node_id
    return time.monotonic() - start


@pytest.mark.subprocess
def test_a_group_spans_two_endpoints_and_survives_its_coordinator_being_killed(two_endpoints):
    store_path, one, two = two_endpoints
    store = Store(store_path)
    group = "spanning"
    coord = coordinator(one.port, group)
    assert coord == coordinator(two.port, group)
    # each member bootstraps on a different endpoint; the coordinator lookup sends both to the same one
    run = GroupRun(store, group, one, two)
    try:
        run.produce(40)
        run.poll_until(40, 60)
        run.check_every_record_once()  # every record once, split between the two members
        dead, alive = (one, two) if coord == one.node_id else (two, one)
        before = describe(dead.port, group)
        assert before.group_state == "Stable" and len(before.members) == 2
        generation = stored_generation(store, group)
        assert generation > 0
        # the coordinator endpoint dies (SIGKILL: no clean deregistration); the other takes the group over (a dead
        # process of this machine at the next listing, before its 3 s session timeout)
        dead.stop(signal.SIGKILL)
        wait_for_coordinator(alive, group, alive.node_id, 5)
        run.produce(40)
        run.poll_until(80, 90)
        run.check_every_record_once()  # the new ones through the surviving endpoint
        # the new coordinator loaded the group from __consumer_offsets: the same generation and members, no rejoin
        after = describe(alive.port, group)
        assert (after.group_state, sorted(m.member_id for m in after.members)) == (
            "Stable", sorted(m.member_id for m in before.members))
        assert stored_generation(store, group) == generation  # no rebalance wrote a new generation
    finally:
        run.close()
    # the group is Empty now (its members left): kafka-python's admin deletes it through its coordinator
    admin = KafkaAdminClient(bootstrap_servers=alive.bootstrap)
    try:
        assert admin.delete_groups([group]) == {group: "OK"}
    finally:
        admin.close()
    assert group not in store.list_consumer_groups() and stored_generation(store, group) == -1


@pytest.mark.subprocess
def test_a_hung_coordinator_is_taken_over_after_its_session_timeout_and_takes_its_group_back(two_endpoints):
    """SIGSTOP: the process lives on (its pid is there) but renews nothing; the other endpoint coordinates the group
    once the registration expires (broker.session.timeout.ms, 3 s here). SIGCONT: its late renewal makes it live
    again and drop what it had in memory; the group comes back to it and is loaded from __consumer_offsets."""
    store_path, one, two = two_endpoints
    store = Store(store_path)
    group = next(g for g in (f"hung-{i}" for i in range(50)) if coordinator(one.port, g) == one.node_id)
    run = GroupRun(store, group, one, two)
    try:
        run.produce(20)
        run.poll_until(20, 60)
        run.check_every_record_once()
        os.kill(one.proc.pid, signal.SIGSTOP)
        try:
            took = wait_for_coordinator(two, group, two.node_id, 15)
            assert took >= 1.5  # not at once: the hung endpoint's registration holds until it expires
            run.produce(20)
            run.poll_until(40, 90)
            run.check_every_record_once()
        finally:
            os.kill(one.proc.pid, signal.SIGCONT)
        wait_for_coordinator(two, group, one.node_id, 15)  # live again: the group's partition is its again
        run.produce(20)
        run.poll_until(60, 90)
        run.check_every_record_once()
        assert describe(one.port, group).group_state == "Stable"
    finally:
        run.close()


def produce_request(topic: str, partition: int, value: bytes) -> ProduceRequest:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=1234, key=b"k", value=value, headers=[])
    builder.close()
    cls = ProduceRequest[9]
    return cls(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.TopicProduceData.PartitionProduceData(index=partition,
                                                                              records=bytes(builder.buffer()))])])


@pytest.mark.subprocess
def test_produce_through_both_endpoints_into_one_partition_gives_unique_dense_offsets(two_endpoints):
    store_path, one, two = two_endpoints
    # kafka-python's admin sends CreatePartitions to the controller (the lowest live node id); both see the result
    admin = KafkaAdminClient(bootstrap_servers=two.bootstrap)
    try:
        assert admin.describe_cluster()["controller_id"] == 1
        admin.create_partitions({"shared": 6})
    finally:
        admin.close()
    for server in (one, two):
        assert [len(t.partitions) for t in metadata(server.port).topics if t.name == "shared"] == [6]
    leader = {q.partition_index: q.leader_id for t in metadata(one.port).topics if t.name == "shared"
              for q in t.partitions}[0]
    assert leader in (1, 2)  # the non-leader accepts produce too: the store orders the appends
    got: dict[str, list[int]] = {}

    def produce(server: Serve, n: int) -> None:
        offsets = []
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            for i in range(n):
                request = produce_request("shared", 0, b"%d-%d" % (server.node_id, i))
                request.with_header(correlation_id=i, client_id="both")
                sock.sendall(bytes(request.encode(header=True, framed=True)))
                size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
                resp = ProduceResponse.decode(sock.recv(size, socket.MSG_WAITALL), version=9, header=True)
                part = resp.responses[0].partition_responses[0]
                assert part.error_code == 0, part.error_message
                offsets.append(part.base_offset)
        got[str(server.node_id)] = offsets

    threads = [threading.Thread(target=produce, args=(s, 25)) for s in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 and all(len(v) == 25 for v in got.values())
    both = got["1"] + got["2"]
    assert sorted(both) == list(range(50))  # unique and dense
    rows = Store(store_path).read("shared", 0)
    assert [r.offset for r in rows] == list(range(50))
    for node, offsets in got.items():  # each endpoint's acknowledged offset holds that endpoint's record
        by_offset = {r.offset: r.value for r in rows}
        assert [by_offset[o] for o in offsets] == [b"%s-%d" % (node.encode(), i) for i in range(25)]


def test_endpoints_on_an_s3_store_register_by_conditional_puts(s3_store_uri, s3_server):
    """The registry on an object store: If-None-Match creates and etag compare-and-swaps (moto's S3 server)."""
    store = Store(s3_store_uri, storage_options=s3_server.storage_options)
    store.create_topic("on-s3", 2)
    with SocketServer(store, "127.0.0.1", 0, node_id=3) as a, SocketServer(store, "127.0.0.1", 0) as b:
        assert (a.node_id, b.node_id) == (3, 0)
        assert [x.node_id for x in metadata(a.port).brokers] == [0, 3]
        assert b.registry.renew() and a.registry.renew()  # compare-and-swap on their own etags
        with pytest.raises(DuplicateBrokerRegistrationError):
            SocketServer(store, "127.0.0.1", 0, node_id=3)
        groups = [f"g{i}" for i in range(8)]
        assert [coordinator(a.port, g) for g in groups] == [coordinator(b.port, g) for g in groups]
    assert a.registry.live(fresh=True) == []  # both left cleanly
