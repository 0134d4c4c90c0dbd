"""Spark's start ahead of the pass: the scheduled job starts the session (and its warm-up) in the background as soon
as it knows a pass may run, and only then; a pass waits for the warm-up instead of sharing the cores with it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from deltalog import Record, Store
from deltalog.jobs.cleaner_job import pass_may_run
from deltalog.sql.session import SessionStarter


def test_the_starter_starts_once_in_the_background_and_hands_out_that_session():
    calls: list[str] = []
    release = threading.Event()

    def factory() -> object:
        calls.append(threading.current_thread().name)
        release.wait(30)
        return "the session"

    starter = SessionStarter(factory)
    assert not starter.started and calls == []
    starter.start()
    starter.start()
    assert starter.started
    release.set()
    assert starter() == "the session" and starter() == "the session"
    assert calls == ["deltalog-spark-start"]  # once, and not on the caller's thread
    assert starter.ready_s is not None and starter.ready_s >= 0


def test_a_starter_asked_first_starts_the_session_itself_and_raises_what_the_start_raised():
    def factory() -> object:
        raise RuntimeError("no JVM here")

    starter = SessionStarter(factory)
    with pytest.raises(RuntimeError, match="no JVM here"):
        starter()
    assert starter.started


def test_a_pass_may_run_only_where_a_partition_is_eligible(tmp_path, clock):
    store = Store(tmp_path / "s", clock=clock)
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    for p in range(2):
        store.append("t", p, [Record(f"k{i}", "v") for i in range(5)])  # the active segment only: not cleanable
    cleaner = store.log_cleaner()
    assert not pass_may_run(cleaner)
    store.log_manager.log("t", 1).roll(clock.now_ms())
    store.append("t", 1, [Record("k0", "v2")])  # a closed segment of duplicates behind a new active one
    assert pass_may_run(cleaner)


def test_the_job_starts_spark_early_only_when_a_pass_may_run(tmp_path, clock, monkeypatch):
    """No JVM here: the starter's factory is recorded, not run (the job's Spark is tested end to end in
    test_cleaner_job.py)."""
    from deltalog.jobs import cleaner_job
    from deltalog.sql import session

    store = Store(tmp_path / "s", clock=clock)
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(f"k{i}", "v") for i in range(5)])
    started: list[bool] = []

    class Recorder(SessionStarter):
        def start(self) -> None:
            started.append(True)

    monkeypatch.setattr(session, "SessionStarter", Recorder)  # what the job imports when it runs
    config = cleaner_job.JobConfig.from_mapping({"job": {"once": True}}, source="test", store_uri=str(tmp_path / "s"))
    with open(os.devnull, "w") as out:
        cleaner_job.run(config, clock=clock, out=out)
    assert started == []  # idle: no pass may run, nothing started
    store.log_manager.log("t", 0).roll(clock.now_ms())
    store.append("t", 0, [Record("k0", "v2")])
    monkeypatch.setattr(Store, "log_cleaner", _no_cycle_cleaner(Store.log_cleaner))
    with open(os.devnull, "w") as out:
        cleaner_job.run(config, clock=clock, out=out)
    assert started == [True]


def _no_cycle_cleaner(log_cleaner):  # noqa: ANN001, ANN202 - the Store method and its wrapper
    """The store's cleaner with its cleaning round cut off (no pass, so no Spark): the test looks only at what the
    cycle does before it (retention runs after the snapshots are read)."""
    from deltalog.cleaner.log_cleaner import CleaningRound

    def wrapped(self, **options):  # noqa: ANN001, ANN003, ANN202
        cleaner = log_cleaner(self, **options)
        cleaner.clean_filthiest_logs = lambda *_, **__: CleaningRound()
        return cleaner

    return wrapped


@pytest.mark.subprocess
def test_clean_on_an_idle_store_still_starts_no_spark(tmp_path):
    """``deltalog clean`` starts Spark ahead of its pass only when a partition is eligible: on an idle store it
    answers from the Delta logs, without a JVM."""
    root = tmp_path / "store"
    store = Store(root)
    store.create_topic("t", 2, config={"cleanup.policy": "compact"})
    for p in range(2):
        store.append("t", p, [Record(f"k{i}", "v") for i in range(5)])  # the active segment only: not cleanable
    probe = ("import sys, time\n"
             "from deltalog.cli import main\n"
             "code = main(['clean', '--store', sys.argv[1]])\n"
             "time.sleep(1)\n"
             "ctx = sys.modules.get('pyspark.core.context') or sys.modules.get('pyspark.context')\n"
             "started = ctx is not None and ctx.SparkContext._active_spark_context is not None\n"
             "threads = [t.name for t in __import__('threading').enumerate()]\n"
             "print('JVM' if started or 'deltalog-spark-start' in threads else 'no JVM', file=sys.stderr)\n"
             "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == "no JVM", done.stderr[-3000:]


def test_deltalog_clean_ranks_the_partitions_once_and_an_idle_store_starts_no_spark(tmp_path, clock, monkeypatch,
                                                                                      capsys):
    """``deltalog clean`` without ``-p`` is ``store.clean``: the loop's own ranking decides whether Spark starts (no
    ranking of its own before it), and on an idle store it finds nothing, so nothing starts."""
    from deltalog.cleaner.cleaner_manager import LogCleanerManager
    from deltalog.cli import main

    store = Store(tmp_path / "s", clock=clock)
    store.create_topic("t", 3, config={"cleanup.policy": "compact"})
    for p in range(3):
        store.append("t", p, [Record(f"k{i}", "v") for i in range(5)])  # the active segment only: not cleanable
    rankings: list[int] = []
    rank = LogCleanerManager.logs_to_clean

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        rankings.append(1)
        return rank(self, *args, **kwargs)

    started: list[bool] = []
    monkeypatch.setattr(LogCleanerManager, "logs_to_clean", counted)
    monkeypatch.setattr(Store, "start_spark", lambda self: started.append(True))
    assert main(["--store", str(tmp_path / "s"), "clean"]) == 0
    assert "Nothing to clean" in capsys.readouterr().out
    assert rankings == [1] and started == []


@pytest.mark.spark
def test_store_clean_starts_spark_in_the_background_from_its_first_ranking(tmp_path, clock, spark):
    """A partition is eligible: ``store.clean`` begins Spark's start as its first ranking ends, before the pass
    asks for the session."""
    events: list[str] = []

    class Recorder(SessionStarter):
        def start(self) -> None:
            events.append("start")
            super().start()

        def __call__(self) -> object:  # the pass asks for the session (a starter not yet begun begins here)
            events.append("ask")
            return super().__call__()

    store = Store(tmp_path / "s", clock=clock, spark=Recorder(lambda: spark))
    store.create_topic("t", 1, config={"cleanup.policy": "compact"})
    store.append("t", 0, [Record(f"k{i}", "v") for i in range(5)])
    store.log_manager.log("t", 0).roll(clock.now_ms())
    store.append("t", 0, [Record("k0", "v2")])
    [result] = store.clean("t")
    assert events[:2] == ["start", "ask"]  # begun by the ranking, before the pass asked
    assert result.partition == 0


@pytest.mark.spark
def test_a_pass_waits_for_a_warm_up_that_never_answers_only_so_long(spark, monkeypatch, caplog):
    """The warm-up is only a saving: a Spark job of it that hangs (seen once: its result's collect waiting on its
    serving thread for good) must not hold the pass and the scheduled job with it."""
    import time

    from deltalog.sql import session as session_module

    release = threading.Event()
    warm = session_module._WarmUp(target=release.wait, name="hung-warm-up", daemon=True)
    warm.round_lock = threading.Lock()
    warm.start()
    monkeypatch.setattr(session_module, "WARM_UP_WAIT_S", 0.5)
    try:
        began = time.monotonic()
        assert session_module.await_warm_up(spark, warm) is None
        assert time.monotonic() - began < 5
        assert warm.is_alive() and "did not finish" in caplog.text
    finally:
        release.set()
    warm.join(5)
