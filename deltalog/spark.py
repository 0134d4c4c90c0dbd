"""What deltalog needs of a Spark session, whichever kind it is: classic, or Spark Connect.

Databricks serverless, standard (shared) access mode clusters and Databricks Connect run Spark Connect,
which has no ``sparkContext``, no RDDs and no broadcast variables. deltalog's Spark jobs therefore use
DataFrames, ``mapInArrow`` and Python data sources, which both kinds run alike (the cleaner's two passes
too: :mod:`deltalog.cleaner.tasks`). The few things that still differ
(building columns, job tags and groups, default parallelism) are answered here, below every package that
starts Spark jobs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no ``sparkContext``, no RDDs)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def functions(spark: Any) -> ModuleType:
    """``pyspark.sql.functions`` for ``spark``'s kind of session.

    pyspark's module builds Connect columns only when the whole process is in Connect mode; a Connect session
    made beside a classic one (a test run, a notebook holding both) would get classic columns from it.
    """
    if is_connect(spark):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions as classic_functions

    return classic_functions


_CONNECT_MODE = threading.RLock()


@contextmanager
def connect_mode(spark: Any) -> Iterator[None]:
    """Run code we do not own (Great Expectations) that calls ``pyspark.sql.functions`` on ``spark``'s
    DataFrames: for a Connect session in a process that is not in Connect mode, switch the process to it
    for the block (``SPARK_CONNECT_MODE_ENABLED``, which is how pyspark decides). Classic jobs run by other
    threads meanwhile would see Connect mode too, so the switch is held as briefly as the block."""
    if not is_connect(spark) or "SPARK_CONNECT_MODE_ENABLED" in os.environ:
        yield
        return
    with _CONNECT_MODE:
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        try:
            yield
        finally:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@contextmanager
def job_tag(spark: Any, tag: str, description: str | None = None) -> Iterator[None]:
    """Tag every Spark job this thread starts in the block (``spark.interruptTag(tag)`` cancels them).

    On a classic session the jobs also run in the job group ``tag``, which the status tracker can count
    (:mod:`deltalog.cleaner.progress`); Spark Connect has tags only. Tags may not contain commas.
    """
    spark.addTag(tag)
    classic = not is_connect(spark)
    if classic:
        sc = spark.sparkContext
        sc.setJobGroup(tag, description or tag, interruptOnCancel=False)
    try:
        yield
    finally:
        spark.removeTag(tag)
        if classic:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)


def default_parallelism(spark: Any) -> int:
    """How many tasks a leaf of a Spark job should have: ``sparkContext.defaultParallelism`` on a classic
    session; on Spark Connect, ``spark.sql.leafNodeDefaultParallelism`` or ``spark.default.parallelism`` if
    set, else the partitions of a ``range`` (which Spark sizes by the same rule), asked once per session."""
    if not is_connect(spark):
        return max(int(spark.sparkContext.defaultParallelism), 1)
    key = spark.session_id
    cached = _PARALLELISM.get(key)
    if cached is not None:
        return cached
    n = 0
    for name in ("spark.sql.leafNodeDefaultParallelism", "spark.default.parallelism"):
        try:
            value = spark.conf.get(name, None)
        except Exception:  # noqa: BLE001 - a server may refuse to show a setting (Databricks serverless)
            value = None
        if value:
            n = int(value)
            break
    if n <= 0:
        sf = functions(spark)
        ids = spark.range(0, 1 << 20).select(sf.spark_partition_id().alias("p"))
        n = int(ids.agg(sf.max("p").alias("p")).first()["p"]) + 1
    _PARALLELISM[key] = max(n, 1)
    return _PARALLELISM[key]


_PARALLELISM: dict[str, int] = {}
