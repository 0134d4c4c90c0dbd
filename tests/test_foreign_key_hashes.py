"""Key hashes in files deltalog did not write: another engine's OPTIMIZE copies the key-hash columns into its merged
files, and an engine that mangles them must not make a clean keep a superseded record or drop a key's latest one.
deltalog trusts the columns only in files it wrote (named by ``new_file_name``); another engine's file has its keys
hashed again, by the relayout that rewrites it, and by pass 1 and pass 2 should one reach them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.cleaner import offset_map
from deltalog.cleaner.task_plan import FileSlice
from deltalog.log import delta
from deltalog.log import key_hash as log_key_hash
from deltalog.log.arrow_records import records_to_table
from deltalog.log.record import KEY, KEY_HASH_HI, KEY_HASH_LO, PARQUET_WRITE_OPTIONS, TABLE_SCHEMA, written_by_deltalog
from deltalog.storage import join
from tests.test_key_hash_column import assert_hashed, files_of

TOPIC = "kh"


def _optimize_that_mangles_hashes(store: Store) -> str:
    """A real delta-rs OPTIMIZE of the partition, then its merged file rewritten as an engine that mangles the
    key-hash columns would have written it: the row of ``a``'s latest value carries ``b``'s hash. The commit's add
    action gets the new size (the stats are unchanged: the rows are). Returns the file's path in the table."""
    log = store.log(TOPIC, 0)
    DeltaTable(log.uri, storage_options=store.storage.delta_options).optimize.compact()
    (merged,) = [f for f in log.snapshot().files if not written_by_deltalog(f.path)]
    path = join(log.uri, merged.path)
    table = store.storage.parquet_file(path).read()
    keys = table.column(KEY).to_pylist()
    values = table.column("value").to_pylist()
    hi, lo = table.column(KEY_HASH_HI).to_pylist(), table.column(KEY_HASH_LO).to_pylist()
    latest_a, b = keys.index(b"a", values.index(b"a2") if b"a2" in values else 0), keys.index(b"b")
    assert values[latest_a] == b"a2"
    hi[latest_a], lo[latest_a] = hi[b], lo[b]
    table = table.set_column(table.schema.get_field_index(KEY_HASH_HI), KEY_HASH_HI, pa.array(hi, pa.int64()))
    table = table.set_column(table.schema.get_field_index(KEY_HASH_LO), KEY_HASH_LO, pa.array(lo, pa.int64()))
    size = store.storage.write_parquet(path, table, **PARQUET_WRITE_OPTIONS)
    commit = Path(log.uri.removeprefix("file://")) / "_delta_log" / f"{log.table().version():020d}.json"
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action and action["add"]["path"] == merged.path:
            action["add"]["size"] = size
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")
    return merged.path


def _fill(store: Store) -> None:
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    store.append(TOPIC, 0, [Record(b"a", b"a1"), Record(b"b", b"b1")])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(b"a", b"a2"), Record(b"c", b"c1")])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(b"z", b"active")])


def test_relayout_hashes_the_keys_of_another_engines_file_again(store, clock):
    _fill(store)
    _optimize_that_mangles_hashes(store)
    assert store.log(TOPIC, 0).relayout(clock.now_ms()) == 1
    for table in files_of(store):
        assert_hashed(table)  # every hash is its key's, the mangled one included


def test_pass_one_hashes_the_keys_of_a_file_deltalog_did_not_write(store):
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact"})
    rows = records_to_table([Record(key=b"x", value=b"1"), Record(key=b"y", value=b"2")], range(2), [0, 0], 0)
    hi, lo = log_key_hash.hash_columns(pa.array([b"x"] * 2))  # both rows carry x's hash
    forged = rows.append_column(TABLE_SCHEMA.field(KEY_HASH_HI), hi).append_column(TABLE_SCHEMA.field(KEY_HASH_LO), lo)
    log = store.log(TOPIC, 0)
    ours = delta.write_data_file(store.storage, log.uri, forged, 0).path
    theirs = "part-00001-0f1e2d3c-c000.zstd.parquet"  # another engine's name
    store.storage.write_parquet(join(log.uri, theirs), forged, **PARQUET_WRITE_OPTIONS)
    assert written_by_deltalog(ours) and not written_by_deltalog(theirs)

    def mapped(path: str) -> int:
        task = offset_map._MapTask(store.storage, log.uri, 0, 1 << 62, False, join(log.uri, "_test-spill"))
        return len(offset_map._load(store.storage, offset_map._map_run(task, (FileSlice(path, 0, 0, 1 << 62),)))[2])

    assert mapped(ours) == 1  # deltalog's own file: the columns are trusted (that is what makes pass 1 cheap)
    assert mapped(theirs) == 2  # another engine's: the keys are hashed


@pytest.mark.parametrize("path,ours", [
    ("00000000000000000000-00000000000000000007-0123456789ab.parquet", True),
    ("cleaned-00000000000000000003-abcd/00000000000000000000-00000000000000000000-a1b2c3d4e5f6.parquet", True),
    ("file:///s/topics/t/0/00000000000000000000-00000000000000000007-0123456789ab.parquet", True),
    ("part-00000-5b0a5f0e-0d2c-4c8e-9f0e-3c1d2a4b5c6d-c000.zstd.parquet", False),
    ("00000000000000000000-00000000000000000007-0123456789ab.parquet.tmp", False),
])
def test_which_files_deltalog_wrote_is_told_by_name(path, ours):
    assert written_by_deltalog(path) is ours


def test_a_clean_after_a_mangling_optimize_keeps_every_keys_latest_value(spark_store):
    store = spark_store
    _fill(store)
    _optimize_that_mangles_hashes(store)
    assert store.clean_partition(TOPIC, 0, force=True) is not None
    state = {r.key: r.value for r in store.read(TOPIC, 0, "earliest")}
    assert state == {b"a": b"a2", b"b": b"b1", b"c": b"c1", b"z": b"active"}
    assert [r.value for r in store.read(TOPIC, 0, "earliest") if r.key == b"a"] == [b"a2"]
    for table in files_of(store):
        assert_hashed(table)
    assert np.all(np.diff([r.offset for r in store.read(TOPIC, 0, "earliest")]) > 0)
