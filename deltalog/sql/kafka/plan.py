"""Planning a read on the driver side: the topic partitions assigned, the offsets resolved, the data-loss rule,
and the offset ranges cut into tasks (with the filter pushdown that may narrow them)."""


from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from deltalog.errors import DataLossError, InvalidArgumentError
from deltalog.sql.kafka.options import EARLIEST, LATEST, Options
from deltalog.sql.source import FileSlice, plan_tasks

# -- the store, on the driver side ---------------------------------------------------------------------------


class TopicLogs:
    """The store's topics and partition logs, opened lazily where a reader or writer plans (never pickled)."""

    def __init__(self, opts: Options) -> None:
        from deltalog.clock import WallClock
        from deltalog.log.log_manager import LogManager

        self.logs = LogManager(opts.storage(), WallClock(), create=False)

    def topic_partitions(self, opts: Options) -> list[tuple[str, int]]:
        """The topic partitions a read is assigned, in (topic, partition) order."""
        opts.require_strategy()
        if opts.strategy == "assign":
            out = []
            for topic, parts in opts.assign.items():
                existing = set(self.logs.partitions(topic))  # raises for an unknown topic
                missing = [p for p in parts if p not in existing]
                if missing:
                    raise InvalidArgumentError(f"option 'assign': topic {topic!r} has no partition "
                                               f"{', '.join(map(str, missing))}; its partitions are "
                                               f"{sorted(existing)}")
                out += [(topic, p) for p in parts]
            return sorted(out)
        if opts.strategy == "subscribe":
            topics = opts.subscribe
            for t in topics:
                self.logs.partitions(t)  # raises for an unknown topic, naming it
        else:
            pattern = re.compile(opts.pattern or "")
            topics = [t for t in self.logs.list_topics() if pattern.fullmatch(t)]
        return sorted((t, p) for t in set(topics) for p in self.logs.partitions(t))


def resolve_offset(spec: str | dict[str, dict[int, int]] | None, default: str, topic: str, partition: int,
             name: str) -> int:
    """The EARLIEST/LATEST sentinel or offset ``spec`` gives one partition."""
    if spec is None:
        spec = default
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    parts = spec.get(topic)
    if parts is None or partition not in parts:
        raise InvalidArgumentError(
            f"option {name!r} gives specific offsets, so it must list every assigned partition (-2: earliest, -1: "
            f"latest); {topic}-{partition} is missing")
    return parts[partition]


def time_for(opts: Options, topic: str, partition: int, starting: bool) -> int | None:
    """The timestamp the options give a partition's start (or end), or None when it is given by offset."""
    single = opts.starting_timestamp if starting else opts.ending_timestamp
    if single is not None:
        return single
    per = opts.starting_by_timestamp if starting else opts.ending_by_timestamp
    if per is None:
        return None
    name = "startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"
    if partition not in per.get(topic, {}):
        position = "start" if starting else "end"
        raise InvalidArgumentError(
            f"[KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED] Partitions specified for Kafka timestamp based "
            f"{position} offsets don't match what are assigned: option {name!r} must list every assigned partition; "
            f"{topic}-{partition} is missing")
    return per[topic][partition]


def no_offset_matched(topic: str, partition: int, timestamp_ms: int) -> InvalidArgumentError:
    """Spark's error for a starting timestamp no record is at or after (``startingOffsetsByTimestampStrategy``
    ``error``, the default)."""
    return InvalidArgumentError(f"No offset matched from request of topic-partition {topic}-{partition} and "
                                f"timestamp {timestamp_ms}. (Set startingOffsetsByTimestampStrategy to 'latest' to "
                                "start such a partition at its latest offset.)")


def report_data_loss(opts: Options, message: str) -> None:
    """Kafka's ``reportDataLoss``: fail, or go on without the lost records (the caller skips them)."""
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because it is not in the log any more (retention or "
            "DeleteRecords removed it). If you want the query to go on without it, set the source option "
            "failOnDataLoss to false.")
    import logging

    logging.getLogger(__name__).warning("%s; skipped (failOnDataLoss=false)", message)


def plan_ranges(planned: Sequence[tuple[str, int, list[FileSlice], int | None]], min_partitions: int,
            current: bool = False) -> list[InputPartition]:
    """The tasks of a read: one per topic partition (Kafka's source maps them one to one), unless the
    partitions are fewer than ``min_partitions`` (option ``minPartitions``, by default the session's
    parallelism): then each partition's files are cut into runs, as many as its share of the bytes
    (Kafka's ``KafkaOffsetRangeCalculator``), so a read of one big partition does not run on one core. A
    current-state read keeps each partition in one task (its keys are deduplicated together)."""
    sizes = [sum(s.size_bytes for s in slices) for _, _, slices, _ in planned]
    total = sum(sizes)
    split = not current and min_partitions > len(planned) and total > 0
    tasks: list[InputPartition] = []
    for (topic, partition, slices, clean_upto), size in zip(planned, sizes, strict=True):
        if not slices:
            continue
        if current:
            groups = [slices]
        else:
            groups = plan_tasks(slices, max(1, -(-min_partitions * size // total)) if split else 1)
        tasks += [InputPartition(OffsetRange(topic, partition, [s.to_list() for s in g], clean_upto)) for g in groups]
    return tasks




@dataclass(frozen=True)
class OffsetRange:
    """One task's share of a topic partition: its slices (the files covering the range), as plain lists."""

    topic: str
    partition: int
    slices: list[list[Any]]
    clean_upto: int | None = None  # current-state reads: offsets below this are the clean section


# -- filter pushdown -----------------------------------------------------------------------------------------


@dataclass
class Bounds:
    """What pushed filters allow: topics, partitions and an offset range (None: anything)."""

    topics: set[str] | None = None
    partitions: set[int] | None = None
    partition_lo: int | None = None
    partition_hi: int | None = None  # exclusive
    offset_lo: int | None = None
    offset_hi: int | None = None  # exclusive

    def push(self, f: Filter) -> None:
        attr = getattr(f, "attribute", None)
        if attr == ("topic",):
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                self.topics = {f.value} & self.topics if self.topics is not None else {f.value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                self.topics = set(f.value) & self.topics if self.topics is not None else set(f.value)
        elif attr in (("partition",), ("offset",)):
            lo, hi, values = _range_of(f)
            if attr == ("partition",):
                if values is not None:
                    self.partitions = values & self.partitions if self.partitions is not None else values
                self.partition_lo = _tighter(self.partition_lo, lo, max)
                self.partition_hi = _tighter(self.partition_hi, hi, min)
            else:
                if values is not None:
                    lo, hi = (min(values), max(values) + 1) if values else (0, 0)
                self.offset_lo = _tighter(self.offset_lo, lo, max)
                self.offset_hi = _tighter(self.offset_hi, hi, min)

    def allows(self, topic: str, partition: int) -> bool:
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions)
                and (self.partition_lo is None or partition >= self.partition_lo)
                and (self.partition_hi is None or partition < self.partition_hi))


def _tighter(a: int | None, b: int | None, pick: Any) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


def _range_of(f: Filter) -> tuple[int | None, int | None, set[int] | None]:
    """[lo, hi) and/or the exact values an integer comparison allows (all None: not an integer comparison)."""
    value = getattr(f, "value", None)
    if isinstance(f, In):
        if value is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return None, None, set(value)
        return None, None, None
    if not isinstance(value, int) or isinstance(value, bool):
        return None, None, None
    if isinstance(f, EqualTo):
        return value, value + 1, {value}
    if isinstance(f, GreaterThan):
        return value + 1, None, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None, None
    if isinstance(f, LessThan):
        return None, value, None
    if isinstance(f, LessThanOrEqual):
        return None, value + 1, None
    return None, None, None


