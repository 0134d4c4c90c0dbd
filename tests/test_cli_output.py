"""What every command prints: ``--output json`` (JSON lines) on every command, Spark's own output kept off
stderr unless ``--verbose``, SQL errors as Spark's message without the Java stack, and cleaning progress."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest
from conftest import run_cli

from deltalog import ManualClock, Record, Store
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.cli import build_parser, output
from deltalog.cli.progress import CleanProgress
from deltalog.log import producer_state
from deltalog.sql.session import SPARK_OUTPUT_ENV

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


run = run_cli


def dirty_topic(root: str, topic: str = "t", rounds: int = 3) -> Store:
    """A compacted topic with a closed, dirty segment (so a pass has something to do)."""
    store = Store(root, clock=ManualClock(1_700_000_000_000))
    store.create_topic(topic, 1, config={"cleanup.policy": "compact", "segment.ms": "1"})
    for i in range(rounds):
        store.produce(topic, [Record(key=b"a", value=b"%d" % i), Record(key=b"b", value=b"%d" % i)])
        store.clock.advance(10)  # type: ignore[attr-defined]
    store.roll(topic, 0)
    return store


# -- --output json on every command ------------------------------------------------------------------------


def test_every_command_takes_output_json_and_verbose():
    leaves = dict(output.leaf_parsers(build_parser()))
    assert len(leaves) >= 20
    for name, parser in leaves.items():
        options = {o: a for a in parser._actions for o in a.option_strings}
        assert "json" in options["--output"].choices, name
        assert options["--json"].const == "json" and options["--json"].dest == "output", name
        assert "--verbose" in options, name


@pytest.mark.subprocess
def test_every_command_prints_json_lines(capsys, monkeypatch, tmp_path, spark):
    root = str(tmp_path / "store")
    dirty_topic(root)
    commands = {
        "topics create": ["topics", "create", "extra", "-p", "2"],
        "create": ["create", "extra2"],
        "topics list": ["topics", "list"],
        "list": ["list"],
        "topics describe": ["topics", "describe", "t"],
        "describe": ["describe"],
        "topics alter": ["topics", "alter", "extra", "--config", "segment.ms=5000"],
        "alter": ["alter", "extra2", "--config", "segment.ms=6000"],
        "topics delete": ["topics", "delete", "extra2", "--yes"],
        "produce": ["produce", "extra"],
        "consume": ["consume", "extra", "--group", "g"],
        "history": ["history", "t", "--limit", "2"],
        "consumer-groups": ["consumer-groups", "--describe", "--group", "g"],
        "transactions list": ["transactions", "list"],
        "transactions describe": ["transactions", "describe", "--transactional-id", "tx"],
        "transactions describe-producers": ["transactions", "describe-producers", "--topic", "tx", "--partition", "0"],
        "transactions abort-timed-out": ["transactions", "abort-timed-out"],
        "transactions find-hanging": ["transactions", "find-hanging", "--topic", "tx", "--max-transaction-timeout", "0"],
        "transactions abort": [],  # its start offset once the hanging transaction below is open
        "sql": ["sql", "SELECT key, count(*) AS n FROM t GROUP BY key ORDER BY key"],
        "views": ["views", "t", "--engine", "duckdb"],
        "clean": ["clean", "t", "-p", "0", "--force"],
        "check": ["check", "t"],
        "status": ["status"],
        "cleaner retention": ["cleaner", "retention"],
        "cleaner vacuum": ["cleaner", "vacuum"],
        "cleaner delete-records": ["cleaner", "delete-records", "extra", "0", "1"],
        "cleaner reset-uncleanable": ["cleaner", "reset-uncleanable", "extra"],
        "cleaner run": ["cleaner", "run", "--once", "--no-vacuum"],
        "doctor": ["doctor", "--no-spark"],
        "configs": ["configs", "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
                    "SCRAM-SHA-256=[iterations=4096,password=alice-secret]"],
        "demo": ["demo", "--store", str(tmp_path / "demo")],
        "completion": ["completion", "bash"],
        "state refresh": ["state", "refresh", "st"],
        "state history": ["state", "history", "st"],
        "state show": ["state", "show", "st"],
        "state lag": ["state", "lag", "st"],
        "state compare": ["state", "compare", "st"],
    }
    # `serve` runs until SIGTERM: its JSON health line is tested with the process (tests/test_endpoint.py); `ping`
    # needs an endpoint to answer it (tests/test_serve_ready.py)
    assert set(commands) | {"serve", "ping"} == {name for name, _ in output.leaf_parsers(build_parser())}
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"key": "grape", "value": "1"}\n{"key": "lime", "value": "2"}\n'))
    store = Store(root)
    UncleanablePartitions(store.storage).mark("extra", 1, RuntimeError("boom"), 0)
    store.create_topic("tx", config={"cleanup.policy": "compact"})
    store.create_topic("st", config={"cleanup.policy": "compact", "state.table.enable": "true"})  # a state table
    store.append("st", 0, [Record(key=b"k", value=b"v")])
    tx = store.producer(transactional_id="tx")
    tx.init_transactions()
    tx.begin_transaction()
    tx.send("tx", [Record(key=b"grape", value=b"3")], partition=0)
    tx.commit_transaction()
    hang = store.producer(transactional_id="hang")  # a transaction whose id's document is lost: hanging
    hang.init_transactions()
    hang.begin_transaction()
    hang.send("tx", [Record(key=b"lime", value=b"4")], partition=0)
    store.storage.delete(producer_state.transactional_location(store.storage, "hang"))
    start = store.find_hanging_transactions("tx", max_transaction_timeout_ms=0)[0].start_offset
    commands["transactions abort"] = ["transactions", "abort", "--topic", "tx", "--partition", "0",
                                      "--start-offset", str(start)]
    shapes = {}
    for name, argv in commands.items():
        flag = ["--json"] if name in ("list", "describe") else ["--output", "json"]  # the short form works too
        code, out, err = run(capsys, "--store", root, *argv, *flag)
        assert code == 0, (name, err)
        lines = out.splitlines()
        objects = [json.loads(line) for line in lines]
        assert objects and all(isinstance(o, dict) for o in objects), (name, out)
        shapes[name] = objects
    assert shapes["topics create"] == [{"topic": "extra", "partitions": 2, "config": shapes["topics create"][0]["config"]}]
    assert [o["topic"] for o in shapes["list"]] == ["extra", "extra2", "st", "t", "tx"]
    assert [(o["partition"], o["offset"], o["line"]) for o in shapes["produce"]] == [(1, 0, 1), (0, 0, 2)]
    assert [(o["partition"], o["key"]) for o in shapes["consume"]] == [(0, "lime"), (1, "grape")]
    assert [(o["partition"], o["current_offset"], o["lag"]) for o in shapes["consumer-groups"]] == [(0, 1, 0),
                                                                                                   (1, 1, 0)]
    assert shapes["sql"] == [{"key": "a", "n": 3}, {"key": "b", "n": 3}]
    assert shapes["history"] and all(o["topic"] == "t" and "kind" in o and "version" in o for o in shapes["history"])
    assert shapes["clean"][0]["topic"] == "t" and shapes["topics delete"] == [{"topic": "extra2", "deleted": True}]
    assert shapes["check"][0]["success"] is True and "ok" in shapes["doctor"][0]
    assert shapes["demo"][0]["offsets"] == list(range(9))
    assert shapes["configs"] and all(isinstance(o, dict) for o in shapes["configs"])
    assert [(o["topic"], o["partition"], o["error_type"]) for o in shapes["cleaner reset-uncleanable"]] == [
        ("extra", 1, "RuntimeError")]
    code, out, _ = run(capsys, "--store", root, "cleaner", "run", "--once", "--no-vacuum", "--output", "text")
    assert code == 0 and out.startswith("cleaner cycle: 0 pass(es)")  # the job's JSON line is the default


# -- Spark's noise and Spark's errors ------------------------------------------------------------------------


def test_sql_errors_are_sparks_message_without_a_java_stack(capsys, tmp_path, spark):
    root = str(tmp_path / "store")
    Store(root).create_topic("fruit-prices")
    code, out, err = run(capsys, "--store", root, "sql", "--engine", "spark", "SELEC 1")
    assert (code, out) == (1, "")
    assert err.startswith("deltalog: error: [PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'. SQLSTATE: 42601")
    assert "== SQL ==\nSELEC 1\n^^^" in err  # Spark's pointer into the query
    code, out, err = run(capsys, "--store", root, "sql", "--engine", "spark", "SELECT * FROM fruit-prices")  # '-' is not in view names
    assert code == 1 and "deltalog: error: [" in err and "fruit_prices, fruit_prices_current" in err
    code, out, err = run(capsys, "--store", root, "sql", "--engine", "spark", "SELECT * FROM fruit_price")
    assert code == 1 and err.startswith("deltalog: error: [TABLE_OR_VIEW_NOT_FOUND] The table or view `fruit_price`")
    assert "deltalog: the views of this store's topics: fruit_prices, fruit_prices_current" in err
    code, out, err = run(capsys, "--store", root, "sql", "--engine", "spark", "SELECT java_method('java.lang.Integer', 'parseInt', 'x')")
    assert code == 1 and "NumberFormatException: For input string" in err
    for e in (err,):
        assert "\tat " not in e and "JVM stacktrace" not in e and "Traceback" not in e and "Project [" not in e
        assert len(e) < 1000


@pytest.mark.spark
@pytest.mark.subprocess
def test_without_verbose_spark_and_java_stay_off_stderr(tmp_path):
    """A fresh process: the JVM's start-up lines, log4j's WARNs and PySpark's logged Java stack of a failed query
    (6 KB before) do not reach stderr; only deltalog's short error does."""
    root = str(tmp_path / "store")
    Store(root).create_topic("fruit-prices")
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), "DELTALOG_STORE": root,
           "DELTALOG_WARM_WORKERS": "0"}
    env.pop(SPARK_OUTPUT_ENV, None)
    p = subprocess.run([sys.executable, "-c", "import sys; from deltalog.cli import main; sys.exit(main())", "sql",
                        "--engine", "spark", "SELECT * FROM fruit_price"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert lines[0].startswith("deltalog: error: [TABLE_OR_VIEW_NOT_FOUND] The table or view `fruit_price` cannot be")
    assert lines[-1] == "deltalog: the views of this store's topics: fruit_prices, fruit_prices_current"
    assert len(lines) <= 6 and len(p.stderr) < 1000, p.stderr
    for noise in ("WARN", "log4j", "WARNING", "Py4J", "org.apache", "\tat ", '"level"'):
        assert noise not in p.stderr


def test_verbose_lets_spark_through_and_everything_is_put_back(monkeypatch):
    monkeypatch.delenv(SPARK_OUTPUT_ENV, raising=False)
    root_logger = logging.getLogger()
    with output.command_output(False):
        assert os.environ[SPARK_OUTPUT_ENV] == os.devnull
    assert SPARK_OUTPUT_ENV not in os.environ
    monkeypatch.setenv(SPARK_OUTPUT_ENV, "/tmp/my-spark.log")  # a user's own choice is kept
    with output.command_output(False):
        assert os.environ[SPARK_OUTPUT_ENV] == "/tmp/my-spark.log"
    monkeypatch.setenv(SPARK_OUTPUT_ENV, os.devnull)
    handlers = list(root_logger.handlers)
    monkeypatch.setattr(root_logger, "handlers", [])
    with output.command_output(True):
        assert SPARK_OUTPUT_ENV not in os.environ  # Spark's output reaches stderr
        assert root_logger.level == logging.INFO and len(root_logger.handlers) == 1  # deltalog's INFO logging
    assert root_logger.handlers == [] and os.environ[SPARK_OUTPUT_ENV] == os.devnull
    root_logger.handlers = handlers


# -- progress of long passes ---------------------------------------------------------------------------------


def test_clean_shows_progress_lines_off_a_terminal(capsys, tmp_path, spark):
    root = str(tmp_path / "store")
    dirty_topic(root)
    code, out, err = run(capsys, "--store", root, "clean", "--progress-interval", "0.05")
    assert code == 0 and "Cleaned log t-0" in out
    lines = err.splitlines()
    assert "cleaning t-0: dirty section [0, 6)" in lines[0]
    assert any("Spark tasks done" in line for line in lines[1:-1]), err  # while the pass runs
    assert "cleaned t-0 in " in lines[-1] and "Cleaned log" not in err
    code, _, err = run(capsys, "--store", root, "clean", "--progress-interval", "0")
    assert code == 2 and "--progress-interval must be > 0" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_clean_draws_a_progress_bar_on_a_terminal(tmp_path, spark):
    store = dirty_topic(str(tmp_path / "store"))
    store._spark = spark
    terminal = Terminal()
    progress = CleanProgress(terminal)
    assert progress.interval_s == 0.5
    store.clean("t", progress=progress, progress_interval_s=0.05)
    progress.close()
    drawn = terminal.getvalue()
    assert "cleaning t-0:" in drawn and "\r" in drawn  # tqdm redraws in place
    assert " tasks" in drawn and "planned so far" in drawn
    assert "cleaned t-0 in " in drawn.splitlines()[-1]


def _counts(drawn: str) -> list[int]:
    """The task counts a terminal showed, in the order it showed them."""
    import re

    return [int(n) for n in re.findall(r"cleaning t-0: (\d+) tasks", drawn)]


def test_progress_lines_and_bar_for_each_state():
    from deltalog.cleaner.progress import PassStatus

    def status(state: str, done: int = 0, total: int = 0) -> PassStatus:
        return PassStatus("t-0", 4, 9, 12_345, 2.0, done, total, state)

    log = io.StringIO()
    progress = CleanProgress(log)
    assert progress.interval_s == 10.0  # not a terminal: a line every 10 s by default
    for s in (status("started"), status("running"), status("running", 1, 4), status("running", 0, 0),
              status("failed")):
        progress(s)
    lines = [line.split(" ", 2)[2] for line in log.getvalue().splitlines()]  # after the date and time
    assert lines == ["cleaning t-0: dirty section [4, 9), 12,345 bytes",
                     "cleaning t-0: 2s, planning its first Spark job",  # never "0/0 Spark tasks done"
                     "cleaning t-0: 2s, 1 Spark tasks done (4 planned so far)",
                     "cleaning t-0: 2s, planning its first Spark job",
                     "cleaning t-0 failed after 2.0s"]
    terminal = Terminal()
    bar = CleanProgress(terminal)
    bar(status("started"))
    bar(status("running", 1, 1))
    bar(status("running", 1, 2))  # a second job planned: the total grows, the count shown does not fall
    bar(status("running", 0, 0))  # a status tracker that lost the jobs (best effort) does not move it back either
    bar(status("running", 3, 4))
    bar(status("finished", 4, 4))
    drawn = terminal.getvalue()
    counts = _counts(drawn)
    assert counts and counts == sorted(counts) and counts[-1] == 3, drawn
    assert "2 planned so far" in drawn and drawn.endswith("cleaned t-0 in 2.0s (4 Spark tasks)\n")
    bar.close()
