"""Where a read_committed reader's partitions end: the last stable offset, as Kafka's ListOffsets LATEST at
READ_COMMITTED (KafkaConsumer.endOffsets, seekToEnd, auto.offset.reset=latest, the console consumer's
--offset latest). A reader put at the log end while a transaction is open would be past that transaction's
records, and never see them once it commits."""

from __future__ import annotations

import pytest

from deltalog import Record, Store, TopicPartition
from deltalog.cli import main

TP = TopicPartition("t", 0)


@pytest.fixture
def open_txn(store):
    """Topic ``t``: two plain records, then a transaction left open with two records (offsets 2 and 3)."""
    store.create_topic("t", 1)
    store.append("t", 0, [Record("a", "before-1"), Record("b", "before-2")])
    producer = store.producer(transactional_id="app")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", [Record("c", "in-txn-1"), Record("d", "in-txn-2")], partition=0)
    return producer


def values(consumer):
    return [r.value for rs in consumer.poll(timeout_ms=0).values() for r in rs]


def test_end_offsets_are_the_last_stable_offset_at_read_committed(store, open_txn):
    committed = store.consumer(isolation_level="read_committed")
    uncommitted = store.consumer()
    assert committed.end_offsets([TP]) == {TP: 2}  # the open transaction starts at 2
    assert uncommitted.end_offsets([TP]) == {TP: 4}  # the high watermark
    open_txn.commit_transaction()
    assert committed.end_offsets([TP]) == {TP: 5} == uncommitted.end_offsets([TP])  # the marker took 4


def test_seek_to_end_at_read_committed_still_reads_the_open_transaction_once_it_commits(store, open_txn):
    consumer = store.consumer(isolation_level="read_committed")
    consumer.assign([TP])
    consumer.seek_to_end()
    assert consumer.position(TP) == 2
    assert values(consumer) == []
    open_txn.commit_transaction()
    assert values(consumer) == [b"in-txn-1", b"in-txn-2"]


def test_auto_offset_reset_latest_at_read_committed_starts_at_the_last_stable_offset(store, open_txn):
    consumer = store.consumer("t", group_id="g", isolation_level="read_committed")  # latest: Kafka's default
    assert values(consumer) == []
    assert consumer.position(TP) == 2
    consumer.commit()
    open_txn.commit_transaction()
    assert values(consumer) == [b"in-txn-1", b"in-txn-2"]
    # read_uncommitted's latest is still the log end
    assert store.consumer("t", group_id="other").position(TP) == 5


def test_an_aborted_transaction_behind_the_end_is_left_out(store, open_txn):
    consumer = store.consumer(isolation_level="read_committed")
    consumer.assign([TP])
    consumer.seek_to_end()
    open_txn.abort_transaction()
    store.append("t", 0, [Record("e", "after")])
    assert values(consumer) == [b"after"]


def test_the_console_consumer_s_latest_at_read_committed_is_the_last_stable_offset(store, open_txn, capsys):
    args = ["--store", store.root, "consume", "t", "--group", "g", "--offset", "latest",
            "--isolation-level", "read_committed"]
    assert main(args) == 0
    assert capsys.readouterr().out == ""
    assert store.offsets_topic.committed("g", [TP])[TP].offset == 2
    open_txn.commit_transaction()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert '"value": "in-txn-1"' in out and '"value": "in-txn-2"' in out


def test_a_read_committed_stream_starting_at_latest_reads_the_open_transaction_once_it_commits(spark, tmp_path,
                                                                                              clock):
    """format("deltalog") as Spark's Kafka source: startingOffsets=latest (its default) at read_committed (deltalog's
    default there) starts at the last stable offset, as a Kafka consumer's seekToEnd does."""
    import deltalog.sql.kafka

    deltalog.sql.kafka.register(spark)
    store = Store(tmp_path / "store", clock=clock)
    store.create_topic("t", 1)
    store.append("t", 0, [Record("a", "before")])
    producer = store.producer(transactional_id="app")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", [Record("c", "in-txn")], partition=0)

    def run() -> list[bytes]:
        df = spark.readStream.format("deltalog").option("store", store.root).option("subscribe", "t").load()
        q = (df.writeStream.format("parquet").option("path", str(tmp_path / "sink"))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None
        sink = tmp_path / "sink"
        if not any(sink.glob("*.parquet")):
            return []
        return sorted(r["value"] for r in spark.read.parquet(str(sink)).collect())

    assert run() == []
    producer.commit_transaction()
    assert run() == [b"in-txn"]
