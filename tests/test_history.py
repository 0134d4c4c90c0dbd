"""``store.history`` / ``deltalog history``: every Delta commit of a partition, deltalog's and other engines', in
the shape of DESCRIBE HISTORY, with the figures deltalog recorded."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.errors import InvalidArgumentError, UnknownTopicOrPartitionError
from deltalog.log import foreign_commits
from deltalog.log.history import KINDS, by_deltalog, classify
from tests.conftest import json_lines, run_cli

# -- the classification, a pure function of one commit's info --------------------------------------------------

@pytest.mark.parametrize(("info", "kind"), [
    ({"operation": "WRITE", "deltalog.operation": "append", "deltalog.records": 3}, "append"),
    ({"operation": "WRITE", "deltalog.operation": "clean"}, "clean"),
    ({"operation": "WRITE", "deltalog.operation": "retention"}, "retention"),
    ({"operation": "WRITE", "deltalog.operation": "delete_records"}, "delete_records"),
    ({"operation": "WRITE", "deltalog.operation": "txn_marker"}, "txn_marker"),
    ({"operation": "WRITE", "deltalog.operation": "roll"}, "roll"),
    ({"operation": "CREATE TABLE", "deltalog.operation": "create"}, "create"),
    ({"operation": "SET TBLPROPERTIES", "deltalog.operation": "alter_config"}, "alter_config"),
    ({"operation": "VACUUM START", "engineInfo": "Databricks-Runtime/15.4"}, "vacuum_start"),
    ({"operation": "VACUUM END"}, "vacuum_end"),
    ({"operation": "OPTIMIZE", "operationParameters": {"zOrderBy": "[\"key\"]"}}, "optimize"),
    ({"operation": "OPTIMIZE", "operationParameters": {"auto": "true"}}, "optimize"),  # auto-compaction
    ({"operation": "DELETE"}, "delete"),
    ({"operation": "MERGE"}, "merge"),
    ({"operation": "UPDATE"}, "update"),
    ({"operation": "RESTORE"}, "restore"),
    ({"operation": "WRITE", "engineInfo": "Apache-Spark/3.5.1 Delta-Lake/3.2.0"}, "write"),  # another engine's append
    ({"operation": "SET TBLPROPERTIES"}, "alter"),
    ({"operation": "CLONE"}, "other"),
    ({}, "other"),
])
def test_classify_tells_deltalogs_commits_from_other_engines(info, kind):
    assert classify(info) == kind
    assert kind in KINDS
    assert by_deltalog(info) == ("deltalog.operation" in info)


def test_history_and_the_foreign_commit_rule_read_one_table_of_operations():
    """history names other engines' operations from foreign_commits' table, the same table whose tolerated rows
    decide which commits block a partition: no kind history lists as tolerated is one the rule detects."""
    for operation, kind in foreign_commits.OPERATION_KINDS.items():
        info = {"operation": operation}
        assert classify(info) == kind and kind in KINDS
        verdict = foreign_commits.classify(info)
        assert verdict == (foreign_commits.TOLERATED if kind in foreign_commits.TOLERATED_KINDS
                           else foreign_commits.DETECTED), operation
    assert foreign_commits.TOLERATED_KINDS == {"optimize", "vacuum_start", "vacuum_end"}
    # REORG rewrites files and is detected, so it is not listed as an OPTIMIZE.
    assert classify({"operation": "REORG"}) == "reorg"
    assert foreign_commits.classify({"operation": "REORG"}) == foreign_commits.DETECTED
    # The one tolerated alter: Delta's retention properties alone.
    retention = {"operation": "SET TBLPROPERTIES",
                 "operationParameters": {"properties": '{"delta.logRetentionDuration": "interval 7 days"}'}}
    assert classify(retention) == "alter" and foreign_commits.classify(retention) == foreign_commits.TOLERATED


# -- the history of a real partition ---------------------------------------------------------------------------

def _partition_with_some_history(store: Store) -> str:
    store.create_topic("t", 2, config={"cleanup.policy": "delete", "retention.ms": 1000})
    store.append("t", 0, [Record(b"a", b"1"), Record(b"b", b"2")])
    store.roll("t", 0)
    store.append("t", 0, [Record(b"a", b"3")])
    store.delete_records("t", 0, 1)
    store.alter_topic_config("t", {"segment.ms": "60000"})
    return store.log("t", 0).uri


def test_history_lists_every_commit_newest_first_with_its_figures(store, clock):
    _partition_with_some_history(store)
    clock.advance(5_000)
    [retained] = [r for r in store.delete_old_segments("t") if r.partition == 0]
    assert retained.log_start_offset == 2
    entries = store.history("t", 0)
    assert [e.kind for e in entries] == ["retention", "alter_config", "delete_records", "append", "roll", "append",
                                         "create"]
    assert [e.version for e in entries] == [6, 5, 4, 3, 2, 1, 0]
    assert all(e.by_deltalog and e.topic == "t" and e.partition == 0 for e in entries)
    first_append = entries[-2]
    assert first_append.parameters == {"records": 2, "offset": 0, "rolled": False}
    assert first_append.files["added"] == 1 and first_append.files["records_added"] == 2
    assert first_append.files["bytes_added"] == store.log("t", 0).snapshot(1).files[0].size_bytes
    assert "2 records at offsets 0..1" in first_append.summary()
    retention = entries[0]
    assert retention.files["removed"] == 1 and retention.parameters["records_deleted"] == 2
    assert retention.parameters["log_start_offset"] == 2
    assert entries[2].parameters["before_offset"] == 1
    assert entries[4].parameters == {"base_offset": 2}
    assert entries[0].timestamp_ms >= entries[-1].timestamp_ms > 0
    assert [e.version for e in store.history("t", 0, limit=2)] == [6, 5]


def test_history_of_a_topic_covers_every_partition_and_refuses_bad_arguments(store):
    _partition_with_some_history(store)
    entries = store.history("t")
    assert {e.partition for e in entries} == {0, 1}
    assert [e.kind for e in entries if e.partition == 1] == ["alter_config", "create"]
    assert len(store.history("t", limit=1)) == 2  # per partition, as DESCRIBE HISTORY's LIMIT is per table
    with pytest.raises(InvalidArgumentError, match="limit"):
        store.history("t", limit=0)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.history("t", 7)


def test_other_engines_operations_show_as_theirs(store):
    uri = _partition_with_some_history(store)
    DeltaTable(uri).optimize.compact()  # what OPTIMIZE or predictive optimization does
    dt = DeltaTable(uri)
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    entries = store.history("t", 0, limit=3)
    assert [(e.kind, e.operation, e.by_deltalog) for e in entries] == [
        ("vacuum_end", "VACUUM END", False), ("vacuum_start", "VACUUM START", False), ("optimize", "OPTIMIZE", False)]
    optimize = entries[2]
    assert optimize.engine.startswith("delta-rs") and optimize.foreign
    assert optimize.files["added"] == 1 and optimize.files["removed"] == 2
    assert optimize.parameters["operationMetrics"]["numFilesRemoved"] == 2


def test_deltalogs_rewrite_of_another_engines_layout_is_a_kind_of_its_own(store, clock):
    uri = _partition_with_some_history(store)
    store.roll("t", 0)
    DeltaTable(uri).optimize.compact()
    assert store.log("t", 0).relayout(clock.now_ms()) == 1
    entries = store.history("t", 0, limit=2)
    assert [(e.kind, e.by_deltalog) for e in entries] == [("relayout", True), ("optimize", False)]
    assert all(e.kind in KINDS for e in store.history("t", 0))
    assert entries[0].parameters == {"files_rewritten": 1, "files_written": 2}


def test_a_transaction_marker_is_its_own_kind(store):
    store.create_topic("tx", 1)
    producer = store.producer(transactional_id="history-txn")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("tx", key=b"k", value=b"v", partition=0)
    producer.commit_transaction()
    marker = store.history("tx", 0, limit=1)[0]
    assert marker.kind == "txn_marker" and marker.parameters["control"] == "COMMIT"
    assert marker.parameters["offset"] == 1 and "COMMIT" in marker.summary()


def test_a_clean_records_what_it_kept_and_removed(spark_store):
    store = spark_store
    store.create_topic("c", 1, config={"cleanup.policy": "compact"})
    store.append("c", 0, [Record(b"k", b"1"), Record(b"k", b"2"), Record(b"j", b"3")])
    store.roll("c", 0)
    store.append("c", 0, [Record(b"x", b"4")])
    store.clean_partition("c", 0, force=True)
    [clean] = [e for e in store.history("c", 0) if e.kind == "clean"]
    assert clean.parameters["records_read"] == 3 and clean.parameters["records_written"] == 2
    assert "kept 2 of 3 records, removed 1" in clean.summary()
    assert clean.files["removed"] == 1 and clean.files["added"] == 1


# -- the command ----------------------------------------------------------------------------------------------

def test_history_command_prints_a_table_or_json_lines(store, capsys):
    _partition_with_some_history(store)
    code, out, err = run_cli(capsys, "--store", store.root, "history", "t", "-p", "0", "--json")
    assert code == 0, err
    rows = json_lines(out)
    assert [r["version"] for r in rows] == [5, 4, 3, 2, 1, 0]
    assert rows[0]["kind"] == "alter_config" and rows[2]["parameters"]["records"] == 1
    code, out, _ = run_cli(capsys, "--store", store.root, "history", "t", "--limit", "1")
    assert code == 0
    assert "VERSION" in out and "alter_config" in out and len(out.strip().splitlines()) == 4  # header, rule, 2 rows
    DeltaTable(store.log("t", 0).uri).optimize.compact()
    code, out, _ = run_cli(capsys, "--store", store.root, "history", "t", "-p", "0", "--limit", "1")
    assert "optimize *" in out and "another engine" in out
    assert run_cli(capsys, "--store", store.root, "history", "t", "--limit", "0")[0] == 2
    code, _, err = run_cli(capsys, "--store", store.root, "history", "nope")
    assert code == 1 and "nope" in err
