"""Group offsets bound to topic ids (KIP-516): a consumer of a topic that was deleted and created again under the
same name cannot move the new topic's group position, ``describe`` names an offset committed on an earlier topic,
and the Kafka endpoint gives topic ids where the protocol carries them (Metadata v10+)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import MetadataRequest

from deltalog import Record, Store
from deltalog.errors import UnknownTopicIdError
from deltalog.server import protocol
from deltalog.server.kafka_apis import KafkaApis
from deltalog.structs import OffsetAndMetadata, TopicPartition
from tests.conftest import json_lines, run_cli

TP = TopicPartition("orders", 0)


def _orders(store: Store, prefix: str, n: int) -> None:
    store.append("orders", 0, [Record(b"k%d" % i, f"{prefix}{i}".encode()) for i in range(n)])


def _values(polled) -> list[bytes]:
    return [r.value for records in polled.values() for r in records]


def test_a_consumer_of_a_deleted_topic_cannot_move_the_recreated_topics_group_position(store):
    store.create_topic("orders")
    _orders(store, "old", 10)
    old = store.consumer("orders", group_id="g", auto_offset_reset="earliest")
    assert len(_values(old.poll(max_records=100))) == 10
    store.delete_topic("orders")
    store.create_topic("orders")
    _orders(store, "new", 12)
    with pytest.raises(UnknownTopicIdError, match="deleted and created again") as refused:
        old.close()  # the auto-commit of position 10: refused, as Kafka refuses an unknown topic id
    assert refused.value.topic == "orders" and refused.value.current_topic_id == store.log_manager.topic_id("orders")
    assert refused.value.topic_id != refused.value.current_topic_id
    assert refused.value.errno == protocol.UNKNOWN_TOPIC_ID
    assert store.offsets_topic.committed("g") == {}
    # the group starts the new topic at its beginning: none of its records skipped
    fresh = store.consumer("orders", group_id="g", auto_offset_reset="earliest")
    assert _values(fresh.poll(max_records=100)) == [b"new%d" % i for i in range(12)]


def test_an_explicit_commit_of_the_old_topic_is_refused_and_a_new_subscription_commits(store):
    store.create_topic("orders")
    _orders(store, "old", 5)
    c = store.consumer("orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.poll(max_records=100)
    c.commit()
    store.delete_topic("orders")
    store.create_topic("orders")
    _orders(store, "new", 3)
    with pytest.raises(UnknownTopicIdError):
        c.commit({TP: OffsetAndMetadata(2)})
    assert store.offsets_topic.committed("g") == {}
    c.unsubscribe()
    c.subscribe(["orders"])
    assert len(_values(c.poll(max_records=100))) == 3
    c.commit()
    assert store.offsets_topic.committed("g") == {TP: OffsetAndMetadata(3)}
    assert store.offsets_topic.committed_topic_ids("g") == {TP: store.log_manager.topic_id("orders")}


def test_describe_names_an_offset_committed_on_an_earlier_topic_of_the_name(store, capsys):
    store.create_topic("orders")
    _orders(store, "old", 4)
    store.offsets_topic.commit("g", {TP: 4}, 1)
    old_id = store.log_manager.topic_id("orders")
    # a delete whose second step (removing the groups' offsets, as Kafka's coordinator does) never ran: the process
    # died between the two
    store.log_manager.delete_topic("orders")
    store.create_topic("orders")
    (row,) = store.describe_consumer_group("g")
    assert (row.current_offset, row.topic_id, row.stale) == (4, old_id, True)
    code, out, err = run_cli(capsys, "--store", store.root, "consumer-groups", "--describe", "--group", "g")
    assert code == 0 and f"STALE: orders-0: offset 4 was committed on the topic with id {old_id}" in err
    code, out, _ = run_cli(capsys, "--store", store.root, "consumer-groups", "--describe", "--group", "g",
                           "--output", "json")
    assert [(r["topic_id"], r["stale"]) for r in json_lines(out)] == [(old_id, True)]
    store.offsets_topic.commit("g", {TP: 0}, 2)  # a commit on the topic as it is now
    assert [r.stale for r in store.describe_consumer_group("g")] == [False]


def test_kafka_metadata_v10_and_later_carry_the_topic_id(store):
    store.create_topic("orders")
    apis = KafkaApis(store, ("127.0.0.1", 9092))

    def ids(version: int) -> dict[str, object]:
        req = MetadataRequest[version](topics=None, allow_auto_topic_creation=False,
                                       **({"include_topic_authorized_operations": False} if version >= 8 else {}))
        req.with_header(correlation_id=1, client_id="raw")
        answer = apis.handle_metadata(protocol.parse_request(bytes(req.encode(header=True, framed=True))[4:]))
        return {t.name: getattr(t, "topic_id", None) for t in answer.topics}

    first = ids(12)["orders"]
    assert first == uuid.UUID(hex=store.log_manager.topic_id("orders"))
    store.delete_topic("orders")
    store.create_topic("orders")
    assert ids(12)["orders"] not in (None, first)  # a client sees the topic was made again
    assert ids(9)["orders"] is None
