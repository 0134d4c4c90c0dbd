"""The cleaner against other writers and against crashes, with real processes and real Delta commits."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from deltalog import CommitConflictError, Record, Store
from deltalog.cleaner.cleaner import CLEANED_DIR_PREFIX, Cleaner
from deltalog.cleaner.log_to_clean import LogToClean

TOPIC = "races"


def _fill(store: Store, rounds: int = 3, keys: int = 20) -> None:
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                      "file.delete.delay.ms": "60000"})  # Kafka's; deltalog's default is 7 days
    for r in range(rounds):
        store.append(TOPIC, 0, [Record(key=b"k%d" % k, value=b"r%d" % r) for k in range(keys)])
        store.roll(TOPIC, 0)
    store.append(TOPIC, 0, [Record(key=b"active", value=b"1")])


def _records(store: Store) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.delete_horizon_ms) for r in store.read(TOPIC, 0, "earliest")]


def test_two_cleaners_planned_on_one_snapshot_cannot_both_commit(spark_store):
    store = spark_store
    _fill(store)
    log = store.log(TOPIC, 0)
    ltc = LogToClean.of(log.snapshot(), store.clock.now_ms())
    first = Cleaner(store.spark, store.config).clean(ltc, log)
    after_first = _records(store)
    with pytest.raises(CommitConflictError):
        Cleaner(store.spark, store.config).clean(ltc, log)
    assert _records(store) == after_first
    assert log.snapshot().version == first.version
    # The loser's files were never committed and were removed from the table directory.
    live = {f.path for f in log.snapshot().files}
    on_disk = {os.path.relpath(os.path.join(d, n), log.uri) for d, _, ns in os.walk(log.uri) for n in ns
               if n.endswith(".parquet")}
    assert on_disk - live <= {f.path for f in log.snapshot(first.version - 1).files}


PRODUCER = textwrap.dedent(
    """
    import sys
    from deltalog import Record, Store
    store = Store(sys.argv[1])
    out = open(sys.argv[2], "w")
    for i in range(int(sys.argv[3])):
        [offset] = store.append("races", 0, [Record(key=b"p%d" % i, value=b"v%d" % i)])
        out.write(f"{i} {offset}\\n")
        out.flush()
    """
)


@pytest.mark.slow
@pytest.mark.subprocess
def test_producer_appending_during_cleaning_loses_nothing(spark_store, tmp_path):
    """Cleaning commits rebase over a concurrent producer's appends: nothing lost, no offset reused."""
    store = spark_store
    _fill(store)
    produced_file = tmp_path / "produced.txt"
    count = 150
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, store.root, str(produced_file), str(count)])
    try:
        passes = 0
        while producer.poll() is None or passes < 2:
            store.roll(TOPIC, 0)
            if store.clean_partition(TOPIC, 0, force=True) is not None:
                passes += 1
            if passes > 20:
                break
    finally:
        assert producer.wait(timeout=300) == 0
    produced = dict(tuple(map(int, line.split())) for line in produced_file.read_text().splitlines())
    assert len(produced) == count
    records = store.read(TOPIC, 0, "earliest")
    by_offset = {r.offset: r for r in records}
    assert len(by_offset) == len(records)  # offsets unique
    for i, offset in produced.items():  # every produced key is unique, so every record must still be there
        assert by_offset[offset].key == b"p%d" % i and by_offset[offset].value == b"v%d" % i
    assert len(set(produced.values())) == count
    state = store.describe(TOPIC)[0]
    assert state.log_end_offset == 3 * 20 + 1 + count
    assert passes >= 2


CLEANER = textwrap.dedent(
    """
    import sys
    from deltalog import Store, ManualClock
    store = Store(sys.argv[1], clock=ManualClock(int(sys.argv[2])))
    print("starting", flush=True)
    store.clean_partition("races", 0, force=True)
    print("done", flush=True)
    """
)


def _wait_for_pass_output(partition_dir: str, proc: subprocess.Popen, timeout_s: float = 240) -> None:
    """Block until the cleaner process has started writing its pass's output (or has exited)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if any(name.startswith(CLEANED_DIR_PREFIX) for name in os.listdir(partition_dir)):
            return
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("delay_after_write_starts", [0.0, 0.5])
@pytest.mark.subprocess
def test_a_cleaner_killed_at_any_moment_leaves_the_old_or_the_new_log(tmp_path, clock, spark,
                                                                      delay_after_write_starts):
    """SIGKILL a cleaning process while it writes (or commits): the table holds either the old or the new
    records, and a later pass recovers to exactly the state an uninterrupted pass gives."""
    original = Store(tmp_path / "original", clock=clock, spark=spark)
    _fill(original)
    before = _records(original)
    reference = tmp_path / "reference"
    shutil.copytree(original.root, reference)
    ref_store = Store(reference, clock=clock, spark=spark)
    ref_store.clean_partition(TOPIC, 0, force=True)
    after = _records(ref_store)
    assert after != before

    victim = subprocess.Popen([sys.executable, "-c", CLEANER, original.root, str(clock.now_ms())],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait_for_pass_output(original.log(TOPIC, 0).uri, victim)
    time.sleep(delay_after_write_starts)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)

    survivor = Store(original.root, clock=clock, spark=spark)
    assert _records(survivor) in (before, after)
    # No clock advance: the dead cleaner's lease is taken over at once (its process is gone).
    survivor.clean_partition(TOPIC, 0, force=True)
    assert [r[:3] for r in _records(survivor)] == [r[:3] for r in after]
    # Whatever the dead pass wrote is garbage: VACUUM removes it after file.delete.delay.ms.
    uri = survivor.log(TOPIC, 0).uri
    clock.advance(60_001)
    survivor.vacuum(dry_run=False)
    live = {f.path for f in survivor.log(TOPIC, 0).snapshot().files}
    left = {os.path.relpath(os.path.join(d, n), uri) for d, _, ns in os.walk(uri) for n in ns if n.endswith(".parquet")}
    assert left == live
