"""Reads over many partitions from per-process partition state (log/concurrent_reads.py, PartitionLog.table()'s
check for a moved log, LogManager.current_logs): what is held is reused only while the Delta log has not moved, a
moved log still goes through the check of other engines' commits, and a topic deleted and created again by another
process is not answered from the old topic's logs. The endpoint's ListOffsets and consumer-group lag read through
them."""

from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable
from kafka import KafkaConsumer, TopicPartition

from deltalog import Record, Store
from deltalog.errors import ForeignCommitError, UnknownTopicOrPartitionError
from deltalog.log import concurrent_reads
from deltalog.server.socket_server import SocketServer
from deltalog.structs import OffsetAndMetadata


def records(n: int, tag: str = "v") -> list[Record]:
    return [Record(key=b"k%d" % i, value=tag.encode()) for i in range(n)]


@pytest.fixture
def endpoint(store):
    with SocketServer(store, "127.0.0.1", 0) as server:
        yield server


def test_an_unchanged_log_is_answered_from_what_was_read_and_a_moved_one_is_read_again(store):
    store.create_topic("t", 1)
    store.append("t", 0, records(3))
    log = store.log("t", 0)
    first = log.head()
    assert log.head() is first and log.snapshot() is log.snapshot()  # nothing moved: the same objects
    other = Store(store.root, clock=store.clock)  # another process's append
    other.append("t", 0, records(2))
    assert log.head().log_end_offset == 5
    assert log.snapshot().log_end_offset == 5


def test_another_engines_commit_is_still_refused_after_cached_reads(store):
    store.create_topic("t", 1)
    store.append("t", 0, records(4))
    log = store.log("t", 0)
    assert log.head().log_end_offset == 4
    DeltaTable(log.uri).delete("offset = 1")  # another engine changes records
    with pytest.raises(ForeignCommitError):
        log.head()
    with pytest.raises(ForeignCommitError):  # still refused: nothing moved since, but the commit is pending
        log.snapshot()
    [result] = concurrent_reads.read_each([log], lambda lg: lg.head(), threads=1)
    assert isinstance(result, ForeignCommitError)  # a partition's error is its own, as in a Kafka response


def test_read_each_keeps_order_and_reads_each_log_in_one_thread(store):
    store.create_topic("many", 24)
    for p in range(24):
        store.append("many", p, records(p))
    logs = store.logs("many")
    seen: dict[int, set[int]] = {}

    def read(lg):
        seen.setdefault(id(lg), set()).add(threading.get_ident())
        return lg.head().log_end_offset

    assert concurrent_reads.read_each(logs + logs[:3], read, threads=5) == list(range(24)) + [0, 1, 2]
    assert all(len(threads) == 1 for threads in seen.values())
    with pytest.raises(ZeroDivisionError):  # anything but a partition's DeltalogError is raised
        concurrent_reads.read_each(logs, lambda lg: 1 // 0, threads=4)


def test_current_logs_drops_the_logs_of_a_topic_another_process_created_again(store, clock):
    store.create_topic("t", 2)
    store.append("t", 0, records(7))
    first_id, logs = store.log_manager.current_logs("t")
    assert logs[0].head().log_end_offset == 7
    other = Store(store.root, clock=clock)
    other.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.log_manager.current_logs("t")
    other.create_topic("t", 2)
    other.append("t", 0, records(2))
    new_id, again = store.log_manager.current_logs("t")
    assert new_id != first_id and again[0] is not logs[0]
    assert again[0].head().log_end_offset == 2


def test_a_later_list_offsets_sees_an_append_at_once(store, endpoint, clock):
    store.create_topic("fleet", 40)
    for p in range(0, 40, 3):
        store.append("fleet", p, records(2))
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{endpoint.port}")
    tps = [TopicPartition("fleet", p) for p in range(40)]
    try:
        ends = consumer.end_offsets(tps)
        assert ends == {tp: 2 if tp.partition % 3 == 0 else 0 for tp in tps}
        Store(store.root, clock=clock).append("fleet", 7, records(5))  # another process, between two requests
        store.append("fleet", 9, records(1))
        ends = consumer.end_offsets(tps)
        assert ends[TopicPartition("fleet", 7)] == 5 and ends[TopicPartition("fleet", 9)] == 3
        assert sum(ends.values()) == 14 * 2 + 5 + 1
        assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        store.delete_records("fleet", 9, 2)
        assert consumer.beginning_offsets([TopicPartition("fleet", 9)]) == {TopicPartition("fleet", 9): 2}
        other = Store(store.root, clock=clock)  # the topic deleted and created again elsewhere: the new one's ends
        other.delete_topic("fleet")
        other.create_topic("fleet", 40)
        other.append("fleet", 9, records(1))
        ends = consumer.end_offsets(tps)
        assert ends[TopicPartition("fleet", 9)] == 1 and sum(ends.values()) == 1
    finally:
        consumer.close()


def test_list_offsets_answers_another_engines_change_with_the_partitions_error(store, endpoint):
    store.create_topic("t", 2)
    store.append("t", 0, records(3))
    store.append("t", 1, records(3))
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{endpoint.port}")
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    try:
        assert consumer.end_offsets(tps) == {tps[0]: 3, tps[1]: 3}
        DeltaTable(store.log("t", 1).uri).delete("offset = 0")
        with pytest.raises(Exception):  # noqa: B017,PT011 - kafka-python raises the partition's error code
            consumer.end_offsets(tps, timeout_ms=10_000)
        assert consumer.end_offsets(tps[:1]) == {tps[0]: 3}
    finally:
        consumer.close()


def test_consumer_group_lag_follows_appends_in_one_process(store, clock):
    store.create_topic("t", 6)
    for p in range(6):
        store.append("t", p, records(4))
    store.offsets_topic.commit("g", {TopicPartition("t", p): OffsetAndMetadata(1, "") for p in range(6)},
                               clock.now_ms())
    assert [r.lag for r in store.describe_consumer_group("g")] == [3] * 6
    Store(store.root, clock=clock).append("t", 2, records(2))
    rows = {r.partition: r for r in store.describe_consumer_group("g")}
    assert rows[2].log_end_offset == 6 and rows[2].lag == 5 and rows[0].lag == 3


def test_metadata_carries_a_recreated_topics_new_id_and_never_creates_an_internal_name(store, endpoint, clock):
    import socket
    import uuid

    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from deltalog.server import protocol

    def metadata(names):
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=10) as sock:
            request = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=n)
                                                  for n in names], allow_auto_topic_creation=True,
                                          include_topic_authorized_operations=False)
            request.with_header(correlation_id=1, client_id="raw")
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
            return {t.name: t for t in MetadataResponse.decode(sock.recv(size, socket.MSG_WAITALL), version=12,
                                                                header=True).topics}

    store.create_topic("t", 3)
    first = metadata(["t", "__not_made"])
    assert first["t"].topic_id == uuid.UUID(hex=store.log_manager.topic_id("t"))
    assert len(first["t"].partitions) == 3
    assert first["__not_made"].error_code == protocol.UNKNOWN_TOPIC_OR_PARTITION
    assert not store.topic_exists("__not_made")
    other = Store(store.root, clock=clock)
    other.delete_topic("t")
    other.create_topic("t", 2)
    again = metadata(["t"])["t"]
    assert again.topic_id != first["t"].topic_id and len(again.partitions) == 2


def test_reads_over_many_partitions_go_background_threads_at_a_time(tmp_path, clock, monkeypatch):
    """The consumer group's lag and the endpoint's ListOffsets read the partitions' heads at most the store's
    ``background.threads`` at a time (Kafka's pool for the broker's log tasks), not a fixed number of their own."""
    from deltalog.log.partition_log import PartitionLog

    store = Store(tmp_path / "store", clock=clock, config={"background.threads": 2})
    store.create_topic("t", 8)
    for p in range(8):
        store.append("t", p, records(2))
    store.offsets_topic.commit("g", {TopicPartition("t", p): OffsetAndMetadata(1, "") for p in range(8)},
                               clock.now_ms())
    lock, in_flight, most = threading.Lock(), [0], [0]
    head = PartitionLog.head

    def counted(self, *args, **kwargs):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        try:
            threading.Event().wait(0.05)  # long enough for every thread the pool has to be in a read at once
            return head(self, *args, **kwargs)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(PartitionLog, "head", counted)
    assert [r.lag for r in store.describe_consumer_group("g")] == [1] * 8
    assert most[0] == 2
    most[0] = 0
    with SocketServer(store, "127.0.0.1", 0) as server:
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}")
        try:
            tps = [TopicPartition("t", p) for p in range(8)]
            assert consumer.end_offsets(tps) == {tp: 2 for tp in tps}
        finally:
            consumer.close()
    assert most[0] == 2


def test_a_kept_handle_reads_the_head_after_delta_log_retention_removed_the_commits_it_listed(tmp_path, clock):
    """A handle this process kept while the log did not move names commit files Delta's log retention may remove
    (a checkpoint then holds their actions). Where app_txns cannot answer from the commits (what it read is older
    than the removed ones), the head is asked of delta-rs: it lists the log again once, as ``snapshot()`` does; a log
    whose commits are gone with no checkpoint holding them still fails, naming the missing file."""
    from pathlib import Path

    from deltalog.errors import CorruptLogError

    first = Store(tmp_path / "s", clock=clock)
    first.create_topic("t", 2)
    for p in range(2):
        first.append("t", p, records(1))
        assert first.log("t", p).head().log_end_offset == 1  # this process has read the positions as of then
    other = Store(tmp_path / "s", clock=clock)  # more commits, by another handle
    for p in range(2):
        other.append("t", p, records(2))
        other.append("t", p, records(3))
    kept = [Store(tmp_path / "s", clock=clock).log("t", p) for p in range(2)]
    for log in kept:
        assert log.table().version() == 3  # the handle, kept; its head not read yet
    DeltaTable(kept[0].uri).create_checkpoint()
    for log in kept:
        for commit in sorted((Path(log.uri) / "_delta_log").glob("*.json"))[:-1]:
            commit.unlink()  # as Delta's log retention removes them (partition 1 has no checkpoint: damaged)
    assert kept[0].head().log_end_offset == 6
    with pytest.raises(CorruptLogError, match="00000000000000000002.json"):
        kept[1].head()
