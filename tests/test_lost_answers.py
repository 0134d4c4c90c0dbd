"""Writes whose answer the object store loses: nothing acknowledged is lost, nothing landed is removed.

A real moto S3 server behind a real fault-injecting proxy (``tooling.fault_proxy``): a fault ``after`` lets the
PUT land in the store and then answers 500 or drops the connection (a timeout, a network blip); a fault
``before`` fails the PUT without forwarding it. The object store's client retries either; a retried commit file
or conditional put then finds its own write there. Afterwards every acknowledged record must be readable at the
offset it was acknowledged with, and each partition's current version must reference only files that exist (the
damage walk of ``deltalog doctor``, :mod:`deltalog.log.damage`).
"""

from __future__ import annotations

import random
import time
import urllib.error
import urllib.request

import pytest
from deltalake import DeltaTable

from deltalog import ManualClock, Record, Store
from deltalog.cleaner.metrics import append_metrics, collect, metrics_table_uri
from deltalog.coordinator.transaction import producer_ids
from deltalog.errors import CommitOutcomeUnknownError, DeltalogError
from deltalog.log import damage
from deltalog.storage import Storage

#: The PUT of a partition's Delta commit file (not a checkpoint, not the data files).
COMMIT_FILE = r"/_delta_log/\d{20}\.json$"
#: urllib sends a body as a form by default, which the S3 server would not store as given.
BINARY = {"Content-Type": "application/octet-stream"}
FAULTS = [("after", "500"), ("after", "drop"), ("before", "500"), ("before", "drop")]


def recs(prefix: str, n: int, keys: int | None = None) -> list[Record]:
    return [Record(key=b"k%d" % (i % (keys or n)), value=f"{prefix}-{i}".encode()) for i in range(n)]


@pytest.fixture
def store(faulty_s3) -> Store:
    uri, options = faulty_s3
    return Store(uri, storage_options=options, clock=ManualClock(1_700_000_000_000))


def assert_sound(store: Store, topic: str) -> None:
    """Each partition's Delta log is whole and its current version references only files that are there, of the
    size committed, with readable footers."""
    for p in store.partitions(topic):
        log = store.log(topic, p)
        assert damage.log_damage(store.storage, log.uri) == []
        assert damage.data_damage(store.storage, log.uri, log.snapshot().files) == []


def values(store: Store, topic: str, partition: int = 0, level: str = "read_uncommitted") -> dict[int, bytes]:
    return {r.offset: r.value for r in store.read(topic, partition, "earliest", isolation_level=level)}


def test_the_proxy_fails_a_put_before_it_reaches_the_store_or_after_it_landed(fault_proxy, s3_server, s3_store_uri):
    bucket_key = s3_store_uri[len("s3://"):]
    direct = Storage(s3_store_uri, s3_server.storage_options)
    for when in ("before", "after"):
        key = f"{bucket_key}/probe-{when}"
        fault_proxy.add(method="PUT", key=f"probe-{when}$", when=when, action="500")
        put = urllib.request.Request(f"{fault_proxy.url}/{key}", data=b'"x"', method="PUT", headers=BINARY)
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(put, timeout=10)
        assert failed.value.code == 500
        landed = direct.read_json(direct.location(f"probe-{when}")) == "x"  # past the proxy
        assert landed is (when == "after")
    assert fault_proxy.fired() == [1, 1]
    # a dropped connection: no answer at all
    fault_proxy.add(method="PUT", key="probe-drop$", when="after", action="drop")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(urllib.request.Request(f"{fault_proxy.url}/{bucket_key}/probe-drop", data=b'"y"',
                                                      method="PUT", headers=BINARY), timeout=10)
    assert direct.read_json(direct.location("probe-drop")) == "y"


@pytest.mark.parametrize("when,action", FAULTS)
def test_an_append_whose_commit_answer_is_lost_keeps_its_records(store, fault_proxy, when, action):
    store.create_topic("t", 1)
    assert store.append("t", 0, recs("a", 3)) == [0, 1, 2]
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when=when, action=action)
    assert store.append("t", 0, recs("b", 2)) == [3, 4]
    assert fault_proxy.fired() == [1]
    assert values(store, "t") == {0: b"a-0", 1: b"a-1", 2: b"a-2", 3: b"b-0", 4: b"b-1"}
    assert store.log("t", 0).head().log_end_offset == 5
    assert_sound(store, "t")


def test_an_append_whose_every_commit_answer_is_lost_still_commits_once(store, fault_proxy):
    store.create_topic("t", 1)
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when="after", action="500", times=None)
    assert store.append("t", 0, recs("a", 2)) == [0, 1]
    assert store.append("t", 0, recs("b", 1)) == [2]
    fault_proxy.clear()
    assert values(store, "t") == {0: b"a-0", 1: b"a-1", 2: b"b-0"}
    assert_sound(store, "t")


def test_an_append_the_store_keeps_refusing_fails_clearly_and_leaves_the_log_whole(store, fault_proxy):
    store.create_topic("t", 1)
    store.append("t", 0, recs("a", 2))
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when="before", action="500", times=None)
    with pytest.raises(CommitOutcomeUnknownError, match="may still apply the write"):
        store.append("t", 0, recs("b", 1))  # the requests never reached the store, but its client cannot know
    fault_proxy.clear()
    assert values(store, "t") == {0: b"a-0", 1: b"a-1"}
    assert store.append("t", 0, recs("c", 1)) == [2]
    assert_sound(store, "t")


def test_a_commit_that_lands_after_its_writer_was_told_it_failed_is_never_called_absent(store, fault_proxy):
    """Every PUT of the commit file fails at once and reaches the store 10 s later: the log does not show the
    commit when the append gives up, and then it lands. The error must say so, and must not ask for the plain
    resend that would write the records twice."""
    store.create_topic("t", 1)
    store.append("t", 0, recs("a", 2))
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when="late", action="500", times=None, delay_s=10.0)
    with pytest.raises(CommitOutcomeUnknownError) as failed:
        store.append("t", 0, recs("b", 1))
    fault_proxy.clear()
    message = str(failed.value)
    assert "may still apply the write" in message and "idempotent producer" in message
    assert "try again" not in message and "did not land" not in message
    deadline = time.monotonic() + 60
    while len(values(store, "t")) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert values(store, "t") == {0: b"a-0", 1: b"a-1", 2: b"b-0"}  # it landed, once: a plain resend would duplicate
    assert store.log("t", 0).head().log_end_offset == 3
    assert_sound(store, "t")


@pytest.mark.parametrize("when,action", [("after", "500"), ("after", "drop")])
def test_an_idempotent_send_whose_answer_is_lost_returns_offsets_that_hold_its_records(store, fault_proxy, when,
                                                                                       action):
    store.create_topic("t", 1)
    producer = store.producer()
    assert list(producer.send("t", recs("a", 2), partition=0).offsets) == [0, 1]
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when=when, action=action)
    sent = producer.send("t", recs("b", 3), partition=0)
    assert fault_proxy.fired() == [1]
    assert list(sent.offsets) == [2, 3, 4]
    got = values(store, "t")
    assert [got[o] for o in sent.offsets] == [b"b-0", b"b-1", b"b-2"]
    assert len(got) == 5  # once: the lost answer did not make it append twice
    assert_sound(store, "t")


@pytest.mark.parametrize("when,action", [("after", "500"), ("before", "drop")])
def test_commit_transaction_whose_marker_answers_are_lost_completes(store, fault_proxy, when, action):
    store.create_topic("t", 2)
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", recs("x", 2), partition=0)
    p.send("t", recs("y", 1), partition=1)
    # every marker commit and every transaction-state document write loses its answer once
    fault_proxy.add(method="PUT", key=r"/topics/t/\d/_delta_log/\d{20}\.json$", when=when, action=action, times=2)
    fault_proxy.add(method="PUT", key=r"^(?!.*_delta_log).*\.json$", when=when, action=action, times=3)
    p.commit_transaction()
    assert fault_proxy.fired() == [2, 3]
    fault_proxy.clear()
    assert values(store, "t", 0, "read_committed") == {0: b"x-0", 1: b"x-1"}
    assert values(store, "t", 1, "read_committed") == {0: b"y-0"}
    described = store.describe("t")
    assert [d.log_end_offset for d in described] == [3, 2]  # one marker each, not two
    assert [d.last_stable_offset for d in described] == [3, 2]
    assert_sound(store, "t")


@pytest.mark.parametrize("when,action", [("after", "drop"), ("before", "500")])
def test_delete_records_whose_commit_answer_is_lost_moves_the_log_start_once(store, fault_proxy, when, action):
    store.create_topic("t", 1)
    store.append("t", 0, recs("a", 2))
    store.append("t", 0, recs("b", 2))
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when=when, action=action)
    result = store.delete_records("t", 0, 2)
    assert fault_proxy.fired() == [1]
    assert (result.low_watermark, result.files_deleted, result.records_deleted) == (2, 1, 2)
    assert result.version == store.log("t", 0).snapshot().version  # the version it landed as
    assert values(store, "t") == {2: b"b-0", 3: b"b-1"}
    assert_sound(store, "t")


@pytest.mark.parametrize("when,action", FAULTS)
def test_create_topic_whose_answers_are_lost_makes_a_ready_topic(store, fault_proxy, when, action):
    # the topic marker's create and its swaps to ready, and version 0 of each partition
    fault_proxy.add(method="PUT", key=r"/_topic\.json$", when=when, action=action, times=2)
    fault_proxy.add(method="PUT", key=r"/0/_delta_log/0{20}\.json$", when=when, action=action)
    store.create_topic("t", 2)
    assert fault_proxy.fired() == [2, 1]
    assert store.list_topics() == ["t"] and store.partitions("t") == [0, 1]
    assert [store.log("t", p).table().version() for p in (0, 1)] == [0, 0]  # created once, not again as version 1
    assert store.append("t", 1, recs("a", 1)) == [0]
    assert_sound(store, "t")


@pytest.mark.parametrize("when,action", [("after", "500"), ("after", "drop")])
def test_a_lease_whose_create_answer_is_lost_is_held_by_its_taker(store, fault_proxy, when, action):
    store.create_topic("t", 1)
    fault_proxy.add(method="PUT", key=r"/leases/.*\.lease$", when=when, action=action)
    with store.leases.hold("t", 0, "clean") as lease:  # not "busy": the lease found is its own
        assert store.leases.holder("t", 0).owner == lease.manager.owner
    assert fault_proxy.fired() == [1]
    assert store.leases.holder("t", 0) is None


@pytest.mark.parametrize("when,action", [("after", "500"), ("before", "drop")])
def test_metrics_rows_whose_commit_answer_is_lost_are_appended_once(store, fault_proxy, when, action):
    store.create_topic("t", 1)
    store.append("t", 0, recs("a", 1))
    uri = metrics_table_uri(store.log_manager)
    for version in (0, 1):  # the table's creation, then an append
        fault_proxy.add(method="PUT", key=rf"/metrics/_delta_log/{version:020d}\.json$", when=when, action=action)
        append_metrics(store.log_manager, collect(store.log_manager))
    table = DeltaTable(uri, storage_options=store.storage.delta_options)
    assert table.version() == 1  # one commit per batch: a lost answer did not make delta-rs commit it again
    rows = table.to_pyarrow_table().to_pylist()
    assert sorted(r["scope"] for r in rows) == ["partition", "partition", "store", "store"]
    assert fault_proxy.fired() == [1, 1]


def test_two_writers_of_identical_bytes_never_both_win_a_compare_and_swap(faulty_s3, fault_proxy):
    uri, options = faulty_s3
    first, second = Storage(uri, options), Storage(uri, options)
    counter = first.location("_deltalog", "counter.json")
    etag = first.create_json(counter, {"next_producer_id": 1})
    fault_proxy.add(method="PUT", key=r"counter\.json$", when="after", action="drop")
    won = first.replace_json(counter, {"next_producer_id": 2}, etag)  # lands; its answer is lost
    lost = second.replace_json(counter, {"next_producer_id": 2}, etag)  # the same bytes, from the same etag
    assert won is not None and lost is None
    assert fault_proxy.fired() == [1]
    # the producer-id allocator over a store whose answers get lost hands out each id once
    Store(uri, storage_options=options).create_topic("t", 1)  # a store: a lost counter is rebuilt from its logs
    fault_proxy.add(method="PUT", key=r"producer", when="after", action="500", times=None, probability=0.5)
    ids = [producer_ids.allocate(s) for s in (first, second) * 4]
    assert len(set(ids)) == len(ids)


@pytest.fixture
def spark_faulty_store(faulty_s3, spark, monkeypatch, s3_server) -> Store:
    for name in s3_server.env:  # the proxy's endpoint, given as options, must be the only way to the store
        monkeypatch.delenv(name, raising=False)
    uri, options = faulty_s3
    return Store(uri, storage_options=options, clock=ManualClock(1_700_000_000_000), spark=spark)


@pytest.mark.parametrize("when,action", [("after", "500"), ("before", "drop")])
def test_a_cleaning_pass_whose_commit_answer_is_lost_keeps_its_output(spark_faulty_store, fault_proxy, when,
                                                                       action):
    store = spark_faulty_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    for r in range(3):
        store.append("t", 0, [Record(key=b"k%d" % k, value=b"r%d" % r) for k in range(5)])
        store.roll("t", 0)
    store.append("t", 0, [Record(key=b"active", value=b"1")])
    fault_proxy.add(method="PUT", key=COMMIT_FILE, when=when, action=action)
    result = store.clean_partition("t", 0, force=True)
    assert fault_proxy.fired() == [1]
    assert result is not None and result.records_written == 5
    assert result.version == store.log("t", 0).snapshot().version
    latest = {r.key: (r.offset, r.value) for r in store.read("t", 0, "earliest")}
    assert latest == {**{b"k%d" % k: (10 + k, b"r2") for k in range(5)}, b"active": (15, b"1")}
    assert_sound(store, "t")


def test_a_random_run_of_lost_and_failed_puts_loses_nothing_acknowledged(store, fault_proxy):
    """Seeded faults on a fifth of the PUTs (before or after, 500 or dropped) while appending and idempotently
    sending to three partitions for about 12 seconds: every acknowledged record is where it was acknowledged,
    and every partition stays readable and whole."""
    rng = random.Random(21)
    store.create_topic("t", 3)
    for i, (when, action) in enumerate(FAULTS):
        fault_proxy.add(method="PUT", key=r"/t/", when=when, action=action, times=None, probability=0.05 + 0.01 * i)
    producer = store.producer(retries=5, retry_backoff_ms=10)
    acknowledged: dict[tuple[int, int], bytes] = {}
    failures: list[str] = []
    deadline, hard_deadline = time.monotonic() + 12, time.monotonic() + 45
    n = 0
    # about 12 s; on a loaded machine longer, until enough faults were injected to mean anything (at most 45 s)
    while time.monotonic() < deadline or (len(fault_proxy.faulted()) < 10 and time.monotonic() < hard_deadline):
        p = rng.randrange(3)
        batch = recs(f"s{n}", rng.randint(1, 4))
        n += 1
        try:
            if rng.random() < 0.5:
                offsets = store.append("t", p, batch)
            else:
                offsets = list(producer.send("t", batch, partition=p).offsets)
        except DeltalogError as e:  # a clear failure is allowed; a silent loss is not
            failures.append(type(e).__name__)
            continue
        assert len(offsets) == len(batch)
        for o, r in zip(offsets, batch, strict=True):
            assert (p, o) not in acknowledged, f"offset {o} of partition {p} acknowledged twice"
            acknowledged[(p, o)] = r.value
    fault_proxy.clear()
    assert len(fault_proxy.faulted()) >= 10, "the run injected too few faults to mean anything"
    assert len(acknowledged) > 20
    for p in range(3):
        got = values(store, "t", p)
        for (q, o), v in acknowledged.items():
            if q == p:
                assert got.get(o) == v, f"acknowledged record at offset {o} of partition {p} is lost"
    assert_sound(store, "t")
