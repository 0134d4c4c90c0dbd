"""Other engines' Delta operations on a partition table, run for real with delta-rs, then every entry point.

Tolerated (OPTIMIZE bin-packing, Z-order, VACUUM): offsets, order, segments, describe, reads, transactions,
retention and the cleaner stay right. Detected (DELETE, UPDATE, a plain append, a property change, a RESTORE that
drops deltalog's records): the next operation raises ForeignCommitError naming the commit; doctor reports it; a
RESTORE to the version before it is the way out.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltalog import Record, Store
from deltalog.cli.doctor_checks import FAIL, check_state_documents, check_store_damage, scan_store
from deltalog.errors import ForeignCommitError
from deltalog.log import foreign_commits

SEGMENT_MS = 1000


def _fill(store: Store, clock, topic: str = "t") -> list[tuple[int, bytes, bytes | None]]:
    """Six segments of keyed records with tombstones, a committed and an aborted transaction; returns the
    (offset, key, value) of every data record in offset order."""
    store.create_topic(topic, 1, config={"cleanup.policy": "compact", "segment.ms": SEGMENT_MS,
                                          "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 0})
    for i in range(5):
        store.append(topic, 0, [Record(key=f"k{j % 4}".encode(), value=None if j == 3 else f"v{i}.{j}".encode())
                                for j in range(5)])
        clock.advance(2 * SEGMENT_MS)
    p = store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, key=b"tx", value=b"committed", partition=0)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, key=b"tx", value=b"aborted", partition=0)
    p.abort_transaction()
    store.append(topic, 0, [Record(key=b"k9", value=b"tail")])
    return [(r.offset, r.key, r.value) for r in store.read(topic, 0, 0)]


def _segments(store: Store, topic: str = "t") -> list[tuple[int, int, int, bool]]:
    return [(s.base_offset, s.num_records, s.tombstones, s.is_active) for s in store.describe(topic)[0].segments]


@pytest.mark.parametrize("operation", ["compact", "z_order"])
def test_optimize_is_tolerated_by_every_entry_point(store, clock, operation):
    before = _fill(store, clock)
    segments = _segments(store)
    offsets = [o for o, _, _ in before]
    described = store.describe("t")[0]
    polls = {start: [r.offset for r in store.read("t", 0, start, max_records=4)] for start in offsets}
    dt = DeltaTable(store.log("t", 0).uri)
    if operation == "compact":
        dt.optimize.compact()
    else:
        dt.optimize.z_order(["key"])
    fresh = Store(store.root, clock=clock)
    for s in (store, fresh):
        assert [(r.offset, r.key, r.value) for r in s.read("t", 0, 0)] == before  # offset order, every record
        for start in offsets:  # limited reads (a consumer's poll) return what they did before
            assert [r.offset for r in s.read("t", 0, start, max_records=4)] == polls[start]
        assert _segments(s) == segments  # segments from the segment column: no negative count, none merged
        now = s.describe("t")[0]
        assert (now.num_records, now.last_stable_offset, now.log_end_offset) == (
            described.num_records, described.last_stable_offset, described.log_end_offset)
        assert all(seg.tombstones >= 0 and seg.num_records >= 0 for seg in now.segments)
        committed = [(r.key, r.value) for r in s.read("t", 0, 0, isolation_level="read_committed")]
        assert (b"tx", b"committed") in committed and (b"tx", b"aborted") not in committed
    # appends go on after it, with the next offsets
    assert store.append("t", 0, [Record(key=b"after", value=b"x")]) == [described.log_end_offset]
    assert scan_store(store.storage).damages == ()


def test_relayout_puts_merged_files_back_into_one_segment_per_file(store, clock):
    before = _fill(store, clock)
    segments = _segments(store)
    DeltaTable(store.log("t", 0).uri).optimize.compact()
    log = store.log("t", 0)
    assert log.relayout(clock.now_ms()) == 1
    assert log.relayout(clock.now_ms()) == 0
    snap = log.snapshot()
    assert all(f.deltalog_layout for f in snap.files)
    assert all(len({f.segment for f in s.files}) <= 1 for s in snap.segments)
    assert _segments(store) == segments
    assert [(r.offset, r.key, r.value) for r in store.read("t", 0, 0)] == before
    # the relayout commit is deltalog's own: a fresh process finds nothing foreign
    assert Store(store.root, clock=clock).log("t", 0).foreign_commits() == ()


def test_retention_after_optimize_drops_only_whole_segments(store, clock):
    store.create_topic("r", 1, config={"cleanup.policy": "delete", "segment.ms": SEGMENT_MS, "retention.ms": 5000})
    for i in range(6):
        store.append("r", 0, [Record(key=None, value=f"{i}.{j}".encode()) for j in range(3)])
        clock.advance(2 * SEGMENT_MS)
    DeltaTable(store.log("r", 0).uri).optimize.compact()
    result = store.delete_old_segments("r")[0]
    start = result.log_start_offset
    assert start > 0 and start % 3 == 0  # whole segments only
    assert [r.offset for r in store.read("r", 0, start)] == list(range(start, 18))  # nothing above it lost
    assert store.describe("r")[0].segments[0].base_offset == start


def test_vacuum_by_delta_rs_is_tolerated(store, clock):
    before = _fill(store, clock)
    dt = DeltaTable(store.log("t", 0).uri)
    dt.optimize.compact()
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert [(r.offset, r.key, r.value) for r in Store(store.root, clock=clock).read("t", 0, 0)] == before


def _delete(dt: DeltaTable) -> None:
    dt.delete("offset = 1")


def _update(dt: DeltaTable) -> None:
    dt.update({"timestamp_ms": "1"}, predicate="offset = 2")


def _plain_append(dt: DeltaTable) -> None:
    """A plain append with a new column (a schema change); one without offsets Delta refuses itself (the offset,
    timestamp and segment columns are NOT NULL)."""
    rows = dt.to_pyarrow_table().slice(0, 1)
    write_deltalake(dt, rows.append_column("note", pa.array(["x"])), mode="append", schema_mode="merge")


def _append_with_offsets(dt: DeltaTable) -> None:
    rows = dt.to_pyarrow_table().slice(0, 1)
    write_deltalake(dt, rows, mode="append")


def _property(dt: DeltaTable) -> None:
    dt.alter.set_table_properties({"deltalog.topic.cleanup.policy": "delete"}, raise_if_not_exists=False)


def _overwrite(dt: DeltaTable) -> None:
    write_deltalake(dt, dt.to_pyarrow_table().slice(0, 2), mode="overwrite")


@pytest.mark.parametrize("change,operation", [(_delete, "DELETE"), (_update, "UPDATE"), (_plain_append, "WRITE"),
                                              (_append_with_offsets, "WRITE"), (_overwrite, "WRITE"),
                                              (_property, "SET TBLPROPERTIES")])
def test_a_record_changing_commit_is_detected_then_undone_by_restore(store, clock, change, operation):
    before = _fill(store, clock)
    uri = store.log("t", 0).uri
    dt = DeltaTable(uri)
    good = dt.version()
    change(dt)
    bad = DeltaTable(uri).version()
    fresh = Store(store.root, clock=clock)
    entry_points = [
        lambda s: s.read("t", 0, 0),
        lambda s: s.append("t", 0, [Record(key=b"k", value=b"v")]),
        lambda s: s.describe("t"),
        lambda s: s.delete_old_segments("t"),
        lambda s: s.delete_records("t", 0, 1),
        lambda s: list(s.consumer("t", group_id="g", auto_offset_reset="earliest").poll(timeout_ms=0).values()),
    ]
    for s in (store, fresh):
        for call in entry_points:
            with pytest.raises(ForeignCommitError) as e:
                call(s)
            assert f"version {bad}: {operation}" in str(e.value) and "delta-rs" in str(e.value)
            assert e.value.restore_version == good and f"restore({good})" in str(e.value)
    damages = scan_store(store.storage).damages
    assert len(damages) == 1 and f"version {bad}: {operation}" in damages[0].problem
    assert f"restore({good})" in damages[0].fix
    rows = check_store_damage(store.root) + check_state_documents(store.root)  # what `deltalog doctor` prints
    assert [r.status for r in rows if r.name == "damage t-0"] == [FAIL]
    assert all(r.status != FAIL for r in rows if r.name != "damage t-0")
    DeltaTable(uri).restore(good)  # the way out the error names
    for s in (store, Store(store.root, clock=clock)):
        assert [(r.offset, r.key, r.value) for r in s.read("t", 0, 0)] == before
    assert store.append("t", 0, [Record(key=b"k", value=b"v")]) == [before[-1][0] + 1]
    assert scan_store(store.storage).damages == ()


def test_a_restore_that_drops_deltalogs_records_is_detected(store, clock):
    _fill(store, clock)
    uri = store.log("t", 0).uri
    DeltaTable(uri).restore(2)
    with pytest.raises(ForeignCommitError, match="RESTORE"):
        Store(store.root, clock=clock).read("t", 0, 0)


def test_classification_is_pure_and_names_deltalogs_own_commits():
    assert foreign_commits.classify({"operation": "WRITE", "deltalog.commit_id": "x"}) == foreign_commits.DELTALOG
    assert foreign_commits.classify({"operation": "OPTIMIZE", "operationParameters": {"zOrderBy": "[key]"}}) \
        == foreign_commits.TOLERATED
    assert foreign_commits.classify({"operation": "VACUUM END"}) == foreign_commits.TOLERATED
    auto = {"operation": "OPTIMIZE", "operationParameters": {"auto": "true"}, "engineInfo": "Databricks-Runtime/15.4"}
    assert foreign_commits.classify(auto) == foreign_commits.TOLERATED  # Databricks' auto-compaction
    for op in ("DELETE", "UPDATE", "MERGE", "RESTORE", "WRITE", "CREATE OR REPLACE TABLE", "ADD COLUMNS"):
        assert foreign_commits.classify({"operation": op}) == foreign_commits.DETECTED
    retention = {"operation": "SET TBLPROPERTIES",
                 "operationParameters": {"properties": '{"delta.deletedFileRetentionDuration":"interval 3 days"}'}}
    assert foreign_commits.classify(retention) == foreign_commits.TOLERATED  # the effective file.delete.delay.ms
    policy = {"operation": "SET TBLPROPERTIES",
              "operationParameters": {"properties": '{"deltalog.topic.cleanup.policy":"delete"}'}}
    assert foreign_commits.classify(policy) == foreign_commits.DETECTED
    delete = {"version": 5, "operation": "DELETE", "engineInfo": "Databricks-Runtime/15.4"}
    restore = {"version": 6, "operation": "RESTORE", "operationParameters": {"version": "4"}}
    assert [c.version for c in foreign_commits.pending_after([delete])] == [5]
    assert foreign_commits.pending_after([delete, restore]) == ()
    ours = {"version": 5, "operation": "WRITE", "deltalog.commit_id": "x"}
    assert [c.operation for c in foreign_commits.pending_after([ours, restore])] == ["RESTORE"]


def test_detection_reads_only_the_commits_after_the_last_check(store, clock):
    _fill(store, clock)
    log = store.log("t", 0)
    dt = log.table()
    read: list[int] = []
    original = type(dt).history

    class Counting(type(dt)):
        def history(self, limit=None):
            read.append(limit)
            return original(self, limit)

    watch = foreign_commits.ForeignCommitWatch()
    counted = Counting(log.uri)
    watch.check(counted)
    assert read and read[0] <= 16  # a cold watch stops at the newest deltalog commit's read version
    store.append("t", 0, [Record(key=b"k", value=b"v")])
    read.clear()
    counted.update_incremental()
    watch.check(counted)
    assert read == [1]


def test_new_partition_tables_tell_other_engines_what_not_to_do(store):
    store.create_topic("d", 1)
    meta = DeltaTable(store.log("d", 0).uri).metadata()
    assert "deltalog topic d partition 0" in meta.description and "Do not DELETE" in meta.description
    assert meta.configuration["delta.enableDeletionVectors"] == "false"
    assert meta.configuration["delta.autoOptimize.autoCompact"] == "false"
    # deltalog's own property change (a SET TBLPROPERTIES commit too) is not another engine's
    store.alter_topic_config("d", {"retention.ms": 1000})
    assert Store(store.root).topic_config("d").retention_ms == 1000
    assert Store(store.root).append("d", 0, [Record(key=b"k", value=b"v")]) == [0]


# -- Spark: the cleaner, format("deltalog"), the views and the checks over another engine's OPTIMIZE ------------

def _current(store: Store, topic: str = "t") -> dict[bytes, bytes]:
    """The latest committed value of each key, from the store's own reader (tombstones out)."""
    latest: dict[bytes, bytes | None] = {}
    for r in store.read(topic, 0, 0, isolation_level="read_committed"):
        latest[r.key] = r.value
    return {k: v for k, v in latest.items() if v is not None}


def test_a_clean_after_optimize_keeps_the_latest_of_each_key_and_the_layout(spark_store, clock):
    store = spark_store
    _fill(store, clock)
    current = _current(store)
    DeltaTable(store.log("t", 0).uri).optimize.compact()
    assert store.clean_partition("t", 0, force=True) is not None  # first puts the merged file back per segment
    assert _current(store) == current
    state = store.describe("t")[0]
    assert state.first_dirty_offset > 0 and all(s.tombstones >= 0 and s.num_records >= 0 for s in state.segments)
    assert [s.is_active for s in state.segments].count(True) == 1 and state.segments[-1].is_active
    assert all(f.deltalog_layout for f in store.log("t", 0).snapshot().files)


@pytest.mark.slow
def test_views_format_deltalog_and_checks_stay_right_after_optimize(spark_store, clock, spark):
    import deltalog

    store = spark_store
    _fill(store, clock)
    current = _current(store)
    deltalog.register_format(spark)

    def spark_offsets() -> list[int]:
        df = spark.read.format("deltalog").option("store", store.root).option("subscribe", "t").load()
        return sorted(r["offset"] for r in df.collect())

    committed = spark_offsets()
    DeltaTable(store.log("t", 0).uri).optimize.compact()
    assert spark_offsets() == committed  # Spark's reads over the merged file, before any clean
    rows = store.current_state("t").collect()
    assert len(rows) == len(current)
    store.clean_partition("t", 0, force=True)
    assert spark_offsets() == [r.offset for r in store.read("t", 0, 0, isolation_level="read_committed")]
    # another OPTIMIZE over the cleaned section and the dirty tail, then a second pass and the checks
    store.append("t", 0, [Record(key=b"k0", value=b"newest")])
    clock.advance(2 * SEGMENT_MS)
    store.append("t", 0, [Record(key=b"k1", value=b"newest")])
    DeltaTable(store.log("t", 0).uri).optimize.z_order(["key"])
    store.clean_partition("t", 0, force=True)
    assert _current(store)[b"k0"] == b"newest"
    check = store.check("t", cleans="all")
    assert check.success, check.summary()


def test_the_cleaner_skips_and_reports_a_partition_another_engine_changed(spark_store, clock):
    store = spark_store
    _fill(store, clock)
    DeltaTable(store.log("t", 0).uri).delete("offset = 1")
    assert store.clean("t") == []
    cleaner = store.log_cleaner()
    assert cleaner.clean_filthiest_logs(["t"]) is not None
    assert ("t", 0) in cleaner.manager.foreign_skipped
    with pytest.raises(ForeignCommitError):
        store.clean_partition("t", 0, force=True)
    assert store.log_cleaner().manager.uncleanable_mark("t", 0) is None  # skipped, not marked corrupt


def test_on_s3_optimize_is_tolerated_and_delete_detected(s3_server, s3_store_uri, clock):
    store = Store(s3_store_uri, storage_options=s3_server.storage_options, clock=clock)
    before = _fill(store, clock)
    uri = store.log("t", 0).uri
    options = store.storage.delta_options
    DeltaTable(uri, storage_options=options).optimize.compact()
    fresh = Store(s3_store_uri, storage_options=s3_server.storage_options, clock=clock)
    assert [(r.offset, r.key, r.value) for r in fresh.read("t", 0, 0)] == before
    assert all(s.tombstones >= 0 for s in fresh.describe("t")[0].segments)
    assert fresh.log("t", 0).relayout(clock.now_ms()) == 1
    DeltaTable(uri, storage_options=options).delete("offset = 1")
    with pytest.raises(ForeignCommitError, match="DELETE"):
        Store(s3_store_uri, storage_options=s3_server.storage_options, clock=clock).read("t", 0, 0)
    assert len(scan_store(fresh.storage).damages) == 1


def test_a_change_landing_after_the_ranking_skips_the_pass_without_marking_it(store, clock, monkeypatch):
    """Another engine's commit that lands between the ranking and the pass's own read of the partition (found by
    the chaos run of ``tests/test_foreign_chaos.py``, seed 1: a SET TBLPROPERTIES) is skipped and reported as at
    the ranking; it marked the partition uncleanable for good, so after the RESTORE no clean ever ran again."""
    from deltalog.cleaner.log_cleaner import LogCleaner

    _fill(store, clock)
    uri = store.log("t", 0).uri
    original = LogCleaner.clean_log
    landed: list[int] = []

    def change_first(self, ltc):
        if not landed:
            DeltaTable(uri).alter.set_table_properties({"other.note": "x"}, raise_if_not_exists=False)
            landed.append(DeltaTable(uri).version())
        return original(self, ltc)

    monkeypatch.setattr(LogCleaner, "clean_log", change_first)
    cleaner = store.log_cleaner()
    assert not cleaner.clean_filthiest_logs(["t"]).failures
    assert landed
    assert ("t", 0) in cleaner.manager.foreign_skipped
    assert store.log_cleaner().manager.uncleanable_mark("t", 0) is None
    DeltaTable(uri).restore(landed[0] - 1)
    ltc = store.log_cleaner().manager.logs_to_clean(clock.now_ms(), ["t"])
    assert [(c.snapshot.topic, c.snapshot.partition) for c in ltc] == [("t", 0)]


def test_the_duplicate_repair_does_not_claim_duplicates_of_a_partition_another_engine_changed(store, clock, caplog):
    """The repair's look for offsets held twice met the partition's ForeignCommitError and logged, every round,
    that repairing the offsets the partition "holds twice" failed, though it held none (seen in the chaos run)."""
    _fill(store, clock)
    DeltaTable(store.log("t", 0).uri).delete("offset = 1")
    with caplog.at_level("WARNING", logger="deltalog"):
        assert store.log_cleaner().repair_duplicated_offsets(["t"]) == 0
    assert not [r for r in caplog.records if "twice" in r.getMessage()]
