"""Cleaner metrics as data (collect, the metrics Delta table) and as a table (deltalog status)."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from deltalog import Record
from deltalog.cleaner.log_cleaner import CycleResult
from deltalog.cleaner.metrics import METRICS_SCHEMA, collect, format_table, metrics_table_uri, record_cycle
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.cli import main as cli

DAY = 24 * 3_600_000


@pytest.fixture
def filled(store, clock):
    store.create_topic("state", 2, config={"cleanup.policy": "compact", "max.compaction.lag.ms": DAY})
    store.create_topic("events", 1, config={"cleanup.policy": "delete"})
    for r in range(2):
        store.append("state", 0, [Record(f"k{i}", f"v{r}") for i in range(3)])
        store.roll("state", 0)
    store.append("state", 0, [Record("active", "a")])
    store.append("events", 0, [Record(None, "e")])
    return store


def test_collect_reports_dirty_percent_delay_and_uncleanable(filled, clock):
    store = filled
    clock.advance(DAY + 500)
    m = collect(store.log_manager)
    by = {(p.topic, p.partition): p for p in m.partitions}
    assert set(by) == {("state", 0), ("state", 1), ("events", 0)}
    s0 = by[("state", 0)]
    assert s0.dirty_percent == 100.0 and s0.dirty_bytes == store.describe("state")[0].dirty_bytes > 0
    assert s0.max_compaction_delay_ms == 500  # waited 500 ms past max.compaction.lag.ms
    assert s0.last_clean_ms is None and s0.uncleanable is False
    assert by[("events", 0)].dirty_percent == 0.0  # delete topics are not compacted
    assert m.max_dirty_percent == 100.0 and m.max_compaction_delay_ms == 500
    assert m.uncleanable_partitions_count == 0 and m.uncleanable_bytes == 0
    assert m.last_run_ms is None and m.time_since_last_run_ms is None

    UncleanablePartitions(store.storage).mark("state", 0, OSError("bad file"), clock.now_ms())
    m = collect(store.log_manager)
    assert m.uncleanable_partitions_count == 1 and m.uncleanable_bytes == s0.dirty_bytes
    assert m.max_dirty_percent == 0.0  # Kafka's max-dirty-percent leaves uncleanable logs out
    text = format_table(m)
    assert "uncleanable partitions: 1" in text and "UNCLEANABLE (OSError: bad file)" in text


def test_each_cycle_appends_rows_and_time_since_last_run(filled, clock):
    store = filled
    now = clock.now_ms()
    record_cycle(store.log_manager, CycleResult(started_ms=now - 10, finished_ms=now))
    clock.advance(2_000)
    m = record_cycle(store.log_manager, CycleResult(started_ms=clock.now_ms(), finished_ms=clock.now_ms()))
    assert m.last_run_ms == clock.now_ms() and m.time_since_last_run_ms == 0
    assert collect(store.log_manager, clock.now_ms() + 5).time_since_last_run_ms == 5
    table = DeltaTable(metrics_table_uri(store.log_manager)).to_pyarrow_table()
    assert table.schema.names == METRICS_SCHEMA.names
    rows = table.to_pylist()
    assert len(rows) == 2 * 4  # 3 partitions + the store row, per cycle
    assert sorted(r["recorded_ms"] for r in rows if r["scope"] == "store") == [now, now + 2_000]
    store_row = max((r for r in rows if r["scope"] == "store"), key=lambda r: r["recorded_ms"])
    assert store_row["time_since_last_run_ms"] == 0 and store_row["passes"] == 0


def test_status_command_prints_the_table_and_json(filled, capsys):
    store = filled
    assert cli(["--store", store.root, "status"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[3].split()[:4] == ["TOPIC", "PART", "POLICY", "SIZE"]
    assert "state" in out and "events" in out and "100.0" in out
    assert cli(["--store", store.root, "status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {(p["topic"], p["partition"]) for p in data["partitions"]} == {("state", 0), ("state", 1), ("events", 0)}
    assert data["uncleanable_partitions_count"] == 0


def test_maintenance_commands(filled, capsys):
    store = filled
    assert cli(["--store", store.root, "cleaner", "delete-records", "events", "0", "1"]) == 0
    assert "low watermark) is now 1" in capsys.readouterr().out
    assert cli(["--store", store.root, "cleaner", "vacuum"]) == 0
    assert "dry run" in capsys.readouterr().out
    assert cli(["--store", store.root, "cleaner", "retention", "--json"]) == 0
    assert {json.loads(line)["topic"] for line in capsys.readouterr().out.splitlines()} == {"state", "events"}
    assert cli(["--store", store.root, "cleaner", "delete-records", "events", "0", "99"]) == 1
    assert "at most the log end offset" in capsys.readouterr().err
    assert cli(["--store", store.root, "cleaner", "reset-uncleanable", "nope"]) == 1


def test_state_table_lag_in_the_metrics_table_and_an_older_table_gains_the_columns(store, clock, tmp_path):
    """Each partition's state-table lag (offsets and time behind) is a column of the metrics table; a metrics table
    written before the columns existed takes them on the next append (schema merge)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from deltalog.cleaner.metrics import metrics_rows

    store.create_topic("prices", 2, config={"cleanup.policy": "compact", "state.table.enable": "true"})
    store.create_topic("plain", 1, config={"cleanup.policy": "compact"})
    store.append("prices", 0, [Record(f"k{i}", "v") for i in range(3)])
    store.refresh_state("prices")
    store.append("prices", 0, [Record("k9", "v"), Record("k0", "w")])  # two offsets not applied yet
    store.append("plain", 0, [Record("k", "v")])
    old = metrics_rows(collect(store.log_manager)).drop_columns(
        ["state_applied_offset", "state_offsets_behind", "state_time_behind_ms"])
    write_deltalake(metrics_table_uri(store.log_manager), old, mode="append")
    clock.advance(1_000)

    m = record_cycle(store.log_manager, CycleResult(started_ms=clock.now_ms(), finished_ms=clock.now_ms()),
                     store.state_lag_of)
    by = {(p.topic, p.partition): p for p in m.partitions}
    assert (by[("prices", 0)].state_applied_offset, by[("prices", 0)].state_offsets_behind) == (3, 2)
    assert by[("prices", 0)].state_time_behind_ms >= 0
    assert (by[("prices", 1)].state_offsets_behind, by[("prices", 1)].state_time_behind_ms) == (0, 0)
    assert by[("plain", 0)].state_offsets_behind is None  # keeps no state table
    table = DeltaTable(metrics_table_uri(store.log_manager)).to_pyarrow_table()
    assert table.schema.names == METRICS_SCHEMA.names
    new = [r for r in table.to_pylist() if r["recorded_ms"] == m.now_ms and r["scope"] == "partition"]
    lag = {(r["topic"], r["partition"]): (r["state_applied_offset"], r["state_offsets_behind"]) for r in new}
    assert lag == {("prices", 0): (3, 2), ("prices", 1): (0, 0), ("plain", 0): (None, None)}
    store_row = [r for r in table.to_pylist() if r["recorded_ms"] == m.now_ms and r["scope"] == "store"]
    assert store_row[0]["state_offsets_behind"] == 2
    assert pa.types.is_int64(table.schema.field("state_time_behind_ms").type)

    store.refresh_state("prices")
    after = collect(store.log_manager, state_lag=store.state_lag_of)
    assert {p.state_offsets_behind for p in after.partitions if p.topic == "prices"} == {0}
    assert {p.state_time_behind_ms for p in after.partitions if p.topic == "prices"} == {0}
