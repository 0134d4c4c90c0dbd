"""What one endpoint holds at most (deltalog.server.limits, deltalog.server.socket_server): connections in all and per
address, idle and unauthenticated connections closed, no thread per connection, and a Fetch that waits for records
holding no thread and answered when records come (Kafka's fetch purgatory)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from deltalog.errors import InvalidConfigError
from deltalog.server.frames import read_frame
from deltalog.server.limits import ConnectionLimits
from deltalog.server.security import listener_security, unused_keys
from deltalog.server.socket_server import SocketServer


def send(sock, request, correlation_id: int = 1) -> None:
    request.with_header(correlation_id=correlation_id, client_id="raw")
    sock.sendall(bytes(request.encode(header=True, framed=True)))



def receive(sock, cls, version: int):
    return cls[version].decode(read_frame(sock), version=version, header=True)


def closed(sock, wait_s: float = 5) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def api_versions_work(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        send(sock, ApiVersionsRequest[0]())
        return receive(sock, ApiVersionsResponse, 0).error_code == 0


def test_limits_read_kafkas_broker_configs_and_refuse_bad_values():
    limits = ConnectionLimits.from_properties({"max.connections": "100", "max.connections.per.ip": "10",
                                               "connections.max.idle.ms": "60000", "socket.listen.backlog.size": "7",
                                               "num.io.threads": "3", "deltalog.authentication.timeout.ms": "5000"})
    assert (limits.max_connections, limits.max_connections_per_ip, limits.connections_max_idle_ms,
            limits.listen_backlog, limits.num_io_threads, limits.authentication_timeout_ms) == (100, 10, 60000, 7, 3,
                                                                                               5000)
    assert ConnectionLimits().listen_backlog == 50 and ConnectionLimits().connections_max_idle_ms == 600_000
    with pytest.raises(InvalidConfigError, match=r"max.connections.per.ip='-1' must be a positive integer"):
        ConnectionLimits.from_properties({"max.connections.per.ip": "-1"})
    assert unused_keys({"max.connections": "5", "num.io.threads": "2", "log.dirs": "/x"}, "PLAINTEXT") == ["log.dirs"]


def test_connections_beyond_max_connections_per_ip_and_in_all_are_closed(store):
    for limits in (ConnectionLimits(max_connections_per_ip=3), ConnectionLimits(max_connections=3)):
        with SocketServer(store, "127.0.0.1", 0, limits=limits) as server:
            held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(3)]
            for sock in held:
                send(sock, ApiVersionsRequest[0]())
                assert receive(sock, ApiVersionsResponse, 0).error_code == 0
            extra = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            assert closed(extra)
            held.pop().close()
            deadline = time.monotonic() + 5
            while server.connections > 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert api_versions_work(server.port)  # a place is free again
            for sock in held:
                sock.close()


def test_idle_connections_are_closed_and_busy_ones_kept(store):
    with SocketServer(store, "127.0.0.1", 0, limits=ConnectionLimits(connections_max_idle_ms=1500)) as server:
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        busy = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        for i in range(8):
            send(busy, ApiVersionsRequest[0](), i)
            assert receive(busy, ApiVersionsResponse, 0).error_code == 0
            time.sleep(0.4)
        assert closed(idle, 0.5)
        send(busy, ApiVersionsRequest[0](), 99)
        assert receive(busy, ApiVersionsResponse, 0).error_code == 0
        busy.close()


def test_a_connection_that_does_not_authenticate_in_time_is_closed_even_while_it_trickles_bytes(store):
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'}
    limits = ConnectionLimits(authentication_timeout_ms=1500)
    with SocketServer(store, "127.0.0.1", 0, security=listener_security(props), limits=limits) as server:
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        trickling = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        trickling.sendall(struct.pack(">i", 400_000))  # a frame inside sasl.server.max.receive.size, never finished
        for _ in range(6):
            try:
                trickling.sendall(b"x" * 100)
            except OSError:
                break
            time.sleep(0.4)
        assert closed(silent, 3) and closed(trickling, 3)
        assert server.connections == 0


def test_many_idle_connections_hold_no_thread_each_and_are_all_served(store):
    before = threading.active_count()
    with SocketServer(store, "127.0.0.1", 0) as server:
        started = threading.active_count()
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(300)]
        for i, sock in enumerate(socks):
            send(sock, ApiVersionsRequest[0](), i)
        assert all(receive(sock, ApiVersionsResponse, 0).error_code == 0 for sock in socks)
        assert server.connections == 300
        assert threading.active_count() == started  # the network thread and the request threads, whatever comes
        assert started - before <= 1 + server.limits.num_io_threads + 1  # (+1: a registry heartbeat, if any)
        for sock in socks:
            sock.close()


def test_a_waiting_fetch_holds_no_request_thread_and_is_answered_when_records_come(store):
    """Kafka's fetch purgatory: more waiting fetches than request threads, each answered at its max_wait_ms when
    nothing comes, or as soon as a produce to this endpoint brings records."""
    store.create_topic("quiet", 1)
    with SocketServer(store, "127.0.0.1", 0, limits=ConnectionLimits(num_io_threads=2)) as server:
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(6)]
        t0 = time.monotonic()
        for sock in socks:
            send(sock, FetchRequest[4](replica_id=-1, max_wait_ms=1500, min_bytes=1, max_bytes=1 << 20,
                                       isolation_level=0, topics=[("quiet", [(0, 0, 1 << 20)])]))
        assert api_versions_work(server.port)  # not stuck behind the six waiting fetches
        answers = [receive(sock, FetchResponse, 4) for sock in socks]
        waited = time.monotonic() - t0
        assert 1.4 <= waited < 4 and all(not a.responses[0].partitions[0].records for a in answers)
        for sock in socks:  # now each waits up to 20 s, and a produce answers them at once
            send(sock, FetchRequest[4](replica_id=-1, max_wait_ms=20_000, min_bytes=1, max_bytes=1 << 20,
                                       isolation_level=0, topics=[("quiet", [(0, 0, 1 << 20)])]), 2)
        time.sleep(0.3)
        t1 = time.monotonic()
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{server.port}", enable_idempotence=False)
        producer.send("quiet", key=b"k", value=b"v").get(timeout=10)
        answers = [receive(sock, FetchResponse, 4) for sock in socks]
        assert time.monotonic() - t1 < 5 and all(a.responses[0].partitions[0].records for a in answers)
        producer.close()
        for sock in socks:
            sock.close()


def test_an_idle_consumer_long_polls_instead_of_spinning(store):
    """A kafka-python consumer at the end of an empty partition: the endpoint answers its fetches at fetch_max_wait_ms,
    so it sends two a second, not hundreds, and reads the partition once for each."""
    store.create_topic("idle", 1)
    with SocketServer(store, "127.0.0.1", 0) as server:
        calls = []
        try_fetch = server.apis.try_fetch
        server.apis.try_fetch = lambda request: (calls.append(1), try_fetch(request))[1]
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}", fetch_max_wait_ms=500,
                                 auto_offset_reset="earliest")
        consumer.assign([TopicPartition("idle", 0)])
        consumer.poll(timeout_ms=500)
        calls.clear()
        end = time.monotonic() + 3
        while time.monotonic() < end:
            consumer.poll(timeout_ms=200)
        consumer.close()
        # one read of the partition per Fetch, answered at its max wait: a waiting Fetch only looks for a new commit
        assert 3 <= len(calls) <= 9, len(calls)
