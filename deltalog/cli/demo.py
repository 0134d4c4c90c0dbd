"""``deltalog demo``: the fruit-prices walkthrough of Kafka's compaction on a fresh demo store (see :mod:`.demo_walkthrough`)."""

from __future__ import annotations

import argparse

from deltalog.cli import common, output
from deltalog.cli.demo_walkthrough import DEFAULT_DEMO_STORE, MARKER, run_demo


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo", help="replay the fruit-prices walkthrough on a fresh demo store",
        description="Create a compacted fruit-prices topic in a fresh demo store, append the "
        "fruit-prices walkthrough's events (seven days pass on a manual clock), and print the log and the partition's "
        f"state. The demo store is wiped first, so the demo only uses an empty directory or one marked by "
        f"{MARKER}.",
    )
    p.add_argument("--store", dest="demo_store", metavar="URI", default=None,
                   help=f"the demo store (default {DEFAULT_DEMO_STORE}, not $DELTALOG_STORE: the demo "
                   "never wipes a store it did not create)")
    output.add_output_option(p, text="the walkthrough, step by step", json_help="one object: the store, the "
                             "offsets produced, and the topic before the first clean and after each clean")
    p.set_defaults(func=demo)
    common.needs_extras(p, "spark")


def demo(args: argparse.Namespace) -> int:
    path = args.demo_store or args.store or DEFAULT_DEMO_STORE
    options = common.storage_options(args) or None
    if not output.wants_json(args):
        run_demo(path, storage_options=options)
        return 0
    result = run_demo(path, out=lambda line: None, storage_options=options)
    output.emit({"store": result.store.root, "offsets": list(result.offsets), "before": result.before.as_dict(),
                 "after": result.after.as_dict(), "final": result.final.as_dict()})
    return 0
