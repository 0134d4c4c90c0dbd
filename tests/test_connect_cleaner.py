"""The cleaner on Spark Connect: both passes run through the DataFrame API (``mapInArrow``), so a pass on a
Connect session (``connect_spark``, a server JVM of its own, no ``sparkContext``) leaves exactly the log a
pass on the classic session leaves, on a local store and on the S3 server; a task's error still names the file.
"""

from __future__ import annotations

import pytest
from conftest import map_slots_for

from deltalog import CorruptLogError, ManualClock, Record, Store
from deltalog.cleaner import cleaner as cleaner_module
from deltalog.cleaner import tasks
from deltalog.cleaner.cleaner import CLEANED_DIR_PREFIX
from deltalog.cleaner.log_cleaner import raise_failures
from deltalog.spark import is_connect
from deltalog.storage.local import LocalStorage

TOPIC = "prices"
START_MS = 1_700_000_000_000


def _store(uri: str, options, spark) -> Store:
    return Store(uri, storage_options=options, clock=ManualClock(START_MS), spark=spark)


def _history(store: Store) -> list[list]:
    """Appends, rolls and passes whose result depends on every rule of both passes: a clean section tested by
    key hash, tombstones stamped and later removed, keyless records dropped, and (with a small map) partial
    passes that end the mapped range early. Returns the figures of every pass."""
    store.create_topic(TOPIC, config={"cleanup.policy": "delete", "min.cleanable.dirty.ratio": "0.01",
                                      "delete.retention.ms": "1000", "file.delete.delay.ms": "0"})
    # Keyless records exist only if the topic was not compacted when they were written.
    store.append(TOPIC, 0, [Record(key=None, value=b"keyless"), Record(key=b"k0", value=b"first")])
    store.alter_topic_config(TOPIC, {"cleanup.policy": "compact"})
    passes = []
    for round_ in range(4):
        records = [Record(key=b"k%d" % (i % 13), value=None if (round_, i) in ((1, 3), (2, 7), (3, 30)) else b"r%d-%d" % (round_, i))
                   for i in range(20 + 5 * round_)]
        store.append(TOPIC, 0, records)
        store.roll(TOPIC, 0)
        store.clock.advance(600)
        cleaner = store.log_cleaner(map_slots=map_slots_for(6) if round_ == 2 else None)
        passes.append(raise_failures(cleaner.clean_filthiest_logs([TOPIC])))
    store.append(TOPIC, 0, [Record(key=b"active", value=b"1")])
    return passes


def _figures(passes: list[list]) -> list[list[dict]]:
    timing = ("map_ms", "copy_ms", "version")
    return [[{k: v for k, v in p.as_dict().items() if k not in timing} for p in round_] for round_ in passes]


def _positions(store: Store) -> tuple:
    """The partition's positions and segments, with each file's offsets and horizons (not its random name)."""
    p = store.describe(TOPIC)[0]
    files = [(f.segment, f.num_records, f.min_offset, f.max_offset, f.tombstones, f.max_delete_horizon_ms)
             for s in p.segments for f in s.files]
    return (p.log_start_offset, p.log_end_offset, p.first_dirty_offset, p.first_uncleanable_offset,
            [(s.base_offset, s.end_offset) for s in p.segments], files)


def _log(store: Store) -> list[Record]:
    return store.read(TOPIC, 0, "earliest")


@pytest.mark.parametrize("kind", [pytest.param("local", marks=pytest.mark.slow), "s3"])
def test_passes_on_connect_leave_the_log_the_classic_session_leaves(kind, tmp_path, spark, connect_spark, request):
    assert is_connect(connect_spark) and not is_connect(spark)
    if kind == "local":
        locations = [(str(tmp_path / "classic"), None), (str(tmp_path / "connect"), None)]
    else:
        server = request.getfixturevalue("s3_server")
        uri = request.getfixturevalue("s3_store_uri")
        locations = [(f"{uri}/classic", server.storage_options), (f"{uri}/connect", server.storage_options)]
    classic = _store(*locations[0], spark)
    connect = _store(*locations[1], connect_spark)
    classic_passes, connect_passes = _history(classic), _history(connect)

    assert sum(map(len, connect_passes)) >= 5  # partial passes in round 2
    assert any(p.tombstones_stamped for r in connect_passes for p in r)
    assert any(p.tombstones_removed for r in connect_passes for p in r)
    assert any(p.keyless_dropped for r in connect_passes for p in r)
    assert _figures(connect_passes) == _figures(classic_passes)
    # Same surviving records: offsets, keys, values, timestamps and delete horizons.
    assert _log(connect) == _log(classic)
    assert any(r.delete_horizon_ms is not None for r in _log(connect))
    assert _positions(connect) == _positions(classic)
    # Nothing the tasks were given (spilled partial maps, the map's hashes, payloads) is left behind.
    names = [f.location for f in connect.storage.list_files(connect.log(TOPIC, 0).uri)]
    assert not [n for n in names if "/_map/" in n or "/_tasks/" in n]
    assert any(CLEANED_DIR_PREFIX in n for n in names)


def test_hashes_and_payloads_through_storage_give_the_same_log(tmp_path, spark, connect_spark, monkeypatch):
    """Big shared data never rides in a task's closure: past the inline limits the map's hashes are written
    once to the pass's directory and each task reads its payload from there. With the limits at zero the small
    history takes that path on Connect, and ends where the classic session's inline path ends."""
    classic = _store(str(tmp_path / "classic"), None, spark)
    classic_passes = _history(classic)

    monkeypatch.setattr(tasks, "INLINE_PAYLOAD_BYTES", 0)
    monkeypatch.setattr(cleaner_module, "INLINE_PAYLOAD_BYTES", 0)
    written: list[str] = []
    real_write = LocalStorage.write_bytes  # the backend of a store on a local disk

    def recording_write(self, location, data):  # records the real write, which still happens
        written.append(location)
        return real_write(self, location, data)

    monkeypatch.setattr(LocalStorage, "write_bytes", recording_write)
    connect = _store(str(tmp_path / "connect"), None, connect_spark)
    connect_passes = _history(connect)
    assert [w for w in written if w.endswith("/_tasks/keys.arrays")]
    assert [w for w in written if "/_tasks/task-" in w] and [w for w in written if "/_map/task-" in w]
    assert _figures(connect_passes) == _figures(classic_passes)
    assert _log(connect) == _log(classic)
    names = [f.location for f in connect.storage.list_files(connect.log(TOPIC, 0).uri)]
    assert not [n for n in names if "/_map/" in n or "/_tasks/" in n]


def _damage_column(data: bytes, column: str) -> bytes:
    """The Parquet file ``data`` with the pages of ``column`` overwritten: its footer and other columns still read."""
    import io

    import pyarrow.parquet as pq

    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    out = bytearray(data)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        chunk = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == column)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        out[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    return bytes(out)


@pytest.mark.parametrize("phase", ["pass 1", "pass 2"])
def test_a_corrupt_file_fails_a_pass_on_connect_naming_the_file(tmp_path, connect_spark, phase):
    """A task's CorruptLogError reaches the caller as a CorruptLogError naming the phase and the file, from a
    Connect session's exception as from a classic one's. Pass 1 reads a damaged footer; pass 2 is the first to
    read a damaged value column (pass 1 reads keys and offsets only)."""
    store = _store(str(tmp_path / "s"), None, connect_spark)
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    store.append(TOPIC, 0, [Record(key=b"a", value=b"1" * 100), Record(key=b"a", value=b"2" * 100)])
    store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"b", value=b"1")])
    log = store.log(TOPIC, 0)
    before = log.snapshot()
    victim = before.files[0].path
    data = store.storage.read_bytes(f"{log.uri}/{victim}")
    damaged = data[:-12] + b"\0" * 12 if phase == "pass 1" else _damage_column(data, "value")
    store.storage.write_bytes(f"{log.uri}/{victim}", damaged)
    with pytest.raises(CorruptLogError, match=rf"cleaning {TOPIC}-0 failed in {phase}.*{TOPIC}-0 is damaged: "
                                              rf".*{victim} cannot be read as Parquet.*nothing was committed"):
        store.clean_partition(TOPIC, 0, force=True)
    after = log.snapshot()
    assert after.version == before.version and after.files == before.files
    assert not [d for d in store.storage.list_dirs(log.uri) if d.startswith(CLEANED_DIR_PREFIX)]
