"""Commit infos with their own versions (:mod:`deltalog.log.commit_infos`): delta-rs 1.6's ``history`` numbers the
newest commits of the log down from the handle's version, so a handle that another writer's commits overtook read
the wrong commits under the wrong versions. Found by the foreign-engine chaos run (``tests/test_foreign_chaos.py``,
seed 1): a producer's check named a RESTORE twice and a SET TBLPROPERTIES one version too low."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from deltalog import Record
from deltalog.log import commit_infos, foreign_commits

RETENTION = {"delta.logRetentionDuration": "interval 30 days"}


def test_history_of_an_overtaken_handle_gives_each_commit_its_own_version(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(6):
        write_deltalake(uri, pa.table({"a": [i]}), mode="append")
    stale = DeltaTable(uri)
    DeltaTable(uri).alter.set_table_properties(RETENTION, raise_if_not_exists=False)
    DeltaTable(uri).optimize.compact()
    fresh = DeltaTable(uri).history()
    for limit in (1, 2, 3, None):
        got = commit_infos.history(stale, limit)
        assert [e["version"] for e in got] == list(range(5, 5 - (limit or 6), -1))
        by_version = {e["version"]: e for e in fresh}
        assert all(e["timestamp"] == by_version[e["version"]]["timestamp"] for e in got)
    assert [e["version"] for e in commit_infos.history(DeltaTable(uri))][:2] == [7, 6]


def test_a_delete_in_an_overtaken_handle_is_detected(store, clock):
    """The watch checked version 1; the handle holds another engine's DELETE as version 2; two more commits land
    before the watch reads the history. delta-rs's history labelled the newest commit 2 and dropped the DELETE
    as already checked: deltalog read and wrote over it."""
    store.create_topic("t", 1)
    store.append("t", 0, [Record(key=b"k", value=b"v") for _ in range(3)])
    uri = store.log("t", 0).uri
    assert DeltaTable(uri).version() == 1
    DeltaTable(uri).delete("offset = 1")
    handle = DeltaTable(uri)
    DeltaTable(uri).alter.set_table_properties(RETENTION, raise_if_not_exists=False)
    DeltaTable(uri).alter.set_table_properties(RETENTION, raise_if_not_exists=False)
    watch = foreign_commits.ForeignCommitWatch(checked_version=1)
    pending = watch.check(handle)
    assert [(c.version, c.operation) for c in pending] == [(2, "DELETE")]
    handle.update_incremental()
    assert [(c.version, c.operation) for c in watch.check(handle)] == [(2, "DELETE")]
