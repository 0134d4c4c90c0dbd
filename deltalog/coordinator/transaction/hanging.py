"""Hanging transactions: open in a partition with no coordinator state left to end them, and their abort.

A transaction whose coordinator state is lost (its transactional-id document deleted or damaged, or one that
does not list the partition) is never ended by ``init_transactions()`` or the timeout sweep: its partition's
last stable offset stays at its first offset for ever, so ``read_committed`` readers and the cleaner stop there.
Kafka's ``kafka-transactions.sh`` (``TransactionsCommand``) has two commands for exactly this, reproduced here:

* ``find-hanging`` (:func:`find_hanging`): every transaction open in the partitions searched whose producer's
  last write is older than ``--max-transaction-timeout`` (Kafka's candidates, from ``DescribeProducers``), and
  for which no transactional id maps to its producer id, or whose id's transaction does not list the partition
  (Kafka's ``filterHangingTransactions``);
* ``abort`` (:func:`abort_transaction`): writes the ABORT marker for one such transaction into its partition,
  at the producer's epoch (Kafka's ``Admin.abortTransaction``, a ``WriteTxnMarkers`` request sent by the tool),
  found by ``--start-offset`` or given by ``--producer-id --producer-epoch --coordinator-epoch``.

Deliberate difference: there are no brokers, so ``--broker-id`` is accepted as Kafka's way of saying "every
partition" and the coordinator epoch is always -1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from deltalog.coordinator.transaction.transaction_coordinator import (
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TransactionCoordinator,
)
from deltalog.errors import (
    CorruptLogError,
    CorruptStateError,
    ForeignCommitError,
    InvalidArgumentError,
    InvalidProducerEpochError,
)
from deltalog.log.producer_state import ProducerStateEntry
from deltalog.log.record import ABORT, PRODUCER_EPOCH

if TYPE_CHECKING:
    from deltalog.log.log_manager import LogManager
    from deltalog.log.partition_log import LogSnapshot, PartitionLog

#: Kafka's default ``--max-transaction-timeout`` of ``find-hanging`` (15 minutes, the broker's default
#: ``transaction.max.timeout.ms``).
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: No coordinator epochs here: Kafka's tool prints -1 when a producer state has none.
NO_COORDINATOR_EPOCH = -1


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction open in one partition (Kafka's ``ProducerState`` with a current transaction start offset,
    and the row of ``find-hanging``)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    #: The largest timestamp of the producer's writes to the partition in the transaction (Kafka's
    #: ``lastTimestamp``).
    last_timestamp_ms: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH

    def duration_ms(self, now_ms: int) -> int:
        return now_ms - self.last_timestamp_ms


def open_transactions(log: PartitionLog, snap: LogSnapshot | None = None) -> list[OpenTransaction]:
    """The transactions open in one partition, by start offset (Kafka's ``describeProducers`` active producers
    that have a ``currentTransactionStartOffset``)."""
    snap = snap if snap is not None else log.snapshot()
    index = log.txn_index(snap)
    dt = log.table(refresh=False)
    out = []
    for pid, first in sorted(index.ongoing.items(), key=lambda kv: (kv[1], kv[0])):
        mine = [f for f in snap.files if f.max_offset >= first and f.min_producer_id is not None
                and f.min_producer_id <= pid <= f.max_producer_id]
        last = max((f.max_timestamp_ms if f.max_timestamp_ms is not None else f.modification_time for f in mine),
                   default=0)
        entry = ProducerStateEntry.read(dt.transaction_version, pid)
        epoch = entry.producer_epoch if entry is not None else _epoch_from_rows(log, mine, pid, first)
        out.append(OpenTransaction(log.topic, log.partition, pid, epoch, first, int(last)))
    return out


def _epoch_from_rows(log: PartitionLog, files, pid: int, first: int) -> int:
    """The producer's epoch from its rows, when its app-transaction state expired (``producer.id.expiration.ms``)."""
    from deltalog.log.partition_log import read_files

    rows = read_files(log.storage, log.uri, files, first)
    from deltalog.log.record import PRODUCER_ID

    mine = rows.filter(pc.equal(rows[PRODUCER_ID], pid))
    return int(pc.max(mine[PRODUCER_EPOCH]).as_py() or 0) if mine.num_rows else 0


def partitions_to_search(logs: LogManager, topic: str | None, partition: int | None) -> list[tuple[str, int]]:
    """Kafka's ``collectTopicPartitionsToSearch``: one partition, one topic's, or every topic's."""
    if partition is not None and topic is None:
        raise InvalidArgumentError("The --partition argument requires --topic to be provided")
    if topic is not None:
        if partition is not None:
            logs.log(topic, partition)  # raises UnknownTopicOrPartitionError naming what exists
            return [(topic, partition)]
        return [(topic, p) for p in logs.partitions(topic)]
    return [(t, p) for t in logs.list_topics() for p in logs.partitions(t)]


def find_hanging(logs: LogManager, *, topic: str | None = None, partition: int | None = None,
                 max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, now_ms: int | None = None,
                 damaged: list[CorruptStateError] | None = None,
                 unreadable: list[CorruptLogError | ForeignCommitError] | None = None) -> list[OpenTransaction]:
    """The hanging transactions of the partitions searched (see the module doc). A transactional-id document that
    cannot be read maps no producer id, so its open transactions are listed (its error goes to ``damaged``). A
    partition whose Delta log cannot be read raises, or, when ``unreadable`` is a list, is skipped and its error
    added there."""
    if not isinstance(max_transaction_timeout_ms, int) or isinstance(max_transaction_timeout_ms, bool) \
            or max_transaction_timeout_ms < 0:
        raise InvalidArgumentError(f"max transaction timeout must be a non-negative number of ms, not "
                                   f"{max_transaction_timeout_ms!r}")
    now_ms = logs.clock.now_ms() if now_ms is None else now_ms
    candidates = []
    for tp in partitions_to_search(logs, topic, partition):
        try:
            opened = open_transactions(logs.log(*tp))
        except (CorruptLogError, ForeignCommitError) as e:  # one damaged (or another engine's changed) partition
            # does not hide the others' hanging transactions
            if unreadable is None:
                raise
            unreadable.append(e)
            continue
        candidates += [t for t in opened if t.duration_ms(now_ms) > max_transaction_timeout_ms]
    if not candidates:
        return []
    live: dict[int, set[tuple[str, int]]] = {}
    for meta in TransactionCoordinator(logs).list_transactions(damaged):
        if meta.state not in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT):
            # Kafka's DescribeTransactions lists partitions only while a transaction is in progress
            live.setdefault(meta.producer_id, set())
            continue
        for pid in {meta.producer_id, int(meta.extra.get("previous_producer_id", meta.producer_id))}:
            live.setdefault(pid, set()).update(meta.partitions)
    return [t for t in candidates if (t.topic, t.partition) not in live.get(t.producer_id, ())]


def abort_transaction(logs: LogManager, topic: str, partition: int, *, start_offset: int | None = None,
                      producer_id: int | None = None, producer_epoch: int | None = None,
                      coordinator_epoch: int = NO_COORDINATOR_EPOCH, now_ms: int | None = None) -> int:
    """Write the ABORT marker of one transaction open in ``topic``-``partition`` and return its offset (Kafka's
    ``Admin.abortTransaction``): the one starting at ``start_offset`` (its producer id and epoch are looked up,
    as Kafka's tool does with ``DescribeProducers``), or that of ``producer_id`` at ``producer_epoch``. Its
    records are never visible to ``read_committed`` readers, and the partition's last stable offset moves on."""
    log = logs.log(topic, partition)
    where = f"{topic}-{partition}"
    now_ms = logs.clock.now_ms() if now_ms is None else now_ms
    if not isinstance(coordinator_epoch, int) or isinstance(coordinator_epoch, bool):
        raise InvalidArgumentError(f"coordinator epoch must be an integer, not {coordinator_epoch!r}")
    opened = open_transactions(log)
    if start_offset is not None:
        _check_int("start offset", start_offset)
        if producer_id is not None or producer_epoch is not None:
            raise InvalidArgumentError("give either the start offset or the producer id and epoch, not both")
        found = [t for t in opened if t.start_offset == start_offset]
        if not found:
            starts = ", ".join(f"{t.start_offset} (producer {t.producer_id})" for t in opened) or "none"
            raise InvalidArgumentError(f"Could not find any open transactions starting at offset {start_offset} "
                                       f"on partition {where}; open transactions start at: {starts}")
        target = found[0]
        producer_id, producer_epoch = target.producer_id, target.producer_epoch
    else:
        if producer_id is None or producer_epoch is None:
            raise InvalidArgumentError("abort needs --start-offset, or --producer-id and --producer-epoch")
        _check_int("producer id", producer_id)
        _check_int("producer epoch", producer_epoch)
        target = next((t for t in opened if t.producer_id == producer_id), None)
        if target is None:
            raise InvalidArgumentError(f"producer {producer_id} has no open transaction in {where}; open: "
                                       + (", ".join(str(t.producer_id) for t in opened) or "none"))
        if producer_epoch < target.producer_epoch:
            raise InvalidProducerEpochError(
                f"Epoch {producer_epoch} of producer {producer_id} is smaller than the epoch {target.producer_epoch} "
                f"{where} has seen for it; abort at epoch {target.producer_epoch} (or give --start-offset "
                f"{target.start_offset})")
    offset = log.write_marker(producer_id, producer_epoch, ABORT, now_ms)
    if offset is None:  # ended meanwhile (its coordinator completed it)
        raise InvalidArgumentError(f"producer {producer_id}'s transaction in {where} was ended meanwhile; "
                                   "nothing to abort")
    return offset


def _check_int(what: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative integer, not {value!r}")


def describe(rows: Iterable[OpenTransaction], now_ms: int) -> list[dict[str, object]]:
    """``find-hanging``'s rows as Kafka prints them (its JSON form keeps the same fields)."""
    return [{"topic": t.topic, "partition": t.partition, "producer_id": t.producer_id,
             "producer_epoch": t.producer_epoch, "coordinator_epoch": t.coordinator_epoch,
             "start_offset": t.start_offset, "last_timestamp": t.last_timestamp_ms,
             "duration_min": t.duration_ms(now_ms) // 60_000} for t in rows]
