"""``deltalog history TOPIC [-p P] [--limit N]``: a topic's Delta commits, as Delta's ``DESCRIBE HISTORY``.

One line per commit of each partition table, newest first: version, time, what happened (deltalog's append,
clean, retention, DeleteRecords, transaction marker, roll, config change; other engines' OPTIMIZE, VACUUM,
DELETE, MERGE, ...), the engine, and the figures recorded. ``--output json`` prints one object per commit
(:meth:`deltalog.log.history.HistoryEntry.to_json`). ``--as-of`` on ``consume`` and ``sql`` reads the
versions this lists (see :mod:`deltalog.log.time_travel`).
"""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.text import format_table, format_timestamp


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "history", help="list a topic's Delta commits (DESCRIBE HISTORY): appends, cleans, retention, ...",
        description="List the Delta commits of every partition of TOPIC (or of -p N), newest first, in the shape "
        "of Delta's DESCRIBE HISTORY: version, time (UTC), operation, engine and what it did. Read an older "
        "version with 'deltalog consume TOPIC -p N --as-of VERSION' or a time with --as-of TIMESTAMP.",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-p", "--partition", type=int, default=None, metavar="N",
                   help="only partition N (default: every partition)")
    p.add_argument("--limit", type=common.whole_number(1), default=None, metavar="N",
                   help="at most N commits per partition, the newest (DESCRIBE HISTORY ... LIMIT N)")
    output.add_output_option(p, text="a table, one commit per line", json_help="one object per commit")
    common.add_store_option(p)
    p.set_defaults(func=history)


def history(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    entries = store.history(args.topic, args.partition, limit=args.limit)
    if output.wants_json(args):
        for e in entries:
            output.emit(e.to_json())
        return 0
    rows = [[e.partition, e.version, format_timestamp(e.timestamp_ms) + (" +" if e.skewed else ""), e.kind if e.by_deltalog else f"{e.kind} *",
             e.operation or "-", e.engine or "-", e.summary() or "-"] for e in entries]
    print(format_table(["PARTITION", "VERSION", "TIMESTAMP (UTC)", "OPERATION", "DELTA OPERATION", "ENGINE", "WHAT"],
                       rows))
    if any(not e.by_deltalog for e in entries):
        print("* made by another engine, not by deltalog")
    if any(e.skewed for e in entries):
        print("+ its writer's clock stamped it at or before the commit before it; shown (and read by --as-of) at the "
              "previous commit's time + 1 ms, as Delta does (the writer's own time is writer_timestamp_ms in "
              "--output json)")
    return 0
