"""``deltalog state``, ``describe``, ``doctor`` and the state tables (run in-process through deltalog.cli.main)."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.cli import doctor_checks
from deltalog.cli import main as cli


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_state_commands(tmp_path, capsys):
    root = str(tmp_path / "s")
    store = Store(root)
    store.create_topic("t", 2, config={"state.table.enable": "true", "key.encoding": "string",
                                       "value.encoding": "string"})
    store.create_topic("other", 1)
    store.append("t", 0, [Record("a", "1"), Record("b", "2")])
    assert cli(["--store", root, "state", "refresh", "-o", "json"]) == 0
    [line] = _json_lines(capsys.readouterr().out)
    assert line["topic"] == "t" and line["offsets"] == {"0": 2, "1": 0} and line["records_read"] == 2
    store.append("t", 0, [Record("a", "3")])
    assert cli(["--store", root, "state", "lag", "-o", "json"]) == 0
    [lag] = _json_lines(capsys.readouterr().out)
    assert lag["offsets_behind"] == 1 and lag["partitions"][0]["applied_offset"] == 2
    assert cli(["--store", root, "state", "refresh", "t", "--check"]) == 0
    assert "equal to the log" in capsys.readouterr().out
    assert cli(["--store", root, "state", "history", "t", "-o", "json"]) == 0
    versions = _json_lines(capsys.readouterr().out)
    assert [v["offsets"] for v in versions] == [{"0": 3, "1": 0}, {"0": 2, "1": 0}, {}]
    assert cli(["--store", root, "state", "show", "t", "--as-of", str(versions[1]["version"]), "-o", "json"]) == 0
    assert sorted((r["key"], r["value"]) for r in _json_lines(capsys.readouterr().out)) == [("a", "1"), ("b", "2")]
    assert cli(["--store", root, "state", "show", "t"]) == 0
    assert "a    3" in capsys.readouterr().out.replace("  ", "  ")
    assert cli(["--store", root, "describe", "t", "-o", "json"]) == 0
    [described] = _json_lines(capsys.readouterr().out)
    assert described["state_table"]["offsets_behind"] == 0 and described["state_table"]["exists"]
    DeltaTable(store.state_table_location("t")).delete("key = 'a'")
    assert cli(["--store", root, "state", "compare", "t"]) == 3
    assert "DIFFERS" in capsys.readouterr().out


def test_doctor_reports_a_state_table_behind_or_different(tmp_path):
    root = str(tmp_path / "s")
    store = Store(root)
    store.create_topic("t", 1, config={"state.table.enable": "true"})
    store.append("t", 0, [Record("a", "1")])
    store.refresh_state("t")
    [ok] = [c for c in doctor_checks.check_state_tables(root) if c.name == "state table t"]
    assert ok.status == doctor_checks.OK
    store.append("t", 0, [Record("b", "2")])
    [behind] = [c for c in doctor_checks.check_state_tables(root) if c.name == "state table t"]
    assert behind.status == doctor_checks.WARN and "1 offset(s) behind" in behind.detail
    DeltaTable(store.state_table_location("t")).delete()
    [different] = [c for c in doctor_checks.check_state_tables(root) if c.name == "state table t"]
    assert different.status == doctor_checks.FAIL and "1 missing" in different.detail
    assert "--full" in different.fix
    readers = [c for c in doctor_checks.check_state_tables(root) if c.name == "state table readers"]
    assert readers and "delta-spark" in readers[0].detail and "INSTALL delta" in readers[0].detail
