"""Deterministic workloads: a compacted topic's partition table generated from a seed, fast.

A workload is ``records`` appends over ``keys`` distinct keys (uniformly drawn), ``value_bytes`` random
bytes a value, a ``tombstone_fraction`` of them tombstones. The first ``1 - dirty_fraction`` of the log
has already been cleaned, as after an earlier pass: it holds only the latest record of each key among
those appends (tombstones kept, stamped with a delete horizon that has not passed yet), in one cleaned
segment, and the cleaner checkpoint sits at its end. The rest is dirty: closed segments of
``segment_records`` records each, so the whole log is cleanable (the active segment is empty).

The data is built with numpy and pyarrow and written as Parquet files through deltalog's own file writer
(:func:`deltalog.log.delta.write_data_file`, the one appends use), then committed to the partition's Delta
table in one commit with the log positions an append path would have left: a few seconds for millions
of records, instead of minutes through ``store.append``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from deltalog.log import delta
from deltalog.log.record import BASE_SCHEMA, DELETE_HORIZON, HEADERS, KEY, OFFSET, RECORD_SCHEMA, SEGMENT, TIMESTAMP, VALUE
from deltalog.store import Store

TOPIC = "bench"
#: The benchmark's "now": every timestamp and delete horizon is relative to it (a ManualClock holds it).
NOW_MS = 1_700_000_000_000
#: Kafka's default delete.retention.ms, used for the horizons the earlier clean stamped.
DELETE_RETENTION_MS = 86_400_000


@dataclass(frozen=True)
class Workload:
    """The knobs of a generated log; the same seed and knobs give the same bytes."""

    name: str
    records: int
    keys: int
    value_bytes: int = 100
    tombstone_fraction: float = 0.05
    dirty_fraction: float = 0.5
    segment_records: int = 100_000
    append_records: int = 200_000
    append_batch: int = 10_000
    seed: int = 6

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


PRESETS: dict[str, Workload] = {
    # A couple of minutes on 2 cores, for CI-sized machines and the targets in docs/benchmarks.md.
    "small": Workload("small", records=1_500_000, keys=150_000),
    # 8+ cores, 16+ GiB.
    "medium": Workload("medium", records=20_000_000, keys=2_000_000, segment_records=1_000_000,
                       append_records=1_000_000, append_batch=50_000),
    # A real machine: 32+ cores, 64+ GiB; the map no longer fits one pass at Kafka's default buffer.
    "large": Workload("large", records=200_000_000, keys=20_000_000, segment_records=5_000_000,
                      append_records=5_000_000, append_batch=100_000),
    # Seconds; for trying the harness itself.
    "tiny": Workload("tiny", records=100_000, keys=10_000, segment_records=20_000,
                     append_records=20_000, append_batch=5_000),
}


def key_bytes(ids: np.ndarray) -> pa.Array:
    """Keys ``b"key-%010d"`` (14 bytes) for integer ids, built without a Python loop."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    width = 14
    buf = np.empty((n, width), dtype=np.uint8)
    buf[:, :4] = np.frombuffer(b"key-", dtype=np.uint8)
    rest = ids.copy()
    for pos in range(width - 1, 3, -1):
        buf[:, pos] = ord("0") + rest % 10
        rest //= 10
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(buf.tobytes())])


def random_values(rng: np.random.Generator, n: int, size: int, tombstone: np.ndarray) -> pa.Array:
    """``n`` values of ``size`` random bytes; null (a tombstone) where ``tombstone`` is set."""
    lengths = np.where(tombstone, 0, size).astype(np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8)
    validity = pa.array(~tombstone).buffers()[1]
    return pa.BinaryArray.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data.tobytes())],
                                       null_count=int(tombstone.sum()))


def record_table(offsets: np.ndarray, key_ids: np.ndarray, values: pa.Array, segment: np.ndarray,
                 horizon: pa.Array | None = None) -> pa.Table:
    """Rows in the partition schema (no headers; timestamps one millisecond per offset before now)."""
    n = len(offsets)
    empty_headers = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                             pa.array([], RECORD_SCHEMA.field(HEADERS).type.value_type))
    return pa.table(
        {
            OFFSET: pa.array(offsets, pa.int64()),
            KEY: key_ids if isinstance(key_ids, pa.Array) else key_bytes(key_ids),
            VALUE: values,
            HEADERS: empty_headers.cast(RECORD_SCHEMA.field(HEADERS).type),
            TIMESTAMP: pa.array(NOW_MS - 3_600_000 + offsets, pa.int64()),
            SEGMENT: pa.array(segment, pa.int64()),
            DELETE_HORIZON: pa.nulls(n, pa.int64()) if horizon is None else horizon,
        },
        schema=BASE_SCHEMA,  # what a plain append writes
    )


@dataclass(frozen=True)
class Generated:
    """What was written: the partition's log positions and sizes."""

    log_end_offset: int
    first_dirty_offset: int
    clean_records: int
    dirty_records: int
    bytes: int
    files: int

    @property
    def total_records(self) -> int:
        return self.clean_records + self.dirty_records


def generate(store: Store, w: Workload) -> Generated:
    """Create topic ``bench`` (1 partition, compact, segment.bytes 1 GiB) in ``store`` holding ``w``."""
    rng = np.random.default_rng(w.seed)
    n = w.records
    key_ids = rng.integers(0, w.keys, n, dtype=np.int64)
    tombstone = rng.random(n) < w.tombstone_fraction
    values = random_values(rng, n, w.value_bytes, tombstone)
    offsets = np.arange(n, dtype=np.int64)
    prefix = int(round(n * (1.0 - w.dirty_fraction)))

    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact", "segment.bytes": 1 << 30})
    log = store.log(TOPIC, 0)
    adds = []
    # The clean prefix: the latest record of each key among the first ``prefix`` appends, one cleaned
    # segment (base offset 0) in files of ``segment_records`` rows, tombstones stamped by the earlier clean.
    if prefix:
        rev = key_ids[:prefix][::-1]
        _, first_in_rev = np.unique(rev, return_index=True)
        keep = np.sort(prefix - 1 - first_in_rev)
        kept_tomb = tombstone[keep]
        horizon = pa.array(np.full(len(keep), NOW_MS + DELETE_RETENTION_MS // 2), pa.int64(), mask=~kept_tomb)
        table = record_table(offsets[keep], key_ids[keep], values.take(pa.array(keep)), np.zeros(len(keep), np.int64),
                             horizon)
        for lo in range(0, table.num_rows, w.segment_records):
            adds.append(delta.write_data_file(log.storage, log.uri, table.slice(lo, w.segment_records), NOW_MS))
        clean_records = table.num_rows
    else:
        clean_records = 0
    # The dirty rest: closed segments of ``segment_records`` records, one file each.
    for lo in range(prefix, n, w.segment_records):
        hi = min(lo + w.segment_records, n)
        seg = np.full(hi - lo, lo, np.int64)
        table = record_table(offsets[lo:hi], key_ids[lo:hi], values.slice(lo, hi - lo), seg)
        adds.append(delta.write_data_file(log.storage, log.uri, table, NOW_MS))
    txns = {
        delta.TXN_LOG_END_OFFSET: n,
        delta.TXN_ACTIVE_SEGMENT: n,
        delta.TXN_ACTIVE_SEGMENT_BYTES: 0,
        delta.TXN_ACTIVE_SEGMENT_OPENED: NOW_MS,
    }
    if prefix:
        txns[delta.TXN_CLEANER_CHECKPOINT] = prefix
    delta.commit(log.table(), adds, txns=txns, operation="append", metadata={"records": n, "benchmark": w.name})
    return Generated(
        log_end_offset=n,
        first_dirty_offset=prefix,
        clean_records=clean_records,
        dirty_records=n - prefix,
        bytes=sum(a.size for a in adds),
        files=len(adds),
    )


def append_batches(w: Workload) -> list[pa.Table]:
    """The Arrow batches both append paths write: ``append_records`` records in ``append_batch`` rows each,
    in the partition schema (offsets from 0, as the first appends to an empty partition get)."""
    rng = np.random.default_rng(w.seed + 1)
    n = w.append_records
    key_ids = rng.integers(0, w.keys, n, dtype=np.int64)
    tombstone = rng.random(n) < w.tombstone_fraction
    values = random_values(rng, n, w.value_bytes, tombstone)
    table = record_table(np.arange(n, dtype=np.int64), key_ids, values, np.zeros(n, np.int64))
    return [table.slice(lo, w.append_batch) for lo in range(0, n, w.append_batch)]
