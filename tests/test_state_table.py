"""The state table (deltalog.state, docs/state-table.md): config, rows, incremental refresh, equality with the
log, time travel. Real delta-rs tables; no Spark (the clean test is in test_state_table_spark.py)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.config import StoreConfig, TopicConfig
from deltalog.errors import CheckFailedError, InvalidConfigError, UnknownTopicOrPartitionError
from deltalog.state import table as state_table

COMPACT = {"cleanup.policy": "compact", "state.table.enable": "true"}


def rows_by_key(store: Store, topic: str, **kw) -> dict:
    t = store.state(topic, **kw)
    return {r["key"]: r for r in t.to_pylist()}


# -- 1. config -------------------------------------------------------------------------------------------------


def test_topic_key_overrides_the_store_default(tmp_path):
    assert TopicConfig().state_table_enable is None
    assert TopicConfig.from_properties({"state.table.enable": "true"}).state_table(StoreConfig()) is True
    assert TopicConfig.from_properties({"state.table.enable": "false"}).state_table(
        StoreConfig.from_properties({"log.state.table.enable": "true"})) is False
    assert TopicConfig().state_table(StoreConfig.from_properties({"log.state.table.enable": "true"})) is True
    assert TopicConfig().state_table(StoreConfig()) is False
    with pytest.raises(InvalidConfigError, match="state.table.enable.*true or false"):
        TopicConfig.from_properties({"state.table.enable": "yes"})
    with pytest.raises(InvalidConfigError, match="log.state.table.enable"):
        StoreConfig.from_properties({"log.state.table.enable": "1"})
    # the topic's choice survives the partition tables' properties, unset stays unset
    s = Store(tmp_path / "s", config={"log.state.table.enable": "true"})
    s.create_topic("on", 1, config={"state.table.enable": "true"})
    s.create_topic("off", 1, config={"state.table.enable": "false"})
    s.create_topic("default", 1)
    assert [s.state_table_enabled(t) for t in ("on", "off", "default")] == [True, False, True]
    assert s.state_table_topics() == ["default", "on"]
    assert Store(tmp_path / "s").state_table_topics() == ["on"]  # without the store default
    s.alter_topic_config("off", {"state.table.enable": "true"})
    assert s.state_table_enabled("off")


def test_refresh_of_a_topic_without_the_state_table_names_the_config(store):
    store.create_topic("t", 1)
    with pytest.raises(InvalidConfigError, match="state.table.enable=true"):
        store.refresh_state("t")
    with pytest.raises(UnknownTopicOrPartitionError, match="no state table"):
        store.state("t")


# -- 2. the table ----------------------------------------------------------------------------------------------


def test_one_row_per_live_key_latest_wins_tombstones_remove(store):
    store.create_topic("t", 2, config={"state.table.enable": "true"})  # cleanup.policy=delete takes keyless records
    store.append("t", 0, [Record("a", "1", headers=[("h", b"x")]), Record("b", "2"), Record("a", "3"),
                          Record(None, "keyless")])
    store.append("t", 1, [Record("a", "p1")])  # the same key in another partition is another row
    result = store.refresh_state("t")
    assert result.committed and result.offsets == {0: 4, 1: 1} and result.records_read == 5
    rows = sorted((r["partition"], r["key"], r["value"], r["offset"]) for r in store.state("t").to_pylist())
    assert rows == [(0, b"a", b"3", 2), (0, b"b", b"2", 1), (1, b"a", b"p1", 0)]
    store.append("t", 0, [Record("b", None), Record("c", "4"), Record("never", None)])  # a tombstone of no row
    store.refresh_state("t")
    rows = sorted((r["partition"], r["key"], r["value"]) for r in store.state("t").to_pylist())
    assert rows == [(0, b"a", b"3"), (0, b"c", b"4"), (1, b"a", b"p1")]
    # a key deleted and written again comes back
    store.append("t", 0, [Record("b", "again")])
    store.refresh_state("t")
    assert {r["key"]: r["value"] for r in store.state("t").to_pylist() if r["partition"] == 0}[b"b"] == b"again"


def test_typed_columns_for_json_values_and_string_keys(store):
    store.create_topic("prices", 1, config={**COMPACT, "key.encoding": "string", "value.encoding": "json",
                                            "value.schema": "price DOUBLE, currency STRING, tags ARRAY<STRING>"})
    store.append("prices", 0, [Record("x", json.dumps({"price": 1.5, "currency": "EUR", "tags": ["a"]})),
                               Record("y", '{\n "price": 2,\n "currency": "USD"\n}')])
    store.refresh_state("prices")
    table = store.state("prices")
    assert table.schema.field("key").type == pa.string()
    assert table.schema.field("value").type == pa.struct([("price", pa.float64()), ("currency", pa.string()),
                                                          ("tags", pa.list_(pa.string()))])
    rows = rows_by_key(store, "prices")
    assert rows["x"]["value"] == {"price": 1.5, "currency": "EUR", "tags": ["a"]}
    assert rows["y"]["value"] == {"price": 2.0, "currency": "USD", "tags": None}


def test_json_keys_are_told_apart_by_their_bytes(store):
    store.create_topic("j", 1, config={**COMPACT, "key.encoding": "json", "key.schema": "id INT"})
    store.append("j", 0, [Record('{"id":1}', "a"), Record('{ "id": 1 }', "b"), Record('{"id":1}', "c")])
    store.refresh_state("j")
    rows = sorted((r["key_bytes"], r["value"]) for r in store.state("j").to_pylist())
    assert rows == [(b'{ "id": 1 }', b"b"), (b'{"id":1}', b"c")]  # two keys to Kafka: two rows
    assert all(r["key"] == {"id": 1} for r in store.state("j").to_pylist())
    assert store.compare_state("j").equal


def test_plain_parquet_with_the_change_data_feed(store):
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("a", "1"), Record("b", "2")])
    store.refresh_state("t")
    store.append("t", 0, [Record("a", "3"), Record("b", None)])
    store.refresh_state("t")
    dt = DeltaTable(store.state_table_location("t"))
    protocol = dt.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 4)
    assert not protocol.reader_features and not protocol.writer_features  # no deletion vectors, no column mapping
    assert dt.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    changes = pa.table(dt.load_cdf(starting_version=0).read_all())
    seen = sorted((c["_commit_version"], c["_change_type"], c["key"], c["value"]) for c in changes.to_pylist())
    assert seen == [(1, "insert", b"a", b"1"), (1, "insert", b"b", b"2"),
                    (2, "delete", b"b", b"2"), (2, "update_postimage", b"a", b"3"),
                    (2, "update_preimage", b"a", b"1")]
    assert os.listdir(os.path.join(store.state_table_location("t"), "_change_data"))
    # the merge's files: Snappy, and no dictionary for the columns that never repeat within a partition
    import pyarrow.parquet as pq

    for uri in dt.file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata.row_group(0)
        columns = {meta.column(c).path_in_schema: meta.column(c) for c in range(meta.num_columns)}
        assert {c.compression for c in columns.values()} == {"SNAPPY"}
        assert "RLE_DICTIONARY" not in columns["offset"].encodings + columns["key"].encodings


def test_read_committed_open_transactions_wait_aborted_never_show(store):
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("a", "1")])
    tx = store.producer(transactional_id="tx")
    tx.init_transactions()
    tx.begin_transaction()
    tx.send("t", [Record("a", "in-tx"), Record("b", "in-tx")], partition=0)
    store.append("t", 0, [Record("c", "after")])  # past the last stable offset: waits with the transaction
    result = store.refresh_state("t")
    assert result.offsets == {0: 1}
    assert {r["key"]: r["value"] for r in store.state("t").to_pylist()} == {b"a": b"1"}
    lag = store.state_lag("t").partitions[0]  # nothing a refresh could apply: the rest waits for the transaction
    assert (lag.applied_offset, lag.last_stable_offset, lag.log_end_offset, lag.offsets_behind) == (1, 1, 4, 0)
    tx.commit_transaction()
    store.refresh_state("t")
    assert {r["key"]: r["value"] for r in store.state("t").to_pylist()} == {b"a": b"in-tx", b"b": b"in-tx",
                                                                            b"c": b"after"}
    tx.begin_transaction()
    tx.send("t", [Record("a", "aborted"), Record("z", "aborted")], partition=0)
    tx.abort_transaction()
    result = store.refresh_state("t")
    assert result.committed  # the offsets moved past the aborted records and their marker
    assert {r["key"]: r["value"] for r in store.state("t").to_pylist()} == {b"a": b"in-tx", b"b": b"in-tx",
                                                                            b"c": b"after"}
    assert store.state_lag("t").offsets_behind == 0
    assert store.compare_state("t").equal


# -- 3. incremental refresh ----------------------------------------------------------------------------------


def test_offsets_are_recorded_in_the_tables_own_commits(store):
    store.create_topic("t", 2, config=COMPACT)
    store.append("t", 0, [Record("a", "1"), Record("b", "2")])
    store.refresh_state("t")
    dt = DeltaTable(store.state_table_location("t"))
    assert dt.transaction_version("deltalog.state.p0") == 2
    assert dt.transaction_version("deltalog.state.p1") == 0
    version = dt.version()
    assert not store.refresh_state("t").committed  # nothing new: no commit
    assert DeltaTable(store.state_table_location("t")).version() == version
    store.append("t", 1, [Record("x", "y")])
    result = store.refresh_state("t")
    assert result.records_read == 1 and result.merge_metrics["num_source_rows"] == 1  # cost follows new records
    assert DeltaTable(store.state_table_location("t")).transaction_version("deltalog.state.p1") == 1


def test_refresh_after_other_engines_optimize_of_the_state_table(store):
    store.create_topic("t", 1, config=COMPACT)
    for i in range(4):
        store.append("t", 0, [Record(f"k{j}", f"v{i}") for j in range(i, i + 5)])
        store.refresh_state("t")
    DeltaTable(store.state_table_location("t")).optimize.compact()
    store.append("t", 0, [Record("k0", None), Record("k3", "new")])
    store.refresh_state("t")
    rows = rows_by_key(store, "t")
    assert b"k0" not in rows and rows[b"k3"]["value"] == b"new" and len(rows) == 7
    assert store.compare_state("t").equal


def test_delete_records_drops_the_rows_below_the_new_log_start(store):
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("a", "1"), Record("b", "2"), Record("c", "3")])
    store.refresh_state("t")
    store.delete_records("t", 0, 2)
    store.append("t", 0, [Record("d", "4")])
    store.refresh_state("t")
    assert sorted(rows_by_key(store, "t")) == [b"c", b"d"]
    assert store.compare_state("t").equal


def test_a_topic_made_again_gets_a_new_state_table(store):
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("old", "1")])
    store.refresh_state("t")
    store.delete_topic("t")
    assert not os.path.exists(store.state_table_location("t"))
    store.create_topic("t", 1, config={**COMPACT, "key.encoding": "string"})
    store.append("t", 0, [Record("new", "1")])
    store.refresh_state("t")
    assert list(rows_by_key(store, "t")) == ["new"]


def test_changed_encoding_rebuilds_the_table(store):
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("a", "1")])
    store.refresh_state("t")
    store.alter_topic_config("t", {"key.encoding": "string", "value.encoding": "string"})
    result = store.refresh_state("t")
    assert result.rebuilt
    assert store.state("t").to_pylist()[0]["key"] == "a"
    assert store.compare_state("t").equal


# -- 4. proven equal -------------------------------------------------------------------------------------------


def test_comparison_finds_a_row_changed_behind_deltalogs_back(store):
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("a", "1"), Record("b", "2"), Record("c", "3")])
    store.refresh_state("t", check=True)
    assert store.compare_state("t").equal
    dt = DeltaTable(store.state_table_location("t"))
    dt.update(updates={"value": "X'00'"}, predicate="key = X'61'")  # another engine writes a wrong value
    dt.delete("key = X'62'")
    comparison = store.compare_state("t")
    assert not comparison.equal
    assert (comparison.different, comparison.missing, comparison.extra) == (1, 1, 0)
    assert any("b'a'" in e for e in comparison.examples)
    store.append("t", 0, [Record("d", "4")])
    with pytest.raises(CheckFailedError, match="differs from its log") as e:
        store.refresh_state("t", check=True)
    assert e.value.result.missing == 1
    store.refresh_state("t", full=True)
    assert store.compare_state("t").equal


def test_check_after_every_refresh_when_the_store_says_so(tmp_path):
    s = Store(tmp_path / "s", config={"log.state.table.check": "true", "log.state.table.enable": "true"})
    s.create_topic("t", 1)
    s.append("t", 0, [Record("a", "1")])
    s.refresh_state("t")
    DeltaTable(s.state_table_location("t")).delete()
    s.append("t", 0, [Record("b", "2")])
    with pytest.raises(CheckFailedError):
        s.refresh_state("t")


def test_pending_keys_are_not_compared_below_the_cut(store):
    """Records past the offsets the table recorded may let the cleaner remove older ones (not here: no Spark), so
    the comparison leaves their keys out rather than calling the table wrong."""
    store.create_topic("t", 1, config=COMPACT)
    store.append("t", 0, [Record("a", "1"), Record("b", "1")])
    store.refresh_state("t")
    store.append("t", 0, [Record("a", "2")])
    comparison = store.compare_state("t")
    assert comparison.equal and comparison.pending_keys == 1
    assert store.state_lag("t").offsets_behind == 1 and store.state_lag("t").time_behind_ms >= 0


# -- 5. reads and time travel ----------------------------------------------------------------------------------


def test_state_as_arrow_pandas_polars_and_as_of_a_version_or_time(store):
    store.create_topic("t", 1, config={**COMPACT, "key.encoding": "string", "value.encoding": "string"})
    store.append("t", 0, [Record("a", "1")])
    first = store.refresh_state("t")
    store.append("t", 0, [Record("a", "2"), Record("b", "3")])
    second = store.refresh_state("t")
    assert store.state("t", format="pandas").set_index("key")["value"].to_dict() == {"a": "2", "b": "3"}
    polars = store.state("t", format="polars")
    assert sorted(polars["key"].to_list()) == ["a", "b"]
    import polars as pl

    assert sorted(pl.read_delta(store.state_table_location("t"))["key"].to_list()) == ["a", "b"]
    old = store.state("t", version_as_of=first.version)
    assert old.select(["key", "value"]).to_pylist() == [{"key": "a", "value": "1"}]
    history = store.state_history("t")
    assert [h.version for h in history] == [second.version, first.version, 0]
    assert history[0].offsets == {0: 3} and history[1].offsets == {0: 1}
    assert history[0].log_versions == {0: store.log("t", 0).snapshot().version}
    at = history[1].timestamp_ms
    assert store.state("t", timestamp_as_of=at).num_rows == 1
    assert store.state("t", columns=["key"]).column_names == ["key"]
    with pytest.raises(state_table.VersionNotAvailableError):
        store.state("t", version_as_of=99)


def test_other_engines_optimize_of_the_log_changes_nothing(store):
    """delta-rs's OPTIMIZE writes a partition's rows out of offset order into one file (as Databricks' may): the
    refresh reads the same records as a consumer does, and the table stays equal."""
    store.create_topic("t", 1, config=COMPACT)
    for i in range(3):
        store.append("t", 0, [Record(f"k{j}", f"v{i}") for j in range(i, i + 4)])
    store.refresh_state("t")
    DeltaTable(store.log("t", 0).uri).optimize.compact()
    store.append("t", 0, [Record("k1", None), Record("k9", "new")])
    store.refresh_state("t")
    DeltaTable(store.log("t", 0).uri).optimize.compact()
    assert store.compare_state("t").equal
    assert sorted(rows_by_key(store, "t")) == [b"k0", b"k2", b"k3", b"k4", b"k5", b"k9"]
    store.refresh_state("t", full=True)
    assert store.compare_state("t").equal


def test_a_partition_another_engine_changed_holds_back_only_its_own_rows(store, clock):
    """Another engine's change on one partition made every refresh of the topic fail, while the cleaner went on
    cleaning the other partitions: a tombstone there cleaned away after delete.retention.ms was never applied
    and the table kept the deleted key for good (the chaos run's seed 11, tests/test_foreign_chaos.py). The
    refresh now applies the partitions it can read, and still raises the refused partition's error."""
    from deltalog.errors import ForeignCommitError

    store.create_topic("s", 2, config=COMPACT)
    store.append("s", 0, [Record(key=b"a", value=b"1")])
    store.append("s", 1, [Record(key=b"b", value=b"1")])
    store.refresh_state("s")
    uri = store.log("s", 1).uri
    DeltaTable(uri).alter.set_table_properties({"other.note": "x"}, raise_if_not_exists=False)
    blocked = DeltaTable(uri).version()
    store.append("s", 0, [Record(key=b"a", value=None), Record(key=b"c", value=b"2")])
    with pytest.raises(ForeignCommitError):
        store.refresh_state("s")
    rows = store.state("s").to_pylist()
    assert sorted((r["partition"], r["key"]) for r in rows) == [(0, b"c"), (1, b"b")]
    DeltaTable(uri).restore(blocked - 1)
    store.refresh_state("s")
    assert store.compare_state("s").equal
