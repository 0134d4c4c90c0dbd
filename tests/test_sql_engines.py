"""Every SQL engine answers the same: the embedded engine (DuckDB), the Spark views and the plain-SQL view DDL
(DuckDB and Spark SQL) against the store's own reader, on random logs with tombstones, cleaned and uncleaned
sections, and committed, aborted and open transactions.

The DDL names ``delta_scan(...)`` (DuckDB) and ``delta.`path``` (Spark); DuckDB's delta extension cannot be
downloaded here and delta-spark's JARs are not installed, so these tests substitute each partition table
with the Parquet files of its current snapshot (``read_parquet([...])`` in DuckDB, a temp view over
``spark.read.parquet`` in Spark): the same rows a Delta reader returns at that version. The view text above the
table reference is the text ``deltalog views`` prints.
"""

from __future__ import annotations

import random

import duckdb
import pytest

import deltalog
from deltalog import Record, Store
from deltalog.sql import ddl
from deltalog.sql.reads import SPARK_SCHEMA_DDL
from deltalog.storage import join

TOPIC = "orders.v1"  # '.' -> views orders_v1 and orders_v1_current
KEYS = [f"k{i}" for i in range(7)]
PARTITIONS = 2


def _records(rng: random.Random, n: int) -> list[Record]:
    out = []
    for _ in range(n):
        value = None if rng.random() < 0.25 else f"v{rng.randrange(1000)}"
        headers = (("h", b"x"),) if rng.random() < 0.2 else ()
        out.append(Record(key=rng.choice(KEYS), value=value, headers=headers))
    return out


def _clean(store: Store, clock, partition: int) -> None:
    store.roll(TOPIC, partition)
    store.clean_partition(TOPIC, partition, force=True)
    clock.advance(10_000)  # past delete.retention.ms: the next clean removes the tombstones and markers stamped


def build_log(store: Store, clock, seed: int) -> None:
    """A random log in every state the views must read: cleaned twice (tombstones and markers stamped, then
    those past their horizon removed), dirty sections with tombstones, committed and aborted transactions above
    the checkpoint, and an open transaction followed by plain records (past the last stable offset)."""
    rng = random.Random(seed)
    store.create_topic(TOPIC, PARTITIONS, config={
        "cleanup.policy": "compact", "delete.retention.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
        "value.encoding": "string"})
    producer = store.producer(transactional_id=f"app-{seed}")
    producer.init_transactions()
    producer.begin_transaction()  # its records superseded later, the COMMIT marker goes on a later clean
    producer.send(TOPIC, _records(rng, 4), partition=0)
    producer.commit_transaction()
    store.append(TOPIC, 0, _records(rng, 3))
    _clean(store, clock, 0)
    store.append(TOPIC, 0, _records(rng, 3))
    _clean(store, clock, 0)  # removes what the first clean stamped and nothing keeps
    for _ in range(10):
        step = rng.random()
        partition = rng.randrange(PARTITIONS)
        if step < 0.45:
            store.append(TOPIC, partition, _records(rng, rng.randint(1, 4)))
        elif step < 0.8:
            producer.begin_transaction()
            for p in rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS)):
                producer.send(TOPIC, _records(rng, rng.randint(1, 3)), partition=p)
            producer.commit_transaction() if rng.random() < 0.5 else producer.abort_transaction()
        else:
            store.roll(TOPIC, partition)
        clock.advance(1)
    store.append(TOPIC, 1, _records(rng, 2))
    producer.begin_transaction()  # left open: read_committed stops at its first offset
    producer.send(TOPIC, _records(rng, 2), partition=1)
    store.append(TOPIC, 1, _records(rng, 2))


def expected(store: Store) -> tuple[set, set]:
    """The log and the current state from the store's own reader (read_committed)."""
    log = set()
    for p in range(PARTITIONS):
        for r in store.read(TOPIC, p, "earliest", isolation_level="read_committed", decode=False):
            log.add((p, r.offset, r.key, None if r.value is None else r.value.decode(),
                     tuple(r.headers), r.timestamp_ms))
    latest: dict = {}
    for row in sorted(log, key=lambda t: t[1]):
        latest[(row[0], row[2])] = row
    current = {row for row in latest.values() if row[2] is not None and row[3] is not None}
    return log, current


def _norm(rows, columns) -> set:
    """Rows of any engine as (partition, offset, key bytes, value, headers, timestamp)."""
    out = set()
    for r in rows:
        d = dict(zip(columns, r, strict=True))
        headers = tuple((h["key"], bytes(h["value"])) for h in (d["headers"] or []))
        out.add((d["partition"], d["offset"], None if d["key"] is None else bytes(d["key"]), d["value"],
                 headers, d["timestamp_ms"]))
    return out


def _duckdb_rows(con, query) -> set:
    rel = con.sql(query)
    return _norm(rel.fetchall(), rel.columns)


def _spark_rows(df) -> set:
    return _norm([tuple(r) for r in df.collect()], df.columns)


def _snapshot_files(store: Store, topic: str) -> dict[int, list[str]]:
    out = {}
    for log in store.logs(topic):
        snap = log.snapshot()
        out[snap.partition] = [join(log.uri, f.path) for f in snap.files]
    return out


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_every_engine_answers_as_the_reader(tmp_path, clock, spark, seed):
    store = Store(tmp_path / "store", clock=clock, spark=spark)
    build_log(store, clock, seed)
    log, current = expected(store)
    assert log and current
    view = "orders_v1"

    # the embedded engine (the default of a store opened without Spark) and the Spark views
    plain = Store(tmp_path / "store", clock=clock)
    assert _duckdb_rows(plain, f"SELECT * FROM {view}") == log
    assert _duckdb_rows(plain, f"SELECT * FROM {view}_current") == current
    assert _spark_rows(store.sql(f"SELECT * FROM {view}")) == log
    assert _spark_rows(store.sql(f"SELECT * FROM {view}_current")) == current

    # the DDL for DuckDB, partition tables as read_parquet of the snapshot's files (see the module docstring)
    files = _snapshot_files(store, TOPIC)
    con = duckdb.connect()
    ref = {p: "(SELECT * FROM read_parquet([" + ", ".join(f"'{f}'" for f in fs) + "], union_by_name = true))"
           for p, fs in files.items()}
    for s in ddl.view_statements(store.log_manager, "duckdb",
                                 table_ref=lambda _topic, t: ref[t.partition]):
        con.execute(s.sql)
    assert _duckdb_rows(con, f"SELECT * FROM {view}") == log
    assert _duckdb_rows(con, f"SELECT * FROM {view}_current") == current

    # the DDL for Spark SQL, registered in one call, partition tables as temp views over the same files
    for p, fs in files.items():
        spark.read.schema(SPARK_SCHEMA_DDL).parquet(*fs).createOrReplaceTempView(f"src_{p}")
    names = deltalog.register_views(spark, store, temporary=True, table_ref=lambda _topic, t: f"src_{t.partition}")
    assert names == {view: TOPIC, view + "_current": TOPIC}
    assert _spark_rows(spark.table(view)) == log
    assert _spark_rows(spark.table(view + "_current")) == current


def _duckdb_rows_of(store: Store, query: str) -> set:
    rel = store.sql(query)
    return _norm(rel.fetchall(), rel.columns)


# The embedded engine's own tests: no Spark.
def test_embedded_engine_is_the_default_without_spark_and_reads_read_committed(store, clock):
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2")])
    p = store.producer(transactional_id="x")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [Record(key=b"a", value=b"aborted")], partition=0)
    p.abort_transaction()
    p.begin_transaction()
    p.send("t", [Record(key=b"b", value=None)], partition=0)
    p.commit_transaction()
    p.begin_transaction()
    p.send("t", [Record(key=b"c", value=b"open")], partition=0)
    store.append("t", 0, [Record(key=b"d", value=b"after the open transaction")])
    rel = store.sql('SELECT "offset", key, value FROM t ORDER BY "offset"')  # OFFSET is reserved in DuckDB
    assert type(rel.relation).__module__.startswith(("duckdb", "_duckdb"))
    assert rel.fetchall() == [(0, b"a", b"1"), (1, b"b", b"2"), (4, b"b", None)]
    assert store.sql("SELECT key, value FROM t_current").fetchall() == [(b"a", b"1")]
    # the markers never show, even read raw: the view has no control column
    assert "control" not in store.sql("SELECT * FROM t").columns


def test_the_embedded_answer_keeps_spark_dataframe_code_working(store):
    """store.sql used to return a Spark DataFrame on every store: the calls its users wrote still answer."""
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2"), Record(key=b"a", value=b"3")])
    result = store.sql("SELECT key, value FROM t_current ORDER BY key")
    assert result.count() == 2
    rows = result.collect()
    assert [(r.key, r.value) for r in rows] == [(b"a", b"3"), (b"b", b"2")] and rows[0][0] == b"a"
    assert result.first().value == b"3" and result.limit(1).count() == 1
    assert list(result.toPandas()["key"]) == [b"a", b"b"]
    assert result.toArrow().num_rows == 2 and result.columns == ["key", "value"]
    assert result.count("key").fetchall() == [(2,)]  # with an argument: DuckDB's own aggregate


def test_embedded_engine_decodes_per_topic_encoding(store):
    pytest.importorskip("pyspark")  # a json schema is parsed with pyspark's types (no JVM)
    store.create_topic("prices", config={"cleanup.policy": "compact", "key.encoding": "string",
                                         "value.encoding": "json",
                                         "value.schema": "price DOUBLE, origin STRUCT<country: STRING>"})
    store.append("prices", 0, [Record(key="apple", value='{"price": 1.5, "origin": {"country": "NZ"}}'),
                               Record(key="pear", value='{"price": 2}')])
    rows = store.sql("SELECT key, value.price AS price, value.origin.country AS country FROM prices_current "
                     "ORDER BY key").fetchall()
    assert rows == [("apple", 1.5, "NZ"), ("pear", 2.0, None)]


def test_embedded_engine_refuses_ambiguous_names_and_unknown_engines(store):
    from deltalog.errors import InvalidArgumentError, InvalidTopicError

    store.create_topic("a.b")
    store.create_topic("a_b")
    with pytest.raises(InvalidTopicError, match="ambiguous"):
        store.sql("SELECT * FROM a_b")
    with pytest.raises(InvalidArgumentError, match="spark, embedded"):
        store.sql("SELECT 1", engine="presto")
    with pytest.raises(InvalidArgumentError, match="spark, databricks, duckdb, trino"):
        store.view_ddl("oracle")


def test_embedded_engine_takes_spark_sqls_bare_offset_column(store):
    """OFFSET is reserved in DuckDB, not in Spark SQL: a query written for the Spark views still answers."""
    from deltalog.errors import QueryError
    from deltalog.sql.embedded import quote_bare_offset

    store.create_topic("t")
    store.append("t", 0, [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2"), Record(key=b"c", value=b"3")])
    assert store.sql("SELECT offset, key FROM t ORDER BY offset DESC").fetchall() == [(2, b"c"), (1, b"b"), (0, b"a")]
    assert store.sql("SELECT key FROM t ORDER BY key LIMIT 1 OFFSET 1").fetchall() == [(b"b",)]
    assert store.sql("SELECT offset FROM t WHERE offset > 0 ORDER BY offset LIMIT 1 OFFSET 1").fetchall() == [(2,)]
    assert quote_bare_offset("SELECT 'offset', \"offset\", offset FROM t LIMIT 2 OFFSET 1") == \
        "SELECT 'offset', \"offset\", \"offset\" FROM t LIMIT 2 OFFSET 1"
    with pytest.raises(QueryError, match='write "offset"'):  # still refused for another reason: the hint stays
        store.sql("SELECT offset FROM t WHERE")


# -- the view DDL as text, and the commands ------------------------------------------------------------------


def test_view_ddl_names_each_engines_tables(store):
    from deltalog.errors import InvalidArgumentError

    store.create_topic("fruit-prices", 2, config={"cleanup.policy": "compact,delete"})
    store.append("fruit-prices", 0, [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2")])
    store.delete_records("fruit-prices", 0, 1)  # the log start, written into the text as a constant
    p0 = store.log("fruit-prices", 0).uri
    spark = store.view_ddl("spark")
    assert f"FROM delta.`{p0}` WHERE `offset` >= 1" in spark and "WHERE `offset` >= 0" in spark
    assert "CREATE OR REPLACE VIEW `fruit_prices` AS" in spark and "CREATE OR REPLACE VIEW `fruit_prices_current`" in spark
    uc = store.view_ddl("databricks", catalog="main", schema="kafka")
    assert f"CREATE TABLE IF NOT EXISTS `main`.`kafka`.`fruit_prices__p0` USING DELTA LOCATION '{p0}';" in uc
    assert "CREATE OR REPLACE VIEW `main`.`kafka`.`fruit_prices_current` AS" in uc
    assert "FROM `main`.`kafka`.`fruit_prices__p1` WHERE" in uc
    duck = store.view_ddl("duckdb")
    assert "INSTALL delta;" in duck and f"FROM delta_scan('{p0}') WHERE \"offset\" >= 1" in duck
    trino = store.view_ddl("trino")
    assert ("CALL \"delta\".system.register_table(schema_name => 'default', table_name => 'fruit_prices__p0', "
            f"table_location => 'file://{p0}');") in trino
    assert 'CREATE OR REPLACE VIEW "delta"."default"."fruit_prices" AS' in trino
    with pytest.raises(InvalidArgumentError, match="schema"):
        store.view_ddl("databricks", catalog="main")


def test_views_and_sql_commands(store, capsys, monkeypatch):
    from conftest import json_lines, run_cli

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    store.create_topic("t", config={"cleanup.policy": "compact", "value.encoding": "string"})
    store.append("t", 0, [Record(key=b"a", value=b"1"), Record(key=b"a", value=b"2"), Record(key=b"b", value="é".encode())])
    code, out, err = run_cli(capsys, "--store", store.root, "views", "t", "--engine", "duckdb", "--output", "json")
    assert code == 0, err
    assert [(o["name"], o["kind"]) for o in json_lines(out)] == [("t", "log"), ("t_current", "current")]
    code, out, err = run_cli(capsys, "--store", store.root, "views", "--engine", "trino")
    assert code == 0 and out.startswith("-- deltalog views for trino") and out.count("CALL ") == 1
    code, out, err = run_cli(capsys, "--store", store.root, "sql", 'SELECT key, value, "offset" FROM t_current '
                             "WHERE key = 'a'", "--output", "json")
    assert code == 0, err
    assert json_lines(out) == [{"key": "a", "value": "2", "offset": 1}]
    code, out, err = run_cli(capsys, "--store", store.root, "sql", "SELECT count(*) AS n FROM t")
    assert (code, out.splitlines()) == (0, ["n", "-", "3", "(1 row)"])
    code, out, err = run_cli(capsys, "--store", store.root, "sql", "SELECT * FROM tt_current")
    assert code == 1 and "the views of this store's topics: t, t_current" in err and "Traceback" not in err


@pytest.mark.subprocess
def test_deltalog_sql_on_the_embedded_engine_never_imports_pyspark(store):
    import os
    import subprocess
    import sys

    store.create_topic("t")
    store.append("t", 0, [Record(key=b"a", value=b"1")])
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    code = ("import sys; from deltalog.cli import console_main; rc = console_main(['--store', sys.argv[1], 'sql', "
            "'SELECT count(*) FROM t_current']); assert 'pyspark' not in sys.modules, 'pyspark imported'; "
            "assert 'pandas' not in sys.modules, 'pandas imported'; sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, store.root], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "(1 row)"


def test_embedded_engine_on_s3_reads_through_the_store(s3_server, s3_store_uri, clock):
    """DuckDB has no S3 filesystem here (httpfs is a download): the snapshot's files come through obstore."""
    store = Store(s3_store_uri, storage_options=s3_server.storage_options, clock=clock)
    store.create_topic("t", 2, config={"cleanup.policy": "compact", "key.encoding": "string"})
    store.append("t", 0, [Record(key=b"a", value=b"1"), Record(key=b"a", value=b"2"), Record(key=b"b", value=None)])
    store.append("t", 1, [Record(key=b"c", value=b"3")])
    rows = store.sql('SELECT partition, "offset", key FROM t_current ORDER BY partition, key').fetchall()
    assert rows == [(0, 1, "a"), (1, 0, "c")]
    assert store.sql("SELECT count(*) FROM t").fetchall() == [(4,)]
