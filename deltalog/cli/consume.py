"""``deltalog consume TOPIC -p N --from-offset N|earliest|latest``: print records as JSON lines.

Reads page by page (``--page-size`` records at a time) up to the log end as it was when each page was
read, so a large partition is never held in memory at once.
"""

from __future__ import annotations

import argparse
import json
import sys

import deltalog.cli.common as common
from deltalog.cli.jsonlines import record_to_json

PAGE_SIZE = 10_000


def _from_offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an offset, 'earliest' or 'latest', not {text!r}") from None


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return n


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "consume", help="print records from an offset as JSON lines",
        description="Print records as JSON lines (offset, key, value, headers, timestamp_ms, "
        "delete_horizon_ms). Text is shown as UTF-8; bytes that are not UTF-8 appear base64-encoded "
        "under key_b64 / value_b64 / {\"b64\": ...}. An offset that compaction removed reads on from "
        "the next record.",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-p", "--partition", type=int, default=0, metavar="N", help="partition (default 0)")
    p.add_argument("--from-offset", type=_from_offset, default="earliest", metavar="OFFSET",
                   help="an offset, 'earliest' (the log start, default) or 'latest' (the log end)")
    p.add_argument("--max-records", type=_non_negative, default=None, metavar="N", help="stop after N records")
    p.add_argument("--page-size", type=_non_negative, default=PAGE_SIZE, metavar="N", help=argparse.SUPPRESS)
    common.add_store_option(p)
    p.set_defaults(func=consume)


def consume(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    position: int | str = args.from_offset
    remaining = args.max_records
    page_size = max(args.page_size, 1)
    while remaining is None or remaining > 0:
        page = page_size if remaining is None else min(page_size, remaining)
        records = store.read(args.topic, args.partition, from_offset=position, max_records=page)
        for r in records:
            sys.stdout.write(json.dumps(record_to_json(r), ensure_ascii=False) + "\n")
        if len(records) < page:
            break
        position = records[-1].offset + 1  # type: ignore[operator]
        if remaining is not None:
            remaining -= len(records)
    sys.stdout.flush()
    return 0
