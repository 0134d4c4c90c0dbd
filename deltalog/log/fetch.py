"""Reading a partition as a consumer does (Kafka's fetch): from a position, up to the bound its isolation level sets.

``read_uncommitted`` reads up to the high watermark, which in deltalog is the log end offset (every committed Delta
version is fully replicated). ``read_committed`` reads up to the last stable offset and leaves out the records of
aborted transactions. Both leave out control records (transaction markers), which Kafka's consumers never see.

Every consumer read goes through :func:`fetch`: the :class:`~deltalog.groups.consumer.Consumer`'s ``poll``, and the
replay of ``__consumer_offsets`` that committed offsets are read from (always ``read_committed``, so an offset
committed inside a transaction is visible only once the transaction commits). The two
levels read the same rows only when the log has no transactions (see :mod:`deltalog.log.transactions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from deltalog.errors import InvalidConfigError, OffsetOutOfRangeError
from deltalog.log import transactions
from deltalog.log.partition_log import LogSnapshot, PartitionLog
from deltalog.log.record import OFFSET, RECORD_SCHEMA
from deltalog.log.transactions import READ_COMMITTED, READ_UNCOMMITTED

ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def validate_isolation_level(value: object, name: str = "isolation_level") -> str:
    """Kafka's ``isolation.level`` values (case-insensitive, as Kafka's config parser takes them)."""
    if not isinstance(value, str):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: allowed: "
                                 f"{', '.join(map(repr, ISOLATION_LEVELS))}")
    return transactions.isolation_level(value, READ_UNCOMMITTED, name=name)


@dataclass(frozen=True)
class Fetch:
    """What one fetch from one partition returned: the records an application may see, in offset order, the
    position after them, and the partition's offsets at the time."""

    records: pa.Table
    next_offset: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    #: the topic's ``message.timestamp.type`` is LogAppendTime (the records' timestamps are their append times)
    log_append_time: bool = False


def fetch(log: PartitionLog, position: int, max_records: int | None, isolation_level: str, *,
          at: LogSnapshot | None = None) -> Fetch:
    """At most ``max_records`` visible records of ``log`` from ``position``, and the position to fetch from next.

    The bound is the high watermark (``read_uncommitted``) or the last stable offset (``read_committed``); records
    appended past it meanwhile wait for the next fetch. A position below the log start offset or past the log end
    raises :class:`~deltalog.errors.OffsetOutOfRangeError` (the consumer's ``auto_offset_reset`` decides what then).
    Offsets that compaction removed are skipped, and so are markers and (``read_committed``) aborted records: the
    next position follows the last row read, or is the bound when the fetch reached it. ``at``: fetch from that
    snapshot (an older version: Delta time travel) rather than the latest.
    """
    if max_records == 0 and at is None:
        head = log.head()
        check_position(log, position, head.log_start_offset, head.log_end_offset)
        return Fetch(RECORD_SCHEMA.empty_table(), position, head.log_start_offset, head.log_end_offset,
                     log.txn_index().last_stable_offset)
    snap, index, rows = log.read_rows(position, max_records, isolation_level, at=at)
    high_watermark, stable = snap.log_end_offset, index.last_stable_offset
    bound = index.upper_offset(isolation_level)
    read = rows.num_rows
    if position >= bound:
        next_offset = position
    elif max_records is not None and read >= max_records:
        next_offset = rows.column(OFFSET)[read - 1].as_py() + 1  # a full page: more may follow below the bound
    else:
        next_offset = bound  # everything below the bound was read
    aborted = index.aborted_between(position, bound) if isolation_level == READ_COMMITTED else ()
    return Fetch(transactions.visible(rows, aborted), next_offset, snap.log_start_offset, high_watermark, stable,
                 snap.config.log_append_time)


def end_offset(log: PartitionLog, isolation_level: str, *, at: LogSnapshot | None = None) -> int:
    """The end of ``log`` for a reader at ``isolation_level``: the high watermark (the log end offset) at
    ``read_uncommitted``, the last stable offset at ``read_committed``.

    Kafka's ListOffsets for the latest offset answers at the requesting consumer's isolation level
    (``ListOffsetsRequest.isolationLevel``; ``UnifiedLog.fetchOffsetByTimestamp`` with ``LATEST_TIMESTAMP``
    returns the last stable offset for ``READ_COMMITTED``): ``KafkaConsumer.endOffsets``, ``seekToEnd`` and
    ``auto.offset.reset=latest`` all use it. A read_committed consumer placed at the log end while a
    transaction is open would be past that transaction's records, and never see them once it commits.
    ``at``: the end of that snapshot (an older version)."""
    if at is not None:
        return log.txn_index(at).last_stable_offset if isolation_level == READ_COMMITTED else at.log_end_offset
    if isolation_level == READ_COMMITTED:
        return log.txn_index().last_stable_offset
    return log.head().log_end_offset


def check_position(log: PartitionLog, position: int, log_start_offset: int, log_end_offset: int) -> None:
    if position < log_start_offset or position > log_end_offset:
        raise OffsetOutOfRangeError(
            f"offset {position} is out of range for {log.topic}-{log.partition}: readable offsets are "
            f"[{log_start_offset}, {log_end_offset}] (log start to log end)",
            log_start_offset=log_start_offset, log_end_offset=log_end_offset)
