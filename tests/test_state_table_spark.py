"""The state table through cleans (the Spark cleaner) and in the quality suites (Great Expectations on Spark)."""

from __future__ import annotations

import os
import random

from deltalake import DeltaTable

from deltalog import Record


def test_state_table_stays_equal_through_cleans_and_the_quality_suite_proves_it(spark_store, clock):
    store = spark_store
    store.create_topic("t", 2, config={"cleanup.policy": "compact", "state.table.enable": "true",
                                       "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    rnd = random.Random(7)
    for _ in range(2):
        for p in (0, 1):
            store.append("t", p, [Record(f"k{rnd.randrange(40)}", None if rnd.random() < 0.2 else "v")
                                  for _ in range(60)])
            store.roll("t", p)
        store.refresh_state("t", check=True)
        clock.advance(1000)
        # records the table has not applied yet get cleaned first: their keys' older records go
        for p in (0, 1):
            store.append("t", p, [Record(f"k{rnd.randrange(40)}", "late") for _ in range(20)])
            store.roll("t", p)
        store.clean("t")
        assert store.compare_state("t").equal
    store.refresh_state("t", check=True)
    comparison = store.compare_state("t")
    assert comparison.equal and comparison.pending_keys == 0
    result = store.check("t", save=False)
    [state_suite] = [s for s in result.suites if s.suite == "state"]
    assert state_suite.success and result.success, result.summary()
    DeltaTable(store.state_table_location("t")).delete("partition = 0")  # another engine breaks it
    result = store.check("t", save=False)
    [state_suite] = [s for s in result.suites if s.suite == "state"]
    assert not state_suite.success
    assert state_suite.expectations[0].unexpected_count == len([k for k in comparison.details.to_pylist()
                                                                if k["partition"] == 0])
    assert "state table, state suite" in result.summary()


def test_each_job_cycle_refreshes_the_state_tables_even_of_topics_never_cleaned(tmp_path, spark, clock):
    import io
    import json

    from deltalog import Store
    from deltalog.jobs.cleaner_job import JobConfig
    from deltalog.jobs.cleaner_job import run as run_job

    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic("plain", 1, config={"state.table.enable": "true"})  # cleanup.policy=delete: never cleaned
    store.create_topic("off", 1)
    store.append("plain", 0, [Record("a", "1"), Record("a", "2")])
    out = io.StringIO()
    config = JobConfig.from_mapping({"store": {"root": str(tmp_path / "s")}, "job": {"once": True}})
    assert run_job(config, spark=spark, clock=clock, out=out) == 1
    [line] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert line["passes"] == 0
    assert line["state_tables"]["refreshed"]["plain"]["records_read"] == 2
    assert list(line["state_tables"]["refreshed"]) == ["plain"] and line["state_tables"]["failed"] == {}
    assert store.state("plain").to_pylist()[0]["value"] == b"2"
    # the cycle refreshed before recording its metrics: the metrics table holds the lag after the refresh
    from deltalake import DeltaTable

    from deltalog.cleaner.metrics import metrics_table_uri

    rows = DeltaTable(metrics_table_uri(store.log_manager)).to_pyarrow_table().to_pylist()
    [plain] = [r for r in rows if r["topic"] == "plain"]
    assert (plain["state_applied_offset"], plain["state_offsets_behind"], plain["state_time_behind_ms"]) == (2, 0, 0)
    [off] = [r for r in rows if r["topic"] == "off"]
    assert off["state_offsets_behind"] is None


def test_printed_spark_statement_reads_the_state_table_snapshot(spark_store):
    """The printed Spark SQL, with ``delta.`<location>``` (delta-spark's JARs, not installable here) replaced by a
    view of the same snapshot's Parquet files."""
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact", "state.table.enable": "true",
                                       "key.encoding": "string", "value.encoding": "json",
                                       "value.schema": "price DOUBLE"})
    store.produce("t", [Record(f"k{i % 7}", f'{{"price": {i}}}') for i in range(30)] + [Record("k1", None)])
    store.refresh_state("t")
    location = store.state_table_location("t")
    from deltalog.sql import ddl

    [state] = [s for s in ddl.view_statements(store.log_manager, "spark", topics=["t"]) if s.kind == "state"]
    spark = store.spark
    spark.read.parquet(*DeltaTable(location).file_uris()).createOrReplaceTempView("__t_state_snapshot")
    spark.sql(state.sql.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMPORARY VIEW")
              .replace(f"delta.`{location}`", "__t_state_snapshot"))
    got = sorted((r["key"], r["price"]) for r in spark.sql("SELECT key, value.price AS price FROM t_state").collect())
    want = sorted((r["key"], r["value"]["price"]) for r in store.state("t").to_pylist())
    assert got == want and len(got) == 6


def test_printed_databricks_statement_registers_the_state_table_snapshot(spark_store, tmp_path):
    """The printed Databricks/Unity Catalog statement, run in this Spark as printed except ``USING DELTA`` (no
    Delta reader here) and its location: ``USING PARQUET`` over a folder holding exactly the snapshot's files
    (links to them), the table's name as printed; then the query a user runs on it."""
    import re

    store = spark_store
    store.create_topic("shop.prices", 2, config={"cleanup.policy": "compact", "state.table.enable": "true",
                                                 "key.encoding": "string", "value.encoding": "json",
                                                 "value.schema": "price DOUBLE"})
    store.produce("shop.prices", [Record(f"k{i % 9}", f'{{"price": {i}}}') for i in range(40)] + [Record("k1", None)])
    store.refresh_state("shop.prices")
    location = store.state_table_location("shop.prices")
    script = store.view_ddl("databricks", topics=["shop.prices"], catalog="spark_catalog", schema="kafka_db")
    assert "Databricks and Unity Catalog read them as they are" in script
    [statement] = [s for s in script.split(";\n") if "shop_prices_state" in s]
    printed = re.fullmatch(r"\s*CREATE TABLE IF NOT EXISTS `spark_catalog`.`kafka_db`.`shop_prices_state` "
                           r"USING DELTA LOCATION '([^']+)'\s*", statement)
    assert printed is not None and printed.group(1) == location, statement
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    for i, f in enumerate(DeltaTable(location).file_uris()):
        os.link(f.removeprefix("file://"), snapshot / f"part-{i}.parquet")
    spark = store.spark
    spark.sql("CREATE DATABASE IF NOT EXISTS spark_catalog.kafka_db")
    try:
        spark.sql(statement.replace("USING DELTA", "USING PARQUET").replace(f"'{location}'", f"'{snapshot}'"))
        got = sorted((r["partition"], r["key"], r["price"]) for r in spark.sql(
            "SELECT `partition`, key, value.price AS price FROM `spark_catalog`.`kafka_db`.`shop_prices_state`"
        ).collect())
    finally:
        spark.sql("DROP DATABASE IF EXISTS spark_catalog.kafka_db CASCADE")
    want = sorted((r["partition"], r["key"], r["value"]["price"]) for r in store.state("shop.prices").to_pylist())
    assert got == want and len(got) == 8
