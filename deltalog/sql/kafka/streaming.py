"""``spark.readStream.format("deltalog")``: the micro-batch reader (Spark's ``KafkaMicroBatchStream``)."""


from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    StructType,
)

from deltalog.errors import InvalidArgumentError
from deltalog.log import transactions
from deltalog.log.offsets_by_time import offset_for_time
from deltalog.sql.kafka.options import EARLIEST, LATEST, Options
from deltalog.sql.kafka.plan import (
    TopicLogs,
    no_offset_matched,
    plan_ranges,
    report_data_loss,
    resolve_offset,
    time_for,
)
from deltalog.sql.kafka.reads import cast_batches, read_range, to_kafka_rows
from deltalog.sql.source import FileSlice, file_slices

# -- streaming read --------------------------------------------------------------------------------------


TopicPartition = tuple[str, int]


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Kafka's source offset, ``{"topic": {"0": next offset, ...}}``, built in one fixed order (Spark compares
    offsets by their JSON text)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), o in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = int(o)
    return out


def parse_offsets(offset: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in (offset or {}).items() for p, o in parts.items()}


def rate_limit(limit: int, begin: Mapping[TopicPartition, int],
               end: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Kafka's ``KafkaMicroBatchStream.rateLimit``: ``limit`` offsets shared by the partitions in proportion to
    what each has to read (a share below one offset rounds up, others down)."""
    sizes = {tp: e - begin.get(tp, e) for tp, e in end.items()}
    total = sum(v for v in sizes.values() if v > 0)
    if total <= limit:
        return dict(end)
    out = {}
    for tp, e in end.items():
        size = sizes[tp]
        if size <= 0:
            out[tp] = e
            continue
        share = limit * (size / total)
        out[tp] = min(e, begin[tp] + int(np.ceil(share) if share < 1 else np.floor(share)))
    return out


class DeltalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("deltalog")``: offsets are each partition's next offset to read; a micro-batch
    ``[start, end)`` is planned on the partition's current Delta version when Spark asks for it (also when it
    replays the batch after a restart), so a cleaning pass between batches only makes removed records absent.
    Runs in one long-lived process on the driver side; its tasks get everything through their partitions."""

    def __init__(self, opts: Options, schema: StructType, parallelism: int = 1) -> None:
        if opts.ending is not None:
            raise InvalidArgumentError("endingOffsets is not valid in streaming queries")
        if opts.ends_by_time:  # Spark: "ending timestamp not valid in streaming queries"
            raise InvalidArgumentError("endingOffsetsByTimestamp and endingTimestamp are not valid in streaming queries")
        if opts.mode != "log":
            raise InvalidArgumentError("mode=current is a batch read; a stream reads the log")
        opts.require_strategy()
        self.opts = opts
        self.schema = schema
        self.min_partitions = opts.min_partitions or parallelism
        self._store: TopicLogs | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "schema": self.schema, "min_partitions": self.min_partitions, "_store": None,
                "_available_now": None, "_latest": None}

    def _logs(self) -> TopicLogs:
        if self._store is None:
            self._store = TopicLogs(self.opts)
        return self._store

    def _log_ends(self) -> dict[TopicPartition, tuple[int, int]]:
        store = self._logs()
        out = {}
        for topic, p in store.topic_partitions(self.opts):
            log = store.logs.log(topic, p)
            if self.opts.isolation_level == transactions.READ_UNCOMMITTED:
                head = log.head()
                out[(topic, p)] = (head.log_start_offset, head.log_end_offset)
            else:  # a read_committed stream never passes the last stable offset
                snap = log.snapshot()
                out[(topic, p)] = (snap.log_start_offset, log.txn_index(snap).last_stable_offset)
        return out

    def initialOffset(self) -> dict:  # noqa: N802 - pyspark's names
        """Where a new query starts: ``startingOffsets`` (default ``latest``), or, given, the earliest offset at
        or after ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (a restarted query resumes from its
        checkpoint instead, as Spark's)."""
        offsets = {}
        for (topic, p), (start, end) in self._log_ends().items():
            ts = time_for(self.opts, topic, p, starting=True)
            if ts is not None:
                found = offset_for_time(self._logs().logs.log(topic, p), ts, upto=end)
                if found is None and self.opts.on_no_match == "error":
                    raise no_offset_matched(topic, p, ts)
                offsets[(topic, p)] = end if found is None else max(found, start)
                continue
            spec = resolve_offset(self.opts.starting, "latest", topic, p, "startingOffsets")
            offsets[(topic, p)] = start if spec == EARLIEST else end if spec == LATEST else spec
        return offsets_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._available_now = {tp: end for tp, (_, end) in self._log_ends().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        begin = parse_offsets(start)
        ends = self._log_ends()
        latest = {}
        for tp, (log_start, log_end) in ends.items():
            first = begin.setdefault(tp, log_start)  # a partition that appeared since: from its start
            end = log_end
            if self._available_now is not None:
                end = min(end, self._available_now.get(tp, first))
            latest[tp] = max(end, first)
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest)
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return None if self._latest is None else offsets_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = parse_offsets(start), parse_offsets(end)
        store = self._logs()
        planned: list[tuple[str, int, list[FileSlice], int | None]] = []
        for (topic, p), e in sorted(until.items()):
            log = store.logs.log(topic, p)
            snap = log.snapshot()
            s = begin.get((topic, p), snap.log_start_offset)
            if e <= s:
                continue
            if s < snap.log_start_offset:
                report_data_loss(self.opts, f"could not read records in offsets [{s}, {min(e, snap.log_start_offset)}) of "
                                      f"{topic}-{p}: they are below its log start offset {snap.log_start_offset}")
                s = snap.log_start_offset
                if e <= s:
                    continue
            planned.append((topic, p, file_slices(log.uri, p, snap.files, from_offset=s, to_offset=e,
                                                  view=log.txn_index(snap).view(self.opts.isolation_level)), None))
        return plan_ranges(planned, self.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r = partition.value
        if r is None:
            return
        for table in read_range(self.opts.storage(), r, False, self.opts.include_headers):
            yield from cast_batches(to_kafka_rows(table, r.topic, r.partition, self.opts.include_headers),
                                     self.schema)

    def commit(self, end: dict) -> None:
        """Nothing to do: the log keeps records for other readers (Kafka's source commits nothing either)."""


