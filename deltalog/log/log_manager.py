"""The registry of a store's topics and partition logs (Kafka's LogManager).

Layout (every file through :class:`~deltalog.storage.Storage`, so the root may be a local path or an
object-store URI)::

    <root>/_deltalog/store.json             the store marker: what makes a location a deltalog store
    <root>/topics/<topic>/_topic.json       the topic marker: state, topic id, partition count
    <root>/topics/<topic>/<partition>/      one Delta table per partition
    <root>/_deltalog/                       store-level state (leases, cleaner state, checks, metrics)

``LogManager`` creates, lists and deletes topics and hands out one :class:`PartitionLog` per partition.
Every other service (the cleaner, retention, VACUUM, SQL, the checks) takes a ``LogManager`` and never
the :class:`~deltalog.store.Store` facade.

Topics are created and deleted without a rename (object stores have none), through the topic marker,
which is written with a conditional put and changed only by compare-and-swap:

* create: the marker is created ``creating`` (of two concurrent creators exactly one succeeds; the other
  gets :class:`TopicExistsError`), then the partition tables, then the marker is swapped to ``ready``.
  Readers see only ready topics, so a topic appears whole or not at all;
* delete: the marker is swapped to ``deleting`` (the topic is gone for every reader at once), then its files
  are removed, the marker last;
* a ``creating`` or ``deleting`` marker left by a process that died (its pid is gone from this machine, or it
  has not been touched for :data:`TOPIC_OPERATION_TIMEOUT_MS`) is taken over by the next create, by
  compare-and-swap, so two creators cannot both take it over. A live one makes a create fail with
  :class:`TopicExistsError`, as Kafka answers a create of a topic marked for deletion.

A topic directory without a marker that holds partition tables is a topic made before markers existed (a
local store): it counts as ready, so existing stores keep working.

Each topic gets a topic id when it is created (Kafka's KIP-516), kept in the marker and in every partition
table's properties: state keyed by partition (an uncleanable mark, say) records the id, so a topic deleted
and created again under the same name never inherits the old topic's state.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from deltalog.clock import Clock
from deltalog.config import TopicConfig, validate_config_mapping
from deltalog.errors import (
    CorruptLogError,
    CorruptStateError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    NoStoreError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    shown,
)
from deltalog.log import delta
from deltalog.log.lease import LeaseManager, owner_is_dead
from deltalog.log.partition_log import LogSnapshot, PartitionLog, config_to_table_properties
from deltalog.log.walk import each_partition
from deltalog.storage import Storage, Versioned
from deltalog.version import __version__

log = logging.getLogger(__name__)
T = TypeVar("T")

TOPICS_DIR = "topics"
STATE_DIR = "_deltalog"
#: The store marker, under STATE_DIR.
STORE_MARKER = "store.json"
#: The topic marker, in each topic's directory (not a legal partition directory name).
TOPIC_MARKER = "_topic.json"
#: A ``creating`` or ``deleting`` topic marker untouched for this long (wall clock) was left by a process that
#: died; a live creator refreshes it well within this.
TOPIC_OPERATION_TIMEOUT_MS = 10 * 60 * 1000
TOPIC_CREATING = "creating"
TOPIC_READY = "ready"
TOPIC_DELETING = "deleting"
#: The internal topics (Kafka's ``Topic.INTERNAL_TOPICS``): deltalog's own state, made on first use, never by a
#: user's create_topic. They are listed as other topics (``deltalog topics list --exclude-internal`` leaves them
#: out, as Kafka's kafka-topics does); the cleaner, retention and VACUUM treat them as any other topic, which is how
#: ``__consumer_offsets`` stays small.
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000
#: The lease purpose of VACUUM (:mod:`deltalog.log.vacuum`), the one step under a lease that never commits.
NO_COMMIT_PURPOSE = "vacuum"
#: Partitions a cycle's walk works on side by side when no ``background.threads`` is given (Kafka's default).
DEFAULT_WALK_THREADS = 10
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


def is_internal_topic(name: str) -> bool:
    """Kafka's ``Topic.isInternal``: one of deltalog's own topics."""
    return name in INTERNAL_TOPICS


def validate_partition_count(topic: str, partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidConfigError(
            f"Invalid number of partitions {shown(partitions)} for topic {topic!r}: must be an integer in [1, {MAX_PARTITIONS}]"
        )
    return partitions


@dataclass(frozen=True)
class TopicMarker:
    """What ``topics/<topic>/_topic.json`` says: the topic's state, id and partition count, and who last
    changed it."""

    state: str
    topic_id: str | None
    partitions: int
    owner: str
    updated_ms: int  # wall clock of the owner's machine

    def payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, data: bytes) -> TopicMarker | None:
        """The marker, or None when it is not one deltalog wrote (not JSON, a key missing, a value of the wrong
        type or out of range: an unknown state, a partition count below 1)."""
        try:
            d = json.loads(data)
            marker = cls(d["state"], d.get("topic_id"), d["partitions"], d.get("owner", ""), d.get("updated_ms", 0))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        ints_ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (marker.partitions, marker.updated_ms))
        if not (ints_ok and marker.state in (TOPIC_CREATING, TOPIC_READY, TOPIC_DELETING) and marker.partitions >= 1
                and isinstance(marker.owner, str) and (marker.topic_id is None or isinstance(marker.topic_id, str))):
            return None
        return marker

    def stale(self, modified_ms: int, now_wall_ms: int) -> bool:
        """A ``creating``/``deleting`` marker whose owner died, or that nobody touched for the timeout."""
        last = max(self.updated_ms, modified_ms)
        return owner_is_dead(self.owner) or now_wall_ms - last > TOPIC_OPERATION_TIMEOUT_MS


class _LostMarker(TopicExistsError):
    """Another process took over the marker of the topic this one was creating (it judged this one dead)."""


def _wall_ms() -> int:
    # Topic operations are about live processes, not the store's (possibly manual) clock.
    return int(time.time() * 1000)


def is_store(storage: Storage) -> bool:
    """Whether ``storage``'s root holds a deltalog store: its marker, or (a local store made before markers
    existed) a ``topics`` directory."""
    if storage.exists(storage.location(STATE_DIR, STORE_MARKER)):
        return True
    return storage.local and os.path.isdir(storage.location(TOPICS_DIR))


class LogManager:
    """The topics and partition logs under one store root, and the leases on them.

    With ``create`` (the default) a location with no store becomes one: the store marker is created (and, on
    an object store, the storage is checked to refuse a second create of one file, which every Delta commit
    and lease relies on). Without, a location that holds no store raises :class:`NoStoreError`.
    """

    def __init__(self, storage: Storage, clock: Clock, *, create: bool = True,
                 walk_threads: int = DEFAULT_WALK_THREADS) -> None:
        self.storage = storage
        self.root = storage.root
        self.clock = clock
        self.leases = LeaseManager(storage, clock)
        #: How many partitions a cycle's walk works on side by side (``background.threads``).
        self.walk_threads = walk_threads
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        #: The topic id each topic had when :meth:`current_logs` last read its marker (its held logs are of that topic)
        self._log_ids: dict[str, str | None] = {}
        #: The open cycle (:meth:`cycle`): a token its snapshots are taken under, and its partitions.
        self._cycle: object | None = None
        self._cycle_logs: list[PartitionLog] | None = None
        # Work under a lease may change the partition: the cycle's next look at it refreshes its snapshot.
        self.leases.released_hooks.append(self._forget_cycle_snapshot)
        if create:
            self._ensure_store()
        elif not is_store(storage):
            raise NoStoreError(f"no deltalog store at {storage.root}")

    def __repr__(self) -> str:
        return f"LogManager({self.root!r})"

    def _ensure_store(self) -> None:
        marker = self.state_path(STORE_MARKER)
        if self.storage.local:
            # A topics/ directory keeps the store recognisable to deltalog versions from before the marker.
            os.makedirs(self.storage.location(TOPICS_DIR), exist_ok=True)
        if self.storage.exists(marker):
            return
        payload = {"format": 1, "store_id": uuid.uuid4().hex, "created_ms": _wall_ms(),
                   "created_by": f"deltalog {__version__}"}
        if not self.storage.local:
            # A store is made once: prove here that the storage honours conditional puts (see Storage).
            self.storage.check_conditional_put(self.state_path())
        self.storage.create_json(marker, payload)

    def state_path(self, *parts: str) -> str:
        """A location under the store's state directory ``<root>/_deltalog``."""
        return self.storage.location(STATE_DIR, *parts)

    def _topic_dir(self, topic: str) -> str:
        return self.storage.location(TOPICS_DIR, validate_topic_name(topic))

    def _marker_path(self, topic: str) -> str:
        return self.storage.location(TOPICS_DIR, validate_topic_name(topic), TOPIC_MARKER)

    def _partition_uri(self, topic: str, partition: int) -> str:
        return self.storage.location(TOPICS_DIR, validate_topic_name(topic), str(partition))

    # -- topic markers ---------------------------------------------------------------------------------

    def _read_marker(self, topic: str) -> tuple[TopicMarker, Versioned] | None:
        found = self.storage.read_versioned(self._marker_path(topic))
        if found is None:
            return None
        marker = TopicMarker.parse(found.data)
        if marker is None:
            path = self._marker_path(topic)
            fix = "Restore it from a backup, or remove it and the topic's files to drop the topic"
            raise CorruptStateError(f"{path}: the topic marker of {topic!r} is not valid JSON or holds a wrong state, "
                                    f"partition count or type; it was not written by deltalog. {fix}", location=path,
                                    fix=fix)
        return marker, found

    def _legacy_partitions(self, topic: str) -> list[int]:
        """The partitions of a local topic made before markers existed (none on an object store, nor where a
        marker exists)."""
        if not self.storage.local or self.storage.exists(self._marker_path(topic)):
            return []
        base = self._topic_dir(topic)
        return sorted(int(n) for n in self.storage.list_dirs(base) if n.isdigit()
                      and self.storage.exists(self.storage.location(TOPICS_DIR, topic, n, "_delta_log",
                                                                     f"{0:020d}.json")))

    def _marker(self, state: str, topic_id: str | None, partitions: int) -> TopicMarker:
        return TopicMarker(state, topic_id, partitions, self.leases.owner, _wall_ms())

    # -- topics ----------------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> TopicConfig:
        """Create ``partitions`` empty partition tables with the given topic configs and a new topic id.

        The topic marker is created first (a conditional put: of two concurrent creators exactly one gets
        past it), the tables next, and the marker says ``ready`` last, so readers never see a half-created
        topic; a failure removes what was made.
        """
        validate_topic_name(topic)
        validate_partition_count(topic, partitions)
        topic_config = TopicConfig.from_properties(validate_config_mapping(config, "topic config"))
        if self._legacy_partitions(topic):
            raise TopicExistsError(f"Topic {topic!r} already exists in {self.root}")
        topic_id = uuid.uuid4().hex
        path = self._marker_path(topic)
        mine = self._marker(TOPIC_CREATING, topic_id, partitions)
        etag = self.storage.create_json(path, mine.payload())
        if etag is None:
            etag = self._take_over(topic, mine)
        try:
            refreshed = time.monotonic()
            for p in range(partitions):
                PartitionLog.create(self.storage, self._partition_uri(topic, p), topic, p, topic_config,
                                    topic_id=topic_id)
                if time.monotonic() - refreshed > TOPIC_OPERATION_TIMEOUT_MS / 4000:  # a long create: still alive
                    etag = self._swap(topic, etag, self._marker(TOPIC_CREATING, topic_id, partitions))
                    refreshed = time.monotonic()
            self._swap(topic, etag, self._marker(TOPIC_READY, topic_id, partitions))
        except _LostMarker:
            raise  # the files are the new owner's now
        except BaseException:
            self._remove_topic_files(topic, keep_marker=False)
            raise
        self._forget_logs(topic)
        return topic_config

    def _take_over(self, topic: str, mine: TopicMarker) -> str:
        """The marker exists: a ready or live topic operation is :class:`TopicExistsError`; one left by a dead
        process is taken over (compare-and-swap: of two creators, one) and its files removed. Returns the etag
        of our marker."""
        path = self._marker_path(topic)
        for _ in range(5):
            found = self._read_marker(topic)
            if found is None:  # deleted meanwhile: create it again
                etag = self.storage.create_json(path, mine.payload())
                if etag is not None:
                    return etag
                continue
            marker, version = found
            if marker.state == TOPIC_READY:
                raise TopicExistsError(f"Topic {topic!r} already exists in {self.root}")
            if not marker.stale(version.modified_ms, _wall_ms()):
                doing = "being created" if marker.state == TOPIC_CREATING else "marked for deletion"
                raise TopicExistsError(f"Topic {topic!r} is {doing} by {marker.owner} in {self.root}; "
                                       "try again once that has finished")
            etag = self.storage.replace_json(path, mine.payload(), version.etag)
            if etag is None:
                continue  # someone else changed it first: look again
            log.warning("topic %r: taking over the %s marker left by %s, which is gone; removing its files",
                        topic, marker.state, marker.owner)
            self._remove_topic_files(topic, keep_marker=True)
            return etag
        raise TopicExistsError(f"Topic {topic!r} is changing under concurrent creators in {self.root}; try again")

    def _swap(self, topic: str, etag: str, marker: TopicMarker) -> str:
        new = self.storage.replace_json(self._marker_path(topic), marker.payload(), etag)
        if new is None:
            raise _LostMarker(f"Topic {topic!r}: another process took over this topic's marker while it was "
                                   f"being {'created' if marker.state != TOPIC_DELETING else 'deleted'} "
                                   "(it judged this process dead); nothing more was done")
        return new

    def _remove_topic_files(self, topic: str, *, keep_marker: bool) -> None:
        """Every file of the topic, the marker last (or not at all)."""
        marker = self._marker_path(topic)
        self.storage.delete_many([f.location for f in self.storage.list_files(self._topic_dir(topic))
                                  if f.location != marker])
        if not keep_marker:
            self.storage.delete(marker)
        self.storage.prune_empty_dirs(self._topic_dir(topic), include_self=not keep_marker)

    def list_topics(self, *, include_damaged: bool = False) -> list[str]:
        """The ready topics (one being created or deleted is not listed).

        A topic whose marker is damaged (:meth:`damaged_topics`) is left out of the internal sweeps (the cleaner,
        retention, pattern subscriptions keep going over the others and log the damage); with
        ``include_damaged`` it is listed too, as a user's listing must show it: every operation on it raises
        :class:`CorruptStateError` naming the marker file."""
        names = []
        for name, damage_ in self._topic_states():
            if damage_ is not None:
                if not include_damaged:
                    log.error("%s", damage_)
                    continue
            names.append(name)
        return names

    def damaged_topics(self) -> dict[str, CorruptStateError]:
        """The topics whose marker (``topics/<topic>/_topic.json``) is damaged, each with the error naming the file
        and the way to recover: never hidden from a listing (``deltalog topics list``, ``deltalog doctor``)."""
        return {name: damage_ for name, damage_ in self._topic_states() if damage_ is not None}

    def _topic_states(self) -> list[tuple[str, CorruptStateError | None]]:
        """Every topic directory with a legal name that is ready or damaged: (name, its damage or None)."""
        names = []
        for name in self.storage.list_dirs(self.storage.location(TOPICS_DIR)):
            try:
                names.append(validate_topic_name(name))
            except InvalidTopicError:
                continue
        # Each topic's marker is a read of its own: :attr:`walk_threads` of them in flight.
        found: list[tuple[str, CorruptStateError | None]] = []
        for walked in each_partition(names, self._ready_partitions, self.walk_threads):
            if isinstance(walked.error, CorruptStateError):
                found.append((walked.item, walked.error))
            elif walked.error is not None:
                raise walked.error
            elif walked.result is not None:
                found.append((walked.item, None))
        return found

    def _ready_partitions(self, topic: str) -> list[int] | None:
        found = self._read_marker(topic)
        if found is not None:
            marker = found[0]
            return list(range(marker.partitions)) if marker.state == TOPIC_READY else None
        return self._legacy_partitions(topic) or None

    def topic_exists(self, topic: str) -> bool:
        return self._ready_partitions(topic) is not None

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of a topic, in order."""
        parts = self._ready_partitions(topic)
        if parts is None:
            raise UnknownTopicOrPartitionError(
                f"Topic {topic!r} does not exist in {self.root}; existing topics: {self.list_topics()}"
            )
        return parts

    def delete_topic(self, topic: str) -> None:
        """Remove a topic and all its data (Kafka's DeleteTopics). Irreversible.

        The marker is first swapped to ``deleting`` (one step: the topic is gone for every reader at once),
        then the files are removed, the marker last. Of two concurrent deletes, one does it; the other gets
        :class:`UnknownTopicOrPartitionError`. A topic half created or half deleted by a process that died is
        removed too.
        """
        path = self._marker_path(topic)
        found = self._read_marker(topic)
        if found is None:
            legacy = self._legacy_partitions(topic)
            if not legacy:
                self.partitions(topic)  # raises: unknown
            etag = self.storage.create_json(path, self._marker(TOPIC_DELETING, None, len(legacy)).payload())
            if etag is None:
                raise UnknownTopicOrPartitionError(f"Topic {topic!r} is being deleted or created by another process")
        else:
            marker, version = found
            if marker.state != TOPIC_READY and not marker.stale(version.modified_ms, _wall_ms()):
                raise UnknownTopicOrPartitionError(
                    f"Topic {topic!r} does not exist in {self.root}: it is "
                    f"{'being created' if marker.state == TOPIC_CREATING else 'being deleted'} by {marker.owner}")
            etag = self.storage.replace_json(path, self._marker(TOPIC_DELETING, marker.topic_id,
                                                                marker.partitions).payload(), version.etag)
            if etag is None:
                raise UnknownTopicOrPartitionError(f"Topic {topic!r} was deleted (or changed) by another process "
                                                   "while this delete looked at it")
        self._forget_logs(topic)
        self._remove_topic_files(topic, keep_marker=False)

    def create_partitions(self, topic: str, total: int) -> int:
        """Raise ``topic``'s partition count to ``total`` (Kafka's CreatePartitions): only more, never fewer, and,
        as in Kafka, keyed records sent afterwards may go to another partition than before (murmur2 % count).

        The new partition tables are created first (with the topic's configs and id), invisible to readers; the
        topic marker then swaps to the new count by compare-and-swap, so every reader sees all of them or none.
        Tables left by an attempt that failed before its swap are removed and made again. Returns the old count.
        """
        validate_partition_count(topic, total)
        found = self._read_marker(topic)
        if found is None or found[0].state != TOPIC_READY:
            self.partitions(topic)  # raises: unknown (or a store made before topic markers: not supported)
            raise InvalidConfigError(f"Topic {topic!r} has no topic marker (made by an older deltalog); recreate it "
                                     "to add partitions")
        marker, version = found
        if total <= marker.partitions:
            which = "higher than" if marker.partitions > total else "equal to"
            raise InvalidPartitionsError(f"Topic currently has {marker.partitions} partitions, which is {which} the "
                                         f"requested {total}.")
        config = self.topic_config(topic)
        for p in range(marker.partitions, total):
            uri = self._partition_uri(topic, p)
            self.storage.delete_many([f.location for f in self.storage.list_files(uri)])  # a failed attempt's
            PartitionLog.create(self.storage, uri, topic, p, config, topic_id=marker.topic_id)
        grown = TopicMarker(TOPIC_READY, marker.topic_id, total, self.leases.owner, _wall_ms())
        if self.storage.replace_json(self._marker_path(topic), grown.payload(), version.etag) is None:
            raise InvalidPartitionsError(f"Topic {topic!r} changed while its partitions were being added (another "
                                         "create_partitions, or a delete); nothing was added: try again")
        self._forget_logs(topic)
        return marker.partitions

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's config, from its first partition's table properties (in a :meth:`cycle`, as the cycle's look at
        that partition saw them: a partition seeded from the log-snapshot checkpoint is not read for it)."""
        log = self.log(topic, self.partitions(topic)[0])
        if self._cycle is not None:
            return self.snapshot(log).config
        return log.head().config

    def topic_id(self, topic: str) -> str | None:
        """The id the topic got when it was created (None for a topic created before ids existed)."""
        found = self._read_marker(topic)
        if found is not None and found[0].state == TOPIC_READY and found[0].topic_id is not None:
            return found[0].topic_id
        return self.log(topic, self.partitions(topic)[0]).topic_id()

    def alter_topic_config(self, topic: str, config: Mapping[str, Any]) -> TopicConfig:
        """Set some topic configs (Kafka's incrementalAlterConfigs SET); the others keep their values.

        The whole change is validated before any partition is touched; each partition table records it
        in its own Delta commit.
        """
        new = self.topic_config(topic).with_overrides(validate_config_mapping(config, "topic config"))
        # The properties that tell other engines what not to do come along: a table made before they existed
        # gets them with its next config change (a metadata commit of its own already).
        props = {**config_to_table_properties(new), **delta.ENGINE_PROPERTIES}
        for log in self.logs(topic):
            delta.alter_properties(log.table(), props)
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
        log = PartitionLog(self.storage, self._partition_uri(topic, partition), topic, partition)
        self._logs[(topic, partition)] = log
        return log

    def current_logs(self, topic: str) -> tuple[str | None, dict[int, PartitionLog]]:
        """The topic's id and its partition logs as the topic stands now, from one read of its marker, for a request
        over many of its partitions (Metadata, ListOffsets, a group's lag): the logs held by this manager are
        reused, and dropped first when the topic was deleted and created again meanwhile, by any process (another
        topic id, Kafka's KIP-516), or never checked before. :class:`UnknownTopicOrPartitionError` when the topic is
        not there (its held logs are dropped too)."""
        found = self._read_marker(topic)
        if found is not None:
            marker = found[0]
            parts = list(range(marker.partitions)) if marker.state == TOPIC_READY else []
            topic_id = marker.topic_id
        else:
            parts, topic_id = self._legacy_partitions(topic), None
        if not parts:
            self._forget_logs(topic)
            self.partitions(topic)  # raises when unknown
            return self.current_logs(topic)  # made meanwhile: read its marker again
        if topic not in self._log_ids or self._log_ids[topic] != topic_id:
            self._forget_logs(topic)
            self._log_ids[topic] = topic_id
        logs = {}
        for p in parts:
            log = self._logs.get((topic, p))
            if log is None:
                log = self._logs[(topic, p)] = PartitionLog(self.storage, self._partition_uri(topic, p), topic, p)
            logs[p] = log
        return topic_id, logs

    def _forget_logs(self, topic: str) -> None:
        """Drop the partition logs held of ``topic``: the next use opens its tables again."""
        self._logs = {k: v for k, v in self._logs.items() if k[0] != topic}
        self._log_ids.pop(topic, None)
        self._cycle_logs = None  # an open cycle lists the store again

    def logs(self, topic: str | None = None) -> list[PartitionLog]:
        """Every partition log of one topic, or of the whole store (in a :meth:`cycle`: its partitions as the cycle
        listed them first, so its steps walk one listing rather than reading every topic marker each)."""
        if topic is None and self._cycle is not None:
            if self._cycle_logs is None:
                self._cycle_logs = self._logs_of_topics(self.list_topics())
            return list(self._cycle_logs)
        topics = [topic] if topic is not None else self.list_topics()
        return [self._listed_log(t, p) for t in topics for p in self.partitions(t)]

    def _listed_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a partition the topic's marker was just read to have (:meth:`log` would read it again for
        each partition this process holds no log of yet: a read of the marker per partition in a fresh process)."""
        log = self._logs.get((topic, partition))
        if log is None:
            log = self._logs[(topic, partition)] = PartitionLog(self.storage, self._partition_uri(topic, partition),
                                                                topic, partition)
        return log

    def logs_of(self, topics: Iterable[str] | None) -> list[PartitionLog]:
        """The partition logs of ``topics`` (None: of the store), leaving out a topic deleted while they are listed."""
        if topics is None and self._cycle is not None:
            return self.logs()
        return self._logs_of_topics(list(topics) if topics is not None else self.list_topics())

    def _logs_of_topics(self, topics: list[str]) -> list[PartitionLog]:
        out: list[PartitionLog] = []
        for topic in topics:
            try:
                out += self.logs(topic)
            except UnknownTopicOrPartitionError:
                continue  # deleted while we looked
        return out

    # -- a cycle's walk ----------------------------------------------------------------------------------

    @contextmanager
    def cycle(self) -> Iterator[None]:
        """A cleaner cycle: within it :meth:`snapshot` refreshes each partition once (at its first look) and
        :meth:`logs` lists the store once, as Kafka's cleaner ranks its in-memory logs instead of reading each from
        disk at every look. Work on a partition under its lease makes its next look refresh again
        (:meth:`PartitionLog.cycle_snapshot`). Outside a cycle every look refreshes."""
        if self._cycle is not None:  # nested: the outer cycle's view holds
            yield
            return
        self._cycle, self._cycle_logs = object(), None
        try:
            yield
        finally:
            self._cycle, self._cycle_logs = None, None

    @property
    def in_cycle(self) -> bool:
        return self._cycle is not None

    def snapshot(self, plog: PartitionLog) -> LogSnapshot:
        """``plog``'s latest snapshot; in a :meth:`cycle`, the one its first look took (see there)."""
        return plog.cycle_snapshot(self._cycle)

    def refresh_snapshots(self) -> None:
        """Take the cycle's snapshot of every partition, :attr:`walk_threads` at a time; a partition whose log
        cannot be read is left for the cycle's steps, which each report it as they do."""
        each_partition(self.logs(), self.snapshot, self.walk_threads)

    def _forget_cycle_snapshot(self, topic: str, partition: int, purpose: str) -> None:
        if purpose == NO_COMMIT_PURPOSE:  # VACUUM removes files no version references: the log is as it was
            return
        plog = self._logs.get((topic, partition))
        if plog is not None:
            plog.forget_cycle()

    def each_leased(self, topic: str | None, purpose: str, step: Callable[[PartitionLog], T], *,
                    keep_going: bool = False, needed: Callable[[PartitionLog], bool] | None = None,
                    progress: Callable[[int, int, str], None] | None = None) -> list[T]:
        """``step(log)`` on every partition (of ``topic``, or of the store) under its lease, the results in the
        partitions' order; with ``keep_going``, :attr:`walk_threads` partitions at a time (each leased on its own).

        A partition whose lease another run holds is skipped this time, as Kafka's retention skips a
        partition whose cleaning it cannot pause. With ``keep_going`` an error is logged and the next
        partition is done (the cleaner job's cycle: retried next cycle); without, it propagates. ``needed``,
        when given, says from what this process already knows of the partition (its cached snapshot, a listing)
        whether ``step`` could do anything; a partition it says no to is not leased at all, so an idle store's
        cycle writes nothing per partition (``step`` plans again under the lease, so a stale yes is harmless).
        ``progress`` is told ``(partitions done, partitions in all, the partition now)`` before each partition
        and once at the end (a command's progress bar).
        """
        def one(plog: PartitionLog) -> tuple[bool, T | None]:
            if needed is not None and not needed(plog):
                return False, None
            lease = self.leases.acquire(plog.topic, plog.partition, purpose)
            if lease is None:
                log.info("%s skipped %s-%d: another run holds its lease", purpose, plog.topic, plog.partition)
                return False, None
            try:
                return True, step(plog)
            finally:
                lease.release()

        out: list[T] = []
        logs = self.logs(topic)
        if not keep_going:  # the first error stops the walk: one partition after another
            for i, plog in enumerate(logs):
                if progress is not None:
                    progress(i, len(logs), f"{plog.topic}-{plog.partition}")
                done, result = one(plog)
                if done:
                    out.append(result)  # type: ignore[arg-type] - step's own result, None included
        else:
            for i, walked in enumerate(each_partition(logs, one, self.walk_threads)):
                if walked.error is not None:
                    self._step_failed(purpose, walked.item, walked.error, keep_going)
                elif walked.result is not None and walked.result[0]:
                    out.append(walked.result[1])  # type: ignore[arg-type] - step's own result, None included
                if progress is not None:
                    progress(i + 1, len(logs), f"{walked.item.topic}-{walked.item.partition}")
        if progress is not None:
            progress(len(logs), len(logs), "done")
        return out

    @staticmethod
    def _step_failed(purpose: str, plog: PartitionLog, error: Exception, keep_going: bool) -> None:
        """Raise ``error``, or with ``keep_going`` log it (the partition is tried again next cycle)."""
        if not keep_going:
            raise error
        damaged = isinstance(error, CorruptLogError)  # its message names the file: a stack would add nothing
        log.error("%s of %s-%d failed; it is tried again next cycle%s", purpose, plog.topic, plog.partition,
                  f": {error}" if damaged else "", exc_info=None if damaged else error)


def _is_partition_number(partition: object) -> bool:
    """An int that is not a bool (``True == 1``), nor a float such as ``0.0``."""
    return isinstance(partition, int) and not isinstance(partition, bool)
