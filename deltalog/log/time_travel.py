"""Time travel: a partition's log and state **as of** a Delta version or a point in time.

Kafka keeps one present: a compacted key's older values are gone once the cleaner passed. A deltalog partition is
a Delta table, and every version of it stays readable until VACUUM removes the files it references
(``file.delete.delay.ms``, alias ``delta.deletedFileRetentionDuration``, 7 days by default) and its commit stays in
the Delta log (``delta.logRetentionDuration``, at least 30 days): "what did key K hold yesterday" is a read of
yesterday's version. The names follow Delta's reader options ``versionAsOf`` and ``timestampAsOf``:

* ``version_as_of``: a Delta version of **one** partition table (each partition is a table with versions of its
  own, so a version number means nothing across partitions): an ``int`` on a topic of one partition, or a
  mapping ``{partition: version}`` that also picks the partitions read.
* ``timestamp_as_of``: a point in time (a ``datetime``, naive meaning UTC; an ISO 8601 string such as
  ``"2026-11-25"`` or ``"2026-11-25T08:00:00Z"``; or epoch milliseconds as an ``int``). Each partition is read at
  its latest version committed at or before it (Delta's ``timestampAsOf``), by the commit timestamps that
  ``deltalog history`` shows. Those come from each writer's clock, and clocks disagree: as Delta's
  DeltaHistoryManager does, a commit's time is taken as ``max(its own, the previous commit's + 1 ms)`` before a
  time is resolved, so a writer whose clock runs behind can neither put a later version before an earlier one nor
  make a time before the table existed read data. A time before a partition's first commit is an error; a time after its last commit
  reads its latest version (Delta refuses a timestamp past the last commit; a topic's partitions are committed at
  different times, so that refusal would make "as of a minute ago" fail on every quiet partition).

A version that is not there raises :class:`~deltalog.errors.VersionNotAvailableError` naming why: past the latest
version, its commit cleaned up from the Delta log, or its data files removed by VACUUM (the message names the
setting that keeps them longer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any
from urllib.parse import unquote

from deltalake import DeltaTable

from deltalog.errors import InvalidArgumentError, VersionNotAvailableError, shown
from deltalog.log import commit_infos, delta_retention
from deltalog.log.partition_log import LogSnapshot, PartitionLog, snapshot_of
from deltalog.storage import Storage
from deltalog.text import format_timestamp

#: What ``timestamp_as_of`` takes.
Timestamp = datetime | date | str | int
#: What ``version_as_of`` takes: a version of a one-partition topic, or one per partition.
Versions = int | Mapping[int, int]


@dataclass(frozen=True)
class AsOf:
    """A point to read at: ``versions`` per partition (None: every partition, each at ``timestamp_ms``)."""

    versions: Mapping[int, int] | None = None
    single_version: int | None = None
    timestamp_ms: int | None = None

    def describe(self) -> str:
        if self.timestamp_ms is not None:
            return f"as of {format_timestamp(self.timestamp_ms)} UTC"
        if self.single_version is not None:
            return f"as of version {self.single_version}"
        return "as of versions " + ", ".join(f"{p}:{v}" for p, v in sorted((self.versions or {}).items()))


def as_of(version_as_of: Versions | None = None, timestamp_as_of: Timestamp | None = None) -> AsOf | None:
    """The :class:`AsOf` of the two options (None when neither is given); both at once is an error, as in Delta."""
    if version_as_of is not None and timestamp_as_of is not None:
        raise InvalidArgumentError("give version_as_of or timestamp_as_of, not both (Delta's versionAsOf and "
                                   "timestampAsOf exclude each other)")
    if timestamp_as_of is not None:
        return AsOf(timestamp_ms=parse_timestamp(timestamp_as_of))
    if version_as_of is None:
        return None
    if isinstance(version_as_of, Mapping):
        versions = {_whole(p, "a partition in version_as_of"): _version(v) for p, v in version_as_of.items()}
        if not versions:
            raise InvalidArgumentError("version_as_of is an empty mapping; give {partition: version, ...}")
        return AsOf(versions=versions)
    return AsOf(single_version=_version(version_as_of))


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{what} must be a whole number >= 0, not {shown(value)}")
    return value


def _version(value: Any) -> int:
    return _whole(value, "version_as_of (a Delta version of a partition table)")


def parse_timestamp(value: Timestamp) -> int:
    """``timestamp_as_of`` in epoch milliseconds: a ``datetime`` (naive: UTC), a ``date`` (its midnight UTC), an
    ISO 8601 string (without a zone: UTC), or epoch milliseconds."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"timestamp_as_of must be a datetime, an ISO 8601 string or epoch milliseconds, "
                                   f"not {shown(value)}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"timestamp_as_of in epoch milliseconds must be >= 0, not {value}")
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise InvalidArgumentError(
                f"timestamp_as_of {shown(value)} is not a time: give an ISO 8601 date or date and time such as "
                "2026-11-25, 2026-11-25T08:00:00Z or '2026-11-25 08:00:00+01:00' (no zone: UTC)") from None
        value = parsed
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, date):
        return int(datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp() * 1000)
    raise InvalidArgumentError(f"timestamp_as_of must be a datetime, an ISO 8601 string or epoch milliseconds, "
                               f"not {shown(value)}")


@dataclass(frozen=True)
class CommitTime:
    """One commit's time: ``writer_ms`` as its writer's clock stamped it (commit info ``timestamp``) and
    ``timestamp_ms`` made monotonic by Delta's rule (DeltaHistoryManager's ``monotonizeCommitTimestamps``): never
    earlier than the commit before it plus one millisecond, so a writer whose clock runs behind cannot place a
    later version before an earlier one."""

    version: int
    timestamp_ms: int
    writer_ms: int


def monotonic_times(entries: list[Mapping[str, Any]]) -> list[CommitTime]:
    """The commit times of ``entries`` (``DeltaTable.history()`` entries, in any order), oldest first, each
    adjusted to ``max(its own, the previous adjusted + 1)``. Entries without a timestamp take the previous
    adjusted time + 1 (none: they are left out)."""
    out: list[CommitTime] = []
    previous: int | None = None
    for entry in sorted((e for e in entries if "version" in e), key=lambda e: int(e["version"])):
        ts = entry.get("timestamp")
        own = int(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
        if own is None and previous is None:
            continue
        adjusted = own if previous is None else max(own if own is not None else previous + 1, previous + 1)
        out.append(CommitTime(int(entry["version"]), adjusted, adjusted if own is None else own))
        previous = adjusted
    return out


def commit_times(dt: DeltaTable) -> list[CommitTime]:
    """Every commit of ``dt`` still in its Delta log, oldest first, on monotonic times (:func:`monotonic_times`)."""
    return monotonic_times(commit_infos.history(dt))


def version_at(dt: DeltaTable, timestamp_ms: int, name: str) -> int:
    """The latest version of ``dt`` committed at or before ``timestamp_ms``, by the commits' monotonic times
    (Delta's ``timestampAsOf``: DeltaHistoryManager's ``getActiveCommitAtTime`` over monotonized timestamps).

    Raises :class:`VersionNotAvailableError` for a time before the first commit still in the log."""
    times = commit_times(dt)
    if not times:
        raise VersionNotAvailableError(f"{name} has no commit with a timestamp in its Delta log")
    found = [t.version for t in times if t.timestamp_ms <= timestamp_ms]
    if found:
        return found[-1]
    version, ts = times[0].version, times[0].timestamp_ms
    when = format_timestamp(timestamp_ms)
    if version == 0:
        raise VersionNotAvailableError(f"{name} did not exist at {when} UTC: it was created at "
                                       f"{format_timestamp(ts)} UTC (version 0)")
    raise VersionNotAvailableError(
        f"{name} has no version at {when} UTC any more: the oldest commit left in its Delta log is version "
        f"{version}, at {format_timestamp(ts)} UTC; older commits were cleaned up after the table's "
        f"{delta_retention.LOG_RETENTION}")


def resolve(log: PartitionLog, at: AsOf) -> int:
    """The version of ``log`` that ``at`` names."""
    name = f"{log.topic}-{log.partition}"
    if at.timestamp_ms is not None:
        return version_at(log.table(), at.timestamp_ms, name)
    if at.single_version is not None:
        return at.single_version
    versions = at.versions or {}
    if log.partition not in versions:
        raise InvalidArgumentError(f"version_as_of names no version for partition {log.partition} of {log.topic}")
    return versions[log.partition]


def partitions_read(partitions: list[int], topic: str, at: AsOf | None) -> list[int]:
    """The partitions a read as of ``at`` covers: every one, or those of a ``{partition: version}`` mapping; a
    single version on a topic of several partitions is refused (a version belongs to one partition table)."""
    if at is None or at.timestamp_ms is not None:
        return partitions
    if at.single_version is not None:
        if len(partitions) != 1:
            raise InvalidArgumentError(
                f"version_as_of={at.single_version} names a version of one partition table, and topic {topic!r} "
                f"has {len(partitions)} partitions: give {{partition: version}}, read one partition, or use "
                "timestamp_as_of (each partition at its version of that time)")
        return partitions
    unknown = sorted(set(at.versions or {}) - set(partitions))
    if unknown:
        raise InvalidArgumentError(f"version_as_of names partition(s) {unknown} that topic {topic!r} does not have; "
                                   f"its partitions are 0..{len(partitions) - 1}")
    return sorted(at.versions or {})


def snapshot_as_of(log: PartitionLog, at: AsOf | None) -> LogSnapshot:
    """The snapshot of ``log`` at the version ``at`` names (the latest when None), its data files checked to be
    there: a version VACUUM has emptied raises :class:`VersionNotAvailableError` naming the retention setting."""
    if at is None:
        return log.snapshot()
    return snapshot_at_version(log, resolve(log, at))


def snapshot_at_version(log: PartitionLog, version: int) -> LogSnapshot:
    name = f"{log.topic}-{log.partition}"
    latest = log.table().version()
    if version > latest:
        raise VersionNotAvailableError(f"{name} has no version {version}: its latest version is {latest}")
    try:  # loaded at the version directly: opening the latest first would replay the log twice
        dt = DeltaTable(log.uri, storage_options=log.storage.delta_options, version=version)
    except Exception as e:  # noqa: BLE001 - delta-rs says "not found" in several types
        raise VersionNotAvailableError(
            f"{name} has no version {version} any more: its commit is no longer in the Delta log (cleaned up "
            f"after the table's {delta_retention.LOG_RETENTION}, or by an engine that rewrote the log): "
            f"{str(e).splitlines()[0][:200]}") from None
    snap = snapshot_of(dt, log.topic, log.partition)
    missing = missing_files(log.storage, log.uri, snap)
    if missing:
        raise VersionNotAvailableError(
            f"version {version} of {name} can no longer be read: {len(missing)} of its {len(snap.files)} data "
            f"file(s) were removed by VACUUM (e.g. {missing[0]}). Removed files are kept for the topic's "
            f"file.delete.delay.ms ({snap.config.file_delete_delay_ms} ms now; the Delta table property "
            f"{delta_retention.DELETED_FILE_RETENTION}) after the commit that replaced them; set it longer to "
            "time travel further back")
    return snap


def missing_files(storage: Storage, uri: str, snap: LogSnapshot) -> list[str]:
    """The data files of ``snap`` that are not in the table's directory (one listing)."""
    base = storage.key(uri)
    present = {storage.key(f.location)[len(base):].lstrip("/") for f in storage.list_files(uri)}
    return [unquote(f.path) for f in snap.files if unquote(f.path) not in present]
