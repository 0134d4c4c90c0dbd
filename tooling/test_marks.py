"""The marks that say what a test starts, so a run can leave the expensive ones out.

``spark`` (the local session: a JVM), ``connect`` and ``cluster`` (a second JVM: a Spark Connect server, a
standalone master and worker), ``object_store`` (moto's S3 server, Azurite) and ``subprocess`` (processes of the
test's own: the CLI, workers, pip). :func:`apply` gives them from the fixtures a test uses (``item.fixturenames``
and the parameters of the store-location fixtures); a test that starts something without a fixture carries the
mark itself (``@pytest.mark.spark``, or ``pytestmark`` for a whole file).

:func:`guard` keeps the marks honest at run time: a test without the ``spark`` mark that asks for a Spark
session (``local_session``, which ``Store.spark``, the cleaner and the CLI go through) fails with the fix, and so
does one without ``subprocess`` that starts a process. With ``$DELTALOG_TEST_AUDIT`` naming a file, it records
instead of failing (one JSON line per test: what it started), to find the tests that need a mark.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

#: mark -> what it means (registered in pyproject.toml too, for --strict-markers)
MARKS = {
    "spark": "starts (or joins) the local Spark session: a JVM",
    "connect": "starts a Spark Connect server: a second JVM",
    "cluster": "starts a Spark standalone master and worker: more JVMs",
    "object_store": "starts moto's S3 server or Azurite",
    "subprocess": "starts processes of its own (the CLI, workers, pip, a build)",
}

#: fixture -> the marks of a test that uses it (directly or through another fixture)
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "spark_store": ("spark",),
    "connect_server": ("spark", "connect", "subprocess"),
    "connect_spark": ("spark", "connect", "subprocess"),
    "spark_cluster": ("spark", "cluster", "subprocess"),
    "s3_server": ("object_store", "subprocess"),
    "azurite": ("object_store", "subprocess"),
}

#: A parameter value -> marks: the fixtures parametrized by kind of storage or of session (``store_location``,
#: ``harness``, ``any_spark``...) fetch their server or session on demand, by that value.
PARAM_MARKS: dict[str, tuple[str, ...]] = {
    "s3": ("object_store", "subprocess"),
    "azurite": ("object_store", "subprocess"),
    "classic": ("spark",),
    "connect": ("spark", "connect", "subprocess"),
    "cluster": ("spark", "cluster", "subprocess"),
}

AUDIT_ENV = "DELTALOG_TEST_AUDIT"


def marks_for(item: pytest.Item) -> set[str]:
    marks: set[str] = set()
    for name in getattr(item, "fixturenames", ()):
        marks.update(FIXTURE_MARKS.get(name, ()))
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec is not None else ()):
        if isinstance(value, str):
            marks.update(PARAM_MARKS.get(value, ()))
    return marks


def apply(items: list[pytest.Item]) -> None:
    """Add the marks each item's fixtures imply. Set by hand too, ``connect`` and ``cluster`` imply ``spark`` and
    ``subprocess`` (their servers are processes), ``object_store`` implies ``subprocess``: so ``not subprocess``
    leaves out every test that starts anything beyond this process and its local Spark session."""
    for item in items:
        have = {m.name for m in item.iter_markers()}
        wanted = marks_for(item)
        if (have | wanted) & {"connect", "cluster"}:
            wanted |= {"spark", "subprocess"}
        if "object_store" in have | wanted:
            wanted.add("subprocess")
        for name in sorted(wanted - have):
            item.add_marker(name)


def _record(nodeid: str, what: str, detail: str) -> None:
    with open(os.environ[AUDIT_ENV], "a", encoding="utf-8") as f:
        f.write(json.dumps({"test": nodeid, "started": what, "detail": detail}) + "\n")


def guard(item: pytest.Item, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail (or, under ``$DELTALOG_TEST_AUDIT``, record) what ``item`` starts without the mark that says so: a
    Spark session, a fixture of :data:`FIXTURE_MARKS` asked for by name, a process."""
    have = {m.name for m in item.iter_markers()}
    audit = bool(os.environ.get(AUDIT_ENV))

    def caught(what: str, detail: str) -> None:
        if audit:
            _record(item.nodeid, what, detail)
        else:
            pytest.fail(f"{item.nodeid} starts {what} ({detail}) without the '{what}' mark: add "
                        f"@pytest.mark.{what} (or use the fixture that implies it; see tooling/test_marks.py)",
                        pytrace=False)

    if "spark" not in have:
        # every caller (the cleaner job too) looks local_session up in its module when it starts a session, so the
        # patch there is seen, and undone with the test's
        import deltalog.sql.session as session

        real = session.local_session

        def local_session(*args: Any, **kwargs: Any) -> Any:
            session = real(*args, **kwargs)  # one that cannot start (no pyspark: the extra's error) is no JVM
            caught("spark", "a Spark session was started or joined")
            return session

        monkeypatch.setattr(session, "local_session", local_session)

    real_getfixturevalue = pytest.FixtureRequest.getfixturevalue

    def getfixturevalue(self: pytest.FixtureRequest, argname: str) -> Any:
        for mark in FIXTURE_MARKS.get(argname, ()):  # a fixture asked for by name, at run time
            if mark not in have:
                caught(mark, f"the {argname} fixture, asked for with request.getfixturevalue")
        return real_getfixturevalue(self, argname)

    monkeypatch.setattr(pytest.FixtureRequest, "getfixturevalue", getfixturevalue)

    if "subprocess" not in have:
        real_init = subprocess.Popen.__init__

        def popen_init(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
            if not ("spark" in have and str(argv[0]).endswith("spark-submit")):  # the local session's own JVM
                caught("subprocess", " ".join(map(str, argv[:3])))
            real_init(self, args, *rest, **kwargs)

        monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)
