"""Kafka's default partitioner for keyed records: murmur2 of the key bytes, made positive, modulo the partition count.

A key lands on the partition number Kafka's Java producer would pick for it (``BuiltInPartitioner.partitionForKey``:
``Utils.toPositive(Utils.murmur2(serializedKey)) % numPartitions``), so a topic's records are laid out as in Kafka
and a consumer that knows Kafka's rule finds a key where it expects it. ``toPositive`` is ``n & 0x7fffffff``,
not ``abs``: the two differ on negative hashes for partition counts other than powers of two.

:func:`murmur2` is the scalar port of ``Utils.murmur2`` (32-bit wrapping arithmetic, little-endian 4-byte blocks,
the tail bytes falling through); :func:`murmur2_array` computes the same hash for a whole Arrow column with numpy,
one pass over the keys' 4-byte blocks per block index rather than a Python loop per key, so a bulk producer pays no
Python per record (see ``tests/test_partitioner.py`` for the measured rate).

Null keys are not hashed: Kafka's producer gives them to its sticky partitioner (KIP-480), which
:mod:`deltalog.producer.router` follows.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from deltalog.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["murmur2", "murmur2_array", "partition_for_key", "partitions_for_keys", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as the Java ``int`` it returns (signed 32-bit)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    blocks = length // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & ~3
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which would move keys between partitions)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | str, num_partitions: int) -> int:
    """The partition Kafka's producer picks for ``key`` (a ``str`` is hashed as its UTF-8 bytes)."""
    _check_count(num_partitions)
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return to_positive(murmur2(data)) % num_partitions


def murmur2_array(keys: pa.Array | pa.ChunkedArray | Iterable[bytes | str | None]) -> np.ndarray:
    """:func:`murmur2` of every key of a binary or string column, as ``int32`` (a null key hashes as empty;
    :func:`partitions_for_keys` tells them apart)."""
    arr = _large_binary(keys)
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data_buffer = arr.buffers()[2]
    # Four zero bytes of padding: a key's tail bytes are gathered for every row, masked afterwards.
    data = np.zeros((data_buffer.size if data_buffer is not None else 0) + 4, np.uint8)
    if data_buffer is not None:
        data[:-4] = np.frombuffer(data_buffer, dtype=np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    if arr.null_count:  # a null slot may span bytes in Arrow's layout; hash it as the empty key
        lengths = np.where(np.asarray(arr.is_valid()), lengths, 0)
    h = lengths.astype(np.uint32)
    h ^= np.uint32(_SEED)
    m = np.uint32(_M)

    blocks = lengths >> 2
    most = int(blocks.max()) if n else 0
    if most:
        # Rows sorted by block count, longest first: the rows that still have a block j are a prefix, so each step
        # works on a slice rather than on a gathered subset. ``words[p]`` is the little-endian uint32 at byte p.
        order = np.argsort(-blocks, kind="stable")
        descending = -blocks[order]
        hs = h[order]
        block_start = starts[order]
        words = np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, strides=(1,))
        for j in range(most):
            active = int(np.searchsorted(descending, -j, side="left"))  # rows with more than j blocks
            k = words[block_start[:active] + 4 * j]
            k *= m
            k ^= k >> np.uint32(_R)
            k *= m
            head = hs[:active]
            head *= m
            head ^= k
        h[order] = hs

    rest = lengths & 3
    tail = starts + (lengths - rest)
    last = np.where(rest >= 3, data[tail + 2].astype(np.uint32) << np.uint32(16), np.uint32(0))
    last |= np.where(rest >= 2, data[tail + 1].astype(np.uint32) << np.uint32(8), np.uint32(0))
    last |= np.where(rest >= 1, data[tail].astype(np.uint32), np.uint32(0))
    h ^= last
    h = np.where(rest >= 1, h * m, h)
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h.view(np.int32)


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray | Iterable[bytes | str | None],
                        num_partitions: int) -> np.ndarray:
    """:func:`partition_for_key` of every key of a column, as ``int32``; ``-1`` where the key is null."""
    _check_count(num_partitions)
    arr = _large_binary(keys)
    parts = ((murmur2_array(arr).view(np.uint32) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    if arr.null_count:
        parts[~np.asarray(arr.is_valid())] = -1
    return parts


def _check_count(num_partitions: int) -> None:
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)) or num_partitions < 1:
        raise InvalidArgumentError(f"the partition count must be an integer >= 1, not {num_partitions!r}")


def _large_binary(keys: pa.Array | pa.ChunkedArray | Iterable[bytes | str | None]) -> pa.LargeBinaryArray:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        try:
            keys = pa.array([k.encode("utf-8") if isinstance(k, str) else k for k in keys], pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise InvalidTypeError(f"keys must be a binary or string column, not {e}") from None
    if keys.type not in (pa.binary(), pa.large_binary(), pa.string(), pa.large_string()):
        raise InvalidTypeError(f"keys must be a binary or string column, not {keys.type}")
    return keys.cast(pa.large_binary())
