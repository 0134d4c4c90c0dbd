"""Kafka's transaction coordinator, without a broker: each transactional id's state in one JSON document changed
by compare-and-swap, and the two-phase commit driven by whoever holds the id (or finds it abandoned).

The document (``_deltalog/producers/transactional_ids/<sha256 of the id>.json``, the one that already maps the
id to its producer id and epoch) holds Kafka's ``TransactionMetadata``: the state (``Empty``, ``Ongoing``,
``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``), the partitions the transaction
wrote to, when it started and its ``transaction.timeout.ms``. Every change is a conditional put on the
document's etag, so the id's epoch and its transaction's state change together, and of two processes sharing
a transactional id exactly one wins each step (the other is fenced).

**Time** is the coordinator's, as in Kafka: a transaction starts at the time the store stamped on the write that
made it ``Ongoing`` (the document's modification time, :mod:`deltalog.coordinator.transaction.store_clock`), and the timeout sweep
compares it with the store's time now, never with the clock of the process that opened it. A producer whose
clock runs a day ahead (and then dies) holds read_committed readers and the cleaner back for its timeout, not a
day more; one whose clock is behind is not fenced before its timeout.

A commit is Kafka's: the producer's records are already appended (each with its producer id and epoch); the
state moves ``Ongoing -> PrepareCommit`` (the decision, durable), a COMMIT marker is written into every
partition of the transaction (:meth:`~deltalog.log.partition_log.PartitionLog.write_marker`, idempotent), and the
state moves to ``CompleteCommit``. Abort alike. A process that dies anywhere in between leaves a state that the
next ``init_transactions`` of the id, or :meth:`TransactionCoordinator.abort_timed_out_transactions` (run by
the cleaner's cycle, as Kafka's coordinator runs it on a timer), finishes: a ``Prepare*`` state is completed as
decided, an ``Ongoing`` one older than its timeout is aborted with the epoch bumped (the old producer is fenced).

Deliberate difference: Kafka keeps this state in the compacted topic ``__transaction_state``; here it is one
small document per transactional id, which gives the same compare-and-swap without a coordinator process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from deltalog.coordinator.transaction import producer_ids
from deltalog.coordinator.transaction.producer_ids import MAX_PRODUCER_ID
from deltalog.coordinator.transaction.store_clock import StoreClock
from deltalog.errors import (
    CommitConflictError,
    CorruptStateError,
    DeltalogError,
    IllegalStateError,
    InvalidPidMappingError,
    ProducerFencedError,
)
from deltalog.log import faults, producer_state
from deltalog.log.record import ABORT, COMMIT
from deltalog.log.state_docs import Document

if TYPE_CHECKING:
    from deltalog.clock import Clock
    from deltalog.log.log_manager import LogManager
    from deltalog.storage import Versioned

log = logging.getLogger(__name__)

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
#: States in which the transactional id has no transaction in progress.
IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
#: An expired transactional id (``transactional.id.expiration.ms``): listed and described nowhere, and the next
#: ``init_transactions()`` of the id starts afresh with a new producer id. Kafka writes a tombstone for it in
#: ``__transaction_state``; here the document stays, marked, because the store has no conditional delete to
#: remove it without racing an ``init_transactions()`` that revives it (a few hundred bytes per id).
DEAD = "Dead"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD)
#: What to do with a damaged transactional-id document (see :class:`~deltalog.errors.CorruptStateError`).
DAMAGED_FIX = ("Only this transactional id is affected. Delete the file: the id's next init_transactions() starts "
               "it afresh with a new producer id; a transaction it left open in a partition is then found by "
               "'deltalog transactions find-hanging' and ended by 'deltalog transactions abort'")
#: Kafka's default ``transactional.id.expiration.ms`` (7 days).
DEFAULT_EXPIRATION_MS = 604_800_000

#: Kafka's default ``transaction.timeout.ms`` and the broker's ``transaction.max.timeout.ms``.
DEFAULT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 900_000


@dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id's document (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str = EMPTY
    partitions: tuple[tuple[str, int], ...] = ()
    txn_start_ms: int | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    last_update_ms: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: When the store last wrote the document, on the store's clock (not part of the document).
    modified_ms: int | None = field(default=None, compare=False)

    @classmethod
    def of(cls, doc: Versioned, location: str = "<transactional-id document>",
           transactional_id: str | None = None) -> TransactionMetadata:
        """The document as read, with the store's time of its last write. An ``Ongoing`` transaction's start is
        left out by the write that began it (its writer's clock is not the coordinator's): that write's time, on
        the store's clock, is the start, and the next change of the document records it."""
        meta = replace(cls.parse(doc.data, location, transactional_id), modified_ms=doc.modified_ms)
        if meta.state == ONGOING and meta.txn_start_ms is None:
            meta = replace(meta, txn_start_ms=doc.modified_ms)
        return meta

    @classmethod
    def parse(cls, data: bytes, location: str = "<transactional-id document>",
              transactional_id: str | None = None) -> TransactionMetadata:
        """The document, checked as Kafka's ``TransactionLog.readTxnRecordValue`` checks a record of
        ``__transaction_state``: a torn file, a missing key, or a value of the wrong type or out of range raises
        :class:`~deltalog.errors.CorruptStateError` naming ``location``."""
        what = "transactional-id document" + ("" if transactional_id is None else f" of {transactional_id!r}")
        doc = Document.parse(data, location, what, DAMAGED_FIX)
        known = {"transactional_id", "producer_id", "producer_epoch", "state", "partitions", "txn_start_ms",
                 "timeout_ms", "last_update_ms"}
        partitions = []
        for p in doc.list("partitions", default=[]):
            if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], int)
                    and not isinstance(p[1], bool) and p[1] >= 0):
                raise doc.bad("partitions", p, "[topic, partition] pairs")
            partitions.append((p[0], p[1]))
        extra = {k: v for k, v in doc.data.items() if k not in known}
        if "previous_producer_id" in extra:
            doc.int("previous_producer_id", maximum=MAX_PRODUCER_ID)
        return cls(doc.str("transactional_id"), doc.int("producer_id", maximum=MAX_PRODUCER_ID),
                   doc.int("producer_epoch", maximum=producer_state.MAX_EPOCH + 1),
                   doc.str("state", choices=STATES, default=EMPTY), tuple(partitions),
                   doc.int("txn_start_ms", nullable=True, default=None),
                   doc.int("timeout_ms", minimum=1, default=None) or DEFAULT_TIMEOUT_MS,
                   doc.int("last_update_ms", default=0), extra)

    def payload(self) -> dict[str, Any]:
        return {**self.extra, "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "state": self.state,
                "partitions": [list(p) for p in self.partitions], "txn_start_ms": self.txn_start_ms,
                "timeout_ms": self.timeout_ms, "last_update_ms": self.last_update_ms}

    def timed_out(self, now_ms: int) -> bool:
        return self.state == ONGOING and self.txn_start_ms is not None and now_ms > self.txn_start_ms + self.timeout_ms


class TransactionCoordinator:
    """The coordinator's operations over one store (Kafka's InitProducerId, AddPartitionsToTxn, EndTxn, and the
    timeout sweep)."""

    def __init__(self, logs: LogManager, clock: Clock | None = None) -> None:
        self.logs = logs
        self.storage = logs.storage
        #: The coordinator's clock for transaction timeouts: the store's (see the module docstring).
        self.clock: Clock = clock if clock is not None else StoreClock(self.storage)

    # -- the document ------------------------------------------------------------------------------------

    def _location(self, transactional_id: str) -> str:
        return producer_state.transactional_location(self.storage, transactional_id)

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's document; None if it was never initialised or has expired. A damaged one raises
        :class:`~deltalog.errors.CorruptStateError` naming its file."""
        location = self._location(transactional_id)
        data = self.storage.read_versioned(location)
        return _live(None if data is None else TransactionMetadata.of(data, location, transactional_id))

    def list_transactions(self, damaged: list[CorruptStateError] | None = None) -> list[TransactionMetadata]:
        """Every transactional id of the store that has not expired (Kafka's ``kafka-transactions.sh --list``).
        A damaged document is left out (one bad id does not hide the others, as one unreadable partition of
        ``__transaction_state`` does not stop Kafka's other coordinators): its error is added to ``damaged``
        when a list is given, else logged."""
        out = []
        for info in self.storage.list_files(self.storage.location(*producer_state.TRANSACTIONAL_IDS)):
            if info.location.endswith(".json"):
                data = self.storage.read_versioned(info.location)
                try:
                    meta = None if data is None else _live(TransactionMetadata.of(data, info.location))
                except CorruptStateError as e:
                    if damaged is not None:
                        damaged.append(e)  # the caller reports it
                    else:
                        log.error("%s", e)
                    continue
                if meta is not None:
                    out.append(meta)
        return sorted(out, key=lambda m: m.transactional_id)

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int = DEFAULT_EXPIRATION_MS) -> list[str]:
        """Kafka's ``transactional.id.expiration.ms``: every id with no transaction in progress and not used for
        that long is marked :data:`DEAD` (by compare-and-swap, so an id used meanwhile is left alone). Its
        producer can no longer write (:class:`~deltalog.errors.InvalidPidMappingError`), and its next
        ``init_transactions()`` gets a new producer id. Returns the ids expired.

        How long an id went unused is measured on the coordinator's clock, the store's, as the timeouts are
        (Kafka's ``TransactionStateManager.removeExpiredTransactionalIds`` compares ``txnLastUpdateTimestamp``, the
        coordinator's own time, with that same clock): from the time the store stamped on the document's last
        write to the store's time now, read once here when any id is idle. The document's ``last_update_ms`` is
        its writer's clock, which may be days behind (its id would expire at once) or ahead (never); ``now_ms``,
        the caller's clock, only dates what this writes."""
        idle = [m for m in self.list_transactions() if m.state in IDLE]
        if not idle:
            return []
        store_now = self.now_ms()
        done = []
        for meta in idle:
            last_used = meta.modified_ms if meta.modified_ms is not None else meta.last_update_ms
            if store_now < last_used + expiration_ms:
                continue

            def kill(m: TransactionMetadata | None, seen: TransactionMetadata = meta) -> TransactionMetadata | None:
                if m is None or (m.producer_id, m.producer_epoch, m.state, m.last_update_ms) != (
                        seen.producer_id, seen.producer_epoch, seen.state, seen.last_update_ms):
                    return None  # used meanwhile
                return replace(m, state=DEAD, partitions=(), txn_start_ms=None, last_update_ms=now_ms)

            try:
                new = self._update(meta.transactional_id, kill)
            except DeltalogError as e:  # one id's damage does not stop the others' expiry
                log.warning("expiring transactional id %r failed: %s", meta.transactional_id, e)
                continue
            if new is not None and new.state == DEAD:
                done.append(meta.transactional_id)
        return done

    def _update(self, transactional_id: str,
                step: Callable[[TransactionMetadata | None], TransactionMetadata | None]) -> TransactionMetadata | None:
        """Apply ``step`` to the id's current document by compare-and-swap until it wins; ``step`` returns the
        new document, or None to leave it as it is (it may raise to refuse). A :data:`DEAD` document is given to
        ``step`` as it is."""
        location = self._location(transactional_id)
        for _ in range(producer_state.CAS_ATTEMPTS):
            current = self.storage.read_versioned(location)
            meta = None if current is None else TransactionMetadata.of(current, location, transactional_id)
            new = step(meta)
            if new is None:
                return meta
            if current is None:
                won = self.storage.create_json(location, new.payload())
            else:
                won = self.storage.replace_json(location, new.payload(), current.etag)
            if won is not None:
                faults.point(f"txn_state:{new.state}")  # inert unless the reliability harness asks (see faults)
                return new
        raise CommitConflictError(f"the transaction state of {transactional_id!r} lost the race "
                                  f"{producer_state.CAS_ATTEMPTS} times")

    # -- Kafka's requests --------------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, now_ms: int, *,
                         expected: tuple[int, int] | None = None) -> tuple[int, int]:
        """(producer id, epoch) for ``transactional_id`` with the epoch bumped, after finishing whatever an older
        holder left: an ongoing transaction is aborted, a prepared one completed as it was decided (Kafka's
        InitProducerId). Every older producer with the id is fenced.

        ``expected``: the (producer id, epoch) a producer already holding the id sends to bump its own epoch
        after an error (InitProducerId v3+, KIP-360). It must be the id's current pair, checked in the same
        compare-and-swap as the bump, else :class:`~deltalog.errors.ProducerFencedError` (Kafka's
        ``TransactionCoordinator.prepareInitProducerIdTransit`` answers ``PRODUCER_FENCED``: another producer
        took the id over meanwhile). An id never initialised or expired takes any ``expected``, as Kafka's takes
        it for metadata just created."""
        check_timeout(timeout_ms)

        def bump(meta: TransactionMetadata | None) -> TransactionMetadata:
            if expected is not None and meta is not None and meta.state != DEAD \
                    and (meta.producer_id, meta.producer_epoch) != tuple(expected):
                raise ProducerFencedError(
                    f"producer id {expected[0]} epoch {expected[1]} asked to bump the epoch of transactional id "
                    f"{transactional_id!r}, which producer id {meta.producer_id} epoch {meta.producer_epoch} holds "
                    "now: a newer producer with the same transactional_id fenced it")
            if meta is None or meta.state == DEAD:  # never initialised, or expired: a new producer id
                return TransactionMetadata(transactional_id, producer_ids.allocate(self.storage, self.logs), 0,
                                           timeout_ms=timeout_ms, last_update_ms=now_ms)
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
            if epoch > producer_state.MAX_EPOCH:
                pid, epoch = producer_ids.allocate(self.storage, self.logs), 0
            state = meta.state
            if state == ONGOING:
                state = PREPARE_ABORT  # the old holder's transaction cannot commit any more
            return replace(meta, producer_id=pid, producer_epoch=epoch, state=state, timeout_ms=timeout_ms,
                           last_update_ms=now_ms,
                           extra={**meta.extra, "previous_producer_id": meta.producer_id})

        meta = self._update(transactional_id, bump)
        assert meta is not None
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            meta = self._complete(meta, now_ms, markers_pid=self._markers_pid(meta))
        return meta.producer_id, meta.producer_epoch

    @staticmethod
    def _markers_pid(meta: TransactionMetadata) -> int:
        """The producer id the pending transaction's records carry (an exhausted epoch moved to a new id)."""
        return int(meta.extra.get("previous_producer_id", meta.producer_id))

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int) -> None:
        """Record that the current transaction writes to ``partitions`` (Kafka's AddPartitionsToTxn), before
        anything is written there, so that a commit, an abort or a recovery marks every one of them. The first
        call of a transaction starts it (state ``Ongoing``, its timeout running from the time the store stamps on
        that write: see :meth:`TransactionMetadata.of`)."""
        wanted = tuple(partitions)

        def add(meta: TransactionMetadata | None) -> TransactionMetadata | None:
            meta = self._check_holder(meta, transactional_id, producer_id, producer_epoch)
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise IllegalStateError(f"transaction of {transactional_id!r} is {meta.state}: it is being "
                                        "completed; wait for commit_transaction/abort_transaction to return")
            if meta.state == ONGOING:
                new = tuple(p for p in wanted if p not in meta.partitions)
                if not new:
                    return None
                return replace(meta, partitions=meta.partitions + new, last_update_ms=now_ms)
            return replace(meta, state=ONGOING, partitions=tuple(dict.fromkeys(wanted)), txn_start_ms=None,
                           last_update_ms=now_ms)

        self._update(transactional_id, add)

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        now_ms: int) -> TransactionMetadata:
        """Commit or abort the id's transaction (Kafka's EndTxn): decide, mark every partition, complete. Ending
        a transaction that wrote nothing is a no-op, as in Kafka."""
        prepare = PREPARE_COMMIT if commit else PREPARE_ABORT

        def decide(meta: TransactionMetadata | None) -> TransactionMetadata | None:
            meta = self._check_holder(meta, transactional_id, producer_id, producer_epoch)
            if meta.state == prepare:
                return None  # a retry after the decision: complete it again
            if meta.state in IDLE:
                return None
            if meta.state != ONGOING:
                raise IllegalStateError(f"cannot {'commit' if commit else 'abort'} the transaction of "
                                        f"{transactional_id!r}: it is {meta.state}")
            return replace(meta, state=prepare, last_update_ms=now_ms)

        meta = self._update(transactional_id, decide)
        assert meta is not None
        if meta.state == prepare:
            meta = self._complete(meta, now_ms, markers_pid=producer_id)
        return meta

    def now_ms(self) -> int:
        """The time on the coordinator's clock (the store's)."""
        return self.clock.now_ms()

    def abort_timed_out_transactions(self, now_ms: int) -> list[str]:
        """Abort every transaction ongoing for longer than its timeout, bumping its id's epoch so its producer
        is fenced, and finish every prepared transaction that has stayed prepared that long (its completer
        died). Returns the transactional ids aborted or completed (Kafka's coordinator does this on a timer).

        How long is measured on the coordinator's clock, the store's (Kafka's ``timedOutTransactions`` reads the
        coordinator's own clock), read once here when any transaction is in progress; ``now_ms``, the caller's
        clock, only dates what this writes (the document's ``last_update_ms``, the markers' timestamps)."""
        pending = [m for m in self.list_transactions() if m.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)]
        if not pending:
            return []
        store_now = self.now_ms()
        done = []
        for meta in pending:
            stale_prepare = (meta.state in (PREPARE_COMMIT, PREPARE_ABORT) and meta.modified_ms is not None
                             and store_now > meta.modified_ms + meta.timeout_ms)
            if not meta.timed_out(store_now) and not stale_prepare:
                continue

            def fence(m: TransactionMetadata | None, seen: TransactionMetadata = meta) -> TransactionMetadata | None:
                if m is None or (m.producer_id, m.producer_epoch, m.state) != (seen.producer_id, seen.producer_epoch,
                                                                                seen.state):
                    return None  # it moved on meanwhile: its holder is alive
                state = PREPARE_ABORT if m.state == ONGOING else m.state
                return replace(m, producer_epoch=m.producer_epoch + 1, state=state, last_update_ms=now_ms,
                               extra={**m.extra, "previous_producer_id": m.producer_id})

            try:
                new = self._update(meta.transactional_id, fence)
                if new is not None and new.producer_epoch == meta.producer_epoch + 1 \
                        and new.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    self._complete(new, now_ms, markers_pid=meta.producer_id)
                    done.append(meta.transactional_id)
            except DeltalogError as e:  # one id's failure (its document damaged meanwhile, a partition that
                # cannot take its marker) does not stop the sweep of the others; the next sweep tries again
                log.warning("aborting the timed-out transaction of %r failed: %s", meta.transactional_id, e)
        return done

    # -- internals ---------------------------------------------------------------------------------------

    @staticmethod
    def _check_holder(meta: TransactionMetadata | None, transactional_id: str, producer_id: int,
                      producer_epoch: int) -> TransactionMetadata:
        if meta is None:
            raise IllegalStateError(f"transactional id {transactional_id!r} was never initialised: call "
                                    "init_transactions() first")
        if meta.state == DEAD:
            raise InvalidPidMappingError(
                f"transactional id {transactional_id!r} expired (transactional.id.expiration.ms) and no longer maps "
                f"to producer id {producer_id}: call init_transactions() again")
        if (meta.producer_id, meta.producer_epoch) != (producer_id, producer_epoch):
            raise ProducerFencedError(
                f"There is a newer producer with the same transactional_id {transactional_id!r} (producer id "
                f"{meta.producer_id}, epoch {meta.producer_epoch}) which fences producer id {producer_id} epoch "
                f"{producer_epoch}: close this producer")
        return meta

    def _complete(self, meta: TransactionMetadata, now_ms: int, *, markers_pid: int) -> TransactionMetadata:
        """Write the decided marker into every partition of the transaction, then move to Complete*."""
        commit = meta.state == PREPARE_COMMIT
        control = COMMIT if commit else ABORT
        for topic, partition in meta.partitions:
            if not self.logs.topic_exists(topic):
                continue  # a topic deleted meanwhile has nothing left to mark
            self.logs.log(topic, partition).write_marker(markers_pid, meta.producer_epoch, control, now_ms)
        final = COMPLETE_COMMIT if commit else COMPLETE_ABORT

        def finish(m: TransactionMetadata | None) -> TransactionMetadata | None:
            if m is None or m.state != meta.state or m.producer_epoch != meta.producer_epoch:
                return None
            extra = {k: v for k, v in m.extra.items() if k != "previous_producer_id"}
            return replace(m, state=final, partitions=(), txn_start_ms=None, last_update_ms=now_ms, extra=extra)

        out = self._update(meta.transactional_id, finish)
        return out if out is not None else meta


def check_timeout(timeout_ms: int) -> None:
    from deltalog.errors import InvalidConfigError

    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise InvalidConfigError(f"Invalid value {timeout_ms!r} for configuration transaction.timeout.ms: the "
                                 f"transaction timeout must be an integer between 1 and {MAX_TIMEOUT_MS} ms "
                                 "(the coordinator's transaction.max.timeout.ms)")


def _live(meta: TransactionMetadata | None) -> TransactionMetadata | None:
    """``meta``, or None if the id has expired."""
    return None if meta is None or meta.state == DEAD else meta
