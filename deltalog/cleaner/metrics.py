"""Kafka's cleaner metrics, per partition and for the store, as data.

Kafka's LogCleaner and LogCleanerManager publish ``max-dirty-percent``, ``uncleanable-partitions-count``,
``uncleanable-bytes``, ``time-since-last-run-ms``, ``max-clean-time-secs``, ``max-compaction-delay-secs``
and ``max-buffer-utilization-percent`` (Kafka's documentation of ``max.compaction.lag.ms`` says to watch
``uncleanable-partitions-count``, ``max-clean-time-secs`` and ``max-compaction-delay-secs``). deltalog computes
the same figures from the Delta snapshots (no data read) and two small records the cleaner keeps under
``<root>/_deltalog/cleaner/``:

* ``last-clean/<topic>/<partition>.json``: the figures of the partition's latest pass (written by every
  pass, whether run by the job or by ``store.clean()``);
* ``last-run.json``: the latest job cycle (when it ran, its longest pass, its fullest offset map).

:func:`collect` returns a :class:`StoreMetrics`; ``deltalog status`` prints it with :func:`format_table`;
after every job cycle :func:`record_cycle` appends it to the Delta table ``<root>/_deltalog/metrics``
(one row per partition plus one ``scope = 'store'`` row) with delta-rs's ``write_deltalake``, so SQL and
dashboards can chart it.
"""

from __future__ import annotations

import io
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.json as pa_json
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, DeltaProtocolError, SchemaMismatchError, TableNotFoundError

from deltalog.cleaner.cleaner import CleanResult
from deltalog.cleaner.cleaner_manager import LogCleanerManager
from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.errors import CorruptLogError, DeltalogError, ForeignCommitError
from deltalog.log import delta
from deltalog.log.log_manager import LogManager
from deltalog.log.partition_log import PartitionLog
from deltalog.log.walk import each_partition
from deltalog.storage_faults import storage_full_as_error
from deltalog.text import format_bytes
from deltalog.text import format_table as text_table

log = logging.getLogger(__name__)

#: Under the store's state directory ``<root>/_deltalog``.
CLEANER_STATE_DIR = "cleaner"
METRICS_TABLE = "metrics"


class CycleFigures(Protocol):
    """What :func:`record_cycle` reads of a cleaner cycle (:class:`~deltalog.cleaner.log_cleaner.CycleResult`)."""

    started_ms: int
    finished_ms: int
    cleans: tuple[CleanResult, ...]

    @property
    def segments_deleted(self) -> int: ...

    @property
    def files_vacuumed(self) -> int: ...

    @property
    def newly_uncleanable(self) -> list[tuple[str, int]]: ...


class PartitionStateLag(Protocol):
    """One partition of :class:`StateLagFigures`."""

    partition: int
    applied_offset: int

    @property
    def offsets_behind(self) -> int: ...


class StateLagFigures(Protocol):
    """What :func:`collect` reads of a state table's lag (:class:`deltalog.state.lag.StateLag`, a layer above)."""

    @property
    def partitions(self) -> Sequence[PartitionStateLag]: ...

    @property
    def time_behind_ms(self) -> int: ...


#: ``topic`` -> the lag of the topic's state table, or None where the topic keeps none: the store's
#: :meth:`~deltalog.store.Store.state_lag_of` (the cleaner sits below the state tables and does not import them).
#: Its time is by the wall clock, as the Delta commit timestamps it is measured from.
StateLagSource = Callable[[str], "StateLagFigures | None"]


def _last_clean_path(logs: LogManager, topic: str, partition: int) -> str:
    return logs.state_path(CLEANER_STATE_DIR, "last-clean", topic, f"{partition}.json")


def record_clean(logs: LogManager, result: CleanResult) -> None:
    """Keep the figures of a partition's latest pass (read back by :func:`collect`)."""
    logs.storage.write_json(_last_clean_path(logs, result.topic, result.partition), result.as_dict())


def last_clean(logs: LogManager, topic: str, partition: int) -> dict[str, Any] | None:
    return _figures(logs.storage.read_json(_last_clean_path(logs, topic, partition)), LAST_CLEAN_NUMBERS)


#: The numbers a last-pass document must hold to be read (:func:`_figures`).
LAST_CLEAN_NUMBERS = ("now_ms", "map_ms", "copy_ms", "map_utilization")


class LastCleans:
    """Every partition's last-pass figures, for a walk over the store's partitions: the figures' directory listed
    once per :meth:`refresh` (a partition never cleaned then costs no request of its own), each listed document
    read when its etag (or size and time) changed since this object last read it. A cleaner keeps one for as long
    as it runs, so a later cycle reads only the figures of passes since the last."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        self._listed: dict[str, tuple[object, ...]] = {}
        self._read: dict[str, tuple[tuple[object, ...], dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def refresh(self) -> LastCleans:
        storage = self.logs.storage
        self._listed = {storage.key(f.location): (f.etag, f.size, f.modified_ms)
                        for f in storage.list_files(self.logs.state_path(CLEANER_STATE_DIR, "last-clean"))}
        return self

    def get(self, topic: str, partition: int) -> dict[str, Any] | None:
        path = _last_clean_path(self.logs, topic, partition)
        key = self.logs.storage.key(path)
        version = self._listed.get(key)
        if version is None:
            return None
        with self._lock:
            known = self._read.get(key)
        if known is not None and known[0] == version:
            return known[1]
        doc = _figures(self.logs.storage.read_json(path), LAST_CLEAN_NUMBERS)
        with self._lock:
            self._read[key] = (version, doc)
        return doc


def last_run(logs: LogManager) -> dict[str, Any] | None:
    return _figures(logs.storage.read_json(logs.state_path(CLEANER_STATE_DIR, "last-run.json")), ("finished_ms",))


def _figures(doc: Any, numbers: tuple[str, ...]) -> dict[str, Any] | None:
    """Figures kept for reports only: a damaged file (torn, not a JSON object, or without the numbers the report
    reads) reads as none (the next pass writes it again), and ``deltalog doctor`` names it."""
    if not isinstance(doc, dict):
        return None
    ok = all(isinstance(doc.get(k), (int, float)) and not isinstance(doc.get(k), bool) for k in numbers)
    return doc if ok else None


def forget_topic(logs: LogManager, topic: str) -> None:
    """Drop the last-pass figures of a deleted topic, so a topic created again under its name starts afresh."""
    logs.storage.delete_tree(logs.state_path(CLEANER_STATE_DIR, "last-clean", topic))


@dataclass(frozen=True)
class PartitionMetrics:
    """One partition's figures at one time."""

    topic: str
    partition: int
    cleanup_policy: str
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    clean_bytes: int
    dirty_bytes: int  # Kafka's cleanable bytes: [first dirty, first uncleanable)
    dirty_percent: float
    max_compaction_delay_ms: int
    uncleanable: bool
    uncleanable_reason: str | None
    last_clean_ms: int | None
    time_since_last_clean_ms: int | None
    last_clean_time_ms: int | None  # map + copy time of the latest pass
    map_utilization: float | None  # of the latest pass
    size_reduction: float | None  # of the latest pass
    #: The topic's state table (docs/state-table.md), None where it keeps none: the offset applied up to, the
    #: offsets of the log not yet applied (up to its last stable offset), and at most how long they waited.
    state_applied_offset: int | None = None
    state_offsets_behind: int | None = None
    state_time_behind_ms: int | None = None


@dataclass(frozen=True)
class StoreMetrics:
    """The store-wide figures, with Kafka's metric names in the docstrings, and every partition's."""

    now_ms: int
    partitions: tuple[PartitionMetrics, ...]
    uncleanable_partitions_count: int  # uncleanable-partitions-count
    uncleanable_bytes: int  # uncleanable-bytes
    max_dirty_percent: float  # max-dirty-percent
    max_compaction_delay_ms: int  # max-compaction-delay-secs, in ms
    last_run_ms: int | None
    time_since_last_run_ms: int | None  # time-since-last-run-ms
    max_clean_time_ms: int | None  # max-clean-time-secs of the last run, in ms
    max_buffer_utilization: float | None  # max-buffer-utilization-percent of the last run, as a fraction

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def partition_metrics(logs: LogManager, manager: LogCleanerManager, topic: str, partition: int, now_ms: int,
                      last_cleans: LastCleans | None = None) -> tuple[PartitionMetrics, int]:
    """A partition's metrics, and its cleanable bytes (for ``uncleanable-bytes``): from its snapshot (in a
    cleaner cycle, the one the cycle's first look took: :meth:`LogManager.snapshot`), its uncleanable mark and its
    last pass's figures (from ``last_cleans`` when given)."""
    plog = logs.log(topic, partition)
    snap = logs.snapshot(plog)
    ltc = LogToClean.for_log(plog, snap, now_ms)
    compact = snap.config.compact
    mark = manager.uncleanable.get(topic, partition, snap.topic_id)
    lc = last_cleans.get(topic, partition) if last_cleans is not None else last_clean(logs, topic, partition)
    last_ms = int(lc["now_ms"]) if lc else None
    m = PartitionMetrics(
        topic=topic,
        partition=partition,
        cleanup_policy=",".join(snap.config.cleanup_policy),
        size_bytes=snap.size_bytes,
        log_start_offset=snap.log_start_offset,
        log_end_offset=snap.log_end_offset,
        clean_bytes=ltc.clean_bytes if compact else 0,
        dirty_bytes=ltc.cleanable_bytes if compact else 0,
        dirty_percent=100.0 * ltc.cleanable_ratio if compact else 0.0,
        max_compaction_delay_ms=ltc.max_compaction_delay_ms if compact else 0,
        uncleanable=mark is not None,
        uncleanable_reason=f"{mark.error_type}: {mark.message}" if mark else None,
        last_clean_ms=last_ms,
        time_since_last_clean_ms=now_ms - last_ms if last_ms is not None else None,
        last_clean_time_ms=int(lc["map_ms"]) + int(lc["copy_ms"]) if lc else None,
        map_utilization=float(lc["map_utilization"]) if lc else None,
        size_reduction=float(lc.get("size_reduction", 0.0)) if lc else None,
    )
    return m, ltc.cleanable_bytes


def _damaged_metrics(topic: str, partition: int, error: CorruptLogError | ForeignCommitError) -> PartitionMetrics:
    """The row of a partition whose Delta log cannot be read (damaged, or changed by another engine's commit, which
    deltalog reads nothing on top of): no sizes or offsets, counted as uncleanable (the cleaner does not clean it)
    with the reason, which names the partition and, for another engine's commit, the commit and the RESTORE."""
    return PartitionMetrics(topic, partition, "", 0, 0, 0, 0, 0, 0.0, 0, True, f"{type(error).__name__}: {error}",
                            None, None, None, None, None)


def _with_state_lag(m: PartitionMetrics, lags: dict[str, StateLagFigures | None], source: StateLagSource
                    ) -> PartitionMetrics:
    """``m`` with its topic's state-table lag (read once a topic); a state table that cannot be read leaves the
    figures empty (``doctor`` names it) rather than the cleaner's figures unrecorded."""
    if m.topic not in lags:
        try:
            lags[m.topic] = source(m.topic)
        except (DeltalogError, DeltaError, OSError) as e:
            log.warning("the lag of the state table of %s was not read: %s", m.topic, e)
            lags[m.topic] = None
    lag = lags[m.topic]
    part = None if lag is None else next((p for p in lag.partitions if p.partition == m.partition), None)
    if lag is None or part is None:
        return m
    return replace(m, state_applied_offset=part.applied_offset, state_offsets_behind=part.offsets_behind,
                   state_time_behind_ms=lag.time_behind_ms if part.offsets_behind else 0)


def collect(logs: LogManager, now_ms: int | None = None, *, state_lag: StateLagSource | None = None,
            manager: LogCleanerManager | None = None, last_cleans: LastCleans | None = None) -> StoreMetrics:
    """Every partition's metrics and the store-wide ones, from snapshots and the cleaner's records, the partitions
    :attr:`LogManager.walk_threads` at a time (in the partitions' order); with ``state_lag``, each partition's
    state-table lag too. A partition whose log cannot be read (damaged, or another engine's record-changing commit)
    gets a row with the reason and the others their figures, as Kafka's cleaner goes on past an uncleanable
    partition (``LogCleanerManager.markPartitionUncleanable``). A cleaner's cycle gives its ``manager`` (whose uncleanable set it has listed once) and its
    ``last_cleans`` (kept from cycle to cycle)."""
    now = logs.clock.now_ms() if now_ms is None else now_ms
    manager = manager if manager is not None else LogCleanerManager(logs)
    last_cleans = (last_cleans if last_cleans is not None else LastCleans(logs)).refresh()

    def one(plog: PartitionLog) -> tuple[PartitionMetrics, int]:
        try:
            return partition_metrics(logs, manager, plog.topic, plog.partition, now, last_cleans)
        except (CorruptLogError, ForeignCommitError) as e:  # no figures, but counted as uncleanable; the others go on
            return _damaged_metrics(plog.topic, plog.partition, e), 0

    parts: list[PartitionMetrics] = []
    uncleanable_bytes = 0
    lags: dict[str, StateLagFigures | None] = {}
    for walked in each_partition(logs.logs(), one, logs.walk_threads):
        if walked.error is not None:
            raise walked.error
        m, cleanable = walked.result  # type: ignore[misc] - set when there is no error
        if state_lag is not None:
            m = _with_state_lag(m, lags, state_lag)
        parts.append(m)
        if m.uncleanable:
            uncleanable_bytes += cleanable
    run = last_run(logs)
    run_ms = int(run["finished_ms"]) if run else None
    return StoreMetrics(
        now_ms=now,
        partitions=tuple(parts),
        uncleanable_partitions_count=sum(1 for p in parts if p.uncleanable),
        uncleanable_bytes=uncleanable_bytes,
        max_dirty_percent=max((p.dirty_percent for p in parts if not p.uncleanable), default=0.0),
        max_compaction_delay_ms=max((p.max_compaction_delay_ms for p in parts if not p.uncleanable), default=0),
        last_run_ms=run_ms,
        time_since_last_run_ms=now - run_ms if run_ms is not None else None,
        max_clean_time_ms=run.get("max_clean_time_ms") if run else None,
        max_buffer_utilization=run.get("max_buffer_utilization") if run else None,
    )


# -- the metrics table ------------------------------------------------------------------------------------

METRICS_SCHEMA = pa.schema([
    pa.field("recorded_ms", pa.int64(), nullable=False),
    pa.field("scope", pa.string(), nullable=False),  # 'store' or 'partition'
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("cleanup_policy", pa.string()),
    pa.field("size_bytes", pa.int64()),
    pa.field("log_start_offset", pa.int64()),
    pa.field("log_end_offset", pa.int64()),
    pa.field("clean_bytes", pa.int64()),
    pa.field("dirty_bytes", pa.int64()),
    pa.field("dirty_percent", pa.float64()),
    pa.field("max_compaction_delay_ms", pa.int64()),
    pa.field("uncleanable", pa.bool_()),
    pa.field("uncleanable_partitions_count", pa.int64()),
    pa.field("uncleanable_bytes", pa.int64()),
    pa.field("last_clean_ms", pa.int64()),
    pa.field("time_since_last_clean_ms", pa.int64()),
    pa.field("last_clean_time_ms", pa.int64()),
    pa.field("map_utilization", pa.float64()),
    pa.field("time_since_last_run_ms", pa.int64()),
    pa.field("max_clean_time_ms", pa.int64()),
    pa.field("max_buffer_utilization", pa.float64()),
    pa.field("passes", pa.int64()),
    pa.field("segments_deleted", pa.int64()),
    pa.field("files_vacuumed", pa.int64()),
    # The state tables' lag (added after the first release: older metrics tables gain them on the next append)
    pa.field("state_applied_offset", pa.int64()),
    pa.field("state_offsets_behind", pa.int64()),
    pa.field("state_time_behind_ms", pa.int64()),
])


def metrics_rows(metrics: StoreMetrics, cycle: CycleFigures | None = None) -> pa.Table:
    """The rows one cycle appends: one per partition and one ``scope = 'store'`` row."""
    rows: list[dict[str, Any]] = []
    for p in metrics.partitions:
        rows.append({
            "recorded_ms": metrics.now_ms, "scope": "partition", "topic": p.topic, "partition": p.partition,
            "cleanup_policy": p.cleanup_policy, "size_bytes": p.size_bytes, "log_start_offset": p.log_start_offset,
            "log_end_offset": p.log_end_offset, "clean_bytes": p.clean_bytes, "dirty_bytes": p.dirty_bytes,
            "dirty_percent": p.dirty_percent, "max_compaction_delay_ms": p.max_compaction_delay_ms,
            "uncleanable": p.uncleanable, "last_clean_ms": p.last_clean_ms,
            "time_since_last_clean_ms": p.time_since_last_clean_ms, "last_clean_time_ms": p.last_clean_time_ms,
            "map_utilization": p.map_utilization, "state_applied_offset": p.state_applied_offset,
            "state_offsets_behind": p.state_offsets_behind, "state_time_behind_ms": p.state_time_behind_ms,
        })
    lagging = [p for p in metrics.partitions if p.state_offsets_behind is not None]
    rows.append({
        "recorded_ms": metrics.now_ms, "scope": "store",
        "size_bytes": sum(p.size_bytes for p in metrics.partitions),
        "dirty_bytes": sum(p.dirty_bytes for p in metrics.partitions),
        "dirty_percent": metrics.max_dirty_percent,
        "max_compaction_delay_ms": metrics.max_compaction_delay_ms,
        "uncleanable_partitions_count": metrics.uncleanable_partitions_count,
        "uncleanable_bytes": metrics.uncleanable_bytes,
        "time_since_last_run_ms": metrics.time_since_last_run_ms,
        "max_clean_time_ms": metrics.max_clean_time_ms,
        "max_buffer_utilization": metrics.max_buffer_utilization,
        "passes": len(cycle.cleans) if cycle else None,
        "segments_deleted": cycle.segments_deleted if cycle else None,
        "files_vacuumed": cycle.files_vacuumed if cycle else None,
        "state_offsets_behind": sum(p.state_offsets_behind or 0 for p in lagging) if lagging else None,
        "state_time_behind_ms": max(p.state_time_behind_ms or 0 for p in lagging) if lagging else None,
    })
    # Through Arrow's JSON reader: pa.Table.from_pylist (and pa.array of a list) import pandas, seconds of an
    # idle cycle's start in a fresh process where nothing else needs it.
    data = "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    table = pa_json.read_json(io.BytesIO(data), parse_options=pa_json.ParseOptions(
        explicit_schema=METRICS_SCHEMA, unexpected_field_behavior="error"))
    return table.cast(METRICS_SCHEMA)


def metrics_table_uri(logs: LogManager) -> str:
    return logs.state_path(METRICS_TABLE)


def append_metrics(logs: LogManager, metrics: StoreMetrics, cycle: CycleFigures | None = None) -> None:
    """Append the rows to ``<root>/_deltalog/metrics`` (created on first use); concurrent jobs may append.

    Exactly once, even when the store loses the answer to the commit: delta-rs would take its own landed commit
    for a concurrent one and, the rows being a blind append, write them again at the next version. So delta-rs
    does not retry (``max_commit_retries=0``); each failure is resolved by the commit id in the log (see
    :func:`deltalog.log.delta.commit`), and only an append proven not landed is tried again."""
    uri = metrics_table_uri(logs)
    with storage_full_as_error(uri, "appending the cleaner metrics"):
        _append_once(uri, metrics_rows(metrics, cycle), logs.storage.delta_options)


def _append_once(uri: str, rows: pa.Table, options: dict[str, str] | None) -> None:
    for attempt in range(METRICS_COMMIT_ATTEMPTS):
        commit_id = delta.new_commit_id()
        read_version = _metrics_version(uri, options)
        try:
            write_deltalake(uri, rows, mode="append", storage_options=options, schema_mode="merge",
                            commit_properties=CommitProperties(max_commit_retries=0, custom_metadata={
                                "deltalog.operation": "metrics", delta.COMMIT_ID: commit_id}))
            return
        except Exception as e:  # noqa: BLE001 - any failure: the log says whether the rows landed
            error = e
        if _metrics_version(uri, options) is not None and delta.find_commit(
                DeltaTable(uri, storage_options=options), -1 if read_version is None else read_version,
                commit_id) is not None:
            return  # landed; its answer was lost
        lost_race = isinstance(error, DeltaError) and not isinstance(error, (SchemaMismatchError, DeltaProtocolError))
        if attempt == METRICS_COMMIT_ATTEMPTS - 1 or not lost_race:
            raise error
        time.sleep(random.uniform(0.001, 0.005 * min(attempt + 1, 20)))  # a concurrent job won: append again


#: Appends of one metrics batch that lost a race before giving up (as delta-rs's own retries did before).
METRICS_COMMIT_ATTEMPTS = 50


def _metrics_version(uri: str, options: dict[str, str] | None) -> int | None:
    try:
        return DeltaTable(uri, storage_options=options).version()
    except TableNotFoundError:
        return None


def record_cycle(logs: LogManager, cycle: CycleFigures, state_lag: StateLagSource | None = None, *,
                 manager: LogCleanerManager | None = None, last_cleans: LastCleans | None = None) -> StoreMetrics:
    """After a job cycle: remember it in ``last-run.json`` and append the metrics rows (with the state tables'
    lag, given ``state_lag``; ``manager`` and ``last_cleans``: the cleaner's, see :func:`collect`)."""
    clean_times = [c.map_ms + c.copy_ms for c in cycle.cleans]
    utilizations = [c.map_utilization for c in cycle.cleans]
    logs.storage.write_json(logs.state_path(CLEANER_STATE_DIR, "last-run.json"), {
        "started_ms": cycle.started_ms,
        "finished_ms": cycle.finished_ms,
        "owner": logs.leases.owner,
        "passes": len(cycle.cleans),
        "max_clean_time_ms": max(clean_times) if clean_times else 0,
        "max_buffer_utilization": max(utilizations) if utilizations else 0.0,
        "segments_deleted": cycle.segments_deleted,
        "files_vacuumed": cycle.files_vacuumed,
        "newly_uncleanable": [list(tp) for tp in cycle.newly_uncleanable],
    })
    metrics = collect(logs, state_lag=state_lag, manager=manager, last_cleans=last_cleans)
    append_metrics(logs, metrics, cycle)
    return metrics


# -- text ---------------------------------------------------------------------------------------------------


def _ago(ms: int | None) -> str:
    if ms is None:
        return "never"
    s = ms / 1000
    if s < 120:
        return f"{s:.0f}s ago"
    if s < 7200:
        return f"{s / 60:.0f}m ago"
    if s < 172800:
        return f"{s / 3600:.1f}h ago"
    return f"{s / 86400:.1f}d ago"


def _secs(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:,.1f}s"


def format_table(metrics: StoreMetrics) -> str:
    """``deltalog status``: store-wide figures, then one line per partition; sizes in the units ``describe`` prints
    (:func:`deltalog.text.format_bytes`; JSON keeps bytes). "last cleaner job cycle" is Kafka's
    time-since-last-run-ms, a cycle of the cleaner job (``deltalog cleaner run``); a pass run by hand (``deltalog
    clean``, ``store.clean``) is not one, and shows in its partition's LAST CLEAN, which the line points to."""
    cleans = [p.time_since_last_clean_ms for p in metrics.partitions if p.time_since_last_clean_ms is not None]
    last_pass = f" (last pass of any partition: {_ago(min(cleans))})" if cleans else ""
    lines = [
        f"uncleanable partitions: {metrics.uncleanable_partitions_count} ({format_bytes(metrics.uncleanable_bytes)})   "
        f"max dirty: {metrics.max_dirty_percent:.1f}%   "
        f"max compaction delay: {_secs(metrics.max_compaction_delay_ms)}",
        f"last cleaner job cycle: {_ago(metrics.time_since_last_run_ms)}{last_pass}   "
        f"max clean time: {_secs(metrics.max_clean_time_ms)}   "
        "max buffer utilization: "
        + ("-" if metrics.max_buffer_utilization is None else f"{100 * metrics.max_buffer_utilization:.1f}%"),
        "",
    ]
    if not metrics.partitions:
        return "\n".join([*lines, "(no topics)"])
    header = ("TOPIC", "PART", "POLICY", "SIZE", "DIRTY%", "DIRTY BYTES", "MAX DELAY", "LAST CLEAN",
              "CLEAN TIME", "MAP%", "STATE")
    rows = [(p.topic, p.partition, p.cleanup_policy, format_bytes(p.size_bytes), round(p.dirty_percent, 1),
             format_bytes(p.dirty_bytes),
             _secs(p.max_compaction_delay_ms), _ago(p.time_since_last_clean_ms), _secs(p.last_clean_time_ms),
             None if p.map_utilization is None else round(100 * p.map_utilization, 1),
             f"UNCLEANABLE ({p.uncleanable_reason})"[:80] if p.uncleanable else "ok")
            for p in metrics.partitions]
    return "\n".join(lines) + "\n" + text_table(header, rows, rule=False)
