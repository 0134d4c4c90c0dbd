"""``deltalog cleaner run|reset-uncleanable|retention|vacuum|delete-records`` and ``deltalog status``.

``cleaner run`` is the same job as ``python -m deltalog.jobs.cleaner_job``: store path from ``--store``
(else the config file's ``store.root``, else ``$DELTALOG_STORE``), cleaner settings from the config file's
``cleaner`` section overridden by the global ``--config KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

import deltalog.cli.common as common
from deltalog.cleaner.log_cleaner import CycleResult
from deltalog.cleaner.metrics import collect, format_table
from deltalog.cleaner.uncleanable import UncleanablePartitions
from deltalog.cli import output
from deltalog.cli.progress import Steps
from deltalog.errors import InvalidConfigError
from deltalog.jobs.cleaner_job import JobConfig, add_metrics_options, cycle_json, metrics_overrides
from deltalog.jobs.cleaner_job import run as run_job
from deltalog.log.vacuum import STAGED_MAX_AGE_MS, STORE_LEVEL, TEMP_FILES, TEMP_MAX_AGE_MS
from deltalog.text import format_table as text_table


def register(subparsers: argparse._SubParsersAction) -> None:
    cleaner = subparsers.add_parser(
        "cleaner", help="run the log cleaner (retention, compaction, VACUUM); manage uncleanable partitions",
        description="The log cleaner and the maintenance it runs on every partition.",
    )
    sub = cleaner.add_subparsers(dest="cleaner_command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="run cleaner cycles: retention, cleaning passes, VACUUM, metrics",
                       description="Run the cleaner over the store: each cycle applies retention, cleans eligible "
                       "partitions filthiest first until none is eligible, VACUUMs, and appends metrics. Without "
                       "--once it keeps running, sleeping log.cleaner.backoff.ms when there is nothing to do.")
    p.add_argument("--once", action="store_true", help="run one cycle and exit (what a schedule runs)")
    p.add_argument("--max-cycles", type=int, metavar="N", help="exit after N cycles")
    p.add_argument("--config-file", metavar="FILE", help="a job config such as conf/deltalog.json")
    p.add_argument("--no-vacuum", action="store_true", help="skip VACUUM in each cycle")
    p.add_argument("--progress-interval", type=float, metavar="SECONDS", help="seconds between progress lines")
    add_metrics_options(p)
    output.add_output_option(p, default=output.JSON, text="a summary line per cycle",
                             json_help="one object per cycle, the job's line")
    common.add_store_option(p)
    p.set_defaults(func=run)
    common.needs_extras(p, "spark")

    p = sub.add_parser("reset-uncleanable", help="clear uncleanable marks so the cleaner tries again",
                       description="Clear the uncleanable mark of one partition, of a topic, or (no arguments) "
                       "of every partition.")
    p.add_argument("topic", metavar="TOPIC", nargs="?")
    p.add_argument("partition", metavar="PARTITION", nargs="?", type=int)
    output.add_output_option(p, text="a line per cleared mark", json_help="one object per cleared mark")
    common.add_store_option(p)
    p.set_defaults(func=reset_uncleanable)

    p = sub.add_parser("retention", help="apply retention.ms / retention.bytes now (delete old segments)")
    p.add_argument("topic", metavar="TOPIC", nargs="?", help="the topic (default: every topic)")
    output.add_output_option(p, text="a line per partition that lost segments", json_help="one object per partition")
    common.add_store_option(p)
    p.set_defaults(func=retention)

    p = sub.add_parser("vacuum", help="list (or with --apply remove) files past file.delete.delay.ms")
    p.add_argument("topic", metavar="TOPIC", nargs="?", help="the topic (default: every topic)")
    p.add_argument("--apply", action="store_true", help="remove the files (default: dry run, only list them)")
    output.add_output_option(p, text="a line per partition with files", json_help="one object per partition")
    common.add_store_option(p)
    p.set_defaults(func=vacuum)

    p = sub.add_parser("delete-records", help="advance a partition's log start offset (Kafka's DeleteRecords)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", metavar="PARTITION", type=int)
    p.add_argument("offset", metavar="OFFSET", type=int, help="the new log start offset; -1: the log end")
    output.add_output_option(p, text="the new log start offset", json_help="one object with the figures")
    common.add_store_option(p)
    p.set_defaults(func=delete_records)

    p = subparsers.add_parser("status", help="cleaner metrics: dirty %%, uncleanable partitions, last clean, ...",
                              description="Kafka's cleaner metrics per partition and for the store. The same "
                              "figures are appended to the Delta table STORE/_deltalog/metrics by every job cycle.")
    output.add_output_option(p, text="a table per partition and the store's figures",
                             json_help="one object: the store's and every partition's metrics")
    p.add_argument("--prometheus", action="store_true",
                   help="print the figures as Prometheus' exposition text, under Kafka's JMX exporter names "
                   "(kafka_log_logcleanermanager_max_dirty_percent, ...): for a textfile collector")
    common.add_store_option(p)
    p.set_defaults(func=status)


def _setup_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run(args: argparse.Namespace) -> int:
    if args.config_file:
        config = JobConfig.load(args.config_file)
        if getattr(args, "store", None):
            config = dataclasses.replace(config, root=args.store)
    else:
        config = JobConfig(root=common.store_path(args))
    overrides: dict[str, object] = {"cleaner": {**config.cleaner, **dict(args.store_config or [])},
                                    "storage_options": {**config.storage_options, **common.storage_options(args)}}
    if args.once:
        overrides["once"] = True
    if args.max_cycles is not None:
        if args.max_cycles < 1:
            raise common.UsageError(f"--max-cycles must be >= 1, not {args.max_cycles}")
        overrides["max_cycles"] = args.max_cycles
    if args.no_vacuum:
        overrides["vacuum"] = False
    try:
        overrides.update(metrics_overrides(args))
    except InvalidConfigError as e:
        raise common.UsageError(str(e)) from None
    if args.progress_interval is not None:
        if args.progress_interval <= 0:
            raise common.UsageError(f"--progress-interval must be > 0, not {args.progress_interval}")
        overrides["progress_interval_s"] = args.progress_interval
    config = dataclasses.replace(config, **overrides)
    if not args.config_file:
        common.open_store(args)  # refuse a --store that holds no store
    JobConfig.from_mapping({"store": {"root": config.root}, "cleaner": dict(config.cleaner)})  # validate
    _setup_logging()
    logging.getLogger().setLevel(config.log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    json_lines = output.wants_json(args)

    last: list[CycleResult] = []

    def show(cycle: CycleResult) -> None:
        last[:] = [cycle]
        if json_lines:
            output.emit(cycle_json(cycle))
        else:
            print(cycle.summary())
        sys.stdout.flush()

    run_job(config, on_cycle=show)
    if last and last[0].failures:
        # The cycle went on with the other partitions; a scheduler still has to see that one needs a human.
        failed = "; ".join(f"{f.topic}-{f.partition} ({f.error_type}: {f.message[:1500]})" for f in last[0].failures)
        print(f"deltalog: error: the last cycle marked {len(last[0].failures)} partition(s) uncleanable: {failed}. "
              "The other partitions were cleaned; repair the failed ones, then clear their marks with "
              "'deltalog cleaner reset-uncleanable TOPIC PARTITION'", file=sys.stderr)
        return 1
    return 0


def reset_uncleanable(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    if args.topic is not None:
        store.partitions(args.topic)  # raises for an unknown topic
    cleared = UncleanablePartitions(store.storage).reset(args.topic, args.partition)
    if output.wants_json(args):
        for m in cleared:
            output.emit(dataclasses.asdict(m))
        return 0
    for m in cleared:
        print(f"cleared {m.topic}-{m.partition} (marked uncleanable after {m.error_type}: {m.message[:120]})")
    if not cleared:
        print("no uncleanable partitions matched")
    return 0


def retention(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    with Steps("retention", before="listing partitions") as steps:
        results = store.delete_old_segments(args.topic, progress=steps)
    if output.wants_json(args):
        for r in results:
            output.emit(dataclasses.asdict(r))
        return 0
    for r in results:
        if r.segments_deleted:
            print(f"{r.topic}-{r.partition}: deleted {r.segments_deleted} segment(s), {r.bytes_deleted:,} bytes, "
                  f"{r.records_deleted:,} records; log start offset {r.log_start_offset_before} -> {r.log_start_offset}")
    if not any(r.segments_deleted for r in results):
        print("nothing to delete")
    return 0


def vacuum(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    with Steps("vacuum", before="listing partitions") as steps:
        results = store.vacuum(args.topic, dry_run=not args.apply, progress=steps)
        if args.topic is None:  # the whole store: its staging directory of format("deltalog") writes too
            steps.bar.set_postfix_str("staged and temporary files")
            results.append(store.vacuum_staged(dry_run=not args.apply))
            results.append(store.vacuum_temp_files(dry_run=not args.apply))
    if output.wants_json(args):
        for r in results:
            output.emit(dataclasses.asdict(r))
        return 0
    verb = "removed" if args.apply else "would remove"
    for r in results:
        if r.files or r.files_waiting:
            if r.partition == STORE_LEVEL and r.topic == TEMP_FILES:
                print(f"{r.topic}: {verb} {len(r.files)} temporary file(s) of killed writes, {r.bytes:,} bytes; "
                      f"{r.files_waiting} file(s) younger than {TEMP_MAX_AGE_MS // 3_600_000} h")
                continue
            if r.partition == STORE_LEVEL:
                print(f"{r.topic}: {verb} {len(r.files)} staged file(s) of unfinished writes, {r.bytes:,} bytes; "
                      f"{r.files_waiting} file(s) younger than {STAGED_MAX_AGE_MS // 3_600_000} h")
                continue
            print(f"{r.topic}-{r.partition}: {verb} {len(r.files)} file(s), {r.bytes:,} bytes; "
                  f"{r.files_waiting} file(s) still within file.delete.delay.ms")
    if not args.apply:
        print("(dry run: pass --apply to remove them)")
    return 0


def delete_records(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    r = store.delete_records(args.topic, args.partition, args.offset)
    if output.wants_json(args):
        output.emit(dataclasses.asdict(r))
        return 0
    print(f"{r.topic}-{r.partition}: log start offset (low watermark) is now {r.low_watermark}; "
          f"{r.files_deleted} file(s), {r.records_deleted:,} records removed")
    return 0


def status(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    metrics = collect(store.log_manager, state_lag=store.state_lag_of if args.prometheus else None)
    if args.prometheus:
        from deltalog import extras
        from deltalog.cleaner.prometheus import CleanerExporter

        extras.require("metrics", "deltalog status --prometheus")
        exporter = CleanerExporter()
        exporter.update(metrics)
        sys.stdout.write(exporter.text())
        return 0
    lags = [store.state_lag(t) for t in store.state_table_topics()]
    if output.wants_json(args):
        output.emit({**metrics.as_dict(), "state_tables": [lag.as_dict() for lag in lags]})
    else:
        print(format_table(metrics))
        if lags:
            print(text_table(["STATE TABLE", "VERSION", "OFFSETS BEHIND", "MS BEHIND (AT MOST)"],
                             [[lag.topic, "-" if lag.table_version is None else lag.table_version,
                               lag.offsets_behind, lag.time_behind_ms] for lag in lags]))
    return 0
