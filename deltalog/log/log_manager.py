"""The registry of a store's topics and partition logs (Kafka's LogManager).

Layout::

    <root>/topics/<topic>/<partition>/      one Delta table per partition
    <root>/_deltalog/                       store-level state (staging, leases, cleaner state, checks)

``LogManager`` creates, lists and deletes topics and hands out one :class:`PartitionLog` per partition.
Every other service (the cleaner, retention, VACUUM, SQL, the checks) takes a ``LogManager`` and never
the :class:`~deltalog.store.Store` facade.

Each topic gets a topic id when it is created (Kafka's KIP-516), kept in every partition table's
properties: state keyed by partition (an uncleanable mark, say) records the id, so a topic deleted and
created again under the same name never inherits the old topic's state.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from deltalog.clock import Clock
from deltalog.config import TopicConfig
from deltalog.errors import (
    InvalidConfigError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    shown,
)
from deltalog.log.lease import LeaseManager
from deltalog.log.partition_log import PartitionLog, config_to_table_properties

log = logging.getLogger(__name__)
T = TypeVar("T")

TOPICS_DIR = "topics"
STATE_DIR = "_deltalog"
#: Where topics are built before being renamed into topics/, and moved to before being removed.
STAGING_DIR = os.path.join(STATE_DIR, "staging")
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: object) -> str:
    """Kafka's topic name rules (``Topic.validate``), which also keep every path inside the store."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"Topic name {shown(name, 60)} is illegal: it must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name {name!r} is illegal: it cannot be '.' or '..'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal: it is {len(name)} characters long, the maximum is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):  # fullmatch: ``$`` alone would let a trailing newline through
        raise InvalidTopicError(
            f"Topic name {shown(name, 300)} is illegal: it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return name


def validate_partition_count(topic: str, partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidConfigError(
            f"Invalid number of partitions {shown(partitions)} for topic {topic!r}: must be an integer in [1, {MAX_PARTITIONS}]"
        )
    return partitions


def validate_config_mapping(config: object, what: str = "config") -> dict[str, Any]:
    """A config argument must be a mapping of dotted keys (``{"cleanup.policy": "compact"}``) or None."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfigError(
            f"{what} must be a mapping of config keys to values, e.g. {{'cleanup.policy': 'compact'}}, "
            f"not {type(config).__name__} {config!r:.80}"
        )
    bad = [k for k in config if not isinstance(k, str)]
    if bad:
        raise InvalidConfigError(f"{what} keys must be strings such as 'cleanup.policy', not {shown(bad[0])}")
    return dict(config)


class LogManager:
    """The topics and partition logs under one store root, and the leases on them."""

    def __init__(self, root: str, clock: Clock) -> None:
        self.root = root
        self.clock = clock
        self.leases = LeaseManager(root, clock)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        os.makedirs(os.path.join(self.root, TOPICS_DIR), exist_ok=True)

    def __repr__(self) -> str:
        return f"LogManager({self.root!r})"

    def state_path(self, *parts: str) -> str:
        """A path under the store's state directory ``<root>/_deltalog``."""
        return os.path.join(self.root, STATE_DIR, *parts)

    def _topic_dir(self, topic: str) -> str:
        return os.path.join(self.root, TOPICS_DIR, validate_topic_name(topic))

    # -- topics ----------------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> TopicConfig:
        """Create ``partitions`` empty partition tables with the given topic configs and a new topic id.

        The tables are built in a hidden staging directory and renamed into place in one step, so a
        failure leaves no half-created topic and two concurrent creators cannot both succeed.
        """
        validate_topic_name(topic)
        validate_partition_count(topic, partitions)
        topic_config = TopicConfig.from_properties(validate_config_mapping(config, "topic config"))
        final = self._topic_dir(topic)
        if os.path.exists(final):
            raise TopicExistsError(f"Topic {topic!r} already exists in {self.root}")
        topic_id = uuid.uuid4().hex
        # Staged outside topics/ (a legal topic name may start with '.') under a name without the topic
        # name (a 249-character topic plus a prefix would pass the 255-byte file name limit).
        staging = os.path.join(self.root, STAGING_DIR, f"creating-{uuid.uuid4().hex}")
        try:
            for p in range(partitions):
                PartitionLog.create(os.path.join(staging, str(p)), topic, p, topic_config, topic_id=topic_id)
            try:
                os.rename(staging, final)
            except OSError:
                if os.path.exists(final):
                    raise TopicExistsError(f"Topic {topic!r} already exists in {self.root}") from None
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return topic_config

    def list_topics(self) -> list[str]:
        base = os.path.join(self.root, TOPICS_DIR)
        return sorted(name for name in os.listdir(base) if os.path.isdir(os.path.join(base, name)))

    def topic_exists(self, topic: str) -> bool:
        return os.path.isdir(self._topic_dir(topic))

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of a topic, in order."""
        path = self._topic_dir(topic)
        if not os.path.isdir(path):
            raise UnknownTopicOrPartitionError(
                f"Topic {topic!r} does not exist in {self.root}; existing topics: {self.list_topics()}"
            )
        return sorted(int(n) for n in os.listdir(path) if n.isdigit())

    def delete_topic(self, topic: str) -> None:
        """Remove a topic and all its data (Kafka's DeleteTopics). Irreversible.

        The topic directory is first renamed out of ``topics/`` (one step: the topic is gone for every
        reader at once), then removed.
        """
        path = self._topic_dir(topic)
        self.partitions(topic)  # raises if unknown
        doomed = os.path.join(self.root, STAGING_DIR, f"deleting-{uuid.uuid4().hex}")
        os.makedirs(os.path.dirname(doomed), exist_ok=True)
        os.rename(path, doomed)
        self._logs = {k: v for k, v in self._logs.items() if k[0] != topic}
        shutil.rmtree(doomed, ignore_errors=True)

    def topic_config(self, topic: str) -> TopicConfig:
        return self.log(topic, self.partitions(topic)[0]).head().config

    def topic_id(self, topic: str) -> str | None:
        """The id the topic got when it was created (None for a topic created before ids existed)."""
        return self.log(topic, self.partitions(topic)[0]).topic_id()

    def alter_topic_config(self, topic: str, config: Mapping[str, Any]) -> TopicConfig:
        """Set some topic configs (Kafka's incrementalAlterConfigs SET); the others keep their values.

        The whole change is validated before any partition is touched; each partition table records it
        in its own Delta commit.
        """
        new = self.topic_config(topic).with_overrides(validate_config_mapping(config, "topic config"))
        props = config_to_table_properties(new)
        for log in self.logs(topic):
            log.table().alter.set_table_properties(props, raise_if_not_exists=False)
        return new

    # -- partition logs ------------------------------------------------------------------------------------

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The :class:`PartitionLog` of one partition; raises if the topic or partition does not exist."""
        # Types first: True == 1 and hashes alike, so a cache hit would take True for partition 1; and a topic
        # given as a list is not hashable.
        known = isinstance(topic, str) and _is_partition_number(partition)
        cached = self._logs.get((topic, partition)) if known else None
        if cached is not None:
            return cached
        parts = self.partitions(topic)
        if not _is_partition_number(partition) or partition not in parts:
            kind = "" if _is_partition_number(partition) else f" (a partition is an int, not a {type(partition).__name__})"
            raise UnknownTopicOrPartitionError(
                f"Partition {shown(partition, 40)} of topic {topic!r} does not exist{kind}; partitions are "
                f"0..{len(parts) - 1}"
            )
        log = PartitionLog(os.path.join(self._topic_dir(topic), str(partition)), topic, partition)
        self._logs[(topic, partition)] = log
        return log

    def logs(self, topic: str | None = None) -> list[PartitionLog]:
        """Every partition log of one topic, or of the whole store."""
        topics = [topic] if topic is not None else self.list_topics()
        return [self.log(t, p) for t in topics for p in self.partitions(t)]

    def each_leased(self, topic: str | None, purpose: str, step: Callable[[PartitionLog], T], *,
                    keep_going: bool = False) -> list[T]:
        """``step(log)`` on every partition (of ``topic``, or of the store) under its lease, in order.

        A partition whose lease another run holds is skipped this time, as Kafka's retention skips a
        partition whose cleaning it cannot pause. With ``keep_going`` an error is logged and the next
        partition is done (the cleaner job's cycle: retried next cycle); without, it propagates.
        """
        out: list[T] = []
        for plog in self.logs(topic):
            lease = self.leases.acquire(plog.topic, plog.partition, purpose)
            if lease is None:
                log.info("%s skipped %s-%d: another run holds its lease", purpose, plog.topic, plog.partition)
                continue
            try:
                out.append(step(plog))
            except Exception as e:
                if not keep_going:
                    raise
                log.error("%s of %s-%d failed; it is tried again next cycle", purpose, plog.topic, plog.partition,
                          exc_info=e)
            finally:
                lease.release()
        return out


def _is_partition_number(partition: object) -> bool:
    """An int that is not a bool (``True == 1``), nor a float such as ``0.0``."""
    return isinstance(partition, int) and not isinstance(partition, bool)
