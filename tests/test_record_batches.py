"""The endpoint's record batch v2 codec (deltalog.server.record_batches) against kafka-python's builder and reader:
what a client writes decodes to the same records as kafka-python reads, with every codec, headers and nulls; and
every batch Kafka's LogValidator refuses is refused with its error code, nothing decoded half."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

from deltalog.errors import RecordBatchError
from deltalog.log.record import HEADERS, KEY, OFFSET, TIMESTAMP, VALUE
from deltalog.server import protocol
from deltalog.server.record_batches import decode_records, empty_batch, encode_batch

CODECS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build(records, *, codec: int = 0, producer=(-1, -1, -1), transactional: bool = False,
          first_ts: int = 1_700_000_000_000) -> bytes:
    pid, epoch, seq = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 24)
    for i, (key, value, headers) in enumerate(records):
        assert builder.append(i, first_ts + 7 * i, key, value, headers) is not None
    return bytes(builder.build())


def sample(n: int, rnd: random.Random):
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else rnd.randbytes(rnd.choice([0, 1, 5, 200]))
        value = None if i % 11 == 5 else rnd.randbytes(rnd.choice([0, 3, 100, 300, 20_000]))
        headers = [] if i % 3 else [(f"h{j}", None if j == 1 else rnd.randbytes(j * 50)) for j in range(i % 4)]
        out.append((key, value, headers))
    return out


def kafka_python_reads(data: bytes):
    return [(r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers])
            for b in MemoryRecords(data) for r in b]


def decoded_rows(table: pa.Table):
    headers = table.column(HEADERS).to_pylist() if HEADERS in table.column_names else [[]] * table.num_rows
    return [(k, v, t, [(h["key"], h["value"]) for h in (hs or [])]) for k, v, t, hs in zip(
        table.column(KEY).to_pylist(), table.column(VALUE).to_pylist(), table.column(TIMESTAMP).to_pylist(), headers,
        strict=True)]


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_decodes_what_kafka_python_reads(codec):
    rnd = random.Random(codec or "none")
    # two batches in one record set: the second has no headers at all, keys and values of every shape
    data = build(sample(300, rnd), codec=CODECS[codec]) + build(
        [(b"k%d" % i, b"v" * i, []) for i in range(1000)], codec=CODECS[codec], first_ts=5)
    assert [b.compression_type for b in MemoryRecords(data)][1] == CODECS[codec]  # the repetitive one compresses
    table, batches = decode_records(data)
    assert decoded_rows(table) == kafka_python_reads(data)
    assert table.schema.field(KEY).type == pa.binary() and table.schema.field(VALUE).type == pa.binary()
    assert [(b.count, b.producer_id, b.is_transactional) for b in batches] == [(300, -1, False), (1000, -1, False)]


def test_null_and_empty_keys_values_and_headers_stay_apart():
    data = build([(None, None, []), (b"", b"", [("", b"")]), (b"k", None, [("a", None), ("a", b"x")])])
    table, _ = decode_records(data)
    assert decoded_rows(table) == [(None, None, 1_700_000_000_000, []), (b"", b"", 1_700_000_000_007, [("", b"")]),
                                   (b"k", None, 1_700_000_000_014, [("a", None), ("a", b"x")])]
    assert table.column(KEY).null_count == 1 and table.column(VALUE).null_count == 2


def test_batch_info_carries_the_producer_and_transactional_flag():
    data = build([(b"k", b"v", [])] * 3, producer=(42, 3, 17), transactional=True)
    table, [info] = decode_records(data)
    assert table.num_rows == 3
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.is_transactional, info.count) == (
        42, 3, 17, True, 3)


def rewrite(data: bytes, **fields) -> bytes:
    """``data`` (one batch) with header fields replaced and its CRC-32C recomputed, so a check after the CRC's
    is what refuses it."""
    at = {"magic": (16, ">b"), "attributes": (21, ">h"), "last_offset_delta": (23, ">i"), "count": (57, ">i"),
          "base_sequence": (53, ">i"), "producer_id": (43, ">q")}
    buf = bytearray(data)
    for name, value in fields.items():
        offset, fmt = at[name]
        struct.pack_into(fmt, buf, offset, value)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


def refused(data: bytes) -> tuple[int, str]:
    with pytest.raises(RecordBatchError) as e:
        decode_records(data)
    return e.value.errno, str(e.value)


def test_a_corrupt_crc_incomplete_batches_and_other_magics_are_refused():
    good = build([(b"k", b"v", []), (b"k2", b"v2", [])])
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    code, message = refused(bytes(bad))
    assert code == protocol.CORRUPT_MESSAGE and "CRC" in message
    assert refused(good[:-3])[0] == protocol.CORRUPT_MESSAGE
    assert refused(good + good[:20])[0] == protocol.CORRUPT_MESSAGE  # a whole batch, then part of one
    assert refused(rewrite(good, magic=1))[0] == protocol.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_log_validator_checks_of_a_clients_batch():
    good = build([(b"k", b"v", []), (b"k2", b"v2", [])])
    code, message = refused(rewrite(good, last_offset_delta=5))
    assert code == protocol.INVALID_RECORD and "offset range" in message
    code, message = refused(rewrite(good, attributes=0x20))  # the control bit
    assert code == protocol.INVALID_RECORD and "control" in message
    assert refused(rewrite(good, producer_id=7, base_sequence=-1))[0] == protocol.INVALID_RECORD
    code, message = refused(rewrite(good, attributes=6))
    assert code == protocol.UNSUPPORTED_COMPRESSION_TYPE and "compression type 6" in message
    # the batch says 3 records (and offsets 0-2) where it holds 2; then 1 where it holds 2
    assert refused(rewrite(good, count=3, last_offset_delta=2))[0] == protocol.CORRUPT_MESSAGE
    assert refused(rewrite(good, count=1, last_offset_delta=0))[0] == protocol.CORRUPT_MESSAGE


def test_compressed_inner_records_need_incremental_offsets():
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, 1, b"a", b"1" * 500, [])
    builder.append(2, 1, b"b", b"2" * 500, [])  # offset delta 2 after 0
    data = bytes(builder.build())
    assert data[22] & 0x07 == 1  # gzip (kafka-python writes a batch uncompressed when that is smaller)
    code, message = refused(rewrite(data, last_offset_delta=1))
    assert code == protocol.INVALID_RECORD and "incremental offsets" in message


def test_undecodable_compressed_bytes_are_corrupt_message():
    good = bytearray(build([(b"k", b"v" * 100, [])] * 20, codec=CODECS["lz4"]))
    good[70:90] = b"\xff" * 20
    code, message = refused(rewrite(bytes(good)))
    assert code == protocol.CORRUPT_MESSAGE and "lz4" in message


def test_flipped_bytes_under_a_fresh_crc_decode_or_are_refused_never_anything_else():
    rnd = random.Random(7)
    good = build(sample(40, rnd))
    for _ in range(400):
        buf = bytearray(good)
        for _ in range(rnd.choice([1, 2, 5])):
            buf[rnd.randrange(61, len(buf))] = rnd.randrange(256)
        try:
            table, _ = decode_records(rewrite(bytes(buf)))
        except RecordBatchError as e:
            assert e.errno in (protocol.CORRUPT_MESSAGE, protocol.INVALID_RECORD)
        else:  # what decodes is what kafka-python reads
            assert decoded_rows(table) == kafka_python_reads(rewrite(bytes(buf)))


def test_encode_batch_keeps_offsets_and_covers_passed_ones_and_empty_batch_spans_its_offsets():
    rows = pa.table({OFFSET: pa.array([10, 11, 14], pa.int64()), KEY: pa.array([b"a", None, b"c"], pa.binary()),
                     VALUE: pa.array([b"1", b"2", None], pa.binary()), TIMESTAMP: pa.array([5, 6, 7], pa.int64()),
                     HEADERS: pa.array([[], [{"key": "h", "value": b"x"}], None],
                                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))})
    data = encode_batch(rows, 10, 20, 1 << 20, first=True)
    [batch] = list(MemoryRecords(data))
    assert batch.base_offset == 10 and batch.next_offset == 20  # the batch covers the offsets the read passed
    assert [r.offset for r in batch] == [10, 11, 14]
    empty = empty_batch(20, 29)
    [e] = list(MemoryRecords(empty))
    assert e.validate_crc() and e.base_offset == 20 and e.next_offset == 30 and list(e) == []


def builder_encoding(rows: pa.Table, position: int, next_offset: int, budget: int, *, first: bool) -> bytes:
    """kafka-python's DefaultRecordBatchBuilder writing the batch encode_batch writes: the reference."""
    offsets = rows.column(OFFSET).to_pylist()
    base = offsets[0]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=max(budget, 1))
    added = 0
    for o, k, v, t, hs in zip(offsets, rows.column(KEY).to_pylist(), rows.column(VALUE).to_pylist(),
                              rows.column(TIMESTAMP).to_pylist(), rows.column(HEADERS).to_pylist(), strict=True):
        if builder.append(o - base, t, k, v, [(h["key"], h["value"]) for h in hs or ()]) is None:
            break
        added += 1
    if not first and builder.size() > budget:
        return b""
    if added == rows.num_rows and next_offset - 1 > offsets[-1]:
        builder._last_offset = next_offset - 1 - base
    buf = builder.build()
    buf[0:8] = base.to_bytes(8, "big", signed=True)
    return bytes(buf)


HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.mark.parametrize("with_headers", [False, True])
def test_encode_batch_writes_what_kafka_python_builds_at_every_budget(with_headers):
    rnd = random.Random(with_headers)
    n = 200
    offsets = sorted(rnd.sample(range(10**6, 10**6 + 600), n))
    records = sample(n, rnd)
    headers = [[{"key": k, "value": v} for k, v in h] if with_headers else [] for _, _, h in records]
    if with_headers:
        headers[5] = None
    rows = pa.table({OFFSET: pa.array(offsets, pa.int64()), KEY: pa.array([r[0] for r in records], pa.binary()),
                     VALUE: pa.array([r[1] for r in records], pa.binary()),
                     TIMESTAMP: pa.array([1_700_000_000_000 + rnd.randrange(-10**9, 10**9) for _ in range(n)],
                                         pa.int64()),
                     HEADERS: pa.array(headers, HEADERS_TYPE)})
    full = builder_encoding(rows, offsets[0], offsets[-1] + 50, 1 << 30, first=True)
    assert encode_batch(rows, offsets[0], offsets[-1] + 50, 1 << 30, first=True) == full
    for budget in [0, 1, 61, 100, 5000, 100_000, len(full) - 1, len(full)]:
        for first in (True, False):
            assert encode_batch(rows, offsets[0], offsets[-1] + 50, budget, first=first) == builder_encoding(
                rows, offsets[0], offsets[-1] + 50, budget, first=first), (budget, first)
    sliced = rows.slice(3, 40)  # a slice of a table: offsets into shared buffers
    assert encode_batch(sliced, offsets[3], offsets[42] + 1, 1 << 30, first=True) == builder_encoding(
        sliced, offsets[3], offsets[42] + 1, 1 << 30, first=True)
