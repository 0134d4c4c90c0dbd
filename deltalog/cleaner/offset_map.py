"""Pass 1 of a cleaning pass: the bounded key-hash -> latest-offset map (Kafka's SkimpyOffsetMap).

Kafka stores a 16-byte MD5 of each key and an 8-byte offset, 24 bytes an entry, in a buffer of
``log.cleaner.dedupe.buffer.size / log.cleaner.threads`` bytes filled to at most
``log.cleaner.io.buffer.load.factor``; when the map is full the pass stops mapping and the next pass
continues from there (Kafka's ``Cleaner.buildOffsetMap`` and ``buildOffsetMapForSegment``; the map holds hashes, not keys, so an
entry has a fixed size).

deltalog's map is the same 24 bytes an entry: three numpy arrays (the two 64-bit halves of the 128-bit
key hash, :mod:`deltalog.log.key_hash`, and the latest offset), sorted by hash. It is built by a Spark job
over the dirty section: each task reads the ``offset`` and key-hash columns of a run of files with pyarrow
(the hashes the log wrote at append, :data:`~deltalog.log.record.KEY_HASH_FIELDS`; a file without them has its
``key`` column read and hashed instead) and keeps the latest and first offset of each hash (a sort of the
hashes, :func:`_reduce`), and the driver merges the tasks' partial maps the same way. Pass 2 (:mod:`deltalog.cleaner.recopy`) then needs two things from it:

* for the dirty section, the set of latest offsets, as a bitmap (:mod:`deltalog.cleaner.offset_bitmap`): a dirty
  record survives when it is its key's latest, i.e. when its own offset is in the set, so no dirty key is
  hashed twice;
* for the clean section, the hashes alone: a clean record survives when its key is not in the map.

The map is bounded like Kafka's: at most ``capacity`` entries. When the section holds more distinct keys,
the map covers the section up to (not including) the first occurrence of the ``capacity + 1``-th distinct
key, so every record in the mapped range has its key in the map. That is slightly more generous than
Kafka, which stops at the first record after the map reaches its size even when that record's key is
already mapped; both make progress on every pass, and a map of one entry still converges to the same log.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.cleaner.offset_bitmap import OffsetBitmap
from deltalog.cleaner.task_plan import MIN_TASK_BYTES, FileSlice, plan_runs
from deltalog.cleaner.tasks import load_arrays, parallelism, run_tasks, save_arrays
from deltalog.log import damage
from deltalog.log.key_hash import footer_has_key_hash, key_hashes
from deltalog.log.record import KEY, KEY_HASH_HI, KEY_HASH_LO, OFFSET, PRODUCER_ID, written_by_deltalog
from deltalog.log.transactions import AbortedTxn, aborted_mask, only_markers, wholly_aborted
from deltalog.storage import Storage, join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    # Annotation only: this module runs in Spark's Python workers, whose start-up must not import delta-rs.
    from deltalog.log.delta import DataFile

#: Bytes of one entry: two 64-bit hash halves and a 64-bit offset, as Kafka's 16-byte MD5 and 8-byte offset.
ENTRY_BYTES = 24
#: Records of a pass-1 task at most: it holds ~100 bytes a record at its peak (the three columns read, their
#: concatenation, the sort's packed words and gathers), so ~600 MB. The medium benchmark preset's 10 M dirty records
#: are then two tasks on two cores, one wave (five tasks by bytes took three waves, one of them on one core).
MAP_TASK_RECORDS = 6_000_000


@dataclass(frozen=True)
class MapKeys:
    """The map's key hashes, sorted: what pass 2 tests the clean section's keys against (16 bytes an entry)."""

    hi: np.ndarray  # uint64, ascending (two entries may share a high half: about one map in 10^6 at 5 M keys)
    lo: np.ndarray  # uint64

    def contains(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """A bool mask: which of the hashes ``(hi, lo)`` are in the map.

        The hashes are uniform, so the map's entries are cut into buckets by the top bits of the high half, about
        four entries a bucket (:meth:`_directory`), and each query walks only its own bucket, all queries a step at a
        time: a few neighbouring reads each, where a binary search over the whole map missed the cache at every
        level (65 Ki queries into 8.4 M entries: 1.9 ms against 12.1 ms for a sorted ``searchsorted``)."""
        found = np.zeros(len(hi), dtype=bool)
        if len(self.hi) == 0 or len(hi) == 0:
            return found
        shift, directory = self._directory
        bucket = (np.asarray(hi, dtype=np.uint64) >> shift).astype(np.intp)
        pos = directory[bucket].astype(np.intp)
        end = directory[bucket + 1]
        active = np.flatnonzero(pos < end)
        while len(active):
            at, want = pos[active], hi[active]
            entry = self.hi[at]
            hit = (entry == want) & (self.lo[at] == lo[active])
            found[active[hit]] = True
            # Entries ascend by high half within a bucket: walk on while the entry is not past the query (equal high
            # halves with another low half, about one map in 10^6, are walked over too).
            pos[active] = at + 1
            active = active[~hit & (entry <= want) & (at + 1 < end[active])]
        return found

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the directory: a task builds its own, as cheaply as it would unpickle it."""
        return {k: v for k, v in self.__dict__.items() if k != "_directory"}

    @functools.cached_property
    def _directory(self) -> tuple[np.uint64, np.ndarray]:
        """Where each bucket of entries starts: ``directory[b]`` up to ``directory[b + 1]`` hold the entries whose high
        half's top ``bits`` bits are ``b``. Built once per process that looks keys up (33 ms for 8.4 M entries), 4 bytes
        a bucket, so about one byte an entry beside the map's 16."""
        bits = max(1, len(self.hi).bit_length() - 2)
        shift = np.uint64(64 - bits)
        counts = np.bincount((self.hi >> shift).astype(np.intp), minlength=1 << bits)
        directory = np.zeros((1 << bits) + 1, dtype=np.uint32 if len(self.hi) < 1 << 32 else np.int64)
        np.cumsum(counts, out=directory[1:])
        return shift, directory

    @property
    def nbytes(self) -> int:
        return int(self.hi.nbytes + self.lo.nbytes)


@dataclass
class OffsetMap:
    """The result of pass 1: the map, the range it covers and how full it got.

    ``end_offset`` is exclusive: records in ``[start_offset, end_offset)`` with a key have their key in
    the map, and it becomes the cleaner checkpoint once the pass commits. ``latest`` is the set of the
    map's offsets (the dirty records that survive), over ``[start_offset, end_offset)``.
    """

    start_offset: int
    end_offset: int
    capacity: int
    slots: int
    full: bool
    keys: MapKeys
    offsets: np.ndarray  # int64: the latest offset of each entry, in the order of ``keys``
    latest: OffsetBitmap

    @property
    def entries(self) -> int:
        return len(self.offsets)

    @property
    def utilization(self) -> float:
        """Entries / slots, as Kafka's ``OffsetMap.utilization`` ("Buffer utilization"): a map filled to the
        load factor (0.9 by default) reports 90%, the sign that the map was full (a pass that
        maps less left room)."""
        return self.entries / self.slots if self.slots else 0.0

    @property
    def nbytes(self) -> int:
        """Memory of the map proper: 24 bytes an entry, as Kafka's."""
        return self.keys.nbytes + int(self.offsets.nbytes)


@dataclass(frozen=True)
class _MapTask:
    storage: Storage  # the store's files, opened from the executor (it pickles as its root and options)
    table_uri: str
    start: int
    stop: int
    with_first: bool  # also each key's first offset: needed only when the map may fill up
    spill_dir: str  # where each task leaves its partial map for the driver (a location of the store)
    #: Aborted transactions (producer id, first offset, marker offset): their records never enter the map.
    aborted: tuple[AbortedTxn, ...] = ()


#: A partial map: (hash high halves, low halves, latest offsets, first offsets or None), one entry per hash.
Partial = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]


def build_offset_map(spark: SparkSession, storage: Storage, table_uri: str, files: Sequence[DataFile],
                     start_offset: int, end_offset: int, capacity: int, spill_dir: str, *,
                     slots: int | None = None, aborted: Sequence[AbortedTxn] = ()) -> OffsetMap:
    """Map the keyed records of ``[start_offset, end_offset)`` in ``files`` to the latest offset of each key
    hash, with at most ``capacity`` entries (a full map ends the mapped range early).

    The tasks leave their partial maps as files of arrays (:func:`~deltalog.cleaner.tasks.save_arrays`) in ``spill_dir`` (a location of the store, which the
    driver reads through ``storage`` too: inside the partition table, in the pass's own directory) and return
    only the locations: a few MB a task through Spark's result path (Python worker, JVM, driver) is slow while
    the JVM is cold (docs/performance.md); the driver reads the files directly, then removes them.

    The first offset of each key is gathered only when the section holds more records than ``capacity``
    (from the files' stats), since only then can the map fill up. Records of the ``aborted`` transactions,
    and transaction markers (keyless), are not mapped (Kafka's ``buildOffsetMap`` skips control batches
    and aborted ones); a task reads the ``producer_id`` column only when there are aborted transactions
    and its file has the column.
    """
    aborted = tuple(aborted)
    # A file of markers only, or of one aborted transaction's records only, has nothing to map: its stats say
    # so, and no task opens it (Kafka's buildOffsetMap skips control and aborted batches by their headers).
    section = [f for f in files if f.max_offset >= start_offset and f.min_offset < end_offset
               and not only_markers(f) and not wholly_aborted(f, aborted)]
    may_fill = sum(f.num_records for f in section) > capacity
    hi, lo, latest, first = _merge(_run(spark, _MapTask(storage, table_uri, start_offset, end_offset, may_fill,
                                                         spill_dir, aborted), section))
    full = len(latest) > capacity
    if full:
        assert first is not None
        # The (capacity + 1)-th distinct key to appear ends the mapped range; map again up to there.
        end_offset = int(np.partition(first, capacity)[capacity])
        hi, lo, latest, _ = _merge(_run(spark, _MapTask(storage, table_uri, start_offset, end_offset, False,
                                                        spill_dir, aborted), section))
    return OffsetMap(start_offset, end_offset, capacity, slots if slots is not None else capacity, full,
                     MapKeys(hi, lo), latest,
                     OffsetBitmap.from_offsets(latest, start_offset, end_offset))


def _run(spark: SparkSession, task: _MapTask, files: Sequence[DataFile]) -> list[Partial]:
    wanted = [f for f in files if f.max_offset >= task.start and f.min_offset < task.stop]
    if not wanted:
        return []
    # A task holds its run's offsets and hashes (24 bytes a record) and the sort's working arrays: bound its records.
    records, size = sum(f.num_records for f in wanted), sum(f.size_bytes for f in wanted)
    max_bytes = max(MIN_TASK_BYTES, int(MAP_TASK_RECORDS * size / max(records, 1)))
    runs = [tuple(run) for run in plan_runs(task.storage, task.table_uri, wanted, parallelism(spark),
                                            max_bytes=max_bytes)]
    try:
        spilled = run_tasks(spark, partial(_map_run, task), runs, storage=task.storage, work_dir=task.spill_dir)
        return [_load(task.storage, path) for path in spilled]
    finally:
        task.storage.delete_tree(task.spill_dir)


def _load(storage: Storage, path: str) -> Partial:
    arrays = load_arrays(storage, path)
    return arrays["hi"], arrays["lo"], arrays["latest"], arrays.get("first")


def _map_run(task: _MapTask, run: tuple[FileSlice, ...]) -> str:
    """A Spark task of pass 1: the partial map of one run of file slices, left in the spill directory.

    A file whose footer shows every keyed row's hash written at append (:func:`footer_has_key_hash`) is read for
    its offsets and key-hash columns only: no key is read or hashed. Any other file (written before those columns
    existed, or written by another engine: an OPTIMIZE's merged file, whose hash columns that engine copied and
    may have mangled, :func:`~deltalog.log.record.written_by_deltalog`) has its keys read and hashed, as Kafka's
    ``buildOffsetMapForSegment`` hashes every key it reads."""
    his, los, offsets = [], [], []
    for piece in run:
        full_path = join(task.table_uri, piece.path)
        try:
            with task.storage.open_input(full_path) as f:
                source = pq.ParquetFile(f)
                # hashes another engine's file carries were copied by that engine: recomputed, not trusted
                stored = written_by_deltalog(piece.path) and footer_has_key_hash(source.metadata, piece.row_groups)
                columns = [OFFSET, KEY_HASH_HI, KEY_HASH_LO] if stored else [KEY, OFFSET]
                if task.aborted and PRODUCER_ID in source.schema_arrow.names:
                    columns.append(PRODUCER_ID)
                table = (source.read(columns=columns) if piece.row_groups is None
                         else source.read_row_groups(piece.row_groups, columns=columns))
        except (OSError, pa.ArrowException) as e:
            raise damage.data_file_error(full_path, e) from None
        column = table.column(OFFSET)
        keep = pc.and_(pc.and_(pc.greater_equal(column, task.start), pc.less(column, task.stop)),
                       pc.is_valid(table.column(KEY_HASH_HI if stored else KEY)))
        if PRODUCER_ID in table.column_names:
            hit = aborted_mask(column, table.column(PRODUCER_ID), task.aborted)
            if hit is not None:
                keep = pc.and_(keep, pa.array(~hit))
        if pc.all(keep).as_py() is not True:
            table = table.filter(keep)
        if stored:
            hi, lo = (_uint64(table.column(c)) for c in (KEY_HASH_HI, KEY_HASH_LO))
        else:
            hi, lo = key_hashes(table.column(KEY))
        his.append(hi)
        los.append(lo)
        offsets.append(table.column(OFFSET).to_numpy())
    hi, lo, latest, first = _reduce(np.concatenate(his), np.concatenate(los), np.concatenate(offsets),
                                    task.with_first)
    path = join(task.spill_dir, f"map-{os.urandom(8).hex()}.arrays")
    save_arrays(task.storage, path, hi=hi, lo=lo, latest=latest, **({} if first is None else {"first": first}))
    return path


def _uint64(column: pa.ChunkedArray) -> np.ndarray:
    """A key-hash column without nulls as the ``uint64`` bits it stores."""
    return column.to_numpy().view(np.uint64)


def _reduce(hi: np.ndarray, lo: np.ndarray, offsets: np.ndarray, with_first: bool,
            first: np.ndarray | None = None) -> Partial:
    """One entry per key hash, sorted by the high half: its latest offset (and first, if asked).

    A sort, not a hash group-by: each row's index is packed into the low bits of its high half and the packed
    words sorted as plain ``uint64`` (numpy's SIMD sort: ~10 ms for 2 M words, where Arrow's hash group-by over
    both halves took ~210 ms and an ``argsort`` ~55 ms), so rows of one key end up adjacent and the result comes out
    sorted by the high half, as the driver's merge and :class:`MapKeys` need. The index bits replace the high
    half's low bits only in the sort: each row's own halves are gathered back and compared, and the rare run of
    equal truncated halves that holds two keys is ordered by both halves (:func:`_split_shared_runs`). ``first``,
    when given, holds each input entry's own first offset (merging partial maps); else it is ``offsets``.
    The same function merges the tasks' partial maps on the driver (:func:`_merge`).
    """
    n = len(hi)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return hi.astype(np.uint64), lo.astype(np.uint64), empty, (empty if with_first else None)
    bits = max(1, (n - 1).bit_length())
    mask = np.uint64((1 << bits) - 1)
    packed = (hi.astype(np.uint64, copy=False) & ~mask) | np.arange(n, dtype=np.uint64)
    packed.sort()
    index = (packed & mask).astype(np.intp)
    hs, ls = hi[index], lo[index]
    change = (hs[1:] != hs[:-1]) | (ls[1:] != ls[:-1])
    runs = np.diff(packed >> np.uint64(bits)) != 0
    if np.any(change & ~runs):
        index, hs, ls = _split_shared_runs(index, hs, ls, runs)
        change = (hs[1:] != hs[:-1]) | (ls[1:] != ls[:-1])
    starts = np.flatnonzero(np.concatenate(([True], change)))
    if first is None and bool(np.all(offsets[1:] > offsets[:-1])):
        # A task's rows in offset order (deltalog's own files): each key's rows are in index order, so its latest
        # offset is its last row's and its first its first row's; no gather of every row's offset.
        ends = np.append(starts[1:], n) - 1
        return hs[starts], ls[starts], offsets[index[ends]], (offsets[index[starts]] if with_first else None)
    latest = np.maximum.reduceat(offsets[index], starts)
    firsts = np.minimum.reduceat((offsets if first is None else first)[index], starts) if with_first else None
    return hs[starts], ls[starts], latest, firsts


def _split_shared_runs(index: np.ndarray, hs: np.ndarray, ls: np.ndarray,
                       runs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Order by (high half, low half, index) the runs of equal truncated high halves that hold more than one key
    (a few a sort at most: two of a million keys share their top ~40 bits about once), leaving the rest."""
    starts = np.flatnonzero(np.concatenate(([True], runs)))
    ends = np.append(starts[1:], len(index))
    mixed = (hs[1:] != hs[:-1]) | (ls[1:] != ls[:-1])
    for run in np.unique(np.searchsorted(starts, np.flatnonzero(mixed & ~runs) + 1, side="right") - 1):
        a, b = starts[run], ends[run]
        order = np.lexsort((index[a:b], ls[a:b], hs[a:b]))
        index[a:b], hs[a:b], ls[a:b] = index[a:b][order], hs[a:b][order], ls[a:b][order]
    return index, hs, ls


#: The driver merges the partial maps a range of high halves at a time, about this many entries a range ...
MERGE_RANGE_ENTRIES = 1 << 20
#: ... on this many threads at most (numpy's sorts and gathers release the GIL).
MERGE_THREADS = 4


def _merge(partials: list[Partial]) -> Partial:
    """The tasks' partial maps merged into one, sorted by the high half: the latest (and first) offset of each
    hash over all of them, by the same packed sort as each task's :func:`_reduce`.

    Each partial is sorted by the high half, so it is cut at the same high halves into ranges of about
    :data:`MERGE_RANGE_ENTRIES` entries in all, and the ranges are reduced on threads and put end to end: every entry
    of a hash falls in one range. One reduction of everything kept the driver's other cores idle; ranges on threads
    use them, and their smaller arrays stay in cache (docs/performance.md)."""
    if not partials:
        empty_u, empty_i = np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        return empty_u, empty_u, empty_i, empty_i
    if len(partials) == 1:
        return partials[0]
    with_first = all(p[3] is not None for p in partials)
    ways = max(1, min(256, sum(len(p[0]) for p in partials) // MERGE_RANGE_ENTRIES))
    bounds = np.array([(i << 64) // ways for i in range(1, ways)], dtype=np.uint64)
    cuts = [np.concatenate(([0], np.searchsorted(p[0], bounds), [len(p[0])])) for p in partials]

    def reduce_range(i: int) -> Partial:
        hi, lo, latest = (np.concatenate([p[j][c[i]:c[i + 1]] for p, c in zip(partials, cuts, strict=True)])
                          for j in range(3))
        first = (np.concatenate([p[3][c[i]:c[i + 1]] for p, c in zip(partials, cuts, strict=True)])  # type: ignore[index]
                 if with_first else None)
        return _reduce(hi, lo, latest, with_first, first)

    if ways == 1:
        return reduce_range(0)
    with ThreadPoolExecutor(min(MERGE_THREADS, ways, os.cpu_count() or 1)) as pool:
        ranges = list(pool.map(reduce_range, range(ways)))
    firsts = np.concatenate([r[3] for r in ranges]) if with_first else None  # type: ignore[misc]
    return (np.concatenate([r[0] for r in ranges]), np.concatenate([r[1] for r in ranges]),
            np.concatenate([r[2] for r in ranges]), firsts)
