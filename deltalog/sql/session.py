"""The embedded Spark session, for when the caller brings none, and what deltalog needs of any session.

Library code never builds a session on its own initiative when one is given (delta-spark's and chispa's
habit): :class:`~deltalog.store.Store` takes ``spark=`` and uses it as it is, classic or Spark Connect; only
when it is ``None`` and a Spark job is about to run does it ask :func:`local_session` for the embedded
default. Spark's own convention picks its kind: with ``SPARK_REMOTE`` set (``local[2]``, ``sc://host:port``)
it is a Spark Connect session, else a classic local session with the UI off and few shuffle partitions.
Nothing here needs delta-spark's JARs: Delta commits go through delta-rs.

Every Spark job of deltalog runs on both kinds (:mod:`deltalog.spark` says what differs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from deltalog import extras
from deltalog.spark import default_parallelism, is_connect, job_tag

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings of the embedded session; ``conf/`` and ``Store(spark_conf=...)`` may override any of them.
DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The cleaner's offset map lives on the driver (24 bytes an entry: 120 MB at Kafka's default capacity of
    # 5,033,164 keys), and pass 1's tasks send their partial maps there through collect() (32 bytes an entry
    # each), so leave the driver room for both.
    "spark.driver.memory": "4g",
    "spark.driver.maxResultSize": "2g",
    "spark.driver.extraJavaOptions": "-Dio.netty.tryReflectionSetAccessible=true",
}


#: A file (``os.devnull`` to drop it) that receives the embedded session's own output when it is created: the
#: JVM's stdout and stderr (log4j's console lines, JVM warnings, and the Python workers it starts) and PySpark's
#: query-error loggers, which print the Java stack of every failed query. Unset: they go where they always do.
#: The CLI sets it unless ``--verbose``.
SPARK_OUTPUT_ENV = "DELTALOG_SPARK_OUTPUT"
#: PySpark's loggers that write a failed query's message and Java stack as JSON on stderr (pyspark.errors).
PYSPARK_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def local_session(master: str | None = None, conf: dict[str, Any] | None = None,
                  app_name: str = "deltalog") -> SparkSession:
    """Get or create the embedded session.

    With ``SPARK_REMOTE`` set it is a Spark Connect session to that address (``local[N]`` starts a local
    Connect server in this process with ``conf``; for ``sc://...`` only runtime ``spark.sql.*`` settings are
    sent), and ``master`` is ignored: a Connect session has none. Otherwise a classic session on ``master``
    (``local[2]`` unless ``DELTALOG_SPARK_MASTER`` says else). An active session of either kind is returned
    as it is.

    With ``$DELTALOG_SPARK_OUTPUT`` set, a session created here sends Spark's own output to that file (see
    :data:`SPARK_OUTPUT_ENV`).
    """
    extras.require("spark", "a Spark job (the embedded Spark session)")  # the base install has no pyspark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _let_workers_import_deltalog()
    from pyspark.sql import SparkSession  # the CLI imports this module for every command; only some start Spark

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    settings = {**DEFAULT_SPARK_CONF, **(conf or {})}
    remote = os.environ.get("SPARK_REMOTE", "").strip()
    if remote:
        builder = SparkSession.builder.remote(remote).appName(app_name)
        if not remote.startswith("local"):
            # A server somewhere else: its static settings (memory, UI) are its own; sending them only warns.
            settings = {k: v for k, v in settings.items() if k.startswith("spark.sql.")}
    else:
        builder = SparkSession.builder.appName(app_name).master(
            master or os.environ.get("DELTALOG_SPARK_MASTER", "local[2]")
        )
    for k, v in settings.items():
        builder = builder.config(k, str(v))
    target = os.environ.get(SPARK_OUTPUT_ENV) or None
    with warnings.catch_warnings(), _jvm_output_to(target):
        # remote("local[N]") starts its server with every setting, then pyspark sets them on the new Connect
        # session too and warns for each static one ("Failed to set spark.ui.enabled"): nothing failed.
        warnings.filterwarnings("ignore", message="Failed to set spark[.]", category=UserWarning)
        session = builder.getOrCreate()
    if target is not None:
        _pyspark_query_logs_to(target)
    level = os.environ.get("DELTALOG_SPARK_LOG_LEVEL", "ERROR")
    if not is_connect(session):
        session.sparkContext.setLogLevel(level)
    elif remote.startswith("local"):
        from pyspark import SparkContext

        server = SparkContext._active_spark_context  # the local Connect server runs in this process's JVM
        if server is not None:
            server.setLogLevel(level)
    warm = warm_python_workers(session) if os.environ.get("DELTALOG_WARM_WORKERS", "1") != "0" else None
    _EMBEDDED.append((session, warm))
    return session


#: Sessions :func:`local_session` created (not those it found active), with their warm-up threads.
_EMBEDDED: list[tuple[SparkSession, threading.Thread | None]] = []


def stop_embedded_sessions(wait_s: float = 10.0) -> None:
    """Stop the sessions :func:`local_session` created, after their warm-up job (a daemon thread) ends: a process
    that exits with a Spark job still running in such a thread can abort in the JVM's native code ("terminate
    called without an active exception", seen once at the end of a successful ``deltalog demo``). The
    ``deltalog`` command calls this before it exits; a session passed in by a user is never stopped."""
    while _EMBEDDED:
        session, warm = _EMBEDDED.pop()
        if warm is not None:
            warm.join(wait_s)
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - already stopped, or its server is gone: nothing left to stop
            pass


@contextlib.contextmanager
def _jvm_output_to(target: str | None) -> Iterator[None]:
    """While the JVM is started, point file descriptors 1 and 2 at ``target``: the JVM (and every process it
    starts) inherits them and writes there for good, while this process gets its own back at once."""
    if target is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def _pyspark_query_logs_to(target: str) -> None:
    """PySpark logs every failed query's message and Java stack (JSON, to stderr) as the exception is made; the
    caller gets the message from the exception anyway, so those lines go to ``target`` with the JVM's."""
    from pyspark.logger import PySparkLogger  # pyspark is imported by now: the session exists

    for name in PYSPARK_QUERY_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(logging.FileHandler(target, delay=True))


def _let_workers_import_deltalog() -> None:
    """The cleaner's tasks import deltalog in Spark's Python workers. Installed, it is on their path; run
    from a source checkout (``PYTHONPATH`` unset, or the driver started elsewhere), the checkout is put on
    ``PYTHONPATH``, which the local session passes to its workers. A site-packages directory is never
    added: ahead of the standard library it could shadow it."""
    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.basename(parent) in ("site-packages", "dist-packages"):
        return
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if parent not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([parent, *paths])


#: Spark job tag (and, on a classic session, job group) of the job that starts the cleaner's Python workers.
WARM_JOB_GROUP = "deltalog-warm-workers"


class _WarmUp(threading.Thread):
    """The warm-up job in its thread; ``workers`` is how many of its tasks ran the cleaner's code (None
    until it ends, or when it failed)."""

    workers: int | None = None


def warm_python_workers(session: SparkSession) -> _WarmUp:
    """Start the cleaner's Python workers in the background, one per core.

    A cleaning pass runs deltalog's own code in Spark's Python workers; the first pass in a session
    otherwise waits for them to start and import numpy and pyarrow (docs/performance.md). The
    embedded session starts them while the caller does other work (opening the store, appending). The job
    is tiny (a ``mapInArrow`` over one row a task) and its failure is harmless: the pass would start the
    workers itself.
    """

    def run() -> None:
        try:
            n = default_parallelism(session)
            with job_tag(session, WARM_JOB_GROUP, "deltalog: starting the cleaner's Python workers"):
                rows = session.range(0, n, numPartitions=n).mapInArrow(_warm_worker, "warmed long").collect()
            thread.workers = sum(r["warmed"] for r in rows)
        except Exception:  # noqa: BLE001 - a session stopped meanwhile, or no Python workers: the pass starts them
            pass

    thread = _WarmUp(target=run, name="deltalog-warm-workers", daemon=True)
    thread.start()
    return thread


def _warm_worker(batches: Iterator[Any]) -> Iterator[Any]:
    """Import and run the cleaner's task code once on three keys (numpy, pyarrow, the vectorized hash)."""
    import pyarrow as pa  # this function runs in a Spark worker: everything it imports is for the worker

    from deltalog.cleaner import offset_map, recopy  # noqa: F401 - imported for the worker's module cache
    from deltalog.log.key_hash import key_hashes

    for _ in batches:
        pass
    key_hashes(pa.array([b"a", b"bb", b"a" * 40]))
    yield pa.RecordBatch.from_pydict({"warmed": [1]}, schema=pa.schema([pa.field("warmed", pa.int64())]))
