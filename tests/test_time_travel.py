"""Time travel and Delta's retention: a partition read as of a Delta version or a time (API, CLI, Spark views, the
``deltalog_files`` source), and ``file.delete.delay.ms`` kept as Delta's ``delta.deletedFileRetentionDuration`` so
that any engine's VACUUM leaves the versions a reader may still travel to."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from deltalog import Record, Store
from deltalog.config import TopicConfig
from deltalog.errors import InvalidArgumentError, VersionNotAvailableError
from deltalog.log import delta_retention, time_travel
from tests.conftest import json_lines, run_cli

WEEK_MS = 7 * 86_400_000


def _values(records) -> list[tuple[bytes, bytes]]:
    return [(r.key, r.value) for r in records]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _between_commits() -> int:
    """A time strictly between the commit before and the one after (commit timestamps are in milliseconds)."""
    time.sleep(0.02)
    t = _now_ms()
    time.sleep(0.02)
    return t


# -- Delta's retention and file.delete.delay.ms: one setting ---------------------------------------------------

def test_the_topic_config_sets_deltas_retention_properties_at_create_and_alter(store):
    assert TopicConfig().file_delete_delay_ms == delta_retention.DELTA_DEFAULT_DELETED_FILE_RETENTION_MS == WEEK_MS
    store.create_topic("t", 2)
    for p in (0, 1):
        props = DeltaTable(store.log("t", p).uri).metadata().configuration
        assert delta_retention.parse_interval_ms(props["delta.deletedFileRetentionDuration"]) == WEEK_MS
        assert delta_retention.parse_interval_ms(props["delta.logRetentionDuration"]) == 30 * 86_400_000
    store.alter_topic_config("t", {"file.delete.delay.ms": str(40 * 86_400_000)})
    for p in (0, 1):
        props = DeltaTable(store.log("t", p).uri).metadata().configuration
        assert delta_retention.parse_interval_ms(props["delta.deletedFileRetentionDuration"]) == 40 * 86_400_000
        # the log is kept at least as long as the files, so a version whose files are there can be loaded
        assert delta_retention.parse_interval_ms(props["delta.logRetentionDuration"]) == 40 * 86_400_000


def test_a_retention_another_engine_set_is_the_effective_delay_for_deltalogs_vacuum(store, clock):
    store.create_topic("t", 1, config={"cleanup.policy": "delete", "retention.ms": 1000})
    store.append("t", 0, [Record(b"a", b"1")])
    store.roll("t", 0)
    store.append("t", 0, [Record(b"b", b"2")])
    # Databricks' ALTER TABLE ... SET TBLPROPERTIES, here through delta-rs
    DeltaTable(store.log("t", 0).uri).alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 1 hour"})
    assert store.topic_config("t").file_delete_delay_ms == 3_600_000
    clock.advance(1001)
    store.delete_old_segments("t")
    clock.advance(3_600_000 - 1)
    assert store.vacuum("t", dry_run=False)[0].files_waiting == 1
    clock.advance(1)
    assert store.vacuum("t", dry_run=False)[0].files_deleted == 1


@pytest.mark.parametrize(("text", "ms"), [
    ("interval 7 days", WEEK_MS), ("interval 604800000 milliseconds", WEEK_MS), ("168 hours", WEEK_MS),
    ("interval 1 week", WEEK_MS), ("1 hour 30 minutes", 5_400_000), ("interval 0 seconds", 0),
    ("interval 1 month", None), ("soon", None), ("", None), (None, None),
])
def test_delta_intervals_are_read_as_delta_writes_them(text, ms):
    assert delta_retention.parse_interval_ms(text) == ms


def test_delta_rs_vacuum_with_its_defaults_keeps_the_version_before_a_retention(tmp_path):
    """deltalog's remove actions carry the store's clock; a wall-clock store is what an engine's VACUUM sees."""
    store = Store(tmp_path / "s")
    store.create_topic("t", 1, config={"cleanup.policy": "delete", "retention.ms": 1})
    store.append("t", 0, [Record(b"a", b"1")])
    store.roll("t", 0)
    store.append("t", 0, [Record(b"b", b"2")])
    before = store.log("t", 0).table().version()
    time.sleep(0.01)
    assert store.delete_old_segments("t")[0].files_deleted == 1
    DeltaTable(store.log("t", 0).uri).vacuum(dry_run=False)  # delta-rs' defaults: the table's retention
    DeltaTable(store.log("t", 0).uri).vacuum(dry_run=False, full=True)  # orphans too
    assert _values(store.read("t", 0, version_as_of=before)) == [(b"a", b"1"), (b"b", b"2")]
    assert DeltaTable(store.log("t", 0).uri, version=before).to_pyarrow_table().num_rows == 2


# -- reads as of a version or a time -----------------------------------------------------------------------------

def test_read_as_of_a_version_or_a_time_on_local_disk_and_s3(any_store):
    store = any_store
    store.create_topic("t", 1)
    store.append("t", 0, [Record(b"k", b"v1"), Record(b"j", b"x")])
    v1 = store.log("t", 0).table().version()
    t1 = _between_commits()
    store.append("t", 0, [Record(b"k", b"v2")])
    store.delete_records("t", 0, 1)
    assert _values(store.read("t", 0, "earliest")) == [(b"j", b"x"), (b"k", b"v2")]
    old = [(b"k", b"v1"), (b"j", b"x")]
    assert _values(store.read("t", 0, version_as_of=v1)) == old
    assert _values(store.read("t", 0, timestamp_as_of=t1)) == old
    assert _values(store.read("t", 0, timestamp_as_of=datetime.fromtimestamp(t1 / 1000, timezone.utc))) == old
    iso = datetime.fromtimestamp(t1 / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert _values(store.read("t", 0, timestamp_as_of=iso)) == old
    # "earliest"/"latest" are that version's log start and end
    assert store.read("t", 0, "latest", version_as_of=v1) == []
    assert _values(store.read("t", 0, 1, version_as_of=v1)) == [(b"j", b"x")]
    assert [e.kind for e in store.history("t", 0)][:2] == ["delete_records", "append"]


def test_a_version_that_is_not_there_is_a_clear_error(store):
    store.create_topic("t", 1)
    store.append("t", 0, [Record(b"k", b"v")])
    with pytest.raises(VersionNotAvailableError, match="no version 9: its latest version is 1"):
        store.read("t", 0, version_as_of=9)
    with pytest.raises(VersionNotAvailableError, match="did not exist at 2001-01-01 00:00:00 UTC"):
        store.read("t", 0, timestamp_as_of="2001-01-01")
    with pytest.raises(InvalidArgumentError, match="not both"):
        store.read("t", 0, version_as_of=0, timestamp_as_of="2001-01-01")
    with pytest.raises(InvalidArgumentError, match="not a time"):
        store.read("t", 0, timestamp_as_of="yesterday")
    with pytest.raises(InvalidArgumentError, match="version_as_of"):
        store.read("t", 0, version_as_of=-1)
    # a time after the last commit reads the latest version (each partition of a topic at its own last commit)
    assert _values(store.read("t", 0, timestamp_as_of=_now_ms() + 60_000)) == [(b"k", b"v")]


def test_a_version_vacuum_emptied_names_the_retention_setting(store, clock):
    store.create_topic("t", 1, config={"cleanup.policy": "delete", "retention.ms": 1000,
                                       "file.delete.delay.ms": "60000"})
    store.append("t", 0, [Record(b"a", b"1")])
    store.roll("t", 0)
    store.append("t", 0, [Record(b"b", b"2")])
    before = store.log("t", 0).table().version()
    clock.advance(1001)
    store.delete_old_segments("t")
    clock.advance(60_000)
    store.vacuum("t", dry_run=False)
    with pytest.raises(VersionNotAvailableError, match="file.delete.delay.ms .*delta.deletedFileRetentionDuration"):
        store.read("t", 0, version_as_of=before)
    assert _values(store.read("t", 0, "earliest")) == [(b"b", b"2")]  # the current version is whole


def test_a_version_number_belongs_to_one_partition():
    at = time_travel.as_of(3)
    assert time_travel.partitions_read([0], "t", at) == [0]
    with pytest.raises(InvalidArgumentError, match="has 2 partitions"):
        time_travel.partitions_read([0, 1], "t", at)
    assert time_travel.partitions_read([0, 1, 2], "t", time_travel.as_of({2: 5, 0: 1})) == [0, 2]
    with pytest.raises(InvalidArgumentError, match="partition"):
        time_travel.partitions_read([0, 1], "t", time_travel.as_of({4: 1}))
    assert time_travel.partitions_read([0, 1], "t", time_travel.as_of(timestamp_as_of=0)) == [0, 1]


def test_consume_as_of_a_version_or_a_time(store, capsys):
    store.create_topic("one", 1)
    store.append("one", 0, [Record(b"k", b"v1")])
    t1 = _between_commits()
    store.append("one", 0, [Record(b"k", b"v2")])
    code, out, err = run_cli(capsys, "--store", store.root, "consume", "one", "--as-of", "1")
    assert code == 0, err
    assert [r["value"] for r in json_lines(out)] == ["v1"]
    stamp = datetime.fromtimestamp(t1 / 1000, timezone.utc).isoformat(timespec="milliseconds")
    code, out, err = run_cli(capsys, "--store", store.root, "consume", "one", "--as-of", stamp)
    assert code == 0, err
    assert [r["value"] for r in json_lines(out)] == ["v1"]
    store.create_topic("two", 2)
    code, _, err = run_cli(capsys, "--store", store.root, "consume", "two", "--as-of", "0")
    assert code == 2 and "add -p N" in err
    assert run_cli(capsys, "--store", store.root, "consume", "two", "-p", "1", "--as-of", "0")[0] == 0
    code, _, err = run_cli(capsys, "--store", store.root, "consume", "one", "--as-of", "1", "--follow")
    assert code == 2 and "--follow" in err
    code, _, err = run_cli(capsys, "--store", store.root, "consume", "one", "--as-of", "7")
    assert code == 1 and "no version 7" in err


# -- Spark: the current state as of a time, the views, the data source, VACUUM right after a clean ----------------

def test_what_key_k_held_before_a_clean_survives_delta_rs_vacuum(spark, tmp_path, capsys):
    """The real delta-rs VACUUM right after a clean: the version before the clean stays readable."""
    store = Store(tmp_path / "s", spark=spark)  # the wall clock: what an engine's VACUUM compares with
    store.create_topic("prices", 1, config={"cleanup.policy": "compact"})
    store.append("prices", 0, [Record(b"apple", b"1.0"), Record(b"pear", b"2.0")])
    yesterday = _between_commits()
    store.append("prices", 0, [Record(b"apple", b"1.5"), Record(b"pear", None)])
    store.roll("prices", 0)
    store.append("prices", 0, [Record(b"fig", b"3.0")])
    before = store.log("prices", 0).table().version()
    assert store.clean_partition("prices", 0, force=True) is not None
    uri = store.log("prices", 0).uri
    DeltaTable(uri).vacuum(dry_run=False)  # delta-rs' defaults, right after the clean
    DeltaTable(uri).vacuum(dry_run=False, full=True)

    def state(**as_of) -> dict[bytes, bytes]:
        rows = store.current_state("prices", **as_of).collect()
        return {bytes(r["key"]): bytes(r["value"]) for r in rows}

    assert state() == {b"apple": b"1.5", b"fig": b"3.0"}
    assert state(timestamp_as_of=yesterday) == {b"apple": b"1.0", b"pear": b"2.0"}
    assert store.log_frame("prices", version_as_of=before).count() == 5  # every record, as before the clean
    # "what did apple hold then": one line of SQL
    stamp = datetime.fromtimestamp(yesterday / 1000, timezone.utc).isoformat(timespec="milliseconds")
    code, out, err = run_cli(capsys, "--store", store.root, "sql", "--as-of", stamp, "--json",
                             "SELECT value FROM prices_current WHERE key = 'apple'")
    assert code == 0, err
    assert json_lines(out) == [{"value": "1.0"}]


def test_the_deltalog_files_source_takes_deltas_time_travel_options(spark, tmp_path):
    from deltalog.sql import source

    store = Store(tmp_path / "s", spark=spark)
    store.create_topic("t", 2)
    store.append("t", 1, [Record(b"a", b"1")])
    t1 = _between_commits()
    store.append("t", 1, [Record(b"b", b"2")])
    source.register(spark)
    uri = store.log("t", 1).uri

    def count(**options: str) -> int:
        reader = spark.read.format(source.SOURCE_NAME).option("path", uri)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load().count()

    assert count() == 2
    assert count(versionAsOf="1") == 1
    assert count(timestampAsOf=str(t1)) == 1
    assert count(timestampAsOf=datetime.fromtimestamp(t1 / 1000, timezone.utc).isoformat()) == 1
    with pytest.raises(InvalidArgumentError):
        store.current_state("t", version_as_of=1)  # a version of one partition table: which one?
    assert store.current_state("t", version_as_of={1: 1}).count() == 1
