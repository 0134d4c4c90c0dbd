"""``deltalog check TOPIC``: run the compaction-guarantee suites and print a readable summary.

Exits 0 when every expectation passed and 3 when any failed (broken data: distinct from 1, a failure to run,
and 2, a usage error; see :mod:`deltalog.cli.exit_codes`); the validation results are kept as JSON under ``<store>/_deltalog/checks/<topic>/``.
"""

from __future__ import annotations

import argparse
import logging

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.cli.exit_codes import EXIT_BROKEN_DATA, EXIT_OK
from deltalog.cli.progress import Steps
from deltalog.errors import UnknownTopicOrPartitionError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check", help="check that compaction kept its guarantees (Great Expectations suites)",
        description="Validate every partition of TOPIC: offsets unique and not null, keys not null on compacted "
        "topics, each key at most once in the clean section, tombstone horizons, read order; and, across the "
        "last clean of each partition (Delta time travel), that no latest record was lost, nothing appeared "
        "and the uncleaned tail did not change. Exit code 3 when any expectation fails (1: the check could not run; 2: "
        "a usage error).",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-p", "--partition", type=int, action="append", metavar="N", dest="partitions",
                   help="check only this partition (repeatable; default: every partition)")
    p.add_argument("--cleans", choices=("last", "all", "none"), default="last",
                   help="which clean commits to check across (default: the last of each partition)")
    p.add_argument("--data-docs", action="store_true",
                   help="also build Great Expectations data docs (HTML) under the store")
    p.add_argument("--ge-context", metavar="DIR", default=None,
                   help="run in this Great Expectations file context (its project directory, or its gx/ "
                        "directory): the suites are saved there as deltalog.<topic>.partition/.clean and used as "
                        "saved, each run is one of its Checkpoints (with its actions, data docs included) and "
                        "the results land in its validation results store (default: an ephemeral context)")
    output.add_output_option(p, text="a summary per partition and expectation",
                             json_help="one object: the whole result (success, suites, expectations, samples)")
    common.add_store_option(p)
    p.set_defaults(func=check)
    common.needs_extras(p, "spark", "quality")


def check(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    if args.partitions is not None:
        known = store.partitions(args.topic)  # raises for an unknown topic
        unknown = sorted(set(args.partitions) - set(known))
        if unknown:
            raise UnknownTopicOrPartitionError(f"topic {args.topic!r} has no partition {unknown[0]}; its partitions "
                                               f"are {known}")
    # the check logs a failing result's summary as a warning (for jobs and notebooks); this command prints the
    # summary itself, so the log's copy would be the same report twice on the terminal
    quality_log = logging.getLogger("deltalog.quality.check")
    saved, quality_log.disabled = quality_log.disabled, True
    try:
        with Steps(f"checking {args.topic}", before="starting Spark and Great Expectations") as steps:
            result = store.check(args.topic, partitions=args.partitions, cleans=args.cleans,
                                 data_docs=args.data_docs, context=args.ge_context, progress=steps)
            steps.finish()
    finally:
        quality_log.disabled = saved
    if output.wants_json(args):
        output.emit(result.as_dict())
    else:
        print(result.summary())
    return EXIT_OK if result.success else EXIT_BROKEN_DATA
