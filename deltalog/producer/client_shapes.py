"""The call shapes of Kafka's Python clients, on top of deltalog's batch-oriented producer.

deltalog's :meth:`KafkaProducer.send <deltalog.producer.kafka_producer.KafkaProducer.send>` takes a batch (a list of
:class:`~deltalog.log.record.Record`, one Record, or an Arrow table). Applications written for Kafka send one record
at a time, with the clients' own signatures:

* kafka-python: ``producer.send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)``,
  which returns a future; ``future.get(timeout)`` gives the ``RecordMetadata``;
* confluent-kafka: ``producer.produce(topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,
  headers=None)``, whose delivery callback ``on_delivery(err, msg)`` is served by ``poll()``/``flush()``.

Both work here. A deltalog send has committed when it returns, so the future is already done and the delivery
callback is called before ``produce`` returns (with ``err=None``; a failed send raises instead, as no delivery
report could be more precise than the exception).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from deltalog.log.record import Record
from deltalog.producer.router import ProduceResult, RecordMetadata

#: confluent-kafka's ``TIMESTAMP_CREATE_TIME``: the record's timestamp is the producer's (or the append's).
TIMESTAMP_CREATE_TIME = 1


def is_batch(records: Any) -> bool:
    """Whether ``records`` is one of the batch forms :meth:`KafkaProducer.send` takes (not one record's value)."""
    if isinstance(records, (Record, pa.Table, pa.RecordBatch)):
        return True
    return isinstance(records, Iterable) and not isinstance(records, (str, bytes, bytearray, memoryview, Mapping))


def one_record(value: Any, key: Any, headers: Any, timestamp_ms: int | None) -> Record:
    """The record of a single-record send (kafka-python's or confluent-kafka's arguments). Headers are a list of
    ``(name, value)`` pairs or a mapping, as both clients take them; a timestamp of 0 or None means "now"."""
    if isinstance(headers, Mapping):
        headers = list(headers.items())
    return Record(key=key, value=value, headers=tuple(headers or ()), timestamp_ms=timestamp_ms or None)


class SentFuture(ProduceResult):
    """What a kafka-python style :meth:`send` of one record returns: the batch result (one record), with the
    methods of kafka-python's ``FutureRecordMetadata``. The send has committed, so the future is done."""

    __slots__ = ()

    @classmethod
    def of(cls, result: ProduceResult) -> SentFuture:
        return cls(result.topic, result.partitions, result.offsets, result.timestamps_ms)

    is_done = True
    exception = None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata (kafka-python's ``future.get(timeout)``)."""
        return self[0]

    @property
    def value(self) -> RecordMetadata:
        return self[0]

    def succeeded(self) -> bool:
        return True

    def failed(self) -> bool:
        return False

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SentFuture:
        """Call ``fn(*args, record_metadata, **kwargs)`` now (the send is done), as kafka-python calls it."""
        fn(*args, self[0], **kwargs)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SentFuture:
        """Never called: a send that failed raised."""
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SentFuture:
        return self.add_callback(fn, *args, **kwargs)


class DeliveredMessage:
    """The ``msg`` of a confluent-kafka delivery callback: the record as appended, with its offset."""

    __slots__ = ("_meta", "_record")

    def __init__(self, record: Record, meta: RecordMetadata) -> None:
        self._record, self._meta = record, meta

    def topic(self) -> str:
        return self._meta.topic

    def partition(self) -> int:
        return self._meta.partition

    def offset(self) -> int:
        return self._meta.offset

    def key(self) -> bytes | None:
        return self._record.key

    def value(self) -> bytes | None:
        return self._record.value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return list(self._record.headers) or None

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, self._meta.timestamp_ms)

    def error(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._record.value or b"")

    def __repr__(self) -> str:
        return f"DeliveredMessage({self.topic()}-{self.partition()}@{self.offset()})"


def deliver(callback: Callable[[Any, Any], Any] | None, records: Sequence[Record], result: ProduceResult) -> None:
    """Call a confluent-kafka delivery callback once per record, in input order, with ``err=None``."""
    if callback is None:
        return
    for record, meta in zip(records, result, strict=True):
        callback(None, DeliveredMessage(record, meta))
