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
of records, instead of minutes through ``store.append``. A ``streamed`` workload (the ``large`` preset) is
built a segment at a time (:func:`generate_streamed`), so its memory is that of one segment and the key map,
not of the whole log.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log import delta
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
)
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
    #: What the values are: ``random`` bytes (``value_bytes`` each, incompressible: the worst case for a codec)
    #: or ``json`` documents like a changelog's (see :func:`json_values`; ``value_bytes`` is then unused).
    values: str = "random"
    #: Which generated files carry the key-hash columns deltalog writes at append: ``all`` (as today's appends and
    #: passes write them), ``none`` (a store written before they existed: every pass hashes the keys) or ``half``
    #: (every other file: a store part rewritten since).
    key_hash: str = "all"
    #: Built a segment at a time (:func:`generate_streamed`): memory bounded by ``segment_records`` and ``keys``
    #: rather than ``records``. Other bytes than the in-memory generator's for the same seed (one random stream
    #: per segment), so the presets measured before keep theirs.
    streamed: bool = False
    #: ``log.cleaner.dedupe.buffer.size`` of the benchmark's stores, when Kafka's default (128 MiB: 5,033,164 keys
    #: a pass) cannot map the dirty section's keys in one pass, as a broker with such partitions is configured.
    dedupe_buffer_size: int | None = None

    def store_config(self) -> dict[str, int]:
        """The store config the benchmark's stores open with (empty: deltalog's defaults, Kafka's)."""
        return {} if self.dedupe_buffer_size is None else {"log.cleaner.dedupe.buffer.size": self.dedupe_buffer_size}

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


PRESETS: dict[str, Workload] = {
    # A couple of minutes on 2 cores, for CI-sized machines and the targets in docs/benchmarks.md.
    "small": Workload("small", records=1_500_000, keys=150_000),
    # 8+ cores, 16+ GiB.
    "medium": Workload("medium", records=20_000_000, keys=2_000_000, segment_records=1_000_000,
                       append_records=1_000_000, append_batch=50_000),
    # 50 M records in the log (84 M appends, 8.4 M keys: the medium preset's shape, 4.2x), 5.9 GB of files with
    # random values; generated a segment at a time, so it builds on a 24 GiB machine. Its 8.4 M dirty keys need a
    # 256 MiB dedupe buffer for one pass (Kafka's default 128 MiB maps 5,033,164).
    "large": Workload("large", records=84_000_000, keys=8_400_000, segment_records=1_000_000,
                      append_records=1_000_000, append_batch=50_000, streamed=True,
                      dedupe_buffer_size=268_435_456),
    # Seconds; for trying the harness itself.
    "tiny": Workload("tiny", records=100_000, keys=10_000, segment_records=20_000,
                     append_records=20_000, append_batch=5_000),
}


#: The kinds of values a workload can hold (``--workload``).
VALUE_KINDS = ("random", "json")
#: What :attr:`Workload.key_hash` may be.
KEY_HASH_KINDS = ("all", "none", "half")


def with_values(w: Workload, values: str) -> Workload:
    """``w`` with ``values`` for its values (the preset keeps its name, the report says which values)."""
    if values not in VALUE_KINDS:
        raise ValueError(f"values must be one of {', '.join(VALUE_KINDS)}, got {values!r}")
    return replace(w, values=values)


def key_bytes(ids: np.ndarray, prefix: bytes = b"key-", digits: int = 10) -> pa.Array:
    """Keys ``prefix`` + ``digits`` zero-padded decimal digits (``b"key-%010d"`` by default, 14 bytes) for integer
    ids, built without a Python loop."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    start = len(prefix)
    width = start + digits
    buf = np.empty((n, width), dtype=np.uint8)
    buf[:, :start] = np.frombuffer(prefix, dtype=np.uint8)
    rest = ids.copy()
    for pos in range(width - 1, start - 1, -1):
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


#: Keys of the ``json`` workload: ``customer-0000123``, as a changelog keyed by a business id has.
CUSTOMER_PREFIX = b"customer-"
CUSTOMER_DIGITS = 7

_STATUSES = ["active", "suspended", "pending_verification", "closed"]
_TIERS = ["free", "basic", "premium", "enterprise"]
_EVENTS = ["customer.created", "customer.updated", "address.changed", "plan.upgraded", "plan.downgraded",
           "payment.method.added"]
_CITIES = [("Berlin", "DE"), ("Amsterdam", "NL"), ("Lisbon", "PT"), ("Toronto", "CA"), ("Austin", "US"),
           ("Osaka", "JP"), ("Melbourne", "AU"), ("Nairobi", "KE"), ("Sao Paulo", "BR"), ("Krakow", "PL")]
_STREETS = ["Main Street", "Harbour Road", "Station Avenue", "Mill Lane", "Park Boulevard", "Church Street"]


def customer_keys(ids: np.ndarray) -> pa.Array:
    """Keys ``b"customer-%07d"`` (16 bytes) for integer ids."""
    return key_bytes(ids, CUSTOMER_PREFIX, CUSTOMER_DIGITS)


def _json_documents(rng: np.random.Generator, key_ids: np.ndarray, tombstone: np.ndarray, now_ms: int) -> pa.Array:
    """Changelog values: one JSON document (about 330-380 bytes) per record describing customer ``key_ids[i]``,
    the same field names in every document, categorical fields from short lists, numbers and dates that vary;
    null (a tombstone) where ``tombstone`` is set. Built column-wise with Arrow's string kernels (no Python per
    record); snappy compresses a file of them about 5x (measured on 100,000 documents), as codecs do real JSON
    changelogs, where random bytes do not compress at all."""
    n = len(key_ids)

    def pick(choices: list[str]) -> pa.Array:
        return pa.array(choices, pa.string()).take(pa.array(rng.integers(0, len(choices), n)))

    def digits(values: np.ndarray, width: int) -> pa.Array:
        return pc.utf8_lpad(pc.cast(pa.array(values, pa.int64()), pa.string()), width, "0")

    ids = digits(key_ids, CUSTOMER_DIGITS)
    city = rng.integers(0, len(_CITIES), n)
    seconds = now_ms // 1000 - rng.integers(0, 90 * 86_400, n)
    updated = pc.strftime(pa.array(seconds * 1000, pa.timestamp("ms")), format="%Y-%m-%dT%H:%M:%SZ")
    parts = [
        '{"customer_id":"customer-', ids,
        '","event_type":"', pick(_EVENTS),
        '","email":"customer.', ids, '@example.com","status":"', pick(_STATUSES),
        '","tier":"', pick(_TIERS),
        '","balance_cents":', pc.cast(pa.array(rng.integers(0, 10_000_000, n)), pa.string()),
        ',"currency":"EUR","address":{"street":"', pc.cast(pa.array(rng.integers(1, 2000, n)), pa.string()), " ",
        pick(_STREETS), '","city":"', pa.array([c for c, _ in _CITIES]).take(pa.array(city)),
        '","country":"', pa.array([c for _, c in _CITIES]).take(pa.array(city)),
        '","postal_code":"', digits(rng.integers(0, 100_000, n), 5),
        '"},"marketing_opt_in":', pick(["true", "false"]),
        ',"updated_at":"', updated,
        '","version":', pc.cast(pa.array(rng.integers(1, 500, n)), pa.string()), "}",
    ]
    doc = pc.cast(pc.binary_join_element_wise(*parts, ""), pa.binary())
    return pc.if_else(pa.array(tombstone), pa.scalar(None, pa.binary()), doc)


#: Documents built per call of :func:`_json_documents`: a binary array holds at most 2 GiB of data.
JSON_CHUNK_ROWS = 1 << 20


def json_values(rng: np.random.Generator, key_ids: np.ndarray, tombstone: np.ndarray, now_ms: int
                ) -> pa.ChunkedArray:
    """Changelog values for ``key_ids`` (see :func:`_json_documents`), in chunks of :data:`JSON_CHUNK_ROWS`."""
    return pa.chunked_array([_json_documents(rng, key_ids[lo:lo + JSON_CHUNK_ROWS],
                                             tombstone[lo:lo + JSON_CHUNK_ROWS], now_ms)
                             for lo in range(0, len(key_ids), JSON_CHUNK_ROWS)], pa.binary())


def workload_keys(w: Workload, key_ids: np.ndarray) -> pa.Array:
    return customer_keys(key_ids) if w.values == "json" else key_bytes(key_ids)


def workload_values(w: Workload, rng: np.random.Generator, key_ids: np.ndarray, tombstone: np.ndarray
                    ) -> pa.Array | pa.ChunkedArray:
    if w.values == "json":
        return json_values(rng, key_ids, tombstone, NOW_MS)
    return random_values(rng, len(key_ids), w.value_bytes, tombstone)


def _take_sorted(values: pa.Array | pa.ChunkedArray, rows: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """``values.take(rows)`` for ascending ``rows``, chunk by chunk: a ChunkedArray's own ``take`` concatenates its
    chunks first, which overflows a binary array past 2 GiB."""
    if isinstance(values, pa.Array):
        return values.take(pa.array(rows))
    parts, start = [], 0
    for chunk in values.chunks:
        lo, hi = np.searchsorted(rows, [start, start + len(chunk)])
        parts.append(chunk.take(pa.array(rows[lo:hi] - start)))
        start += len(chunk)
    return pa.chunked_array(parts, values.type)


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
        schema=BASE_SCHEMA,
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
    if w.streamed:
        return generate_streamed(store, w)
    rng = np.random.default_rng(w.seed)
    n = w.records
    key_ids = rng.integers(0, w.keys, n, dtype=np.int64)
    tombstone = rng.random(n) < w.tombstone_fraction
    values = workload_values(w, rng, key_ids, tombstone)
    keys = workload_keys(w, key_ids)
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
        table = record_table(offsets[keep], keys.take(pa.array(keep)), _take_sorted(values, keep), np.zeros(len(keep), np.int64),
                             horizon)
        for lo in range(0, table.num_rows, w.segment_records):
            adds.append(delta.write_data_file(log.storage, log.uri, table.slice(lo, w.segment_records), NOW_MS,
                                              key_hash=_hashed(w, len(adds))))
        clean_records = table.num_rows
    else:
        clean_records = 0
    # The dirty rest: closed segments of ``segment_records`` records, one file each.
    for lo in range(prefix, n, w.segment_records):
        hi = min(lo + w.segment_records, n)
        seg = np.full(hi - lo, lo, np.int64)
        table = record_table(offsets[lo:hi], keys.slice(lo, hi - lo), values.slice(lo, hi - lo), seg)
        adds.append(delta.write_data_file(log.storage, log.uri, table, NOW_MS, key_hash=_hashed(w, len(adds))))
    return _commit_generated(log, w, adds, n, prefix, clean_records)


def _commit_generated(log: Any, w: Workload, adds: list[Any], n: int, prefix: int, clean_records: int) -> Generated:
    """Commit the generated files in one Delta commit with the log positions the append path would have left
    (log end, the active segment empty at the end, the cleaner checkpoint after the clean prefix)."""
    txns = {
        delta.TXN_LOG_END_OFFSET: n,
        delta.TXN_ACTIVE_SEGMENT: n,
        delta.TXN_ACTIVE_SEGMENT_BYTES: 0,
        delta.TXN_ACTIVE_SEGMENT_OPENED: NOW_MS,
    }
    if prefix:
        txns[delta.TXN_CLEANER_CHECKPOINT] = prefix
    delta.commit(log.table(), adds, txns=txns, operation="append", metadata={"records": n, "benchmark": w.name})
    return Generated(log_end_offset=n, first_dirty_offset=prefix, clean_records=clean_records,
                     dirty_records=n - prefix, bytes=sum(a.size for a in adds), files=len(adds))


def _hashed(w: Workload, index: int) -> bool:
    """Whether the ``index``-th generated file carries the key-hash columns (see :attr:`Workload.key_hash`)."""
    return w.key_hash == "all" or (w.key_hash == "half" and index % 2 == 1)


def append_batches(w: Workload) -> list[pa.Table]:
    """The Arrow batches both append paths write: ``append_records`` records in ``append_batch`` rows each,
    in the partition schema (offsets from 0, as the first appends to an empty partition get)."""
    rng = np.random.default_rng(w.seed + 1)
    n = w.append_records
    key_ids = rng.integers(0, w.keys, n, dtype=np.int64)
    tombstone = rng.random(n) < w.tombstone_fraction
    values = workload_values(w, rng, key_ids, tombstone)
    table = record_table(np.arange(n, dtype=np.int64), workload_keys(w, key_ids), values, np.zeros(n, np.int64))
    return [table.slice(lo, w.append_batch) for lo in range(0, n, w.append_batch)]


def _segment_draws(w: Workload, index: int, n: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    """The ``index``-th segment's own random stream (seeded by the workload's seed and the index, so any segment can
    be drawn again alone) and its first draws: the key ids and the tombstone flags of its ``n`` appends."""
    rng = np.random.default_rng([w.seed, index])
    return rng, rng.integers(0, w.keys, n, dtype=np.int64), rng.random(n) < w.tombstone_fraction


def generate_streamed(store: Store, w: Workload) -> Generated:
    """:func:`generate`'s log (the same shape: a cleaned prefix holding the latest record of each key among the
    first appends, then closed dirty segments of ``segment_records``), built one segment of appends at a time.

    Memory: one segment's records and a latest-append index per key (8 bytes a key), whatever ``records`` is. The
    prefix is drawn twice: first only its key ids, to find each key's latest append among them; then again (the
    same streams), keeping those appends and drawing values for them alone. Each file is written as soon as it is
    full. The prefix must be whole segments (``records * (1 - dirty_fraction)`` a multiple of ``segment_records``).
    """
    n, size = w.records, w.segment_records
    prefix = int(round(n * (1.0 - w.dirty_fraction)))
    if prefix % size:
        raise ValueError(f"a streamed workload's clean prefix ({prefix:,} appends) must be whole segments of "
                         f"{size:,} records")
    store.create_topic(TOPIC, 1, config={"cleanup.policy": "compact", "segment.bytes": 1 << 30})
    log = store.log(TOPIC, 0)
    adds = []
    starts = range(0, n, size)
    latest = np.full(w.keys, -1, dtype=np.int64)
    for index, lo in enumerate(starts[:prefix // size]):
        _, key_ids, _ = _segment_draws(w, index, size)
        keys, last_in_rev = np.unique(key_ids[::-1], return_index=True)
        latest[keys] = lo + size - 1 - last_in_rev  # segments in order: a later append of a key overwrites
    pending: list[pa.Table] = []
    pending_rows = clean_records = 0
    horizon_ms = NOW_MS + DELETE_RETENTION_MS // 2

    def flush(final: bool) -> None:
        nonlocal pending, pending_rows
        if not pending:
            return
        table = pa.concat_tables(pending)
        full = table.num_rows if final else table.num_rows - table.num_rows % size
        for lo in range(0, full, size):
            adds.append(delta.write_data_file(log.storage, log.uri, table.slice(lo, min(size, full - lo)), NOW_MS,
                                              key_hash=_hashed(w, len(adds))))
        pending = [table.slice(full)] if full < table.num_rows else []
        pending_rows = table.num_rows - full

    for index, lo in enumerate(starts[:prefix // size]):
        rng, key_ids, tombstone = _segment_draws(w, index, size)
        offsets = np.arange(lo, lo + size, dtype=np.int64)
        keep = latest[key_ids] == offsets
        kept_ids, kept_tomb = key_ids[keep], tombstone[keep]
        horizon = pa.array(np.full(len(kept_ids), horizon_ms), pa.int64(), mask=~kept_tomb)
        pending.append(record_table(offsets[keep], workload_keys(w, kept_ids),
                                    workload_values(w, rng, kept_ids, kept_tomb), np.zeros(len(kept_ids), np.int64),
                                    horizon))
        pending_rows += len(kept_ids)
        clean_records += len(kept_ids)
        if pending_rows >= size:
            flush(final=False)
    flush(final=True)
    del latest
    for index, lo in enumerate(starts[prefix // size:], start=prefix // size):
        hi = min(lo + size, n)
        rng, key_ids, tombstone = _segment_draws(w, index, hi - lo)
        table = record_table(np.arange(lo, hi, dtype=np.int64), workload_keys(w, key_ids),
                             workload_values(w, rng, key_ids, tombstone), np.full(hi - lo, lo, np.int64))
        adds.append(delta.write_data_file(log.storage, log.uri, table, NOW_MS, key_hash=_hashed(w, len(adds))))
    return _commit_generated(log, w, adds, n, prefix, clean_records)
