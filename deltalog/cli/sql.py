"""``deltalog sql "QUERY"``: run Spark SQL over the store's views and print the rows.

Views (see :mod:`deltalog.sql.views`): ``<topic>`` is the full log, ``<topic>_current`` the current state,
with ``.`` and ``-`` in topic names replaced by ``_``.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

import deltalog.cli.common as common
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
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS, metavar="N",
                   help=f"print at most N rows (default {DEFAULT_MAX_ROWS})")
    common.add_json_option(p)
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
    # pyspark is imported by the commands that run Spark only, not at the start of every command.
    from pyspark.errors import PySparkException

    if args.max_rows < 0:
        raise common.UsageError(f"--max-rows must be >= 0, not {args.max_rows}")
    store = common.open_store(args)
    try:
        df = store.sql(args.query)
        columns = df.columns
        rows = df.limit(args.max_rows + 1).collect()  # the query's result, not a partition's records
    except PySparkException as e:
        # Spark's parse errors start with an empty line: show the first line that says something.
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        print(f"deltalog: error: {first}", file=sys.stderr)
        return 1
    more = len(rows) > args.max_rows
    rows = rows[: args.max_rows]
    if args.json:
        for r in rows:
            sys.stdout.write(json.dumps({c: _plain(v) for c, v in zip(columns, r, strict=True)}, default=str) + "\n")
    else:
        print(format_table(columns, [[_cell(v) for v in r] for r in rows], sep=" | "))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', more not shown' if more else ''})")
    return 0
