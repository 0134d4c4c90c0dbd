"""store.delete_records (Kafka's DeleteRecords): the log start offset moves up, files below it go."""

from __future__ import annotations

import pytest

from deltalog import InvalidConfigError, OffsetOutOfRangeError, Record


@pytest.fixture
def topic(store):
    """Partition 0 of ``t``: three batches (files) [0,3), [3,6), [6,9), all in one segment."""
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    for b in range(3):
        store.append("t", 0, [Record(f"k{b}{i}", f"v{b}{i}") for i in range(3)])
    return "t"


def offsets(store, start="earliest"):
    return [r.offset for r in store.read("t", 0, start)]


def test_advances_log_start_and_removes_files_entirely_below(store, topic):
    before = store.log(topic, 0).snapshot()
    result = store.delete_records(topic, 0, 4)
    assert result.low_watermark == 4
    assert result.files_deleted == 1 and result.records_deleted == 3
    assert result.bytes_deleted == before.files[0].size_bytes
    snap = store.log(topic, 0).snapshot()
    assert snap.log_start_offset == 4 and snap.log_end_offset == 9
    assert [f.min_offset for f in snap.files] == [3, 6]  # [3,6) straddles 4 and stays
    assert offsets(store) == [4, 5, 6, 7, 8]
    assert offsets(store, 4) == [4, 5, 6, 7, 8]
    with pytest.raises(OffsetOutOfRangeError) as e:
        store.read(topic, 0, 3)
    assert e.value.log_start_offset == 4 and e.value.log_end_offset == 9
    assert "[4, 9]" in str(e.value)


def test_never_moves_the_log_start_backwards(store, topic):
    store.delete_records(topic, 0, 5)
    result = store.delete_records(topic, 0, 2)
    assert result.low_watermark == 5 and result.files_deleted == 0 and result.version is None
    assert store.delete_records(topic, 0, 5).version is None
    assert store.log(topic, 0).snapshot().log_start_offset == 5


def test_deleting_everything_leaves_an_empty_partition_that_keeps_its_offsets(store, topic):
    result = store.delete_records(topic, 0, 9)
    assert result.low_watermark == 9 and result.files_deleted == 3
    snap = store.log(topic, 0).snapshot()
    assert snap.files == () and snap.log_start_offset == 9 and snap.log_end_offset == 9
    assert store.read(topic, 0, "earliest") == []
    assert store.read(topic, 0, "latest") == []
    assert store.append(topic, 0, [Record("next", "n")]) == [9]
    assert offsets(store) == [9]


def test_minus_one_means_the_log_end(store, topic):
    assert store.delete_records(topic, 0, -1).low_watermark == 9
    assert store.append(topic, 0, [Record("a", "b")]) == [9]


@pytest.mark.parametrize("bad", [10, 1_000, -2])
def test_offsets_outside_the_log_are_refused_and_nothing_changes(store, topic, bad):
    version = store.log(topic, 0).snapshot().version
    with pytest.raises(OffsetOutOfRangeError) as e:
        store.delete_records(topic, 0, bad)
    assert "at most the log end offset" in str(e.value) and e.value.log_end_offset == 9
    assert store.log(topic, 0).snapshot().version == version


@pytest.mark.parametrize("bad", ["3", 2.0, True, None])
def test_non_integer_offsets_are_refused(store, topic, bad):
    with pytest.raises(InvalidConfigError, match="before_offset must be an int"):
        store.delete_records(topic, 0, bad)


def test_history_records_the_operation(store, topic):
    store.delete_records(topic, 0, 6)
    entry = store.log(topic, 0).table().history(1)[0]
    assert entry["deltalog.operation"] == "delete_records"
    assert entry["deltalog.before_offset"] == 6
