"""What a cleaning pass does about transactions, decided on the driver before the pass (Kafka's
``CleanedTransactionMetadata``, seed 001 "Interaction with transactions / markers").

* **Aborted records** are dropped by the pass whatever their keys, and never enter the offset map (an
  aborted record must not supersede an earlier committed value of its key). The pass gets every aborted
  transaction whose ABORT marker lies at or above the first dirty offset, including markers above the
  section's end: their records may lie inside it. Below the first dirty offset there are none left: the
  pass that moved the checkpoint past them dropped them.
* **Markers** are never looked up in, or added to, the offset map, and never dropped as keyless. A marker
  gets its delete horizon (``now + delete.retention.ms``, the tombstone mechanism) when its transaction
  has no record left: an ABORT marker in the pass that drops its records (all of them precede it, in files
  the same pass recopies), a COMMIT marker once the snapshot the pass plans on holds none of its producer's
  rows in ``[txn_first_offset, marker offset)``. A marker whose horizon has passed is removed like an
  expired tombstone.

A log without transactional rows pays a look at its file list (stats) and nothing else. A transactional
log has its markers, and the producer rows that may keep a COMMIT marker alive, read from the Delta stats
where one file is one marker or one producer's contiguous batch, else from the ``offset``,
``producer_id`` and ``control`` columns of the few files that mix them (files the cleaner wrote).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from deltalog.log.delta import DataFile
from deltalog.log.record import ABORT, COMMIT, CONTROL, DELETE_HORIZON, OFFSET, PRODUCER_ID, TXN_FIRST_OFFSET
from deltalog.log.transactions import AbortedTxn, TxnIndex
from deltalog.storage import Storage, join


@dataclass(frozen=True)
class TxnCleaning:
    """A pass's transaction work: the aborted transactions whose records it drops, and the offsets of the
    markers it stamps with a delete horizon (those without one yet)."""

    aborted: tuple[AbortedTxn, ...] = ()
    stamp_markers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # sorted

    @property
    def empty(self) -> bool:
        return not self.aborted and not len(self.stamp_markers)


@dataclass(frozen=True)
class _MarkerRow:
    offset: int
    producer_id: int
    control: str
    txn_first_offset: int | None
    delete_horizon_ms: int | None


def _marker_file(f: DataFile) -> bool:
    return f.num_records == 1 and f.control_rows == 1


def _contiguous_batch(f: DataFile) -> bool:
    """One producer's transactional batch as appended: its stats say every row's producer and offset."""
    return (f.control_rows == 0 and f.producer_rows == f.num_records and f.min_producer_id == f.max_producer_id
            and f.max_offset - f.min_offset + 1 == f.num_records)


class _Rows:
    """The transactional columns of the files that need reading, read once each."""

    def __init__(self, storage: Storage, uri: str) -> None:
        self.storage, self.uri = storage, uri
        self._cache: dict[str, dict[str, np.ndarray | list]] = {}

    def of(self, f: DataFile) -> dict[str, np.ndarray | list]:
        got = self._cache.get(f.path)
        if got is None:
            source = self.storage.parquet_file(join(self.uri, f.path))
            present = set(source.schema_arrow.names)
            cols = [c for c in (OFFSET, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET, DELETE_HORIZON) if c in present]
            table = source.read(columns=cols)
            if PRODUCER_ID in present:
                table = table.filter(pc.is_valid(table.column(PRODUCER_ID)))
            got = {c: table.column(c).to_pylist() if c in present else [None] * table.num_rows
                   for c in (OFFSET, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET, DELETE_HORIZON)}
            self._cache[f.path] = got
        return got


def plan_txn_cleaning(storage: Storage, uri: str, files: Sequence[DataFile], index: TxnIndex,
                      log_start: int, recopy_end: int) -> TxnCleaning:
    """The transaction work of a pass that recopies ``files`` (those of the closed segments below the mapped
    range's end), given the snapshot's transaction index (built from the first dirty offset).

    ``recopy_end`` bounds the markers considered (the end of the last recopied file, exclusive).
    """
    transactional = [f for f in files if f.max_offset >= log_start and (f.producer_rows or f.control_rows)]
    if not transactional and not index.aborted:
        return TxnCleaning()
    rows = _Rows(storage, uri)
    markers: list[_MarkerRow] = []
    for f in transactional:
        if not f.control_rows or f.min_offset >= recopy_end:
            continue
        if _marker_file(f):
            markers.append(_MarkerRow(f.min_offset, int(f.min_producer_id), str(f.min_control),
                                      f.min_txn_first_offset, f.max_delete_horizon_ms))
            continue
        r = rows.of(f)
        for off, pid, control, first, horizon in zip(r[OFFSET], r[PRODUCER_ID], r[CONTROL], r[TXN_FIRST_OFFSET],
                                                     r[DELETE_HORIZON], strict=True):
            if control is not None and off >= log_start:
                markers.append(_MarkerRow(int(off), int(pid), str(control), first, horizon))
    stamp: list[int] = []
    for m in markers:
        if m.delete_horizon_ms is not None or m.offset >= recopy_end:
            continue
        if m.control == ABORT:
            stamp.append(m.offset)  # this pass drops every record of its transaction
        elif m.control == COMMIT and not _has_data(rows, transactional, m, log_start):
            stamp.append(m.offset)
    return TxnCleaning(tuple(index.aborted), np.array(sorted(stamp), dtype=np.int64))


def _has_data(rows: _Rows, files: Sequence[DataFile], m: _MarkerRow, log_start: int) -> bool:
    """Whether any row of the marker's transaction (its producer's data rows in ``[txn first offset, marker
    offset)``) is still in the snapshot."""
    lo = max(m.txn_first_offset if m.txn_first_offset is not None else log_start, log_start)
    for f in files:
        if f.max_offset < lo or f.min_offset >= m.offset or f.producer_rows <= f.control_rows:
            continue
        if f.min_producer_id is not None and not f.min_producer_id <= m.producer_id <= f.max_producer_id:
            continue
        if _contiguous_batch(f):
            return True  # every offset of [min, max] is a row of this producer, and it overlaps [lo, m)
        r = rows.of(f)
        for off, pid, control in zip(r[OFFSET], r[PRODUCER_ID], r[CONTROL], strict=True):
            if control is None and pid == m.producer_id and lo <= off < m.offset:
                return True
    return False
