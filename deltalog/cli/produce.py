"""``deltalog produce TOPIC -p N [--file F]``: append records given as JSON lines (see :mod:`.jsonlines`).

The whole input is parsed and every record validated against the topic's configs before the first
append, so bad input writes nothing. The records are then appended in batches of ``--batch-size``;
each batch is one Delta commit with contiguous offsets.
"""

from __future__ import annotations

import argparse
import json
import sys

import deltalog.cli.common as common
from deltalog.cli.jsonlines import records_from_lines
from deltalog.errors import InvalidRecordError
from deltalog.log.partition_log import validate_records

DEFAULT_BATCH_SIZE = 10_000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "produce", help="append records given as JSON lines",
        description='Append records read as JSON lines, e.g. {"key": "grape", "value": "2.69"}; '
        '"value": null is a tombstone; "key_b64"/"value_b64" carry binary data; optional "headers" '
        '(an object or [[name, value], ...]) and "timestamp_ms". Prints the offsets assigned.',
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-p", "--partition", type=int, default=0, metavar="N", help="partition (default 0)")
    p.add_argument("-f", "--file", metavar="FILE", help="read JSON lines from FILE (default: standard input)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"records per append, i.e. per Delta commit (default {DEFAULT_BATCH_SIZE})")
    common.add_json_option(p)
    common.add_store_option(p)
    p.set_defaults(func=produce)


def offset_ranges(offsets: list[int]) -> str:
    """``[0, 1, 2, 5, 6]`` -> ``0-2, 5-6``."""
    parts: list[str] = []
    start = prev = None
    for o in offsets + [None]:  # type: ignore[list-item]
        if start is not None and o == prev + 1:  # type: ignore[operator]
            prev = o
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = o
    return ", ".join(parts)


def produce(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise common.UsageError(f"--batch-size must be >= 1, not {args.batch_size}")
    store = common.open_store(args)
    log = store.log(args.topic, args.partition)  # fail on an unknown topic/partition before reading input
    if args.file is not None and (not args.file.strip() or "\x00" in args.file):
        raise common.UsageError(f"--file {args.file!r} is not a file name; give the path of a file of JSON lines, or "
                                "leave --file out to read standard input")
    source = args.file or "stdin"
    try:
        if args.file is not None:
            with open(args.file, encoding="utf-8") as f:
                records = list(records_from_lines(f, args.file))
        else:
            records = list(records_from_lines(sys.stdin, "stdin"))
    except UnicodeDecodeError as e:
        raise InvalidRecordError(f"{source} is not UTF-8 text ({e.reason} at byte {e.start} of a read); records "
                                 "are JSON lines, with binary keys and values as key_b64 / value_b64") from None
    validate_records(records, log.head().config, args.topic)
    offsets: list[int] = []
    for i in range(0, len(records), args.batch_size):
        offsets.extend(store.append(args.topic, args.partition, records[i:i + args.batch_size]))
    if args.json:
        print(json.dumps({"topic": args.topic, "partition": args.partition, "offsets": offsets}))
    elif offsets:
        print(f"Produced {len(offsets)} record(s) to {args.topic}-{args.partition} at offsets {offset_ranges(offsets)}")
    else:
        print("No records in the input; nothing produced")
    return 0
