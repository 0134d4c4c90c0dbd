"""confluent-kafka's consumer shape over deltalog's :class:`~deltalog.groups.consumer.Consumer`: code written for
``confluent_kafka.Consumer(conf)`` runs after changing only its construction to ``store.consumer(conf)``::

    consumer = store.consumer({"group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    while running:
        msg = consumer.poll(1.0)           # one Message, or None after the timeout (seconds)
        if msg is None:
            continue
        if msg.error():                    # always None here: a failed read raises
            continue
        handle(msg.key(), msg.value())
        consumer.commit(message=msg, asynchronous=False)
    consumer.close()

The calls and their results are confluent-kafka's: ``subscribe(topics, on_assign=...)``, ``assign``/``unassign``/
``assignment``, ``poll(timeout)``, ``consume(num_messages, timeout)``, ``commit(message=..., offsets=...,
asynchronous=...)`` (the committed partitions when synchronous, None otherwise), ``committed``, ``position``,
``seek``, ``offsets_for_times`` and ``get_watermark_offsets``, ``pause``/``resume``, ``store_offsets``,
``consumer_group_metadata``, ``close``; partitions as objects with ``topic``, ``partition`` and ``offset`` (such as
``confluent_kafka.TopicPartition``; the ones returned are :class:`TopicPartition` with the same fields, equality and
hash), logical offsets ``OFFSET_BEGINNING`` (-2), ``OFFSET_END`` (-1), ``OFFSET_STORED`` (-1000) and
``OFFSET_INVALID`` (-1001) as librdkafka's.

What differs, and why:

* A timeout is the longest a call waits for records; there is no broker round trip, so nothing else waits.
* Errors are raised as :class:`~deltalog.errors.DeltalogError` subclasses, not ``KafkaException`` or error
  messages: a ``Message`` here never carries an error (``error()`` is None), and there are no partition EOF events
  (``enable.partition.eof`` is refused rather than silently never honoured).
* ``commit(asynchronous=True)`` (confluent-kafka's default) commits before it returns, as a Delta commit is quick;
  it returns None, as confluent-kafka's does.
* ``on_assign(consumer, partitions)`` is called once, on the first ``poll``/``consume`` after ``subscribe``, with
  every partition of the topics: there is no group membership (see :mod:`deltalog.groups.consumer`), so no
  rebalance ever revokes them (``on_revoke`` and ``on_lost`` are never called).
* ``enable.auto.offset.store`` is always true (the offsets committed are those of the messages handed out), as
  librdkafka's default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from deltalog.errors import InvalidArgumentError, InvalidConfigError, shown
from deltalog.groups.consumer import Consumer
from deltalog.structs import ConsumerRecord, OffsetAndMetadata
from deltalog.structs import TopicPartition as KafkaTopicPartition

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001
#: confluent-kafka's ``TIMESTAMP_CREATE_TIME`` and ``TIMESTAMP_LOG_APPEND_TIME``.
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

#: librdkafka's ``auto.offset.reset`` values and kafka-python's words for them.
_RESETS = {"smallest": "earliest", "earliest": "earliest", "beginning": "earliest", "largest": "latest",
           "latest": "latest", "end": "latest", "error": "none"}


class TopicPartition:
    """confluent-kafka's ``TopicPartition``: a topic, a partition and an offset (with metadata, a leader epoch and an
    error, always None here); equal to (and hashing like) any partition of the same topic and number, whatever the
    offset, as confluent-kafka's."""

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID, metadata: str | None = None,
                 leader_epoch: int | None = None) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.metadata, self.leader_epoch, self.error = metadata, leader_epoch, None

    def __eq__(self, other: object) -> bool:
        return (getattr(other, "topic", None), getattr(other, "partition", None)) == (self.topic, self.partition)

    def __lt__(self, other: Any) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __repr__(self) -> str:
        return (f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
                f"leader_epoch={self.leader_epoch},error={self.error}}}")


class Message:
    """confluent-kafka's ``Message``, for a record a poll handed out."""

    __slots__ = ("_r",)

    def __init__(self, record: ConsumerRecord) -> None:
        self._r = record

    def topic(self) -> str:
        return self._r.topic

    def partition(self) -> int:
        return self._r.partition

    def offset(self) -> int:
        return self._r.offset

    def key(self) -> Any:
        return self._r.key

    def value(self) -> Any:
        return self._r.value

    def headers(self) -> list[tuple[str, bytes]] | None:
        """The headers as ``(name, value)`` pairs; None when the record has none, as confluent-kafka's."""
        return list(self._r.headers) or None

    def timestamp(self) -> tuple[int, int]:
        """``(TIMESTAMP_CREATE_TIME or TIMESTAMP_LOG_APPEND_TIME, epoch ms)``, by the topic's message.timestamp.type."""
        return TIMESTAMP_LOG_APPEND_TIME if self._r.timestamp_type == 1 else TIMESTAMP_CREATE_TIME, self._r.timestamp

    def error(self) -> None:
        """Always None: a read that fails raises instead (see the module docstring)."""
        return None

    def leader_epoch(self) -> None:
        return None

    def latency(self) -> None:
        return None

    def __len__(self) -> int:
        value = self._r.value
        return len(value) if isinstance(value, (bytes, bytearray, str)) else 0

    def __repr__(self) -> str:
        return f"Message({self.topic()}-{self.partition()}@{self.offset()})"


def _kafka_configs(conf: Mapping[str, Any]) -> dict[str, Any]:
    """confluent-kafka's configuration dict as the kafka-python-named configs of :class:`Consumer`."""
    if not isinstance(conf, Mapping):
        raise InvalidConfigError(f"a confluent-kafka consumer takes its configuration as a dict, not {shown(conf)}")
    out = dict(conf)
    if not out.get("group.id", out.get("group_id")):
        raise InvalidConfigError("a confluent-kafka consumer needs a 'group.id' in its configuration (as "
                                 "confluent_kafka.Consumer requires one); for a consumer that only reads without a "
                                 "group, use store.consumer(group_id=None)")
    for name in ("auto.offset.reset", "auto_offset_reset"):
        if name in out and isinstance(out[name], str):
            reset = _RESETS.get(out[name].lower())
            if reset is None:
                raise InvalidConfigError(f"Invalid value {out[name]!r} for configuration auto.offset.reset: allowed: "
                                         f"{', '.join(map(repr, _RESETS))}")
            out[name] = reset
    for name in ("enable.auto.offset.store", "enable_auto_offset_store"):
        if name in out:
            if out.pop(name) is not True:
                raise InvalidConfigError("enable.auto.offset.store=false is not supported: deltalog's consumer "
                                         "stores the offset of every message it hands out (librdkafka's default); "
                                         "commit explicit offsets with commit(offsets=[...]) instead")
    return out


def _tp(partition: Any) -> KafkaTopicPartition:
    topic, number = getattr(partition, "topic", None), getattr(partition, "partition", None)
    if not isinstance(topic, str) or isinstance(number, bool) or not isinstance(number, int):
        raise InvalidArgumentError(f"expected a TopicPartition(topic, partition[, offset]), not {shown(partition)}")
    return KafkaTopicPartition(topic, number)


def _partitions(partitions: Any, what: str) -> list[Any]:
    if not isinstance(partitions, (list, tuple)):
        raise InvalidArgumentError(f"{what} takes a list of TopicPartition, not {shown(partitions)}")
    return list(partitions)


class ConfluentConsumer:
    """confluent-kafka's ``Consumer`` (see the module docstring); made by ``store.consumer({"group.id": ...})``."""

    def __init__(self, consumer_of: Callable[..., Consumer], conf: Mapping[str, Any]) -> None:
        self._consumer = consumer_of(**_kafka_configs(conf))
        self._on_assign: Callable[[Any, list[TopicPartition]], Any] | None = None

    @property
    def consumer(self) -> Consumer:
        """The kafka-python-shaped consumer underneath."""
        return self._consumer

    def __repr__(self) -> str:
        return f"ConfluentConsumer({self._consumer!r})"

    # -- assignment ------------------------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callable[..., Any] | None = None,
                  on_revoke: Callable[..., Any] | None = None, on_lost: Callable[..., Any] | None = None) -> None:
        """Read every partition of ``topics``; names starting with ``^`` are regular expressions, as librdkafka's."""
        topics = _partitions(topics, "subscribe()")
        patterns = [t for t in topics if isinstance(t, str) and t.startswith("^")]
        if patterns:
            if len(patterns) != len(topics):
                raise InvalidArgumentError("subscribe() takes topic names or ^patterns, not both in one list")
            self._consumer.subscribe(pattern="|".join(f"(?:{p[1:]})" for p in patterns))
        else:
            self._consumer.subscribe(topics)
        self._on_assign = on_assign

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()

    def assign(self, partitions: list[Any]) -> None:
        """Read exactly these partitions, each from its ``offset`` when it is one (an offset, ``OFFSET_BEGINNING``
        or ``OFFSET_END``); ``OFFSET_STORED``/``OFFSET_INVALID`` (the default): the committed offset, else
        ``auto.offset.reset``."""
        partitions = _partitions(partitions, "assign()")
        self._consumer.assign([_tp(p) for p in partitions])
        self._seek_each(partitions)

    def incremental_assign(self, partitions: list[Any]) -> None:
        """Add these partitions to the assignment (as :meth:`assign` starts them)."""
        partitions = _partitions(partitions, "incremental_assign()")
        self._consumer.assign(sorted(self._consumer.assignment() | {_tp(p) for p in partitions}))
        self._seek_each(partitions)

    def incremental_unassign(self, partitions: list[Any]) -> None:
        gone = {_tp(p) for p in _partitions(partitions, "incremental_unassign()")}
        self._consumer.assign(sorted(self._consumer.assignment() - gone))

    def unassign(self) -> None:
        self._consumer.unsubscribe()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition) for tp in sorted(self._consumer.assignment())]

    def _seek_each(self, partitions: Iterable[Any]) -> None:
        for p in partitions:
            offset = getattr(p, "offset", OFFSET_INVALID)
            tp = _tp(p)
            if offset == OFFSET_BEGINNING:
                self._consumer.seek_to_beginning(tp)
            elif offset == OFFSET_END:
                self._consumer.seek_to_end(tp)
            elif isinstance(offset, int) and offset >= 0:
                self._consumer.seek(tp, offset)
            elif offset not in (OFFSET_STORED, OFFSET_INVALID):
                raise InvalidArgumentError(f"{tp}: offset {shown(offset)} is not an offset >= 0, OFFSET_BEGINNING "
                                           "(-2), OFFSET_END (-1), OFFSET_STORED (-1000) or OFFSET_INVALID (-1001)")

    # -- reading ---------------------------------------------------------------------------------------------

    @staticmethod
    def _timeout_ms(timeout: float | None) -> float:
        if timeout is None or (not isinstance(timeout, bool) and isinstance(timeout, (int, float)) and timeout < 0):
            return float("inf")  # confluent-kafka: None or -1 waits for ever
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise InvalidArgumentError(f"timeout must be a number of seconds (or None / -1: wait for ever), not "
                                       f"{shown(timeout)}")
        return timeout * 1000

    def _assigned(self) -> None:
        if self._on_assign is not None:
            callback, self._on_assign = self._on_assign, None
            callback(self, self.assignment())

    def poll(self, timeout: float | None = None) -> Message | None:
        """One message, or None when none came within ``timeout`` seconds (None or -1: wait for one)."""
        wait = self._timeout_ms(timeout)
        self._assigned()
        records = self._poll(wait, 1)
        return Message(records[0]) if records else None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Up to ``num_messages`` messages (1 to 1,000,000, as confluent-kafka's), waiting up to ``timeout``
        seconds for the first (-1 or None: until there is one)."""
        if isinstance(num_messages, bool) or not isinstance(num_messages, int) or not 1 <= num_messages <= 1_000_000:
            raise InvalidArgumentError(f"num_messages must be between 1 and 1000000 (1M), not {shown(num_messages)}")
        wait = self._timeout_ms(timeout)
        self._assigned()
        return [Message(r) for r in self._poll(wait, num_messages)]

    def _poll(self, wait_ms: float, n: int) -> list[ConsumerRecord]:
        if wait_ms == float("inf"):
            while True:  # as confluent-kafka's poll(None): until a message comes
                got = self._consumer.poll(60_000, max_records=n)
                if got:
                    break
        else:
            got = self._consumer.poll(wait_ms, max_records=n)
        return [r for records in got.values() for r in records]

    # -- positions and offsets -------------------------------------------------------------------------------

    def position(self, partitions: list[Any]) -> list[TopicPartition]:
        """Each partition with the offset of the next message this consumer hands out."""
        return [TopicPartition(tp.topic, tp.partition, self._consumer.position(tp))
                for tp in map(_tp, _partitions(partitions, "position()"))]

    def seek(self, partition: Any) -> None:
        """Read ``partition`` from its ``offset`` next (``OFFSET_BEGINNING``, ``OFFSET_END`` or an offset)."""
        if getattr(partition, "offset", None) in (OFFSET_STORED, OFFSET_INVALID):
            raise InvalidArgumentError(f"seek() needs an offset >= 0, OFFSET_BEGINNING or OFFSET_END, not "
                                       f"{partition.offset}")
        self._seek_each([partition])

    def committed(self, partitions: list[Any], timeout: float | None = None) -> list[TopicPartition]:
        """Each partition with the group's committed offset (``OFFSET_INVALID`` where there is none) and metadata."""
        found = self._consumer.committed([_tp(p) for p in _partitions(partitions, "committed()")], metadata=True)
        return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID if om is None else om.offset,
                               None if om is None or not om.metadata else om.metadata) for tp, om in found.items()]

    def commit(self, message: Message | None = None, offsets: list[Any] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit ``message``'s offset + 1, or ``offsets`` (partitions with the next offset to consume), or, by
        default, the positions of every assigned partition. The committed partitions when ``asynchronous=False``,
        else None (the commit has been made either way)."""
        if message is not None and offsets is not None:
            raise InvalidArgumentError("commit() takes message or offsets, not both")
        if message is not None:
            if not isinstance(message, Message):
                raise InvalidArgumentError(f"commit(message=) takes a Message this consumer returned, not "
                                           f"{shown(message)}")
            todo: dict[KafkaTopicPartition, OffsetAndMetadata] | None = {
                KafkaTopicPartition(message.topic(), message.partition()): OffsetAndMetadata(message.offset() + 1)}
        elif offsets is not None:
            todo = {}
            for p in _partitions(offsets, "commit(offsets=)"):
                offset = getattr(p, "offset", None)
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise InvalidArgumentError(f"commit(offsets=): {_tp(p)} needs an offset >= 0, not {shown(offset)}")
                todo[_tp(p)] = OffsetAndMetadata(offset, getattr(p, "metadata", None) or "")
        else:
            todo = None
        if todo is None:
            done = {tp: self._consumer.position(tp) for tp in sorted(self._consumer.assignment())}
            self._consumer.commit({tp: OffsetAndMetadata(o) for tp, o in done.items()})
            result = [TopicPartition(tp.topic, tp.partition, o) for tp, o in done.items()]
        else:
            self._consumer.commit(todo)
            result = [TopicPartition(tp.topic, tp.partition, om.offset, om.metadata or None)
                      for tp, om in todo.items()]
        return None if asynchronous else result

    def store_offsets(self, message: Message | None = None, offsets: list[Any] | None = None) -> None:
        """Commit as :meth:`commit` does: there is no local offset store to hold them until the next commit."""
        self.commit(message=message, offsets=offsets, asynchronous=False)

    def offsets_for_times(self, partitions: list[Any], timeout: float | None = None) -> list[TopicPartition]:
        """Each partition (whose ``offset`` holds a timestamp in epoch ms) with the earliest offset whose record's
        timestamp is at or after it, or ``OFFSET_END`` (-1) when there is none, as librdkafka answers."""
        asked = _partitions(partitions, "offsets_for_times()")
        out = []
        for p in asked:  # one by one: the list may name a partition twice, with two times
            tp = _tp(p)
            hit = self._consumer.offsets_for_times({tp: p.offset})[tp]
            out.append(TopicPartition(tp.topic, tp.partition, OFFSET_END if hit is None else hit.offset))
        return out

    def get_watermark_offsets(self, partition: Any, timeout: float | None = None, cached: bool = False
                              ) -> tuple[int, int]:
        """``(low, high)``: the log start offset and the high watermark."""
        return self._consumer.get_watermark_offsets(_tp(partition), timeout, cached)

    def pause(self, partitions: list[Any]) -> None:
        self._consumer.pause(*map(_tp, _partitions(partitions, "pause()")))

    def resume(self, partitions: list[Any]) -> None:
        self._consumer.resume(*map(_tp, _partitions(partitions, "resume()")))

    def consumer_group_metadata(self) -> Any:
        return self._consumer.group_metadata()

    def memberid(self) -> None:
        """None: there is no group membership (see the module docstring)."""
        return None

    def close(self) -> None:
        """Commit the positions (with ``enable.auto.commit``) and stop; a closed consumer raises on every call but
        ``close``."""
        self._consumer.close()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}: deltalog's confluent-kafka "
                             "consumer implements subscribe, unsubscribe, assign, incremental_assign, "
                             "incremental_unassign, unassign, assignment, poll, consume, position, seek, committed, "
                             "commit, store_offsets, offsets_for_times, get_watermark_offsets, pause, resume, "
                             "consumer_group_metadata, memberid and close")


__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "ConfluentConsumer", "Message",
           "TopicPartition"]
