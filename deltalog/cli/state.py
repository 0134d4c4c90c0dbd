"""``deltalog state``: the topics' state tables (docs/state-table.md).

``refresh`` brings them up to their logs' last stable offsets (one Delta commit each); ``history`` lists a state
table's versions with the log offsets each holds the state up to; ``show`` prints its rows (as of a version or a
time, ``--as-of``); ``lag`` says how far behind the log each is; ``compare`` proves one equal to its log (exit 3
when it is not).
"""

from __future__ import annotations

import argparse
import json

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.cli.exit_codes import EXIT_BROKEN_DATA, EXIT_OK
from deltalog.cli.progress import Steps
from deltalog.text import format_table, format_timestamp


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "state", help="the state tables: one row per live key, a plain Delta table beside each topic",
        description="Work with the topics' state tables: plain Delta tables of the latest read_committed record "
        "of each live key, kept up to date incrementally (state.table.enable=true on a topic, or "
        "log.state.table.enable=true for the store).")
    sub = p.add_subparsers(dest="state_command", required=True, metavar="COMMAND")

    r = sub.add_parser("refresh", help="bring state tables up to their logs' last stable offsets (one commit each)",
                       description="Apply each partition's new records (from the offsets the table recorded to the "
                       "last stable offset, latest per key) in one Delta MERGE per topic.")
    r.add_argument("topics", nargs="*", metavar="TOPIC", help="the topics (default: every topic with a state table)")
    r.add_argument("--full", action="store_true", help="rebuild from the log instead (one overwrite commit)")
    r.add_argument("--check", action="store_true", help="then prove each equal to its log (exit 3 when not)")
    output.add_output_option(r, text="one line per topic", json_help="one object per topic")
    common.add_store_option(r)
    r.set_defaults(func=refresh)

    h = sub.add_parser("history", help="a state table's versions, with the log offsets each holds",
                       description="List the versions of TOPIC's state table, newest first: time, operation and the "
                       "offset of each partition it holds the state up to (read one with 'deltalog state show "
                       "TOPIC --as-of VERSION').")
    h.add_argument("topic", metavar="TOPIC")
    h.add_argument("--limit", type=common.whole_number(1), default=None, metavar="N", help="at most N versions")
    output.add_output_option(h, text="a table, one version per line", json_help="one object per version")
    common.add_store_option(h)
    h.set_defaults(func=history)

    s = sub.add_parser("show", help="print a state table's rows (latest, or as of a version or a time)")
    s.add_argument("topic", metavar="TOPIC")
    s.add_argument("--as-of", metavar="VERSION|TIMESTAMP", default=None,
                   help="a version of the state table (a number) or a time (ISO 8601 or epoch ms), as 'consume "
                        "--as-of' takes for the log")
    s.add_argument("--limit", type=common.whole_number(1), default=None, metavar="N", help="at most N rows")
    output.add_output_option(s, text="a table", json_help="one object per row")
    common.add_store_option(s)
    s.set_defaults(func=show)

    lag = sub.add_parser("lag", help="how far each state table is behind its log (offsets and time)")
    lag.add_argument("topics", nargs="*", metavar="TOPIC", help="the topics (default: every topic with a state table)")
    output.add_output_option(lag, text="one line per partition", json_help="one object per topic")
    common.add_store_option(lag)
    lag.set_defaults(func=lag_)

    c = sub.add_parser("compare", help="prove a state table equal to its log (exit 3 when it is not)")
    c.add_argument("topic", metavar="TOPIC")
    output.add_output_option(c, text="a summary", json_help="one object")
    common.add_store_option(c)
    c.set_defaults(func=compare)


def _topics(store, given: list[str]) -> list[str]:  # noqa: ANN001 - a Store
    return list(given) if given else store.state_table_topics()


def refresh(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    broken = False
    for topic in _topics(store, args.topics):
        with Steps(f"refreshing {topic}", unit=" steps", before="opening its state table") as steps:
            result = store.refresh_state(topic, full=args.full, check=False, progress=steps)
            if args.check:
                steps.bar.set_postfix_str("comparing with the log")
            comparison = store.compare_state(topic) if args.check else None
            steps.finish()
        broken |= comparison is not None and not comparison.equal
        if output.wants_json(args):
            output.emit({**result.as_dict(), **({"equal": comparison.equal} if comparison is not None else {})})
            continue
        what = ("rebuilt" if result.rebuilt else "refreshed") if result.committed else "up to date"
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted(result.offsets.items()))
        line = (f"{topic}: {what} at version {result.table_version} (offsets {offsets}; {result.records_read} "
                f"record(s) read, {result.rows_merged} row(s) merged, {result.duration_ms} ms)")
        if comparison is not None:
            line += " equal to the log" if comparison.equal else f" DIFFERS from the log: {', '.join(comparison.examples)}"
        print(line)
    return EXIT_BROKEN_DATA if broken else EXIT_OK


def history(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    versions = store.state_history(args.topic, limit=args.limit)
    if output.wants_json(args):
        for v in versions:
            output.emit(v.as_dict())
        return EXIT_OK
    rows = [[v.version, format_timestamp(v.timestamp_ms) + (" +" if v.skewed else ""), v.operation or "-",
             ", ".join(f"{p}:{o}" for p, o in sorted(v.offsets.items())) or "-",
             ", ".join(f"{p}:{o}" for p, o in sorted(v.log_versions.items())) or "-"] for v in versions]
    print(format_table(["VERSION", "TIMESTAMP (UTC)", "OPERATION", "OFFSETS (PARTITION:OFFSET)", "LOG VERSIONS"],
                       rows))
    if any(v.skewed for v in versions):
        print("+ its refresher's clock stamped it at or before the version before it; shown (and read by --as-of) at "
              "the previous version's time + 1 ms, as Delta does (the refresher's own time is writer_timestamp_ms in "
              "--output json)")
    return EXIT_OK


def show(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    version, timestamp = None, None
    if args.as_of is not None:
        text = args.as_of.strip()
        version, timestamp = (int(text), None) if text.isdigit() and len(text) < 10 else (None, text)
        if timestamp is not None and timestamp.isdigit():
            timestamp = int(timestamp)
    table = store.state(args.topic, version_as_of=version, timestamp_as_of=timestamp)
    if args.limit is not None:
        table = table.slice(0, args.limit)
    rows = table.to_pylist()
    if output.wants_json(args):
        for r in rows:
            output.emit({k: _plain(v) for k, v in r.items()})
        return EXIT_OK
    print(format_table(table.column_names, [[_text(r[c]) for c in table.column_names] for r in rows]))
    return EXIT_OK


def _plain(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _text(value: object) -> str:
    plain = _plain(value)
    return plain if isinstance(plain, str) else json.dumps(plain, default=str)


def lag_(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    lags = [store.state_lag(t) for t in _topics(store, args.topics)]
    if output.wants_json(args):
        for lag in lags:
            output.emit(lag.as_dict())
        return EXIT_OK
    rows = [[lag.topic, p.partition, p.applied_offset, p.last_stable_offset, p.offsets_behind,
             lag.time_behind_ms if p.offsets_behind else 0, "AHEAD" if p.ahead else ("-" if lag.exists else "no table")]
            for lag in lags for p in lag.partitions]
    print(format_table(["TOPIC", "PARTITION", "APPLIED OFFSET", "LAST STABLE OFFSET", "OFFSETS BEHIND",
                        "MS BEHIND (AT MOST)", "NOTE"], rows))
    return EXIT_OK


def compare(args: argparse.Namespace) -> int:
    store = common.open_store(args)
    comparison = store.compare_state(args.topic)
    if output.wants_json(args):
        output.emit(comparison.as_dict())
    else:
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted(comparison.offsets.items()))
        verdict = "EQUAL to" if comparison.equal else "DIFFERS from"
        print(f"state table of {args.topic!r} (version {comparison.table_version}) {verdict} its log up to offsets "
              f"{offsets}: {comparison.rows} row(s), {comparison.pending_keys} key(s) pending the next refresh, "
              f"{comparison.missing} missing, {comparison.extra} extra, {comparison.different} different, "
              f"{comparison.ahead} ahead")
        for e in comparison.examples:
            print(f"  {e}")
    return EXIT_OK if comparison.equal else EXIT_BROKEN_DATA
