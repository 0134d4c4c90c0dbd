"""Group commit of pipelined Produce requests: the record sets several requests carry for one partition appended in
one Delta commit, each request still answered as if it had been appended alone.

A Kafka producer keeps several Produce requests in flight on a connection (librdkafka's
``max.in.flight.requests.per.connection``, kafka-python's ``max_in_flight_requests_per_connection``); when the
endpoint is slower than the producer they wait in the socket, and the connection reads them together
(:mod:`deltalog.server.socket_server`). A Delta commit costs about as much for 8,000 records as for 40,000 (a
Parquet file, a log entry, a table refresh), so appending a partition's waiting record sets as one batch is the
endpoint's version of Kafka's log appending many batches per ``fsync``.

What each request keeps:

* **its offsets and order**: the record sets are concatenated in the order the requests came, so a request's
  records get the offsets it would have got alone, and its answer carries its own base offset;
* **all or nothing, alone**: if the group's append refuses a record (a keyless record on a compacted topic, one
  larger than ``max.message.bytes``, a value that does not match the topic's schema), nothing was written
  (:meth:`~deltalog.log.partition_log.PartitionLog.append` checks every record before writing) and the record sets
  are appended one by one, so only the request with the bad record fails; any other error (an unknown partition,
  storage) is each request's answer, as each would have met it;
* **idempotence**: a record set with a producer id (or a transactional batch) is appended alone, in its place in
  the order, through the sequence checks of :mod:`deltalog.log.producer_state` (a group never holds one), so its
  sequence is checked against the state all earlier requests left;
* **acks**: a request's answer is its own (none for ``acks=0``), written after the commit that holds its records.

Requests of different connections for one partition join a group too (:class:`Committer`): while one connection's
thread commits, the others queue their record sets, and the next to commit takes them all.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.errors import DeltalogError, InvalidProducerEpochError, InvalidRecordError, ProducerFencedError
from deltalog.log import producer_state
from deltalog.log.producer_state import ProducerBatch
from deltalog.server import protocol as p
from deltalog.server.record_batches import BatchInfo
from deltalog.server.served_store import ServedStore

#: (error code, base offset, error message, log start offset): one partition's part of a Produce answer.
Result = tuple[int, int, str | None, int]


@dataclass
class Entry:
    """One partition's decoded record set of one Produce request, and its :data:`Result` once appended."""

    topic: str
    partition: int
    records: pa.Table
    producer: tuple[int, int, int] | None  # (producer id, epoch, base sequence) of an idempotent batch
    batches: tuple[BatchInfo, ...] = ()  # what each record batch's header said (producer, transactional flag)
    transactional_id: str | None = None  # the Produce request's, for a transactional batch
    log_append_time: bool = False  # the topic's message.timestamp.type is LogAppendTime
    result: Result | None = None
    #: the appending clock's time the records were stamped with under LogAppendTime (Kafka's ProduceResponse
    #: ``log_append_time_ms``); -1 until appended
    append_time_ms: int = -1

    @property
    def transactional(self) -> bool:
        return any(b.is_transactional for b in self.batches)

    @property
    def plain(self) -> bool:
        """Whether the record set may share a commit: no producer id, nothing transactional."""
        return self.producer is None and not any(b.is_transactional for b in self.batches)


class Committer:
    """The group commit of one endpoint: :meth:`append` appends a connection's entries, and entries that other
    connections queued for the same partition while it waited join the same commit (a leader takes the partition's
    whole queue; the others wait for it and find their results set), so several producers writing to one partition
    do not each pay a commit per request either."""

    def __init__(self, store: ServedStore, lock: threading.RLock, *, txn: Any = None) -> None:
        self.store = store
        self.lock = lock
        self.txn = txn  # deltalog.server.txn_apis.TxnApis: checks and stamps transactional batches
        self._cond = threading.Condition()
        self._queues: dict[tuple[str, int], list[Entry]] = {}
        self._busy: set[tuple[str, int]] = set()

    def append(self, entries: list[Entry]) -> None:
        """Append ``entries`` (in request order) to their partitions, setting each one's ``result``."""
        by_partition: dict[tuple[str, int], list[Entry]] = {}
        for e in entries:
            by_partition.setdefault((e.topic, e.partition), []).append(e)
        for key, mine in by_partition.items():
            self._append_partition(key, mine)

    def _append_partition(self, key: tuple[str, int], mine: list[Entry]) -> None:
        with self._cond:
            self._queues.setdefault(key, []).extend(mine)
            while key in self._busy and mine[-1].result is None:
                self._cond.wait()
            if mine[-1].result is not None:  # a leader took them with its group
                return
            self._busy.add(key)
            taken = self._queues.pop(key)
        try:
            for run in _runs(taken):
                with self.lock:
                    _append_run(self.store, key[0], key[1], run, self.txn)
        finally:
            for e in taken:  # only after a bug in the append: the waiting requests get an answer too
                if e.result is None:
                    e.result = (p.UNKNOWN_SERVER_ERROR, -1, "the append failed; see the endpoint's log", -1)
            with self._cond:
                self._busy.discard(key)
                self._cond.notify_all()


def _runs(entries: list[Entry]) -> list[list[Entry]]:
    """Runs of consecutive plain record sets of one column layout; an idempotent one is a run of its own."""
    runs: list[list[Entry]] = []
    for e in entries:
        last = runs[-1] if runs else None
        if last is not None and e.plain and last[-1].plain and last[-1].records.schema == e.records.schema:
            last.append(e)
        else:
            runs.append([e])
    return runs


def _append_run(store: ServedStore, topic: str, partition: int, run: list[Entry], txn: Any = None) -> None:
    if len(run) > 1:
        try:
            log = store.log(topic, partition)
            now = store.clock.now_ms()
            offsets = log.append(pa.concat_tables([e.records for e in run]), now)
            start = log_start(log)
        except InvalidRecordError:
            pass  # a bad record among them and nothing written: each alone below, so only its request fails
        except DeltalogError as e:
            for entry in run:
                entry.result = (e.errno, -1, str(e), -1)
            return
        else:
            at = 0
            for entry in run:
                entry.result, entry.append_time_ms = (p.NONE, offsets[at], None, start), now
                at += entry.records.num_rows
            return
    for entry in run:
        entry.result = append_one(store, topic, partition, entry, txn)


def append_one(store: ServedStore, topic: str, partition: int, entry: Entry, txn: Any = None) -> Result:
    """One record set appended alone: plain, idempotent (the producer state's sequence checks) or transactional
    (only to a partition its transaction added, :meth:`TxnApis.verify`, with the producer's id and epoch on every
    row; an older epoch answers ``INVALID_PRODUCER_EPOCH``, Kafka's answer to a Produce)."""
    transactional = entry.transactional
    try:
        now = entry.append_time_ms = store.clock.now_ms()
        if entry.producer is None:
            offsets = store.log(topic, partition).append(entry.records, now)  # one commit, or none
        elif transactional:
            if txn is None:
                return p.INVALID_RECORD, -1, "transactional batches are not served by this endpoint", -1
            pid, epoch, sequence = entry.producer
            code, message = txn.verify(entry.transactional_id, [(topic, partition)], pid, epoch)
            if code != p.NONE:
                return code, -1, message, -1
            offsets = store.log(topic, partition).append(entry.records, now,
                                                         producer=txn.producer_batch(pid, epoch, sequence,
                                                                                     entry.records))
        else:  # the idempotent append: a retry of the producer's last batch gets its first offsets back
            pid, epoch, sequence = entry.producer
            offsets = store.log(topic, partition).append(entry.records, now, producer=ProducerBatch(
                pid, epoch, sequence, digest=producer_state.batch_digest(entry.records)))
        log = store.log(topic, partition)  # a retried producer batch wrote nothing: its answer reads the head
        start = log_start(log) if entry.producer is None else log.head().log_start_offset
    except DeltalogError as e:
        if transactional and isinstance(e, ProducerFencedError):  # the partition knows a newer epoch: Kafka's log
            return InvalidProducerEpochError.errno, -1, str(e), -1  # raises InvalidProducerEpochException there
        return e.errno, -1, str(e), -1
    return p.NONE, offsets[0], None, start


def log_start(log: Any) -> int:
    """The partition's log start offset as the plain append just made left it (no second read of the Delta log per
    commit); read afresh when this handle knows no append of its own."""
    head = log.appended_head()
    return (head if head is not None else log.head()).log_start_offset
