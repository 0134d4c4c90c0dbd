"""Consumer group membership for the endpoint (Kafka's classic ``GroupCoordinator``, ``GroupMetadata``): JoinGroup,
SyncGroup, Heartbeat and LeaveGroup, with rebalancing between members.

A group moves through Kafka's states: ``Empty`` -> ``PreparingRebalance`` (a member joined, left, changed its
protocols or expired: every known member must join again) -> ``CompletingRebalance`` (all joined, or the rebalance
timeout passed and the missing ones were removed: a new generation, its leader gets every member's metadata and
computes the assignment client-side) -> ``Stable`` (the leader's SyncGroup handed each member its assignment). A
member's heartbeat in ``PreparingRebalance`` gets ``REBALANCE_IN_PROGRESS``, which makes it join again; a member
silent for its session timeout is removed, as Kafka's heartbeat purgatory removes it.

The JoinGroup and SyncGroup requests wait for the round to complete (Kafka parks them in its join and sync
purgatories); each connection has its own thread (:mod:`deltalog.server.socket_server`), so a waiting request holds
only its own connection, as Kafka mutes a channel until it has answered.

Of several endpoints on one store, the one :mod:`deltalog.server.placement` names coordinates the group (the others
answer ``NOT_COORDINATOR``). The group lives in that endpoint's memory and, as Kafka writes it, in
``__consumer_offsets`` at each Stable generation and when it empties (``persist``/``load``,
:mod:`deltalog.coordinator.group.group_metadata`): when the coordinator changes (it stopped or died, or another endpoint
joined), the new one loads the group and its members go on with their generation, as after a Kafka coordinator
failover.
Static membership (``group.instance.id``, KIP-345) is treated as dynamic; the initial rebalance delay
(``group.initial.rebalance.delay.ms``) is 0.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"

#: Kafka's error codes of the group APIs.
NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27

#: Kafka's ``group.min.session.timeout.ms`` and ``group.max.session.timeout.ms`` defaults.
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000


@dataclass
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen: float
    joined: bool = False  # joined in the current round
    assignment: bytes = b""


@dataclass
class JoinResult:
    error_code: int
    generation_id: int = -1
    protocol_name: str | None = None
    protocol_type: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    round_deadline: float = 0.0


class GroupCoordinator:
    """The groups of one endpoint. Every method is safe to call from any connection thread."""

    def __init__(self, clock: Callable[[], float] | None = None, *, persist: Callable[[Group], None] | None = None,
                 load: Callable[[str], Group | None] | None = None) -> None:
        """``clock``: seconds on a monotonic scale (``time.monotonic``; tests give their own). ``persist`` writes a
        group when a generation becomes Stable or the group empties, ``load`` reads the one last written when this
        coordinator first meets the group (Kafka's ``storeGroup`` and ``loadGroupsForPartition``:
        :class:`deltalog.coordinator.group.group_metadata.GroupMetadataLog`); without them groups live in memory only."""
        self._now: Callable[[], float] = clock or time.monotonic
        self._cond = threading.Condition()
        self._groups: dict[str, Group] = {}
        self._persist = persist
        self._load = load
        self._absent: set[str] = set()  # loaded and not found: not read again until unloaded

    # -- helpers (the lock held) ------------------------------------------------------------------------

    def _lookup(self, group_id: str) -> Group | None:
        """The group in memory, or loaded (once) from where ``persist`` wrote it."""
        g = self._groups.get(group_id)
        if g is None and self._load is not None and group_id not in self._absent:
            g = self._load(group_id)
            if g is None:
                self._absent.add(group_id)
            else:
                for m in g.members.values():
                    m.last_seen = self._now()  # a loaded member's session starts again, as in Kafka's load
                self._groups[group_id] = g
        return g

    def _group(self, group_id: str) -> Group:
        g = self._lookup(group_id)
        if g is None:
            g = self._groups[group_id] = Group(group_id)
            self._absent.discard(group_id)
        return g

    def _store(self, g: Group) -> None:
        if self._persist is not None:
            self._persist(g)

    def _expire(self, g: Group) -> None:
        now = self._now()
        gone = [m for m in g.members.values() if now - m.last_seen > m.session_timeout_ms / 1000
                and not (g.state == PREPARING_REBALANCE and m.joined)]
        for m in gone:
            self._remove(g, m.member_id)

    def _remove(self, g: Group, member_id: str) -> None:
        g.members.pop(member_id, None)
        if g.leader == member_id:
            g.leader = None
        if not g.members:
            g.state, g.leader, g.protocol_name, g.protocol_type = EMPTY, None, None, None
            g.generation_id += 1  # Kafka bumps the generation when a group empties (an empty generation)
            self._store(g)
        else:
            self._prepare(g)
        self._cond.notify_all()

    def _prepare(self, g: Group) -> None:
        if g.state != PREPARING_REBALANCE:
            g.state = PREPARING_REBALANCE
            for m in g.members.values():
                m.joined = False
            timeout = max(m.rebalance_timeout_ms for m in g.members.values()) if g.members else 0
            g.round_deadline = self._now() + timeout / 1000
        self._cond.notify_all()

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        if self._now() >= g.round_deadline:
            for m in [m for m in g.members.values() if not m.joined]:
                g.members.pop(m.member_id)
        if not g.members or not all(m.joined for m in g.members.values()):
            if not g.members and g.state != EMPTY:
                g.state = EMPTY
                self._store(g)
            return
        g.generation_id += 1
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        leader = g.members[g.leader]
        common = set.intersection(*({n for n, _ in m.protocols} for m in g.members.values()))
        g.protocol_name = next(n for n, _ in leader.protocols if n in common)
        g.protocol_type = leader.protocol_type
        g.state = COMPLETING_REBALANCE
        for m in g.members.values():
            m.assignment = b""
        self._cond.notify_all()

    def _wait(self, until: float) -> None:
        self._cond.wait(max(0.0, min(0.1, until - self._now())))

    # -- the APIs ----------------------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, client_id: str, session_timeout_ms: int, rebalance_timeout_ms: int,
             protocol_type: str, protocols: list[tuple[str, bytes]]) -> JoinResult:
        """Kafka's ``GroupCoordinator.handleJoinGroup``: waits until the round completes."""
        if not group_id:
            return JoinResult(INVALID_GROUP_ID, member_id=member_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has none: Kafka uses the session timeout
        with self._cond:
            g = self._group(group_id)
            self._expire(g)
            others = [m for m in g.members.values() if m.member_id != member_id]
            if others:
                common = set.intersection(*({n for n, _ in m.protocols} for m in others))
                if g.protocol_type not in (None, protocol_type) or not {n for n, _ in protocols} & common:
                    return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            if not protocols:
                return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            if member_id and member_id not in g.members:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
            if not member_id:
                member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            now = self._now()
            m = g.members.get(member_id)
            if m is None:
                m = g.members[member_id] = Member(member_id, client_id, session_timeout_ms, rebalance_timeout_ms,
                                                  protocol_type, list(protocols), now)
            m.session_timeout_ms, m.rebalance_timeout_ms, m.protocols = session_timeout_ms, rebalance_timeout_ms, list(
                protocols)
            m.protocol_type, m.last_seen = protocol_type, now
            if g.protocol_type is None:
                g.protocol_type = protocol_type
            self._prepare(g)
            m.joined = True
            self._maybe_complete_join(g)
            while g.state == PREPARING_REBALANCE and member_id in g.members:
                self._wait(g.round_deadline)
                m.last_seen = self._now()
                self._maybe_complete_join(g)
            if member_id not in g.members:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
            m.last_seen = self._now()
            chosen = g.protocol_name or ""
            members = [(x.member_id, dict(x.protocols)[chosen]) for x in g.members.values()] \
                if member_id == g.leader else []
            return JoinResult(NONE, g.generation_id, g.protocol_name, g.protocol_type, g.leader or "", member_id,
                              members)

    def sync(self, group_id: str, member_id: str, generation_id: int, assignments: dict[str, bytes]
             ) -> tuple[int, bytes, str | None, str | None]:
        """Kafka's ``handleSyncGroup``: the leader's assignments are handed out; others wait for them.
        Returns (error code, this member's assignment, protocol type, protocol name)."""
        with self._cond:
            g = self._group(group_id)
            self._expire(g)
            check = self._check_member(g, member_id, generation_id)
            if check != NONE:
                return check, b"", None, None
            if g.state == PREPARING_REBALANCE:
                return REBALANCE_IN_PROGRESS, b"", None, None
            m = g.members[member_id]
            m.last_seen = self._now()
            if g.state == COMPLETING_REBALANCE and member_id == g.leader:
                for x in g.members.values():
                    x.assignment = assignments.get(x.member_id, b"")
                g.state = STABLE
                self._store(g)
                self._cond.notify_all()
            deadline = self._now() + m.session_timeout_ms / 1000
            while g.state == COMPLETING_REBALANCE and g.generation_id == generation_id and self._now() < deadline:
                self._wait(deadline)
                m.last_seen = self._now()
            if g.state != STABLE or g.generation_id != generation_id or member_id not in g.members:
                return REBALANCE_IN_PROGRESS, b"", None, None
            return NONE, g.members[member_id].assignment, g.protocol_type, g.protocol_name

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> int:
        with self._cond:
            g = self._group(group_id)
            self._expire(g)
            check = self._check_member(g, member_id, generation_id)
            if check != NONE:
                return check
            g.members[member_id].last_seen = self._now()
            if g.state == PREPARING_REBALANCE:
                return REBALANCE_IN_PROGRESS
            return NONE

    def leave(self, group_id: str, member_ids: list[str]) -> list[int]:
        with self._cond:
            g = self._group(group_id)
            out = []
            for member_id in member_ids:
                if member_id in g.members:
                    self._remove(g, member_id)
                    out.append(NONE)
                else:
                    out.append(UNKNOWN_MEMBER_ID)
            return out

    def check_commit(self, group_id: str, member_id: str, generation_id: int) -> int:
        """Whether an OffsetCommit may land (Kafka's ``validateOffsetCommit``): a group without members takes commits
        with generation -1 and no member id; a member's commit needs its current generation, and none lands while
        the group is completing a rebalance."""
        with self._cond:
            g = self._lookup(group_id)
            if generation_id < 0 and not member_id:
                return NONE if g is None or not g.members else ILLEGAL_GENERATION
            if g is None:
                return UNKNOWN_MEMBER_ID
            self._expire(g)
            check = self._check_member(g, member_id, generation_id)
            if check != NONE:
                return check
            g.members[member_id].last_seen = self._now()
            return REBALANCE_IN_PROGRESS if g.state == COMPLETING_REBALANCE else NONE

    def describe(self, group_id: str) -> Group | None:
        with self._cond:
            g = self._lookup(group_id)
            if g is not None:
                self._expire(g)
            return g

    def unload(self, group_id: str) -> None:
        """Forget a group this endpoint no longer coordinates (Kafka's ``onResignation``): its waiting JoinGroup and
        SyncGroup requests end with ``UNKNOWN_MEMBER_ID``, and its members join again at the new coordinator."""
        with self._cond:
            self._absent.discard(group_id)
            g = self._groups.pop(group_id, None)
            if g is not None:
                g.members.clear()
                g.state = EMPTY
                g.generation_id += 1
                self._cond.notify_all()

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the members of a group of the consumer protocol subscribe to (from each member's
        ``ConsumerProtocolSubscription``), None when the group has no members or is of another protocol type (Kafka's
        ``GroupMetadata.subscribedTopics``)."""
        with self._cond:
            g = self._lookup(group_id)
            if g is None or not g.members:
                return None
            if g.protocol_type != "consumer":
                return None
            topics: set[str] = set()
            for m in g.members.values():
                topics |= consumer_subscription(dict(m.protocols).get(g.protocol_name or "", b""))
            return topics

    def known(self, group_id: str) -> bool:
        """Whether the group is in memory, or was looked up and found absent (not loaded again)."""
        with self._cond:
            return group_id in self._groups or group_id in self._absent

    def group_ids(self) -> list[str]:
        """The groups in this endpoint's memory."""
        with self._cond:
            return list(self._groups)

    def listed(self) -> dict[str, tuple[str, str | None]]:
        """Group id -> (state, protocol type) of the groups this endpoint knows."""
        with self._cond:
            for g in self._groups.values():
                self._expire(g)
            return {g.group_id: (g.state, g.protocol_type) for g in self._groups.values()}

    @staticmethod
    def _check_member(g: Group, member_id: str, generation_id: int) -> int:
        if member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return ILLEGAL_GENERATION
        return NONE


def consumer_subscription(metadata: bytes) -> set[str]:
    """The topics of a consumer protocol member's subscription (Kafka's ``ConsumerProtocolSubscription``: an int16
    version, then an array of topic names, each an int16 length and UTF-8 bytes); an empty set when the bytes are
    not one."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, set()
        for _ in range(max(0, count)):
            (size,) = struct.unpack_from(">h", metadata, pos)
            topics.add(metadata[pos + 2:pos + 2 + size].decode("utf-8"))
            pos += 2 + size
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
