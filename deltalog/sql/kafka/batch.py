"""``spark.read.format("deltalog")``: the batch reader (Spark's ``KafkaRelation`` / ``KafkaBatch``).

Spark's Kafka relation binds late: each action resolves ``earliest``/``latest`` (and timestamps) again, so
running the same DataFrame after appends or after DeleteRecords reads the current range. A Python data source
is planned once per DataFrame (pyspark keeps the planned partitions with the DataFrame's plan and reuses them
for every action), so the tasks planned here carry no offsets or files: each names a topic partition and a
fixed share of its offset space, ``[lo, hi)`` (None: open), and resolves the range, the Delta snapshot and the
files it reads when it runs. The planning resolves everything once too, so that bad options and offsets fail
on the driver side before any task runs, and so that ``minPartitions`` can cut each partition's offsets into
shares (Spark's ``KafkaOffsetRangeCalculator``): the boundaries between shares lie inside the range found then,
and a log only grows past them, so the shares of a later action still cover the range without gap or overlap
(what was appended since lands in each partition's last share).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from deltalog.errors import InvalidArgumentError, OffsetOutOfRangeError
from deltalog.log.offsets_by_time import offset_for_time
from deltalog.sql.kafka.options import EARLIEST, LATEST, Options
from deltalog.sql.kafka.plan import (
    Bounds,
    OffsetRange,
    TopicLogs,
    no_offset_matched,
    report_data_loss,
    resolve_offset,
    time_for,
)
from deltalog.sql.kafka.reads import cast_batches, read_range, to_kafka_rows
from deltalog.sql.source import MAX_TASK_BYTES, MIN_TASK_BYTES, file_slices

# -- batch read ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """One task of a batch read: a topic partition and its share ``[lo, hi)`` of the offsets (None: open)."""

    topic: str
    partition: int
    lo: int | None = None
    hi: int | None = None


@dataclass
class Resolved:
    """A partition's range as resolved now: its log, snapshot, transaction view and ``[start, end)``."""

    log: Any
    snap: Any
    view: Any
    start: int
    end: int


def resolve(opts: Options, logs: TopicLogs, topic: str, partition: int) -> Resolved:
    """``[start, end)`` of one partition as the options say, on its current Delta version: Spark's
    ``KafkaOffsetReader.getOffsetRangesFromUnresolvedOffsets`` and its checks. Timestamps resolve to the
    earliest offset at or after them (:mod:`deltalog.log.offsets_by_time`); a start with none is an error, or
    the latest offset with ``startingOffsetsByTimestampStrategy=latest``; an end with none is the latest."""
    log = logs.logs.log(topic, partition)
    snap = log.snapshot()
    view = log.txn_index(snap).view(opts.isolation_level)
    latest = view.upper
    if opts.mode == "current":
        return Resolved(log, snap, view, snap.log_start_offset, latest)
    ts = time_for(opts, topic, partition, starting=True)
    if ts is not None:
        found = offset_for_time(log, ts, snapshot=snap, upto=latest)
        if found is None and opts.on_no_match == "error":
            raise no_offset_matched(topic, partition, ts)
        start = latest if found is None else found
    else:
        spec = resolve_offset(opts.starting, "earliest", topic, partition, "startingOffsets")
        if spec == LATEST:
            raise InvalidArgumentError(f"startingOffsets for {topic}-{partition} can't be latest (-1) for "
                                       "batch queries")
        start = snap.log_start_offset if spec == EARLIEST else spec
    ts = time_for(opts, topic, partition, starting=False)
    if ts is not None:
        found = offset_for_time(log, ts, snapshot=snap, upto=latest)
        end = latest if found is None else found
    else:
        spec = resolve_offset(opts.ending, "latest", topic, partition, "endingOffsets")
        if spec == EARLIEST:
            raise InvalidArgumentError(f"endingOffsets for {topic}-{partition} can't be earliest (-2) for "
                                       "batch queries")
        end = latest if spec == LATEST else spec
    if end > snap.log_end_offset:
        raise OffsetOutOfRangeError(
            f"endingOffsets {end} of {topic}-{partition} is past its log end offset {snap.log_end_offset}",
            log_start_offset=snap.log_start_offset, log_end_offset=snap.log_end_offset)
    if start > end:
        raise InvalidArgumentError(
            f"[RESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] The resolved start offset {start} is greater than the "
            f"resolved end offset {end} for topic {topic} partition {partition}. There may be multiple reasons: "
            "1. Start offset is set to too big a value that after resolution, end offset is smaller than it "
            "(a start timestamp with an end offset, a start offset with an end timestamp, or a start offset past "
            f"the latest offset, {latest} here). 2. The Kafka topic partition is broken.")
    if start < snap.log_start_offset:
        report_data_loss(opts, f"offsets [{start}, {min(end, snap.log_start_offset)}) of {topic}-{partition} "
                               f"are below its log start offset {snap.log_start_offset}")
        start = snap.log_start_offset
    return Resolved(log, snap, view, start, max(start, end))


def shares(ranges: list[tuple[str, int, int, int, int]], min_partitions: int | None,
           explicit: bool = True) -> list[Share]:
    """The tasks for resolved ranges ``(topic, partition, start, end, bytes)``: one per partition, as Spark's
    Kafka source, unless ``minPartitions`` asks for more (then each partition gets shares in proportion to its
    offsets, at least one, Spark's ``KafkaOffsetRangeCalculator``, rounded up so that there are at least
    ``minPartitions`` of them, cut inside a file where needed) or a partition holds more than a task's bytes
    (:data:`~deltalog.sql.source.MAX_TASK_BYTES`). When ``min_partitions`` is only the session's parallelism
    (not ``explicit``), no share is cut smaller than :data:`~deltalog.sql.source.MIN_TASK_BYTES`: a small
    read stays one task per partition."""
    total = sum(max(end - start, 0) for _, _, start, end, _ in ranges)
    out = []
    for topic, partition, start, end, size_bytes in ranges:
        size = max(end - start, 0)
        parts = 1
        if min_partitions and min_partitions > len(ranges) and total > 0:
            parts = max(-(-min_partitions * size // total), 1)
            if not explicit:
                parts = min(parts, max(-(-size_bytes // MIN_TASK_BYTES), 1))
        parts = max(parts, min(-(-size_bytes // MAX_TASK_BYTES), size) if size else 1)
        cuts = [start + size * i // parts for i in range(1, parts)]
        bounds = [None, *cuts, None]
        out += [Share(topic, partition, bounds[i], bounds[i + 1]) for i in range(parts)]
    return out


class DeltalogBatchReader(DataSourceReader):
    """``spark.read.format("deltalog")``: one task per topic partition, or more when ``minPartitions`` (by
    default the session's parallelism) asks for more or a partition is bigger than a task's bytes; each task
    resolves its range on the latest Delta version of its partition when it runs (see the module docstring)."""

    def __init__(self, opts: Options, schema: StructType, parallelism: int = 1) -> None:
        self.opts = opts
        self.schema = schema
        self.bounds = Bounds()
        self.min_partitions = opts.min_partitions or parallelism

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - pyspark's name
        """Prune by ``topic``/``partition``/``offset`` comparisons; every filter is still applied by Spark."""
        if self.opts.push_filters:
            for f in filters:
                self.bounds.push(f)
        return filters

    def _check(self) -> None:
        opts = self.opts
        if opts.mode == "current" and (opts.starting is not None or opts.ending is not None
                                       or opts.starts_by_time or opts.ends_by_time):
            raise InvalidArgumentError("option mode=current reads the latest state; it takes no startingOffsets "
                                       "or endingOffsets (nor their timestamp forms)")
        if opts.starting == "latest" and not opts.starts_by_time:
            raise InvalidArgumentError("startingOffsets can't be latest for batch queries (use earliest or JSON)")

    def _narrow(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` within the offsets pushed filters allow (a current-state read takes every offset:
        the current state of a key depends on all its records)."""
        b = self.bounds
        if self.opts.mode == "log":
            start = max(start, b.offset_lo) if b.offset_lo is not None else start
            end = min(end, b.offset_hi) if b.offset_hi is not None else end
        return start, end

    def partitions(self) -> list[InputPartition]:
        self._check()
        logs = TopicLogs(self.opts)
        ranges = []
        for topic, partition in logs.topic_partitions(self.opts):
            if not self.bounds.allows(topic, partition):
                continue
            r = resolve(self.opts, logs, topic, partition)
            start, end = self._narrow(r.start, r.end)
            size_bytes = sum(s.size_bytes for s in file_slices(r.log.uri, partition, r.snap.files, from_offset=start,
                                                               to_offset=end, view=r.view)) if end > start else 0
            ranges.append((topic, partition, start, end, size_bytes))
        if self.opts.mode == "current":
            return [InputPartition(Share(t, p)) for t, p, _, _, _ in ranges]
        return [InputPartition(s) for s in shares(ranges, self.min_partitions, self.opts.min_partitions is not None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        share = partition.value
        if share is None:  # Spark's stand-in when there are no tasks
            return
        opts = self.opts
        r = resolve(opts, TopicLogs(opts), share.topic, share.partition)  # late binding: this action's range
        start, end = self._narrow(r.start, r.end)
        start = start if share.lo is None else max(start, share.lo)
        end = end if share.hi is None else min(end, share.hi)
        if end <= start:
            return
        current = opts.mode == "current"
        clean_upto = max(r.snap.first_dirty_offset, r.snap.log_start_offset) if current else None
        slices = file_slices(r.log.uri, share.partition, r.snap.files, from_offset=start, to_offset=end, view=r.view)
        task = OffsetRange(share.topic, share.partition, [s.to_list() for s in slices], clean_upto)
        for table in read_range(opts.storage(), task, current, opts.include_headers):
            rows = to_kafka_rows(table, share.topic, share.partition, opts.include_headers)
            yield from cast_batches(rows, self.schema)
