"""Kafka's producer object with ``enable_idempotence`` and ``transactional_id``: a retried batch lands once.

``store.producer(**configs)`` takes Kafka's producer configs by kafka-python's names (``enable_idempotence``,
``transactional_id``) or Kafka's dotted ones (``enable.idempotence``); see :data:`DEFAULTS`. An idempotent
producer has a producer id (store-wide unique) and an epoch; each batch it appends to a partition carries the
next sequence number for that partition, and the partition keeps the producer's (epoch, next sequence, last
batch) in its Delta log, committed with the batch (:mod:`deltalog.log.producer_state`). So:

* a batch retried after an error that left its commit in doubt (``retries`` times inside :meth:`send`, or by
  the application calling :meth:`send` again with the same records after :meth:`send` raised) is acknowledged
  with the offsets it got the first time and is not appended twice;
* with a ``transactional_id``, :meth:`init_transactions` bumps the id's epoch: an older producer with that id is
  fenced (:class:`~deltalog.errors.ProducerFencedError` on its next send), and the new producer's first batch
  to a partition, if it has the same records (keys, values, headers) as the last batch an older epoch
  committed there, is recognised as the re-send of that batch (its acknowledgement was lost with the old
  process) and acknowledged with the original offsets. That is what "retried by a new process" means here.

**Transactions** (Kafka's names): ``init_transactions()``, then ``begin_transaction()``, ``send(...)`` any
number of times to any topics and partitions, and ``commit_transaction()`` or ``abort_transaction()``;
``send_offsets_to_transaction(offsets, group_id)`` commits a consumer group's offsets inside the transaction.
A send inside a transaction appends its records at once (``read_uncommitted`` readers see them), each carrying
the producer's id and epoch; the commit or abort is Kafka's two-phase protocol
(:mod:`deltalog.coordinator.transaction.transaction_coordinator`): ``read_committed`` readers see all of the transaction's records
or none. A transaction left open by a dead process is aborted by the next ``init_transactions()`` of its id
or, after ``transaction_timeout_ms``, by the cleaner's cycle. Deliberate difference: a producer with a
``transactional_id`` may still ``send`` outside a transaction (Kafka refuses); such sends are idempotent, not
transactional, and they are what the re-send recognition above applies to (a batch inside a transaction is
never taken for an older epoch's: that epoch's transaction was aborted).

A :meth:`send` returns once every partition it touched has committed (one Delta commit per partition), so
:meth:`flush` has nothing to wait for; it exists for Kafka's shape.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltalog.coordinator.group.offsets_topic import OffsetsTopic
from deltalog.coordinator.transaction import producer_ids
from deltalog.coordinator.transaction.transaction_coordinator import DEAD, TransactionCoordinator, TransactionMetadata
from deltalog.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidPidMappingError,
    InvalidTypeError,
    ProducerFencedError,
    StorageError,
    UnknownProducerIdError,
    shown,
)
from deltalog.ignored_configs import PRODUCER_IGNORED, config_key, unknown_config_message
from deltalog.log import producer_state
from deltalog.log.producer_state import ProducerBatch, batch_digest
from deltalog.log.record import Record
from deltalog.producer.client_shapes import SentFuture, deliver, is_batch, one_record
from deltalog.producer.router import PartitionRouter, ProduceResult
from deltalog.structs import TopicPartition

if TYPE_CHECKING:
    from deltalog.log.log_manager import LogManager

#: Kafka's producer configs deltalog takes, with Kafka's defaults (idempotence is on by default since Kafka 3.0).
DEFAULTS: dict[str, Any] = {
    "enable_idempotence": True,
    "transactional_id": None,
    "acks": "all",
    "retries": 5,
    "retry_backoff_ms": 100,
    "transaction_timeout_ms": 60_000,
    "client_id": "deltalog-producer",
    "key_serializer": None,
    "value_serializer": None,
}
#: Kafka client configs about the network and the client's send buffer, which have nothing to act on here (every
#: send is one Delta commit per partition, made before it returns): accepted, so code written for Kafka runs
#: unchanged, and ignored (the consumer accepts the same network settings; see :mod:`deltalog.ignored_configs`).
NO_EFFECT = PRODUCER_IGNORED
#: acks values that mean "committed": every append is a Delta commit, which is what Kafka's ``acks=all`` promises.
ACKS_ALL = ("all", -1, "-1")


def _configs(given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(DEFAULTS)
    for name, value in given.items():
        key = config_key(name)
        if key in NO_EFFECT:
            continue
        if key not in DEFAULTS:
            raise InvalidConfigError(unknown_config_message("producer", name, DEFAULTS))
        out[key] = value
    for key in ("key_serializer", "value_serializer"):
        if out[key] is not None and not (callable(out[key]) or callable(getattr(out[key], "serialize", None))):
            raise InvalidConfigError(f"{key} must be a callable (value -> bytes), an object with "
                                     f"serialize(topic, value), or None, not {shown(out[key])}")
    if not isinstance(out["enable_idempotence"], bool):
        raise InvalidConfigError(f"enable_idempotence must be True or False, not {shown(out['enable_idempotence'])}")
    tid = out["transactional_id"]
    if tid is not None and (not isinstance(tid, str) or not tid):
        raise InvalidConfigError(f"transactional_id must be a non-empty string or None, not {shown(tid)}")
    if tid is not None and not out["enable_idempotence"]:
        raise InvalidConfigError("Cannot set a transactional.id without also enabling idempotence: allowed: "
                                 "enable_idempotence=True (the default) with a transactional_id, or no transactional_id")
    if out["acks"] not in ACKS_ALL + (0, 1, "0", "1"):
        raise InvalidConfigError(f"acks must be one of 'all', -1, 0, 1, not {shown(out['acks'])}")
    if out["enable_idempotence"] and out["acks"] not in ACKS_ALL:
        raise InvalidConfigError(f"Must set acks to all in order to use the idempotent producer (acks="
                                 f"{out['acks']!r}); allowed with enable_idempotence=True: acks='all' or -1")
    for key, low in (("retries", 0), ("retry_backoff_ms", 0), ("transaction_timeout_ms", 1)):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InvalidConfigError(f"{key} must be an integer >= {low}, not {shown(v)}")
    if not isinstance(out["client_id"], str):
        raise InvalidConfigError(f"client_id must be a string, not {shown(out['client_id'])}")
    return out


def _serialize(serializer: Any, topic: str, data: Any) -> Any:
    """kafka-python's ``KafkaProducer._serialize``: ``serializer.serialize(topic, data)`` for a ``Serializer``, else
    ``serializer(data)``; called for None too, as kafka-python calls it (a serializer decides what None becomes)."""
    if serializer is None:
        return data
    method = getattr(serializer, "serialize", None)
    return method(topic, data) if callable(method) else serializer(data)


class KafkaProducer:
    """Kafka's producer over one store (``store.producer(...)``): ``init_transactions``, ``send``/``produce``,
    ``flush``, ``close``. See the module docstring for what idempotence guarantees here."""

    def __init__(self, logs: LogManager, **configs: Any) -> None:
        self.config = _configs(configs)
        self.logs = logs
        self._router = PartitionRouter(logs)
        self.transactional_id: str | None = self.config["transactional_id"]
        self.producer_id: int | None = None
        self.producer_epoch: int | None = None
        self._sequences: dict[tuple[str, int], int] = {}  # (topic, partition) -> next sequence, as acknowledged
        self._closed = False
        self._coordinator = TransactionCoordinator(logs)
        #: The partitions the current transaction has added (None: no transaction begun).
        self._txn_partitions: set[tuple[str, int]] | None = None
        self._txn_failed: BaseException | None = None

    @property
    def idempotent(self) -> bool:
        return self.config["enable_idempotence"]

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init_transactions(self, timeout: float | None = None) -> None:
        """Take over the transactional id: bump its epoch (fencing every older producer with the id) and start
        every partition's sequence at 0 (Kafka's ``initTransactions``; ``timeout`` is confluent-kafka's
        argument, unused: the call does not wait on a broker).

        Once per producer, as in Kafka, whose ``TransactionManager`` allows the move to ``INITIALIZING`` only from
        ``UNINITIALIZED``: a second call raises :class:`~deltalog.errors.IllegalStateError` (the Java producer
        throws "Invalid transition attempted from state READY to state INITIALIZING", an ``IllegalStateException``,
        a ``KafkaException`` in older versions; kafka-python hands back the first call's result) and changes
        nothing. It would otherwise bump the epoch again, abort this producer's own open transaction and fence
        the producer itself. The one exception is a transactional id that expired
        (``transactional.id.expiration.ms``; its sends raised :class:`~deltalog.errors.InvalidPidMappingError`):
        the id no longer maps to this producer, and ``init_transactions()`` gets it a new producer id."""
        self._check_open("init_transactions")
        if self.transactional_id is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional producer: set "
                                    "transactional_id to use init_transactions()")
        if self.producer_id is not None and not self._id_expired():
            state = "IN_TRANSACTION" if self._txn_partitions is not None else "READY"
            raise IllegalStateError(
                f"TransactionalId {self.transactional_id!r}: Invalid transition attempted from state {state} to "
                f"state INITIALIZING: init_transactions() was already called on this producer (producer id "
                f"{self.producer_id}, epoch {self.producer_epoch}); call it once per producer, and to start over "
                "close this producer and create a new one with the same transactional_id")
        self.producer_id, self.producer_epoch = self._coordinator.init_producer_id(
            self.transactional_id, self.config["transaction_timeout_ms"], self.logs.clock.now_ms())
        self._sequences.clear()
        self._txn_partitions = None
        self._txn_failed = None

    # -- transactions (Kafka's names) ----------------------------------------------------------------------

    def begin_transaction(self) -> None:
        """Start a transaction: every record sent until :meth:`commit_transaction` or :meth:`abort_transaction`
        becomes visible to ``read_committed`` readers together with the others, or never."""
        self._check_transactional("begin_transaction")
        if self._txn_partitions is not None:
            raise IllegalStateError("TransactionalId " + repr(self.transactional_id) + ": Invalid transition "
                                    "attempted from state IN_TRANSACTION to state IN_TRANSACTION (a transaction "
                                    "is already in progress: commit or abort it first)")
        self._txn_partitions = set()
        self._txn_failed = None

    @property
    def in_transaction(self) -> bool:
        return self._txn_partitions is not None

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Commit the current transaction: decide, write a COMMIT marker into each of its partitions, complete
        (Kafka's two-phase commit). Raises if a send of the transaction failed: abort it then."""
        self._check_in_transaction("commit_transaction")
        if self._txn_failed is not None:
            raise IllegalStateError(f"Cannot commit transaction: a send of it failed ({self._txn_failed}); call "
                                    "abort_transaction()")
        if self._txn_partitions:
            self._coordinator.end_transaction(self.transactional_id, self.producer_id, self.producer_epoch, True,
                                              self.logs.clock.now_ms())
        self._txn_partitions = None

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the current transaction: its records stay in the log (``read_uncommitted`` readers saw them)
        but ``read_committed`` readers never return them, and the cleaner drops them on its next pass."""
        self._check_in_transaction("abort_transaction")
        failed = self._txn_failed
        if self._txn_partitions:
            self._coordinator.end_transaction(self.transactional_id, self.producer_id, self.producer_epoch, False,
                                              self.logs.clock.now_ms())
        self._txn_partitions = None
        self._txn_failed = None
        if failed is not None and not isinstance(failed, ProducerFencedError):
            # A failed send's batches may have landed in some partitions under sequences this producer did not
            # count: bump the epoch so every partition's sequence starts again at 0 (Kafka's producer after an
            # abortable error, KIP-360), instead of every later send there failing as out of order.
            self.producer_id, self.producer_epoch = self._coordinator.init_producer_id(
                self.transactional_id, self.config["transaction_timeout_ms"], self.logs.clock.now_ms())
            self._sequences.clear()

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any] | Sequence[Any], consumer_group_id: Any,
                                    timeout: float | None = None) -> None:
        """Commit ``offsets`` (``{TopicPartition: OffsetAndMetadata or offset}``, or confluent-kafka's list of
        positions: objects with ``topic``, ``partition`` and ``offset``) for a consumer group as part of the
        current transaction (read-process-write exactly once): they become the group's committed offsets if and
        only if the transaction commits. ``consumer_group_id`` is the group id or a consumer's
        ``group_metadata()``/``consumer_group_metadata()``."""
        self._check_in_transaction("send_offsets_to_transaction")
        if not isinstance(offsets, Mapping):
            offsets = {TopicPartition(p.topic, p.partition): p.offset for p in offsets}
        group_id = getattr(consumer_group_id, "group_id", consumer_group_id)
        batch = OffsetsTopic(self.logs).commit_batch(group_id, offsets, self.logs.clock.now_ms())
        if batch.records.num_rows:
            self.send(batch.topic, batch.records, partition=batch.partition)

    def send(self, topic: str, records: Any = None, *, partition: int | None = None, value: Any = None,
             key: Any = None, headers: Any = None, timestamp_ms: int | None = None) -> ProduceResult:
        """Append ``records`` (partitioned as ``store.produce`` does) and return each record's metadata, in input
        order. A call that raises acknowledged nothing: sending the same records again is a retry (partitions
        that had committed return their original offsets; the others append).

        ``records`` is a batch (Records, one Record, an Arrow table). kafka-python's one-record form works too:
        ``send(topic, value=..., key=..., headers=[(name, bytes)], partition=..., timestamp_ms=...)`` (``value``
        may be the second positional argument); it returns a done future whose ``get()`` is the
        ``RecordMetadata`` (see :mod:`deltalog.producer.client_shapes`)."""
        if records is not None and is_batch(records):
            if value is not None or key is not None or headers is not None or timestamp_ms is not None:
                raise InvalidTypeError("send() takes either a batch of records or one record's "
                                       "value/key/headers/timestamp_ms, not both")
            return self._send(topic, records, partition)
        if records is None and value is None and key is None:
            raise InvalidTypeError("send() needs records, or at least one of key and value (kafka-python: "
                                   "'Need at least one: key or value')")
        value = records if records is not None else value
        key, value = (_serialize(self.config["key_serializer"], topic, key),
                      _serialize(self.config["value_serializer"], topic, value))
        record = one_record(value, key, headers, timestamp_ms)
        return SentFuture.of(self._send(topic, [record], partition))

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int | None = -1,
                on_delivery: Callable[[Any, Any], Any] | None = None, timestamp: int | None = 0,
                headers: Any = None, *, callback: Callable[[Any, Any], Any] | None = None,
                records: Any = None) -> ProduceResult:
        """confluent-kafka's ``produce``: one record (``partition=-1``: the partitioner chooses; ``timestamp=0``:
        now), its delivery callback ``on_delivery(err, msg)`` (or ``callback``) called before this returns, since
        the record has committed. A batch as ``value`` (Records, an Arrow table) is sent as :meth:`send` sends it.
        Returns the records' metadata (confluent's returns None)."""
        part = None if partition is None or partition < 0 else partition
        report = on_delivery if on_delivery is not None else callback
        if records is not None:  # produce(topic, records=...): the batch form, as when produce was send's alias
            if value is not None:
                raise InvalidTypeError("produce() takes records= or value=, not both")
            value = records
        if is_batch(value):
            if key is not None or headers is not None or timestamp:
                raise InvalidTypeError("produce() takes either a batch of records or one record's "
                                       "value/key/headers/timestamp, not both")
            batch = list(value) if isinstance(value, Sequence) else None
            result = self._send(topic, value, part)
            if report is not None and batch is not None and all(isinstance(r, Record) for r in batch):
                deliver(report, batch, result)
            return result
        record = one_record(value, key, headers, timestamp)
        result = self._send(topic, [record], part)
        deliver(report, [record], result)
        return result

    def poll(self, timeout: float | None = None) -> int:
        """confluent-kafka's ``poll``: serves delivery callbacks; there are none pending (each was called when its
        record committed), so it returns 0 at once."""
        self._check_open("poll")
        return 0

    def _send(self, topic: str, records: Sequence[Record] | Record | pa.Table | pa.RecordBatch,
              partition: int | None) -> ProduceResult:
        self._check_open("send")
        now_ms = self.logs.clock.now_ms()
        if not self.idempotent:
            return self._router.send(topic, records, now_ms, partition=partition)
        if self.producer_id is None:
            if self.transactional_id is not None:
                raise IllegalStateError("Cannot perform a 'send' before completing a call to init_transactions "
                                        "when transactions are enabled (transactional_id is set)")
            self.producer_id = producer_ids.allocate(self.logs.storage, self.logs)
            self.producer_epoch = 0
        sent: dict[int, int] = {}

        def batch_for(p: int, rows: pa.Table) -> ProducerBatch:
            sent[p] = rows.num_rows
            return ProducerBatch(self.producer_id, self.producer_epoch, self._sequences.get((topic, p), 0),
                                 transactional=self.transactional_id is not None, digest=batch_digest(rows),
                                 in_transaction=self._txn_partitions is not None)

        rows, targets = self._router.route(topic, records, now_ms, partition=partition)  # once: retries keep it
        # A producer whose id was taken over is fenced before it writes anything: by the coordinator's
        # compare-and-swap when the transaction gains partitions (it checks the holder), else by one read.
        if not (self._txn_partitions is not None and self._add_partitions(topic, targets, now_ms)):
            self._check_not_fenced()
        try:
            result = self._send_batches(topic, rows, targets, now_ms, batch_for)
        except Exception as e:
            # Kafka's abortable error: some partitions' batches may have landed, so the transaction can only abort
            # (commitTransaction throws the failed send's error), and the abort bumps the epoch (KIP-360)
            if self._txn_partitions is not None:
                self._txn_failed = e
            raise
        for p, n in sent.items():  # the whole call is acknowledged: its partitions move on together
            key = (topic, p)
            self._sequences[key] = self._sequences.get(key, 0) + n
        return result

    def _send_batches(self, topic: str, rows: pa.Table, targets: Any, now_ms: int,
                      batch_for: Callable[[int, pa.Table], ProducerBatch]) -> ProduceResult:
        """The routed batches' appends, with the retries of a batch whose outcome the storage left unknown and the
        restart of a sequence a partition forgot (KIP-360)."""
        attempt = 0
        restarted: set[tuple[str, int]] = set()
        while True:
            try:
                return self._router.send_routed(topic, rows, targets, now_ms, batches=batch_for)
            except UnknownProducerIdError as e:
                # The partition no longer knows this producer (its state expired after producer.id.expiration.ms):
                # start its sequence again at 0, as Kafka's producer does (KIP-360), once per partition. Partitions
                # that committed in the failed attempt acknowledge the retry with their original offsets.
                key = (e.topic, e.partition)
                if e.topic != topic or key in restarted or self._sequences.get(key, 0) == 0:
                    raise
                restarted.add(key)
                self._sequences[key] = 0
            except (StorageError, OSError):  # the commit may or may not have happened: retry the same batches
                if attempt >= self.config["retries"]:
                    raise
                attempt += 1
                time.sleep(self.config["retry_backoff_ms"] / 1000)

    def flush(self, timeout: float | None = None) -> int:
        """Nothing is buffered: every :meth:`send` has committed when it returns (Kafka's ``flush`` shape; 0
        records left in the queue, as confluent-kafka's ``flush`` counts them)."""
        self._check_open("flush")
        return 0

    def close(self, timeout: float | None = None) -> None:
        """Close the producer; a transaction still in progress is aborted (as Kafka's ``close`` does)."""
        if self._txn_partitions and not self._closed:
            try:
                self.abort_transaction()
            except (ProducerFencedError, InvalidPidMappingError):
                pass  # a newer producer took the id over (it aborts what this one left), or the id expired
        self._closed = True

    def sequence(self, topic: str, partition: int) -> int:
        """The sequence number the next batch to ``topic``-``partition`` will carry."""
        return self._sequences.get((topic, partition), 0)

    def _add_partitions(self, topic: str, targets: Any, now_ms: int) -> bool:
        """Tell the coordinator which partitions the transaction is about to write (before writing them). True
        if it was told (which checked this producer still holds the id), False if it already knew them all."""
        import numpy as np  # targets is the router's array of partition numbers

        assert self._txn_partitions is not None
        new = [(topic, int(p)) for p in np.unique(np.asarray(targets)) if (topic, int(p)) not in self._txn_partitions]
        if new:
            try:
                self._coordinator.add_partitions(self.transactional_id, self.producer_id, self.producer_epoch, new,
                                                 now_ms)
            except ProducerFencedError:
                self._txn_failed = sys.exc_info()[1]
                raise
            self._txn_partitions.update(new)
        return bool(new)

    def _check_transactional(self, what: str) -> None:
        self._check_open(what)
        if self.transactional_id is None:
            raise IllegalStateError(f"Transactional method invoked on a non-transactional producer: set "
                                    f"transactional_id to use {what}()")
        if self.producer_id is None:
            raise IllegalStateError(f"Cannot call {what}() before init_transactions()")

    def _check_in_transaction(self, what: str) -> None:
        self._check_transactional(what)
        if self._txn_partitions is None:
            raise IllegalStateError(f"Cannot call {what}() when no transaction is in progress: call "
                                    "begin_transaction() first")

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise IllegalStateError(f"Cannot call {what}() after the producer is closed")

    def _id_expired(self) -> bool:
        """Whether this producer's transactional id was expired (marked Dead) since it was initialised."""
        assert self.transactional_id is not None
        doc = self.logs.storage.read_json(producer_state.transactional_location(self.logs.storage,
                                                                                self.transactional_id))
        return doc is not None and doc.get("state") == DEAD

    def _check_not_fenced(self) -> None:
        """A transactional producer whose id was taken over is fenced before it writes anything (one small read;
        the partitions fence it too, once the newer epoch has written to them)."""
        if self.transactional_id is None:
            return
        location = producer_state.transactional_location(self.logs.storage, self.transactional_id)
        found = self.logs.storage.read_versioned(location)
        meta = None if found is None else TransactionMetadata.parse(found.data, location, self.transactional_id)
        if meta is not None and meta.state == DEAD:
            if self._txn_partitions is None:
                return  # an idempotent send outside a transaction: its producer id still holds in the partitions
            raise InvalidPidMappingError(
                f"transactional id {self.transactional_id!r} expired (transactional.id.expiration.ms) and no longer "
                f"maps to producer id {self.producer_id}: call init_transactions() again")
        now = None if meta is None else (meta.producer_id, meta.producer_epoch)
        if now is not None and now != (self.producer_id, self.producer_epoch):
            raise ProducerFencedError(
                f"There is a newer producer with the same transactional_id {self.transactional_id!r} "
                f"(producer id {now[0]}, epoch {now[1]}) which fences producer id {self.producer_id} "
                f"epoch {self.producer_epoch}: close this producer")

    def __repr__(self) -> str:
        return (f"KafkaProducer(producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
                f"transactional_id={self.transactional_id!r})")
