"""Producer ids, epochs and sequences: what makes a retried batch land once (Kafka's idempotent producer, KIP-98).

Three pieces of state, each changed only by compare-and-swap so that several processes can share a store:

* **Producer ids** come from one store-wide counter, ``_deltalog/producers/producer_ids.json``, advanced by a
  conditional put (create, then compare-and-swap on its etag; Kafka's ``ProducerIdManager`` hands out blocks
  from ZooKeeper or the controller the same way). Ids are never reused: a lost counter is rebuilt from what
  the Delta logs and the transactional-id documents hold, and a damaged one is refused
  (:mod:`deltalog.coordinator.transaction.producer_ids`).
* **Transactional ids** map to (producer id, epoch) and their transaction's state in
  ``_deltalog/producers/transactional_ids/<sha256 of the id>.json`` (:mod:`deltalog.coordinator.transaction.transaction_coordinator`).
  ``init_transactions()`` bumps the epoch by a compare-and-swap, so of two processes starting with one
  transactional id exactly one holds the newest epoch; the older epoch is fenced.
* **Per partition**, the producer's position lives in the partition's Delta log as app-transaction ids
  committed *with* the batch, so the state and the data are one atomic commit:

  ===================================  =======================================================
  app id                               version holds
  ===================================  =======================================================
  ``deltalog.producer.<pid>``          ``(epoch << 32) | next sequence``
  ``deltalog.producer.<pid>.base``     the last batch's base offset
  ``deltalog.producer.<pid>.seq``      the last batch's base sequence
  ``deltalog.producer.<pid>.digest``   a 64-bit digest of the last batch's keys, values, headers
  ===================================  =======================================================

  delta-rs refuses the second of two concurrent commits carrying one app id, and every append also carries
  the log-end-offset id, so a producer's batches to a partition are serialized and checked against the state
  of the version they commit on. Delta keeps app-transaction ids in every later snapshot and checkpoint (no
  ``delta.setTransactionRetentionDuration`` is set on partition tables), so cleaning, retention and
  checkpoints leave them alone.

Only the last batch per producer and partition is remembered (Kafka keeps five): a producer here has one
batch in flight per partition (``send`` returns when it is committed), so only that one can be retried.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from deltalog.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from deltalog.storage import Storage

#: Kafka's producer epochs are shorts; a transactional id whose epoch reaches this gets a new producer id.
MAX_EPOCH = 32_766
#: Sequences are Kafka's int32 per (producer, partition).
MAX_SEQUENCE = 2**31 - 1
CAS_ATTEMPTS = 100
TRANSACTIONAL_IDS = ("_deltalog", "producers", "transactional_ids")


def app_id(producer_id: int, field: str = "") -> str:
    """The Delta app id of one field of a producer's state. The prefix is ``delta.EXPIRING_APP_PREFIX``: these
    are committed with their last update time and expire after the topic's ``producer.id.expiration.ms``."""
    return f"deltalog.producer.{producer_id}{'.' + field if field else ''}"


@dataclass(frozen=True)
class ProducerBatch:
    """One batch as the idempotent producer sends it to one partition."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool = False
    #: Sent between ``begin_transaction`` and its commit or abort: its rows carry the producer id and epoch, and
    #: it is never taken for the re-send of an older epoch's batch (that batch's transaction was aborted when
    #: the new epoch began).
    in_transaction: bool = False
    #: 64-bit digest of the batch's keys, values and headers (0: not computed): a retry must carry the same
    #: records, and a new epoch recognises the re-send of an older epoch's last batch by it
    #: (see :meth:`ProducerStateEntry.check`).
    digest: int = 0

    def txns(self, base_offset: int, n: int) -> dict[str, int]:
        """The app-transaction ids the batch's commit carries."""
        pid = self.producer_id
        out = {app_id(pid): (self.producer_epoch << 32) | (self.base_sequence + n), app_id(pid, "base"): base_offset,
               app_id(pid, "seq"): self.base_sequence}
        if self.digest:
            out[app_id(pid, "digest")] = self.digest
        return out


@dataclass(frozen=True)
class ProducerStateEntry:
    """What a partition remembers of one producer (Kafka's ``ProducerStateEntry``, one batch deep)."""

    producer_id: int
    producer_epoch: int
    next_sequence: int
    base_sequence: int
    base_offset: int
    digest: int

    @property
    def last_batch_offsets(self) -> range:
        return range(self.base_offset, self.base_offset + self.next_sequence - self.base_sequence)

    @classmethod
    def read(cls, version_of, producer_id: int) -> ProducerStateEntry | None:
        """The entry from a snapshot's app-transaction versions (``version_of(app_id) -> int | None``)."""
        packed = version_of(app_id(producer_id))
        if packed is None:
            return None
        return cls(producer_id, packed >> 32, packed & 0xFFFFFFFF, version_of(app_id(producer_id, "seq")) or 0,
                   version_of(app_id(producer_id, "base")) or 0, version_of(app_id(producer_id, "digest")) or 0)

    def check(self, batch: ProducerBatch, n: int, where: str) -> range | None:
        """None when ``batch`` (``n`` records) is the next one to append; its original offsets when it is a retry
        of the last batch; raises when it is fenced or out of order (Kafka's ``ProducerAppendInfo`` checks)."""
        if batch.producer_epoch < self.producer_epoch:
            error = ProducerFencedError if batch.transactional else InvalidProducerEpochError
            raise error(f"Epoch of producer {batch.producer_id} in {where} is {batch.producer_epoch}, which is smaller "
                        f"than the last seen epoch {self.producer_epoch}: a newer producer with this id took over")
        if batch.producer_epoch > self.producer_epoch:
            if (not batch.in_transaction and batch.base_sequence == 0 and batch.digest and batch.digest == self.digest
                    and n == self.next_sequence - self.base_sequence):
                # a newer epoch re-sends the last batch an older one committed here (epochs between may have
                # died before sending anything)
                return self.last_batch_offsets
            if batch.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {batch.producer_id} in {where}: "
                    f"{batch.producer_epoch} (request epoch), {batch.base_sequence} (seq. number); a new epoch "
                    f"starts at sequence 0")
            return None
        if batch.base_sequence == self.base_sequence and n == self.next_sequence - self.base_sequence:
            if batch.digest and self.digest and batch.digest != self.digest:
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id} in {where} sent sequence {batch.base_sequence} again with other "
                    f"records than the batch committed at offsets {self.base_offset}..{self.last_batch_offsets[-1]}")
            return self.last_batch_offsets
        if batch.base_sequence != self.next_sequence:
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {batch.producer_id} at offset {self.base_offset} in "
                f"{where}: {batch.base_sequence} (incoming seq. number), {self.next_sequence - 1} (current end "
                f"sequence number); only the last batch (sequence {self.base_sequence}) can be retried")
        return None


def check_batch(version_of, batch: ProducerBatch, n: int, topic: str, partition: int) -> tuple[range | None, bool]:
    """:meth:`ProducerStateEntry.check` against the partition's entry, and whether the entry must move to the
    batch's (newer) epoch although nothing is appended: the new epoch re-sent an older epoch's last batch,
    and its next batch follows it at sequence ``n``. A producer the partition has no state for (never seen, or
    expired after ``producer.id.expiration.ms``) must start at sequence 0 (:class:`UnknownProducerIdError`)."""
    where = f"{topic}-{partition}"
    if batch.base_sequence + n > MAX_SEQUENCE:
        raise OutOfOrderSequenceError(f"producer {batch.producer_id} ran out of sequence numbers in {where} "
                                      f"(at most {MAX_SEQUENCE} records per epoch and partition); use a new "
                                      "producer (with a transactional_id, its init_transactions() starts a new "
                                      "epoch)")
    entry = ProducerStateEntry.read(version_of, batch.producer_id)
    if entry is None:
        if batch.base_sequence != 0:
            raise UnknownProducerIdError(
                f"Out of order sequence number for producer {batch.producer_id} in {where}: "
                f"{batch.base_sequence} (incoming seq. number); {where} has no state for this producer (it never "
                f"wrote there, or its state expired after producer.id.expiration.ms), so its first batch must have "
                f"sequence 0", topic, partition)
        return None, False
    original = entry.check(batch, n, where)
    return original, original is not None and batch.producer_epoch > entry.producer_epoch


def batch_digest(rows: pa.Table) -> int:
    """A non-zero signed 64-bit digest of the batch's keys, values and headers (not timestamps: a null timestamp
    is filled with the time of each attempt), from their Arrow IPC bytes."""
    h = hashlib.blake2b(digest_size=8)
    sink = pa.BufferOutputStream()
    cols = rows.select([c for c in ("key", "value", "headers") if c in rows.column_names])
    with pa.ipc.new_stream(sink, cols.schema) as writer:
        writer.write_table(cols)
    h.update(sink.getvalue())
    value = int.from_bytes(h.digest(), "big", signed=True)
    return value or 1


# -- store-wide: transactional ids (producer ids: deltalog.coordinator.transaction.producer_ids.allocate) ---------------------------

def transactional_location(storage: Storage, transactional_id: str) -> str:
    """Where a transactional id's document lives (see :mod:`deltalog.coordinator.transaction.transaction_coordinator`)."""
    name = hashlib.sha256(transactional_id.encode()).hexdigest()
    return storage.location(*TRANSACTIONAL_IDS, f"{name}.json")
