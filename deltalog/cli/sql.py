"""``deltalog sql "QUERY"``: run Spark SQL over the store's views and print the rows.

Views (see :mod:`deltalog.sql.views`): ``<topic>`` is the full log, ``<topic>_current`` the current state,
with ``.`` and ``-`` in topic names replaced by ``_``.
"""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.errors import QueryError
from deltalog.log import damage
from deltalog.text import format_table

DEFAULT_MAX_ROWS = 1000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sql", help="run Spark SQL over the topics' log and current-state views",
        description="Run Spark SQL. Each topic T has a view T (the full log, with a partition column) and "
        "T_current (the latest non-tombstone record per key per partition); '.' and '-' in topic names "
        "become '_', e.g. SELECT key, value FROM fruit_prices_current.",
    )
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--as-of", metavar="TIMESTAMP|VERSION", default=None,
                   help="query the views as of then (Delta time travel): a time in ISO 8601 such as "
                   "2026-11-25T08:00:00Z (no zone: UTC), each partition at its version of that time; or a Delta "
                   "version, for topics of one partition")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, metavar="N",
                   help=f"print at most N rows (default {DEFAULT_MAX_ROWS})")
    output.add_output_option(p, text="an aligned table of at most --max-rows rows",
                             json_help="one JSON object per row (bytes as UTF-8 text, else {\"b64\": ...})")
    common.add_store_option(p)
    p.set_defaults(func=sql)
    common.needs_extras(p, "spark")


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
    store = common.open_store(args)
    try:
        if args.as_of is None:
            df = store.sql(args.query)
        else:
            from deltalog.cli.consume import parse_as_of

            version, timestamp = parse_as_of(args.as_of)
            df = store.sql(args.query, version_as_of=version, timestamp_as_of=timestamp)
        columns = df.columns
        rows = df.limit(args.max_rows + 1).collect()  # the query's result, not a partition's records
    except Exception as e:
        if not output.is_spark_error(e):
            raise
        corrupt = damage.worker_error(e)  # a task found a damaged data file: its error names it, without the stack
        if corrupt is not None:
            raise corrupt from None
        raise QueryError(output.spark_error_message(e) + _views_hint(store, e)) from None
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
    """For a name Spark cannot find, the views this store has (the usual cause is a topic name's '-' or '.')."""
    if not any(c in str(error) for c in ("TABLE_OR_VIEW_NOT_FOUND", "INVALID_IDENTIFIER")):
        return ""
    from deltalog.sql.views import CURRENT_SUFFIX, view_name  # the command imports Spark's side only when it runs

    topics = store.list_topics()  # type: ignore[attr-defined]
    if not topics:
        return "\ndeltalog: this store has no topics yet, so no views"
    names = [n for t in topics for n in (view_name(t), view_name(t) + CURRENT_SUFFIX)]
    return "\ndeltalog: the views of this store's topics: " + ", ".join(names)
