"""``format("deltalog")`` as Spark's Kafka source behaves (deltalog/sql/kafka/): offsets by time, late binding of
earliest/latest on every action, Spark's errors for starts past the end, minPartitions splitting within a file,
write checks before any task, and options refused or accepted-and-ignored. Through the shared Spark session."""

from __future__ import annotations

import json

import pytest

import deltalog.sql.kafka
from deltalog import Record, Store
from deltalog.errors import InvalidArgumentError
from deltalog.sql.kafka.options import Options


@pytest.fixture
def classic(spark):
    deltalog.sql.kafka.register(spark)
    return spark


def _reader(spark, store: Store, **options):
    r = spark.read.format("deltalog").option("store", store.root)
    return r.options(**{k: (json.dumps(v) if isinstance(v, dict) else str(v)) for k, v in options.items()}).load()


def _offsets(df) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())


def _timed(store: Store, stamps: list[int], topic: str = "t") -> None:
    store.produce(topic, [Record(key=b"k%d" % i, value=b"v", timestamp_ms=ts) for i, ts in enumerate(stamps)],
                  partition=0)


# --- offsets by time ----------------------------------------------------------------------------------------


def test_starting_and_ending_by_timestamp_read_spark_ranges(classic, store):
    store.create_topic("t", 2)
    _timed(store, [100, 200, 300])
    _timed(store, [150, 400, 50])  # offsets 3-5: timestamps not in offset order
    store.produce("t", [Record(key=b"x", value=b"y", timestamp_ms=1000)], partition=1)
    by_ts = _reader(classic, store, subscribe="t", startingOffsetsByTimestamp={"t": {"0": 250, "1": 500}},
                    endingOffsetsByTimestamp={"t": {"0": 350, "1": 2000}})
    # p0: first offset at/after 250 is 2, end: first at/after 350 is 4; p1: start 0, no record at/after 2000: latest
    assert _offsets(by_ts) == [(0, 2), (0, 3), (1, 0)]
    one = _reader(classic, store, subscribe="t", startingTimestamp=301)
    assert _offsets(one) == [(0, 4), (0, 5), (1, 0)]
    with pytest.raises(Exception, match="No offset matched from request of topic-partition t-0 and timestamp 1001"):
        _reader(classic, store, subscribe="t", startingTimestamp=1001).collect()
    latest = _reader(classic, store, subscribe="t", startingTimestamp=1001,
                     startingOffsetsByTimestampStrategy="latest")
    assert latest.count() == 0  # p0 and p1 start at their latest offsets
    with pytest.raises(Exception, match="KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED"):
        _reader(classic, store, subscribe="t", startingOffsetsByTimestamp={"t": {"0": 1}}).collect()


def test_starting_timestamp_applies_to_a_new_stream(classic, store, tmp_path):
    store.create_topic("t")
    _timed(store, [100, 200, 300])
    stream = (classic.readStream.format("deltalog").option("store", store.root).option("subscribe", "t")
              .option("startingTimestamp", "150").load())
    q = stream.writeStream.format("memory").queryName("by_time").trigger(availableNow=True).start()
    q.awaitTermination(120)
    assert sorted(r["offset"] for r in classic.sql("select offset from by_time").collect()) == [1, 2]
    with pytest.raises(Exception, match="not valid in streaming queries"):
        (classic.readStream.format("deltalog").option("store", store.root).option("subscribe", "t")
         .option("endingTimestamp", "150").load().writeStream.format("memory").queryName("x").start()
         .awaitTermination(60))


# --- late binding, Spark's range errors, minPartitions ------------------------------------------------------


def test_a_batch_dataframe_resolves_earliest_and_latest_on_every_action(classic, store):
    store.create_topic("t")
    _timed(store, [1, 2, 3])
    df = _reader(classic, store, subscribe="t")
    assert df.count() == 3
    _timed(store, [4, 5])
    assert df.count() == 5  # the appends, as Spark's KafkaRelation
    store.delete_records("t", 0, 2)
    assert [o for _, o in _offsets(df)] == [2, 3, 4]  # earliest moved with DeleteRecords


def test_a_start_past_the_end_or_the_latest_is_sparks_error(classic, store):
    store.create_topic("t")
    _timed(store, [1, 2, 3])
    with pytest.raises(Exception, match=r"UNRESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET\] The specified start "
                                        r"offset 2 is greater than the end offset 1 for topic t partition 0"):
        _reader(classic, store, subscribe="t", startingOffsets={"t": {"0": 2}}, endingOffsets={"t": {"0": 1}})
    with pytest.raises(Exception, match=r"RESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET\] The resolved start "
                                        r"offset 5 is greater than the resolved end offset 3 for topic t partition 0"):
        _reader(classic, store, subscribe="t", startingOffsets={"t": {"0": 5}}).collect()


def test_min_partitions_splits_offset_ranges_within_one_file(classic, store):
    store.create_topic("t")
    _timed(store, list(range(10)))  # one file
    df = _reader(classic, store, subscribe="t", minPartitions=4)
    assert df.rdd.getNumPartitions() >= 4
    assert [o for _, o in _offsets(df)] == list(range(10))
    _timed(store, [10, 11])  # late binding: the last share takes what was appended since
    assert [o for _, o in _offsets(df)] == list(range(12))


# --- options and write checks -------------------------------------------------------------------------------


def test_unimplemented_options_are_refused_and_network_settings_ignored(store):
    base = {"store": store.root, "subscribe": "t"}
    with pytest.raises(InvalidArgumentError, match=r"does not implement the option\(s\) 'maxTriggerDelay'.*It "
                                                   r"takes: subscribe, subscribePattern"):
        Options({**base, "maxTriggerDelay": "5m"})
    with pytest.raises(InvalidArgumentError, match="Kafka option 'auto.offset.reset' is not supported"):
        Options({**base, "kafka.auto.offset.reset": "earliest"})
    with pytest.raises(InvalidArgumentError, match="Kafka option 'value.deserializer' is not supported"):
        Options({**base, "kafka.value.deserializer": "x"})
    opts = Options({**base, "kafka.bootstrap.servers": "broker:9092", "kafka.security.protocol": "SASL_SSL",
                    "kafka.sasl.jaas.config": "x", "KAFKA.SSL.TRUSTSTORE.LOCATION": "y", "groupIdPrefix": "g",
                    "startingoffsetsbytimestampstrategy": "LATEST"})
    assert opts.on_no_match == "latest" and opts.subscribe == ["t"]
    with pytest.raises(InvalidArgumentError, match="Expected a single long value, got soon"):
        Options({**base, "startingTimestamp": "soon"})


def test_write_errors_come_before_any_task_even_on_an_empty_dataframe(classic, store):
    store.create_topic("t")
    empty = classic.createDataFrame([], "value int")
    with pytest.raises(Exception, match="value attribute unsupported type int. value must be a"):
        empty.write.format("deltalog").mode("append").option("topic", "t").save(store.root)
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        classic.createDataFrame([], "key string").write.format("deltalog").mode("append").option(
            "topic", "t").save(store.root)
    with pytest.raises(Exception, match="nope"):  # an unknown topic, named
        classic.createDataFrame([], "value string").write.format("deltalog").mode("append").option(
            "topic", "nope").save(store.root)
    assert store.log("t", 0).snapshot().log_end_offset == 0
