"""Other engines' Delta commits on a partition: which ones deltalog tolerates, which ones it detects.

A partition is a Delta table, so any Delta engine (Databricks, Spark with delta-spark, delta-rs, Trino) may commit
to it. deltalog keeps Kafka's promises over the table (every offset assigned once, the clean section holding the
latest record of each key, the log end offset and the cleaner checkpoint in the Delta log's app-transaction ids),
and what another engine commits falls in two kinds:

- **tolerated**: operations that keep every record, only moving rows between files: ``OPTIMIZE`` (bin-packing,
  Z-order, Databricks' auto-compaction and predictive optimization commit as ``OPTIMIZE``) and ``VACUUM START`` /
  ``VACUUM END`` (a VACUUM removes only files no version still references). Their files may hold several
  segments, rows in any order; :mod:`deltalog.log.layout` keeps deltalog right over them.
- **detected**: everything else: ``DELETE``, ``UPDATE``, ``MERGE``, ``RESTORE``, a ``WRITE`` (a plain append or an
  overwrite), ``CREATE OR REPLACE``, a schema or table-property change. Each changes records (or the table
  properties that hold the topic config) behind the log's back, so the next deltalog operation on the partition
  raises :class:`~deltalog.errors.ForeignCommitError` naming the commit and the way out: Delta's ``RESTORE`` to the
  version before it. A ``RESTORE`` to a version before every detected commit, with no deltalog commit after that
  version, *is* that way out and is accepted.

deltalog's own commits are told by what deltalog writes in every commit's ``commitInfo``:
:data:`~deltalog.log.delta.COMMIT_ID` (and ``deltalog.operation``, which commits made before commit ids existed
carry). Detection is cheap: a :class:`ForeignCommitWatch` reads only the commits after the version it last checked,
and a cold start walks back only to the newest deltalog commit that records the version it was based on
(``deltalog.read_version``): deltalog checks before it commits, so everything up to that version was checked.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deltalog.errors import ForeignCommitError
from deltalog.log import commit_infos

#: Delta's operation names (``DeltaOperations`` in Delta, ``DeltaOperation`` in delta-rs), each with the kind of
#: change :mod:`deltalog.log.history` lists it as: the one table of other engines' operations. A VACUUM is the
#: same whoever runs it.
OPERATION_KINDS: dict[str, str] = {
    "VACUUM START": "vacuum_start",
    "VACUUM END": "vacuum_end",
    "OPTIMIZE": "optimize",
    "REORG": "reorg",
    "DELETE": "delete",
    "TRUNCATE": "delete",
    "UPDATE": "update",
    "MERGE": "merge",
    "RESTORE": "restore",
    "WRITE": "write",
    "STREAMING UPDATE": "write",
    "CREATE TABLE AS SELECT": "write",
    "REPLACE TABLE AS SELECT": "write",
    "CREATE OR REPLACE TABLE AS SELECT": "write",
    "CREATE TABLE": "create",
    "CREATE OR REPLACE TABLE": "create",
    "REPLACE TABLE": "create",
    "SET TBLPROPERTIES": "alter",
    "UNSET TBLPROPERTIES": "alter",
    "ADD COLUMNS": "alter",
    "CHANGE COLUMN": "alter",
    "REPLACE COLUMNS": "alter",
    "ADD CONSTRAINT": "alter",
    "DROP CONSTRAINT": "alter",
    "UPDATE FIELD METADATA": "alter",
    "UPDATE TABLE METADATA": "alter",
    "ADD FEATURE": "alter",
    "UPGRADE PROTOCOL": "alter",
    "DROP FEATURE": "alter",
    "FSCK": "repair",
    "FILESYSTEM CHECK": "repair",
}
#: Other engines' operations that keep every record (see the module's docstring): their kinds are
#: :data:`TOLERATED_KINDS`; every other operation, known to :data:`OPERATION_KINDS` or not, is detected (but a
#: ``SET TBLPROPERTIES`` of :data:`TOLERATED_PROPERTIES` alone).
TOLERATED_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})
TOLERATED_KINDS = frozenset(OPERATION_KINDS[op] for op in TOLERATED_OPERATIONS)
#: Table properties another engine may set (``ALTER TABLE ... SET TBLPROPERTIES``): Delta's retention settings,
#: which deltalog reads back as the partition's effective ``file.delete.delay.ms`` (see
#: :mod:`deltalog.log.delta_retention`). Any other property change is detected.
TOLERATED_PROPERTIES = frozenset({"delta.deletedFileRetentionDuration", "delta.logRetentionDuration"})


def _sets_only_retention(entry: Mapping[str, Any]) -> bool:
    """A ``SET TBLPROPERTIES`` commit that changes only Delta's retention settings."""
    if str(entry.get("operation") or "").upper() != "SET TBLPROPERTIES":
        return False
    raw = (entry.get("operationParameters") or {}).get("properties")
    try:
        props = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return False
    return isinstance(props, Mapping) and bool(props) and set(props) <= TOLERATED_PROPERTIES

DELTALOG = "deltalog"
TOLERATED = "tolerated"
DETECTED = "detected"

#: The commit-info keys deltalog writes (``deltalog.log.delta`` imports this module's reader, not the reverse).
COMMIT_ID_KEY = "deltalog.commit_id"
OPERATION_KEY = "deltalog.operation"
READ_VERSION_KEY = "deltalog.read_version"


@dataclass(frozen=True)
class ForeignCommit:
    """One commit another engine made that changed records: what the error and ``deltalog doctor`` name."""

    version: int
    operation: str
    engine: str
    timestamp_ms: int | None
    parameters: Mapping[str, Any]

    def describe(self) -> str:
        when = "" if self.timestamp_ms is None else " at " + datetime.datetime.fromtimestamp(
            self.timestamp_ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        params = {k: v for k, v in self.parameters.items() if v not in (None, "", "[]")}
        shown = f" {dict(params)}" if params else ""
        return f"version {self.version}: {self.operation}{shown} by {self.engine}{when}"

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "operation": self.operation, "engine": self.engine,
                "timestamp_ms": self.timestamp_ms, "parameters": dict(self.parameters)}


def classify(entry: Mapping[str, Any]) -> str:
    """``"deltalog"``, ``"tolerated"`` or ``"detected"`` for one commit's ``commitInfo`` (a
    :meth:`DeltaTable.history` entry): pure, from the entry alone."""
    if entry.get(COMMIT_ID_KEY) is not None or entry.get(OPERATION_KEY) is not None:
        return DELTALOG
    if str(entry.get("operation") or "").upper() in TOLERATED_OPERATIONS or _sets_only_retention(entry):
        return TOLERATED
    return DETECTED


def restored_version(entry: Mapping[str, Any]) -> int | None:
    """The version a ``RESTORE`` commit brought the table back to (None for any other commit, or a RESTORE by
    timestamp, whose version its entry does not say)."""
    if str(entry.get("operation") or "").upper() != "RESTORE":
        return None
    try:
        return int((entry.get("operationParameters") or {}).get("version"))
    except (TypeError, ValueError):
        return None


def foreign_commit(entry: Mapping[str, Any]) -> ForeignCommit:
    return ForeignCommit(
        version=int(entry["version"]),
        operation=str(entry.get("operation") or "unknown operation"),
        engine=str(entry.get("engineInfo") or entry.get("clientVersion") or "an unknown engine"),
        timestamp_ms=entry.get("timestamp"),
        parameters=dict(entry.get("operationParameters") or {}),
    )


def pending_after(entries: Sequence[Mapping[str, Any]], pending: Sequence[ForeignCommit] = ()
                  ) -> tuple[ForeignCommit, ...]:
    """The detected commits still standing after ``entries`` (commit infos in ascending version order, following
    a state where ``pending`` stood): a detected commit stands until a ``RESTORE`` to a version before it undoes
    it. Such a RESTORE is accepted only when no deltalog commit lies between the version it restores and itself
    (it would silently drop records deltalog appended); otherwise it is detected itself. Pure."""
    standing = list(pending)
    ours = [int(e["version"]) for e in entries if classify(e) == DELTALOG]
    for e in entries:
        kind = classify(e)
        if kind != DETECTED:
            continue
        target = restored_version(e)
        v = int(e["version"])
        if target is not None and standing and target < standing[0].version and not any(
                target < o < v for o in ours):
            standing = [c for c in standing if c.version <= target]
            continue
        standing.append(foreign_commit(e))
    return tuple(standing)


def error_for(name: str, uri: str, commits: Sequence[ForeignCommit]) -> ForeignCommitError:
    """The error for partition ``name`` (``topic-partition``) whose detected commits are ``commits``."""
    before = commits[0].version - 1
    listed = "; ".join(c.describe() for c in commits[:5]) + (f"; and {len(commits) - 5} more" if len(commits) > 5
                                                               else "")
    return ForeignCommitError(
        f"partition {name} ({uri}) has Delta commits another engine made that change records or the table's "
        f"properties: {listed}. deltalog keeps Kafka's guarantees (offsets, the clean section, transactions) only "
        f"over its own commits, so it neither reads nor writes the partition until they are undone. Restore the "
        f"table to version {before}, the one before them: `RESTORE TABLE delta.`{uri}` TO VERSION AS OF {before}` "
        f"(Databricks, Spark) or `DeltaTable(\"{uri}\").restore({before})` (delta-rs); deltalog then accepts the "
        f"RESTORE. Only OPTIMIZE (bin-packing, Z-order, auto-compaction) and VACUUM are safe for other engines; to "
        f"change records use deltalog (produce a tombstone, DeleteRecords, retention)",
        commits=commits, restore_version=before,
    )


@dataclass
class ForeignCommitWatch:
    """What one process knows of a partition's commits: checked up to ``checked_version``, with the detected
    commits ``pending`` at that version (empty: none). :meth:`check` reads only the commits after it."""

    checked_version: int = -1
    pending: tuple[ForeignCommit, ...] = ()

    def check(self, dt: Any) -> tuple[ForeignCommit, ...]:
        """The detected commits standing at ``dt``'s version (a :class:`deltalake.DeltaTable`), reading only the
        commits after :attr:`checked_version` (a cold watch walks back to the version the newest deltalog commit
        was based on, see the module's docstring)."""
        latest = dt.version()
        if latest <= self.checked_version:
            return self.pending
        entries = _entries_since(dt, latest, self.checked_version)
        # A RESTORE to a version at or before what is known needs the deltalog commits down to that version.
        targets = [t for t in (restored_version(e) for e in entries) if t is not None]
        floor = min(targets, default=latest)
        first = int(entries[0]["version"]) if entries else latest + 1
        if floor < first - 1:
            older = [e for e in _history(dt, latest - floor) if int(e["version"]) > floor
                     and int(e["version"]) < first]
            context = [e for e in older if classify(e) == DELTALOG]
            entries = sorted(context, key=lambda e: int(e["version"])) + entries
        pending = pending_after(entries, self.pending)
        self.checked_version, self.pending = latest, pending
        return pending


def _history(dt: Any, limit: int) -> list[Mapping[str, Any]]:
    return [e for e in commit_infos.history(dt, max(1, limit)) if "version" in e]


def _entries_since(dt: Any, latest: int, checked: int) -> list[Mapping[str, Any]]:
    """Commit infos after ``checked`` in ascending order; with nothing checked yet (-1), those after the version
    the newest deltalog commit that records one was based on (read in growing chunks, newest first)."""
    if checked >= 0:
        entries = _history(dt, latest - checked)
        return sorted((e for e in entries if int(e["version"]) > checked), key=lambda e: int(e["version"]))
    limit = 16
    while True:
        entries = _history(dt, min(limit, latest + 1))
        stop = None
        for e in entries:  # newest first
            if classify(e) == DELTALOG and e.get(READ_VERSION_KEY) is not None:
                stop = int(e[READ_VERSION_KEY])
                break
        if stop is not None and any(int(e["version"]) <= stop for e in entries) or limit > latest:
            floor = -1 if stop is None else stop
            return sorted((e for e in entries if int(e["version"]) > floor), key=lambda e: int(e["version"]))
        limit *= 4
