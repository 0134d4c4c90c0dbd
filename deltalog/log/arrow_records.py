"""Records as Arrow columns: how :meth:`Store.append <deltalog.store.Store.append>` checks and writes a batch.

A producer that already holds its records as a ``pyarrow.Table`` or ``RecordBatch`` (columns ``key``,
``value``, optional ``headers`` and ``timestamp_ms``) appends it without building a Python
:class:`~deltalog.log.record.Record` per row; a list of Records is first turned into the same columns
(:func:`from_records`). Either way the checks are made on whole columns (null keys from the null count,
sizes from ``binary_length``, UTF-8 by a checked cast), naming the first offending row. Only JSON encodings are checked row by row
(through :func:`deltalog.log.encoding.check_bytes`), as they are for Records. Nothing is written unless the
whole batch passes. Measured on the benchmark's append case: see ``docs/benchmarks.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.config import TopicConfig
from deltalog.errors import InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from deltalog.log.encoding import check_bytes, encode_data
from deltalog.log.record import (
    BASE_SCHEMA,
    DELETE_HORIZON,
    HEADERS,
    KEY,
    OFFSET,
    RECORD_SCHEMA,
    SEGMENT,
    TIMESTAMP,
    VALUE,
    Record,
)

ArrowRecords = pa.Table | pa.RecordBatch

REQUIRED = (KEY, VALUE)
OPTIONAL = (HEADERS, TIMESTAMP)
_HEADERS_TYPE = RECORD_SCHEMA.field(HEADERS).type
_BYTES_TYPES = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


def is_arrow(records: object) -> bool:
    return isinstance(records, (pa.Table, pa.RecordBatch))


def from_records(records: Sequence[Record]) -> pa.Table:
    """:class:`Record` s as the Arrow columns :func:`validated` checks: one list per field, no check per
    record in Python beyond its type (keys and values are already bytes: ``Record`` normalizes them)."""
    if not all(issubclass(t, Record) for t in set(map(type, records))):
        i = next(i for i, r in enumerate(records) if not isinstance(r, Record))
        raise InvalidRecordError(f"record {i} is a {type(records[i]).__name__}, not a deltalog.Record", index=i)
    columns = {
        KEY: _binary(list(map(_KEY_OF, records))),
        VALUE: _binary(list(map(_VALUE_OF, records))),
        TIMESTAMP: pa.array(list(map(_TIMESTAMP_OF, records)), pa.int64()),
    }
    headers = list(map(_HEADERS_OF, records))
    if any(headers):
        columns[HEADERS] = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], _HEADERS_TYPE)
    return pa.table(columns)


def _binary(data: list[Any]) -> pa.Array:
    """Keys or values as a binary column; records a read decoded (``str``, JSON values:
    :func:`deltalog.log.encoding.decoded_records`) are encoded back, so what was read can be appended again."""
    try:
        return pa.array(data, pa.binary())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([encode_data(d) for d in data], pa.binary())


_KEY_OF, _VALUE_OF, _TIMESTAMP_OF, _HEADERS_OF = (attrgetter(a) for a in ("key", "value", "timestamp_ms", "headers"))


def validated(data: ArrowRecords, config: TopicConfig, topic: str, now_ms: int) -> pa.Table:
    """``data`` checked against the topic's rules and normalized to the columns ``key``, ``value`` (binary),
    ``headers`` and ``timestamp_ms`` (null timestamps become ``now_ms``); raises before anything is written."""
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    names = table.column_names
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise InvalidRecordError(f"an Arrow batch of records has the column(s) {', '.join(repeated)} more than once; "
                                 f"each of {', '.join(REQUIRED + OPTIONAL)} may appear once")
    missing = [c for c in REQUIRED if c not in names]
    unknown = [c for c in names if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        raise InvalidRecordError(
            f"an Arrow batch of records needs the columns {', '.join(REQUIRED)} and may have "
            f"{', '.join(OPTIONAL)}; {'missing: ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and unknown else ''}{'unknown: ' + ', '.join(unknown) if unknown else ''}"
        )
    n = table.num_rows
    key, value = (_as_binary(table.column(c), c) for c in REQUIRED)
    headers = _headers(table.column(HEADERS), n) if HEADERS in names else None
    if TIMESTAMP in names and not config.log_append_time:
        timestamps = _timestamps(table.column(TIMESTAMP), now_ms)
        _check_timestamp_bounds(timestamps, config, topic, now_ms)
    else:  # none given, or LogAppendTime: the appending writer's clock stamps every record
        timestamps = pa.array(np.full(n, now_ms, dtype=np.int64))

    if config.compact and key.null_count:
        i = _first(pc.is_null(key))
        raise InvalidRecordError(
            f"record {i} has no key; topic {topic!r} is compacted (cleanup.policy="
            f"{','.join(config.cleanup_policy)}) and every record on it needs a key", index=i
        )
    sizes = _lengths(key) + _lengths(value)
    if headers is not None:
        sizes += _header_sizes(headers, n)
    limit = config.max_message_bytes
    if n and int(sizes.max()) > limit:
        i = int(np.argmax(sizes > limit))
        raise RecordTooLargeError(
            f"record {i} is {int(sizes[i])} bytes, larger than max.message.bytes={limit} of topic {topic!r}",
            index=i,
        )
    for side, column in ((KEY, key), (VALUE, value)):
        _check_encoding(column, side, getattr(config, f"{side}_encoding"), getattr(config, f"{side}_schema"), topic)
    if headers is None:
        headers = _no_headers(n)
    return pa.table({KEY: key, VALUE: value, HEADERS: headers, TIMESTAMP: timestamps})


def records_to_table(records: Sequence[Record], offsets: Iterable[int], timestamps: Sequence[int],
                     segment: int) -> pa.Table:
    """Records as rows of the partition table, unchecked: for writing a data file directly (tests and
    notebooks that damage a table on purpose). Appends check them first (:func:`validated`)."""
    rows = from_records(records)
    if HEADERS not in rows.column_names:
        rows = rows.append_column(HEADERS, _no_headers(rows.num_rows))
    rows = rows.set_column(rows.schema.get_field_index(TIMESTAMP), TIMESTAMP, pa.array(timestamps, pa.int64()))
    return with_log_columns(rows, offsets, segment)


def _no_headers(n: int) -> pa.Array:
    """``n`` empty header lists, without a Python list per record."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], _HEADERS_TYPE.value_type),
                                    type=_HEADERS_TYPE)


def with_log_columns(rows: pa.Table, offsets: Iterable[int], segment: int) -> pa.Table:
    """The rows of :func:`validated` in the columns a plain append writes (:data:`BASE_SCHEMA`), with their
    offsets and segment."""
    n = rows.num_rows
    first = offsets[0] if isinstance(offsets, range) and n else 0
    return pa.table(
        {
            OFFSET: pa.array(np.arange(first, first + n, dtype=np.int64)) if isinstance(offsets, range)
            else pa.array(list(offsets), pa.int64()),
            KEY: rows.column(KEY),
            VALUE: rows.column(VALUE),
            HEADERS: rows.column(HEADERS),
            TIMESTAMP: rows.column(TIMESTAMP),
            SEGMENT: pa.array(np.full(n, segment, dtype=np.int64)),
            DELETE_HORIZON: pa.nulls(n, pa.int64()),
        },
        schema=BASE_SCHEMA,
    )


def _as_binary(column: pa.ChunkedArray, name: str) -> pa.Array:
    if column.type not in _BYTES_TYPES:
        raise InvalidRecordError(
            f"record column {name!r} is {column.type}; allowed: binary or string (stored as UTF-8), nulls allowed"
        )
    return column.combine_chunks().cast(pa.binary())


def _timestamps(column: pa.ChunkedArray, now_ms: int) -> pa.Array:
    if not pa.types.is_integer(column.type):
        raise InvalidRecordError(f"record column 'timestamp_ms' is {column.type}; allowed: integers (epoch ms)")
    ts = column.combine_chunks()
    if len(ts) and pc.min(ts).is_valid and pc.min(ts).as_py() < 0:
        i = _first(pc.less(ts, 0))
        raise InvalidRecordError(f"record {i}: timestamp_ms must be >= 0 and fit in 64 bits, not {ts[i].as_py()}",
                                 index=i)
    if ts.type == pa.uint64() and len(ts) and pc.max(ts).is_valid and pc.max(ts).as_py() >= 2**63:
        i = _first(pc.greater_equal(ts, pa.scalar(2**63, pa.uint64())))
        raise InvalidRecordError(f"record {i}: timestamp_ms must be >= 0 and fit in 64 bits, not {ts[i].as_py()}",
                                 index=i)
    return pc.fill_null(ts.cast(pa.int64()), now_ms)


def _check_timestamp_bounds(timestamps: pa.Array, config: TopicConfig, topic: str, now_ms: int) -> None:
    """Kafka's ``LogValidator.validateTimestamp`` for CreateTime: every timestamp within
    [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] of the appending writer's clock,
    or the whole batch is refused."""
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    lo, hi = max(now_ms - before, 0), min(now_ms + after, 2**63 - 1)
    if not len(timestamps) or (lo == 0 and hi == 2**63 - 1):
        return
    outside = pc.or_(pc.less(timestamps, lo), pc.greater(timestamps, hi))
    if not pc.any(outside).as_py():
        return
    i = _first(outside)
    raise InvalidTimestampError(
        f"record {i}: timestamp_ms {timestamps[i].as_py()} is out of range for topic {topic!r}: "
        f"message.timestamp.type=CreateTime allows [{lo}, {hi}], {now_ms} (the appending writer's clock) minus "
        f"message.timestamp.before.max.ms={before} to plus message.timestamp.after.max.ms={after}", index=i)


def _headers(column: pa.ChunkedArray, n: int) -> pa.Array:
    try:
        headers = column.combine_chunks().cast(_HEADERS_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise InvalidRecordError(
            f"record column 'headers' is {column.type}; allowed: list<struct<key: string, value: binary>>"
        ) from None
    names = pc.struct_field(pc.list_flatten(headers), [0])
    if names.null_count:
        i = int(pc.list_parent_indices(headers)[_first(pc.is_null(names))].as_py())
        raise InvalidRecordError(f"record {i}: a header name must be a str, not None", index=i)
    return pc.fill_null(headers, pa.scalar([], _HEADERS_TYPE)) if headers.null_count else headers


def _header_sizes(headers: pa.Array, n: int) -> np.ndarray:
    flat = pc.list_flatten(headers)
    if not len(flat):
        return np.zeros(n, dtype=np.int64)
    each = _lengths(pc.struct_field(flat, [0]).cast(pa.binary())) + _lengths(pc.struct_field(flat, [1]))
    return np.bincount(pc.list_parent_indices(headers).to_numpy(), weights=each, minlength=n).astype(np.int64)


def _lengths(column: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _first(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _check_encoding(column: pa.Array, side: str, encoding: str, schema_text: str, topic: str) -> None:
    if encoding == "bytes":
        return
    allowed = "UTF-8 text" if encoding == "string" else f"a JSON object matching {side}.schema"
    if encoding == "string":
        try:
            column.cast(pa.string())  # checks UTF-8 in C++; only a failing batch is searched row by row
            return
        except pa.ArrowInvalid:
            pass
    for i, data in enumerate(column.to_pylist()):
        if data is None:
            continue
        problem = check_bytes(data, encoding, schema_text)
        if problem:
            raise InvalidRecordError(
                f"record {i}: the {side} does not match {side}.encoding={encoding} of topic {topic!r}: "
                f"{problem}; allowed: {allowed} (or null)", index=i
            )
