"""A group's membership in ``__consumer_offsets``, as Kafka's coordinator keeps it (``GroupMetadataManager.storeGroup``
and ``loadGroupsForPartition``; the records ``GroupMetadataKey`` v2 and ``GroupMetadataValue`` v3), so a coordinator
that takes a group over from a dead endpoint knows its generation, members and assignment: the members go on
heartbeating and committing without joining again, as after a Kafka coordinator failover.

A group is written when a generation becomes Stable (the leader's SyncGroup handed out the assignment) and when it
empties; its record is one append to the group's partition of ``__consumer_offsets`` (the partition its committed
offsets are in), which the cleaner compacts like the offsets (the latest record of the key wins, DeleteGroups writes
a tombstone). It is read when an endpoint becomes the group's coordinator, as Kafka's coordinator loads the
partition it became leader of: the partition's group records are replayed (incrementally: what was appended since
the last look) and the group's latest record taken. The offsets' readers skip these
records (:func:`deltalog.coordinator.group.offsets_topic.decode_key` answers None for them, as Kafka's loader and formatter do).
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.coordinator.group.group_coordinator import EMPTY, STABLE, Group, Member
from deltalog.coordinator.group.offsets_topic import OFFSETS_TOPIC, REPLAY_PAGE
from deltalog.errors import CorruptLogError, DeltalogError, OffsetOutOfRangeError
from deltalog.log.fetch import fetch
from deltalog.log.record import KEY, TIMESTAMP, VALUE
from deltalog.log.transactions import READ_COMMITTED

log = logging.getLogger(__name__)

#: Kafka's ``GroupMetadataKey`` version and the ``GroupMetadataValue`` version written (3: members with static ids).
KEY_VERSION = 2
VALUE_VERSION = 3
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    data = s.encode("utf-8")
    return _I16.pack(len(data)) + data


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def encode_key(group_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(group_id)


def encode_value(g: Group, now_ms: int) -> bytes:
    """``GroupMetadataValue`` v3 of ``g`` (each member's subscription is its metadata of the chosen protocol)."""
    out = [_I16.pack(VALUE_VERSION), _string(g.protocol_type or ""), _I32.pack(g.generation_id),
           _string(g.protocol_name), _string(g.leader), _I64.pack(now_ms), _I32.pack(len(g.members))]
    for m in g.members.values():
        out += [_string(m.member_id), _string(None), _string(m.client_id), _string(""),
                _I32.pack(m.rebalance_timeout_ms), _I32.pack(m.session_timeout_ms),
                _bytes(dict(m.protocols).get(g.protocol_name or "", b"")), _bytes(m.assignment)]
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.data, self.at)
        self.at += s.size
        return int(v)

    def string(self) -> str | None:
        n = self.take(_I16)
        if n < 0:
            return None
        self.at += n
        return self.data[self.at - n:self.at].decode("utf-8")

    def bytes(self) -> bytes:
        n = self.take(_I32)
        self.at += max(n, 0)
        return self.data[self.at - max(n, 0):self.at]


def decode_value(group_id: str, data: bytes, now: float) -> Group:
    """The group a ``GroupMetadataValue`` (v0 to v3) describes, its members seen at ``now`` (a loaded member's
    session starts again, as Kafka's coordinator schedules every loaded member's heartbeat afresh)."""
    r = _Reader(data)
    version = r.take(_I16)
    if not 0 <= version <= 3:
        raise CorruptLogError(f"GroupMetadataValue version {version} is not one deltalog reads (0 to 3)")
    protocol_type = r.string()
    generation = r.take(_I32)
    protocol = r.string()
    leader = r.string()
    if version >= 2:
        r.take(_I64)  # current_state_timestamp
    members: dict[str, Member] = {}
    for _ in range(r.take(_I32)):
        member_id = r.string() or ""
        if version >= 3:
            r.string()  # group_instance_id: static membership is treated as dynamic
        client_id = r.string() or ""
        r.string()  # client_host
        rebalance_timeout = r.take(_I32) if version >= 1 else -1
        session_timeout = r.take(_I32)
        subscription = r.bytes()
        assignment = r.bytes()
        members[member_id] = Member(member_id, client_id, session_timeout,
                                    rebalance_timeout if rebalance_timeout >= 0 else session_timeout,
                                    protocol_type or "", [(protocol or "", subscription)], now, assignment=assignment)
    state = STABLE if members else EMPTY
    return Group(group_id, state, generation, protocol_type if members else None, protocol if members else None,
                 leader if members else None, members)


class GroupMetadataLog:
    """Writes and loads groups in a store's ``__consumer_offsets`` (what :class:`GroupCoordinator` is handed as its
    ``persist`` and ``load``)."""

    def __init__(self, store: Any, lock: Any) -> None:
        """``lock``: the endpoint's lock around store calls (taken inside the group coordinator's, never around it)."""
        self.store = store
        self.lock = lock
        self._replays: dict[int, tuple[int, dict[bytes, bytes | None]]] = {}  # partition -> (position, key -> value)

    def _log(self, group_id: str, *, create: bool) -> Any:
        partition = self.store.offsets_topic.partition_for(group_id, create=create)
        return None if partition is None else self.store.log_manager.log(OFFSETS_TOPIC, partition)

    def _append(self, group_id: str, value: bytes | None) -> None:
        now_ms = self.store.clock.now_ms()
        self._log(group_id, create=True).append(pa.table({
            KEY: pa.array([encode_key(group_id)], pa.binary()), VALUE: pa.array([value], pa.binary()),
            TIMESTAMP: pa.array([now_ms], pa.int64())}), now_ms)

    def persist(self, g: Group) -> None:
        """``GroupMetadataManager.storeGroup``: the group's record appended. A failure is logged, not raised: the
        group goes on in this endpoint's memory, and only a failover before its next write loses it (its members
        then join again)."""
        try:
            with self.lock:
                self._append(g.group_id, encode_value(g, self.store.clock.now_ms()))
        except DeltalogError as e:
            log.warning("could not write group %s's metadata to %s: %s", g.group_id, OFFSETS_TOPIC, e)

    def delete(self, group_id: str) -> None:
        """DeleteGroups: a tombstone for the group's record (the cleaner removes both after delete.retention.ms)."""
        if self.load(group_id) is not None:
            with self.lock:
                self._append(group_id, None)

    def load(self, group_id: str) -> Group | None:
        """The group's latest record in its partition (read_committed), None when it has none or its latest is a
        tombstone."""
        with self.lock:
            latest = self._latest(group_id)
        if latest is None:
            return None
        try:
            return decode_value(group_id, latest, time.monotonic())
        except (CorruptLogError, struct.error, UnicodeDecodeError) as e:
            log.warning("group %s's metadata in %s does not decode (%s); the group starts empty", group_id,
                        OFFSETS_TOPIC, e)
            return None

    def _latest(self, group_id: str) -> bytes | None:
        """The latest value of the group's key, from a replay of its partition's group records kept up to date
        incrementally (only what was appended since the last look is read, as the offsets' replay does)."""
        plog = self._log(group_id, create=False)
        if plog is None:
            return None
        position, latest = self._replays.get(plog.partition, (plog.head().log_start_offset, {}))
        while True:
            try:
                got = fetch(plog, position, REPLAY_PAGE, READ_COMMITTED)
            except OffsetOutOfRangeError as e:  # DeleteRecords moved the start, or the topic was made again
                position, latest = e.log_start_offset, {}
                continue
            keys = got.records.column(KEY)
            is_group = pc.equal(pc.binary_slice(keys, 0, 2), pa.scalar(_I16.pack(KEY_VERSION), pa.binary()))
            rows = got.records.filter(pc.fill_null(is_group, False))
            for k, v in zip(rows.column(KEY).to_pylist(), rows.column(VALUE).to_pylist(), strict=True):
                latest[k] = v
            position = got.next_offset
            if got.next_offset >= got.last_stable_offset:
                self._replays[plog.partition] = (position, latest)
                return latest.get(encode_key(group_id))


__all__ = ["GroupMetadataLog", "decode_value", "encode_key", "encode_value"]
