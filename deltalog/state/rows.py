"""The state table's rows: the latest read_committed record of each key, decoded as the current-state view
decodes it (``<topic>_current``, :mod:`deltalog.sql.ddl`).

Kafka compacts on the raw key bytes (``SkimpyOffsetMap`` hashes them), so the state table keys its rows on
``(partition, key)`` as the log holds them: a ``bytes`` or ``string`` key is its own identity (a ``string`` key is
valid UTF-8, checked at append, so decoding is one-to-one); a ``json`` key is decoded to a struct of
``key.schema`` and its raw bytes are kept beside it in ``key_bytes``, since two texts of one object
(``{"a":1}``, ``{ "a": 1 }``) are two keys to Kafka.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log.record import HEADERS, KEY, OFFSET, RECORD_SCHEMA, TIMESTAMP, VALUE

if TYPE_CHECKING:
    from deltalog.config import TopicConfig

PARTITION = "partition"
KEY_BYTES = "key_bytes"
#: A column of the rows a refresh merges, never of the table: the record is a tombstone (its key's row goes).
DELETED = "_deleted"


def decoded_type(encoding: str, schema_text: str) -> pa.DataType:
    """The Arrow type of a key or value column: binary, string, or the struct of a ``json`` encoding's schema."""
    if encoding == "bytes":
        return pa.binary()
    if encoding == "string":
        return pa.string()
    from pyspark.sql.pandas.types import to_arrow_type  # pyspark's types: only topics with a json encoding

    from deltalog.schemas import parse_schema

    return to_arrow_type(parse_schema(schema_text))


def merge_keys(config: TopicConfig) -> tuple[str, str]:
    """The columns a row's identity is: the partition and the raw key (``key_bytes`` for a json key)."""
    return (PARTITION, KEY_BYTES if config.key_encoding == "json" else KEY)


def state_schema(config: TopicConfig) -> pa.Schema:
    """The state table's schema: the current-state view's columns (``partition, offset, key, value, headers,
    timestamp_ms``), plus ``key_bytes`` for a json key."""
    fields = [pa.field(PARTITION, pa.int32()), pa.field(OFFSET, pa.int64()),
              pa.field(KEY, decoded_type(config.key_encoding, config.key_schema)),
              pa.field(VALUE, decoded_type(config.value_encoding, config.value_schema)),
              RECORD_SCHEMA.field(HEADERS), pa.field(TIMESTAMP, pa.int64())]
    if config.key_encoding == "json":
        fields.insert(3, pa.field(KEY_BYTES, pa.binary()))
    return pa.schema(fields)


def latest_per_key(records: pa.Table) -> pa.Table:
    """Of ``records`` (one partition, visible to read_committed), the latest of each key; keyless ones left out
    (the cleaner drops them, the view never shows them)."""
    keyed = records.filter(pc.is_valid(records.column(KEY)))
    if keyed.num_rows == 0:
        return keyed
    latest = keyed.group_by(KEY, use_threads=False).aggregate([(OFFSET, "max")]).column(f"{OFFSET}_max")
    return keyed.filter(pc.is_in(keyed.column(OFFSET), value_set=latest))  # offsets are unique in a partition


def _decode(column: pa.ChunkedArray, encoding: str, dtype: pa.DataType) -> pa.Array:
    if encoding == "bytes":
        return column.combine_chunks()
    if encoding == "string":
        return column.cast(pa.string()).combine_chunks()
    return _decode_json(column.combine_chunks(), dtype)


def _decode_json(column: pa.Array, dtype: pa.DataType) -> pa.Array:
    """JSON texts as ``dtype`` (a struct): by pyarrow's JSON reader in one go, else text by text, null where a text
    does not fit (as Spark's ``from_json``, DuckDB's ``json_transform``)."""
    import pyarrow.json as pj

    texts = column.to_pylist()
    present = [i for i, t in enumerate(texts) if t is not None]
    if not present:
        return pa.nulls(len(texts), dtype)
    # A raw newline in JSON is whitespace (one inside a string must be escaped), so one text per line is safe.
    body = b"\n".join(texts[i].replace(b"\n", b" ").replace(b"\r", b" ") for i in present) + b"\n"
    try:
        parsed = pj.read_json(pa.BufferReader(body), parse_options=pj.ParseOptions(
            explicit_schema=pa.schema(list(dtype)), unexpected_field_behavior="ignore"))
        values = pa.StructArray.from_arrays([parsed.column(f.name).combine_chunks() for f in dtype],
                                            fields=list(dtype))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        values = pa.array([_one_json(texts[i], dtype) for i in present], type=dtype)
    if len(present) == len(texts):
        return values
    index = np.full(len(texts), -1, dtype=np.int64)
    index[present] = np.arange(len(present))
    return values.take(pa.array(np.where(index < 0, None, index), type=pa.int64()))


def _one_json(text: bytes, dtype: pa.DataType) -> Any:
    try:
        obj = json.loads(text)
        pa.array([obj], type=dtype)
        return obj
    except (ValueError, TypeError, pa.ArrowException):
        return None


def state_rows(latest: pa.Table, partition: int, config: TopicConfig) -> pa.Table:
    """``latest`` (records of one partition) as rows to merge: the table's columns, decoded, and
    :data:`DELETED` (true for a tombstone, whose key's row the merge removes)."""
    schema = state_schema(config)
    n = latest.num_rows
    deleted = pc.is_null(latest.column(VALUE))
    cols: dict[str, Any] = {
        PARTITION: pa.array(np.full(n, partition, np.int32)),
        OFFSET: latest.column(OFFSET).combine_chunks(),
        KEY: _decode(latest.column(KEY), config.key_encoding, schema.field(KEY).type),
        VALUE: _decode(latest.column(VALUE), config.value_encoding, schema.field(VALUE).type),
        HEADERS: latest.column(HEADERS).combine_chunks(),
        TIMESTAMP: latest.column(TIMESTAMP).combine_chunks(),
    }
    if KEY_BYTES in schema.names:
        cols[KEY_BYTES] = latest.column(KEY).combine_chunks()
    table = pa.table({name: cols[name] for name in schema.names}, schema=schema)
    return table.append_column(pa.field(DELETED, pa.bool_(), nullable=False), deleted.combine_chunks()
                               if isinstance(deleted, pa.ChunkedArray) else deleted)
