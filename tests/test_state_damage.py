"""Damaged and lost state documents: the producer-id counter, transactional-id documents, hanging
transactions and their abort. Real stores, real files deleted or truncated, a real SIGKILLed producer, the real
console script."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltalog import CorruptLogError, CorruptStateError, InvalidArgumentError, Record, Store
from deltalog.clock import ManualClock
from deltalog.coordinator.transaction import producer_ids
from deltalog.coordinator.transaction.transaction_coordinator import COMPLETE_ABORT, TransactionCoordinator
from deltalog.log import producer_state
from tests.conftest import json_lines, run_cli
from tests.transaction_support import kill_mid_transaction

REPO = Path(__file__).resolve().parents[1]
MINUTE = 60_000


def recs(*pairs):
    return [Record(key=k.encode(), value=v.encode()) for k, v in pairs]


def seen(store, topic, partition=0, level="read_committed"):
    return [(r.offset, r.key.decode(), r.value.decode()) for r in store.read(topic, partition, isolation_level=level)]


def doctor_checks():
    """``deltalog doctor``'s checks (``deltalog.cli.doctor_checks`` where the CLI-only modules live in cli/)."""
    try:
        return importlib.import_module("deltalog.cli.doctor_checks")
    except ModuleNotFoundError:
        return importlib.import_module("deltalog.doctor")


def counter(store) -> Path:
    return Path(store.storage.location(*producer_ids.PRODUCER_IDS))


def txn_doc(store, transactional_id) -> Path:
    return Path(producer_state.transactional_location(store.storage, transactional_id))


@pytest.fixture
def topic(store):
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    return "t"


# -- the producer-id counter ------------------------------------------------------------------------------------


def test_a_lost_counter_is_rebuilt_and_no_producer_id_is_handed_out_twice(store, topic):
    """With the counter deleted, a new producer used to get id 0 again, and its first batch, equal to producer 0's
    last, was acknowledged with producer 0's offsets and never written."""
    old = store.producer()
    old.send(topic, recs(("k", "v")), partition=0)  # producer id 0, offset 0
    tx = store.producer(transactional_id="app")
    tx.init_transactions()  # producer id 1, in a transactional-id document
    counter(store).unlink()
    new = store.producer()
    new.send(topic, recs(("k", "v")), partition=0)
    assert new.producer_id == 2 and new.producer_id not in (old.producer_id, tx.producer_id)
    # the same batch as the old producer's last one was written, not taken for a retry
    assert [v for _, _, v in seen(store, topic, 0)] == ["v", "v"]
    assert json.loads(counter(store).read_text()) == {"next_producer_id": 3}


def test_the_rebuild_reads_producer_ids_from_a_checkpoint_when_the_commits_before_it_are_gone(store, topic):
    for _ in range(3):
        store.producer().send(topic, recs(("k", "v")), partition=1)  # producer ids 0, 1, 2
    log = store.log(topic, 1)
    dt = log.table()
    dt.create_checkpoint()
    log_dir = Path(log.uri) / "_delta_log"
    for commit in sorted(log_dir.glob("*.json"))[:-1]:
        commit.unlink()  # as Delta's log retention removes them: the checkpoint alone holds the app ids
    assert producer_ids.app_producer_ids(store.storage, log.uri) == {0, 1, 2}
    counter(store).unlink()
    assert store.producer().send(topic, recs(("k", "w")), partition=0) is not None
    assert json.loads(counter(store).read_text()) == {"next_producer_id": 4}


def test_a_transactional_record_s_producer_id_counts_even_after_its_app_ids_expired(store, topic):
    tx = store.producer(transactional_id="app")
    tx.init_transactions()
    tx.begin_transaction()
    tx.send(topic, recs(("k", "v")), partition=0)
    tx.commit_transaction()
    txn_doc(store, "app").unlink()
    assert producer_ids.max_producer_id_of_partition(store.log_manager, topic, 0) == tx.producer_id
    counter(store).unlink()
    assert producer_ids.rebuilt_next_id(store.storage, store.log_manager) == tx.producer_id + 1


@pytest.mark.parametrize("content, problem", [
    (b'{"next_produ', "is not valid JSON"),
    (b"", "is not valid JSON"),
    (b'{"next_producer_id": "7"}', "expected an integer"),
    (b'{"next_producer_id": -4}', "expected an integer"),
    (b'{"next_producer_id": 2.5}', "expected an integer"),
    (b"[1]", "holds a JSON list"),
    (b"{}", "has no 'next_producer_id'"),
])
def test_a_damaged_counter_is_refused_naming_the_file_and_nothing_is_written(store, topic, content, problem):
    counter(store).parent.mkdir(parents=True, exist_ok=True)
    counter(store).write_bytes(content)
    p = store.producer()
    with pytest.raises(CorruptStateError) as e:
        p.send(topic, recs(("k", "v")), partition=0)
    assert str(counter(store)) in str(e.value) and problem in str(e.value) and "Delete the file" in str(e.value)
    assert e.value.location == str(counter(store))
    assert seen(store, topic, 0, "read_uncommitted") == []
    assert counter(store).read_bytes() == content  # left as it was, for the operator to look at
    counter(store).unlink()  # the fix the message gives
    p.send(topic, recs(("k", "v")), partition=0)
    assert seen(store, topic, 0) == [(0, "k", "v")]


# -- transactional-id documents ----------------------------------------------------------------------------------


def test_one_damaged_transactional_id_does_not_stop_the_sweep_of_the_others(store, topic, clock):
    good = store.producer(transactional_id="good", transaction_timeout_ms=1000)
    good.init_transactions()
    good.begin_transaction()
    good.send(topic, recs(("g", "1")), partition=0)
    bad = store.producer(transactional_id="bad")
    bad.init_transactions()
    path = txn_doc(store, "bad")
    path.write_bytes(path.read_bytes()[:20])  # torn
    time.sleep(1.5)  # past the 1 s timeout on the store's clock (a manual clock no longer ages a transaction)
    damaged: list[CorruptStateError] = []
    coordinator = TransactionCoordinator(store.log_manager)
    assert [m.transactional_id for m in coordinator.list_transactions(damaged)] == ["good"]
    assert [e.location for e in damaged] == [str(path)]
    # what each cleaner cycle (store.clean()) runs first
    assert store.log_cleaner().maintenance.abort_timed_out_transactions() == ["good"]
    assert coordinator.describe("good").state == COMPLETE_ABORT
    assert store.describe(topic)[0].last_stable_offset == 2
    with pytest.raises(CorruptStateError, match="transactional-id document of 'bad' is not valid JSON"):
        coordinator.describe("bad")
    with pytest.raises(CorruptStateError, match="Only this transactional id is affected"):
        store.producer(transactional_id="bad").init_transactions()


@pytest.mark.parametrize("change", [
    {"producer_id": -1}, {"producer_id": "3"}, {"producer_epoch": None}, {"state": "Sleeping"},
    {"partitions": [["t", -1]]}, {"partitions": "t-0"}, {"txn_start_ms": "yesterday"}, {"timeout_ms": 0},
])
def test_a_transactional_id_document_with_a_wrong_type_or_range_is_refused(store, topic, change):
    p = store.producer(transactional_id="app")
    p.init_transactions()
    path = txn_doc(store, "app")
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    key = next(iter(change))
    with pytest.raises(CorruptStateError, match=key) as e:
        TransactionCoordinator(store.log_manager).describe("app")
    assert str(path) in str(e.value)
    with pytest.raises(CorruptStateError):
        p.begin_transaction()
        p.send(topic, recs(("k", "v")), partition=0)
    assert seen(store, topic, 0, "read_uncommitted") == []


def test_a_deleted_transactional_id_document_gets_a_new_producer_id_never_an_old_one(store, topic):
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("k", "v")), partition=0)
    p.commit_transaction()
    txn_doc(store, "app").unlink()
    counter(store).unlink()
    again = store.producer(transactional_id="app")
    again.init_transactions()
    assert again.producer_id > p.producer_id


# -- hanging transactions ------------------------------------------------------------------------------------------


def _console(root: Path, *argv: str) -> subprocess.CompletedProcess:
    exe = shutil.which("deltalog") or os.path.join(os.path.dirname(sys.executable), "deltalog")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DELTALOG_STORE": str(root)}
    return subprocess.run([exe, *argv], capture_output=True, text=True, env=env, timeout=180)


@pytest.mark.subprocess
def test_a_killed_producer_s_lost_document_leaves_a_hanging_transaction_that_abort_ends(tmp_path):
    root = tmp_path / "store"
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact"})
    kill_mid_transaction(root, plain_first=True)
    txn_doc(Store(root), "app").unlink()  # its coordinator state is lost: nothing will ever end it
    later = ManualClock(Store(root).clock.now_ms() + 20 * MINUTE)
    store = Store(root, clock=later)
    assert [s.last_stable_offset for s in store.describe("t")] == [1, 0]
    assert TransactionCoordinator(store.log_manager).abort_timed_out_transactions(later.now_ms()) == []
    found = store.find_hanging_transactions("t")
    assert [(h.partition, h.start_offset) for h in found] == [(0, 1), (1, 0)]
    assert all(h.duration_ms(later.now_ms()) > 15 * MINUTE for h in found)
    # written to more recently than --max-transaction-timeout: not hanging yet
    assert store.find_hanging_transactions("t", max_transaction_timeout_ms=30 * MINUTE) == []

    # the console script, as an operator runs it
    p = _console(root, "transactions", "find-hanging", "--topic", "t", "--partition", "0",
                 "--max-transaction-timeout", "0")
    assert p.returncode == 0, p.stderr
    header, row = p.stdout.splitlines()
    assert header.split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                              "StartOffset", "LastTimestamp", "Duration(min)"]
    assert row.split()[:6] == ["t", "0", str(found[0].producer_id), str(found[0].producer_epoch), "-1", "1"]
    p = _console(root, "transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "1")
    assert p.returncode == 0 and "ABORT marker at offset 2" in p.stdout, p.stderr
    p = _console(root, "transactions", "abort", "--topic", "t", "--partition", "1",
                 "--producer-id", str(found[1].producer_id), "--producer-epoch", str(found[1].producer_epoch),
                 "--coordinator-epoch", "0")
    assert p.returncode == 0 and "ABORT marker at offset 1" in p.stdout, p.stderr

    assert [s.last_stable_offset for s in store.describe("t")] == [3, 2]
    assert seen(store, "t", 0) == [(0, "before", "1")] and seen(store, "t", 1) == []
    assert store.find_hanging_transactions("t", max_transaction_timeout_ms=0) == []
    p = _console(root, "transactions", "find-hanging", "--broker-id", "1", "--output", "json")
    assert p.returncode == 0 and p.stdout == "", p.stderr


def test_a_transaction_its_coordinator_still_holds_is_not_hanging(store, topic, clock):
    p = store.producer(transactional_id="app", transaction_timeout_ms=900_000)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("k", "v")), partition=0)
    clock.advance(20 * MINUTE)
    assert store.find_hanging_transactions(topic) == []
    # the id's document no longer lists the partition (state damaged by hand into another transaction)
    path = txn_doc(store, "app")
    path.write_text(json.dumps({**json.loads(path.read_text()), "partitions": [["t", 1]]}))
    assert [(h.partition, h.producer_id) for h in store.find_hanging_transactions(topic)] == [(0, p.producer_id)]


def test_abort_refuses_what_it_cannot_find_with_the_open_transactions_named(store, topic):
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, recs(("k", "v")), partition=0)
    with pytest.raises(InvalidArgumentError, match=r"starting at offset 5 on partition t-0; .*0 \(producer"):
        store.abort_transaction(topic, 0, start_offset=5)
    with pytest.raises(InvalidArgumentError, match="has no open transaction in t-1"):
        store.abort_transaction(topic, 1, producer_id=p.producer_id, producer_epoch=p.producer_epoch)
    with pytest.raises(InvalidArgumentError, match="--start-offset, or --producer-id"):
        store.abort_transaction(topic, 0)
    assert seen(store, topic, 0, "read_uncommitted") == [(0, "k", "v")]


@pytest.mark.subprocess
def test_the_cli_reports_a_damaged_document_by_name_and_lists_the_others(tmp_path):
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t")
    for tid in ("a", "b"):
        store.producer(transactional_id=tid).init_transactions()
    path = txn_doc(store, "b")
    path.write_bytes(b'{"transactional_id": "b", "produc')
    p = _console(root, "transactions", "list")
    assert p.returncode == 1 and str(path) in p.stderr and "Traceback" not in p.stderr
    assert [line.split()[0] for line in p.stdout.splitlines()] == ["TransactionalId", "a"]
    p = _console(root, "transactions", "describe", "--transactional-id", "b")
    assert p.returncode == 1 and str(path) in p.stderr and "Delete the file" in p.stderr
    assert "Traceback" not in p.stderr
    p = _console(root, "transactions", "abort-timed-out")
    assert p.returncode == 1 and "Aborted 0" in p.stdout and str(path) in p.stderr


# -- the doctor, and an object store -------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_doctor_reports_damaged_documents_and_hanging_transactions_naming_the_fix(tmp_path):
    root = tmp_path / "store"
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact"})
    kill_mid_transaction(root, plain_first=True)
    store = Store(root)
    txn_doc(store, "app").unlink()
    store.producer(transactional_id="other").init_transactions()
    txn_doc(store, "other").write_text('{"transactional_id": "other", "producer_id": -3, "producer_epoch": 0}')
    counter(store).write_text('{"next_producer_id": "many"}')

    doctor = doctor_checks()
    checks = doctor.check_state_documents(str(root))
    fails = [c for c in checks if c.status == doctor.FAIL]
    assert sorted(c.detail.split(":")[0] for c in fails) == sorted([str(counter(store)), str(txn_doc(store, "other"))])
    assert all("Delete the file" in c.fix for c in fails)
    assert not [c for c in checks if c.name.startswith("hanging")]  # written to moments ago: not hanging yet
    found = {c.name: c for c in doctor.check_state_documents(str(root))}
    assert "producer_id=-3" in " ".join(c.detail for c in found.values())

    from deltalog import state_check

    _, problems = state_check.scan_state(store.storage, now_ms=store.clock.now_ms() + 20 * MINUTE)
    hanging_rows = [p for p in problems if p.name.startswith("hanging")]
    assert [p.name for p in hanging_rows] == ["hanging t-0", "hanging t-1"]
    assert hanging_rows[0].fix == "deltalog transactions abort --topic t --partition 0 --start-offset 1"

    p = _console(root, "doctor", "--no-spark")
    assert p.returncode == 1 and str(txn_doc(store, "other")) in p.stdout and "Traceback" not in p.stderr
    txn_doc(store, "other").unlink()
    counter(store).unlink()
    checks = doctor.check_state_documents(str(root))
    assert [c.status for c in checks] == [doctor.OK], checks


def test_lost_and_damaged_state_on_s3(s3_server, s3_store_uri):
    store = Store(s3_store_uri, storage_options=s3_server.storage_options)
    store.create_topic("t")
    old = store.producer()
    old.send("t", recs(("k", "v")), partition=0)
    tx = store.producer(transactional_id="app")
    tx.init_transactions()
    store.storage.delete(store.storage.location(*producer_ids.PRODUCER_IDS))
    new = store.producer()
    new.send("t", recs(("k", "v")), partition=0)
    assert new.producer_id == 2 and [v for _, _, v in seen(store, "t")] == ["v", "v"]
    location = producer_state.transactional_location(store.storage, "app")
    store.storage.write_bytes(location, b'{"transactional_id": "app", "producer_id"')
    with pytest.raises(CorruptStateError) as e:
        TransactionCoordinator(store.log_manager).describe("app")
    assert e.value.location == location and location.startswith("s3://")
    doctor = doctor_checks()
    assert [c.status for c in doctor.check_state_documents(s3_store_uri, s3_server.storage_options)] == [doctor.FAIL]


# -- topic markers -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b'{"state": "ready", "parti', b'{"state": "ready", "partitions": -2}',
                                     b'{"state": "gone", "partitions": 1}', b'{"state": "ready", "partitions": "1"}'])
def test_a_damaged_topic_marker_is_listed_with_its_damage_and_stops_a_counter_rebuild(store, content, capsys):
    store.create_topic("good")
    store.create_topic("bad")
    store.producer().send("bad", recs(("k", "v")))
    marker = Path(store.log_manager._marker_path("bad"))
    marker.write_bytes(content)
    store = Store(store.root)  # a process that has not opened the topic yet
    # listed, never silently left out: its damage is named with the file
    assert sorted(store.list_topics()) == ["bad", "good"]
    assert list(store.damaged_topics()) == ["bad"] and store.damaged_topics()["bad"].location == str(marker)
    assert store.admin().list_topics() == store.list_topics()
    code, out, _ = run_cli(capsys, "--store", store.root, "topics", "list")
    assert code == 3 and "good\n" in out and f"bad  (DAMAGED: {marker}: the topic marker" in out
    code, out, _ = run_cli(capsys, "--store", store.root, "topics", "list", "--output", "json")
    assert {d["topic"]: d.get("location") for d in json_lines(out)} == {"good": None, "bad": str(marker)}
    # the store's own sweeps (the cleaner, retention, pattern subscriptions) go on over the other topics
    assert store.log_manager.list_topics() == ["good"]
    with pytest.raises(CorruptStateError) as e:
        store.read("bad", 0)
    assert e.value.location == str(marker) and "remove it and the topic's files" in str(e.value)
    store.produce("good", recs(("k", "v")))  # the other topic works
    counter(store).unlink()
    with pytest.raises(CorruptStateError, match="cannot be rebuilt while a topic's marker is damaged"):
        store.producer().send("good", recs(("k", "w")))
    doctor = doctor_checks()
    assert [c.status for c in doctor.check_state_documents(store.root)] == [doctor.FAIL]


def test_damaged_cleaner_figures_read_as_none_and_doctor_warns(store):
    doctor = doctor_checks()
    from deltalog.cleaner import metrics

    store.create_topic("t", config={"cleanup.policy": "compact"})
    path = Path(store.log_manager.state_path(metrics.CLEANER_STATE_DIR, "last-run.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    for content in ('["not", "figures"]', '{"finished_ms": "soon"}', '{"finished'):
        path.write_text(content)
        assert metrics.last_run(store.log_manager) is None
        assert metrics.collect(store.log_manager).last_run_ms is None
    checks = doctor.check_state_documents(store.root)
    assert [(c.status, c.detail.split(":")[0]) for c in checks] == [(doctor.WARN, str(path))]


def test_store_clean_goes_on_past_a_damaged_transactional_id_and_aborts_the_others(spark_store, clock):
    """store.clean() used to raise a raw JSONDecodeError before cleaning anything: the coordinator's sweep runs
    first. Now the damaged id is skipped (logged, and named by doctor), the other id's timed-out transaction is
    aborted, and the pass runs past it."""
    store = spark_store
    store.create_topic("c", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    timed_out = store.producer(transactional_id="slow", transaction_timeout_ms=1000)
    timed_out.init_transactions()
    timed_out.begin_transaction()
    timed_out.send("c", recs(("k", "aborted")), partition=0)
    store.producer(transactional_id="torn").init_transactions()
    txn_doc(store, "torn").write_bytes(b'{"transactional_id": "to')
    store.append("c", 0, recs(("k", "1"), ("k", "2")))
    store.roll("c", 0)
    time.sleep(1.5)  # past the 1 s timeout on the store's clock (a manual clock no longer ages a transaction)
    results = store.clean()
    assert [(r.topic, r.partition) for r in results] == [("c", 0)]
    assert seen(store, "c", 0) == [(2, "k", "2")]  # the aborted record dropped, the older value compacted away


def test_an_uncleanable_mark_of_the_wrong_shape_still_marks_its_partition_and_reset_clears_it(store):
    from deltalog.cleaner.uncleanable import UncleanablePartitions

    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    marks = UncleanablePartitions(store.storage)
    path = Path(marks._path("t", 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    good = {"topic": "t", "partition": 1, "marked_ms": 1, "error_type": "X", "message": "m",
            "first_dirty_offset": 0, "first_uncleanable_offset": 3, "owner": "o"}
    for change in ({"partition": 0}, {"partition": "1"}, {"first_dirty_offset": "0"}, {"marked_ms": None}):
        path.write_text(json.dumps({**good, **change}))
        [mark] = marks.marks()
        assert (mark.topic, mark.partition) == ("t", 1) and str(path) in mark.message
    assert [(m.topic, m.partition) for m in marks.reset("t", 1)] == [("t", 1)]
    assert not path.exists() and marks.marks() == []


@pytest.mark.subprocess
def test_find_hanging_and_abort_refuse_a_command_line_without_their_scope(tmp_path):
    root = tmp_path / "store"
    Store(root).create_topic("t")
    p = _console(root, "transactions", "find-hanging")
    assert p.returncode == 2 and "requires either --topic or --broker-id" in p.stderr
    p = _console(root, "transactions", "find-hanging", "--broker-id", "0", "--partition", "0")
    assert p.returncode == 2 and "--partition argument requires --topic" in p.stderr
    p = _console(root, "transactions", "abort", "--topic", "t", "--partition", "0")
    assert p.returncode == 2 and "--start-offset" in p.stderr
    p = _console(root, "transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert p.returncode == 1 and "Could not find any open transactions starting at offset 0" in p.stderr
    p = _console(root, "transactions", "find-hanging", "--topic", "nope")
    assert p.returncode == 1 and "does not exist" in p.stderr


@pytest.mark.subprocess
def test_find_hanging_searches_past_a_partition_whose_delta_log_is_damaged(tmp_path):
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", recs(("k", "v")), partition=0)
    txn_doc(store, "app").unlink()
    for i in range(3):
        store.append("t", 1, recs(("k", str(i))))
    commits = sorted((Path(store.log("t", 1).uri) / "_delta_log").glob("*.json"))
    commits[1].unlink()  # a gap in partition 1's Delta log
    p = _console(root, "transactions", "find-hanging", "--topic", "t", "--max-transaction-timeout", "0")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert [line.split()[:2] for line in p.stdout.splitlines()[1:]] == [["t", "0"]]
    assert "t-1" in p.stderr or "/1/_delta_log" in p.stderr
    with pytest.raises(CorruptLogError, match="_delta_log"):
        Store(root).find_hanging_transactions("t", max_transaction_timeout_ms=0)


def test_kafka_metadata_lists_a_topic_with_a_damaged_marker_with_kafkas_storage_error(store):
    from kafka.protocol.metadata import MetadataRequest

    from deltalog.server import protocol
    from deltalog.server.kafka_apis import KafkaApis

    store.create_topic("good")
    store.create_topic("bad")
    Path(store.log_manager._marker_path("bad")).write_bytes(b'{"state": "ready", "parti')
    apis = KafkaApis(Store(store.root), ("127.0.0.1", 9092))
    req = MetadataRequest[1](topics=None)
    req.with_header(correlation_id=1, client_id="raw")
    answer = apis.handle_metadata(protocol.parse_request(bytes(req.encode(header=True, framed=True))[4:]))
    assert {t.name: t.error_code for t in answer.topics} == {"good": protocol.NONE,
                                                             "bad": protocol.KAFKA_STORAGE_ERROR}
