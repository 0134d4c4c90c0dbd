"""Consumer groups: committed offsets in ``__consumer_offsets`` (Kafka's record format, group -> partition by Java's
String.hashCode), the consumer with kafka-python's names, the group admin calls, cleaning of the internal topic and
the CLI (``consumer-groups``, ``consume --group``) as real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest

from deltalog import Record
from deltalog.coordinator.group.offsets_topic import (
    OFFSETS_TOPIC,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    offset_commit_records,
    partition_for,
)
from deltalog.errors import (
    DeltalogError,
    GroupIdNotFoundError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTopicError,
    NoOffsetForPartitionError,
    OffsetMetadataTooLargeError,
    UnknownTopicOrPartitionError,
)
from deltalog.store import Store
from deltalog.structs import OffsetAndMetadata, TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _fill(store: Store, n: int = 10, topic: str = "t", partitions: int = 2) -> None:
    """``n`` records, round-robin over the partitions: partition p holds keys k{p}, k{p+partitions}, ..."""
    if not store.topic_exists(topic):
        store.create_topic(topic, partitions)
    for p in range(partitions):
        store.append(topic, p, [Record(key=f"k{i}".encode(), value=f"v{i}".encode())
                                for i in range(n) if i % partitions == p])


def _values(records) -> list[bytes]:
    return sorted(r.value for r in records)


# -- the record format and the partition of a group ------------------------------------------------------------


def test_java_string_hash_and_partition_match_kafkas():
    # Java: "hello".hashCode() == 99162322; "Aa" and "BB" collide; "polygenelubricants" hashes to
    # Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("\U0001f600") == (0xD83D * 31 + 0xDE00)  # UTF-16 code units, as Java counts them
    assert partition_for("hello", 50) == 99162322 % 50


def test_offset_commit_key_and_value_are_kafkas_bytes():
    key = encode_key("g", "t", 3)
    assert key == struct.pack(">h", 1) + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 3)
    assert decode_key(key).topic_partition == TopicPartition("t", 3)
    value = encode_value(42, "meta", 1_700_000_000_000, leader_epoch=7)
    assert value == (struct.pack(">hqi", 3, 42, 7) + b"\x00\x04meta" + struct.pack(">q", 1_700_000_000_000))
    v = decode_value(value)
    assert (v.offset, v.metadata, v.leader_epoch, v.commit_timestamp_ms) == (42, "meta", 7, 1_700_000_000_000)
    # Version 1 values (Kafka 0.10 to 2.0) carry an expire timestamp; group metadata keys (version 2) are skipped.
    v1 = decode_value(struct.pack(">hq", 1, 5) + b"\x00\x00" + struct.pack(">qq", 10, 20))
    assert (v1.offset, v1.commit_timestamp_ms, v1.expire_timestamp_ms) == (5, 10, 20)
    assert decode_key(struct.pack(">h", 2) + b"\x00\x01g") is None
    with pytest.raises(ValueError):
        decode_value(struct.pack(">h", 9))


def test_offset_commit_records_are_one_batch_for_the_groups_partition():
    batch = offset_commit_records("g", {TP0: OffsetAndMetadata(1), TP1: None}, 5, 10)
    assert (batch.topic, batch.partition) == (OFFSETS_TOPIC, partition_for("g", 10))
    assert batch.records.num_rows == 2 and batch.records.column("value").to_pylist()[1] is None


# -- committing and reading offsets ----------------------------------------------------------------------------


def test_commits_land_in_consumer_offsets_and_a_new_store_reads_them(tmp_path, store):
    _fill(store)
    assert store.list_consumer_groups() == [] and not store.topic_exists(OFFSETS_TOPIC)
    store.alter_consumer_group_offsets("g", {TP0: OffsetAndMetadata(3, "m"), TP1: 1})
    store.alter_consumer_group_offsets("g", {TP0: 5})
    store.alter_consumer_group_offsets("other", {TP1: 2})
    assert store.topic_config(OFFSETS_TOPIC).cleanup_policy == ("compact",)
    assert len(store.partitions(OFFSETS_TOPIC)) == 10  # offsets.topic.num.partitions, deltalog's default
    p = partition_for("g", 10)
    assert store.log(OFFSETS_TOPIC, p).head().log_end_offset >= 3  # three records of g, in g's partition
    fresh = Store(store.root)
    assert fresh.list_consumer_group_offsets("g") == {TP0: OffsetAndMetadata(5), TP1: OffsetAndMetadata(1)}
    assert fresh.list_consumer_groups() == ["g", "other"]
    rows = {(r.topic, r.partition): r for r in fresh.describe_consumer_group("g")}
    assert (rows["t", 0].current_offset, rows["t", 0].log_end_offset, rows["t", 0].lag) == (5, 5, 0)
    assert (rows["t", 1].current_offset, rows["t", 1].log_end_offset, rows["t", 1].lag) == (1, 5, 4)


def test_concurrent_first_commits_create_consumer_offsets_once(store):
    """Several processes' first commits race to create __consumer_offsets: one creates it, the others wait for it."""
    import threading

    _fill(store)
    errors: list[BaseException] = []

    def commit(i: int) -> None:
        try:
            Store(store.root).alter_consumer_group_offsets(f"g{i}", {TP0: i})
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Store(store.root).list_consumer_groups() == ["g0", "g1", "g2", "g3"]
    assert len(store.partitions(OFFSETS_TOPIC)) == 10


def test_delete_group_and_offsets(store):
    _fill(store)
    store.alter_consumer_group_offsets("g", {TP0: 1, TP1: 2})
    assert store.delete_consumer_group_offsets("g", [TP1]) == [TP1]
    assert store.list_consumer_group_offsets("g") == {TP0: OffsetAndMetadata(1)}
    store.delete_consumer_groups(["g"])
    assert store.list_consumer_groups() == []
    with pytest.raises(GroupIdNotFoundError, match="'g' does not exist"):
        store.describe_consumer_group("g")
    assert Store(store.root).list_consumer_groups() == []


def test_deleting_a_topic_removes_its_committed_offsets(store):
    _fill(store)
    store.create_topic("u", 1)
    store.alter_consumer_group_offsets("g", {TP0: 1, TopicPartition("u", 0): 0})
    store.alter_consumer_group_offsets("h", {TP1: 2})
    store.delete_topic("t")
    assert store.list_consumer_group_offsets("g") == {TopicPartition("u", 0): OffsetAndMetadata(0)}
    assert Store(store.root).list_consumer_groups() == ["g"]  # h had offsets of t only
    store.create_topic("t", 2)  # made again: no group inherits the old topic's offsets
    assert store.consumer("t", group_id="g", auto_offset_reset="earliest").position(TP0) == 0


@pytest.mark.parametrize("bad", ["", None, 5, b"g"])
def test_bad_group_ids_are_refused(store, bad):
    _fill(store)
    with pytest.raises(InvalidArgumentError, match="group id must be a non-empty string"):
        store.alter_consumer_group_offsets(bad, {TP0: 1})
    if bad is not None:  # None is a consumer without a group (Kafka's default)
        with pytest.raises(InvalidArgumentError, match="group id"):
            store.consumer("t", group_id=bad)


def test_bad_offsets_and_unknown_partitions_are_refused_and_nothing_is_committed(store):
    _fill(store)
    with pytest.raises(InvalidArgumentError, match=r"offset to commit for t-0 must be a whole number >= 0.*-1"):
        store.alter_consumer_group_offsets("g", {TP0: -1})
    with pytest.raises(InvalidArgumentError, match="must be an OffsetAndMetadata or an int"):
        store.alter_consumer_group_offsets("g", {TP0: "3"})
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        store.alter_consumer_group_offsets("g", {TP0: 1, TopicPartition("nope", 0): 1})
    with pytest.raises(UnknownTopicOrPartitionError):
        store.alter_consumer_group_offsets("g", {TopicPartition("t", 7): 1})
    with pytest.raises(OffsetMetadataTooLargeError, match="offset.metadata.max.bytes allows 4096"):
        store.alter_consumer_group_offsets("g", {TP0: OffsetAndMetadata(1, "x" * 4097)})
    with pytest.raises(InvalidArgumentError, match="TopicPartition"):
        store.alter_consumer_group_offsets("g", {"t": 1})
    assert store.list_consumer_groups() == []


def test_internal_topic_names_are_reserved_but_double_underscore_names_are_legal(store):
    with pytest.raises(InvalidTopicError, match="Creation of internal topic __consumer_offsets is prohibited"):
        store.create_topic("__consumer_offsets")
    store.create_topic("__mine")  # legal in Kafka too
    assert "__mine" in store.list_topics()


# -- the consumer ----------------------------------------------------------------------------------------------


def test_subscribe_poll_commit_and_resume_where_the_group_left_off(store):
    _fill(store, 10)
    c = store.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.subscribe(["t"])
    assert c.assignment() == {TP0, TP1} and c.subscription() == {"t"}
    got = c.poll(timeout_ms=1000, max_records=4)
    first = [r for rs in got.values() for r in rs]
    assert len(first) == 4 and all(r.topic == "t" and r.partition in (0, 1) for r in first)
    c.commit()
    assert {tp: c.committed(tp) for tp in (TP0, TP1)} == {tp: c.position(tp) for tp in (TP0, TP1)}
    c.close()  # enable_auto_commit=False: close commits nothing more

    c2 = store.consumer("t", group_id="g", auto_offset_reset="earliest", consumer_timeout_ms=300)
    rest = list(c2)
    assert _values(first + rest) == sorted(f"v{i}".encode() for i in range(10))  # each record once
    assert c2.position(TP0) == c2.position(TP1) == 5
    c2.close()  # auto commit: positions committed
    assert store.list_consumer_group_offsets("g") == {TP0: OffsetAndMetadata(5), TP1: OffsetAndMetadata(5)}
    idle = store.consumer("t", group_id="g", consumer_timeout_ms=100)
    assert list(idle) == []
    leo = store.log(OFFSETS_TOPIC, partition_for("g", 10)).head().log_end_offset
    idle.close()  # the positions are the committed offsets: nothing to commit, no Delta commit
    assert store.log(OFFSETS_TOPIC, partition_for("g", 10)).head().log_end_offset == leo


def test_auto_commit_is_at_least_once(store):
    """Auto commit commits what earlier calls handed out, not what the current one returns."""
    _fill(store, 4, partitions=1)
    c = store.consumer("t", group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=0,
                       max_poll_records=2)
    assert len(c.poll(timeout_ms=1000)[TP0]) == 2
    assert c.committed(TP0) is None  # nothing was handed out before this poll
    assert len(c.poll(timeout_ms=1000)[TP0]) == 2
    assert c.committed(TP0) == 2  # the first poll's records; a crash now delivers offsets 2-3 again
    c.close(autocommit=False)
    again = store.consumer("t", group_id="g", consumer_timeout_ms=100)
    assert [r.offset for r in again] == [2, 3]


def test_auto_offset_reset(store):
    _fill(store, 4, partitions=1)
    assert store.consumer("t", group_id="a", auto_offset_reset="earliest").position(TP0) == 0
    assert store.consumer("t", group_id="b").position(TP0) == 4  # Kafka's default: latest
    assert store.consumer("t", group_id="c", **{"auto.offset.reset": "smallest"}).position(TP0) == 0
    with pytest.raises(NoOffsetForPartitionError, match="t-0: group 'd' has no committed offset"):
        store.consumer("t", group_id="d", auto_offset_reset="none").position(TP0)
    store.alter_consumer_group_offsets("d", {TP0: 3})
    assert store.consumer("t", group_id="d", auto_offset_reset="none").position(TP0) == 3
    # Retention (DeleteRecords here) moved the log start past the committed offset: the reset policy applies.
    store.delete_records("t", 0, 4)
    assert store.consumer("t", group_id="d", auto_offset_reset="earliest").position(TP0) == 4


def test_assign_seek_position_and_state_errors(store):
    _fill(store, 6, partitions=2)
    c = store.consumer(group_id="g", auto_offset_reset="earliest", key_deserializer=bytes.decode)
    c.assign([TP1])
    c.seek(TP1, 2)
    recs = c.poll(timeout_ms=500)[TP1]
    assert [(r.offset, r.key) for r in recs] == [(2, "k5")] and c.position(TP1) == 3
    c.seek_to_beginning()
    assert c.position(TP1) == 0
    c.seek_to_end(TP1)
    assert c.position(TP1) == 3 and c.poll() == {}
    with pytest.raises(IllegalStateError, match="t-0 is not assigned"):
        c.seek(TP0, 0)
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        c.subscribe(["t"])
    with pytest.raises(InvalidArgumentError, match="seek offset must be a whole number >= 0"):
        c.seek(TP1, -1)
    with pytest.raises(UnknownTopicOrPartitionError):
        c.assign([TopicPartition("t", 9)])
    c.unsubscribe()
    c.subscribe(pattern="t.*")
    assert c.assignment() == {TP0, TP1}
    assert c.committed([TP0, TP1]) == {TP0: None, TP1: None}
    c.close()
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll()


def test_consumer_validation_errors(store):
    _fill(store)
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
        store.consumer("nope", group_id="g")
    with pytest.raises(InvalidConfigError, match="not a consumer config"):
        store.consumer("t", group_id="g", bootstrap_server="localhost:9092")  # a typo; bootstrap_servers is ignored
    with pytest.raises(InvalidConfigError, match="auto.offset.reset"):
        store.consumer("t", group_id="g", auto_offset_reset="middle")
    with pytest.raises(InvalidConfigError, match="isolation.level"):
        store.consumer("t", group_id="g", isolation_level="dirty")
    c = store.consumer("t")  # no group: reads, cannot commit
    with pytest.raises(InvalidConfigError, match="no group_id"):
        c.commit()
    with pytest.raises(InvalidArgumentError, match="offset to commit for t-0 must be a whole number"):
        store.consumer("t", group_id="g").commit({TP0: OffsetAndMetadata(-5)})


# -- cleaning __consumer_offsets -------------------------------------------------------------------------------


def test_the_cleaner_keeps_consumer_offsets_small_and_committed_offsets_survive(tmp_path, clock, spark):
    # One partition of __consumer_offsets whose segments roll at every commit, so every commit but the last one
    # is in a cleanable segment.
    store = Store(tmp_path / "s", clock=clock, spark=spark,
                  config={"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 14})
    _fill(store, 40)
    # A compacted user topic cleaned by the same pass: a consumer reads on across the offsets compaction removed.
    store.create_topic("c", 1, config={"cleanup.policy": "compact", "segment.bytes": "14"})
    for i in range(6):
        store.append("c", 0, [Record(key=b"same" if i < 5 else b"other", value=f"v{i}".encode())])
    for i in range(20):
        store.alter_consumer_group_offsets("g", {TP0: i, TP1: 2 * i})
        store.alter_consumer_group_offsets("h", {TP0: 1})
        clock.advance(1)
    store.alter_consumer_group_offsets("gone", {TP0: 1})
    store.delete_consumer_groups(["gone"])
    before = store.log(OFFSETS_TOPIC, 0).snapshot().num_records
    assert before == 20 * 3 + 2
    results = store.clean()  # the whole store, as the cleaner job cleans it: __consumer_offsets is a topic to it
    assert any(r.topic == OFFSETS_TOPIC for r in results)
    after = store.log(OFFSETS_TOPIC, 0).snapshot().num_records
    assert after <= 5, after  # one record per key (g's two, h's, the tombstone and its key's last commit at most)
    fresh = Store(store.root)
    assert fresh.list_consumer_group_offsets("g") == {TP0: OffsetAndMetadata(19), TP1: OffsetAndMetadata(38)}
    assert fresh.list_consumer_group_offsets("h") == {TP0: OffsetAndMetadata(1)}
    assert fresh.list_consumer_groups() == ["g", "h"]
    assert store.list_consumer_group_offsets("g")[TP1].offset == 38  # the replay kept across the clean

    c = store.consumer("c", group_id="g", auto_offset_reset="earliest", consumer_timeout_ms=200)
    assert [r.offset for r in c] == [4, 5]  # offsets 0-3 ("same", superseded) were cleaned away
    assert c.position(TopicPartition("c", 0)) == 6
    c.close()
    assert store.list_consumer_group_offsets("g")[TopicPartition("c", 0)] == OffsetAndMetadata(6)


def test_committed_offsets_expire_after_offsets_retention_minutes(tmp_path, clock, spark):
    """offsets.retention.minutes: each cleaner cycle (at most every offsets.retention.check.interval.ms) removes
    the committed offsets not committed again for that long, with tombstones; younger ones stay, and a group
    left without offsets is gone from the list."""
    store = Store(tmp_path / "s", clock=clock, spark=spark,
                  config={"offsets.retention.minutes": 60, "offsets.retention.check.interval.ms": 600_000})
    _fill(store)
    store.alter_consumer_group_offsets("old", {TP0: 3})
    store.alter_consumer_group_offsets("mixed", {TP0: 1, TP1: 1})
    clock.advance(30 * 60_000)
    store.alter_consumer_group_offsets("mixed", {TP1: 2})  # committed again: its clock restarts
    store.alter_consumer_group_offsets("young", {TP0: 4})
    cleaner = store.log_cleaner(metrics=False)
    assert cleaner.run_cycle().offsets_expired == 0  # nothing is an hour old yet
    clock.advance(30 * 60_000 - 1)
    assert cleaner.run_cycle().offsets_expired == 0  # one ms short of the hour
    clock.advance(1)
    assert cleaner.run_cycle().offsets_expired == 0  # an hour old, but checked 1 ms ago (the check interval)
    clock.advance(600_000)
    cycle = cleaner.run_cycle()
    assert cycle.offsets_expired == 2 and "2 committed offset(s) expired" in cycle.summary()
    fresh = Store(store.root)
    assert fresh.list_consumer_groups() == ["mixed", "young"]
    assert fresh.list_consumer_group_offsets("mixed") == {TP1: OffsetAndMetadata(2)}
    assert fresh.list_consumer_group_offsets("young") == {TP0: OffsetAndMetadata(4)}
    assert store.consumer("t", group_id="old", auto_offset_reset="earliest").position(TP0) == 0
    clock.advance(30 * 60_000)
    assert cleaner.run_cycle().offsets_expired == 2  # mixed's TP1 and young's TP0
    assert Store(store.root).list_consumer_groups() == []


def test_a_commit_racing_its_expiry_is_kept(store, clock):
    """The expiry replays, then appends tombstones; a commit appended in between is appended again after them."""
    from deltalog.coordinator.group.offsets_topic import OffsetCommitKey

    _fill(store)
    store.alter_consumer_group_offsets("g", {TP0: 1})
    offsets = store.offsets_topic
    p = offsets.partition_for("g")
    seen = offsets._refresh(p).position
    store.alter_consumer_group_offsets("g", {TP0: 7})  # the racing commit
    key = OffsetCommitKey("g", "t", 0)
    first = offsets._tombstone(p, [key], clock.now_ms())
    offsets._append_raced(p, {key}, seen, first, clock.now_ms())
    assert Store(store.root).list_consumer_group_offsets("g") == {TP0: OffsetAndMetadata(7)}


def test_offsets_retention_configs_are_checked(tmp_path):
    with pytest.raises(InvalidConfigError, match="offsets.retention.minutes"):
        Store(tmp_path / "s", config={"offsets.retention.minutes": 0})


# -- the CLI, as real subprocesses -----------------------------------------------------------------------------


def _cli(store_path, *argv, stdin=None):
    exe = shutil.which("deltalog") or os.path.join(os.path.dirname(sys.executable), "deltalog")
    env = {**os.environ, "DELTALOG_STORE": str(store_path)}
    return subprocess.run([exe, *argv], input=stdin, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.subprocess
def test_cli_consume_group_resumes_and_consumer_groups_describe_reset_delete(tmp_path):
    root = tmp_path / "s"
    store = Store(root)
    _fill(store, 6)

    p = _cli(root, "consume", "t", "--group", "g", "--max-messages", "4")
    assert p.returncode == 0, p.stderr
    first = [json.loads(x) for x in p.stdout.splitlines()]
    p = _cli(root, "consume", "--topic", "t", "--group", "g")
    assert p.returncode == 0, p.stderr
    rest = [json.loads(x) for x in p.stdout.splitlines()]
    assert sorted(r["value"] for r in first + rest) == [f"v{i}" for i in range(6)]
    assert _cli(root, "consume", "t", "--group", "g").stdout == ""  # nothing new

    p = _cli(root, "consumer-groups", "--list")
    assert (p.returncode, p.stdout) == (0, "g\n")
    assert _cli(root, "topics", "list", "--exclude-internal").stdout == "t\n"  # as kafka-topics --exclude-internal
    p = _cli(root, "consumer-groups", "--describe", "--group", "g")
    lines = [line.split() for line in p.stdout.strip().splitlines()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                        "HOST", "CLIENT-ID"]
    assert sorted(lines[1:]) == [["g", "t", "0", "3", "3", "0", "-", "-", "-"], ["g", "t", "1", "3", "3", "0", "-",
                                                                                  "-", "-"]]

    store.append("t", 0, [Record(key=b"new", value=b"v6")])
    p = _cli(root, "consumer-groups", "--reset-offsets", "--group", "g", "--topic", "t:1", "--to-offset", "1",
             "--execute", "--output", "json")
    assert p.returncode == 0 and json.loads(p.stdout) == {"group": "g", "topic": "t", "partition": 1,
                                                          "new_offset": 1, "executed": True}, p.stderr
    p = _cli(root, "consumer-groups", "--describe", "--group", "g", "--json")
    lags = {r["partition"]: (r["current_offset"], r["log_end_offset"], r["lag"]) for r in map(json.loads,
                                                                                             p.stdout.splitlines())}
    assert lags == {0: (3, 4, 1), 1: (1, 3, 2)}
    p = _cli(root, "consume", "t", "--group", "g")
    assert sorted(json.loads(x)["value"] for x in p.stdout.splitlines()) == ["v3", "v5", "v6"]

    p = _cli(root, "consumer-groups", "--delete-offsets", "--group", "g", "--topic", "t:1")
    assert p.returncode == 0 and p.stdout.split() == ["TOPIC", "PARTITION", "STATUS", "t", "1", "Successful"], p.stderr
    assert list(Store(root).list_consumer_group_offsets("g")) == [TP0]
    p = _cli(root, "consumer-groups", "--delete", "--group", "g")
    assert p.returncode == 0 and "Deletion of requested consumer groups ('g') was successful." in p.stdout
    assert Store(root).list_consumer_groups() == []


@pytest.mark.subprocess
def test_cli_consume_group_follow_commits_what_it_printed_on_ctrl_c(tmp_path):
    import signal

    root = tmp_path / "s"
    _fill(Store(root), 6)
    exe = shutil.which("deltalog") or os.path.join(os.path.dirname(sys.executable), "deltalog")
    env = {**os.environ, "DELTALOG_STORE": str(root)}
    proc = subprocess.Popen([exe, "consume", "t", "--group", "f", "--follow", "--poll-interval-ms", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline() for _ in range(6)]
        # Let the loop get past the page it wrote (a Ctrl-C in the middle of a page is committed before the page,
        # so its records come again: at least once) and wait for new records.
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert sorted(json.loads(x)["value"] for x in lines) == [f"v{i}" for i in range(6)]
    assert Store(root).list_consumer_group_offsets("f") == {TP0: OffsetAndMetadata(3), TP1: OffsetAndMetadata(3)}


@pytest.mark.subprocess
def test_cli_consumer_groups_errors(tmp_path):
    root = tmp_path / "s"
    _fill(Store(root), 2)
    p = _cli(root, "consumer-groups", "--describe", "--group", "nobody")
    assert p.returncode == 1 and "The consumer group 'nobody' does not exist" in p.stderr
    p = _cli(root, "consumer-groups")
    assert p.returncode == 2 and "exactly one action" in p.stderr
    p = _cli(root, "consume", "t", "--group", "")
    assert p.returncode == 1 and "group id must be a non-empty string" in p.stderr
    p = _cli(root, "consume", "t", "--group", "g", "--partition", "0")
    assert p.returncode == 2 and "Options group and partition cannot be specified together." in p.stderr
    p = _cli(root, "consumer-groups", "--reset-offsets", "--group", "g", "--topic", "nope", "--to-earliest")
    assert p.returncode == 1 and "'nope' does not exist" in p.stderr
    p = _cli(root, "consumer-groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "-3")
    assert p.returncode == 2 and "--to-offset takes a whole number >= 0" in p.stderr
    # A dry run commits nothing.
    p = _cli(root, "consumer-groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-latest")
    assert p.returncode == 0 and "--execute option is missing" in p.stderr
    assert Store(root).list_consumer_groups() == []
    assert issubclass(GroupIdNotFoundError, DeltalogError)


def test_the_readme_consumer_groups_example_runs(tmp_path, capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "consumer-groups.md").read_text(encoding="utf-8")
    section = text.split("# Consumer groups", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"/tmp/my-groups-store"', repr(str(tmp_path / "store")))
    namespace: dict = {}
    exec(compile(code, "docs/consumer-groups.md", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 11  # ten records, then committed / position / describe
    assert out[-1].startswith("2 2 [PartitionOffsets(group='billing', topic='orders', partition=0, current_offset=2")
