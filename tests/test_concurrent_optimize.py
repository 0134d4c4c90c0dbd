"""Another engine's OPTIMIZE or Z-order committing while deltalog replaces files: nothing is served twice.

delta-rs accepts a commit that removes files a concurrent OPTIMIZE already removed (its removes carry
``dataChange=false``), which would leave the merged file and deltalog's new files both in the table. Every
deltalog commit that removes files checks its removes against the table itself (:func:`deltalog.log.delta.commit`).
Each window is hit deterministically here: an OPTIMIZE run by real delta-rs at the commit's two fault points,
``<operation>:before-commit`` (between the plan and the check) and ``<operation>:checked`` (between the check and
the commit attempt). The random, multi-process runs are in ``test_concurrent_optimize_processes.py``.
"""

from __future__ import annotations

import collections

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.errors import CommitConflictError, ForeignCommitError
from deltalog.log import faults

SEGMENT_MS = 1000
WINDOWS = ["before-commit", "checked"]
ENGINES = ["compact", "z_order"]


def optimize(uri: str, how: str) -> None:
    dt = DeltaTable(uri)
    if how == "compact":
        dt.optimize.compact()
    else:
        dt.optimize.z_order(["key"])


def table_offsets(uri: str) -> list[int]:
    """The offset of every row of the table's current version, as any other engine reads it."""
    return [o for path in DeltaTable(uri).file_uris() for o in pq.read_table(path, columns=["offset"])
            .column("offset").to_pylist()]


def served_twice(uri: str) -> dict[int, int]:
    counts = collections.Counter(table_offsets(uri))
    return {o: n for o, n in counts.items() if n > 1}


def at_point(monkeypatch, point: str, action, times: int = 1) -> list[str]:
    """Run ``action`` the first ``times`` the process reaches fault point ``point``; returns what ran."""
    ran: list[str] = []
    original = faults.point

    def hook(name: str) -> None:
        if name == point and len(ran) < times:
            ran.append(name)
            action()
        original(name)

    monkeypatch.setattr(faults, "point", hook)
    return ran


def _keyed(store: Store, clock, topic: str = "t", rounds: int = 5, keys: int = 4) -> None:
    store.create_topic(topic, 1, config={"cleanup.policy": "compact", "segment.ms": SEGMENT_MS,
                                          "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 0})
    for i in range(rounds):
        store.append(topic, 0, [Record(key=f"k{j % keys}".encode(), value=f"v{i}.{j}".encode())
                                for j in range(5)])
        clock.advance(2 * SEGMENT_MS)
    store.append(topic, 0, [Record(key=b"k9", value=b"tail")])


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("engine", ENGINES)
def test_relayout_racing_an_optimize_serves_no_offset_twice(store, clock, monkeypatch, window, engine):
    _keyed(store, clock)
    log = store.log("t", 0)
    before = [(r.offset, r.key, r.value) for r in store.read("t", 0, 0)]
    optimize(log.uri, "compact")  # a merged file: relayout has work to do
    store.append("t", 0, [Record(key=b"k8", value=b"after")])  # and a file a second bin-packing merges it with
    before.append((26, b"k8", b"after"))
    ran = at_point(monkeypatch, f"relayout:{window}", lambda: optimize(log.uri, engine))
    log.relayout(clock.now_ms())
    assert ran, "the race window was never reached"
    assert served_twice(log.uri) == {}
    assert [(r.offset, r.key, r.value) for r in store.read("t", 0, 0)] == before
    assert all(f.deltalog_layout for f in log.snapshot().files)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("engine", ENGINES)
def test_retention_racing_an_optimize_removes_its_segments_from_the_current_version(store, clock, monkeypatch,
                                                                                     window, engine):
    store.create_topic("r", 1, config={"cleanup.policy": "delete", "segment.ms": SEGMENT_MS, "retention.ms": 5000})
    for i in range(6):
        store.append("r", 0, [Record(key=f"k{j}".encode(), value=f"{i}.{j}".encode()) for j in range(3)])
        clock.advance(2 * SEGMENT_MS)
    log = store.log("r", 0)
    ran = at_point(monkeypatch, f"retention:{window}", lambda: optimize(log.uri, engine))
    result = store.delete_old_segments("r")[0]
    assert ran
    start = result.log_start_offset
    assert start > 0 and result.segments_deleted
    offsets = table_offsets(log.uri)
    assert sorted(offsets) == list(range(start, 18))  # the deleted segments are gone for every engine, once
    assert [r.offset for r in store.read("r", 0, start)] == list(range(start, 18))


@pytest.mark.parametrize("window", WINDOWS)
def test_delete_records_racing_an_optimize_serves_no_offset_twice(store, clock, monkeypatch, window):
    _keyed(store, clock)
    log = store.log("t", 0)
    ran = at_point(monkeypatch, f"delete_records:{window}", lambda: optimize(log.uri, "compact"))
    store.delete_records("t", 0, 12)
    assert ran
    assert served_twice(log.uri) == {}
    assert [r.offset for r in store.read("t", 0, 12)] == list(range(12, 26))


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_clean_racing_an_optimize_serves_every_offset_once(spark_store, clock, monkeypatch, window, engine):
    store = spark_store
    _keyed(store, clock)
    log = store.log("t", 0)
    latest = {r.key: (r.offset, r.value) for r in store.read("t", 0, 0)}
    ran = at_point(monkeypatch, f"clean:{window}", lambda: optimize(log.uri, engine))
    store.clean()
    assert ran
    assert served_twice(log.uri) == {}
    read = store.read("t", 0, 0)
    offsets = [r.offset for r in read]
    assert offsets == sorted(set(offsets))
    assert {r.key: (r.offset, r.value) for r in read} == latest  # every key's latest, nothing older won


@pytest.mark.parametrize("engine", ENGINES)
def test_retention_after_an_optimize_that_follows_its_relayout_keeps_every_record_above_the_log_start(
        store, clock, monkeypatch, engine):
    """Retention lays merged files out again before it drops segments; an OPTIMIZE that merges them again right
    after that relayout must make retention plan again, not drop the merged file with the records it keeps."""
    store.create_topic("r", 1, config={"cleanup.policy": "delete", "segment.ms": SEGMENT_MS, "retention.ms": 5000})
    for i in range(6):
        store.append("r", 0, [Record(key=f"k{j}".encode(), value=f"{i}.{j}".encode()) for j in range(3)])
        clock.advance(2 * SEGMENT_MS)
    log = store.log("r", 0)
    optimize(log.uri, "compact")  # retention relays it out first
    ran = at_point(monkeypatch, "relayout:after-commit", lambda: optimize(log.uri, engine))
    result = store.delete_old_segments("r")[0]
    assert ran
    start = result.log_start_offset
    assert start > 0
    assert sorted(table_offsets(log.uri)) == list(range(start, 18))
    assert [r.offset for r in store.read("r", 0, start)] == list(range(start, 18))


def test_a_clean_after_an_optimize_that_follows_its_relayout_loses_nothing(spark_store, clock, monkeypatch):
    store = spark_store
    _keyed(store, clock)
    log = store.log("t", 0)
    records = {r.offset: (r.key, r.value) for r in store.read("t", 0, 0)}
    latest = {k: (o, v) for o, (k, v) in sorted(records.items())}
    optimize(log.uri, "compact")  # the clean relays it out first
    ran = at_point(monkeypatch, "relayout:after-commit", lambda: optimize(log.uri, "z_order"))
    store.clean()
    store.clean()  # the round after lays the files out again and cleans
    assert ran
    assert served_twice(log.uri) == {}
    read = store.read("t", 0, 0)
    assert {r.key: (r.offset, r.value) for r in read} == latest
    assert all(records[r.offset] == (r.key, r.value) for r in read)


def test_a_removing_commit_never_lands_on_a_delete_it_did_not_check(store, clock, monkeypatch):
    """A removing commit whose version another engine's DELETE took was checked again only for its removes, app
    ids and metadata, and landed right after the DELETE (the chaos run's seed 6: a clean as version 78 over a
    DELETE at 77 of records it did not remove): the RESTORE the error then named was refused, as it would drop
    deltalog's commit. Now it plans again; the partition is refused, the DELETE named, and its RESTORE accepted."""
    _keyed(store, clock)
    log = store.log("t", 0)
    before = [(r.offset, r.key, r.value) for r in store.read("t", 0, 0)]
    optimize(log.uri, "compact")
    store.append("t", 0, [Record(key=b"k8", value=b"after")])  # a file of its own, which relayout leaves alone
    before.append((26, b"k8", b"after"))
    ran = at_point(monkeypatch, "relayout:checked", lambda: DeltaTable(log.uri).delete("offset = 26"))
    with pytest.raises((CommitConflictError, ForeignCommitError)):
        log.relayout(clock.now_ms())
    assert ran
    history = DeltaTable(log.uri).history(2)
    assert history[0]["operation"] == "DELETE", history[0]
    with pytest.raises(ForeignCommitError) as e:
        store.read("t", 0, 0)
    DeltaTable(log.uri).restore(e.value.restore_version)
    assert [(r.offset, r.key, r.value) for r in store.read("t", 0, 0)] == before
