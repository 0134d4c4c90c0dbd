"""The log cleaner on real Spark and real Delta tables, rule by rule (Kafka's ``Cleaner``)."""

from __future__ import annotations

import os

import pytest
from conftest import clean_with_small_map

from deltalog import Record, Store
from deltalog.cleaner.log_to_clean import LogToClean

DAY = 24 * 3600 * 1000
WEEK = 7 * DAY
TOPIC = "fruit-prices"


def offsets(store: Store, topic: str = TOPIC, partition: int = 0) -> list[int]:
    return [r.offset for r in store.read(topic, partition, "earliest")]


def append_one_by_one(store: Store, events, topic: str = TOPIC, partition: int = 0) -> list[int]:
    out = []
    for key, value in events:
        out += store.append(topic, partition, [Record(key=key, value=value)])
    return out


def test_fruit_prices_walkthrough(spark_store, clock):
    """The fruit-prices walkthrough (docs/walkthrough.md), step by step with the exact offsets."""
    store = spark_store
    store.create_topic(TOPIC, partitions=1, config={"cleanup.policy": "compact"})
    assert append_one_by_one(store, [(b"grape", b"2.69"), (b"lime", b"0.49"), (b"grape", None), (b"lime", b"1.59")]) \
        == [0, 1, 2, 3]
    assert store.clean() == []  # only the active segment: nothing is cleanable
    clock.advance(WEEK + 1)  # segment.ms passes: the next append closes 000 and opens 004
    assert append_one_by_one(store, [(b"lime", b"1.99")]) == [4]
    assert store.describe(TOPIC)[0].dirty_ratio == 1.0

    first = store.clean()
    assert len(first) == 1
    clean_time = clock.now_ms()
    records = store.read(TOPIC, 0, 0)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (2, b"grape", None), (3, b"lime", b"1.59"), (4, b"lime", b"1.99")
    ]
    assert records[0].delete_horizon_ms == clean_time + 86_400_000  # clean time + delete.retention.ms
    assert records[1].delete_horizon_ms is None and records[2].delete_horizon_ms is None
    result = first[0]
    assert (result.first_dirty_offset, result.end_offset) == (0, 4)
    assert (result.records_read, result.records_written) == (4, 2)
    assert (result.tombstones_stamped, result.tombstones_removed, result.keyless_dropped) == (1, 0, 0)
    assert result.map_entries == 2
    state = store.describe(TOPIC)[0]
    assert state.dirty_ratio == 0.0 and state.first_dirty_offset == 4
    # "The new segment file is called 002.log as offset 2 is the first offset it contains."
    assert [(s.base_offset, s.is_active) for s in state.segments] == [(2, False), (4, True)]
    assert store.clean() == []  # clean now: nothing eligible

    # More events for guava and kiwi in 004; a week later 004 closes and 008 opens with guava.
    assert append_one_by_one(store, [(b"kiwi", b"0.35"), (b"guava", b"1.20"), (b"kiwi", b"0.40")]) == [5, 6, 7]
    clock.advance(WEEK + 1)  # also more than delete.retention.ms since the first clean
    assert append_one_by_one(store, [(b"guava", b"1.25")]) == [8]
    assert store.describe(TOPIC)[0].dirty_ratio > 0.5

    second = store.clean()
    assert len(second) == 1
    assert [(r.offset, r.key, r.value) for r in store.read(TOPIC, 0, 0)] == [
        (4, b"lime", b"1.99"), (6, b"guava", b"1.20"), (7, b"kiwi", b"0.40"), (8, b"guava", b"1.25")
    ]
    assert second[0].tombstones_removed == 1  # the grape tombstone's horizon had passed
    assert (second[0].first_dirty_offset, second[0].end_offset) == (4, 8)
    # "The new segment is named 004.log; its first offset is 4." (002 and 004 merged into one group.)
    assert [(s.base_offset, s.is_active) for s in store.describe(TOPIC)[0].segments] == [(4, False), (8, True)]
    assert {r["segment"] for r in store.sql(f"SELECT DISTINCT segment FROM {TOPIC.replace('-', '_')} WHERE offset < 8").collect()} == {4}


def test_clean_is_recorded_in_delta_history_and_old_versions_stay_readable(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2"), (b"b", b"1")])
    store.roll(TOPIC, 0)
    before = store.log(TOPIC, 0).snapshot()
    result = store.clean_partition(TOPIC, 0)
    assert result is not None
    history = store.log(TOPIC, 0).table().history(1)[0]
    assert history["deltalog.operation"] == "clean"
    assert history["version"] == result.version
    assert history["deltalog.records_read"] == 3 and history["deltalog.records_written"] == 2
    assert history["deltalog.end_offset"] == 3
    # Time travel: the version before the clean still has all three records.
    old = store.log(TOPIC, 0).snapshot(before.version)
    assert old.num_records == 3
    assert store.log(TOPIC, 0).snapshot().num_records == 2


@pytest.mark.parametrize("capacity_entries", [1, 2, 3])
def test_small_map_converges_to_the_same_log_as_a_full_map(tmp_path, clock, spark, capacity_entries):
    """A map that holds a few keys cleans in several passes, each making progress, and ends where one
    pass with a big map ends (as Kafka's: partial passes advance the cleaner point a chunk at a time)."""
    events = [(b"k%d" % (i % 4), b"v%d" % i) for i in range(11)] + [(b"k1", None), (b"k9", b"x")]
    small = Store(tmp_path / "small", clock=clock, spark=spark)
    big = Store(tmp_path / "big", clock=clock, spark=spark)
    for store in (small, big):
        store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        for chunk in (events[:5], events[5:9], events[9:]):
            store.append(TOPIC, 0, [Record(key=k, value=v) for k, v in chunk])
            store.roll(TOPIC, 0)
        store.append(TOPIC, 0, [Record(key=b"active", value=b"1")])

    big_passes = big.clean()
    small_passes = clean_with_small_map(small, capacity_entries)
    assert len(big_passes) == 1
    assert len(small_passes) > 1
    assert all(p.map_entries <= capacity_entries for p in small_passes)
    ends = [p.end_offset for p in small_passes]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)  # every pass moves the checkpoint forward
    assert small_passes[-1].end_offset == big_passes[0].end_offset
    as_tuples = lambda s: [(r.offset, r.key, r.value) for r in s.read(TOPIC, 0, 0)]  # noqa: E731
    assert as_tuples(small) == as_tuples(big)


def test_min_compaction_lag_keeps_young_segments(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.compaction.lag.ms": str(DAY)})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"a", b"3")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"b", b"1")])  # active
    assert store.clean() == []  # every closed segment is younger than a day
    assert offsets(store) == [0, 1, 2, 3]

    clock.advance(DAY + 1)
    append_one_by_one(store, [(b"a", b"4")])  # into the active segment: still young, and active
    [result] = store.clean()
    assert result.first_uncleanable_offset == 3  # the active segment's base
    assert offsets(store) == [2, 3, 4]


def test_min_compaction_lag_bounds_the_section_at_the_first_young_segment(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.compaction.lag.ms": str(DAY)})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2")])
    store.roll(TOPIC, 0)
    clock.advance(DAY + 1)
    append_one_by_one(store, [(b"a", b"3")])  # young segment [2, 3)
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"b", b"1")])
    [result] = store.clean()
    assert (result.first_dirty_offset, result.first_uncleanable_offset) == (0, 2)
    assert offsets(store) == [1, 2, 3]  # offset 2 supersedes 1 but is not yet cleanable


def test_ratio_below_threshold_does_not_clean_and_max_lag_forces_it(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.9"})
    append_one_by_one(store, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"d", b"1")])
    store.roll(TOPIC, 0)
    store.clean_partition(TOPIC, 0, force=True)  # everything closed is clean now
    append_one_by_one(store, [(b"a", b"2")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"z", b"1")])  # active
    state = store.describe(TOPIC)[0]
    assert 0 < state.dirty_ratio < 0.9
    assert store.clean() == []
    assert offsets(store) == [0, 1, 2, 3, 4, 5]

    store.alter_topic_config(TOPIC, {"max.compaction.lag.ms": str(DAY)})
    assert store.clean() == []  # the dirty segment is not old enough yet
    clock.advance(DAY + 1)
    ltc = LogToClean.of(store.log(TOPIC, 0).snapshot(), clock.now_ms())
    assert ltc.needs_compaction_now and ltc.cleanable_ratio < 0.9
    [result] = store.clean()
    assert offsets(store) == [1, 2, 3, 4, 5]


def test_active_segment_is_never_touched(spark_store):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2"), (b"a", None)])
    assert store.clean() == []
    assert store.clean_partition(TOPIC, 0, force=True) is None
    assert offsets(store) == [0, 1, 2]
    active_files = {f.path for f in store.log(TOPIC, 0).snapshot().active_segment.files}
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"a", b"3"), (b"a", b"4")])
    new_active = {f.path for f in store.log(TOPIC, 0).snapshot().active_segment.files}
    store.clean()
    snap = store.log(TOPIC, 0).snapshot()
    assert {f.path for f in snap.active_segment.files} == new_active
    assert not active_files & {f.path for f in snap.files}  # the closed segment was rewritten
    assert offsets(store) == [2, 3, 4]  # 3 and 4 are in the active segment, untouched


def test_keyless_records_are_dropped_and_counted(spark_store):
    """Keyless records can only exist if the topic was not compacted when they were written."""
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "delete"})
    store.append(TOPIC, 0, [Record(key=None, value=b"x"), Record(key=b"a", value=b"1"), Record(key=None, value=b"y")])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"b", value=b"1")])
    store.alter_topic_config(TOPIC, {"cleanup.policy": "compact"})
    [result] = store.clean()
    assert result.keyless_dropped == 2
    assert offsets(store) == [1, 3]


def test_offsets_continue_from_the_old_log_end_after_a_clean(spark_store):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"a", b"4")])
    store.clean()
    assert offsets(store) == [2, 3]  # 3 is in the active segment, so 2 is the latest the cleaner saw
    assert store.append(TOPIC, 0, [Record(key=b"a", value=b"5")]) == [4]
    state = store.describe(TOPIC)[0]
    assert state.log_end_offset == 5 and state.log_start_offset == 0


def test_reads_from_a_compacted_away_offset_continue_at_the_next_record(spark_store):
    """Kafka's compaction guarantee: offsets 36, 37 and 38 are equivalent positions when only 38 is left."""
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    append_one_by_one(store, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2"), (b"c", b"1")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"d", b"1")])
    store.clean()
    assert offsets(store) == [2, 3, 4, 5]
    for start, first in [(0, 2), (1, 2), (2, 2), (3, 3), (5, 5)]:
        assert store.read(TOPIC, 0, start, max_records=1)[0].offset == first
    assert store.read(TOPIC, 0, 6) == []


def test_tombstone_survives_until_its_horizon_then_goes(spark_store, clock):
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "delete.retention.ms": "1000",
                                      "min.cleanable.dirty.ratio": "0.01"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", None)])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"b", b"1")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"z", b"1")])
    [first] = store.clean()
    assert first.tombstones_stamped == 1
    tomb = store.read(TOPIC, 0, 0)[0]
    assert (tomb.offset, tomb.value, tomb.delete_horizon_ms) == (1, None, clock.now_ms() + 1000)
    # A forced clean before the horizon keeps it; one at the horizon removes it.
    clock.advance(999)
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"y", b"1")])
    store.clean_partition(TOPIC, 0, force=True)
    assert 1 in offsets(store)
    clock.advance(1)
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"x", b"1")])
    result = store.clean_partition(TOPIC, 0, force=True)
    assert result.tombstones_removed == 1
    assert 1 not in offsets(store)


def test_only_compacted_topics_are_cleaned(spark_store):
    store = spark_store
    store.create_topic("plain", config={"cleanup.policy": "delete"})
    store.append("plain", 0, [Record(key=b"a", value=b"1"), Record(key=b"a", value=b"2")])
    store.roll("plain", 0)
    store.append("plain", 0, [Record(key=b"a", value=b"3")])
    assert store.clean() == []
    with pytest.raises(Exception, match="cleanup.policy"):
        store.clean_partition("plain", 0)


def test_filthiest_partition_is_cleaned_first(spark_store):
    store = spark_store
    store.create_topic(TOPIC, partitions=2, config={"cleanup.policy": "compact"})
    # Partition 1: four dirty files to one clean one; partition 0: two to one.
    for p, dirty_batches in [(0, 2), (1, 4)]:
        store.append(TOPIC, p, [Record(key=b"a", value=b"1")])
        store.roll(TOPIC, p)
        store.clean_partition(TOPIC, p, force=True)
        for i in range(dirty_batches):
            store.append(TOPIC, p, [Record(key=b"a", value=b"%d" % i)])
        store.roll(TOPIC, p)
        store.append(TOPIC, p, [Record(key=b"z", value=b"1")])
    ratios = {s.partition: s.dirty_ratio for s in store.describe(TOPIC)}
    assert ratios[1] > ratios[0] > 0.5
    results = store.clean()
    assert [r.partition for r in results] == [1, 0]


def test_clean_command_prints_the_figures_of_each_pass(spark_store, capsys):
    from deltalog.cli import main

    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"b", b"1")])
    assert main(["--store", store.root, "clean", TOPIC, "-p", "0", "--force"]) == 0
    out = capsys.readouterr().out
    assert "dirty section = [0, 2)" in out and "50.0% fewer messages" in out
    assert main(["--store", store.root, "clean", "--json"]) == 0
    assert capsys.readouterr().out == ""  # JSON lines: one per pass, and there was none
    assert main(["--store", store.root, "clean", "--force"]) == 2


def test_a_checkpoint_below_the_log_start_is_reset_to_the_log_start(spark_store):
    """LogCleanerManager self-heals a checkpoint outside [log start, log end] (``LogCleanerManager.cleanableOffsets``)."""
    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"b", b"1")])
    store.clean()
    assert store.describe(TOPIC)[0].first_dirty_offset == 2
    append_one_by_one(store, [(b"b", b"2"), (b"c", b"1")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"d", b"1")])
    store.delete_records(TOPIC, 0, 4)
    state = store.describe(TOPIC)[0]
    assert state.log_start_offset == 4 and state.first_dirty_offset == 4
    assert store.log(TOPIC, 0).snapshot().cleaner_checkpoint == 2  # what the Delta log still says


def test_a_corrupt_data_file_fails_the_pass_with_a_clear_error_and_commits_nothing(spark_store):
    from deltalog import CleaningFailedError

    store = spark_store
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    append_one_by_one(store, [(b"a", b"1"), (b"a", b"2")])
    store.roll(TOPIC, 0)
    append_one_by_one(store, [(b"b", b"1")])
    log = store.log(TOPIC, 0)
    before = log.snapshot()
    victim = os.path.join(log.uri, before.files[0].path)
    with open(victim, "r+b") as f:  # damage the Parquet footer
        f.seek(-12, os.SEEK_END)
        f.write(b"\0" * 12)
    with pytest.raises(CleaningFailedError, match=r"cleaning fruit-prices-0 failed in pass 1.*nothing was committed"):
        store.clean()
    after = log.snapshot()
    assert after.version == before.version and after.files == before.files
    assert not [n for n in os.listdir(log.uri) if n.startswith("cleaned-")]
