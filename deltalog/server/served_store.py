"""What the Kafka endpoint needs of a store, as a type: :class:`ServedStore`.

Kafka's ``KafkaApis`` is handed the services it works through (the ``ReplicaManager``, the ``GroupCoordinator``, the
``MetadataCache``...), never the whole broker. The endpoint is handed a :class:`deltalog.Store` (it sits below the
facade and never imports it), and this protocol is every attribute and method of it the server's modules use, typed
with the services of the layers below (``LogManager``, ``PartitionLog``, ``OffsetsTopic``, ``Storage``): what the
server depends on is written here, where ``tests/test_layout.py`` sees it, and a change to the facade that breaks
the endpoint shows up as a type error rather than at run time. ``Store`` satisfies it (checked by
``tests/test_endpoint.py``); a test may hand any object that does.

Records are appended through one door: :meth:`PartitionLog.append` of ``log(topic, partition)`` with the store's
clock, as :meth:`deltalog.Store.append` itself does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from deltalog.clock import Clock
    from deltalog.config import TopicConfig
    from deltalog.coordinator.group.offsets_topic import OffsetsTopic
    from deltalog.log.log_manager import LogManager
    from deltalog.log.partition_log import PartitionLog
    from deltalog.log.retention import DeleteRecordsResult
    from deltalog.storage import Storage
    from deltalog.structs import TopicPartition


class PartitionAdmin(Protocol):
    """The one admin-client operation the endpoint serves through the admin facade (CreatePartitions: its checks of
    internal topics and ``validate_only`` are the facade's)."""

    def create_partitions(self, new_partitions: Any, timeout_ms: Any = None, validate_only: bool = False) -> Any: ...


class ServedStore(Protocol):
    """A store as the endpoint uses it: its location, its services, and the topic and group operations of the
    facade that do more than one service's call (validation, internal topics, offsets of deleted groups)."""

    #: The normalized root (the cluster id is derived from it).
    root: str
    #: Every file of the store: the registry of live endpoints, SCRAM users, producer ids.
    storage: Storage
    #: The store's time: commit timestamps, offset commits, the coordinators' timers.
    clock: Clock
    log_manager: LogManager

    @property
    def offsets_topic(self) -> OffsetsTopic: ...

    def log(self, topic: str, partition: int) -> PartitionLog: ...

    def partitions(self, topic: str) -> list[int]: ...

    def list_topics(self) -> list[str]: ...

    def topic_exists(self, topic: str) -> bool: ...

    def create_topic(self, topic: str, partitions: int = 1, *, config: Mapping[str, Any] | None = None
                     ) -> TopicConfig: ...

    def delete_topic(self, topic: str) -> None: ...

    def topic_config(self, topic: str) -> TopicConfig: ...

    def alter_topic_config(self, topic: str, config: Mapping[str, Any]) -> TopicConfig: ...

    def delete_records(self, topic: str, partition: int, before_offset: int) -> DeleteRecordsResult: ...

    def list_consumer_groups(self) -> list[str]: ...

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None: ...

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                                      ) -> list[TopicPartition]: ...

    def admin(self) -> PartitionAdmin: ...


__all__ = ["PartitionAdmin", "ServedStore"]
