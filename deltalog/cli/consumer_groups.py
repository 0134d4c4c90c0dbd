"""``deltalog consumer-groups``: Kafka's ``kafka-consumer-groups.sh`` over the store's ``__consumer_offsets``.

Exactly one action, as Kafka's tool: ``--list``, ``--describe --group G`` (or ``--all-groups``), ``--reset-offsets
--group G --topic T[:P,P] | --all-topics`` with one of Kafka's scenarios (``--to-earliest``, ``--to-latest``,
``--to-current``, ``--to-offset N``, ``--shift-by N``, ``--to-datetime YYYY-MM-DDTHH:mm:SS.sss``, ``--by-duration
PnDTnHnMnS``, or ``--from-file PLAN.csv`` instead of a scope), a dry run unless ``--execute``, and ``--export`` to
print the plan as Kafka's CSV (``topic,partition,offset``, what ``--from-file`` reads back); ``--delete --group G``
and ``--delete-offsets --group G --topic T[:P,P]``. ``--describe`` prints
Kafka's columns, ``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID``; deltalog
groups have no members (:mod:`deltalog.groups.consumer`), so the last three are always ``-``, as Kafka prints them
for a group without active members.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timedelta, timezone

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.groups.admin import (
    TO_CURRENT,
    TO_EARLIEST,
    TO_LATEST,
    ShiftBy,
    ToTime,
    export_csv,
    parse_reset_csv,
    reset_plan,
)
from deltalog.store import Store
from deltalog.structs import TopicPartition
from deltalog.text import format_table

ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")
DESCRIBE_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                    "CLIENT-ID")


def _offset(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"--to-offset takes a whole number >= 0, not {text!r}")
    return n


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?")
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
                       re.IGNORECASE)


def _datetime(text: str) -> ToTime:
    """Kafka's ``--to-datetime`` (``Utils.getDateTime``): ``YYYY-MM-DDTHH:mm:SS.sss``, milliseconds required, then
    an optional zone (``Z``, ``+hh``, ``+hh:mm``, ``+hhmm``); no zone is UTC, as Kafka appends ``Z``. Any other ISO
    8601 date or time ``consume --as-of`` takes is taken too (``2024-01-31``, ``2024-01-31T09:30Z``), so one form of a
    date works in both commands (:func:`deltalog.log.time_travel.parse_timestamp`)."""
    m = _DATETIME.fullmatch(text.strip())
    refusal = argparse.ArgumentTypeError(
        f"--to-datetime takes YYYY-MM-DDTHH:mm:SS.sss with an optional zone (Z, +hh:mm), e.g. "
        f"2024-01-31T09:30:00.000 (UTC) or 2024-01-31T09:30:00.000+01:00, or any ISO 8601 date or time as "
        f"--as-of (2024-01-31, 2024-01-31T09:30Z), not {text!r}")
    if m is None:
        from deltalog.errors import InvalidArgumentError
        from deltalog.log.time_travel import parse_timestamp

        try:
            return ToTime(parse_timestamp(text.strip()))
        except InvalidArgumentError:
            raise refusal from None
    try:
        y, mo, d, h, mi, sec, ms, zone = m.groups()
        tz = timezone.utc
        if zone and zone != "Z":
            digits = zone[1:].replace(":", "")
            offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
            tz = timezone(-offset if zone[0] == "-" else offset)
        when = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), int(ms) * 1000, tzinfo=tz)
    except ValueError:  # a day or an hour out of range
        raise refusal from None
    return ToTime(int(when.timestamp() * 1000))


def _duration(text: str) -> timedelta:
    """Kafka's ``--by-duration`` (Java's ``Duration.parse``): ISO-8601 ``PnDTnHnMnS``, e.g. ``PT1H``, ``P1DT12H``.

    Hand-written rather than read by an ISO-8601 library (isodate): Java's rules are not ISO-8601's in full, and
    Kafka's users write Java's. ``Duration.parse`` takes a sign on each part (``PT-1H``, ``P1DT-2H``) and any case
    (``pt1h``), and refuses weeks, months, years and a bare ``PT``; isodate refuses the first two and reads the
    others (``P2W`` as 14 days, ``P1M`` as a calendar month, ``PT`` as zero)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.groups()[1:]) or text.strip().upper().endswith("T"):
        raise argparse.ArgumentTypeError(f"--by-duration takes an ISO-8601 duration PnDTnHnMnS, e.g. PT1H (an hour) "
                                         f"or P1DT12H, not {text!r}")
    sign, days, hours, minutes, seconds, fraction = m.groups()
    d = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0), seconds=int(seconds or 0),
                  microseconds=int((fraction or "0").ljust(6, "0")[:6]) * (-1 if (seconds or "").startswith("-") else 1))
    return -d if sign == "-" else d


def _shift(text: str) -> ShiftBy:
    try:
        return ShiftBy(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shift-by takes a whole number of offsets (negative: back), not "
                                         f"{text!r}") from None


def _topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """Kafka's ``--topic T`` or ``--topic T:0,2`` (some partitions)."""
    topic, sep, parts = text.partition(":")
    if not sep:
        return topic, None
    try:
        partitions = [int(p) for p in parts.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:PARTITION[,PARTITION...], not {text!r}") from None
    if not partitions or min(partitions) < 0:
        raise argparse.ArgumentTypeError(f"partitions are whole numbers >= 0: {text!r}")
    return topic, partitions


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "consumer-groups", help="list, describe, reset and delete consumer groups (kafka-consumer-groups)",
        description="Consumer groups' committed offsets, kept in the store's internal compacted topic "
        "__consumer_offsets. Give exactly one action.")
    actions = p.add_mutually_exclusive_group()
    actions.add_argument("--list", dest="action", action="store_const", const="list", help="the group ids")
    actions.add_argument("--describe", dest="action", action="store_const", const="describe",
                         help="per committed partition: offset, log end offset and lag (--group G or --all-groups)")
    actions.add_argument("--reset-offsets", dest="action", action="store_const", const="reset_offsets",
                         help="set the group's offsets (--topic or --all-topics, and one of --to-earliest, --to-latest, "
                         "--to-current, --to-offset, --shift-by, --to-datetime, --by-duration; or --from-file); a "
                         "dry run unless --execute")
    actions.add_argument("--delete", dest="action", action="store_const", const="delete",
                         help="remove every committed offset of the group")
    actions.add_argument("--delete-offsets", dest="action", action="store_const", const="delete_offsets",
                         help="remove the group's committed offsets of --topic T[:P,...]")
    p.add_argument("--group", metavar="GROUP", help="the consumer group")
    p.add_argument("--all-groups", action="store_true", help="with --describe: every group")
    p.add_argument("--topic", dest="topics", metavar="TOPIC[:P,P]", type=_topic_partitions, action="append",
                   default=[], help="with --reset-offsets / --delete-offsets: a topic, or some of its partitions "
                   "(repeatable)")
    p.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every partition of every topic the group has offsets for")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", dest="to", action="store_const", const=TO_EARLIEST, help="reset to the log start")
    to.add_argument("--to-latest", dest="to", action="store_const", const=TO_LATEST, help="reset to the log end")
    to.add_argument("--to-offset", dest="to", type=_offset, metavar="N",
                    help="reset to offset N (clamped into [log start, log end], as Kafka's tool does)")
    to.add_argument("--to-current", dest="to", action="store_const", const=TO_CURRENT,
                    help="reset to the committed offsets (the log end where there is none)")
    to.add_argument("--shift-by", dest="to", type=_shift, metavar="N",
                    help="move the committed offsets by N (negative: back), clamped into [log start, log end]")
    to.add_argument("--to-datetime", dest="to", type=_datetime, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="reset to the earliest offset whose timestamp is at or after this time (UTC unless a zone "
                    "follows, e.g. +01:00); the log end where there is none")
    to.add_argument("--by-duration", dest="to", type=_duration, metavar="PnDTnHnMnS",
                    help="reset to the earliest offset whose timestamp is at or after now minus this ISO-8601 "
                    "duration (e.g. PT1H: an hour ago)")
    to.add_argument("--from-file", dest="from_file", metavar="PLAN.csv",
                    help="reset to the offsets of a CSV of topic,partition,offset lines (what --export prints; "
                    "group,topic,partition,offset lines too); no --topic/--all-topics")
    p.add_argument("--export", action="store_true",
                   help="with --reset-offsets: print the plan as Kafka's CSV (topic,partition,offset) instead of a "
                   "table, for --from-file")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="with --reset-offsets: commit the new offsets")
    run.add_argument("--dry-run", action="store_true", help="with --reset-offsets: only show them (the default)")
    output.add_output_option(p, text="Kafka's tables", json_help="one object per group or partition")
    common.add_store_option(p)
    p.set_defaults(func=consumer_groups)


def consumer_groups(args: argparse.Namespace) -> int:
    if args.action is None:
        raise common.UsageError("Command must include exactly one action: --list, --describe, --delete, "
                                "--reset-offsets, --delete-offsets")
    if args.action != "describe" and args.all_groups:
        raise common.UsageError("--all-groups goes with --describe")
    if args.action in ("delete", "reset_offsets", "delete_offsets") or \
            (args.action == "describe" and not args.all_groups):
        if args.group is None:
            raise common.UsageError(f"--{args.action.replace('_', '-')} needs --group GROUP")
    if args.action not in ("reset_offsets", "delete_offsets") and (args.topics or args.all_topics):
        raise common.UsageError("--topic and --all-topics go with --reset-offsets (or --delete-offsets)")
    if args.action != "reset_offsets" and (args.to is not None or args.from_file is not None or args.execute
                                           or args.dry_run or args.export):
        raise common.UsageError("--to-earliest, --to-latest, --to-current, --to-offset, --shift-by, --to-datetime, "
                                "--by-duration, --from-file, --execute, --dry-run and --export go with "
                                "--reset-offsets")
    store = common.open_store(args)
    return int(globals()[f"_{args.action}"](store, args) or 0)


def _list(store: Store, args: argparse.Namespace) -> None:
    for g in store.list_consumer_groups():
        output.emit({"group": g}) if output.wants_json(args) else print(g)


def _describe(store: Store, args: argparse.Namespace) -> None:
    groups = store.list_consumer_groups() if args.all_groups else [args.group]
    for g in groups:
        rows = store.describe_consumer_group(g)
        if output.wants_json(args):
            for r in rows:
                output.emit(r.to_json())
            continue
        print(f"\nConsumer group '{g}' has no active members.", file=sys.stderr)
        print()
        print(format_table(DESCRIBE_COLUMNS, [(r.group, r.topic, r.partition, r.current_offset, r.log_end_offset,
                                               r.lag, None, None, None) for r in rows], rule=False))
        for r in (r for r in rows if r.stale):
            print(f"STALE: {r.topic}-{r.partition}: offset {r.current_offset} was committed on the topic with id "
                  f"{r.topic_id}, which was deleted; {r.topic} is another topic now (reset it: --reset-offsets "
                  f"--group {g} --topic {r.topic} --to-earliest --execute)", file=sys.stderr)


def _selected(store: Store, args: argparse.Namespace) -> list[TopicPartition]:
    if bool(args.topics) == bool(args.all_topics):
        raise common.UsageError("give the partitions as --topic TOPIC[:P,P] (repeatable) or --all-topics")
    if args.all_topics:
        topics = sorted({tp.topic for tp in store.list_consumer_group_offsets(args.group)})
        return [TopicPartition(t, p) for t in topics if store.topic_exists(t) for p in store.partitions(t)]
    out = []
    for topic, partitions in args.topics:
        existing = store.partitions(topic)  # raises for a topic that does not exist
        for p in partitions if partitions is not None else existing:
            store.log(topic, p)  # raises for a partition that does not exist
            out.append(TopicPartition(topic, p))
    return out


def _reset_offsets(store: Store, args: argparse.Namespace) -> None:
    to = args.to
    if to is None and args.from_file is None:
        raise common.UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset N, "
                                "--shift-by N, --to-datetime T, --by-duration D, --from-file PLAN.csv")
    if args.from_file is not None:
        if args.topics or args.all_topics:
            raise common.UsageError("--from-file names its partitions: leave out --topic and --all-topics")
        try:
            with open(args.from_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise common.UsageError(f"--from-file {args.from_file}: {e.strerror or e}") from None
        to = parse_reset_csv(text, args.group, args.from_file)
        if not to:
            print(f"Error: No reset plan for group {args.group} found", file=sys.stderr)
        partitions: list[TopicPartition] = []
    else:
        partitions = _selected(store, args)
    if isinstance(to, timedelta):  # --by-duration: from now, by the store's clock
        to = ToTime(max(0, store.clock.now_ms() - int(to / timedelta(milliseconds=1))))
    plan = reset_plan(store.log_manager, store.offsets_topic, args.group, partitions, to,
                      warn=lambda m: print(f"WARN: {m}", file=sys.stderr))
    if args.execute:
        store.alter_consumer_group_offsets(args.group, plan)
    else:
        print("WARN: No action will be performed as the --execute option is missing; these are the offsets "
              "--execute would commit.", file=sys.stderr)
    if args.export:
        print(export_csv(plan))
        return
    if output.wants_json(args):
        for tp, om in plan.items():
            output.emit({"group": args.group, "topic": tp.topic, "partition": tp.partition, "new_offset": om.offset,
                         "executed": bool(args.execute)})
        return
    print()
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                       [(args.group, tp.topic, tp.partition, om.offset) for tp, om in plan.items()], rule=False))


def _delete(store: Store, args: argparse.Namespace) -> None:
    had = store.list_consumer_group_offsets(args.group)  # raises GroupIdNotFoundError for an unknown group
    store.delete_consumer_groups([args.group])
    if output.wants_json(args):
        output.emit({"group": args.group, "deleted": True, "partitions": len(had)})
    else:
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.")


def _delete_offsets(store: Store, args: argparse.Namespace) -> None:
    if args.all_topics or not args.topics:
        raise common.UsageError("--delete-offsets needs --topic TOPIC[:P,P] (repeatable)")
    partitions = _selected(store, args)
    gone = set(store.delete_consumer_group_offsets(args.group, partitions))
    rows = [(tp.topic, tp.partition, "Successful" if tp in gone else "No committed offset") for tp in partitions]
    if output.wants_json(args):
        for topic, partition, status in rows:
            output.emit({"group": args.group, "topic": topic, "partition": partition, "deleted": status == "Successful"})
        return
    print(format_table(("TOPIC", "PARTITION", "STATUS"), rows, rule=False))
