"""A partition's history in the shape of Delta's ``DESCRIBE HISTORY``: one entry per Delta commit, newest first.

Every commit deltalog makes names what it did in its commit info (``deltalog.operation``, beside Delta's own
``operation``, which is ``WRITE`` for most of them) with a few figures (``deltalog.records``, ``deltalog.offset``,
the cleaning pass's ``deltalog.records_read`` / ``records_written``, retention's ``deltalog.records_deleted``, ...;
see :func:`deltalog.log.delta.commit` and its callers). :func:`classify` turns one commit's info into what
happened to the log (:data:`KINDS`): deltalog's own operations, and the operations of other Delta engines that
ran on the table (OPTIMIZE, DELETE, MERGE, VACUUM, ... by Databricks, Spark or delta-rs), told apart by the
absence of deltalog's fields and by Delta's operation name.

The files and bytes each commit added and removed are counted from its actions in the Delta log (its
``NNN.json``), the same for every engine, as Delta's ``operationMetrics`` (``numFiles``, ``numAddedFiles``,
``numRemovedFiles``, ``numOutputBytes``) would say; delta-rs writes no metrics for the commits deltalog makes.

deltalog's own VACUUM (:mod:`deltalog.log.vacuum`) commits nothing: like Kafka's unlink of a ``.deleted``
segment, it only deletes files no version of the retention window references. A VACUUM run by another engine
shows as its ``VACUUM START`` and ``VACUUM END`` commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog.log import commit_infos, damage, delta, foreign_commits, time_travel
from deltalog.log.partition_log import PartitionLog
from deltalog.storage import join

#: deltalog's own operations, by their ``deltalog.operation`` (``retention`` and ``delete_records`` are the two
#: ways the log start moves: Kafka's ``deleteOldSegments`` and DeleteRecords; ``relayout`` puts files another
#: engine's OPTIMIZE merged back into one file per segment).
DELTALOG_KINDS = ("create", "append", "roll", "txn_marker", "producer_state", "clean", "retention",
                  "delete_records", "relayout", "repair_duplicates", "alter_config", "add_producer_columns", "add_key_hash_columns",
                  "upgrade_table")
#: Every kind :func:`classify` returns: deltalog's own, then other engines' (named by
#: :data:`deltalog.log.foreign_commits.OPERATION_KINDS`, the one table of Delta's operations), then ``"other"``.
KINDS = tuple(dict.fromkeys([*DELTALOG_KINDS, *foreign_commits.OPERATION_KINDS.values(), "other"]))

_OPERATION = "deltalog.operation"
_HIDDEN = {_OPERATION, delta.COMMIT_ID, delta.READ_VERSION}  # bookkeeping, not figures


def classify(info: Mapping[str, Any]) -> str:
    """What one Delta commit did, from its commit info (an entry of ``DeltaTable.history()``): one of
    :data:`KINDS`. A commit with ``deltalog.operation`` is deltalog's; any other is another engine's, named by
    Delta's ``operation`` through :data:`deltalog.log.foreign_commits.OPERATION_KINDS` (``"other"`` for one
    deltalog does not know). Whether such a commit is tolerated or blocks the partition is
    :func:`deltalog.log.foreign_commits.classify`'s to say, not the kind's (a ``SET TBLPROPERTIES`` of Delta's
    retention settings alone is tolerated, any other ``alter`` is not)."""
    ours = info.get(_OPERATION)
    if isinstance(ours, str) and ours:
        return ours
    operation = str(info.get("operation") or "").upper()
    return foreign_commits.OPERATION_KINDS.get(operation, "other")


def by_deltalog(info: Mapping[str, Any]) -> bool:
    """Whether deltalog made the commit: the one rule :func:`deltalog.log.foreign_commits.classify` keeps (its
    commit info carries deltalog's commit id or operation name)."""
    return foreign_commits.classify(info) == foreign_commits.DELTALOG


@dataclass(frozen=True)
class HistoryEntry:
    """One commit of one partition, as a row of ``DESCRIBE HISTORY``: its ``version``, ``timestamp_ms``
    (the commit's time made monotonic as Delta's DeltaHistoryManager does: never before the previous commit's + 1
    ms; the time ``timestamp_as_of`` resolves on), ``writer_timestamp_ms`` (the commit info's ``timestamp`` as
    the committing engine's clock stamped it; differs when that clock ran behind), deltalog's ``kind`` of operation and Delta's
    ``operation`` name, the ``engine`` (``engineInfo``) and ``user`` (``userName``) when the engine records
    them, the ``parameters`` (deltalog's figures for its own commits, ``operationParameters`` and
    ``operationMetrics`` for another engine's) and the ``files`` figures counted from the commit's actions."""

    topic: str
    partition: int
    version: int
    timestamp_ms: int | None
    kind: str
    operation: str
    by_deltalog: bool
    engine: str | None = None
    user: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    writer_timestamp_ms: int | None = None

    @property
    def skewed(self) -> bool:
        """Whether the writer's clock put this commit at or before the commit before it (its time was adjusted)."""
        return self.writer_timestamp_ms is not None and self.writer_timestamp_ms != self.timestamp_ms

    @property
    def foreign(self) -> bool:
        return not self.by_deltalog

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The figures in one short line: what the text output prints."""
        p = self.parameters
        parts: list[str] = []
        if self.kind == "append" and "records" in p:
            first, n = p.get("offset"), int(p["records"])
            span = "" if first is None else f" at offset{'s' if n != 1 else ''} " + (
                f"{first}" if n == 1 else f"{first}..{int(first) + n - 1}")
            parts.append(f"{n} record{'s' if n != 1 else ''}{span}")
        elif self.kind == "clean" and "records_read" in p:
            read, written = int(p["records_read"]), int(p.get("records_written", 0))
            end = p.get("end_offset")  # exclusive: the cleaner checkpoint after the pass
            last = int(end) - 1 if isinstance(end, int) else end
            parts.append(f"offsets {p.get('first_dirty_offset')}..{last}: kept {written} of {read} "
                         f"records, removed {read - written}")
        elif self.kind == "retention":
            parts.append(f"{p.get('records_deleted', '?')} records deleted ({p.get('reasons', '')}); "
                         f"log start {p.get('log_start_offset')}")
        elif self.kind == "delete_records":
            parts.append(f"log start {p.get('before_offset')}")
        elif self.kind == "txn_marker":
            parts.append(f"{p.get('control')} of producer {p.get('producer_id')}"
                         + (f" at offset {p['offset']}" if "offset" in p else ""))
        elif self.kind == "roll":
            parts.append(f"new segment at {p.get('base_offset')}")
        f = self.files
        if f.get("added") or f.get("removed"):
            parts.append(f"files +{f.get('added', 0)}/-{f.get('removed', 0)}, "
                         f"bytes +{f.get('bytes_added', 0)}/-{f.get('bytes_removed', 0)}")
        return "; ".join(parts)


def entry_of(topic: str, partition: int, info: Mapping[str, Any], files: Mapping[str, int] | None = None,
             timestamp_ms: int | None = None) -> HistoryEntry:
    """The :class:`HistoryEntry` of one commit-info entry of ``DeltaTable.history()``; ``timestamp_ms`` is its
    monotonic time (:func:`deltalog.log.time_travel.monotonic_times`), the writer's own when not given."""
    ours = by_deltalog(info)
    if ours:
        params = {k[len("deltalog."):]: v for k, v in info.items() if k.startswith("deltalog.") and k not in _HIDDEN}
    else:
        params = {k: v for k, v in (("operationParameters", info.get("operationParameters")),
                                    ("operationMetrics", info.get("operationMetrics"))) if v}
    ts = info.get("timestamp")
    own = int(ts) if isinstance(ts, (int, float)) else None
    return HistoryEntry(
        topic=topic, partition=partition, version=int(info["version"]),
        timestamp_ms=own if timestamp_ms is None else timestamp_ms, writer_timestamp_ms=own,
        kind=classify(info), operation=str(info.get("operation") or ""), by_deltalog=ours,
        engine=info.get("engineInfo"), user=info.get("userName") or info.get("userId"),
        parameters=params, files=dict(files or {}))


def commit_files(log: PartitionLog, version: int) -> dict[str, int]:
    """Files and bytes the commit of ``version`` added and removed, from its actions (empty when its commit file
    is no longer in the log)."""
    location = join(log.uri, "_delta_log", f"{version:020d}.json")
    try:
        text = log.storage.read_bytes(location).decode("utf-8")
    except FileNotFoundError:
        return {}
    out = {"added": 0, "removed": 0, "bytes_added": 0, "bytes_removed": 0, "records_added": 0}
    for line in text.splitlines():
        if '"add"' not in line and '"remove"' not in line:
            continue
        action = json.loads(line)
        if action.get("add"):
            add = action["add"]
            out["added"] += 1
            out["bytes_added"] += int(add.get("size") or 0)
            stats = add.get("stats")
            if stats:
                try:
                    out["records_added"] += int(json.loads(stats).get("numRecords") or 0)
                except (ValueError, AttributeError):
                    pass
        elif action.get("remove"):
            out["removed"] += 1
            out["bytes_removed"] += int(action["remove"].get("size") or 0)
    return out


def history(log: PartitionLog, limit: int | None = None) -> list[HistoryEntry]:
    """The partition's commits, newest first by version (at most ``limit``), as ``DESCRIBE HISTORY [LIMIT n]``
    lists them: only the commits whose entries are still in the Delta log (``delta.logRetentionDuration``). Their
    times are made monotonic over every commit in the log, as Delta's ``getHistory`` does, so that a commit's time
    is the same with or without a limit and is the one ``timestamp_as_of`` resolves on."""
    dt = log.table()
    with damage.reading_log(log.storage, log.uri):
        infos = commit_infos.history(dt)
    times = {t.version: t.timestamp_ms for t in time_travel.monotonic_times(infos)}
    infos = sorted((i for i in infos if "version" in i), key=lambda i: -int(i["version"]))[:limit]
    return [entry_of(log.topic, log.partition, info, commit_files(log, int(info["version"])),
                     times.get(int(info["version"]))) for info in infos]
