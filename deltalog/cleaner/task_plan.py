"""How a pass's input is cut into Spark tasks: runs of consecutive file slices, one run a task.

Both passes of a cleaning pass give each Spark task one contiguous run of offsets, so a task's output is
in offset order and never overlaps another task's. A run is made of :class:`FileSlice` s: whole data
files, or, for a file bigger than a task's share, consecutive row groups of it (a cleaned segment can be
a 1 GiB file of several row groups; read whole, it was one task while the other cores idled). Row-group
sizes and offset ranges come from the file's Parquet footer; a file with one row group, or without
offset statistics, stays whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from deltalog.log.record import OFFSET
from deltalog.storage import Storage, join

if TYPE_CHECKING:
    # Annotation only: this module runs in Spark's Python workers, whose start-up must not import delta-rs.
    from deltalog.log.delta import DataFile

#: Bounds of a task's share of the input: at least this much (fewer, bigger tasks on small inputs) ...
MIN_TASK_BYTES = 8 << 20
#: ... and at most this much (more tasks than cores on big inputs, so a task's memory stays bounded). Callers whose
#: tasks hold less than their input (pass 2 streams a row group at a time) give their own bound.
MAX_TASK_BYTES = 256 << 20


@dataclass(frozen=True)
class FileSlice:
    """A data file, or consecutive row groups of it, with its size and offset range."""

    path: str  # relative to the table
    size_bytes: int
    min_offset: int
    max_offset: int
    row_groups: tuple[int, ...] | None = None  # None: the whole file


def plan_runs(storage: Storage, table_uri: str, files: Sequence[DataFile], cores: int,
              min_bytes: int = MIN_TASK_BYTES, max_bytes: int = MAX_TASK_BYTES,
              cost: Callable[[FileSlice], float] | None = None) -> list[list[FileSlice]]:
    """``files`` (in offset order) as runs of slices, one Spark task each (see :func:`runs_of`)."""
    if not files:
        return []
    total = sum(f.size_bytes for f in files)
    # No slice bigger than a task's share; with a cost to balance, an eighth of it, so the cut can fall inside a big file
    # (by bytes alone, runs of whole files balance, and no footer is read to split one).
    share = min(max_bytes, max(min_bytes, total // max((1 if cost is None else 8) * cores, 1)))
    slices: list[FileSlice] = []
    for f in files:
        slices.extend(_split(storage, table_uri, f, share) if f.size_bytes > share else [_whole(f)])
    return runs_of(slices, cores, min_bytes, max_bytes, cost)


def runs_of(slices: Sequence[FileSlice], cores: int, min_bytes: int = MIN_TASK_BYTES,
            max_bytes: int = MAX_TASK_BYTES, cost: Callable[[FileSlice], float] | None = None) -> list[list[FileSlice]]:
    """``slices`` (in offset order) cut into runs of consecutive slices.

    As many runs as the session has cores (one wave of tasks: a third task on two cores doubled the time of a pass 1
    on the small benchmark preset), more when a run would exceed ``max_bytes`` (then a whole number of waves: 5 runs
    on 2 cores left one core idle for the last run's time, 6 do not), fewer when one would stay under ``min_bytes``.
    Runs are balanced by ``cost`` (default: bytes; a slice goes to the run its middle falls in): pass 2 weighs a
    slice by the records it will write too, which are not spread evenly over the log.
    """
    if not slices:
        return []
    cores = max(cores, 1)
    total_bytes = max(sum(s.size_bytes for s in slices), 1)
    n = max(cores, -(-total_bytes // max_bytes))
    n = -(-n // cores) * cores
    n = max(1, min(n, -(-total_bytes // min_bytes), len(slices)))
    weights = [float(cost(s)) if cost is not None else float(s.size_bytes) for s in slices]
    total = max(sum(weights), 1e-9)
    runs: list[list[FileSlice]] = [[] for _ in range(n)]
    done = 0.0
    for s, w in zip(slices, weights, strict=True):
        runs[min(n - 1, int((done + w / 2) * n / total))].append(s)
        done += w
    return [run for run in runs if run]


def _whole(f: DataFile) -> FileSlice:
    return FileSlice(f.path, f.size_bytes, f.min_offset, f.max_offset)


def _split(storage: Storage, table_uri: str, f: DataFile, share: int) -> list[FileSlice]:
    """``f`` as slices of consecutive row groups of about ``share`` bytes each (whole if it cannot be split)."""
    try:
        with storage.open_input(join(table_uri, f.path)) as source:
            meta = pq.read_metadata(source)
    except Exception:  # noqa: BLE001 - a damaged footer: the task reading the file reports it, naming the file
        return [_whole(f)]
    if meta.num_row_groups < 2:
        return [_whole(f)]
    column = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == OFFSET), None)
    groups = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        stats = rg.column(column).statistics if column is not None else None
        if stats is None or not stats.has_min_max:
            return [_whole(f)]
        size = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))  # bytes on disk
        groups.append((i, size, int(stats.min), int(stats.max)))
    out: list[FileSlice] = []
    current: list[tuple[int, int, int, int]] = []
    for g in groups:
        if current and sum(c[1] for c in current) + g[1] > share:
            out.append(_slice(f.path, current))
            current = []
        current.append(g)
    out.append(_slice(f.path, current))
    # The footer's sizes leave out the footer itself: scale them to the file's size, so runs balance by it.
    scale = f.size_bytes / max(sum(s.size_bytes for s in out), 1)
    return [FileSlice(s.path, int(s.size_bytes * scale), s.min_offset, s.max_offset, s.row_groups) for s in out]


def _slice(path: str, groups: list[tuple[int, int, int, int]]) -> FileSlice:
    return FileSlice(path, sum(g[1] for g in groups), min(g[2] for g in groups), max(g[3] for g in groups),
                     tuple(g[0] for g in groups))
