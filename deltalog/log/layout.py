"""deltalog's file layout, and files that other engines laid out differently.

deltalog writes every data file of a partition in one layout: the rows of one segment, in offset order, named
``<segment base>-<first offset>-<nonce>.parquet`` (:func:`~deltalog.log.record.new_file_name`), with Delta stats
that say the segment, the offsets and the null counts of key and value (tombstones and keyless records). Kafka's
segment files hold the same promise: one base offset, batches in offset order.

Delta engines may rewrite files without changing a record: OPTIMIZE bin-packing (delta-rs
``DeltaTable.optimize.compact()``, Databricks' OPTIMIZE, auto-compaction, predictive optimization), Z-ordering
(``optimize.z_order``) and optimized writes. Their files are *foreign-layout*: one file may hold rows of several
segments, in any order, and delta-rs writes no null counts for binary columns, so the stats no longer tell
tombstones. This module lets everything stay right over them:

- :func:`~deltalog.log.data_file.is_deltalog_layout` tells the two apart from the add action alone (name, one segment, null counts);
- :func:`with_data_figures` reads the few summary columns of a foreign-layout file once (cached per file: a
  Delta data file never changes) and gives the snapshot true per-file figures and per-segment *parts* (one
  :class:`~deltalog.log.data_file.DataFile` per segment the file holds, same path), from which
  :func:`~deltalog.log.segment.build_segments` derives segments from the ``segment`` column rather than from file
  boundaries;
- :meth:`~deltalog.log.partition_log.PartitionLog.relayout` rewrites foreign-layout files back into deltalog's layout
  (rows sorted by offset, one file per segment) in one Delta commit that changes no record (its adds carry
  ``dataChange`` false, as OPTIMIZE's own; its removes true, so a concurrent OPTIMIZE of the same files fails): the
  cleaner and retention run it before they replace or drop whole segments' files, so a pass never removes a
  compacted file that also holds records outside what it cleans.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log.data_file import DataFile
from deltalog.log.record import (
    CONTROL,
    DELETE_HORIZON,
    KEY,
    OFFSET,
    PRODUCER_ID,
    SEGMENT,
    TIMESTAMP,
    TXN_FIRST_OFFSET,
    VALUE,
)
from deltalog.storage import Storage, join

#: The columns a foreign-layout file's figures are computed from: headers are never read; key and value are, for
#: their null counts per segment (Parquet keeps null counts per row group, not per row, so the columns are read).
SUMMARY_COLUMNS = (OFFSET, SEGMENT, KEY, VALUE, TIMESTAMP, DELETE_HORIZON, PRODUCER_ID, CONTROL, TXN_FIRST_OFFSET)

_cache: dict[tuple[str, str, int], tuple[DataFile, tuple[DataFile, ...]]] = {}
_cache_lock = threading.Lock()
#: Files whose figures are kept; a Delta data file is immutable, so an entry is never stale, only evicted.
CACHE_FILES = 4096


def with_data_figures(storage: Storage, uri: str, files: Sequence[DataFile]
                      ) -> tuple[tuple[DataFile, ...], tuple[DataFile, ...]]:
    """(files, parts): ``files`` with every foreign-layout file's figures taken from its data, and the
    per-segment parts of all of them (a deltalog-layout file is its own single part), both in offset order."""
    out: list[DataFile] = []
    parts: list[DataFile] = []
    for f in files:
        if f.deltalog_layout:
            out.append(f)
            parts.append(f)
            continue
        whole, pieces = _figures(storage, uri, f)
        out.append(whole)
        parts.extend(pieces)
    out.sort(key=lambda f: f.min_offset)
    parts.sort(key=lambda f: f.min_offset)
    return tuple(out), tuple(parts)


def _figures(storage: Storage, uri: str, f: DataFile) -> tuple[DataFile, tuple[DataFile, ...]]:
    key = (uri, f.path, f.size_bytes)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    source = storage.parquet_file(join(uri, f.path))
    present = set(source.schema_arrow.names)
    table = source.read(columns=[c for c in SUMMARY_COLUMNS if c in present])
    whole = _summary(f, table)
    pieces = []
    for seg in pc.unique(table.column(SEGMENT)).to_pylist():
        pieces.append(_summary(f, table.filter(pc.equal(table.column(SEGMENT), seg))))
    result = (whole, tuple(sorted(pieces, key=lambda p: p.min_offset)))
    with _cache_lock:
        if len(_cache) >= CACHE_FILES:
            _cache.clear()
        _cache[key] = result
    return result


def _summary(f: DataFile, t: pa.Table) -> DataFile:
    """``f`` with the figures of rows ``t`` (all of its rows, or those of one segment)."""
    n = t.num_rows
    names = set(t.column_names)

    def mm(col: str) -> tuple[Any, Any]:
        if col not in names:
            return None, None
        m = pc.min_max(t.column(col))
        return m["min"].as_py(), m["max"].as_py()

    controls = 0 if CONTROL not in names else n - t.column(CONTROL).null_count
    producers = 0 if PRODUCER_ID not in names else n - t.column(PRODUCER_ID).null_count
    lo, hi = mm(OFFSET)
    seg_lo, seg_hi = mm(SEGMENT)
    ts_lo, ts_hi = mm(TIMESTAMP)
    pid_lo, pid_hi = mm(PRODUCER_ID)
    c_lo, c_hi = mm(CONTROL)
    return replace(
        f,
        size_bytes=f.size_bytes if n == f.num_records else max(1, f.size_bytes * n // max(1, f.num_records)),
        num_records=n, min_offset=int(lo), max_offset=int(hi), segment=int(seg_lo), max_segment=int(seg_hi),
        min_timestamp_ms=ts_lo, max_timestamp_ms=ts_hi,
        keyless=t.column(KEY).null_count - controls, tombstones=t.column(VALUE).null_count - controls,
        max_delete_horizon_ms=mm(DELETE_HORIZON)[1], producer_rows=producers, control_rows=controls,
        min_producer_id=pid_lo, max_producer_id=pid_hi, min_control=c_lo, max_control=c_hi,
        min_txn_first_offset=mm(TXN_FIRST_OFFSET)[0], deltalog_layout=False,
    )


def foreign_layout(files: Sequence[DataFile]) -> list[DataFile]:
    """The files of a snapshot that are not in deltalog's layout."""
    return [f for f in files if not f.deltalog_layout]
