"""A transaction's timeout runs on the coordinator's clock, as in Kafka (TransactionMetadata.txnStartTimestamp is
the coordinator's time; TransactionStateManager.timedOutTransactions compares it with the same clock): here the
store's, the time it stamps on what is written to it. Processes whose clocks are skewed by a day (their
Store(clock=...)) neither hold readers back past the timeout nor get fenced before it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deltalog import ManualClock, Record, Store
from deltalog.coordinator.transaction.store_clock import StoreClock
from deltalog.coordinator.transaction.transaction_coordinator import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    TransactionCoordinator,
)
from tests.transaction_support import age_transactional_id

REPO = Path(__file__).resolve().parents[1]
DAY = 86_400_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def committed_values(store: Store, topic: str = "t") -> list[bytes]:
    return [r.value for r in store.read(topic, 0, isolation_level="read_committed")]


def test_the_store_clock_is_the_time_the_store_stamps_on_a_write(store_location):
    uri, options = store_location
    store = Store(uri, storage_options=options, clock=ManualClock(0))  # a process clock of 1970: not consulted
    before = wall_ms()
    now = StoreClock(store.log_manager.storage).now_ms()
    assert before - 2_000 <= now <= wall_ms() + 1_000  # object stores keep Last-Modified to the second


@pytest.mark.subprocess
def test_a_dead_producer_whose_clock_ran_a_day_ahead_is_aborted_after_its_timeout(tmp_path):
    """A real process, its clock a day ahead, opens a transaction and is SIGKILLed: the cleaner's sweep (on a
    correct clock) aborts it once the timeout has passed on the store's clock, not a day later."""
    root = tmp_path / "store"
    store = Store(root)  # the cleaner's process: the wall clock
    store.create_topic("t", 1)
    script = textwrap.dedent(f"""
        import os, signal, time
        from deltalog import ManualClock, Record, Store
        store = Store({str(root)!r}, clock=ManualClock(time.time_ns() // 1_000_000 + {DAY}))
        p = store.producer(transactional_id="ahead", transaction_timeout_ms=2000)
        p.init_transactions()
        p.begin_transaction()
        p.send("t", [Record(b"k", b"in-txn")], partition=0)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    store.append("t", 0, [Record("after", "plain")])
    assert committed_values(store) == []  # the open transaction holds the last stable offset at 0
    coordinator = TransactionCoordinator(store.log_manager)
    meta = coordinator.describe("ahead")
    assert meta.state == ONGOING and abs(meta.txn_start_ms - wall_ms()) < 60_000  # the store's time, not +1 day
    cleaner = store.log_cleaner(metrics=False)
    time.sleep(2.2)
    assert cleaner.maintenance.abort_timed_out_transactions() == ["ahead"]
    assert coordinator.describe("ahead").state == COMPLETE_ABORT
    assert committed_values(store) == [b"plain"]


def test_a_producer_whose_clock_is_a_day_behind_is_not_fenced_before_its_timeout(store_location):
    uri, options = store_location
    behind = Store(uri, storage_options=options, clock=ManualClock(wall_ms() - DAY))
    cleaner_store = Store(uri, storage_options=options)  # another process, on a correct clock
    behind.create_topic("t", 1)
    p = behind.producer(transactional_id="behind", transaction_timeout_ms=60_000)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [Record("k", "1")], partition=0)
    assert cleaner_store.log_cleaner(metrics=False).maintenance.abort_timed_out_transactions() == []
    p.send("t", [Record("k", "2")], partition=0)
    p.commit_transaction()
    assert TransactionCoordinator(cleaner_store.log_manager).describe("behind").state == COMPLETE_COMMIT
    assert committed_values(cleaner_store) == [b"1", b"2"]


def test_two_processes_skewed_both_ways_agree_on_the_timeout(store_location):
    """The producer a day ahead, the sweeping process a day behind: the timeout still runs from the start the
    store stamped, on the store's clock (S3 keeps it to the second, hence the margin)."""
    uri, options = store_location
    ahead = Store(uri, storage_options=options, clock=ManualClock(wall_ms() + DAY))
    behind = Store(uri, storage_options=options, clock=ManualClock(wall_ms() - DAY))
    ahead.create_topic("t", 1)
    p = ahead.producer(transactional_id="app", transaction_timeout_ms=5000)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [Record("k", "1")], partition=0)
    coordinator = TransactionCoordinator(behind.log_manager)
    assert coordinator.abort_timed_out_transactions(behind.clock.now_ms()) == []
    time.sleep(6.2)  # past the timeout even counted in the whole seconds of S3's Last-Modified
    assert coordinator.abort_timed_out_transactions(behind.clock.now_ms()) == ["app"]
    assert committed_values(behind) == []


def test_an_idle_id_of_a_producer_whose_clock_is_far_behind_expires_on_the_store_s_clock(store_location):
    """transactional.id.expiration.ms counts from the id's last use on the store's clock: a producer whose clock is
    30 days behind writes a last_update_ms a month old, and its id must not expire at the sweep's next look (a
    week's expiration); it expires once unused that long on the store's clock."""
    uri, options = store_location
    behind = Store(uri, storage_options=options, clock=ManualClock(wall_ms() - 30 * DAY))
    behind.create_topic("t", 1)
    p = behind.producer(transactional_id="behind")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [Record("k", "1")], partition=0)
    p.commit_transaction()
    coordinator = TransactionCoordinator(Store(uri, storage_options=options).log_manager)  # a correct clock
    assert coordinator.describe("behind").last_update_ms < wall_ms() - 29 * DAY  # the producer's clock wrote it
    week = 7 * DAY
    assert coordinator.expire_transactional_ids(wall_ms(), week) == []
    assert coordinator.describe("behind").state == COMPLETE_COMMIT
    p.begin_transaction()  # it still writes
    p.send("t", [Record("k", "2")], partition=0)
    p.commit_transaction()
    if options is None:  # a local disk: its clock is the files' modification time, set back a week
        age_transactional_id(behind, "behind", week)
        assert coordinator.expire_transactional_ids(wall_ms(), week) == ["behind"]
    else:  # S3: wait out a short expiration (Last-Modified is kept to the second, hence the margin)
        time.sleep(3.2)
        assert coordinator.expire_transactional_ids(wall_ms(), 2_000) == ["behind"]
    assert coordinator.describe("behind") is None


def test_kafka_transactions_describe_measures_the_duration_on_the_store_s_clock(tmp_path, capsys):
    import json

    from deltalog.cli import main

    root = tmp_path / "store"
    producer_store = Store(root, clock=ManualClock(wall_ms() + DAY))
    producer_store.create_topic("t", 1)
    p = producer_store.producer(transactional_id="app")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", [Record("k", "1")], partition=0)
    assert main(["--store", str(root), "transactions", "describe", "--transactional-id", "app",
                 "--output", "json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["state"] == ONGOING
    assert 0 <= row["duration_ms"] < 60_000  # not minus a day: the start and now are both the store's
