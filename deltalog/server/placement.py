"""Which live endpoint leads each partition and coordinates each group and transactional id (Kafka's partition
leadership, ``GroupCoordinatorService.partitionFor`` and ``TransactionStateManager.partitionFor``).

Kafka's model is kept: a group's coordinator is the leader of its ``__consumer_offsets`` partition
(``abs(groupId.hashCode) % offsets.topic.num.partitions``), a transactional id's coordinator the leader of its
``__transaction_state`` partition (``abs(transactionalId.hashCode) % transaction.state.log.num.partitions``). What
differs is how a partition gets its leader: Kafka's controller assigns replicas and elects leaders; here every
endpoint computes the same answer from the same facts, the live endpoints of
:class:`~deltalog.server.registry.BrokerRegistry` ordered by node id, as Kafka's ``AdminUtils`` lays replicas out
round-robin from a start index: the leader of ``topic``-``p`` is ``live[(crc32(topic) + p) % len(live)]``. No
election, no controller: two endpoints that see the same live set give the same answer to Metadata and
FindCoordinator. While an endpoint joins or leaves, two endpoints may see different sets for up to
``refresh_ms`` (the registry's cache); a request reaching an endpoint that is not the coordinator gets
``NOT_COORDINATOR`` and the client looks the coordinator up again, as after a Kafka coordinator moved.

Leadership decides where group membership lives (one endpoint's memory per group) and what Metadata tells clients.
It does not gate Produce or Fetch: every endpoint can append to and read any partition, because the store's Delta
commits are what orders appends (optimistic concurrency: of two endpoints appending to one partition, one commits
and the other retries on the new version), so a Produce reaching a non-leader is accepted, not answered with
``NOT_LEADER_OR_FOLLOWER``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from deltalog.coordinator.group.offsets_topic import OFFSETS_TOPIC, java_string_hash
from deltalog.errors import InvalidArgumentError
from deltalog.server.registry import Broker, BrokerRegistry
from deltalog.server.served_store import ServedStore

#: FindCoordinator's key types (Kafka's ``CoordinatorType``).
GROUP = 0
TRANSACTION = 1
#: The internal topic whose partition leader coordinates a transactional id.
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's ``transaction.state.log.num.partitions`` default. deltalog keeps a transactional id's state in its own
#: document (deltalog.coordinator.transaction.transaction_coordinator), not in a topic, so the count only spreads coordinators.
TRANSACTION_STATE_PARTITIONS = 50


def _positive(h: int) -> int:
    """Kafka's ``Utils.abs`` (``abs(Integer.MIN_VALUE)`` is 0)."""
    return 0 if h == -(1 << 31) else abs(h)


def offsets_partitions(store: ServedStore) -> int:
    """The partition count of the store's ``__consumer_offsets`` (its ``offsets.topic.num.partitions`` before the
    topic exists: the count it is created with), which spreads group coordinators."""
    return store.offsets_topic.num_partitions() or store.offsets_topic.config.offsets_topic_num_partitions


def leader_index(topic: str, partition: int, n: int) -> int:
    """The index, among ``n`` live endpoints ordered by node id, of the leader of ``topic``-``partition``."""
    return (zlib.crc32(topic.encode("utf-8")) + partition) % n


class Placement:
    """Leaders and coordinators over a live set. ``live`` returns the live endpoints ordered by node id (a
    registry's :meth:`~deltalog.server.registry.BrokerRegistry.live`); ``offsets_partitions`` the partition count
    of ``__consumer_offsets``; ``me`` is this endpoint (kept in the answer when the live set is empty, as when
    there is no registry)."""

    def __init__(self, me: Callable[[], Broker], live: Callable[[], list[Broker]] | None,
                 offsets_partitions: Callable[[], int], epoch: Callable[[], int] = lambda: 0, *,
                 handover_ms: int = 0) -> None:
        """``handover_ms``: how long after its live set changed an endpoint answers ``COORDINATOR_LOAD_IN_PROGRESS``
        for a group it gained from another live endpoint (twice the registry's refresh: by then every endpoint has
        seen the change, so the previous coordinator has stopped writing the group)."""
        self.handover_ms = handover_ms
        self._me = me
        self._live = live
        self._offsets_partitions = offsets_partitions
        self._epoch = epoch

    def epoch(self) -> int:
        """Grows each time this endpoint was not live while it ran (its registration expired, or was taken over):
        whatever it coordinated may have moved on elsewhere meanwhile."""
        return self._epoch()

    @property
    def me(self) -> Broker:
        return self._me()

    def brokers(self) -> list[Broker]:
        """The live endpoints of this endpoint's listener, ordered by node id: Kafka answers Metadata and
        FindCoordinator with the brokers' endpoints for the listener the request came in on, so a SASL client is
        never sent to a PLAINTEXT endpoint of the same store (``listener.security.protocol.map`` names each)."""
        me = self.me
        live = [b for b in (self._live() if self._live is not None else []) if b.listener == me.listener]
        return sorted(live) if live else [me]

    def leader(self, topic: str, partition: int, brokers: list[Broker] | None = None) -> Broker:
        """The endpoint Metadata names as ``topic``-``partition``'s leader."""
        brokers = brokers or self.brokers()
        return brokers[leader_index(topic, partition, len(brokers))]

    def controller(self, brokers: list[Broker] | None = None) -> Broker:
        """The endpoint Metadata and DescribeCluster name as controller: the lowest live node id (there is no
        controller's work to do: topic changes are compare-and-swaps on the store's topic markers)."""
        return (brokers or self.brokers())[0]

    def coordinator_partition(self, key_type: int, key: str) -> tuple[str, int]:
        """The internal topic partition whose leader coordinates ``key``."""
        if key_type == GROUP:
            return OFFSETS_TOPIC, _positive(java_string_hash(key)) % self._offsets_partitions()
        if key_type == TRANSACTION:
            return TRANSACTION_STATE_TOPIC, _positive(java_string_hash(key)) % TRANSACTION_STATE_PARTITIONS
        raise InvalidArgumentError(f"coordinator key type {key_type} is not served: 0 (group) or 1 (transaction)")

    def coordinator(self, key_type: int, key: str) -> Broker:
        """FindCoordinator's answer: the endpoint that coordinates group (``key_type`` 0) or transactional id (1)
        ``key``; the same from every endpoint that sees the same live set."""
        topic, partition = self.coordinator_partition(key_type, key)
        return self.leader(topic, partition)

    def is_coordinator(self, key_type: int, key: str) -> bool:
        """Whether this endpoint coordinates ``key`` now (else its requests get ``NOT_COORDINATOR``)."""
        return self.coordinator(key_type, key).node_id == self.me.node_id


def for_endpoint(store: ServedStore, advertised: tuple[str, int], listener: str = "PLAINTEXT",
                 **registry_options: Any) -> tuple[BrokerRegistry, Placement]:
    """Register an endpoint advertised at ``advertised`` in ``store`` (``node_id``, ``session_timeout_ms``,
    ``heartbeat_interval_ms``: :class:`~deltalog.server.registry.BrokerRegistry`'s) and the placement it answers
    with. Raises :class:`~deltalog.errors.DuplicateBrokerRegistrationError` for a node id another live endpoint
    holds."""
    registry = BrokerRegistry(store.log_manager.storage, store.clock, *advertised, listener=listener,
                              **registry_options)
    registry.register()

    def me() -> Broker:
        return Broker(registry.node_id if registry.node_id is not None else -1, *advertised, listener)

    return registry, Placement(me, registry.live, lambda: offsets_partitions(store), lambda: registry.epoch,
                               handover_ms=2 * registry.refresh_ms)


__all__ = ["for_endpoint", "offsets_partitions", "GROUP", "TRANSACTION", "TRANSACTION_STATE_PARTITIONS", "TRANSACTION_STATE_TOPIC", "Placement",
           "leader_index"]
