"""What a cleaning pass does about transactions, decided on the driver before the pass (Kafka's
``CleanedTransactionMetadata`` and ``Cleaner.cleanSegments``' ``transactionMetadata``).

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
where one file is one marker or one producer's contiguous batch, else from the transactional columns of
the few files that mix them (files the cleaner wrote). Whether a COMMIT marker's transaction has a row left
is a bisection in its producer's batches, not a scan of the file list, so a log with many transactions
plans in ``O((markers + files) log files)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from deltalog.log.delta import DataFile
from deltalog.log.record import ABORT, COMMIT, CONTROL, DELETE_HORIZON, OFFSET, PRODUCER_ID, TXN_FIRST_OFFSET
from deltalog.log.transactions import (
    AbortedTxn,
    TxnIndex,
    contiguous_batch,
    one_marker,
    transactional_rows,
)
from deltalog.storage import Storage


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


class _Rows:
    """The transactional rows of the files whose stats do not say them, read once each."""

    def __init__(self, storage: Storage, uri: str) -> None:
        self.storage, self.uri = storage, uri
        self._cache: dict[str, pa.Table] = {}

    def of(self, f: DataFile) -> pa.Table:
        got = self._cache.get(f.path)
        if got is None:
            got = self._cache[f.path] = transactional_rows(self.storage, self.uri, f)
        return got


class _ProducerData:
    """Where each producer's transactional data rows are in the snapshot: the offset spans of its contiguous
    batches (from stats, sorted and disjoint, so a lookup is a bisection), and the files that mix rows
    (read only when a lookup reaches them)."""

    def __init__(self, rows: _Rows, files: Sequence[DataFile]) -> None:
        self.rows = rows
        spans: dict[int, list[tuple[int, int]]] = {}
        self.mixed: list[DataFile] = []
        for f in files:
            if f.producer_rows <= f.control_rows:
                continue  # no transactional data row
            if contiguous_batch(f):
                spans.setdefault(int(f.min_producer_id), []).append((f.min_offset, f.max_offset))
            else:
                self.mixed.append(f)
        self.starts: dict[int, list[int]] = {}
        self.ends: dict[int, list[int]] = {}
        for pid, s in spans.items():
            s.sort()
            self.starts[pid] = [a for a, _ in s]
            self.ends[pid] = [b for _, b in s]

    def has_rows(self, producer_id: int, lo: int, hi: int) -> bool:
        """Whether the producer has a data row in ``[lo, hi)``."""
        starts = self.starts.get(producer_id)
        if starts:
            i = bisect.bisect_left(starts, hi) - 1  # the last span starting below hi; spans are disjoint
            if i >= 0 and self.ends[producer_id][i] >= lo:
                return True
        for f in self.mixed:
            if f.max_offset < lo or f.min_offset >= hi:
                continue
            if f.min_producer_id is not None and not f.min_producer_id <= producer_id <= f.max_producer_id:
                continue
            t = self.rows.of(f)
            off = t.column(OFFSET).to_numpy(zero_copy_only=False)
            pid = t.column(PRODUCER_ID).to_numpy(zero_copy_only=False)
            data = t.column(CONTROL).is_null().to_numpy(zero_copy_only=False)
            if np.any(data & (pid == producer_id) & (off >= lo) & (off < hi)):
                return True
        return False


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
    unstamped = [m for m in _markers(rows, transactional, log_start, recopy_end) if m.delete_horizon_ms is None]
    data = _ProducerData(rows, transactional) if any(m.control == COMMIT for m in unstamped) else None
    stamp: list[int] = []
    for m in unstamped:
        if m.control == ABORT:
            stamp.append(m.offset)  # this pass drops every record of its transaction
        elif m.control == COMMIT:
            lo = max(m.txn_first_offset if m.txn_first_offset is not None else log_start, log_start)
            assert data is not None
            if not data.has_rows(m.producer_id, lo, m.offset):
                stamp.append(m.offset)  # no record of its transaction is left
    return TxnCleaning(tuple(index.aborted), np.array(sorted(stamp), dtype=np.int64))


def _markers(rows: _Rows, files: Sequence[DataFile], log_start: int, recopy_end: int) -> list[_MarkerRow]:
    """The markers at or above the log start and below ``recopy_end`` in ``files``."""
    markers: list[_MarkerRow] = []
    for f in files:
        if not f.control_rows or f.min_offset >= recopy_end:
            continue
        if one_marker(f):
            if f.min_offset >= log_start:
                markers.append(_MarkerRow(f.min_offset, int(f.min_producer_id), str(f.min_control),
                                          f.min_txn_first_offset, f.max_delete_horizon_ms))
            continue
        t = rows.of(f)
        for off, pid, control, first, horizon in zip(*(t.column(c).to_pylist() for c in (
                OFFSET, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET, DELETE_HORIZON)), strict=True):
            if control is not None and log_start <= off < recopy_end:
                markers.append(_MarkerRow(int(off), int(pid), str(control), first, horizon))
    return markers
