"""Kafka's request handlers on a store (Kafka's ``KafkaApis``): one ``handle_<api>`` per served API key.

Every handler takes a decoded request (:class:`~deltalog.server.protocol.Request`) and returns kafka-python's response
message of the same version, or None where Kafka sends none (Produce with ``acks=0``). Handlers work through the
store's own paths, so what a Kafka client writes is what :meth:`deltalog.Store.append` writes: one
:meth:`~deltalog.log.partition_log.PartitionLog.append` (one Delta commit) per partition of a Produce request, or of
the requests a connection pipelined (:mod:`deltalog.server.group_commit`), and
reads go through :func:`deltalog.log.fetch.fetch` (the high watermark, the last stable offset, aborted records left
out for ``read_committed``), as :class:`~deltalog.groups.consumer.Consumer` reads.

Each endpoint is one broker of the store's live endpoints (:mod:`deltalog.server.registry`; alone, node id 0, the
leader of every partition and its own controller); :mod:`deltalog.server.placement` says which one leads each
partition and coordinates each group. Every committed Delta version is fully replicated, so the high watermark is
the log end offset and ``acks=1`` and ``acks=-1`` both answer after the commit.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc

from deltalog.acls import AclOperation as OP
from deltalog.acls import Authorizer, ResourceType
from deltalog.config import TopicConfig
from deltalog.coordinator.group.group_coordinator import GroupCoordinator
from deltalog.coordinator.group.group_metadata import GroupMetadataLog
from deltalog.coordinator.transaction import producer_ids
from deltalog.errors import (
    CorruptStateError,
    DeltalogError,
    InvalidConfigError,
    TopicAuthorizationError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from deltalog.log import concurrent_reads
from deltalog.log import fetch as group_fetch
from deltalog.log.record import COMMIT, OFFSET, TIMESTAMP
from deltalog.log.transactions import READ_COMMITTED, READ_UNCOMMITTED
from deltalog.server import acl_apis, admin_apis, group_commit, sasl, scram_apis, txn_apis
from deltalog.server import protocol as p
from deltalog.server.authorization import RequestAuthorizer
from deltalog.server.broker_config import DEFAULT_CONFIG, BrokerConfig
from deltalog.server.placement import GROUP, Placement, offsets_partitions
from deltalog.server.record_batches import batch_last_offset, control_batch, decode_records, encode_batch
from deltalog.server.registry import Broker
from deltalog.server.served_store import ServedStore
from deltalog.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

#: Node id of an endpoint without a registry (the ``node.id`` of a single-node KRaft cluster).
NODE_ID = 0
#: Kafka's ``ListOffsetsRequest`` timestamps for the earliest and latest offsets.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
#: Kafka's ``ConfigResource.Type.BROKER``.
BROKER_RESOURCE = 4
#: Records read per partition per fetch, at most (the bytes budget usually stops before).
FETCH_MAX_RECORDS = 10_000
#: How often a fetch waiting for ``min_bytes`` looks at the log again (Kafka parks it in a purgatory instead).
FETCH_POLL_S = 0.05


def fetch_deadline(request: p.Request) -> float:
    """When a Fetch must be answered, on the monotonic clock: its ``max_wait_ms`` from now."""
    return time.monotonic() + max(0, request.body.max_wait_ms) / 1000


class KafkaApis:
    """The handlers of one endpoint on one store. ``advertised`` is the (host, port) clients are told to connect to.

    The store's objects cache per-partition state for the process, so handlers of the connection threads take one
    lock around store calls; a fetch waiting for data waits outside it.
    """

    def __init__(self, store: ServedStore, advertised: tuple[str, int], placement: Placement | None = None, *,
                 config: BrokerConfig | None = None, listener: str = "PLAINTEXT") -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.advertised = advertised
        self.cluster_id = "deltalog-" + store.root.rsplit("/", 1)[-1][:40]
        self.lock = threading.RLock()
        #: ``authorizer.class.name``: the store's ACLs decide what each principal may do (deltalog.server.authorization)
        self.authz = RequestAuthorizer(Authorizer.from_properties(store.storage, dict(self.config.properties)))
        self.group_metadata = GroupMetadataLog(store, self.lock)
        self.groups = GroupCoordinator(persist=self.group_metadata.persist, load=self.group_metadata.load)
        self.placement = placement or Placement(lambda: Broker(NODE_ID, *advertised, listener), None,
                                                lambda: offsets_partitions(store))
        self._view: tuple[int, list[Broker]] = (-1, [])
        self._view_since = time.monotonic()
        self.txn = txn_apis.TxnApis(store, self.lock, self.groups)
        self.txn.authz = self.authz
        self.committer = group_commit.Committer(store, self.lock, txn=self.txn)
        self.handlers: dict[type, Callable[[p.Request], Any]] = {
            p.ProduceRequest: self.handle_produce,
            p.FetchRequest: self.handle_fetch,
            p.ListOffsetsRequest: self.handle_list_offsets,
            p.MetadataRequest: self.handle_metadata,
            p.ApiVersionsRequest: self.handle_api_versions,
            p.CreateTopicsRequest: self.handle_create_topics,
            p.DeleteTopicsRequest: self.handle_delete_topics,
            p.DescribeConfigsRequest: self.handle_describe_configs,
            p.FindCoordinatorRequest: self.handle_find_coordinator,
            p.OffsetCommitRequest: self.handle_offset_commit,
            p.OffsetFetchRequest: self.handle_offset_fetch,
            p.JoinGroupRequest: self.handle_join_group,
            p.SyncGroupRequest: self.handle_sync_group,
            p.HeartbeatRequest: self.handle_heartbeat,
            p.LeaveGroupRequest: self.handle_leave_group,
            p.InitProducerIdRequest: self.handle_init_producer_id,
            p.DeleteRecordsRequest: self.handle_delete_records,
            p.IncrementalAlterConfigsRequest: self.handle_incremental_alter_configs,
            p.AddPartitionsToTxnRequest: self.txn.handle_add_partitions_to_txn,
            p.AddOffsetsToTxnRequest: self.txn.handle_add_offsets_to_txn,
            p.EndTxnRequest: self.txn.handle_end_txn,
            p.TxnOffsetCommitRequest: self.txn.handle_txn_offset_commit,
            p.ListGroupsRequest: self.handle_list_groups,
            p.DescribeGroupsRequest: self.handle_describe_groups,
            # before authentication, deltalog.server.sasl answers these on the connection
            p.SaslHandshakeRequest: sasl.after_authentication,
            p.SaslAuthenticateRequest: sasl.after_authentication,
            p.DescribeUserScramCredentialsRequest: lambda request: scram_apis.handle_describe(self.store, request),
            p.AlterUserScramCredentialsRequest: lambda request: scram_apis.handle_alter(self.store, request),
            p.DescribeAclsRequest: lambda request: acl_apis.handle_describe(self.authz, self.store, request),
            p.CreateAclsRequest: lambda request: acl_apis.handle_create(self.authz, self.store, request),
            p.DeleteAclsRequest: lambda request: acl_apis.handle_delete(self.authz, self.store, request),
            **admin_apis.handlers(self),
        }

    def close(self) -> None:
        """Stop the handlers' timers (the transaction coordinator's abort timer)."""
        self.txn.close()

    def handle(self, request: p.Request) -> Any:
        """The response to ``request`` (Kafka's ``KafkaApis.handle``), or None when none is sent."""
        refused = self.authz.gate(request)
        if refused is not None:
            return refused
        return self.handlers[p.SERVED[request.api_key].request](request)

    # -- ApiVersions, Metadata -------------------------------------------------------------------------

    def handle_api_versions(self, request: p.Request) -> Any:
        return p.api_versions_response(request.api_version)

    def _partitions(self, topic: str) -> tuple[list[int] | int, str | None]:
        """The topic's partitions and id, or the error code Metadata answers for it: UNKNOWN_TOPIC_OR_PARTITION, or
        KAFKA_STORAGE_ERROR for a topic whose marker is damaged (Kafka's answer for a log it cannot read). One read
        of the topic's marker, which also drops the partition logs held of a topic deleted and created again
        (:meth:`LogManager.current_logs`): a client refreshing its metadata finds the new topic's logs read."""
        try:
            topic_id, logs = self.store.log_manager.current_logs(topic)
            return sorted(logs), topic_id
        except UnknownTopicOrPartitionError:
            return p.UNKNOWN_TOPIC_OR_PARTITION, None
        except CorruptStateError as e:
            log.error("Metadata: %s", e)
            return p.KAFKA_STORAGE_ERROR, None

    def _auto_create(self, topic: str) -> tuple[list[int] | int, str | None]:
        """Kafka's ``AutoTopicCreationManager``: a topic a client asked for, created with ``num.partitions`` and the
        store's defaults; a name Kafka refuses answers INVALID_TOPIC_EXCEPTION, internal names are never created."""
        if topic.startswith("__"):
            return p.UNKNOWN_TOPIC_OR_PARTITION, None
        try:
            self.store.create_topic(topic, self.config.num_partitions)
            log.info("created topic %s (%d partitions) for a client's Metadata request (auto.create.topics.enable)",
                     topic, self.config.num_partitions)
        except TopicExistsError:
            pass  # another endpoint or client created it meanwhile
        except DeltalogError as e:
            return e.errno, None
        return self._partitions(topic)

    def _topic_uuid(self, topic: str, topic_id: str | None) -> uuid.UUID | None:
        """The topic's id (KIP-516) as Metadata v10+ carries it: a client that sees the id of a topic change knows
        it was deleted and created again (KAFKA-12257). None (Kafka's zero id) for a topic made before ids."""
        if topic_id is None:  # a marker without an id: the tables may hold one
            topic_id = self.store.log_manager.topic_id(topic)
        try:
            return None if topic_id is None else uuid.UUID(hex=topic_id)
        except ValueError:
            return None

    def handle_metadata(self, request: p.Request) -> Any:
        cls = request.response_class
        body = request.body
        brokers = self.placement.brokers()  # the live endpoints; partitions' leaders spread among them
        with self.lock:
            if body.topics is None or (request.api_version == 0 and not body.topics):
                # every topic: those the principal may not describe are left out, as Kafka's
                names = [t for t in self.store.list_topics() if self.authz.allowed(request, OP.DESCRIBE,
                                                                                  ResourceType.TOPIC, t)]
            else:
                names = [t.name for t in body.topics]
            topics = []
            allowed = request.api_version < 4 or body.allow_auto_topic_creation
            # KIP-430: the operations the principal may do on each topic (and, v8-10, the cluster) when asked;
            # None is Kafka's "not asked" (INT_MIN)
            topic_ops = request.api_version >= 8 and body.include_topic_authorized_operations
            cluster_ops = (self.authz.cluster_operations(request) if 8 <= request.api_version <= 10
                           and body.include_cluster_authorized_operations else None)
            for name in names:
                parts, topic_id = self._partitions(name)
                if parts == p.UNKNOWN_TOPIC_OR_PARTITION and allowed and self.config.auto_create_topics_enable:
                    refused = self.authz.create_topic_code(request, name)  # CREATE
                    parts, topic_id = (refused, None) if refused else self._auto_create(name)
                else:
                    parts = self.authz.topic_code(request, OP.DESCRIBE, name) or parts
                if isinstance(parts, int):
                    topics.append(cls.MetadataResponseTopic(error_code=parts, name=name,
                                                            is_internal=False, partitions=[]))
                    continue
                leaders = [self.placement.leader(name, i, brokers).node_id for i in parts]
                ids = {"topic_id": self._topic_uuid(name, topic_id)} if request.api_version >= 10 else {}
                ops = self.authz.authorized_operations(request, ResourceType.TOPIC, name) if topic_ops else None
                topics.append(cls.MetadataResponseTopic(
                    error_code=p.NONE, name=name, is_internal=name.startswith("__"), **ids, authorized_operations=ops,
                    partitions=[cls.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=p.NONE, partition_index=i, leader_id=leader, leader_epoch=0,
                        replica_nodes=[leader], isr_nodes=[leader], offline_replicas=[])
                        for i, leader in zip(parts, leaders, strict=True)]))
        return cls(throttle_time_ms=0, brokers=[cls.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port,
                                                                            rack=None) for b in brokers],
                   cluster_id=self.cluster_id, controller_id=self.placement.controller(brokers).node_id, topics=topics,
                   authorized_operations=cluster_ops)

    # -- Produce ---------------------------------------------------------------------------------------

    def handle_produce(self, request: p.Request) -> Any:
        return self.handle_produces([request])[0]

    def handle_produces(self, requests: list[p.Request]) -> list[Any]:
        """The answers to Produce requests a connection pipelined, in order, each as Kafka answers it (None for
        ``acks=0``); the plain record sets they carry for one partition, with those other connections sent
        meanwhile, are appended in one Delta commit (:mod:`deltalog.server.group_commit`)."""
        limits: dict[tuple[str, int], TopicConfig] = {}  # each partition's config, read once for all requests
        decoded = [[[self._refused_produce(r, t.name) or self._decode_partition(
            r.body.acks, t.name, pd.index, pd.records, r.body.transactional_id, limits)
                     for pd in t.partition_data]
                    for t in r.body.topic_data] for r in requests]
        self.committer.append([e for r in decoded for t in r for e in t if isinstance(e, group_commit.Entry)])
        answers = []
        for request, topics in zip(requests, decoded, strict=True):
            cls = request.response_class
            part = cls.TopicProduceResponse.PartitionProduceResponse
            out = []
            for topic_data, results in zip(request.body.topic_data, topics, strict=True):
                parts = []
                for pd, result in zip(topic_data.partition_data, results, strict=True):
                    code, base, message, start = result.result if isinstance(result, group_commit.Entry) else result
                    appended = (result.append_time_ms if isinstance(result, group_commit.Entry)
                                and result.log_append_time and code == p.NONE else -1)
                    parts.append(part(index=pd.index, error_code=code, base_offset=base, log_append_time_ms=appended,
                                      log_start_offset=start, record_errors=[], error_message=message))
                out.append(cls.TopicProduceResponse(name=topic_data.name, partition_responses=parts))
            answers.append(None if request.body.acks == 0 else cls(responses=out, throttle_time_ms=0))
        return answers

    def _refused_produce(self, request: p.Request, topic: str) -> group_commit.Result | None:
        """Kafka's Produce checks: WRITE on the transactional id of a transactional producer, WRITE on the topic."""
        tid = request.body.transactional_id
        if tid is not None and not self.authz.allowed(request, OP.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return p.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, f"not authorized to write transactional id {tid}", -1
        if self.authz.topic_code(request, OP.WRITE, topic) != p.NONE:
            return p.TOPIC_AUTHORIZATION_FAILED, -1, f"not authorized to write topic {topic}", -1
        return None

    def _decode_partition(self, acks: int, topic: str, partition: int, data: bytes | None,
                          transactional_id: str | None = None,
                          limits: dict[tuple[str, int], TopicConfig] | None = None
                          ) -> group_commit.Entry | group_commit.Result:
        """One partition's record set, decoded and checked, to append; or the (error code, base offset, error
        message, log start offset) that refuses it. A transactional batch is appended only to a partition its
        transaction added (:meth:`TxnApis.verify`, in :func:`deltalog.server.group_commit.append_one`).
        ``limits`` keeps the partitions' configs (``max.message.bytes``, ``message.timestamp.type``) across the requests a connection pipelined, so the
        Delta log is read once per partition for them all, not once per request."""
        if acks not in (-1, 0, 1):
            return p.INVALID_REQUIRED_ACKS, -1, f"acks must be -1, 0 or 1, not {acks}", -1
        limits = {} if limits is None else limits
        try:
            config = limits.get((topic, partition))
            if config is None:
                with self.lock:  # Kafka's LogValidator: each batch whole against max.message.bytes
                    config = limits[topic, partition] = self.store.log(topic, partition).head().config
            records, batches = decode_records(bytes(data or b""), config.max_message_bytes)
        except DeltalogError as e:  # a record batch refused, or an unknown topic or partition
            return e.errno, -1, str(e), -1
        if not records.num_rows:
            return p.CORRUPT_MESSAGE, -1, "a produce request carried no record for this partition", -1
        producer = None
        if any(b.producer_id >= 0 for b in batches):
            if len(batches) > 1:
                return p.INVALID_RECORD, -1, "an idempotent producer's record set must be one batch per partition", -1
            producer = (batches[0].producer_id, batches[0].producer_epoch, batches[0].base_sequence)
        transactional = any(b.is_transactional for b in batches)
        if transactional and producer is None:
            return p.INVALID_RECORD, -1, "a transactional batch must carry its producer id", -1
        return group_commit.Entry(topic, partition, records, producer, tuple(batches),
                                  transactional_id=transactional_id if transactional else None,
                                  log_append_time=config.log_append_time)

    # -- Fetch -----------------------------------------------------------------------------------------

    def handle_fetch(self, request: p.Request) -> Any:
        """A Fetch answered in the calling thread, waiting up to its ``max_wait_ms`` for ``min_bytes``. The socket
        server does not wait in a thread: it parks the request and asks :meth:`fetch_once` again."""
        deadline = fetch_deadline(request)
        while (answer := self.fetch_once(request, last=time.monotonic() >= deadline)) is None:
            time.sleep(min(FETCH_POLL_S, max(0.0, deadline - time.monotonic())))
        return answer

    def fetch_once(self, request: p.Request, *, last: bool) -> Any | None:
        """The Fetch answer when it can be given now, or ``last`` (its ``max_wait_ms`` is up); else None."""
        response, ready = self.try_fetch(request)
        return response if ready or last else None

    def try_fetch(self, request: p.Request) -> tuple[Any, bool]:
        """The Fetch answer as it stands, and whether it may be sent now (Kafka's ``DelayedFetch.tryComplete``):
        ``min_bytes`` of records are there, or a partition has an error to report."""
        body = request.body
        cls = request.response_class
        level = READ_COMMITTED if body.isolation_level == 1 else READ_UNCOMMITTED
        budget = body.max_bytes if body.max_bytes > 0 else 2**31 - 1
        size = 0
        errors = False
        topics = []
        refused_by_topic = {t.topic: self.authz.topic_code(request, OP.READ, t.topic) for t in body.topics}
        with self.lock:  # (the ACLs are looked at outside it: a refresh reads a file)
            self._read_first_time(body.topics, refused_by_topic)
            for t in body.topics:
                parts = []
                refused = refused_by_topic[t.topic]
                for fp in t.partitions:
                    part = self._fetch_partition(cls, t.topic, fp, level, min(budget - size, fp.partition_max_bytes),
                                                 first=size == 0, refused=refused)
                    size += len(part.records or b"")
                    errors = errors or part.error_code != p.NONE
                    parts.append(part)
                topics.append(cls.FetchableTopicResponse(topic=t.topic, partitions=parts))
        response = cls(throttle_time_ms=0, error_code=p.NONE, session_id=0, responses=topics)
        return response, size >= max(1, body.min_bytes) or errors

    def _read_first_time(self, topics: Any, refused_by_topic: dict[str, int]) -> None:
        """Read side by side the partitions of a Fetch this process has not read yet (a fresh endpoint's first
        Fetch over many partitions): their first read is the Delta log's replay. The others are brought up to date
        one by one as they are read, for the cost of one look each when unchanged."""
        unread = []
        for t in topics:
            if refused_by_topic[t.topic]:
                continue
            for fp in t.partitions:
                try:
                    partition_log = self.store.log(t.topic, fp.partition)
                except DeltalogError:
                    continue  # answered with its error below
                if not partition_log.opened:
                    unread.append(partition_log)
        if len(unread) > 1:
            concurrent_reads.read_each(unread, lambda lg: lg.snapshot(),
                                      threads=self.store.log_manager.walk_threads)

    def fetch_versions(self, request: p.Request) -> list[tuple[Any, int]]:
        """(partition log, table version) of each partition a Fetch reads, as :meth:`try_fetch` just read them: a
        waiting Fetch needs reading again only once one has a commit after (:meth:`PartitionLog.has_commit_after`,
        one look for a file), as Kafka's purgatory is woken by an append."""
        out = []
        with self.lock:
            for t in request.body.topics:
                for fp in t.partitions:
                    try:
                        log = self.store.log(t.topic, fp.partition)
                        out.append((log, log.table(refresh=False).version()))
                    except DeltalogError:
                        return []  # unknown now: read it again each time
        return out

    def _fetch_partition(self, cls: Any, topic: str, fp: Any, level: str, budget: int, *, first: bool,
                         refused: int = p.NONE) -> Any:
        resp = cls.FetchableTopicResponse.PartitionData
        try:
            if refused:
                raise TopicAuthorizationError(f"not authorized to read topic {topic}")
            log = self.store.log(topic, fp.partition)
            got = group_fetch.fetch(log, fp.fetch_offset, FETCH_MAX_RECORDS, level)
        except DeltalogError as e:
            return resp(partition_index=fp.partition, error_code=e.errno, high_watermark=-1,
                        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                        preferred_read_replica=-1, records=None)
        records = self._encode(log, got, fp.fetch_offset, max(0, budget), first=first)
        return resp(partition_index=fp.partition, error_code=p.NONE, high_watermark=got.high_watermark,
                    last_stable_offset=got.last_stable_offset, log_start_offset=got.log_start_offset,
                    aborted_transactions=[] if level == READ_COMMITTED else None, preferred_read_replica=-1,
                    records=records)

    @staticmethod
    def _encode(log: Any, got: group_fetch.Fetch, position: int, budget: int, *, first: bool) -> bytes:
        """The record batches of one partition's fetch; a transaction marker at the end of what it passed is sent as
        Kafka sends it, a control batch after the records (:func:`control_batch`), so every client steps past it."""
        last_visible = got.records.column(OFFSET)[-1].as_py() if got.records.num_rows else position - 1
        marker = None
        if got.next_offset - 1 > last_visible:
            marker = next((m for m in log.txn_index().markers if m.offset == got.next_offset - 1), None)
        if marker is None:
            return encode_batch(got.records, position, got.next_offset, budget, first=first)
        records = encode_batch(got.records, position, marker.offset, budget, first=first)
        if got.records.num_rows and (not records or batch_last_offset(records) < marker.offset - 1):
            return records  # the budget stopped before the marker: it comes with the next fetch
        control = control_batch(marker.offset, marker.producer_id, 0, marker.control == COMMIT)
        if len(records) + len(control) > budget and (records or not first):
            return records
        return records + control

    # -- ListOffsets -----------------------------------------------------------------------------------

    def handle_list_offsets(self, request: p.Request) -> Any:
        """Each partition's offset for its timestamp. The topic's marker is read once (a topic deleted and created
        again is not answered from the old one's logs), and the partitions' heads are read side by side
        (:func:`~deltalog.log.concurrent_reads.read_each`): an unchanged partition answers from the head this
        process holds after one look for its next commit's file, a moved one is brought up to date."""
        body = request.body
        cls = request.response_class
        part_cls = cls.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        level = READ_COMMITTED if body.isolation_level == 1 else READ_UNCOMMITTED
        topics = []
        with self.lock:
            asked: list[tuple[Any, int, Any]] = []  # (partition asked, error code, partition log or None)
            for t in body.topics:
                code, logs = p.NONE, {}
                if refused := self.authz.topic_code(request, OP.DESCRIBE, t.name):
                    code = refused
                else:
                    try:
                        logs = self.store.log_manager.current_logs(t.name)[1]
                    except DeltalogError as e:
                        code = e.errno
                for lp in t.partitions:
                    found = logs.get(lp.partition_index)
                    asked.append((lp, code or (p.NONE if found is not None else p.UNKNOWN_TOPIC_OR_PARTITION), found))
            read = [found for _, code, found in asked if not code]
            heads = iter(concurrent_reads.read_each(read, lambda lg: self._positions(lg, level),
                                                    threads=self.store.log_manager.walk_threads))
            answers = iter([self._list_offset(lp, code, found, next(heads) if not code else None, level)
                            for lp, code, found in asked])
            for t in body.topics:
                parts = [part_cls(partition_index=lp.partition_index, error_code=code, timestamp=ts, offset=offset,
                                  leader_epoch=0 if code == p.NONE else -1)
                         for lp, (ts, offset, code) in zip(t.partitions, answers, strict=False)]
                topics.append(cls.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=topics)

    @staticmethod
    def _positions(log: Any, level: str) -> tuple[int, int]:
        """(log start offset, end at ``level``) of a partition: what ListOffsets answers for -2 and -1."""
        head = log.head()
        end = head.log_end_offset if level == READ_UNCOMMITTED else group_fetch.end_offset(log, level)
        return head.log_start_offset, end

    def _list_offset(self, lp: Any, code: int, log: Any, positions: tuple[int, int] | DeltalogError | None,
                     level: str) -> tuple[int, int, int]:
        """(timestamp, offset, error code) as Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` answers: the log start
        offset, the end at ``level``, or the first offset whose timestamp is at or after the one asked (-1, -1 when
        none is)."""
        if code:
            return -1, -1, code
        if isinstance(positions, DeltalogError):
            return -1, -1, positions.errno
        assert positions is not None
        timestamp = lp.timestamp
        if timestamp == EARLIEST_TIMESTAMP:
            return -1, positions[0], p.NONE
        if timestamp == LATEST_TIMESTAMP:
            return -1, positions[1], p.NONE
        try:
            if timestamp < 0:
                raise InvalidConfigError(f"ListOffsets timestamp {timestamp} is not served: give -2 (earliest), "
                                         "-1 (latest) or a timestamp in epoch milliseconds")
            rows = log.read_table(positions[0], isolation_level=level).select([OFFSET, TIMESTAMP])
        except DeltalogError as e:
            return -1, -1, e.errno
        hits = rows.filter(pc.greater_equal(rows.column(TIMESTAMP), timestamp))
        if not hits.num_rows:
            return -1, -1, p.NONE
        return hits.column(TIMESTAMP)[0].as_py(), hits.column(OFFSET)[0].as_py(), p.NONE

    # -- topics ----------------------------------------------------------------------------------------

    def handle_create_topics(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        out = []
        for t in body.topics:
            code, message = p.NONE, None
            partitions = t.num_partitions if t.num_partitions > 0 else self.config.num_partitions  # -1: num.partitions
            config = {c.name: c.value for c in t.configs}
            if self.authz.create_topic_code(request, t.name):
                code, message = p.TOPIC_AUTHORIZATION_FAILED, f"not authorized to create topic {t.name}"
            elif t.replication_factor not in (-1, 1):
                code, message = p.INVALID_REPLICATION_FACTOR, (
                    f"replication factor {t.replication_factor} is not served: deltalog's durability is its Delta "
                    "store's, give -1 or 1")
            elif t.assignments:
                code, message = p.INVALID_REQUEST, "manual replica assignments are not served (one broker)"
            elif body.validate_only:
                with self.lock:
                    if self.store.topic_exists(t.name):
                        code, message = p.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
                    else:
                        try:
                            TopicConfig.from_properties(config)
                        except DeltalogError as e:
                            code, message = e.errno, str(e)
            else:
                with self.lock:
                    try:
                        self.store.create_topic(t.name, partitions, config=config)
                    except DeltalogError as e:
                        code, message = e.errno, str(e)
            out.append(cls.CreatableTopicResult(name=t.name, error_code=code, error_message=message,
                                                num_partitions=partitions if code == p.NONE else -1,
                                                replication_factor=1 if code == p.NONE else -1, configs=None))
        return cls(throttle_time_ms=0, topics=out)

    def handle_delete_topics(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        names = body.topic_names if request.api_version < 6 else [t.name for t in body.topics]
        out = []
        for name in names:
            code, message = p.NONE, None
            with self.lock:
                try:
                    if self.authz.topic_code(request, OP.DELETE, name):
                        raise TopicAuthorizationError(f"not authorized to delete topic {name}")
                    self.store.delete_topic(name)
                except DeltalogError as e:
                    code, message = e.errno, str(e)
            out.append(cls.DeletableTopicResult(name=name, error_code=code, error_message=message))
        return cls(throttle_time_ms=0, responses=out)

    def handle_incremental_alter_configs(self, request: p.Request) -> Any:
        """Kafka's IncrementalAlterConfigs on topics, SET operations: :meth:`deltalog.Store.alter_topic_config` (the
        whole change validated before any partition is touched). DELETE, APPEND and SUBTRACT are not served yet."""
        body = request.body
        cls = request.response_class
        out = []
        for r in body.resources:
            code, message = p.NONE, None
            ops = {c.config_operation for c in r.configs}
            if not self.config_allowed(request, OP.ALTER_CONFIGS, r):
                code, message = self.config_refused(r)
            elif r.resource_type != 2:
                code, message = p.INVALID_REQUEST, f"resource type {r.resource_type} is not served: only topics (2)"
            elif ops - {0}:
                code, message = p.INVALID_REQUEST, (
                    "only SET (0) is served; DELETE, APPEND and SUBTRACT are not yet")
            else:
                changes = {c.name: c.value for c in r.configs}
                with self.lock:
                    try:
                        if body.validate_only:
                            self.store.topic_config(r.resource_name).with_overrides(changes)
                        else:
                            self.store.alter_topic_config(r.resource_name, changes)
                    except DeltalogError as e:
                        code, message = e.errno, str(e)
            out.append(cls.AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                        resource_type=r.resource_type, resource_name=r.resource_name))
        return cls(throttle_time_ms=0, responses=out)

    def handle_delete_records(self, request: p.Request) -> Any:
        """Kafka's DeleteRecords: each partition's log start offset moves to the offset given (-1: the high watermark)
        through :meth:`deltalog.Store.delete_records` (files wholly below it leave in the same Delta commit)."""
        body = request.body
        cls = request.response_class
        topic_cls = cls.DeleteRecordsTopicResult
        out = []
        for t in body.topics:
            parts = []
            for q in t.partitions:
                with self.lock:
                    try:
                        if self.authz.topic_code(request, OP.DELETE, t.name):
                            raise TopicAuthorizationError(f"not authorized to delete records of topic {t.name}")
                        low, code = self.store.delete_records(t.name, q.partition_index, q.offset).low_watermark, p.NONE
                    except DeltalogError as e:
                        low, code = -1, e.errno
                parts.append(topic_cls.DeleteRecordsPartitionResult(partition_index=q.partition_index,
                                                                    low_watermark=low, error_code=code))
            out.append(topic_cls(name=t.name, partitions=parts))
        return cls(throttle_time_ms=0, topics=out)

    def handle_describe_configs(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        result = cls.DescribeConfigsResult
        out = []
        for r in body.resources:
            if not self.config_allowed(request, OP.DESCRIBE_CONFIGS, r):
                code, message = self.config_refused(r)
                out.append(result(error_code=code, error_message=message, resource_type=r.resource_type,
                                  resource_name=r.resource_name, configs=[]))
                continue
            if r.resource_type == BROKER_RESOURCE:
                out.append(self._describe_broker(result, r))
                continue
            if r.resource_type != 2:  # TOPIC
                out.append(result(error_code=p.INVALID_REQUEST, error_message=(
                    f"resource type {r.resource_type} is not served: topics (2) and brokers (4)"),
                    resource_type=r.resource_type, resource_name=r.resource_name, configs=[]))
                continue
            with self.lock:
                try:
                    props = self.store.topic_config(r.resource_name).to_properties()
                except DeltalogError as e:
                    out.append(result(error_code=e.errno, error_message=str(e), resource_type=2,
                                      resource_name=r.resource_name, configs=[]))
                    continue
            wanted = None if r.configuration_keys is None else set(r.configuration_keys)
            configs = [result.DescribeConfigsResourceResult(
                name=k, value=v, read_only=False, is_default=False, config_source=1, is_sensitive=False,
                synonyms=[], config_type=0, documentation=None)
                for k, v in sorted(props.items()) if wanted is None or k in wanted]
            out.append(result(error_code=p.NONE, error_message=None, resource_type=2,
                              resource_name=r.resource_name, configs=configs))
        return cls(throttle_time_ms=0, results=out)


    def config_allowed(self, request: p.Request, operation: OP, r: Any) -> bool:
        """DESCRIBE_CONFIGS / ALTER_CONFIGS on a topic resource's topic, or on the cluster for a broker's."""
        if r.resource_type == BROKER_RESOURCE:
            return self.authz.cluster(request, operation)
        return r.resource_type != 2 or self.authz.allowed(request, operation, ResourceType.TOPIC, r.resource_name)

    @staticmethod
    def config_refused(r: Any) -> tuple[int, str]:
        if r.resource_type == BROKER_RESOURCE:
            return p.CLUSTER_AUTHORIZATION_FAILED, "not authorized on the cluster's configs"
        return p.TOPIC_AUTHORIZATION_FAILED, f"not authorized on the configs of topic {r.resource_name}"

    def _describe_broker(self, result: Any, r: Any) -> Any:
        """A broker's configs (Kafka's DescribeConfigs on ``ConfigResource.Type.BROKER``): this endpoint's, named by
        its node id (or "", the cluster's default), as it was started; secrets are sensitive and have no value."""
        me = str(self.placement.me.node_id)
        if r.resource_name not in ("", me):
            return result(error_code=p.INVALID_REQUEST, error_message=(
                f"broker {r.resource_name!r}: this endpoint is broker {me}; ask that broker for its configs"),
                resource_type=BROKER_RESOURCE, resource_name=r.resource_name, configs=[])
        wanted = None if r.configuration_keys is None else set(r.configuration_keys)
        configs = [result.DescribeConfigsResourceResult(
            name=k, value=v, read_only=True, is_default=source == DEFAULT_CONFIG, config_source=source,
            is_sensitive=sensitive, synonyms=[], config_type=0, documentation=None)
            for k, v, source, sensitive in self.config.described() if wanted is None or k in wanted]
        return result(error_code=p.NONE, error_message=None, resource_type=BROKER_RESOURCE,
                      resource_name=r.resource_name, configs=configs)

    # -- group offsets (the group coordinator: this endpoint, for the groups placement gives it) ------------

    def handle_find_coordinator(self, request: p.Request) -> Any:
        """The live endpoint that coordinates a group (key type 0) or a transactional id (1): the leader of its
        ``__consumer_offsets`` or ``__transaction_state`` partition (:meth:`Placement.coordinator`), the same answer
        from every endpoint."""
        cls = request.response_class
        body = request.body
        key_type = body.key_type if request.api_version >= 1 else GROUP
        if key_type not in (0, 1):
            return cls(throttle_time_ms=0, error_code=p.INVALID_REQUEST, error_message=(
                f"coordinator key type {key_type} is not served: 0 (group) or 1 (transaction)"), node_id=-1, host="",
                port=-1)
        b = self.placement.coordinator(key_type, body.key)
        return cls(throttle_time_ms=0, error_code=p.NONE, error_message=None, node_id=b.node_id, host=b.host,
                   port=b.port)

    def coordinates(self, group_id: str) -> bool:
        """Whether this endpoint is ``group_id``'s coordinator now; a group it no longer coordinates leaves its
        memory (Kafka's ``GroupCoordinator.onResignation`` unloads a partition's groups), and its requests get
        ``NOT_COORDINATOR``."""
        epoch, view = self.placement.epoch(), self.placement.brokers()
        if (epoch, view) != self._view:  # endpoints came or went: drop the groups that moved away (reloaded if they
            # come back); after this endpoint was not live for a while, drop them all: they went on elsewhere
            stale = epoch != self._view[0] and self._view[0] != -1
            self._view, self._view_since = (epoch, view), time.monotonic()
            for g in self.groups.group_ids():
                if stale or self.placement.coordinator(GROUP, g).node_id != self.placement.me.node_id:
                    self.groups.unload(g)
        if self.placement.is_coordinator(GROUP, group_id):
            return True
        self.groups.unload(group_id)
        return False

    def coordinator_error(self, group_id: str) -> int:
        """``NOT_COORDINATOR`` when this endpoint is not ``group_id``'s coordinator; ``COORDINATOR_LOAD_IN_PROGRESS``
        for a group it has just gained from another live endpoint (within the placement's hand-over time after its
        live set changed, long enough for every endpoint to have seen the change: the previous coordinator has
        stopped writing the group before this one loads it, as Kafka's new coordinator loads the partition before
        it answers); else ``NONE``."""
        if not self.coordinates(group_id):
            return p.NOT_COORDINATOR
        if (len(self._view[1]) > 1 and not self.groups.known(group_id)
                and time.monotonic() - self._view_since < self.placement.handover_ms / 1000):
            return p.COORDINATOR_LOAD_IN_PROGRESS
        return p.NONE

    def handle_offset_commit(self, request: p.Request) -> Any:
        """Kafka's ``GroupCoordinator.handleCommitOffsets`` for a group without members (``assign()``-ing consumers,
        admin tools): generation -1 and no member id, one append of the whole commit to the group's partition of
        ``__consumer_offsets`` (:meth:`deltalog.coordinator.group.offsets_topic.OffsetsTopic.commit`), all or nothing; or for
        a member of the group's current generation (:meth:`GroupCoordinator.check_commit`)."""
        body = request.body
        cls = request.response_class
        refused = {t.name for t in body.topics if self.authz.topic_code(request, OP.READ, t.name)}
        offsets = {TopicPartition(t.name, q.partition_index): OffsetAndMetadata(
            q.committed_offset, q.committed_metadata or "", q.committed_leader_epoch)
            for t in body.topics for q in t.partitions if t.name not in refused}
        code = self.coordinator_error(body.group_id)
        if code == p.NONE:
            code = self.groups.check_commit(body.group_id, body.member_id or "", body.generation_id_or_member_epoch)
        if code == p.NONE and offsets:
            with self.lock:
                try:
                    self.store.offsets_topic.commit(body.group_id, offsets, self.store.clock.now_ms(),
                                                    allow_negative=True)  # -1/-2 stored, as Kafka's coordinator
                except DeltalogError as e:
                    code = e.errno
        return cls(throttle_time_ms=0, topics=[cls.OffsetCommitResponseTopic(name=t.name, partitions=[
            cls.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                partition_index=q.partition_index, error_code=p.TOPIC_AUTHORIZATION_FAILED if t.name in refused else code)
            for q in t.partitions]) for t in body.topics])

    def handle_offset_fetch(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        topic_cls = cls.OffsetFetchResponseTopic
        part_cls = topic_cls.OffsetFetchResponsePartition
        if (code := self.coordinator_error(body.group_id)) != p.NONE:
            return cls(throttle_time_ms=0, error_code=code, topics=[topic_cls(name=t.name, partitions=[
                part_cls(partition_index=q, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                         error_code=code) for q in t.partition_indexes]) for t in body.topics or ()])
        with self.lock:
            try:
                committed = self.store.offsets_topic.committed(body.group_id)
                stable = request.api_version >= 7 and body.require_stable  # KIP-447: no offset of an open transaction
                pending = self.txn.pending_offsets(body.group_id) if stable else set()
            except DeltalogError as e:
                return cls(throttle_time_ms=0, topics=[], error_code=e.errno)
        if body.topics is None:  # every committed offset of the group, of the topics the principal may describe
            wanted: dict[str, list[int]] = {}
            for tp in committed:
                if self.authz.allowed(request, OP.DESCRIBE, ResourceType.TOPIC, tp.topic):
                    wanted.setdefault(tp.topic, []).append(tp.partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in body.topics}
        topics = []
        for name, parts in wanted.items():
            out = []
            refused = self.authz.topic_code(request, OP.DESCRIBE, name)
            for q in parts:
                om = committed.get(TopicPartition(name, q))
                if refused or TopicPartition(name, q) in pending:
                    out.append(part_cls(partition_index=q, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                                        error_code=refused or p.UNSTABLE_OFFSET_COMMIT))
                    continue
                out.append(part_cls(partition_index=q, committed_offset=om.offset if om else -1,
                                    committed_leader_epoch=om.leader_epoch if om else -1,
                                    metadata=om.metadata if om else "", error_code=p.NONE))
            topics.append(topic_cls(name=name, partitions=out))
        return cls(throttle_time_ms=0, topics=topics, error_code=p.NONE)


    def _known_groups(self) -> dict[str, tuple[str, str | None]]:
        """Groups with members here, and those with committed offsets in the store (Kafka's coordinator knows
        the latter from ``__consumer_offsets``: Empty groups, of the consumer protocol)."""
        with self.lock:
            committed = self.store.list_consumer_groups()
        committed = [g for g in committed if self.coordinates(g)]  # outside the lock: the coordinator's comes first
        known: dict[str, tuple[str, str | None]] = {g: ("Empty", "consumer") for g in committed}
        for g, (state, ptype) in self.groups.listed().items():
            if not self.coordinates(g):
                continue
            if state == "Empty" and g in known:
                continue  # no members now: its committed offsets are what is known of it
            known[g] = (state, ptype)
        return known

    def handle_list_groups(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        wanted = {s.lower() for s in body.states_filter or ()}
        everything = self.authz.cluster(request, OP.DESCRIBE)  # else the groups it may describe, as Kafka
        groups = [cls.ListedGroup(group_id=g, protocol_type=ptype or "", group_state=state)
                  for g, (state, ptype) in sorted(self._known_groups().items())
                  if (not wanted or state.lower() in wanted)
                  and (everything or self.authz.allowed(request, OP.DESCRIBE, ResourceType.GROUP, g))]
        return cls(throttle_time_ms=0, error_code=p.NONE, groups=groups)

    def handle_describe_groups(self, request: p.Request) -> Any:
        """Kafka's DescribeGroups: a group's state, protocol and members (their metadata and assignment bytes, which
        admin clients decode with the consumer protocol). An unknown group is Kafka's ``Dead`` group."""
        cls = request.response_class
        known = self._known_groups()
        out = []
        for group_id in request.body.groups:
            if not self.authz.allowed(request, OP.DESCRIBE, ResourceType.GROUP, group_id):
                code = p.GROUP_AUTHORIZATION_FAILED
            else:
                code = self.coordinator_error(group_id)
            if code != p.NONE:
                out.append(cls.DescribedGroup(error_code=code, group_id=group_id, group_state="",
                                              protocol_type="", protocol_data="", members=[],
                                              authorized_operations=None))
                continue
            g = self.groups.describe(group_id)
            members = []
            if g is not None and g.members:
                members = [cls.DescribedGroup.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=None, client_id=m.client_id, client_host="",
                    member_metadata=dict(m.protocols).get(g.protocol_name or "", b""),
                    member_assignment=m.assignment) for m in g.members.values()]
            state, ptype = known.get(group_id, ("Dead", ""))
            asked = request.api_version >= 3 and request.body.include_authorized_operations  # KIP-430
            ops = self.authz.authorized_operations(request, ResourceType.GROUP, group_id) if asked else None
            out.append(cls.DescribedGroup(error_code=p.NONE, group_id=group_id, group_state=state,
                                          protocol_type=ptype or "",
                                          protocol_data=(g.protocol_name or "") if g is not None and g.members else "",
                                          members=members, authorized_operations=ops))
        return cls(throttle_time_ms=0, groups=out)

    # -- idempotent producers ---------------------------------------------------------------------------------

    def handle_init_producer_id(self, request: p.Request) -> Any:
        """Kafka's ``InitProducerId`` for an idempotent producer (no transactional id): a producer id no producer of
        the store ever had (:func:`deltalog.coordinator.transaction.producer_ids.allocate`, the counter the Python
        producers take theirs from), epoch 0. A producer that asks again (KIP-360, after an unknown producer id)
        gets a new id. With a transactional id: :meth:`TxnApis.handle_init_producer_id`."""
        body = request.body
        cls = request.response_class
        if body.transactional_id is not None:
            return self.txn.handle_init_producer_id(request)
        with self.lock:
            topics = self.store.list_topics() if self.authz.enabled else []
        if not self.authz.idempotent_write(request, topics):
            return cls(throttle_time_ms=0, error_code=p.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
        with self.lock:
            pid = producer_ids.allocate(self.store.log_manager.storage, self.store.log_manager)
        return cls(throttle_time_ms=0, error_code=p.NONE, producer_id=pid, producer_epoch=0)

    # -- group membership (see deltalog.coordinator.group.group_coordinator) ------------------------------------------

    def handle_join_group(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        if (code := self.coordinator_error(body.group_id)) != p.NONE:
            return cls(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None,
                       protocol_name=None, leader="", member_id=body.member_id or "", members=[])
        r = self.groups.join(body.group_id, body.member_id or "", request.client_id or "", body.session_timeout_ms,
                             body.rebalance_timeout_ms if request.api_version >= 1 else -1, body.protocol_type,
                             [(x.name, bytes(x.metadata)) for x in body.protocols])
        return cls(throttle_time_ms=0, error_code=r.error_code, generation_id=r.generation_id,
                   protocol_type=r.protocol_type, protocol_name=r.protocol_name, leader=r.leader,
                   member_id=r.member_id, members=[cls.JoinGroupResponseMember(member_id=mid, group_instance_id=None,
                                                                               metadata=meta)
                                                   for mid, meta in r.members])

    def handle_sync_group(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        if (code := self.coordinator_error(body.group_id)) != p.NONE:
            return cls(throttle_time_ms=0, error_code=code, protocol_type=None, protocol_name=None,
                       assignment=b"")
        code, assignment, ptype, pname = self.groups.sync(
            body.group_id, body.member_id, body.generation_id,
            {a.member_id: bytes(a.assignment) for a in body.assignments})
        return cls(throttle_time_ms=0, error_code=code, protocol_type=ptype, protocol_name=pname,
                   assignment=assignment)

    def handle_heartbeat(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        if (code := self.coordinator_error(body.group_id)) != p.NONE:
            return cls(throttle_time_ms=0, error_code=code)
        return cls(throttle_time_ms=0, error_code=self.groups.heartbeat(body.group_id, body.member_id,
                                                                         body.generation_id))

    def handle_leave_group(self, request: p.Request) -> Any:
        body = request.body
        cls = request.response_class
        if (code := self.coordinator_error(body.group_id)) != p.NONE:
            return cls(throttle_time_ms=0, error_code=code, members=[])
        if request.api_version < 3:
            code = self.groups.leave(body.group_id, [body.member_id])[0]
            return cls(throttle_time_ms=0, error_code=code)
        codes = self.groups.leave(body.group_id, [m.member_id for m in body.members])
        return cls(throttle_time_ms=0, error_code=p.NONE, members=[
            cls.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=c)
            for m, c in zip(body.members, codes, strict=True)])
