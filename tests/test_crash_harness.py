"""Crashes and concurrency: producers and cleaner runs SIGKILLed at random moments and at commit boundaries, several
producers with two cleaner jobs, and the store checked against the model of what producers were told
(:mod:`tooling.reliability`).

The default run kills a few processes of each kind. The full size (at least 30 kills of each kind, a 60-second
concurrency run) runs only when the slow suite is asked for by name, ``python -m pytest -m slow``: it takes
about half an hour on two cores, mostly Spark start-ups. ``python -m tooling.reliability`` runs the same and
writes docs/RELIABILITY.md.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timezone

import pytest

from deltalog import Record, Store
from deltalog.log import delta
from tooling.reliability.figures import Run, main, render
from tooling.reliability.harness import (
    CLEANER_ENTRIES,
    Harness,
    cleaner_boundary_plan,
    producer_boundary_plan,
)
from tooling.reliability.model import (
    ID_HEADER,
    Producer,
    SideFile,
    Workload,
    read_side_files,
    verify,
    verify_compacted,
)

FULL_KILLS = 30
FULL_SECONDS = 60
#: The full-size runs take about half an hour on 2 idle cores (pytest's default limit is 15 minutes).
FULL_TIMEOUT_S = 5400


@pytest.fixture(params=["local", "s3"])
def harness(request, tmp_path, spark):
    """A harness on a fresh store: a local directory, or a prefix on the moto S3 server (its location, storage
    options, and the standard AWS variables for every producer and cleaner process it starts)."""
    if request.param == "s3":
        s3 = request.getfixturevalue("s3_server")
        return Harness(request.getfixturevalue("s3_store_uri"), tmp_path / "work", spark=spark,
                       storage_options=s3.storage_options, env=s3.env, seed=14, log=print)
    return Harness(str(tmp_path / "store"), tmp_path / "work", spark=spark, seed=14, log=print)


# -- the model catches what it should (a checker that cannot fail is no checker) -------------------------------


def _produce(tmp_path, *, keys: int, batches: int = 4):
    store = Store(tmp_path / "s")
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    side = tmp_path / "side"
    side.mkdir()
    producer = Producer(store, "p", side / "p.side.jsonl", Workload({"t": 1}, keys=keys, tombstones=0.0, rolls=0.0),
                        seed=1)
    for _ in range(batches):
        producer.batch()
    producer.close()
    return store, side


@pytest.fixture
def produced(tmp_path):
    """Four batches of records with (almost surely) distinct keys."""
    return _produce(tmp_path, keys=10**9)


def _batches(side):
    return read_side_files(sorted(side.glob("*.side.jsonl")))


def test_the_model_accepts_what_producers_were_told(produced):
    store, side = produced
    result = verify(store, _batches(side))
    assert result.ok, result.problems
    assert result.total("acked") == result.total("acked_present") == result.total("records_read") > 0


def test_the_model_sees_records_deleted_without_a_reason(produced):
    store, side = produced
    store.delete_records("t", 0, 3)  # a compacted topic has no retention that would allow it
    result = verify(store, _batches(side))
    lost = [p for p in result.problems if "is gone and nothing allows it" in p]
    assert len(lost) == 3 and result.total("superseded") == 0


def test_the_model_sees_a_newer_record_gone_while_an_older_one_stays(tmp_path):
    store, side = _produce(tmp_path, keys=1, batches=3)  # every record has the key k0
    log = store.log("t", 0)
    newest = log.snapshot().files[-1]
    delta.commit(log.table(), [delta.remove_action(newest, 0)], txns={}, operation="tamper")
    result = verify(store, _batches(side))
    report = result.partitions[0]
    assert len(report.lost) == newest.num_records
    assert len(report.order) == newest.num_records and "an older value outlived a newer one" in report.order[0]


def test_the_model_sees_unknown_duplicated_and_changed_records(produced):
    store, side = produced
    batches = _batches(side)
    some = batches[0].records[0]
    store.append("t", 0, [Record(b"intruder", b"x")])  # no producer sent it
    store.append("t", 0, [Record(some.key, some.value, headers={ID_HEADER: some.id}, timestamp_ms=some.timestamp_ms)])
    late = SideFile(side / "q.side.jsonl")  # an in-flight batch whose record landed with another value
    late.write({"intent": "q:0", "topic": "t", "partition": 0, "t": 0,
                "records": [{"id": "q:0:0", "key": "k", "value": "sent", "ts": 5}]})
    late.close()
    store.append("t", 0, [Record(b"k", b"stored", headers={ID_HEADER: "q:0:0"}, timestamp_ms=5)])
    result = verify(store, _batches(side))
    report = result.partitions[0]
    assert len(report.unknown) == 1 and "intruder" in report.unknown[0]
    assert len(report.duplicated) == 1 and some.id in report.duplicated[0]
    assert len(report.changed) == 1 and "stored" in report.changed[0]


def test_the_model_sees_an_offset_that_changed(produced, tmp_path):
    store, side = produced
    path = side / "p.side.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    ack = next(e for e in lines if "ack" in e)
    ack["offsets"] = [o + 100 for o in ack["offsets"]]  # as if the log had moved the batch
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    result = verify(store, _batches(side))
    report = result.partitions[0]
    assert len(report.changed) == len(ack["offsets"]) and "was told offset" in report.changed[0]
    assert any("log end offset" in p for p in report.other)


def test_the_compaction_check_sees_a_key_twice_in_the_cleaned_section(produced, spark):
    store, side = produced
    store = Store(store.root, spark=spark)
    store.roll("t", 0)
    store.clean_partition("t", 0, force=True)
    assert verify_compacted(store, _batches(side)) == []
    # a file with an older value of a cleaned key, slipped into the clean section
    log = store.log("t", 0)
    snap = log.snapshot()
    kept = store.read("t", 0, "earliest")[0]
    from deltalog.log.arrow_records import records_to_table

    rows = records_to_table([Record(kept.key, b"stale")], [snap.log_end_offset], [0], snap.log_end_offset)
    add = delta.write_data_file(log.storage, log.uri, rows, 0)
    delta.commit(log.table(), [add], txns={delta.TXN_LOG_END_OFFSET: snap.log_end_offset + 1,
                                           delta.TXN_CLEANER_CHECKPOINT: snap.log_end_offset + 1,
                                           delta.TXN_ACTIVE_SEGMENT: snap.log_end_offset + 1}, operation="tamper")
    problems = verify_compacted(store, _batches(side))
    assert len(problems) == 1 and repr(kept.key) in problems[0]


# -- kills ------------------------------------------------------------------------------------------------------


def _assert_survived(outcomes, *, expect_killed=True):
    for o in outcomes:
        assert not o.problems, (o.kind, o.how, o.entry, o.target, o.where, o.problems[:5])
        if expect_killed:
            assert o.killed, (o.kind, o.how, o.entry, o.target, o.where)


@pytest.mark.subprocess
def test_killed_producers_lose_nothing(harness):
    outcomes = [harness.producer_kill() for _ in range(2)]
    outcomes += [harness.producer_kill(f"{point}@{n}") for point, n in
                 (("append:before-commit", 2), ("append:after-commit", 3))]
    _assert_survived(outcomes[2:])
    _assert_survived(outcomes[:2], expect_killed=False)  # a random kill may find the producer between batches
    assert any(o.where == "at append:after-commit #3" for o in outcomes)
    what, problems = harness.recover_after_producer_kills()
    assert problems == [], problems
    report = render(Run(datetime.now(timezone.utc), {}, producer_kills=outcomes, producer_recovery=(what, problems),
                        orphaned_files=harness.orphaned_files()))
    assert "| producers killed at an append/roll commit boundary | 2 | 2 | 2 |" in report, report
    assert "**Records lost: 0**" in report and "| boundary | at append:after-commit #3 | 1 | 1 of 1 |" in report


@pytest.mark.subprocess
def test_killed_cleaner_runs_lose_nothing_and_the_next_pass_completes(harness):
    outcomes = [harness.cleaner_kill("job"),
                harness.cleaner_kill("api", "clean:after-commit@1"),
                harness.cleaner_kill("cli", "clean:before-commit@2")]
    _assert_survived(outcomes[1:])
    _assert_survived(outcomes[:1], expect_killed=False)
    assert [o.where.split(" (")[0] for o in outcomes[1:]] == ["at clean:after-commit #1", "at clean:before-commit #2"]
    # A round's passes run side by side (cleaner/shared_jobs.py) and commit at nearly the same moment: by the time
    # the first commit's hook kills the process, the round's other commits may all have landed, so the pass after
    # a kill at after-commit #1 may find nothing left to clean; a kill before commit #2 always leaves work.
    assert all("failures 0" in o.next_pass for o in outcomes[1:]), [o.next_pass for o in outcomes]
    assert outcomes[2].next_pass.startswith(("1 ", "2 ", "3 ", "4 ")), [o.next_pass for o in outcomes]
    report = render(Run(datetime.now(timezone.utc), {}, cleaner_kills=outcomes))
    assert "| cleaner runs killed at a cleaning/retention commit boundary | 2 | 2 | 2 |" in report, report
    assert "| clean:before-commit@2 | cli | 1 | 1 | 1 of 1 |" in report, report


@pytest.mark.slow
@pytest.mark.subprocess
def test_producers_and_two_cleaner_jobs_together(harness):
    out = harness.concurrency(15, producers=3, jobs=2)
    assert not out.problems, out.problems[:5]
    assert out.records_acked > 0 and sum(out.passes) > 0, out
    assert out.job_exit_codes == [0, 0]
    report = render(Run(datetime.now(timezone.utc), {}, concurrency=out))
    assert f"| records acknowledged | {out.records_acked:,} in {out.batches_acked:,} batches |" in report, report
    assert "| **lost, changed, duplicated, out of order** | **0, 0, 0, 0** |" in report, report


@pytest.mark.slow
@pytest.mark.timeout(FULL_TIMEOUT_S)
@pytest.mark.full_size
@pytest.mark.parametrize("harness", ["local"], indirect=True)  # full size: local only
def test_full_size_kills(harness):
    """At least 30 kills of each kind: producers at random moments and at each append/roll commit boundary;
    cleaner runs through each entry point at random moments and at each cleaning/retention commit boundary."""
    producer_random = [harness.producer_kill() for _ in range(FULL_KILLS)]
    producer_boundary = [harness.producer_kill(boundary) for boundary in producer_boundary_plan(FULL_KILLS)]
    _, problems = harness.recover_after_producer_kills()
    assert problems == []
    entries = itertools.cycle(CLEANER_ENTRIES)
    cleaner_random = []
    while sum(o.killed for o in cleaner_random) < FULL_KILLS and len(cleaner_random) < 2 * FULL_KILLS:
        cleaner_random.append(harness.cleaner_kill(next(entries)))
    cleaner_boundary = [harness.cleaner_kill(entry, point) for entry, point in cleaner_boundary_plan(FULL_KILLS)]
    _assert_survived(producer_boundary + cleaner_boundary)
    _assert_survived(producer_random + cleaner_random, expect_killed=False)
    assert sum(o.killed for o in producer_random) >= FULL_KILLS * 2 // 3
    assert sum(o.killed for o in cleaner_random) >= FULL_KILLS


@pytest.mark.slow
@pytest.mark.timeout(FULL_TIMEOUT_S)
@pytest.mark.full_size
@pytest.mark.parametrize("harness", ["local"], indirect=True)  # full size: local only
def test_full_size_concurrency(harness):
    out = harness.concurrency(FULL_SECONDS, producers=3, jobs=2)
    assert not out.problems, out.problems[:5]
    assert out.job_exit_codes == [0, 0]


@pytest.mark.parametrize("harness", ["local"], indirect=True)
@pytest.mark.subprocess
def test_sigterm_to_the_job_mid_pass_marks_nothing_uncleanable(tmp_path, harness):
    """Ctrl-C in a terminal, or a service manager's stop, signals the job's whole process group: Spark's JVM
    then stops its context under the running pass. That pass was interrupted, not failed: its partition must
    not be marked uncleanable (found by the concurrency run, which stops its jobs that way)."""
    import os
    import signal

    from tooling.reliability.harness import JOB_READY, _wait_exit

    harness._dirty_everything(harness._kill_dir())
    proc, logfile = harness._start_cleaner("job", "sigterm")
    assert harness._wait_for(logfile, "cleaning crash-", proc, 600) is not None, logfile.read_text()[-3000:]
    assert JOB_READY in logfile.read_text()
    os.killpg(proc.pid, signal.SIGTERM)
    assert _wait_exit(proc, 300)
    harness._kill_group(proc)
    text = logfile.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "cut short because the cleaner is stopping" in text or "Cleaned log" in text, text[-3000:]
    assert harness.store().log_cleaner().manager.uncleanable_partitions() == set(), text[-3000:]


@pytest.mark.spark
@pytest.mark.subprocess
def test_the_figures_command_writes_the_report(tmp_path):
    """``python -m tooling.reliability`` end to end on its fastest part (the kills and the concurrency run
    render through the same code in the tests above)."""
    out = tmp_path / "RELIABILITY.md"
    assert main(["--examples", "10", "--skip", "kills", "--skip", "concurrency", "--skip", "state", "--skip", "clock",
                 "--skip", "disk", "--skip", "store-faults", "--out", str(out),
                 "--workdir", str(tmp_path / "work")]) == 0  # the attack classes: tests/test_attack_harness.py
    text = out.read_text()
    assert text.startswith("# Reliability\n") and "`python -m tooling.reliability --examples 10 --skip kills" in text
    assert "| command line | 10 |" in text and "## Damage" in text and "**FAILED**" not in text
