"""The cleaner's metrics table (``<store>/_deltalog/metrics``, a row per partition per job cycle) in every engine's
printed definitions (``deltalog views``), as the state tables are: DuckDB's delta extension cannot be installed
here, so its printed statement runs with ``delta_scan('<location>')`` replaced by ``read_parquet`` of the same
snapshot's files; the other engines' statements are checked as text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from deltalog import Record
from deltalog.cleaner.metrics import append_metrics, collect, metrics_table_uri
from deltalog.sql import ddl

ROOT = Path(__file__).resolve().parent.parent


def _cycle(store) -> str:
    """Two topics and one job cycle's metrics rows appended, as the cleaner job appends them; the table's location."""
    store.create_topic("orders", 2, config={"cleanup.policy": "compact"})
    store.create_topic("prices", 1)
    store.produce("orders", [Record(f"k{i % 3}", f"v{i}") for i in range(12)])
    append_metrics(store.log_manager, collect(store.log_manager))
    return metrics_table_uri(store.log_manager)


def test_printed_duckdb_statement_reads_the_metrics_table(store):
    location = _cycle(store)
    [metrics] = [s for s in ddl.view_statements(store.log_manager, "duckdb") if s.kind == "metrics"]
    assert metrics.name == "deltalog_metrics" and metrics.sql in store.view_ddl("duckdb")
    files = ", ".join(f"'{f}'" for f in DeltaTable(location).file_uris())
    con = duckdb.connect()
    con.execute(metrics.sql.replace(f"delta_scan('{location}')", f"read_parquet([{files}])"))
    got = con.sql('SELECT topic, "partition" FROM deltalog_metrics WHERE "partition" >= 0 '
                  "ORDER BY topic, \"partition\"").fetchall()
    assert got == [("orders", 0), ("orders", 1), ("prices", 0)]
    want = DeltaTable(location).to_pyarrow_table().num_rows
    assert con.sql("SELECT count(*) FROM deltalog_metrics").fetchall() == [(want,)]


def test_every_engine_names_the_metrics_table(store):
    location = _cycle(store)
    spark = store.view_ddl("spark")
    assert f"CREATE OR REPLACE VIEW `deltalog_metrics` AS\nSELECT * FROM delta.`{location}`" in spark
    assert "deltalog_metrics are Delta tables" in spark and "pip install delta-spark" in spark
    databricks = store.view_ddl("databricks", catalog="main", schema="kafka")
    assert (f"CREATE TABLE IF NOT EXISTS `main`.`kafka`.`deltalog_metrics` USING DELTA LOCATION '{location}'"
            in databricks)
    trino = store.view_ddl("trino")
    assert f"table_name => 'deltalog_metrics', table_location => 'file://{location}'" in trino
    assert "deltalog_metrics" not in store.view_ddl("duckdb", topics=["orders"])  # the store's table, not a topic's


def test_no_metrics_table_before_a_cycle(store):
    store.create_topic("orders", 1)
    assert not any(s.kind == "metrics" for s in ddl.view_statements(store.log_manager, "duckdb"))


@pytest.mark.subprocess
def test_deltalog_views_prints_the_metrics_table(store, tmp_path):
    location = _cycle(store)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DELTALOG_STORE", None)
    done = subprocess.run([sys.executable, "-m", "deltalog", "--store", store.root, "views", "--engine", "duckdb"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"CREATE OR REPLACE VIEW \"deltalog_metrics\" AS\nSELECT * FROM delta_scan('{location}');" in done.stdout


def test_the_embedded_engine_answers_the_metrics_table_as_the_other_engines_name_it(store):
    """``deltalog sql`` (DuckDB, no Spark) has ``deltalog_metrics`` too: the same rows as the table itself."""
    location = _cycle(store)
    got = store.sql('SELECT topic, "partition" FROM deltalog_metrics WHERE "partition" >= 0 '
                    'ORDER BY topic, "partition"').fetchall()
    assert got == [("orders", 0), ("orders", 1), ("prices", 0)]
    want = DeltaTable(location).to_pyarrow_table()
    assert store.sql("SELECT count(*) FROM DELTALOG_METRICS").fetchall() == [(want.num_rows,)]
    assert store.sql("SELECT * FROM deltalog_metrics").columns == want.column_names


def test_the_embedded_engine_says_the_metrics_table_is_not_there_before_a_cycle(store):
    from deltalog.errors import QueryError

    store.create_topic("orders", 1)
    with pytest.raises(QueryError, match="deltalog_metrics"):
        store.sql("SELECT * FROM deltalog_metrics")
