"""``deltalog transactions``: Kafka's ``kafka-transactions.sh`` over the store's transaction coordinator.

``list`` prints every transactional id (``TransactionalId ProducerId TransactionState``), ``describe
--transactional-id X`` its state (Kafka's columns: ``ProducerId ProducerEpoch TransactionState
CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions``), ``describe-producers --topic T
--partition P`` the transactions ongoing in one partition and its last stable offset, and ``abort-timed-out``
aborts every transaction ongoing for longer than its ``transaction.timeout.ms`` (what Kafka's coordinator does on
a timer; deltalog's cleaner cycle does it too).

``find-hanging --topic T [--partition P] [--max-transaction-timeout MIN]`` (or ``--broker-id N`` for every
partition: there are no brokers) lists the transactions open longer than that whose coordinator state is lost
(Kafka's columns: ``Topic Partition ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp
Duration(min)``), and ``abort --topic T --partition P --start-offset N`` (or ``--producer-id --producer-epoch
--coordinator-epoch``) writes the ABORT marker of one of them (see :mod:`deltalog.coordinator.transaction.hanging`). A damaged
transactional-id document (or, for find-hanging, a partition whose Delta log cannot be read) is reported on stderr
by every action (exit code 1); the others are still listed.
"""

from __future__ import annotations

import argparse
import sys

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.coordinator.transaction import hanging
from deltalog.coordinator.transaction.transaction_coordinator import (
    ONGOING,
    TransactionCoordinator,
    TransactionMetadata,
)
from deltalog.errors import CorruptStateError, DeltalogError
from deltalog.store import Store
from deltalog.text import format_table

LIST_COLUMNS = ("TransactionalId", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = ("TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCER_COLUMNS = ("ProducerId", "CurrentTransactionStartOffset", "LastStableOffset", "LogEndOffset")
HANGING_COLUMNS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "transactions", help="list and describe transactions, find hanging ones, abort (kafka-transactions)",
        description="The store's transactional ids and their transactions (Kafka's kafka-transactions.sh).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", title="actions")
    ls = actions.add_parser("list", help="every transactional id and its state")
    desc = actions.add_parser("describe", help="one transactional id's transaction")
    desc.add_argument("--transactional-id", required=True, metavar="ID")
    prod = actions.add_parser("describe-producers",
                              help="the transactions ongoing in one partition, and its last stable offset")
    console_topic(prod)
    prod.add_argument("--partition", type=int, required=True, metavar="N")
    abort = actions.add_parser("abort-timed-out",
                               help="abort every transaction ongoing for longer than its transaction.timeout.ms")
    hang = actions.add_parser(
        "find-hanging", help="transactions open with no coordinator state left to end them",
        description="Transactions open in a partition for longer than --max-transaction-timeout whose "
                    "transactional id's state is lost or does not list the partition: they hold the partition's "
                    "last stable offset back for ever. End one with 'abort'.")
    hang.add_argument("--broker-id", type=int, metavar="N",
                      help="search every partition (there are no brokers; any id means all of them)")
    hang.add_argument("--topic", metavar="TOPIC", help="topic to limit the search to (required with --partition)")
    hang.add_argument("--partition", type=int, metavar="N", help="partition number")
    hang.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                      help="the largest transaction.timeout.ms of the producers, in minutes (default 15): "
                           "transactions written to more recently are not hanging")
    ab = actions.add_parser(
        "abort", help="abort one open transaction by writing its ABORT marker (a hanging one)",
        description="Write the ABORT marker of one transaction open in a partition, found by --start-offset "
                    "(see find-hanging) or given by --producer-id and --producer-epoch. Its records are never "
                    "visible to read_committed readers; the last stable offset moves on.")
    console_topic(ab)
    ab.add_argument("--partition", type=int, required=True, metavar="N")
    ab.add_argument("--start-offset", type=int, metavar="OFFSET", help="the transaction's first offset")
    ab.add_argument("--producer-id", type=int, metavar="ID")
    ab.add_argument("--producer-epoch", type=int, metavar="EPOCH")
    ab.add_argument("--coordinator-epoch", type=int, default=-1, metavar="EPOCH",
                    help="accepted for Kafka's form (deltalog has no coordinator epochs)")
    for leaf in (ls, desc, prod, abort, hang, ab):
        output.add_output_option(leaf, text="Kafka's tables", json_help="one object per line")
        common.add_store_option(leaf)
        leaf.set_defaults(func=transactions)
    p.set_defaults(func=transactions)


def console_topic(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True, metavar="TOPIC")


def transactions(args: argparse.Namespace) -> int:
    if args.action is None:
        raise common.UsageError("transactions needs an action: list, describe, describe-producers, "
                                "abort-timed-out, find-hanging, abort")
    store = common.open_store(args)
    coordinator = _Coordinator(store.log_manager)
    code = int(globals()["_" + args.action.replace("-", "_")](store, coordinator, args) or 0)
    for e in coordinator.damaged:
        print(f"error: {e}", file=sys.stderr)
    return 1 if coordinator.damaged and not code else code


class _Coordinator(TransactionCoordinator):
    """The coordinator whose listings collect the damaged documents they skip, for the command to report."""

    def __init__(self, logs) -> None:  # noqa: ANN001
        super().__init__(logs)
        #: Damaged documents the listings skipped, and partitions find-hanging could not read.
        self.damaged: list[DeltalogError] = []

    def list_transactions(self, damaged: list[CorruptStateError] | None = None) -> list[TransactionMetadata]:
        return super().list_transactions(self.damaged if damaged is None else damaged)  # type: ignore[arg-type]


def _row(meta: TransactionMetadata, now_ms: int) -> dict[str, object]:
    ongoing = meta.state == ONGOING and meta.txn_start_ms is not None
    return {"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch, "state": meta.state, "timeout_ms": meta.timeout_ms,
            "start_time_ms": meta.txn_start_ms if ongoing else None,
            "duration_ms": now_ms - meta.txn_start_ms if ongoing else None,
            "partitions": [f"{t}-{p}" for t, p in meta.partitions]}


def _now_ms(store: Store, coordinator: TransactionCoordinator, metas: list[TransactionMetadata]) -> int:
    """The time to measure transactions' durations at: the coordinator's clock (the store's, which their starts
    are on) when one is ongoing, else this process's."""
    return coordinator.now_ms() if any(m.state == ONGOING for m in metas) else store.clock.now_ms()


def _list(store: Store, coordinator: TransactionCoordinator, args: argparse.Namespace) -> None:
    metas = coordinator.list_transactions()
    now = _now_ms(store, coordinator, metas)
    rows = [_row(m, now) for m in metas]
    if output.wants_json(args):
        for r in rows:
            output.emit(r)
        return
    print(format_table(LIST_COLUMNS, [(r["transactional_id"], r["producer_id"], r["state"]) for r in rows],
                       rule=False))


def _describe(store: Store, coordinator: TransactionCoordinator, args: argparse.Namespace) -> None:
    meta = coordinator.describe(args.transactional_id)
    if meta is None:
        raise common.UsageError(f"no transactional id {args.transactional_id!r} in this store (see "
                                "'deltalog transactions list')")
    r = _row(meta, _now_ms(store, coordinator, [meta]))
    if output.wants_json(args):
        output.emit(r)
        return
    print(format_table(DESCRIBE_COLUMNS, [(r["transactional_id"], r["producer_id"], r["producer_epoch"], r["state"],
                                           r["timeout_ms"], r["start_time_ms"], r["duration_ms"],
                                           ",".join(r["partitions"]))], rule=False))  # type: ignore[arg-type]


def _describe_producers(store: Store, coordinator: TransactionCoordinator, args: argparse.Namespace) -> None:
    log = store.log(args.topic, args.partition)
    snap = log.snapshot()
    index = log.txn_index(snap)
    rows = [{"producer_id": pid, "current_transaction_start_offset": first,
             "last_stable_offset": index.last_stable_offset, "log_end_offset": snap.log_end_offset}
            for pid, first in sorted(index.ongoing.items())]
    if output.wants_json(args):
        for r in rows:
            output.emit(r)
        if not rows:
            output.emit({"producer_id": None, "last_stable_offset": index.last_stable_offset,
                         "log_end_offset": snap.log_end_offset})
        return
    print(f"{args.topic}-{args.partition}: last stable offset {index.last_stable_offset}, log end offset "
          f"{snap.log_end_offset}, {len(rows)} ongoing transaction(s)")
    if rows:
        print(format_table(PRODUCER_COLUMNS, [tuple(r.values()) for r in rows], rule=False))


def _abort_timed_out(store: Store, coordinator: TransactionCoordinator, args: argparse.Namespace) -> None:
    done = coordinator.abort_timed_out_transactions(store.clock.now_ms())
    if output.wants_json(args):
        output.emit({"aborted": done, "count": len(done)})
        return
    print(f"Aborted {len(done)} timed-out transaction(s)" + (": " + ", ".join(done) if done else ""))


def _find_hanging(store: Store, coordinator: _Coordinator, args: argparse.Namespace) -> None:
    if args.topic is None and args.broker_id is None:
        raise common.UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the "
                                "scope of the search")
    if args.partition is not None and args.topic is None:
        raise common.UsageError("The --partition argument requires --topic to be provided")
    if args.max_transaction_timeout < 0:
        raise common.UsageError(f"--max-transaction-timeout must be >= 0 minutes, not {args.max_transaction_timeout}")
    now = store.clock.now_ms()
    found = hanging.find_hanging(store.log_manager, topic=args.topic, partition=args.partition,
                                 max_transaction_timeout_ms=args.max_transaction_timeout * 60_000, now_ms=now,
                                 damaged=coordinator.damaged, unreadable=coordinator.damaged)
    rows = hanging.describe(found, now)
    if output.wants_json(args):
        for r in rows:
            output.emit(r)
        return
    print(format_table(HANGING_COLUMNS, [tuple(r.values()) for r in rows], rule=False))


def _abort(store: Store, coordinator: _Coordinator, args: argparse.Namespace) -> None:
    if args.start_offset is None and (args.producer_id is None or args.producer_epoch is None):
        raise common.UsageError("abort needs --start-offset, or --producer-id, --producer-epoch and "
                                "--coordinator-epoch")
    if args.start_offset is not None and (args.producer_id is not None or args.producer_epoch is not None):
        raise common.UsageError("give either --start-offset or --producer-id/--producer-epoch, not both")
    offset = hanging.abort_transaction(store.log_manager, args.topic, args.partition, start_offset=args.start_offset,
                                       producer_id=args.producer_id, producer_epoch=args.producer_epoch,
                                       coordinator_epoch=args.coordinator_epoch, now_ms=store.clock.now_ms())
    if output.wants_json(args):
        output.emit({"topic": args.topic, "partition": args.partition, "marker_offset": offset})
        return
    print(f"Aborted the transaction in {args.topic}-{args.partition}: ABORT marker at offset {offset}")
