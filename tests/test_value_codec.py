"""Data files give their key and value chunks a codec from a sample of the bytes (``record.parquet_write_options``):
values that snappy cannot shrink (random or already-compressed bytes) are written uncompressed, text keeps snappy,
and every other column is snappy. Parquet gives each column chunk its own codec; these check that appends and the
cleaner write them so, and that every engine that reads a partition's files reads them: pyarrow (deltalog's
reads), DuckDB (``deltalog sql`` without Spark), delta-rs's own Rust reader, and Spark's Parquet reader."""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder

from deltalog import Record
from deltalog.log.record import KEY_HASH_HI, KEY_HASH_LO, RECORD_SCHEMA, parquet_write_options

TOPIC = "codecs"


def random_bytes(n: int, size: int, seed: int = 1) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(size) for _ in range(n)]


def text(n: int) -> list[bytes]:
    return [b'{"customer": %d, "status": "active", "tier": "premium", "city": "Lisbon"}' % i for i in range(n)]


def codecs(file: str) -> dict[str, str]:
    meta = pq.read_metadata(file)
    return {meta.schema.column(j).path: meta.row_group(0).column(j).compression for j in range(meta.num_columns)}


def data_files(store, partition: int = 0) -> list[str]:
    log = store.log(TOPIC, partition)
    return [os.path.join(log.uri, f.path) for f in log.snapshot().files]


def fill(store, values: list[bytes | None], partition: int = 0) -> None:
    store.append(TOPIC, partition, [Record(key=b"k%d" % (i % 50), value=v) for i, v in enumerate(values)])


def test_incompressible_values_are_written_uncompressed_and_text_with_snappy(store):
    store.create_topic(TOPIC, 2, config={"cleanup.policy": "compact"})
    fill(store, random_bytes(400, 100), 0)
    fill(store, text(400), 1)
    (random_file,), (text_file,) = data_files(store, 0), data_files(store, 1)
    got, text_got = codecs(random_file), codecs(text_file)
    for hashes in (got, text_got):  # the key hashes: random 64-bit values, never compressed
        assert (hashes.pop(KEY_HASH_HI), hashes.pop(KEY_HASH_LO)) == ("UNCOMPRESSED", "UNCOMPRESSED")
    assert got.pop("value") == "UNCOMPRESSED"
    assert set(got.values()) == {"SNAPPY"}, got  # keys, headers' leaves and every other column
    assert set(text_got.values()) == {"SNAPPY"}
    assert store.read(TOPIC, 0, 0, max_records=1000)[-1].value == random_bytes(400, 100)[-1]


def test_columns_with_too_little_to_sample_keep_snappy():
    empty = RECORD_SCHEMA.empty_table()
    assert set(parquet_write_options(empty)["compression"].values()) == {"snappy"}
    tombstones = pa.table({"key": pa.array([b"a"] * 10), "value": pa.nulls(10, pa.binary())})
    assert parquet_write_options(tombstones)["compression"]["value"] == "snappy"
    tiny = pa.table({"key": pa.array([b"a"]), "value": pa.array(random_bytes(1, 100))})
    assert parquet_write_options(tiny)["compression"]["value"] == "snappy"
    sliced = pa.table({"value": pa.array(text(300) + random_bytes(3000, 100))}).slice(300)
    assert parquet_write_options(sliced)["compression"]["value"] == "none"  # the sample is of the slice's bytes


def test_duckdb_and_delta_rs_read_uncompressed_value_chunks(store):
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    values = random_bytes(300, 64)
    fill(store, values)
    (file,) = data_files(store)
    assert codecs(file)["value"] == "UNCOMPRESSED"
    got = duckdb.sql(f"SELECT value FROM read_parquet('{file}') ORDER BY \"offset\"").fetchall()
    assert [r[0] for r in got] == values
    dt = DeltaTable(store.log(TOPIC, 0).uri)
    reader = QueryBuilder().register("p", dt).execute('SELECT value FROM p ORDER BY "offset"')
    assert pa.table(reader.read_all()).column("value").to_pylist() == values


@pytest.mark.slow  # a Spark clean: the whole suite runs it, the default run stays short
@pytest.mark.spark
def test_spark_reads_uncompressed_value_chunks_after_a_clean(spark_store, spark):
    """Appended files and the cleaner's rewrite of them (written in Spark tasks) both read back through Spark."""
    store = spark_store
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    values = random_bytes(200, 64)
    fill(store, values[:100])
    store.roll(TOPIC, 0)
    fill(store, values[100:])
    store.roll(TOPIC, 0)
    assert store.clean_partition(TOPIC, 0, force=True) is not None
    files = data_files(store)
    assert {codecs(f)["value"] for f in files} == {"UNCOMPRESSED"}
    rows = spark.read.parquet(*files).select("offset", "value").orderBy("offset").collect()
    assert [bytes(r["value"]) for r in rows] == values[150:]  # the latest of each of the 50 keys
