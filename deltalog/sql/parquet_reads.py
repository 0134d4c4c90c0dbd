"""Spark reads of partition tables with Spark's own Parquet reader, where Spark can open the store's files.

:mod:`deltalog.sql.source` reads a snapshot's files in Python tasks through :class:`~deltalog.storage.Storage`,
which works everywhere (object stores without a Hadoop connector, a Spark Connect server that cannot see the
driver's disk) but pays for it: every row crosses from Arrow in a Python worker into the JVM, and Spark can
prune neither columns nor row groups. Where Spark's ``FileSystem`` can open the files itself -- a local disk,
or the cloud filesystems a Databricks cluster has (``s3://``, ``s3a://``, ``abfss://``, ``gs://``) -- the same
slices are read as ``spark.read.schema(...).parquet(*files)`` (Spark's ``ParquetFileFormat``, a
``FileSourceScanExec``: vectorized decoding, column pruning, row-group pruning by the pushed offset bounds),
the file list still coming from delta-rs's snapshot exactly as ``spark.read.format("delta")`` would take it
from delta-spark's ``TahoeFileIndex``.

The rows are the data source's: the slices are grouped by partition and offset range (one file scan per
group, usually two per partition: the clean section and the dirty tail of the current state), each scan keeps
the offsets ``[from_offset, to_offset)`` and drops null offsets, and a read_committed slice drops transaction
markers (``control IS NOT NULL``) and the records of its partition's aborted transactions (producer id and
offset range, as :func:`deltalog.log.transactions.aborted_mask`). A column a file lacks reads as null (the
schema is given, never inferred), as in the data source.

Which reader runs is decided per session and store root (:func:`parquet_readable`): the Spark runtime conf
``spark.deltalog.sql.fileReader`` set to ``parquet`` or ``datasource`` forces one; ``auto`` (the default) asks
the session once to list one data file of the store (``DataFrameReader.parquet(...).inputFiles()``: a
``FileSystem`` lookup and one file status, no job) and remembers the answer. Plain Spark here has no
``S3AFileSystem`` (hadoop-aws is not on pyspark's classpath), so an ``s3://`` store answers no and keeps the
data source; so does a Spark Connect server on another machine than a local store. Reads that need what only
the data source gives (``_file``, ``_row_index``, rows with null offsets: the data-quality checks' raw reads),
paths Spark would glob or unescape, and read_committed reads over many aborted transactions keep the data
source too.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import StructField, StructType

from deltalog.errors import InvalidArgumentError
from deltalog.log.record import CONTROL, OFFSET, PRODUCER_ID, RECORD_SCHEMA
from deltalog.spark import functions
from deltalog.sql.source import PARTITION_COLUMN, SPARK_TYPES, FileSlice
from deltalog.storage import Storage

#: The Spark runtime conf that chooses the reader: ``auto`` (default), ``parquet`` or ``datasource``.
READER_CONF = "spark.deltalog.sql.fileReader"
READERS = ("auto", "parquet", "datasource")
#: A read_committed group with more aborted transactions than this keeps the data source: each one is a term
#: of the scan's filter, and a filter of thousands of terms costs more than the Python read it replaces.
MAX_ABORTED_TERMS = 64
#: Characters Spark's path handling would glob (``DataSource.checkAndGlobPathIfNecessary``) or decode.
_UNSAFE_PATH = re.compile(r"[*?\[\]{}\\%]")

_answers: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def reader_choice(spark: SparkSession) -> str:
    """The session's ``spark.deltalog.sql.fileReader``; refuses a value that is not one of :data:`READERS`."""
    value = (spark.conf.get(READER_CONF, "auto") or "auto").strip().lower()
    if value not in READERS:
        raise InvalidArgumentError(f"{READER_CONF} is {value!r}; it is one of {', '.join(READERS)}")
    return value


def eligible(slices: Sequence[FileSlice], columns: Sequence[str], keep_null_offsets: bool) -> bool:
    """Whether Spark's Parquet reader can return exactly the data source's rows for this read."""
    if keep_null_offsets or not slices:
        return False
    if any(c not in RECORD_SCHEMA.names and c != PARTITION_COLUMN for c in columns):
        return False  # _file and _row_index: the data source's own columns
    if any(":" in s.location.split("://", 1)[-1] or _UNSAFE_PATH.search(s.location) for s in slices):
        return False  # a colon after the scheme is a relative URI to Hadoop's Path; the rest it globs or decodes
    return all(len(aborted) <= MAX_ABORTED_TERMS for _, aborted in _groups(slices).values())


def parquet_readable(spark: SparkSession, storage: Storage, probe: FileSlice) -> bool:
    """Whether the session's Spark opens the store's files itself (see the module docstring); ``probe`` is one
    of the store's data files. Asked once per session and store root."""
    choice = reader_choice(spark)
    if choice != "auto":
        return choice == "parquet"
    with _lock:
        known = _answers.get(spark, {}).get(storage.root)
    if known is not None:
        return known
    try:
        schema = StructType([StructField(OFFSET, SPARK_TYPES[OFFSET], True)])
        answer = bool(spark.read.schema(schema).parquet(probe.location).inputFiles())
    except Exception:  # noqa: BLE001 - any refusal (no FileSystem for the scheme, no such path, no access) says no
        answer = False
    with _lock:
        _answers.setdefault(spark, {})[storage.root] = answer
    return answer


def _groups(slices: Sequence[FileSlice]) -> dict[tuple[Any, ...], tuple[list[str], set[tuple[int, int, int]]]]:
    """Slices grouped by what their rows are filtered on: (partition, from, to, markers dropped) -> the files
    and the partition's aborted transactions among them (each bounded by its producer and offsets, so applying
    a file's aborted transaction to its neighbours in the partition drops nothing of theirs)."""
    groups: dict[tuple[Any, ...], tuple[list[str], set[tuple[int, int, int]]]] = {}
    for s in slices:
        files, aborted = groups.setdefault((s.partition, s.from_offset, s.to_offset, s.drop_control), ([], set()))
        files.append(s.location)
        aborted.update(s.aborted)
    return groups


def read_parquet_slices(spark: SparkSession, slices: Sequence[FileSlice], columns: Sequence[str]) -> DataFrame:
    """The rows of ``slices`` that :func:`deltalog.sql.reads.read_slices` returns, as ``columns``, read with
    Spark's Parquet reader: one file scan per group of slices, unioned."""
    sf = functions(spark)
    record_cols = [c for c in columns if c in RECORD_SCHEMA.names]
    frames = []
    groups = _groups(slices)
    for partition, lo, hi, drop_control in sorted(groups, key=lambda k: (k[0], k[1] is not None, k[1] or 0)):
        files, txns = groups[(partition, lo, hi, drop_control)]
        needed = list(dict.fromkeys([*record_cols, OFFSET, *((CONTROL,) if drop_control else ()),
                                     *((PRODUCER_ID,) if txns else ())]))
        schema = StructType([StructField(c, SPARK_TYPES[c], True) for c in needed])
        offset = sf.col(OFFSET)
        keep: Column = offset.isNotNull()
        if lo is not None:
            keep = keep & (offset >= sf.lit(lo))
        if hi is not None:
            keep = keep & (offset < sf.lit(hi))
        if drop_control:
            keep = keep & sf.col(CONTROL).isNull()
        pid = sf.coalesce(sf.col(PRODUCER_ID), sf.lit(-1))
        for producer_id, first, last in sorted(txns):
            keep = keep & ~((pid == sf.lit(producer_id)) & (offset >= sf.lit(first)) & (offset < sf.lit(last)))
        df = spark.read.schema(schema).parquet(*files).where(keep)
        frames.append(df.select(*[sf.lit(partition).cast("int").alias(c) if c == PARTITION_COLUMN else sf.col(c)
                                  for c in columns]))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out
