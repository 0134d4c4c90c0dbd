"""Proof that a state table equals its log: the latest read_committed record of each key, up to the offsets
the table records.

The expected rows are computed from the log as it is now, read as a ``read_committed`` consumer reads it from the
log start, cut at the offsets the table's last commit recorded (:func:`~deltalog.state.table.applied_offsets`).
A key with a record at or past that cut is **pending**: the cleaner may since have removed its older records
(it keeps only the latest of a key), so the log no longer says what it was below the cut; such a key's row is
only checked to hold an offset below the cut. Every other key must have exactly the row the log gives: the same
offset, key, value, headers and timestamp, and no row where the log's latest is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log import transactions
from deltalog.log.record import KEY, OFFSET
from deltalog.state import table as state_table
from deltalog.state.rows import DELETED, PARTITION, latest_per_key, merge_keys, state_rows, state_schema

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from deltalog.log.log_manager import LogManager

#: Keys shown per kind of difference.
EXAMPLES = 5
#: The outcome of one key: the two that mean the table is right, then the four that mean it is not.
OUTCOMES = ("equal", "pending", "missing", "extra", "different", "ahead")


@dataclass(frozen=True)
class StateComparison:
    """The state table against the log: how many rows differ and how (``equal`` when none does)."""

    topic: str
    table_version: int
    offsets: dict[int, int]
    rows: int
    expected_rows: int
    pending_keys: int
    #: keys the log holds a live record of and the table has no row for
    missing: int = 0
    #: rows of keys the log holds no live record of (or a tombstone)
    extra: int = 0
    #: rows whose offset or columns differ from the log's latest record
    different: int = 0
    #: rows of pending keys whose offset is not below the recorded offsets
    ahead: int = 0
    examples: tuple[str, ...] = field(default_factory=tuple)
    #: One row per key compared: ``partition``, ``key`` (its text), ``table_offset``, ``log_offset`` and
    #: ``outcome`` (:data:`OUTCOMES`): what the quality suite validates.
    details: pa.Table | None = field(default=None, compare=False, repr=False)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different or self.ahead)

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "table_version": self.table_version, "equal": self.equal,
                "offsets": {str(p): o for p, o in sorted(self.offsets.items())}, "rows": self.rows,
                "expected_rows": self.expected_rows, "pending_keys": self.pending_keys, "missing": self.missing,
                "extra": self.extra, "different": self.different, "ahead": self.ahead,
                "examples": list(self.examples)}


def _identity(t: pa.Table, key_col: str) -> list[tuple[int, Any]]:
    return list(zip(t.column(PARTITION).to_pylist(), t.column(key_col).to_pylist(), strict=True))


def compare(logs: LogManager, topic: str, dt: DeltaTable) -> StateComparison:
    """The rows of ``dt`` (a version of the state table of ``topic``) against the log."""
    config = logs.topic_config(topic)
    schema = state_schema(config)
    _, key_col = merge_keys(config)
    partitions = logs.partitions(topic)
    offsets = state_table.applied_offsets(dt, partitions)
    actual = state_table.read(dt).select(schema.names).cast(schema)
    expected_parts, pending = [], set()
    for p in partitions:
        log = logs.log(topic, p)
        snap, index, rows = log.read_rows(log.head().log_start_offset, None, transactions.READ_COMMITTED)
        visible = transactions.visible(rows, index.aborted_between(None, index.last_stable_offset))
        cut = pc.less(visible.column(OFFSET), offsets[p])
        later = visible.filter(pc.invert(cut)).filter(pc.is_valid(visible.filter(pc.invert(cut)).column(KEY)))
        if later.num_rows:
            pending.update((p, k) for k in (state_rows(later, p, config).column(key_col).to_pylist()))
        latest = latest_per_key(visible.filter(cut))
        if latest.num_rows:
            expected_parts.append(state_rows(latest, p, config))
    expected = pa.concat_tables(expected_parts) if expected_parts else \
        schema.append(pa.field(DELETED, pa.bool_(), nullable=False)).empty_table()
    expected = expected.filter(pc.invert(expected.column(DELETED))).drop_columns([DELETED])
    want = {ident: i for i, ident in enumerate(_identity(expected, key_col)) if ident not in pending}
    have = {ident: i for i, ident in enumerate(_identity(actual, key_col))}
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want and k not in pending]
    ahead = [k for k in have if k in pending and actual.column(OFFSET)[have[k]].as_py() >= offsets[k[0]]]
    both = [k for k in want if k in have]
    exp_rows = expected.take(pa.array([want[k] for k in both], pa.int64())).to_pylist() if both else []
    act_rows = actual.take(pa.array([have[k] for k in both], pa.int64())).to_pylist() if both else []
    different = [k for k, e, a in zip(both, exp_rows, act_rows, strict=True) if e != a]
    kinds = (("missing", missing), ("extra", extra), ("different", different), ("ahead", ahead))
    examples = tuple(f"{kind} partition {p} key {k!r}" for kind, keys in kinds for p, k in keys[:EXAMPLES])
    outcome = {k: "equal" for k in both}
    outcome.update({k: "pending" for k in have if k in pending})
    for kind, keys in kinds:
        outcome.update(dict.fromkeys(keys, kind))
    t_off, e_off = actual.column(OFFSET).to_pylist(), expected.column(OFFSET).to_pylist()
    details = pa.table({
        PARTITION: pa.array([k[0] for k in outcome], pa.int32()),
        KEY: pa.array([repr(k[1]) for k in outcome], pa.string()),
        "table_offset": pa.array([t_off[have[k]] if k in have else None for k in outcome], pa.int64()),
        "log_offset": pa.array([e_off[want[k]] if k in want else None for k in outcome], pa.int64()),
        "outcome": pa.array(list(outcome.values()), pa.string()),
    })
    return StateComparison(topic, dt.version(), offsets, actual.num_rows, len(want) + len(pending & set(have)),
                           len(pending), len(missing), len(extra), len(different), len(ahead), examples, details)
