"""The key hash of long keys: the C XXH64 (``xxhash``) for keys of ``LONG_KEY_BYTES`` or more gives the very values
the vectorised numpy path gives (they are stored in every table's key-hash columns), at memory speed."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from deltalog.log import key_hash
from deltalog.log.key_hash import SEED_HI, SEED_LO, key_hashes, xxh64_seeds


def _numpy_only(keys: pa.Array, monkeypatch) -> list[np.ndarray]:
    with monkeypatch.context() as m:
        m.setattr(key_hash, "LONG_KEY_BYTES", 1 << 62)
        return xxh64_seeds(keys, (SEED_HI, SEED_LO))


@pytest.mark.parametrize("binary", [pa.binary(), pa.large_binary()])
def test_long_keys_hash_to_the_values_of_the_vectorised_path(binary, monkeypatch):
    rng = np.random.default_rng(11)
    lengths = [0, 1, 31, 32, 255, 256, 257, 300, 1024, 4099, 70_000, 7, 256]
    keys = pa.array([bytes(rng.integers(0, 256, size=n, dtype=np.uint8)) for n in lengths] + [None], binary)
    assert min(n for n in lengths if n >= key_hash.LONG_KEY_BYTES) == key_hash.LONG_KEY_BYTES
    expected = _numpy_only(keys, monkeypatch)
    got = xxh64_seeds(keys, (SEED_HI, SEED_LO))
    assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
    # a slice and a chunked array read the same bytes
    assert all(np.array_equal(g, e[2:11]) for g, e in zip(xxh64_seeds(keys.slice(2, 9), (SEED_HI, SEED_LO)),
                                                           expected, strict=True))
    chunked = pa.chunked_array([keys.slice(0, 5), keys.slice(5)])
    assert all(np.array_equal(g, e) for g, e in zip(key_hashes(chunked), expected, strict=True))


def test_a_one_megabyte_key_hashes_in_well_under_ten_milliseconds():
    key = pa.array([np.random.default_rng(3).bytes(1 << 20)])
    key_hashes(key)  # imports and first-call costs out of the way
    best = min(_timed(lambda: key_hashes(key)) for _ in range(5))
    assert best < 0.010, f"a 1 MB key took {best * 1000:.1f} ms to hash"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
