"""``format("deltalog")``: Spark's Kafka source and sink on a deltalog store (deltalog/sql/kafka/),
on a classic session and on Spark Connect, on a local store and on S3, compared with ``store.read``."""

from __future__ import annotations

import json

import pytest
from conftest import clean_with_small_map

import deltalog.sql.kafka
from deltalog import Record, Store
from deltalog.producer.partitioner import partition_for_key

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@pytest.fixture(params=["classic", "connect"])
def any_spark(request):
    """The classic test session, then a Spark Connect session (a server JVM of its own)."""
    session = request.getfixturevalue("spark" if request.param == "classic" else "connect_spark")
    deltalog.sql.kafka.register(session)
    return session


@pytest.fixture
def classic(spark):
    deltalog.sql.kafka.register(spark)
    return spark


def _options(store: Store) -> dict[str, str]:
    return {"store": store.root, **{f"storage.{k.lower()}": v for k, v in store.storage.options.items()}}


def _reader(spark, store: Store, **options):
    r = spark.read.format("deltalog").options(**_options(store))
    return r.options(**{k: (json.dumps(v) if isinstance(v, dict) else str(v)) for k, v in options.items()})


def _rows(df) -> list[tuple]:
    return sorted((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in df.collect())


def _expected(store: Store, topic: str) -> list[tuple]:
    return sorted((topic, p, r.offset, r.key, r.value)
                  for p in store.partitions(topic) for r in store.read(topic, p, "earliest"))


def _fill(store: Store, topic: str = "fruit", partitions: int = 2, n: int = 12, **config) -> None:
    store.create_topic(topic, partitions, config={"cleanup.policy": "compact", **config})
    store.produce(topic, [Record(key=f"k{i % 5}".encode(), value=f"v{i}".encode(),
                                 headers=[("h", b"x")] if i % 3 == 0 else None) for i in range(n)])


# --- batch read -------------------------------------------------------------------------------------------


def test_batch_read_has_kafkas_schema_and_agrees_with_store_read(any_spark, store_location, clock):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=clock)
    _fill(store)
    df = _reader(any_spark, store, subscribe="fruit").load()
    assert df.columns == KAFKA_COLUMNS
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "binary", "binary", "string", "int", "bigint", "timestamp", "int"]
    assert _rows(df) == _expected(store, "fruit")
    row = df.where("offset = 0").orderBy("partition").first()
    assert row["timestampType"] == 0
    assert int(row["timestamp"].timestamp() * 1000) == clock.now_ms()  # naive, in the session's time zone


def test_headers_only_with_include_headers_and_null_when_a_record_has_none(classic, store):
    _fill(store, n=4)
    df = _reader(classic, store, subscribe="fruit", includeHeaders="true").load()
    assert df.columns == [*KAFKA_COLUMNS, "headers"]
    got = {r["value"]: r["headers"] for r in df.collect()}
    assert got[b"v0"] == [("h", b"x")] and got[b"v3"] == [("h", b"x")]
    assert got[b"v1"] is None


def test_one_task_per_topic_partition_and_offsets_per_partition_json(classic, store):
    _fill(store, partitions=3, n=30)
    df = _reader(classic, store, subscribe="fruit").load()
    assert df.rdd.getNumPartitions() == 3
    ranges = _reader(classic, store, subscribe="fruit",
                     startingOffsets={"fruit": {"0": 1, "1": -2, "2": 2}},
                     endingOffsets={"fruit": {"0": 3, "1": -1, "2": 2}}).load()
    got = {(r["partition"], r["offset"]) for r in ranges.collect()}
    ends = {p: store.log("fruit", p).head().log_end_offset for p in range(3)}
    assert got == {(0, 1), (0, 2)} | {(1, o) for o in range(ends[1])}


def test_a_big_partition_is_read_by_the_sessions_cores_or_min_partitions_tasks(classic, store):
    """One topic partition of ~12 MB in 4 files: Kafka's source reads it in one task; this source cuts it into
    runs of files balanced by bytes, as many as the session's parallelism (2 here) or ``minPartitions``, and
    the rows are the same either way."""
    import numpy as np
    import pyarrow as pa

    store.create_topic("big", 1, config={"cleanup.policy": "compact"})
    rng = np.random.default_rng(1)
    for b in range(4):
        n = 30_000
        values = rng.integers(0, 256, n * 100, dtype=np.uint8).tobytes()
        store.append("big", 0, pa.table({
            "key": pa.array([f"k{b}-{i}".encode() for i in range(n)], pa.binary()),
            "value": pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(
                np.arange(0, (n + 1) * 100, 100, dtype=np.int32).tobytes()), pa.py_buffer(values)])}))
    end = store.log("big", 0).head().log_end_offset
    for options, tasks in (({}, 2), ({"minPartitions": 1}, 1), ({"minPartitions": 3}, 3)):
        df = _reader(classic, store, subscribe="big", **options).load()
        assert df.rdd.getNumPartitions() == tasks, options
        got = df.selectExpr("offset", "spark_partition_id() AS task").collect()
        assert sorted(r["offset"] for r in got) == list(range(end))
        by_task = {}
        for r in got:  # each task reads one contiguous run of offsets
            by_task.setdefault(r["task"], []).append(r["offset"])
        spans = sorted((min(v), max(v), len(v)) for v in by_task.values())
        assert all(hi - lo + 1 == n for lo, hi, n in spans) and len(spans) == tasks
    with pytest.raises(Exception, match="'minPartitions' must be a positive integer"):
        _reader(classic, store, subscribe="big", minPartitions=0).load().collect()


def test_assign_and_subscribe_pattern_choose_topic_partitions(classic, store):
    _fill(store, "a.one", partitions=2, n=6)
    _fill(store, "a.two", partitions=1, n=3)
    _fill(store, "b", partitions=1, n=3)
    pattern = _reader(classic, store, subscribePattern=r"a\..*").load()
    assert {r["topic"] for r in pattern.collect()} == {"a.one", "a.two"}
    assigned = _reader(classic, store, assign={"a.one": [1], "b": [0]}).load()
    assert {(r["topic"], r["partition"]) for r in assigned.collect()} == {("a.one", 1), ("b", 0)}


def test_filters_on_partition_and_offset_prune_the_plan(classic, store):
    _fill(store, partitions=3, n=30)
    df = (_reader(classic, store, subscribe="fruit", pushFilters="true").load()
          .where("partition = 1 AND offset >= 2 AND offset < 5"))
    assert df.rdd.getNumPartitions() == 1
    assert sorted((r["partition"], r["offset"]) for r in df.collect()) == [(1, 2), (1, 3), (1, 4)]
    fresh = _reader(classic, store, subscribe="fruit", pushFilters="true").load().where("partition IN (0, 2)")
    assert fresh.rdd.getNumPartitions() == 2
    assert {r["partition"] for r in fresh.collect()} == {0, 2}


def test_a_reused_dataframe_counts_everything_after_a_filtered_action(classic, store):
    """By default nothing is pushed: pyspark 4.3 would reuse a pruned read for the same DataFrame's later
    unfiltered actions (see the module docstring), and a user reusing ``df`` must get every record."""
    _fill(store, partitions=3, n=30)
    df = _reader(classic, store, subscribe="fruit").load()
    assert df.where("partition = 1").count() == store.log("fruit", 1).head().log_end_offset
    assert df.where("offset < 1").count() == 3
    assert df.count() == 30


def test_bad_options_are_refused_with_what_is_allowed(classic, store):
    _fill(store, n=2)
    with pytest.raises(Exception, match="one of the options subscribe, subscribePattern, assign"):
        _reader(classic, store).load().collect()
    with pytest.raises(Exception, match="can't be latest"):
        _reader(classic, store, subscribe="fruit", startingOffsets="latest").load().collect()
    with pytest.raises(Exception, match="must list every assigned partition"):
        _reader(classic, store, subscribe="fruit", startingOffsets={"fruit": {"0": 0}}).load().collect()


def test_batch_read_below_the_log_start_follows_fail_on_data_loss(classic, store):
    _fill(store, partitions=1, n=10, **{"cleanup.policy": "delete"})
    store.delete_records("fruit", 0, 4)
    start = {"fruit": {"0": 1}}
    with pytest.raises(Exception, match=r"offsets \[1, 4\) of fruit-0 are below its log start offset 4"):
        _reader(classic, store, subscribe="fruit", startingOffsets=start).load().collect()
    df = _reader(classic, store, subscribe="fruit", startingOffsets=start, failOnDataLoss="false").load()
    assert sorted(r["offset"] for r in df.collect()) == list(range(4, 10))


# --- current state ----------------------------------------------------------------------------------------


def test_current_state_mode_is_the_latest_value_per_key_without_tombstones(any_spark, spark, tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock, spark=spark)
    store.create_topic("prices", 2, config={"cleanup.policy": "compact"})
    store.produce("prices", [Record(key=f"k{i % 6}".encode(), value=f"v{i}".encode()) for i in range(30)])
    store.produce("prices", [Record(key=b"k1", value=None), Record(key=b"k2", value=b"new")])
    expected = {(r["partition"], r["key"], r["value"]) for r in store.current_state("prices").collect()}

    def current():
        df = _reader(any_spark, store, subscribe="prices", mode="current").load()
        return {(r["partition"], r["key"], r["value"]) for r in df.collect()}

    assert current() == expected
    k2_offset = store.current_state("prices").where("key = X'6B32'").first()["offset"]
    old_k2 = _reader(any_spark, store, subscribe="prices", mode="current").load().where(
        f"key = X'6B32' AND offset < {k2_offset}")
    assert old_k2.count() == 0  # an offset filter selects from the current state, it does not bound it
    assert {k for _, k, _ in expected} == {b"k0", b"k2", b"k3", b"k4", b"k5"}
    assert (partition_for_key(b"k2", 2), b"k2", b"new") in expected
    store.clean("prices")  # after a cleaning pass: same state, now read from the clean section
    assert current() == expected


# --- batch write ------------------------------------------------------------------------------------------


def _writer(df, store: Store, **options):
    return df.write.format("deltalog").mode("append").options(**_options(store)).options(**options)


def test_batch_write_partitions_by_kafkas_partitioner_one_commit_per_partition(any_spark, store_location, clock):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=clock)
    store.create_topic("fruit", 3, config={"cleanup.policy": "compact"})
    keys = ["grape", "mango", "kiwi", "lime", "apple", "banana", "cherry"]
    df = any_spark.createDataFrame([(k, f"price-{i}") for i, k in enumerate(keys)], "key string, value string")
    versions = {p: store.log("fruit", p).snapshot().version for p in range(3)}
    _writer(df.repartition(2), store, topic="fruit").save()
    got = {r.key: (p, r.value) for p in range(3) for r in store.read("fruit", p, "earliest")}
    assert got == {k.encode(): (partition_for_key(k.encode(), 3), f"price-{i}".encode()) for i, k in enumerate(keys)}
    assert got[b"grape"][0] == 0 and got[b"mango"][0] == 2  # Kafka's mask, not abs (notes A4)
    for p in range(3):  # two tasks, one Delta commit per partition
        if any(v[0] == p for v in got.values()):
            assert store.log("fruit", p).snapshot().version == versions[p] + 1
    assert not store.storage.list_files(store.storage.location("_deltalog", "sink"))  # staged files removed


def test_batch_write_takes_partition_topic_and_headers_columns(classic, store):
    store.create_topic("a", 2, config={"cleanup.policy": "compact"})
    store.create_topic("b", 1, config={"cleanup.policy": "delete"})
    df = classic.createDataFrame(
        [("a", 1, b"k1", b"v1", [("h", b"1")]), ("a", None, b"grape", b"v2", None), ("b", None, None, b"v3", None)],
        "topic string, partition int, key binary, value binary, headers array<struct<key string, value binary>>")
    _writer(df, store).save()
    assert [(r.key, r.value, list(r.headers)) for r in store.read("a", 1, "earliest")] == [
        (b"k1", b"v1", [("h", b"1")]), (b"grape", b"v2", [])]
    assert [(r.key, r.value) for r in store.read("b", 0, "earliest")] == [(None, b"v3")]


def test_batch_write_refuses_keyless_records_on_a_compacted_topic_and_bad_columns(classic, store):
    store.create_topic("fruit", 2, config={"cleanup.policy": "compact"})
    keyless = classic.createDataFrame([(None, "v")], "key string, value string")
    with pytest.raises(Exception, match="has no key; topic 'fruit' is compacted"):
        _writer(keyless, store, topic="fruit").save()
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        _writer(classic.createDataFrame([("k",)], "key string"), store, topic="fruit").save()
    with pytest.raises(Exception, match="topic option required"):
        _writer(classic.createDataFrame([("k", "v")], "key string, value string"), store).save()
    assert all(not store.read("fruit", p, "earliest") for p in range(2))
    with pytest.raises(Exception, match="Save mode overwrite not allowed"):
        _writer(classic.createDataFrame([("k", "v")], "key string, value string"), store,
                topic="fruit").mode("overwrite").save()


def test_written_records_read_back_through_the_source(any_spark, store):
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    df = any_spark.range(40).selectExpr("CAST(id % 7 AS STRING) AS key", "CAST(id AS STRING) AS value")
    _writer(df, store, topic="t").save()
    back = _reader(any_spark, store, subscribe="t").load()
    assert _rows(back) == _expected(store, "t")
    assert sorted(r["value"] for r in back.collect()) == sorted(str(i).encode() for i in range(40))


# --- streaming read ---------------------------------------------------------------------------------------


def _stream(spark, store: Store, **options):
    r = spark.readStream.format("deltalog").options(**_options(store))
    return r.options(**{k: (json.dumps(v) if isinstance(v, dict) else str(v)) for k, v in options.items()})


def _run_to_parquet(df, tmp_path, name="sink"):
    """Run ``df`` with trigger(availableNow) into a Parquet sink (exactly once through its own log); returns how
    many micro-batches the query's checkpoint has committed so far (``recentProgress`` is empty over Connect)."""
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / name))
         .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    commits = tmp_path / f"{name}-checkpoint" / "commits"
    return len([f for f in commits.iterdir() if f.name.isdigit()]) if commits.exists() else 0


def _sink(spark, tmp_path, name="sink") -> list[tuple]:
    df = spark.read.parquet(str(tmp_path / name))
    return sorted((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in df.collect())


@pytest.mark.slow
def test_stream_reads_in_bounded_batches_and_restarts_across_a_cleaning_pass(any_spark, tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock, spark=None)
    store.create_topic("fruit", 2, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    store.produce("fruit", [Record(key=f"k{i % 4}".encode(), value=f"a{i}".encode()) for i in range(20)])
    first = _expected(store, "fruit")
    df = _stream(any_spark, store, subscribe="fruit", startingOffsets="earliest", maxOffsetsPerTrigger=6).load()
    assert _run_to_parquet(df, tmp_path) == 4  # 20 offsets, at most 6 a batch
    assert _sink(any_spark, tmp_path) == first

    store.produce("fruit", [Record(key=f"k{i % 4}".encode(), value=f"b{i}".encode()) for i in range(12)])
    store.roll("fruit", 0), store.roll("fruit", 1)
    clean_with_small_map(store, 100, "fruit")  # removes superseded records, old and new
    ends = {p: store.log("fruit", p).head().log_end_offset for p in range(2)}
    done = {(t, p, o) for t, p, o, _, _ in first}
    _run_to_parquet(df, tmp_path)  # restarted from its checkpoint
    got = _sink(any_spark, tmp_path)
    assert len({(t, p, o) for t, p, o, _, _ in got}) == len(got)  # nothing twice
    new = [r for r in got if (r[0], r[1], r[2]) not in done]
    assert new == [r for r in _expected(store, "fruit") if (r[0], r[1], r[2]) not in done]
    assert {r[4] for r in new} <= {f"b{i}".encode() for i in range(12)} and len(new) < 12  # compacted away
    assert {(p, max(o for _, q, o, _, _ in got if q == p) + 1) for p in range(2)} <= {(p, ends[p]) for p in range(2)}


@pytest.mark.slow
def test_stream_after_retention_follows_fail_on_data_loss(any_spark, tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("events", 1, config={"cleanup.policy": "delete"})
    store.produce("events", [Record(key=None, value=f"{i}".encode()) for i in range(5)])
    df = _stream(any_spark, store, subscribe="events", startingOffsets="earliest").load()
    lax = _stream(any_spark, store, subscribe="events", startingOffsets="earliest", failOnDataLoss="false").load()
    _run_to_parquet(df, tmp_path, "strict")
    _run_to_parquet(lax, tmp_path, "lax")
    store.produce("events", [Record(key=None, value=f"{i}".encode()) for i in range(5, 10)])
    store.delete_records("events", 0, 8)  # offsets 5..7 go before the streams read them
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / "strict"))
         .option("checkpointLocation", str(tmp_path / "strict-checkpoint")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match=r"offsets \[5, 8\) of events-0: they are below its log start offset 8"):
        q.awaitTermination()
    _run_to_parquet(lax, tmp_path, "lax")
    assert [r[2] for r in _sink(any_spark, tmp_path, "lax")] == [0, 1, 2, 3, 4, 8, 9]


def test_stream_starts_at_latest_by_default_and_at_given_offsets(classic, tmp_path, clock):
    store = Store(tmp_path / "store", clock=clock)
    _fill(store, partitions=2, n=10)
    latest = _stream(classic, store, subscribe="fruit").load()
    _run_to_parquet(latest, tmp_path, "latest")
    assert _sink(classic, tmp_path, "latest") == []
    given = _stream(classic, store, subscribe="fruit", startingOffsets={"fruit": {"0": 2, "1": -1}}).load()
    _run_to_parquet(given, tmp_path, "given")
    ends = store.log("fruit", 0).head().log_end_offset
    assert [(r[1], r[2]) for r in _sink(classic, tmp_path, "given")] == [(0, o) for o in range(2, ends)]


# --- streaming write --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_stream_write_is_exactly_once_when_a_micro_batch_is_replayed(any_spark, store_location, clock, tmp_path):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=clock)
    store.create_topic("in", 2, config={"cleanup.policy": "compact"})
    store.create_topic("out", 3, config={"cleanup.policy": "compact"})
    produced = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(16)]
    store.produce("in", [Record(key=k, value=v) for k, v in produced])
    checkpoint = tmp_path / "checkpoint"

    def run():
        df = _stream(any_spark, store, subscribe="in", startingOffsets="earliest", maxOffsetsPerTrigger=10).load()
        q = (df.select("key", "value").writeStream.format("deltalog").options(**_options(store))
             .option("topic", "out").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        q.awaitTermination()

    run()
    batches = sorted(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    assert batches == [0, 1]
    for name in ("1", ".1.crc"):  # as if the query died after the sink's commit, before Spark's
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run()  # replays batch 1 with the same batch id
    assert (checkpoint / "commits" / "1").exists()
    out = [(r.key, r.value, p) for p in range(3) for r in store.read("out", p, "earliest")]
    assert sorted((k, v) for k, v, _ in out) == sorted(produced)  # every record once
    assert all(p == partition_for_key(k, 3) for k, _, p in out)
    assert not store.storage.list_files(store.storage.location("_deltalog", "sink"))


def test_stream_write_needs_a_checkpoint_or_transactional_id(classic, store):
    from deltalog.sql.kafka.options import Options
    from deltalog.sql.kafka.writes import sink_app_id

    with pytest.raises(Exception, match="needs option\\('checkpointLocation'"):
        sink_app_id(Options({"store": store.root}))
    assert sink_app_id(Options({"store": store.root, "transactional.id": "t1"})) == "deltalog.sink.t1"


# --- the docs page -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_readme_kafka_section_runs(classic, tmp_path):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "spark-kafka-source.md").read_text(encoding="utf-8")
    section = text.split("# Spark's Kafka interface", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"/tmp/my-store"', repr(str(tmp_path / "store")))
    code = code.replace('"/tmp/checkpoints/upper"', repr(str(tmp_path / "checkpoint")))
    store = Store(tmp_path / "store")
    store.create_topic("fruit-prices", 2, config={"cleanup.policy": "compact"})
    store.create_topic("fruit-prices-upper", 2, config={"cleanup.policy": "compact"})
    namespace = {"spark": classic}
    exec(compile(code, "docs/spark-kafka-source.md", "exec"), namespace)
    assert {(r["key"], r["partition"]) for r in namespace["df"].collect()} == {(b"grape", 1), (b"lime", 0)}
    assert namespace["state"].count() == 2
    assert {r.value for p in (0, 1) for r in store.read("fruit-prices-upper", p)} == {b"1.20", b"0.40"}
