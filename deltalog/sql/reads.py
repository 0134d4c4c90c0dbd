"""Reading partition tables with Spark, without delta-spark's JARs or a Hadoop connector.

The snapshot to read comes from delta-rs (:class:`~deltalog.log.partition_log.LogSnapshot`); Spark reads exactly
those data files: with its own Parquet reader where it can open them itself (:mod:`deltalog.sql.parquet_reads`:
a local disk, a cluster's cloud filesystems), else through deltalog's Python data source
(:mod:`deltalog.sql.source`), whose tasks open them with the store's :class:`~deltalog.storage.Storage`, so the
same read works on a local store and on object storage, on a classic session and on Spark Connect. This is the one place that turns files into a Spark DataFrame, so
SQL views, current state and data-quality checks all read the same way (the cleaner reads the same files
with pyarrow inside its Spark tasks). On a cluster with delta-spark the same files are what
``spark.read.format("delta")`` would read at that version.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from deltalog.log.delta import DataFile
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.record import RECORD_SCHEMA
from deltalog.spark import default_parallelism
from deltalog.sql import parquet_reads
from deltalog.sql.source import SOURCE_NAME, STORAGE_OPTION_PREFIX, FileSlice, file_slices, register, spark_schema
from deltalog.storage import Storage

#: The partition table's schema in Spark's DDL (Spark reads file columns as nullable whatever it says).
SPARK_SCHEMA_DDL = (
    "offset BIGINT, key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    "timestamp_ms BIGINT, segment BIGINT, delete_horizon_ms BIGINT, producer_id BIGINT, producer_epoch INT, "
    "control STRING, txn_first_offset BIGINT"
)


def read_slices(spark: SparkSession, storage: Storage, slices: Sequence[FileSlice], columns: Sequence[str], *,
                keep_null_offsets: bool = False) -> DataFrame:
    """The wanted rows of ``slices`` (files of tables under ``storage``'s root) as one DataFrame of
    ``columns``: partition-table columns and ``partition``, ``_file``, ``_row_index``
    (:mod:`deltalog.sql.source`). Rows with a null offset are left out unless ``keep_null_offsets``.

    Where the session's Spark opens the store's files itself, they are read with Spark's Parquet reader
    (:mod:`deltalog.sql.parquet_reads`), else through the Python data source; the rows are the same."""
    schema = spark_schema(columns)
    if not slices:
        return spark.createDataFrame([], schema)
    if parquet_reads.eligible(slices, columns, keep_null_offsets) and parquet_reads.parquet_readable(
            spark, storage, slices[0]):
        return parquet_reads.read_parquet_slices(spark, slices, columns)
    register(spark)
    options = {
        "root": storage.root,
        "columns": ",".join(columns),
        "slices": json.dumps([s.to_list() for s in slices], separators=(",", ":")),
        "keep_null_offsets": str(keep_null_offsets).lower(),
        "parallelism": str(default_parallelism(spark)),
    }
    options.update({STORAGE_OPTION_PREFIX + k.lower(): v for k, v in storage.options.items()})
    return spark.read.format(SOURCE_NAME).schema(schema).options(**options).load()


def read_files(spark: SparkSession, storage: Storage, table: str, files: Sequence[DataFile],
               columns: Sequence[str] | None = None, *, partition: int = 0) -> DataFrame:
    """Every row of ``files`` (data files of the table at ``table``), only ``columns`` if given."""
    cols = list(columns) if columns is not None else RECORD_SCHEMA.names
    return read_slices(spark, storage, file_slices(table, partition, files), cols)


def read_snapshot(spark: SparkSession, storage: Storage, table: str, snapshot: LogSnapshot,
                  columns: Sequence[str] | None = None, from_offset: int | None = None) -> DataFrame:
    """A partition at one snapshot as a DataFrame: records at or above the log start (and ``from_offset``).

    Files entirely below the start are skipped by their stats; the tasks drop the rest.
    """
    start = max(snapshot.log_start_offset, from_offset or 0)
    cols = list(columns) if columns is not None else RECORD_SCHEMA.names
    return read_slices(spark, storage, file_slices(table, snapshot.partition, snapshot.files, from_offset=start),
                       cols)


def storage_of(owner: LogManager | PartitionLog) -> Storage:
    """The :class:`Storage` a store's (or one partition's) files are read through: its own when it has one,
    else one rooted at its directory."""
    storage = getattr(owner, "storage", None)
    if isinstance(storage, Storage):
        return storage
    return Storage(owner.root if isinstance(owner, LogManager) else owner.uri)
