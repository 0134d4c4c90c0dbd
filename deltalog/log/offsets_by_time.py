"""The earliest offset at or after a time: Kafka's ListOffsets with a timestamp (``UnifiedLog.fetchOffsetByTimestamp``,
``LogSegment.findOffsetByTimestamp``), answered from the Delta file statistics.

Kafka finds the first segment whose largest timestamp is at or after the target (its time index), then scans that
segment's batches for the first record whose timestamp is >= the target, in offset order. Timestamps need not grow
with offsets (a producer sets them), so the answer is the *smallest offset* among the records with timestamp >= T,
not the offset of the smallest such timestamp.

deltalog keeps, per data file, the min/max of ``timestamp_ms`` and of ``offset`` in its Delta add action
(:class:`~deltalog.log.data_file.DataFile`), and files hold disjoint offset ranges. So, before any data is read:

* a file whose largest timestamp is below T holds no answer, and is skipped;
* the files left are visited in offset order, and the first one that holds a record with timestamp >= T at or
  above the log start offset holds the answer; of each, only the ``offset`` and ``timestamp_ms`` columns are read,
  filtered to ``timestamp_ms >= T`` (Parquet's row-group statistics skip the rest; rows within a file may be in
  any timestamp order, so the smallest offset of those rows is taken, not the first).

No record at or after T: None, as Kafka's ListOffsets answers ``-1`` and kafka-python's ``offsets_for_times`` gives
None for the partition. Records below the log start offset (after DeleteRecords or retention, before the files go)
are never an answer. Transaction markers count as Kafka's control batches do (they have timestamps and offsets, and
a consumer positioned on one reads on from the next record).
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import CorruptLogError, InvalidArgumentError, shown
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.record import OFFSET, TIMESTAMP
from deltalog.storage import join


class OffsetAndTime(NamedTuple):
    """The offset found and the timestamp of its record (what ListOffsets returns per partition)."""

    offset: int
    timestamp_ms: int


def validate_timestamp(timestamp_ms: object, what: str = "timestamp") -> int:
    """A target time in epoch milliseconds (a whole number >= 0), as Kafka's clients require one."""
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
        raise InvalidArgumentError(f"the {what} to search by must be epoch milliseconds, a whole number >= 0, not "
                                   f"{shown(timestamp_ms)}")
    return timestamp_ms


def record_for_time(log: PartitionLog, timestamp_ms: int, snapshot: LogSnapshot | None = None
                    ) -> OffsetAndTime | None:
    """The earliest offset of ``log`` whose record's timestamp is >= ``timestamp_ms``, with that timestamp; None when
    no record at or above the log start offset has one (see the module docstring)."""
    target = validate_timestamp(timestamp_ms)
    snap = snapshot if snapshot is not None else log.snapshot()
    start = snap.log_start_offset
    candidates = sorted((f for f in snap.files if f.max_offset >= start
                         and (f.max_timestamp_ms is None or f.max_timestamp_ms >= target)),
                        key=lambda f: f.min_offset)
    for f in candidates:
        location = join(log.uri, f.path)
        try:
            with log.storage.open_input(location) as source:
                table = pq.read_table(source, columns=[OFFSET, TIMESTAMP],
                                      filters=[(OFFSET, ">=", start), (TIMESTAMP, ">=", target)])
        except FileNotFoundError:
            # a VACUUM removed a file of this snapshot: answer from a newer one (as PartitionLog.read_rows does)
            if snapshot is None:
                return record_for_time(log, target)
            raise
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptLogError(f"cannot read {location} of {snap.topic}-{snap.partition}: {e}") from None
        if table.num_rows:
            i = pc.index(table.column(OFFSET), pc.min(table.column(OFFSET))).as_py()
            return OffsetAndTime(table.column(OFFSET)[i].as_py(), table.column(TIMESTAMP)[i].as_py())
    return None


def offset_for_time(log: PartitionLog, timestamp_ms: int, snapshot: LogSnapshot | None = None) -> int | None:
    """The earliest offset of ``log`` whose record's timestamp is >= ``timestamp_ms`` (None: no such record)."""
    found = record_for_time(log, timestamp_ms, snapshot)
    return None if found is None else found.offset


__all__ = ["OffsetAndTime", "offset_for_time", "record_for_time", "validate_timestamp"]
