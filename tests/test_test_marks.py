"""The marks that say what a test starts (tooling/test_marks.py) are given from fixtures and kept honest: an
inner pytest run (pytester, in a process of its own so this run's guard stays out of it) with the same hooks as
tests/conftest.py, on tests that really start a process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooling import test_marks

pytest_plugins = ["pytester"]

CONFTEST = '''
import pytest
from tooling import test_marks

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    test_marks.apply(items)

@pytest.fixture(autouse=True)
def _guard(request, monkeypatch):
    test_marks.guard(request.node, monkeypatch)

@pytest.fixture
def s3_server():
    return "a stand-in: only its name matters to the marks"

@pytest.fixture(params=["classic", "local"])
def where(request):
    return request.param
'''

TESTS = '''
import subprocess
import pytest

def test_unmarked_starts_a_process():
    subprocess.run(["true"], check=True)

@pytest.mark.subprocess
def test_marked_starts_a_process():
    subprocess.run(["true"], check=True)

def test_uses_the_s3_fixture(s3_server):
    pass

def test_by_parameter(where):
    pass

@pytest.mark.connect
def test_connect_implies_spark():
    pass

def test_asks_for_a_fixture_by_name(request):
    request.getfixturevalue("s3_server")
'''


@pytest.fixture
def inner(pytester, monkeypatch):
    root = str(Path(__file__).resolve().parent.parent)  # the inner run imports tooling.test_marks from here
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(
        f"    {m}: x\n" for m in ("spark", "connect", "cluster", "object_store", "subprocess")))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS)
    return pytester


def test_every_mark_is_registered_for_strict_markers():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as f:
        registered = {m.split(":")[0] for m in tomllib.load(f)["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(test_marks.MARKS) <= registered
    assert {m for marks in test_marks.FIXTURE_MARKS.values() for m in marks} <= set(test_marks.MARKS)


def selected(pytester, expr: str) -> set[str]:
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", "-m", expr)
    return {line.split("::", 1)[1] for line in result.outlines if "::" in line}


@pytest.mark.subprocess
def test_marks_come_from_fixtures_parameters_and_implications(inner):
    assert selected(inner, "object_store") == {"test_uses_the_s3_fixture"}
    assert selected(inner, "spark") == {"test_by_parameter[classic]", "test_connect_implies_spark"}
    assert selected(inner, "subprocess") == {"test_marked_starts_a_process", "test_uses_the_s3_fixture",
                                             "test_connect_implies_spark"}  # servers are processes


@pytest.mark.subprocess
def test_a_test_that_starts_what_its_marks_omit_fails_with_the_fix(inner):
    result = inner.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=2)
    text = result.stdout.str()
    assert "test_unmarked_starts_a_process starts subprocess (true) without the 'subprocess' mark" in text
    assert "test_asks_for_a_fixture_by_name starts object_store (the s3_server fixture" in text
    assert "@pytest.mark.subprocess" in text
