"""The benchmark's own correctness check: a fast wrong answer must fail the run, not win it.

The expected survivors are computed independently of deltalog (a pyarrow group-by over the uncleaned
files: the record with the highest offset of each key), and the cleaned table is read independently too
(its live files from delta-rs, read with pyarrow through the store's storage layer, so a store on S3 is
checked the same way).

Both run in bounded memory, so the check holds at the ``large`` preset too: the group-by folds a few files at a
time into the latest offset per key (memory follows the keys, not the records), the survivors are one flag per
offset, and the comparison streams both sides in offset order, a batch at a time, never a whole table.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from deltalog.log.partition_log import PartitionLog
from deltalog.log.record import KEY, OFFSET, VALUE
from deltalog.storage import join

COLUMNS = [OFFSET, KEY, VALUE]


class BenchmarkFailure(AssertionError):
    """An output of the benchmark is wrong; the run stops and no report is written."""


#: Rows of key and offset columns folded into the running latest-offset-per-key at a time.
FOLD_ROWS = 8_000_000
#: Rows a batch when the survivors are streamed.
BATCH_ROWS = 256 * 1024


@dataclass
class Expected:
    """The latest record of every key in ``paths`` (uncleaned files, in offset order): a flag per offset, and
    the counts. The records themselves are read back from ``paths`` when compared (:meth:`batches`)."""

    paths: list[str]
    #: ``keep[o]``: offset ``o`` holds the latest record of its key.
    keep: np.ndarray
    num_rows: int
    #: Survivors that are not tombstones (what a current-state table holds).
    live_keys: int

    @property
    def offsets(self) -> np.ndarray:
        """The survivors' offsets, ascending."""
        return np.flatnonzero(self.keep)

    def batches(self, columns: list[str] = COLUMNS) -> Iterator[pa.Table]:
        """The survivors' ``columns`` in offset order, a batch at a time."""
        for path in self.paths:
            for batch in pq.ParquetFile(path).iter_batches(BATCH_ROWS, columns=_with_offset(columns)):
                part = pa.Table.from_batches([batch])
                yield part.filter(pa.array(self.keep[part.column(OFFSET).to_numpy()])).select(columns)

    def table(self, columns: list[str] = COLUMNS) -> pa.Table:
        """The survivors as one table (for small logs: tests, not the benchmark's check)."""
        return pa.concat_tables(self.batches(columns))


def _with_offset(columns: list[str]) -> list[str]:
    return columns if OFFSET in columns else [OFFSET, *columns]


def expected_survivors(paths: list[str]) -> Expected:
    """The latest record of every key in ``paths``: the highest offset of each key by a pyarrow group-by, folded
    over groups of files of about :data:`FOLD_ROWS` records (the running result, one row per key, joins each
    group), then a count of the survivors' tombstones from their value column, a batch at a time."""
    latest: pa.Table | None = None
    group: list[str] = []
    rows = 0

    def fold() -> None:
        nonlocal latest, group, rows
        parts = [pq.read_table(group, columns=[KEY, OFFSET])]
        if latest is not None:
            parts.append(latest)
        latest = (pa.concat_tables(parts, promote_options="permissive").group_by(KEY).aggregate([(OFFSET, "max")])
                  .rename_columns({f"{OFFSET}_max": OFFSET}).select([KEY, OFFSET]))
        group, rows = [], 0

    for path in paths:
        group.append(path)
        rows += pq.read_metadata(path).num_rows
        if rows >= FOLD_ROWS:
            fold()
    if group:
        fold()
    if latest is None or latest.num_rows == 0:
        return Expected(list(paths), np.zeros(0, dtype=bool), 0, 0)
    offsets = latest.column(OFFSET).to_numpy()
    keep = np.zeros(int(offsets.max()) + 1, dtype=bool)
    keep[offsets] = True
    expected = Expected(list(paths), keep, len(offsets), 0)
    expected.live_keys = expected.num_rows - sum(b.column(VALUE).null_count for b in expected.batches([VALUE]))
    return expected


def check_offsets(paths: str | list[str], expected: Expected, who: str) -> None:
    """The Parquet output of another engine's dedupe (``paths``) keeps exactly the expected survivors' offsets, the
    pass's (which :func:`check_survivors` holds to the same expectation): the same records, not only as many."""
    got = np.sort(pq.read_table(paths, columns=[OFFSET]).column(OFFSET).to_numpy())
    if len(got) != expected.num_rows:
        raise BenchmarkFailure(f"{who} kept {len(got)} records, the pass {expected.num_rows}")
    if not np.array_equal(got, expected.offsets):
        first = int(np.flatnonzero(got != expected.offsets)[0])
        raise BenchmarkFailure(f"{who} kept other offsets than the pass (the latest record of each key): offset "
                               f"{int(got[first])} where the pass keeps {int(expected.offsets[first])}")


def check_survivors(log: PartitionLog, expected: Expected) -> None:
    """The cleaned partition holds exactly ``expected`` (same offsets, keys and values), and its files,
    in the snapshot's offset order, hold ascending offsets (the cleaner never reorders). Files are read
    through the partition's own storage, so a store on S3 is checked like one on a disk. The files are compared a
    batch at a time, in the order of their first offsets, against the survivors streamed from the uncleaned files."""
    live = pa.table(DeltaTable(log.uri, storage_options=log.storage.delta_options)
                    .get_add_actions(flatten=True)).column("path").to_pylist()  # delta-rs's view, not deltalog's
    spans = []
    for p in live:
        offsets = _read(log, p, [OFFSET]).column(OFFSET).to_numpy()
        if len(offsets):
            spans.append((int(offsets[0]), int(offsets[-1]), len(offsets), p))
    spans.sort()
    got_rows = sum(s[2] for s in spans)
    if got_rows != expected.num_rows:
        raise BenchmarkFailure(f"the cleaned partition holds {got_rows} records, expected {expected.num_rows}")
    for (_, last, _, p), (first, _, _, q) in zip(spans, spans[1:], strict=False):
        if first <= last:
            raise BenchmarkFailure(f"{p} and {q} of the cleaned partition overlap in offsets")
    mismatch = _first_difference(_batches(log, [s[3] for s in spans]), expected.batches())
    if mismatch is not None:
        raise BenchmarkFailure(f"the cleaned partition's {mismatch} column differs from the latest record per key")
    last = -1
    for f in log.snapshot().files:
        offsets = _read(log, f.path, [OFFSET]).column(OFFSET).to_numpy()
        if len(offsets) == 0:
            continue
        if offsets[0] <= last or (len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all()):
            raise BenchmarkFailure(f"{f.path} breaks the offset order of the cleaned partition")
        last = int(offsets[-1])


def _batches(log: PartitionLog, paths: list[str]) -> Iterator[pa.Table]:
    for p in paths:
        with log.storage.open_input(join(log.uri, p)) as f:
            for batch in pq.ParquetFile(f).iter_batches(BATCH_ROWS, columns=COLUMNS):
                yield pa.Table.from_batches([batch])


def _first_difference(got: Iterable[pa.Table], want: Iterable[pa.Table]) -> str | None:
    """The first of :data:`COLUMNS` in which two streams of tables differ (row for row, whatever their batch
    boundaries), or None; the row counts are checked before."""
    got_it, want_it = iter(got), iter(want)
    a = b = None
    while True:
        while a is None or a.num_rows == 0:
            a = next(got_it, None)
            if a is None:
                break
        while b is None or b.num_rows == 0:
            b = next(want_it, None)
            if b is None:
                break
        if a is None or b is None:
            return None if a is None and b is None else OFFSET
        n = min(a.num_rows, b.num_rows)
        for col in COLUMNS:
            if not a.column(col).slice(0, n).equals(b.column(col).slice(0, n)):
                return col
        a, b = a.slice(n), b.slice(n)


def _read(log: PartitionLog, path: str, columns: list[str]) -> pa.Table:
    with log.storage.open_input(join(log.uri, path)) as f:
        return pq.ParquetFile(f).read(columns=columns)


def parquet_rows(directory: str) -> int:
    """Rows in every Parquet file under ``directory`` (from the footers)."""
    total = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            if name.endswith(".parquet"):
                total += pq.read_metadata(os.path.join(root, name)).num_rows
    return total
