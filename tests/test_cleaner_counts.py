"""The figures of a pass (records read/written, tombstones stamped/removed, keyless dropped) against a
pure-Python count over the partition's rows before the pass: tombstones stamped then removed, keyless
records next to tombstones, a map that fills up inside a file, and a log start inside a file."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from conftest import map_slots_for

from deltalog import Record, Store

TOPIC = "counts"
DAY = 24 * 3600 * 1000


def expected_figures(snap, uri: str, end: int, now: int) -> dict[str, int]:
    """Kafka's shouldRetainRecord over the rows of the segments a pass recopies, counted in Python."""
    first_dirty = first_dirty_offset(snap)
    segments = [s for s in snap.segments if not s.is_active and s.files and s.base_offset < end]
    rows = []
    for s in segments:
        for f in s.files:
            rows += pq.read_table(os.path.join(uri, f.path)).to_pylist()
    rows = [r for r in rows if r["offset"] >= snap.log_start_offset]
    latest: dict[bytes, int] = {}
    for f in snap.files:
        for r in pq.read_table(os.path.join(uri, f.path), columns=["offset", "key"]).to_pylist():
            if r["key"] is not None and first_dirty <= r["offset"] < end:
                latest[r["key"]] = max(latest.get(r["key"], -1), r["offset"])
    figures = dict(records_read=len(rows), records_written=0, tombstones_stamped=0, tombstones_removed=0,
                   keyless_dropped=0)
    for r in rows:
        mapped = r["offset"] < end
        if not mapped:  # kept as it is, but a tombstone in a recopied segment gets its horizon (Kafka's filterTo)
            figures["records_written"] += 1
            figures["tombstones_stamped"] += r["value"] is None and r["delete_horizon_ms"] is None
            continue
        if r["key"] is None:
            figures["keyless_dropped"] += 1
            continue
        is_latest = r["offset"] >= latest.get(r["key"], -1)
        tomb = r["value"] is None
        expired = tomb and r["delete_horizon_ms"] is not None and r["delete_horizon_ms"] <= now
        if is_latest and not expired:
            figures["records_written"] += 1
            figures["tombstones_stamped"] += tomb and r["delete_horizon_ms"] is None
        elif tomb:
            figures["tombstones_removed"] += 1
    return figures


def first_dirty_offset(snap) -> int:
    from deltalog.cleaner.log_to_clean import LogToClean

    return LogToClean.of(snap, 0).first_dirty_offset


def clean_and_compare(store: Store, clock, map_entries: int | None = None) -> None:
    log = store.log(TOPIC, 0)
    snap = log.snapshot()
    now = clock.now_ms()
    cleaner = store.log_cleaner(map_slots=None if map_entries is None else map_slots_for(map_entries))
    result = cleaner.clean_partition(TOPIC, 0, force=True)
    assert result is not None
    got = {k: getattr(result, k) for k in
           ("records_read", "records_written", "tombstones_stamped", "tombstones_removed", "keyless_dropped")}
    assert got == expected_figures(snap, log.uri, result.end_offset, now)


def fill(store: Store, clock, batches) -> None:
    """Each batch one file; a roll after each, so every batch is a closed segment."""
    for batch in batches:
        store.append(TOPIC, 0, [Record(key=k, value=v) for k, v in batch])
        store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"active", value=b"1")])


def history(n: int, keys: int, tomb_every: int) -> list[tuple[bytes, bytes | None]]:
    return [(b"k%d" % (i % keys), None if i % tomb_every == 0 else b"v%d" % i) for i in range(n)]


@pytest.mark.slow
def test_counts_match_a_row_count_across_two_cleans(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    events = history(40, 7, 5)
    fill(store, clock, [events[:15], events[15:30]])
    clean_and_compare(store, clock)  # stamps the surviving tombstones
    clock.advance(2000)  # their horizons pass
    fill(store, clock, [events[30:], [(b"k1", None), (b"k2", b"x")]])
    clean_and_compare(store, clock)  # removes expired and superseded tombstones


@pytest.mark.slow
def test_counts_when_a_file_holds_keyless_records_and_tombstones(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "delete"})
    fill(store, clock, [[(None, b"x"), (b"a", None), (None, None), (b"a", b"1")], [(b"b", None), (None, b"y")]])
    store.alter_topic_config(TOPIC, {"cleanup.policy": "compact"})
    clean_and_compare(store, clock)


@pytest.mark.slow
def test_counts_when_the_map_fills_inside_a_file(tmp_path, clock, spark):
    store = Store(tmp_path / "s", clock=clock, spark=spark)
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    fill(store, clock, [history(12, 9, 4), history(6, 3, 2)])
    clean_and_compare(store, clock, map_entries=3)  # the map holds 3 keys: it ends inside the first file
    clean_and_compare(store, clock, map_entries=3)


@pytest.mark.slow
def test_counts_when_the_log_start_is_inside_a_file(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact,delete"})
    fill(store, clock, [history(10, 4, 3), history(10, 4, 4)])
    store.delete_records(TOPIC, 0, 4)
    clean_and_compare(store, clock)
