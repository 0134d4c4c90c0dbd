"""``deltalog sql "QUERY"``: run SQL over the store's views and print the rows.

Views (see :mod:`deltalog.sql.views`): ``<topic>`` is the full log, ``<topic>_current`` the current state,
with ``.`` and ``-`` in topic names replaced by ``_``. ``--engine embedded`` (the default) answers with DuckDB in
this process (:mod:`deltalog.sql.embedded`: no JVM, so a count takes about a second instead of Spark's start);
``--engine spark`` runs Spark SQL on the embedded Spark session (or Spark Connect with ``SPARK_REMOTE``). This
module imports neither engine: the embedded path must not import pyspark.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

import deltalog.cli.common as common
from deltalog import extras
from deltalog.cli import output
from deltalog.errors import QueryError
from deltalog.log import damage
from deltalog.sql.names import CURRENT_SUFFIX, view_name
from deltalog.store import SQL_ENGINES, SQL_FALLBACK_NOTE, default_sql_engine
from deltalog.text import format_table

DEFAULT_MAX_ROWS = 1000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sql", help="run SQL over the topics' log and current-state views (DuckDB in-process, or Spark)",
        description="Run SQL. Each topic T has a view T (the full log, with a partition column) and "
        "T_current (the latest non-tombstone record per key per partition); '.' and '-' in topic names "
        "become '_', e.g. SELECT key, value FROM fruit_prices_current. The embedded engine (DuckDB, the "
        "default) starts no JVM; --engine spark runs Spark SQL. Both have the same views and rows.",
    )
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--as-of", metavar="TIMESTAMP|VERSION", default=None,
                   help="query the views as of then (Delta time travel): a time in ISO 8601 such as "
                   "2026-11-25T08:00:00Z (no zone: UTC), each partition at its version of that time; or a Delta "
                   "version, for topics of one partition")
    p.add_argument("--engine", choices=SQL_ENGINES, default=None,
                   help="embedded: DuckDB in this process, SQL in DuckDB's dialect (deltalog[sql]); spark: Spark "
                        "SQL on the embedded Spark session, or Spark Connect (deltalog[spark]). Default: spark when "
                        "$SPARK_REMOTE names a Spark Connect server, else embedded (spark, said on stderr, when "
                        "DuckDB is not installed and Spark is)")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, metavar="N",
                   help=f"print at most N rows (default {DEFAULT_MAX_ROWS})")
    output.add_output_option(p, text="an aligned table of at most --max-rows rows",
                             json_help="one JSON object per row (bytes as UTF-8 text, else {\"b64\": ...})")
    common.add_store_option(p)
    p.set_defaults(func=sql)


def _plain(value: Any) -> Any:
    """A value as JSON can carry it: bytes as UTF-8 text when they are, else {"b64": ...}."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _cell(value: Any) -> str:
    plain = _plain(value)
    if plain is None:
        return "NULL"
    return plain if isinstance(plain, str) else json.dumps(plain, default=str)


def sql(args: argparse.Namespace) -> int:
    if args.max_rows < 0:
        raise common.UsageError(f"--max-rows must be >= 0, not {args.max_rows}")
    engine = args.engine or ("spark" if os.environ.get("SPARK_REMOTE", "").strip() else default_sql_engine())
    extras.require("sql" if engine == "embedded" else "spark", "deltalog sql")
    if engine == "spark" and args.engine is None and not os.environ.get("SPARK_REMOTE", "").strip():
        print(f"deltalog: note: {SQL_FALLBACK_NOTE}", file=sys.stderr)  # the fall back, said once
    store = common.open_store(args)
    version = timestamp = None
    if args.as_of is not None:
        from deltalog.cli.consume import parse_as_of

        version, timestamp = parse_as_of(args.as_of)
    if engine == "embedded":
        try:
            relation = store.sql(args.query, engine="embedded", version_as_of=version, timestamp_as_of=timestamp)
            if relation is None:  # a statement without a result (SET, CREATE ...)
                return _print(args, [], [])
            columns, rows = list(relation.columns), relation.limit(args.max_rows + 1).fetchall()
        except QueryError as e:
            raise QueryError(str(e) + _views_hint(store, e)) from None
        except Exception as e:  # DuckDB's own errors at fetch time (a cast that fails on a row, ...)
            if type(e).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
                raise
            error = store._embedded.error(e)  # a damaged data file is named as such, anything else DuckDB's words
            if isinstance(error, QueryError):
                raise QueryError(str(error) + _views_hint(store, e)) from None
            raise error from None
        return _print(args, columns, rows)
    try:
        df = store.sql(args.query, engine="spark", version_as_of=version, timestamp_as_of=timestamp)
        columns = df.columns
        rows = df.limit(args.max_rows + 1).collect()  # the query's result, not a partition's records
    except Exception as e:
        if not output.is_spark_error(e):
            raise
        corrupt = damage.worker_error(e)  # a task found a damaged data file: its error names it, without the stack
        if corrupt is not None:
            raise corrupt from None
        raise QueryError(output.spark_error_message(e) + _views_hint(store, e)) from None
    return _print(args, columns, rows)


def _print(args: argparse.Namespace, columns: list[str], rows: list[Any]) -> int:
    more = len(rows) > args.max_rows
    rows = rows[: args.max_rows]
    if output.wants_json(args):
        for r in rows:
            output.emit({c: _plain(v) for c, v in zip(columns, r, strict=True)})
    else:
        print(format_table(columns, [[_cell(v) for v in r] for r in rows], sep=" | "))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', more not shown' if more else ''})")
    return 0


def _views_hint(store: object, error: BaseException) -> str:
    """For a name the engine cannot find, the views this store has (the usual cause is a topic name's '-' or
    '.')."""
    if not any(c in str(error) for c in ("TABLE_OR_VIEW_NOT_FOUND", "INVALID_IDENTIFIER", "does not exist")):
        return ""
    topics = store.list_topics()  # type: ignore[attr-defined]
    if not topics:
        return "\ndeltalog: this store has no topics yet, so no views"
    names = [n for t in topics for n in (view_name(t), view_name(t) + CURRENT_SUFFIX)]
    return "\ndeltalog: the views of this store's topics: " + ", ".join(names)
