"""Pass 2 decides each row group from its offset, key, horizon and producer columns before it reads the rest: a row
group where no record survives is skipped without its values ever being decoded, and its drops are still counted as
Kafka's cleaner log line counts them. These run a pass-2 task's body (``recopy_chunk``) on real data files, in this
process, against the whole-file decision (every column of the file read as one batch, then filtered)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog.cleaner.offset_bitmap import OffsetBitmap
from deltalog.cleaner.recopy import RecopyChunk, RecopyCounts, RecopyParams, _filter, recopy_chunk
from deltalog.cleaner.task_plan import FileSlice
from deltalog.errors import CorruptLogError
from deltalog.log import delta
from deltalog.log.record import RECORD_SCHEMA, VALUE, conform
from deltalog.storage import Storage

NOW = 1_700_000_000_000
HORIZON = NOW + 86_400_000
SEGMENT = 0
GROUP = 4  # rows per row group of the test files


def write_file(tmp_path, rows: list[tuple[bytes | None, bytes | None]], first: int = 0) -> tuple[Storage, str, str]:
    """``rows`` (key, value) at offsets ``first``.. as one data file of row groups of :data:`GROUP` rows."""
    storage = Storage(str(tmp_path))
    n = len(rows)
    table = conform(pa.table({
        "offset": pa.array(np.arange(first, first + n), pa.int64()),
        "key": pa.array([k for k, _ in rows], pa.binary()),
        "value": pa.array([v for _, v in rows], pa.binary()),
        "timestamp_ms": pa.array(np.full(n, NOW - 1000), pa.int64()),
        "segment": pa.array(np.full(n, SEGMENT), pa.int64()),
    }).cast(pa.schema([RECORD_SCHEMA.field(c) for c in ("offset", "key", "value", "timestamp_ms", "segment")])))
    uri = os.path.join(storage.root, "t")
    add = delta.write_data_file(storage, uri, table, NOW, row_group_size=GROUP)
    return storage, uri, add.path


def latest_offsets(rows: list[tuple[bytes | None, bytes | None]], first: int = 0) -> np.ndarray:
    latest: dict[bytes, int] = {}
    for i, (k, _) in enumerate(rows):
        if k is not None:
            latest[k] = first + i
    return np.array(sorted(latest.values()), dtype=np.int64)


def run(storage: Storage, uri: str, path: str, rows, first: int = 0, log_start: int = 0):
    n = len(rows)
    end = first + n
    params = RecopyParams(storage, uri, "cleaned-test", log_start, first, end, NOW, HORIZON)
    latest = OffsetBitmap.from_offsets(latest_offsets(rows, first), first, end)
    chunk = RecopyChunk(((FileSlice(path, 1, first, end - 1), SEGMENT),), latest, needs_keys=False)
    out = recopy_chunk(params, chunk)
    kept = pa.concat_tables([pq.read_table(os.path.join(uri, f)) for f in out.files]) \
        if out.files else RECORD_SCHEMA.empty_table()
    # The whole-file decision: every column read as one batch, decided and filtered at once.
    whole = RecopyCounts()
    table = conform(pq.read_table(os.path.join(uri, path)))
    expected = _filter(table, params.rule(latest, None), params, SEGMENT, whole)
    return out, kept, whole, expected


def corrupt_column_chunk(file: str, row_group: int, column: str) -> None:
    """Overwrite one column chunk's bytes (page headers included) so that decoding it fails."""
    meta = pq.read_metadata(file)
    j = next(j for j in range(meta.num_columns) if meta.schema.column(j).path == column)
    chunk = meta.row_group(row_group).column(j)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    with open(file, "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * chunk.total_compressed_size)


# Row group 0 (offsets 0-3) is wholly superseded by row group 1, a tombstone among it; groups 1 and 2 keep records.
SUPERSEDED_FIRST = [(b"a", b"1"), (b"b", b"2"), (b"c", None), (b"d", b"4"),
                    (b"a", b"5"), (b"b", b"6"), (b"c", b"7"), (b"e", None),
                    (b"d", b"9"), (b"f", b"10"), (b"g", None), (b"h", b"12")]


def test_a_row_group_with_no_survivor_is_counted_without_its_values(tmp_path):
    storage, uri, path = write_file(tmp_path, SUPERSEDED_FIRST)
    file = os.path.join(uri, path)
    assert pq.read_metadata(file).num_row_groups == 3
    out, kept, whole, expected = run(storage, uri, path, SUPERSEDED_FIRST)
    assert out.counts == whole
    assert kept.column("offset").to_pylist() == expected.column("offset").to_pylist() == [4, 5, 6, 7, 8, 9, 10, 11]
    assert kept.column("value").equals(expected.column("value"))
    assert kept.column("delete_horizon_ms").to_pylist() == [None, None, None, HORIZON, None, None, HORIZON, None]
    assert out.counts.tombstones_removed == 1 and out.counts.records_read == 12 and out.counts.records_written == 8

    # Proof that the first group's values are never decoded: with its value chunk destroyed, the pass is unchanged.
    corrupt_column_chunk(file, 0, VALUE)
    with pytest.raises(OSError):
        pq.read_table(file)
    again, kept_again, _, _ = run_without_oracle(storage, uri, path, SUPERSEDED_FIRST)
    assert again.counts == out.counts
    assert kept_again.equals(kept)


def run_without_oracle(storage, uri, path, rows):
    n = len(rows)
    params = RecopyParams(storage, uri, "cleaned-again", 0, 0, n, NOW, HORIZON)
    latest = OffsetBitmap.from_offsets(latest_offsets(rows), 0, n)
    out = recopy_chunk(params, RecopyChunk(((FileSlice(path, 1, 0, n - 1), SEGMENT),), latest, needs_keys=False))
    kept = pa.concat_tables([pq.read_table(os.path.join(uri, f)) for f in out.files])
    return out, kept, None, None


def test_a_dropped_row_group_with_a_keyless_record_is_read_whole_to_count_its_tombstones(tmp_path):
    """A keyless record's null value is not a removed tombstone: the footer's null count is not the answer, so the
    row group's values are read after all (and the figures match the whole-file decision)."""
    rows = [(None, None), (b"b", b"2"), (b"c", None), (b"d", b"4"),
            (b"b", b"5"), (b"c", b"6"), (b"d", b"7"), (b"e", b"8")]
    storage, uri, path = write_file(tmp_path, rows)
    out, kept, whole, expected = run(storage, uri, path, rows)
    assert out.counts == whole
    assert out.counts.keyless_dropped == 1 and out.counts.tombstones_removed == 1
    assert kept.column("offset").to_pylist() == expected.column("offset").to_pylist() == [4, 5, 6, 7]
    corrupt_column_chunk(os.path.join(uri, path), 0, VALUE)
    with pytest.raises(CorruptLogError, match=path):
        run_without_oracle(storage, uri, path, rows)


def test_row_groups_below_the_log_start_are_skipped_and_not_counted(tmp_path):
    storage, uri, path = write_file(tmp_path, SUPERSEDED_FIRST)
    out, kept, whole, expected = run(storage, uri, path, SUPERSEDED_FIRST, log_start=6)
    assert out.counts == whole
    assert out.counts.records_read == 6
    assert kept.column("offset").to_pylist() == expected.column("offset").to_pylist() == [6, 7, 8, 9, 10, 11]


def test_random_rows_match_the_whole_file_decision(tmp_path):
    """Many row groups, a few keys (so whole groups are superseded), tombstones and keyless records."""
    rng = np.random.default_rng(3)
    n = 400
    keys = rng.integers(0, 12, n)
    rows = [(None if k == 11 else b"k%d" % k, None if rng.random() < 0.2 else b"v%d" % i)
            for i, k in enumerate(keys)]
    storage, uri, path = write_file(tmp_path, rows, first=1000)
    out, kept, whole, expected = run(storage, uri, path, rows, first=1000, log_start=1050)
    assert out.counts == whole
    assert kept.select(["offset", "key", "value", "delete_horizon_ms"]).equals(
        expected.select(["offset", "key", "value", "delete_horizon_ms"]))


def test_a_row_group_bigger_than_a_batch_is_read_a_batch_at_a_time(tmp_path, monkeypatch):
    """Another engine's file may hold one big row group: it is read in batches of every column (memory bounded),
    decided batch by batch, with the same result."""
    from deltalog.cleaner import recopy

    monkeypatch.setattr(recopy, "BATCH_ROWS", 5)
    rows = SUPERSEDED_FIRST
    storage = Storage(str(tmp_path))
    uri = os.path.join(storage.root, "t")
    table = conform(pa.table({
        "offset": pa.array(np.arange(len(rows)), pa.int64()),
        "key": pa.array([k for k, _ in rows], pa.binary()),
        "value": pa.array([v for _, v in rows], pa.binary()),
        "timestamp_ms": pa.array(np.full(len(rows), NOW - 1000), pa.int64()),
        "segment": pa.array(np.full(len(rows), SEGMENT), pa.int64()),
    }))
    path = delta.write_data_file(storage, uri, table, NOW, row_group_size=len(rows)).path
    assert pq.read_metadata(os.path.join(uri, path)).num_row_groups == 1
    out, kept, whole, expected = run(storage, uri, path, rows)
    assert out.counts == whole
    assert kept.column("offset").to_pylist() == expected.column("offset").to_pylist() == [4, 5, 6, 7, 8, 9, 10, 11]
