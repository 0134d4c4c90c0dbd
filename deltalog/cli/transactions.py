"""``deltalog transactions``: Kafka's ``kafka-transactions.sh`` over the store's transaction coordinator.

``list`` prints every transactional id (``TransactionalId ProducerId TransactionState``), ``describe
--transactional-id X`` its state (Kafka's columns: ``ProducerId ProducerEpoch TransactionState
CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions``), ``describe-producers --topic T
--partition P`` the transactions ongoing in one partition and its last stable offset, and ``abort-timed-out``
aborts every transaction ongoing for longer than its ``transaction.timeout.ms`` (what Kafka's coordinator does on
a timer; deltalog's cleaner cycle does it too).
"""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.cli import output
from deltalog.log.transaction_coordinator import ONGOING, TransactionCoordinator, TransactionMetadata
from deltalog.store import Store
from deltalog.text import format_table

LIST_COLUMNS = ("TransactionalId", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = ("TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCER_COLUMNS = ("ProducerId", "CurrentTransactionStartOffset", "LastStableOffset", "LogEndOffset")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "transactions", help="list and describe transactions, abort timed-out ones (kafka-transactions)",
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
    for leaf in (ls, desc, prod, abort):
        output.add_output_option(leaf, text="Kafka's tables", json_help="one object per line")
        common.add_store_option(leaf)
        leaf.set_defaults(func=transactions)
    p.set_defaults(func=transactions)


def console_topic(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True, metavar="TOPIC")


def transactions(args: argparse.Namespace) -> int:
    if args.action is None:
        raise common.UsageError("transactions needs an action: list, describe, describe-producers, abort-timed-out")
    store = common.open_store(args)
    coordinator = TransactionCoordinator(store.log_manager)
    return int(globals()["_" + args.action.replace("-", "_")](store, coordinator, args) or 0)


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
