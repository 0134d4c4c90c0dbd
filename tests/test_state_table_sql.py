"""The state tables in every engine's printed definitions (deltalog views) and in the embedded SQL engine. DuckDB's
delta extension cannot be installed here, so the printed DuckDB statement runs with ``delta_scan('<location>')``
replaced by ``read_parquet`` of the same snapshot's files (the Spark statement: tests/test_state_table_spark.py)."""

from __future__ import annotations

import duckdb
from deltalake import DeltaTable

from deltalog import Record
from deltalog.sql import ddl

CONFIG = {"cleanup.policy": "compact", "state.table.enable": "true", "key.encoding": "string",
          "value.encoding": "json", "value.schema": "price DOUBLE, currency STRING"}


def _topic(store):
    store.create_topic("shop.prices", 2, config=CONFIG)
    store.produce("shop.prices", [Record(f"k{i}", f'{{"price": {i}, "currency": "EUR"}}') for i in range(20)])
    store.produce("shop.prices", [Record("k3", None), Record("k4", '{"price": 44.5, "currency": "USD"}')])
    store.refresh_state("shop.prices")


def test_printed_duckdb_statement_reads_the_state_table_snapshot(store):
    _topic(store)
    location = store.state_table_location("shop.prices")
    script = store.view_ddl("duckdb", topics=["shop.prices"])
    assert "delta extension" in script.splitlines()[2] and "INSTALL delta;" in script
    [state] = [s for s in ddl.view_statements(store.log_manager, "duckdb", topics=["shop.prices"]) if s.kind == "state"]
    assert state.name == "shop_prices_state" and state.sql in script
    files = ", ".join(f"'{f}'" for f in DeltaTable(location).file_uris())
    con = duckdb.connect()
    con.execute(state.sql.replace(f"delta_scan('{location}')", f"read_parquet([{files}])"))
    got = con.sql('SELECT "partition", "offset", key, value.price, value.currency FROM shop_prices_state '
                  "ORDER BY key").fetchall()
    want = sorted((r["partition"], r["offset"], r["key"], r["value"]["price"], r["value"]["currency"])
                  for r in store.state("shop.prices").to_pylist())
    assert sorted(got) == want and len(got) == 19
    assert ("k4" in {g[2] for g in got}) and ("k3" not in {g[2] for g in got})


def test_every_engine_names_the_state_table_and_what_it_needs(store):
    _topic(store)
    location = store.state_table_location("shop.prices")
    spark = store.view_ddl("spark", topics=["shop.prices"])
    assert f"SELECT * FROM delta.`{location}`" in spark and "pip install delta-spark" in spark
    assert "io.delta:delta-spark_2.13" in spark
    databricks = store.view_ddl("databricks", topics=["shop.prices"], catalog="main", schema="kafka")
    assert f"CREATE TABLE IF NOT EXISTS `main`.`kafka`.`shop_prices_state` USING DELTA LOCATION '{location}'" \
        in databricks
    trino = store.view_ddl("trino", topics=["shop.prices"])
    assert (f"table_name => 'shop_prices_state', table_location => 'file://{location}'") in trino
    assert "register-table-procedure" in trino
    store.create_topic("nostate", 1)
    assert "nostate_state" not in store.view_ddl("duckdb", topics=["nostate"])


def test_embedded_sql_answers_from_the_state_table(store):
    _topic(store)
    assert store.sql("SELECT count(*) FROM shop_prices_state").fetchall() == [(19,)]
    assert store.sql("SELECT count(*) FROM shop_prices_current").fetchall() == [(19,)]
    same = store.sql("SELECT s.key FROM shop_prices_state s FULL JOIN shop_prices_current c "
                     'ON s."partition" = c."partition" AND s.key = c.key AND s."offset" = c."offset" '
                     "WHERE s.key IS NULL OR c.key IS NULL").fetchall()
    assert same == []
    assert store.sql("SELECT value.price FROM shop_prices_state WHERE key = 'k4'").fetchall() == [(44.5,)]


def test_printed_trino_statement_registers_the_state_table_snapshot(store):
    """Trino cannot run here: the printed ``register_table`` call is read by its named arguments, its
    ``table_location`` opened by delta-rs as Trino's connector would open it, and that snapshot registered under the
    printed schema and table name in DuckDB, where a query a Trino user writes (the same text) reads it."""
    import re

    _topic(store)
    script = store.view_ddl("trino", topics=["shop.prices"])
    assert "delta.register-table-procedure.enabled=true" in script and "connector.name=delta_lake" in script
    [call] = [s for s in script.split(";\n") if "'shop_prices_state'" in s]
    printed = re.fullmatch(r"\s*CALL \"delta\"\.system\.register_table\(schema_name => '([^']+)', "
                           r"table_name => '([^']+)', table_location => '([^']+)'\)\s*", call)
    assert printed is not None, call
    schema, table, table_location = printed.groups()
    assert (schema, table) == ("default", "shop_prices_state")
    snapshot = DeltaTable(table_location)  # the file:// location, as the connector reads it
    assert snapshot.version() == DeltaTable(store.state_table_location("shop.prices")).version()
    files = ", ".join(f"'{f}'" for f in snapshot.file_uris())
    con = duckdb.connect()
    con.execute('ATTACH \':memory:\' AS "delta"')
    con.execute(f'CREATE SCHEMA "delta"."{schema}"')
    con.execute(f'CREATE VIEW "delta"."{schema}"."{table}" AS SELECT * FROM read_parquet([{files}])')
    query = ('SELECT "partition", "offset", "key", "value"."price", "value"."currency" '
             'FROM "delta"."default"."shop_prices_state" WHERE "key" <> \'k3\'')
    got = con.sql(query).fetchall()
    want = sorted((r["partition"], r["offset"], r["key"], r["value"]["price"], r["value"]["currency"])
                  for r in store.state("shop.prices").to_pylist())
    assert sorted(got) == want and len(got) == 19
