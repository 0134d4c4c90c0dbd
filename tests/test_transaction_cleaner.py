"""The transaction-aware cleaner (Kafka's ``CleanedTransactionMetadata`` and marker rules): Kafka's
LogCleanerTest transactional scenarios with real transactional producers, real Delta tables and real Spark
passes, and a seeded model-based test of the rules.

Kafka's tests call ``doClean`` directly, often with an empty dirty section (their FakeOffsetMap keeps its last
offset, kafka_core.md D1); here every pass is a real one of the cleaning loop, which only runs when the
partition has a dirty section, so the "clean again" steps append a plain record and roll first.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from conftest import map_slots_for
from deltalake import DeltaTable

from deltalog import CorruptLogError, OutOfOrderSequenceError, Record, Store
from deltalog.cleaner.log_cleaner import raise_failures
from deltalog.log.producer_state import ProducerBatch

RETENTION = 10_000  # delete.retention.ms of these tests' topics
TOPIC = "txn"
CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(RETENTION)}


def recs(*keys, value=None):
    """Records with these keys (ints), each valued ``v<key>`` unless ``value`` is given."""
    return [Record(key=str(k).encode(), value=(value if value is not None else f"v{k}").encode()) for k in keys]


def raw(store: Store, partition: int = 0) -> list[dict]:
    """Every row of the log, markers and aborted records included."""
    log = store.log(TOPIC, partition)
    start = log.head().log_start_offset
    return log.read_rows(start, None, "read_uncommitted")[2].to_pylist()


def offsets(store: Store) -> list[int]:
    return [r["offset"] for r in raw(store)]


def markers(store: Store) -> dict[int, tuple[str, int | None]]:
    """Marker offset -> (COMMIT/ABORT, delete horizon)."""
    return {r["offset"]: (r["control"], r["delete_horizon_ms"]) for r in raw(store) if r["control"] is not None}


def keys(store: Store, level: str = "read_uncommitted") -> list[int]:
    log = store.log(TOPIC, 0)
    return [int(r.key) for r in log.read(log.head().log_start_offset, isolation_level=level)]


def producer(store: Store, name: str):
    p = store.producer(transactional_id=name, transaction_timeout_ms=900_000)
    p.init_transactions()
    return p


def send(p, *ks) -> list[int]:
    if not p.in_transaction:
        p.begin_transaction()
    return p.send(TOPIC, recs(*ks), partition=0).offsets.tolist()


def clean(store: Store, slots: int | None = None) -> list:
    return raise_failures(store.log_cleaner(map_slots=slots).clean_filthiest_logs([TOPIC]))


def dirty_then_clean(store: Store, key: int = 100) -> list:
    """A plain record and a roll, so the partition has a dirty section, then a pass (Kafka's tests clean again
    with an empty dirty section instead)."""
    store.append(TOPIC, 0, recs(key))
    store.roll(TOPIC, 0)
    return clean(store)


@pytest.fixture
def txn_store(spark_store) -> Store:
    spark_store.create_topic(TOPIC, 1, config=CONFIG)
    return spark_store


def test_basic_transaction_aware_cleaning(txn_store, clock):
    """testBasicTransactionAwareCleaning: aborted records go on the first clean whatever their keys; the ABORT
    marker is stamped in that pass and removed by a pass after its horizon, never earlier."""
    store = txn_store
    p1, p2 = producer(store, "p1"), producer(store, "p2")
    assert send(p1, 1, 2) == [0, 1]
    assert send(p2, 2, 3) == [2, 3]
    assert send(p1, 3, 4) == [4, 5]
    p1.abort_transaction()  # 6
    p2.commit_transaction()  # 7
    assert send(p1, 2) == [8]
    p1.commit_transaction()  # 9
    store.roll(TOPIC, 0)
    [result] = clean(store)
    assert keys(store) == [3, 2] and offsets(store) == [3, 6, 7, 8, 9]
    assert (result.aborted_dropped, result.markers_stamped, result.markers_removed) == (4, 1, 0)
    stamped = clock.now_ms() + RETENTION
    assert markers(store) == {6: ("ABORT", stamped), 7: ("COMMIT", None), 9: ("COMMIT", None)}
    clock.advance(RETENTION - 1)
    dirty_then_clean(store, 100)  # one ms before the horizon: kept
    assert offsets(store)[:5] == [3, 6, 7, 8, 9]
    clock.advance(1)
    dirty_then_clean(store, 101)  # at the horizon: gone
    assert offsets(store) == [3, 7, 8, 9, 10, 11]
    assert keys(store, "read_committed") == [3, 2, 100, 101]


def test_aborted_record_never_supersedes_an_earlier_committed_value(txn_store):
    """An aborted record is not put in the offset map: the committed value of its key survives, whether it is
    in the same dirty section or already in the clean section."""
    store = txn_store
    store.append(TOPIC, 0, recs(1, value="committed"))
    p = producer(store, "p")
    send(p, 1)
    p.abort_transaction()
    store.roll(TOPIC, 0)
    clean(store)
    log = store.log(TOPIC, 0)
    assert [(r.offset, r.value) for r in log.read(0)] == [(0, b"committed")]
    # the committed value is now in the clean section; an aborted record of its key in a later dirty section
    store.append(TOPIC, 0, recs(1, value="committed-2"))
    send(p, 1, 2)
    p.abort_transaction()
    store.roll(TOPIC, 0)
    clean(store)
    assert [(int(r.key), r.value) for r in log.read(0, isolation_level="read_uncommitted")] == [(1, b"committed-2")]
    # and a partial pass (map of one key) over aborted records still drops them all
    store.append(TOPIC, 0, recs(3, 4))
    send(p, 3, 4, 1)
    p.abort_transaction()
    store.append(TOPIC, 0, recs(5))
    store.roll(TOPIC, 0)
    results = clean(store, map_slots_for(1))
    assert len(results) >= 2  # several passes: the map holds one key
    assert [(int(r.key), r.value) for r in log.read(0)] == [(1, b"committed-2"), (3, b"v3"), (4, b"v4"), (5, b"v5")]


def test_commit_marker_removed_after_its_records_are_gone_and_its_horizon_passed(txn_store, clock):
    """testCommitMarkerRemoval: a COMMIT marker stays while any record of its transaction does; the pass that
    plans on a snapshot without them stamps it; a pass at or after the horizon removes it."""
    store = txn_store
    p = producer(store, "p")
    send(p, 1)
    send(p, 2, 3)
    p.commit_transaction()  # 3
    send(p, 2)
    p.commit_transaction()  # 5
    store.roll(TOPIC, 0)
    clean(store)
    assert keys(store) == [1, 3, 2] and offsets(store) == [0, 2, 3, 4, 5]
    send(p, 1, 3)
    p.commit_transaction()  # 8
    store.roll(TOPIC, 0)
    clean(store)  # drops 0 and 2, the last records of the first transaction: its marker is not stamped yet
    assert keys(store) == [2, 1, 3] and offsets(store) == [3, 4, 5, 6, 7, 8]
    assert markers(store)[3] == ("COMMIT", None)
    dirty_then_clean(store, 100)  # its transaction has no record left: stamped, kept
    horizon = clock.now_ms() + RETENTION
    assert markers(store)[3] == ("COMMIT", horizon)
    assert markers(store)[5] == ("COMMIT", None) and markers(store)[8] == ("COMMIT", None)
    clock.advance(RETENTION)
    dirty_then_clean(store, 101)
    assert offsets(store) == [4, 5, 6, 7, 8, 9, 10]
    assert keys(store) == [2, 1, 3, 100, 101]


def test_abort_marker_removal(txn_store, clock):
    """testAbortMarkerRemoval: P[1]@0, P[2,3]@1-2, A@3, P[3]@4, C@5."""
    store = txn_store
    p = producer(store, "p")
    send(p, 1)
    send(p, 2, 3)
    p.abort_transaction()  # 3
    send(p, 3)
    p.commit_transaction()  # 5
    store.roll(TOPIC, 0)
    clean(store)
    assert keys(store) == [3] and offsets(store) == [3, 4, 5]
    assert markers(store) == {3: ("ABORT", clock.now_ms() + RETENTION), 5: ("COMMIT", None)}
    clock.advance(RETENTION + 1)
    dirty_then_clean(store)
    assert keys(store) == [3, 100] and offsets(store) == [4, 5, 6]


def test_transactions_spanning_segments(txn_store, clock):
    """testCommittedTransactionSpanningSegments and testAbortedTransactionSpanningSegments: a record and its
    marker in different segments; the committed one and its marker both stay, the aborted one goes."""
    store = txn_store
    p = producer(store, "p")
    send(p, 1)
    store.roll(TOPIC, 0)
    p.commit_transaction()  # 1
    store.roll(TOPIC, 0)
    send(p, 1)  # 2
    store.roll(TOPIC, 0)
    p.abort_transaction()  # 3
    store.roll(TOPIC, 0)
    clean(store)
    assert offsets(store) == [0, 1, 3]
    assert markers(store) == {1: ("COMMIT", None), 3: ("ABORT", clock.now_ms() + RETENTION)}
    assert keys(store, "read_committed") == [1]


def test_clean_with_transactions_spanning_segments(txn_store):
    """testCleanWithTransactionsSpanningSegments: records of transactions aborted by markers above the dirty
    section (in the active segment) are dropped all the same; then open transactions hold the section back."""
    store = txn_store
    p1, p2, p3 = producer(store, "p1"), producer(store, "p2"), producer(store, "p3")
    send(p1, 1, 2)
    send(p3, 2, 3)
    send(p2, 3, 4)
    store.roll(TOPIC, 0)
    send(p2, 5, 6)
    send(p3, 6, 7)
    send(p1, 7, 8)
    p2.abort_transaction()  # 12
    send(p3, 8, 9)
    p3.commit_transaction()  # 15
    send(p1, 9, 10)
    p1.abort_transaction()  # 18
    [first] = clean(store)  # only the first segment: the second is active
    assert first.dirty_section == (0, 6)
    assert keys(store) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    store.roll(TOPIC, 0)
    assert send(p2, 11) == [19]
    assert send(p1, 12) == [20]  # open transactions: the last stable offset is 19
    assert store.log(TOPIC, 0).txn_index().last_stable_offset == 19
    [second] = clean(store)
    assert second.dirty_section == (6, 19)
    assert keys(store) == [2, 3, 6, 7, 8, 9, 11, 12]
    assert keys(store, "read_committed") == [2, 3, 6, 7, 8, 9]


def test_cleaner_stops_at_the_segment_of_the_last_stable_offset(txn_store):
    """LogCleanerManagerTest.testUndecidedTransactionalDataNotCleanable: an open transaction's segment and
    every later one are uncleanable until it is decided."""
    store = txn_store
    store.append(TOPIC, 0, recs(1, 1, 2))
    store.roll(TOPIC, 0)  # segment 3
    store.append(TOPIC, 0, recs(1))
    p = producer(store, "p")
    assert send(p, 2) == [4]  # the open transaction starts in segment 3
    store.append(TOPIC, 0, recs(1))
    store.roll(TOPIC, 0)  # segment 6
    store.append(TOPIC, 0, recs(1, 2))
    store.roll(TOPIC, 0)  # segment 8, active
    [result] = clean(store)
    assert (result.dirty_section, result.first_uncleanable_offset) == ((0, 3), 3)
    assert offsets(store) == [1, 2, 3, 4, 5, 6, 7]  # segments 3 and 6 untouched
    assert clean(store) == []  # nothing else is cleanable while the transaction is open
    p.commit_transaction()  # 8
    store.roll(TOPIC, 0)
    [result] = clean(store)
    assert result.dirty_section == (3, 9)
    assert offsets(store) == [6, 7, 8]
    assert keys(store, "read_committed") == [1, 2]


def test_a_dead_producers_transaction_is_aborted_by_the_cleaning_loop_after_its_timeout(txn_store, clock):
    """The cleaning loop first runs the coordinator's timeout sweep: a transaction whose producer died stops
    holding the last stable offset after transaction.timeout.ms, and its records are cleaned away."""
    store = txn_store
    store.append(TOPIC, 0, recs(1, 2))
    dead = store.producer(transactional_id="dead", transaction_timeout_ms=4_000)
    dead.init_transactions()
    dead.begin_transaction()
    dead.send(TOPIC, recs(1, 3), partition=0)  # 2-3, then the process "dies"
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, recs(2))
    store.roll(TOPIC, 0)
    assert clean(store) == []  # the open transaction holds everything from offset 0's segment on
    clock.advance(5_001)
    time.sleep(4.1)  # the timeout runs on the store's clock (the coordinator's), not on the processes' clocks
    [result] = clean(store)  # the ABORT marker went into the active segment, above the section: unstamped
    assert markers(store) == {5: ("ABORT", None)}
    assert result.aborted_dropped == 2 and result.dirty_section == (0, 5)
    assert keys(store, "read_committed") == [1, 2] and offsets(store) == [0, 4, 5]


def test_idempotent_producer_continues_after_its_batches_were_cleaned_away(txn_store):
    """Kafka keeps the last batch of each active producer (RETAIN_EMPTY) so its sequence survives cleaning;
    here the producer state is in the Delta log's app-transaction ids, so the batches can go: the producer
    continues at its next sequence, a retry of its last batch is still recognised, and a gap is refused."""
    store = txn_store
    log = store.log(TOPIC, 0)
    now = store.clock.now_ms()
    assert log.append(recs(1, 2), now, producer=ProducerBatch(42, 0, 0)) == [0, 1]
    assert log.append(recs(1, 2), now, producer=ProducerBatch(42, 0, 2)) == [2, 3]
    store.append(TOPIC, 0, recs(1, 2))  # another writer supersedes both batches
    # and a transactional producer whose only transaction is aborted (testLogCleanerRetainsLastSequenceEven...)
    p = producer(store, "p")
    send(p, 7, 8)  # 6-7
    p.abort_transaction()  # 8
    store.roll(TOPIC, 0)
    clean(store)
    assert offsets(store) == [4, 5, 8]  # none of the producers' records is left
    dt = DeltaTable(log.uri)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    assert log.append(recs(1, 2), now, producer=ProducerBatch(42, 0, 2)) == [2, 3]  # the retry: original offsets
    assert log.head().log_end_offset == 9
    with pytest.raises(OutOfOrderSequenceError):
        log.append(recs(9), now, producer=ProducerBatch(42, 0, 5))
    assert log.append(recs(9), now, producer=ProducerBatch(42, 0, 4)) == [9]
    assert send(p, 7) == [10]  # the transactional producer's sequence carries on past its aborted records
    p.commit_transaction()
    assert keys(store, "read_committed") == [1, 2, 9, 7]


def test_a_plain_log_pays_nothing_for_transactions(store):
    """Without transactional rows, the last stable offset and a pass's transaction plan come from the Delta
    stats alone: they hold with every data file gone (nothing is read)."""
    from deltalog.cleaner.log_to_clean import LogToClean
    from deltalog.cleaner.txn_plan import plan_txn_cleaning

    store.create_topic(TOPIC, 1, config=CONFIG)
    store.append(TOPIC, 0, recs(1, 2))
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, recs(1))
    log = store.log(TOPIC, 0)
    snap = log.snapshot()
    store.storage.delete_many([f"{log.uri}/{f.path}" for f in snap.files])
    with pytest.raises(CorruptLogError):  # the files are really gone
        log.read(0)
    index = log.txn_index(snap)
    assert (index.last_stable_offset, index.aborted, index.markers) == (3, (), ())
    assert LogToClean.for_log(log, snap, store.clock.now_ms()).first_uncleanable_offset == 2
    assert plan_txn_cleaning(store.storage, log.uri, snap.files, index, 0, 3).empty


def test_a_wholly_aborted_batch_is_dropped_without_being_read(txn_store):
    """A file whose stats say every record is of one aborted transaction is opened by neither pass (Kafka skips
    aborted batches by their headers): the pass succeeds with the file unreadable, counts its records as read
    and dropped, and the commit removes it. A file that mixes in other rows is still read."""
    from deltalog.log.transactions import AbortedTxn, may_hold_aborted, wholly_aborted

    store = txn_store
    p = producer(store, "p")
    send(p, 1, 2, 3)  # 0-2
    p.abort_transaction()  # 3
    send(p, 4)  # 4
    p.commit_transaction()  # 5
    store.append(TOPIC, 0, recs(6))  # 6
    store.roll(TOPIC, 0)
    log = store.log(TOPIC, 0)
    files = sorted(log.snapshot().files, key=lambda f: f.min_offset)
    aborted = log.txn_index().aborted
    assert aborted == (AbortedTxn(p.producer_id, 0, 3),)
    assert [wholly_aborted(f, aborted) for f in files] == [True, False, False, False, False]
    assert [may_hold_aborted(f, aborted) for f in files] == [True, False, False, False, False]
    store.storage.write_bytes(f"{log.uri}/{files[0].path}", b"not parquet")  # the aborted batch, unreadable
    [result] = clean(store)
    assert (result.records_read, result.aborted_dropped, result.records_written) == (7, 3, 4)
    assert offsets(store) == [3, 4, 5, 6] and keys(store, "read_committed") == [4, 6]


# -- the model ----------------------------------------------------------------------------------------------


class Model:
    """The log as appended (nothing ever removed) and the rules a cleaned log must keep."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple] = {}  # offset -> (key, value, producer, control)
        self.leo = 0
        self.open: dict[str, int] = {}  # producer name -> first offset of its open transaction
        self.txn_rows: dict[str, list[int]] = {}
        self.aborted: set[int] = set()  # offsets of aborted records
        self.commit_of: dict[int, list[int]] = {}  # COMMIT marker offset -> its transaction's record offsets

    def append(self, offs, records, producer=None):
        assert list(offs) == list(range(self.leo, self.leo + len(records)))
        for o, r in zip(offs, records, strict=True):
            self.rows[o] = (r.key, r.value, producer, None)
        self.leo += len(records)
        if producer is not None:
            self.open.setdefault(producer, offs[0])
            self.txn_rows.setdefault(producer, []).extend(offs)

    def end(self, producer, commit):
        self.rows[self.leo] = (None, None, producer, "COMMIT" if commit else "ABORT")
        if commit:
            self.commit_of[self.leo] = self.txn_rows[producer]
        else:
            self.aborted.update(self.txn_rows[producer])
        self.leo += 1
        del self.open[producer], self.txn_rows[producer]

    @property
    def lso(self) -> int:
        return min(self.open.values(), default=self.leo)

    def committed_state(self) -> dict[bytes, bytes]:
        state: dict[bytes, bytes] = {}
        for o in sorted(self.rows):
            key, value, _, control = self.rows[o]
            if o >= self.lso or control is not None or o in self.aborted or key is None:
                continue
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        return state


def check(store: Store, model: Model, horizons: dict[int, int | None], gone: set[int], now: int) -> None:
    """Every rule, after a pass at ``now``; ``horizons`` holds each marker's horizon as last seen, ``gone`` the
    markers seen removed."""
    log = store.log(TOPIC, 0)
    assert log.head().log_end_offset == model.leo
    index = log.txn_index()
    assert index.last_stable_offset == model.lso
    assert log.snapshot().first_dirty_offset <= model.lso  # never cleaned past the LSO
    rows = raw(store)
    present = {r["offset"] for r in rows}
    for r in rows:  # offsets never change: each row is the one appended at its offset
        key, value, _, control = model.rows[r["offset"]]
        assert (r["key"], r["value"], r["control"]) == (key, value, control), r
    for offs in model.txn_rows.values():  # open transactions are untouched
        assert set(offs) <= present
    for o in [o for o, row in model.rows.items() if row[3] is not None]:
        if o in present or o in gone:
            continue
        # a marker is removed only by a pass at or after a horizon it had before that pass
        assert horizons.get(o) is not None and now >= horizons[o], f"marker {o} removed early"
        gone.add(o)
    for r in rows:
        if r["control"] is not None:
            horizons[r["offset"]] = r["delete_horizon_ms"]
            if r["control"] == "COMMIT" and r["delete_horizon_ms"] is not None:
                assert not set(model.commit_of[r["offset"]]) & present, f"commit marker {r['offset']} stamped early"
    # read_committed: no aborted or undecided record, and the current state per key is the model's
    state: dict[bytes, bytes] = {}
    for rec in log.read(log.head().log_start_offset, isolation_level="read_committed"):
        assert rec.offset not in model.aborted and rec.offset < model.lso
        if rec.value is None:
            state.pop(rec.key, None)
        else:
            state[rec.key] = rec.value
    assert state == model.committed_state()


@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("TXN_SEEDS", "1,2,3").split(",")])
def test_model_random_transactions_rolls_and_passes(spark, tmp_path, clock, seed):
    """Random interleavings of plain appends, committed and aborted transactions of three producers, rolls and
    passes (some on a small map) at varying clocks, checked after every pass against :class:`Model`."""
    rng = random.Random(seed)
    store = Store(tmp_path / "store", clock=clock, spark=spark)
    store.create_topic(TOPIC, 1, config=CONFIG)
    model = Model()
    names = ["p0", "p1", "p2"]
    producers = {n: producer(store, n) for n in names}
    horizons: dict[int, int | None] = {}
    gone: set[int] = set()
    passes = 0

    def records():
        return [Record(key=f"k{rng.randrange(5)}".encode(),
                       value=None if rng.random() < 0.15 else f"{seed}-{model.leo}-{i}".encode())
                for i in range(rng.randint(1, 3))]

    def clean_and_check(final=False):
        nonlocal passes
        clock.advance(rng.randrange(0, 2 * RETENTION))
        slots = rng.choice([None, None, map_slots_for(2)])
        done = clean(store, slots)
        passes += len(done)
        check(store, model, horizons, gone, clock.now_ms())

    for _ in range(45):
        op = rng.random()
        if op < 0.25:
            rs = records()
            model.append(store.append(TOPIC, 0, rs), rs)
        elif op < 0.55:
            name = rng.choice(names)
            p, rs = producers[name], records()
            if not p.in_transaction:
                p.begin_transaction()
            model.append(p.send(TOPIC, rs, partition=0).offsets.tolist(), rs, name)
        elif op < 0.72:
            name = rng.choice([n for n in names if n in model.open] or names)
            if name in model.open:
                commit = rng.random() < 0.6
                (producers[name].commit_transaction if commit else producers[name].abort_transaction)()
                model.end(name, commit)
        elif op < 0.85:
            store.roll(TOPIC, 0)
        else:
            clean_and_check()
    for name in list(model.open):
        producers[name].abort_transaction()
        model.end(name, False)
    for _ in range(3):  # everything decided: the passes reach the end, markers expire
        store.append(TOPIC, 0, recs(99))
        model.append(list(range(model.leo, model.leo + 1)), recs(99))
        store.roll(TOPIC, 0)
        clean_and_check()
    clock.advance(2 * RETENTION)
    store.append(TOPIC, 0, recs(99))
    model.append([model.leo], recs(99))
    store.roll(TOPIC, 0)
    clean(store)
    check(store, model, horizons, gone, clock.now_ms())
    assert passes > 0
    print(f"seed {seed}: {passes} passes, {len(gone)} markers removed, {len(model.aborted)} aborted records")
    # in the end no aborted record is left, and every ABORT marker is gone (its horizon has passed)
    rows = raw(store)
    assert not {r["offset"] for r in rows} & model.aborted
    assert not [r for r in rows if r["control"] == "ABORT"]
