"""The pieces of a pass, checked against plain Python: the vectorized key hash (against Spark's own
xxhash64), the latest-offset bitmap, the map's hash lookup and partial-map merge (with colliding high
halves forced), the runs of files the tasks get, and segment names after partial passes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import clean_with_small_map
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog import Record, Store
from deltalog.cleaner.offset_bitmap import OffsetBitmap
from deltalog.cleaner.offset_map import MapKeys, _merge, _reduce
from deltalog.cleaner.task_plan import MIN_TASK_BYTES, FileSlice, plan_runs, runs_of
from deltalog.log import delta
from deltalog.log.arrow_records import records_to_table
from deltalog.log.key_hash import SEED_HI, key_hashes, xxh64

TOPIC = "map"


def test_xxh64_equals_sparks_xxhash64_for_every_length(spark):
    from pyspark.sql import functions as F

    rng = np.random.default_rng(7)
    keys = [bytes(rng.integers(0, 256, size=n, dtype=np.uint8)) for n in [*range(0, 80), 95, 96, 97, 255, 256, 257, 1000, 4099]]
    df = spark.createDataFrame([(k,) for k in keys], "key binary")
    expected = np.array([r[0] for r in df.select(F.xxhash64("key")).collect()], dtype=np.int64).view(np.uint64)
    assert SEED_HI == 42  # Spark's seed
    assert np.array_equal(xxh64(pa.array(keys, pa.binary()), 42), expected)
    # Slices and chunked arrays read the same bytes.
    assert np.array_equal(xxh64(pa.array(keys, pa.binary()).slice(3, 40), 42), expected[3:43])
    chunked = pa.chunked_array([pa.array(keys[:10], pa.binary()), pa.array(keys[10:], pa.binary())])
    assert np.array_equal(xxh64(chunked, 42), expected)
    assert np.array_equal(xxh64(pa.array(keys, pa.large_binary()), 42), expected)


def test_the_two_halves_are_independent_hashes():
    keys = pa.array([b"k%d" % i for i in range(10_000)])
    hi, lo = key_hashes(keys)
    assert len(set(hi.tolist())) == len(set(lo.tolist())) == 10_000
    assert not np.array_equal(hi, lo)
    assert np.array_equal(key_hashes(keys)[1], lo)  # deterministic


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 200), st.sets(st.integers(0, 260), max_size=80), st.data())
def test_offset_bitmap_is_a_set_of_offsets(lo, width, offsets, data):
    hi = lo + width
    bitmap = OffsetBitmap.from_offsets(np.array(sorted(offsets), dtype=np.int64), lo, hi)
    inside = {o for o in offsets if lo <= o < hi}
    probe = np.arange(0, 280)
    assert bitmap.contains(probe).tolist() == [int(o) in inside for o in probe]
    assert len(bitmap) == len(inside)
    a = data.draw(st.integers(0, 280))
    b = data.draw(st.integers(a, 300))
    assert bitmap.first_at_or_after(a, b) == min((o for o in inside if a <= o < b), default=None)
    part = bitmap.slice(a, b)
    assert part.contains(probe).tolist() == [int(o) in inside and a <= o < b for o in probe]
    assert len(part) == len({o for o in inside if a <= o < b})  # what pass 2's planner counts as a run's survivors


def test_map_keys_find_keys_whose_high_halves_collide():
    hi = np.array([1, 5, 5, 5, 9], dtype=np.uint64)
    lo = np.array([7, 1, 2, 3, 0], dtype=np.uint64)
    keys = MapKeys(hi, lo)
    q_hi = np.array([5, 5, 5, 5, 1, 1, 9, 4, 10], dtype=np.uint64)
    q_lo = np.array([1, 2, 3, 4, 7, 8, 0, 0, 0], dtype=np.uint64)
    assert keys.contains(q_hi, q_lo).tolist() == [True, True, True, False, True, False, True, False, False]
    distinct = MapKeys(np.array([1, 5, 9], dtype=np.uint64), np.array([7, 2, 0], dtype=np.uint64))
    assert distinct.contains(q_hi, q_lo).tolist() == [False, True, False, False, True, False, True, False, False]
    assert MapKeys(np.zeros(0, np.uint64), np.zeros(0, np.uint64)).contains(q_hi, q_lo).tolist() == [False] * 9


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), max_size=120), st.data())
def test_partial_maps_merge_to_the_latest_and_first_offset_of_every_hash(keys, data):
    n = len(keys)
    hi = np.array([k[0] for k in keys], dtype=np.uint64)
    lo = np.array([k[1] for k in keys], dtype=np.uint64)  # the same high half with several low halves
    offsets = np.arange(n, dtype=np.int64)
    cut = data.draw(st.integers(0, n))
    merged = _merge([_reduce(hi[:cut], lo[:cut], offsets[:cut], True), _reduce(hi[cut:], lo[cut:], offsets[cut:], True)])
    expected: dict[tuple[int, int], list[int]] = {}
    for o, k in enumerate(keys):
        e = expected.setdefault(k, [o, o])
        e[0], e[1] = max(e[0], o), min(e[1], o)
    got = {(int(a), int(b)): [int(x), int(y)] for a, b, x, y in zip(*merged, strict=True)}
    assert got == expected
    assert merged[0].tolist() == sorted(merged[0].tolist())  # by high half, as MapKeys looks them up


def test_partial_maps_merge_by_ranges_of_high_halves_on_threads(monkeypatch):
    """The driver's merge cut into many ranges (here a few entries each, on threads): the latest and first offset of
    every hash over all the partials, sorted by the high half; crowded high halves fall in one range."""
    from deltalog.cleaner import offset_map

    rng = np.random.default_rng(5)
    n = 3_000
    hi = (rng.integers(0, 8, n).astype(np.uint64) << np.uint64(61)) | rng.integers(0, 50, n).astype(np.uint64)
    lo = rng.integers(0, 3, n).astype(np.uint64)
    offsets = np.arange(n, dtype=np.int64)
    partials = [_reduce(hi[a:a + 500], lo[a:a + 500], offsets[a:a + 500], True) for a in range(0, n, 500)]
    monkeypatch.setattr(offset_map, "MERGE_RANGE_ENTRIES", 8)
    ranged = _merge(partials)
    expected: dict[tuple[int, int], tuple[int, int]] = {}
    for h, lw, o in zip(hi.tolist(), lo.tolist(), offsets.tolist(), strict=True):
        e = expected.get((h, lw))
        expected[(h, lw)] = (o, o) if e is None else (max(e[0], o), min(e[1], o))
    got = {(int(a), int(b)): (int(x), int(y)) for a, b, x, y in zip(*ranged, strict=True)}
    assert got == expected
    assert ranged[0].tolist() == sorted(ranged[0].tolist())


@pytest.mark.parametrize("n", [1, 7, 5_000])
def test_map_keys_contains_what_a_set_contains(n):
    """The bucket walk against a Python set: crowded buckets (high halves that share their top bits), equal high
    halves with several low halves, queries below, inside and past every bucket; and the keys pickle without their
    directory and answer the same after."""
    import pickle

    rng = np.random.default_rng(n)
    hi = np.sort((rng.integers(0, 3, n).astype(np.uint64) << np.uint64(62)) | rng.integers(0, 40, n).astype(np.uint64))
    lo = rng.integers(0, 4, n).astype(np.uint64)
    keys = MapKeys(hi, lo)
    q_hi = np.concatenate([hi, (rng.integers(0, 4, 3000).astype(np.uint64) << np.uint64(62))
                           | rng.integers(0, 45, 3000).astype(np.uint64)])
    q_lo = np.concatenate([lo, rng.integers(0, 5, 3000).astype(np.uint64)])
    entries = set(zip(hi.tolist(), lo.tolist(), strict=True))
    expected = [(h, lw) in entries for h, lw in zip(q_hi.tolist(), q_lo.tolist(), strict=True)]
    assert keys.contains(q_hi, q_lo).tolist() == expected
    again = pickle.loads(pickle.dumps(keys))
    assert "_directory" not in again.__dict__
    assert again.contains(q_hi, q_lo).tolist() == expected


@pytest.mark.parametrize("order", ["ascending", "shuffled"])
def test_reduce_keeps_the_latest_and_first_offset_when_hashes_share_their_top_bits(order):
    """The packed sort groups by the high half's top bits: keys that share them (forced here, by high halves that
    differ only in their low bits, and by equal high halves with different low halves) are still told apart, and
    offsets in any order (another engine's file) give the same answer as offsets in order."""
    rng = np.random.default_rng(11)
    n = 20_000
    hi = (rng.integers(0, 4, n).astype(np.uint64) << np.uint64(62)) | rng.integers(0, 64, n).astype(np.uint64)
    lo = rng.integers(0, 3, n).astype(np.uint64)
    offsets = np.arange(n, dtype=np.int64) * 2 + 5
    if order == "shuffled":
        rng.shuffle(offsets)
    got_hi, got_lo, latest, first = _reduce(hi, lo, offsets, True)
    expected: dict[tuple[int, int], tuple[int, int]] = {}
    for h, lw, o in zip(hi.tolist(), lo.tolist(), offsets.tolist(), strict=True):
        e = expected.get((h, lw))
        expected[(h, lw)] = (o, o) if e is None else (max(e[0], o), min(e[1], o))
    got = {(int(a), int(b)): (int(x), int(y)) for a, b, x, y in zip(got_hi, got_lo, latest, first, strict=True)}
    assert got == expected
    assert np.all(got_hi[1:] >= got_hi[:-1])


def _slice(i: int, size: int) -> FileSlice:
    return FileSlice(f"f{i}.parquet", size, 10 * i, 10 * i + 9)


def test_runs_are_contiguous_balanced_and_one_per_core():
    sizes_mib = [11, 11, 11, 11, 11, 11, 11, 5]
    mib = 1 << 20
    slices = [_slice(i, s * mib) for i, s in enumerate(sizes_mib)]
    runs = runs_of(slices, 2)
    assert len(runs) == 2
    assert [s.path for run in runs for s in run] == [s.path for s in slices]  # contiguous, in offset order
    sizes = [sum(s.size_bytes for s in run) for run in runs]
    assert max(sizes) - min(sizes) <= 11 * mib
    small = [_slice(i, s) for i, s in enumerate(sizes_mib)]
    # More runs when a run would pass max_bytes; one when the input is under min_bytes.
    assert len(runs_of(small, 2, min_bytes=1, max_bytes=22)) == 4
    assert len(runs_of(small, 2)) == 1


def _write_log(store: Store, n: int, keys: int, row_group_size: int) -> Store:
    """One closed segment of ``n`` records over ``keys`` keys, written as one data file of many row groups."""
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    log = store.log(TOPIC, 0)
    now = store.clock.now_ms()
    rng = np.random.default_rng(3)
    records = [Record(key=b"k%d" % rng.integers(keys), value=bytes(rng.integers(0, 256, 120, dtype=np.uint8)))
               for _ in range(n)]
    table = records_to_table(records, range(n), [now] * n, 0)
    add = delta.write_data_file(log.storage, log.uri, table, now, row_group_size=row_group_size)
    delta.commit(log.table(), [add], operation="append",
                 txns={delta.TXN_LOG_END_OFFSET: n, delta.TXN_ACTIVE_SEGMENT: n, delta.TXN_ACTIVE_SEGMENT_OPENED: now})
    return store


def test_a_big_file_is_split_by_row_groups_and_cleans_to_the_latest_record_per_key(tmp_path, clock, spark):
    store = _write_log(Store(tmp_path / "s", clock=clock, spark=spark), 80_000, 5_000, 10_000)
    log = store.log(TOPIC, 0)
    files = list(log.snapshot().files)
    assert len(files) == 1 and files[0].size_bytes > MIN_TASK_BYTES
    runs = plan_runs(log.storage, log.uri, files, 2)
    pieces = [p for run in runs for p in run]
    assert len(runs) == 2 and len(pieces) > 1
    assert [g for p in pieces for g in p.row_groups] == list(range(8))  # every row group once, in order
    assert [p.min_offset for p in pieces] == sorted(p.min_offset for p in pieces)
    assert pieces[0].min_offset == 0 and pieces[-1].max_offset == 79_999

    expected = {}
    for r in store.read(TOPIC, 0, 0):
        expected[r.key] = r.offset
    result = store.clean_partition(TOPIC, 0, force=True)
    assert result is not None and result.records_read == 80_000
    got = [(r.offset, r.key) for r in store.read(TOPIC, 0, "earliest")]
    assert got == sorted((o, k) for k, o in expected.items())
    new_files = log.snapshot().files
    assert all(a.max_offset < b.min_offset for a, b in zip(new_files, new_files[1:], strict=False))


def test_partial_passes_name_each_cleaned_segment_by_its_first_offset(tmp_path, clock, spark):
    """Kafka's segment naming (002.log: "offset 2 is the first offset it contains") through passes whose map
    holds two keys, so a pass ends inside a segment, and with the log start moved into a segment."""
    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic(TOPIC, config={"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.01"})
    for batch in ([b"a", b"b", b"a", b"c"], [b"c", b"d", b"b", b"e"]):
        store.append(TOPIC, 0, [Record(key=k, value=b"v") for k in batch])
        store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"z", value=b"1")])
    store.delete_records(TOPIC, 0, 1)
    passes = clean_with_small_map(store, 2)
    assert len(passes) > 1
    segments = store.describe(TOPIC)[0].segments
    for seg in segments:
        if seg.files:
            assert seg.base_offset == seg.first_offset
    assert [(r.offset, r.key) for r in store.read(TOPIC, 0, "earliest")] == [
        (2, b"a"), (4, b"c"), (5, b"d"), (6, b"b"), (7, b"e"), (8, b"z")
    ]
    rows = store.sql(f"SELECT offset, segment FROM {TOPIC}").collect()
    by_offset = {r["offset"]: r["segment"] for r in rows}
    assert {o: by_offset[o] for o in (2, 4, 5, 6, 7)} == {o: s.base_offset for s in segments for o in (2, 4, 5, 6, 7)
                                                       if s.base_offset <= o < s.end_offset}


@pytest.mark.parametrize("capacity", [1, 3])
def test_a_full_map_still_cleans_the_clean_section(tmp_path, clock, spark, capacity):
    """Keys of the clean section superseded by the dirty one go, whatever the map's size."""
    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    store.append(TOPIC, 0, [Record(key=k, value=b"old") for k in (b"a", b"b", b"c", b"d")])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"x", value=b"1")])
    clean_with_small_map(store, capacity)  # the first four are now the clean section
    store.append(TOPIC, 0, [Record(key=k, value=b"new") for k in (b"d", b"b", b"a")])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"y", value=b"1")])
    clean_with_small_map(store, capacity)
    got = [(r.key, r.value) for r in store.read(TOPIC, 0, 0)]
    assert got == [(b"c", b"old"), (b"x", b"1"), (b"d", b"new"), (b"b", b"new"), (b"a", b"new"), (b"y", b"1")]
