"""aiokafka (an independent asyncio Kafka client, its own protocol code) against the endpoint: a producer and a
consumer group, an idempotent and a transactional producer with a read_committed consumer that ends at the trailing
COMMIT marker, and a group committed below the log start reset by auto_offset_reset."""

from __future__ import annotations

import asyncio

import pytest

aiokafka = pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402

from deltalog import Record  # noqa: E402
from deltalog.server.socket_server import SocketServer  # noqa: E402


async def _consume(bootstrap: str, topic: str, n: int, **conf) -> tuple[list, AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **conf)
    await consumer.start()
    got: list = []
    try:
        async with asyncio.timeout(30):
            while len(got) < n:
                batches = await consumer.getmany(timeout_ms=500)
                got.extend(m for ms in batches.values() for m in ms)
    except TimeoutError:
        pass
    return got, consumer


def test_aiokafka_produces_consumes_commits_in_a_group_and_the_next_member_resumes(store):
    store.create_topic("aio", 2)

    async def run(bootstrap: str) -> tuple[list, dict]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
        await producer.start()
        for i in range(10):
            await producer.send_and_wait("aio", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        await producer.stop()
        got, consumer = await _consume(bootstrap, "aio", 10, group_id="aio-group", enable_auto_commit=False)
        await consumer.commit()
        committed = {p: await consumer.committed(TopicPartition("aio", p)) for p in (0, 1)}
        await consumer.stop()  # LeaveGroup
        store.produce("aio", [Record(key=b"n%d" % i, value=b"new") for i in range(4)])
        resumed, consumer = await _consume(bootstrap, "aio", 4, group_id="aio-group", enable_auto_commit=False)
        await consumer.stop()
        return got, committed, resumed

    with SocketServer(store, "127.0.0.1", 0) as server:
        got, committed, resumed = asyncio.run(run(f"127.0.0.1:{server.port}"))
    assert sorted((m.partition, m.offset, m.value) for m in got) == sorted(
        (i % 2, i // 2, b"v%d" % i) for i in range(10))
    assert committed == {0: 5, 1: 5}
    assert [m.value for m in resumed] == [b"new"] * 4  # the next member starts at the group's committed offsets


def test_aiokafka_transaction_read_committed_reaches_the_end_past_the_marker(store):
    store.create_topic("aiotx", 1)

    async def run(bootstrap: str) -> tuple[list, int, int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-txn")
        await producer.start()
        async with producer.transaction():
            for i in range(3):
                await producer.send("aiotx", key=b"t%d" % i, value=b"tv%d" % i, partition=0)
        await producer.begin_transaction()  # aborted: never seen at read_committed
        await producer.send_and_wait("aiotx", key=b"x", value=b"aborted", partition=0)
        await producer.abort_transaction()
        await producer.stop()
        got, consumer = await _consume(bootstrap, "aiotx", 3, isolation_level="read_committed")
        await consumer.getmany(timeout_ms=1000)  # the control batches after the records
        tp = TopicPartition("aiotx", 0)
        position, end = await consumer.position(tp), (await consumer.end_offsets([tp]))[tp]
        await consumer.stop()
        return got, position, end

    with SocketServer(store, "127.0.0.1", 0) as server:
        got, position, end = asyncio.run(run(f"127.0.0.1:{server.port}"))
    assert [(m.offset, m.value) for m in got] == [(0, b"tv0"), (1, b"tv1"), (2, b"tv2")]
    assert position == end == store.log("aiotx", 0).head().log_end_offset


def test_aiokafka_group_below_the_log_start_resets(store):
    store.create_topic("aioold", 1)
    store.append("aioold", 0, [Record(b"o%d" % i, b"ov%d" % i) for i in range(5)])
    store.offsets_topic.commit("aio-old", {("aioold", 0): 1}, store.clock.now_ms())
    store.delete_records("aioold", 0, 3)

    async def run(bootstrap: str) -> list:
        got, consumer = await _consume(bootstrap, "aioold", 2, group_id="aio-old")
        await consumer.stop()
        return got

    with SocketServer(store, "127.0.0.1", 0) as server:
        got = asyncio.run(run(f"127.0.0.1:{server.port}"))
    assert [(m.offset, m.value) for m in got] == [(3, b"ov3"), (4, b"ov4")]
