"""The reliability harness's attack classes (:mod:`tooling.reliability.attacks`): damaged or lost state documents,
clock skew between processes, a full disk, object-store faults between the client and the store, other engines
at the same time.

Each test runs a class for a run or two on a fresh store with real producer processes and checks the verdict
machinery: an attack that landed is counted, a clean run is judged held, and a loss caused on purpose (records
deleted behind the producers' backs) is reported as records lost. Whether today's code holds under each attack
is what ``python -m tooling.reliability --only <class>`` reports; these tests do not depend on it.

What they start: producer subprocesses (every test); moto's S3 server and the fault proxy (the store-faults
tests); a tmpfs mount (the full-disk tests: root only); no Spark session (the verdicts here skip the next
cleaning pass, which the kill tests cover).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest

from tooling.reliability import attack_report
from tooling.reliability.attacks import CLASSES, AttackOutcome
from tooling.reliability.figures import Run, main, render
from tooling.reliability.harness import Harness

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

#: Every run starts producer processes (and some a proxy, an S3 server or a tmpfs).
pytestmark = pytest.mark.subprocess


def _harness(tmp_path, name="h", **kw):
    return Harness(str(tmp_path / name / "store"), tmp_path / name / "work", seed=3, **kw)


def _lose_records(topic):
    """Delete every record of a partition behind the producers' backs: a compacted topic has no rule that
    allows it, so the model must report each acknowledged one lost."""
    def sabotage(store):
        store.delete_records(topic, 0, store.log(topic, 0).head().log_end_offset)
    return sabotage


def _assert_lost(o):
    assert o.lost > 0 and not o.held, o.problems
    assert any("is gone and nothing allows it" in p for p in o.problems), o.problems


# -- state documents ----------------------------------------------------------------------------------------


def test_a_damaged_lease_is_attacked_and_judged(tmp_path):
    from tooling.reliability.state_attacks import state_run

    o = state_run(_harness(tmp_path), "lease-truncated")
    assert o.cls == "state" and o.injected == 1 and o.acked > 0
    assert o.held == (not o.problems)
    assert o.lost == 0 and o.changed == 0 and not o.unreadable, o.problems


def test_the_state_verdict_reports_records_lost(tmp_path):
    from tooling.reliability.state_attacks import TOPIC, state_run

    o = state_run(_harness(tmp_path), "uncleanable-mark-damaged", sabotage=_lose_records(TOPIC))
    _assert_lost(o)


def test_every_error_must_name_the_damaged_document(tmp_path):
    """A damaged producer-id counter: whatever the producer then gets (a new id, or an error), an error that does
    not name ``producer_ids.json`` is counted unclear, and one that names it is counted clear."""
    from tooling.reliability.state_attacks import state_run

    o = state_run(_harness(tmp_path), "producer-ids-wrong-type")
    assert o.injected == 1 and o.acked > 0
    assert all("producer_ids.json" not in e for e in o.errors_other)
    assert o.held == (not o.errors_other and not o.lost and not o.changed and not o.unreadable and not o.stuck)


def test_a_producer_id_given_to_two_producers_is_reported(tmp_path):
    """Kafka never hands one producer id to two producers; producers of one transactional id share theirs."""
    from tooling.reliability.attacks import reused_producer_ids
    from tooling.reliability.model import SideFile

    def side(name, pid, tid=None):
        f = SideFile(tmp_path / f"{name}.side.jsonl")
        f.write({"producer_id": pid, "transactional_id": tid, "name": name})
        f.close()
        return tmp_path / f"{name}.side.jsonl"

    paths = [side("a", 0), side("b", 0), side("c", 1, "t"), side("d", 1, "t"), side("e", 2)]
    assert reused_producer_ids(paths) == ["producer id 0 was given to 2 producers: a, b"]


# -- clock skew ---------------------------------------------------------------------------------------------------


def test_a_clock_ahead_while_the_transaction_lives_holds(tmp_path):
    from tooling.reliability.clock_attacks import clock_run

    o = clock_run(_harness(tmp_path), "ahead-lives")
    assert o.held, o.problems
    assert o.acked > 0 and not o.fenced


def test_the_clock_verdict_reports_reads_stuck(tmp_path, monkeypatch):
    """A transaction its dead producer left open with a timeout of 15 minutes (transaction.max.timeout.ms): the
    timer cannot abort it yet, so read_committed readers are stuck at its first offset, and the verdict says so."""
    from tooling.reliability import clock_attacks
    from tooling.reliability.clock_attacks import clock_run

    monkeypatch.setitem(clock_attacks.CASES, "wall-dies", ("a producer on the wall clock, SIGKILLed mid-transaction", 0))
    o = clock_run(_harness(tmp_path), "wall-dies", dead_timeout_ms=900_000)
    assert len(o.stuck) == 1 and "last stable offset" in o.stuck[0], o.problems
    assert not o.held and o.lost == 0 and "1 reads stuck" in o.verdict()


def test_the_clock_verdict_reports_records_lost(tmp_path):
    from tooling.reliability.clock_attacks import TOPIC, clock_run

    _assert_lost(clock_run(_harness(tmp_path), "ahead-lives", sabotage=_lose_records(TOPIC)))


# -- a full disk ------------------------------------------------------------------------------------------------


@needs_root
def test_a_full_disk_is_filled_and_judged(tmp_path):
    from tooling.reliability.disk_attacks import disk_run

    o = disk_run(lambda location: Harness(location, tmp_path / "work", seed=3), tmp_path / "mnt", batches=30)
    assert o.injected > 0, o.problems  # the disk did fill: writes were refused
    assert o.acked > 0 and o.lost == 0 and o.changed == 0, o.problems
    assert not os.path.ismount(tmp_path / "mnt")


@needs_root
def test_the_disk_verdict_reports_records_lost_and_leftover_temporary_files(tmp_path):
    from tooling.reliability.disk_attacks import TOPIC, disk_run

    def sabotage(store):
        _lose_records(TOPIC)(store)
        (tmp_path / "mnt" / "store" / "topics" / TOPIC / "x.deltalog-tmp").write_bytes(b"half")

    o = disk_run(lambda location: Harness(location, tmp_path / "work", seed=4), tmp_path / "mnt", batches=30,
                 sabotage=sabotage)
    _assert_lost(o)
    assert any("temporary file was left" in p and "x.deltalog-tmp" in p for p in o.problems), o.problems


# -- object-store faults ------------------------------------------------------------------------------------------


@pytest.fixture
def proxied(s3_server, s3_store_uri, tmp_path):
    from tooling.fault_proxy import FaultProxy

    with FaultProxy(s3_server.endpoint_url, seed=5, max_seconds=600) as proxy:
        yield Harness(s3_store_uri, tmp_path / "work", storage_options=s3_server.storage_options, env=s3_server.env,
                      seed=5), proxy


def test_faults_before_the_store_are_injected_and_judged(proxied):
    from tooling.reliability.store_fault_attacks import store_fault_run

    harness, proxy = proxied
    o = store_fault_run(harness, proxy, ("commit", "before", "500"), batches=6)
    assert o.injected > 0 and o.acked > 0, o.problems
    assert o.lost == 0 and o.changed == 0 and not o.unreadable, o.problems
    assert "a 500 before they reach the store" in o.attack


def test_the_store_fault_verdict_reports_records_lost(proxied):
    from tooling.reliability.store_fault_attacks import TOPIC, store_fault_run

    harness, proxy = proxied
    o = store_fault_run(harness, proxy, ("data", "before", "drop"), batches=4, sabotage=_lose_records(TOPIC))
    _assert_lost(o)


# -- the report ---------------------------------------------------------------------------------------------------


def _outcome(cls, attack, **kw):
    return AttackOutcome(cls, attack, injected=1, acked=10, **kw)


# -- other engines -------------------------------------------------------------------------------------------


def test_a_z_order_loop_during_appends_is_attacked_and_judged(tmp_path):
    from tooling.reliability.engine_attacks import engine_run

    o = engine_run(_harness(tmp_path), "z-order", batches=6)
    assert o.cls == "other-engines" and o.injected > 0 and o.acked > 0
    assert o.held, o.problems


def test_a_delete_by_another_engine_is_refused_then_restored(tmp_path):
    from tooling.reliability.engine_attacks import engine_run

    o = engine_run(_harness(tmp_path), "delete", batches=4)
    assert o.injected == 1 and len(o.refused) == 1 and "DELETE" in o.refused[0]
    assert o.held, o.problems


def test_the_other_engines_verdict_reports_offsets_held_twice(tmp_path):
    from tooling.reliability.engine_attacks import COMPACTED, engine_run
    from tooling.reliability.other_engines import duplicate_by_stale_commit

    o = engine_run(_harness(tmp_path), "optimize", batches=4,
                   sabotage=lambda store: duplicate_by_stale_commit(store, COMPACTED, 0))
    assert not o.held and o.changed > 0
    assert any("twice" in p for p in o.problems), o.problems


def test_the_report_counts_each_class_and_keeps_what_was_not_re_run(tmp_path):
    lost = _outcome("store-faults", "PUTs of Delta commits: a 500 after the store applied them", lost=4,
                    problems=["faulty-0: record x is gone and nothing allows it"])
    run = Run(datetime.now(timezone.utc), {}, attacks={
        "store-faults": [lost, _outcome("store-faults", "PUTs of data files: connection dropped before they reach "
                                                        "the store")],
        "clock": [_outcome("clock", "producer clock 1 day ahead, SIGKILLed mid-transaction",
                           stuck=["skewed-0: last stable offset 3 < log end offset 9"],
                           problems=["skewed-0: last stable offset 3 < log end offset 9"])]})
    first = render(run)
    assert f"| {CLASSES['store-faults']} | 2 | 2 | 1 |" in first, first
    assert f"| {CLASSES['clock']} | 1 | 1 | 0 |" in first
    assert "| PUTs of Delta commits: a 500 after the store applied them | 1 | 1 | 4 | 0 | 0 | 0 | 0 | 0 | 0 of 1 |" \
        in first, first
    assert f"- {CLASSES['store-faults']}: 2 runs, 20 records acknowledged; records lost 4" in first
    assert "**What broke:**" in first and "reads stuck" in first

    # a later run of the disk class only keeps the other classes' rows, lines and sections
    carried = attack_report.carry(first, [c for c in CLASSES if c != "disk"])
    second = render(Run(datetime.now(timezone.utc), {}, carried=carried,
                        attacks={"disk": [_outcome("disk", "a 24 MB tmpfs filled by 2 producers")]}))
    broke = first.index("**What broke:**")
    what_broke = first[broke:first.index("\n## ", broke)]
    for line in first.splitlines():
        if (CLASSES["store-faults"] in line or CLASSES["clock"] in line or line.startswith("| PUTs of")) \
                and line not in what_broke:  # what broke is this run's, in its own summary
            assert line in second, line
    assert f"| {CLASSES['disk']} | 1 | 1 | 1 |" in second
    assert f"## {CLASSES['store-faults']}" in second and "Not run this time and kept from the previous report" in second
    assert second.index(f"## {CLASSES['clock']}") < second.index(f"## {CLASSES['disk']}") \
        < second.index(f"## {CLASSES['store-faults']}") < second.index("## How the store is checked")


def test_only_one_class_keeps_the_kills_and_the_damage_of_the_previous_report(tmp_path):
    """``python -m tooling.reliability --only clock`` over the repository's report: the kill, concurrency,
    hostile-input and damage figures stay as they were; the clock class gets its row and section."""
    previous = (os.path.join(os.path.dirname(__file__), "..", "docs", "RELIABILITY.md"))
    out = tmp_path / "RELIABILITY.md"
    out.write_text(open(previous).read())
    before = out.read_text()
    assert main(["--only", "clock", "--runs", "1", "--no-clean-after-attacks", "--out", str(out),
                 "--workdir", str(tmp_path / "work")]) in (0, 1)
    after = out.read_text()
    assert "`python -m tooling.reliability --only clock`" in after
    for section in ("## Kills", "## Concurrency", "## Hostile input", "## Damage"):
        if section in before:
            start = before.index(section)
            body = before[start:before.index("\n## ", start + 1)]
            assert body in after, section
    kill_rows = [line for line in before.splitlines() if line.startswith("| producers ")]
    assert kill_rows and all(row in after for row in kill_rows)
    assert f"| {CLASSES['clock']} | 1 | 1 |" in after and f"## {CLASSES['clock']}" in after


# -- clock skew between writers (time travel) ---------------------------------------------------------------------


@pytest.mark.parametrize("case", ["behind-1h", "ahead-1h"])
def test_writer_clocks_a_skewed_writer_leaves_time_travel_right(tmp_path, case):
    from tooling.reliability.writer_clock_attacks import libfaketime, writer_clock_run

    assert libfaketime() is not None, "libfaketime could not be installed (apt-get install faketime)"
    o = writer_clock_run(_harness(tmp_path), case)
    assert o.held, o.problems
    assert o.injected == 3 and o.acked >= 6 and o.errors_named == 1


def test_writer_clocks_catch_time_travel_on_the_writers_own_timestamps(tmp_path, monkeypatch):
    """Resolving ``timestamp_as_of`` on the raw commit timestamps (newest version whose own timestamp is at or
    before T, as before Delta's rule was applied) is caught: data before the topic existed, records from after T."""
    from deltalog.errors import VersionNotAvailableError
    from deltalog.log import time_travel
    from tooling.reliability.writer_clock_attacks import libfaketime, writer_clock_run

    assert libfaketime() is not None, "libfaketime could not be installed (apt-get install faketime)"

    def raw_version_at(dt, timestamp_ms, name):
        for entry in dt.history():
            if entry.get("timestamp") is not None and int(entry["timestamp"]) <= timestamp_ms:
                return int(entry["version"])
        raise VersionNotAvailableError(f"{name} did not exist")

    monkeypatch.setattr(time_travel, "version_at", raw_version_at)
    o = writer_clock_run(_harness(tmp_path), "behind-1h")
    assert not o.held
    assert any("before the topic was created" in p for p in o.problems) or o.changed
