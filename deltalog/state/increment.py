"""Proving one refresh commit right from what it changed, not from the whole log.

A version ``P`` of the state table proven equal to the log (:mod:`deltalog.state.equality`) and the next version
``V`` made by one refresh (:mod:`deltalog.state.refresh`, committed on top of ``P`` with no retry): ``V`` equals the
log up to its offsets when

- the rows ``V``'s commit removed (the files of ``P`` not in ``V``) and the rows it added (the files of ``V`` not in
  ``P``) differ exactly on the keys with records in ``[offsets of P, offsets of V)`` (what the refresh read), each
  such key's row now being its latest read_committed record of that range (or gone, for a tombstone) and appearing
  once; the files both versions hold are the same immutable files (Delta never rewrites a file in place), so none of
  their rows changed, and none of them holds a key that changed;
- the log below ``P``'s offsets still gives ``P``'s rows: cleaning keeps the latest record of each key (as Kafka's
  ``LogCleaner`` does) and read_committed visibility below a last stable offset is settled, so only a moved log start
  (``DeleteRecords``, retention) changes it, and then the full proof runs instead.

The change data feed of ``V`` (written by delta-rs) is held to the same rows: its inserts and update post-images
are exactly the added rows of the changed keys, its deletes and pre-images exactly the removed ones. A feed that
differs from the table's own rows is reported as such (:class:`_ChangeFeedError`); anything the commit's rows do not
prove (another writer's commit between the two versions, a key changed without a record, a row changed with its
offset kept) is :data:`NOT_PROVEN`, and the caller runs the full proof, which names what differs. Keys with records
past ``V``'s offsets are left to the pending rule of the full proof (the cleaner may have removed their older
records), checked only not to be ahead. The cost follows the files the commit rewrote and the new records, as the
merge's own does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from deltalog.errors import CheckFailedError, DeltalogError
from deltalog.log import transactions
from deltalog.log.record import KEY, OFFSET
from deltalog.state import table as state_table
from deltalog.state.equality import compare
from deltalog.state.rows import DELETED, PARTITION, latest_per_key, merge_keys, state_rows, state_schema

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from deltalog.config import TopicConfig
    from deltalog.log.log_manager import LogManager
    from deltalog.state.refresh import RefreshResult

CHANGE_TYPE = "_change_type"
PRE = ("update_preimage", "delete")
POST = ("update_postimage", "insert")


@dataclass(frozen=True)
class StepProof:
    """The outcome of proving version ``version`` from ``previous``: ``proven``, or why not."""

    version: int
    previous: int
    proven: bool
    reason: str = ""
    #: the keys the commit changed
    changed: int = 0


class _ChangeFeedError(DeltalogError):
    """The change data feed of a version differs from the rows the version's commit removed and added."""


def _rows(dt: DeltaTable, paths: set[str], schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    names = columns or schema.names
    schema = pa.schema([schema.field(n) for n in names])
    if not paths:
        return schema.empty_table()
    import pyarrow.dataset as pads  # here: pyarrow.dataset imports pandas, which `deltalog sql` must not pay for

    ds = dt.to_pyarrow_dataset()
    frags = [f for f in ds.get_fragments() if f.path in paths]
    sub = pads.FileSystemDataset(frags, ds.schema, ds.format, ds.filesystem)
    return sub.to_table(columns=names).cast(schema).combine_chunks()  # one chunk: takes by index stay cheap


def _paths(dt: DeltaTable) -> set[str]:
    return set(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())


def _by_identity(t: pa.Table, key_col: str) -> pa.Table:
    """``t`` sorted by ``(partition, key)``: two sets of rows compare equal as tables."""
    return t.sort_by([(PARTITION, "ascending"), (key_col, "ascending")]) if t.num_rows else t


def _identities(t: pa.Table, key_col: str) -> list[tuple[int, bytes]]:
    return list(zip(t.column(PARTITION).to_pylist(), t.column(key_col).to_pylist(), strict=True))


def _align(old: pa.Table, new: pa.Table, key_col: str) -> np.ndarray:
    """For each row of ``new``, the index of the row of ``old`` with the same ``(partition, key)`` (-1: none)."""
    out = np.full(new.num_rows, -1, dtype=np.int64)
    if not old.num_rows or not new.num_rows:
        return out
    old_parts = old.column(PARTITION).to_numpy()
    new_parts = new.column(PARTITION).to_numpy()
    one = np.unique(np.concatenate([old_parts[:1], new_parts[:1]]))
    if len(one) == 1 and (old_parts == one[0]).all() and (new_parts == one[0]).all():  # one partition: no slicing
        found = pc.index_in(new.column(key_col).combine_chunks(), value_set=old.column(key_col).combine_chunks())
        return pc.fill_null(found, -1).to_numpy().astype(np.int64)
    for p in np.unique(new_parts):
        o_idx = np.flatnonzero(old_parts == p)
        n_idx = np.flatnonzero(new_parts == p)
        if not len(o_idx):
            continue
        found = pc.index_in(new.column(key_col).take(n_idx).combine_chunks(),
                            value_set=old.column(key_col).take(o_idx).combine_chunks())
        hit = pc.is_valid(found).to_numpy(zero_copy_only=False)
        out[n_idx[hit]] = o_idx[found.filter(pc.is_valid(found)).to_numpy()]
    return out


def _in(t: pa.Table, others: pa.Table, key_col: str) -> np.ndarray:
    """Which rows of ``t`` have a ``(partition, key)`` that a row of ``others`` has."""
    return _align(others, t, key_col) >= 0


def _pending_table(pending: set[tuple[int, bytes]], key_col: str, key_type: pa.DataType) -> pa.Table:
    ordered = sorted(pending)
    return pa.table({PARTITION: pa.array([p for p, _ in ordered], pa.int32()),
                     key_col: pa.array([k for _, k in ordered], key_type)})


def _log_changes(logs: LogManager, topic: str, config: TopicConfig, before: dict[int, int], after: dict[int, int],
                 key_col: str) -> tuple[pa.Table, set[tuple[int, bytes]]] | None:
    """The latest read_committed record of each key in ``[before, after)`` as state rows (with :data:`DELETED`),
    and the keys with records at or past ``after`` (pending); None where a log start moved past ``before``."""
    parts, pending = [], set()
    for p, to in after.items():
        start = before.get(p, 0)
        log = logs.log(topic, p)
        snap, index, rows = log.read_rows(start, None, transactions.READ_COMMITTED)
        if snap.log_start_offset > start:
            return None
        visible = transactions.visible(rows, index.aborted_between(start, index.last_stable_offset))
        visible = visible.filter(pc.is_valid(visible.column(KEY)))
        cut = pc.less(visible.column(OFFSET), to)
        later = visible.filter(pc.invert(cut))
        if later.num_rows:
            pending.update((p, k) for k in state_rows(later, p, config).column(key_col).to_pylist())
        latest = latest_per_key(visible.filter(cut))
        if latest.num_rows:
            parts.append(state_rows(latest, p, config))
    schema = state_schema(config).append(pa.field(DELETED, pa.bool_(), nullable=False))
    return (pa.concat_tables(parts) if parts else schema.empty_table()), pending


def prove_step(logs: LogManager, topic: str, previous: DeltaTable, current: DeltaTable) -> StepProof:
    """Whether ``current`` (a version of the state table of ``topic`` made by one refresh on top of ``previous``,
    a version proven equal to the log) equals the log, from the rows its commit changed. Raises
    :class:`_ChangeFeedError` when its change data feed differs from those rows."""
    version, prev = current.version(), previous.version()

    def no(reason: str, changed: int = 0) -> StepProof:
        return StepProof(version, prev, False, reason, changed)

    if version != prev + 1:
        return no(f"versions {prev + 1}..{version} are more than one commit")
    if current.metadata().id != previous.metadata().id or \
            current.metadata().configuration != previous.metadata().configuration:
        return no("the table's metadata changed")
    config = logs.topic_config(topic)
    schema = state_schema(config)
    _, key_col = merge_keys(config)
    partitions = logs.partitions(topic)
    before = state_table.applied_offsets(previous, partitions)
    after = state_table.applied_offsets(current, partitions)
    if state_table.applied_starts(previous, partitions) != state_table.applied_starts(current, partitions):
        return no("the log start offsets moved")
    if any(after[p] < before[p] for p in partitions):
        return no("the offsets went back")
    old_paths, new_paths = _paths(previous), _paths(current)
    old = _rows(previous, old_paths - new_paths, schema)
    new = _rows(current, new_paths - old_paths, schema)
    kept = _rows(current, old_paths & new_paths, schema, [PARTITION, key_col])

    # the rows the commit changed: by (partition, key), a row whose offset moved or that came or went
    at = _align(old, new, key_col)
    if new.num_rows and new.group_by([PARTITION, key_col], use_threads=False).aggregate([]).num_rows != new.num_rows:
        return no("a key has two rows in the files the commit added")
    same = at >= 0
    same[same] = old.column(OFFSET).to_numpy()[at[same]] == new.column(OFFSET).to_numpy()[same]
    if not old.take(pa.array(at[same])).equals(new.filter(pa.array(same))):
        return no("a row changed with its offset kept")
    kept_at = np.flatnonzero(same)
    changed_new = new.filter(pa.array(~same))
    unchanged_old = np.zeros(old.num_rows, dtype=bool)
    unchanged_old[at[kept_at]] = True
    changed_old = old.filter(pa.array(~unchanged_old))
    changed = set(_identities(changed_new, key_col)) | set(_identities(changed_old, key_col))

    # the change data feed holds exactly those rows
    try:
        feed = pa.table(current.load_cdf(starting_version=version, ending_version=version))
    except (OSError, ValueError, pa.ArrowException, DeltaError) as e:
        raise _ChangeFeedError(f"the change data feed of version {version} of the state table of {topic!r} cannot "
                              f"be read: {e}") from None
    kinds = feed.column(CHANGE_TYPE).cast(pa.string())
    body = feed.select(schema.names).cast(schema)  # delta-rs reads the feed with view types
    post = body.filter(pc.is_in(kinds, pa.array(POST)))
    pre = body.filter(pc.is_in(kinds, pa.array(PRE)))
    for what, fed, rows in (("inserts and update post-images", post, changed_new),
                            ("deletes and update pre-images", pre, changed_old)):
        if not _by_identity(fed, key_col).equals(_by_identity(rows, key_col)):
            raise _ChangeFeedError(
                f"the change data feed of version {version} of the state table of {topic!r} differs from the rows "
                f"its commit wrote: its {what} are {fed.num_rows} rows, the commit's files hold {rows.num_rows} "
                "changed rows that differ from them")

    # the changes are exactly the latest records the log holds between the two versions' offsets
    log_changes = _log_changes(logs, topic, config, before, after, key_col)
    if log_changes is None:
        return no("the log start moved past the offsets of the proven version", len(changed))
    expected, pending = log_changes
    if changed - set(_identities(expected, key_col)) - pending:
        return no("a key changed with no record in the log", len(changed))
    if kept.num_rows and (_in(kept, expected, key_col).any() or _in(kept, new, key_col).any()):
        return no("a changed key has a row in a file the commit kept", len(changed))
    waiting = _pending_table(pending, key_col, schema.field(key_col).type)
    settled = expected.filter(pa.array(~_in(expected, waiting, key_col)))
    live = settled.filter(pc.invert(settled.column(DELETED))).drop_columns([DELETED])
    if _in(new, settled.filter(settled.column(DELETED)), key_col).any():
        return no("a key deleted by a tombstone still has a row", len(changed))
    written = changed_new.filter(pa.array(~_in(changed_new, waiting, key_col)))
    if not _by_identity(written, key_col).equals(_by_identity(live, key_col)):
        return no("a changed row differs from the latest record of its key", len(changed))
    ahead = changed_new.filter(pa.array(_in(changed_new, waiting, key_col)))
    for p, off in zip(ahead.column(PARTITION).to_pylist(), ahead.column(OFFSET).to_pylist(), strict=True):
        if off >= after[p]:
            return no("a row is ahead of the offsets recorded", len(changed))
    return StepProof(version, prev, True, changed=len(changed))


#: topic -> (the state table's Delta metadata id, the version last proven equal to the log) in one process
Proven = dict[str, tuple[str, int]]


def check_refresh(logs: LogManager, topic: str, result: RefreshResult, proven: Proven) -> RefreshResult:
    """Prove the state table of ``topic`` equal to the log after ``result`` (a refresh): from the rows of its commit
    alone (:func:`prove_step`) where the version it was made on is the one ``proven`` last (in this process), else
    by the full proof (:func:`~deltalog.state.equality.compare`, which reads the whole log). Returns ``result`` with
    ``checked`` saying which; raises :class:`~deltalog.errors.CheckFailedError` when the table (or its change data
    feed) is wrong. ``proven`` is updated."""
    table = state_table.StateTable(logs.storage, topic)
    mark = proven.pop(topic, None)
    if mark is not None and result.committed and not result.rebuilt and result.previous_version == mark[1]:
        previous, current = table.open(mark[1]), table.open(result.version)
        if previous is not None and current is not None and previous.metadata().id == mark[0]:
            try:
                step = prove_step(logs, topic, previous, current)
            except _ChangeFeedError as e:
                raise CheckFailedError(str(e), None) from None
            if step.proven:
                proven[topic] = (current.metadata().id, current.version())
                return replace(result, checked="incremental")
    latest = table.open()
    if latest is None:
        raise CheckFailedError(f"topic {topic!r} has no state table to check", None)
    if mark is not None and not result.committed and (latest.metadata().id, latest.version()) == mark:
        proven[topic] = mark
        return replace(result, checked="unchanged")
    comparison = compare(logs, topic, latest)
    if not comparison.equal:
        raise CheckFailedError(f"the state table of {topic!r} (version {comparison.table_version}) differs "
                               f"from its log: {', '.join(comparison.examples)}", comparison)
    proven[topic] = (latest.metadata().id, latest.version())
    return replace(result, checked="full")
