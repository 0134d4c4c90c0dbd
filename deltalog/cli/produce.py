"""``deltalog produce TOPIC [-p N] [--file F]``: append records read as JSON lines or as Kafka's console lines.

Input is JSON lines (see :mod:`.jsonlines`) by default, or, with ``--input text`` or any of Kafka's line-reader
properties (``--property parse.key=true --property key.separator=:``), lines as ``kafka-console-producer`` reads
them (:class:`~deltalog.cli.kafka_text.LineMessageReader`). Each record goes to the partition Kafka's producer
would pick (:meth:`Store.produce <deltalog.store.Store.produce>`): ``-p N`` for all of them, else a JSON line's
``partition``, else murmur2 of its key, else (no key) the sticky partitioner.

The input is read as a stream, as ``kafka-console-producer`` reads it: every ``--batch-size`` records are
validated against the topic's configs and produced (one Delta commit per partition the batch touches), so memory
stays flat however long the input (a file of 10 million lines, or a pipe that never ends). A bad record stops the
command with an error naming its input line: the batches before it have been produced (the error says how many
records), its own batch writes nothing. (Kafka's console producer sends each line as it reads it; a batch here
is what one commit holds.)
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

import deltalog.cli.common as common
from deltalog.cli import console, output, progress
from deltalog.cli.jsonlines import entries_from_lines, json_fields_of
from deltalog.cli.kafka_text import READER_DEFAULTS, LineMessageReader
from deltalog.errors import InvalidRecordError, UnknownTopicOrPartitionError
from deltalog.log import arrow_records
from deltalog.log.partition_log import validate_records
from deltalog.log.record import Record
from deltalog.producer.router import PARTITION, ProduceResult
from deltalog.store import Store

DEFAULT_BATCH_SIZE = 10_000
JSON_INPUT = "json"
TEXT_INPUT = "text"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "produce", help="append records given as JSON lines or as Kafka's console lines",
        description='Append records read from standard input (or --file). JSON lines by default, e.g. '
        '{"key": "grape", "value": "2.69"}; "value": null is a tombstone; "key_b64"/"value_b64" carry binary data; '
        'optional "headers" (an object or [[name, value], ...]), "timestamp_ms" and "partition". On a topic with '
        'value.encoding=json (key.encoding=json) the value (key) may be a JSON object, checked against value.schema '
        '(key.schema): {"key": "7", "value": {"id": 7, "status": "paid"}}. With --input text, '
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


def produce(args: argparse.Namespace) -> int:
    topic = console.topic_of(args)
    if args.batch_size < 1:
        raise common.UsageError(f"--batch-size must be >= 1, not {args.batch_size}")
    text = _text_input(args)
    store = common.open_store(args)
    # Fail on an unknown topic or partition before reading the input.
    count = len(store.partitions(topic))
    json_fields = json_fields_of(store.topic_config(topic))  # a json key or value may be given as JSON (jsonlines)
    if args.partition is not None:
        store.log(topic, args.partition)
    if args.file is not None and (not args.file.strip() or "\x00" in args.file):
        raise common.UsageError(f"--file {args.file!r} is not a file name; give the path of a file of records, or "
                                "leave --file out to read standard input")
    source = args.file or "stdin"
    report = _Report(args, topic)
    try:
        if args.file is not None:
            # a bar over the file's bytes, advanced batch by batch from the binary file's position
            with open(args.file, "rb") as raw, progress.counter(
                    f"producing to {topic}", unit="B", total=_size(raw)) as bar:
                f = io.TextIOWrapper(raw, encoding="utf-8")
                _stream(store, topic, _entries(f, source, text, args, count, json_fields), source, text, args, report,
                        tick=lambda _n: bar.update(max(0, raw.tell() - bar.n)))
        else:
            # a counter of records, when the input is piped in (not while someone types it)
            with progress.counter(f"producing to {topic}", unit=" records",
                                  show=False if progress.is_terminal(sys.stdin) else None) as bar:
                _stream(store, topic, _entries(sys.stdin, source, text, args, count, json_fields), source, text,
                        args, report, tick=bar.update)
    except UnicodeDecodeError as e:
        raise report.partial(InvalidRecordError(
            f"{source} is not UTF-8 text ({e.reason} at byte {e.start} of a read); records are JSON lines (binary "
            "keys and values as key_b64 / value_b64) or Kafka console lines")) from None
    except InvalidRecordError as e:
        raise report.partial(e) from None
    report.finish()
    return 0


def _stream(store: Store, topic: str, entries: Iterator[tuple[int, Record, int | None]], source: str, text: bool,
            args: argparse.Namespace, report: _Report, tick: Callable[[int], object] = lambda _n: None) -> None:
    """Validate and produce the input ``--batch-size`` records at a time; ``tick(n)`` after each batch of ``n``."""
    config = store.topic_config(topic)
    while True:
        batch = list(itertools.islice(entries, args.batch_size))
        if not batch:
            return
        lines = [b[0] for b in batch]
        records = [b[1] for b in batch]
        partitions = [b[2] for b in batch]
        try:
            validate_records(records, config, topic, store.clock.now_ms())
        except InvalidRecordError as e:
            error = _at_line(e, source, lines)
            if text and "has no key" in str(error) and not LineMessageReader(args.properties).parse_key:
                error = type(error)(f"{error} (each input line is a value with no key unless --property "
                                    "parse.key=true splits KEY<separator>VALUE)", index=error.index)
            raise error from None
        if args.partition is None and any(p is not None for p in partitions):
            table = arrow_records.from_records(records).append_column(PARTITION, pa.array(partitions, pa.int32()))
            result = store.produce(topic, table)
        else:
            result = store.produce(topic, records, partition=args.partition)
        report.add(result, lines)
        tick(len(records))


class _Report:
    """What was produced, kept as offset ranges per partition (so memory does not grow with the input), and the
    JSON lines emitted batch by batch."""

    def __init__(self, args: argparse.Namespace, topic: str) -> None:
        self.args, self.topic = args, topic
        self.ranges: dict[int, list[list[int]]] = {}
        self.count = 0

    def add(self, result: ProduceResult, lines: list[int]) -> None:
        if output.wants_json(self.args):
            for meta, line in zip(result, lines, strict=True):
                output.emit({"topic": meta.topic, "partition": meta.partition, "offset": meta.offset,
                             "timestamp_ms": meta.timestamp_ms, "line": line})
            sys.stdout.flush()
        for p, offsets in result.offsets_by_partition().items():
            ranges = self.ranges.setdefault(p, [])
            for o in offsets:
                if ranges and ranges[-1][1] == o - 1:
                    ranges[-1][1] = o
                else:
                    ranges.append([o, o])
        self.count += len(result)

    def partial(self, error: InvalidRecordError) -> InvalidRecordError:
        """The error, saying what was produced before it (those batches are committed)."""
        if not self.count:
            return type(error)(f"{error}; nothing was produced", index=error.index)
        return type(error)(f"{error}; the {self.count} record(s) before its batch were produced "
                           f"({self._where()})", index=error.index)

    def _where(self) -> str:
        return ", ".join(f"partition {p} at offsets {_ranges_text(r)}" for p, r in sorted(self.ranges.items()))

    def finish(self) -> None:
        if output.wants_json(self.args):
            return
        if not self.count:
            print("No records in the input; nothing produced")
        elif len(self.ranges) == 1:
            (p, ranges), = self.ranges.items()
            print(f"Produced {self.count} record(s) to {self.topic}-{p} at offsets {_ranges_text(ranges)}")
        else:
            each = ", ".join(f"{sum(b - a + 1 for a, b in r)} to partition {p} at offsets {_ranges_text(r)}"
                             for p, r in sorted(self.ranges.items()))
            print(f"Produced {self.count} record(s) to {self.topic}: {each}")


def _size(f: io.BufferedReader) -> int | None:
    """The size of a regular file (a bar's total); None for a pipe or a device (``--file /dev/stdin``)."""
    st = os.fstat(f.fileno())
    return st.st_size if os.path.isfile(f.name) and st.st_size > 0 else None


def _ranges_text(ranges: list[list[int]]) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


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


def _entries(stream: Iterable[str], source: str, text: bool, args: argparse.Namespace, count: int,
             json_fields: frozenset[str] = frozenset()) -> Iterator[tuple[int, Record, int | None]]:
    """Each record of the input, as it is read, with its line number and its own partition (JSON's
    ``partition``, if any)."""
    if text:
        for read in LineMessageReader(args.properties).read(stream, source):
            yield read.line, read.record, None
        return
    for line, record, partition in entries_from_lines(stream, source, json_fields):
        if partition is not None and args.partition is None and partition >= count:
            raise UnknownTopicOrPartitionError(
                f"{source} line {line}: partition {partition} of topic {console.topic_of(args)!r} does not exist; "
                f"partitions are 0..{count - 1} (drop the line's \"partition\" to let the partitioner choose, or "
                "give -p N)")
        yield line, record, partition


def _at_line(error: InvalidRecordError, source: str, lines: list[int]) -> InvalidRecordError:
    """The error with ``record <i>`` (the i-th record of the input) replaced by the input line it came from."""
    text = str(error)
    prefix = f"record {error.index}"
    if error.index is None or not text.startswith(prefix) or error.index >= len(lines):
        return error
    return type(error)(f"{source} line {lines[error.index]}{text[len(prefix):]}", index=error.index)
