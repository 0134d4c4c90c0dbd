"""Shared fixtures: one local Spark session for the whole run, a fresh store per test, real services.

The session is created lazily by the ``spark`` fixture, so tests that never touch Spark (appends,
reads, config) run without paying for a JVM. The services (S3, Azurite, Spark Connect, a standalone
cluster) are lazy too: each starts when the first test asks for it and stops at the end of the run.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from deltalog import ManualClock, Store
from tooling import test_marks

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    from deltalog.sql.session import local_session

    session = local_session(
        "local[2]",
        {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g", "spark.sql.adaptive.enabled": "true"},
        app_name="deltalog-tests",
    )
    yield session
    session.stop()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def store(tmp_path, clock) -> Store:
    """A store with a manual clock and no Spark session (appends and reads never need one)."""
    return Store(tmp_path / "store", clock=clock)


@pytest.fixture
def spark_store(tmp_path, clock, spark) -> Store:
    """A store whose Spark jobs run on the shared test session."""
    return Store(tmp_path / "store", clock=clock, spark=spark)


def map_slots_for(entries: int) -> int:
    """Offset-map slots of which the default load factor (0.9) holds exactly ``entries`` keys.

    The store config refuses a dedupe buffer of 1 MiB or less per thread, as Kafka's broker does; a test that
    wants a pass to fill its map builds the cleaner on a small map, as Kafka's own LogCleanerTest does.
    """
    return -(-entries * 10 // 9)


def clean_with_small_map(store: Store, entries: int, topic: str | None = None) -> list:
    """``store.clean(topic)`` with an offset map that holds ``entries`` keys a pass."""
    from deltalog.cleaner.log_cleaner import raise_failures

    cleaner = store.log_cleaner(map_slots=map_slots_for(entries))
    return raise_failures(cleaner.clean_filthiest_logs(None if topic is None else [topic]))

# --- real services (tooling/services.py): each starts on first use and lives for the whole run ---

REPO_ROOT = Path(__file__).resolve().parents[1]
#: (service, seconds to start) for the run's summary line.
SERVICE_STARTUPS: list[tuple[str, float]] = []


def _started(service):
    SERVICE_STARTUPS.append((service.name, service.startup_seconds))
    return service


def _test_prefix(request) -> str:
    """A key prefix unique to this test (and this run: the servers keep state across tests)."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:60]
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server: ``.env``, ``.storage_options``, ``.create_bucket(name)``, ``.pyarrow_filesystem()``."""
    from tooling.services import S3Server

    with S3Server() as server:
        yield _started(server)


@pytest.fixture(scope="session")
def _s3_bucket(s3_server) -> str:
    return s3_server.create_bucket("deltalog-tests")


@pytest.fixture
def s3_store_uri(_s3_bucket, request) -> str:
    """A fresh ``s3://deltalog-tests/<test>-<random>`` prefix on the S3 server, one per test."""
    return f"{_s3_bucket}/{_test_prefix(request)}"


@pytest.fixture
def fault_proxy(s3_server):
    """A fault-injecting proxy (``tooling.fault_proxy``) in front of the S3 server, with no faults yet: add them
    with ``fault_proxy.add(method=, key=, when=, action=, times=, probability=)``."""
    from tooling.fault_proxy import FaultProxy

    with FaultProxy(s3_server.endpoint_url, max_seconds=900) as proxy:
        yield proxy


@pytest.fixture
def faulty_s3(fault_proxy, s3_store_uri, s3_server) -> tuple[str, dict[str, str]]:
    """(uri, storage_options) of a fresh store prefix on the S3 server, reached through ``fault_proxy``."""
    return s3_store_uri, fault_proxy.storage_options(s3_server.storage_options)


@pytest.fixture(scope="session")
def azurite():
    """Azurite's blob service (installed with npm on first use): ``.env``, ``.storage_options``, ``.create_container``."""
    from tooling.services import AzuriteServer

    with AzuriteServer() as server:
        yield _started(server)


@pytest.fixture(scope="session")
def _azurite_container(azurite) -> str:
    return azurite.create_container("deltalog-tests")


@pytest.fixture
def azurite_store_uri(_azurite_container, request) -> str:
    """A fresh ``az://deltalog-tests/<test>-<random>`` prefix on Azurite, one per test."""
    return f"{_azurite_container}/{_test_prefix(request)}"


@pytest.fixture(scope="session")
def connect_server():
    """A Spark Connect server in its own JVM (``.url``); it coexists with the classic ``spark`` session."""
    from tooling.services import ConnectServer

    with ConnectServer() as server:
        yield _started(server)


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect client session on ``connect_server`` (no ``sparkContext``, as on Databricks serverless)."""
    return connect_server.session()


@pytest.fixture(scope="session")
def spark_cluster():
    """A standalone master and worker whose executors cannot see /tmp (pytest's tmp dirs); drive it from a
    subprocess started with ``env=spark_cluster.env()``."""
    from tooling.services import StandaloneCluster

    with StandaloneCluster(python_path=[str(REPO_ROOT)]) as cluster:
        yield _started(cluster)


# --- one store, on each kind of storage ------------------------------------------------------------------


def _location(request, tmp_path, kind: str) -> tuple[str, dict[str, str] | None]:
    if kind == "local":
        return str(tmp_path / "store"), None
    if kind == "s3":
        return request.getfixturevalue("s3_store_uri"), request.getfixturevalue("s3_server").storage_options
    if kind == "azurite":
        return request.getfixturevalue("azurite_store_uri"), request.getfixturevalue("azurite").storage_options
    raise ValueError(kind)


@pytest.fixture(params=["local", "s3"])
def store_location(request, tmp_path) -> tuple[str, dict[str, str] | None]:
    """(uri, storage_options) of a fresh store location: a local directory, then a prefix on the S3 server
    (credentials and endpoint passed as storage options, as a user would)."""
    return _location(request, tmp_path, request.param)


@pytest.fixture(params=["local", "s3", "azurite"])
def store_location_3(request, tmp_path) -> tuple[str, dict[str, str] | None]:
    """Like ``store_location``, and a prefix on Azurite too."""
    return _location(request, tmp_path, request.param)


@pytest.fixture
def any_store(store_location, clock) -> Store:
    """A store with a manual clock on each kind of storage (local, S3)."""
    uri, options = store_location
    return Store(uri, storage_options=options, clock=clock)


def pytest_terminal_summary(terminalreporter):
    if SERVICE_STARTUPS:
        started = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in SERVICE_STARTUPS)
        terminalreporter.write_line(f"services started: {started}")


@pytest.hookimpl(tryfirst=True)  # before -m selects: the marks it selects on are given here
def pytest_collection_modifyitems(config, items):
    """Each test is marked by what it starts (``spark``, ``connect``, ``cluster``, ``object_store``, ``subprocess``:
    :mod:`tooling.test_marks`), from its fixtures. The full-size reliability runs (``full_size``: about half an
    hour) run only when the slow suite is asked for by name (``-m slow``); any other run leaves them out
    (deselected, not skipped)."""
    test_marks.apply(items)
    if "slow" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("full_size") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def _starts_only_what_its_marks_say(request, monkeypatch):
    """A test that asks for a Spark session or starts a process without the mark that says so fails (so the
    quick selection never starts a JVM); see :func:`tooling.test_marks.guard`."""
    test_marks.guard(request.node, monkeypatch)


# -- the CLI, run in this process -------------------------------------------------------------------------------


def run_cli(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """``deltalog ARGV`` in this process (with ``stdin`` as its input): exit code, stdout, stderr."""
    from deltalog.cli import main

    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
