"""The router: records to a topic, each to the partition Kafka's producer would pick (``KafkaProducer.send``), one
append per partition. ``store.produce`` and :class:`~deltalog.producer.kafka_producer.KafkaProducer` send through it.

A partition is chosen per record as ``KafkaProducer.partition`` chooses it:

1. an explicit partition wins (``partition=`` for the whole call, or a ``partition`` column, null where the
   partitioner should choose);
2. a keyed record goes where Kafka's default partitioner sends its key: murmur2 of the key bytes, made
   positive, modulo the partition count (:mod:`deltalog.producer.partitioner`), so a key lands on the same
   partition number as in Kafka;
3. a keyless record follows Kafka's sticky partitioner (KIP-480): keyless records fill one partition until
   :data:`STICKY_BATCH_BYTES` (Kafka's ``batch.size`` default) have gone there, then move on to the next
   partition, round-robin from a random first one; the position carries over from call to call of one
   :class:`PartitionRouter`. So a trickle of single keyless records rotates slowly and a bulk call spreads evenly.
   Keyless records are refused on compacted topics anyway (as Kafka's broker refuses them).

The records of one call are grouped by partition and each group is one append (one Delta commit, contiguous
offsets) to its partition. The whole batch is validated against the topic's configs before the first append,
so a bad record writes nothing; an append that fails afterwards (storage down, say) leaves the partitions
appended before it committed, as Kafka's per-partition batches are independent outside transactions.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import InvalidArgumentError, InvalidRecordError, UnknownTopicOrPartitionError
from deltalog.log import arrow_records
from deltalog.log.record import HEADERS, KEY, TIMESTAMP, VALUE, Record
from deltalog.producer.partitioner import partitions_for_keys
from deltalog.structs import TopicPartition

if TYPE_CHECKING:
    from deltalog.config import TopicConfig
    from deltalog.log.log_manager import LogManager
    from deltalog.log.producer_state import ProducerBatch

__all__ = ["PARTITION", "STICKY_BATCH_BYTES", "ProduceResult", "PartitionRouter", "RecordMetadata"]

#: The optional column of an Arrow batch that names each record's partition (null: let the partitioner choose).
PARTITION = "partition"
#: Bytes of keyless records a partition takes before the sticky partitioner moves on (Kafka's ``batch.size``).
STICKY_BATCH_BYTES = 16_384
#: Appends to different partitions of one call run side by side on this many threads (they are separate Delta
#: tables; pyarrow's Parquet writer and delta-rs release the GIL).
APPEND_THREADS = min(8, os.cpu_count() or 1)


@dataclass(frozen=True)
class RecordMetadata:
    """Where a produced record went, as Kafka's ``RecordMetadata``: its topic, partition, offset and timestamp
    (epoch ms, the record's own or the store clock's time at append)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    @property
    def timestamp(self) -> int:
        """kafka-python's name for :attr:`timestamp_ms`."""
        return self.timestamp_ms

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ProduceResult(Sequence[RecordMetadata]):
    """The :class:`RecordMetadata` of every record of one :meth:`PartitionRouter.send`, in input order.

    Held as three numpy arrays (``partitions``, ``offsets``, ``timestamps_ms``), and a RecordMetadata is built
    only when one is asked for, so a bulk produce of a million records does not pay for a million objects.
    It compares equal to a list of RecordMetadata.
    """

    __slots__ = ("offsets", "partitions", "timestamps_ms", "topic")

    def __init__(self, topic: str, partitions: np.ndarray, offsets: np.ndarray, timestamps_ms: np.ndarray) -> None:
        self.topic = topic
        self.partitions = _read_only(partitions.astype(np.int32, copy=False))
        self.offsets = _read_only(offsets.astype(np.int64, copy=False))
        self.timestamps_ms = _read_only(timestamps_ms.astype(np.int64, copy=False))

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, i: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, i: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, i: int | slice) -> RecordMetadata | list[RecordMetadata]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return RecordMetadata(self.topic, int(self.partitions[i]), int(self.offsets[i]), int(self.timestamps_ms[i]))

    def __iter__(self) -> Iterator[RecordMetadata]:
        topic = self.topic
        for p, o, t in zip(self.partitions.tolist(), self.offsets.tolist(), self.timestamps_ms.tolist(), strict=True):
            yield RecordMetadata(topic, p, o, t)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProduceResult):
            return (self.topic == other.topic and np.array_equal(self.partitions, other.partitions)
                    and np.array_equal(self.offsets, other.offsets)
                    and np.array_equal(self.timestamps_ms, other.timestamps_ms))
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(map(repr, self[:3]))
        more = f", ... ({len(self)} records)" if len(self) > 3 else ""
        return f"ProduceResult([{shown}{more}])"

    def offsets_by_partition(self) -> dict[int, list[int]]:
        """Partition -> the offsets its records got, in input order (what ``deltalog produce`` reports)."""
        out: dict[int, list[int]] = {}
        for p, o in zip(self.partitions.tolist(), self.offsets.tolist(), strict=True):
            out.setdefault(p, []).append(o)
        return dict(sorted(out.items()))


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.setflags(write=False)
    return view


class PartitionRouter:
    """Sends records to a topic's partitions (one append per partition a call touches).

    It holds the sticky partitioner's position per topic, so keep one per store (``Store.produce`` does).
    """

    def __init__(self, logs: LogManager, *, sticky_batch_bytes: int = STICKY_BATCH_BYTES,
                 rng: random.Random | None = None,
                 topics: Mapping[str, tuple[int, TopicConfig]] | None = None) -> None:
        if isinstance(sticky_batch_bytes, bool) or not isinstance(sticky_batch_bytes, int) or sticky_batch_bytes < 1:
            raise InvalidArgumentError(f"sticky_batch_bytes must be an integer >= 1, not {sticky_batch_bytes!r}")
        self.logs = logs
        self.sticky_batch_bytes = sticky_batch_bytes
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._sticky: dict[str, tuple[int, int]] = {}  # topic -> (partition, bytes sent there in this batch)
        self._topics = dict(topics or {})

    def topic_metadata(self, topic: str) -> tuple[int, TopicConfig]:
        """The partition count and config of ``topic``: as given at construction (a Spark sink's tasks get them
        from the driver, so routing a batch opens no Delta table), else read from the store."""
        known = self._topics.get(topic)
        if known is not None:
            return known
        partitions = self.logs.partitions(topic)  # raises for an unknown topic
        return len(partitions), self.logs.log(topic, partitions[0]).head().config

    def send(self, topic: str, records: Sequence[Record] | Record | pa.Table | pa.RecordBatch, now_ms: int, *,
             partition: int | None = None,
             batches: Callable[[int, pa.Table], ProducerBatch] | None = None) -> ProduceResult:
        """Append ``records`` to ``topic``, each to its partition (see the module docstring); returns where each
        went, in input order.

        ``records`` are :class:`Record` s, or a ``pyarrow.Table``/``RecordBatch`` with the columns
        :meth:`Store.append <deltalog.store.Store.append>` takes plus an optional integer ``partition`` column.
        ``partition`` sends every record to that partition. Errors name the record by its input position.
        ``batches(partition, rows)`` gives the idempotent producer's batch (producer id, epoch, sequence) for the
        records going to a partition (see :mod:`deltalog.producer.kafka_producer`).
        """
        rows, targets = self.route(topic, records, now_ms, partition=partition)
        return self.send_routed(topic, rows, targets, now_ms, batches=batches)

    def send_routed(self, topic: str, rows: pa.Table, targets: np.ndarray, now_ms: int, *,
                    batches: Callable[[int, pa.Table], ProducerBatch] | None = None) -> ProduceResult:
        """Append what :meth:`route` returned, one append per partition (a retry sends the same routing again)."""
        n = rows.num_rows
        if not n:
            empty = np.zeros(0, np.int64)
            return ProduceResult(topic, empty, empty, empty)
        count = int(targets.max()) + 1  # partitions the call touches are below this
        offsets = np.empty(n, dtype=np.int64)
        order = np.argsort(targets, kind="stable")
        bounds = np.searchsorted(targets[order], np.arange(count + 1), side="left")
        groups = [(p, order[bounds[p]:bounds[p + 1]]) for p in range(count) if bounds[p] < bounds[p + 1]]
        logs = {p: self.logs.log(topic, p) for p, _ in groups}

        def append(group: tuple[int, np.ndarray]) -> None:
            p, idx = group
            batch = rows if len(idx) == n else rows.take(pa.array(idx))
            idempotent = None if batches is None else batches(p, batch)
            first = logs[p].append(batch, now_ms, producer=idempotent)[0]
            offsets[idx] = np.arange(first, first + len(idx), dtype=np.int64)

        if len(groups) == 1:
            append(groups[0])
        else:  # partitions are separate tables: their appends (Parquet writes, Delta commits) overlap in threads
            with ThreadPoolExecutor(max_workers=min(len(groups), APPEND_THREADS)) as pool:
                for done in [pool.submit(append, g) for g in groups]:
                    done.result()
        timestamps = rows.column(TIMESTAMP).to_numpy()
        return ProduceResult(topic, targets, offsets, timestamps)

    def route(self, topic: str, records: Sequence[Record] | Record | pa.Table | pa.RecordBatch, now_ms: int, *,
              partition: int | None = None) -> tuple[pa.Table, np.ndarray]:
        """The records validated for ``topic`` (columns key, value, headers, timestamp_ms) and the partition each
        goes to, without appending them: what :meth:`send` appends, and what a Spark sink's tasks stage."""
        table = _as_table(records)
        explicit = None
        if PARTITION in table.column_names:
            if partition is not None:
                raise InvalidArgumentError(
                    "give the partition either as partition= or as a 'partition' column of the batch, not both")
            explicit = _partition_column(table.column(PARTITION))
            table = table.drop_columns([PARTITION])
        count, config = self.topic_metadata(topic)
        if partition is not None:
            self.logs.log(topic, partition)  # raises for a partition that does not exist, with the valid range
        n = table.num_rows
        if not n:
            return table, np.zeros(0, np.int32)
        rows = arrow_records.validated(table, config, topic, now_ms)  # before anything is written

        if partition is not None:
            targets = np.full(n, partition, dtype=np.int32)
        else:
            targets = partitions_for_keys(rows.column(KEY), count)
            if explicit is not None:
                given = explicit >= 0
                bad = given & (explicit >= count)
                if bad.any():
                    i = int(np.argmax(bad))
                    raise UnknownTopicOrPartitionError(
                        f"record {i}: partition {int(explicit[i])} of topic {topic!r} does not exist; "
                        f"partitions are 0..{count - 1}")
                targets = np.where(given, explicit, targets).astype(np.int32)
            keyless = np.flatnonzero(targets < 0)
            if len(keyless):
                targets[keyless] = self._sticky_partitions(topic, count, _record_sizes(rows, keyless))

        return rows, targets

    def _sticky_partitions(self, topic: str, count: int, sizes: np.ndarray) -> np.ndarray:
        """Partitions for keyless records of ``sizes`` bytes, in order: each partition takes
        ``sticky_batch_bytes`` before the next one does (KIP-480), continuing where the last call stopped."""
        batch = self.sticky_batch_bytes
        with self._lock:
            current, used = self._sticky.get(topic, (-1, 0))
            if not 0 <= current < count:  # first keyless record of this topic (or its partitions changed)
                current, used = self._rng.randrange(count), 0
            before = used + np.cumsum(sizes) - sizes  # bytes sent to this partition run before each record
            out = ((current + before // batch) % count).astype(np.int32)
            total = used + int(sizes.sum())
            self._sticky[topic] = ((current + total // batch) % count, total % batch)
        return out


def _as_table(records: Sequence[Record] | Record | pa.Table | pa.RecordBatch) -> pa.Table:
    if isinstance(records, Record):
        records = [records]
    if isinstance(records, pa.RecordBatch):
        return pa.Table.from_batches([records])
    if isinstance(records, pa.Table):
        return records
    if isinstance(records, (str, bytes, bytearray)) or not hasattr(records, "__iter__"):
        raise InvalidRecordError(
            f"records must be a Record, a sequence of Records, or a pyarrow Table/RecordBatch, not {type(records).__name__}")
    return arrow_records.from_records(list(records))


def _partition_column(column: pa.ChunkedArray) -> np.ndarray:
    """The ``partition`` column as int32, -1 where null; refuses a non-integer column and negative numbers."""
    if not pa.types.is_integer(column.type):
        raise InvalidRecordError(f"record column 'partition' is {column.type}; allowed: integers (null: the "
                                 "partitioner chooses)")
    values = column.combine_chunks()
    if len(values) and pc.min(values).is_valid and pc.min(values).as_py() < 0:
        i = int(pc.index(pc.less(values, 0), True).as_py())
        raise InvalidRecordError(f"record {i}: partition must be >= 0 (or null: the partitioner chooses), "
                                 f"not {values[i].as_py()}", index=i)
    return pc.fill_null(values, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _record_sizes(rows: pa.Table, which: np.ndarray) -> np.ndarray:
    """Bytes of the records at ``which`` as ``max.message.bytes`` counts them (key, value, header names and values)."""
    picked = rows.take(pa.array(which))
    size = np.zeros(len(which), dtype=np.int64)
    for name in (KEY, VALUE):
        size += pc.fill_null(pc.binary_length(picked.column(name)), 0).to_numpy(zero_copy_only=False)
    headers = picked.column(HEADERS).combine_chunks()
    flat = pc.list_flatten(headers)
    if len(flat):
        each = (pc.fill_null(pc.binary_length(pc.struct_field(flat, [0]).cast(pa.binary())), 0).to_numpy()
                + pc.fill_null(pc.binary_length(pc.struct_field(flat, [1])), 0).to_numpy(zero_copy_only=False))
        size += np.bincount(pc.list_parent_indices(headers).to_numpy(), weights=each,
                            minlength=len(which)).astype(np.int64)
    return size
