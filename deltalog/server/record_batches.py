"""Kafka's record batch v2 on the wire, decoded column-wise into Arrow and encoded from Arrow columns.

A Produce request carries, per partition, a record set: record batches v2 (Kafka's ``DefaultRecordBatch``), each a
61-byte header and ``count`` records, the records compressed together when the batch has a codec. Decoding them one
Python object per record (kafka-python's ``DefaultRecordBatch`` iterator) cost the endpoint most of its produce time;
:func:`decode_records` reads a batch the way Arrow wants it instead:

* the batch's header with one ``struct`` unpack, its CRC-32C with the ``crc32c`` C extension, its records section
  decompressed once (kafka-python's codec functions: gzip, snappy, lz4, zstd);
* one Python loop over the records' length varints only (each record's start depends on the previous one's length,
  so this chain is sequential), then every other field (attributes, timestamp delta, offset delta, key length, value
  length, header count) decoded for all records at once with numpy over those starts;
* keys and values become Arrow binary arrays straight from the batch's bytes: an array whose offsets alternate
  (key start, key end) is "key, gap, key, gap, ..." and one ``take`` of its even elements copies the keys out in C.
  No Python object per record is made, so the garbage collector has nothing to walk either (with a large heap a
  per-record decoder spends as much time in collections as in decoding).

Headers, rare in high-volume topics, are read per record in Python, only for records that have some.

The codec stays hand-written on purpose: the maintained one (kafka-python's ``DefaultRecordBatch``, used here for its
compression functions and checked against in the tests) makes a Python object per record, which is what the endpoint
could not afford; the format is Kafka's fixed v2 layout, so the code is small and its checks are Kafka's.

Every check Kafka's ``LogValidator`` (and ``DefaultRecordBatch``/``DefaultRecord.readFrom``) makes before an append is
made here, and a failed one refuses the whole record set (:class:`~deltalog.errors.RecordBatchError` or a child, whose class carries the Kafka
error code the Produce answer carries): complete batches, magic 2, the CRC-32C, a known codec whose library is
present, a record count that agrees with the batch's offset range, no control batch from a client, a sequence number
on a producer id's batch, consecutive offset deltas inside a compressed batch, and records that are exactly as long as
they say, neither running past their batch nor leaving bytes over.

:func:`encode_batch` and :func:`empty_batch` write the batches a Fetch answers with.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kafka import codec as kafka_codec
from kafka.record.util import calc_crc32c

from deltalog.errors import (
    InvalidRecordBatchError,
    RecordBatchError,
    RecordBatchTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from deltalog.log.record import HEADERS, KEY, OFFSET, RECORD_SCHEMA, TIMESTAMP, VALUE

#: Kafka's record batch v2 header (``DefaultRecordBatch``): base offset, batch length, partition leader epoch, magic,
#: CRC, attributes, last offset delta, first timestamp, max timestamp, producer id, producer epoch, base sequence,
#: record count.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12  # base offset and batch length: what precedes the length's count (Kafka's ``LOG_OVERHEAD``)
_CRC_FROM = 21  # the CRC-32C covers the batch from its attributes on
_MAGIC_AT = 16
#: Attribute bits of a batch (Kafka's ``DefaultRecordBatch``).
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_CODECS = {1: ("gzip", kafka_codec.has_gzip, kafka_codec.gzip_decode),
           2: ("snappy", kafka_codec.has_snappy, kafka_codec.snappy_decode),
           3: ("lz4", kafka_codec.has_lz4, kafka_codec.lz4_decode),
           4: ("zstd", kafka_codec.has_zstd, kafka_codec.zstd_decode)}
_PAD = bytes(16)  # zeros after a records section: a varint read at its end stops there (and is then out of range)


@dataclass(frozen=True)
class BatchInfo:
    """What a record batch's header says of its producer, which the Produce handler checks and records: the
    producer id (-1: none), its epoch, the batch's base sequence, whether it is transactional, and its record
    count (Kafka's ``RecordBatch.producerId``, ``producerEpoch``, ``baseSequence``, ``isTransactional``,
    ``countOrNull``)."""

    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    count: int


def decode_records(data: bytes, max_batch_bytes: int | None = None) -> tuple[pa.Table, list[BatchInfo]]:
    """The records of a Produce request's record set as Arrow columns (key, value, timestamp_ms, and headers when a
    record has any: what :mod:`deltalog.log.arrow_records` appends) and each batch's :class:`BatchInfo`, in order.
    Raises :class:`~deltalog.errors.RecordBatchError` on the first check that fails (see the module doc); nothing is
    decoded half."""
    keys: list[pa.Array] = []
    values: list[pa.Array] = []
    timestamps: list[np.ndarray] = []
    headers: list[list[list[tuple[str, bytes | None]]] | None] = []
    infos: list[BatchInfo] = []
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < _LOG_OVERHEAD + 5:
            raise RecordBatchError(f"the record set has {end - pos} bytes that are not a complete record "
                "batch")
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if length < 0 or pos + _LOG_OVERHEAD + length > end:
            raise RecordBatchError(f"the record set has {end - pos} bytes that are not a complete record "
                f"batch (the batch at base offset {base_offset} announces "
                f"{length} bytes)")
        magic = data[pos + _MAGIC_AT]
        if magic != 2:
            raise UnsupportedForMessageFormatError(f"record batch magic {magic} is not served: only v2 (Kafka 0.11+ clients)")
        if _LOG_OVERHEAD + length < _BATCH_HEADER.size:
            raise RecordBatchError(f"the record batch at base offset {base_offset} is {length} bytes, "
                f"shorter than a v2 batch header ({_BATCH_HEADER.size - 12})")
        stop = pos + _LOG_OVERHEAD + length
        if max_batch_bytes is not None and _LOG_OVERHEAD + length > max_batch_bytes:  # LogValidator, before decoding
            raise RecordBatchTooLargeError(
                f"the record batch at base offset {base_offset} is {_LOG_OVERHEAD + length} bytes, larger than the "
                f"topic's max.message.bytes={max_batch_bytes}")
        info, key, value, ts, hdrs = _decode_batch(data, view, pos, stop)
        infos.append(info)
        keys.append(key)
        values.append(value)
        timestamps.append(ts)
        headers.append(hdrs)
        pos = stop
    if not infos:
        return pa.table({KEY: pa.array([], pa.binary()), VALUE: pa.array([], pa.binary()),
                         TIMESTAMP: pa.array([], pa.int64())}), infos
    columns = {KEY: pa.chunked_array(keys, pa.binary()), VALUE: pa.chunked_array(values, pa.binary()),
               TIMESTAMP: pa.array(np.concatenate(timestamps), pa.int64())}
    if any(h is not None for h in headers):
        rows = [r for h, k in zip(headers, keys, strict=True) for r in (h if h is not None else [[]] * len(k))]
        columns[HEADERS] = pa.array([[{"key": k, "value": v} for k, v in h] for h in rows],
                                    RECORD_SCHEMA.field(HEADERS).type)
    return pa.table(columns).combine_chunks(), infos


def _decode_batch(data: bytes, view: memoryview, pos: int, stop: int
                  ) -> tuple[BatchInfo, pa.Array, pa.Array, np.ndarray, list[list[tuple[str, bytes | None]]] | None]:
    (base_offset, _, _, _, crc, attributes, last_offset_delta, first_timestamp, max_timestamp, producer_id,
     producer_epoch, base_sequence, count) = _BATCH_HEADER.unpack_from(data, pos)
    where = f"record batch at base offset {base_offset}"
    if calc_crc32c(view[pos + _CRC_FROM:stop]) != crc:
        raise RecordBatchError(f"{where} fails its CRC")
    # LogValidator.validateBatch's checks of a client's v2 batch
    if count <= 0:
        raise InvalidRecordBatchError(f"{where} reports {count} records: a batch holds at least one")
    if last_offset_delta + 1 != count:
        raise InvalidRecordBatchError(f"{where} reports {count} records but spans "
                                                 f"{last_offset_delta + 1} offsets: its offset range and record count "
                                                 "disagree")
    if attributes & _CONTROL_MASK:
        raise InvalidRecordBatchError("control batches come from brokers, not producers")
    if producer_id >= 0 and base_sequence < 0:
        raise InvalidRecordBatchError(f"{where} has producer id {producer_id} and no sequence number")
    codec = attributes & _CODEC_MASK
    body: bytes | memoryview = view[pos + _BATCH_HEADER.size:stop]
    if codec:
        if codec not in _CODECS:
            raise UnsupportedCompressionTypeError(f"{where} has compression type {codec}: served are 0 "
                "(none), 1 (gzip), 2 (snappy), 3 (lz4), 4 (zstd)")
        name, present, decompress = _CODECS[codec]
        if not present():
            raise UnsupportedCompressionTypeError(f"{where} is {name}-compressed and the {name} library "
                "is not installed here")
        try:
            body = decompress(bytes(body) if codec != 1 else body)
        except Exception as e:  # noqa: BLE001 - every codec library raises its own errors on bad bytes
            raise RecordBatchError(f"{where} does not decompress as {name}: {e}") from None
    body = bytes(body)
    if len(body) >= 2**31 - 16:
        raise RecordBatchTooLargeError(f"{where} holds {len(body)} bytes of records: more than 2 GiB")
    info = BatchInfo(base_offset, producer_id, producer_epoch, base_sequence, bool(attributes & _TRANSACTIONAL_MASK),
                     count)
    try:
        key, value, delta, offset_delta, hdrs = _decode_records(body, count)
    except RecordBatchError as e:
        raise type(e)(f"{where} does not decode: {e}") from None
    if codec and not np.array_equal(offset_delta, np.arange(count)):
        raise InvalidRecordBatchError(f"the records inside compressed {where} do not have incremental offsets")
    if attributes & _TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record has the batch's max timestamp
        ts = np.full(count, max_timestamp, np.int64)
    else:
        ts = delta + first_timestamp
    return info, key, value, ts, hdrs


def _decode_records(body: bytes, count: int
                    ) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray, list[list[tuple[str, bytes | None]]] | None]:
    """The ``count`` records of one decompressed records section (Kafka's ``DefaultRecord``: length, attributes,
    timestamp delta, offset delta, key, value, headers; lengths and deltas are zigzag varints)."""
    arr = np.frombuffer(body + _PAD, np.uint8)
    starts, ends = _record_bounds(body, arr, count)
    pos = starts + 1  # after the record's attributes (unused in v2)
    delta, pos = _varints(arr, pos, ends, 10, "timestamp delta")
    offset_delta, pos = _varints(arr, pos, ends, 5, "offset delta")
    key_len, pos = _varints(arr, pos, ends, 5, "key length")
    key_start = pos
    pos = _skip(pos, key_len, ends, "key")
    value_len, pos = _varints(arr, pos, ends, 5, "value length")
    value_start = pos
    pos = _skip(pos, value_len, ends, "value")
    header_count, pos = _varints(arr, pos, ends, 5, "header count")
    if (header_count < 0).any():
        raise RecordBatchError("a record has a negative number of headers")
    hdrs = None
    if header_count.any():
        hdrs = [[] for _ in range(count)]
        for i in np.flatnonzero(header_count).tolist():
            hdrs[i], pos[i] = _headers(body, int(pos[i]), int(header_count[i]), int(ends[i]))
    if (pos != ends).any():
        i = int(np.flatnonzero(pos != ends)[0])
        raise RecordBatchError(f"record {i} is {int(ends[i] - starts[i])} bytes but its fields "
                                                  f"take {int(pos[i] - starts[i])}")
    buffer = pa.py_buffer(body)
    return (_binary(buffer, key_start, key_len), _binary(buffer, value_start, value_len), delta, offset_delta, hdrs)


def _record_bounds(body: bytes, arr: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's fields start (after its length varint) and end: the one sequential walk of a batch, kept
    to a few bytecodes a record (lengths of one or two varint bytes, records up to 8 KiB, take the short paths)."""
    starts = [0] * count
    pos, end = 0, len(body)
    i = 0
    one, two = _SKIP_ONE, _SKIP_TWO
    try:
        for i in range(count):
            b = body[pos]
            if b < 0x80:
                pos += one[b]
            else:
                c = body[pos + 1]
                if c < 0x80:
                    pos += two[(c << 7) | (b & 0x7F)]
                else:
                    v, pos = _long_varint(body, pos)
                    pos += (v >> 1) ^ -(v & 1)
            starts[i] = pos  # the record's end for now: its start is this minus its length, below
    except IndexError:
        raise RecordBatchError(f"it declares {count} records and its bytes end in record {i}") from None
    ends = np.array(starts, np.int64)
    if count and (ends[-1] > end or (np.diff(ends, prepend=0) <= 0).any()):
        bad = np.flatnonzero((ends > end) | (np.diff(ends, prepend=0) <= 0))[0]
        raise RecordBatchError(f"record {bad} announces a length that does not fit the batch")
    if count and ends[-1] != end:
        raise RecordBatchError(f"{end - int(ends[-1])} bytes follow its {count} declared records")
    lengths, starts = _varints(arr, np.concatenate(([0], ends[:-1])), ends, 5, "record length")
    bad = (lengths < 1) | (starts + lengths != ends)
    if bad.any():
        raise RecordBatchError(f"record {int(np.flatnonzero(bad)[0])} has a length below 1")
    return starts, ends


#: What a record's length varint of one byte ``b`` (``_SKIP_ONE[b]``) or of two bytes ``b``, ``c``
#: (``_SKIP_TWO[(c << 7) | (b & 0x7F)]``: records up to 8 KiB) moves the walk by: the varint's own size plus the
#: zigzag-decoded length. Looked up, not computed, in :func:`_record_bounds`' loop, the one Python loop per record.
_SKIP_ONE = [1 + ((v >> 1) ^ -(v & 1)) for v in range(1 << 7)]
_SKIP_TWO = [2 + ((v >> 1) ^ -(v & 1)) for v in range(1 << 14)]


def _long_varint(body: bytes, pos: int) -> tuple[int, int]:
    """A varint of three or more bytes at ``pos`` (IndexError past the end, as a short one)."""
    v, shift = 0, 0
    while True:
        b = body[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80 or shift >= 28:
            return v, pos
        shift += 7


def _varints(arr: np.ndarray, pos: np.ndarray, ends: np.ndarray, width: int, what: str
             ) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints (at most ``width`` bytes: 5 for an int, 10 for a long) at ``pos`` in every record, and the
    positions after them; each must end inside its record. ``arr`` holds the bytes followed by at least ``width``
    zeros. One pass over the records per byte of the longest varint."""
    b = arr[pos]
    v = (b & 0x7F).astype(np.uint64)
    more = b >= 0x80
    size = np.ones(len(pos), np.int64)
    k = 1
    while more.any():
        if k == width:
            i = int(np.flatnonzero(more)[0])
            raise RecordBatchError(f"record {i}'s {what} is longer than a {width}-byte varint")
        b = arr[pos + k]
        v |= np.where(more, (b & 0x7F).astype(np.uint64) << np.uint64(7 * k), np.uint64(0))
        size += more
        more &= b >= 0x80
        k += 1
    after = pos + size
    if (after > ends).any():
        i = int(np.flatnonzero(after > ends)[0])
        raise RecordBatchError(f"record {i}'s {what} runs past the record")
    return (v >> np.uint64(1)).astype(np.int64) ^ -(v & np.uint64(1)).astype(np.int64), after


def _skip(pos: np.ndarray, lengths: np.ndarray, ends: np.ndarray, what: str) -> np.ndarray:
    """The positions after a key or value of ``lengths`` bytes (-1: null, no bytes)."""
    if (lengths < -1).any() or (pos + np.maximum(lengths, 0) > ends).any():
        i = int(np.flatnonzero((lengths < -1) | (pos + np.maximum(lengths, 0) > ends))[0])
        raise RecordBatchError(f"record {i}'s {what} length {int(lengths[i])} does not fit the record")
    return pos + np.maximum(lengths, 0)


def _binary(buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """An Arrow binary array of the byte ranges ``starts[i]`` .. ``+ lengths[i]`` of ``buffer`` (-1: null): the ranges
    are ascending, so offsets alternating start, end make "range, gap, range, gap, ..." over the buffer itself, and
    taking the even elements copies the ranges out contiguously."""
    n = len(starts)
    offsets = np.empty(2 * n, np.int32)
    offsets[0::2] = starts
    offsets[1::2] = starts + np.maximum(lengths, 0)
    validity = None
    null = lengths < 0
    if null.any():
        valid = np.ones(2 * n - 1, bool)
        valid[0::2] = ~null
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    both = pa.BinaryArray.from_buffers(pa.binary(), 2 * n - 1, [validity, pa.py_buffer(offsets), buffer])
    return both.take(pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int64)))


def _headers(body: bytes, pos: int, count: int, end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """One record's ``count`` headers from ``pos`` (Kafka's ``DefaultRecord.readHeaders``): a non-null UTF-8 key and a
    value that may be null."""
    out = []
    for _ in range(count):
        key_len, pos = _varint(body, pos, end)
        if key_len < 0:
            raise RecordBatchError(f"a header key has length {key_len}: header keys are never null")
        if pos + key_len > end:
            raise RecordBatchError("a header key runs past its record")
        try:
            key = body[pos:pos + key_len].decode("utf-8")
        except UnicodeDecodeError:
            raise RecordBatchError("a header key is not UTF-8") from None
        pos += key_len
        value_len, pos = _varint(body, pos, end)
        if value_len < -1 or pos + max(value_len, 0) > end:
            raise RecordBatchError(f"a header value of length {value_len} does not fit its record")
        value = None if value_len < 0 else body[pos:pos + value_len]
        pos += max(value_len, 0)
        out.append((key, value))
    return out, pos


def _varint(body: bytes, pos: int, end: int) -> tuple[int, int]:
    v, shift = 0, 0
    while True:
        if pos >= end or shift > 28:
            raise RecordBatchError("a header's length is not a varint inside its record")
        b = body[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7


def empty_batch(base_offset: int, last_offset: int) -> bytes:
    """A record batch v2 of no records spanning ``base_offset`` to ``last_offset`` (kafka-python's builder always
    holds a record, so this one header is written by hand, with its CRC-32C)."""
    buf = bytearray(_BATCH_HEADER.pack(base_offset, _BATCH_HEADER.size - 12, 0, 2, 0, 0, last_offset - base_offset,
                                       -1, -1, -1, -1, -1, 0))
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[_CRC_FROM:]))
    return bytes(buf)


def batch_last_offset(data: bytes) -> int:
    """The last offset of the first record batch in ``data`` (its base offset plus its last offset delta)."""
    base, delta = struct.unpack_from(">q", data, 0)[0], struct.unpack_from(">i", data, 23)[0]
    return base + delta


#: A control batch's attributes: transactional (0x10) and control (0x20), as Kafka writes a transaction marker.
_CONTROL_ATTRIBUTES = 0x30


def control_batch(offset: int, producer_id: int, producer_epoch: int, commit: bool) -> bytes:
    """A transaction marker as Kafka writes it (``MemoryRecords.withEndTransactionMarker``): a control batch of one
    control record at ``offset``, its key the control type (version 0, type 1 COMMIT or 0 ABORT), its value the
    ``EndTransactionMarker`` (version 0, coordinator epoch 0). Consumers never return it; they step past it, and
    some only over a control batch (KafkaJS stays at a trailing marker's offset when given an empty batch)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    body = bytearray([0])  # record attributes
    for v in (0, 0, len(key)):  # timestamp delta, offset delta, key length
        _put_varint(body, v)
    body += key
    _put_varint(body, len(value))
    body += value
    _put_varint(body, 0)  # no headers
    record = bytearray()
    _put_varint(record, len(body))
    record += body
    size = _BATCH_HEADER.size + len(record)
    buf = bytearray(_BATCH_HEADER.pack(offset, size - _LOG_OVERHEAD, 0, 2, 0, _CONTROL_ATTRIBUTES, 0, -1, -1,
                                       producer_id, producer_epoch, -1, 1)) + record
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[_CRC_FROM:]))
    return bytes(buf)


def encode_batch(rows: Any, position: int, next_offset: int, budget: int, *, first: bool) -> bytes:
    """One uncompressed record batch v2 of ``rows`` (a partition table's rows, offsets ascending, gaps allowed), its
    size at most ``budget`` bytes unless its first record alone is larger and ``first`` (KIP-74: a fetch always makes
    progress). When every row fits, the batch's last offset is ``next_offset - 1``, so offsets the read skipped (a
    compacted range, markers) are passed by the client as after Kafka's compacted batches; b"" when nothing is sent.

    Written column-wise, byte for byte what kafka-python's ``DefaultRecordBatchBuilder`` writes: each record's
    varints (length, timestamp delta, offset delta, key and value lengths) for all records at once with numpy, the
    records joined with their keys and values by Arrow, headers (when a record has some) per record."""
    n = rows.num_rows
    if n == 0:
        # Nothing visible, yet the read passed offsets (aborted records, markers): a batch of no records covering
        # them moves the client on, as Kafka's consumers pass a batch the cleaner emptied (the producer state it
        # keeps) and the control batches they never return
        return empty_batch(position, next_offset - 1) if next_offset > position else b""
    offsets = rows.column(OFFSET).to_numpy()
    timestamps = rows.column(TIMESTAMP).to_numpy()
    keys = _joinable(rows.column(KEY))
    values = _joinable(rows.column(VALUE))
    base, first_ts = int(offsets[0]), int(timestamps[0])
    key_len = _lengths(keys)
    value_len = _lengths(values)
    headers = None
    if HEADERS in rows.column_names and pc.sum(pc.list_value_length(rows.column(HEADERS))).as_py():
        headers = _header_blobs(rows.column(HEADERS))
    header_len = np.ones(n, np.int64) if headers is None else _lengths(headers)
    parts = [(_zigzag(timestamps - first_ts), 10), (_zigzag(offsets - base), 5), (_zigzag(key_len), 5)]
    sizes = [_varint_size(v) for v, _ in parts]
    value_size = _varint_size(_zigzag(value_len))
    body = (1 + sizes[0] + sizes[1] + sizes[2] + np.maximum(key_len, 0) + value_size + np.maximum(value_len, 0)
            + header_len)
    length = _zigzag(body)
    total = _varint_size(length) + body
    ends = _BATCH_HEADER.size + np.cumsum(total)
    count = max(1, int(np.searchsorted(ends, max(budget, 1), side="right")))
    if not first and int(ends[count - 1]) > budget:
        return b""
    if count < n:
        keys, values = keys.slice(0, count), values.slice(0, count)
        headers = headers.slice(0, count) if headers is not None else None
    head_bytes = _varints_bytes([(length[:count], 5), (np.zeros(count, np.uint64), 1)]
                                + [(v[:count], w) for v, w in parts])
    value_head = _varints_bytes([(_zigzag(value_len[:count]), 5)])
    tail = headers if headers is not None else pa.BinaryArray.from_buffers(  # a zero header count each
        pa.binary(), count, [None, pa.py_buffer(np.arange(count + 1, dtype=np.int32)), pa.py_buffer(bytes(count))])
    empty = pa.scalar(b"", pa.binary())
    joined = pc.binary_join_element_wise(head_bytes, pc.fill_null(keys, empty), value_head, pc.fill_null(values, empty),
                                         tail, empty)
    bounds = np.frombuffer(joined.buffers()[1], np.int32, count + 1, joined.offset * 4)
    records = joined.buffers()[2][int(bounds[0]):int(bounds[-1])]
    last = next_offset - 1 if count == n and next_offset - 1 > offsets[-1] else int(offsets[count - 1])
    size = _BATCH_HEADER.size + records.size
    buf = bytearray(size)
    _BATCH_HEADER.pack_into(buf, 0, base, size - _LOG_OVERHEAD, 0, 2, 0, 0, last - base, first_ts,
                            int(timestamps[:count].max()), -1, -1, -1, count)
    buf[_BATCH_HEADER.size:] = records
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[_CRC_FROM:]))
    return bytes(buf)


def _joinable(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A key or value column as one binary array (nulls kept: their lengths are -1, their bytes none)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.cast(pa.binary()) if arr.type != pa.binary() else arr


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte lengths of a binary array's elements, -1 for a null."""
    return pc.fill_null(pc.binary_length(arr), -1).to_numpy().astype(np.int64)


def _zigzag(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int64)
    return ((v << 1) ^ (v >> 63)).astype(np.uint64)


def _varint_size(u: np.ndarray) -> np.ndarray:
    size = np.ones(len(u), np.int64)
    for k in range(1, 10):
        size += u >= np.uint64(1 << (7 * k))
    return size


def _varints_bytes(parts: list[tuple[np.ndarray, int]]) -> pa.Array:
    """A binary array whose element ``i`` is the varints ``part[i]`` of every part, one after another (a part of
    width 1 is one raw byte)."""
    columns, masks = [], []
    for u, width in parts:
        if width == 1:
            columns.append(u.astype(np.uint8)[:, None])
            masks.append(np.ones((len(u), 1), bool))
            continue
        size = _varint_size(u)
        steps = np.arange(width, dtype=np.uint64)
        groups = ((u[:, None] >> (np.uint64(7) * steps)) & np.uint64(0x7F)).astype(np.uint8)
        more = steps[None, :].astype(np.int64) < (size[:, None] - 1)
        columns.append(groups | (more.astype(np.uint8) << 7))
        masks.append(steps[None, :].astype(np.int64) < size[:, None])
    matrix, mask = np.hstack(columns), np.hstack(masks)
    data = matrix[mask]
    offsets = np.zeros(len(matrix) + 1, np.int32)
    np.cumsum(mask.sum(axis=1), out=offsets[1:])
    return pa.BinaryArray.from_buffers(pa.binary(), len(matrix), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _header_blobs(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each record's headers as Kafka writes them (a count, then each header's key and value with their lengths),
    as a binary array; records without headers are the one byte of a zero count."""
    out = []
    for hs in column.to_pylist():
        blob = bytearray()
        _put_varint(blob, len(hs or ()))
        for h in hs or ():
            key = h["key"].encode("utf-8")
            _put_varint(blob, len(key))
            blob += key
            if h["value"] is None:
                _put_varint(blob, -1)
            else:
                _put_varint(blob, len(h["value"]))
                blob += h["value"]
        out.append(bytes(blob))
    return pa.array(out, pa.binary())


def _put_varint(out: bytearray, value: int) -> None:
    u = (value << 1) ^ (value >> 63)
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def warm_up() -> None:
    """Decode one small record batch, so the libraries the Produce path loads on first use (pyarrow's compute
    functions import pandas, about half a second) are loaded when the endpoint starts, not inside a client's first
    Produce, whose answer would wait for them (Kafka's broker, a JVM, loads its classes before it listens too)."""
    n = 2
    rows = pa.table({OFFSET: pa.array(np.arange(n, dtype=np.int64)), KEY: pa.array([b"k", None], pa.binary()),
                     VALUE: pa.array([b"v", None], pa.binary()), TIMESTAMP: pa.array(np.zeros(n, np.int64)),
                     HEADERS: pa.array([[], []], RECORD_SCHEMA.field(HEADERS).type)})
    decode_records(encode_batch(rows, 0, n, 1 << 20, first=True))
