"""A partition's data file as its Delta add action describes it: a value type of its own, shared by the Delta
edge (:mod:`deltalog.log.delta`), the damage walk (:mod:`deltalog.log.damage`) and the planners, so that none
of them imports another for it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltalog.errors import CorruptLogError
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

#: deltalog's data file names: an append's ``<segment>-<first offset>-<nonce>.parquet``
#: (:func:`~deltalog.log.record.new_file_name`), or a cleaning pass's inside its ``cleaned-...`` directory.
OWN_NAME = re.compile(r"^(?:cleaned-[^/]+/)?\d{20}-\d{20}-[0-9a-f]{12}\.parquet$")


def is_deltalog_layout(row: Mapping[str, Any]) -> bool:
    """Whether a flattened add action describes a file in deltalog's layout: deltalog's name, one segment, and
    the null counts of key and value in its stats (delta-rs's OPTIMIZE writes none for binary columns). Files in
    another layout (see :mod:`deltalog.log.layout`) may hold several segments, rows in any order."""
    if not OWN_NAME.match(str(row.get("path") or "")):
        return False
    if row.get(f"max.{SEGMENT}") is not None and row.get(f"max.{SEGMENT}") != row.get(f"min.{SEGMENT}"):
        return False
    return row.get(f"null_count.{KEY}") is not None and row.get(f"null_count.{VALUE}") is not None


@dataclass(frozen=True)
class DataFile:
    """One data file of a partition table, as its Delta add action describes it (no data read)."""

    path: str
    size_bytes: int
    num_records: int
    min_offset: int
    max_offset: int
    segment: int
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    keyless: int
    tombstones: int
    max_delete_horizon_ms: int | None
    modification_time: int
    #: Rows written inside a transaction (0 for a plain file, or one from before transactions existed: its
    #: stats have no producer columns), and transaction markers among them (not counted as keyless records
    #: or tombstones above).
    producer_rows: int = 0
    control_rows: int = 0
    #: Min/max of the producer columns: a one-row marker file is known from these alone.
    min_producer_id: int | None = None
    max_producer_id: int | None = None
    min_control: str | None = None
    max_control: str | None = None
    min_txn_first_offset: int | None = None
    #: The highest segment base offset among the file's rows (another engine's OPTIMIZE may merge segments).
    max_segment: int | None = None
    #: False for a file another engine wrote (OPTIMIZE, Z-order, auto-compaction): it may hold several segments,
    #: rows in any order; its figures come from its data (:mod:`deltalog.log.layout`), not from its stats.
    deltalog_layout: bool = True

    @classmethod
    def from_add_row(cls, row: Mapping[str, Any]) -> DataFile:
        try:
            n = int(row["num_records"])
            no_pid = row.get(f"null_count.{PRODUCER_ID}")
            no_control = row.get(f"null_count.{CONTROL}")
            controls = 0 if no_control is None else n - int(no_control)  # markers: null key and value
            return cls(
                path=row["path"],
                size_bytes=int(row["size_bytes"]),
                num_records=n,
                min_offset=int(row[f"min.{OFFSET}"]),
                max_offset=int(row[f"max.{OFFSET}"]),
                segment=int(row[f"min.{SEGMENT}"]),
                min_timestamp_ms=row.get(f"min.{TIMESTAMP}"),
                max_timestamp_ms=row.get(f"max.{TIMESTAMP}"),
                keyless=int(row.get(f"null_count.{KEY}") or 0) - controls,
                tombstones=int(row.get(f"null_count.{VALUE}") or 0) - controls,
                max_delete_horizon_ms=row.get(f"max.{DELETE_HORIZON}"),
                modification_time=int(row.get("modification_time") or 0),
                producer_rows=0 if no_pid is None else n - int(no_pid),
                control_rows=controls,
                min_producer_id=row.get(f"min.{PRODUCER_ID}"),
                max_producer_id=row.get(f"max.{PRODUCER_ID}"),
                min_control=row.get(f"min.{CONTROL}"),
                max_control=row.get(f"max.{CONTROL}"),
                min_txn_first_offset=row.get(f"min.{TXN_FIRST_OFFSET}"),
                max_segment=None if row.get(f"max.{SEGMENT}") is None else int(row[f"max.{SEGMENT}"]),
                deltalog_layout=is_deltalog_layout(row),
            )
        except (KeyError, TypeError) as e:
            raise CorruptLogError(
                f"data file {row.get('path')!r} has no deltalog stats ({e}); it was not written by deltalog"
            ) from None
