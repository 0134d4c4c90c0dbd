"""Reading a partition as a consumer does (Kafka's fetch): from a position, up to the bound its isolation level sets.

``read_uncommitted`` reads up to the high watermark, which in deltalog is the log end offset (every committed Delta
version is fully replicated). ``read_committed`` reads up to the last stable offset and leaves out the records of
aborted transactions. Both leave out control records (transaction markers), which Kafka's consumers never see.

Every consumer read goes through :func:`fetch`: the :class:`~deltalog.groups.consumer.Consumer`'s ``poll``, and the
replay of ``__consumer_offsets`` that committed offsets are read from (always ``read_committed``, so an offset
committed inside a transaction is visible only once the transaction commits). Until transactions exist a log holds
only plain appends: no markers, no aborted records, and the last stable offset is the log end offset, so the two
levels read the same rows. :func:`last_stable_offset` and :func:`visible_records` are where the transactional
producer's isolation filter plugs in (see their docstrings).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import InvalidConfigError, OffsetOutOfRangeError
from deltalog.log.partition_log import LogHead, PartitionLog
from deltalog.log.record import OFFSET, RECORD_SCHEMA

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def validate_isolation_level(value: object, name: str = "isolation_level") -> str:
    """Kafka's ``isolation.level`` values (case-insensitive, as Kafka's config parser takes them)."""
    if isinstance(value, str) and value.lower() in ISOLATION_LEVELS:
        return value.lower()
    raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: allowed: "
                             f"{', '.join(map(repr, ISOLATION_LEVELS))}")


@dataclass(frozen=True)
class Fetch:
    """What one fetch from one partition returned: the records an application may see, in offset order, the
    position after them, and the partition's offsets at the time."""

    records: pa.Table
    next_offset: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


def last_stable_offset(log: PartitionLog, head: LogHead) -> int:
    """The first offset of the earliest open transaction, else the log end offset.

    Transactions seam: until the transactional producer lands there are no open transactions, so it is the log end
    offset; that producer's LSO (kept in the Delta log or found from the dirty tail) replaces this body.
    """
    return head.log_end_offset


def visible_records(log: PartitionLog, table: pa.Table, isolation_level: str) -> pa.Table:
    """The rows of ``table`` (consecutive rows of ``log`` below the fetch bound) that an application may see.

    Transactions seam: plain appends hold only data records, all visible at both levels, so every row is kept.
    The transactional producer's Arrow-level filter (deltalog/log/) goes here: control rows dropped at both levels,
    rows of aborted transactions dropped under ``read_committed``.
    """
    return table


def fetch(log: PartitionLog, position: int, max_records: int | None, isolation_level: str) -> Fetch:
    """At most ``max_records`` visible records of ``log`` from ``position``, and the position to fetch from next.

    The bound is the high watermark (``read_uncommitted``) or the last stable offset (``read_committed``); records
    appended past it meanwhile wait for the next fetch. A position below the log start offset or past the log end
    raises :class:`~deltalog.errors.OffsetOutOfRangeError` (the consumer's ``auto_offset_reset`` decides what then).
    Offsets that compaction removed are skipped: the next position follows the last record returned, or is the
    bound when the fetch reached it.
    """
    head = log.head()
    high_watermark = head.log_end_offset
    stable = last_stable_offset(log, head)
    bound = high_watermark if isolation_level == READ_UNCOMMITTED else stable
    if position < head.log_start_offset or position > high_watermark:
        raise OffsetOutOfRangeError(
            f"offset {position} is out of range for {log.topic}-{log.partition}: readable offsets are "
            f"[{head.log_start_offset}, {high_watermark}] (log start to log end)",
            log_start_offset=head.log_start_offset, log_end_offset=high_watermark)
    if position >= bound or max_records == 0:
        return Fetch(RECORD_SCHEMA.empty_table(), position, head.log_start_offset, high_watermark, stable)
    table = log.read_table(position, max_records)
    read = table.num_rows
    if read and table.column(OFFSET)[read - 1].as_py() >= bound:
        table = table.filter(pc.less(table.column(OFFSET), bound))
    if max_records is not None and read >= max_records and table.num_rows == read:
        next_offset = table.column(OFFSET)[read - 1].as_py() + 1  # a full page: more may follow below the bound
    else:
        next_offset = bound  # everything below the bound was read
    return Fetch(visible_records(log, table, isolation_level), next_offset, head.log_start_offset, high_watermark,
                 stable)
