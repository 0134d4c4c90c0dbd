"""The guarantee suites pass on a correctly cleaned topic and fail, specifically, on tables damaged on
purpose through real Delta commits (deltalog.log.delta helpers), as a buggy cleaner or writer would."""

from __future__ import annotations

import json
import os

import pytest

from deltalog import Record, Store
from deltalog.cli import main
from deltalog.log import delta
from deltalog.log.arrow_records import records_to_table

DAY = 24 * 3600 * 1000
WEEK = 7 * DAY
TOPIC = "fruit-prices"
PARTITION_SUITE = {
    "offsets_not_null", "offsets_unique", "keys_not_null", "offsets_below_log_end", "clean_section_keys_unique",
    "clean_section_tombstones_have_horizon", "no_expired_tombstones", "offsets_increase_within_files",
    "files_in_offset_order", "no_aborted_record_visible", "no_marker_visible", "committed_transactions_visible",
    "markers_closed_by_their_producer",
}
CLEAN_SUITE = {"latest_records_kept", "no_new_records", "aborted_records_dropped", "markers_kept_until_horizon",
               "tail_unchanged"}


def first_clean(store: Store, clock) -> None:
    """The fruit-prices walkthrough's partition after its first clean: 2 grape tombstone, 3 lime | 4 lime (active)."""
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    for key, value in [(b"grape", b"2.69"), (b"lime", b"0.49"), (b"grape", None), (b"lime", b"1.59")]:
        store.append(TOPIC, 0, [Record(key=key, value=value)])
    clock.advance(WEEK + 1)
    store.append(TOPIC, 0, [Record(key=b"lime", value=b"1.99")])
    assert len(store.clean(TOPIC)) == 1
    assert [r.offset for r in store.read(TOPIC, 0, 0)] == [2, 3, 4]


def damage_row(store: Store, offset: int, key: bytes, value: bytes | None, *, operation: str = "damage",
               checkpoint: int | None = None) -> None:
    """Commit one extra row (at an offset compaction removed) as its own data file."""
    log = store.log(TOPIC, 0)
    now = store.clock.now_ms()
    add = delta.write_data_file(log.storage, log.uri, records_to_table([Record(key=key, value=value)], [offset], [now], 0), now)
    fake_clean(store, [add], checkpoint) if operation == "clean" else delta.commit(
        log.table(), [add], txns={}, operation=operation)


def fake_clean(store: Store, actions, checkpoint: int | None = None) -> None:
    """A commit that claims to be a clean, as a buggy cleaner would make it."""
    log = store.log(TOPIC, 0)
    snap = log.snapshot()
    cp = snap.first_dirty_offset if checkpoint is None else checkpoint
    delta.commit(log.table(), actions, txns={delta.TXN_CLEANER_CHECKPOINT: cp}, operation="clean",
                 metadata={"now_ms": store.clock.now_ms(), "first_dirty_offset": cp, "end_offset": cp})


def failed(result) -> dict[str, list[dict]]:
    return {e.name: list(e.sample) for _, e in result.failures()}


@pytest.mark.slow
def test_a_correctly_cleaned_topic_passes_every_expectation(spark_store, clock):
    store = spark_store
    first_clean(store, clock)
    for key, value in [(b"kiwi", b"0.35"), (b"guava", b"1.20"), (b"kiwi", b"0.40")]:
        store.append(TOPIC, 0, [Record(key=key, value=value)])
    clock.advance(WEEK + 1)  # past the grape tombstone's delete horizon
    store.append(TOPIC, 0, [Record(key=b"guava", value=b"1.25")])
    assert store.clean(TOPIC)[0].tombstones_removed == 1

    result = store.check(TOPIC, data_docs=True)
    assert result.success, result.summary()
    names = {s.suite: {e.name for e in s.expectations} for s in result.suites}
    assert names == {"partition": PARTITION_SUITE, "clean": CLEAN_SUITE}
    saved = json.load(open(result.path))
    assert saved["success"] is True and saved["great_expectations"][0]["success"] is True
    assert os.path.exists(result.data_docs) and result.data_docs.endswith("index.html")


def test_duplicate_key_in_the_clean_section_fails_with_the_offsets(spark_store, clock, capsys):
    store = spark_store
    first_clean(store, clock)
    damage_row(store, 1, b"lime", b"0.49")  # an old lime, back below the checkpoint (4)

    code = main(["--store", store.root, "check", TOPIC, "--cleans", "none"])
    out = capsys.readouterr().out
    assert code == 3  # broken data: deltalog.cli.exit_codes.EXIT_BROKEN_DATA
    assert "FAILED" in out and "partition 0" in out and "clean_section_keys_unique" in out
    path = sorted(os.listdir(os.path.join(store.root, "_deltalog", "checks", TOPIC)))[-1]
    saved = json.load(open(os.path.join(store.root, "_deltalog", "checks", TOPIC, path)))
    bad = {e["name"]: e for s in saved["suites"] for e in s["expectations"] if not e["success"]}
    assert {(r["offset"], r["key"]) for r in bad["clean_section_keys_unique"]["sample"]} == {(1, "lime"), (3, "lime")}
    assert bad["clean_section_keys_unique"]["unexpected_count"] == 2
    assert set(bad) == {"clean_section_keys_unique"} and saved["success"] is False


@pytest.mark.slow
def test_a_clean_that_deletes_a_record_from_the_tail_fails(spark_store, clock):
    store = spark_store
    first_clean(store, clock)
    log = store.log(TOPIC, 0)
    tail_file = [f for f in log.snapshot().files if f.min_offset == 4]
    fake_clean(store, [delta.remove_action(f, clock.now_ms()) for f in tail_file])

    result = store.check(TOPIC)
    assert not result.success
    bad = failed(result)
    assert set(bad) == {"latest_records_kept", "tail_unchanged"}
    assert bad["latest_records_kept"] == [{"offset": 4, "key": "lime"}]
    assert all(s.partition == 0 for s, _ in result.failures())


@pytest.mark.slow
def test_an_expired_tombstone_left_behind_fails(spark_store, clock):
    store = spark_store
    first_clean(store, clock)
    clock.advance(DAY + 1)  # the grape tombstone's horizon (first clean + delete.retention.ms) has passed
    fake_clean(store, [])  # a "clean" that kept it

    bad = failed(store.check(TOPIC))
    assert set(bad) == {"no_expired_tombstones"}
    assert [(r["offset"], r["key"]) for r in bad["no_expired_tombstones"]] == [(2, "grape")]


@pytest.mark.slow
def test_a_tombstone_without_horizon_and_a_record_that_appears_fail(spark_store, clock):
    store = spark_store
    first_clean(store, clock)
    damage_row(store, 0, b"kiwi", None, operation="clean")  # a new, unstamped tombstone in the clean section

    bad = failed(store.check(TOPIC))
    assert [(r["offset"], r["key"]) for r in bad["clean_section_tombstones_have_horizon"]] == [(0, "kiwi")]
    assert [(r["offset"], r["key"]) for r in bad["no_new_records"]] == [(0, "kiwi")]
    assert "latest_records_kept" not in bad and "tail_unchanged" not in bad


@pytest.mark.slow
def test_check_after_clean_setting_runs_the_suites(tmp_path, clock, spark):
    store = Store(tmp_path / "s", clock=clock, spark=spark, config={"deltalog.check.after.clean": "true"})
    first_clean(store, clock)  # clean() ran the checks; a failure would have raised CheckFailedError
    results = os.listdir(os.path.join(store.root, "_deltalog", "checks", TOPIC))
    assert len(results) == 1
    saved = json.load(open(os.path.join(store.root, "_deltalog", "checks", TOPIC, results[0])))
    assert saved["success"] is True and {s["suite"] for s in saved["suites"]} == {"partition", "clean"}


@pytest.mark.slow
def test_check_after_clean_also_runs_after_clean_partition(tmp_path, clock, spark):
    store = Store(tmp_path / "s", clock=clock, spark=spark, config={"deltalog.check.after.clean": "true"})
    store.create_topic(TOPIC, config={"cleanup.policy": "compact"})
    store.append(TOPIC, 0, [Record(key=b"a", value=b"1"), Record(key=b"a", value=b"2")])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"b", value=b"1")])
    assert store.clean_partition(TOPIC, 0) is not None
    assert len(os.listdir(os.path.join(store.root, "_deltalog", "checks", TOPIC))) == 1
