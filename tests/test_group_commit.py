"""Group commit of pipelined Produce requests (deltalog.server.group_commit through KafkaApis.handle_produces, and
the socket server reading a client's pipelined frames together): one Delta commit per partition for the plain record
sets, each request answered with its own offsets as if appended alone; a bad request fails alone; idempotent
batches keep their sequence checks; acks=0 gets no answer."""

from __future__ import annotations

import socket
import struct

from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from deltalog.server import protocol
from deltalog.server.kafka_apis import KafkaApis
from deltalog.server.socket_server import SocketServer


def batch(*records, producer=(-1, -1, -1)) -> bytes:
    pid, epoch, seq = producer
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq)
    for key, value in records:
        builder.append(timestamp=1234, key=key, value=value, headers=[])
    builder.close()
    return bytes(builder.buffer())


def request(parts: dict[tuple[str, int], bytes], acks: int = -1, correlation_id: int = 1):
    cls = ProduceRequest[9]
    topics: dict[str, list] = {}
    for (topic, partition), records in parts.items():
        topics.setdefault(topic, []).append(cls.TopicProduceData.PartitionProduceData(index=partition,
                                                                                        records=records))
    req = cls(transactional_id=None, acks=acks, timeout_ms=5000,
              topic_data=[cls.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()])
    req.with_header(correlation_id=correlation_id, client_id="raw")
    return bytes(req.encode(header=True, framed=True))


def parsed(frame: bytes):
    return protocol.parse_request(frame[4:])


def answers(responses) -> list:
    return [None if r is None else {(t.name, q.index): (q.error_code, q.base_offset) for t in r.responses
                                    for q in t.partition_responses} for r in responses]


def version(store, topic: str, partition: int) -> int:
    return store.log(topic, partition).table().version()


def values(store, topic: str, partition: int) -> list:
    return [(r.offset, r.value) for r in store.read(topic, partition)]


def test_pipelined_plain_record_sets_share_one_commit_per_partition_and_keep_their_offsets(store):
    store.create_topic("t", 2)
    apis = KafkaApis(store, ("127.0.0.1", 9092))
    before = [version(store, "t", 0), version(store, "t", 1)]
    got = apis.handle_produces([
        parsed(request({("t", 0): batch((b"a", b"1"), (b"b", b"2")), ("t", 1): batch((b"x", b"9"))})),
        parsed(request({("t", 0): batch((b"c", b"3"))})),
        parsed(request({("t", 0): batch((b"d", b"4"), (b"e", b"5")), ("t", 1): batch((b"y", b"8"))})),
    ])
    assert answers(got) == [{("t", 0): (0, 0), ("t", 1): (0, 0)}, {("t", 0): (0, 2)},
                            {("t", 0): (0, 3), ("t", 1): (0, 1)}]
    assert [version(store, "t", 0), version(store, "t", 1)] == [before[0] + 1, before[1] + 1]
    assert values(store, "t", 0) == [(0, b"1"), (1, b"2"), (2, b"3"), (3, b"4"), (4, b"5")]
    assert values(store, "t", 1) == [(0, b"9"), (1, b"8")]


def test_a_bad_request_in_a_group_fails_alone_and_the_others_land_in_order(store):
    store.create_topic("c", 1, config={"cleanup.policy": "compact"})
    apis = KafkaApis(store, ("127.0.0.1", 9092))
    corrupt = bytearray(batch((b"k", b"v")))
    corrupt[-1] ^= 0xFF
    got = apis.handle_produces([
        parsed(request({("c", 0): batch((b"a", b"1"))})),
        parsed(request({("c", 0): batch((None, b"keyless"))})),  # refused by the topic: compacted
        parsed(request({("c", 0): bytes(corrupt)})),  # refused by the decoder
        parsed(request({("c", 0): batch((b"b", b"2"))}, acks=0)),  # no answer, still written
        parsed(request({("c", 0): batch((b"c", b"3"))})),
        parsed(request({("nowhere", 0): batch((b"d", b"4"))})),
    ])
    assert answers(got) == [{("c", 0): (0, 0)}, {("c", 0): (protocol.INVALID_RECORD, -1)},
                            {("c", 0): (protocol.CORRUPT_MESSAGE, -1)}, None, {("c", 0): (0, 2)},
                            {("nowhere", 0): (protocol.UNKNOWN_TOPIC_OR_PARTITION, -1)}]
    assert values(store, "c", 0) == [(0, b"1"), (1, b"2"), (2, b"3")]


def test_idempotent_batches_in_a_group_keep_their_sequence_checks(store):
    store.create_topic("i", 1)
    apis = KafkaApis(store, ("127.0.0.1", 9092))
    pid = 4242
    first = batch((b"a", b"1"), (b"b", b"2"), producer=(pid, 0, 0))
    got = apis.handle_produces([
        parsed(request({("i", 0): batch((b"p", b"plain"))})),
        parsed(request({("i", 0): first})),
        parsed(request({("i", 0): first})),  # the retry: its original offsets, not written again
        parsed(request({("i", 0): batch((b"c", b"3"), producer=(pid, 0, 5))})),  # 2 is next: out of order
        parsed(request({("i", 0): batch((b"c", b"3"), producer=(pid, 0, 2))})),
        parsed(request({("i", 0): batch((b"q", b"plain2"))})),
    ])
    assert answers(got) == [{("i", 0): (0, 0)}, {("i", 0): (0, 1)}, {("i", 0): (0, 1)},
                            {("i", 0): (protocol.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)}, {("i", 0): (0, 3)},
                            {("i", 0): (0, 4)}]
    assert values(store, "i", 0) == [(0, b"plain"), (1, b"1"), (2, b"2"), (3, b"3"), (4, b"plain2")]


def test_frames_sent_together_are_answered_in_order_on_their_connection(store):
    store.create_topic("w", 1)
    frames = [request({("w", 0): batch(*[(b"k%d" % j, b"v%d" % j) for j in range(i + 1)])}, correlation_id=i)
              for i in range(6)]
    with SocketServer(store, "127.0.0.1", 0) as server, socket.create_connection(
            ("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"".join(frames))  # pipelined: none waits for an answer
        got = []
        for _ in frames:
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            resp = ProduceResponse[9].decode(sock.recv(size, socket.MSG_WAITALL), version=9, header=True)
            got.append((resp.header.correlation_id, resp.responses[0].partition_responses[0].base_offset))
    assert got == [(i, i * (i + 1) // 2) for i in range(6)]
    assert len(store.read("w", 0)) == 21


def test_connections_producing_to_one_partition_at_once_each_get_their_own_contiguous_offsets(store):
    import threading

    store.create_topic("m", 1, config={"cleanup.policy": "compact"})
    apis = KafkaApis(store, ("127.0.0.1", 9092))
    threads, rounds = 6, 5
    barrier = threading.Barrier(threads)
    got: dict[int, list] = {}

    def connection(c: int) -> None:
        barrier.wait()
        answered = []
        for r in range(rounds):
            records = [(b"k", b"%d-%d-%d" % (c, r, i)) for i in range(c + 1)]
            if c == 2 and r == 1:
                records.append((None, b"keyless"))  # refused: this request alone
            answered.append((records, answers(apis.handle_produces([parsed(request({("m", 0): batch(*records)}))]))))
        got[c] = answered

    workers = [threading.Thread(target=connection, args=(c,)) for c in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    stored = {r.offset: r.value for r in store.read("m", 0)}
    landed = 0
    for c, answered in got.items():
        for records, [answer] in answered:
            code, base = answer[("m", 0)]
            if c == 2 and records[-1][0] is None:
                assert (code, base) == (protocol.INVALID_RECORD, -1)
                continue
            assert code == 0 and [stored[base + i] for i in range(len(records))] == [v for _, v in records]
            landed += len(records)
    assert len(got) == threads and sorted(stored) == list(range(landed))
