"""What the base install leaves out (pyspark: ``deltalog[spark]``, great-expectations: ``deltalog[quality]``) is
named in one line by whatever needs it. Here the module is made unimportable in this process the way Python
itself blocks an import (``sys.modules[name] = None``); tests/test_packaging.py does it for real, in a fresh
virtual environment without pyspark."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import run_cli

from deltalog import Store
from deltalog.cli import doctor_checks
from deltalog.errors import DeltalogError, MissingExtraError
from deltalog.extras import from_import_error, require


@pytest.fixture
def no_pyspark(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)


@pytest.fixture
def no_great_expectations(monkeypatch):
    monkeypatch.setitem(sys.modules, "great_expectations", None)


def test_require_names_the_extra_and_is_a_deltalog_error(no_pyspark):
    with pytest.raises(MissingExtraError, match=r"^Store\.sql needs Spark \(pyspark\), .*pip install 'deltalog\[spark\]'"):
        require("spark", "Store.sql")
    assert issubclass(MissingExtraError, DeltalogError) and issubclass(MissingExtraError, ImportError)
    require("quality", "anything")  # great-expectations is here: nothing raised


@pytest.mark.parametrize("command", [["demo"], ["clean"], ["sql", "--engine", "spark", "SELECT 1"], ["cleaner", "run", "--once"],
                                     ["check", "t"]])
def test_commands_that_need_spark_say_which_extra_in_one_line(no_pyspark, command, tmp_path, capsys):
    code, out, err = run_cli(capsys, "--store", str(tmp_path / "store"), *command)
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    if command[:2] == ["cleaner", "run"]:  # a job whose output is JSON lines by default says its error in JSON too
        line = f"deltalog: error: {json.loads(line)['error']}"
    assert line.startswith(f"deltalog: error: deltalog {' '.join(command[:2] if command[0] == 'cleaner' else command[:1])} "
                           "needs Spark (pyspark)") and "pip install 'deltalog[spark]'" in line
    assert not (tmp_path / "store").exists()  # refused before anything was written


@pytest.mark.subprocess  # doctor runs `java -version`
def test_commands_without_spark_still_run(no_pyspark, tmp_path, capsys):
    store = str(tmp_path / "store")
    assert run_cli(capsys, "--store", store, "topics", "create", "t", "--config", "cleanup.policy=compact")[0] == 0
    code, out, err = run_cli(capsys, "--store", store, "doctor", "--no-spark", "--output", "json")
    assert code == 0, out + err


@pytest.mark.parametrize("engine", [[], ["--engine", "embedded"]])
def test_sql_on_the_embedded_engine_names_the_sql_extra(monkeypatch, tmp_path, capsys, engine):
    """Without DuckDB: asked for the embedded engine, or with no Spark to fall back to, the error names the sql
    extra."""
    monkeypatch.setitem(sys.modules, "duckdb", None)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    if not engine:
        monkeypatch.setitem(sys.modules, "pyspark", None)
    code, out, err = run_cli(capsys, "--store", str(tmp_path / "store"), "sql", *engine, "SELECT 1")
    [line] = err.splitlines()
    assert code == 1 and "deltalog sql needs DuckDB" in line and "pip install 'deltalog[sql]'" in line


def test_sql_after_installing_the_spark_extra_alone_answers_on_spark_and_says_so_once(spark, monkeypatch, tmp_path,
                                                                                       capsys):
    """The README's set-up installs deltalog[spark] only; its tour's `deltalog sql` then runs on Spark SQL and says
    once, on stderr, that DuckDB (deltalog[sql]) would answer without a JVM. Store.sql warns once likewise."""
    from conftest import json_lines

    from deltalog import Record
    from deltalog.store import SQL_FALLBACK_NOTE

    monkeypatch.setitem(sys.modules, "duckdb", None)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    store = Store(str(tmp_path / "store"))
    store.create_topic("fruit-prices", 1, config={"cleanup.policy": "compact"})
    store.append("fruit-prices", 0, [Record(key="grape", value="2.69"), Record(key="lime", value="0.49")])
    store.append("fruit-prices", 0, [Record(key="grape", value="2.75")])
    code, out, err = run_cli(capsys, "--store", store.root, "sql",
                             "SELECT key, value FROM fruit_prices_current ORDER BY key", "--output", "json")
    assert code == 0, err
    assert json_lines(out) == [{"key": "grape", "value": "2.75"}, {"key": "lime", "value": "0.49"}]
    assert err.splitlines() == [f"deltalog: note: {SQL_FALLBACK_NOTE}"]
    monkeypatch.setattr("deltalog.store._fallback_noted", False)
    with pytest.warns(UserWarning, match=r"deltalog\[sql\]") as warned:
        for _ in range(2):
            assert store.sql("SELECT count(*) AS n FROM fruit_prices").collect()[0]["n"] == 3
    assert len(warned) == 1


def test_check_names_the_quality_extra(no_great_expectations, tmp_path, capsys):
    code, out, err = run_cli(capsys, "--store", str(tmp_path / "store"), "check", "t")
    [line] = err.splitlines()
    assert code == 1 and "needs Great Expectations" in line and "pip install 'deltalog[quality]'" in line


def test_the_embedded_session_names_the_extra(no_pyspark, tmp_path):
    store = Store(str(tmp_path / "store"))
    with pytest.raises(MissingExtraError, match=r"pip install 'deltalog\[spark\]'"):
        store.spark  # noqa: B018 - the property starts the session


def test_an_import_error_of_an_extras_module_becomes_the_one_line_error():
    try:
        import great_expectations.no_such_module  # noqa: F401
    except ImportError as e:
        error = from_import_error(e, "deltalog check")
    assert error is not None and "pip install 'deltalog[quality]'" in str(error)
    try:
        import no_such_module_xyz  # noqa: F401
    except ImportError as e:
        assert from_import_error(e, "x") is None


def test_doctor_names_the_extra_of_a_missing_package():
    check = doctor_checks.check_package("no-such-distribution-xyz", extra="quality", used_by="deltalog check")
    assert check.status == doctor_checks.INFO and "pip install 'deltalog[quality]'" in check.detail


def test_a_json_schema_names_the_extra_and_creates_nothing(no_pyspark, tmp_path):
    """A json encoding's schema is parsed with pyspark's types (no JVM): without them, the topic is refused."""
    from deltalog.schemas import parse_schema

    parse_schema.cache_clear()  # a schema parsed earlier in this process would be served from the cache
    store = Store(str(tmp_path / "store"))
    with pytest.raises(MissingExtraError, match=r"value\.schema .*pip install 'deltalog\[spark\]'"):
        store.create_topic("prices", config={"value.encoding": "json", "value.schema": "price DOUBLE"})
    assert store.list_topics() == []
