"""Reading, in the tasks: a task's offset range of a partition table as Spark's Kafka source rows."""


from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from deltalog.log.record import HEADERS, KEY, OFFSET, TIMESTAMP, VALUE
from deltalog.sql.kafka.options import HEADERS_TYPE
from deltalog.sql.kafka.plan import OffsetRange
from deltalog.sql.source import FileSlice, read_slice
from deltalog.storage import Storage

#: CreateTime (Kafka's ``TimestampType.CREATE_TIME.id``): a record's timestamp is its own or the producer's clock.
CREATE_TIME = 0

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_READ_COLUMNS = [OFFSET, KEY, VALUE, HEADERS, TIMESTAMP]


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``KafkaRecordToRowConverter``)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER)))
    return StructType(fields)


# -- reading, in the tasks -----------------------------------------------------------------------------------


def to_kafka_rows(table: pa.Table, topic: str, partition: int, include_headers: bool) -> pa.Table:
    """Partition-table rows (offset, key, value, headers, timestamp_ms) as Spark Kafka source rows."""
    n = table.num_rows
    cols = {
        "key": table.column(KEY),
        "value": table.column(VALUE),
        "topic": pa.array([topic], pa.string()).take(pa.array(np.zeros(n, dtype=np.int32))),
        "partition": pa.array(np.full(n, partition, dtype=np.int32)),
        "offset": table.column(OFFSET),
        "timestamp": pc.cast(table.column(TIMESTAMP), pa.timestamp("ms", tz="UTC")),
        "timestampType": pa.array(np.full(n, CREATE_TIME, dtype=np.int32)),
    }
    if include_headers:  # Kafka's source gives a record without headers null, not an empty array
        headers = table.column(HEADERS).combine_chunks()
        empty = pc.equal(pc.list_value_length(headers), 0)
        cols["headers"] = pc.if_else(pc.fill_null(empty, True), pa.nulls(n, headers.type), headers)
    return pa.table(cols)


def read_range(storage: Storage, r: OffsetRange, current: bool, include_headers: bool = True) -> Iterator[pa.Table]:
    slices = [FileSlice.from_list(v) for v in r.slices]
    if not current:
        # headers only when the rows carry them: the column is a list of structs, the dearest to decode
        columns = _READ_COLUMNS if include_headers else [c for c in _READ_COLUMNS if c != HEADERS]
        for s in slices:
            for batch in read_slice(storage, s, columns):
                yield pa.Table.from_batches([batch])
        return
    yield _current_state(storage, slices, r.clean_upto)


def _read_all(storage: Storage, slices: Sequence[FileSlice]) -> pa.Table:
    tables = [pa.Table.from_batches([b]) for s in slices for b in read_slice(storage, s, _READ_COLUMNS)]
    if not tables:
        return pa.table({c: pa.array([], t) for c, t in (
            (OFFSET, pa.int64()), (KEY, pa.binary()), (VALUE, pa.binary()),
            (HEADERS, HEADERS_TYPE), (TIMESTAMP, pa.int64()))})
    return pa.concat_tables(tables, promote_options="permissive")


def _current_state(storage: Storage, slices: Sequence[FileSlice], clean_upto: int | None) -> pa.Table:
    """The latest non-tombstone record per key of one partition, as :mod:`deltalog.sql.views` computes it:
    the clean section (below the cleaner checkpoint) holds each key at most once, so only the dirty tail is
    deduplicated, and clean records whose key reappears in the tail are dropped."""
    upto = clean_upto if clean_upto is not None else 0
    rows = _read_all(storage, slices)
    rows = rows.filter(pc.is_valid(rows.column(KEY)))
    in_tail = pc.greater_equal(rows.column(OFFSET), upto)
    clean, tail = rows.filter(pc.invert(in_tail)), rows.filter(in_tail)
    latest = tail.group_by(KEY, use_threads=False).aggregate([(OFFSET, "max")]).column(f"{OFFSET}_max")
    tail = tail.filter(pc.is_in(tail.column(OFFSET), value_set=latest))
    clean = clean.filter(pc.invert(pc.is_in(clean.column(KEY), value_set=tail.column(KEY).combine_chunks())))
    out = pa.concat_tables([clean, tail])
    out = out.filter(pc.is_valid(out.column(VALUE)))
    return out.sort_by(OFFSET)


def cast_batches(table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    from pyspark.sql.pandas.types import to_arrow_schema  # the Arrow types this Spark version expects

    target = to_arrow_schema(schema, timezone="UTC")  # as pyspark's own reader plan converts timestamps
    for batch in table.to_batches(max_chunksize=10_000):
        yield batch.cast(target)


