"""``deltalog clean [TOPIC] [-p N] [--force]``: run cleaning passes now and print each pass's figures.

Without a partition it is ``store.clean()``: passes, filthiest partition first, until no partition of
the topic (or of the store) is eligible. With ``-p`` it is one pass over that partition
(``store.clean_partition``); ``--force`` cleans its cleanable section even when the dirty ratio is below
``min.cleanable.dirty.ratio``. ``deltalog cleaner run`` is the scheduled job that also applies retention
and VACUUM. While passes run, their progress goes to stderr (:mod:`deltalog.cli.progress`): a bar on a
terminal, a line every ``--progress-interval`` seconds otherwise; the figures go to stdout at the end.
"""

from __future__ import annotations

import argparse
import sys

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.cli.progress import CleanProgress
from deltalog.errors import CheckFailedError, CleaningFailedError, DeltalogError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "clean", help="run cleaning passes now and print their figures",
        description="Clean eligible partitions (filthiest first) until none is eligible, and print what each "
        "pass did, as Kafka's cleaner log line does.",
    )
    p.add_argument("topic", metavar="TOPIC", nargs="?", help="only this topic (default: every topic)")
    p.add_argument("-p", "--partition", type=int, metavar="N", help="one pass over this partition only")
    p.add_argument("--force", action="store_true",
                   help="with -p: clean even if the dirty ratio is below min.cleanable.dirty.ratio")
    p.add_argument("--progress-interval", type=float, default=None, metavar="SECONDS",
                   help="seconds between progress lines on stderr when it is not a terminal (default 10; a terminal "
                   "gets a progress bar)")
    output.add_output_option(p, text="Kafka's cleaner log line per pass",
                             json_help="one object per pass with every figure")
    common.add_store_option(p)
    p.set_defaults(func=clean)
    common.needs_extras(p, "spark")


def clean(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise common.UsageError("-p/--partition needs a TOPIC")
    if args.force and args.partition is None:
        raise common.UsageError("--force needs -p/--partition: it cleans one partition regardless of its ratio")
    if args.progress_interval is not None and args.progress_interval <= 0:
        raise common.UsageError(f"--progress-interval must be > 0, not {args.progress_interval}")
    store = common.open_store(args)
    if args.partition is not None:
        from deltalog.jobs.cleaner_job import pass_may_run  # imported by the command that runs, not by --help

        if pass_may_run(store.log_cleaner(), [args.topic]):
            store.start_spark()  # Spark's start and warm-up beside the leasing and planning before the pass
    # Without -p, store.clean starts Spark from its own ranking (the partitions are ranked once).
    failed: DeltalogError | None = None
    progress = CleanProgress(sys.stderr, interval_s=args.progress_interval)
    try:
        if args.partition is not None:
            one = store.clean_partition(args.topic, args.partition, force=args.force, progress=progress,
                                        progress_interval_s=progress.interval_s)
            results = [one] if one is not None else []
        else:
            try:
                results = store.clean(args.topic, progress=progress, progress_interval_s=progress.interval_s)
            except (CleaningFailedError, CheckFailedError) as e:  # the other partitions were cleaned: show them
                results, failed = list(e.results), e
    finally:
        progress.close()
    _print(args, results, failed is not None)
    if failed is not None:
        raise failed
    return 0


def _print(args: argparse.Namespace, results: list, failed: bool) -> None:
    if output.wants_json(args):
        for r in results:
            output.emit(r.as_dict())
    elif not results and not failed:
        print("Nothing to clean: no partition is eligible (dirty ratio at or below min.cleanable.dirty.ratio, "
              "and max.compaction.lag.ms not reached).")
    else:
        for r in results:
            print(r.summary())
