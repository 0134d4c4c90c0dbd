"""Pass 1 of a cleaning pass: the bounded key-hash -> latest-offset map (Kafka's SkimpyOffsetMap).

Kafka stores a 16-byte MD5 of each key and an 8-byte offset, 24 bytes an entry, in a buffer of
``log.cleaner.dedupe.buffer.size / log.cleaner.threads`` bytes filled to at most
``log.cleaner.io.buffer.load.factor``; when the map is full the pass stops mapping and the next pass
continues from there (seed 001, "Pass 1, build the offset map"; seed 002 on why hashes, not keys).

deltalog builds the map as one Spark aggregation over the ``key``, ``offset`` and ``delete_horizon_ms``
columns. The hash is 128 bits, two independently seeded 64-bit xxHash64 values computed by Spark's
built-in ``xxhash64`` (no Python per record): with 128 bits, the chance that two of 10^9 keys collide,
which would silently drop a record, is about 10^-21 per pass; a single 64-bit hash would give about 3 in
10,000 at 10^8 keys.

**Deliberate difference from Kafka: the aggregation covers the clean section too.** Kafka maps only the
dirty section and, in pass 2, hashes every record of the log from its start and looks its key up. Here
pass 1 aggregates ``[log start, end of the mapped range)`` so each key hash gets its latest offset over
the whole range; those offsets are exactly the records Kafka's ``shouldRetainRecord`` keeps (a key of the
clean section that the dirty section does not supersede has its one clean record as its latest; the
clean section holds no duplicate keys, every earlier pass removed them). The result is collected as a
bitmap of surviving offsets (:mod:`deltalog.offset_bitmap`), so pass 2 tests one bit per record instead
of hashing and probing a hash table: measured on the small benchmark preset, the aggregation over both
sections costs less than the probe it replaces. A tombstone whose delete horizon has passed is not a
survivor even when it is its key's latest record: the aggregation carries that in the low bit of
``offset * 2 + expired``, so one ``max`` decides both.

The map is bounded like Kafka's: at most ``capacity`` distinct key hashes of the dirty section (the
entries Kafka's map would hold; clean-only keys are not counted). When the section holds more, the map
covers the section up to (not including) the first occurrence of the ``capacity + 1``-th distinct key, so
every record in the mapped range has its key in the map. That is slightly more generous than Kafka, which
stops at the first record after the map reaches its size even when that record's key is already mapped;
both make progress on every pass, and a map of one entry still converges to the same log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from deltalog.offset_bitmap import OffsetBitmap

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Seed of the second hash, mixed in as a leading literal: Spark's xxhash64(lit(c), key) hashes the key
#: with seed xxhash64(c, 42), independent of xxhash64(key) (which uses seed 42).
SECOND_HASH_SEED = 0x2545F4914F6CDD1D

HASH_HI = "_h1"
HASH_LO = "_h2"
#: Per key hash: ``latest offset * 2 + 1 if that record is a tombstone whose horizon has passed``.
LATEST_PACKED = "_latest"


def key_hash_columns() -> list[Column]:
    """The two 64-bit halves of the 128-bit key hash, as Spark columns over ``key``."""
    from pyspark.sql import functions as F

    return [
        F.xxhash64(F.col("key")).alias(HASH_HI),
        F.xxhash64(F.lit(SECOND_HASH_SEED), F.col("key")).alias(HASH_LO),
    ]


@dataclass
class OffsetMap:
    """The result of pass 1: the range it covers, how full the map got, and the offsets that survive.

    ``end_offset`` is exclusive: records in ``[start_offset, end_offset)`` with a key have their key in
    the map, and it becomes the cleaner checkpoint once the pass commits. ``latest`` holds, for
    ``[log start, end_offset)``, the latest offset of every key hash, less tombstones past their horizon:
    the records pass 2 keeps there.
    """

    start_offset: int
    end_offset: int
    entries: int
    capacity: int
    full: bool
    latest: OffsetBitmap

    @property
    def utilization(self) -> float:
        """Entries used / capacity, as Kafka's "Buffer utilization" (which is of the load-factor-bounded size)."""
        return self.entries / self.capacity if self.capacity else 0.0


def build_offset_map(records: DataFrame, log_start: int, start_offset: int, end_offset: int, capacity: int,
                     now_ms: int, dirty_records: int | None = None) -> OffsetMap:
    """Map the keyed records of ``records`` (columns ``key``, ``offset``, ``delete_horizon_ms``; already
    limited to ``[log_start, end_offset)``) to the latest offset of each key hash, with at most
    ``capacity`` key hashes from the dirty section ``[start_offset, end_offset)``.

    ``dirty_records`` (from the files' stats), when at most ``capacity``, proves the map cannot be full
    and saves a count. Otherwise the aggregate is cached and its dirty entries counted first, so a section
    with more keys than fit is never collected to the driver. When it does not fit, a sort of the dirty
    keys' first offsets finds where the map is full and a second aggregation maps up to there.
    """
    from pyspark.sql import functions as F

    from deltalog.spark_io import param_row, with_params

    spark = records.sparkSession
    params = param_row(spark, {"_p_now": now_ms, "_p_dirty": start_offset})
    horizon = F.col("delete_horizon_ms")
    # A horizon is only ever stamped on a tombstone, so a passed horizon marks an expired tombstone.
    expired = (horizon.isNotNull() & (horizon <= F.col("_p_now"))).cast("long")
    hashed = with_params(records.where(F.col("key").isNotNull()), params).select(
        *key_hash_columns(), F.col("offset"), (F.col("offset") * 2 + expired).alias("_packed"), F.col("_p_dirty"),
    )

    def aggregate(df: DataFrame) -> DataFrame:
        return df.groupBy(HASH_HI, HASH_LO).agg(F.max("_packed").alias(LATEST_PACKED))

    per_key = aggregate(hashed)
    if dirty_records is not None and dirty_records <= capacity:
        packed = _collect(per_key)
        entries = int(np.count_nonzero(packed >= 2 * start_offset))
        return OffsetMap(start_offset, end_offset, entries, capacity, False,
                         _bitmap(packed, log_start, end_offset))
    per_key.cache()
    try:
        entries = per_key.where(F.col(LATEST_PACKED) >= F.lit(2 * start_offset)).count()
        if entries <= capacity:
            return OffsetMap(start_offset, end_offset, entries, capacity, False,
                             _bitmap(_collect(per_key), log_start, end_offset))
    finally:
        per_key.unpersist()
    # The (capacity + 1)-th distinct dirty key to appear ends the mapped range.
    dirty = hashed.where(F.col("offset") >= F.col("_p_dirty"))
    firsts = dirty.groupBy(HASH_HI, HASH_LO).agg(F.min("offset").alias("_first_offset"))
    cut = int(firsts.select("_first_offset").orderBy("_first_offset").offset(capacity).limit(1).collect()[0][0])
    below_cut = with_params(hashed, param_row(spark, {"_p_cut": cut})).where(F.col("offset") < F.col("_p_cut"))
    return OffsetMap(start_offset, cut, capacity, capacity, True,
                     _bitmap(_collect(aggregate(below_cut)), log_start, cut))


def _collect(per_key: DataFrame) -> np.ndarray:
    """The packed latest offsets, to the driver as Arrow (8 bytes a key hash)."""
    table = per_key.select(LATEST_PACKED).toArrow()
    return table.column(0).to_numpy() if table.num_rows else np.zeros(0, dtype=np.int64)


def _bitmap(packed: np.ndarray, lo: int, hi: int) -> OffsetBitmap:
    """Survivors: latest offsets whose record is not an expired tombstone (low bit clear)."""
    return OffsetBitmap.from_offsets(packed[(packed & 1) == 0] >> 1, lo, hi)
