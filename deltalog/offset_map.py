"""Pass 1 of a cleaning pass: the bounded key-hash -> latest-offset map (Kafka's SkimpyOffsetMap).

Kafka stores a 16-byte MD5 of each key and an 8-byte offset, 24 bytes an entry, in a buffer of
``log.cleaner.dedupe.buffer.size / log.cleaner.threads`` bytes filled to at most
``log.cleaner.io.buffer.load.factor``; when the map is full the pass stops mapping and the next pass
continues from there (seed 001, "Pass 1, build the offset map"; seed 002 on why hashes, not keys).

deltalog builds the same map as a Spark job over the ``key`` and ``offset`` columns of the cleanable
section. The hash is 128 bits, two independently seeded 64-bit xxHash64 values computed by Spark's
built-in ``xxhash64`` (no Python per record): with 128 bits, the chance that two of 10^9 keys collide,
which would silently drop a record, is about 10^-21 per pass; a single 64-bit hash would give about 3 in
10,000 at 10^8 keys.

The map is bounded like Kafka's: at most ``capacity`` distinct key hashes. When the section holds more,
the map covers the section up to (not including) the first occurrence of the ``capacity + 1``-th
distinct key, so every record in the mapped range has its key in the map. That is slightly more
generous than Kafka, which stops at the first record after the map reaches its size even when that
record's key is already mapped; both make progress on every pass, and a map of one entry still
converges to the same log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Seed of the second hash, mixed in as a leading literal: Spark's xxhash64(lit(c), key) hashes the key
#: with seed xxhash64(c, 42), independent of xxhash64(key) (which uses seed 42).
SECOND_HASH_SEED = 0x2545F4914F6CDD1D

HASH_HI = "_h1"
HASH_LO = "_h2"
LATEST = "_latest_offset"


def key_hash_columns() -> list[Column]:
    """The two 64-bit halves of the 128-bit key hash, as Spark columns over ``key``."""
    from pyspark.sql import functions as F

    return [
        F.xxhash64(F.col("key")).alias(HASH_HI),
        F.xxhash64(F.lit(SECOND_HASH_SEED), F.col("key")).alias(HASH_LO),
    ]


@dataclass
class OffsetMap:
    """The result of pass 1: the map as a (small-row) DataFrame and the range it covers.

    ``end_offset`` is exclusive: records in ``[start_offset, end_offset)`` with a key have their key in
    the map, and it becomes the cleaner checkpoint once the pass commits. ``df`` has the columns
    ``_h1, _h2, _latest_offset``, one row per distinct key hash.
    """

    df: DataFrame
    start_offset: int
    end_offset: int
    entries: int
    capacity: int
    full: bool

    @property
    def utilization(self) -> float:
        """Entries used / capacity, as Kafka's "Buffer utilization" (which is of the load-factor-bounded size)."""
        return self.entries / self.capacity if self.capacity else 0.0


def build_offset_map(section: DataFrame, start_offset: int, end_offset: int, capacity: int) -> OffsetMap:
    """Map the keyed records of ``section`` (columns ``key``, ``offset``; already limited to
    ``[start_offset, end_offset)``) to the latest offset of each key hash, bounded by ``capacity``.

    One aggregation when the section fits (the common case), kept in Spark's columnar in-memory cache
    (three longs a row, compressed: about a third of the memory of materialized rows). When the section
    holds more keys than fit, a sort of the distinct keys' first offsets finds where the map is full and a
    second aggregation maps the section up to there. If the cache loses a block, Spark recomputes it from
    the same (immutable) data files, so the map cannot change under a pass.
    """
    from pyspark.sql import functions as F

    from deltalog.spark_io import param_row, with_params

    hashed = section.where(F.col("key").isNotNull()).select(*key_hash_columns(), F.col("offset"))
    per_key = hashed.groupBy(HASH_HI, HASH_LO).agg(F.max("offset").alias(LATEST)).cache()
    entries = per_key.count()
    if entries <= capacity:
        return OffsetMap(per_key, start_offset, end_offset, entries, capacity, full=False)
    per_key.unpersist()
    # The (capacity + 1)-th distinct key to appear ends the mapped range.
    firsts = hashed.groupBy(HASH_HI, HASH_LO).agg(F.min("offset").alias("_first_offset"))
    cut = firsts.select("_first_offset").orderBy("_first_offset").offset(capacity).limit(1).collect()[0][0]
    below_cut = with_params(hashed, param_row(section.sparkSession, {"_p_cut": int(cut)})).where(F.col("offset") < F.col("_p_cut"))
    mapped = below_cut.groupBy(HASH_HI, HASH_LO).agg(F.max("offset").alias(LATEST)).cache()
    mapped.count()
    return OffsetMap(mapped, start_offset, int(cut), capacity, capacity, full=True)
