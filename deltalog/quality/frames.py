"""The Spark DataFrames the expectation suites validate, and the clean commits they are checked across.

Each DataFrame is built from a Delta snapshot's file list (delta-rs) and read by Spark executors; nothing
is collected to the driver. Column names starting with ``_`` are deltalog's bookkeeping for the suites.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from deltalog.errors import CorruptLogError
from deltalog.log import commit_infos
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.record import (
    CONTROL,
    DELETE_HORIZON,
    HEADERS,
    KEY,
    OFFSET,
    PRODUCER_ID,
    RECORD_SCHEMA,
    TIMESTAMP,
    VALUE,
)
from deltalog.log.transactions import READ_COMMITTED
from deltalog.spark import functions
from deltalog.sql.reads import read_slices, storage_of
from deltalog.sql.source import FILE_COLUMN, ROW_INDEX_COLUMN, file_slices
from deltalog.storage import Storage, join

FILE_RANK = "_file_rank"
ROW_INDEX = ROW_INDEX_COLUMN
STAT_MIN = "_stat_min_offset"
STAT_MAX = "_stat_max_offset"
STAT_COUNT = "_stat_num_records"
VISIBLE_COMMITTED = "_visible_committed"
ABORTED = "aborted"
CONTENT = (KEY, VALUE, HEADERS, TIMESTAMP)


@dataclass(frozen=True)
class CleanCommit:
    """One clean in a partition's Delta history: the version it made and the clock time it ran at."""

    version: int
    now_ms: int
    first_dirty_offset: int
    end_offset: int

    @property
    def before_version(self) -> int:
        return self.version - 1


def clean_commits(log: PartitionLog, limit: int | None = None) -> list[CleanCommit]:
    """The clean commits of a partition, newest first (at most ``limit``)."""
    dt = log.table()
    found = []
    for entry in commit_infos.history(dt):
        if entry.get("deltalog.operation") != "clean":
            continue
        version = int(entry["version"])
        now = entry.get("deltalog.now_ms")
        found.append(CleanCommit(
            version=version,
            now_ms=int(now) if now is not None else _commit_time_from_actions(log.storage, log.uri, version),
            first_dirty_offset=int(entry.get("deltalog.first_dirty_offset", 0)),
            end_offset=int(entry.get("deltalog.end_offset", 0)),
        ))
        if limit is not None and len(found) >= limit:
            break
    return found


def _commit_time_from_actions(storage: Storage, uri: str, version: int) -> int:
    """For cleans written before ``now_ms`` was in the metadata: the cleaner stamps its clock time on
    the add (``modificationTime``) and remove (``deletionTimestamp``) actions of the commit."""
    path = join(uri, "_delta_log", f"{version:020d}.json")
    for line in storage.read_bytes(path).decode("utf-8").splitlines():
        if line.strip():
            action: dict[str, Any] = json.loads(line)
            if "add" in action:
                return int(action["add"]["modificationTime"])
            if "remove" in action and action["remove"].get("deletionTimestamp") is not None:
                return int(action["remove"]["deletionTimestamp"])
    raise CorruptLogError(f"clean commit {version} of {uri} has no add or remove action")


def files_present(log: PartitionLog, snap: LogSnapshot) -> bool:
    """Whether every data file of a snapshot is still on disk (VACUUM removes replaced files later)."""
    return all(log.storage.exists(join(log.uri, f.path)) for f in snap.files)


def partition_frame(spark: SparkSession, log: PartitionLog, snap: LogSnapshot) -> DataFrame:
    """Every row of a snapshot at or above the log start (and any row with a null offset), markers and
    aborted records included, with the file it came from (``_file_rank``: the file's place in offset order),
    its position in that file, the file's Delta stats, so the suites can check read order and stats against
    the data, and ``_visible_committed``: whether the read_committed reader (the one SQL views and
    ``format("deltalog")`` use) returns the row, so the transactional suites check that reader against the
    markers in the data."""
    cols = [*RECORD_SCHEMA.names, FILE_COLUMN, ROW_INDEX]
    storage = storage_of(log)
    # Every file, even one whose stats lie below the log start: a damaged file may hold null offsets.
    slices = [s.narrowed(snap.log_start_offset, None) for s in file_slices(log.uri, snap.partition, snap.files)]
    df = read_slices(spark, storage, slices, cols, keep_null_offsets=True)
    ranks = [(f.path, i, f.min_offset, f.max_offset, f.num_records) for i, f in enumerate(snap.files)]
    stats = spark.createDataFrame(
        ranks, f"{FILE_COLUMN} string, {FILE_RANK} int, {STAT_MIN} long, {STAT_MAX} long, {STAT_COUNT} long"
    )
    df = df.join(stats.hint("broadcast"), FILE_COLUMN, "left").drop(FILE_COLUMN)
    if not any(f.producer_rows or f.control_rows for f in snap.files):
        return df.withColumn(VISIBLE_COMMITTED, functions(spark).col(OFFSET).isNotNull())  # a plain log: all
    view = log.txn_index(snap).view(READ_COMMITTED)
    committed = read_slices(spark, storage, file_slices(log.uri, snap.partition, snap.files,
                                                        from_offset=snap.log_start_offset, view=view), [OFFSET])
    committed = committed.select(OFFSET, functions(spark).lit(True).alias(VISIBLE_COMMITTED))
    return df.join(committed, OFFSET, "left").fillna(False, [VISIBLE_COMMITTED])


def across_clean_frame(spark: SparkSession, log: PartitionLog, before: LogSnapshot, after: LogSnapshot) -> DataFrame:
    """The records before and after one clean, joined on offset: ``b_*`` / ``a_*`` columns, ``b_present`` /
    ``a_present``, ``b_aborted`` (the record belongs to a transaction aborted before the clean, by the markers
    of the version before it) and ``b_latest`` (the record is its key's latest committed record before the
    clean: aborted records and markers never are)."""
    sf = functions(spark)
    cols = [OFFSET, *CONTENT, DELETE_HORIZON, CONTROL, PRODUCER_ID]
    storage = storage_of(log)

    def side(snap: LogSnapshot, prefix: str) -> DataFrame:
        slices = file_slices(log.uri, snap.partition, snap.files, from_offset=snap.log_start_offset)
        df = read_slices(spark, storage, slices, cols)
        return df.select(sf.col(OFFSET), sf.lit(True).alias(f"{prefix}present"),
                         *[sf.col(c).alias(prefix + c) for c in cols[1:]])

    b = side(before, "b_")
    aborted = log.txn_index(before).aborted
    if aborted:
        ranges = spark.createDataFrame([a.to_tuple() for a in aborted], "_pid long, _first long, _last long")
        hits = b.join(ranges.hint("broadcast"), (sf.col("b_producer_id") == sf.col("_pid"))
                      & (sf.col(OFFSET) >= sf.col("_first")) & (sf.col(OFFSET) < sf.col("_last")), "left_semi")
        b = b.join(hits.select(OFFSET, sf.lit(True).alias(f"b_{ABORTED}")), OFFSET, "left")
    else:
        b = b.withColumn(f"b_{ABORTED}", sf.lit(False))
    b = b.withColumn(f"b_{ABORTED}", sf.coalesce(sf.col(f"b_{ABORTED}"), sf.lit(False)))
    latest = (b.where(sf.col("b_key").isNotNull() & ~sf.col(f"b_{ABORTED}"))
              .groupBy("b_key").agg(sf.max(OFFSET).alias("_latest_offset")))
    b = b.join(latest, "b_key", "left").withColumn(
        "b_latest", sf.coalesce(sf.col(OFFSET) == sf.col("_latest_offset"), sf.lit(False))
    ).drop("_latest_offset")
    a = side(after, "a_")
    joined = b.join(a, OFFSET, "full_outer")
    return joined.select(
        OFFSET,
        sf.coalesce("b_present", sf.lit(False)).alias("b_present"),
        sf.coalesce("a_present", sf.lit(False)).alias("a_present"),
        sf.coalesce("b_latest", sf.lit(False)).alias("b_latest"),
        sf.coalesce(f"b_{ABORTED}", sf.lit(False)).alias(f"b_{ABORTED}"),
        *[sf.col(p + c) for c in cols[1:] for p in ("b_", "a_")],
    )
