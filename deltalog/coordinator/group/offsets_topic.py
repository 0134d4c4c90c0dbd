"""``__consumer_offsets``: the internal compacted topic consumer groups' committed offsets live in.

As in Kafka (the group coordinator's log), each committed offset is one keyed record, in Kafka's own binary format
(``group-coordinator/src/main/resources/common/message/``):

* key: ``OffsetCommitKey`` version 1, ``int16 version, string group, string topic, int32 partition`` (strings are
  an ``int16`` length and UTF-8 bytes); version 2 keys are group metadata, which deltalog does not write and skips
  on reading, as Kafka's loader skips record types it does not know;
* value: ``OffsetCommitValue`` version 3, ``int16 version, int64 offset, int32 leaderEpoch, string metadata,
  int64 commitTimestamp`` (versions 0 to 3 are read); a null value (a tombstone) removes the committed offset;
* header ``deltalog.topic_id``: the id (KIP-516) of the topic the offset was committed on. Kafka's
  ``OffsetCommitKey`` names the topic only; deltalog keeps the id beside it, in a header Kafka's format leaves
  free, so that an offset committed on an earlier topic of the same name is told apart
  (:class:`~deltalog.groups.admin.PartitionOffsets` ``stale``). A commit that names the id it was made for
  (``topic_ids``: the consumer passes the ids of the topics it read, as Kafka's OffsetCommit v10 carries topic
  ids) is refused with :class:`~deltalog.errors.UnknownTopicIdError` when the topic's id changed since: a topic
  deleted and created again while a consumer of the old one was running.

All offsets of a group live in one partition, ``abs(javaHash(group)) % partitions`` (Kafka's
``GroupCoordinatorService.partitionFor``), so one commit of any number of offsets is one append, one Delta commit:
atomic. The topic is made on first commit with ``cleanup.policy=compact`` and ``offsets.topic.num.partitions``
partitions (a store config); deltalog's own cleaner keeps it to about one record per group, topic and partition,
the job Kafka built compaction for.

Committed offsets are read by replaying a partition (:class:`OffsetsTopic` keeps the replayed state and reads
only what was appended since), always ``read_committed`` through :func:`deltalog.log.fetch.fetch`: an offset
committed inside a transaction counts once the transaction commits, never if it aborts.

:func:`offset_commit_records` is the seam for ``send_offsets_to_transaction``: the transactional producer gets the
records of a commit and the partition they go to, and writes them with its transaction.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.config import StoreConfig
from deltalog.errors import (
    CorruptLogError,
    InvalidArgumentError,
    InvalidGroupIdError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicIdError,
)
from deltalog.log.fetch import READ_COMMITTED, fetch
from deltalog.log.log_manager import GROUP_METADATA_TOPIC_NAME, LogManager
from deltalog.log.record import HEADER_TYPE, HEADERS, KEY, OFFSET, TIMESTAMP, VALUE
from deltalog.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

#: The topic's name, Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``.
OFFSETS_TOPIC = GROUP_METADATA_TOPIC_NAME
#: Key versions double as record types (Kafka's ``CoordinatorRecordSerde``): 0 and 1 are offset commits, 2 group
#: metadata.
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
#: The record header that carries the id of the topic an offset was committed on.
TOPIC_ID_HEADER = "deltalog.topic_id"
#: Rows a replay reads at a time.
REPLAY_PAGE = 100_000
#: How long a process waits for another one that is creating the topic.
CREATE_WAIT_S = 60.0

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAX_STRING = 32_767  # an int16 length


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in 32-bit arithmetic."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The partition of ``__consumer_offsets`` that holds ``group_id``'s offsets: Kafka's
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` (``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# -- the record format ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetCommitKey:
    """The key of one committed offset."""

    group: str
    topic: str
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class OffsetCommitValue:
    """The value of one committed offset (``expire_timestamp_ms`` only in version 1 values, else -1)."""

    offset: int
    metadata: str
    commit_timestamp_ms: int
    leader_epoch: int = -1
    expire_timestamp_ms: int = -1
    topic_id: str | None = None  # from the record's header; None for a commit written without one

    def offset_and_metadata(self) -> OffsetAndMetadata:
        return OffsetAndMetadata(self.offset, self.metadata, self.leader_epoch)


def _string(s: str, what: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > _MAX_STRING:
        raise InvalidArgumentError(f"{what} is {len(b)} bytes of UTF-8; at most {_MAX_STRING} fit an offset commit")
    return _INT16.pack(len(b)) + b


def encode_key(group: str, topic: str, partition: int) -> bytes:
    """``OffsetCommitKey`` version 1, as Kafka writes it."""
    return (_INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group, "the group id") + _string(topic, "the topic")
            + _INT32.pack(partition))


def encode_value(offset: int, metadata: str, commit_timestamp_ms: int, leader_epoch: int = -1) -> bytes:
    """``OffsetCommitValue`` version 3, as Kafka writes it."""
    return (_INT16.pack(OFFSET_COMMIT_VALUE_VERSION) + _INT64.pack(offset) + _INT32.pack(leader_epoch)
            + _string(metadata, "the offset metadata") + _INT64.pack(commit_timestamp_ms))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.data, self.at)
        self.at += s.size
        return v

    def string(self) -> str:
        n = self.take(_INT16)
        if n < 0 or self.at + n > len(self.data):
            raise ValueError(f"a string of {n} bytes does not fit")
        s = self.data[self.at:self.at + n].decode("utf-8")
        self.at += n
        return s

    def done(self) -> None:
        if self.at != len(self.data):
            raise ValueError(f"{len(self.data) - self.at} bytes left over")


def decode_key(data: bytes) -> OffsetCommitKey | None:
    """The offset-commit key in ``data``; None for another record type (group metadata, or a type from a newer
    format, which Kafka's loader also skips). Raises ``ValueError`` for bytes that are not a key."""
    r = _Reader(data)
    version = r.take(_INT16)
    if version not in (0, 1):
        return None
    key = OffsetCommitKey(r.string(), r.string(), r.take(_INT32))
    r.done()
    return key


def decode_value(data: bytes) -> OffsetCommitValue:
    """An ``OffsetCommitValue`` of version 0 to 3. Raises ``ValueError`` for anything else."""
    r = _Reader(data)
    version = r.take(_INT16)
    if version not in (0, 1, 2, 3):
        raise ValueError(f"OffsetCommitValue version {version} is not one deltalog reads (0 to 3)")
    offset = r.take(_INT64)
    epoch = r.take(_INT32) if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.take(_INT64)
    expire_ts = r.take(_INT64) if version == 1 else -1
    r.done()
    return OffsetCommitValue(offset, metadata, commit_ts, epoch, expire_ts)


# -- commits ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetCommitBatch:
    """The records of one offset commit and where they go: every offset of a commit is in the group's partition
    of ``__consumer_offsets``, so the records are one append (one batch), written or not as a whole.

    ``records`` has the columns ``key``, ``value`` (null: a tombstone) and ``timestamp_ms`` (the commit time), which
    :meth:`PartitionLog.append <deltalog.log.partition_log.PartitionLog.append>` takes as they are.
    """

    topic: str
    partition: int
    group_id: str
    offsets: dict[TopicPartition, OffsetAndMetadata | None] = field(repr=False)
    records: pa.Table = field(repr=False)


def validate_group_id(group_id: object) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError(
            f"a consumer group id must be a non-empty string, not {group_id!r}: to use the group management or "
            "offset commit APIs, you must provide a valid group id")
    return group_id


def normalize_offsets(offsets: Mapping[Any, Any], max_metadata_bytes: int, *, allow_negative: bool = False
                      ) -> dict[TopicPartition, OffsetAndMetadata]:
    """``offsets`` as ``{TopicPartition: OffsetAndMetadata}``, checked: a key is a TopicPartition (or a
    ``(topic, partition)`` pair, such as kafka-python's), a value an OffsetAndMetadata (or a ``(offset, metadata[,
    leader_epoch])`` tuple, or a bare offset); offsets are whole numbers >= 0 (any whole number with
    ``allow_negative``: Kafka's coordinator stores what a client commits, and KafkaJS commits -1 and -2 after an
    out-of-range reset; readers take a negative one for no committed offset) and metadata at most
    ``max_metadata_bytes`` of UTF-8 (Kafka's ``offset.metadata.max.bytes``)."""
    if not isinstance(offsets, Mapping):
        raise InvalidArgumentError(
            f"offsets must be a mapping of TopicPartition to OffsetAndMetadata (or to an offset), not "
            f"{type(offsets).__name__}")
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, om in offsets.items():
        tp = as_topic_partition(tp)
        if isinstance(om, int) and not isinstance(om, bool):
            om = OffsetAndMetadata(om)
        elif isinstance(om, tuple) and 1 <= len(om) <= 3:
            om = OffsetAndMetadata(*om)
        else:
            raise InvalidArgumentError(f"the offset to commit for {tp} must be an OffsetAndMetadata or an int, not {om!r}")
        offset, metadata, epoch = om
        if isinstance(offset, bool) or not isinstance(offset, int) or (offset < 0 and not allow_negative):
            raise InvalidArgumentError(f"the offset to commit for {tp} must be a whole number >= 0 (the next offset "
                                       f"to consume), not {offset!r}")
        if metadata is None:
            metadata = ""
        if not isinstance(metadata, str):
            raise InvalidArgumentError(f"offset metadata for {tp} must be a str, not {type(metadata).__name__}")
        if len(metadata.encode("utf-8")) > max_metadata_bytes:
            raise OffsetMetadataTooLargeError(
                f"the metadata of the offset for {tp} is {len(metadata.encode('utf-8'))} bytes; "
                f"offset.metadata.max.bytes allows {max_metadata_bytes}")
        if epoch is None:
            epoch = -1
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not -1 <= epoch < 2**31:
            raise InvalidArgumentError(f"the leader epoch for {tp} must be an int >= -1, not {epoch!r}")
        out[tp] = OffsetAndMetadata(offset, metadata, epoch)
    return out


def as_topic_partition(tp: object) -> TopicPartition:
    """A TopicPartition from one (or any ``(topic, partition)`` pair, such as kafka-python's)."""
    if isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int) \
            and not isinstance(tp[1], bool):
        return TopicPartition(tp[0], tp[1])
    raise InvalidArgumentError(f"expected a TopicPartition(topic, partition), not {tp!r}")


def offset_commit_records(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | None],
                          commit_timestamp_ms: int, num_partitions: int,
                          topic_ids: Mapping[str, str | None] | None = None) -> OffsetCommitBatch:
    """The records that commit ``offsets`` for ``group_id`` and the partition of ``__consumer_offsets`` they go to.

    A value of None is a tombstone: it removes that committed offset. ``topic_ids`` (the topics' ids now) go in
    each record's ``deltalog.topic_id`` header. Nothing is checked here beyond the format (use
    :meth:`OffsetsTopic.commit_batch`, which validates and creates the topic, unless the offsets are known good).
    """
    keys, values, headers = [], [], []
    for tp, om in offsets.items():
        keys.append(encode_key(group_id, tp.topic, tp.partition))
        values.append(None if om is None else encode_value(om.offset, om.metadata, commit_timestamp_ms,
                                                           om.leader_epoch))
        topic_id = (topic_ids or {}).get(tp.topic)
        headers.append([] if om is None or topic_id is None else [{"key": TOPIC_ID_HEADER,
                                                                    "value": topic_id.encode()}])
    records = pa.table({KEY: pa.array(keys, pa.binary()), VALUE: pa.array(values, pa.binary()),
                        HEADERS: pa.array(headers, pa.list_(pa.field("element", HEADER_TYPE))),
                        TIMESTAMP: pa.array([commit_timestamp_ms] * len(keys), pa.int64())})
    return OffsetCommitBatch(OFFSETS_TOPIC, partition_for(group_id, num_partitions), group_id, dict(offsets), records)


# -- the topic -----------------------------------------------------------------------------------------------


@dataclass
class _Replay:
    """One partition of ``__consumer_offsets`` replayed up to ``position``: the latest visible value of each key."""

    position: int
    entries: dict[OffsetCommitKey, OffsetCommitValue] = field(default_factory=dict)


class OffsetsTopic:
    """Committed offsets of every group: commits append to ``__consumer_offsets``, reads replay it.

    A partition's replay is kept and brought up to date by reading only what was appended since (Kafka's
    coordinator keeps its partitions in memory the same way), so a consumer that asks for its committed offsets
    again reads one new file, not the log. Thread-safe; keep one per store (``Store`` does).
    """

    def __init__(self, logs: LogManager, config: StoreConfig | None = None) -> None:
        self.logs = logs
        self.config = config or StoreConfig()
        self._partitions: int | None = None
        self._replays: dict[int, _Replay] = {}
        self._lock = threading.RLock()

    def topic_config(self) -> dict[str, str]:
        """The topic configs ``__consumer_offsets`` is created with (Kafka's ``groupMetadataTopicConfigs``)."""
        return {"cleanup.policy": "compact", "segment.bytes": str(self.config.offsets_topic_segment_bytes)}

    def num_partitions(self, *, create: bool = False) -> int | None:
        """The partition count of ``__consumer_offsets``; None if it does not exist (and ``create`` is False)."""
        with self._lock:
            if self._partitions is None:
                if self.logs.topic_exists(OFFSETS_TOPIC):
                    self._partitions = len(self.logs.partitions(OFFSETS_TOPIC))
                elif create:
                    self._partitions = self._create()
            return self._partitions

    def _create(self) -> int:
        """Create the topic (first use), or wait for the process that is creating it."""
        wanted = self.config.offsets_topic_num_partitions
        try:
            self.logs.create_topic(OFFSETS_TOPIC, wanted, self.topic_config())
            log.info("created %s with %d partitions", OFFSETS_TOPIC, wanted)
            return wanted
        except TopicExistsError:
            deadline = time.monotonic() + CREATE_WAIT_S
            while time.monotonic() < deadline:
                if self.logs.topic_exists(OFFSETS_TOPIC):
                    return len(self.logs.partitions(OFFSETS_TOPIC))
                time.sleep(0.05)
            raise

    def partition_for(self, group_id: str, *, create: bool = False) -> int | None:
        n = self.num_partitions(create=create)
        return None if n is None else partition_for(validate_group_id(group_id), n)

    # -- writes ------------------------------------------------------------------------------------------------

    def commit_batch(self, group_id: str, offsets: Mapping[Any, Any], now_ms: int,
                     topic_ids: Mapping[str, str | None] | None = None, *, allow_negative: bool = False
                     ) -> OffsetCommitBatch:
        """The validated records of an offset commit, and their partition: what ``send_offsets_to_transaction``
        writes inside a transaction. Creates ``__consumer_offsets`` on first use; raises for an empty group id, a
        topic or partition that does not exist, a negative offset or metadata over ``offset.metadata.max.bytes``,
        and :class:`UnknownTopicIdError` when a topic of ``topic_ids`` (the ids the committer read the topics
        under) has another id now. Each record carries the id its topic has now."""
        group_id = validate_group_id(group_id)
        checked = normalize_offsets(offsets, self.config.offset_metadata_max_bytes, allow_negative=allow_negative)
        for tp in checked:
            self.logs.log(tp.topic, tp.partition)  # raises for a topic or partition that does not exist
        current = {t: self.logs.topic_id(t) for t in sorted({tp.topic for tp in checked})}
        for topic, expected in sorted((topic_ids or {}).items()):
            if topic in current and expected is not None and current[topic] != expected:
                raise UnknownTopicIdError(
                    f"topic {topic!r} has id {current[topic]} now, and these offsets were read from the topic with "
                    f"id {expected}, which no longer exists (the topic was deleted and created again): committing "
                    f"them for group {group_id!r} would make the group skip the new topic's records, so nothing "
                    "was committed. Allowed: offsets of the topic as it is now: unsubscribe() and subscribe or assign "
                    "it again (or start a new consumer), and the group starts from its committed offset or "
                    "auto.offset.reset",
                    topic=topic, topic_id=expected, current_topic_id=current[topic])
        n = self.num_partitions(create=True)
        assert n is not None
        return offset_commit_records(group_id, checked, now_ms, n, current)

    def commit(self, group_id: str, offsets: Mapping[Any, Any], now_ms: int,
               topic_ids: Mapping[str, str | None] | None = None, *, allow_negative: bool = False
               ) -> OffsetCommitBatch:
        """Commit ``offsets`` for ``group_id`` now: one append to the group's partition (all or nothing);
        ``topic_ids`` as :meth:`commit_batch` checks them."""
        batch = self.commit_batch(group_id, offsets, now_ms, topic_ids, allow_negative=allow_negative)
        if batch.records.num_rows:
            self._append(batch, now_ms)
        return batch

    def delete(self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int) -> OffsetCommitBatch | None:
        """Remove the committed offsets of ``partitions`` (tombstones); None when there was nothing to remove."""
        n = self.num_partitions()
        if n is None:
            return None
        wanted = set(map(as_topic_partition, partitions))
        have = self.committed(group_id, wanted)
        if not have:
            return None
        batch = offset_commit_records(group_id, dict.fromkeys(sorted(have)), now_ms, n)
        self._append(batch, now_ms)
        return batch

    def delete_topic_offsets(self, topic: str, now_ms: int) -> int:
        """Remove every group's committed offsets of ``topic`` (tombstones), as Kafka's coordinator does when a
        topic is deleted, so a topic made again under the name does not inherit them. Returns how many went."""
        n = self.num_partitions()
        if n is None:
            return 0
        removed = 0
        with self._lock:
            for p in range(n):
                keys = [k for k in self._refresh(p).entries if k.topic == topic]
                if keys:
                    self._tombstone(p, keys, now_ms)
                    removed += len(keys)
        return removed

    def expire_offsets(self, now_ms: int, retention_ms: int | None = None) -> dict[str, list[TopicPartition]]:
        """Kafka's offset expiration (``offsets.retention.minutes``, or ``retention_ms``): remove every committed
        offset whose commit is that old (or whose version 1 value's expire timestamp has passed), with a
        tombstone. deltalog's groups have no members, so each offset ages on its own, as Kafka ages those of a
        group without a protocol (standalone consumers). A commit of an expired key appended while the
        tombstones were written is appended again after them, so it is not lost. Returns what went, by group."""
        retention = self.config.offsets_retention_minutes * 60_000 if retention_ms is None else retention_ms
        n = self.num_partitions()
        if n is None:
            return {}
        out: dict[str, list[TopicPartition]] = {}
        with self._lock:
            for p in range(n):
                replay = self._refresh(p)
                doomed = [k for k, v in replay.entries.items() if _expired(v, now_ms, retention)]
                if not doomed:
                    continue
                seen = replay.position
                first = self._tombstone(p, doomed, now_ms)
                self._append_raced(p, set(doomed), seen, first, now_ms)
                for k in sorted(doomed, key=lambda k: (k.group, k.topic, k.partition)):
                    out.setdefault(k.group, []).append(k.topic_partition)
        if out:
            log.info("expired %d committed offset(s) of %d group(s) (offsets.retention.minutes)",
                     sum(map(len, out.values())), len(out))
        return dict(sorted(out.items()))

    def _tombstone(self, partition: int, keys: Iterable[OffsetCommitKey], now_ms: int) -> int:
        """Append a tombstone for each key to one partition; returns the first tombstone's offset."""
        keys = sorted(keys, key=lambda k: (k.group, k.topic, k.partition))
        records = pa.table({
            KEY: pa.array([encode_key(k.group, k.topic, k.partition) for k in keys], pa.binary()),
            VALUE: pa.array([None] * len(keys), pa.binary()),
            TIMESTAMP: pa.array([now_ms] * len(keys), pa.int64())})
        return self.logs.log(OFFSETS_TOPIC, partition).append(records, now_ms)[0]

    def _append_raced(self, partition: int, keys: set[OffsetCommitKey], seen: int, tombstones_at: int,
                      now_ms: int) -> None:
        """Append again the latest commit of each of ``keys`` that landed in ``[seen, tombstones_at)``: between
        the replay that found the keys expired and their tombstones."""
        if tombstones_at <= seen:
            return
        got = fetch(self.logs.log(OFFSETS_TOPIC, partition), seen, tombstones_at - seen, READ_COMMITTED)
        latest: dict[OffsetCommitKey, tuple[bytes, int]] = {}
        for off, k, v, ts in zip(*(got.records.column(c).to_pylist() for c in (OFFSET, KEY, VALUE, TIMESTAMP)),
                                 strict=True):
            key = decode_key(k) if k is not None and off < tombstones_at else None
            if key in keys:
                latest[key] = (v, ts)
        again = [(encode_key(k.group, k.topic, k.partition), v, ts) for k, (v, ts) in latest.items() if v is not None]
        if again:
            log.info("%d offset commit(s) raced their expiry; appended again", len(again))
            self.logs.log(OFFSETS_TOPIC, partition).append(pa.table({
                KEY: pa.array([a[0] for a in again], pa.binary()), VALUE: pa.array([a[1] for a in again], pa.binary()),
                TIMESTAMP: pa.array([a[2] for a in again], pa.int64())}), now_ms)

    def _append(self, batch: OffsetCommitBatch, now_ms: int) -> None:
        self.logs.log(batch.topic, batch.partition).append(batch.records, now_ms)

    # -- reads -------------------------------------------------------------------------------------------------

    def committed(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of ``group_id`` (of ``partitions`` only, if given) that exist, read_committed."""
        p = self.partition_for(group_id)
        if p is None:
            return {}
        wanted = None if partitions is None else set(map(as_topic_partition, partitions))
        with self._lock:
            entries = self._refresh(p).entries
            found = {k.topic_partition: v.offset_and_metadata() for k, v in entries.items() if k.group == group_id}
        if wanted is not None:
            found = {tp: om for tp, om in found.items() if tp in wanted}
        return dict(sorted(found.items()))

    def committed_topic_ids(self, group_id: str) -> dict[TopicPartition, str | None]:
        """The id of the topic each committed offset of ``group_id`` was committed on (None: written without one,
        by a deltalog before ids were recorded or by another writer)."""
        p = self.partition_for(group_id)
        if p is None:
            return {}
        with self._lock:
            entries = self._refresh(p).entries
            return {k.topic_partition: v.topic_id for k, v in entries.items() if k.group == group_id}

    def commit_timestamps(self, group_id: str) -> dict[TopicPartition, int]:
        """When each committed offset of ``group_id`` was committed (epoch ms, the committer's store clock)."""
        p = self.partition_for(group_id)
        if p is None:
            return {}
        with self._lock:
            entries = self._refresh(p).entries
            return {k.topic_partition: v.commit_timestamp_ms for k, v in entries.items() if k.group == group_id}

    def all_committed(self) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """Every group's committed offsets (every partition replayed), groups sorted by id."""
        n = self.num_partitions()
        if n is None:
            return {}
        out: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        with self._lock:
            for p in range(n):
                for k, v in self._refresh(p).entries.items():
                    out.setdefault(k.group, {})[k.topic_partition] = v.offset_and_metadata()
        return {g: dict(sorted(offs.items())) for g, offs in sorted(out.items())}

    def groups(self) -> list[str]:
        """The ids of the groups that have committed offsets, sorted."""
        return list(self.all_committed())

    def _refresh(self, partition: int) -> _Replay:
        """The partition's replay brought up to its last stable offset, reading only what is new."""
        plog = self.logs.log(OFFSETS_TOPIC, partition)
        replay = self._replays.get(partition)
        if replay is None:
            replay = self._replays[partition] = _Replay(plog.head().log_start_offset)
        while True:
            try:
                got = fetch(plog, replay.position, REPLAY_PAGE, READ_COMMITTED)
            except OffsetOutOfRangeError as e:
                # DeleteRecords moved the log start past what was replayed, or the log is not the one replayed (the
                # topic was made again): replay from the start, as a process that never read it would.
                replay = self._replays[partition] = _Replay(e.log_start_offset)
                continue
            _apply(replay, got.records, plog.topic, partition)
            replay.position = got.next_offset
            if got.next_offset >= got.last_stable_offset:
                return replay


def _expired(value: OffsetCommitValue, now_ms: int, retention_ms: int) -> bool:
    """Kafka's ``GroupMetadata.removeExpiredOffsets`` for a group without a protocol: an explicit expire
    timestamp (version 1 values) decides, else the commit timestamp plus the retention."""
    if value.expire_timestamp_ms != -1:
        return now_ms >= value.expire_timestamp_ms
    return now_ms - value.commit_timestamp_ms >= retention_ms


def _apply(replay: _Replay, records: pa.Table, topic: str, partition: int) -> None:
    """Apply a page of records to a replay: the latest record of each key wins, a tombstone removes its key."""
    if not records.num_rows:
        return
    columns = [OFFSET, KEY, VALUE] + ([HEADERS] if HEADERS in records.column_names else [])
    records = records.select(columns).filter(pc.is_valid(records.column(KEY)))
    latest = records.group_by(KEY, use_threads=False).aggregate([(OFFSET, "max")]).column(f"{OFFSET}_max")
    rows = records.filter(pc.is_in(records.column(OFFSET), value_set=latest))
    for row in rows.to_pylist():
        try:
            key = decode_key(row[KEY])
            value = None if key is None or row[VALUE] is None else decode_value(row[VALUE])
        except (ValueError, struct.error, UnicodeDecodeError) as e:
            raise CorruptLogError(f"{topic}-{partition}: the record at offset {row[OFFSET]} is not an offset commit "
                                  f"deltalog or Kafka wrote ({e})") from None
        if key is None:
            continue  # group metadata, or a newer record type: not an offset
        if value is None:
            replay.entries.pop(key, None)
        else:
            topic_id = next((h["value"] for h in row.get(HEADERS) or () if h["key"] == TOPIC_ID_HEADER), None)
            if topic_id is not None:
                value = replace(value, topic_id=topic_id.decode("utf-8", "replace"))
            replay.entries[key] = value
