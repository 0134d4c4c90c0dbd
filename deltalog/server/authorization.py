"""Which requests a principal may make of the endpoint, as Kafka's ``KafkaApis`` asks its authorizer.

With ``authorizer.class.name`` set (:meth:`deltalog.acls.Authorizer.from_properties`), each request is checked before
it touches the store; without it everything is allowed, as on a Kafka broker without an authorizer. Requests about
one group, one transactional id or the cluster are refused whole here (:meth:`RequestAuthorizer.gate`, with the
code Kafka answers: GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED);
requests naming several topics, groups or configs are checked per item by their handlers
(:meth:`RequestAuthorizer.allowed`), which answer the refused items with TOPIC_AUTHORIZATION_FAILED and serve the
others, as Kafka's handlers split ``authorizedRequestInfo`` from ``unauthorizedTopicResponses``.
"""

from __future__ import annotations

from typing import Any

from deltalog.acls import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, Authorizer, ResourceType
from deltalog.server import protocol as p

OP = AclOperation
RT = ResourceType


class RequestAuthorizer:
    """An endpoint's decisions; ``authorizer`` None allows everything."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, request: p.Request, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(request.principal, request.host, operation, resource_type, name)

    def authorized_operations(self, request: p.Request, resource_type: ResourceType, name: str) -> set[int]:
        """The codes of the operations on the resource the principal is allowed, of those its type has (Kafka's
        ``AuthHelper.authorizedOperations``: without an authorizer, every one): the ``authorizedOperations``
        bit field Metadata, DescribeCluster and DescribeGroups carry when the client asks for it (KIP-430)."""
        return {int(op) for op in SUPPORTED_OPERATIONS[resource_type]
                if self.allowed(request, op, resource_type, name)}

    def cluster_operations(self, request: p.Request) -> set[int]:
        """The cluster's authorized operations, as Kafka gives them: none without DESCRIBE on the cluster."""
        return self.authorized_operations(request, RT.CLUSTER, CLUSTER_NAME) if self.cluster(request, OP.DESCRIBE) \
            else set()

    def cluster(self, request: p.Request, operation: AclOperation) -> bool:
        return self.allowed(request, operation, RT.CLUSTER, CLUSTER_NAME)

    def topic_code(self, request: p.Request, operation: AclOperation, topic: str) -> int:
        """NONE, or TOPIC_AUTHORIZATION_FAILED when ``operation`` on ``topic`` is refused."""
        return p.NONE if self.allowed(request, operation, RT.TOPIC, topic) else p.TOPIC_AUTHORIZATION_FAILED

    def create_topic_code(self, request: p.Request, topic: str) -> int:
        """Kafka's CREATE check: on the cluster, else on the topic."""
        if self.cluster(request, OP.CREATE):
            return p.NONE
        return self.topic_code(request, OP.CREATE, topic)

    def idempotent_write(self, request: p.Request, topics: list[str]) -> bool:
        """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
        (KIP-679's ``authorizeByResourceType``, decided here over the store's topics)."""
        return self.cluster(request, OP.IDEMPOTENT_WRITE) or any(
            self.allowed(request, OP.WRITE, RT.TOPIC, t) for t in topics)

    def gate(self, request: p.Request) -> Any | None:
        """The whole answer to a request refused for its one group, transactional id or the cluster; None to go on
        (per-item checks are the handler's)."""
        if self.authorizer is None:
            return None
        check = _GATES.get(p.SERVED[request.api_key].request)
        if check is None:
            return None
        code = check(self, request)
        if code == p.NONE:
            return None
        return code if not isinstance(code, int) else refusal(request, code)


def refusal(request: p.Request, code: int) -> Any:
    """``request``'s answer with ``code`` at the top, or on every item it named where the API has no top-level code
    (OffsetCommit, TxnOffsetCommit, AddPartitionsToTxn, AlterUserScramCredentials, CreateAcls, DeleteAcls)."""
    cls = request.response_class
    body = request.body
    message = {"error_message": _MESSAGES.get(code, "Not authorized") + f" ({request.principal})"}
    kind = p.SERVED[request.api_key].request
    if kind is p.OffsetFetchRequest:
        return _offset_fetch_refusal(request, code)
    if "error_code" in cls.fields:
        extra = message if "error_message" in cls.fields else {}
        return cls(throttle_time_ms=0, error_code=code, **extra)
    if kind in (p.OffsetCommitRequest, p.TxnOffsetCommitRequest):
        topic_cls = getattr(cls, "OffsetCommitResponseTopic", None) or cls.TxnOffsetCommitResponseTopic
        part_cls = (getattr(topic_cls, "OffsetCommitResponsePartition", None)
                    or topic_cls.TxnOffsetCommitResponsePartition)
        return cls(throttle_time_ms=0, topics=[topic_cls(name=t.name, partitions=[
            part_cls(partition_index=q.partition_index, error_code=code) for q in t.partitions])
            for t in body.topics])
    if kind is p.AddPartitionsToTxnRequest:
        result = cls.AddPartitionsToTxnTopicResult
        return cls(throttle_time_ms=0, results_by_topic_v3_and_below=[result(name=t.name, results_by_partition=[
            result.AddPartitionsToTxnPartitionResult(partition_index=q, partition_error_code=code)
            for q in t.partitions]) for t in body.v3_and_below_topics])
    if kind is p.AlterUserScramCredentialsRequest:
        users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
        return cls(throttle_time_ms=0, results=[cls.AlterUserScramCredentialsResult(
            user=u, error_code=code, **message) for u in users])
    if kind is p.CreateAclsRequest:
        return cls(throttle_time_ms=0, results=[cls.AclCreationResult(error_code=code, **message)
                                                for _ in body.creations])
    if kind is p.DeleteAclsRequest:
        return cls(throttle_time_ms=0, filter_results=[cls.DeleteAclsFilterResult(
            error_code=code, matching_acls=[], **message) for _ in body.filters])
    raise AssertionError(f"no refusal for API key {request.api_key}")


#: Kafka's messages for the refusals (``Errors``' default messages).
_MESSAGES = {
    p.GROUP_AUTHORIZATION_FAILED: "Not authorized to access group",
    p.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed",
    p.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed",
    p.TOPIC_AUTHORIZATION_FAILED: "Not authorized to access topics: [Topic authorization failed.]",
}


def _offset_fetch_refusal(request: p.Request, code: int) -> Any:
    cls = request.response_class
    topic_cls = cls.OffsetFetchResponseTopic
    part_cls = topic_cls.OffsetFetchResponsePartition
    return cls(throttle_time_ms=0, error_code=code, topics=[topic_cls(name=t.name, partitions=[
        part_cls(partition_index=q, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=code)
        for q in t.partition_indexes]) for t in request.body.topics or ()])


def _group(operation: AclOperation) -> Any:
    def check(a: RequestAuthorizer, request: p.Request) -> int:
        ok = a.allowed(request, operation, RT.GROUP, request.body.group_id)
        return p.NONE if ok else p.GROUP_AUTHORIZATION_FAILED
    return check


def _txn_id(a: RequestAuthorizer, request: p.Request, operation: AclOperation = OP.WRITE) -> int:
    ok = a.allowed(request, operation, RT.TRANSACTIONAL_ID, request.body.transactional_id)
    return p.NONE if ok else p.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _txn_then_group(a: RequestAuthorizer, request: p.Request) -> int:
    code = _txn_id(a, request)
    return code if code != p.NONE else _group(OP.READ)(a, request)


def _cluster(operation: AclOperation) -> Any:
    def check(a: RequestAuthorizer, request: p.Request) -> int:
        return p.NONE if a.cluster(request, operation) else p.CLUSTER_AUTHORIZATION_FAILED
    return check


def _find_coordinator(a: RequestAuthorizer, request: p.Request) -> int:
    key_type = request.body.key_type if request.api_version >= 1 else 0
    if key_type == 1:
        return _txn_id_named(a, request, request.body.key, OP.DESCRIBE)
    ok = a.allowed(request, OP.DESCRIBE, RT.GROUP, request.body.key)
    return p.NONE if ok else p.GROUP_AUTHORIZATION_FAILED


def _txn_id_named(a: RequestAuthorizer, request: p.Request, tid: str, operation: AclOperation) -> int:
    ok = a.allowed(request, operation, RT.TRANSACTIONAL_ID, tid)
    return p.NONE if ok else p.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _add_partitions_to_txn(a: RequestAuthorizer, request: p.Request) -> Any:
    """The transactional id's WRITE, then WRITE on each topic: refused topics TOPIC_AUTHORIZATION_FAILED and the
    others OPERATION_NOT_ATTEMPTED, as ``KafkaApis.handleAddPartitionsToTxnRequest``."""
    body = request.body
    code = _txn_id_named(a, request, body.v3_and_below_transactional_id, OP.WRITE)
    if code != p.NONE:
        return code
    refused = {t.name for t in body.v3_and_below_topics if a.topic_code(request, OP.WRITE, t.name) != p.NONE}
    if not refused:
        return p.NONE
    cls = request.response_class
    result = cls.AddPartitionsToTxnTopicResult
    return cls(throttle_time_ms=0, results_by_topic_v3_and_below=[result(name=t.name, results_by_partition=[
        result.AddPartitionsToTxnPartitionResult(partition_index=q, partition_error_code=(
            p.TOPIC_AUTHORIZATION_FAILED if t.name in refused else p.OPERATION_NOT_ATTEMPTED))
        for q in t.partitions]) for t in body.v3_and_below_topics])


def _init_producer_id(a: RequestAuthorizer, request: p.Request) -> int:
    if request.body.transactional_id is not None:
        return _txn_id(a, request)
    return p.NONE  # idempotent: checked by the handler, which knows the topics


#: The whole-request checks, by kafka-python request class (Kafka's ``KafkaApis.handle*`` first checks).
_GATES: dict[type, Any] = {
    p.JoinGroupRequest: _group(OP.READ),
    p.SyncGroupRequest: _group(OP.READ),
    p.HeartbeatRequest: _group(OP.READ),
    p.LeaveGroupRequest: _group(OP.READ),
    p.OffsetCommitRequest: _group(OP.READ),
    p.OffsetFetchRequest: _group(OP.DESCRIBE),
    p.OffsetDeleteRequest: _group(OP.DELETE),
    p.FindCoordinatorRequest: _find_coordinator,
    p.InitProducerIdRequest: _init_producer_id,
    p.AddPartitionsToTxnRequest: _add_partitions_to_txn,
    p.AddOffsetsToTxnRequest: _txn_then_group,
    p.EndTxnRequest: _txn_id,
    p.TxnOffsetCommitRequest: _txn_then_group,
    p.DescribeUserScramCredentialsRequest: _cluster(OP.DESCRIBE),
    p.AlterUserScramCredentialsRequest: _cluster(OP.ALTER),
    p.DescribeAclsRequest: _cluster(OP.DESCRIBE),
    p.CreateAclsRequest: _cluster(OP.ALTER),
    p.DeleteAclsRequest: _cluster(OP.ALTER),
}

__all__ = ["RequestAuthorizer", "refusal"]
