"""The earliest offset whose timestamp is at or after a time: Kafka's ``ListOffsets`` by timestamp.

Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` finds the first segment whose largest timestamp is at or after
the target time (its time index), then scans that segment for the first record, in offset order, whose
timestamp is at or after it; ``Partition.fetchOffsetForTimestamp`` keeps the answer only when it lies below the
last fetchable offset (the high watermark, or the last stable offset for ``read_committed``). Timestamps are
the producer's (CreateTime), so they need not grow with the offset: the answer is the *smallest offset* among
the records at or after the time, not the record nearest in time.

Here the Delta add actions' statistics play the time index: each data file's min/max ``timestamp_ms`` and
min/max ``offset``. A file whose largest timestamp is before the time is never read; the candidates are read in
offset order (only the ``offset`` and ``timestamp_ms`` columns, only the row groups whose own statistics can
hold an answer), and the search stops at the first file whose smallest offset lies past the best answer so far.
Rows within a file are not assumed to be in offset order (another engine's OPTIMIZE may have rewritten them),
nor are files assumed to hold disjoint ranges: every candidate that could hold a smaller offset is read.

Used by the consumer's ``offsets_for_times`` and by ``format("deltalog")``'s ``startingOffsetsByTimestamp``
(Spark's ``KafkaOffsetReader.fetchSpecificTimestampBasedOffsets`` asks the consumer's ``offsetsForTimes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import CorruptLogError, InvalidArgumentError, shown
from deltalog.log.data_file import DataFile
from deltalog.log.record import OFFSET, TIMESTAMP
from deltalog.storage import Storage, join

if TYPE_CHECKING:
    from deltalog.log.partition_log import LogSnapshot, PartitionLog


class OffsetAndTimestamp(NamedTuple):
    """Kafka's ``OffsetAndTimestamp``: the offset found and that record's own timestamp."""

    offset: int
    timestamp: int


def validate_timestamp(timestamp_ms: object, what: str = "timestamp") -> int:
    """A target time in epoch milliseconds (a whole number >= 0), as Kafka's clients require one."""
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
        raise InvalidArgumentError(f"the {what} to search by must be epoch milliseconds, a whole number >= 0, not "
                                   f"{shown(timestamp_ms)}")
    return timestamp_ms


def offset_for_time(log: PartitionLog, timestamp_ms: int, *, snapshot: LogSnapshot | None = None,
                    upto: int | None = None) -> int | None:
    """The earliest offset of ``log`` whose record's timestamp is at or after ``timestamp_ms`` (None: no such
    record), among offsets in [log start offset, ``upto``) of ``snapshot`` (default: the latest). ``upto`` is
    Kafka's last fetchable offset: the high watermark, or the last stable offset for ``read_committed``."""
    found = offset_and_timestamp_for_time(log, timestamp_ms, snapshot=snapshot, upto=upto)
    return None if found is None else found.offset


def offset_and_timestamp_for_time(log: PartitionLog, timestamp_ms: int, *, snapshot: LogSnapshot | None = None,
                                  upto: int | None = None) -> OffsetAndTimestamp | None:
    """As :func:`offset_for_time`, with the record's timestamp (Kafka's ``OffsetAndTimestamp``)."""
    snap = snapshot if snapshot is not None else log.snapshot()
    end = snap.log_end_offset if upto is None else min(upto, snap.log_end_offset)
    return search(log.storage, log.uri, snap.files, timestamp_ms, snap.log_start_offset, end)


def search(storage: Storage, uri: str, files: Sequence[DataFile], timestamp_ms: int, from_offset: int,
           to_offset: int) -> OffsetAndTimestamp | None:
    """The smallest offset in [``from_offset``, ``to_offset``) of ``files`` (a partition table at ``uri``) whose
    timestamp is at or after ``timestamp_ms``, with that timestamp; files whose statistics rule them out are never
    opened."""
    validate_timestamp(timestamp_ms)
    candidates = sorted(
        (f for f in files
         if f.max_offset >= from_offset and f.min_offset < to_offset
         and (f.max_timestamp_ms is None or f.max_timestamp_ms >= timestamp_ms)),
        key=lambda f: f.min_offset)
    best: OffsetAndTimestamp | None = None
    for f in candidates:
        if best is not None and f.min_offset >= best.offset:
            break  # this file and every later one start past the answer
        found = _first_in_file(storage, join(uri, f.path), timestamp_ms, max(from_offset, f.min_offset),
                               to_offset if best is None else min(to_offset, best.offset))
        if found is not None and (best is None or found.offset < best.offset):
            best = found
    return best


def _first_in_file(storage: Storage, location: str, timestamp_ms: int, from_offset: int,
                   to_offset: int) -> OffsetAndTimestamp | None:
    """The smallest offset in [from, to) of one file with a timestamp at or after ``timestamp_ms``; row groups
    whose Parquet statistics rule them out are skipped. Rows are not assumed to be in offset order."""
    try:
        with storage.open_input(location) as fh:
            source = pq.ParquetFile(fh)
            meta = source.metadata
            names = source.schema_arrow.names
            if OFFSET not in names or TIMESTAMP not in names:
                raise CorruptLogError(f"data file {location} has no {OFFSET} or {TIMESTAMP} column")
            leaves = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
            best: OffsetAndTimestamp | None = None
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                if not _may_hold(group, leaves, timestamp_ms, from_offset,
                                 to_offset if best is None else min(to_offset, best.offset)):
                    continue
                table = source.read_row_group(g, columns=[OFFSET, TIMESTAMP])
                found = _first_in_table(table, timestamp_ms, from_offset,
                                        to_offset if best is None else min(to_offset, best.offset))
                if found is not None:
                    best = found
            return best
    except FileNotFoundError:
        raise
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptLogError(f"cannot read data file {location}: {e}") from None


def _may_hold(group: pq.RowGroupMetaData, leaves: dict[str, int], timestamp_ms: int, from_offset: int,
              to_offset: int) -> bool:
    """Whether a row group's statistics leave room for an answer (no statistics: it may)."""
    ts = _stats(group, leaves.get(TIMESTAMP))
    if ts is not None and ts[1] < timestamp_ms:
        return False
    off = _stats(group, leaves.get(OFFSET))
    return off is None or (off[1] >= from_offset and off[0] < to_offset)


def _stats(group: pq.RowGroupMetaData, index: int | None) -> tuple[int, int] | None:
    if index is None:
        return None
    stats = group.column(index).statistics
    if stats is None or not stats.has_min_max:
        return None
    return int(stats.min), int(stats.max)


def _first_in_table(table: pa.Table, timestamp_ms: int, from_offset: int, to_offset: int) -> OffsetAndTimestamp | None:
    offsets, stamps = table.column(OFFSET), table.column(TIMESTAMP)
    keep = pc.and_(pc.greater_equal(stamps, timestamp_ms),
                   pc.and_(pc.greater_equal(offsets, from_offset), pc.less(offsets, to_offset)))
    rows = table.filter(pc.fill_null(keep, False))
    if not rows.num_rows:
        return None
    i = pc.index(rows.column(OFFSET), pc.min(rows.column(OFFSET))).as_py()
    return OffsetAndTimestamp(int(rows.column(OFFSET)[i].as_py()), int(rows.column(TIMESTAMP)[i].as_py()))
