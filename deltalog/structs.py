"""The small value types Kafka's Python clients pass around (``kafka.structs``): a topic partition, an offset with
its metadata, a consumer's group identity.

They are named tuples with kafka-python's field names and defaults, so code written against kafka-python reads
the same here, and a ``kafka.structs.TopicPartition("t", 0)`` is equal to (and hashes like) deltalog's.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A topic and a partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset the group will consume (last processed + 1), a free-form metadata string
    (at most ``offset.metadata.max.bytes`` of UTF-8) and the leader epoch (-1: none; deltalog has no leaders)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    """What ``offsets_for_times`` finds for a partition: the earliest offset whose record's timestamp is at or after
    the time asked for, and that record's timestamp (epoch ms), as kafka-python returns it."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """What a consumer hands a transactional producer's ``send_offsets_to_transaction`` (KIP-447): its group id and,
    in Kafka, its generation and member id. deltalog consumers have no group membership, so the generation is
    always -1 and the member id empty, as an unjoined kafka-python consumer reports them."""

    group_id: str | None
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class ConsumerRecord(NamedTuple):
    """One record as a consumer hands it out, with kafka-python's field names and order. ``timestamp`` is the
    record's timestamp in epoch ms (``timestamp_type`` 0: CreateTime, the producer's or the append's clock; 1:
    LogAppendTime, the topic's ``message.timestamp.type``: the append's clock);
    ``headers`` are ``(str, bytes)`` pairs; ``key`` and ``value`` are bytes (None: absent / a tombstone) unless the
    consumer was given deserializers. deltalog keeps no CRC or serialized sizes per record: ``checksum`` is None and
    the sizes are the byte lengths (-1 for None), as kafka-python reports them."""

    topic: str
    partition: int
    leader_epoch: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: object
    value: object
    headers: list[tuple[str, bytes]]
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


__all__ = ["ConsumerGroupMetadata", "ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition"]
