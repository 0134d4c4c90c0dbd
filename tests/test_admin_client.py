"""``store.admin()``: the AdminClient calls both Python clients name alike, given confluent-kafka's and
kafka-python's own argument objects, answering with done futures per item as confluent-kafka's does."""

from __future__ import annotations

import confluent_kafka
import confluent_kafka.admin as ck
import kafka.admin as kp
import pytest

from deltalog import Record
from deltalog.admin import ConfigEntry, ConfigResource, DeletedRecords, NewPartitions, NewTopic
from deltalog.errors import InvalidConfigError, InvalidPartitionsError, TopicExistsError, UnknownTopicOrPartitionError
from deltalog.structs import TopicPartition


def test_create_and_delete_topics_with_either_clients_objects(store):
    admin = store.admin()
    done = admin.create_topics([ck.NewTopic("a", 3, 3, config={"cleanup.policy": "compact"}),
                                kp.NewTopic("b", 2, 1, topic_configs={"retention.ms": "1000"}),
                                NewTopic("c"), ck.NewTopic("a", 1)])
    assert [done[t].result() for t in ("b", "c")] == [None, None]
    with pytest.raises(TopicExistsError):
        done["a"].result()  # the second "a": one item's error, the others created
    assert store.partitions("a") == [0, 1, 2] and store.partitions("b") == [0, 1] and store.partitions("c") == [0]
    assert store.topic_config("a").cleanup_policy == ("compact",) and store.topic_config("b").retention_ms == 1000
    assert admin.create_topics([NewTopic("d", 2)], validate_only=True)["d"].result() is None
    assert not store.topic_exists("d")
    gone = admin.delete_topics(["c", "nope"])
    assert gone["c"].result() is None and not store.topic_exists("c")
    with pytest.raises(UnknownTopicOrPartitionError):
        gone["nope"].result()


def test_create_partitions_only_more_and_keys_may_move(store):
    admin = store.admin()
    admin.create_topics([NewTopic("t", 1)])["t"].result()
    store.produce("t", [Record(key=b"k%d" % i, value=b"v") for i in range(20)])
    assert admin.create_partitions([ck.NewPartitions("t", 4)])["t"].result() is None
    assert store.partitions("t") == [0, 1, 2, 3]
    assert [len(store.read("t", p)) for p in range(4)] == [20, 0, 0, 0]  # existing records stay where they are
    after = store.produce("t", [Record(key=b"k%d" % i, value=b"v") for i in range(20)])
    assert len({m.partition for m in after}) > 1  # murmur2 % 4 now: keys moved
    assert admin.create_partitions({"t": kp.NewPartitions(5)})["t"].result() is None
    with pytest.raises(InvalidPartitionsError, match="Topic currently has 5 partitions, which is higher than the "
                                                     "requested 2."):
        admin.create_partitions([NewPartitions("t", 2)])["t"].result()
    with pytest.raises(InvalidPartitionsError, match="equal to"):
        admin.create_partitions([NewPartitions("t", 5)], validate_only=True)["t"].result()
    assert store.topic_config("t") == store.log("t", 4).head().config


def test_describe_and_incremental_alter_configs(store):
    admin = store.admin()
    admin.create_topics([NewTopic("t", 1, config={"retention.ms": "1000"})])["t"].result()
    res = ck.ConfigResource(ck.ResourceType.TOPIC, "t")
    entries = admin.describe_configs([res])[res].result()
    assert entries["retention.ms"].value == "1000" and not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    change = ck.ConfigResource(ck.ResourceType.TOPIC, "t", incremental_configs=[
        ck.ConfigEntry("retention.ms", None, incremental_operation=ck.AlterConfigOpType.DELETE),
        ck.ConfigEntry("segment.ms", "60000", incremental_operation=ck.AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([change])[change].result() is None
    config = store.topic_config("t")
    assert config.retention_ms == 604_800_000 and config.segment_ms == 60_000  # DELETE: back to Kafka's default
    kp_res = kp.ConfigResource(kp.ConfigResourceType.TOPIC, "t", configs={"segment.ms": "120000"})
    admin.incremental_alter_configs([kp_res])[kp_res].result()
    assert store.topic_config("t").segment_ms == 120_000
    bad = ConfigResource("TOPIC", "t", incremental_configs=[ConfigEntry("segment.ms", "1", "APPEND")])
    with pytest.raises(InvalidConfigError, match="APPEND is not supported; allowed: SET, DELETE"):
        admin.incremental_alter_configs([bad])[bad].result()
    broker = ck.ConfigResource(ck.ResourceType.BROKER, "0")
    with pytest.raises(Exception, match="only topic configs exist here"):
        admin.describe_configs([broker])[broker].result()


def test_groups_and_delete_records(store):
    admin = store.admin()
    admin.create_topics([NewTopic("t", 1)])["t"].result()
    store.append("t", 0, [Record(key=b"k", value=b"v%d" % i) for i in range(5)])
    store.alter_consumer_group_offsets("g", {TopicPartition("t", 0): 2})
    assert [g.group_id for g in admin.list_consumer_groups().result().valid] == ["g"]
    assert admin.list_consumer_group_offsets("g")[TopicPartition("t", 0)].offset == 2
    tp = confluent_kafka.TopicPartition("t", 0, 3)
    assert admin.delete_records([tp])[tp].result() == DeletedRecords(3)
    assert admin.delete_records({TopicPartition("t", 0): -1})[TopicPartition("t", 0)].result().low_watermark == 5
    assert admin.delete_consumer_groups(["g"])["g"].result() is None and store.list_consumer_groups() == []
