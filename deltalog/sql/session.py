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
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from deltalog import extras
from deltalog.spark import default_parallelism, is_connect, job_tag

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

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
    """While the session is created, start the JVM with its stdout and stderr on ``target``: the JVM (and every
    process it starts) writes there for good. The JVM's process is given the file itself (pyspark's
    ``launch_gateway`` takes ``Popen``'s arguments), so this process's own descriptors 1 and 2 are never moved:
    a session started on a thread of its own (:class:`SessionStarter`) leaves the other threads' output alone."""
    if target is None:
        yield
        return
    from pyspark.core import context  # where SparkContext launches the JVM, for classic and local Connect alike

    original = context.launch_gateway
    with open(target, "ab") as f:

        def launch_gateway(conf: Any = None, popen_kwargs: dict[str, Any] | None = None) -> Any:
            return original(conf, {**(popen_kwargs or {}), "stdout": f, "stderr": f})

        context.launch_gateway = launch_gateway
        try:
            yield
        finally:
            context.launch_gateway = original


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
#: How long a pass waits for the warm-up's first step (a few seconds when it works): a Spark job of it that never
#: answers (seen once in a test run: the collect of its result waiting on its serving thread for good) must not hold
#: the scheduled job forever, and the warm-up is only ever a saving.
WARM_UP_WAIT_S = 120


class _WarmUp(threading.Thread):
    """The warm-up's first step in its thread; ``workers`` is how many of its tasks ran the cleaner's code (None
    until it ends, or when it failed); ``passes`` how many passes the second step's round made (None until
    :func:`await_warm_up` ran it); ``seconds`` how long both took."""

    workers: int | None = None
    passes: int | None = None
    seconds: float | None = None
    round_lock: threading.Lock


def warm_python_workers(session: SparkSession) -> _WarmUp:
    """Start the cleaner's Python workers in the background, one per core, with its modules imported
    (:mod:`deltalog.sql.warm_up`, first step), as soon as the embedded session starts.

    A session's first pass otherwise pays for Spark's first jobs and first workers itself (docs/scale.md, "Cold
    vs warm"); the embedded session runs this while the caller does other work (opening the store, ranking,
    retention). Its second step, a cleaning round over tiny partitions, runs only where a pass follows
    (:func:`await_warm_up`), so a session that only queries never pays for it. Its failure is harmless: the pass
    would pay those costs itself.
    """

    def run() -> None:
        from deltalog.sql.warm_up import start_workers

        started = time.perf_counter()
        try:
            with job_tag(session, WARM_JOB_GROUP, "deltalog: starting the cleaner's Python workers"):
                thread.workers = start_workers(session, default_parallelism(session))
        except Exception as e:  # noqa: BLE001 - a session stopped meanwhile, or no Python workers: the pass starts them
            log.debug("the warm-up of the embedded session failed: %s", e)
        thread.seconds = time.perf_counter() - started

    thread = _WarmUp(target=run, name="deltalog-warm-workers", daemon=True)
    thread.round_lock = threading.Lock()
    thread.start()
    return thread


def await_warm_up(session: SparkSession, warm: _WarmUp | None = None) -> float | None:
    """Before a pass: wait for the warm-up :func:`local_session` started on ``session`` (or ``warm``), then, the
    first time, run its second step, a cleaning round over a tiny partition per core (:mod:`deltalog.sql.warm_up`);
    returns how long the warm-up took in all, or None when there was none. A pass waits for it rather than run
    beside it: on few cores the two would share them, and the pass would still pay the first-job costs the warm-up
    is paying. A session given by a user (not made by :func:`local_session`) has none."""
    if warm is None:
        warm = next((w for s, w in list(_EMBEDDED) if s is session), None)
    if warm is None:
        return None
    warm.join(WARM_UP_WAIT_S)
    if warm.is_alive():  # a Spark job that never answers: the pass goes on without the warm-up, as if it had failed
        log.warning("the warm-up of the embedded Spark session did not finish in %d s; cancelling it, the pass starts "
                    "Spark's workers itself", WARM_UP_WAIT_S)
        try:
            session.interruptTag(WARM_JOB_GROUP)
        except Exception as e:  # noqa: BLE001 - a session stopped meanwhile: nothing left to cancel
            log.debug("cancelling the warm-up failed: %s", e)
        return None
    with warm.round_lock:
        if warm.passes is None and warm.workers is not None:
            from deltalog.sql.warm_up import tiny_round

            started = time.perf_counter()
            try:
                warm.passes = tiny_round(session, default_parallelism(session))
            except Exception as e:  # noqa: BLE001 - the pass pays the first-job costs itself
                log.debug("the warm-up round of the embedded session failed: %s", e)
                warm.passes = 0
            warm.seconds = (warm.seconds or 0.0) + time.perf_counter() - started
    return warm.seconds


class SessionStarter:
    """A Spark session started on a thread of its own, for a caller that knows early that it will need one and
    has Spark-free work to do first (the scheduled job's retention, ranking and planning; Kafka starts its cleaner
    threads with the broker, not at the first dirty log). :meth:`start` begins the session's start and its warm-up
    in the background; calling the starter (it is a session provider, as :class:`~deltalog.store.Store` takes
    one) starts it if nobody did, waits for both, and returns the session, or raises what its start raised.
    ``spark_start_s`` is how long the caller waited plus how long the start ran before it asked: Spark's start,
    warm-up included, as the caller saw it."""

    def __init__(self, factory: Callable[[], SparkSession]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        #: Seconds from :meth:`start` until the session and its warm-up were ready (None until then).
        self.ready_s: float | None = None
        self._started_at: float | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start the session and its warm-up in the background (again: nothing)."""
        with self._lock:
            if self._thread is not None:
                return
            self._started_at = time.perf_counter()
            self._thread = threading.Thread(target=self._run, name="deltalog-spark-start", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            session = self._factory()
            await_warm_up(session)
            self._session = session
        except BaseException as e:  # noqa: BLE001 - given to the caller that asks for the session
            self._error = e
        assert self._started_at is not None
        self.ready_s = time.perf_counter() - self._started_at

    def __call__(self) -> SparkSession:
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session
