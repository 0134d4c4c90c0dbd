"""Kafka's wire protocol at the edge of a connection: frames, request headers, and the versions deltalog serves.

A request is a 4-byte big-endian size and that many bytes: a request header (v1, or v2 with tagged fields for the
flexible versions of an API, KIP-482) and the body. Kafka's ``RequestContext.parseRequest`` reads the header's API
key and version first and only then knows how to read the rest; :func:`parse_request` does the same with
kafka-python's structures (``kafka.protocol``: Kafka's JSON message schemas, every version), so the only bytes read
by hand here are the fixed first eight of the header.

:data:`SERVED` is what ``ApiVersions`` advertises: the APIs :class:`~deltalog.server.kafka_apis.KafkaApis` has a
handler for, each with the version range whose fields the handler reads and fills (never kafka-python's whole
range when a newer version adds a field deltalog does not honour, such as topic ids in Fetch v13+).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from deltalog.errors import ProtocolError

#: Kafka's ``socket.request.max.bytes`` default: a frame announcing more is not read, the connection is closed.
DEFAULT_MAX_REQUEST_BYTES = 104_857_600

#: Kafka's error codes (``org.apache.kafka.common.protocol.Errors``) the endpoint answers with.
NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INVALID_GROUP_ID = 24
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_CONFIG = 40
UNSUPPORTED_COMPRESSION_TYPE = 76
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
SECURITY_DISABLED = 54
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNKNOWN_TOPIC_ID = 100
UNSUPPORTED_ENDPOINT_TYPE = 115


@dataclass(frozen=True)
class Api:
    """One served API: kafka-python's request and response classes and the versions deltalog decodes."""

    request: Any
    response: Any
    min_version: int
    max_version: int

    @property
    def key(self) -> int:
        return int(self.request.API_KEY)


#: API key -> what is served. Versions: Produce from v3 (record batch v2 only, as Kafka 4's broker); Fetch to v12
#: (v13 names topics by id); ListOffsets to v6 (v7 adds the max-timestamp query); Metadata to v12;
#: DeleteTopics to v5 (v6 deletes by topic id); FindCoordinator to v3 (v4 batches keys); OffsetCommit to v8 and
#: OffsetFetch to v7 (the versions before KIP-848's consumer protocol and batched groups); JoinGroup to v7
#: (v8 adds a reason, v9 skips the leader's assignment for KIP-848 migrations); InitProducerId to v4 (v5 and v6 are
#: KIP-890's and KIP-939's transaction versions); AddPartitionsToTxn to v3 (v4+ are brokers' verification
#: requests), AddOffsetsToTxn, EndTxn and TxnOffsetCommit to v3 (v4+ add KIP-890's TRANSACTION_ABORTABLE and
#: its transaction version 2, which needs Produce v12).
SERVED: dict[int, Api] = {
    api.key: api
    for api in (
        Api(ProduceRequest, ProduceResponse, 3, 9),
        Api(FetchRequest, FetchResponse, 4, 12),
        Api(ListOffsetsRequest, ListOffsetsResponse, 1, 6),
        Api(MetadataRequest, MetadataResponse, 0, 12),
        Api(ApiVersionsRequest, ApiVersionsResponse, 0, 3),
        Api(CreateTopicsRequest, CreateTopicsResponse, 0, 5),
        Api(DeleteTopicsRequest, DeleteTopicsResponse, 0, 5),
        Api(DescribeConfigsRequest, DescribeConfigsResponse, 0, 4),
        Api(FindCoordinatorRequest, FindCoordinatorResponse, 0, 3),
        Api(OffsetCommitRequest, OffsetCommitResponse, 2, 8),
        Api(OffsetFetchRequest, OffsetFetchResponse, 1, 7),
        Api(JoinGroupRequest, JoinGroupResponse, 0, 7),
        Api(SyncGroupRequest, SyncGroupResponse, 0, 5),
        Api(HeartbeatRequest, HeartbeatResponse, 0, 4),
        Api(LeaveGroupRequest, LeaveGroupResponse, 0, 4),
        Api(InitProducerIdRequest, InitProducerIdResponse, 0, 4),
        Api(DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
        Api(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1),
        Api(ListGroupsRequest, ListGroupsResponse, 0, 4),
        Api(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
        Api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
        Api(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
        Api(EndTxnRequest, EndTxnResponse, 0, 3),
        Api(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
        Api(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),  # deltalog.server.sasl: before authentication
        Api(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
        Api(DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, 0, 0),  # scram_apis
        Api(AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, 0, 0),
        Api(CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
        Api(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
        Api(AlterConfigsRequest, AlterConfigsResponse, 0, 2),
        Api(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0),
        Api(DescribeClusterRequest, DescribeClusterResponse, 0, 2),
        Api(DescribeAclsRequest, DescribeAclsResponse, 0, 3),  # deltalog.server.acl_apis
        Api(CreateAclsRequest, CreateAclsResponse, 0, 3),
        Api(DeleteAclsRequest, DeleteAclsResponse, 0, 3),
    )
}
API_VERSIONS_KEY = int(ApiVersionsRequest.API_KEY)
_FIXED_HEADER = struct.Struct(">hhi")


@dataclass
class Request:
    """A decoded request: its header fields and body (a kafka-python message of the request's version)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: Who sent it (Kafka's ``RequestContext.principal``): ``User:<SASL user>``, or ``User:ANONYMOUS`` on a
    #: connection that did not authenticate; and the client's IP address (the host ACLs match).
    principal: str = "User:ANONYMOUS"
    host: str = ""
    #: The frame's size and when it was decoded (``time.monotonic()``): the request metrics' RequestBytes and
    #: TotalTimeMs (:mod:`deltalog.server.request_metrics`).
    size: int = 0
    received: float = 0.0

    @property
    def response_class(self) -> Any:
        """kafka-python's response class of this request's API, at the request's version."""
        return SERVED[self.api_key].response[self.api_version]


@dataclass
class Unsupported:
    """A request whose API key or version is not served: only the fixed header part was read."""

    api_key: int
    api_version: int
    correlation_id: int


def parse_request(frame: bytes) -> Request | Unsupported:
    """Decode one frame's payload (the bytes after the size). Raises :class:`ProtocolError` on a payload that does not
    decode (truncated inside the frame), so nothing of it is applied."""
    if len(frame) < _FIXED_HEADER.size:
        raise ProtocolError(f"a request of {len(frame)} bytes is shorter than a request header (8 bytes)")
    api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame)
    api = SERVED.get(api_key)
    if api is None or not api.min_version <= api_version <= api.max_version:
        return Unsupported(api_key, api_version, correlation_id)
    cls = api.request[api_version]
    try:
        body = cls.decode(frame, version=api_version, header=True)
    except Exception as e:  # noqa: BLE001 - kafka-python raises struct/Index/Value/UnicodeDecode errors alike
        raise ProtocolError(f"cannot decode {cls.__name__} (API key {api_key} v{api_version}): "
                            f"{type(e).__name__}: {e}") from None
    header = body.header
    return Request(api_key, api_version, correlation_id, header.client_id, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """A response frame: size, response header (v0, or v1 with tagged fields where the API's version is flexible;
    ApiVersions always v0, as Kafka's, so a client that sent a version too new can still read the answer)."""
    response.API_VERSION = api_version  # before the header: kafka-python copies a version into a request header only
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def api_versions_response(version: int, error_code: int = NONE) -> Any:
    """Kafka's ``ApiVersionsResponse`` listing :data:`SERVED` (with ``UNSUPPORTED_VERSION`` it is encoded at v0,
    which every client reads, as ``KafkaApis.handleApiVersionsRequest`` does)."""
    cls = ApiVersionsResponse[version]
    keys = [cls.ApiVersion(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
            for a in sorted(SERVED.values(), key=lambda a: a.key)]
    return cls(error_code=error_code, api_keys=keys, throttle_time_ms=0)
