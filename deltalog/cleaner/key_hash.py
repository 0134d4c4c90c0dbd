"""The 128-bit key hash of the offset map: two XXH64 hashes of the key bytes, vectorized with numpy.

Kafka's SkimpyOffsetMap keys its entries by a 16-byte MD5 of the record key (``SkimpyOffsetMap.hashInto``: hashes,
not keys, so an entry has a fixed size). deltalog uses two independently seeded 64-bit XXH64 hashes:
with 128 bits, the chance that two of 10^9 keys collide (which would silently drop a record) is about
10^-21 per pass; a single 64-bit hash would give about 3 in 10,000 at 10^8 keys.

The hash runs inside Spark tasks on whole Arrow arrays of keys: every step is a numpy operation over all
keys at once (no Python per record). Keys are read in 8-byte little-endian words straight from the Arrow
data buffer; the algorithm is the reference XXH64 (32-byte stripes, then 8-, 4- and 1-byte tails, then the
avalanche), so ``xxh64(keys, 42)`` equals Spark's built-in ``xxhash64(key)`` for the same bytes, which the
tests check. A step runs once per 8-byte word of the longest key, over the keys that long; a very long key
costs its own iterations, not the others'.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

P1 = np.uint64(11400714785074694791)
P2 = np.uint64(14029467366897019727)
P3 = np.uint64(1609587929392839161)
P4 = np.uint64(9650029242287828579)
P5 = np.uint64(2870177450012600261)

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
    return hs
