"""Transactions: Kafka's producer vocabulary, markers, the last stable offset, both isolation levels in
every reader (store.read, the consumer, SQL views, current state, format("deltalog")), the coordinator's recovery
of a dead producer's transaction (a real SIGKILLed process) and its timeout abort."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deltalog import IllegalStateError, InvalidConfigError, ProducerFencedError, Record, Store
from deltalog.coordinator.group.offsets_topic import OFFSETS_TOPIC
from deltalog.coordinator.transaction.transaction_coordinator import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    TransactionCoordinator,
)
from deltalog.log.transactions import AbortedTxn
from tests.transaction_support import age_transactional_id, kill_mid_transaction

REPO = Path(__file__).resolve().parents[1]


def recs(*pairs):
    return [Record(key=k.encode(), value=v.encode()) for k, v in pairs]


def seen(store, topic, partition=0, level="read_committed"):
    return [(r.offset, r.key.decode(), r.value.decode() if r.value is not None else None)
            for r in store.read(topic, partition, isolation_level=level)]


@pytest.fixture
def topic(store):
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    return "t"


def test_records_of_a_transaction_become_visible_together_on_commit(store, topic):
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("a", "1"), ("b", "2")), partition=0)
    p.send(topic, recs(("c", "3")), partition=1)
    # open: read_uncommitted sees the records, read_committed stops at the last stable offset (0)
    assert seen(store, topic, 0, "read_uncommitted") == [(0, "a", "1"), (1, "b", "2")]
    assert seen(store, topic, 0) == [] and seen(store, topic, 1) == []
    assert store.describe(topic)[0].last_stable_offset == 0
    p.commit_transaction()
    assert seen(store, topic, 0) == [(0, "a", "1"), (1, "b", "2")]
    assert seen(store, topic, 1) == [(0, "c", "3")]
    # each partition got one COMMIT marker, which takes an offset and is never returned
    d = store.describe(topic)
    assert [s.log_end_offset for s in d] == [3, 2]
    assert [s.last_stable_offset for s in d] == [3, 2]
    assert TransactionCoordinator(store.log_manager).describe("app").state == COMPLETE_COMMIT


def test_an_aborted_transaction_is_never_visible_to_read_committed(store, topic):
    plain = store.producer()
    plain.send(topic, recs(("a", "old")), partition=0)
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("a", "aborted"), ("b", "aborted")), partition=0)
    plain.send(topic, recs(("c", "plain")), partition=0)  # interleaved with the transaction
    p.abort_transaction()
    assert seen(store, topic) == [(0, "a", "old"), (3, "c", "plain")]
    assert seen(store, topic, 0, "read_uncommitted") == [(0, "a", "old"), (1, "a", "aborted"), (2, "b", "aborted"),
                                                        (3, "c", "plain")]
    index = store.log(topic, 0).txn_index()
    assert index.aborted == (AbortedTxn(p.producer_id, 1, 4),)
    assert index.last_stable_offset == 5
    # the next transaction of the same producer commits normally
    p.begin_transaction()
    p.send(topic, recs(("a", "new")), partition=0)
    p.commit_transaction()
    assert seen(store, topic)[-1] == (5, "a", "new")


def test_the_last_stable_offset_is_the_first_offset_of_the_earliest_open_transaction(store, topic):
    a, b = store.producer(transactional_id="a"), store.producer(transactional_id="b")
    a.init_transactions()
    b.init_transactions()
    store.produce(topic, recs(("x", "0")), partition=0)
    a.begin_transaction()
    a.send(topic, recs(("x", "1")), partition=0)  # offset 1
    b.begin_transaction()
    b.send(topic, recs(("y", "2")), partition=0)  # offset 2
    assert store.log(topic, 0).txn_index().last_stable_offset == 1
    b.commit_transaction()  # marker at 3; a still open
    assert store.log(topic, 0).txn_index().last_stable_offset == 1
    assert seen(store, topic) == [(0, "x", "0")]
    a.commit_transaction()
    assert store.log(topic, 0).txn_index().last_stable_offset == 5
    assert [o for o, _, _ in seen(store, topic)] == [0, 1, 2]


def test_transactional_calls_follow_kafkas_state_machine(store, topic):
    p = store.producer(transactional_id="app")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        p.begin_transaction()
    p.init_transactions()
    with pytest.raises(IllegalStateError, match="no transaction is in progress"):
        p.commit_transaction()
    p.begin_transaction()
    with pytest.raises(IllegalStateError, match="already in progress"):
        p.begin_transaction()
    p.commit_transaction()  # a transaction that wrote nothing commits as a no-op
    with pytest.raises(IllegalStateError, match="non-transactional"):
        store.producer().begin_transaction()
    with pytest.raises(InvalidConfigError, match="transaction"):
        store.producer(transactional_id="x", transaction_timeout_ms=0)


def test_a_new_producer_with_the_id_aborts_the_open_transaction_and_fences_the_old_one(store, topic):
    old = store.producer(transactional_id="app")
    old.init_transactions()
    old.begin_transaction()
    old.send(topic, recs(("a", "zombie")), partition=0)
    new = store.producer(transactional_id="app")
    new.init_transactions()  # aborts what the old one left open
    assert seen(store, topic) == []
    assert store.log(topic, 0).txn_index().last_stable_offset == 2
    with pytest.raises(ProducerFencedError):
        old.send(topic, recs(("a", "late")), partition=0)
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()
    new.begin_transaction()
    new.send(topic, recs(("a", "fresh")), partition=0)
    new.commit_transaction()
    assert seen(store, topic) == [(2, "a", "fresh")]


def test_a_transaction_left_open_is_aborted_after_its_timeout_by_the_cleaner_cycle(store, topic, clock):
    p = store.producer(transactional_id="slow", transaction_timeout_ms=3000)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("a", "1")), partition=0)
    coordinator = TransactionCoordinator(store.log_manager)
    assert coordinator.abort_timed_out_transactions(clock.now_ms()) == []
    assert coordinator.describe("slow").state == ONGOING
    clock.advance(86_400_000)  # a process's clock does not time it out: the store's clock does (the coordinator's)
    assert coordinator.abort_timed_out_transactions(clock.now_ms()) == []
    time.sleep(3.1)
    assert coordinator.abort_timed_out_transactions(clock.now_ms()) == ["slow"]
    meta = coordinator.describe("slow")
    assert meta.state == COMPLETE_ABORT and meta.producer_epoch == 1
    assert store.log(topic, 0).txn_index().aborted[0].first_offset == 0
    with pytest.raises(ProducerFencedError):
        p.send(topic, recs(("a", "2")), partition=0)


def test_an_idle_transactional_id_expires_after_transactional_id_expiration_ms(tmp_path, clock):
    """transactional.id.expiration.ms: the cleaner's cycle (at most every
    transaction.remove.expired.transaction.cleanup.interval.ms) expires ids with no transaction in progress and
    unused that long. They are listed nowhere, their producer can no longer write, and the next
    init_transactions() of the id starts afresh with a new producer id. An open transaction never expires (its
    timeout aborts it first)."""
    from deltalog import InvalidPidMappingError

    day = 86_400_000
    store = Store(tmp_path / "s", clock=clock, config={"transactional.id.expiration.ms": 7 * day})
    store.create_topic("t", 1)
    idle = store.producer(transactional_id="idle")
    idle.init_transactions()
    idle.begin_transaction()
    idle.send("t", recs(("a", "1")))
    idle.commit_transaction()
    busy = store.producer(transactional_id="busy")
    busy.init_transactions()
    loose = store.producer(transactional_id="loose")  # sends outside transactions only (a deliberate difference)
    loose.init_transactions()
    cleaner = store.log_cleaner(metrics=False)
    clock.advance(8 * day)  # the process's clock: it runs the timer, but how long an id went unused is the store's
    assert cleaner.maintenance.expire_transactional_ids() == []
    age_transactional_id(store, "idle", 7 * day - 60_000)  # on the store's clock: a minute short of 7 days
    clock.advance(3_600_000)
    assert cleaner.maintenance.expire_transactional_ids() == []
    age_transactional_id(store, "idle", 7 * day)
    clock.advance(1)
    assert cleaner.maintenance.expire_transactional_ids() == []  # 7 days old, but looked at 1 ms ago (the cleanup interval)
    clock.advance(3_600_000)
    assert cleaner.maintenance.expire_transactional_ids() == ["idle"]
    coordinator = TransactionCoordinator(store.log_manager)
    assert coordinator.describe("idle") is None
    assert [m.transactional_id for m in coordinator.list_transactions()] == ["busy", "loose"]
    for unused in ("busy", "loose"):
        age_transactional_id(store, unused, 7 * day + 1)
    clock.advance(6 * day)
    assert cleaner.maintenance.expire_transactional_ids() == ["busy", "loose"]
    assert loose.send("t", recs(("b", "1"))).offsets.tolist() == [2]  # idempotent sends go on (1: a marker)
    idle.begin_transaction()
    with pytest.raises(InvalidPidMappingError, match="'idle' expired"):
        idle.send("t", recs(("a", "2")))
    idle.close()  # nothing to abort: the id is gone
    again = store.producer(transactional_id="idle")
    again.init_transactions()
    assert again.producer_id != idle.producer_id and again.producer_epoch == 0
    again.begin_transaction()
    again.send("t", recs(("a", "3")))
    again.commit_transaction()
    assert seen(store, "t") == [(0, "a", "1"), (2, "b", "1"), (3, "a", "3")]


def test_offsets_sent_to_a_transaction_are_committed_only_if_it_commits(store, topic):
    store.produce(topic, recs(("a", "1"), ("b", "2")), partition=0)
    consumer = store.consumer(group_id="g")
    from deltalog import TopicPartition

    p = store.producer(transactional_id="rpw")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("out", "x")), partition=1)
    p.send_offsets_to_transaction({TopicPartition(topic, 0): 2}, "g")
    assert consumer.committed(TopicPartition(topic, 0)) is None  # not before the commit
    p.abort_transaction()
    assert store.consumer(group_id="g").committed(TopicPartition(topic, 0)) is None
    p.begin_transaction()
    p.send(topic, recs(("out", "y")), partition=1)
    p.send_offsets_to_transaction({TopicPartition(topic, 0): 2}, "g")
    p.commit_transaction()
    assert store.consumer(group_id="g").committed(TopicPartition(topic, 0)) == 2
    # the offsets are records of the transaction in __consumer_offsets, behind its COMMIT marker
    offsets_log = store.log(OFFSETS_TOPIC, store.offsets_topic.partition_for("g"))
    assert offsets_log.txn_index().last_stable_offset == offsets_log.head().log_end_offset


def test_the_consumer_reads_at_its_isolation_level(store, topic):
    from deltalog import TopicPartition

    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("a", "1")), partition=0)
    p.abort_transaction()
    p.begin_transaction()
    p.send(topic, recs(("b", "2")), partition=0)
    committed = store.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
    committed.assign([TopicPartition(topic, 0)])
    uncommitted = store.consumer(auto_offset_reset="earliest")  # Kafka's default: read_uncommitted
    uncommitted.assign([TopicPartition(topic, 0)])

    def values(c):
        return [r.value for rs in c.poll(timeout_ms=0).values() for r in rs]

    assert values(uncommitted) == [b"1", b"2"]
    assert values(committed) == []
    assert committed.position(TopicPartition(topic, 0)) == 2  # stops at the LSO: b's transaction is open
    p.commit_transaction()
    assert values(committed) == [b"2"]
    assert committed.position(TopicPartition(topic, 0)) == 4


def test_sql_views_and_current_state_read_committed_by_default(spark_store):
    store = spark_store
    store.create_topic("s", 1, config={"cleanup.policy": "compact"})
    store.produce("s", recs(("k", "committed")), partition=0)
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send("s", recs(("k", "aborted")), partition=0)
    p.abort_transaction()
    p.begin_transaction()
    p.send("s", recs(("j", "open")), partition=0)
    rows = store.sql("SELECT CAST(key AS STRING) k, CAST(value AS STRING) v FROM s_current").collect()
    assert [(r.k, r.v) for r in rows] == [("k", "committed")]
    assert store.sql("SELECT count(*) c FROM s").collect()[0].c == 1
    uncommitted = store.current_state("s", isolation_level="read_uncommitted").collect()
    assert sorted((bytes(r.key).decode() if isinstance(r.key, (bytes, bytearray)) else r.key) for r in uncommitted) \
        == ["j", "k"]
    # format("deltalog"): read_committed unless kafka.isolation.level says otherwise
    from deltalog.sql.kafka import register

    register(store.spark)
    df = store.spark.read.format("deltalog").option("store", store.root).option("subscribe", "s").load()
    assert [bytes(r.value) for r in df.collect()] == [b"committed"]
    raw = (store.spark.read.format("deltalog").option("store", store.root).option("subscribe", "s")
           .option("kafka.isolation.level", "read_uncommitted").load())
    assert [bytes(r.value) for r in raw.orderBy("offset").collect()] == [b"committed", b"aborted", b"open"]
    p.commit_transaction()
    df = store.spark.read.format("deltalog").option("store", store.root).option("subscribe", "s").load()
    assert [bytes(r.value) for r in df.orderBy("offset").collect()] == [b"committed", b"open"]


@pytest.mark.subprocess
def test_a_killed_producer_s_transaction_is_aborted_by_the_next_init_transactions(tmp_path):
    """A real process SIGKILLed in the middle of a transaction: its records are never visible to read_committed,
    the next producer with the id aborts the transaction, and the log's LSO moves on."""
    root = tmp_path / "store"
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact"})
    kill_mid_transaction(root)
    store = Store(root)
    assert [s.last_stable_offset for s in store.describe("t")] == [0, 0]
    p = store.producer(transactional_id="app")
    p.init_transactions()
    assert [s.last_stable_offset for s in store.describe("t")] == [2, 2]
    assert seen(store, "t", 0) == [] and seen(store, "t", 1) == []
    assert seen(store, "t", 0, "read_uncommitted") == [(0, "a", "dead")]
    p.begin_transaction()
    p.send("t", recs(("a", "alive")), partition=0)
    p.commit_transaction()
    assert seen(store, "t", 0) == [(2, "a", "alive")]


TXN_SUITE = {"no_aborted_record_visible", "no_marker_visible", "committed_transactions_visible",
             "markers_closed_by_their_producer"}


def _transactions(store, topic):
    p = store.producer(transactional_id="app")
    p.init_transactions()
    store.produce(topic, recs(("plain", "0")), partition=0)
    p.begin_transaction()
    p.send(topic, recs(("a", "1"), ("b", "1")), partition=0)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, recs(("c", "aborted"), ("d", "aborted")), partition=0)
    p.abort_transaction()
    p.begin_transaction()
    p.send(topic, recs(("e", "open")), partition=0)
    return p


@pytest.mark.slow
def test_the_checks_hold_the_transactional_guarantees(spark_store):
    store = spark_store
    store.create_topic("c", 1, config={"cleanup.policy": "compact"})
    _transactions(store, "c")
    result = store.check("c", cleans="none")
    names = {e.name for s in result.suites for e in s.expectations}
    assert TXN_SUITE <= names and "keys_not_null" in names
    assert result.success, result.summary()


@pytest.mark.slow
def test_the_checks_catch_aborted_records_that_readers_return(spark_store):
    """A cleaner that moved its checkpoint past an ABORT marker without dropping the aborted records (a bug)
    makes the readers return them: the check names them, from the markers in the data."""
    from deltalog.log import delta

    store = spark_store
    store.create_topic("c", 1, config={"cleanup.policy": "compact"})
    _transactions(store, "c")
    log = store.log("c", 0)
    marker = next(m for m in log.txn_index().markers if m.control == "ABORT")
    delta.commit(log.table(), [], txns={delta.TXN_CLEANER_CHECKPOINT: marker.offset + 1}, operation="clean",
                 metadata={"now_ms": store.clock.now_ms(), "first_dirty_offset": marker.offset + 1,
                           "end_offset": marker.offset + 1})
    assert [r.value for r in store.read("c", 0, isolation_level="read_committed")][-2:] == [b"aborted", b"aborted"]
    result = store.check("c", cleans="none")
    bad = {e.name: e for _, e in result.failures()}
    assert set(bad) == {"no_aborted_record_visible"}
    assert {r["offset"] for r in bad["no_aborted_record_visible"].sample} == {4, 5}


def test_the_transactions_and_consume_commands_speak_kafkas_tools(store, topic, capsys):
    from deltalog.cli import main

    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("a", "open")), partition=0)
    assert main(["--store", store.root, "transactions", "list"]) == 0
    out = capsys.readouterr().out
    assert "TransactionalId" in out and "app" in out and "Ongoing" in out
    assert main(["--store", store.root, "transactions", "describe-producers", "--topic", topic,
                 "--partition", "0"]) == 0
    assert "last stable offset 0" in capsys.readouterr().out
    assert main(["--store", store.root, "consume", topic, "-p", "0", "--isolation-level", "read_committed"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["--store", store.root, "consume", topic, "-p", "0"]) == 0  # read_uncommitted, as Kafka's tool
    assert '"value": "open"' in capsys.readouterr().out
    p.commit_transaction()
    assert main(["--store", store.root, "transactions", "describe", "--transactional-id", "app",
                 "--output", "json"]) == 0
    assert '"state": "CompleteCommit"' in capsys.readouterr().out
    assert main(["--store", store.root, "consume", topic, "-p", "0", "--isolation-level", "read_committed"]) == 0
    assert '"value": "open"' in capsys.readouterr().out


@pytest.mark.parametrize("kill_at, recover", [
    ("txn_state:PrepareCommit", "init_transactions"),  # decided, no marker written yet
    ("txn_marker:after-commit@1", "init_transactions"),  # one partition marked, the other not
    ("txn_marker:before-commit@2", "timeout"),  # the second marker's file written, not committed
])
@pytest.mark.subprocess
def test_a_commit_killed_after_its_decision_is_completed_by_whoever_finds_it(tmp_path, kill_at, recover):
    """Kafka's two-phase commit across a SIGKILL at each step after PrepareCommit: the decision stands, and the
    next holder of the transactional id (or the timeout sweep of the cleaner's cycle) writes the missing markers,
    so the transaction's records become visible in every partition, never in only some."""
    root = tmp_path / "store"
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact"})
    script = textwrap.dedent(f"""
        from deltalog import Record, Store
        store = Store({str(root)!r})
        p = store.producer(transactional_id="app", transaction_timeout_ms=1000)
        p.init_transactions()
        p.begin_transaction()
        p.send("t", [Record(b"a", b"both")], partition=0)
        p.send("t", [Record(b"b", b"both")], partition=1)
        p.commit_transaction()
        print("committed", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO), "DELTALOG_FAULT_KILL": kill_at}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "committed" not in done.stdout and f"SIGKILL at {kill_at.split('@')[0]}" in done.stderr
    store = Store(root)  # the wall clock, as the killed process's
    visible = [len(store.read("t", p, isolation_level="read_committed")) for p in (0, 1)]
    assert visible != [1, 1]  # not complete yet: a partition's LSO still holds its record back
    if recover == "init_transactions":
        store.producer(transactional_id="app").init_transactions()
    else:
        time.sleep(1.1)  # past the 1 s timeout since the decision, on the store's clock
        assert TransactionCoordinator(store.log_manager).abort_timed_out_transactions(store.clock.now_ms()) == ["app"]
    assert [seen(store, "t", p) for p in (0, 1)] == [[(0, "a", "both")], [(0, "b", "both")]]
    assert TransactionCoordinator(store.log_manager).describe("app").state == COMPLETE_COMMIT
    assert [s.last_stable_offset for s in store.describe("t")] == [2, 2]


def test_transactions_on_object_storage(any_store):
    """The coordinator's compare-and-swap and the markers work on S3 (conditional puts) as on a local disk."""
    store = any_store
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    a, b = store.producer(transactional_id="a"), store.producer(transactional_id="b")
    a.init_transactions()
    b.init_transactions()
    a.begin_transaction()
    b.begin_transaction()
    a.send("t", recs(("k", "a")), partition=0)
    b.send("t", recs(("k", "b")), partition=0)
    b.send("t", recs(("j", "b")), partition=1)
    a.commit_transaction()
    assert seen(store, "t", 0) == [(0, "k", "a")]
    b.abort_transaction()
    assert seen(store, "t", 0) == [(0, "k", "a")] and seen(store, "t", 1) == []
    assert [s.last_stable_offset for s in store.describe("t")] == [4, 2]
    store.producer(transactional_id="a").init_transactions()
    a.begin_transaction()
    with pytest.raises(ProducerFencedError):
        a.send("t", recs(("k", "zombie")), partition=0)


@pytest.mark.slow
def test_the_checks_hold_across_cleans_of_a_transactional_log(spark_store, clock):
    """Real passes over committed and aborted transactions: every clean passes the across-clean suite, which
    includes aborted_records_dropped and markers_kept_until_horizon, and the partition suite after it."""
    store = spark_store
    store.create_topic("c", 1, config={"cleanup.policy": "compact", "delete.retention.ms": 1000})
    _transactions(store, "c").commit_transaction()
    store.roll("c", 0)
    first = store.clean("c")
    assert first and first[0].aborted_dropped == 2
    clock.advance(2000)  # past the markers' horizons
    store.produce("c", recs(("a", "2")), partition=0)
    store.roll("c", 0)
    second = store.clean_partition("c", 0, force=True)
    # the ABORT marker goes (horizon passed); both COMMIT markers stay: b=1 and e=open are still there
    assert second.markers_removed == 1
    result = store.check("c", cleans="all")
    names = {e.name for s in result.suites for e in s.expectations}
    assert {"aborted_records_dropped", "markers_kept_until_horizon"} <= names
    assert result.success, result.summary()
    left = store.read("c", 0, isolation_level="read_uncommitted")  # what the log holds, markers aside
    assert sorted((r.key, r.value) for r in left) == [(b"a", b"2"), (b"b", b"1"), (b"e", b"open"), (b"plain", b"0")]
    assert all(m.control != "ABORT" for m in store.log("c", 0).txn_index().markers)


def _one_send_over_a_blocked_partition(store):
    """A transaction whose one send spans partitions 0 and 1 while another engine's change blocks partition 1:
    partition 0's batch lands, the send raises. Returns the producer and the undo."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from deltalog.errors import ForeignCommitError

    store.create_topic("two", 2)
    p = store.producer(transactional_id="spans")
    p.init_transactions()
    uri = store.log("two", 1).uri
    DeltaTable(uri).alter.set_table_properties({"other.note": "x"}, raise_if_not_exists=False)
    blocked = DeltaTable(uri).version()
    p.begin_transaction()
    with pytest.raises(ForeignCommitError):
        p.send("two", pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"],
                                "partition": pa.array([0, 1], pa.int32())}))
    return p, lambda: DeltaTable(uri).restore(blocked - 1)


def test_a_transaction_whose_send_failed_cannot_commit(store):
    """Kafka: a send that failed makes commitTransaction throw. A send that raised on one partition (another
    engine's change) after the other partition's batch landed could still be committed: half of it visible to
    read_committed readers, reported as success (found by tests/test_foreign_chaos.py)."""
    p, undo = _one_send_over_a_blocked_partition(store)
    undo()
    with pytest.raises(IllegalStateError, match="a send of it failed"):
        p.commit_transaction()
    p.abort_transaction()
    assert store.read("two", 0, 0, isolation_level="read_committed") == []


def test_after_aborting_a_failed_send_the_producer_sends_again(store):
    """The batch that landed took sequence 0 in partition 0, which the producer did not count (the call raised):
    every later send there raised OutOfOrderSequenceError until a new producer was made. As Kafka's producer
    (KIP-360), the abort after a failed send bumps the epoch, every sequence starting again at 0."""
    p, undo = _one_send_over_a_blocked_partition(store)
    undo()
    p.abort_transaction()
    p.begin_transaction()
    p.send("two", [Record(key=b"c", value=b"3")], partition=0)
    p.send("two", [Record(key=b"c", value=b"3")], partition=1)
    p.commit_transaction()
    assert [r.value for r in store.read("two", 0, 0, isolation_level="read_committed")] == [b"3"]
    assert [r.value for r in store.read("two", 1, 0, isolation_level="read_committed")] == [b"3"]
