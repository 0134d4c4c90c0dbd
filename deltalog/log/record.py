"""A record, and the Arrow schema of the partition table that stores records as rows.

One row is one record: ``offset`` (assigned at append, never null, never changed), ``key``, ``value``
(null: tombstone), ``headers`` (ordered ``(str, bytes)`` pairs, as Kafka's), ``timestamp_ms``, the base
offset of the ``segment`` it belongs to, and ``delete_horizon_ms``, stamped by the cleaner on a tombstone
(or a transaction marker) the first time it is cleaned (KIP-534's delete horizon, kept as a column instead of a
batch header).

Rows written inside a transaction also carry what Kafka's record batch header holds for it
(:data:`PRODUCER_FIELDS`, null on every other row): ``producer_id`` and ``producer_epoch``. A **transaction
marker** (Kafka's control batch: one row, one offset) has ``control`` ``"COMMIT"`` or ``"ABORT"``, a null key
and value, its producer's id and epoch, and ``txn_first_offset``: the first offset of its transaction in this
partition, so the aborted ranges of a partition are known from its ABORT markers alone (Kafka keeps them in a
transaction index beside each segment). Markers are never returned to applications, in either isolation level
(:mod:`deltalog.log.transactions`).

Plain appends write only :data:`BASE_SCHEMA`'s columns (their files are what they were before transactions
existed); every reader has all of :data:`RECORD_SCHEMA`, whose extra columns read as null from a file that lacks
them (:func:`conform`).

Every file deltalog writes also holds, after those, the two halves of each record's **key hash**
(:data:`KEY_HASH_FIELDS`: the 128-bit hash of the cleaner's offset map, :mod:`deltalog.log.key_hash`; null for a
keyless row), computed once at append and carried by the cleaner, so a cleaning pass maps the dirty section
from the offsets and hashes alone, without reading or hashing a key again (Kafka's ``SkimpyOffsetMap`` hashes
each key on every pass). They are the log's bookkeeping, not part of a record: the table's schema
(:data:`TABLE_SCHEMA`) has them, but no read returns them (readers ask for :data:`RECORD_SCHEMA`'s columns), and
a file without them (written before they existed, or rewritten by another engine) is hashed as before.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from deltalog.errors import InvalidRecordError, shown

Header = tuple[str, bytes]
HeadersLike = Sequence[tuple[str, Any]] | Mapping[str, Any] | None

OFFSET = "offset"
KEY = "key"
VALUE = "value"
HEADERS = "headers"
TIMESTAMP = "timestamp_ms"
SEGMENT = "segment"
DELETE_HORIZON = "delete_horizon_ms"
PRODUCER_ID = "producer_id"
PRODUCER_EPOCH = "producer_epoch"
CONTROL = "control"
TXN_FIRST_OFFSET = "txn_first_offset"

#: ``control`` of a transaction marker (Kafka's ``ControlRecordType``).
COMMIT = "COMMIT"
ABORT = "ABORT"
CONTROL_TYPES = (ABORT, COMMIT)

HEADER_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])

#: The columns of every row: what a plain append writes.
BASE_SCHEMA = pa.schema(
    [
        pa.field(OFFSET, pa.int64(), nullable=False),
        pa.field(KEY, pa.binary()),
        pa.field(VALUE, pa.binary()),
        pa.field(HEADERS, pa.list_(pa.field("element", HEADER_TYPE))),
        pa.field(TIMESTAMP, pa.int64(), nullable=False),
        pa.field(SEGMENT, pa.int64(), nullable=False),
        pa.field(DELETE_HORIZON, pa.int64()),
    ]
)
#: The transactional part of Kafka's batch header, per row (null on rows written outside a transaction).
PRODUCER_FIELDS = (
    pa.field(PRODUCER_ID, pa.int64()),
    pa.field(PRODUCER_EPOCH, pa.int32()),
    pa.field(CONTROL, pa.string()),
    pa.field(TXN_FIRST_OFFSET, pa.int64()),
)
#: Every column a reader gets (the table's schema, :data:`TABLE_SCHEMA`, also has the key hash).
RECORD_SCHEMA = pa.schema([*BASE_SCHEMA, *PRODUCER_FIELDS])
PRODUCER_COLUMNS = tuple(f.name for f in PRODUCER_FIELDS)

#: The key hash's two 64-bit halves (``uint64`` bits stored as Delta ``long``; null on a keyless row). The
#: ``_deltalog_`` prefix keeps them apart from anything a user names: records have no columns of their own, and
#: the views and the data source's extra columns (``partition``, ``_file``, ``_row_index``) use other names.
KEY_HASH_HI = "_deltalog_key_hash_hi"
KEY_HASH_LO = "_deltalog_key_hash_lo"
KEY_HASH_FIELDS = (pa.field(KEY_HASH_HI, pa.int64()), pa.field(KEY_HASH_LO, pa.int64()))
KEY_HASH_COLUMNS = (KEY_HASH_HI, KEY_HASH_LO)
#: The partition table's Delta schema and the columns deltalog writes: the records' and the key hash's.
TABLE_SCHEMA = pa.schema([*RECORD_SCHEMA, *KEY_HASH_FIELDS])

#: How every data file is written (appends and the cleaner alike): snappy like Spark's default, statistics on,
#: and no dictionary encoding: keys and values are mostly distinct within a file, where pyarrow's dictionary
#: attempt made writes slower and files larger (benchmarks/, appends; docs/performance.md).
PARQUET_WRITE_OPTIONS: dict[str, Any] = {"compression": "snappy", "write_statistics": True, "use_dictionary": False}

#: The codec of a column chunk whose data compresses (see :func:`parquet_write_options`).
CODEC = "snappy"
#: Columns whose codec follows their data: a key's or value's bytes are the application's, and may not compress.
SAMPLED_COLUMNS = (KEY, VALUE)
#: A sampled column is written uncompressed when snappy would keep more than this share of its sample ...
INCOMPRESSIBLE_RATIO = 0.9
#: ... a sample of this many bytes of its data, in :data:`SAMPLE_PIECES` pieces spread over the first chunk.
SAMPLE_BYTES = 64 * 1024
SAMPLE_PIECES = 4


def parquet_write_options(table: pa.Table) -> dict[str, Any]:
    """:data:`PARQUET_WRITE_OPTIONS` for writing ``table`` (and the rows that follow it into the same file), with a
    codec per column: snappy, except for a key or value column whose bytes snappy does not compress (random
    bytes, data compressed or encrypted by the producer), which is written uncompressed. Parquet gives each column
    chunk its own codec, and every engine reads an uncompressed chunk (Spark, DuckDB, delta-rs alike); it saves
    the codec's pass over the bytes on every write and read (measured by benchmarks/: a cleaning pass reads and
    writes them all). Decided from a sample of the data (:data:`SAMPLE_BYTES`), like Kafka, which keeps the
    producer's batches as they come but never tries to compress them twice."""
    codecs = {path: CODEC for path in _LEAF_PATHS}
    for name in SAMPLED_COLUMNS:
        if name in table.column_names and not _compresses(table.column(name)):
            codecs[name] = "none"
    return {**PARQUET_WRITE_OPTIONS, "compression": codecs}


#: The Parquet leaf columns of :data:`RECORD_SCHEMA` (a per-column codec is keyed by leaf path, and a leaf left out
#: would be written uncompressed: the key-hash columns are left out on purpose, random 64-bit values that no codec
#: shrinks).
_LEAF_PATHS = (OFFSET, KEY, VALUE, f"{HEADERS}.list.element.key", f"{HEADERS}.list.element.value", TIMESTAMP, SEGMENT,
               DELETE_HORIZON, PRODUCER_ID, PRODUCER_EPOCH, CONTROL, TXN_FIRST_OFFSET)


def _compresses(column: pa.ChunkedArray) -> bool:
    """Whether snappy shrinks a sample of a binary column's bytes below :data:`INCOMPRESSIBLE_RATIO` (a column
    with no bytes to sample counts as compressing: it keeps the default codec)."""
    sample = _sample(column)
    if len(sample) < 1024:
        return True
    return pa.compress(sample, codec=CODEC, asbytes=False).size < INCOMPRESSIBLE_RATIO * len(sample)


def _sample(column: pa.ChunkedArray) -> bytes:
    """Up to :data:`SAMPLE_BYTES` of the values' bytes, from :data:`SAMPLE_PIECES` places of the first chunk that
    has any."""
    for chunk in column.chunks:
        if not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)
                or pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)) or not len(chunk):
            continue
        _, offsets, data = chunk.buffers()
        if data is None or offsets is None:
            continue
        width = 8 if pa.types.is_large_binary(chunk.type) or pa.types.is_large_string(chunk.type) else 4
        start = int.from_bytes(offsets[chunk.offset * width:(chunk.offset + 1) * width], "little", signed=True)
        end = int.from_bytes(offsets[(chunk.offset + len(chunk)) * width:(chunk.offset + len(chunk) + 1) * width],
                             "little", signed=True)
        if end <= start:
            continue
        piece = SAMPLE_BYTES // SAMPLE_PIECES
        if end - start <= SAMPLE_BYTES:
            return data[start:end].to_pybytes()
        step = (end - start - piece) // (SAMPLE_PIECES - 1)
        return b"".join(data[start + i * step:start + i * step + piece].to_pybytes() for i in range(SAMPLE_PIECES))
    return b""

#: Row groups of every data file hold at most this many records and about :data:`ROW_GROUP_MAX_BYTES` of them, so
#: that a read of a few records costs one small row group, not the file: a fetch reads only the row groups whose
#: offset range (the footer's statistics) it needs, and each is decoded whole. Kafka's fetch reads a segment from
#: the position its offset index gives, a batch at a time, up to ``max.partition.fetch.bytes``: the cost of a poll
#: follows what it returns, whatever the segment's size. 64 Ki records of 8 MiB keep a file's footer small (a
#: 5-million-record bulk append has ~80 row groups) and compression unchanged (measured by benchmarks/ reads).
ROW_GROUP_MAX_ROWS = 65_536
ROW_GROUP_MAX_BYTES = 8 * 1024 * 1024


def row_group_rows(table: pa.Table) -> int:
    """The rows per row group for writing ``table``: :data:`ROW_GROUP_MAX_ROWS`, fewer when its records are big
    (about :data:`ROW_GROUP_MAX_BYTES` of Arrow data per group)."""
    n = table.num_rows
    if n == 0:
        return ROW_GROUP_MAX_ROWS
    per_row = max(1, table.nbytes // n)
    return max(1, min(ROW_GROUP_MAX_ROWS, ROW_GROUP_MAX_BYTES // per_row))


def new_file_name(segment: int, first_offset: int) -> str:
    """A data file name that sorts like Kafka's segment files: base offset, first offset, a nonce."""
    return f"{segment:020d}-{first_offset:020d}-{os.urandom(6).hex()}.parquet"


_DELTALOG_FILE = re.compile(r"\d{20}-\d{20}-[0-9a-f]{12}\.parquet")


def written_by_deltalog(path: str) -> bool:
    """Whether a data file (its path in the table, or a URI) was written by deltalog: named by
    :func:`new_file_name` (an append, a cleaning pass, a relayout). Another engine's files (an OPTIMIZE's or
    Z-order's merged files, ``part-...`` names) are not: the key-hash columns they carry were copied by that engine,
    not written by deltalog beside each key, and are recomputed from the keys before the cleaner relies on them."""
    return _DELTALOG_FILE.fullmatch(unquote(path).rsplit("/", 1)[-1]) is not None


#: Columns whose min/max deltalog puts in the Delta file stats, so plans never scan data (a one-row marker file
#: is known from its stats alone: its producer, its control type and its transaction's first offset).
STATS_COLUMNS = (OFFSET, TIMESTAMP, SEGMENT, DELETE_HORIZON, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET)
#: Columns whose null counts go in the stats: null keys are keyless records, null values tombstones, non-null
#: producer ids rows of producers, non-null controls transaction markers (so plain files are known as such).
NULL_COUNT_COLUMNS = (OFFSET, KEY, VALUE, TIMESTAMP, SEGMENT, DELETE_HORIZON, PRODUCER_ID, CONTROL)


def conform(table: pa.Table, schema: pa.Schema = RECORD_SCHEMA) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in order: a column the file did not have (a plain file has
    no producer columns) is all null."""
    if table.schema.equals(schema):
        return table
    n = table.num_rows
    names = set(table.column_names)
    columns = [table.column(f.name) if f.name in names else pa.nulls(n, f.type) for f in schema]
    try:
        return pa.Table.from_arrays(columns, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def _as_bytes(what: str, v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        try:
            return v.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate, e.g. from a JSON "\ud800" escape
            raise InvalidRecordError(
                f"record {what} is a str that cannot be stored as UTF-8 ({e.reason} at index {e.start}); "
                "give bytes, or a str of valid Unicode text"
            ) from None
    raise InvalidRecordError(f"record {what} must be bytes, str (stored as UTF-8) or None, not {type(v).__name__}")


class Headers(tuple):  # noqa: SLOT001 - a plain value type
    """A record's headers: ordered ``(name, bytes)`` pairs, as Kafka's (names may repeat).

    It is a tuple (records are immutable and hashable) that also compares equal to the same pairs given as
    a list, or, when no name repeats, as a dict, which is how producers usually write them.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple(self) == tuple(tuple(p) if isinstance(p, list) else p for p in other)
        if isinstance(other, Mapping):
            names = [name for name, _ in self]
            return len(set(names)) == len(names) and dict(self) == {
                k: _as_bytes(f"header {k!r}", v) for k, v in other.items()
            }
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return tuple.__repr__(self)


def _normalize_headers(headers: HeadersLike) -> Headers:
    if headers is None:
        return Headers()
    if isinstance(headers, (str, bytes, bytearray, memoryview)) or not isinstance(headers, (Mapping, Iterable)):
        raise InvalidRecordError(
            f"record headers must be a mapping of str to bytes, or a sequence of (str, bytes) pairs, not "
            f"{type(headers).__name__} {shown(headers, 60)}"
        )
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise InvalidRecordError(f"a header must be a (str, bytes) pair, not {shown(item)}") from None
        if not isinstance(name, str):
            raise InvalidRecordError(f"a header name must be a str, not {type(name).__name__}")
        _as_bytes(f"header name {shown(name, 40)}", name)  # the name is stored as UTF-8 too
        out.append((name, _as_bytes(f"header {shown(name, 40)}", value)))
    return Headers(out)


@dataclass(frozen=True)
class Record:
    """A Kafka record. ``offset`` and ``delete_horizon_ms`` are set by the log, not by producers.

    ``timestamp_ms`` defaults to the store clock's time at append. ``key`` and ``value`` are bytes;
    a ``str`` is accepted and stored as UTF-8. ``value=None`` is a tombstone. A record ``Store.read`` returns holds
    them as its topic declares them (``str`` for ``string``, the decoded JSON for ``json``; see
    :func:`deltalog.log.encoding.decoded_records`) and can be appended again as it is.

    A record is hashable (a set of records, a dict keyed by them) whatever it holds: a decoded JSON key or value (a
    ``dict``, a ``list``) hashes by its contents, so two records that compare equal hash alike.
    """

    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None
    offset: int | None = None
    delete_horizon_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _as_bytes("key", self.key))
        object.__setattr__(self, "value", _as_bytes("value", self.value))
        object.__setattr__(self, "headers", _normalize_headers(self.headers))
        for name in ("timestamp_ms", "offset", "delete_horizon_ms"):  # the last two are set by the log on reads
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise InvalidRecordError(f"{name} must be an int{' (epoch milliseconds)' if name != 'offset' else ''}"
                                         f" or None, not {shown(v)}")
            if v is not None and not 0 <= v < 2**63:
                raise InvalidRecordError(f"{name} must be >= 0 and fit in 64 bits, not {shown(v)}")

    def __hash__(self) -> int:
        return hash((_hashable(self.key), _hashable(self.value), self.headers, self.timestamp_ms, self.offset,
                     self.delete_horizon_ms))

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    @property
    def size_bytes(self) -> int:
        """Bytes counted against ``max.message.bytes``: key, value and headers."""
        size = _stored_size(self.key) + _stored_size(self.value)
        for name, value in self.headers:
            size += len(name.encode("utf-8")) + len(value or b"")
        return size


def _hashable(data: Any) -> Any:
    """``data`` with each JSON object and array made immutable (a ``frozenset`` of its items, a ``tuple``): equal
    decoded values give equal results, so their hashes agree with ``==`` (``{"a": 1}`` and ``{"a": 1.0}`` too)."""
    if isinstance(data, dict):
        return frozenset((k, _hashable(v)) for k, v in data.items())
    if isinstance(data, list):
        return tuple(_hashable(v) for v in data)
    return data


def _stored_size(data: Any) -> int:
    """Bytes a key or value takes stored: as it is, or encoded back when a read decoded it (a ``str``, a JSON
    value: :func:`deltalog.log.encoding.decoded_records`)."""
    if data is None:
        return 0
    if isinstance(data, bytes):
        return len(data)
    if isinstance(data, str):
        return len(data.encode("utf-8"))
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def table_to_records(table: pa.Table) -> list[Record]:
    """Records from rows of a partition table (a read, not a hot path for Spark jobs)."""
    out = []
    for row in table.select([OFFSET, KEY, VALUE, HEADERS, TIMESTAMP, DELETE_HORIZON]).to_pylist():
        out.append(
            Record(
                key=row[KEY],
                value=row[VALUE],
                headers=tuple((h["key"], h["value"]) for h in (row[HEADERS] or ())),
                timestamp_ms=row[TIMESTAMP],
                offset=row[OFFSET],
                delete_horizon_ms=row[DELETE_HORIZON],
            )
        )
    return out
