"""Reads of a range of offsets that cost memory in proportion to what they return, not to the file.

Kafka's fetch finds its start in a segment through the offset index and reads batch after batch from there until
``max.partition.fetch.bytes``/``fetch.max.bytes``: a poll of 1,000 records costs about 1,000 records, whatever
the segment holds. A deltalog data file is a Parquet file whose row groups are small
(:func:`~deltalog.log.record.row_group_rows`) and whose footer keeps each row group's min and max offset, so
this module plays the offset index: it reads the footer, skips every row group whose offsets lie outside the
range, decodes the others one at a time, and stops once it has ``limit`` rows (files hold ascending offsets).
Measured by ``python -m benchmarks reads`` against a whole-file read.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.log.record import OFFSET, RECORD_SCHEMA, conform
from deltalog.storage import Storage


def wanted_row_groups(meta: pq.FileMetaData, from_offset: int, to_offset: int | None) -> list[int]:
    """The row groups of a file whose offset statistics overlap ``[from_offset, to_offset)`` (a row group without
    statistics may hold any offset: it is kept)."""
    leaf = _offset_leaf(meta)
    out = []
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.num_rows == 0:
            continue
        stats = group.column(leaf).statistics if leaf is not None else None
        if stats is not None and stats.has_min_max and (
                stats.max < from_offset or (to_offset is not None and stats.min >= to_offset)):
            continue
        out.append(i)
    return out


def _offset_leaf(meta: pq.FileMetaData) -> int | None:
    if meta.num_row_groups == 0:
        return None
    group = meta.row_group(0)
    for j in range(group.num_columns):
        if group.column(j).path_in_schema == OFFSET:
            return j
    return None


#: Rows decoded at a time within a row group when a read has a limit: a file written before row groups were
#: bounded has groups of 1 Mi records, and a poll of a few records then decodes a batch of them, not the group
#: (a fifth of the group's Arrow memory: docs/performance.md).
READ_BATCH_ROWS = 8192


def read_range(storage: Storage, location: str, from_offset: int, to_offset: int | None = None,
               limit: int | None = None) -> pa.Table:
    """The rows of one data file with ``from_offset <= offset < to_offset``, in file (offset) order, at most
    ``limit`` of them, in the partition schema; only the row groups the range needs are read, and reading stops
    once ``limit`` rows are in. ``FileNotFoundError`` when the file is gone."""
    with storage.open_input(location) as f:
        source = pq.ParquetFile(f)
        present = set(source.schema_arrow.names)
        columns = [c for c in RECORD_SCHEMA.names if c in present]
        parts: list[pa.Table] = []
        count = 0
        for i in wanted_row_groups(source.metadata, from_offset, to_offset):
            if limit is None:
                pieces = iter([source.read_row_group(i, columns=columns)])
            else:
                pieces = (pa.Table.from_batches([b]) for b in
                          source.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=[i], columns=columns))
            for piece in pieces:
                piece = _in_range(piece, from_offset, to_offset)
                if limit is not None and count + piece.num_rows > limit:
                    piece = piece.slice(0, limit - count)
                if piece.num_rows:
                    parts.append(conform(piece))
                    count += piece.num_rows
                if limit is not None and count >= limit:
                    break
            if limit is not None and count >= limit:
                break
    return pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()


def _in_range(table: pa.Table, from_offset: int, to_offset: int | None) -> pa.Table:
    offsets = table.column(OFFSET)
    keep = pc.greater_equal(offsets, from_offset)
    if to_offset is not None:
        keep = pc.and_(keep, pc.less(offsets, to_offset))
    return table.filter(keep)


def read_ranges(storage: Storage, locations: Sequence[str], from_offset: int, to_offset: int | None = None,
                limit: int | None = None) -> pa.Table:
    """:func:`read_range` over files of disjoint, ascending offset ranges, ``limit`` rows in all."""
    parts = []
    left = limit
    for location in locations:
        part = read_range(storage, location, from_offset, to_offset, left)
        parts.append(part)
        if left is not None:
            left -= part.num_rows
            if left <= 0:
                break
    return pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()
