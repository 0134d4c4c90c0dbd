"""A set of record offsets as a bitmap: what pass 2 of a cleaning pass probes, one bit per offset.

Pass 1 (:mod:`deltalog.cleaner.offset_map`) ends with the offsets that survive the mapped range: the latest
offset of every key. Kafka's pass 2 looks each record's key up in the offset map (a 16-byte hash and an
8-byte offset per entry, 24 bytes); deltalog turns the map into the set of surviving offsets instead, so a
record survives when its own offset's bit is set: no key is hashed or compared in pass 2, and the set
costs one bit per offset of the range (``(hi - lo) / 8`` bytes: 188 KB for a range of 1.5 M offsets,
125 MB for 10^9), however many keys. Pass 2's tasks each get the slice of the bitmap that covers their
own files (:meth:`OffsetBitmap.slice`), not the whole set.

Offsets are numpy ``int64`` arrays throughout; every operation is vectorized (no Python per offset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Offsets packed per numpy call when building: bounds the temporary bool array to 64 MiB.
_BUILD_BLOCK = 1 << 26


@dataclass(frozen=True)
class OffsetBitmap:
    """Offsets in ``[lo, hi)`` whose bit is set: bit ``o - base`` of ``bits`` (little-endian within a byte).

    ``base`` is ``lo`` rounded down to a multiple of 8, so a slice starts on a byte boundary.
    """

    lo: int
    hi: int
    base: int
    bits: np.ndarray  # uint8

    @classmethod
    def from_offsets(cls, offsets: np.ndarray, lo: int, hi: int) -> OffsetBitmap:
        """The set of ``offsets`` (any order, no duplicates) that lie in ``[lo, hi)``."""
        base = lo - lo % 8
        size = max(hi - base, 0)
        bits = np.zeros((size + 7) // 8, dtype=np.uint8)
        rel = np.sort(np.asarray(offsets, dtype=np.int64)) - base
        rel = rel[(rel >= lo - base) & (rel < size)]
        # Pack block by block (each block a whole number of bytes): one bool per offset only per block.
        for start in range(0, size, _BUILD_BLOCK):
            stop = min(start + _BUILD_BLOCK, size)
            a, b = np.searchsorted(rel, [start, stop])
            if a == b:
                continue
            block = np.zeros(stop - start, dtype=bool)
            block[rel[a:b] - start] = True
            packed = np.packbits(block, bitorder="little")
            bits[start // 8:start // 8 + len(packed)] = packed
        return cls(lo, hi, base, bits)

    def contains(self, offsets: np.ndarray) -> np.ndarray:
        """A bool mask: which of ``offsets`` are in the set (offsets outside ``[lo, hi)`` never are)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        inside = (offsets >= self.lo) & (offsets < self.hi)
        rel = np.where(inside, offsets - self.base, 0)
        if len(self.bits) == 0:
            return np.zeros(len(offsets), dtype=bool)
        hit = (self.bits[rel >> 3] >> (rel & 7).astype(np.uint8)) & 1
        return inside & hit.astype(bool)

    def slice(self, lo: int, hi: int) -> OffsetBitmap:
        """The same set restricted to ``[lo, hi)``, sharing no more memory than it needs."""
        lo, hi = max(lo, self.lo), min(hi, self.hi)
        if hi <= lo:
            return OffsetBitmap(lo, lo, lo - lo % 8, np.zeros(0, dtype=np.uint8))
        base = lo - lo % 8
        first = (base - self.base) // 8
        last = (hi - self.base + 7) // 8
        bits = self.bits[first:last].copy()
        # Offsets of the edge bytes outside [lo, hi) are not in the slice: cleared, so len() counts the slice's set.
        bits[0] &= np.uint8((0xFF << (lo - base)) & 0xFF)
        if (hi - base) % 8:
            bits[-1] &= np.uint8((1 << ((hi - base) % 8)) - 1)
        return OffsetBitmap(lo, hi, base, bits)

    def first_at_or_after(self, lo: int, hi: int) -> int | None:
        """The smallest offset of the set in ``[lo, hi)``, or None."""
        lo, hi = max(lo, self.lo), min(hi, self.hi)
        if hi <= lo:
            return None
        rel_lo, rel_hi = lo - self.base, hi - self.base
        first_byte, last_byte = rel_lo >> 3, (rel_hi + 7) >> 3
        window = self.bits[first_byte:last_byte].copy()
        window[0] &= np.uint8((0xFF << (rel_lo & 7)) & 0xFF)  # bits below lo in the first byte
        nonzero = np.flatnonzero(window)
        if len(nonzero) == 0:
            return None
        byte_index = int(nonzero[0])
        byte = int(window[byte_index])
        found = self.base + (first_byte + byte_index) * 8 + ((byte & -byte).bit_length() - 1)
        return found if found < hi else None

    def __len__(self) -> int:
        """How many offsets are in the set."""
        return int(np.bitwise_count(self.bits).sum())

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)
