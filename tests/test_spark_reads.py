"""Spark views read with Spark's own Parquet reader where Spark opens the store's files (a local disk), and
through the Python data source where it cannot (the S3 server: no hadoop-aws here); both give the same rows."""

from __future__ import annotations

import random

import pytest

from deltalog import Record, Store
from deltalog.errors import InvalidArgumentError
from deltalog.sql.parquet_reads import READER_CONF

SCHEMA = "name STRING, price DOUBLE"
CONFIG = {"cleanup.policy": "compact", "key.encoding": "string", "value.encoding": "json", "value.schema": SCHEMA,
          "delete.retention.ms": 0}


def plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def fill(store: Store, rng: random.Random, *, clean: bool = True) -> None:
    """Two partitions: plain records with tombstones, a clean (unless told not to), more records, a committed
    and an aborted transaction, and one left open (read_committed stops below it)."""
    store.create_topic("prices", partitions=2, config=CONFIG)

    def batch(n):
        return [Record(f"k{rng.randrange(8)}", None if rng.random() < 0.2 else
                       f'{{"name": "n{rng.randrange(99)}", "price": {rng.random():.3f}}}') for _ in range(n)]

    for p in (0, 1):
        store.append("prices", p, batch(30))
        store.roll("prices", p)
        store.append("prices", p, batch(10))
    if clean:
        store.clean()
    for p in (0, 1):
        store.append("prices", p, batch(10))
    producer = store.producer(transactional_id="app")
    producer.init_transactions()
    for end in ("commit", "abort", None):
        producer.begin_transaction()
        for p in (0, 1):
            producer.send("prices", batch(3), partition=p)
        if end == "commit":
            producer.commit_transaction()
        elif end == "abort":
            producer.abort_transaction()


def rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def both_ways(store: Store, read) -> tuple[list, list, str, str]:
    spark = store.spark
    try:
        spark.conf.set(READER_CONF, "datasource")
        source_df = read()
        source = rows(source_df), plan(source_df)
    finally:
        spark.conf.unset(READER_CONF)
    df = read()
    return rows(df), source[0], plan(df), source[1]


def test_a_local_store_is_read_with_spark_parquet_and_gives_the_data_sources_rows(tmp_path, clock, spark):
    store = Store(tmp_path / "store", clock=clock, spark=spark)
    fill(store, random.Random(3), clean=False)
    for read in (lambda: store.log_frame("prices"), lambda: store.current_state("prices")):
        got, expected, parquet_plan, source_plan = both_ways(store, read)
        assert got == expected and got
        assert "FileScan parquet" in parquet_plan and "FileScan parquet" not in source_plan


@pytest.mark.slow
def test_every_view_on_a_local_store_equals_the_data_source_after_a_clean(tmp_path, clock, spark):
    store = Store(tmp_path / "store", clock=clock, spark=spark)
    fill(store, random.Random(7))
    reads = {
        "log": lambda: store.log_frame("prices"),
        "current": lambda: store.current_state("prices"),
        "uncommitted": lambda: store.current_state("prices", isolation_level="read_uncommitted"),
        "sql": lambda: store.sql("SELECT partition, key, value.price AS price FROM prices_current"),
    }
    for name, read in reads.items():
        got, expected, parquet_plan, source_plan = both_ways(store, read)
        assert got == expected and got, name
        assert "FileScan parquet" in parquet_plan, name
        assert "FileScan parquet" not in source_plan, name
    # The read_committed log holds no marker, no aborted record and nothing of the open transaction.
    log = store.log_frame("prices")
    assert log.count() == sum(1 for p in (0, 1) for r in store.read("prices", p, "earliest",
                                                                     isolation_level="read_committed"))
    assert log.schema["key"].dataType.simpleString() == "string"
    assert log.schema["value"].dataType.simpleString() == "struct<name:string,price:double>"


def test_a_reader_name_that_is_not_one_is_refused(tmp_path, clock, spark):
    store = Store(tmp_path / "store", clock=clock, spark=spark)
    store.create_topic("t", partitions=1)
    store.append("t", 0, [Record("a", "b")])
    spark.conf.set(READER_CONF, "arrow")
    try:
        with pytest.raises(InvalidArgumentError, match="auto, parquet, datasource"):
            store.log_frame("t")
    finally:
        spark.conf.unset(READER_CONF)


def test_views_on_the_s3_server_keep_the_data_source_with_the_same_rows(s3_server, s3_store_uri, tmp_path, clock,
                                                                         spark):
    remote = Store(s3_store_uri, storage_options=s3_server.storage_options, clock=clock, spark=spark)
    local = Store(tmp_path / "store", clock=clock, spark=spark)
    for store in (remote, local):
        fill(store, random.Random(11))
    for read in (lambda s: s.log_frame("prices"), lambda s: s.current_state("prices")):
        on_s3, on_disk = read(remote), read(local)
        assert "FileScan parquet" not in plan(on_s3) and "FileScan parquet" in plan(on_disk)
        # Offsets and contents agree; only timestamps could differ between the two stores (one clock).
        assert rows(on_s3) == rows(on_disk)


def test_reads_spark_cannot_return_exactly_keep_the_data_source():
    from deltalog.sql.parquet_reads import MAX_ABORTED_TERMS, eligible
    from deltalog.sql.source import FileSlice

    def one(table="/tmp/store/topics/t/0", path="f.parquet", aborted=()):
        return [FileSlice(table, path, 0, 10, 0, 9, drop_control=bool(aborted), aborted=aborted)]

    assert eligible(one(), ["partition", "offset", "key"], False)
    assert eligible(one("s3://bucket/store/topics/t/0"), ["offset"], False)  # the probe decides for a URI
    assert not eligible(one(), ["offset", "_row_index"], False)  # the data source's own columns
    assert not eligible(one(), ["offset"], True)  # null offsets kept: the checks' raw reads
    assert not eligible(one("/tmp/a:b/topics/t/0"), ["offset"], False)  # Hadoop's Path: a relative URI
    assert not eligible(one("/tmp/a[1]/topics/t/0"), ["offset"], False)  # Spark would glob it
    many = tuple((7, i * 2, i * 2 + 1) for i in range(MAX_ABORTED_TERMS + 1))
    assert eligible(one(aborted=many[:MAX_ABORTED_TERMS]), ["offset"], False)
    assert not eligible(one(aborted=many), ["offset"], False)
