"""Offsets served twice: an offset held by more than one row of a partition's current version, found and named.

Kafka assigns every offset once, and a log segment never holds one twice (``LogSegment`` appends only past the log
end, the cleaner only drops records). A partition table could come to hold an offset twice when a commit that
removed files landed beside another engine's OPTIMIZE of the same files: delta-rs accepts such a stale removal
when the OPTIMIZE's removes carry ``dataChange`` false, which leaves the merged file and the commit's new files
both in the table (deltalog's commits check their removes since, see :func:`deltalog.log.delta.commit`; a table
damaged before that, or by another engine's write, still holds them). Every reader then serves those records
twice, and a cleaning pass keeps both copies (both carry the key's latest offset).

Finding them stays cheap: the files' min/max offset statistics first (:func:`suspects`: files whose offset
ranges overlap, and a file holding more rows than its range has offsets), then only the ``offset`` column of
those files is read (:func:`find`). A partition in deltalog's own layout has no overlapping files, so the check
reads no data there. :meth:`~deltalog.log.partition_log.PartitionLog.repair_duplicates` keeps one copy of each
offset; the cleaner runs it before a pass.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deltalog.log.data_file import DataFile
from deltalog.log.record import OFFSET
from deltalog.storage import Storage, join

#: Offsets a message names before it says "and N more".
SHOWN = 10
#: What repairs it: a cleaning pass runs the repair first (``store.clean``, ``deltalog clean``, the job).
FIX = "the next clean repairs it (store.clean(), 'deltalog clean' or the cleaner job keep one copy of each offset)"


@dataclass(frozen=True)
class DuplicatedOffsets:
    """The offsets a partition's current version holds more than once, and the files they are in."""

    topic: str
    partition: int
    version: int
    count: int  # offsets held more than once
    extra_rows: int  # rows beyond one per offset
    offsets: tuple[int, ...]  # the first few of them
    files: tuple[str, ...]  # the files holding them (relative paths)

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def problem(self) -> str:
        shown = ", ".join(map(str, self.offsets)) + (f" and {self.count - len(self.offsets)} more"
                                                     if self.count > len(self.offsets) else "")
        return (f"serves {self.count} offset(s) twice at version {self.version} ({self.extra_rows} extra row(s); "
                f"offsets {shown}), in {len(self.files)} file(s) whose offsets overlap")

    def message(self) -> str:
        return f"partition {self.partition_name} {self.problem()}; {FIX}"


def suspects(files: Sequence[DataFile]) -> list[list[DataFile]]:
    """Groups of files that may hold an offset twice, from their stats alone: files whose offset ranges overlap
    (transitively), and a file with more rows than offsets in its range. Every other file cannot."""
    ordered = sorted({f.path: f for f in files}.values(), key=lambda f: (f.min_offset, f.max_offset))
    groups: list[list[DataFile]] = []
    current: list[DataFile] = []
    end = -1
    for f in ordered:
        if current and f.min_offset <= end:
            current.append(f)
            end = max(end, f.max_offset)
        else:
            if current:
                groups.append(current)
            current, end = [f], f.max_offset
    if current:
        groups.append(current)
    return [g for g in groups if len(g) > 1 or g[0].num_records > g[0].max_offset - g[0].min_offset + 1]


def find(storage: Storage, uri: str, topic: str, partition: int, version: int, files: Sequence[DataFile],
         log_start_offset: int = 0) -> DuplicatedOffsets | None:
    """The offsets at or above ``log_start_offset`` that ``files`` (a version's) hold more than once, or None;
    reads the ``offset`` column of the :func:`suspects` only."""
    groups = suspects(files)
    if not groups:
        return None
    count = extra = 0
    shown: list[int] = []
    holding: list[str] = []
    for group in groups:
        offsets, counts, by_file = _held_twice(storage, uri, group)
        twice = offsets >= log_start_offset
        if not twice.any():
            continue
        dup = offsets[twice]
        count += int(twice.sum())
        extra += int((counts[twice] - 1).sum())
        shown.extend(int(o) for o in dup[:SHOWN - len(shown)])
        holding.extend(path for path, held in by_file if np.isin(held, dup).any())
    if not count:
        return None
    return DuplicatedOffsets(topic, partition, version, count, extra, tuple(shown[:SHOWN]), tuple(holding))


#: Groups of files already read: a Delta data file never changes, so a group's answer never goes stale (a
#: partition another engine Z-ordered keeps overlapping files until its next clean lays them out again).
_cache: dict[tuple[str, tuple[str, ...]], tuple[np.ndarray, np.ndarray, tuple[tuple[str, np.ndarray], ...]]] = {}
_cache_lock = threading.Lock()
CACHE_GROUPS = 1024


def _held_twice(storage: Storage, uri: str, group: Sequence[DataFile]
                ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[str, np.ndarray], ...]]:
    """The offsets ``group``'s files hold more than once, how many times each, and each file's of them."""
    key = (uri, tuple(sorted(f.path for f in group)))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    columns = [storage.parquet_file(join(uri, f.path)).read(columns=[OFFSET]).column(OFFSET).to_numpy()
               for f in group]
    offsets, counts = np.unique(np.concatenate(columns), return_counts=True)
    twice = counts > 1
    dup = offsets[twice]
    answer = (dup, counts[twice], tuple((f.path, col[np.isin(col, dup)]) for f, col in zip(group, columns, strict=True)))
    with _cache_lock:
        if len(_cache) >= CACHE_GROUPS:
            _cache.clear()
        _cache[key] = answer
    return answer

