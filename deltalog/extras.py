"""What the base install leaves out, and the one-line error that names the extra which brings it.

deltalog's wheel leaves pyspark out of its requirements, as libraries that run on Databricks do (a runtime
provides its own Spark, and a pip-installed pyspark would shadow it); a laptop installs ``deltalog[spark]``.
Great Expectations, which only the data-quality checks use, comes with ``deltalog[quality]``, and DuckDB, the
embedded SQL engine of ``deltalog sql``, with ``deltalog[sql]``. Producing,
consuming, topics, groups, transactions, describe and ``doctor --no-spark`` need neither, so the modules that
import them do so on first use, after :func:`require` has said in one line what to install if it is missing.
"""

from __future__ import annotations

import importlib.util

from deltalog.errors import MissingExtraError

#: extra -> (the modules it provides, what deltalog uses them for)
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "spark": (("pyspark",), "Spark (pyspark)"),
    "quality": (("great_expectations",), "Great Expectations"),
    "sql": (("duckdb",), "DuckDB (the embedded SQL engine)"),
    "server": (("kafka",), "kafka-python (Kafka's protocol structures, for `deltalog serve`)"),
    "polars": (("polars",), "Polars (a state table as a Polars frame)"),
    "metrics": (("prometheus_client",), "prometheus_client (Kafka's cleaner gauges for Prometheus)"),
}

#: A module's top-level name -> the extra that brings it (for an import that failed anyway).
EXTRA_OF_MODULE = {module: extra for extra, (modules, _) in EXTRAS.items() for module in modules}


def missing(extra: str) -> str | None:
    """The first module of ``extra`` that cannot be imported here, or None when all can."""
    for module in EXTRAS[extra][0]:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def error(extra: str, what: str) -> MissingExtraError:
    """The one-line error for ``what`` (a command or a call) needing ``extra``."""
    return MissingExtraError(
        f"{what} needs {EXTRAS[extra][1]}, which this install of deltalog leaves out: "
        f"pip install 'deltalog[{extra}]' (on Databricks the runtime provides pyspark)")


def require(extra: str, what: str) -> None:
    """Raise :class:`~deltalog.errors.MissingExtraError` unless every module of ``extra`` can be imported.

    ``find_spec`` finds a runtime's own pyspark (on ``sys.path``, not a pip distribution) as well."""
    if missing(extra) is not None:
        raise error(extra, what)


def from_import_error(e: ImportError, what: str) -> MissingExtraError | None:
    """The one-line error for an ``ImportError`` of a module an extra brings; None for any other."""
    name = (getattr(e, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(name)
    return error(extra, what) if extra is not None else None
