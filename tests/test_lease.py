"""Partition leases: one holder at a time, across processes; stale leases are taken over after expiry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from deltalog import ManualClock
from deltalog.errors import PartitionBusyError
from deltalog.log.lease import LeaseManager

TTL = 10_000


@pytest.fixture
def clock():
    return ManualClock(1_000_000)


def managers(tmp_path, clock, n=2):
    return [LeaseManager(str(tmp_path), clock, owner=f"owner-{i}", ttl_ms=TTL) for i in range(n)]


def test_one_holder_at_a_time(tmp_path, clock):
    a, b = managers(tmp_path, clock)
    lease = a.acquire("t", 0, "clean")
    assert lease is not None and lease.still_held()
    assert b.acquire("t", 0, "retention") is None
    assert b.holder("t", 0).owner == "owner-0"
    assert b.acquire("t", 1, "retention") is not None  # other partitions are free
    assert b.acquire("u", 0, "retention") is not None
    lease.release()
    assert not lease.still_held()
    assert b.holder("t", 0) is None
    again = b.acquire("t", 0, "retention")
    assert again is not None and again.purpose == "retention"


def test_hold_raises_a_clear_error_when_busy(tmp_path, clock):
    a, b = managers(tmp_path, clock)
    with a.hold("t", 3, "clean"):
        with pytest.raises(PartitionBusyError, match=r"t-3 is busy: owner-0 \(clean"):
            with b.hold("t", 3, "vacuum"):
                pass
    with b.hold("t", 3, "vacuum") as lease:  # released on leaving the block
        assert lease.still_held()
    assert a.holder("t", 3) is None


def test_expired_lease_is_taken_over_and_the_old_holder_notices(tmp_path, clock):
    a, b = managers(tmp_path, clock)
    old = a.acquire("t", 0, "clean")
    clock.advance(TTL - 1)
    assert b.acquire("t", 0, "clean") is None
    clock.advance(1)
    new = b.acquire("t", 0, "clean")
    assert new is not None and new.generation == old.generation + 1
    assert not old.still_held()
    with pytest.raises(PartitionBusyError, match="was lost"):
        old.renew()
    old.release()  # releasing a lost lease leaves the new holder alone
    assert new.still_held() and a.holder("t", 0).owner == "owner-1"
    # only the live generation is left on disk
    assert os.listdir(os.path.join(tmp_path, "_deltalog", "leases", "t", "0")) == [os.path.basename(new.path)]


def test_renewal_keeps_a_long_operation_safe(tmp_path, clock):
    a, b = managers(tmp_path, clock)
    lease = a.acquire("t", 0, "clean")
    for _ in range(5):
        clock.advance(TTL - 1)
        lease.renew()
        assert b.acquire("t", 0, "clean") is None
    with open(lease.path) as f:
        assert json.load(f)["expires_ms"] == clock.now_ms() + TTL


def test_heartbeat_renews_in_the_background(tmp_path, clock):
    a, b = managers(tmp_path, clock)
    lease = a.acquire("t", 0, "clean")
    lease.start_heartbeat(interval_s=0.01)
    clock.advance(TTL - 1)
    import time

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(lease.path) as f:
            if json.load(f)["expires_ms"] == clock.now_ms() + TTL:
                break
        time.sleep(0.01)
    clock.advance(TTL - 1)  # past the original expiry, within the renewed one
    assert b.acquire("t", 0, "clean") is None
    lease.release()
    assert b.acquire("t", 0, "clean") is not None


def test_a_lease_file_cut_short_counts_as_held_until_its_ttl(tmp_path, clock):
    a, b = managers(tmp_path, clock)
    d = os.path.join(tmp_path, "_deltalog", "leases", "t", "0")
    os.makedirs(d)
    path = os.path.join(d, "000000000000.lease")
    open(path, "w").close()  # a process died between O_EXCL-creating and writing its lease
    os.utime(path, (clock.now_ms() / 1000, clock.now_ms() / 1000))
    assert a.acquire("t", 0, "clean") is None
    clock.advance(TTL)
    assert a.acquire("t", 0, "clean") is not None


RACER = textwrap.dedent("""
    import json, sys, time
    from deltalog.clock import WallClock
    from deltalog.log.lease import LeaseManager
    from deltalog.storage import Storage
    root, options, start = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    m = LeaseManager(Storage(root, options), WallClock(), ttl_ms=600_000)
    while time.time() < start:
        pass
    won = [p for p in range(40) if m.acquire("race", p, "clean") is not None]
    print(json.dumps(won))
""")


@pytest.mark.slow
@pytest.mark.subprocess
def test_processes_racing_for_the_same_partitions_never_both_win(store_location):
    """On a local disk (hard links) and on S3 (If-None-Match), four processes, forty partitions."""
    uri, options = store_location
    start = __import__("time").time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", RACER, uri, json.dumps(options or {}), str(start)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    wins = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    flat = sorted(p for w in wins for p in w)
    assert flat == list(range(40)), wins  # every partition won exactly once


@pytest.mark.subprocess
def test_a_lease_of_a_dead_local_process_is_taken_over_before_it_expires(tmp_path):
    """A crashed job must not block the next run for the whole TTL: its pid is gone on this machine."""
    import subprocess
    import sys

    from deltalog.clock import ManualClock
    from deltalog.log.lease import LeaseManager

    clock = ManualClock(0)
    code = (
        "import sys; from deltalog.clock import ManualClock; from deltalog.log.lease import LeaseManager;"
        "m = LeaseManager(sys.argv[1], ManualClock(0)); assert m.acquire('t', 0, 'clean') is not None"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)  # exits holding it
    mine = LeaseManager(str(tmp_path), clock)
    assert mine.holder("t", 0) is None
    lease = mine.acquire("t", 0, "clean")
    assert lease is not None
    # A live holder in this process keeps it.
    other = LeaseManager(str(tmp_path), clock)
    assert other.acquire("t", 0, "clean") is None
    assert other.holder("t", 0).owner == mine.owner


def test_a_damaged_lease_holds_its_partition_for_moments_not_for_its_ttl(tmp_path, clock, caplog):
    """A lease is always written whole (a conditional put), so a torn lease file is damage: it holds the partition
    for UNREADABLE_GRACE_MS after it was written, then is taken over with a warning naming the file (before, it
    held for the whole TTL: every clean of the partition was busy for ten minutes)."""
    from deltalog.log.lease import UNREADABLE_GRACE_MS

    a, b = managers(tmp_path, clock)
    lease = a.acquire("t", 0, "clean")
    with open(lease.path, "r+b") as f:
        f.truncate(10)
    written_s = os.stat(lease.path).st_mtime
    clock.set(int(written_s * 1000) + 1_000)  # within the grace: still held
    assert b.acquire("t", 0, "clean") is None
    clock.set(int(written_s * 1000) + UNREADABLE_GRACE_MS + 1)
    taken = b.acquire("t", 0, "clean")
    assert taken is not None and taken.still_held()
    assert any(lease.path in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
