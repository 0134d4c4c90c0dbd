"""Spark reads of partition tables as a Python data source: file slices listed from the Delta log, read by
the tasks through :class:`~deltalog.storage.Storage`, yielded as Arrow batches.

Spark here has no Hadoop connector for object stores (no s3a, abfs or gcs classes in pyspark's jars), and
Spark Connect has no ``sparkContext``. A Python data source needs neither: the driver already knows which
files a read wants (a :class:`~deltalog.log.partition_log.LogSnapshot`'s add actions, from delta-rs, with
their offset stats), so it hands Spark a list of :class:`FileSlice` s, each a data file and the offsets
wanted from it; the reader packs them into tasks (:func:`plan_tasks`), and each task opens its files with
the store's :class:`~deltalog.storage.Storage` (a local path or any object-store URI) and yields Arrow
record batches. The same source runs on a classic session and on Spark Connect, where the planning and
the reading run in the server's Python workers.

Columns are chosen by the read (Python data sources get no column pruning from Spark): any of the
partition schema's, plus ``partition`` (the slice's partition number), ``_file`` (the data file's path in
the Delta log) and ``_row_index`` (the row's position in that file, counting every row of the file, as
Spark's ``_metadata.row_index``). Rows outside a slice's offset range are dropped in the task (row groups
outside it are not even read); rows with a null offset are dropped too unless ``keep_null_offsets`` (the
data-quality checks look for them).

Spark's filters are not pushed into the source (``pushFilters``): on pyspark 4.3 a DataFrame whose read had
filters pushed hands that pruned read on to its later queries that push none (measured: ``df.where("x >= 7")``
then ``df.collect()`` returns only ``x >= 7``, classic and Connect alike), so pruning there would return wrong
rows from a view queried twice. The reads that deltalog builds are already pruned by offset ranges.

The source is registered on a session by :func:`register` under the name ``deltalog_files``;
:func:`deltalog.sql.reads.read_slices` builds the DataFrame. Options (all strings): ``root`` and
``storage.<name>`` (one per storage option) make the Storage; the files come either as ``slices`` (JSON, from the driver's
snapshot, so a read needs no second look at the Delta log) or as ``path`` (a partition table), optional
``version`` (or Delta's ``versionAsOf`` / ``timestampAsOf``: time travel) and optional ``from_offset``, listed
with delta-rs when the read is planned. ``columns``
(comma-separated), ``keep_null_offsets``, ``parallelism`` (tasks to aim for) and ``batch_rows`` (rows per
Arrow batch) complete them.
On a cluster with delta-spark's JARs, ``spark.read.format("delta")`` reads the same files.

:func:`read_slice` is the reading itself, without Spark: the Kafka-compatible ``format("deltalog")``
source reads its offset ranges with it.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from deltalog.errors import InvalidArgumentError
from deltalog.log import damage
from deltalog.log.delta import DataFile
from deltalog.log.record import CONTROL, OFFSET, PRODUCER_ID, RECORD_SCHEMA
from deltalog.log.transactions import AbortedTxn, TxnView, only_markers, visible_mask, wholly_aborted
from deltalog.storage import Storage, join

SOURCE_NAME = "deltalog_files"
PARTITION_COLUMN = "partition"
FILE_COLUMN = "_file"
ROW_INDEX_COLUMN = "_row_index"
VIRTUAL_COLUMNS = (PARTITION_COLUMN, FILE_COLUMN, ROW_INDEX_COLUMN)
#: Each storage option is an option of its own under this prefix, so Spark's redaction of option names that
#: look secret (``spark.redaction.regex``: secret, password, token, access key) hides credentials in plans.
STORAGE_OPTION_PREFIX = "storage."

#: A task reads at most this many bytes of files (Spark's ``spark.sql.files.maxPartitionBytes``)...
MAX_TASK_BYTES = 128 * 1024 * 1024
#: ...and at least this many, counting each file as its size plus the cost of opening it (an object store's
#: first request), so many small files share a task instead of paying a task each.
MIN_TASK_BYTES = 4 * 1024 * 1024
FILE_OPEN_COST = 1024 * 1024
#: Rows per Arrow batch a task yields (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``).
BATCH_ROWS = 10_000

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
#: The Spark type of each column a read can return (every field nullable, as Spark reads files).
SPARK_TYPES = {
    "offset": LongType(),
    "key": BinaryType(),
    "value": BinaryType(),
    "headers": ArrayType(_HEADER),
    "timestamp_ms": LongType(),
    "segment": LongType(),
    "delete_horizon_ms": LongType(),
    "producer_id": LongType(),
    "producer_epoch": IntegerType(),
    "control": StringType(),
    "txn_first_offset": LongType(),
    PARTITION_COLUMN: IntegerType(),
    FILE_COLUMN: StringType(),
    ROW_INDEX_COLUMN: LongType(),
}


def spark_schema(columns: Sequence[str]) -> StructType:
    """The Spark schema of a read of ``columns``; refuses a column the source cannot return."""
    unknown = [c for c in columns if c not in SPARK_TYPES]
    if unknown or not columns:
        raise InvalidArgumentError(
            f"cannot read columns {unknown or list(columns)} of a partition table; the columns are "
            f"{', '.join(SPARK_TYPES)}"
        )
    return StructType([StructField(c, SPARK_TYPES[c], True) for c in columns])


@dataclass(frozen=True)
class FileSlice:
    """One data file of a partition table and the offsets wanted from it, ``[from_offset, to_offset)``
    (None: unbounded); its stats let a read skip it without opening it."""

    table: str
    path: str
    partition: int
    size_bytes: int
    min_offset: int
    max_offset: int
    from_offset: int | None = None
    to_offset: int | None = None
    #: What an application may see (see :mod:`deltalog.log.transactions`): markers left out, and the records of
    #: these aborted transactions ``(producer id, first offset, marker offset)`` too (read_committed). A raw
    #: read (the checks, the damage scan) keeps every row.
    drop_control: bool = False
    aborted: tuple[tuple[int, int, int], ...] = ()

    @property
    def location(self) -> str:
        return join(self.table, self.path)

    def overlaps(self) -> bool:
        """Whether the file may hold a wanted offset."""
        return ((self.from_offset is None or self.max_offset >= self.from_offset)
                and (self.to_offset is None or self.min_offset < self.to_offset))

    def narrowed(self, from_offset: int | None, to_offset: int | None) -> FileSlice:
        lo = _max(self.from_offset, from_offset)
        hi = self.to_offset if to_offset is None else (to_offset if self.to_offset is None
                                                       else min(self.to_offset, to_offset))
        return replace(self, from_offset=lo, to_offset=hi)

    def to_list(self) -> list[Any]:
        out = [self.table, self.path, self.partition, self.size_bytes, self.min_offset, self.max_offset,
               self.from_offset, self.to_offset]
        if self.drop_control or self.aborted:
            out += [self.drop_control, [list(a) for a in self.aborted]]
        return out

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> FileSlice:
        extra = {} if len(v) <= 8 else {"drop_control": bool(v[8]),
                                        "aborted": tuple((int(a), int(b), int(c)) for a, b, c in v[9])}
        return cls(str(v[0]), str(v[1]), int(v[2]), int(v[3]), int(v[4]), int(v[5]),
                   None if v[6] is None else int(v[6]), None if v[7] is None else int(v[7]), **extra)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def file_slices(table: str, partition: int, files: Sequence[DataFile], *, from_offset: int | None = None,
                to_offset: int | None = None, view: TxnView | None = None) -> list[FileSlice]:
    """Slices of the ``files`` of one partition table that may hold offsets in ``[from_offset, to_offset)``.

    With a ``view`` (:meth:`TxnIndex.view <deltalog.log.transactions.TxnIndex.view>`), the slices read what an
    application at its isolation level sees: up to its bound, without markers or aborted records."""
    if view is not None:
        to_offset = view.upper if to_offset is None else min(to_offset, view.upper)
        # A file of markers, or of one aborted transaction's records, holds nothing the reader sees: its stats
        # say so, and no task opens it.
        files = [f for f in files if not only_markers(f) and not wholly_aborted(f, view.aborted)]
    slices = [FileSlice(table, f.path, partition, f.size_bytes, f.min_offset, f.max_offset, from_offset, to_offset)
              for f in files]
    out = [s for s in slices if s.overlaps()]
    if view is None:
        return out
    return [replace(s, drop_control=True, aborted=tuple(
        a.to_tuple() for a in view.aborted if a.last_offset > s.min_offset and a.first_offset <= s.max_offset))
        for s in out]


def plan_tasks(slices: Sequence[FileSlice], parallelism: int) -> list[list[FileSlice]]:
    """Slices packed into runs of consecutive slices, one task each, balanced by bytes: ``parallelism`` runs
    for a read big enough (one wave of tasks on that many cores), fewer when a run would hold less than
    :data:`MIN_TASK_BYTES`, more when one would exceed :data:`MAX_TASK_BYTES` (Spark's own bounds for file
    scans, with a smaller opening cost). Filling runs up to a share in order left a small third task behind
    two full ones on 2 cores, the whole read waiting for it."""
    if not slices:
        return []
    costs = [s.size_bytes + FILE_OPEN_COST for s in slices]
    total = sum(costs)
    n = max(parallelism, 1, -(-total // MAX_TASK_BYTES))
    n = max(1, min(n, -(-total // MIN_TASK_BYTES), len(slices)))
    while True:
        runs = _runs(slices, costs, total, n)
        if n >= len(slices) or all(sum(c for _, c in run) <= MAX_TASK_BYTES for run in runs if len(run) > 1):
            return [[s for s, _ in run] for run in runs]
        n += 1


def _runs(slices: Sequence[FileSlice], costs: Sequence[int], total: int,
          n: int) -> list[list[tuple[FileSlice, int]]]:
    """``slices`` cut into at most ``n`` runs of about ``total / n`` bytes: a slice joins the run its middle
    byte falls in."""
    runs: list[list[tuple[FileSlice, int]]] = [[] for _ in range(n)]
    done = 0
    for s, cost in zip(slices, costs, strict=True):
        runs[min(n - 1, int((done + cost / 2) * n / total))].append((s, cost))
        done += cost
    return [run for run in runs if run]


# -- reading, in a task ------------------------------------------------------------------------------------


def read_slice(storage: Storage, s: FileSlice, columns: Sequence[str], *, keep_null_offsets: bool = False,
               batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The wanted rows of one slice as record batches of ``columns`` (types as the file has them; a column
    the file lacks is null), in file order. Row groups whose offset stats lie outside the range are skipped.
    A file that cannot be read raises :class:`~deltalog.errors.CorruptLogError` naming it and its partition."""
    try:
        yield from _read_slice(storage, s, columns, keep_null_offsets=keep_null_offsets, batch_rows=batch_rows)
    except (OSError, pa.ArrowException) as e:
        raise damage.data_file_error(s.location, e) from None


def _read_slice(storage: Storage, s: FileSlice, columns: Sequence[str], *, keep_null_offsets: bool,
                batch_rows: int) -> Iterator[pa.RecordBatch]:
    pf = storage.parquet_file(s.location)
    names = pf.schema_arrow.names
    record_cols = [c for c in columns if c in RECORD_SCHEMA.names]
    read_cols = [c for c in record_cols if c in names]
    bounded = s.from_offset is not None or s.to_offset is not None
    if bounded and OFFSET not in read_cols:
        read_cols.append(OFFSET)
    txn_cols = [c for c in ((CONTROL,) if s.drop_control else ()) + ((PRODUCER_ID, OFFSET) if s.aborted else ())
                if c in names and c not in read_cols]
    read_cols += list(dict.fromkeys(txn_cols))
    md = pf.metadata
    offset_at = names.index(OFFSET) if OFFSET in names else None
    first_row = 0
    for rg in range(md.num_row_groups):
        n = md.row_group(rg).num_rows
        start, first_row = first_row, first_row + n
        if n == 0 or (offset_at is not None and _outside(md.row_group(rg).column(offset_at).statistics, s,
                                                            keep_null_offsets)):
            continue
        table = pf.read_row_group(rg, columns=read_cols) if read_cols else pa.table({"_": pa.nulls(n)})
        index = pa.array(np.arange(start, start + n, dtype=np.int64)) if ROW_INDEX_COLUMN in columns else None
        mask = _wanted(table, s, keep_null_offsets)
        if s.drop_control or s.aborted:
            mask = _visible_mask(table, s, mask)
        if mask is not None:
            table = table.filter(mask)
            index = index.filter(mask) if index is not None else None
        rows = table.num_rows
        if rows == 0:
            continue
        out = []
        for c in columns:
            if c == PARTITION_COLUMN:
                out.append(pa.array(np.full(rows, s.partition, dtype=np.int32)))
            elif c == FILE_COLUMN:
                out.append(pa.array([s.path], pa.string()).take(pa.array(np.zeros(rows, dtype=np.int32))))
            elif c == ROW_INDEX_COLUMN:
                out.append(index)
            elif c in table.column_names:
                out.append(table.column(c).combine_chunks())
            else:
                out.append(pa.nulls(rows, RECORD_SCHEMA.field(c).type))
        yield from pa.Table.from_arrays(out, names=list(columns)).to_batches(max_chunksize=batch_rows)


def _visible_mask(table: pa.Table, s: FileSlice, mask: Any) -> Any:
    """``mask`` narrowed to the rows an application sees: no markers, no record of the slice's aborted
    transactions (:func:`deltalog.log.transactions.visible_mask`)."""
    keep = visible_mask(table, [AbortedTxn(*a) for a in s.aborted])
    if keep is None:
        return mask
    return pa.array(keep) if mask is None else pc.and_(mask, pa.array(keep))


def _outside(stats: Any, s: FileSlice, keep_null_offsets: bool) -> bool:
    """Whether a row group's offset stats show it holds no wanted row."""
    if stats is None or not stats.has_min_max:
        return False
    if keep_null_offsets and (stats.null_count is None or stats.null_count > 0):
        return False
    return ((s.from_offset is not None and stats.max < s.from_offset)
            or (s.to_offset is not None and stats.min >= s.to_offset))


def _wanted(table: pa.Table, s: FileSlice, keep_null_offsets: bool) -> Any:
    """The row mask of the slice's offset range, or None when every row is wanted."""
    if OFFSET not in table.column_names:
        return None
    offsets = table.column(OFFSET)
    conditions = []
    if s.from_offset is not None and s.from_offset > s.min_offset:
        conditions.append(pc.greater_equal(offsets, s.from_offset))
    if s.to_offset is not None and s.to_offset <= s.max_offset:
        conditions.append(pc.less(offsets, s.to_offset))
    if not conditions:
        if keep_null_offsets or offsets.null_count == 0:
            return None
        return pc.is_valid(offsets)
    mask = conditions[0]
    for c in conditions[1:]:
        mask = pc.and_(mask, c)
    if keep_null_offsets:
        mask = pc.or_(pc.fill_null(mask, False), pc.is_null(offsets))
    return pc.fill_null(mask, False)


# -- the data source ---------------------------------------------------------------------------------------


def _task(slices: list[FileSlice]) -> InputPartition:
    """The slices one Spark task reads (as plain lists: the partition is pickled to the task)."""
    return InputPartition([s.to_list() for s in slices])


class _ReadOptions:
    """The options of a read, parsed once where the reader is made (in the planner's Python worker)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        root = options.get("root") or options.get("path")
        if not root:
            raise InvalidArgumentError(f"{SOURCE_NAME}: the 'root' option (the store root) or 'path' is required")
        self.root: str = root
        self.storage_options = {k[len(STORAGE_OPTION_PREFIX):]: v for k, v in options.items()
                                if k.lower().startswith(STORAGE_OPTION_PREFIX)}
        cols = options.get("columns")
        self.columns = [c.strip() for c in cols.split(",") if c.strip()] if cols else [*RECORD_SCHEMA.names]
        spark_schema(self.columns)
        self.keep_null_offsets = options.get("keep_null_offsets", "false").lower() == "true"
        self.parallelism = int(options.get("parallelism") or 2)
        self.batch_rows = int(options.get("batch_rows") or BATCH_ROWS)
        self.slices_json = options.get("slices")
        self.path = options.get("path")
        # Delta's reader options name the version or time to read (``versionAsOf``, ``timestampAsOf``); Spark
        # passes option names in lower case to a Python data source.
        lowered = {k.lower(): v for k, v in options.items()}
        self.version = lowered.get("versionasof") or options.get("version")
        self.timestamp = lowered.get("timestampasof")
        if self.version is not None and self.timestamp is not None:
            raise InvalidArgumentError(f"{SOURCE_NAME}: give versionAsOf or timestampAsOf, not both")
        self.from_offset = options.get("from_offset")


class DeltalogFilesDataSource(DataSource):
    """``spark.read.format("deltalog_files")``: see the module docstring for its options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return spark_schema(_ReadOptions(self.options).columns)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _ReadOptions(self.options)
        return DeltalogFilesReader(opts, schema)


class DeltalogFilesReader(DataSourceReader):
    """Plans tasks of slices on the driver side and reads them in the tasks."""

    def __init__(self, opts: _ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def _slices(self) -> list[FileSlice]:
        o = self.opts
        if o.slices_json is not None:
            slices = [FileSlice.from_list(v) for v in json.loads(o.slices_json)]
        else:
            slices = _listed_slices(o.path or "", o.version, o.from_offset, o.storage_options, o.timestamp)
        return slices

    def partitions(self) -> list[InputPartition]:
        return [_task(t) for t in plan_tasks(self._slices(), self.opts.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema  # the Arrow types this Spark version expects

        if partition.value is None:  # Spark's stand-in when there are no tasks
            return
        target = to_arrow_schema(self.schema)
        storage = Storage(self.opts.root, self.opts.storage_options or None)
        for v in partition.value:
            s = FileSlice.from_list(v)
            for batch in read_slice(storage, s, self.opts.columns, keep_null_offsets=self.opts.keep_null_offsets,
                                    batch_rows=self.opts.batch_rows):
                yield batch.cast(target)


def _listed_slices(path: str, version: str | None, from_offset: str | None,
                   storage_options: Mapping[str, str], timestamp: str | None = None) -> list[FileSlice]:
    """The slices of a partition table at ``version`` (or its version at ``timestamp``; the latest if neither),
    from its Delta log: every live file at or above the log start (and ``from_offset``)."""
    from deltalake import DeltaTable  # delta-rs, in the planner's worker: only this way of reading needs it

    from deltalog.log import time_travel
    from deltalog.log.delta import PROP_PARTITION, TXN_LOG_START_OFFSET, data_files

    with damage.reading_log(Storage(path, dict(storage_options) or None), path):
        dt = DeltaTable(path, version=None if version is None else int(version),
                        storage_options=dict(storage_options) or None)
        if timestamp is not None:
            ts = int(timestamp) if timestamp.strip().isdigit() else timestamp
            dt.load_as_version(time_travel.version_at(dt, time_travel.parse_timestamp(ts), path))
    start = max(dt.transaction_version(TXN_LOG_START_OFFSET) or 0, int(from_offset or 0))
    partition = int(dt.metadata().configuration.get(PROP_PARTITION, "0"))
    return file_slices(path, partition, data_files(dt), from_offset=start)


# -- registration ------------------------------------------------------------------------------------------

_registered: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()


def register(spark: Any) -> None:
    """Register the source on ``spark`` (once per session; classic or Spark Connect)."""
    with _lock:
        if spark in _registered:
            return
        spark.dataSource.register(DeltalogFilesDataSource)
        _registered.add(spark)
