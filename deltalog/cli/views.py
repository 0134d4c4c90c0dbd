"""``deltalog views``: print the SQL that makes the topics' log and current-state views in another engine.

The text is plain SQL over the partition Delta tables (:mod:`deltalog.sql.ddl`): run it in a Databricks SQL
warehouse or notebook, Spark with delta-spark, DuckDB or Trino, where deltalog is not installed.
"""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.sql import ddl


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "views", help="print the SQL views of the topics' log and current state for Spark, Databricks, DuckDB, Trino",
        description="Print CREATE VIEW statements over the partition Delta tables: T (the log, read_committed) "
        "and T_current (the latest non-tombstone record per key per partition) for each topic T. They need "
        "no deltalog where they run; they embed each partition's log start offset, so print them again after "
        "retention or DeleteRecords runs.",
    )
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="the topics (default: every topic)")
    p.add_argument("--engine", choices=ddl.ENGINES, default="spark",
                   help="spark: delta.`path` (Spark with delta-spark); databricks: the same, or Unity Catalog "
                        "tables with --catalog/--schema; duckdb: delta_scan (its delta extension); trino: tables "
                        "registered with the Delta Lake connector's register_table (default: spark)")
    p.add_argument("--catalog", default=None,
                   help="the catalog of the views (and registered tables): Unity Catalog's, or Trino's Delta "
                        f"catalog (Trino's default: {ddl.TRINO_DEFAULTS[0]})")
    p.add_argument("--schema", default=None,
                   help="the schema of the views; on Spark/Databricks it also registers each partition as an "
                        f"external Delta table there (Trino's default: {ddl.TRINO_DEFAULTS[1]})")
    output.add_output_option(p, text="the SQL script", json_help="one JSON object per statement")
    common.add_store_option(p)
    p.set_defaults(func=views)


def views(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    statements = ddl.view_statements(store.log_manager, args.engine, topics=args.topics or None,
                                     catalog=args.catalog, schema=args.schema)
    if output.wants_json(args):
        for s in statements:
            output.emit({"name": s.name, "topic": s.topic, "kind": s.kind, "sql": s.sql})
    else:
        print(ddl.script(statements, args.engine), end="")
    return 0
