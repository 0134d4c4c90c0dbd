"""A partition's data file as its Delta add action describes it: a value type of its own, shared by the Delta
edge (:mod:`deltalog.log.delta`), the damage walk (:mod:`deltalog.log.damage`) and the planners, so that none
of them imports another for it."""

from __future__ import annotations

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
            )
        except (KeyError, TypeError) as e:
            raise CorruptLogError(
                f"data file {row.get('path')!r} has no deltalog stats ({e}); it was not written by deltalog"
            ) from None
