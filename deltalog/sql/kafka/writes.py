"""``df.write`` / ``df.writeStream.format("deltalog")``: Spark's Kafka sink (``KafkaWriter``), staged by the
tasks and appended by the commit."""


from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from deltalog.errors import InvalidArgumentError
from deltalog.log.record import HEADERS, KEY, TIMESTAMP, VALUE
from deltalog.sql.kafka.options import HEADERS_TYPE, Options
from deltalog.sql.kafka.plan import TopicLogs
from deltalog.storage import Storage

#: Where a write's tasks stage their records until the commit appends them (relative to the store root).
STAGING_DIR = "_deltalog/sink"
#: App-id prefix of the Delta transaction identifiers a streaming write commits with.
SINK_APP_PREFIX = "deltalog.sink."
STAGED_SCHEMA = pa.schema([
    pa.field(KEY, pa.binary()),
    pa.field(VALUE, pa.binary()),
    pa.field(HEADERS, HEADERS_TYPE),
    pa.field(TIMESTAMP, pa.int64()),
])


# -- writes ------------------------------------------------------------------------------------------------


@dataclass
class StagedRecords(WriterCommitMessage):
    """What one write task staged: (topic, partition, staged file, records) per partition it sends to."""

    files: list[tuple[str, int, str, int]]


def _is_bytes(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)


def _column(table: pa.Table, name: str, allowed: str, check: Any) -> pa.ChunkedArray | None:
    if name not in table.column_names:
        return None
    column = table.column(name)
    if not check(column.type):
        raise InvalidArgumentError(f"{name} attribute unsupported type {column.type}. {name} must be a(n) {allowed}")
    return column


class _LazyLogs:
    """The store's :class:`~deltalog.log.log_manager.LogManager`, opened when first used: a write task whose
    topics the driver resolved never opens it."""

    def __init__(self, opts: Options) -> None:
        self._opts = opts
        self._logs: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._logs is None:
            self._logs = TopicLogs(self._opts).logs
        return getattr(self._logs, name)


def _topic_metadata(opts: Options) -> dict[str, tuple[int, Any]]:
    """The partition count and config of the ``topic`` option's topic, read once where the writer is made (the
    driver side) and handed to every task with the writer: without them each task opened the topic's first
    partition table (a Delta log read) before routing its first batch. A ``topic`` column's topics are read in
    the tasks, as they come."""
    if not opts.topic:
        return {}
    from deltalog.producer.router import PartitionRouter

    return {opts.topic: PartitionRouter(TopicLogs(opts).logs).topic_metadata(opts.topic)}


def _stage(opts: Options, batches: Iterable[pa.RecordBatch],
           topics: Mapping[str, tuple[int, Any]] | None = None) -> StagedRecords:
    """Route a task's rows to their topic partitions (Kafka's partitioner for rows with no ``partition``) and
    stage each partition's records as one Arrow IPC file; nothing is appended before the commit. ``topics``:
    partition counts and configs already known (:func:`_topic_metadata`)."""
    from deltalog.clock import WallClock
    from deltalog.producer.router import PARTITION, PartitionRouter

    producer = PartitionRouter(_LazyLogs(opts), topics=topics)  # type: ignore[arg-type]
    now_ms = WallClock().now_ms()
    parts: dict[tuple[str, int], list[pa.Table]] = {}
    for batch in batches:
        table = pa.Table.from_batches([batch])
        n = table.num_rows
        if not n:
            continue
        value = _column(table, VALUE, "string or binary", _is_bytes)
        if value is None:
            raise InvalidArgumentError("Required attribute 'value' not found")
        key = _column(table, KEY, "string or binary", _is_bytes)
        headers = _column(table, HEADERS, "array<struct<key:string,value:binary>>", pa.types.is_list)
        partition = _column(table, PARTITION, "int", pa.types.is_integer)
        records = {KEY: key if key is not None else pa.nulls(n, pa.binary()), VALUE: value}
        if headers is not None:
            records[HEADERS] = headers
        if partition is not None:
            records[PARTITION] = partition
        records_table = pa.table(records)
        if opts.topic:  # as Kafka's sink: the topic option overrides the column
            groups = [(opts.topic, records_table)]
        else:
            topics = _column(table, "topic", "string", pa.types.is_string)
            if topics is None:
                raise InvalidArgumentError("topic option required when no 'topic' attribute is present. Use the "
                                           "topic option for setting a topic.")
            if topics.null_count:
                raise InvalidArgumentError("null topic present in the data. Use the topic option for setting a "
                                           "default topic.")
            groups = [(t, records_table.filter(pc.equal(topics, t))) for t in pc.unique(topics).to_pylist()]
        for topic, rows in groups:
            validated, targets = producer.route(topic, rows, now_ms)
            sent = np.unique(targets).tolist()
            for p in sent:  # all to one partition (a one-partition topic): no filtered copy
                parts.setdefault((topic, p), []).append(
                    validated if len(sent) == 1 else validated.filter(pa.array(targets == p)))
    storage = opts.storage()
    files = []
    for (topic, p), tables in sorted(parts.items()):
        staged = pa.concat_tables(tables).select(STAGED_SCHEMA.names).cast(STAGED_SCHEMA)
        location = storage.location(STAGING_DIR, f"{uuid.uuid4().hex}.arrow")
        storage.write_bytes(location, _ipc_bytes(staged))
        files.append((topic, p, location, staged.num_rows))
    return StagedRecords(files)


def _ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC file: staged records are read once, whole, by the commit, so they are kept in
    Arrow's own layout: no Parquet encoding in the task, no decoding in the commit (docs/performance.md has what
    Parquet cost)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_staged(storage: Storage, locations: Sequence[str]) -> pa.Table:
    tables = [pa.ipc.open_file(pa.py_buffer(storage.read_bytes(loc))).read_all() for loc in locations]
    return pa.concat_tables(tables) if tables else STAGED_SCHEMA.empty_table()


def _commit(opts: Options, messages: Sequence[WriterCommitMessage | None], app_id: str | None = None,
            batch_id: int | None = None) -> None:
    """Append every partition's staged records in one Delta commit per partition (carrying the transaction
    identifier ``(app_id, batch_id)`` when given, so a replayed micro-batch appends nothing twice), then remove
    the staged files."""
    from deltalog.clock import WallClock

    staged: dict[tuple[str, int], list[str]] = {}
    for m in messages:
        if isinstance(m, StagedRecords):
            for topic, p, location, _ in m.files:
                staged.setdefault((topic, p), []).append(location)
    storage = opts.storage()
    try:
        store = TopicLogs(opts)
        now_ms = WallClock().now_ms()
        for (topic, p), locations in sorted(staged.items()):
            table = _read_staged(storage, locations)
            txn = (app_id, batch_id) if app_id is not None and batch_id is not None else None
            store.logs.log(topic, p).append(table, now_ms, app_transaction=txn)
    finally:
        _remove_staged(storage, messages)


def _remove_staged(storage: Storage, messages: Sequence[WriterCommitMessage | None]) -> None:
    locations = [f[2] for m in messages if isinstance(m, StagedRecords) for f in m.files]
    if locations:
        storage.delete_many(locations)


_BYTES_TYPES = (StringType, BinaryType)
_INT_TYPES = (ByteType, ShortType, IntegerType, LongType)


def check_schema(schema: StructType, opts: Options) -> None:
    """Spark's ``KafkaWriter.validateQuery``, on the driver side before any task runs (an empty DataFrame too):
    a topic (the option, else a string ``topic`` column), a ``value`` column of string or binary, and, when
    present, ``key`` (string or binary), ``headers`` (array<struct<key:string,value:binary>>) and ``partition``
    (an integer) of those types. The messages are Spark's."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}

    def unsupported(name: str, t: DataType, allowed: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{name} attribute unsupported type {t.simpleString()}. {name} must be a(n) "
                                    f"{allowed}")

    if not opts.topic:
        if "topic" not in fields:
            raise InvalidArgumentError("topic option required when no 'topic' attribute is present. Use the topic "
                                       "option for setting a topic.")
        if not isinstance(fields["topic"], StringType):
            raise unsupported("topic", fields["topic"], "string")
    if VALUE not in fields:
        raise InvalidArgumentError("Required attribute 'value' not found")
    for name in (KEY, VALUE):
        if name in fields and not isinstance(fields[name], _BYTES_TYPES):
            raise unsupported(name, fields[name], "string or binary")
    headers = fields.get(HEADERS)
    if headers is not None and not (
            isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]):
        raise unsupported(HEADERS, headers, "array<struct<key:string,value:binary>>")
    if "partition" in fields and not isinstance(fields["partition"], _INT_TYPES):
        raise unsupported("partition", fields["partition"], "int")


class DeltalogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("deltalog")``: tasks stage, the commit appends one Delta commit per partition."""

    def __init__(self, opts: Options, schema: StructType | None = None) -> None:
        if schema is not None:
            check_schema(schema, opts)
        self.opts = opts
        self.topics = _topic_metadata(opts)  # raises for an unknown topic, before any task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _stage(self.opts, iterator, self.topics)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.opts, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _remove_staged(self.opts.storage(), messages)


class DeltalogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("deltalog")``: as the batch writer, and each partition's commit carries the
    transaction identifier (``deltalog.sink.<query id>``, batchId): a restarted query never appends a
    micro-batch twice."""

    def __init__(self, opts: Options, schema: StructType | None = None) -> None:
        if schema is not None:
            check_schema(schema, opts)
        self.opts = opts
        self.app_id = sink_app_id(opts)
        if opts.topic:
            TopicLogs(opts).logs.partitions(opts.topic)  # raises for an unknown topic, before any task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _stage(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _commit(self.opts, messages, self.app_id, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _remove_staged(self.opts.storage(), messages)


def sink_app_id(opts: Options) -> str:
    """The app id of a streaming write's Delta transaction identifiers: ``transactional.id`` if given, else the
    query's id from its checkpoint (a new checkpoint is a new query, whose batch ids start again at 0)."""
    if opts.transactional_id:
        return SINK_APP_PREFIX + opts.transactional_id
    if not opts.checkpoint:
        raise InvalidArgumentError("writeStream.format('deltalog') needs option('checkpointLocation', ...) (or "
                                   "option('transactional.id', ...)) to commit each micro-batch exactly once")
    path = opts.checkpoint[len("file:"):] if opts.checkpoint.startswith("file:") else opts.checkpoint
    try:
        # The checkpoint is Spark's, on the driver's file system, not a store file.
        with open(path.rstrip("/") + "/metadata", encoding="utf-8") as f:  # noqa: PTH123
            return SINK_APP_PREFIX + str(json.loads(f.readline())["id"])
    except (OSError, ValueError, KeyError):
        return SINK_APP_PREFIX + hashlib.sha256(opts.checkpoint.encode()).hexdigest()[:32]


