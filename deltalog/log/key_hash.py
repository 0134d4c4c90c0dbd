"""The 128-bit key hash of the offset map: two XXH64 hashes of the key bytes, vectorized with numpy.

Kafka's SkimpyOffsetMap keys its entries by a 16-byte MD5 of the record key (``SkimpyOffsetMap.hashInto``: hashes,
not keys, so an entry has a fixed size). deltalog uses two independently seeded 64-bit XXH64 hashes:
with 128 bits, the chance that two of 10^9 keys collide (which would silently drop a record) is about
10^-21 per pass; a single 64-bit hash would give about 3 in 10,000 at 10^8 keys.

The hash runs inside Spark tasks on whole Arrow arrays of keys: every step is a numpy operation over all
keys at once (no Python per record). Keys are read in 8-byte little-endian words straight from the Arrow
data buffer; the algorithm is the reference XXH64 (32-byte stripes, then 8-, 4- and 1-byte tails, then the
avalanche), so ``xxh64(keys, 42)`` equals Spark's built-in ``xxhash64(key)`` for the same bytes, which the
tests check. A step runs once per 8-byte word of the longest key, over the keys that long, so a long key would
cost one numpy step per 8 bytes: keys of :data:`LONG_KEY_BYTES` or more are hashed one at a time by the ``xxhash``
package's C XXH64 instead (same algorithm and seeds, so the same values: they are stored in every table), at
memory speed. Short keys, the common case, stay on the vectorised path, where a call per key would cost more.
That path stays hand-written on purpose: no maintained library hashes a whole Arrow column of keys in one call
(``xxhash`` and Arrow's compute functions take one key at a time, or have no XXH64), and exactness matters as much
as speed, since the values are stored in every table and must equal Spark's ``xxhash64``.

The log writes each record's hash beside it at append (the key-hash columns of
:data:`~deltalog.log.record.KEY_HASH_FIELDS`, :func:`with_key_hash`), so the cleaner's pass 1 reads the hashes
instead of the keys; :func:`footer_has_key_hash` says from a Parquet footer alone whether a file's hashes are all
there, and :func:`hashes_of` takes the written hashes and computes only the missing ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from deltalog.log.record import KEY, KEY_HASH_FIELDS, KEY_HASH_HI, KEY_HASH_LO

P1 = np.uint64(11400714785074694791)
P2 = np.uint64(14029467366897019727)
P3 = np.uint64(1609587929392839161)
P4 = np.uint64(9650029242287828579)
P5 = np.uint64(2870177450012600261)

#: Keys this long or longer are hashed one by one in C (``xxhash``); shorter ones by the vectorised numpy steps,
#: which cost about as much per key at this length and less below it (docs/performance.md).
LONG_KEY_BYTES = 256

#: Seeds of the two halves. 42 is Spark's seed for ``xxhash64``; the second is arbitrary and fixed.
SEED_HI = 42
SEED_LO = 0x2545F4914F6CDD1D


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    acc = acc + lane * P2
    return _rotl(acc, 31) * P1


def _merge_round(acc: np.ndarray, val: np.ndarray) -> np.ndarray:
    acc = acc ^ _round(np.zeros_like(val), val)
    return acc * P1 + P4


class _Words:
    """Unaligned little-endian reads from a byte buffer: ``u64[p]`` is the 8 bytes at byte ``p``.

    A numpy view with a stride of one byte over the buffer (padded by 8 zero bytes), so a read is one
    gather, whatever the alignment.
    """

    def __init__(self, data: np.ndarray) -> None:
        n = max(len(data) - 7, 0)
        self.u64 = np.ndarray((n,), dtype="<u8", buffer=data, strides=(1,))
        self.u32 = np.ndarray((max(len(data) - 3, 0),), dtype="<u4", buffer=data, strides=(1,))
        self.u8 = data


def _take(values: np.ndarray, active: np.ndarray | None) -> np.ndarray:
    return values if active is None else values[active]


def _put(target: np.ndarray, active: np.ndarray | None, values: np.ndarray) -> None:
    if active is None:
        target[:] = values
    else:
        target[active] = values


def _active(mask: np.ndarray) -> np.ndarray | None:
    """Indices where ``mask`` holds, or None when it holds everywhere (whole-array operations then)."""
    return None if mask.all() else np.flatnonzero(mask)


def _buffers(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data bytes padded by 8 zero bytes, start of each key, length of each key) of a binary array."""
    if pa.types.is_large_binary(keys.type):
        offsets_type = np.int64
    else:
        keys = keys.cast(pa.binary())
        offsets_type = np.int32
    _validity, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offsets_type)[keys.offset:keys.offset + len(keys) + 1].astype(np.int64)
    raw = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    data = np.concatenate([raw[: int(offsets[-1]) if len(offsets) else 0], np.zeros(8, dtype=np.uint8)])
    return data, offsets[:-1], offsets[1:] - offsets[:-1]


def xxh64(keys: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
    """XXH64 of every key's bytes with ``seed``, as ``uint64``; a null key hashes as empty bytes."""
    return xxh64_seeds(keys, (seed,))[0]


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The two 64-bit halves of the 128-bit key hash of every key."""
    hi, lo = xxh64_seeds(keys, (SEED_HI, SEED_LO))
    return hi, lo


def xxh64_seeds(keys: pa.Array | pa.ChunkedArray, seeds: tuple[int, ...]) -> list[np.ndarray]:
    """XXH64 of every key with each of ``seeds``: the words are read once for all seeds."""
    if isinstance(keys, pa.ChunkedArray):
        if keys.num_chunks == 1:
            keys = keys.chunk(0)
        else:
            parts = [xxh64_seeds(c, seeds) for c in keys.chunks]
            return [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=np.uint64)
                    for i in range(len(seeds))]
    n = len(keys)
    if n == 0:
        return [np.zeros(0, dtype=np.uint64) for _ in seeds]
    data, start, length = _buffers(keys)
    long_keys_ = np.flatnonzero(length >= LONG_KEY_BYTES)
    full_length = length
    if len(long_keys_):  # hashed in C below: the numpy steps see them as empty
        length = length.copy()
        length[long_keys_] = 0
    words = _Words(data)
    with np.errstate(over="ignore"):
        hs = [np.full(n, np.uint64(seed) + P5, dtype=np.uint64) for seed in seeds]
        pos = start.copy()
        # 32-byte stripes, for keys of 32 bytes or more.
        long_keys = _active(length >= 32)
        if long_keys is None or len(long_keys):
            m = n if long_keys is None else len(long_keys)
            lanes = [[np.full(m, np.uint64(seed) + P1 + P2, dtype=np.uint64), np.full(m, np.uint64(seed) + P2, dtype=np.uint64),
                      np.full(m, np.uint64(seed), dtype=np.uint64), np.full(m, np.uint64(seed) - P1, dtype=np.uint64)]
                     for seed in seeds]
            stripes = _take(length, long_keys) // 32
            lp = _take(start, long_keys).copy()
            for k in range(int(stripes.max())):
                active = _active(stripes > k)
                p = _take(lp, active)
                for j in range(4):
                    word = words.u64[p + 8 * j]
                    for v in lanes:
                        _put(v[j], active, _round(_take(v[j], active), word))
                _put(lp, active, p + 32)
            for h, (v1, v2, v3, v4) in zip(hs, lanes, strict=True):
                acc = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
                for v in (v1, v2, v3, v4):
                    acc = _merge_round(acc, v)
                _put(h, long_keys, acc)
            _put(pos, long_keys, lp)
        lengths = length.astype(np.uint64)
        for h in hs:
            h += lengths
        end = start + length
        # 8-byte words.
        count = (end - pos) // 8
        for k in range(int(count.max())):
            active = _active(count > k)
            p = _take(pos, active)
            k1 = _rotl(words.u64[p] * P2, 31) * P1
            for h in hs:
                _put(h, active, _rotl(_take(h, active) ^ k1, 27) * P1 + P4)
            _put(pos, active, p + 8)
        # One 4-byte word.
        active = _active(end - pos >= 4)
        if active is None or len(active):
            p = _take(pos, active)
            lane = words.u32[p].astype(np.uint64) * P1
            for h in hs:
                _put(h, active, _rotl(_take(h, active) ^ lane, 23) * P2 + P3)
            _put(pos, active, p + 4)
        # Single bytes.
        count = end - pos
        for k in range(int(count.max())):
            active = _active(count > k)
            byte = words.u8[_take(pos, active) + k].astype(np.uint64) * P5
            for h in hs:
                _put(h, active, _rotl(_take(h, active) ^ byte, 11) * P1)
        # Avalanche.
        for h in hs:
            h ^= h >> np.uint64(33)
            h *= P2
            h ^= h >> np.uint64(29)
            h *= P3
            h ^= h >> np.uint64(32)
    if len(long_keys_):
        _hash_long_keys(hs, seeds, data, start, long_keys_, full_length)
    return hs


def _hash_long_keys(hs: list[np.ndarray], seeds: tuple[int, ...], data: np.ndarray, start: np.ndarray,
                    which: np.ndarray, length: np.ndarray) -> None:
    """XXH64 of the keys at ``which`` by the C library, one call per key and seed over a view of the buffer."""
    view = memoryview(data)
    digest = xxhash.xxh64_intdigest
    for i in which.tolist():
        key = view[int(start[i]):int(start[i] + length[i])]
        for h, seed in zip(hs, seeds, strict=True):
            h[i] = digest(key, seed)


def _null_mask(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if column.null_count == 0:
        return np.zeros(len(column), dtype=bool)
    return column.is_null().to_numpy(zero_copy_only=False)


def _bits(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A key-hash column's values as ``uint64`` (nulls read as 0: callers mask them)."""
    if column.null_count:
        column = pc.fill_null(column, 0)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column.to_numpy(zero_copy_only=False).view(np.uint64)


def hash_columns(keys: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """The two key-hash columns for ``keys`` (the ``uint64`` halves as ``int64`` bits; null where the key is)."""
    hi, lo = key_hashes(keys)
    mask = _null_mask(keys) if keys.null_count else None
    return (pa.array(hi.view(np.int64), pa.int64(), mask=mask), pa.array(lo.view(np.int64), pa.int64(), mask=mask))


def hashes_of(keys: pa.ChunkedArray | pa.Array, hi: pa.ChunkedArray | pa.Array | None,
              lo: pa.ChunkedArray | pa.Array | None) -> tuple[np.ndarray, np.ndarray]:
    """The ``uint64`` halves of every key's hash: the written ones (``hi``/``lo``, the key-hash columns; None when
    the file has none), computed from the key only where a keyed row has none. A keyless row's is arbitrary."""
    if hi is None or lo is None or hi.null_count == len(hi):
        return key_hashes(keys)
    h, l_ = _bits(hi), _bits(lo)
    if hi.null_count > keys.null_count:
        missing = np.flatnonzero(_null_mask(hi) & ~_null_mask(keys))
        if len(missing):
            h, l_ = h.copy(), l_.copy()
            h[missing], l_[missing] = key_hashes(keys.take(pa.array(missing)))
    return h, l_


def with_key_hash(table: pa.Table) -> pa.Table:
    """``table`` (rows with a ``key`` column) with both key-hash columns, last, complete: computed for every row
    when it has none, else only for keyed rows that lack one (a file another engine merged from older files)."""
    names = table.column_names
    if KEY_HASH_HI not in names or KEY_HASH_LO not in names:
        hi, lo = hash_columns(table.column(KEY))
        table = table.drop_columns([c for c in (KEY_HASH_HI, KEY_HASH_LO) if c in names])
        return table.append_column(KEY_HASH_FIELDS[0], hi).append_column(KEY_HASH_FIELDS[1], lo)
    keys = table.column(KEY)
    if table.column(KEY_HASH_HI).null_count <= keys.null_count:
        return table  # a hash is non-null only beside a key: as many nulls as the keys means none is missing
    h, l_ = hashes_of(keys, table.column(KEY_HASH_HI), table.column(KEY_HASH_LO))
    mask = _null_mask(keys) if keys.null_count else None
    for field, values in zip(KEY_HASH_FIELDS, (h, l_), strict=True):
        table = table.set_column(table.schema.get_field_index(field.name), field,
                                 pa.array(values.view(np.int64), pa.int64(), mask=mask))
    return table


def footer_has_key_hash(metadata: Any, row_groups: Sequence[int] | None = None) -> bool:
    """Whether every keyed row of ``row_groups`` (default: all) of a Parquet file has its hash written, from the
    footer (``pyarrow.parquet.FileMetaData``) alone: the file has the key-hash columns and, in each row group,
    their null count equals the key's (a hash is written only beside a key). False when the footer lacks the
    statistics to tell, or the columns: the file's keys are then read and hashed."""
    if metadata.num_row_groups == 0:
        return True
    first = metadata.row_group(0)
    index = {first.column(j).path_in_schema: j for j in range(first.num_columns)}
    if KEY_HASH_HI not in index or KEY_HASH_LO not in index or KEY not in index:
        return False
    for rg in (range(metadata.num_row_groups) if row_groups is None else row_groups):
        group = metadata.row_group(rg)
        if group.num_rows == 0:
            continue
        counts = []
        for name in (KEY, KEY_HASH_HI, KEY_HASH_LO):
            st = group.column(index[name]).statistics
            if st is None or not st.has_null_count:
                return False
            counts.append(st.null_count)
        if not counts[0] == counts[1] == counts[2]:
            return False
    return True
