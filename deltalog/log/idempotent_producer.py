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

A :meth:`send` returns once every partition it touched has committed (one Delta commit per partition), so
:meth:`flush` has nothing to wait for; it exists for Kafka's shape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltalog.errors import (
    IllegalStateError,
    InvalidConfigError,
    ProducerFencedError,
    StorageError,
    shown,
)
from deltalog.log import producer_state
from deltalog.log.producer import Producer, ProduceResult
from deltalog.log.producer_state import ProducerBatch, batch_digest

if TYPE_CHECKING:
    from deltalog.log.log_manager import LogManager
    from deltalog.log.record import Record

#: Kafka's producer configs deltalog takes, with Kafka's defaults (idempotence is on by default since Kafka 3.0).
DEFAULTS: dict[str, Any] = {
    "enable_idempotence": True,
    "transactional_id": None,
    "acks": "all",
    "retries": 5,
    "retry_backoff_ms": 100,
    "transaction_timeout_ms": 60_000,
    "client_id": "deltalog-producer",
}
#: acks values that mean "committed": every append is a Delta commit, which is what Kafka's ``acks=all`` promises.
ACKS_ALL = ("all", -1, "-1")


def _configs(given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(DEFAULTS)
    for name, value in given.items():
        key = name.replace(".", "_") if isinstance(name, str) else name
        if key not in DEFAULTS:
            raise InvalidConfigError(f"{name!r} is not a producer config deltalog knows; known: "
                                     f"{', '.join(sorted(DEFAULTS))} (or Kafka's dotted names, e.g. enable.idempotence)")
        out[key] = value
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


class KafkaProducer:
    """Kafka's producer over one store (``store.producer(...)``): ``init_transactions``, ``send``/``produce``,
    ``flush``, ``close``. See the module docstring for what idempotence guarantees here."""

    def __init__(self, logs: LogManager, **configs: Any) -> None:
        self.config = _configs(configs)
        self.logs = logs
        self._router = Producer(logs)
        self.transactional_id: str | None = self.config["transactional_id"]
        self.producer_id: int | None = None
        self.producer_epoch: int | None = None
        self._sequences: dict[tuple[str, int], int] = {}  # (topic, partition) -> next sequence, as acknowledged
        self._closed = False

    @property
    def idempotent(self) -> bool:
        return self.config["enable_idempotence"]

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init_transactions(self) -> None:
        """Take over the transactional id: bump its epoch (fencing every older producer with the id) and start
        every partition's sequence at 0 (Kafka's ``initTransactions``)."""
        self._check_open("init_transactions")
        if self.transactional_id is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional producer: set "
                                    "transactional_id to use init_transactions()")
        self.producer_id, self.producer_epoch = producer_state.init_producer_id(self.logs.storage,
                                                                                self.transactional_id)
        self._sequences.clear()

    def send(self, topic: str, records: Sequence[Record] | Record | pa.Table | pa.RecordBatch, *,
             partition: int | None = None) -> ProduceResult:
        """Append ``records`` (partitioned as ``store.produce`` does) and return each record's metadata, in input
        order. A call that raises acknowledged nothing: sending the same records again is a retry (partitions
        that had committed return their original offsets; the others append)."""
        self._check_open("send")
        now_ms = self.logs.clock.now_ms()
        if not self.idempotent:
            return self._router.send(topic, records, now_ms, partition=partition)
        if self.producer_id is None:
            if self.transactional_id is not None:
                raise IllegalStateError("Cannot perform a 'send' before completing a call to init_transactions "
                                        "when transactions are enabled (transactional_id is set)")
            self.producer_id, self.producer_epoch = producer_state.allocate_producer_id(self.logs.storage), 0
        self._check_not_fenced()
        sent: dict[int, int] = {}

        def batch_for(p: int, rows: pa.Table) -> ProducerBatch:
            sent[p] = rows.num_rows
            return ProducerBatch(self.producer_id, self.producer_epoch, self._sequences.get((topic, p), 0),
                                 transactional=self.transactional_id is not None, digest=batch_digest(rows))

        rows, targets = self._router.route(topic, records, now_ms, partition=partition)  # once: retries keep it
        attempt = 0
        while True:
            try:
                result = self._router.send_routed(topic, rows, targets, now_ms, batches=batch_for)
                break
            except (StorageError, OSError):  # the commit may or may not have happened: retry the same batches
                if attempt >= self.config["retries"]:
                    raise
                attempt += 1
                time.sleep(self.config["retry_backoff_ms"] / 1000)
        for p, n in sent.items():  # the whole call is acknowledged: its partitions move on together
            key = (topic, p)
            self._sequences[key] = self._sequences.get(key, 0) + n
        return result

    produce = send

    def flush(self, timeout: float | None = None) -> None:
        """Nothing is buffered: every :meth:`send` has committed when it returns (Kafka's ``flush`` shape)."""
        self._check_open("flush")

    def close(self, timeout: float | None = None) -> None:
        self._closed = True

    def sequence(self, topic: str, partition: int) -> int:
        """The sequence number the next batch to ``topic``-``partition`` will carry."""
        return self._sequences.get((topic, partition), 0)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise IllegalStateError(f"Cannot call {what}() after the producer is closed")

    def _check_not_fenced(self) -> None:
        """A transactional producer whose id was taken over is fenced before it writes anything (one small read;
        the partitions fence it too, once the newer epoch has written to them)."""
        if self.transactional_id is None:
            return
        now = producer_state.current_producer_id(self.logs.storage, self.transactional_id)
        if now is not None and now != (self.producer_id, self.producer_epoch):
            raise ProducerFencedError(
                f"There is a newer producer with the same transactional_id {self.transactional_id!r} "
                f"(producer id {now[0]}, epoch {now[1]}) which fences producer id {self.producer_id} "
                f"epoch {self.producer_epoch}: close this producer")

    def __repr__(self) -> str:
        return (f"KafkaProducer(producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
                f"transactional_id={self.transactional_id!r})")
