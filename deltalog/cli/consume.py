"""``deltalog consume TOPIC``: print a topic's records, as ``kafka-console-consumer`` does.

Every partition is read (or one, ``-p N``), a page at a time from each in turn, from the log start (the
default; ``--from-beginning`` says so explicitly) or from ``--offset latest|N``, up to each partition's log
end as it was when the command started; with ``--follow`` it keeps polling for new records until
interrupted (Ctrl-C: exit 130, as Kafka's tool), ``--max-messages`` have been printed, or nothing arrived for
``--timeout-ms``. Unlike Kafka's tool, which starts at the end of the log unless ``--from-beginning``, it
starts at the log start.

With ``--group G`` it reads as a member of consumer group G: each partition starts at the group's committed
offset (partitions without one, or with one no longer in the log, start where ``--offset earliest|latest`` says,
the log start by default), and what was printed is committed when the command ends (also on Ctrl-C), and every
``auto.commit.interval.ms`` (5 s) while ``--follow`` runs: Kafka's console consumer with auto commit. The next
``consume --group G`` prints what came after. As Kafka's tool, ``--group`` does not go with ``--partition``.

Records print as JSON lines (``--output json``, the default, which ``deltalog produce`` reads back) or as
Kafka's ``DefaultMessageFormatter`` prints them (``--output text``, the default with any ``--property``:
``print.key=true``, ``print.offset``, ``print.partition``, ``print.timestamp``, ``key.separator``, ...). As
Kafka's tool, it says ``Processed a total of N messages`` on stderr at the end.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable

import deltalog.cli.common as common
from deltalog.cli import console, offsets_formatter, output, progress
from deltalog.cli.jsonlines import json_fields_of, record_to_json
from deltalog.cli.kafka_text import FORMATTER_DEFAULTS, MessageFormatter
from deltalog.coordinator.group.offsets_topic import validate_group_id
from deltalog.errors import OffsetOutOfRangeError
from deltalog.log import time_travel
from deltalog.log.fetch import ISOLATION_LEVELS, end_offset, fetch
from deltalog.log.partition_log import LogSnapshot
from deltalog.log.record import Record, table_to_records
from deltalog.log.transactions import READ_UNCOMMITTED
from deltalog.store import Store
from deltalog.structs import OffsetAndMetadata, TopicPartition

PAGE_SIZE = 10_000
DEFAULT_POLL_INTERVAL_MS = 500
#: Kafka's ``auto.commit.interval.ms``: how often ``--group --follow`` commits what it printed.
AUTO_COMMIT_INTERVAL_MS = 5_000


def _offset(text: str) -> int | str:
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(
            f"The provided offset value {text!r} is incorrect. Valid values are 'earliest', 'latest', or a "
            "non-negative long.")
    return n


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "consume", help="print a topic's records (all partitions, or one), optionally following new ones",
        description="Print the records of every partition of TOPIC (or of -p N), from the log start to the log end, "
        "as JSON lines (offset, key, value, headers, timestamp_ms, ...; bytes that are not UTF-8 as key_b64 / "
        "value_b64 / {\"b64\": ...}) or, with --output text or any --property, as kafka-console-consumer prints "
        "them. --follow keeps printing new records until Ctrl-C. An offset that compaction removed reads on from "
        "the next record.",
    )
    console.add_topic_arguments(p)
    p.add_argument("-p", "--partition", type=int, default=None, metavar="N",
                   help="read only partition N (default: every partition)")
    p.add_argument("--offset", "--from-offset", dest="offset", type=_offset, default=None, metavar="OFFSET",
                   help="where to start: 'earliest' (the log start, the default), 'latest' (the log end) or an offset "
                   "(with -p, or on a topic of one partition)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start (the default here; with --group: for partitions the group has no "
                   "committed offset for)")
    p.add_argument("--group", metavar="GROUP", default=None,
                   help="read as consumer group GROUP: resume at its committed offsets, and commit what was printed")
    p.add_argument("--max-messages", "--max-records", dest="max_messages", type=common.whole_number(0), default=None,
                   metavar="N", help="stop after N records")
    p.add_argument("--follow", action="store_true",
                   help="keep polling for new records until interrupted (Ctrl-C), --max-messages or --timeout-ms")
    p.add_argument("--timeout-ms", type=common.whole_number(0), default=None, metavar="MS",
                   help="with --follow: exit when no record arrived for MS milliseconds")
    p.add_argument("--poll-interval-ms", type=common.whole_number(0), default=DEFAULT_POLL_INTERVAL_MS, metavar="MS",
                   help=f"with --follow: how often to look for new records (default {DEFAULT_POLL_INTERVAL_MS})")
    p.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default=READ_UNCOMMITTED,
                   help="read_uncommitted (the default, as kafka-console-consumer) reads every record to the log "
                   "end; read_committed stops at the last stable offset and skips aborted transactions' records")
    console.add_property_option(p, "a kafka-console-consumer formatter property (repeatable): "
                                + ", ".join(FORMATTER_DEFAULTS) + "; implies --output text")
    p.add_argument("--as-of", metavar="VERSION|TIMESTAMP", default=None,
                   help="read the topic as it was then (Delta time travel): a Delta version of one partition "
                   "table (with -p, or on a topic of one partition; see 'deltalog history'), or a time in ISO 8601 "
                   "such as 2026-11-25T08:00:00Z (no zone: UTC), each partition at its version of that time")
    p.add_argument("--formatter", choices=("default", "kafka.tools.DefaultMessageFormatter",
                                           "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
                                           *offsets_formatter.NAMES), default=None, metavar="FORMATTER",
                   help="'offsets' (Kafka's OffsetsMessageFormatter, also by its class names): read __consumer_offsets "
                   "as one JSON line per committed offset (group, topic, partition, offset, metadata, commit "
                   "time); 'default': Kafka's DefaultMessageFormatter, as --output text")
    p.add_argument("--page-size", type=common.whole_number(0), default=PAGE_SIZE, metavar="N", help=argparse.SUPPRESS)
    output.add_output_option(p, default=None, text="Kafka's console format (value only, unless --property print.*)",
                             json_help="one object per record", default_help="json; text with any --property")
    common.add_store_option(p)
    p.set_defaults(func=consume)


def start_positions(store: Store, topic: str, partitions: list[int], offset: int | str | None,
                    group: str | None = None, isolation_level: str = READ_UNCOMMITTED,
                    snaps: dict[int, LogSnapshot] | None = None) -> dict[int, int]:
    """Where each partition's read starts: the group's committed offset when it has one in the log, else
    ``offset`` (an offset, ``"earliest"``/None: the log start, ``"latest"``: the log end, or at
    ``read_committed`` the last stable offset, as Kafka's console consumer's seekToEnd)."""
    positions: dict[int, int] = {}
    committed = {} if group is None else store.offsets_topic.committed(group, [TopicPartition(topic, p)
                                                                              for p in partitions])
    for p in partitions:
        snap = (snaps or {}).get(p)
        if snap is not None:  # --as-of: the offsets of that version
            if isinstance(offset, int):
                store.log(topic, p).read(offset, 0, at=snap)  # raises if out of that version's range
                positions[p] = offset
            else:
                positions[p] = (end_offset(store.log(topic, p), isolation_level, at=snap) if offset == "latest"
                                else snap.log_start_offset)
            continue
        om = committed.get(TopicPartition(topic, p))
        if om is not None:
            head = store.log(topic, p).head()
            if head.log_start_offset <= om.offset <= head.log_end_offset:
                positions[p] = om.offset
                continue
            print(f"deltalog: {topic}-{p}: group {group!r} committed offset {om.offset}, no longer in the log "
                  f"[{head.log_start_offset}, {head.log_end_offset}]; starting at the "
                  f"{'log end' if offset == 'latest' else 'log start'}", file=sys.stderr)
        if isinstance(offset, int):
            store.read(topic, p, offset, max_records=0)  # type: ignore[attr-defined]  # raises if out of range
            positions[p] = offset
        else:
            log = store.log(topic, p)  # type: ignore[attr-defined]
            positions[p] = end_offset(log, isolation_level) if offset == "latest" else log.head().log_start_offset
    return positions


def consume(args: argparse.Namespace) -> int:
    topic = console.topic_of(args)
    if args.from_beginning and args.offset is not None:
        raise common.UsageError("Options from-beginning and offset cannot be specified together.")
    text = args.output == output.TEXT or (args.output is None and bool(args.properties))
    if args.output == output.JSON and args.properties:
        raise common.UsageError("--property sets Kafka's text format; it does not apply to --output json "
                                "(JSON lines carry every field)")
    offsets_format = args.formatter in offsets_formatter.NAMES
    if args.formatter is not None and not offsets_format:
        text = True  # Kafka's DefaultMessageFormatter is the text format
    formatter = MessageFormatter(args.properties) if text and not offsets_format else None
    if args.group is not None and args.partition is not None:
        raise common.UsageError("Options group and partition cannot be specified together.")
    if args.group is not None:
        validate_group_id(args.group)
    store = common.open_store(args)
    if args.partition is not None:
        store.log(topic, args.partition)  # raises for a partition that does not exist
        partitions = [args.partition]
    else:
        partitions = store.partitions(topic)
    if isinstance(args.offset, int) and len(partitions) > 1:
        raise common.UsageError(
            f"The partition is required when offset is specified. (topic {topic!r} has {len(partitions)} "
            "partitions: add -p N, or use --offset earliest|latest)")
    snaps = _as_of_snapshots(store, topic, partitions, args)
    positions = start_positions(store, topic, partitions, args.offset, args.group, args.isolation_level, snaps)
    write = (_offsets_writer() if offsets_format
             else _writer(topic, formatter, json_fields_of(store.topic_config(topic))))
    committer = None if args.group is None else _GroupCommitter(store, args.group, topic, partitions)
    consumer = _Consumer(store, topic, positions, follow=args.follow, page_size=max(args.page_size, 1),
                         committer=committer, isolation_level=args.isolation_level, snaps=snaps)

    count = 0
    code = 0
    stop_signal = _on_sigterm() if args.follow else None
    # a counter of the records printed, on a terminal's stderr while the records themselves go to a file or a pipe
    bar = progress.counter(f"consuming {topic}", unit=" records", show=False if progress.is_terminal(sys.stdout) else None)

    def write_counted(partition: int, records: list[Record]) -> None:
        write(partition, records)
        bar.update(len(records))

    try:
        count = consumer.run(write_counted, max_messages=args.max_messages, timeout_ms=args.timeout_ms,
                             poll_interval_s=args.poll_interval_ms / 1000)
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM) ends --follow: the records so far were printed
        count = consumer.count
        code = 143 if stop_signal is not None and stop_signal.fired else 130
        if committer is not None:
            sys.stdout.flush()
            committer.commit(consumer.printed)
    else:
        if committer is not None:
            sys.stdout.flush()  # what is committed must have reached the reader
            committer.commit(consumer.printed)
    finally:
        bar.close()
        if stop_signal is not None:
            stop_signal.restore()
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pass
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return code


def parse_as_of(text: str) -> tuple[int | None, str | None]:
    """``--as-of``: a whole number is a Delta version, anything else a timestamp (checked when it is used)."""
    t = text.strip()
    return (int(t), None) if t.isdigit() else (None, t)


def _as_of_snapshots(store: Store, topic: str, partitions: list[int],
                     args: argparse.Namespace) -> dict[int, LogSnapshot] | None:
    """With ``--as-of``, the snapshot each partition is read at (a version needs one partition)."""
    if args.as_of is None:
        return None
    if args.follow or args.group is not None:
        raise common.UsageError("--as-of reads a past version, which never grows: it does not go with --follow "
                                "or --group")
    version, timestamp = parse_as_of(args.as_of)
    if version is not None and len(partitions) > 1:
        raise common.UsageError(
            f"--as-of {version} is a Delta version of one partition table and topic {topic!r} has "
            f"{len(partitions)} partitions: add -p N (see 'deltalog history {topic} -p N'), or give a time "
            "(ISO 8601), which reads every partition at its version of that time")
    at = time_travel.as_of(version, timestamp)
    assert at is not None
    return {p: time_travel.snapshot_as_of(store.log(topic, p), at) for p in partitions}


def _offsets_writer() -> Callable[[int, list[Record]], None]:
    def write_offsets(partition: int, records: list[Record]) -> None:
        for r in records:
            line = offsets_formatter.format_offset_record(r.key, r.value)
            if line is not None:
                sys.stdout.write(line + "\n")
    return write_offsets


def _writer(topic: str, formatter: MessageFormatter | None, json_fields: frozenset[str] = frozenset()
            ) -> Callable[[int, list[Record]], None]:
    """Prints records: Kafka's text format with ``formatter``, else JSON lines, where a key or value the topic
    encodes as JSON (``json_fields``) is printed as the JSON it holds."""
    if formatter is None:
        def write_json(partition: int, records: list[Record]) -> None:
            for r in records:
                output.emit(record_to_json(r, topic, partition, json_fields))
        return write_json
    sys.stdout.flush()
    raw = sys.stdout.buffer

    def write_text(partition: int, records: list[Record]) -> None:
        raw.write(b"".join(formatter.format(partition, r) for r in records))
    return write_text


class _GroupCommitter:
    """Commits the console consumer's positions for its group, as Kafka's auto commit does (every position, also of
    partitions it read nothing from, so a group that started at the log end resumes there), skipping those the group
    has committed already (each commit is a Delta commit): every ``interval_ms`` while following and at the end."""

    def __init__(self, store: Store, group: str, topic: str, partitions: list[int],
                 interval_ms: int = AUTO_COMMIT_INTERVAL_MS) -> None:
        self.store = store
        self.group = group
        self.topic = topic
        found = store.offsets_topic.committed(group, [TopicPartition(topic, p) for p in partitions])
        self.committed = {tp.partition: om.offset for tp, om in found.items()}
        self.interval_s = interval_ms / 1000
        self.last = time.monotonic()

    def maybe_commit(self, positions: dict[int, int]) -> None:
        if time.monotonic() - self.last >= self.interval_s:
            sys.stdout.flush()  # what is committed must have reached the reader
            self.commit(positions)

    def commit(self, positions: dict[int, int]) -> None:
        self.last = time.monotonic()
        moved = {TopicPartition(self.topic, p): OffsetAndMetadata(o) for p, o in positions.items()
                 if o != self.committed.get(p)}
        if moved:
            self.store.offsets_topic.commit(self.group, moved, self.store.clock.now_ms())
            self.committed.update((tp.partition, om.offset) for tp, om in moved.items())


class _Consumer:
    """A position per partition, read a page from each in turn (Kafka's fetch; a group's commits by ``committer``)."""

    def __init__(self, store: object, topic: str, positions: dict[int, int], *, follow: bool, page_size: int,
                 committer: _GroupCommitter | None = None, isolation_level: str = READ_UNCOMMITTED,
                 snaps: dict[int, LogSnapshot] | None = None) -> None:
        self.isolation_level = isolation_level
        self.snaps = snaps or {}  # --as-of: each partition's snapshot of that version
        self.committer = committer
        self.store = store
        self.topic = topic
        self.positions = positions
        #: The positions past what was written (behind ``positions`` while a page is being written): what a group
        #: commits, so Ctrl-C in the middle of a page delivers its rest again rather than never.
        self.printed = dict(positions)
        self.follow = follow
        self.page_size = page_size
        # Without --follow, each partition is read up to its log end (read_committed: its last stable offset) as it
        # was at the start.
        self.ends = {} if follow else {p: end_offset(store.log(topic, p), isolation_level,  # type: ignore[attr-defined]
                                                     at=self.snaps.get(p)) for p in positions}
        self.count = 0

    def run(self, write: Callable[[int, list[Record]], None], *, max_messages: int | None, timeout_ms: int | None,
            poll_interval_s: float) -> int:
        idle_since = time.monotonic()
        while True:
            if max_messages is not None and self.count >= max_messages:
                return self.count
            progressed = False
            for p in self.positions:
                if not self.follow and self.positions[p] >= self.ends[p]:
                    continue
                limit = self.page_size if max_messages is None else min(self.page_size, max_messages - self.count)
                if limit <= 0:
                    break
                records = self._fetch(p, limit)
                if records:
                    self.count += len(records)  # first: with unbuffered output a reader may act on them at once
                    write(p, records)
                    progressed = True
                self.printed[p] = self.positions[p]
            if not self.follow:
                if all(self.positions[p] >= self.ends[p] for p in self.positions):
                    return self.count
                continue
            sys.stdout.flush()
            if self.committer is not None:
                self.committer.maybe_commit(self.printed)
            if progressed:
                idle_since = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                print(f"deltalog: no record for {timeout_ms} ms (--timeout-ms); stopping", file=sys.stderr)
                return self.count
            else:
                time.sleep(poll_interval_s)

    def _fetch(self, partition: int, limit: int) -> list[Record]:
        position = self.positions[partition]
        try:
            got = fetch(self.store.log(self.topic, partition), position, limit,  # type: ignore[attr-defined]
                        self.isolation_level, at=self.snaps.get(partition))
        except OffsetOutOfRangeError as e:
            # (An offset asked for was checked at the start: see start_positions.) Retention (or DeleteRecords) moved the log start past this position: go on from the new start, as a
            # Kafka consumer does with auto.offset.reset=earliest.
            reset = e.log_start_offset if position < e.log_start_offset else end_offset(
                self.store.log(self.topic, partition), self.isolation_level,  # type: ignore[attr-defined]
                at=self.snaps.get(partition))
            print(f"deltalog: {self.topic}-{partition}: offset {position} is no longer in the log "
                  f"[{e.log_start_offset}, {e.log_end_offset}]; resetting to {reset}", file=sys.stderr)
            self.positions[partition] = reset
            return []
        records = table_to_records(got.records)
        next_offset = got.next_offset  # past markers and skipped records too
        if not self.follow:
            end = self.ends[partition]
            records = [r for r in records if r.offset < end]  # type: ignore[operator]
            next_offset = min(next_offset, end)
        self.positions[partition] = max(next_offset, position)
        return records


class _StopSignal:
    """SIGTERM ends ``--follow`` as Ctrl-C does (exit 143 instead of 130), so the output is flushed first."""

    def __init__(self) -> None:
        self.fired = False
        self.previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.fired = True
        raise KeyboardInterrupt

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)


def _on_sigterm() -> _StopSignal | None:
    try:
        return _StopSignal()
    except ValueError:  # not the main thread (the CLI run in-process by another program): leave signals alone
        return None
