"""Kafka's transaction requests on a store: the transaction half of Kafka's ``KafkaApis`` (InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit) and the check a transactional
record batch passes before a Produce appends it.

The endpoint keeps no transaction state of its own: every request reads and changes the transactional id's document
through the store's :class:`~deltalog.coordinator.transaction.transaction_coordinator.TransactionCoordinator` (compare-and-swap on the
document), the records go through :meth:`~deltalog.log.partition_log.PartitionLog.append` with the producer's
:class:`~deltalog.log.producer_state.ProducerBatch` (``in_transaction``: the rows carry the producer id and epoch),
and EndTxn writes the markers with the coordinator's two-phase commit. So a transaction a Kafka client runs over
the wire is the same Delta commits, producer state, markers and ``__consumer_offsets`` records as one run with
:meth:`deltalog.Store.producer`, and any endpoint on the store (or a Python producer) can serve the next request of
any transactional id: nothing is lost when the endpoint restarts between two requests.

Each handler first reads the id's document and answers Kafka's error code for what it finds, as Kafka's
``TransactionCoordinator`` checks its cached ``TransactionMetadata`` (no document or another producer id:
``INVALID_PRODUCER_ID_MAPPING``; another epoch: ``PRODUCER_FENCED``, which requests older than the version that
introduced it get as ``INVALID_PRODUCER_EPOCH``, as ``KafkaApis`` converts it; a transaction being completed:
``CONCURRENT_TRANSACTIONS``), then makes the change through the coordinator, whose compare-and-swap re-checks the
holder, so of two racing producers one wins and the other gets ``PRODUCER_FENCED``.

A transactional batch is appended only to a partition its transaction added (KIP-890's verification, which Kafka's
``AddPartitionsToTxnManager`` does for the broker): else ``INVALID_TXN_STATE``, as Kafka answers Produce requests
before v12; an older epoch gets ``INVALID_PRODUCER_EPOCH``.

Kafka's coordinator aborts a transaction open longer than its ``transaction.timeout.ms`` on a timer
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s): once an endpoint has served a transactional
request it runs :meth:`TransactionCoordinator.abort_timed_out_transactions` on that timer too (the cleaner's cycle
also does), so a producer that dies in a transaction holds ``read_committed`` readers back for its timeout, not
until the next cleaning. Several endpoints on a store may all run it: each step is a compare-and-swap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from deltalog.acls import AclOperation as OP
from deltalog.coordinator.group.offsets_topic import OFFSETS_TOPIC, decode_key, partition_for, validate_group_id
from deltalog.coordinator.transaction.transaction_coordinator import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    MAX_TIMEOUT_MS,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TransactionCoordinator,
    TransactionMetadata,
)
from deltalog.errors import (
    CommitConflictError,
    DeltalogError,
    IllegalStateError,
    InvalidConfigError,
    UnknownTopicOrPartitionError,
)
from deltalog.log.producer_state import ProducerBatch, ProducerStateEntry, batch_digest
from deltalog.log.record import KEY, OFFSET, PRODUCER_ID
from deltalog.log.transactions import READ_UNCOMMITTED
from deltalog.producer.router import PartitionRouter
from deltalog.server import protocol as p
from deltalog.server.authorization import RequestAuthorizer
from deltalog.server.served_store import ServedStore
from deltalog.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

#: Kafka's ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` default.
ABORT_TIMED_OUT_INTERVAL_MS = 10_000


def fenced_for(code: int, version: int, first: int) -> int:
    """``PRODUCER_FENCED`` as ``INVALID_PRODUCER_EPOCH`` for a request older than ``first``, the version that
    introduced it (KIP-588): Kafka's ``KafkaApis`` converts it so older clients handle it as they always did."""
    return p.INVALID_PRODUCER_EPOCH if code == p.PRODUCER_FENCED and version < first else code


def holder_error(meta: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> int:
    """Kafka's code when (``producer_id``, ``producer_epoch``) does not hold the transactional id (``NONE`` if it
    does), as ``TransactionCoordinator.handleAddPartitionsToTransaction`` and ``endTransaction`` check it."""
    if meta is None or meta.producer_id != producer_id:
        return p.INVALID_PRODUCER_ID_MAPPING
    if meta.producer_epoch != producer_epoch:
        return p.PRODUCER_FENCED
    return p.NONE


class TxnApis:
    """The transaction handlers of one endpoint. ``lock`` is the endpoint's lock around store calls, ``groups`` its
    group coordinator (TxnOffsetCommit checks a member's generation there)."""

    #: The endpoint's authorizer (KafkaApis sets it): TxnOffsetCommit's READ on each topic.
    authz: RequestAuthorizer = RequestAuthorizer(None)

    def __init__(self, store: ServedStore, lock: Any, groups: Any) -> None:
        self.store = store
        self.lock = lock
        self.groups = groups
        self.coordinator = TransactionCoordinator(store.log_manager)  # stateless: the documents are the state
        #: How often the timer aborts timed-out transactions (Kafka's
        #: ``transaction.abort.timed.out.transaction.cleanup.interval.ms``); read when the timer starts.
        self.abort_timed_out_interval_ms = ABORT_TIMED_OUT_INTERVAL_MS
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    # -- the coordinator's timer -------------------------------------------------------------------------------

    def _start_timer(self) -> None:
        """Start the abort timer on the first transactional request (an endpoint that never serves one keeps no
        thread for it)."""
        if self._timer is None and not self._stop.is_set():
            self._timer = threading.Thread(target=self._abort_timed_out_loop, name="deltalog-transaction-abort",
                                           daemon=True)
            self._timer.start()

    def _abort_timed_out_loop(self) -> None:
        interval_s = self.abort_timed_out_interval_ms / 1000
        while not self._stop.wait(interval_s):
            self.abort_timed_out_transactions()

    def abort_timed_out_transactions(self) -> list[str]:
        """One tick of the timer (Kafka's ``TransactionCoordinator.abortTimedOutTransactions``): the transactional
        ids aborted (or completed, when their completer died). A failure is logged and tried again next tick."""
        try:
            with self.lock:
                done = self.coordinator.abort_timed_out_transactions(self._now())
        except DeltalogError as e:
            log.warning("aborting timed-out transactions failed (tried again in %d ms): %s",
                        self.abort_timed_out_interval_ms, e)
            return []
        if done:
            log.info("aborted or completed %d timed-out transaction(s): %s", len(done), ", ".join(done))
        return done

    def close(self) -> None:
        """Stop the timer (the endpoint is shutting down)."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join()

    def _code(self, e: DeltalogError, *, illegal_state: int = p.CONCURRENT_TRANSACTIONS) -> int:
        """Kafka's code for an error the coordinator raised: the error's own, except the two whose answer depends on
        the request (a state the transaction is not in, a compare-and-swap that lost every race: retriable)."""
        if isinstance(e, IllegalStateError):
            return illegal_state
        if isinstance(e, CommitConflictError):  # the document's compare-and-swap lost every race: retriable
            return p.CONCURRENT_TRANSACTIONS
        return e.errno

    def _now(self) -> int:
        return self.store.clock.now_ms()

    # -- InitProducerId ----------------------------------------------------------------------------------------

    def handle_init_producer_id(self, request: p.Request) -> Any:
        """Kafka's InitProducerId with a transactional id: the id's epoch bumped (a new producer id the first time,
        after expiry, or when the epoch is exhausted), every older producer of the id fenced, and whatever it left
        finished first (an ongoing transaction aborted, a decided one completed), all by
        :meth:`TransactionCoordinator.init_producer_id`. Kafka answers ``CONCURRENT_TRANSACTIONS`` while it aborts
        the old transaction and the client asks again; here the abort is done before the answer, which is the
        answer that retry gets. v3+ carries the producer's current id and epoch when it bumps its own epoch
        (KIP-360): another producer holding the id by then is ``PRODUCER_FENCED``."""
        body, version = request.body, request.api_version
        cls = request.response_class

        def answer(code: int, pid: int = -1, epoch: int = -1) -> Any:
            return cls(throttle_time_ms=0, error_code=fenced_for(code, version, 4), producer_id=pid,
                       producer_epoch=epoch)

        tid = body.transactional_id
        if not tid:
            return answer(p.INVALID_REQUEST)
        self._start_timer()
        if not 1 <= body.transaction_timeout_ms <= MAX_TIMEOUT_MS:  # the coordinator's transaction.max.timeout.ms
            return answer(p.INVALID_TRANSACTION_TIMEOUT)
        expected = None
        if version >= 3 and body.producer_id >= 0:
            expected = (body.producer_id, body.producer_epoch)
        with self.lock:
            try:
                pid, epoch = self.coordinator.init_producer_id(tid, body.transaction_timeout_ms, self._now(),
                                                               expected=expected)
            except InvalidConfigError:
                return answer(p.INVALID_TRANSACTION_TIMEOUT)
            except DeltalogError as e:
                return answer(self._code(e))
        return answer(p.NONE, pid, epoch)

    # -- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------------------

    def _add(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> int:
        """Add ``partitions`` to the id's transaction (starting it): Kafka's
        ``TransactionCoordinator.handleAddPartitionsToTransaction``."""
        try:
            meta = self.coordinator.describe(tid)
            code = holder_error(meta, pid, epoch)
            if code != p.NONE:
                return code
            assert meta is not None
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                return p.CONCURRENT_TRANSACTIONS
            self.coordinator.add_partitions(tid, pid, epoch, partitions, self._now())
        except DeltalogError as e:
            return self._code(e)
        return p.NONE

    def _exists(self, topic: str, partition: int) -> bool:
        try:
            return partition in self.store.partitions(topic)
        except UnknownTopicOrPartitionError:
            return False

    def handle_add_partitions_to_txn(self, request: p.Request) -> Any:
        """Kafka's AddPartitionsToTxn (the client's versions, up to v3): every partition is added or none. A
        partition that does not exist is ``UNKNOWN_TOPIC_OR_PARTITION`` and the others ``OPERATION_NOT_ATTEMPTED``,
        as ``KafkaApis.handleAddPartitionsToTxnRequest`` answers; else the coordinator's one code for them all."""
        body, version = request.body, request.api_version
        cls = request.response_class
        topic_cls = cls.AddPartitionsToTxnTopicResult
        part_cls = topic_cls.AddPartitionsToTxnPartitionResult
        wanted = [(t.name, q) for t in body.v3_and_below_topics for q in t.partitions]
        self._start_timer()
        with self.lock:
            missing = {tp for tp in wanted if not self._exists(*tp)}
            if missing:
                codes = {tp: p.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else p.OPERATION_NOT_ATTEMPTED
                         for tp in wanted}
            else:
                code = self._add(body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                 body.v3_and_below_producer_epoch, list(dict.fromkeys(wanted)))
                codes = dict.fromkeys(wanted, fenced_for(code, version, 2))
        return cls(throttle_time_ms=0, results_by_topic_v3_and_below=[
            topic_cls(name=t.name, results_by_partition=[part_cls(partition_index=q, partition_error_code=codes[
                (t.name, q)]) for q in t.partitions]) for t in body.v3_and_below_topics])

    def handle_add_offsets_to_txn(self, request: p.Request) -> Any:
        """Kafka's AddOffsetsToTxn: the group's partition of ``__consumer_offsets`` joins the transaction (the
        topic is made on first use), so the offsets TxnOffsetCommit writes there are committed or aborted with it."""
        body, version = request.body, request.api_version
        cls = request.response_class
        with self.lock:
            try:
                offsets_topic = self.store.offsets_topic
                partition = offsets_topic.partition_for(body.group_id, create=True)
            except DeltalogError as e:
                return cls(throttle_time_ms=0, error_code=e.errno)
            code = self._add(body.transactional_id, body.producer_id, body.producer_epoch,
                             [(OFFSETS_TOPIC, partition)])
        return cls(throttle_time_ms=0, error_code=fenced_for(code, version, 2))

    # -- Produce's check, TxnOffsetCommit ----------------------------------------------------------------------

    def verify(self, transactional_id: str | None, partitions: Iterable[tuple[str, int]], producer_id: int,
               producer_epoch: int) -> tuple[int, str | None]:
        """(Kafka's code, message) when a transactional batch of (``producer_id``, ``producer_epoch``) may not be
        appended to ``partitions``; (``NONE``, None) when it may: the id is held by that producer, its
        transaction is ongoing and has added every one of them (Kafka's
        ``TransactionCoordinator.handleVerifyPartitionsInTransaction``, with the codes
        ``AddPartitionsToTxnManager`` hands a Produce or TxnOffsetCommit request)."""
        if not transactional_id:
            return p.INVALID_REQUEST, "a transactional record batch needs the request's transactional_id"
        try:
            meta = self.coordinator.describe(transactional_id)
        except DeltalogError as e:
            return e.errno, str(e)
        code = holder_error(meta, producer_id, producer_epoch)
        if code == p.INVALID_PRODUCER_ID_MAPPING:
            return code, (f"transactional id {transactional_id!r} is not held by producer id {producer_id}: call "
                          "init_transactions()")
        assert meta is not None
        if code == p.PRODUCER_FENCED:
            return p.INVALID_PRODUCER_EPOCH, (
                f"producer id {producer_id} epoch {producer_epoch} is fenced: transactional id {transactional_id!r} "
                f"is at epoch {meta.producer_epoch}")
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return p.CONCURRENT_TRANSACTIONS, f"the transaction of {transactional_id!r} is {meta.state}"
        missing = [tp for tp in partitions if meta.state != ONGOING or tp not in meta.partitions]
        if missing:
            return p.INVALID_TXN_STATE, (
                f"{', '.join(f'{t}-{q}' for t, q in missing)} not added to the transaction of {transactional_id!r} "
                f"({meta.state}): AddPartitionsToTxn (or AddOffsetsToTxn) comes first")
        return p.NONE, None

    def producer_batch(self, producer_id: int, producer_epoch: int, base_sequence: int, rows: Any) -> ProducerBatch:
        """The :class:`ProducerBatch` of a transactional batch, as the Python producer's ``send`` inside a
        transaction makes it."""
        return ProducerBatch(producer_id, producer_epoch, base_sequence, transactional=True, in_transaction=True,
                             digest=batch_digest(rows))

    def handle_txn_offset_commit(self, request: p.Request) -> Any:
        """Kafka's TxnOffsetCommit (``GroupCoordinator.handleTxnCommitOffsets``): the group's offsets appended to
        its partition of ``__consumer_offsets`` as records of the producer's transaction, exactly as
        :meth:`deltalog.producer.kafka_producer.KafkaProducer.send_offsets_to_transaction` appends them:
        the group sees them once EndTxn commits (its committed offsets are read ``read_committed``). A member id
        or generation given (v3+) is checked against the group's; a commit with neither is taken, as Kafka's
        coordinator takes one from a producer that knows no group metadata. A partition that does not exist is
        ``UNKNOWN_TOPIC_OR_PARTITION``; the others are committed."""
        body, version = request.body, request.api_version
        cls = request.response_class
        topic_cls = cls.TxnOffsetCommitResponseTopic
        part_cls = topic_cls.TxnOffsetCommitResponsePartition
        member = (body.member_id or "") if version >= 3 else ""
        generation = body.generation_id if version >= 3 else -1
        codes: dict[tuple[str, int], int] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        with self.lock:
            for t in body.topics:
                refused = self.authz.topic_code(request, OP.READ, t.name)
                for q in t.partitions:
                    if refused or not self._exists(t.name, q.partition_index):
                        codes[(t.name, q.partition_index)] = refused or p.UNKNOWN_TOPIC_OR_PARTITION
                        continue
                    offsets[TopicPartition(t.name, q.partition_index)] = OffsetAndMetadata(
                        q.committed_offset, q.committed_metadata or "",
                        q.committed_leader_epoch if version >= 2 else -1)
            code = p.NONE
            if member or generation >= 0:
                code = self.groups.check_commit(body.group_id, member, generation)
            if code == p.NONE and offsets:
                code = self._commit_offsets(body.transactional_id, body.group_id, body.producer_id,
                                            body.producer_epoch, offsets)
        for tp in offsets:
            codes[(tp.topic, tp.partition)] = code
        return cls(throttle_time_ms=0, topics=[topic_cls(name=t.name, partitions=[part_cls(
            partition_index=q.partition_index, error_code=codes[(t.name, q.partition_index)]) for q in t.partitions])
            for t in body.topics])

    def _commit_offsets(self, tid: str, group_id: str, pid: int, epoch: int,
                        offsets: dict[TopicPartition, OffsetAndMetadata]) -> int:
        try:
            now = self._now()
            batch = self.store.offsets_topic.commit_batch(group_id, offsets, now, allow_negative=True)
            code, _ = self.verify(tid, [(batch.topic, batch.partition)], pid, epoch)
            if code != p.NONE:
                return code
            rows, _ = PartitionRouter(self.store.log_manager).route(batch.topic, batch.records, now,
                                                             partition=batch.partition)
            log = self.store.log(batch.topic, batch.partition)
            log.append(rows, now, producer=self.producer_batch(pid, epoch, next_sequence(log, pid, epoch), rows))
        except DeltalogError as e:
            code = self._code(e)
            return p.INVALID_PRODUCER_EPOCH if code == p.PRODUCER_FENCED else code
        return p.NONE

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """The partitions whose offsets ``group_id`` has in a transaction still open (Kafka's
        ``GroupMetadata.hasPendingOffsetCommitsForTopicPartition``): an OffsetFetch with ``require_stable``
        (KIP-447, what read_committed consumers send) gets ``UNSTABLE_OFFSET_COMMIT`` for them and asks again, so a
        consumer taking over never starts from an offset the open transaction is about to replace. Read from the
        group's partition of ``__consumer_offsets`` above its last stable offset: nothing is kept in memory."""
        n = self.store.offsets_topic.num_partitions()
        if n is None:
            return set()
        log = self.store.log(OFFSETS_TOPIC, partition_for(validate_group_id(group_id), n))
        index = log.txn_index()
        if not index.ongoing:
            return set()
        _, index, rows = log.read_rows(index.last_stable_offset, None, READ_UNCOMMITTED)
        pending = set()
        for offset, pid, key in zip(*(rows.column(c).to_pylist() for c in (OFFSET, PRODUCER_ID, KEY)), strict=True):
            first = index.ongoing.get(pid) if pid is not None else None
            if first is None or offset < first or key is None:
                continue
            try:
                k = decode_key(key)
            except ValueError:  # not a key of this format: Kafka's loader skips what it cannot read, and so does replay
                continue
            if k is not None and k.group == group_id:
                pending.add(k.topic_partition)
        return pending

    # -- EndTxn ------------------------------------------------------------------------------------------------

    def handle_end_txn(self, request: p.Request) -> Any:
        """Kafka's EndTxn (``TransactionCoordinator.endTransaction``, transaction version 1): commit or abort the
        ongoing transaction through :meth:`TransactionCoordinator.end_transaction` (the decision, a marker in
        every partition it added, Complete*), answered once the markers are written. Ending the same way again
        after it completed is ``NONE``; the other way, or with no transaction begun, ``INVALID_TXN_STATE``. A
        decided transaction whose completer died is completed (Kafka's answer there is
        ``CONCURRENT_TRANSACTIONS`` until its coordinator has done it: the retry then gets ``NONE``)."""
        body, version = request.body, request.api_version
        cls = request.response_class
        commit = bool(body.committed)
        self._start_timer()
        with self.lock:
            code = self._end(body.transactional_id, body.producer_id, body.producer_epoch, commit)
        return cls(throttle_time_ms=0, error_code=fenced_for(code, version, 2))

    def _end(self, tid: str, pid: int, epoch: int, commit: bool) -> int:
        try:
            meta = self.coordinator.describe(tid)
            code = holder_error(meta, pid, epoch)
            if code != p.NONE:
                return code
            assert meta is not None
            done, prepared = (COMPLETE_COMMIT, PREPARE_COMMIT) if commit else (COMPLETE_ABORT, PREPARE_ABORT)
            if meta.state == done:
                return p.NONE
            if meta.state not in (ONGOING, prepared):
                return p.INVALID_TXN_STATE
            self.coordinator.end_transaction(tid, pid, epoch, commit, self._now())
        except DeltalogError as e:
            return self._code(e, illegal_state=p.INVALID_TXN_STATE)
        return p.NONE


def next_sequence(log: Any, producer_id: int, producer_epoch: int) -> int:
    """The sequence the producer's next batch to ``log`` carries, from the partition's producer state: a
    TxnOffsetCommit carries none (Kafka's coordinator writes the offsets itself), while the Python producer numbers
    its batches to ``__consumer_offsets`` like any other; the partition's state is what its counter holds."""
    log.head()  # the table at its latest version
    entry = ProducerStateEntry.read(log.table(refresh=False).transaction_version, producer_id)
    return entry.next_sequence if entry is not None and entry.producer_epoch == producer_epoch else 0
