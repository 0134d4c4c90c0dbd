"""An AdminClient with the names both of Kafka's Python admin clients use (kafka-python's ``KafkaAdminClient``,
confluent-kafka's ``AdminClient``), over one store: ``store.admin()``.

    admin = store.admin()
    futures = admin.create_topics([NewTopic("orders", num_partitions=3, config={"cleanup.policy": "compact"})])
    for topic, future in futures.items():
        future.result()                    # raises the topic's error, e.g. TopicExistsError

Calls take either client's argument objects (deltalog's :class:`NewTopic`, :class:`NewPartitions`,
:class:`ConfigResource` and :class:`ConfigEntry` below, or confluent-kafka's and kafka-python's own: read by their
attribute names) and answer as confluent-kafka does: a dict of each topic, resource or partition to a
``concurrent.futures.Future``, already done (every call has finished when it returns), whose ``result()`` raises
that item's error. One item's error does not stop the others, as Kafka's per-topic results.

What differs from Kafka's: there are no brokers, so ``replication_factor`` and replica assignments are accepted
and mean nothing (every Delta commit is as durable as the store); ``validate_only`` checks the names, counts and
configs without creating; the timeouts are accepted and unused. Only topic resources have configs (the store's
broker-level settings are the ``Store(config=...)`` it was opened with).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from deltalog.config import TopicConfig
from deltalog.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    TopicExistsError,
    shown,
)
from deltalog.log.log_manager import is_internal_topic, validate_partition_count, validate_topic_name
from deltalog.structs import TopicPartition

#: The store the client works on: a :class:`deltalog.Store` (not imported: the Store imports this module for
#: ``store.admin()``, and a facade over a facade must not make a cycle).
Store = Any

#: Kafka's resource type of a topic (``ConfigResource.Type.TOPIC``: 2; kafka-python's ``ConfigResourceType.TOPIC``).
RESOURCE_TOPIC = 2
SET, DELETE = "SET", "DELETE"


@dataclass
class NewTopic:
    """A topic to create: confluent-kafka's ``NewTopic(topic, num_partitions, replication_factor, config=)`` and
    kafka-python's ``NewTopic(name, num_partitions, replication_factor, topic_configs=)``."""

    topic: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Any = None
    config: Mapping[str, Any] | None = None


@dataclass
class NewPartitions:
    """confluent-kafka's ``NewPartitions(topic, new_total_count)`` (kafka-python's ``NewPartitions(total_count)`` is
    given as ``create_partitions({topic: NewPartitions(total_count)})``)."""

    topic: str
    new_total_count: int
    replica_assignment: Any = None


@dataclass
class ConfigEntry:
    """confluent-kafka's ``ConfigEntry(name, value, incremental_operation=)``; what ``describe_configs`` returns
    per key (``is_default``: the key has Kafka's default value; ``source``: 1 a topic override, 5 the default)."""

    name: str
    value: str | None
    incremental_operation: str | None = None
    is_default: bool = False
    source: int = 5
    is_read_only: bool = False
    is_sensitive: bool = False


@dataclass(eq=False)
class ConfigResource:
    """confluent-kafka's ``ConfigResource(restype, name, set_config=, incremental_configs=)`` (kafka-python's
    ``ConfigResource(resource_type, name, configs)``); only topics (``RESOURCE_TOPIC``, ``"topic"``)."""

    restype: Any
    name: str
    set_config: Mapping[str, Any] | None = None
    incremental_configs: list[Any] = field(default_factory=list)

    def __hash__(self) -> int:
        return hash((RESOURCE_TOPIC, self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigResource) and other.name == self.name


@dataclass(frozen=True)
class DeletedRecords:
    """confluent-kafka's ``DeletedRecords``: the partition's new log start offset."""

    low_watermark: int


@dataclass(frozen=True)
class ConsumerGroupListing:
    """confluent-kafka's ``ConsumerGroupListing`` (a group here has committed offsets and never members)."""

    group_id: str
    is_simple_consumer_group: bool = False
    state: str = "EMPTY"


@dataclass(frozen=True)
class ListConsumerGroupsResult:
    valid: list[ConsumerGroupListing]
    errors: list[Any] = field(default_factory=list)


def _done(fn: Callable[[], Any]) -> Future:
    """A finished future holding ``fn()``'s result or error (as Kafka answers per item)."""
    future: Future = Future()
    try:
        future.set_result(fn())
    except Exception as e:  # this item's error goes to its future, the others go on (Kafka's per-item results)
        future.set_exception(e)
    return future


def _attr(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def _topic_name(resource: Any) -> str:
    restype = _attr(resource, "restype", "resource_type")
    kind = getattr(restype, "name", restype)
    value = getattr(restype, "value", restype)
    if not (value == RESOURCE_TOPIC or str(kind).upper() in ("TOPIC", "RESOURCE_TOPIC")):
        raise InvalidArgumentError(f"only topic configs exist here (ConfigResource of type TOPIC), not "
                                   f"{shown(restype)}: the store's own settings are the Store(config=...) it was "
                                   "opened with")
    return resource.name


def _items(given: Any, what: str) -> list[Any]:
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise InvalidArgumentError(f"{what} takes a list, not {shown(given)}")
    return list(given)


class AdminClient:
    """Kafka's AdminClient calls over one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # -- topics ----------------------------------------------------------------------------------------------

    def create_topics(self, new_topics: list[Any], timeout_ms: Any = None, validate_only: bool = False, *,
                      operation_timeout: Any = None, request_timeout: Any = None) -> dict[str, Future]:
        """Create each topic (``num_partitions`` -1: one, the default a broker's ``num.partitions`` gives)."""
        out: dict[str, Future] = {}
        for nt in _items(new_topics, "create_topics()"):
            name = _attr(nt, "topic", "name")
            partitions = _attr(nt, "num_partitions", default=-1)
            config = _attr(nt, "config", "topic_configs") or {}

            def create(name: Any = name, partitions: Any = partitions, config: Any = config) -> None:
                count = 1 if partitions == -1 else partitions
                if validate_only:
                    validate_topic_name(name)
                    validate_partition_count(name, count)
                    TopicConfig.from_properties(dict(config))
                    if self._store.topic_exists(name):
                        raise TopicExistsError(f"Topic {name!r} already exists in {self._store.root}")
                    return None
                self._store.create_topic(name, count, config=dict(config))
                return None

            out[name] = _done(create)
        return out

    def delete_topics(self, topics: list[str], timeout_ms: Any = None, *, operation_timeout: Any = None,
                      request_timeout: Any = None) -> dict[str, Future]:
        """Delete each topic and all its data (and every group's committed offsets of it)."""
        return {t: _done(lambda t=t: self._store.delete_topic(t)) for t in _items(topics, "delete_topics()")}

    def list_topics(self, *args: Any, **kwargs: Any) -> list[str]:
        """The topics (kafka-python's ``list_topics()``; internal ones included, as Kafka lists them)."""
        return self._store.list_topics()

    def create_partitions(self, new_partitions: Any, timeout_ms: Any = None, validate_only: bool = False, *,
                          operation_timeout: Any = None, request_timeout: Any = None) -> dict[str, Future]:
        """Raise each topic's partition count to ``new_total_count`` (Kafka's semantics: only more; keys sent
        afterwards may map to other partitions). confluent-kafka's ``[NewPartitions(topic, n)]`` or kafka-python's
        ``{topic: NewPartitions(total_count)}``."""
        if isinstance(new_partitions, Mapping):
            pairs = [(t, _attr(np_, "total_count", "new_total_count")) for t, np_ in new_partitions.items()]
        else:
            pairs = [(_attr(np_, "topic"), _attr(np_, "new_total_count", "total_count"))
                     for np_ in _items(new_partitions, "create_partitions()")]
        out: dict[str, Future] = {}
        for topic, total in pairs:
            def grow(topic: Any = topic, total: Any = total) -> None:
                if is_internal_topic(topic):
                    raise InvalidArgumentError(f"the partition count of internal topic {topic} is deltalog's "
                                               "(offsets.topic.num.partitions)")
                if validate_only:
                    current = len(self._store.partitions(topic))
                    validate_partition_count(topic, total)
                    if total <= current:
                        raise InvalidPartitionsError(f"Topic currently has {current} partitions, which is "
                                                     f"{'higher than' if current > total else 'equal to'} the "
                                                     f"requested {total}.")
                    return None
                self._store.log_manager.create_partitions(topic, total)
                return None

            out[topic] = _done(grow)
        return out

    # -- configs ---------------------------------------------------------------------------------------------

    def describe_configs(self, resources: list[Any], include_synonyms: bool = False, *,
                         request_timeout: Any = None) -> dict[Any, Future]:
        """Each topic's configs: ``{name: ConfigEntry}`` (every key, ``is_default`` where it has Kafka's default)."""
        defaults = TopicConfig().to_properties()

        def describe(resource: Any) -> dict[str, ConfigEntry]:
            props = self._store.topic_config(_topic_name(resource)).to_properties()
            return {k: ConfigEntry(k, v, is_default=defaults[k] == v, source=5 if defaults[k] == v else 1)
                    for k, v in props.items()}

        return {r: _done(lambda r=r: describe(r)) for r in _items(resources, "describe_configs()")}

    def incremental_alter_configs(self, resources: list[Any], validate_only: bool = False, *,
                                  request_timeout: Any = None) -> dict[Any, Future]:
        """Kafka's incrementalAlterConfigs: per topic, each ``ConfigEntry`` is SET (to its value) or DELETE (back
        to Kafka's default); the others keep their values. APPEND and SUBTRACT (list configs) are refused."""
        return {r: _done(lambda r=r: self._alter(r, validate_only))
                for r in _items(resources, "incremental_alter_configs()")}

    def _alter(self, resource: Any, validate_only: bool) -> None:
        topic = _topic_name(resource)
        sets: dict[str, Any] = {}
        deletes: list[str] = []
        for entry in _attr(resource, "incremental_configs", default=None) or []:
            op = _attr(entry, "incremental_operation", default=SET)
            op = str(getattr(op, "name", op) or SET).upper()
            if op == SET:
                sets[entry.name] = entry.value
            elif op == DELETE:
                deletes.append(entry.name)
            else:
                raise InvalidConfigError(f"{entry.name}: incremental operation {op} is not supported; allowed: SET, "
                                         "DELETE (no topic config here is a list to APPEND to or SUBTRACT from)")
        for name in ("set_config_dict", "set_config", "configs"):  # confluent-kafka keeps set_config() a method
            given = getattr(resource, name, None)
            if isinstance(given, Mapping):
                sets.update(given)
                break
        change = {**sets, **default_values(deletes)}
        if validate_only:
            self._store.topic_config(topic).with_overrides(change)
        else:
            self._store.alter_topic_config(topic, change)

    # -- groups and records ----------------------------------------------------------------------------------

    def list_consumer_groups(self, *args: Any, **kwargs: Any) -> Future:
        """The groups with committed offsets (confluent-kafka's ``ListConsumerGroupsResult``; state EMPTY: no
        group has members)."""
        return _done(lambda: ListConsumerGroupsResult([ConsumerGroupListing(g)
                                                        for g in self._store.list_consumer_groups()]))

    def list_consumer_group_offsets(self, group_id: str, *args: Any, **kwargs: Any) -> dict[TopicPartition, Any]:
        """kafka-python's ``list_consumer_group_offsets(group_id)``: ``{TopicPartition: OffsetAndMetadata}``."""
        return self._store.list_consumer_group_offsets(group_id)

    def delete_consumer_groups(self, group_ids: list[str], *args: Any, **kwargs: Any) -> dict[str, Future]:
        return {g: _done(lambda g=g: self._store.delete_consumer_groups([g]))
                for g in _items(group_ids, "delete_consumer_groups()")}

    def delete_records(self, records_to_delete: Any, *args: Any, **kwargs: Any) -> dict[Any, Future]:
        """Kafka's DeleteRecords: confluent-kafka's ``[TopicPartition(t, p, before_offset)]`` or kafka-python's
        ``{TopicPartition: before_offset}`` (-1: the high watermark); each future's result is
        :class:`DeletedRecords` with the new low watermark."""
        if isinstance(records_to_delete, Mapping):
            items = [(tp, tp.topic, tp.partition, off) for tp, off in records_to_delete.items()]
        else:
            items = [(tp, tp.topic, tp.partition, tp.offset) for tp in _items(records_to_delete, "delete_records()")]
        return {key: _done(lambda t=t, p=p, o=o: DeletedRecords(self._store.delete_records(t, p, o).low_watermark))
                for key, t, p, o in items}

    # -- users' SCRAM credentials (Kafka's AlterUserScramCredentials / DescribeUserScramCredentials) -------------

    def alter_user_scram_credentials(self, alterations: list[Any], *args: Any, **kwargs: Any) -> dict[str, Future]:
        """Set or delete users' SCRAM credentials (``Admin.alterUserScramCredentials``): a list of
        :class:`UserScramCredentialUpsertion` / :class:`UserScramCredentialDeletion` (or confluent-kafka's or
        kafka-python's own). Answers ``{user: Future}``; a user's future raises its first error
        (``UnacceptableCredentialError``, checked for all of the user's alterations before the first is written;
        ``ResourceNotFoundError`` for deleting a credential the user does not have)."""
        from deltalog.scram import ScramCredentials, credential_from_salted, make_credential

        credentials = ScramCredentials(self._store.storage)
        by_user: dict[str, list[Any]] = {}
        for alteration in _items(alterations, "alter_user_scram_credentials()"):
            by_user.setdefault(_attr(alteration, "user"), []).append(alteration)

        def apply(user: str, items: list[Any]) -> None:
            planned: list[tuple[str, Any]] = []
            for a in items:  # every credential is checked before the first is written
                mechanism = scram_mechanism(_attr(a, "mechanism", default=None) or
                                            _attr(_attr(a, "scram_credential_info"), "mechanism"))
                if _attr(a, "password", "salted_password") is None:
                    planned.append((mechanism, None))
                    continue
                info = _attr(a, "scram_credential_info")
                iterations = _attr(a, "iterations", default=None)
                iterations = _attr(info, "iterations", default=None) if iterations is None else iterations
                iterations = 4096 if iterations is None else iterations
                salt = _attr(a, "salt", default=None)
                if _attr(a, "salted_password") is not None:  # kafka-python's: the client salted it
                    credential = credential_from_salted(mechanism, bytes(a.salted_password), bytes(salt), iterations)
                else:
                    password = a.password.decode("utf-8") if isinstance(a.password, bytes) else a.password
                    credential = make_credential(mechanism, password, iterations=iterations, salt=salt)
                planned.append((mechanism, credential))
            for mechanism, credential in planned:
                if credential is None:
                    credentials.delete(user, mechanism)
                else:
                    credentials.put(user, mechanism, credential)

        return {user: _done(lambda u=user, i=items: apply(u, i)) for user, items in by_user.items()}

    def describe_user_scram_credentials(self, users: list[str] | None = None, *args: Any,
                                        **kwargs: Any) -> Any:
        """Each user's SCRAM mechanisms and iteration counts (``Admin.describeUserScramCredentials``; never a
        salt or key). As confluent-kafka: with ``users`` None, one future of ``{user: description}`` for every
        user with a credential; else ``{user: Future}``, a user without one raising ``ResourceNotFoundError``."""
        from deltalog.scram import ScramCredentials

        credentials = ScramCredentials(self._store.storage)

        def description(user: str, mechanisms: dict[str, int]) -> UserScramCredentialsDescription:
            return UserScramCredentialsDescription(user, [ScramCredentialInfo(m, i) for m, i in mechanisms.items()])

        if users is None:
            return _done(lambda: {u: description(u, m) for u, m in credentials.describe().items()})
        return {user: _done(lambda u=user: description(u, credentials.describe([u])[u]))
                for user in _items(users, "describe_user_scram_credentials()")}

    def close(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to release (kafka-python's ``close()``)."""


@dataclass
class ScramCredentialInfo:
    """confluent-kafka's ``ScramCredentialInfo(mechanism, iterations)``; the mechanism as Kafka names it
    (``"SCRAM-SHA-256"``; the clients' ``ScramMechanism`` enums are read too)."""

    mechanism: str
    iterations: int = 4096


@dataclass
class UserScramCredentialsDescription:
    """confluent-kafka's ``UserScramCredentialsDescription(user, scram_credential_infos)``."""

    user: str
    scram_credential_infos: list[ScramCredentialInfo]


@dataclass
class UserScramCredentialUpsertion:
    """Set ``user``'s credential for ``mechanism`` from ``password`` (kafka-python's argument order; confluent-kafka's
    ``UserScramCredentialUpsertion(user, ScramCredentialInfo(...), password)`` is read as well)."""

    user: str
    mechanism: str
    password: str
    iterations: int = 4096
    salt: bytes | None = None


@dataclass
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str


def scram_mechanism(value: Any) -> str:
    """Kafka's mechanism name of ``value``: ``"SCRAM-SHA-256"``, ``"scram_sha_256"``, either client's
    ``ScramMechanism`` enum, or its number (1, 2)."""
    from deltalog.errors import UnacceptableCredentialError

    name = getattr(value, "name", value)
    if isinstance(name, int) and not isinstance(name, bool):
        name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(name, str(name))
    if isinstance(name, str):
        name = name.upper().replace("_", "-")
    if name not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise UnacceptableCredentialError(f"unknown SCRAM mechanism {shown(value)}: use SCRAM-SHA-256 or SCRAM-SHA-512")
    return name


def default_values(keys: Iterable[str]) -> dict[str, str]:
    """Kafka's default value of each topic config key (what DELETE, ``--delete-config``, returns it to)."""
    defaults = TopicConfig()
    return {k: TopicConfig.key(k).render(getattr(defaults, TopicConfig.key(k).attr)) for k in keys}


__all__ = ["RESOURCE_TOPIC", "AdminClient", "ConfigEntry", "ConfigResource", "DeletedRecords", "NewPartitions",
           "NewTopic", "default_values"]
