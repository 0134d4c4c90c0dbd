"""Pass 2 of a cleaning pass, as the work of one Spark task: recopy a run of files, keeping the survivors.

Kafka's ``cleanSegments`` reads each record of a segment group and keeps it when ``shouldRetainRecord``
says so (``Cleaner.cleanInto``'s ``MemoryRecords.filterTo`` with its ``RecordFilter``). :class:`RetainRule` is that rule
over whole Arrow batches, for a record at or above the log start:

- past the mapped range (``offset >= end``): kept as it is;
- keyless inside it: dropped (and counted);
- in the dirty section: kept when it is its key's latest record, i.e. when its offset is in the map's set
  of latest offsets (:class:`~deltalog.cleaner.offset_bitmap.OffsetBitmap`): its key need not be hashed again;
- in the clean section: kept when its key's hash is not in the map (no later record supersedes it);
- and in either, dropped if it is a tombstone whose delete horizon has passed. A kept tombstone without a
  horizon gets ``delete_horizon_ms = horizon`` (the clean time plus ``delete.retention.ms``, KIP-534);
- a record of an aborted transaction: dropped wherever it is, also past the mapped range;
- a transaction marker: kept, unless it lies in the mapped range and its horizon has passed; the markers the
  driver listed (:mod:`deltalog.cleaner.txn_plan`) get their horizon if they have none.

Each task is one :class:`RecopyChunk`: consecutive files in offset order, each tagged with the name of
the new segment its survivors go to, and the slice of the latest-offset bitmap that covers them; the map's
hashes go only to tasks with clean files (with the task, or written once to the pass's directory when
many need them or they are big).
The task streams the files a row group at a time with pyarrow (vectorized: no Python per record), deciding
each from its small columns before it reads the values (:func:`read_deciding`: a row group where nothing
survives is never decoded), filters with numpy, and writes the survivors of each segment group as Parquet files into the pass's directory,
flushing every :data:`ROW_GROUP_ROWS` survivors, so its memory stays bounded whatever the file sizes; the
files' row groups are as small as an append's (:func:`~deltalog.log.record.row_group_rows`), so that a later read
of a few records reads little. Its files hold ascending offsets and never overlap another task's (chunks are disjoint offset runs).

This module runs in Spark's Python workers: it imports only numpy, pyarrow, deltalog's record schema and
hash, and the storage layer (every file is opened through the :class:`~deltalog.storage.Storage` the task
carries, so executors never need the driver's disk).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.cleaner.offset_bitmap import OffsetBitmap
from deltalog.cleaner.offset_map import MapKeys
from deltalog.cleaner.task_plan import FileSlice
from deltalog.cleaner.tasks import load_arrays, save_arrays
from deltalog.errors import CorruptLogError
from deltalog.log import damage
from deltalog.log.key_hash import hashes_of, key_hashes, with_key_hash
from deltalog.log.record import (
    CONTROL,
    DELETE_HORIZON,
    KEY,
    KEY_HASH_HI,
    KEY_HASH_LO,
    OFFSET,
    PRODUCER_ID,
    RECORD_SCHEMA,
    SEGMENT,
    TABLE_SCHEMA,
    VALUE,
    conform,
    new_file_name,
    parquet_write_options,
    row_group_rows,
    written_by_deltalog,
)
from deltalog.log.transactions import AbortedTxn, aborted_mask
from deltalog.storage import ParquetSink, Storage, join

#: Records read per Arrow batch.
BATCH_ROWS = 65_536
#: Directory (inside a pass's directory) of what the driver leaves for the pass's tasks while they run.
TASKS_DIR = "_tasks"
#: Survivors buffered before they are written (in row groups of :func:`~deltalog.log.record.row_group_rows`).
ROW_GROUP_ROWS = 1_048_576
#: The columns a row group's survivors are decided from: read first ...
DECIDE_COLUMNS = (OFFSET, KEY, KEY_HASH_HI, KEY_HASH_LO, DELETE_HORIZON, PRODUCER_ID, CONTROL)
#: ... and the rest, read only for a row group where a record survives (or whose drops cannot be counted without
#: them): Parquet decodes a column chunk whole, so a value is skipped only with its whole row group.
CARRIED_COLUMNS = tuple(name for name in TABLE_SCHEMA.names if name not in DECIDE_COLUMNS)


@dataclass(frozen=True)
class RetainMasks:
    """One batch's masks under a :class:`RetainRule` (``markers``/``aborted`` None: no such row)."""

    retain: np.ndarray
    mapped: np.ndarray
    is_latest: np.ndarray
    live: np.ndarray  # at or above the log start
    markers: np.ndarray | None
    aborted: np.ndarray | None


@dataclass(frozen=True)
class RetainRule:
    """Kafka's ``shouldRetainRecord`` for one pass, over arrays of records, with its transaction rules
    (``CleanedTransactionMetadata``): records of ``aborted`` transactions are dropped wherever they are, and
    transaction markers are kept (never looked up by key) until their delete horizon has passed."""

    log_start: int
    first_dirty: int  # start of the dirty section: records below it are tested by key hash
    end: int  # exclusive end of the mapped range
    now: int
    latest: OffsetBitmap  # the map's latest offsets (at least over the records being tested)
    keys: MapKeys | None  # the map's hashes; needed only for records of the clean section
    aborted: tuple[AbortedTxn, ...] = ()

    def retain(self, offsets: np.ndarray, keys: pa.ChunkedArray, horizons: pa.ChunkedArray,
               producer_ids: pa.ChunkedArray | None = None, control: pa.ChunkedArray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(retain, mapped, is_latest) masks for records with these offsets, keys and delete horizons (and,
        in a transactional log, producer ids and control types).

        ``is_latest`` holds for keyed records of the mapped range that no later record of the range
        supersedes (whether or not they are expired tombstones).
        """
        m = self.masks(offsets, keys, horizons, producer_ids, control)
        return m.retain, m.mapped, m.is_latest

    def masks(self, offsets: np.ndarray, keys: pa.ChunkedArray, horizons: pa.ChunkedArray,
              producer_ids: pa.ChunkedArray | None = None, control: pa.ChunkedArray | None = None,
              hashes: tuple[pa.ChunkedArray, pa.ChunkedArray] | None = None) -> RetainMasks:
        """What :meth:`retain` decides, with the masks it decided from (markers, aborted records, expired
        horizons), so the recopy counts what it dropped without working them out again. ``hashes``: the key-hash
        columns written with the records, used for the clean section instead of hashing its keys again."""
        live = offsets >= self.log_start
        mapped = live & (offsets < self.end)
        is_latest = mapped & self.latest.contains(offsets)
        clean = np.flatnonzero(mapped & (offsets < self.first_dirty))
        if len(clean):
            keys_clean = keys.take(pa.array(clean))
            keyed = ~_null_mask(keys_clean)
            if self.keys is None:
                raise CorruptLogError("the map's hashes are needed to clean records of the clean section")
            if hashes is None:
                hi, lo = key_hashes(keys_clean)
            else:
                taken = pa.array(clean)
                hi, lo = hashes_of(keys_clean, hashes[0].take(taken), hashes[1].take(taken))
            is_latest[clean] = keyed & ~self.keys.contains(hi, lo)
        if horizons.null_count == len(horizons):
            expired = np.zeros(len(offsets), dtype=bool)
        else:  # a horizon is only stamped on a tombstone or a marker: one that has passed marks it expired
            expired = pc.fill_null(pc.less_equal(horizons, self.now), False).to_numpy(zero_copy_only=False)
        retain = (live & ~mapped) | (is_latest & ~expired)
        markers = marker_mask(control)
        if markers is not None:
            retain[markers] = live[markers] & ~(mapped[markers] & expired[markers])
        aborted = self.aborted_rows(offsets, producer_ids)
        if aborted is not None:
            retain &= ~aborted
        return RetainMasks(retain, mapped, is_latest, live, markers, aborted)

    def aborted_rows(self, offsets: np.ndarray, producer_ids: pa.ChunkedArray | None) -> np.ndarray | None:
        """Which rows belong to an aborted transaction (None: none does). A marker is at its transaction's
        last offset, outside the aborted range ``[first, marker)``."""
        if not self.aborted or producer_ids is None or producer_ids.null_count == len(producer_ids) \
                or not len(offsets):
            return None
        lo, hi = int(offsets.min()), int(offsets.max())
        near = [a for a in self.aborted if a.last_offset > lo and a.first_offset <= hi]
        return aborted_mask(pa.array(offsets), producer_ids, near) if near else None


def marker_mask(control: pa.ChunkedArray | None) -> np.ndarray | None:
    """Which rows are transaction markers (None: none is)."""
    if control is None or control.null_count == len(control):
        return None
    return ~_null_mask(control)


@dataclass(frozen=True)
class RecopyParams:
    """What every task of one pass shares. ``keys_location`` is where the driver left the map's hashes, when
    tasks do not carry them themselves."""

    storage: Storage  # the store's files, opened from the executor (it pickles as its root and options)
    table_uri: str
    out_dir: str  # relative to the table: cleaned-<now>-<pass id>
    log_start: int
    first_dirty: int
    end: int  # exclusive end of the mapped range
    now: int
    horizon: int  # the delete horizon stamped on tombstones (and markers) this pass keeps for the first time
    keys_location: str | None = None
    #: Aborted transactions whose records this pass drops (see :mod:`deltalog.cleaner.txn_plan`).
    aborted: tuple[AbortedTxn, ...] = ()
    #: Offsets of the markers this pass stamps with ``horizon`` (sorted; those already stamped keep theirs).
    stamp_markers: np.ndarray | None = None

    def rule(self, latest: OffsetBitmap, keys: MapKeys | None) -> RetainRule:
        """The pass's ``shouldRetainRecord``, over the latest offsets and hashes given."""
        return RetainRule(self.log_start, self.first_dirty, self.end, self.now, latest, keys, self.aborted)


@dataclass(frozen=True)
class RecopyChunk:
    """One task's input: ``files`` as (file slice, name of its new segment), in offset order."""

    files: tuple[tuple[FileSlice, int], ...]
    latest: OffsetBitmap
    needs_keys: bool  # whether any of its records lies in the clean section
    keys: MapKeys | None = None  # the map's hashes, when they ride with the task rather than through storage


@dataclass
class RecopyCounts:
    """The figures of Kafka's cleaner log line that one task saw (records at or above the log start)."""

    records_read: int = 0
    records_written: int = 0
    keyless_dropped: int = 0
    tombstones_removed: int = 0
    tombstones_stamped: int = 0
    aborted_dropped: int = 0
    markers_stamped: int = 0
    markers_removed: int = 0

    def add(self, other: RecopyCounts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class RecopyOutput:
    """One task's result: the files it wrote (relative paths, offset order), their sizes, and its counts."""

    files: list[str] = field(default_factory=list)
    counts: RecopyCounts = field(default_factory=RecopyCounts)
    sizes: list[int] = field(default_factory=list)


def recopy_chunk(params: RecopyParams, chunk: RecopyChunk) -> RecopyOutput:
    """The body of a Spark task of pass 2: recopy one chunk."""
    out = RecopyOutput()
    keys = None
    if chunk.needs_keys:
        keys = chunk.keys if chunk.keys is not None else load_keys(params.storage, params.keys_location)
    rule = params.rule(chunk.latest, keys)
    writer = _SegmentWriter(params)
    try:
        for piece, segment in chunk.files:
            for table, masks in read_deciding(params.storage, join(params.table_uri, piece.path), rule, out.counts,
                                              row_groups=piece.row_groups):
                kept = _filter(table, rule, params, segment, out.counts, masks)
                if kept is not None:
                    writer.write(segment, kept)
        out.files = writer.close()
        out.sizes = writer.sizes
    except BaseException:
        writer.abort()
        raise
    return out


def save_keys(storage: Storage, location: str, keys: MapKeys) -> None:
    """Leave the map's hashes in the pass's directory, once, for the tasks that test clean records."""
    save_arrays(storage, location, hi=keys.hi, lo=keys.lo)


def load_keys(storage: Storage, location: str | None) -> MapKeys:
    if location is None:
        raise CorruptLogError("the map's hashes are needed to clean records of the clean section")
    arrays = load_arrays(storage, location)
    return MapKeys(arrays["hi"], arrays["lo"])


def read_batches(storage: Storage, path: str, columns: list[str] | None = None, batch_rows: int = BATCH_ROWS,
                 row_groups: Sequence[int] | None = None) -> Iterator[pa.Table]:
    """A data file's records (of ``row_groups`` only, if given), a batch at a time, in the table's schema; a
    file that cannot be read raises :class:`CorruptLogError` naming it (the message reaches the driver from
    the Spark task)."""
    try:
        with storage.open_input(path) as f:
            source = pq.ParquetFile(f)
            if columns is not None:  # a plain file lacks the producer columns: read what it has, the rest is null
                present = set(source.schema_arrow.names)
                wanted = [c for c in columns if c in present]
            else:
                wanted = None
            for batch in source.iter_batches(batch_size=batch_rows, columns=wanted, row_groups=row_groups):
                table = pa.Table.from_batches([batch])
                schema = RECORD_SCHEMA if columns is None else pa.schema([TABLE_SCHEMA.field(c) for c in columns])
                yield conform(table, schema)
    except (OSError, pa.ArrowException) as e:
        raise damage.data_file_error(path, e) from None


def read_deciding(storage: Storage, path: str, rule: RetainRule, counts: RecopyCounts,
                  row_groups: Sequence[int] | None = None) -> Iterator[tuple[pa.Table, RetainMasks | None]]:
    """A data file's records (of ``row_groups`` only, if given) for the recopy, a row group at a time, each with
    the masks ``rule`` decided for it (None: not decided yet), skipping the row groups where nothing survives.

    Each row group's :data:`DECIDE_COLUMNS` are read first and decided; its other columns (the values and headers,
    the bulk of the bytes) are read only if a record survives. A row group where none does is not returned: its
    drops are counted into ``counts`` here, the tombstones among them from the value column's null count in the
    footer, when that count is exactly theirs (every row a keyed, mapped, non-aborted data record); otherwise the
    row group is read whole after all. Kafka's ``cleanInto`` reads each batch whole, then filters it; a Parquet row
    group is our batch, and its columns can be read apart. A row group bigger than :data:`BATCH_ROWS` (another
    engine's file) is read a batch of every column at a time, undecided, so memory stays bounded. The key-hash
    columns of a file deltalog did not write (:func:`~deltalog.log.record.written_by_deltalog`) are not read: the
    keys are hashed instead, and the survivors written with their own hashes. A file that cannot be read raises
    :class:`CorruptLogError` naming it."""
    try:
        with storage.open_input(path) as f:
            source = pq.ParquetFile(f)
            meta = source.metadata
            present = set(source.schema_arrow.names)
            if not written_by_deltalog(path):  # another engine's copy of the hashes: recomputed from the keys
                present -= {KEY_HASH_HI, KEY_HASH_LO}
            decide = [c for c in DECIDE_COLUMNS if c in present]
            carried = [c for c in CARRIED_COLUMNS if c in present]
            value_leaf = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == VALUE), None)
            for i in range(meta.num_row_groups) if row_groups is None else row_groups:
                if meta.row_group(i).num_rows > BATCH_ROWS:
                    for batch in source.iter_batches(batch_size=BATCH_ROWS, row_groups=[i],
                                                     columns=[c for c in source.schema_arrow.names if c in present]):
                        yield conform(pa.Table.from_batches([batch]), TABLE_SCHEMA), None
                    continue
                head = source.read_row_group(i, columns=decide)
                decided = conform(head, _DECIDE_SCHEMA)
                m = _decide(decided, rule)
                if not m.retain.any() and _count_dropped(decided, m, _null_count(meta.row_group(i), value_leaf),
                                                         counts):
                    continue
                rest = source.read_row_group(i, columns=carried)
                table = pa.Table.from_arrays([*head.columns, *rest.columns], names=[*decide, *carried])
                yield conform(table, TABLE_SCHEMA), m
    except (OSError, pa.ArrowException) as e:
        raise damage.data_file_error(path, e) from None


_DECIDE_SCHEMA = pa.schema([TABLE_SCHEMA.field(c) for c in DECIDE_COLUMNS])


def _decide(table: pa.Table, rule: RetainRule) -> RetainMasks:
    """``rule``'s masks for a table holding (at least) :data:`DECIDE_COLUMNS` (key hashes absent or null where the
    file has none: computed from the keys, :func:`~deltalog.log.key_hash.hashes_of`)."""
    hashes = (table.column(KEY_HASH_HI), table.column(KEY_HASH_LO)) if KEY_HASH_HI in table.column_names else None
    return rule.masks(table.column(OFFSET).to_numpy(), table.column(KEY), table.column(DELETE_HORIZON),
                      table.column(PRODUCER_ID), table.column(CONTROL), hashes)


def _null_count(group: pq.RowGroupMetaData, leaf: int | None) -> int | None:
    """The null count of a row group's column from its footer statistics (None: not there)."""
    if leaf is None:
        return None
    stats = group.column(leaf).statistics
    if stats is None or not stats.has_null_count:
        return None
    return int(stats.null_count)


def _count_dropped(head: pa.Table, m: RetainMasks, tombstones: int | None, counts: RecopyCounts) -> bool:
    """Count the drops of a row group where nothing survives, as :func:`_filter` does, from its
    :data:`DECIDE_COLUMNS` (``head``) and its value column's null count (``tombstones``; None: unknown). False,
    with nothing counted, when the values are needed: a tombstone counts as removed only where its record is a
    keyed, mapped, non-aborted data record, so the null count is its count only if every row is one (or none is)."""
    live, mapped, markers = m.live, m.mapped, m.markers
    data = np.ones(len(live), dtype=bool) if markers is None else ~markers
    aborted = np.zeros(len(live), dtype=bool) if m.aborted is None else m.aborted & live & data
    keyless = _null_mask(head.column(KEY)) & data
    counted = mapped & data & ~keyless & ~aborted
    if not counted.any():
        tombstones = 0
    elif tombstones is None or not counted.all():
        return False
    counts.records_read += int(np.count_nonzero(live))
    counts.keyless_dropped += int(np.count_nonzero(mapped & keyless & ~aborted))
    counts.tombstones_removed += tombstones
    counts.aborted_dropped += int(np.count_nonzero(aborted))
    if markers is not None:
        counts.markers_removed += int(np.count_nonzero(live & markers))
    return True


def _filter(table: pa.Table, rule: RetainRule, params: RecopyParams, segment: int,
            counts: RecopyCounts, masks: RetainMasks | None = None) -> pa.Table | None:
    """The survivors of one batch (decided by ``masks`` if given, else here), stamped and renamed; ``counts``
    updated."""
    offsets = table.column(OFFSET).to_numpy()
    horizon = table.column(DELETE_HORIZON)
    m = masks if masks is not None else _decide(table, rule)
    retain, mapped, live, markers = m.retain, m.mapped, m.live, m.markers
    data = np.ones(len(offsets), dtype=bool) if markers is None else ~markers
    keyless = _null_mask(table.column(KEY)) & data
    tombstone = _null_mask(table.column(VALUE)) & data
    no_horizon = _null_mask(horizon)
    # Kafka stamps every batch it rewrites that keeps a tombstone (MemoryRecords.filterTo), so a tombstone past
    # the mapped range, in a segment this pass recopies, gets its horizon too.
    stamp = retain & tombstone & no_horizon
    dropped = live & ~retain
    aborted = np.zeros(len(offsets), dtype=bool) if m.aborted is None else m.aborted & live & data
    if markers is not None:
        listed = params.stamp_markers
        marker_stamp = retain & markers & no_horizon
        if listed is not None and len(listed):
            marker_stamp &= np.isin(offsets, listed)
        else:
            marker_stamp[:] = False
        counts.markers_stamped += int(np.count_nonzero(marker_stamp))
        counts.markers_removed += int(np.count_nonzero(dropped & markers))
        stamp |= marker_stamp
    counts.records_read += int(np.count_nonzero(live))
    counts.keyless_dropped += int(np.count_nonzero(mapped & keyless & ~aborted))
    counts.tombstones_removed += int(np.count_nonzero(mapped & tombstone & ~keyless & ~retain & ~aborted))
    counts.tombstones_stamped += int(np.count_nonzero(stamp & tombstone))
    counts.aborted_dropped += int(np.count_nonzero(aborted))
    n = int(np.count_nonzero(retain))
    counts.records_written += n
    if n == 0:
        return None
    if stamp.any():
        horizon = pc.if_else(pa.array(stamp), pa.scalar(params.horizon, pa.int64()), horizon)
        table = table.set_column(table.schema.get_field_index(DELETE_HORIZON), RECORD_SCHEMA.field(DELETE_HORIZON),
                                 horizon)
    if n < table.num_rows:
        table = table.filter(pa.array(retain))
    table = table.set_column(table.schema.get_field_index(SEGMENT), RECORD_SCHEMA.field(SEGMENT),
                             pa.array(np.full(n, segment, dtype=np.int64)))
    # Survivors of a file without key hashes get them here, so the next pass maps them without hashing.
    return with_key_hash(table)


def _null_mask(column: pa.ChunkedArray) -> np.ndarray:
    if column.null_count == 0:
        return np.zeros(len(column), dtype=bool)
    return column.is_null().to_numpy(zero_copy_only=False)


class _SegmentWriter:
    """Writes survivors to one Parquet file per new segment, flushed every :data:`ROW_GROUP_ROWS` records."""

    def __init__(self, params: RecopyParams) -> None:
        self.params = params
        self.segment: int | None = None
        self.writer: ParquetSink | None = None
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.written: list[str] = []
        self.sizes: list[int] = []

    def write(self, segment: int, table: pa.Table) -> None:
        if segment != self.segment:
            self._finish()
            self.segment = segment
        self.buffer.append(table)
        self.buffered += table.num_rows
        if self.buffered >= ROW_GROUP_ROWS:
            self._flush()

    def close(self) -> list[str]:
        self._finish()
        return self.written

    def abort(self) -> None:
        """Close without completing: the pass fails, and its directory is removed by the driver."""
        if self.writer is not None:
            self.writer.abort()
            self.writer = None

    def _flush(self) -> None:
        if not self.buffer:
            return
        table = pa.concat_tables(self.buffer)
        self.buffer, self.buffered = [], 0
        if self.writer is None:
            first = int(table.column(OFFSET)[0].as_py())
            relative = f"{self.params.out_dir}/{new_file_name(self.segment, first)}"
            path = join(self.params.table_uri, relative)
            self.writer = self.params.storage.open_parquet_writer(path, TABLE_SCHEMA, **parquet_write_options(table))
            self.written.append(relative)
        self.writer.write_table(table, row_group_size=row_group_rows(table))

    def _finish(self) -> None:
        self._flush()
        if self.writer is not None:
            self.sizes.append(self.writer.close())
            self.writer = None
