"""deltalog's Python data source (deltalog/sql/source.py): the rows of file slices, on a classic session and on
Spark Connect, from a local store and from S3, compared with what pyarrow reads from the same files."""

from __future__ import annotations

import os

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import Record, Store
from deltalog.log import delta
from deltalog.log.arrow_records import records_to_table
from deltalog.log.record import BASE_SCHEMA, PARQUET_WRITE_OPTIONS
from deltalog.sql.reads import read_slices, storage_of
from deltalog.sql.source import (
    FILE_OPEN_COST,
    MAX_TASK_BYTES,
    SOURCE_NAME,
    FileSlice,
    file_slices,
    plan_tasks,
    read_slice,
    register,
)
from deltalog.storage import Storage

NOW = 1_700_000_000_000


@pytest.fixture(params=["classic", "connect"])
def any_spark(request):
    """The classic test session, then a Spark Connect session (a server JVM of its own)."""
    return request.getfixturevalue("spark" if request.param == "classic" else "connect_spark")


def _file(tmp_path, offsets, *, row_group_size=None, name="f.parquet", null_offsets=False):
    records = [Record(key=f"k{o % 3}".encode(), value=None if o % 5 == 0 else f"v{o}".encode()) for o in offsets]
    table = records_to_table(records, offsets, [NOW] * len(offsets), 0)
    if null_offsets:
        table = table.cast(pa.schema([f.with_nullable(True) for f in table.schema])).set_column(
            0, "offset", pa.array([None if i == 1 else o for i, o in enumerate(offsets)], pa.int64()))
    pq.write_table(table, tmp_path / name, row_group_size=row_group_size, **PARQUET_WRITE_OPTIONS)
    return FileSlice(str(tmp_path), name, 7, os.path.getsize(tmp_path / name), min(offsets), max(offsets))


def _rows(batches):
    return pa.Table.from_batches(list(batches)).to_pylist()


# --- reading a slice, without Spark ---------------------------------------------------------------------


def test_a_slice_yields_its_offset_range_with_file_and_row_index(tmp_path):
    s = _file(tmp_path, list(range(10, 30)), row_group_size=4).narrowed(13, 22)
    rows = _rows(read_slice(Storage(tmp_path), s, ["partition", "offset", "key", "_file", "_row_index"]))
    assert [r["offset"] for r in rows] == list(range(13, 22))
    assert [r["_row_index"] for r in rows] == list(range(3, 12))  # positions in the whole file
    assert {(r["partition"], r["_file"]) for r in rows} == {(7, "f.parquet")}
    assert rows[0]["key"] == b"k1"


def test_row_groups_outside_the_range_are_not_read(tmp_path):
    s = _file(tmp_path, list(range(0, 40)), row_group_size=10).narrowed(25, 31)
    with open(tmp_path / "f.parquet", "r+b") as f:  # damage row groups 0 and 1: reading them would fail
        meta = pq.ParquetFile(tmp_path / "f.parquet").metadata
        start = meta.row_group(0).column(0).data_page_offset
        end = meta.row_group(2).column(0).data_page_offset
        f.seek(start)
        f.write(b"\0" * (end - start))
    rows = _rows(read_slice(Storage(tmp_path), s, ["offset", "_row_index"]))
    assert [(r["offset"], r["_row_index"]) for r in rows] == [(o, o) for o in range(25, 31)]


def test_null_offsets_are_dropped_unless_kept(tmp_path):
    s = _file(tmp_path, [5, 6, 7], null_offsets=True)
    storage = Storage(tmp_path)
    assert [r["offset"] for r in _rows(read_slice(storage, s, ["offset"]))] == [5, 7]
    kept = _rows(read_slice(storage, s.narrowed(6, None), ["offset", "_row_index"], keep_null_offsets=True))
    assert [(r["offset"], r["_row_index"]) for r in kept] == [(None, 1), (7, 2)]


def test_a_column_the_file_lacks_is_null(tmp_path):
    table = records_to_table([Record(key=b"a", value=b"1")], [0], [NOW], 0).drop_columns(["delete_horizon_ms"])
    pq.write_table(table, tmp_path / "old.parquet")
    s = FileSlice(str(tmp_path), "old.parquet", 0, 1, 0, 0)
    assert _rows(read_slice(Storage(tmp_path), s, ["offset", "delete_horizon_ms"])) == [
        {"offset": 0, "delete_horizon_ms": None}]


def test_tasks_pack_small_files_and_split_big_reads():
    def slices(sizes):
        return [FileSlice("/t", f"{i}", 0, size, i, i) for i, size in enumerate(sizes)]

    small = plan_tasks(slices([1000] * 40), parallelism=2)
    assert 2 <= len(small) <= 3 and [s.path for t in small for s in t] == [str(i) for i in range(40)]
    big = plan_tasks(slices([50 * 1024 * 1024] * 10), parallelism=2)
    assert all(sum(s.size_bytes + FILE_OPEN_COST for s in t) <= MAX_TASK_BYTES for t in big) and len(big) == 5
    assert plan_tasks([], 4) == []
    # the small preset's partition (one clean file, eight closed segments, 5-11 MB each) on 2 cores: two runs
    # balanced by bytes, not two full shares and a small third task the read would wait for
    sizes = [11 << 20, 5 << 20, *[11 << 20] * 7, 5 << 20]
    runs = plan_tasks(slices(sizes), parallelism=2)
    assert [len(t) for t in runs] == [5, 5] and [s.path for t in runs for s in t] == [str(i) for i in range(10)]


# --- through Spark: both kinds of session ---------------------------------------------------------------


def _two_partitions(store: Store) -> None:
    store.create_topic("t", partitions=2, config={"cleanup.policy": "compact"})
    for p in (0, 1):
        for i in range(6):
            store.append("t", p, [Record(key=f"k{i % 2}".encode(), value=f"p{p}-{i}".encode(),
                                         headers=[("h", b"x")] if i == 2 else [])])


def test_read_slices_returns_the_rows_pyarrow_reads(store, any_spark):
    _two_partitions(store)
    logs = store.log_manager
    slices = []
    for p in (0, 1):
        log = logs.log("t", p)
        slices += file_slices(log.uri, p, log.snapshot().files, from_offset=2, to_offset=5)
    cols = ["partition", "offset", "key", "value", "headers", "_file", "_row_index"]
    df = read_slices(any_spark, storage_of(logs), slices, cols)
    assert df.columns == cols
    got = sorted(tuple(r) for r in df.select("partition", "offset", "key", "value").collect())
    expected = sorted((p, r.offset, r.key, r.value) for p in (0, 1) for r in store.read("t", p, 2)[:3])
    assert [(p, o, bytes(k), bytes(v)) for p, o, k, v in got] == expected
    headers = {r.offset: r.headers for r in df.where("partition = 0").collect()}
    assert [(h.key, bytes(h.value)) for h in headers[2]] == [("h", b"x")] and headers[3] == []
    assert all(r._row_index == 0 for r in df.collect())  # one record a file: each row is its file's first


def test_read_slices_of_nothing_is_an_empty_frame(any_spark, tmp_path):
    df = read_slices(any_spark, Storage(tmp_path), [], ["partition", "offset", "key"])
    assert df.columns == ["partition", "offset", "key"] and df.count() == 0


def test_a_frame_queried_with_different_filters_returns_the_right_rows_each_time(store, any_spark):
    """With Python filter pushdown on, pyspark 4.3 hands a pruned read to the frame's next queries; the source
    does not prune by Spark's filters, so every query sees every row (a view is queried many times)."""
    _two_partitions(store)
    logs = store.log_manager
    slices = [s for p in (0, 1) for s in file_slices(logs.log("t", p).uri, p, logs.log("t", p).snapshot().files)]
    key = "spark.sql.python.filterPushdown.enabled"
    before = any_spark.conf.get(key, "false")
    any_spark.conf.set(key, "true")
    try:
        df = read_slices(any_spark, storage_of(logs), slices, ["partition", "offset"])
        assert sorted(tuple(r) for r in df.where("offset >= 4 AND partition = 0").collect()) == [(0, 4), (0, 5)]
        assert df.count() == 12
        assert sorted(tuple(r) for r in df.where("offset IN (0, 2)").collect()) == [(0, 0), (0, 2), (1, 0), (1, 2)]
    finally:
        any_spark.conf.set(key, before)


def test_the_source_lists_a_tables_files_at_a_version(tmp_path, clock, spark, any_spark):
    """Given a table path (and a version), the source lists the files with delta-rs: time travel to before
    a clean reads the records the clean removed."""
    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(key=b"a", value=b"1"), Record(key=b"a", value=b"2"), Record(key=b"b", value=b"3")])
    store.roll("t", 0)
    log = store.log("t", 0)
    before = log.snapshot().version
    assert store.clean_partition("t", 0) is not None
    register(any_spark)

    def offsets(**options):
        df = any_spark.read.format(SOURCE_NAME).option("path", log.uri).options(**options).load()
        return sorted(r.offset for r in df.collect())

    assert offsets() == [1, 2]
    assert offsets(version=str(before)) == [0, 1, 2]
    assert offsets(version=str(before), from_offset="1", columns="offset,key") == [1, 2]


def test_read_slices_from_an_s3_store(any_spark, s3_store_uri, s3_server, capsys):
    """The tasks open the files through Storage with the read's storage options: no Hadoop connector. The
    secret does not show in the query plan (moto takes any secret)."""
    table_uri = f"{s3_store_uri}/topics/t/0"
    rows = records_to_table([Record(key=b"a", value=b"1"), Record(key=b"b", value=None)], [0, 1], [NOW] * 2, 0)
    options = {**s3_server.storage_options, "aws_secret_access_key": "s3cr3t-of-this-test"}
    deltalake.write_deltalake(table_uri, rows.cast(BASE_SCHEMA), storage_options=options)
    files = delta.data_files(deltalake.DeltaTable(table_uri, storage_options=options))
    df = read_slices(any_spark, Storage(s3_store_uri, options), file_slices(table_uri, 0, files),
                     ["offset", "key", "value"])
    assert sorted((r.offset, bytes(r.key), r.value) for r in df.collect()) == [(0, b"a", b"1"), (1, b"b", None)]
    capsys.readouterr()
    df.explain("extended")
    plan = capsys.readouterr().out
    assert "deltalog_files" in plan and "s3cr3t-of-this-test" not in plan, plan
