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

from deltalog.coordinator.group.offsets_topic import OffsetsTopic, as_topic_partition, validate_group_id
from deltalog.errors import (
    DeltalogError,
    GroupIdNotFoundError,
    InvalidArgumentError,
    UnknownTopicOrPartitionError,
    shown,
)
from deltalog.log import concurrent_reads
from deltalog.log.log_manager import LogManager
from deltalog.log.offsets_by_time import offset_for_time, validate_timestamp
from deltalog.log.partition_log import PartitionLog
from deltalog.structs import OffsetAndMetadata, TopicPartition

TO_EARLIEST = "earliest"
TO_LATEST = "latest"
TO_CURRENT = "current"


@dataclass(frozen=True)
class PartitionOffsets:
    """One row of ``kafka-consumer-groups --describe``: a committed offset against the partition's log end.
    ``log_end_offset`` and ``lag`` are None when the topic or partition no longer exists. ``topic_id`` is the id
    (KIP-516) of the topic the offset was committed on (None when the commit did not record one), and ``stale``
    says that the topic of that name now has another id: the offset belongs to a topic deleted and created again,
    and means nothing in the new one (reset it, ``--reset-offsets``)."""

    group: str
    topic: str
    partition: int
    current_offset: int
    log_end_offset: int | None
    lag: int | None
    metadata: str
    topic_id: str | None = None
    stale: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "partition": self.partition,
                "current_offset": self.current_offset, "log_end_offset": self.log_end_offset, "lag": self.lag,
                "metadata": self.metadata, "topic_id": self.topic_id, "stale": self.stale}


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
    computes it: it counts offsets, so records compaction removed below the log end still count). Each topic's marker
    is read once and the partitions' heads side by side (:func:`~deltalog.log.concurrent_reads.read_each`): a
    partition whose Delta log did not move since this process read it costs one look for its next commit's file."""
    ids = offsets.committed_topic_ids(group_id)
    committed = group_offsets(offsets, group_id)
    current: dict[str, str | None] = {}  # each existing topic's id now
    held: dict[TopicPartition, PartitionLog] = {}
    for topic in dict.fromkeys(tp.topic for tp in committed):
        try:
            topic_id, topic_logs = logs.current_logs(topic)
        except UnknownTopicOrPartitionError:
            continue
        current[topic] = topic_id if topic_id is not None else logs.topic_id(topic)
        held.update({tp: topic_logs[tp.partition] for tp in committed
                     if tp.topic == topic and tp.partition in topic_logs})
    ends = dict(zip(held, concurrent_reads.read_each(list(held.values()), lambda lg: lg.head().log_end_offset,
                                                  threads=logs.walk_threads), strict=True))
    rows = []
    for tp, om in committed.items():
        end = ends.get(tp)
        if isinstance(end, DeltalogError):
            raise end
        committed_on = ids.get(tp)
        stale = committed_on is not None and current.get(tp.topic) not in (None, committed_on)
        rows.append(PartitionOffsets(group_id, tp.topic, tp.partition, om.offset, end,
                                     None if end is None else max(0, end - om.offset), om.metadata,
                                     committed_on, stale))
    return rows


@dataclass(frozen=True)
class ToTime:
    """``--to-datetime`` / ``--by-duration``: the earliest offset whose timestamp is at or after ``timestamp_ms``."""

    timestamp_ms: int


@dataclass(frozen=True)
class ShiftBy:
    """``--shift-by N``: the committed offset moved by ``n`` (negative: back)."""

    n: int


ResetTo = str | int | ToTime | ShiftBy | Mapping[TopicPartition, int]


def reset_plan(logs: LogManager, offsets: OffsetsTopic, group_id: str, partitions: Iterable[TopicPartition],
               to: ResetTo, *, warn: Any = None) -> dict[TopicPartition, OffsetAndMetadata]:
    """The new offsets of ``--reset-offsets``, with the meanings of Kafka's ``ConsumerGroupCommand``
    (``prepareOffsetsToReset``); ``warn(message)`` is told what Kafka's tool warns about:

    * ``"earliest"`` / ``"latest"``: the log start / the log end;
    * ``"current"`` (``--to-current``): the committed offset; the log end for a partition without one;
    * an int (``--to-offset``), :class:`ShiftBy` (``--shift-by``: committed + n; a partition without a committed
      offset is an error) or a mapping of partition to offset (``--from-file``, whose partitions replace
      ``partitions``): clamped into [log start, log end] (Kafka's ``checkOffsetsRange``);
    * :class:`ToTime` (``--to-datetime``, ``--by-duration``): the earliest offset whose record's timestamp is at or
      after the time (:mod:`deltalog.log.offsets_by_time`); with none, the log end (Kafka's "falling back to latest
      known offset").
    """
    validate_group_id(group_id)
    if isinstance(to, Mapping):
        wanted = {as_topic_partition(tp): off for tp, off in to.items()}
        for tp, off in wanted.items():
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise InvalidArgumentError(f"the offset to reset {tp} to must be a whole number >= 0, not "
                                           f"{shown(off)}")
        partitions = list(wanted)
    elif isinstance(to, ToTime):
        validate_timestamp(to.timestamp_ms, "time to reset to")
    elif isinstance(to, ShiftBy):
        if isinstance(to.n, bool) or not isinstance(to.n, int):
            raise InvalidArgumentError(f"--shift-by takes a whole number of offsets, not {shown(to.n)}")
    elif isinstance(to, bool) or not (to in (TO_EARLIEST, TO_LATEST, TO_CURRENT) or (isinstance(to, int) and to >= 0)):
        raise InvalidArgumentError(f"the offset to reset to must be 'earliest', 'latest', 'current' or a whole "
                                   f"number >= 0, not {shown(to)}")
    tps = list(map(as_topic_partition, partitions))
    committed = offsets.committed(group_id, tps) if to == TO_CURRENT or isinstance(to, ShiftBy) else {}
    plan: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp in tps:
        log = logs.log(tp.topic, tp.partition)  # raises for a topic or partition that does not exist
        head = log.head()
        if to == TO_EARLIEST:
            new = head.log_start_offset
        elif to == TO_LATEST:
            new = head.log_end_offset
        elif to == TO_CURRENT:
            new = committed[tp].offset if tp in committed else head.log_end_offset
        elif isinstance(to, ToTime):
            found = offset_for_time(log, to.timestamp_ms)
            if found is None and warn is not None:
                warn(f"Partition {tp.partition} from topic {tp.topic} is empty. Falling back to latest known offset.")
            new = head.log_end_offset if found is None else found
        else:
            asked: Any
            if isinstance(to, ShiftBy):
                if tp not in committed:
                    raise InvalidArgumentError(f"Cannot shift offset for partition {tp} since there is no current "
                                               "committed offset")
                asked = committed[tp].offset + to.n
            else:
                asked = wanted[tp] if isinstance(to, Mapping) else to
            new = min(max(asked, head.log_start_offset), head.log_end_offset)
            if new != asked and warn is not None:
                which = "higher than latest" if asked > head.log_end_offset else "lower than earliest"
                warn(f"New offset ({asked}) is {which} offset for topic partition {tp}. Value will be set to {new}")
        plan[tp] = OffsetAndMetadata(new)
    return plan


def export_csv(plan: Mapping[TopicPartition, OffsetAndMetadata], group_id: str | None = None) -> str:
    """Kafka's ``--export`` CSV (``exportOffsetsToCsv``): one ``topic,partition,offset`` line per partition, or
    ``group,topic,partition,offset`` when ``group_id`` is given (Kafka's format for several groups)."""
    lead = "" if group_id is None else f"{group_id},"
    return "".join(f"{lead}{tp.topic},{tp.partition},{om.offset}\n" for tp, om in plan.items())


def parse_reset_csv(text: str, group_id: str, where: str = "the reset plan") -> dict[TopicPartition, int]:
    """The offsets for ``group_id`` in a ``--from-file`` CSV, in either of Kafka's formats (``topic,partition,offset``
    or ``group,topic,partition,offset``; Kafka's ``parseResetPlan``). A malformed line is an error naming it."""
    plan: dict[TopicPartition, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4:
            group, fields = fields[0], fields[1:]
        elif len(fields) == 3:
            group = group_id
        else:
            raise InvalidArgumentError(f"{where}, line {n}: expected topic,partition,offset or "
                                       f"group,topic,partition,offset, not {line!r}")
        topic, partition, offset = fields
        if not (partition.isdigit() and offset.isdigit()) or not topic:
            raise InvalidArgumentError(f"{where}, line {n}: the partition and offset must be whole numbers >= 0 "
                                       f"and the topic non-empty: {line!r}")
        if group == group_id:
            plan[TopicPartition(topic, int(partition))] = int(offset)
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
