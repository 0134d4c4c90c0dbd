"""What a partition knows of transactions: its ongoing ones, its last stable offset, its aborted ranges.

Kafka's broker keeps this in memory (``ProducerStateManager``: the first offset of each ongoing transaction;
the ``.txnindex`` beside each segment: the aborted transactions). Here it is derived from the partition's Delta
snapshot, from **file stats alone** in the common case:

* rows written inside a transaction carry their ``producer_id`` (null elsewhere), and a marker row carries
  ``control``, ``producer_id`` and ``txn_first_offset`` (see :mod:`deltalog.log.record`);
* every append writes its own file, so a file above the cleaner checkpoint holds one producer's batch (its
  min and max producer id are equal) or one marker: its stats say which, and where;
* an ongoing transaction always starts at or above the cleaner checkpoint, because the cleaner never cleans
  past the last stable offset; an aborted transaction's records below the checkpoint were dropped by the
  pass that moved it there (the cleaner drops aborted records on their first clean). So only files above the
  checkpoint matter, and a file there that mixes producers (which no append writes) is read, two columns.

The **last stable offset** (LSO) is the first offset of the earliest ongoing transaction, else the log end
offset. ``read_committed`` readers stop below it and drop the records of aborted transactions;
``read_uncommitted`` readers read to the log end. Neither ever returns a marker (Kafka's consumers never see
control batches).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import InvalidConfigError
from deltalog.log.record import (
    ABORT,
    CONTROL,
    CONTROL_TYPES,
    DELETE_HORIZON,
    HEADERS,
    OFFSET,
    PRODUCER_EPOCH,
    PRODUCER_ID,
    RECORD_SCHEMA,
    SEGMENT,
    TIMESTAMP,
    TXN_FIRST_OFFSET,
)
from deltalog.storage import Storage, join

if TYPE_CHECKING:
    # Annotation only: the cleaner's Spark tasks import this module (aborted_mask), and workers' start-up must
    # not import delta-rs.
    from deltalog.log.delta import DataFile

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)


def isolation_level(value: str | None, default: str, *, name: str = "isolation.level") -> str:
    """``value`` checked against Kafka's ``isolation.level`` values (case-insensitive), or ``default``."""
    if value is None:
        return default
    v = str(value).strip().lower()
    if v not in ISOLATION_LEVELS:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: String must be one of: "
                                 f"{', '.join(ISOLATION_LEVELS)}")
    return v


@dataclass(frozen=True)
class AbortedTxn:
    """One aborted transaction in a partition: its producer's records in ``[first_offset, last_offset)`` are
    aborted; ``last_offset`` is its ABORT marker's offset (Kafka's ``AbortedTxn`` of the transaction index)."""

    producer_id: int
    first_offset: int
    last_offset: int

    def to_tuple(self) -> tuple[int, int, int]:
        return (self.producer_id, self.first_offset, self.last_offset)


@dataclass(frozen=True)
class Marker:
    """A transaction marker row: its offset, producer, type (COMMIT/ABORT) and its transaction's first offset."""

    offset: int
    producer_id: int
    control: str
    txn_first_offset: int | None


@dataclass(frozen=True)
class TxnIndex:
    """The transactions of one partition snapshot above its cleaner checkpoint."""

    log_end_offset: int
    #: producer id -> first offset of its ongoing transaction in this partition.
    ongoing: Mapping[int, int] = field(default_factory=dict)
    aborted: tuple[AbortedTxn, ...] = ()
    markers: tuple[Marker, ...] = ()

    @property
    def last_stable_offset(self) -> int:
        return min(self.ongoing.values(), default=self.log_end_offset)

    def upper_offset(self, level: str) -> int:
        """Where a reader at ``level`` stops (exclusive)."""
        return self.last_stable_offset if level == READ_COMMITTED else self.log_end_offset

    def view(self, level: str) -> TxnView:
        """What a reader at ``level`` may see of the partition."""
        level = isolation_level(level, READ_COMMITTED)
        upper = self.upper_offset(level)
        return TxnView(level, upper, self.aborted_between(None, upper) if level == READ_COMMITTED else ())

    def aborted_between(self, lo: int | None, hi: int | None) -> tuple[AbortedTxn, ...]:
        """Aborted transactions that may hold records in ``[lo, hi)`` (None: unbounded)."""
        return tuple(a for a in self.aborted
                     if (lo is None or a.last_offset > lo) and (hi is None or a.first_offset < hi))


@dataclass(frozen=True)
class TxnView:
    """A reader's view of one partition: offsets below ``upper``, markers never, aborted records never under
    read_committed (``aborted`` is empty under read_uncommitted)."""

    level: str
    upper: int
    aborted: tuple[AbortedTxn, ...] = ()


# -- What a data file's stats say of its transactional rows --------------------------------------------------------
# Every append writes its own file: a marker is a one-row file, a transactional batch one producer's file. Only
# the files the cleaner writes mix producers, plain records and markers, and only those need reading.

#: The columns of a file's transactional rows that the index and the cleaner's plan read.
TXN_COLUMNS = (OFFSET, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET, DELETE_HORIZON)


def one_marker(f: DataFile) -> bool:
    """The file is one marker row (as ``write_marker`` writes it): its stats say the whole row."""
    return f.num_records == 1 and f.control_rows == 1


def only_markers(f: DataFile) -> bool:
    """Every row of the file is a marker: it holds nothing a reader or the offset map wants."""
    return f.num_records > 0 and f.control_rows == f.num_records


def one_producer_batch(f: DataFile) -> bool:
    """Every row of the file is a data row of one producer's transactions (as a transactional append writes it)."""
    return (f.num_records > 0 and not f.control_rows and f.producer_rows == f.num_records
            and f.min_producer_id is not None and f.min_producer_id == f.max_producer_id)


def contiguous_batch(f: DataFile) -> bool:
    """One producer's batch holding every offset of ``[min_offset, max_offset]`` (an append, not yet cleaned)."""
    return one_producer_batch(f) and f.max_offset - f.min_offset + 1 == f.num_records


def may_hold_aborted(f: DataFile, aborted: Sequence[AbortedTxn]) -> bool:
    """Whether the file's stats leave room for a record of one of the ``aborted`` transactions."""
    if f.producer_rows <= f.control_rows:  # no transactional data row
        return False
    return any(a.first_offset <= f.max_offset and a.last_offset > f.min_offset
               and (f.min_producer_id is None or f.min_producer_id <= a.producer_id <= f.max_producer_id)
               for a in aborted)


def wholly_aborted(f: DataFile, aborted: Sequence[AbortedTxn]) -> bool:
    """Whether every row of the file is a record of one aborted transaction (its stats say so): a reader at
    read_committed, the offset map and the cleaner's recopy need not open it."""
    if not one_producer_batch(f):
        return False
    pid = int(f.min_producer_id)
    return any(a.producer_id == pid and a.first_offset <= f.min_offset and f.max_offset < a.last_offset
               for a in aborted)


def transactional_rows(storage: Storage, uri: str, f: DataFile) -> pa.Table:
    """The rows of ``f`` that carry a producer id (data rows of transactions and markers), as
    :data:`TXN_COLUMNS` in offset order: for a file whose stats do not say them (one the cleaner wrote). A
    column the file lacks (written before the producer columns existed) is all null."""
    source = storage.parquet_file(join(uri, f.path))
    present = set(source.schema_arrow.names)
    if PRODUCER_ID not in present:
        return pa.table({c: pa.nulls(0, RECORD_SCHEMA.field(c).type) for c in TXN_COLUMNS})
    table = source.read(columns=[c for c in TXN_COLUMNS if c in present])
    table = table.filter(pc.is_valid(table.column(PRODUCER_ID))).sort_by(OFFSET)
    return pa.table({c: table.column(c) if c in present else pa.nulls(table.num_rows, RECORD_SCHEMA.field(c).type)
                     for c in TXN_COLUMNS})


def _events_of(storage: Storage, uri: str, f: DataFile) -> list[tuple[int, int, str | None, int | None]]:
    """(offset, producer id, control, txn first offset) of the file's transactional rows, in offset order; a
    batch's data rows are summarised by its first row (what the index needs of them)."""
    if one_marker(f):
        return [(f.min_offset, int(f.min_producer_id), f.min_control, f.min_txn_first_offset)]
    if one_producer_batch(f):
        return [(f.min_offset, int(f.min_producer_id), None, None)]
    table = transactional_rows(storage, uri, f)
    cols = [table.column(c).to_pylist() for c in (OFFSET, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET)]
    return list(zip(*cols, strict=True))


def txn_index(storage: Storage, uri: str, files: Iterable[DataFile], from_offset: int,
              log_end_offset: int) -> TxnIndex:
    """The :class:`TxnIndex` of a snapshot's ``files``, looking at files that reach ``from_offset`` (the first
    dirty offset) or above. A snapshot without transactional rows costs one pass over its file list."""
    relevant = [f for f in files if f.max_offset >= from_offset and (f.producer_rows or f.control_rows)]
    if not relevant:
        return TxnIndex(log_end_offset)
    events: list[tuple[int, int, str | None, int | None]] = []
    for f in sorted(relevant, key=lambda f: f.min_offset):
        events.extend(_events_of(storage, uri, f))
    if any(not f.deltalog_layout for f in relevant):  # another engine's OPTIMIZE: a file spans others' offsets
        events.sort(key=lambda e: e[0])
    ongoing: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    markers: list[Marker] = []
    for offset, pid, control, first in events:
        if control is None:
            ongoing.setdefault(pid, offset)
            continue
        start = ongoing.pop(pid, None)
        first = first if first is not None else start
        markers.append(Marker(offset, pid, control, first))
        if control == ABORT:
            aborted.append(AbortedTxn(pid, offset if first is None else first, offset))
    return TxnIndex(log_end_offset, ongoing, tuple(aborted), tuple(markers))


def aborted_mask(offsets: pa.Array | pa.ChunkedArray, producer_ids: pa.Array | pa.ChunkedArray,
                 aborted: Sequence[AbortedTxn]) -> np.ndarray | None:
    """A boolean mask of the rows that belong to one of the ``aborted`` transactions (None: no row does)."""
    if not aborted or producer_ids.null_count == len(producer_ids):
        return None
    pid = np.asarray(pc.fill_null(producer_ids, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    off = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    out = np.zeros(len(off), dtype=bool)
    for a in aborted:
        out |= (pid == a.producer_id) & (off >= a.first_offset) & (off < a.last_offset)
    return out if out.any() else None


def visible_mask(table: pa.Table, aborted: Sequence[AbortedTxn] = ()) -> np.ndarray | None:
    """Which of ``table``'s rows an application sees: no markers, and no record of an ``aborted`` transaction
    (pass the aborted ones for read_committed, nothing for read_uncommitted). None when every row is seen (a
    plain file, without the transactional columns, always is)."""
    names = table.column_names
    markers = CONTROL in names and table.column(CONTROL).null_count < table.num_rows
    if not markers and not (aborted and PRODUCER_ID in names):
        return None
    keep = np.ones(table.num_rows, dtype=bool)
    if markers:
        keep &= np.asarray(pc.is_null(table.column(CONTROL)).to_numpy(zero_copy_only=False), dtype=bool)
    if aborted and PRODUCER_ID in names:
        hit = aborted_mask(table.column(OFFSET), table.column(PRODUCER_ID), aborted)
        if hit is not None:
            keep &= ~hit
    return None if keep.all() else keep


def visible(table: pa.Table, aborted: Sequence[AbortedTxn] = ()) -> pa.Table:
    """``table``'s rows an application sees (see :func:`visible_mask`)."""
    keep = visible_mask(table, aborted)
    return table if keep is None else table.filter(pa.array(keep))


def with_producer(rows: pa.Table, producer_id: int, producer_epoch: int) -> pa.Table:
    """Rows of a transactional batch: the append's columns plus the producer's id and epoch on every row."""
    n = rows.num_rows
    return rows.append_column(pa.field(PRODUCER_ID, pa.int64()), pa.array(np.full(n, producer_id, np.int64))) \
               .append_column(pa.field(PRODUCER_EPOCH, pa.int32()), pa.array(np.full(n, producer_epoch, np.int32)))


def marker_row(offset: int, segment: int, producer_id: int, producer_epoch: int, control: str,
               txn_first_offset: int | None, timestamp_ms: int) -> pa.Table:
    """The one row of a transaction marker, in the full record schema."""
    if control not in CONTROL_TYPES:
        raise ValueError(f"a marker is one of {CONTROL_TYPES}, not {control!r}")
    values = {name: [None] for name in RECORD_SCHEMA.names}
    values.update({OFFSET: [offset], HEADERS: [[]], TIMESTAMP: [timestamp_ms], SEGMENT: [segment],
                   PRODUCER_ID: [producer_id], PRODUCER_EPOCH: [producer_epoch], CONTROL: [control],
                   TXN_FIRST_OFFSET: [txn_first_offset]})
    return pa.table(values, schema=RECORD_SCHEMA)
