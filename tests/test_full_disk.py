"""A full disk, for real: a small tmpfs mounted under the test's directory and filled up.

Appends, topic creation and a cleaning pass that hit it fail with one StorageFullError naming the place, leave no
temporary or uncommitted file holding the space, and work again once space is freed, with nothing acknowledged
lost; a clean that hit it is not marked uncleanable (Kafka marks a partition uncleanable only for errors of its
log). Mounting needs root, which CI has: elsewhere these tests are skipped, saying why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deltalog import Record, Store
from deltalog.errors import StorageFullError
from deltalog.storage import TMP_SUFFIX
from tooling.tmpfs import TmpfsUnavailable, fill, small_disk

DISK_BYTES = 8 * 1024 * 1024
WEEK = 7 * 24 * 3_600_000


@pytest.fixture
def disk(tmp_path: Path):
    """An 8 MiB tmpfs of its own, unmounted after the test. Skipped only where mounting is impossible (not root);
    CI runs as root, and there (``CI`` set) a failed mount fails the test instead of skipping it."""
    try:
        with small_disk(tmp_path / "disk", DISK_BYTES) as where:
            yield where
    except TmpfsUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the full-disk tests: {e}")
        pytest.skip(f"{e} (CI runs these as root)")


def left_behind(store: Store, topic: str) -> tuple[list[str], list[str]]:
    """Temporary files anywhere in the store, and files in ``topic``'s partition 0 that no commit references."""
    root = Path(store.storage.root)
    temp = [str(p) for p in root.rglob(f"*{TMP_SUFFIX}")]
    table = root / "topics" / topic / "0"
    referenced = {f.path for f in store.log(topic, 0).snapshot().files}
    orphans = [str(p.relative_to(table)) for p in table.rglob("*.parquet")
               if "_delta_log" not in p.parts and str(p.relative_to(table)) not in referenced]
    return temp, orphans


def batch(start: int, n: int) -> list[Record]:
    return [Record(key=b"k%d" % (i % 50), value=os.urandom(64)) for i in range(start, start + n)]


@pytest.mark.subprocess
def test_appends_on_a_full_disk_fail_clearly_leave_nothing_and_work_once_space_is_freed(disk, clock):
    store = Store(disk / "store", clock=clock)
    store.create_topic("t", 1)
    store.append("t", 0, batch(0, 100))
    acked = {r.offset: r.value for r in store.read("t", 0, 0)}
    failures = 0
    # Each level of free space fails a different write: the data file, the Delta commit, or neither.
    for leave in (0, 2048, 4096, 8192, 12288, 16384, 24576):
        filler = fill(disk, leave)
        for size in (1, 20, 2_000):
            records = batch(len(acked), size)
            try:
                offsets = store.append("t", 0, records)
            except StorageFullError as e:
                failures += 1
                text = str(e)
                assert "\x1b" not in text and "full" in text and str(disk) in text and "Free space" in text, text
                assert e.location and str(disk) in e.location
            else:
                acked.update({o: r.value for o, r in zip(offsets, records, strict=True)})
            temp, orphans = left_behind(store, "t")
            assert temp == [] and orphans == [], (leave, size, temp, orphans)
        os.remove(filler)
        # Space freed: the same append works, and every acknowledged record is there, once, unchanged.
        records = batch(len(acked), 100)
        offsets = store.append("t", 0, records)
        acked.update({o: r.value for o, r in zip(offsets, records, strict=True)})
        assert {r.offset: r.value for r in store.read("t", 0, 0)} == acked
    assert failures >= 10  # the disk really was full for most of them


@pytest.mark.subprocess
def test_topic_creation_on_a_full_disk_fails_clearly_and_works_once_space_is_freed(disk, clock):
    store = Store(disk / "store", clock=clock)
    store.create_topic("before", 1)
    filler = fill(disk)
    with pytest.raises(StorageFullError, match="No space left on device"):
        store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    assert list(Path(store.storage.root).rglob(f"*{TMP_SUFFIX}")) == []
    os.remove(filler)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    assert store.append("t", 0, [Record(key=b"k", value=b"v")]) == [0]


@pytest.mark.subprocess
def test_a_clean_that_hits_a_full_disk_is_not_marked_uncleanable_and_succeeds_once_space_is_freed(
        disk, clock, spark):
    store = Store(disk / "store", clock=clock, spark=spark)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    for _ in range(4):
        store.append("t", 0, [Record(key=b"k%d" % i, value=os.urandom(200)) for i in range(2_000)])
    clock.advance(WEEK + 1)  # segment.ms: the next append rolls, so the records above are cleanable
    store.append("t", 0, [Record(key=b"last", value=b"v")])
    latest = {r.key: r.value for r in store.read("t", 0, 0)}

    # No space at all (the partition's lease cannot be taken), then a little (the pass's own files do not fit).
    for leave in (0, 128 * 1024):
        filler = fill(disk, leave)
        with pytest.raises(StorageFullError) as raised:
            store.clean()
        assert "\x1b" not in str(raised.value) and str(disk) in raised.value.location
        assert store.log_cleaner().manager.uncleanable_partitions() == set()
        temp, orphans = left_behind(store, "t")
        assert temp == [] and orphans == []
        table = Path(store.storage.root) / "topics" / "t" / "0"
        assert not [p for p in table.iterdir() if p.name.startswith("cleaned-")]
        if leave:  # the lease was taken: the pass itself failed, named as such
            assert "cleaning t-0" in str(raised.value)
        os.remove(filler)

    results = store.clean()
    assert len(results) == 1 and results[0].records_written == len(latest) - 1
    assert {r.key: r.value for r in store.read("t", 0, 0)} == latest


@pytest.mark.subprocess
def test_the_console_producer_on_a_full_disk_exits_1_with_the_clear_error(disk, clock, capsys, monkeypatch):
    from tests.conftest import run_cli

    store = Store(disk / "store", clock=clock)
    store.create_topic("t", 1)
    filler = fill(disk, 4096)  # the data file fits, its Delta commit does not
    code, _out, err = run_cli(capsys, "produce", "t", "--store", store.storage.root, "--property", "parse.key=true",
                              stdin="k\tv\n" * 50, monkeypatch=monkeypatch)
    assert code == 1 and err.startswith("deltalog: error: ") and "is full (No space left on device)" in err, err
    assert "\x1b" not in err and "Traceback" not in err
    assert left_behind(store, "t") == ([], [])
    os.remove(filler)
    code, _out, err = run_cli(capsys, "produce", "t", "--store", store.storage.root, "--property", "parse.key=true",
                              stdin="k\tv\n" * 50, monkeypatch=monkeypatch)
    assert code == 0, err
    assert len(store.read("t", 0, 0)) == 50


def test_vacuum_sweeps_temporary_files_of_killed_writes_once_a_day_old(store, clock):
    """A write killed between its temporary file and the rename leaves the file: VACUUM removes it after a day."""
    store.create_topic("t", 1)
    stale = Path(store.storage.root) / "topics" / "t" / f"_topic.json.0badc0de{TMP_SUFFIX}"
    stale.write_bytes(b"x" * 1000)
    day_ago = clock.now_ms() / 1000 - 24 * 3600 - 1
    os.utime(stale, (day_ago, day_ago))
    young = Path(store.storage.root) / f"store.json.0badc0df{TMP_SUFFIX}"
    young.write_bytes(b"y")
    os.utime(young, (clock.now_ms() / 1000, clock.now_ms() / 1000))
    listed = store.vacuum_temp_files()
    assert listed.files == ("topics/t/_topic.json.0badc0de" + TMP_SUFFIX,) and listed.files_waiting == 1
    assert stale.exists()  # a dry run by default
    from deltalog.cli.doctor_checks import WARN, check_store_damage

    warned = [c for c in check_store_damage(store.storage.root) if c.name == "temporary files"]
    assert len(warned) == 1 and warned[0].status == WARN and "2 temporary file(s)" in warned[0].detail
    assert store.vacuum_temp_files(dry_run=False).files_deleted == 1
    assert not stale.exists() and young.exists()


def test_an_object_store_out_of_reach_is_transient_and_a_missing_file_is_not():
    from deltalog.storage_faults import is_storage_full, is_transient

    for text in ("Generic S3 error: Error after 10 retries in 3.2s, max_retries:10: error sending request for url "
                 "(http://127.0.0.1:9/b/k): client error (Connect): tcp connect error: Connection refused",
                 "Generic S3 error: Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>"):
        assert is_transient(OSError(text)) and not is_storage_full(OSError(text))
    assert is_transient(ConnectionResetError("peer went away"))
    for text in ("Object at location b/k not found: Client error with status 404 Not Found",
                 "cannot read the Parquet footer of /s/t/0/x.parquet: Parquet file size is 0 bytes"):
        assert not is_transient(OSError(text))


@pytest.mark.parametrize("message, full", [
    ("Generic LocalFileSystem error\n  \x1b[31m↳\x1b[0m Unable to copy data to file\n  \x1b[31m↳\x1b[0m "
     "No space left on device (os error 28)\n", True),  # delta-rs, as it raised on the tmpfs above
    ("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device", True),  # pyarrow
    ("Generic S3 error: Error performing PUT http://minio:9000/b/k: Server returned non-2xx status code: "
     "507 Insufficient Storage: <Code>XMinioStorageFull</Code>", True),  # an object store
    ("Disk quota exceeded (os error 122)", True),
    ("org.apache.spark.api.python.PythonException: Traceback ...\ndeltalog.errors.StorageFullError: writing "
     "/s/t/0/cleaned-1/x.parquet failed: the storage at /s is full", True),  # a Spark task's, as text
    ("[Errno 2] Failed to open local file '/s/t/0/x.parquet'. Detail: [errno 2] No such file or directory", False),
    ("Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet file.", False),
    ("Generic S3 error: Server returned non-2xx status code: 403 Forbidden", False),
])
def test_which_errors_say_the_storage_is_full(message, full):
    from deltalog.storage_faults import full_storage_error, is_storage_full, is_transient

    error = OSError(message)
    assert is_storage_full(error) is full and is_transient(error) is full
    wrapped = RuntimeError("a pass failed")
    wrapped.__cause__ = error
    assert is_storage_full(wrapped) is full
    if full:
        text = str(full_storage_error(error, "/s", "writing x"))
        assert "\x1b" not in text and "/s is full" in text and "Free space there" in text
