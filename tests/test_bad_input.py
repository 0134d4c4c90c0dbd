"""Every bad input of the foundation: a DeltalogError subclass naming the problem, and nothing written.

"Nothing written" is checked on disk: the same Delta version and exactly the same files (data files and
Delta log entries) before and after, for every partition of the topic.
"""

from __future__ import annotations

import os

import pytest

from deltalog import (
    DeltalogError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTopicError,
    Record,
    RecordTooLargeError,
    Store,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)


def files_under(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs}


def fingerprint(store: Store, topic: str) -> tuple:
    """The Delta version and every file of every partition table of ``topic``."""
    return tuple(
        (p, store.log(topic, p).snapshot().version, frozenset(files_under(store.log(topic, p).uri)))
        for p in store.partitions(topic)
    )


@pytest.fixture
def compacted(store):
    store.create_topic("prices", partitions=2, config={"cleanup.policy": "compact", "max.message.bytes": 100})
    store.append("prices", 0, [Record(key=b"grape", value=b"2.69")])
    return store


def test_keyless_record_on_compacted_topic_is_refused_and_nothing_written(compacted):
    before = fingerprint(compacted, "prices")
    with pytest.raises(InvalidRecordError) as e:
        compacted.append("prices", 0, [Record(key=b"lime", value=b"0.49"), Record(key=None, value=b"1")])
    assert "record 1 has no key" in str(e.value) and "compact" in str(e.value)
    assert fingerprint(compacted, "prices") == before
    assert [r.offset for r in compacted.read("prices", 0)] == [0]


def test_keyless_record_is_fine_on_a_delete_topic(store):
    store.create_topic("events", config={"cleanup.policy": "delete"})
    assert store.append("events", 0, [Record(value=b"x")]) == [0]


def test_record_over_max_message_bytes_is_refused_and_nothing_written(compacted):
    before = fingerprint(compacted, "prices")
    with pytest.raises(RecordTooLargeError) as e:
        compacted.append("prices", 0, [Record(key=b"k", value=b"v"), Record(key=b"k", value=b"x" * 100)])
    msg = str(e.value)
    assert "record 1 is 101 bytes" in msg and "max.message.bytes=100" in msg
    assert isinstance(e.value, InvalidRecordError)
    assert fingerprint(compacted, "prices") == before


def test_headers_count_against_max_message_bytes(compacted):
    before = fingerprint(compacted, "prices")
    with pytest.raises(RecordTooLargeError):
        compacted.append("prices", 0, [Record(key=b"k", value=b"v", headers={"h": b"x" * 98})])
    assert fingerprint(compacted, "prices") == before
    # exactly at the limit is accepted: key 1 + value 1 + header name 1 + header value 97 = 100
    assert compacted.append("prices", 0, [Record(key=b"k", value=b"v", headers={"h": b"x" * 97})]) == [1]


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"segment.bytes": 13}, ["segment.bytes", "13", "[14,"]),
        ({"segment.bytes": "lots"}, ["segment.bytes", "'lots'", "whole number"]),
        ({"cleanup.policy": "shred"}, ["cleanup.policy", "'shred'", "compact", "delete"]),
        ({"min.cleanable.dirty.ratio": 1.5}, ["min.cleanable.dirty.ratio", "1.5", "[0.0, 1.0]"]),
        ({"retention.ms": -2}, ["retention.ms", "-2", "[-1,"]),
        ({"compression.type": "zstd"}, ["Unknown", "'compression.type'", "allowed", "segment.ms"]),
        ({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}, ["min.compaction.lag.ms", "max.compaction.lag.ms"]),
    ],
)
def test_bad_config_at_create_names_the_key_and_creates_nothing(store, config, words):
    with pytest.raises(InvalidConfigError) as e:
        store.create_topic("t", config=config)
    for w in words:
        assert w in str(e.value)
    assert not store.topic_exists("t")
    assert os.listdir(os.path.join(store.root, "topics")) == []


@pytest.mark.parametrize(
    "config",
    [{"segment.ms": 0}, {"max.message.bytes": -1}, {"delete.retention.ms": "1h"}, {"no.such.key": 1},
     {"min.compaction.lag.ms": 10**6, "max.compaction.lag.ms": 10}, {"segment.ms": 5, "cleanup.policy": ""}],
)
def test_bad_config_at_alter_changes_no_partition(compacted, config):
    before = fingerprint(compacted, "prices")
    with pytest.raises(InvalidConfigError):
        compacted.alter_topic_config("prices", config)
    assert fingerprint(compacted, "prices") == before
    assert compacted.topic_config("prices").max_message_bytes == 100


@pytest.mark.parametrize("partitions", [0, -1, 10_001, "2", 1.0, True])
def test_bad_partition_count(store, partitions):
    with pytest.raises(InvalidConfigError) as e:
        store.create_topic("t", partitions=partitions)
    assert "partitions" in str(e.value) and "[1, 10000]" in str(e.value)
    assert not store.topic_exists("t")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        (".", ["'.'", "cannot be '.' or '..'"]),
        ("..", ["'..'", "cannot be '.' or '..'"]),
        ("a" * 250, ["250 characters", "maximum is 249"]),
        ("a/b", ["'a/b'", "ASCII alphanumerics"]),
        ("../escape", ["ASCII alphanumerics"]),
        ("", ["non-empty"]),
        ("fruit prices", ["ASCII alphanumerics"]),
        ("prices\n", ["ASCII alphanumerics"]),  # a trailing newline once slipped through `$`
        ("caf\u00e9", ["ASCII alphanumerics"]),
        (None, ["non-empty string"]),
    ],
)
def test_illegal_topic_names(store, name, words):
    with pytest.raises(InvalidTopicError) as e:
        store.create_topic(name)
    for w in words:
        assert w in str(e.value)
    assert os.listdir(os.path.join(store.root, "topics")) == []
    assert not os.path.exists(os.path.join(store.root, "escape"))


@pytest.mark.parametrize("name", ["a" * 249, "A.b_c-9", "_", "..."])
def test_legal_topic_names_work(store, name):
    """249 characters is the longest legal name and must work end to end (it once overflowed a staging
    directory name)."""
    store.create_topic(name)
    assert store.append(name, 0, [Record(key=b"k", value=b"v")]) == [0]
    assert store.list_topics() == [name]
    store.delete_topic(name)
    assert store.list_topics() == []


def test_topic_that_exists(compacted):
    before = fingerprint(compacted, "prices")
    with pytest.raises(TopicExistsError) as e:
        compacted.create_topic("prices", partitions=5, config={"cleanup.policy": "delete"})
    assert "'prices' already exists" in str(e.value)
    assert fingerprint(compacted, "prices") == before
    assert compacted.topic_config("prices").compact
    assert sorted(os.listdir(os.path.join(compacted.root, "topics"))) == ["prices"]  # no staging left behind


@pytest.mark.parametrize("partition", [2, -1, 99, "0", True])
def test_partition_that_does_not_exist(compacted, partition):
    before = fingerprint(compacted, "prices")
    with pytest.raises(UnknownTopicOrPartitionError) as e:
        compacted.append("prices", partition, [Record(key=b"k", value=b"v")])
    assert "does not exist" in str(e.value) and "0..1" in str(e.value)
    with pytest.raises(UnknownTopicOrPartitionError):
        compacted.read("prices", partition)
    with pytest.raises(UnknownTopicOrPartitionError):
        compacted.roll("prices", partition)
    assert fingerprint(compacted, "prices") == before


def test_topic_that_does_not_exist(compacted):
    for call in (
        lambda: compacted.append("nope", 0, [Record(key=b"k", value=b"v")]),
        lambda: compacted.read("nope", 0),
        lambda: compacted.describe("nope"),
        lambda: compacted.alter_topic_config("nope", {"segment.ms": 10}),
        lambda: compacted.delete_topic("nope"),
    ):
        with pytest.raises(UnknownTopicOrPartitionError) as e:
            call()
        assert "'nope' does not exist" in str(e.value) and "prices" in str(e.value)
    assert compacted.list_topics() == ["prices"]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"key": 5}, ["key", "bytes, str", "int"]),
        ({"key": b"k", "value": 2.5}, ["value", "float"]),
        ({"key": b"k", "value": b"v", "timestamp_ms": -1}, ["timestamp_ms", ">= 0"]),
        ({"key": b"k", "value": b"v", "timestamp_ms": 2**63}, ["timestamp_ms", "64 bits"]),
        ({"key": b"k", "value": b"v", "timestamp_ms": "now"}, ["timestamp_ms", "int"]),
        ({"key": b"k", "value": b"v", "headers": [("h",)]}, ["header", "pair"]),
        ({"key": b"k", "value": b"v", "headers": {1: b"x"}}, ["header name", "str"]),
    ],
)
def test_malformed_records_are_refused_when_built(kwargs, words):
    with pytest.raises(InvalidRecordError) as e:
        Record(**kwargs)
    for w in words:
        assert w in str(e.value)


def test_a_non_record_in_a_batch_writes_nothing(compacted):
    before = fingerprint(compacted, "prices")
    with pytest.raises(InvalidRecordError) as e:
        compacted.append("prices", 0, [Record(key=b"k", value=b"v"), (b"k", b"v")])
    assert "record 1 is a tuple" in str(e.value)
    assert fingerprint(compacted, "prices") == before


@pytest.mark.parametrize(("from_offset", "max_records"), [("first", None), (1.0, None), (0, -1), (0, "3"), (0, True)])
def test_bad_read_arguments(compacted, from_offset, max_records):
    with pytest.raises(InvalidConfigError) as e:
        compacted.read("prices", 0, from_offset=from_offset, max_records=max_records)
    assert "from_offset" in str(e.value) or "max_records" in str(e.value)


def test_bad_store_config():
    with pytest.raises(InvalidConfigError) as e:
        Store("/nonexistent-never-created", config={"log.cleaner.threads": 0})
    assert "log.cleaner.threads" in str(e.value)
    assert not os.path.exists("/nonexistent-never-created")


def test_every_error_is_a_deltalog_error():
    for cls in (InvalidConfigError, InvalidRecordError, InvalidTopicError, RecordTooLargeError,
                TopicExistsError, UnknownTopicOrPartitionError):
        assert issubclass(cls, DeltalogError)
