"""A consumer with Kafka's Python names (kafka-python's ``KafkaConsumer``; confluent-kafka's ``Consumer`` differs
mostly in spelling): read partitions from a position, commit how far a group got, resume there.

Made by :meth:`Store.consumer <deltalog.store.Store.consumer>`::

    consumer = store.consumer("orders", group_id="billing", auto_offset_reset="earliest")
    for record in consumer:            # or consumer.poll(timeout_ms=1000) -> {TopicPartition: [ConsumerRecord]}
        handle(record.key, record.value)
    consumer.commit()                  # or commit({TopicPartition("orders", 0): OffsetAndMetadata(42)})
    consumer.close()

What deltalog keeps of Kafka's model, and what it leaves out:

* **Committed offsets** are Kafka's: per group, topic and partition, the next offset to consume, with a metadata
  string, kept in the compacted internal topic ``__consumer_offsets`` (:mod:`deltalog.coordinator.group.offsets_topic`). A
  consumer's start position is its group's committed offset; with none (or one no longer in the log, after
  retention or DeleteRecords) ``auto_offset_reset`` decides: ``"latest"`` (Kafka's default: the log end, or at
  ``read_committed`` the last stable offset),
  ``"earliest"`` (the log start) or ``"none"`` (raise :class:`~deltalog.errors.NoOffsetForPartitionError`).
* **No group membership**: there is no coordinator process, so no join, heartbeat or rebalance. A consumer that
  ``subscribe()`` s is assigned every partition of its topics, as the only member of a group would be; two consumers
  of one group both read everything, and the last commit wins. To split the work, ``assign()`` partitions
  explicitly. (``group_id=None`` is allowed, as in Kafka, for a consumer that only reads: it cannot commit.)
* **enable_auto_commit** (default True, as Kafka's): ``poll()`` and iteration commit the positions of everything
  handed out before it, at most every ``auto_commit_interval_ms`` (5 s), and ``close()`` commits them once more.
  That is Kafka's at-least-once contract: a record counts as consumed once the call that returned it is followed
  by another call (or ``close()``); a crash in between delivers it again. Unlike Kafka, a commit that would not
  change any offset is skipped (each commit is a Delta commit). With ``enable_auto_commit=False`` only
  ``commit()`` commits.
* ``isolation_level`` (``read_uncommitted`` by default, as Kafka's) is passed to
  :func:`~deltalog.log.fetch.fetch`, and sets where a partition ends for ``end_offsets()``, ``seek_to_end()``
  and ``auto_offset_reset="latest"``: at ``read_committed`` the last stable offset, as in Kafka, so a consumer
  placed at the end while a transaction is open still reads that transaction's records once it commits.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.clock import Clock
from deltalog.coordinator.group.offsets_topic import OffsetsTopic, as_topic_partition, validate_group_id
from deltalog.errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTypeError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    shown,
)
from deltalog.ignored_configs import CONSUMER_IGNORED, config_key, unknown_config_message
from deltalog.log.fetch import READ_UNCOMMITTED, end_offset, fetch, validate_isolation_level
from deltalog.log.log_manager import LogManager, is_internal_topic
from deltalog.log.offsets_by_time import offset_and_timestamp_for_time, validate_timestamp
from deltalog.log.record import HEADERS, KEY, OFFSET, TIMESTAMP, VALUE
from deltalog.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

EARLIEST = "earliest"
LATEST = "latest"
NONE = "none"
AUTO_OFFSET_RESETS = (EARLIEST, LATEST, NONE)
#: CreateTime, Kafka's ``TimestampType.CREATE_TIME``.
CREATE_TIME = 0
#: LogAppendTime, Kafka's ``TimestampType.LOG_APPEND_TIME``: the topic's ``message.timestamp.type``.
LOG_APPEND_TIME = 1

#: Kafka's consumer defaults (ConsumerConfig), where deltalog has the same setting.
DEFAULTS: dict[str, Any] = {
    "group_id": None,
    "client_id": "deltalog-consumer",
    "auto_offset_reset": LATEST,
    "enable_auto_commit": True,
    "auto_commit_interval_ms": 5_000,
    "max_poll_records": 500,
    "isolation_level": READ_UNCOMMITTED,
    "consumer_timeout_ms": float("inf"),
    "metadata_max_age_ms": 300_000,
    "retry_backoff_ms": 100,
    "key_deserializer": None,
    "value_deserializer": None,
    "exclude_internal_topics": True,
}


def _configs(given: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka's consumer configs by their kafka-python names (``auto_offset_reset``) or Kafka's (``auto.offset.reset``,
    as confluent-kafka takes them), checked."""
    out = dict(DEFAULTS)
    for name, value in given.items():
        key = config_key(name)
        if key in DEFAULTS:
            out[key] = value
        elif key not in CONSUMER_IGNORED:  # network and fetch settings: accepted and ignored, as the producer does
            raise InvalidConfigError(unknown_config_message("consumer", name, DEFAULTS))
    if out["group_id"] is not None:
        out["group_id"] = validate_group_id(out["group_id"])
    reset = out["auto_offset_reset"]
    if not isinstance(reset, str) or reset.lower() not in AUTO_OFFSET_RESETS:
        # kafka-python also takes "smallest"/"largest" (the old names); so does deltalog.
        if isinstance(reset, str) and reset.lower() in ("smallest", "largest"):
            reset = EARLIEST if reset.lower() == "smallest" else LATEST
        else:
            raise InvalidConfigError(f"Invalid value {reset!r} for configuration auto.offset.reset: allowed: "
                                     f"{', '.join(map(repr, AUTO_OFFSET_RESETS))}")
    out["auto_offset_reset"] = reset.lower()
    out["isolation_level"] = validate_isolation_level(out["isolation_level"], "isolation.level")
    for key in ("enable_auto_commit", "exclude_internal_topics"):
        if not isinstance(out[key], bool):
            raise InvalidConfigError(f"{key} must be True or False, not {shown(out[key])}")
    for key, low in (("auto_commit_interval_ms", 0), ("max_poll_records", 1), ("metadata_max_age_ms", 0),
                     ("retry_backoff_ms", 0), ("consumer_timeout_ms", 0)):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < low:
            raise InvalidConfigError(f"{key} must be a number >= {low}, not {shown(v)}")
    for key in ("key_deserializer", "value_deserializer"):
        if out[key] is not None and not callable(out[key]):
            raise InvalidConfigError(f"{key} must be a callable (bytes -> value) or None, not {shown(out[key])}")
    return out


@dataclass
class _PartitionState:
    """Where a consumer is in one assigned partition: ``position`` is the next offset to hand out (what a commit
    records), ``fetch_position`` where the next read starts (ahead of ``position`` while records are buffered)."""

    position: int | None = None
    fetch_position: int | None = None
    buffered: int = 0
    paused: bool = False
    highwater: int | None = None  # the high watermark the last fetch saw (kafka-python's ``highwater``)


class Consumer:
    """Kafka's consumer over one store (see the module docstring for what differs from Kafka's)."""

    def __init__(self, logs: LogManager, offsets: OffsetsTopic, clock: Clock, *topics: str, **configs: Any) -> None:
        self._logs = logs
        self._offsets = offsets
        self._clock = clock
        self.config = _configs(configs)
        self._assignment: dict[TopicPartition, _PartitionState] = {}
        self._subscription: tuple[str, ...] | None = None
        self._pattern: re.Pattern[str] | None = None
        self._user_assignment = False
        self._metadata_at = 0.0
        self._buffer: deque[ConsumerRecord] = deque()
        self._next_fetch = 0  # round robin: which assigned partition is read first
        self._last_auto_commit = time.monotonic()
        self._last_committed: dict[TopicPartition, int] = {}
        # The id (KIP-516) of each topic this consumer took a position in: its commits name them, and one made for
        # a topic deleted and created again since is refused (UnknownTopicIdError), as Kafka's OffsetCommit v10
        # carries the topic ids the consumer's metadata had (KAFKA-12257).
        self._topic_ids: dict[str, str | None] = {}
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    def __repr__(self) -> str:
        return f"Consumer(group_id={self.config['group_id']!r}, assignment={sorted(self._assignment)})"

    # -- assignment ------------------------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | str = (), pattern: str | None = None) -> None:
        """Read every partition of ``topics`` (or of the topics whose name matches the regular expression
        ``pattern``, internal topics left out unless ``exclude_internal_topics=False``). Partitions added later are
        picked up within ``metadata_max_age_ms``. A topic that does not exist is an error (deltalog creates no
        topic on a read)."""
        self._check_open()
        if self._user_assignment:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive: this "
                                    "consumer has assigned partitions (call unsubscribe() first)")
        if isinstance(topics, str):
            topics = [topics]
        try:
            topics = tuple(topics)
        except TypeError:
            raise InvalidTypeError(f"subscribe() takes a list of topics, not {shown(topics)}") from None
        if bool(topics) == (pattern is not None):
            raise InvalidArgumentError("subscribe() takes a list of topics or a pattern (exactly one of them)")
        if pattern is not None:
            try:
                self._pattern = re.compile(pattern)
            except (re.error, TypeError) as e:
                raise InvalidArgumentError(f"the subscription pattern {shown(pattern)} is not a regular "
                                           f"expression: {e}") from None
            self._subscription = None
        else:
            for t in topics:
                if not isinstance(t, str):
                    raise InvalidArgumentError(f"a topic to subscribe to must be a str, not {shown(t)}")
                self._logs.partitions(t)  # raises UnknownTopicOrPartitionError naming the topics that exist
            self._subscription = topics
            self._pattern = None
        self._update_subscribed_partitions()

    def subscription(self) -> set[str] | None:
        """The topics subscribed to (for a pattern: those it matches now); None when not subscribed."""
        if self._subscription is not None:
            return set(self._subscription)
        if self._pattern is not None:
            return {tp.topic for tp in self._assignment}
        return None

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no subscription). Each must exist."""
        self._check_open()
        if self._subscription is not None or self._pattern is not None:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive: this "
                                    "consumer is subscribed (call unsubscribe() first)")
        if isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str):
            raise InvalidArgumentError("assign() takes a list of TopicPartition, not one")
        wanted = [as_topic_partition(tp) for tp in partitions]
        for tp in wanted:
            self._logs.log(tp.topic, tp.partition)  # raises for a topic or partition that does not exist
        self._set_assignment(wanted)
        self._user_assignment = bool(wanted)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def unsubscribe(self) -> None:
        """Drop the subscription or the assignment (positions are forgotten; commit first to keep them)."""
        self._subscription = None
        self._pattern = None
        self._user_assignment = False
        self._set_assignment([])

    def topics(self) -> set[str]:
        """The topics of the store (internal ones too, as kafka-python's ``topics()``)."""
        return set(self._logs.list_topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``; None if it does not exist."""
        return set(self._logs.partitions(topic)) if self._logs.topic_exists(topic) else None

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        keep = {tp: self._assignment.get(tp) or _PartitionState() for tp in partitions}
        self._assignment = dict(sorted(keep.items()))
        self._buffer = deque(r for r in self._buffer if (r.topic, r.partition) in self._assignment)
        assigned = {tp.topic for tp in self._assignment}
        self._topic_ids = {t: i for t, i in self._topic_ids.items() if t in assigned}

    def _update_subscribed_partitions(self) -> None:
        self._metadata_at = time.monotonic()
        if self._subscription is not None:
            topics = [t for t in self._subscription if self._logs.topic_exists(t)]
        elif self._pattern is not None:
            topics = [t for t in self._logs.list_topics() if self._pattern.fullmatch(t)
                      and not (self.config["exclude_internal_topics"] and is_internal_topic(t))]
        else:
            return
        self._set_assignment([TopicPartition(t, p) for t in topics for p in self._logs.partitions(t)])

    # -- positions -------------------------------------------------------------------------------------------

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record this consumer will hand out from ``partition`` (its committed offset, or
        the reset position, until it reads)."""
        state = self._state(partition, "check the position for")
        self._ensure_position(as_topic_partition(partition), state)
        assert state.position is not None
        return state.position

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next. An offset outside the log is found out on the next read, and
        ``auto_offset_reset`` applies (as in Kafka)."""
        state = self._state(partition, "seek")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgumentError(f"seek offset must be a whole number >= 0, not {shown(offset)}")
        self._set_position(as_topic_partition(partition), state, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read the given partitions (default: every assigned one) from their log start."""
        for tp, offset in self.beginning_offsets(partitions or list(self._assignment)).items():
            self._set_position(tp, self._state(tp, "seek"), offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read the given partitions (default: every assigned one) from their end (see :meth:`end_offsets`):
        only new records."""
        for tp, offset in self.end_offsets(partitions or list(self._assignment)).items():
            self._set_position(tp, self._state(tp, "seek"), offset)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log start offset."""
        return {tp: self._logs.log(tp.topic, tp.partition).head().log_start_offset
                for tp in map(as_topic_partition, partitions)}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end at this consumer's isolation level, as Kafka's ``endOffsets``: the log end offset
        (the high watermark) at ``read_uncommitted``, the last stable offset at ``read_committed`` (the records
        of an open transaction lie past it, and are read once it commits)."""
        return {tp: self._end_offset(tp) for tp in map(as_topic_partition, partitions)}

    def _end_offset(self, tp: TopicPartition) -> int:
        return end_offset(self._logs.log(tp.topic, tp.partition), self.config["isolation_level"])

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """kafka-python's ``offsets_for_times({TopicPartition: epoch_ms})``: per partition, the earliest offset whose
        record's timestamp is at or after the time, with that timestamp, or None when there is no such record (as
        Kafka's ListOffsets by timestamp; found from the Delta file statistics, see
        :mod:`deltalog.log.offsets_by_time`). Any existing partition, assigned or not. As Kafka's broker answers at
        the consumer's isolation level, an offset at or past the end (:meth:`end_offsets`: the last stable offset
        at ``read_committed``) is None too."""
        self._check_open()
        if not isinstance(timestamps, Mapping):
            raise InvalidArgumentError(f"offsets_for_times() takes a dict of TopicPartition to epoch ms, not "
                                       f"{shown(timestamps)}")
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for partition, ts in timestamps.items():
            tp = as_topic_partition(partition)
            validate_timestamp(ts, f"timestamp for {tp}")
            found = offset_and_timestamp_for_time(self._logs.log(tp.topic, tp.partition), ts,
                                                  upto=self._end_offset(tp))
            out[tp] = None if found is None else OffsetAndTimestamp(found.offset, found.timestamp)
        return out

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
                              ) -> tuple[int, int]:
        """confluent-kafka's ``get_watermark_offsets``: ``(low, high)``, the partition's log start offset and high
        watermark (the log end offset). Always asked of the log (``cached`` makes no difference: there is no
        broker round trip to save); ``timeout`` is accepted and unused."""
        self._check_open()
        tp = as_topic_partition(partition)
        head = self._logs.log(tp.topic, tp.partition).head()
        return head.log_start_offset, head.log_end_offset

    def highwater(self, partition: TopicPartition) -> int | None:
        """kafka-python's ``highwater``: the high watermark (log end offset) the last fetch of this assigned
        partition saw; None before its first fetch. Lag is ``highwater - position``."""
        return self._state(partition, "check the highwater for").highwater

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop handing out records of these partitions until :meth:`resume`."""
        for tp in partitions:
            state = self._state(tp, "pause")
            state.paused = True
            if state.position is not None:  # records fetched but not handed out are fetched again on resume
                self._set_position(as_topic_partition(tp), state, state.position)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp, "resume").paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    def _state(self, partition: object, what: str) -> _PartitionState:
        self._check_open()
        tp = as_topic_partition(partition)
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"You can only {what} partitions assigned to this consumer: {tp} is not "
                                    f"assigned (assigned: {', '.join(map(str, self._assignment)) or 'none'})")
        return state

    def _set_position(self, tp: TopicPartition, state: _PartitionState, offset: int) -> None:
        if tp.topic not in self._topic_ids:
            self._topic_ids[tp.topic] = self._logs.topic_id(tp.topic)
        if state.buffered:
            self._buffer = deque(r for r in self._buffer if (r.topic, r.partition) != tp)
        state.position = state.fetch_position = offset
        state.buffered = 0

    def _ensure_position(self, tp: TopicPartition, state: _PartitionState) -> None:
        """The start position of a partition not read yet: the group's committed offset, else the reset policy."""
        if state.position is not None:
            return
        committed = None
        if self.config["group_id"] is not None:
            found = self._offsets.committed(self.config["group_id"], [tp])
            committed = found[tp].offset if tp in found else None
            if committed is not None and committed < 0:  # -1/-2 a Kafka client committed: none (Kafka's consumer)
                committed = None
        head = self._logs.log(tp.topic, tp.partition).head()
        if committed is not None:
            self._last_committed[tp] = committed  # auto commit skips it until the position moves
        if committed is not None and head.log_start_offset <= committed <= head.log_end_offset:
            self._set_position(tp, state, committed)
        else:
            self._set_position(tp, state, self._reset(tp, head.log_start_offset, head.log_end_offset, committed))

    def _reset(self, tp: TopicPartition, start: int, end: int, was: int | None) -> int:
        policy = self.config["auto_offset_reset"]
        if policy == EARLIEST:
            return start
        if policy == LATEST:  # at read_committed the last stable offset, as Kafka's ListOffsets LATEST
            return self._end_offset(tp)
        if was is None:
            raise NoOffsetForPartitionError(
                f"{tp}: group {self.config['group_id']!r} has no committed offset and auto_offset_reset is "
                "'none'; commit or seek an offset, or use auto_offset_reset='earliest' or 'latest'")
        raise OffsetOutOfRangeError(
            f"{tp}: offset {was} is out of range [{start}, {end}] and auto_offset_reset is 'none'; seek to an "
            "offset in range, or use auto_offset_reset='earliest' or 'latest'", log_start_offset=start,
            log_end_offset=end)

    # -- reading ---------------------------------------------------------------------------------------------

    def poll(self, timeout_ms: float = 0, max_records: int | None = None, update_offsets: bool = True
             ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The records available now, by partition, at most ``max_records`` (default ``max_poll_records``),
        waiting up to ``timeout_ms`` for some when there are none. Auto-commits first (see the module docstring)."""
        self._check_open()
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms < 0:
            raise InvalidArgumentError(f"timeout_ms must be a number >= 0, not {shown(timeout_ms)}")
        limit = self.config["max_poll_records"] if max_records is None else max_records
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgumentError(f"max_records must be an int >= 1, not {shown(limit)}")
        self._maybe_auto_commit()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            records = self._take(limit)
            if records or time.monotonic() >= deadline:
                break
            time.sleep(min(self.config["retry_backoff_ms"] / 1000, max(0.0, deadline - time.monotonic())))
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for r in records:
            out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
        return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; waits for one for at most ``consumer_timeout_ms`` (default: forever), then stops."""
        self._check_open()
        self._maybe_auto_commit()
        deadline = time.monotonic() + self.config["consumer_timeout_ms"] / 1000
        while True:
            records = self._take(1)
            if records:
                return records[0]
            if time.monotonic() >= deadline:
                raise StopIteration
            time.sleep(min(self.config["retry_backoff_ms"] / 1000, max(0.0, deadline - time.monotonic())))

    def _take(self, n: int) -> list[ConsumerRecord]:
        """Up to ``n`` records from the buffer (filled by a fetch when empty); positions move past each."""
        if not self._buffer:
            self._fill(max(n, self.config["max_poll_records"]))
        out: list[ConsumerRecord] = []
        while self._buffer and len(out) < n:
            r = self._buffer.popleft()
            state = self._assignment[TopicPartition(r.topic, r.partition)]
            out.append(r)
            state.buffered -= 1
            state.position = r.offset + 1 if state.buffered else state.fetch_position
        return out

    def _fill(self, max_records: int) -> None:
        """Fetch up to ``max_records`` records into the buffer, from the assigned partitions in turn."""
        if (self._subscription is not None or self._pattern is not None) and \
                (time.monotonic() - self._metadata_at) * 1000 >= self.config["metadata_max_age_ms"]:
            self._update_subscribed_partitions()
        tps = [tp for tp, s in self._assignment.items() if not s.paused]
        if not tps:
            return
        start = self._next_fetch % len(tps)
        self._next_fetch += 1
        remaining = max_records
        for tp in tps[start:] + tps[:start]:
            if remaining <= 0:
                break
            state = self._assignment[tp]
            self._ensure_position(tp, state)
            plog = self._logs.log(tp.topic, tp.partition)
            assert state.fetch_position is not None
            try:
                got = fetch(plog, state.fetch_position, remaining, self.config["isolation_level"])
            except OffsetOutOfRangeError as e:
                # Retention or DeleteRecords moved the log start past the position (or a seek went past the end):
                # the reset policy says where to go on, as in Kafka.
                if state.buffered:
                    continue  # hand out what is buffered first
                self._set_position(tp, state, self._reset(tp, e.log_start_offset, e.log_end_offset,
                                                          state.fetch_position))
                continue
            state.highwater = got.high_watermark
            records = self._records(tp, got.records, LOG_APPEND_TIME if got.log_append_time else CREATE_TIME)
            self._buffer.extend(records)
            state.buffered += len(records)
            state.fetch_position = got.next_offset
            if not state.buffered:
                state.position = got.next_offset  # offsets compaction removed: nothing to hand out, move on
            remaining -= len(records)

    def _records(self, tp: TopicPartition, table: pa.Table, timestamp_type: int) -> list[ConsumerRecord]:
        if not table.num_rows:
            return []
        kd, vd = self.config["key_deserializer"], self.config["value_deserializer"]
        cols = table.select([OFFSET, TIMESTAMP, KEY, VALUE, HEADERS]).to_pydict()
        out = []
        for offset, ts, key, value, headers in zip(cols[OFFSET], cols[TIMESTAMP], cols[KEY], cols[VALUE],
                                                   cols[HEADERS], strict=True):
            pairs = [(h["key"], h["value"]) for h in headers or ()]
            out.append(ConsumerRecord(
                tp.topic, tp.partition, -1, offset, ts, timestamp_type,
                kd(key) if kd is not None and key is not None else key,
                vd(value) if vd is not None and value is not None else value,
                pairs, None, -1 if key is None else len(key), -1 if value is None else len(value),
                sum(len(k.encode("utf-8")) + len(v or b"") for k, v in pairs)))
        return out

    # -- committing ------------------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit ``offsets`` (``{TopicPartition: OffsetAndMetadata}``: the next offset to consume, per partition;
        any existing partition, assigned or not) for this consumer's group, or, by default, the positions of every
        assigned partition this consumer has a position in. One Delta commit, all or nothing."""
        self._check_open()
        group = self._group("commit offsets")
        if offsets is None:
            offsets = {tp: OffsetAndMetadata(s.position) for tp, s in self._assignment.items()
                       if s.position is not None}
        batch = self._offsets.commit(group, offsets, self._clock.now_ms(), self._topic_ids)
        for tp, om in batch.offsets.items():
            if om is not None:
                self._last_committed[tp] = om.offset

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: Callable[[Mapping[TopicPartition, OffsetAndMetadata], Exception | None], Any] | None
                     = None) -> None:
        """kafka-python's ``commit_async``: here the commit is made at once (a Delta commit is quick), then
        ``callback(offsets, error)`` is called, as Kafka calls it when the commit completes."""
        try:
            self.commit(offsets)
        except Exception as e:  # handed to the callback, as Kafka hands a failed async commit's error
            if callback is None:
                raise
            callback(offsets or {}, e)
            return
        if callback is not None:
            callback(offsets or {tp: OffsetAndMetadata(s.position) for tp, s in self._assignment.items()
                                 if s.position is not None}, None)

    def committed(self, partition: TopicPartition | Iterable[TopicPartition], metadata: bool = False) -> Any:
        """The group's committed offset of ``partition`` (an int, or the OffsetAndMetadata with ``metadata=True``;
        None if it has none), as kafka-python returns it; for a list of partitions, a dict of each to its
        OffsetAndMetadata or None (confluent-kafka's ``committed(partitions)``)."""
        self._check_open()
        group = self._group("read committed offsets")
        single = isinstance(partition, tuple) and len(partition) == 2 and isinstance(partition[0], str)
        tps = [as_topic_partition(partition)] if single else [as_topic_partition(tp) for tp in partition]  # type: ignore[union-attr]
        for tp in tps:
            self._logs.log(tp.topic, tp.partition)  # raises for a topic or partition that does not exist
        found = self._offsets.committed(group, tps)
        if single:
            om = found.get(tps[0])
            return om if metadata or om is None else om.offset
        return {tp: found.get(tp) for tp in tps}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What ``send_offsets_to_transaction`` takes (KIP-447); no membership, so generation -1 and no member."""
        return ConsumerGroupMetadata(self.config["group_id"])

    consumer_group_metadata = group_metadata  # confluent-kafka's name

    def _group(self, what: str) -> str:
        group = self.config["group_id"]
        if group is None:
            raise InvalidConfigError(f"this consumer has no group_id: to {what}, you must provide a valid group_id "
                                     "in the consumer configuration")
        return group

    def _maybe_auto_commit(self) -> None:
        if not self.config["enable_auto_commit"] or self.config["group_id"] is None:
            return
        if (time.monotonic() - self._last_auto_commit) * 1000 < self.config["auto_commit_interval_ms"]:
            return
        self._last_auto_commit = time.monotonic()
        self._auto_commit()

    def _auto_commit(self) -> None:
        changed = {tp: OffsetAndMetadata(s.position) for tp, s in self._assignment.items()
                   if s.position is not None and self._last_committed.get(tp) != s.position}
        if changed:
            self.commit(changed)

    # -- closing ---------------------------------------------------------------------------------------------

    def close(self, autocommit: bool = True) -> None:
        """Commit the positions (with ``enable_auto_commit`` and ``autocommit``) and stop. Idempotent."""
        if self._closed:
            return
        try:
            if autocommit and self.config["enable_auto_commit"] and self.config["group_id"] is not None:
                self._auto_commit()
        finally:
            self._closed = True
            self._buffer.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")


__all__ = ["AUTO_OFFSET_RESETS", "Consumer"]
