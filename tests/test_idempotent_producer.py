"""The idempotent producer: producer ids and epochs, sequences per partition kept in the Delta log
with each batch, retries acknowledged with their original offsets (also by a new process after a SIGKILL between
commit and acknowledgement), fencing, out-of-order sequences, and producer state surviving a cleaning pass."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from deltalake import DeltaTable

from deltalog import (
    IllegalStateError,
    InvalidConfigError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    Record,
    RecordMetadata,
    Store,
)
from deltalog.coordinator.transaction import producer_ids
from deltalog.log import producer_state
from deltalog.log.producer_state import ProducerBatch

REPO = Path(__file__).resolve().parents[1]


def recs(*pairs):
    return [Record(key=k.encode(), value=v.encode()) for k, v in pairs]


def offsets_of(store, topic, partition):
    return [(r.offset, r.key, r.value) for r in store.read(topic, partition)]


def leo(store, topic, partition=0):
    return store.log(topic, partition).head().log_end_offset


def test_a_retried_batch_gets_its_original_offsets_and_is_not_appended_twice(store):
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    log = store.log("t", 0)
    now = store.clock.now_ms()
    first = ProducerBatch(7, 0, 0)
    assert log.append(recs(("a", "1"), ("b", "2")), now, producer=first) == [0, 1]
    assert log.append(recs(("a", "1"), ("b", "2")), now, producer=first) == [0, 1]  # the retry: same offsets
    assert leo(store, "t") == 2
    assert log.append(recs(("c", "3")), now, producer=ProducerBatch(7, 0, 2)) == [2]
    assert log.append(recs(("c", "3")), now, producer=ProducerBatch(7, 0, 2)) == [2]
    assert [o for o, _, _ in offsets_of(store, "t", 0)] == [0, 1, 2]
    # the state is in the Delta log, committed with the batch
    dt = DeltaTable(log.uri)
    assert dt.transaction_version("deltalog.producer.7") == (0 << 32) | 3
    assert dt.transaction_version("deltalog.producer.7.base") == 2


def test_producer_state_expires_after_producer_id_expiration_ms_and_the_producer_starts_over(store):
    """producer.id.expiration.ms (a topic config here; Kafka's broker config): a producer's state in a partition
    is committed with its last update time and the table carries Delta's delta.setTransactionRetentionDuration,
    so the state of a producer idle that long is gone from every snapshot (on the wall clock). The partition
    then refuses the producer's next sequence as unknown (UnknownProducerIdError), and the producer starts that
    partition's sequence over at 0 (KIP-360), landing the batch once. The log positions never expire."""
    import time

    from deltalog import UnknownProducerIdError
    from deltalog.log import delta

    assert producer_state.app_id(3).startswith(delta.EXPIRING_APP_PREFIX)
    store.create_topic("t", 2, config={"producer.id.expiration.ms": 1500})
    log = store.log("t", 0)
    assert DeltaTable(log.uri).metadata().configuration[delta.SET_TXN_RETENTION] == "interval 1500 milliseconds"
    producer = store.producer()
    assert producer.send("t", recs(("a", "1")), partition=0).offsets.tolist() == [0]
    assert DeltaTable(log.uri).transaction_version(producer_state.app_id(producer.producer_id)) is not None
    time.sleep(1.6)
    assert DeltaTable(log.uri).transaction_version(producer_state.app_id(producer.producer_id)) is None
    assert log.head().log_end_offset == 1  # the log positions do not expire
    with pytest.raises(UnknownProducerIdError, match="expired after producer.id.expiration.ms"):
        log.append(recs(("z", "9")), store.clock.now_ms(), producer=ProducerBatch(producer.producer_id, 0, 1))
    assert producer.send("t", recs(("b", "2")), partition=0).offsets.tolist() == [1]  # sequence 0 again
    assert producer.sequence("t", 0) == 1
    assert producer.send("t", recs(("b", "2")), partition=0).offsets.tolist() == [2]  # a new batch, not a retry
    assert [o for o, _, _ in offsets_of(store, "t", 0)] == [0, 1, 2]
    store.alter_topic_config("t", {"producer.id.expiration.ms": 86_400_000})
    assert DeltaTable(log.uri).metadata().configuration[delta.SET_TXN_RETENTION] == "interval 86400000 milliseconds"


def test_out_of_order_sequences_are_refused_with_kafkas_message(store):
    store.create_topic("t", 1)
    log = store.log("t", 0)
    now = store.clock.now_ms()
    with pytest.raises(OutOfOrderSequenceError, match="first batch must have sequence 0"):
        log.append(recs(("a", "1")), now, producer=ProducerBatch(3, 0, 5))
    log.append(recs(("a", "1"), ("b", "1")), now, producer=ProducerBatch(3, 0, 0, digest=10))
    with pytest.raises(OutOfOrderSequenceError, match=r"Out of order sequence number for producer 3 .*t-0: 3 \(incoming"):
        log.append(recs(("c", "1")), now, producer=ProducerBatch(3, 0, 3))  # sequence 2 was skipped
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        log.append(recs(("c", "1")), now, producer=ProducerBatch(3, 1, 2))  # a new epoch starts at 0
    # the same sequence with other records is not taken for a retry
    with pytest.raises(OutOfOrderSequenceError, match="again with other records"):
        log.append(recs(("x", "1"), ("y", "1")), now, producer=ProducerBatch(3, 0, 0, digest=11))
    assert leo(store, "t") == 2


def test_a_stale_epoch_is_fenced_in_the_partition(store):
    store.create_topic("t", 1)
    log = store.log("t", 0)
    now = store.clock.now_ms()
    log.append(recs(("a", "1")), now, producer=ProducerBatch(4, 1, 0))
    with pytest.raises(InvalidProducerEpochError, match="Epoch of producer 4 in t-0 is 0, which is smaller than the "
                                                       "last seen epoch 1"):
        log.append(recs(("b", "1")), now, producer=ProducerBatch(4, 0, 1))
    with pytest.raises(ProducerFencedError):
        log.append(recs(("b", "1")), now, producer=ProducerBatch(4, 0, 1, transactional=True))
    assert leo(store, "t") == 1


def test_producer_sends_with_sequences_per_partition(store):
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    with store.producer() as p:
        r = p.send("t", recs(("grape", "1"), ("lime", "2"), ("grape", "3")))
        assert p.producer_id == 0 and p.producer_epoch == 0
        assert [m.partition for m in r] == [1, 0, 1]
        assert p.sequence("t", 1) == 2 and p.sequence("t", 0) == 1
        r2 = p.produce("t", recs(("grape", "4")))
        assert r2[0] == RecordMetadata("t", 1, 2, store.clock.now_ms())
        p.flush()
    assert store.producer().send("t", recs(("lime", "5")))[0].offset == 1  # another producer, another id
    assert producer_ids.allocate(store.storage) == 2
    with pytest.raises(IllegalStateError, match="closed"):
        p.send("t", recs(("a", "1")))


def test_a_plain_producer_without_idempotence(store):
    store.create_topic("t", 1)
    p = store.producer(**{"enable.idempotence": False})
    assert p.send("t", recs(("a", "1")))[0].offset == 0
    assert p.producer_id is None
    assert DeltaTable(store.log("t", 0).uri).transaction_version("deltalog.producer.0") is None


@pytest.mark.parametrize(("configs", "message"), [
    ({"lingering_ms": 5}, r"'lingering_ms' is not a producer config deltalog knows; known: acks, client_id, "
                       r"enable_idempotence, key_serializer, retries"),
    ({"enable_idempotence": False, "transactional_id": "x"},
     "Cannot set a transactional.id without also enabling idempotence"),
    ({"acks": 1}, "Must set acks to all in order to use the idempotent producer"),
    ({"acks": "some"}, "acks must be one of"),
    ({"enable_idempotence": "yes"}, "enable_idempotence must be True or False"),
    ({"transactional_id": ""}, "transactional_id must be a non-empty string"),
    ({"retries": -1}, "retries must be an integer >= 0"),
])
def test_bad_producer_configs_name_what_is_allowed(store, configs, message):
    with pytest.raises(InvalidConfigError, match=message):
        store.producer(**configs)


def test_transactional_methods_need_their_order(store):
    store.create_topic("t", 1)
    with pytest.raises(IllegalStateError, match="non-transactional producer"):
        store.producer().init_transactions()
    with pytest.raises(IllegalStateError, match="before completing a call to init_transactions"):
        store.producer(transactional_id="app").send("t", recs(("a", "1")))


def test_init_transactions_bumps_the_epoch_and_fences_the_older_producer(store):
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    old = store.producer(transactional_id="app")
    old.init_transactions()
    old.send("t", recs(("a", "1")), partition=0)
    new = store.producer(transactional_id="app")
    new.init_transactions()
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
    with pytest.raises(ProducerFencedError, match="newer producer with the same transactional_id 'app'"):
        old.send("t", recs(("b", "1")), partition=1)  # a partition the new epoch never wrote to
    assert new.send("t", recs(("b", "2")), partition=0)[0].offset == 1
    assert leo(store, "t", 1) == 0
    other = store.producer(transactional_id="other")
    other.init_transactions()
    assert other.producer_id != new.producer_id


def test_a_new_epoch_recognises_the_resend_of_the_previous_epochs_last_batch(store):
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    old = store.producer(transactional_id="app")
    old.init_transactions()
    old.send("t", recs(("a", "1")))
    sent = old.send("t", recs(("b", "1"), ("c", "1")))  # pretend its acknowledgement was lost
    new = store.producer(transactional_id="app")
    new.init_transactions()
    assert new.send("t", recs(("b", "1"), ("c", "1"))) == sent
    assert leo(store, "t") == 3
    assert new.send("t", recs(("d", "1")))[0].offset == 3  # and it goes on from there
    assert new.sequence("t", 0) == 3
    # epochs that died before sending anything in between change nothing
    for _ in range(2):
        store.producer(transactional_id="app").init_transactions()
    latest = store.producer(transactional_id="app")
    latest.init_transactions()
    assert latest.producer_epoch == 4
    assert latest.send("t", recs(("d", "1")))[0].offset == 3
    assert leo(store, "t") == 4
    # a different first batch of a new epoch is new data
    newer = store.producer(transactional_id="app")
    newer.init_transactions()
    assert newer.send("t", recs(("d", "2")))[0].offset == 4


@pytest.mark.subprocess
def test_producer_ids_are_unique_across_processes(store):
    root = store.root
    script = textwrap.dedent(f"""
        from deltalog import Store
        from deltalog.coordinator.transaction.producer_ids import allocate as allocate_producer_id
        s = Store({str(root)!r})
        print(" ".join(str(allocate_producer_id(s.storage)) for _ in range(15)))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    ids = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        ids += [int(x) for x in out.split()]
    assert sorted(ids) == list(range(45))


WORKER = textwrap.dedent("""
    import json, sys
    from deltalog import Record, Store
    root, tid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(root)
    p = store.producer(transactional_id=tid)
    p.init_transactions()
    result = p.send("t", [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(n)])
    print(json.dumps({"epoch": p.producer_epoch, "offsets": result.offsets_by_partition()}))
""")


def run_worker(root, tid, n, fault=None):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DELTALOG_FAULT_KILL", None)
    if fault:
        env["DELTALOG_FAULT_KILL"] = fault
    return subprocess.run([sys.executable, "-c", WORKER, str(root), tid, str(n)], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.subprocess
def test_sigkill_between_commit_and_acknowledgement_then_a_new_process_retries(tmp_path):
    root = tmp_path / "store"
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact"})
    # the first process commits its batch to the 2nd partition it appends to and dies before acknowledging
    killed = run_worker(root, "app", 20, fault="append:after-commit@2")
    assert killed.returncode == -9, killed.stderr
    assert "SIGKILL at append:after-commit #2" in killed.stderr
    store = Store(root)
    before = {p: leo(store, "t", p) for p in (0, 1)}
    assert sum(before.values()) == 20  # both partitions committed, nobody was told
    # a new process with the same transactional id sends the same records again: no duplicate, original offsets
    retry = run_worker(root, "app", 20)
    assert retry.returncode == 0, retry.stderr
    import json

    answer = json.loads(retry.stdout)
    assert answer["epoch"] == 1
    assert {int(p): o for p, o in answer["offsets"].items()} == {p: list(range(before[p])) for p in (0, 1)}
    assert {p: leo(store, "t", p) for p in (0, 1)} == before
    assert sorted(r.key for p in (0, 1) for r in store.read("t", p)) == sorted(b"k%d" % i for i in range(20))


@pytest.mark.subprocess
def test_sigkill_before_the_second_partition_commits_then_a_new_process_completes_it(tmp_path):
    root = tmp_path / "store"
    Store(root).create_topic("t", 2, config={"cleanup.policy": "compact"})
    killed = run_worker(root, "app", 20, fault="append:before-commit@2")
    assert killed.returncode == -9, killed.stderr
    store = Store(root)
    committed = {p: leo(store, "t", p) for p in (0, 1)}
    assert sorted(committed.values())[0] == 0  # one partition committed, the other not
    retry = run_worker(root, "app", 20)
    assert retry.returncode == 0, retry.stderr
    # the committed partition is not written again; the other one gets its records once
    assert sum(leo(store, "t", p) for p in (0, 1)) == 20
    assert sorted(r.key for p in (0, 1) for r in store.read("t", p)) == sorted(b"k%d" % i for i in range(20))


def test_producer_state_survives_cleaning_and_a_checkpoint(spark_store):
    from tests.conftest import clean_with_small_map

    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact", "segment.ms": "1", "min.cleanable.dirty.ratio": "0.01"})
    p = store.producer(transactional_id="app")
    p.init_transactions()
    for i in range(3):
        p.send("t", recs(("a", str(i)), ("b", str(i))))
        store.clock.advance(10)
    last = p.send("t", recs(("a", "9"), ("b", "9")))
    store.produce("t", recs(("a", "x"), ("b", "x")))  # another writer supersedes the producer's last batch
    store.clock.advance(10)
    store.roll("t", 0)
    results = clean_with_small_map(store, 100, "t")
    assert results and store.log("t", 0).snapshot().first_dirty_offset > 0
    # the producer's batches are all gone, its last one too: the state is in the Delta log, not in the records
    assert [o for o, _, _ in offsets_of(store, "t", 0)] == [8, 9]
    dt = DeltaTable(store.log("t", 0).uri)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    # the same producer retries its last batch: recognised, original offsets
    # (timestamps: a record sent without one gets the time of its send, as Kafka's producer stamps it)
    p._sequences[("t", 0)] -= 2
    assert p.send("t", recs(("a", "9"), ("b", "9"))).offsets.tolist() == last.offsets.tolist() == [6, 7]
    # a new process's epoch recognises it too
    q = Store(store.root).producer(transactional_id="app")
    q.init_transactions()
    assert q.send("t", recs(("a", "9"), ("b", "9"))).offsets.tolist() == [6, 7]
    assert leo(store, "t") == 10
    # and an older epoch is still fenced in the partition
    with pytest.raises(InvalidProducerEpochError):
        store.log("t", 0).append(recs(("z", "1")), store.clock.now_ms(), producer=ProducerBatch(p.producer_id, 0, 8))
    assert q.send("t", recs(("c", "1")))[0].offset == 10


def test_a_batch_and_its_retries_racing_on_one_partition_land_once(store):
    """Four writers commit the same batch at once (separate Store objects, so separate Delta snapshots): delta-rs
    refuses all but one commit carrying the producer's app id, and the losers find the batch there."""
    from concurrent.futures import ThreadPoolExecutor

    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, recs(("x", "0")))
    batch = ProducerBatch(9, 0, 0, digest=5)
    logs = [Store(store.root, clock=store.clock).log("t", 0) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda log: log.append(recs(("a", "1"), ("b", "2")), store.clock.now_ms(),
                                                   producer=batch), logs))
    assert got == [[1, 2]] * 4
    assert leo(store, "t") == 3
    assert DeltaTable(store.log("t", 0).uri).version() == 2  # create, the plain append, one batch commit


def test_the_readme_example_runs(tmp_path):
    import re

    text = (REPO / "docs" / "transactions.md").read_text(encoding="utf-8")
    code = re.search(r"## Idempotent producer.*?```python\n(.*?)```", text, re.S).group(1)
    code = code.replace('"/tmp/my-idempotent-store"', repr(str(tmp_path / "store")))
    namespace: dict = {}
    exec(compile(code, "docs/transactions.md (Idempotent producer)", "exec"), namespace)
    assert namespace["again"].producer_epoch == 1


def test_on_s3_producer_ids_epochs_and_retries_work_the_same(s3_server, s3_store_uri, monkeypatch):
    """The compare-and-swap of producer ids and epochs is a conditional put on an object store too (moto)."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    store = Store(s3_store_uri)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    old = store.producer(transactional_id="app")
    old.init_transactions()
    sent = old.send("t", recs(("a", "1"), ("b", "1")))
    new = Store(s3_store_uri).producer(transactional_id="app")
    new.init_transactions()
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, 1)
    assert new.send("t", recs(("a", "1"), ("b", "1"))).offsets.tolist() == sent.offsets.tolist() == [0, 1]
    with pytest.raises(ProducerFencedError):
        old.send("t", recs(("c", "1")))
    assert store.producer().producer_id is None  # a plain idempotent producer gets its id at the first send
    assert leo(store, "t") == 2
