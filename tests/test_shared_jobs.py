"""A round of the cleaning loop cleans many partitions side by side with their Spark work in two shared jobs
(cleaner/shared_jobs.py), each partition still cleaned, committed and judged on its own: the same survivors as one
pass at a time, and a failing partition fails alone."""

from __future__ import annotations

import os

from deltalog import Record, Store
from deltalog.cleaner.shared_jobs import SharedJobs

PARTITIONS = 5


def dirty(store, topic, partition, rounds=3):
    for r in range(rounds):
        store.append(topic, partition, [Record(f"k{i}", f"v{r}-{partition}") for i in range(4 + partition)])
        store.append(topic, partition, [Record(f"gone{partition}", None)])  # a tombstone, kept until its horizon
        store.roll(topic, partition)
    store.append(topic, partition, [Record("active", "a")])


def build(root, clock, spark):
    store = Store(root, clock=clock, spark=spark)
    store.create_topic("t", PARTITIONS, config={"cleanup.policy": "compact"})
    for p in range(PARTITIONS):
        dirty(store, "t", p)
    return store


def survivors(store):
    return {p: [(r.offset, r.key, r.value) for r in store.read("t", p, "earliest")] for p in range(PARTITIONS)}


def test_a_round_shares_two_jobs_and_keeps_what_one_pass_at_a_time_keeps(tmp_path, clock, spark):
    shared = build(tmp_path / "shared", clock, spark)
    alone = build(tmp_path / "alone", clock, spark)
    cleaner = shared.log_cleaner()
    round_ = cleaner.clean_filthiest_logs()
    assert sorted(r.partition for r in round_.cleans) == list(range(PARTITIONS)) and round_.outcomes == ()
    assert cleaner.rounds == [(PARTITIONS, 2)]  # pass 1 of all in one Spark job, pass 2 of all in one more
    one_at_a_time = alone.log_cleaner(shared_jobs=False).clean_filthiest_logs()
    assert sorted(r.partition for r in one_at_a_time.cleans) == list(range(PARTITIONS))
    assert survivors(shared) == survivors(alone)
    for p in range(PARTITIONS):  # one Delta commit per partition, as before
        history = shared.log("t", p).table().history()
        assert sum(1 for h in history if h.get("deltalog.operation") == "clean") == 1
    by_partition = {r.partition: r for r in round_.cleans}
    for r in one_at_a_time.cleans:
        mine = by_partition[r.partition]
        assert (mine.records_read, mine.records_written, mine.end_offset) == (r.records_read, r.records_written,
                                                                              r.end_offset)


def test_a_failing_partition_fails_alone_in_a_shared_round(tmp_path, clock, spark):
    store = build(tmp_path / "store", clock, spark)
    log = store.log("t", 2)
    victim = os.path.join(log.uri, log.snapshot().files[0].path)
    with open(victim, "r+b") as f:  # a torn Parquet footer: pass 1's task for t-2 fails
        f.seek(-12, os.SEEK_END)
        f.write(b"\0" * 12)
    cleaner = store.log_cleaner()
    round_ = cleaner.clean_filthiest_logs()
    assert sorted(r.partition for r in round_.cleans) == [0, 1, 3, 4]
    assert [(f.topic, f.partition) for f in round_.failures] == [("t", 2)]
    assert os.path.basename(victim) in round_.failures[0].message


def test_shared_jobs_run_when_every_pass_still_running_has_submitted(spark, tmp_path):
    """Three passes, one of which leaves without Spark work: the other two share one job, and get their own
    results back."""
    import threading

    from deltalog.storage import Storage

    storage = Storage(str(tmp_path))
    jobs = SharedJobs(spark, 3)
    results: dict[int, list[int]] = {}

    def party(i: int) -> None:
        try:
            if i == 1:
                return
            results[i] = jobs.run(abs, [-i, -10 * i], storage=storage, work_dir=str(tmp_path / "work"))
        finally:
            jobs.leave()

    threads = [threading.Thread(target=party, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results == {0: [0, 0], 2: [2, 20]}
    assert (jobs.jobs_run, jobs.submissions) == (1, 2)


def test_a_shared_job_spreads_each_pass_over_its_spark_tasks():
    """Small passes share Spark tasks; a pass with several tasks (a large partition) gets them on different ones."""
    from deltalog.cleaner.tasks import assign

    slots = assign([3, 1, 1, 1], 3)  # payloads 0-2: the large pass; 3, 4, 5: three small ones
    assert sorted(i for slot in slots for i in slot) == list(range(6))
    assert all(len({0, 1, 2} & set(slot)) == 1 for slot in slots)
    assert assign([1, 1], 8) == ((0,), (1,))


def test_rounds_are_taken_from_one_ranking_until_it_is_used_up(tmp_path, clock, spark, monkeypatch):
    """A store of more partitions than a round takes is ranked once for all its rounds (each partition planned again
    at the round's time), and once more at the end to find what is left: not once per round."""
    from deltalog.cleaner import log_cleaner

    store = build(tmp_path / "store", clock, spark)
    monkeypatch.setattr(log_cleaner, "MAX_ROUND_PARTITIONS", 2)
    cleaner = store.log_cleaner()
    rankings = []
    rank = cleaner.manager.logs_to_clean
    monkeypatch.setattr(cleaner.manager, "logs_to_clean", lambda *a, **k: rankings.append(1) or rank(*a, **k))
    round_ = cleaner.clean_filthiest_logs()
    assert sorted(r.partition for r in round_.cleans) == list(range(PARTITIONS)) and round_.outcomes == ()
    assert cleaner.rounds == [(2, 2), (2, 2)]  # the fifth partition, alone in the last round, ran its own jobs
    assert len(rankings) == 2


def test_a_commit_that_removes_files_says_its_version_and_a_taken_version_still_fails_it(tmp_path, clock):
    """delta.commit_version: a commit made on the version its removes were planned on lands as the next version, and
    says so without reading the log back; a handle left at that version after another commit took the next one
    (the check it skipped is then not needed: delta-rs refuses the taken version) fails as a lost race."""
    import pytest

    from deltalog.errors import CommitConflictError
    from deltalog.log import delta

    store = Store(str(tmp_path / "s"), clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    dirty(store, "t", 0, rounds=2)
    log = store.log("t", 0)
    snap = log.snapshot()
    stale = log.table_at(snap.version)
    gone = snap.files[0]
    commit_id, version = delta.commit_version(
        log.table_at(snap.version), [delta.remove_action(gone, clock.now_ms())], txns={"test.position": 1},
        operation="test", plan_version=snap.version, planned_txns={"test.position": None})
    assert version == snap.version + 1 == log.table().version()
    assert delta.committed_version(log.table(), snap.version, commit_id) == version
    with pytest.raises(CommitConflictError):
        delta.commit_version(stale, [delta.remove_action(gone, clock.now_ms())], txns={}, operation="test",
                             plan_version=snap.version)
    assert log.table().version() == version


def test_a_task_error_comes_back_as_the_workers_own_class_from_a_shared_job_and_a_pass_s_own(spark, tmp_path):
    """A worker's deltalog error reaches the driver as its own class (not a traceback's text) whether its job was a
    round's shared one (isolated: it fails only its group) or one pass's own: a user sees the same error either
    way. What deltalog did not raise on purpose stays the worker's text."""
    from functools import partial

    import pytest

    from deltalog.cleaner.tasks import load_arrays, run_task_groups
    from deltalog.errors import CorruptLogError
    from deltalog.storage import Storage

    storage = Storage(str(tmp_path))
    bad = str(tmp_path / "not-arrays.bin")
    storage.write_bytes(bad, b"something else")
    work = str(tmp_path / "work")
    read = partial(load_arrays, storage)
    corrupt, text, fine = run_task_groups(spark, [(read, [bad], storage, work), (int, ["x"], storage, work),
                                                  (abs, [-1, -2], storage, work)], isolate=True)
    assert fine == [1, 2]
    assert isinstance(corrupt, CorruptLogError) and "not-arrays.bin" in str(corrupt)
    assert "Traceback" not in str(corrupt) and "Traceback" in str(corrupt.__cause__)  # the worker's, kept as cause
    assert type(text) is RuntimeError and "ValueError: invalid literal for int()" in str(text)
    with pytest.raises(CorruptLogError) as alone:
        run_task_groups(spark, [(read, [bad], storage, work)], isolate=False)
    assert str(alone.value) == str(corrupt)


def test_a_workers_text_names_its_deltalog_error_and_only_that_is_raised_again():
    """Spark-free: the last ``deltalog.errors.X: message`` line of a worker's text becomes ``X(message)``; an error
    deltalog did not raise, or one whose class needs more than a message, stays the text."""
    from deltalog.cleaner.tasks import worker_error
    from deltalog.errors import CorruptLogError, OffsetOutOfRangeError

    text = ("Traceback (most recent call last):\n  File \"recopy.py\", line 1\n"
            "deltalog.errors.CorruptLogError: partition t-0 is damaged: /s/t/0/x.parquet is missing\n")
    carried = RuntimeError(text)
    raised = worker_error(carried)
    assert type(raised) is CorruptLogError and str(raised) == "partition t-0 is damaged: /s/t/0/x.parquet is missing"
    assert raised.__cause__ is carried
    assert OffsetOutOfRangeError.__init__ is not Exception.__init__  # keyword-only fields: not rebuilt from text
    for other in ("ValueError: bad", "deltalog.errors.OffsetOutOfRangeError: 9 is past the end",
                  "deltalog.errors.NoSuchError: what"):
        kept = RuntimeError(f"Traceback ...\n{other}\n")
        assert worker_error(kept) is kept
