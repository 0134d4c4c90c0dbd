"""``spark.read.format("deltalog")``: the batch reader (Spark's ``KafkaRelation``)."""


from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import (
    StructType,
)

from deltalog.errors import InvalidArgumentError, OffsetOutOfRangeError
from deltalog.sql.kafka.options import EARLIEST, LATEST, Options
from deltalog.sql.kafka.plan import Bounds, TopicLogs, plan_ranges, report_data_loss, resolve_offset
from deltalog.sql.kafka.reads import cast_batches, read_range, to_kafka_rows
from deltalog.sql.source import FileSlice, file_slices

# -- batch read ------------------------------------------------------------------------------------------


class DeltalogBatchReader(DataSourceReader):
    """``spark.read.format("deltalog")``: one task per topic partition with records in range, or more when the
    partitions are fewer than ``minPartitions`` (by default the session's parallelism) or one is bigger than a
    task's share of bytes; planned on the latest Delta version of each partition."""

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

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        if opts.mode == "current" and (opts.starting is not None or opts.ending is not None):
            raise InvalidArgumentError("option mode=current reads the latest state; it takes no startingOffsets "
                                       "or endingOffsets")
        if opts.starting == "latest":
            raise InvalidArgumentError("startingOffsets can't be latest for batch queries (use earliest or JSON)")
        store = TopicLogs(opts)
        planned: list[tuple[str, int, list[FileSlice], int | None]] = []
        for topic, partition in store.topic_partitions(opts):
            if not self.bounds.allows(topic, partition):
                continue
            log = store.logs.log(topic, partition)
            snap = log.snapshot()
            view = log.txn_index(snap).view(opts.isolation_level)
            if opts.mode == "current":
                start, end = snap.log_start_offset, view.upper
            else:
                start = resolve_offset(opts.starting, "earliest", topic, partition, "startingOffsets")
                end = resolve_offset(opts.ending, "latest", topic, partition, "endingOffsets")
                if start == LATEST:
                    raise InvalidArgumentError(f"startingOffsets for {topic}-{partition} can't be latest (-1) for "
                                               "batch queries")
                if end == EARLIEST:
                    raise InvalidArgumentError(f"endingOffsets for {topic}-{partition} can't be earliest (-2) for "
                                               "batch queries")
                start = snap.log_start_offset if start == EARLIEST else start
                end = view.upper if end == LATEST else end
                if start < snap.log_start_offset:
                    report_data_loss(opts, f"offsets [{start}, {min(end, snap.log_start_offset)}) of {topic}-{partition} "
                                     f"are below its log start offset {snap.log_start_offset}")
                    start = snap.log_start_offset
                if end > snap.log_end_offset:
                    raise OffsetOutOfRangeError(
                        f"endingOffsets {end} of {topic}-{partition} is past its log end offset {snap.log_end_offset}",
                        log_start_offset=snap.log_start_offset, log_end_offset=snap.log_end_offset)
            b = self.bounds
            if opts.mode == "log":  # the current state of a key depends on all its records: no offset pruning
                start = max(start, b.offset_lo) if b.offset_lo is not None else start
                end = min(end, b.offset_hi) if b.offset_hi is not None else end
            if end <= start:
                continue
            clean_upto = max(snap.first_dirty_offset, snap.log_start_offset) if opts.mode == "current" else None
            planned.append((topic, partition, file_slices(log.uri, partition, snap.files, from_offset=start,
                                                          to_offset=end, view=view), clean_upto))
        return plan_ranges(planned, self.min_partitions, opts.mode == "current")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r = partition.value
        if r is None:  # Spark's stand-in when there are no tasks
            return
        storage = self.opts.storage()
        for table in read_range(storage, r, self.opts.mode == "current", self.opts.include_headers):
            rows = to_kafka_rows(table, r.topic, r.partition, self.opts.include_headers)
            yield from cast_batches(rows, self.schema)


