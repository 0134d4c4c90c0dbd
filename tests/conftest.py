"""Shared fixtures: one local Spark session for the whole run, a fresh store per test.

The session is created lazily by the ``spark`` fixture, so tests that never touch Spark (appends,
reads, config) run without paying for a JVM.
"""

from __future__ import annotations

import os
import sys

import pytest

from deltalog import ManualClock, Store

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
