"""The admin APIs of the endpoint beyond topics and records (Kafka's ``KafkaApis`` handlers for CreatePartitions,
DeleteGroups, AlterConfigs, OffsetDelete and DescribeCluster), each through the store's own operation: what
``kafka-topics --alter --partitions``, ``kafka-consumer-groups --delete`` / ``--delete-offsets`` and kafka-python's
``alter_configs`` do to a Kafka cluster, they do to the store, as :meth:`deltalog.Store.admin` would.

The group ones answer only on the group's coordinator (:mod:`deltalog.server.placement`), as Kafka's
``GroupCoordinator`` does; elsewhere ``NOT_COORDINATOR``, and the admin client looks the coordinator up again.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from deltalog.acls import AclOperation as OP
from deltalog.acls import ResourceType
from deltalog.config import TopicConfig
from deltalog.errors import DeltalogError
from deltalog.server import protocol as p
from deltalog.structs import TopicPartition

#: Kafka's ``DescribeClusterRequest``'s endpoint type of brokers (2 is controllers, which are not served).
BROKER_ENDPOINTS = 1
RESOURCE_TOPIC = 2


def handlers(apis: Any) -> dict[type, Callable[[p.Request], Any]]:
    """API key -> handler, bound to one endpoint's :class:`~deltalog.server.kafka_apis.KafkaApis` (handed in, not
    imported: it imports this module)."""
    h = AdminApis(apis)
    return {p.CreatePartitionsRequest: h.handle_create_partitions, p.DeleteGroupsRequest: h.handle_delete_groups,
            p.AlterConfigsRequest: h.handle_alter_configs, p.OffsetDeleteRequest: h.handle_offset_delete,
            p.DescribeClusterRequest: h.handle_describe_cluster}


class AdminApis:
    def __init__(self, apis: Any) -> None:
        self.apis = apis
        self.store = apis.store

    # -- CreatePartitions ------------------------------------------------------------------------------

    def handle_create_partitions(self, request: p.Request) -> Any:
        """Kafka's CreatePartitions (``kafka-topics --alter --partitions``): each topic's partition count rises to
        ``count`` (only more: fewer or equal is ``INVALID_PARTITIONS``), through the admin facade's
        ``create_partitions`` (new tables first, then one compare-and-swap of the topic marker: all or none).
        Replica assignments are refused: the store is the replication."""
        body = request.body
        cls = request.response_class
        out = []
        for t in body.topics:
            code, message = p.NONE, None
            if not self.apis.authz.allowed(request, OP.ALTER, ResourceType.TOPIC, t.name):
                code, message = p.TOPIC_AUTHORIZATION_FAILED, f"not authorized to alter topic {t.name}"
            elif t.assignments:
                code, message = p.INVALID_REQUEST, "replica assignments are not served: the store replicates"
            else:
                with self.apis.lock:
                    future = self.store.admin().create_partitions(
                        [SimpleNamespace(topic=t.name, new_total_count=t.count)], validate_only=body.validate_only)
                    error = future[t.name].exception()
                if isinstance(error, DeltalogError):
                    code, message = error.errno, str(error)
                elif error is not None:
                    raise error
            out.append(cls.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message))
        return cls(throttle_time_ms=0, results=out)

    # -- AlterConfigs ------------------------------------------------------------------------------------

    def handle_alter_configs(self, request: p.Request) -> Any:
        """Kafka's AlterConfigs (the one before KIP-339): a topic's configs become exactly the ones given, every
        other back to its default, validated whole before any partition is touched (``store.alter_topic_config``
        with every key). A null value is the default too. Only topics: broker configs are the endpoint's
        command line."""
        body = request.body
        cls = request.response_class
        defaults = TopicConfig().to_properties()
        out = []
        for r in body.resources:
            code, message = p.NONE, None
            if not self.apis.config_allowed(request, OP.ALTER_CONFIGS, r):
                code, message = self.apis.config_refused(r)
            elif r.resource_type != RESOURCE_TOPIC:
                code, message = p.INVALID_REQUEST, f"resource type {r.resource_type} is not served: only topics (2)"
            else:
                change = {**defaults, **{c.name: c.value for c in r.configs if c.value is not None}}
                with self.apis.lock:
                    try:
                        if body.validate_only:
                            self.store.topic_config(r.resource_name).with_overrides(change)
                        else:
                            self.store.alter_topic_config(r.resource_name, change)
                    except DeltalogError as e:
                        code, message = e.errno, str(e)
            out.append(cls.AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                        resource_type=r.resource_type, resource_name=r.resource_name))
        return cls(throttle_time_ms=0, responses=out)

    # -- DeleteGroups, OffsetDelete --------------------------------------------------------------------------

    def _group_exists(self, group_id: str) -> bool:
        with self.apis.lock:
            committed = group_id in self.store.list_consumer_groups()
        return committed or self.apis.groups.describe(group_id) is not None

    def handle_delete_groups(self, request: p.Request) -> Any:
        """Kafka's DeleteGroups: a group with members is ``NON_EMPTY_GROUP``; one this endpoint does not know
        (no committed offsets, no members) ``GROUP_ID_NOT_FOUND``; otherwise its committed offsets go
        (``store.delete_consumer_groups``: tombstones in ``__consumer_offsets``) and the group with them."""
        cls = request.response_class
        out = []
        for group_id in request.body.groups_names:
            if not self.apis.authz.allowed(request, OP.DELETE, ResourceType.GROUP, group_id):
                code = p.GROUP_AUTHORIZATION_FAILED
            elif (code := self.apis.coordinator_error(group_id)) != p.NONE:
                pass
            elif (g := self.apis.groups.describe(group_id)) is not None and g.members:
                code = p.NON_EMPTY_GROUP
            elif not self._group_exists(group_id):
                code = p.GROUP_ID_NOT_FOUND
            else:
                code = p.NONE
                with self.apis.lock:
                    try:
                        if group_id in self.store.list_consumer_groups():
                            self.store.delete_consumer_groups([group_id])
                    except DeltalogError as e:
                        code = e.errno
                if code == p.NONE:
                    self.apis.groups.unload(group_id)
                    try:
                        self.apis.group_metadata.delete(group_id)
                    except DeltalogError as e:
                        code = e.errno
            out.append(cls.DeletableGroupResult(group_id=group_id, error_code=code))
        return cls(throttle_time_ms=0, results=out)

    def handle_offset_delete(self, request: p.Request) -> Any:
        """Kafka's OffsetDelete (``kafka-consumer-groups --delete-offsets``): the group's committed offsets of the
        partitions given go (``store.delete_consumer_group_offsets``), except those of topics its members
        subscribe to (``GROUP_SUBSCRIBED_TO_TOPIC``); a group with members of another protocol is
        ``NON_EMPTY_GROUP``, an unknown one ``GROUP_ID_NOT_FOUND``."""
        body = request.body
        cls = request.response_class
        topic_cls = cls.OffsetDeleteResponseTopic
        part_cls = topic_cls.OffsetDeleteResponsePartition

        def answer(top: int, codes: dict[TopicPartition, int]) -> Any:
            return cls(error_code=top, throttle_time_ms=0, topics=[] if top != p.NONE else [
                topic_cls(name=t.name, partitions=[
                    part_cls(partition_index=q.partition_index, error_code=codes[TopicPartition(t.name,
                                                                                                q.partition_index)])
                    for q in t.partitions]) for t in body.topics])

        if (code := self.apis.coordinator_error(body.group_id)) != p.NONE:
            return answer(code, {})
        if not self._group_exists(body.group_id):
            return answer(p.GROUP_ID_NOT_FOUND, {})
        g = self.apis.groups.describe(body.group_id)
        subscribed = self.apis.groups.subscribed_topics(body.group_id)
        if g is not None and g.members and subscribed is None:
            return answer(p.NON_EMPTY_GROUP, {})
        subscribed = subscribed or set()
        wanted = [TopicPartition(t.name, q.partition_index) for t in body.topics for q in t.partitions]
        codes = {tp: p.GROUP_SUBSCRIBED_TO_TOPIC if tp.topic in subscribed else p.NONE for tp in wanted}
        codes.update({tp: p.TOPIC_AUTHORIZATION_FAILED for tp in wanted
                      if self.apis.authz.topic_code(request, OP.READ, tp.topic)})
        gone = [tp for tp, c in codes.items() if c == p.NONE]
        if gone:
            with self.apis.lock:
                try:
                    self.store.delete_consumer_group_offsets(body.group_id, gone)
                except DeltalogError as e:
                    return answer(e.errno, {})
        return answer(p.NONE, codes)

    # -- DescribeCluster ------------------------------------------------------------------------------------

    def handle_describe_cluster(self, request: p.Request) -> Any:
        """Kafka's DescribeCluster: the live endpoints (as Metadata lists them), the controller, the cluster id.
        Controller endpoints (endpoint type 2, KIP-919) are not served: there is no controller quorum."""
        body = request.body
        cls = request.response_class
        endpoint_type = body.endpoint_type if request.api_version >= 1 else BROKER_ENDPOINTS
        brokers = self.apis.placement.brokers()
        if endpoint_type != BROKER_ENDPOINTS:
            return cls(throttle_time_ms=0, error_code=p.UNSUPPORTED_ENDPOINT_TYPE, error_message=(
                f"endpoint type {endpoint_type} is not served: only brokers (1)"), endpoint_type=endpoint_type,
                cluster_id=self.apis.cluster_id, controller_id=-1, brokers=[],
                authorized_operations=None)
        ops = self.apis.authz.cluster_operations(request) if body.include_cluster_authorized_operations else None
        return cls(throttle_time_ms=0, error_code=p.NONE, error_message=None, endpoint_type=endpoint_type,
                   cluster_id=self.apis.cluster_id, controller_id=self.apis.placement.controller(brokers).node_id,
                   brokers=[cls.DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port, rack=None,
                                                      is_fenced=False) for b in brokers],
                   authorized_operations=ops)  # KIP-430, when asked; None is Kafka's "not asked" (INT_MIN)


__all__ = ["AdminApis", "handlers"]
