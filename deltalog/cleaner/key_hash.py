"""The offset map's 128-bit key hash: kept here under its old name; it lives in :mod:`deltalog.log.key_hash`.

The log computes it at append (each record's hash is written beside it, in the key-hash columns), so it moved
down to the log; the cleaner's pass modules, Spark's workers and existing imports keep this name.
"""

from deltalog.log.key_hash import SEED_HI, SEED_LO, key_hashes, xxh64, xxh64_seeds

__all__ = ["SEED_HI", "SEED_LO", "key_hashes", "xxh64", "xxh64_seeds"]
