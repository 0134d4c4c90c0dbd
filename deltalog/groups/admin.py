"""What ``kafka-consumer-groups.sh`` and Kafka's AdminClient do with groups: list them, describe their offsets and
lag, reset their offsets, delete them. Every change is an offset commit (or tombstones) in ``__consumer_offsets``.

deltalog has no group membership (see :mod:`deltalog.groups.consumer`), so a group is never "active": Kafka refuses
to reset or delete a group with live members, deltalog cannot know of any, and the last writer wins. Stop the
group's consumers first, as Kafka's tool asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from deltalog.errors import GroupIdNotFoundError, InvalidArgumentError, shown
from deltalog.groups.offsets_topic import OffsetsTopic, as_topic_partition, validate_group_id
from deltalog.log.log_manager import LogManager
from deltalog.structs import OffsetAndMetadata, TopicPartition

TO_EARLIEST = "earliest"
TO_LATEST = "latest"


@dataclass(frozen=True)
class PartitionOffsets:
    """One row of ``kafka-consumer-groups --describe``: a committed offset against the partition's log end.
    ``log_end_offset`` and ``lag`` are None when the topic or partition no longer exists."""

    group: str
    topic: str
    partition: int
    current_offset: int
    log_end_offset: int | None
    lag: int | None
    metadata: str

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "partition": self.partition,
                "current_offset": self.current_offset, "log_end_offset": self.log_end_offset, "lag": self.lag,
                "metadata": self.metadata}


def list_groups(offsets: OffsetsTopic) -> list[str]:
    """The groups with committed offsets, sorted (Kafka lists every group the coordinator knows; a group without
    members or offsets is gone from Kafka too once it expires)."""
    return offsets.groups()


def group_offsets(offsets: OffsetsTopic, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets; :class:`GroupIdNotFoundError` if it has none."""
    found = offsets.committed(validate_group_id(group_id))
    if not found:
        raise GroupIdNotFoundError(f"The consumer group {group_id!r} does not exist (it has no committed offsets); "
                                   f"groups: {', '.join(offsets.groups()) or 'none'}")
    return found


def describe_group(logs: LogManager, offsets: OffsetsTopic, group_id: str) -> list[PartitionOffsets]:
    """Per committed partition: the offset, the log end offset and the lag (log end - committed, as Kafka's tool
    computes it: it counts offsets, so records compaction removed below the log end still count)."""
    rows = []
    for tp, om in group_offsets(offsets, group_id).items():
        end = None
        if logs.topic_exists(tp.topic) and tp.partition in logs.partitions(tp.topic):
            end = logs.log(tp.topic, tp.partition).head().log_end_offset
        rows.append(PartitionOffsets(group_id, tp.topic, tp.partition, om.offset, end,
                                     None if end is None else max(0, end - om.offset), om.metadata))
    return rows


def reset_plan(logs: LogManager, offsets: OffsetsTopic, group_id: str, partitions: Iterable[TopicPartition],
               to: str | int, *, warn: Any = None) -> dict[TopicPartition, OffsetAndMetadata]:
    """The new offsets of ``--reset-offsets``: ``to`` is ``"earliest"`` (the log start), ``"latest"`` (the log end)
    or an offset, which, as Kafka's tool does, is clamped into [log start, log end] (``warn(message)`` is told)."""
    validate_group_id(group_id)
    if isinstance(to, bool) or not (to in (TO_EARLIEST, TO_LATEST) or (isinstance(to, int) and to >= 0)):
        raise InvalidArgumentError(f"the offset to reset to must be 'earliest', 'latest' or a whole number >= 0, "
                                   f"not {shown(to)}")
    plan: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp in map(as_topic_partition, partitions):
        head = logs.log(tp.topic, tp.partition).head()  # raises for a topic or partition that does not exist
        if to == TO_EARLIEST:
            new = head.log_start_offset
        elif to == TO_LATEST:
            new = head.log_end_offset
        else:
            assert isinstance(to, int)
            new = min(max(to, head.log_start_offset), head.log_end_offset)
            if new != to and warn is not None:
                which = "higher than latest" if to > head.log_end_offset else "lower than earliest"
                warn(f"New offset ({to}) is {which} offset for topic partition {tp}. Value will be set to {new}")
        plan[tp] = OffsetAndMetadata(new)
    return plan


def alter_offsets(offsets: OffsetsTopic, group_id: str, new: Mapping[TopicPartition, OffsetAndMetadata | int],
                  now_ms: int) -> dict[TopicPartition, OffsetAndMetadata]:
    """Kafka's ``alterConsumerGroupOffsets``: commit ``new`` for the group (one append)."""
    batch = offsets.commit(group_id, new, now_ms)
    return {tp: om for tp, om in batch.offsets.items() if om is not None}


def delete_group(offsets: OffsetsTopic, group_id: str, now_ms: int) -> list[TopicPartition]:
    """Kafka's ``deleteConsumerGroups``: remove every committed offset of the group (tombstones, which the cleaner
    removes after ``delete.retention.ms``); returns the partitions it had offsets for."""
    had = list(group_offsets(offsets, group_id))
    offsets.delete(group_id, had, now_ms)
    return had


def delete_offsets(offsets: OffsetsTopic, group_id: str, partitions: Iterable[TopicPartition],
                   now_ms: int) -> list[TopicPartition]:
    """Kafka's ``deleteConsumerGroupOffsets``: remove the group's committed offsets of ``partitions``."""
    have = group_offsets(offsets, group_id)
    gone = [tp for tp in map(as_topic_partition, partitions) if tp in have]
    offsets.delete(group_id, gone, now_ms)
    return gone
