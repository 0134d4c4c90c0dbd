"""One cleaning pass over one partition: Kafka's ``Cleaner.doClean`` as a Spark job.

The algorithm, following seed 001 ("Detailed mechanics, compaction") and seed 000 ("How Topic
Compaction Works"):

1. **Plan** from the Delta snapshot alone (:mod:`deltalog.log_to_clean`): the cleanable section is
   ``[first dirty, first uncleanable)``; the active segment and segments younger than
   ``min.compaction.lag.ms`` are never in it.
2. **Pass 1** (:mod:`deltalog.offset_map`) reads only ``key`` and ``offset`` of the cleanable section and
   builds the bounded key-hash -> latest-offset map; a full map ends the mapped range early, and the
   next pass continues from there.
3. **Pass 2** recopies every closed segment from the log start up to the end of the mapped range
   (Kafka recopies the clean section too: that is where superseded keys and expired tombstones are).
   A record survives (Kafka's ``shouldRetainRecord``) if its offset is past the mapped range; else if it
   has a key and the key is not in the map or this is the key's latest offset, and it is not a tombstone
   whose delete horizon has passed. Keyless records are dropped and counted. A surviving tombstone
   inside the mapped range with no horizon yet gets ``delete_horizon_ms = now + delete.retention.ms``
   (KIP-534), so a tombstone is removed on its second clean at the earliest, whatever its own timestamp.
4. **Write** the survivors as new Parquet files with Spark, consecutive old segments grouped so a group
   stays within ``segment.bytes`` (Kafka's ``groupSegmentsBySize``); each group becomes one segment that
   takes the base offset of the first segment in the group, as Kafka's ``cleanSegments`` does.
5. **Commit** in one Delta commit: remove the replaced files, add the new ones, and move the cleaner
   checkpoint (app id ``deltalog.cleaner.checkpoint``) to the end of the mapped range, with the pass's
   figures in the commit metadata. Producers appending meanwhile are rebased over (their commits
   touch no file this one removes); a second cleaner on the same partition loses (both remove the same
   files and carry the same app id). Files of a pass that never commits are garbage for VACUUM.

Spark executors read, hash, join and write; the driver only plans and commits. No record is collected
to the driver and no Python runs per record. The map is joined as a broadcast, so the records never
shuffle and each output file holds a contiguous, ordered run of offsets from one input split.

Deliberate differences from Kafka: the cleaned segment keeps the base offset of its group's first
segment, as Kafka's code does (seed 000's FAQ draws the cleaned file as named by the first offset it
still holds; the offsets of the records are the same either way); and the mapped range ends before the
first key that does not fit rather than at the first record after the map is full (see
:mod:`deltalog.offset_map`).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from deltalog import delta
from deltalog.config import StoreConfig
from deltalog.delta import DataFile
from deltalog.errors import CleaningFailedError, CommitConflictError, CorruptLogError, DeltalogError
from deltalog.log_to_clean import LogToClean
from deltalog.offset_map import HASH_HI, HASH_LO, LATEST, OffsetMap, build_offset_map, key_hash_columns
from deltalog.record import DELETE_HORIZON, KEY, OFFSET, RECORD_SCHEMA, SEGMENT, VALUE
from deltalog.segment import Segment
from deltalog.spark_io import param_row, read_files, with_params

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from deltalog.log import LogSnapshot, PartitionLog

logger = logging.getLogger(__name__)

#: Directory (inside the partition table) of one pass's output; a Hive-style sub-directory per new segment.
CLEANED_DIR_PREFIX = "cleaned-"
_GROUP_COL = "cleaned_segment"


@dataclass(frozen=True)
class CleanResult:
    """The figures of one pass: what Kafka's cleaner log line shows, as data.

    The same figures are in the Delta commit's metadata (keys prefixed ``deltalog.``), so the table
    history shows every clean.
    """

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    first_uncleanable_offset: int
    records_read: int
    records_written: int
    bytes_read: int
    bytes_written: int
    map_entries: int
    map_capacity: int
    map_utilization: float
    map_ms: int
    copy_ms: int
    tombstones_stamped: int
    tombstones_removed: int
    keyless_dropped: int
    segments_read: int
    segments_written: int
    version: int
    now_ms: int

    @property
    def size_reduction(self) -> float:
        """Fraction of bytes removed, as Kafka's "48.6% size reduction"."""
        return 1.0 - self.bytes_written / self.bytes_read if self.bytes_read else 0.0

    @property
    def records_reduction(self) -> float:
        return 1.0 - self.records_written / self.records_read if self.records_read else 0.0

    @property
    def dirty_section(self) -> tuple[int, int]:
        """The offsets cleaned this pass, as Kafka's ``dirty section = [first, end)``."""
        return (self.first_dirty_offset, self.end_offset)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["size_reduction"] = self.size_reduction
        d["records_reduction"] = self.records_reduction
        return d

    def summary(self) -> str:
        """Kafka's cleaner log line, in deltalog's words."""
        total_ms = max(self.map_ms + self.copy_ms, 1)
        return (
            f"Cleaned log {self.topic}-{self.partition} (dirty section = [{self.first_dirty_offset}, "
            f"{self.end_offset}), delta version {self.version})\n"
            f"  {self.bytes_read / 1e6:,.3f} MB of log processed in {total_ms / 1000:,.1f} seconds.\n"
            f"  Indexed in {self.map_ms / 1000:,.1f} seconds ({100 * self.map_ms / total_ms:.1f}% of total time)\n"
            f"  Buffer utilization: {100 * self.map_utilization:.1f}% "
            f"({self.map_entries:,} of {self.map_capacity:,} entries)\n"
            f"  Cleaned in {self.copy_ms / 1000:,.1f} seconds ({100 * self.copy_ms / total_ms:.1f}% of total time)\n"
            f"  Start size: {self.bytes_read / 1e6:,.3f} MB ({self.records_read:,} messages)\n"
            f"  End size: {self.bytes_written / 1e6:,.3f} MB ({self.records_written:,} messages)\n"
            f"  {100 * self.size_reduction:.1f}% size reduction ({100 * self.records_reduction:.1f}% fewer messages)\n"
            f"  Tombstones stamped: {self.tombstones_stamped}, removed: {self.tombstones_removed}; "
            f"keyless records dropped: {self.keyless_dropped}"
        )


def group_segments_by_size(segments: Sequence[Segment], max_bytes: int) -> list[list[Segment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose combined size stays within ``max_bytes``
    (a group always takes at least one segment), so repeated cleaning merges small segments."""
    groups: list[list[Segment]] = []
    current: list[Segment] = []
    size = 0
    for seg in segments:
        if current and size + seg.size_bytes > max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(seg)
        size += seg.size_bytes
    if current:
        groups.append(current)
    return groups


class Cleaner:
    """Runs one pass. Its time is the plan's (``LogToClean.now_ms``), never the wall clock; the Spark
    session is the caller's."""

    def __init__(self, spark: SparkSession, config: StoreConfig) -> None:
        self.spark = spark
        self.config = config

    def clean(self, ltc: LogToClean, log: PartitionLog, map_capacity: int | None = None) -> CleanResult:
        """Clean ``[first dirty, first uncleanable)`` of the partition ``ltc`` was planned on, as of ``ltc.now_ms``."""
        snap = ltc.snapshot
        now = ltc.now_ms
        capacity = map_capacity if map_capacity is not None else self.config.offset_map_capacity
        start, stop = ltc.first_dirty_offset, ltc.first_uncleanable_offset
        if stop <= start:
            raise ValueError(f"nothing to clean in {snap.topic}-{snap.partition}: [{start}, {stop}) is empty")

        started = time.monotonic()
        dirty_files = [f for f in snap.files if f.max_offset >= start and f.min_offset < stop]
        section = self._read(log.uri, dirty_files, [KEY, OFFSET])
        if any(f.min_offset < start or f.max_offset >= stop for f in dirty_files):
            # Only a file straddling the section's bounds needs a row filter (after a pass whose map filled
            # up mid-file); the bounds come from a broadcast row, not literals (see spark_io.param_row).
            from pyspark.sql import functions as F

            bounds = param_row(self.spark, {"_p_start": start, "_p_stop": stop})
            section = with_params(section, bounds).where(
                (F.col(OFFSET) >= F.col("_p_start")) & (F.col(OFFSET) < F.col("_p_stop"))
            ).select(KEY, OFFSET)
        try:
            offset_map = build_offset_map(section, start, stop, capacity)
        except Exception as e:
            raise _failure(snap, "pass 1 (building the offset map)", e) from e
        map_ms = int((time.monotonic() - started) * 1000)

        copy_started = time.monotonic()
        segments = [s for s in snap.segments if not s.is_active and s.files and s.base_offset < offset_map.end_offset]
        groups = group_segments_by_size(segments, snap.config.segment_bytes)
        inputs = [f for s in segments for f in s.files]
        pass_id = uuid.uuid4().hex[:12]
        out_dir = f"{CLEANED_DIR_PREFIX}{now}-{pass_id}"
        try:
            counts = self._recopy(log.uri, out_dir, inputs, groups, offset_map, snap.log_start_offset,
                                  now + snap.config.delete_retention_ms, now)
            new_files = self._new_files(log.uri, out_dir)
            adds = [delta.add_action_for_file(log.uri, p, now) for p in new_files]
        except Exception as e:
            _remove_tree(os.path.join(log.uri, out_dir))
            offset_map.df.unpersist()
            raise _failure(snap, "pass 2 (recopying the segments)", e) from e
        offset_map.df.unpersist()
        copy_ms = int((time.monotonic() - copy_started) * 1000)

        bytes_read = sum(f.size_bytes for f in inputs)
        bytes_written = sum(a.size for a in adds)
        figures = dict(
            topic=snap.topic,
            partition=snap.partition,
            first_dirty_offset=start,
            end_offset=offset_map.end_offset,
            first_uncleanable_offset=stop,
            records_read=counts["records_read"],
            records_written=counts["records_written"],
            bytes_read=bytes_read,
            bytes_written=bytes_written,
            map_entries=offset_map.entries,
            map_capacity=capacity,
            map_utilization=offset_map.utilization,
            map_ms=map_ms,
            copy_ms=copy_ms,
            tombstones_stamped=counts["tombstones_stamped"],
            tombstones_removed=counts["tombstones_removed"],
            keyless_dropped=counts["keyless_dropped"],
            segments_read=len(segments),
            segments_written=len({_group_of(p) for p in new_files}),
        )
        removes = [delta.remove_action(f, now) for f in inputs]
        try:
            delta.commit(
                log.table_at(snap.version),  # conflicts are checked against commits since the plan
                [*removes, *adds],
                txns={delta.TXN_CLEANER_CHECKPOINT: offset_map.end_offset},
                metadata={"pass_id": pass_id, "now_ms": now,
                          **{k: v for k, v in figures.items() if k not in ("topic", "partition")}},
                operation="clean",
            )
        except CommitConflictError:
            _remove_tree(os.path.join(log.uri, out_dir))
            raise
        version = _committed_version(log, snap.version, pass_id)
        result = CleanResult(**figures, version=version, now_ms=now)
        logger.info("%s", result.summary())
        self._throttle(started, bytes_read + bytes_written)
        return result

    # -- Spark parts ----------------------------------------------------------------------------------

    def _read(self, uri: str, files: Sequence[DataFile], columns: Sequence[str]) -> DataFrame:
        return read_files(self.spark, uri, files, columns)

    def _read_in_offset_runs(self, uri: str, files: Sequence[DataFile], columns: Sequence[str]) -> DataFrame:
        """``files`` (in offset order) read so that every Spark partition holds one contiguous run of offsets.

        Spark packs small files into one partition largest first, so a partition of a plain read can hold
        offsets from anywhere in the log. Here consecutive files are chunked up to a target size and each
        chunk is read by one task (``coalesce(1)``: no shuffle); a file at least that large is read alone,
        and Spark splits it into contiguous row-group ranges. The chunk target spreads the input over the
        session's cores, at most 128 MiB a task.
        """
        from functools import reduce

        if not files:
            return self._read(uri, files, columns)
        total = sum(f.size_bytes for f in files)
        cores = max(self.spark.sparkContext.defaultParallelism, 1)
        target = min(128 << 20, max(8 << 20, total // cores))
        chunks: list[list[DataFile]] = []
        size = 0
        for f in files:
            if not chunks or size + f.size_bytes > target or f.size_bytes >= target:
                chunks.append([])
                size = 0
            chunks[-1].append(f)
            size += f.size_bytes
        parts = [self._read(uri, chunk, columns) if len(chunk) == 1 else self._read(uri, chunk, columns).coalesce(1)
                 for chunk in chunks]
        return reduce(lambda a, b: a.union(b), parts)

    def _recopy(self, uri: str, out_dir: str, inputs: Sequence[DataFile], groups: list[list[Segment]],
                offset_map: OffsetMap, log_start: int, horizon: int, now: int) -> dict[str, int]:
        """Pass 2: filter, stamp and write the survivors; returns the pass's counts.

        Every per-pass value (log start, end of the mapped range, now, the horizon to stamp, the groups'
        base offsets) reaches the job through a broadcast row rather than literals, so the generated code
        is the same pass after pass (see :func:`deltalog.spark_io.param_row`).

        The counts: when every input file lies wholly on one side of the log start and of the mapped
        range's end, and no mapped file holds both keyless records and tombstones (the common case: see
        :func:`_counts_from_stats`), the figures about dropped records follow from the files' Delta stats
        and three counts over the survivors. Only otherwise are all read records counted row by row
        before the filter; that Observation made Spark materialize every record, value included, before
        dropping most of them (15% of pass 2 on the small benchmark preset).
        """
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        end = offset_map.end_offset
        bases = sorted((group[0].base_offset for group in groups), reverse=True)
        params = param_row(self.spark, {"_p_start": log_start, "_p_end": end, "_p_now": now, "_p_horizon": horizon,
                                        **{f"_p_base{i}": base for i, base in enumerate(bases)}})
        # A group's new segment takes the base offset of its first segment. Groups are consecutive runs of
        # segments, so a CASE over the group starts (newest first) names it: no lookup table, hence no
        # Python worker (a createDataFrame from a list started one, seconds on a busy machine).
        group_col = F.lit(None).cast("long")
        for i in range(len(bases)):
            base = F.col(f"_p_base{i}")
            group_col = F.when(F.col(SEGMENT) >= base, base) if i == 0 else group_col.when(F.col(SEGMENT) >= base, base)
        records = with_params(self._read_in_offset_runs(uri, inputs, RECORD_SCHEMA.names), params).where(
            F.col(OFFSET) >= F.col("_p_start")
        )
        joined = records.select("*", *key_hash_columns()).join(F.broadcast(offset_map.df), [HASH_HI, HASH_LO], "left")
        offset, key, value, stamp = F.col(OFFSET), F.col(KEY), F.col(VALUE), F.col(DELETE_HORIZON)
        mapped = offset < F.col("_p_end")
        is_latest = F.col(LATEST).isNull() | (offset >= F.col(LATEST))
        tombstone = value.isNull()
        expired = tombstone & stamp.isNotNull() & (stamp <= F.col("_p_now"))
        keyless = key.isNull()
        retain = ~mapped | (~keyless & is_latest & ~expired)
        stamped = mapped & tombstone & ~keyless & is_latest & stamp.isNull()
        from_stats = _counts_from_stats(inputs, log_start, end)
        if from_stats is None:
            read_observation = Observation(f"clean-{out_dir}-read")
            survivors = joined.select(
                "*",
                retain.alias("_retain"),
                (mapped & keyless).alias("_keyless"),
                (mapped & tombstone & ~keyless & (~is_latest | expired)).alias("_tombstone_removed"),
            ).observe(
                read_observation,
                F.count(F.lit(1)).alias("records_read"),
                F.coalesce(F.sum(F.col("_keyless").cast("long")), F.lit(0)).alias("keyless_dropped"),
                F.coalesce(F.sum(F.col("_tombstone_removed").cast("long")), F.lit(0)).alias("tombstones_removed"),
            ).where(F.col("_retain"))
        else:
            survivors = joined.where(retain)
        observation = Observation(f"clean-{out_dir}")
        survivors = survivors.select("*", stamped.alias("_stamp"), (mapped & tombstone).alias("_mapped_tombstone")).observe(
            observation,
            F.count(F.lit(1)).alias("records_written"),
            F.coalesce(F.sum(F.col("_stamp").cast("long")), F.lit(0)).alias("tombstones_stamped"),
            F.coalesce(F.sum(F.col("_mapped_tombstone").cast("long")), F.lit(0)).alias("mapped_tombstones_kept"),
        )
        out = survivors.select(
            offset,
            key,
            value,
            F.col("headers"),
            F.col("timestamp_ms"),
            group_col.alias(SEGMENT),
            F.when(F.col("_stamp"), F.col("_p_horizon")).otherwise(stamp).alias(DELETE_HORIZON),
            group_col.alias(_GROUP_COL),
        )
        # Every task reads one contiguous run of offsets (see _read_in_offset_runs), and sorts its survivors
        # by (group, offset): Spark's partitionBy writer sorts by the group column only (not stably), and a
        # task reading several files reads them largest first. So each written file holds ascending offsets
        # and files never overlap (the files_in_offset_order and offsets_increase_within_files checks of
        # deltalog.quality), without shuffling the records (a repartitionByRange cost a sampling scan of
        # every input and a shuffle of the survivors).
        ordered = out.sortWithinPartitions(_GROUP_COL, OFFSET)
        ordered.write.mode("errorifexists").partitionBy(_GROUP_COL).parquet(os.path.join(uri, out_dir))
        written = {k: int(v) for k, v in observation.get.items()}
        counts = {"records_written": written["records_written"], "tombstones_stamped": written["tombstones_stamped"]}
        if from_stats is None:
            return {**counts, **{k: int(v) for k, v in read_observation.get.items()}}
        return {
            **counts,
            "records_read": from_stats.records_read,
            "keyless_dropped": from_stats.keyless,
            # Every keyed tombstone of the mapped range is either kept or removed.
            "tombstones_removed": from_stats.mapped_keyed_tombstones - written["mapped_tombstones_kept"],
        }

    @staticmethod
    def _new_files(uri: str, out_dir: str) -> list[str]:
        """Relative paths of the data files a pass wrote, in offset order; checksum side files removed."""
        found = []
        base = os.path.join(uri, out_dir)
        for root, _dirs, names in os.walk(base):
            for name in names:
                full = os.path.join(root, name)
                if name.endswith(".crc") or name.startswith("_"):
                    os.remove(full)
                elif name.endswith(".parquet"):
                    found.append(os.path.relpath(full, uri))
        return sorted(found)

    def _throttle(self, started: float, io_bytes: int) -> None:
        """``log.cleaner.io.max.bytes.per.second``: sleep so the pass's average I/O rate stays within it."""
        limit = self.config.io_max_bytes_per_second
        if limit == float("inf") or io_bytes <= 0:
            return
        wanted = io_bytes / limit
        elapsed = time.monotonic() - started
        if wanted > elapsed:
            time.sleep(wanted - elapsed)


@dataclass(frozen=True)
class _StatsCounts:
    records_read: int
    keyless: int
    mapped_keyed_tombstones: int


def _counts_from_stats(inputs: Sequence[DataFile], log_start: int, end: int) -> _StatsCounts | None:
    """The pass-2 counts that the input files' Delta stats determine exactly, or None if they do not.

    They do when every file lies wholly below or at/above the log start, and wholly below or at/above
    the mapped range's end: then the records read are the files' record counts, every keyless record of
    a mapped file is dropped, and its tombstones (null values) are keyed tombstones, each either kept
    (counted over the survivors) or removed. A mapped file with both keyless records and tombstones is
    ambiguous (a record may be both), as is any file straddling a bound: the pass counts row by row then.
    """
    read = keyless = tombstones = 0
    for f in inputs:
        if f.max_offset < log_start:
            continue
        if f.min_offset < log_start or f.min_offset < end <= f.max_offset:
            return None
        read += f.num_records
        if f.max_offset < end:
            if f.keyless and f.tombstones:
                return None
            keyless += f.keyless
            tombstones += f.tombstones
    return _StatsCounts(read, keyless, tombstones)


def _failure(snap: LogSnapshot, phase: str, error: Exception) -> Exception:
    """Spark's error as a :class:`CleaningFailedError` that names the partition and the phase (deltalog's
    own errors pass through unchanged)."""
    if isinstance(error, DeltalogError):
        return error
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = lines[0] if lines else type(error).__name__
    return CleaningFailedError(
        f"cleaning {snap.topic}-{snap.partition} failed in {phase}: {detail[:600]}; nothing was committed"
    )


def _group_of(relative_path: str) -> str:
    return os.path.dirname(relative_path)


def _committed_version(log: PartitionLog, read_version: int, pass_id: str) -> int:
    """The version of the clean commit just made (it may have been rebased over appends)."""
    dt = log.table()
    for entry in dt.history(dt.version() - read_version):
        if entry.get("deltalog.pass_id") == pass_id:
            return int(entry["version"])
    raise CorruptLogError(f"the clean commit of {log} is not in the table history")


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
