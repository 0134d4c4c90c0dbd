"""``deltalog produce TOPIC [-p N] [--file F]``: append records read as JSON lines or as Kafka's console lines.

Input is JSON lines (see :mod:`.jsonlines`) by default, or, with ``--input text`` or any of Kafka's line-reader
properties (``--property parse.key=true --property key.separator=:``), lines as ``kafka-console-producer`` reads
them (:class:`~deltalog.cli.kafka_text.LineMessageReader`). Each record goes to the partition Kafka's producer
would pick (:meth:`Store.produce <deltalog.store.Store.produce>`): ``-p N`` for all of them, else a JSON line's
``partition``, else murmur2 of its key, else (no key) the sticky partitioner.

The whole input is parsed and every record validated against the topic's configs before the first append, so
bad input writes nothing, and an error names the input line. The records are then produced in batches of
``--batch-size``; each batch is one Delta commit per partition it touches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

import pyarrow as pa

import deltalog.cli.common as common
from deltalog.cli import console, output
from deltalog.cli.jsonlines import entries_from_lines
from deltalog.cli.kafka_text import READER_DEFAULTS, LineMessageReader
from deltalog.errors import InvalidRecordError, UnknownTopicOrPartitionError
from deltalog.log import arrow_records
from deltalog.log.partition_log import validate_records
from deltalog.log.record import Record
from deltalog.producer.producer import PARTITION, ProduceResult

DEFAULT_BATCH_SIZE = 10_000
JSON_INPUT = "json"
TEXT_INPUT = "text"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "produce", help="append records given as JSON lines or as Kafka's console lines",
        description='Append records read from standard input (or --file). JSON lines by default, e.g. '
        '{"key": "grape", "value": "2.69"}; "value": null is a tombstone; "key_b64"/"value_b64" carry binary data; '
        'optional "headers" (an object or [[name, value], ...]), "timestamp_ms" and "partition". With --input text, '
        "or any --property, lines as kafka-console-producer reads them: a value per line, or KEY<TAB>VALUE with "
        "--property parse.key=true (--property key.separator=: for KEY:VALUE). Each record goes to the partition "
        "Kafka's producer would pick: -p N, else murmur2 of its key modulo the partition count, else (no key) a "
        "partition that changes every 16 KiB (Kafka's sticky partitioner). Prints where the records went.",
    )
    console.add_topic_arguments(p)
    p.add_argument("-p", "--partition", type=int, default=None, metavar="N",
                   help="send every record to partition N (default: Kafka's partitioner chooses)")
    p.add_argument("-f", "--file", metavar="FILE", help="read records from FILE (default: standard input)")
    p.add_argument("--input", choices=(JSON_INPUT, TEXT_INPUT), default=None,
                   help="'json': JSON lines (the default); 'text': Kafka's console lines (the default with any "
                   "--property)")
    console.add_property_option(p, "a line-reader property of kafka-console-producer (repeatable): "
                                + ", ".join(READER_DEFAULTS))
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"records per produce call, i.e. per Delta commit on each partition (default {DEFAULT_BATCH_SIZE})")
    output.add_output_option(p, text="a summary line", json_help="one object per record, in input order: topic, "
                             "partition, offset, timestamp_ms and the input line")
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
    topic = console.topic_of(args)
    if args.batch_size < 1:
        raise common.UsageError(f"--batch-size must be >= 1, not {args.batch_size}")
    text = _text_input(args)
    store = common.open_store(args)
    # Fail on an unknown topic or partition before reading the input.
    count = len(store.partitions(topic))
    if args.partition is not None:
        store.log(topic, args.partition)
    if args.file is not None and (not args.file.strip() or "\x00" in args.file):
        raise common.UsageError(f"--file {args.file!r} is not a file name; give the path of a file of records, or "
                                "leave --file out to read standard input")
    source = args.file or "stdin"
    try:
        if args.file is not None:
            with open(args.file, encoding="utf-8") as f:
                lines, records, partitions = _read(f, source, text, args, count)
        else:
            lines, records, partitions = _read(sys.stdin, source, text, args, count)
    except UnicodeDecodeError as e:
        raise InvalidRecordError(f"{source} is not UTF-8 text ({e.reason} at byte {e.start} of a read); records "
                                 "are JSON lines (binary keys and values as key_b64 / value_b64) or Kafka "
                                 "console lines") from None

    try:
        validate_records(records, store.topic_config(topic), topic)
    except InvalidRecordError as e:
        error = _at_line(e, source, lines)
        if text and "has no key" in str(error) and not LineMessageReader(args.properties).parse_key:
            error = type(error)(f"{error} (each input line is a value with no key unless --property "
                                "parse.key=true splits KEY<separator>VALUE)", index=error.index)
        raise error from None
    results: list[ProduceResult] = []
    for i in range(0, len(records), args.batch_size):
        chunk = slice(i, i + args.batch_size)
        if args.partition is None and any(p is not None for p in partitions[chunk]):
            table = arrow_records.from_records(records[chunk]).append_column(
                PARTITION, pa.array(partitions[chunk], pa.int32()))
            results.append(store.produce(topic, table))
        else:
            results.append(store.produce(topic, records[chunk], partition=args.partition))
    _report(args, topic, results, lines)
    return 0


def _text_input(args: argparse.Namespace) -> bool:
    if args.input == JSON_INPUT and args.properties:
        raise common.UsageError("--property sets how Kafka's console lines are read; it does not apply to "
                                "--input json (JSON lines name their fields)")
    text = args.input == TEXT_INPUT or bool(args.properties)
    given = dict(args.properties)
    if text and "key.separator" in given and given.get("parse.key", "").strip().lower() != "true":
        print("deltalog: warning: key.separator is set but parse.key is not true, so each line is a value with "
              "no key (as in Kafka); add --property parse.key=true to split KEY<separator>VALUE", file=sys.stderr)
    return text


def _read(stream: Iterable[str], source: str, text: bool, args: argparse.Namespace, count: int
          ) -> tuple[list[int], list[Record], list[int | None]]:
    """Every record of the input with its line number and its own partition (JSON's ``partition``, if any)."""
    lines: list[int] = []
    records: list[Record] = []
    partitions: list[int | None] = []
    if text:
        for read in LineMessageReader(args.properties).read(stream, source):
            lines.append(read.line)
            records.append(read.record)
            partitions.append(None)
        return lines, records, partitions
    for line, record, partition in entries_from_lines(stream, source):
        if partition is not None and args.partition is None and partition >= count:
            raise UnknownTopicOrPartitionError(
                f"{source} line {line}: partition {partition} of topic {console.topic_of(args)!r} does not exist; "
                f"partitions are 0..{count - 1} (drop the line's \"partition\" to let the partitioner choose, or "
                "give -p N)")
        lines.append(line)
        records.append(record)
        partitions.append(partition)
    return lines, records, partitions


def _at_line(error: InvalidRecordError, source: str, lines: list[int]) -> InvalidRecordError:
    """The error with ``record <i>`` (the i-th record of the input) replaced by the input line it came from."""
    text = str(error)
    prefix = f"record {error.index}"
    if error.index is None or not text.startswith(prefix) or error.index >= len(lines):
        return error
    return type(error)(f"{source} line {lines[error.index]}{text[len(prefix):]}", index=error.index)


def _report(args: argparse.Namespace, topic: str, results: list[ProduceResult], lines: list[int]) -> None:
    if output.wants_json(args):
        i = 0
        for result in results:
            for meta in result:
                output.emit({"topic": meta.topic, "partition": meta.partition, "offset": meta.offset,
                             "timestamp_ms": meta.timestamp_ms, "line": lines[i]})
                i += 1
        return
    by_partition: dict[int, list[int]] = {}
    for result in results:
        for p, offsets in result.offsets_by_partition().items():
            by_partition.setdefault(p, []).extend(offsets)
    n = sum(len(o) for o in by_partition.values())
    if not n:
        print("No records in the input; nothing produced")
    elif len(by_partition) == 1:
        (p, offsets), = by_partition.items()
        print(f"Produced {n} record(s) to {topic}-{p} at offsets {offset_ranges(offsets)}")
    else:
        each = ", ".join(f"{len(o)} to partition {p} at offsets {offset_ranges(o)}" for p, o in sorted(by_partition.items()))
        print(f"Produced {n} record(s) to {topic}: {each}")
