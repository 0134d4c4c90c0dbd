"""One cleaning loop (Kafka's CleanerThread.doWork -> cleanFilthiestLog) behind store.clean(), the CLI and the job,
with one rule for failures, stale uncleanable marks, and the Kafka details the loop's passes report."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import map_slots_for

from deltalog import (
    CheckFailedError,
    CleaningFailedError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidRecordError,
    ManualClock,
    PartitionUncleanableError,
    Record,
    Store,
)
from deltalog.cleaner.cleaner_manager import LogCleanerManager
from deltalog.cleaner.log_cleaner import LogCleaner
from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.cli import main as cli
from deltalog.errors import DeltalogError

DAY = 24 * 3_600_000


def dirty(store: Store, topic: str, partition: int, rounds: int = 2) -> None:
    for r in range(rounds):
        store.append(topic, partition, [Record(f"k{i}", f"v{r}") for i in range(3)])
        store.roll(topic, partition)
    store.append(topic, partition, [Record("active", "a")])


def damage(store: Store, topic: str, partition: int) -> str:
    log = store.log(topic, partition)
    victim = os.path.join(log.uri, log.snapshot().files[0].path)
    with open(victim, "r+b") as f:  # a torn Parquet footer
        f.seek(-12, os.SEEK_END)
        f.write(b"\0" * 12)
    return victim


def test_store_clean_cleans_every_healthy_partition_then_raises_one_error_naming_the_damaged_one(spark_store):
    store = spark_store
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    for p in range(3):
        dirty(store, "t", p)
    damage(store, "t", 1)
    with pytest.raises(CleaningFailedError) as e:
        store.clean()
    assert "t-1" in str(e.value) and "reset-uncleanable" in str(e.value)
    assert sorted(r.partition for r in e.value.results) == [0, 2]  # the others were cleaned
    assert [(f.topic, f.partition) for f in e.value.failures] == [("t", 1)]
    for p in (0, 2):
        assert store.describe("t")[p].first_dirty_offset > 0
    # the same rule as the job: the damaged partition is now uncleanable, and skipped from here on
    state = store.describe("t")[1]
    assert state.uncleanable and not state.eligible_for_cleaning
    dirty(store, "t", 0)
    assert [(r.topic, r.partition) for r in store.clean()] == [("t", 0)]
    with pytest.raises(PartitionUncleanableError, match="reset-uncleanable t 1"):
        store.clean_partition("t", 1, force=True)


def test_an_uncleanable_mark_does_not_outlive_its_topic(spark_store):
    """Kafka drops deleted partitions from its uncleanable set: a topic created again is cleaned as any other."""
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty(store, "t", 0)
    damage(store, "t", 0)
    with pytest.raises(CleaningFailedError):
        store.clean()
    assert store.describe("t")[0].uncleanable
    store.delete_topic("t")
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty(store, "t", 0)
    assert not store.describe("t")[0].uncleanable and store.describe("t")[0].eligible_for_cleaning
    [result] = store.clean()
    assert (result.topic, result.partition) == ("t", 0)


def test_a_mark_left_by_an_earlier_topic_of_the_same_name_is_ignored(spark_store, clock):
    """A mark records the topic id: even if it survives (a job marked the partition while the topic was being
    deleted), the new topic of that name is not poisoned by it."""
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    old_id = store.log_manager.topic_id("t")
    store.log_manager.delete_topic("t")  # the registry alone: the cleaner's state is left behind
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    assert store.log_manager.topic_id("t") not in (None, old_id)
    manager = LogCleanerManager(store.log_manager)
    manager.uncleanable.mark("t", 0, OSError("old"), clock.now_ms(), topic_id=old_id)
    dirty(store, "t", 0)
    assert manager.uncleanable_partitions() == set()
    assert [(r.topic, r.partition) for r in store.clean()] == [("t", 0)]


def test_a_pass_that_fails_because_its_topic_was_deleted_marks_nothing(spark_store, clock):
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty(store, "t", 0)
    ltc = LogToClean.of(store.log("t", 0).snapshot(), clock.now_ms())
    store.delete_topic("t")
    manager = LogCleanerManager(store.log_manager)
    assert manager.mark_uncleanable(ltc, FileNotFoundError("gone"), clock.now_ms(), "me") is None
    assert manager.uncleanable.marks() == []


def test_the_check_after_clean_marks_a_broken_partition_uncleanable_in_the_loop(spark_store):
    """One rule for the API and the job: a broken guarantee after a clean marks the partition, the loop goes on."""
    store = spark_store
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    for p in range(2):
        dirty(store, "t", p)
    checked = []

    def check(topic, results):
        checked.extend((r.topic, r.partition) for r in results)
        return {1: CheckFailedError("partition 1 lost a key", result=None)}

    cleaner = LogCleaner(store.log_manager, lambda: store.spark, store.config, check_after_clean=check)
    cycle = cleaner.run_cycle()
    assert sorted(checked) == [("t", 0), ("t", 1)]
    assert [(f.topic, f.partition, f.error_type) for f in cycle.failures] == [("t", 1, "CheckFailedError")]
    assert cleaner.manager.uncleanable_partitions() == {("t", 1)}


def test_a_full_map_reports_90_percent_buffer_utilization_as_kafka_does(spark_store):
    """Kafka's cleaner log reads "Buffer utilization: 90.0%" as the sign the map was full: utilization is entries / slots,
    and a pass fills at most slots x 0.9 (log.cleaner.io.buffer.load.factor)."""
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(f"k{i}", "v") for i in range(25)])
    store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])
    result = store.log_cleaner(map_slots=10).clean_partition("t", 0, force=True)
    assert (result.map_entries, result.map_capacity) == (9, 9)
    assert result.map_utilization == pytest.approx(0.9)
    assert "Buffer utilization: 90.0%" in result.summary()
    assert result.end_offset == 9  # a full map ends the mapped range early


def test_a_tombstone_past_a_partial_passs_mapped_range_is_stamped_in_the_segment_the_pass_recopies(spark_store, clock):
    """Kafka's filterTo stamps every rewritten batch that keeps a tombstone, also past map.latestOffset."""
    store = spark_store
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record("a", "1"), Record("b", "1"), Record("c", None), Record("d", "1")])
    store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])
    result = store.log_cleaner(map_slots=map_slots_for(2)).clean_partition("t", 0, force=True)
    assert result.end_offset == 2  # a and b mapped; the tombstone of c lies past the range
    records = {r.key: r for r in store.read("t", 0, "earliest")}
    assert records[b"c"].value is None
    assert records[b"c"].delete_horizon_ms == clock.now_ms() + store.topic_config("t").delete_retention_ms
    assert result.tombstones_stamped == 1


def test_max_compaction_lag_uses_each_segments_first_batch_timestamp_and_ignores_non_positive_ones(store, clock):
    """LogCleanerManager.maxCompactionDelay: the first batch's timestamp of each dirty closed segment, > 0 only."""
    now = clock.now_ms()
    store.create_topic("t", 1, config={"cleanup.policy": "compact", "max.compaction.lag.ms": DAY})
    # segment 1: first batch new, a later batch older: Kafka looks at the first batch only
    store.append("t", 0, [Record("a", "1", timestamp_ms=now - 1000)])
    store.append("t", 0, [Record("b", "1", timestamp_ms=now - 3 * DAY)])
    store.roll("t", 0)
    # segment 2: its first batch has timestamp 0, which Kafka ignores
    store.append("t", 0, [Record("c", "1", timestamp_ms=0)])
    store.roll("t", 0)
    store.append("t", 0, [Record("active", "a")])
    snap = store.log("t", 0).snapshot()
    assert LogToClean.of(snap, now).max_compaction_delay_ms == 0
    later = now + DAY + 5000
    assert LogToClean.of(snap, later).max_compaction_delay_ms == later - DAY - (now - 1000)


def test_errors_of_the_public_api_are_deltalog_errors(tmp_path, spark_store):
    store = spark_store
    with pytest.raises(InvalidConfigError, match="threads"):
        LogCleaner(store.log_manager, lambda: store.spark, store.config, threads=0)
    with pytest.raises(InvalidConfigError, match="mapping"):
        store.create_topic("t", 1, config=[("cleanup.policy", "compact")])
    with pytest.raises(InvalidConfigError, match="mapping"):
        store.create_topic("t", 1, config="cleanup.policy=compact")
    with pytest.raises(InvalidRecordError, match="headers"):
        Record("k", "v", headers=5)
    with pytest.raises(InvalidArgumentError):
        ManualClock(0).advance(-1)
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        Store("")
    with pytest.raises(InvalidConfigError, match="store config"):
        Store(tmp_path / "x", config=["log.cleaner.threads"])
    assert not store.list_topics()
    for error in (CleaningFailedError, CheckFailedError, PartitionUncleanableError):
        assert issubclass(error, DeltalogError)


def test_the_offset_map_is_sized_by_the_loops_threads_for_the_api_and_the_job(tmp_path, clock, spark):
    store = Store(tmp_path / "s", clock=clock, spark=spark, config={"log.cleaner.threads": 2})
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    for p in range(2):
        dirty(store, "t", p)
    results = store.clean()
    expected = int((134_217_728 // 2 // 24) * 0.9)
    assert {r.map_capacity for r in results} == {expected} == {store.config.offset_map_capacity}


def test_the_clean_command_reports_a_damaged_partition_and_cleans_the_others(spark_store, capsys):
    store = spark_store
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    for p in range(2):
        dirty(store, "t", p)
    damage(store, "t", 0)
    assert cli(["--store", store.root, "clean"]) == 1
    out, err = capsys.readouterr()
    assert "Cleaned log t-1" in out and "deltalog: error: cleaning failed" in err and "t-0" in err


@pytest.mark.spark
@pytest.mark.subprocess
def test_current_state_works_as_the_first_spark_call_in_a_process(tmp_path):
    root = tmp_path / "s"
    store = Store(root, clock=ManualClock(1_700_000_000_000))
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record("a", "1"), Record("a", "2"), Record("b", "1")])
    script = ("import sys; from deltalog import Store; "
              "rows = Store(sys.argv[1]).current_state('t').collect(); "
              "print(sorted((bytes(r.key), bytes(r.value)) for r in rows))")
    env = {**os.environ, "DELTALOG_WARM_WORKERS": "0"}
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[(b'a', b'2'), (b'b', b'1')]"
