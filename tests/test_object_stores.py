"""The core of deltalog on every kind of storage: a local directory and moto's S3 server (``store_location``),
and Azurite for a smaller set (``store_location_3``).

Everything goes through :class:`deltalog.storage.Storage` and delta-rs with the store's storage options:
topics (markers with conditional puts and compare-and-swap, no renames), appends and reads, retention and
DeleteRecords, VACUUM of replaced files and orphans, leases raced by many threads, uncleanable marks, the
metrics table, the store marker that tells a store from an empty location, and locations that climb out
of the store.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from deltalake import DeltaTable

from deltalog import ManualClock, Record, Store
from deltalog.cleaner.metrics import append_metrics, collect, metrics_table_uri
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.errors import (
    InvalidArgumentError,
    InvalidTopicError,
    NoStoreError,
    OffsetOutOfRangeError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from deltalog.log.lease import LeaseManager
from deltalog.log.log_manager import TOPIC_MARKER, TOPICS_DIR
from deltalog.log.partition_log import PartitionLog
from deltalog.log.vacuum import ORPHAN_MIN_AGE_MS
from deltalog.storage import Storage, join


def records(n: int, prefix: str = "k", value: str = "v") -> list[Record]:
    return [Record(key=f"{prefix}{i}", value=f"{value}{i}") for i in range(n)]


def all_keys(storage: Storage) -> list[str]:
    return [storage.key(f.location) for f in storage.list_files(storage.root)]


# -- topics -------------------------------------------------------------------------------------------


def test_topics_create_list_describe_alter_delete_and_recreate(store_location_3, clock):
    uri, options = store_location_3
    store = Store(uri, storage_options=options, clock=clock)
    assert store.list_topics() == []
    store.create_topic("prices", 3, config={"cleanup.policy": "compact", "segment.ms": "1000"})
    store.create_topic("events", 1)
    assert store.list_topics() == ["events", "prices"]
    assert store.partitions("prices") == [0, 1, 2]
    with pytest.raises(TopicExistsError):
        store.create_topic("prices", 1)
    old_id = store.log_manager.topic_id("prices")
    assert old_id == store.log("prices", 2).topic_id()  # marker and table properties agree (KIP-516)

    description = store.describe("prices")
    assert [p.partition for p in description] == [0, 1, 2]
    assert description.config.compact and description.config.segment_ms == 1000
    altered = store.alter_topic_config("prices", {"min.cleanable.dirty.ratio": "0.1"})
    assert altered.min_cleanable_dirty_ratio == 0.1
    reopened = Store(uri, storage_options=options, clock=clock)  # another process sees the same store
    assert reopened.topic_config("prices").min_cleanable_dirty_ratio == 0.1

    store.append("prices", 1, records(3))
    store.delete_topic("prices")
    assert store.list_topics() == ["events"]
    assert not reopened.topic_exists("prices")
    with pytest.raises(UnknownTopicOrPartitionError):
        reopened.read("prices", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("prices")
    assert not [k for k in all_keys(store.storage) if k.startswith(f"{TOPICS_DIR}/prices/")]  # nothing left

    store.create_topic("prices", 1)  # the same name again: a new topic, empty, with a new id
    assert store.read("prices", 0) == []
    assert store.log_manager.topic_id("prices") not in (None, old_id)


def test_concurrent_creators_of_one_topic_exactly_one_wins(store_location_3, clock):
    uri, options = store_location_3
    stores = [Store(uri, storage_options=options, clock=clock) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def create(store: Store) -> None:
        barrier.wait()
        try:
            store.create_topic("contested", 2)
            outcomes.append("created")
        except TopicExistsError:
            outcomes.append("exists")

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes) == ["created"] + ["exists"] * (len(stores) - 1)
    assert stores[0].partitions("contested") == [0, 1]
    assert stores[3].append("contested", 1, records(2)) == [0, 1]


def _dead_owner() -> str:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return f"{socket.gethostname()}:{int(proc.stdout)}:gone"


@pytest.mark.subprocess
def test_a_topic_half_made_by_a_dead_process_is_invisible_then_taken_over(store_location, clock):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=clock)
    storage = store.storage
    marker = storage.location(TOPICS_DIR, "orphaned", TOPIC_MARKER)
    storage.create_json(marker, {"state": "creating", "topic_id": "old", "partitions": 2, "owner": _dead_owner(),
                                 "updated_ms": int(time.time() * 1000)})
    leftover = storage.location(TOPICS_DIR, "orphaned", "0", "_delta_log", "00000000000000000000.json")
    storage.write_bytes(leftover, b"{}")
    assert store.list_topics() == [] and not store.topic_exists("orphaned")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.partitions("orphaned")

    store.create_topic("orphaned", 1)
    assert store.partitions("orphaned") == [0]
    assert store.append("orphaned", 0, records(1)) == [0]
    assert store.log_manager.topic_id("orphaned") != "old"

    # A delete that died half way: the next delete finishes it.
    storage.create_json(storage.location(TOPICS_DIR, "half-deleted", TOPIC_MARKER), {
        "state": "deleting", "topic_id": "x", "partitions": 1, "owner": _dead_owner(), "updated_ms": 0})
    storage.write_bytes(storage.location(TOPICS_DIR, "half-deleted", "0", "left.parquet"), b"x")
    store.delete_topic("half-deleted")
    assert not [k for k in all_keys(storage) if k.startswith(f"{TOPICS_DIR}/half-deleted/")]


def test_a_topic_being_created_or_deleted_by_a_live_process_is_busy(store_location, clock):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=clock)
    live = f"{socket.gethostname()}:{os.getpid()}:other-store"  # this process: alive
    for state, words in (("creating", "being created"), ("deleting", "marked for deletion")):
        topic = f"busy-{state}"
        store.storage.create_json(store.storage.location(TOPICS_DIR, topic, TOPIC_MARKER), {
            "state": state, "topic_id": "x", "partitions": 1, "owner": live, "updated_ms": int(time.time() * 1000)})
        with pytest.raises(TopicExistsError, match=words):
            store.create_topic(topic, 1)
        with pytest.raises(UnknownTopicOrPartitionError):
            store.delete_topic(topic)
        assert topic not in store.list_topics()


def test_a_failed_create_leaves_no_topic(store_location, clock):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=clock)
    # Junk where the second partition's table goes makes creating it fail: on a disk a file where its log
    # directory goes (a table's first commit there would be a topic made before markers), on S3 a table there.
    junk = ("1", "_delta_log") if store.storage.local else ("1", "_delta_log", "00000000000000000000.json")
    store.storage.write_bytes(store.storage.location(TOPICS_DIR, "t", *junk), b'{"commitInfo":{}}\n')
    with pytest.raises(Exception):  # noqa: B017 - delta-rs's own error for an existing table
        store.create_topic("t", 2)
    assert store.list_topics() == []
    assert not [k for k in all_keys(store.storage) if k.startswith(f"{TOPICS_DIR}/t/")]
    store.create_topic("t", 2)
    assert store.partitions("t") == [0, 1]


# -- producing and consuming ----------------------------------------------------------------------------


def test_append_read_roll(store_location_3, clock):
    uri, options = store_location_3
    store = Store(uri, storage_options=options, clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    assert store.append("t", 0, records(3)) == [0, 1, 2]
    assert store.roll("t", 0) == 3
    assert store.append("t", 0, [Record(key="k0", value=None)]) == [3]
    got = Store(uri, storage_options=options).read("t", 0, "earliest")
    assert [(r.offset, r.key, r.value) for r in got] == [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (2, b"k2", b"v2"),
                                                         (3, b"k0", None)]
    assert [r.offset for r in store.read("t", 0, 2, max_records=1)] == [2]
    segments = store.describe("t")[0].segments
    assert [(s.base_offset, s.end_offset) for s in segments] == [(0, 3), (3, 4)]


def test_retention_and_delete_records(any_store, clock):
    store = any_store
    store.create_topic("t", 1, config={"cleanup.policy": "delete", "retention.ms": "1000"})
    for i in range(3):
        store.append("t", 0, records(2, prefix=f"r{i}-"))
        store.roll("t", 0)
        clock.advance(10)
    store.append("t", 0, records(1, prefix="active"))
    result = store.delete_records("t", 0, 2)
    assert result.low_watermark == 2 and result.files_deleted == 1
    with pytest.raises(OffsetOutOfRangeError):
        store.read("t", 0, 1)
    clock.advance(2000)
    [retained] = store.delete_old_segments("t")
    assert [s.base_offset for s in retained.segments] == [2, 4]
    assert retained.log_start_offset == 6
    assert [r.offset for r in store.read("t", 0, "earliest")] == [6]


def test_vacuum_removes_replaced_files_and_orphans_after_their_delay(store_location, tmp_path):
    uri, options = store_location
    clock = ManualClock(int(time.time() * 1000))  # orphans are aged by their modification time
    store = Store(uri, storage_options=options, clock=clock)
    store.create_topic("t", 1, config={"file.delete.delay.ms": "1000"})
    store.append("t", 0, records(2))
    store.roll("t", 0)
    store.append("t", 0, records(2, prefix="b"))
    log = store.log("t", 0)
    replaced = log.snapshot().files[0].path
    store.delete_records("t", 0, 2)
    stray = join(log.uri, "stray.parquet")  # e.g. an append that lost its race and could not clean up
    store.storage.write_bytes(stray, b"not even parquet")
    died_ms = clock.now_ms()
    dead_pass = join(log.uri, f"cleaned-{died_ms}-deadbeef", "0-2.parquet")  # a pass that died
    store.storage.write_bytes(dead_pass, b"x")

    [dry] = store.vacuum()
    assert dry.dry_run and dry.files == () and dry.files_waiting == 3
    clock.advance(1000)
    [first] = store.vacuum(dry_run=False)
    assert first.files == (replaced,)  # its delay is over; the orphans wait at least ORPHAN_MIN_AGE_MS
    assert not store.storage.exists(join(log.uri, replaced))
    clock.advance(ORPHAN_MIN_AGE_MS + 60_000)  # past the orphans' age, whatever time this test took
    [second] = store.vacuum(dry_run=False)
    assert sorted(second.files) == [f"cleaned-{died_ms}-deadbeef/0-2.parquet", "stray.parquet"]
    assert [r.offset for r in store.read("t", 0, "earliest")] == [2, 3]
    live = {f.path for f in log.snapshot().files}
    on_storage = {store.storage.key(f.location)[len(store.storage.key(log.uri)) + 1:]
                  for f in store.storage.list_files(log.uri)}
    assert {p for p in on_storage if not p.startswith("_delta_log/")} == live


# -- leases -----------------------------------------------------------------------------------------------


def test_many_threads_racing_for_one_lease_exactly_one_wins(store_location_3, clock):
    uri, options = store_location_3
    storage = Store(uri, storage_options=options, clock=clock).storage
    managers = [LeaseManager(Storage(uri, options), clock, owner=f"owner-{i}") for i in range(8)]
    for partition in range(3):
        barrier = threading.Barrier(len(managers))
        won: list[str] = []

        def race(m: LeaseManager, p: int, barrier: threading.Barrier, won: list[str]) -> None:
            barrier.wait()
            if m.acquire("t", p, "clean") is not None:
                won.append(m.owner)

        threads = [threading.Thread(target=race, args=(m, partition, barrier, won)) for m in managers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(won) == 1, won
        assert managers[0].holder("t", partition).owner == won[0]
    lease = managers[1].acquire("u", 0, "vacuum")
    assert lease is not None and managers[2].acquire("u", 0, "clean") is None
    lease.release()
    assert managers[2].acquire("u", 0, "clean") is not None
    assert all(k.startswith("_deltalog/") for k in all_keys(storage))


# -- the cleaner's state ------------------------------------------------------------------------------------


def test_uncleanable_marks(any_store, clock):
    store = any_store
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    marks = UncleanablePartitions(store.storage)
    marks.mark("t", 1, OSError("bad file"), clock.now_ms(), topic_id=store.log_manager.topic_id("t"))
    again = UncleanablePartitions(Storage(store.root, store.storage.options))  # another process
    assert [(m.topic, m.partition, m.error_type) for m in again.marks()] == [("t", 1, "OSError")]
    assert store.describe("t")[1].uncleanable_reason == "OSError: bad file"
    assert again.reset("t", 1)[0].partition == 1 and marks.marks() == []
    marks.mark("t", 0, ValueError("x"), clock.now_ms())
    store.delete_topic("t")
    assert marks.marks() == []  # a deleted topic's marks go with it


def test_metrics_table(any_store, clock):
    store = any_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, records(4))
    for _ in range(2):
        append_metrics(store.log_manager, collect(store.log_manager))
    table = DeltaTable(metrics_table_uri(store.log_manager), storage_options=store.storage.delta_options)
    rows = table.to_pyarrow_table().to_pylist()
    assert sorted(r["scope"] for r in rows) == ["partition", "partition", "store", "store"]
    assert {r["log_end_offset"] for r in rows if r["scope"] == "partition"} == {4}


# -- what a store is, and what it is not ------------------------------------------------------------------


def test_an_empty_location_is_not_a_store_until_one_is_made(store_location):
    uri, options = store_location
    with pytest.raises(NoStoreError):
        Store(uri, storage_options=options, create=False)
    assert Storage(uri, options).list_files(Storage(uri, options).root) == []  # nothing was written
    Store(uri, storage_options=options)
    assert Store(uri, storage_options=options, create=False).list_topics() == []
    assert Storage(uri, options).read_json(join(Storage(uri, options).root, "_deltalog", "store.json"))["format"] == 1


def test_storage_options_reach_delta_rs_and_the_object_store(s3_server, s3_store_uri, monkeypatch):
    """No environment at all: the explicit options alone carry the endpoint and the credentials."""
    for name in s3_server.env:
        monkeypatch.delenv(name, raising=False)
    store = Store(s3_store_uri, storage_options=s3_server.storage_options)
    store.create_topic("t", 1)
    assert store.append("t", 0, records(2)) == [0, 1]
    assert Store(s3_store_uri, storage_options=s3_server.storage_options, create=False).read("t", 0)[1].offset == 1


def test_the_standard_environment_variables_are_enough(s3_server, s3_store_uri, monkeypatch):
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    store = Store(s3_store_uri)
    store.create_topic("t", 1)
    assert store.append("t", 0, records(1)) == [0]
    assert Store(s3_store_uri, create=False).read("t", 0)[0].key == b"k0"


def test_a_storage_that_ignores_conditional_puts_is_refused(tmp_path):
    """What an S3 clone that ignores If-None-Match does to a create: overwrite. The probe catches it."""
    from deltalog.storage.local import LocalStorage

    class Overwriting(LocalStorage):
        def create(self, location: str, data: bytes) -> str | None:
            self.write_bytes(location, data)
            return "etag"

    with pytest.raises(StorageError, match="does not honour conditional puts"):
        Overwriting(tmp_path).check_conditional_put(str(tmp_path))
    assert os.listdir(tmp_path) == []  # the probe cleans up
    Storage(tmp_path).check_conditional_put(str(tmp_path))  # a local disk honours them


def test_compare_and_swap(store_location_3):
    uri, options = store_location_3
    storage = Storage(uri, options)
    loc = storage.location("_deltalog", "cas.json")
    assert storage.replace(loc, b"x", '"nope"') is None and not storage.exists(loc)
    etag = storage.create(loc, b"one")
    assert etag is not None and storage.create(loc, b"two") is None
    found = storage.read_versioned(loc)
    assert found.data == b"one" and found.etag == etag
    newer = storage.replace(loc, b"three", etag)
    assert newer is not None and newer != etag
    assert storage.replace(loc, b"four", etag) is None  # a stale etag: refused
    assert storage.read_bytes(loc) == b"three"
    # Many swappers from one version: exactly one wins.
    barrier = threading.Barrier(6)
    wins: list[int] = []

    def swap(i: int) -> None:
        barrier.wait()
        if storage.replace(loc, b"winner %d" % i, newer) is not None:
            wins.append(i)

    threads = [threading.Thread(target=swap, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(wins) == 1 and storage.read_bytes(loc) == b"winner %d" % wins[0]


@pytest.mark.parametrize("hostile", ["../escape.json", "topics/../../escape.json", "a/./b.json", "a//b.json"])
def test_no_location_outside_the_store_is_ever_written(store_location, hostile):
    uri, options = store_location
    storage = Storage(uri, options)
    target = f"{storage.root}/{hostile}" if not storage.local else os.path.join(storage.root, hostile)
    before_parent = _parent_listing(storage)
    if storage.local and os.path.abspath(target).startswith(storage.root + os.sep):
        return  # 'a/./b' and 'a//b' are the same local file as 'a/b', inside the store
    with pytest.raises(InvalidArgumentError):
        storage.write_bytes(target, b"x")
    with pytest.raises(InvalidArgumentError):
        storage.create(target, b"x")
    with pytest.raises(InvalidArgumentError):
        storage.delete(target)
    with pytest.raises(InvalidArgumentError):
        PartitionLog(storage, target, "t", 0)
    assert _parent_listing(storage) == before_parent


def _parent_listing(storage: Storage) -> list[str]:
    if storage.local:
        parent = os.path.dirname(storage.root)
        return sorted(os.listdir(parent)) if os.path.isdir(parent) else []
    bucket = storage.root.split("/", 3)
    return [f.location for f in Storage("/".join(bucket[:3]), storage.options).list_files("/".join(bucket[:3]))
            if not f.location.startswith(storage.root + "/")]


@pytest.mark.parametrize("name", ["..", ".", "../etc", "a/b", "a\\b", "x" * 250])
def test_a_topic_name_cannot_reach_outside_its_directory(any_store, name):
    with pytest.raises(InvalidTopicError):
        any_store.create_topic(name, 1)
    assert any_store.list_topics() == []
    assert all(k.startswith("_deltalog/") or k == TOPICS_DIR for k in all_keys(any_store.storage))


def test_a_store_root_other_than_a_path_or_an_object_store_uri_is_refused():
    for bad in ("http://example.com/store", "hdfs://nn/store", "s3://", "s3://bucket/../x", ""):
        with pytest.raises(InvalidArgumentError):
            Store(bad)


def test_json_state_roundtrip_through_storage(store_location):
    uri, options = store_location
    storage = Storage(uri, options)
    loc = storage.location("_deltalog", "cleaner", "last-run.json")
    assert storage.read_json(loc) is None
    storage.write_json(loc, {"a": 1})
    storage.write_json(loc, {"a": 2})
    assert json.loads(storage.read_bytes(loc)) == {"a": 2}
    assert [storage.key(f.location) for f in storage.list_files(storage.location("_deltalog"))] == [
        "_deltalog/cleaner/last-run.json"]
    assert storage.list_dirs(storage.location("_deltalog")) == ["cleaner"]
    storage.delete_tree(storage.location("_deltalog"))
    assert storage.list_files(storage.root) == []


def test_a_local_topic_made_before_markers_still_works(tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("old", 2)
    store.append("old", 1, records(2))
    os.remove(os.path.join(store.root, TOPICS_DIR, "old", TOPIC_MARKER))  # as an older deltalog left it
    again = Store(tmp_path / "store", clock=clock)
    assert again.list_topics() == ["old"] and again.partitions("old") == [0, 1]
    assert [r.offset for r in again.read("old", 1)] == [0, 1]
    with pytest.raises(TopicExistsError):
        again.create_topic("old", 1)
    again.delete_topic("old")
    assert again.list_topics() == [] and not os.path.exists(os.path.join(store.root, TOPICS_DIR, "old"))


@pytest.mark.parametrize("extra", [{}, {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}])
def test_delta_rs_on_s3_refuses_a_second_commit_of_one_version(s3_server, s3_store_uri, extra):
    """What makes offsets atomic on S3 without DynamoDB: delta-rs 1.6 writes a commit file with a conditional
    put (``If-None-Match: *``), so of two commits planned on one version the second fails; the option that
    once meant 'rename without a lock' no longer changes that."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError

    options = {**s3_server.storage_options, **extra}
    uri = f"{s3_store_uri}/table"
    write_deltalake(uri, pa.table({"x": [0]}), storage_options=options)
    first, second = DeltaTable(uri, storage_options=options), DeltaTable(uri, storage_options=options)
    no_retry = CommitProperties(max_commit_retries=0)
    write_deltalake(first, pa.table({"x": [1]}), mode="append", commit_properties=no_retry)
    with pytest.raises(CommitFailedError):
        write_deltalake(second, pa.table({"x": [2]}), mode="append", commit_properties=no_retry)
    assert sorted(DeltaTable(uri, storage_options=options).to_pyarrow_table()["x"].to_pylist()) == [0, 1]


def test_a_topic_marker_from_another_machine_is_stale_only_after_the_timeout(tmp_path, clock):
    from deltalog.log.log_manager import TOPIC_OPERATION_TIMEOUT_MS

    store = Store(tmp_path / "store", clock=clock)
    marker = os.path.join(store.root, TOPICS_DIR, "t", TOPIC_MARKER)
    store.storage.create_json(marker, {"state": "creating", "topic_id": "x", "partitions": 1,
                                       "owner": "another-machine:123:abc", "updated_ms": 0})
    with pytest.raises(TopicExistsError, match="being created by another-machine"):
        store.create_topic("t", 1)  # its pid cannot be checked from here: alive until the timeout
    old = time.time() - TOPIC_OPERATION_TIMEOUT_MS / 1000 - 60
    os.utime(marker, (old, old))
    store.create_topic("t", 1)
    assert store.list_topics() == ["t"]
