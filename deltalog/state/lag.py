"""How far a state table is behind its log: per partition, the offsets not yet applied and for how long at most.

The offsets behind are the partition's last stable offset (what a refresh would read up to) minus the offset the
table recorded; the time behind is the time since the table's last refresh when any offset is behind (every record
behind was committed after that refresh read the log, so none has waited longer), else 0. A table that records an
offset past the log end is **ahead**: the log lost records it had applied (a topic restored from an older copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltalog.state import table as state_table

if TYPE_CHECKING:
    from deltalog.log.log_manager import LogManager


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    applied_offset: int
    last_stable_offset: int
    log_end_offset: int

    @property
    def offsets_behind(self) -> int:
        return max(0, self.last_stable_offset - self.applied_offset)

    @property
    def ahead(self) -> bool:
        return self.applied_offset > self.log_end_offset


@dataclass(frozen=True)
class StateLag:
    """The lag of one topic's state table (``exists`` False: the topic has none yet)."""

    topic: str
    exists: bool
    table_version: int | None
    last_refresh_ms: int | None
    partitions: tuple[PartitionLag, ...]
    now_ms: int

    @property
    def offsets_behind(self) -> int:
        return sum(p.offsets_behind for p in self.partitions)

    @property
    def time_behind_ms(self) -> int:
        if not self.offsets_behind:
            return 0
        return max(0, self.now_ms - (self.last_refresh_ms or 0)) if self.last_refresh_ms is not None else self.now_ms

    @property
    def ahead(self) -> bool:
        return any(p.ahead for p in self.partitions)

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "exists": self.exists, "table_version": self.table_version,
                "last_refresh_ms": self.last_refresh_ms, "offsets_behind": self.offsets_behind,
                "time_behind_ms": self.time_behind_ms, "ahead": self.ahead,
                "partitions": [{"partition": p.partition, "applied_offset": p.applied_offset,
                                "last_stable_offset": p.last_stable_offset, "log_end_offset": p.log_end_offset,
                                "offsets_behind": p.offsets_behind} for p in self.partitions]}


def state_lag(logs: LogManager, topic: str, now_ms: int) -> StateLag:
    """The lag of the state table of ``topic`` at ``now_ms``: from the Delta logs alone, no data read."""
    dt = state_table.StateTable(logs.storage, topic).open()
    partitions = logs.partitions(topic)
    applied = state_table.applied_offsets(dt, partitions) if dt is not None else dict.fromkeys(partitions, 0)
    rows = []
    for p in partitions:
        log = logs.log(topic, p)
        snap = log.snapshot()
        rows.append(PartitionLag(p, applied[p], log.txn_index(snap).last_stable_offset, snap.log_end_offset))
    last = None
    if dt is not None:
        last = next((h.timestamp_ms for h in state_table.history(dt, 20) if h.offsets), None)
    return StateLag(topic, dt is not None, None if dt is None else dt.version(), last, tuple(rows), now_ms)
