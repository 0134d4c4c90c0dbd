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
