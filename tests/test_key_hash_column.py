"""The key-hash columns: every file deltalog writes carries each record's offset-map hash, pass 1 maps from them
instead of reading and hashing keys, files without them (an older store, another engine's rewrite) are hashed as
before and gain them when a pass rewrites them, an older table's schema gains them by a commit of deltalog's
own, and no read shows them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import Record, Store
from deltalog.cleaner import offset_map
from deltalog.cleaner.task_plan import FileSlice
from deltalog.log import delta, foreign_commits
from deltalog.log import key_hash as log_key_hash
from deltalog.log.arrow_records import records_to_table
from deltalog.log.key_hash import key_hashes
from deltalog.log.partition_log import PartitionLog
from deltalog.log.record import (
    KEY,
    KEY_HASH_COLUMNS,
    KEY_HASH_HI,
    KEY_HASH_LO,
    PARQUET_WRITE_OPTIONS,
    RECORD_SCHEMA,
    TABLE_SCHEMA,
)
from deltalog.storage import join

TOPIC = "kh"


def files_of(store: Store, topic: str = TOPIC, partition: int = 0) -> list[pa.Table]:
    """Every live data file of the partition, read whole (every column it has)."""
    log = store.log(topic, partition)
    return [store.storage.parquet_file(join(log.uri, f.path)).read() for f in log.snapshot().files]


def assert_hashed(table: pa.Table) -> None:
    """The file has both columns, equal to the key hash of each key, and null exactly where the key is."""
    assert KEY_HASH_HI in table.column_names and KEY_HASH_LO in table.column_names, table.column_names
    keys = table.column(KEY)
    keyed = keys.is_valid().to_numpy(zero_copy_only=False)
    for name in KEY_HASH_COLUMNS:
        assert table.column(name).is_valid().to_numpy(zero_copy_only=False).tolist() == keyed.tolist()
    if keyed.any():
        rows = pa.array(np.flatnonzero(keyed))
        hi, lo = key_hashes(keys.take(rows))
        assert table.column(KEY_HASH_HI).take(rows).to_numpy().view(np.uint64).tolist() == hi.tolist()
        assert table.column(KEY_HASH_LO).take(rows).to_numpy().view(np.uint64).tolist() == lo.tolist()


def test_every_append_path_writes_each_records_key_hash(store):
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    store.append(TOPIC, 0, [Record(key=b"a", value=b"1"), Record(key=b"b" * 70, value=None)])
    store.append(TOPIC, 0, pa.table({"key": ["c", "a"], "value": ["2", "3"]}))
    store.produce(TOPIC, [Record(key=b"", value=b"empty key"), Record(key="é", value=b"4")])
    p = store.producer(transactional_id="kh-tx", transaction_timeout_ms=900_000)
    p.init_transactions()
    p.begin_transaction()
    p.send(TOPIC, [Record(key=b"t1", value=b"5")], partition=0)
    p.commit_transaction()  # the COMMIT marker: keyless, its hash null
    p.begin_transaction()
    p.send(TOPIC, [Record(key=b"t2", value=b"6")], partition=0)
    p.abort_transaction()
    store.create_topic("plain", 1)  # keyless records where the topic allows them
    store.append("plain", 0, [Record(value=b"no key"), Record(key=b"k", value=b"v")])

    tables = files_of(store) + files_of(store, "plain")
    assert len(tables) == 8  # 3 appends, 2 transactional ones, 2 markers; 1 on the plain topic
    for t in tables:
        assert_hashed(t)
    markers = [t for t in tables if "control" in t.column_names and t.column("control").null_count == 0]
    assert len(markers) == 2 and all(t.column(KEY_HASH_HI).null_count == 1 for t in markers)


def _map_of(store: Store, path: str, *, start: int = 0, stop: int = 1 << 62) -> int:
    """Entries of the partial map pass 1's task builds from one file (the task's body, run in this process)."""
    log = store.log(TOPIC, 0)
    task = offset_map._MapTask(store.storage, log.uri, start, stop, False, join(log.uri, "_test-spill"))
    spilled = offset_map._map_run(task, (FileSlice(path, 0, start, stop),))
    return len(offset_map._load(store.storage, spilled)[2])


def _write(store: Store, table: pa.Table, **kw) -> str:
    log = store.log(TOPIC, 0)
    return delta.write_data_file(store.storage, log.uri, table, 0, **kw).path


def test_pass_one_maps_from_the_written_hashes_and_hashes_only_files_without_them(store):
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    rows = records_to_table([Record(key=b"x", value=b"1"), Record(key=b"y", value=b"2"), Record(key=b"x")],
                            range(3), [0, 0, 0], 0)
    assert _map_of(store, _write(store, rows)) == 2
    # The map keys on what the file says, not on the keys: two keys written with one hash are one entry.
    hi, lo = log_key_hash.hash_columns(pa.array([b"x"] * 3))
    forged = rows.append_column(TABLE_SCHEMA.field(KEY_HASH_HI), hi).append_column(TABLE_SCHEMA.field(KEY_HASH_LO), lo)
    assert _map_of(store, _write(store, forged)) == 1
    # An older store's file (no columns) has its keys read and hashed.
    old = _write(store, rows, key_hash=False)
    assert KEY_HASH_HI not in store.storage.parquet_file(join(store.log(TOPIC, 0).uri, old)).schema_arrow.names
    assert _map_of(store, old) == 2
    # A file with the columns where a keyed row has none (another engine merged older files into it): hashed too.
    partial_hi = pa.array([hi[0].as_py(), None, None], pa.int64())
    merged = rows.append_column(TABLE_SCHEMA.field(KEY_HASH_HI), partial_hi).append_column(
        TABLE_SCHEMA.field(KEY_HASH_LO), partial_hi)
    path = join(store.log(TOPIC, 0).uri, "merged.parquet")  # as the other engine wrote it
    store.storage.write_parquet(path, merged, **PARQUET_WRITE_OPTIONS)
    with store.storage.open_input(path) as f:
        assert not log_key_hash.footer_has_key_hash(pq.ParquetFile(f).metadata)
    assert _map_of(store, "merged.parquet") == 2
    # The range and the keyless rows are still honoured on the hash path.
    assert _map_of(store, _write(store, rows), start=1, stop=2) == 1


def test_hashes_of_takes_what_is_written_and_computes_the_rest():
    keys = pa.chunked_array([pa.array([b"a", None, b"c", b"d"])])
    want_hi, want_lo = key_hashes(keys)
    hi, lo = log_key_hash.hash_columns(keys)
    assert hi.null_count == 1
    hi = pa.chunked_array([pa.array([hi[0].as_py(), None, None, hi[3].as_py()], pa.int64())])
    lo = pa.chunked_array([pa.array([lo[0].as_py(), None, None, lo[3].as_py()], pa.int64())])
    got_hi, got_lo = log_key_hash.hashes_of(keys, hi, lo)
    keyed = [0, 2, 3]
    assert got_hi[keyed].tolist() == want_hi[keyed].tolist() and got_lo[keyed].tolist() == want_lo[keyed].tolist()
    table = log_key_hash.with_key_hash(pa.table({KEY: keys, KEY_HASH_HI: hi, KEY_HASH_LO: lo}))
    assert_hashed(table)


def test_an_older_tables_schema_gains_the_columns_by_deltalogs_own_commit(store, monkeypatch):
    with monkeypatch.context() as m:  # a table created and appended to before the columns existed
        m.setattr(delta, "TABLE_SCHEMA", RECORD_SCHEMA)
        m.setattr(delta, "with_key_hash", lambda t: t)
        m.setattr(PartitionLog, "_ensure_key_hash_columns", lambda self: None)
        store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
        store.append(TOPIC, 0, [Record(key=b"a", value=b"1")])
    dt = store.log(TOPIC, 0).table()
    assert not delta.has_key_hash_columns(dt)
    before = dt.version()

    later = Store(store.root, clock=store.clock)  # another process, after an upgrade of deltalog
    later.append(TOPIC, 0, [Record(key=b"b", value=b"2")])
    later.append(TOPIC, 0, [Record(key=b"a", value=b"3")])
    dt = later.log(TOPIC, 0).table()
    assert delta.has_key_hash_columns(dt)
    assert dt.version() == before + 3  # one schema commit, then the two appends
    upgrade = next(e for e in later.history(TOPIC, 0) if e.version == before + 1)
    assert (upgrade.kind, upgrade.by_deltalog) == ("add_key_hash_columns", True)
    assert foreign_commits.ForeignCommitWatch().check(dt) == ()
    assert [(r.key, r.value) for r in later.read(TOPIC, 0)] == [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]


def test_no_read_returns_the_columns(store):
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    store.append(TOPIC, 0, [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2")])
    assert all(KEY_HASH_HI in t.column_names for t in files_of(store))
    log = store.log(TOPIC, 0)
    assert log.read_table(0).column_names == RECORD_SCHEMA.names
    assert log.read_rows(0, None, "read_uncommitted")[2].column_names == RECORD_SCHEMA.names
    assert not hasattr(store.read(TOPIC, 0)[0], KEY_HASH_HI)
    for engine in ("spark", "databricks", "duckdb", "trino"):
        assert "_deltalog_" not in store.view_ddl(engine)
    assert "_deltalog_" not in repr(store.describe(TOPIC))
    pytest.importorskip("duckdb")
    for view in (TOPIC, f"{TOPIC}_current"):
        names = [c.lower() for c in store.sql(f"SELECT * FROM {view}", engine="embedded").arrow().schema.names]
        assert not [c for c in names if "key_hash" in c], names


def _expected_state(appended: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes | None] = {}
    for k, v in appended:
        state[k] = v
    return {k: v for k, v in state.items() if v is not None}


def _state(store: Store) -> dict[bytes, bytes]:
    return {r.key: r.value for r in store.read(TOPIC, 0) if r.value is not None}


def test_older_and_mixed_files_clean_right_and_gain_the_columns(spark_store, monkeypatch):
    """Files without the columns (an older store) and files with the columns but a hash missing beside a key
    (another engine's merge of older files), mixed with current ones in one pass, clean to the same log as
    the model, and every file a pass writes carries every hash."""
    store = spark_store
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact", "delete.retention.ms": 0,
                                         "min.cleanable.dirty.ratio": 0.01})
    rng = np.random.default_rng(3)
    appended: list[tuple[bytes, bytes | None]] = []

    def batch(n: int) -> None:
        records = []
        for _ in range(n):
            k = b"k%03d" % rng.integers(0, 40)
            v = None if rng.random() < 0.1 else b"v%d" % len(appended)
            appended.append((k, v))
            records.append(Record(key=k, value=v))
        store.append(TOPIC, 0, records)
        store.roll(TOPIC, 0)

    def older(t: pa.Table) -> pa.Table:  # an older store's appends: no columns
        return t

    def merged(t: pa.Table) -> pa.Table:  # another engine's merge of older files: the columns, no hash in them
        n = t.num_rows
        return t.append_column(TABLE_SCHEMA.field(KEY_HASH_HI), pa.nulls(n, pa.int64())).append_column(
            TABLE_SCHEMA.field(KEY_HASH_LO), pa.nulls(n, pa.int64()))

    def written(layout, n: int) -> None:
        with monkeypatch.context() as m:
            m.setattr(delta, "with_key_hash", layout)
            batch(n)

    written(older, 60)
    written(older, 60)
    written(merged, 40)
    store.clean(TOPIC)  # every file hashed from its keys
    assert _state(store) == _expected_state(appended)
    for t in files_of(store):
        assert_hashed(t)
    batch(50)  # today's appends, mixed with older ones in the next pass
    written(older, 50)
    written(merged, 30)
    batch(50)
    store.clean(TOPIC)
    assert _state(store) == _expected_state(appended)
    for t in files_of(store):
        assert_hashed(t)


def test_spark_reads_never_show_the_columns(spark_store):
    import deltalog.sql.kafka

    store = spark_store
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    store.append(TOPIC, 0, [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2")])
    for df in (store.log_frame(TOPIC), store.current_state(TOPIC)):
        assert not [c for c in df.columns if "key_hash" in c], df.columns
        assert df.count() == 2
    deltalog.sql.kafka.register(store.spark)
    df = store.spark.read.format("deltalog").option("store", store.root).option("subscribe", TOPIC).load()
    assert not [c for c in df.columns if "key_hash" in c], df.columns
    assert df.count() == 2


def test_another_engines_optimize_keeps_the_hashes_and_relayout_carries_them(store, clock):
    """delta-rs's OPTIMIZE rewrites files in the table's schema, which declares the columns: the merged file keeps
    every hash, and deltalog's relayout back into one file per segment writes each record's hash again (another
    engine's copy is not trusted: tests/test_foreign_key_hashes.py)."""
    from deltalake import DeltaTable

    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    for i in range(3):
        store.append(TOPIC, 0, [Record(key=b"k%d" % (i * 10 + j), value=b"v") for j in range(5)])
        store.roll(TOPIC, 0)
    log = store.log(TOPIC, 0)
    DeltaTable(log.uri, storage_options=store.storage.delta_options).optimize.compact()
    merged = log.snapshot().files
    assert len(merged) == 1
    with store.storage.open_input(join(log.uri, merged[0].path)) as f:
        assert log_key_hash.footer_has_key_hash(pq.ParquetFile(f).metadata)
    assert _map_of(store, merged[0].path) == 15  # mapped from its keys: the file is not deltalog's
    assert log.relayout(clock.now_ms()) == 1
    tables = files_of(store)
    assert len(tables) == 3
    for t in tables:
        assert_hashed(t)
