"""The check after a refresh proven from the rows its commit changed (deltalog.state.increment): used where the
version the refresh was made on was proven, the full proof otherwise, and failing on a wrong row or a change feed
that differs from the table's rows. Real delta-rs tables and files; no Spark."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.errors import CheckFailedError
from deltalog.state import increment
from deltalog.state import refresh as state_refresh
from deltalog.state import rows as state_rows_module
from deltalog.state import table as state_table

COMPACT = {"cleanup.policy": "compact", "state.table.enable": "true"}


@pytest.fixture
def checked(tmp_path, clock) -> Store:
    s = Store(tmp_path / "store", clock=clock, config={"log.state.table.check": "true"})
    s.create_topic("t", 2, config=COMPACT)
    s.append("t", 0, [Record(f"k{i}", f"v{i}") for i in range(20)])
    s.append("t", 1, [Record(f"k{i}", f"w{i}") for i in range(10)])
    assert s.refresh_state("t").checked == "full"  # nothing proven yet in this store
    return s


def _commit(store: Store, version: int) -> str:
    return os.path.join(store.state_table_location("t"), "_delta_log", f"{version:020d}.json")


def _actions(store: Store, version: int, kind: str) -> list[str]:
    with open(_commit(store, version)) as f:
        return [json.loads(line)[kind]["path"] for line in f if json.loads(line).get(kind)]


def _resize(store: Store, version: int, path: str) -> None:
    """The commit's action for ``path`` given the file's new size (what a reader checks it against)."""
    with open(_commit(store, version)) as f:
        actions = [json.loads(line) for line in f]
    for a in actions:
        for body in a.values():
            if isinstance(body, dict) and body.get("path") == path:
                body["size"] = os.path.getsize(os.path.join(store.state_table_location("t"), path))
    with open(_commit(store, version), "w") as f:
        f.writelines(json.dumps(a) + "\n" for a in actions)


def test_a_refresh_on_a_proven_version_is_proven_from_its_commit_alone(checked):
    checked.append("t", 0, [Record("k1", "new"), Record("k2", None), Record("absent", None), Record("k30", "ins")])
    checked.append("t", 1, [Record("k3", "p1"), Record("k3", "p1-later")])
    tx = checked.producer(transactional_id="tx")
    tx.init_transactions()
    tx.begin_transaction()
    tx.send("t", [Record("k4", "aborted")], partition=0)
    tx.abort_transaction()
    tx.begin_transaction()
    tx.send("t", [Record("k5", "open")], partition=0)  # open: the refresh stops before it
    result = checked.refresh_state("t")
    assert result.checked == "incremental" and result.previous_version == result.version - 1
    rows = {(r["partition"], r["key"]): r["value"] for r in checked.state("t").to_pylist()}
    assert rows[(0, b"k1")] == b"new" and (0, b"k2") not in rows and rows[(0, b"k30")] == b"ins"
    assert rows[(1, b"k3")] == b"p1-later" and rows[(0, b"k4")] == b"v4" and rows[(0, b"k5")] == b"v5"
    assert checked.refresh_state("t").checked == "unchanged"  # nothing new: no commit, nothing to prove
    tx.commit_transaction()
    assert checked.refresh_state("t").checked == "incremental"
    assert {r["key"]: r["value"] for r in checked.state("t").to_pylist() if r["partition"] == 0}[b"k5"] == b"open"
    assert checked.compare_state("t").equal


def test_another_writers_commit_or_a_new_process_gets_the_full_proof(checked, tmp_path, clock):
    checked.append("t", 1, [Record("k40", "x")])
    assert checked.refresh_state("t").checked == "incremental"  # a second file
    dt = DeltaTable(checked.state_table_location("t"))
    dt.optimize.compact()  # another engine's commit between refreshes
    assert dt.version() == 3
    checked.append("t", 0, [Record("k1", "x")])
    assert checked.refresh_state("t").checked == "full"
    checked.append("t", 0, [Record("k1", "y")])
    assert checked.refresh_state("t").checked == "incremental"
    again = Store(tmp_path / "store", clock=clock, config={"log.state.table.check": "true"})
    again.append("t", 0, [Record("k1", "z")])
    assert again.refresh_state("t").checked == "full"  # what another process proved is not known here
    assert again.refresh_state("t", full=True).checked == "full"  # a rebuild is proven whole


def test_a_wrong_row_written_by_the_refresh_is_not_proven_and_the_full_proof_names_it(checked, monkeypatch):
    def wrong(latest, partition, config):  # a refresh that writes a value its log does not hold
        out = state_rows_module.state_rows(latest, partition, config)
        values = pc.if_else(pc.equal(out.column("key"), b"k1"), b"wrong", out.column("value"))
        return out.set_column(out.schema.get_field_index("value"), "value", values)

    monkeypatch.setattr(state_refresh, "state_rows", wrong)
    checked.append("t", 0, [Record("k1", "right"), Record("k2", "two")])
    table = state_table.StateTable(checked.storage, "t")
    before = table.open()
    with pytest.raises(CheckFailedError, match="differs from its log") as e:
        checked.refresh_state("t")
    assert (e.value.result.different, e.value.result.missing, e.value.result.extra) == (1, 0, 0)
    step = increment.prove_step(checked.log_manager, "t", before, table.open())
    assert not step.proven and "differs from the latest record" in step.reason
    monkeypatch.undo()
    checked.append("t", 0, [Record("k7", "seven")])
    with pytest.raises(CheckFailedError):  # nothing proven since: the full proof, which still sees the wrong row
        checked.refresh_state("t")


@pytest.mark.parametrize(("kind", "resize"), [("cdc", True), ("cdc", False), ("add", True)])
def test_a_change_feed_that_differs_from_the_rows_fails_the_check(checked, monkeypatch, kind, resize):
    """``cdc``: the feed's file of the commit says another value than the row (its size in the commit fixed up, or
    not: then the feed cannot be read); ``add``: a row of the commit's data file corrupted after it was written (its
    feed then no longer describes it)."""
    refresh = state_refresh.refresh

    def tampered(logs, topic, **kw):
        result = refresh(logs, topic, **kw)
        path = os.path.join(checked.state_table_location("t"), _actions(checked, result.version, kind)[0])
        t = pq.read_table(path)
        column = t.schema.get_field_index("value")
        values = t.column(column).to_pylist()
        values[0] = b"tampered"
        field = t.schema.field(column)
        pq.write_table(t.set_column(column, field, pa.array(values, field.type)), path)
        if resize:
            _resize(checked, result.version, os.path.relpath(path, checked.state_table_location("t")))
        return result

    monkeypatch.setattr(state_refresh, "refresh", tampered)
    checked.append("t", 0, [Record("k1", "new"), Record("k2", "new")])
    with pytest.raises(CheckFailedError, match="change data feed of version 2"):
        checked.refresh_state("t")
    if kind == "cdc":
        assert checked.compare_state("t").equal  # the rows are right: only the feed says otherwise


def test_keys_with_records_past_the_recorded_offsets_are_pending_not_wrong(checked):
    """The cleaner may remove a pending key's records below the offsets (a newer one exists), so the proof, as the
    full one, holds such a key's row only to an offset below them."""
    table = state_table.StateTable(checked.storage, "t")
    before = table.open()
    checked.append("t", 0, [Record("k1", "a"), Record("k2", None)])
    checked.refresh_state("t", check=False)
    checked.append("t", 0, [Record("k1", "b"), Record("k2", "back")])  # past the offsets the version records
    step = increment.prove_step(checked.log_manager, "t", before, table.open())
    assert step.proven and step.changed == 2
