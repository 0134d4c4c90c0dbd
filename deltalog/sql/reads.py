"""Reading partition tables with Spark, without delta-spark's JARs.

The snapshot to read comes from delta-rs (:class:`~deltalog.log.partition_log.LogSnapshot`); Spark reads exactly
those Parquet files with the partition schema. This is the one place that turns files into a Spark
DataFrame, so SQL views, current state and data-quality checks all read the same way (the cleaner reads
the same files with pyarrow inside its Spark tasks). On a cluster with delta-spark the same files are
what ``spark.read.format("delta")`` would read at that version.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltalog.log.delta import DataFile
from deltalog.log.partition_log import LogSnapshot
from deltalog.log.record import RECORD_SCHEMA

#: The partition table's schema in Spark's DDL (Spark reads file columns as nullable whatever it says).
SPARK_SCHEMA_DDL = (
    "offset BIGINT, key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    "timestamp_ms BIGINT, segment BIGINT, delete_horizon_ms BIGINT"
)


def read_files(spark: SparkSession, uri: str, files: Sequence[DataFile],
               columns: Sequence[str] | None = None) -> DataFrame:
    """The rows of ``files`` (data files of the table at ``uri``), only ``columns`` if given."""
    cols = list(columns) if columns is not None else RECORD_SCHEMA.names
    if not files:
        return spark.createDataFrame([], SPARK_SCHEMA_DDL).select(*cols)
    paths = [os.path.join(uri, f.path) for f in files]
    return spark.read.schema(SPARK_SCHEMA_DDL).parquet(*paths).select(*cols)


def read_snapshot(spark: SparkSession, uri: str, snapshot: LogSnapshot,
                  columns: Sequence[str] | None = None, from_offset: int | None = None) -> DataFrame:
    """A partition at one snapshot as a DataFrame: records at or above the log start (and ``from_offset``).

    Files entirely below the start are skipped by their stats; the row filter drops the rest.
    """
    start = max(snapshot.log_start_offset, from_offset or 0)
    files = snapshot.files_from(start)
    wanted = list(columns) if columns is not None else RECORD_SCHEMA.names
    read_cols = wanted if "offset" in wanted else [*wanted, "offset"]
    df = read_files(spark, uri, files, read_cols).where(F.col("offset") >= start)
    return df.select(*wanted)
