"""Topic and store configs: Kafka's names and defaults, parsing, validation, persistence in the tables."""

from __future__ import annotations

import dataclasses

import pytest

from deltalog import InvalidConfigError, Record, Store, StoreConfig, TopicConfig
from deltalog.config import INT_MAX, LONG_MAX

KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(LONG_MAX),
    "delete.retention.ms": "86400000",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "file.delete.delay.ms": "60000",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.after.max.ms": str(LONG_MAX),
    "message.timestamp.difference.max.ms": str(LONG_MAX),
}
#: Kafka's names whose default deltalog changes on purpose, with deltalog's: file.delete.delay.ms is also Delta's
#: delta.deletedFileRetentionDuration, whose default (7 days) keeps time travel working (docs/history-and-time-travel.md).
DELTALOG_DEFAULTS = {"file.delete.delay.ms": "604800000"}

KAFKA_BROKER_DEFAULTS = {
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.cleaner.io.buffer.load.factor": "0.9",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.io.max.bytes.per.second": "inf",
}

# key -> (a valid value as a string, its parsed value, values that must be refused)
TOPIC_CASES = {
    "cleanup.policy": ("compact, delete", ("compact", "delete"), ["", "compact,shred", 3, None]),
    "segment.bytes": ("14", 14, [13, INT_MAX + 1, "1GB", 1.5, True, None]),
    "segment.ms": ("1", 1, [0, -1, "7d", 2.5, False]),
    "min.cleanable.dirty.ratio": ("0", 0.0, [-0.01, 1.01, "half", "nan", True]),
    "min.compaction.lag.ms": ("0", 0, [-1, "x", 0.5]),
    "max.compaction.lag.ms": ("1", 1, [0, -5, LONG_MAX + 1]),
    "delete.retention.ms": ("0", 0, [-1, "1h"]),
    "retention.ms": ("-1", -1, [-2, "forever"]),
    "retention.bytes": ("-1", -1, [-2, "1TB"]),
    "file.delete.delay.ms": ("0", 0, [-1, "soon"]),
    "max.message.bytes": ("0", 0, [-1, INT_MAX + 1, "1MB"]),
    "message.timestamp.type": ("LogAppendTime", "LogAppendTime", ["logappendtime", "BrokerTime", ""]),
    "message.timestamp.before.max.ms": ("0", 0, [-1, "1h"]),
    "message.timestamp.after.max.ms": ("0", 0, [-1, LONG_MAX + 1]),
    "message.timestamp.difference.max.ms": ("0", 0, [-1, "x"]),
}

STORE_CASES = {
    "log.cleaner.threads": ("4", 4, [0, 1025, "two", 1.5]),
    "log.cleaner.dedupe.buffer.size": ("1048577", 1048577, [1048576, 24, 0, "128MB"]),
    "log.cleaner.io.buffer.load.factor": ("1.0", 1.0, [0, 0.0, 1.5, "most"]),
    "log.cleaner.backoff.ms": ("0", 0, [-1, "15s"]),
    "log.cleaner.io.max.bytes.per.second": ("1e6", 1e6, [0, -1, "fast"]),
}


def test_kafka_topic_keys_keep_kafkas_names_and_defaults():
    props = TopicConfig().to_properties()
    assert {k: props[k] for k in KAFKA_TOPIC_DEFAULTS} == {**KAFKA_TOPIC_DEFAULTS, **DELTALOG_DEFAULTS}
    assert TopicConfig.from_properties({}) == TopicConfig()
    assert [k.name for k in TopicConfig.KEYS][: len(KAFKA_TOPIC_DEFAULTS)] == list(KAFKA_TOPIC_DEFAULTS)


def test_store_keys_keep_the_brokers_names_and_defaults():
    props = StoreConfig().to_properties()
    assert {k: props[k] for k in KAFKA_BROKER_DEFAULTS} == KAFKA_BROKER_DEFAULTS
    assert StoreConfig.from_properties({}) == StoreConfig()


@pytest.mark.parametrize("key", TopicConfig.KEYS + StoreConfig.KEYS, ids=lambda k: k.name)
def test_every_key_is_documented_and_its_default_survives_the_table_properties(key):
    """Configs are stored as strings in the Delta table properties and parsed back on every snapshot, so
    every default must render to a string that parses back to itself (deltalog-specific keys too)."""
    assert key.doc.strip(), f"{key.name} has no doc"
    assert key.parse(key.name, key.render(key.default)) == key.default


@pytest.mark.parametrize("cls", [TopicConfig, StoreConfig])
def test_each_key_fills_one_field_and_each_field_has_a_key(cls):
    """The dataclasses take their defaults from the key tables: a field without a key, or a key without a field,
    would be a setting nobody can give or one the config cannot hold."""
    assert [f.name for f in dataclasses.fields(cls)] == [k.attr for k in cls.KEYS]


def test_every_kafka_key_has_a_case():
    assert set(TOPIC_CASES) == set(KAFKA_TOPIC_DEFAULTS)
    assert set(STORE_CASES) == set(KAFKA_BROKER_DEFAULTS)


@pytest.mark.parametrize("name", list(TOPIC_CASES))
def test_topic_key_parses_strings_and_refuses_bad_values(name):
    text, parsed, bad_values = TOPIC_CASES[name]
    attr = TopicConfig.key(name).attr
    assert getattr(TopicConfig.from_properties({name: text}), attr) == parsed
    for bad in bad_values:
        with pytest.raises(InvalidConfigError) as e:
            TopicConfig.from_properties({name: bad})
        assert name in str(e.value), bad


@pytest.mark.parametrize("name", list(STORE_CASES))
def test_store_key_parses_strings_and_refuses_bad_values(name):
    text, parsed, bad_values = STORE_CASES[name]
    attr = StoreConfig.key(name).attr
    assert getattr(StoreConfig.from_properties({name: text}), attr) == parsed
    for bad in bad_values:
        with pytest.raises(InvalidConfigError) as e:
            StoreConfig.from_properties({name: bad})
        assert name in str(e.value), bad


def test_out_of_range_message_names_key_value_and_range():
    with pytest.raises(InvalidConfigError) as e:
        TopicConfig.from_properties({"segment.bytes": 10})
    assert str(e.value) == f"Invalid value 10 for configuration segment.bytes: value must be in [14, {INT_MAX}]"


def test_numbers_accept_ints_whole_floats_and_padded_strings():
    c = TopicConfig.from_properties({"segment.ms": 1000.0, "delete.retention.ms": " 42 ", "retention.bytes": 7})
    assert (c.segment_ms, c.delete_retention_ms, c.retention_bytes) == (1000, 42, 7)


def test_cleanup_policy_forms():
    assert TopicConfig.from_properties({"cleanup.policy": "compact"}).compact
    assert not TopicConfig.from_properties({"cleanup.policy": "compact"}).delete
    both = TopicConfig.from_properties({"cleanup.policy": ["delete", "compact"]})
    assert both.compact and both.delete and both.cleanup_policy == ("compact", "delete")
    assert TopicConfig.from_properties({"cleanup.policy": "COMPACT"}).cleanup_policy == ("compact",)


def test_unknown_keys_are_named_with_the_allowed_ones():
    with pytest.raises(InvalidConfigError) as e:
        TopicConfig.from_properties({"segment.byte": 100, "cleanup.policy": "compact"})
    assert "'segment.byte'" in str(e.value) and "segment.bytes" in str(e.value)
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_properties({"log.cleaner.threads": 2})  # a broker key is not a topic key
    with pytest.raises(InvalidConfigError):
        StoreConfig.from_properties({"segment.ms": 2})  # and vice versa
    with pytest.raises(InvalidConfigError):
        TopicConfig.key("nope")


def test_min_lag_greater_than_max_lag_is_a_conflict():
    with pytest.raises(InvalidConfigError) as e:
        TopicConfig.from_properties({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 9})
    assert "min.compaction.lag.ms (10)" in str(e.value) and "max.compaction.lag.ms (9)" in str(e.value)
    assert TopicConfig.from_properties({"min.compaction.lag.ms": 9, "max.compaction.lag.ms": 9}).min_compaction_lag_ms == 9
    base = TopicConfig.from_properties({"max.compaction.lag.ms": 100})
    with pytest.raises(InvalidConfigError):
        base.with_overrides({"min.compaction.lag.ms": 101})


def test_with_overrides_keeps_other_keys():
    base = TopicConfig.from_properties({"cleanup.policy": "compact", "segment.ms": 5})
    new = base.with_overrides({"segment.bytes": "1000"})
    assert (new.cleanup_policy, new.segment_ms, new.segment_bytes) == (("compact",), 5, 1000)
    assert base.segment_bytes == 1_073_741_824  # frozen: the original is unchanged


def test_properties_round_trip():
    c = TopicConfig.from_properties({"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.25,
                                     "max.compaction.lag.ms": 123})
    assert TopicConfig.from_properties(c.to_properties()) == c
    s = StoreConfig.from_properties({"log.cleaner.threads": 3, "log.cleaner.io.max.bytes.per.second": 5e5})
    assert StoreConfig.from_properties(s.to_properties()) == s


@pytest.mark.parametrize("buffer, threads, load_factor", [
    (134_217_728, 1, 0.9), (134_217_728, 3, 0.9), (1_048_577 * 2, 2, 0.5), (5_000_000, 1, 0.75),
    (10_000_019, 4, 0.9), (2**40, 2, 0.9),
])
def test_offset_map_capacity_is_kafkas_sizing(buffer, threads, load_factor):
    """Kafka: slots = min(buffer / threads, Int.MaxValue) / 24; maxDesiredMapSize = (slots * loadFactor).toInt."""
    c = StoreConfig.from_properties({"log.cleaner.dedupe.buffer.size": buffer, "log.cleaner.threads": threads,
                                     "log.cleaner.io.buffer.load.factor": load_factor})
    slots = min(buffer // threads, INT_MAX) // 24
    assert c.offset_map_slots() == slots
    assert c.offset_map_capacity == int(slots * load_factor)
    assert StoreConfig().offset_map_capacity == 5_033_164  # (134217728 / 24) x 0.9, as Kafka's CleanerConfig computes


def test_a_dedupe_buffer_of_1_mib_or_less_per_thread_is_refused_as_kafka_refuses_it():
    """KafkaConfig.validateValues: require(dedupeBufferSize / threads > 1024 * 1024)."""
    StoreConfig.from_properties({"log.cleaner.dedupe.buffer.size": 2 * 1024 * 1024 + 2, "log.cleaner.threads": 2})
    for buffer, threads in ((1024 * 1024, 1), (2 * 1024 * 1024 + 1, 2), (24, 1)):
        with pytest.raises(InvalidConfigError) as e:
            StoreConfig.from_properties({"log.cleaner.dedupe.buffer.size": buffer, "log.cleaner.threads": threads})
        assert "log.cleaner.dedupe.buffer.size" in str(e.value)


def test_topic_configs_are_stored_with_the_partition_tables(tmp_path, clock):
    store = Store(tmp_path / "s", clock=clock)
    store.create_topic("t", partitions=3, config={"cleanup.policy": "compact", "segment.ms": 1234})
    for log in store.logs("t"):
        props = log.table().metadata().configuration
        assert props["deltalog.topic.cleanup.policy"] == "compact"
        assert props["deltalog.topic.segment.ms"] == "1234"
        assert props["deltalog.topic.max.message.bytes"] == "1048588"  # defaults are written too
    reopened = Store(tmp_path / "s", clock=clock)
    assert reopened.topic_config("t") == store.topic_config("t")
    assert reopened.describe("t").config.segment_ms == 1234


def test_alter_topic_config_persists_across_a_new_store(tmp_path, clock):
    store = Store(tmp_path / "s", clock=clock)
    store.create_topic("t", partitions=2, config={"cleanup.policy": "compact"})
    store.append("t", 1, [Record(key=b"k", value=b"v")])
    versions = [log.snapshot().version for log in store.logs("t")]
    new = store.alter_topic_config("t", {"min.cleanable.dirty.ratio": "0.1", "max.message.bytes": 10})
    assert new.min_cleanable_dirty_ratio == 0.1 and new.cleanup_policy == ("compact",)
    assert [log.snapshot().version for log in store.logs("t")] == [v + 1 for v in versions]

    reopened = Store(tmp_path / "s", clock=clock)
    for log in reopened.logs("t"):
        assert log.snapshot().config == new
    assert reopened.topic_config("t").max_message_bytes == 10
    # and the altered config is enforced, by the new store and the old one alike
    from deltalog import RecordTooLargeError

    for s in (reopened, store):
        with pytest.raises(RecordTooLargeError):
            s.append("t", 0, [Record(key=b"k", value=b"0123456789")])
    assert reopened.read("t", 1)[0].value == b"v"  # data untouched by the alter


def test_store_config_from_the_constructor(tmp_path):
    s = Store(tmp_path / "s", config={"log.cleaner.threads": "2"})
    assert s.config.cleaner_threads == 2 and s.config.backoff_ms == 15_000


def test_cleaner_config_the_earlier_name_of_store_config_is_gone():
    """``CleanerConfig`` (0.1.0's name, deprecated since) was removed: the class holds every store-wide key (the
    cleaner's, the offsets topic's, the transaction coordinator's), as Kafka's broker KafkaConfig does."""
    import deltalog
    from deltalog import config

    for module in (deltalog, config):
        with pytest.raises(AttributeError, match="no attribute 'CleanerConfig'"):
            module.CleanerConfig  # noqa: B018
        with pytest.raises(AttributeError, match="no attribute 'Nope'"):
            module.Nope  # noqa: B018
    assert "StoreConfig" in deltalog.__all__
