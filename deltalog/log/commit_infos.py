"""A Delta table's commit infos with the versions they belong to.

delta-rs 1.6's ``DeltaTable.history(limit)`` reads the commits from ``max(0, v - limit + 1)`` up to the newest
commit in the log, not up to the handle's version ``v``, yet numbers them downwards from ``v``: when another
writer committed after the handle was loaded (another engine's OPTIMIZE or DELETE, a producer in another process),
every entry carries a version too low, newer commits come back in place of the ones asked for, and those asked for
are dropped as older. A check of other engines' commits then skips a DELETE for good, and the version a commit of
deltalog's "landed as" may be another writer's. Delta's own ``DeltaHistoryManager`` lists commits by their file
names, which cannot disagree; :func:`history` gives delta-rs's entries the versions of their files again.
"""

from __future__ import annotations

from typing import Any

#: How many times the newest version is read again when commits keep landing during a read of the history.
ATTEMPTS = 5


def _newest(dt: Any) -> int:
    return int(dt._table.get_latest_version())  # delta-rs 1.6 exposes it on the raw table only


def history(dt: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """``dt.history(limit)`` (newest first) with each entry's ``version`` that of its commit file, and only the
    commits at or before ``dt``'s version (at most ``limit`` of them)."""
    version = dt.version()
    entries: list[dict[str, Any]] = dt.history(limit)
    if _newest(dt) == version:  # no commit past the handle's existed during the read: numbered from it (one listing)
        for i, e in enumerate(entries):
            e["version"] = version - i
        return entries if limit is None else entries[:limit]
    for _ in range(ATTEMPTS):
        newest = _newest(dt)
        entries = dt.history(limit)
        if _newest(dt) == newest:  # no commit landed during the read: entries[0] is the newest's
            for i, e in enumerate(entries):
                e["version"] = newest - i
            break
    else:  # commits kept landing: number from the first version read (exact while the log keeps its oldest)
        start = 0 if limit is None else max(0, version - limit + 1)
        for i, e in enumerate(entries):
            e["version"] = start + len(entries) - 1 - i
    kept = [e for e in entries if e["version"] <= version]
    return kept if limit is None else kept[:limit]
