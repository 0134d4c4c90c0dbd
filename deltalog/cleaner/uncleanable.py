"""The uncleanable set: partitions whose cleaning threw, kept out of later passes until reset.

Kafka's ``LogCleaner.tryCleanFilthiestLog`` catches an unexpected exception from a pass, logs "Marking
its partition (...) as uncleanable" and adds the partition to ``LogCleanerManager.uncleanablePartitions``;
every later selection skips it, and the ``uncleanable-partitions-count`` / ``uncleanable-bytes`` metrics
report it (``LogCleanerManager.markPartitionUncleanable``). deltalog keeps one small JSON file per partition::

    <root>/_deltalog/uncleanable/<topic>/<partition>.json

(written whole through :class:`~deltalog.storage.Storage`, so on an object store as on a disk).

Each mark records the topic id of the partition it marks: Kafka drops a deleted partition from its set,
and here a topic deleted and created again under the same name has a new id, so an old mark never
poisons it (and ``delete_topic`` removes the marks as well).

Deliberate difference: Kafka forgets the set on restart (a broker restart is the usual cure); deltalog's
cleaner is a job that starts afresh every run, so the mark is durable and only
``deltalog cleaner reset-uncleanable`` (:meth:`UncleanablePartitions.reset`) clears it, once someone has
repaired or accepted the partition. A corrupt data file would otherwise fail every scheduled run.

Only failures of the log are marked. A pass that failed on the storage (a full disk or quota, an object store out
of reach: :func:`deltalog.storage_faults.is_transient`) is not: Kafka hands such an ``IOException`` to its log
directory failure handling, never to the uncleanable set, and once space is freed the same pass succeeds, so the
cleaner tries the partition again next cycle instead of waiting for someone to reset a mark.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from deltalog.errors import InvalidConfigError
from deltalog.log.log_manager import STATE_DIR
from deltalog.storage import Storage, as_storage, basename

UNCLEANABLE_DIR = "uncleanable"

PartitionId = tuple[str, int]


@dataclass(frozen=True)
class UncleanableMark:
    """Why and when a partition was marked uncleanable."""

    topic: str
    partition: int
    marked_ms: int
    error_type: str
    message: str
    first_dirty_offset: int | None
    first_uncleanable_offset: int | None
    owner: str
    traceback: str = ""
    topic_id: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def applies_to(self, topic_id: str | None) -> bool:
        """Whether this mark is about the topic that now has ``topic_id`` (not an earlier one of its name)."""
        return self.topic_id is None or topic_id is None or self.topic_id == topic_id


class UncleanablePartitions:
    """The durable uncleanable set of one store (``storage``: the store's, or its root)."""

    def __init__(self, storage: Storage | str) -> None:
        self.storage = as_storage(storage)
        self.dir = self.storage.location(STATE_DIR, UNCLEANABLE_DIR)
        #: Within :meth:`listed`: the partitions one listing found marked, each with its mark once read.
        self._listed: dict[PartitionId, UncleanableMark | None] | None = None
        self._lock = threading.Lock()

    @contextmanager
    def listed(self) -> Iterator[None]:
        """A cleaner cycle's view of the set: the marks are listed once (one listing of the store's marks), a
        partition not listed is unmarked without a request of its own, and each listed mark is read once; marks
        this object makes or clears meanwhile are kept in the view. A mark another process makes meanwhile is seen
        by the next cycle (the pass it would have stopped runs under the partition's lease, after that process's)."""
        if self._listed is not None:
            yield
            return
        self._listed = dict.fromkeys(self._listing())
        try:
            yield
        finally:
            self._listed = None

    def _path(self, topic: str, partition: int) -> str:
        return self.storage.location(STATE_DIR, UNCLEANABLE_DIR, topic, f"{int(partition)}.json")

    def mark(self, topic: str, partition: int, error: BaseException, now_ms: int, *, owner: str = "",
             topic_id: str | None = None, first_dirty_offset: int | None = None,
             first_uncleanable_offset: int | None = None) -> UncleanableMark:
        """Record that cleaning ``topic-partition`` failed with ``error``; later passes skip it."""
        mark = UncleanableMark(
            topic=topic, partition=int(partition), marked_ms=now_ms, error_type=type(error).__name__,
            message=str(error)[:4000], first_dirty_offset=first_dirty_offset,
            first_uncleanable_offset=first_uncleanable_offset, owner=owner,
            traceback="".join(traceback.format_exception(error))[-8000:], topic_id=topic_id,
        )
        self.storage.write_json(self._path(topic, partition), mark.as_dict())
        with self._lock:
            if self._listed is not None:
                self._listed[(topic, int(partition))] = mark
        return mark

    def get(self, topic: str, partition: int, topic_id: str | None = None) -> UncleanableMark | None:
        """The mark on a partition of the topic that has ``topic_id`` now (given), else any mark."""
        listed = self._listed
        if listed is not None:
            key = (topic, int(partition))
            if key not in listed:
                return None
            mark = listed[key]
            if mark is None:
                mark = self._read(topic, partition)
                with self._lock:
                    listed[key] = mark
            return mark if mark is not None and mark.applies_to(topic_id) else None
        mark = self._read(topic, partition)
        return mark if mark is not None and mark.applies_to(topic_id) else None

    def _read(self, topic: str, partition: int) -> UncleanableMark | None:
        path = self._path(topic, partition)
        data = self.storage.read_json(path)
        if data is None:
            if not self.storage.exists(path):
                return None
            # a damaged mark still marks the partition
            return UncleanableMark(topic, int(partition), 0, "Unknown", "the uncleanable mark is unreadable",
                                   None, None, "")
        try:
            mark = UncleanableMark(**data)
        except TypeError:
            mark = None
        if mark is None or not _valid(mark, topic, int(partition)):
            # a damaged mark still marks the partition, under the file's own topic and partition (so that
            # reset-uncleanable clears this very file); doctor names it
            mark = UncleanableMark(topic, int(partition), 0, "Unknown", f"the uncleanable mark {path} is unreadable",
                                   None, None, "")
        return mark

    def marks(self) -> list[UncleanableMark]:
        """Every mark, ordered by topic and partition (whatever topic id it was made for)."""
        listed = self._listed
        found = set(listed) if listed is not None else self._listing()
        out: list[UncleanableMark] = []
        for topic, p in sorted(found):
            mark = self.get(topic, p)
            if mark is not None:
                out.append(mark)
        return out

    def _listing(self) -> set[PartitionId]:
        """The partitions that have a mark file, from one listing."""
        found: set[PartitionId] = set()
        for f in self.storage.list_files(self.dir):
            rel = self.storage.key(f.location)[len(self.storage.key(self.dir)):].strip("/").split("/")
            name = basename(f.location)
            if len(rel) == 2 and name.endswith(".json") and name[:-5].isdigit():
                found.add((rel[0], int(name[:-5])))
        return found

    def reset(self, topic: str | None = None, partition: int | None = None) -> list[UncleanableMark]:
        """Clear the marks of one partition, of a topic, or of the whole store; returns what was cleared."""
        if partition is not None and topic is None:
            raise InvalidConfigError("reset-uncleanable: a partition needs its topic")
        cleared = [m for m in self.marks()
                   if (topic is None or m.topic == topic) and (partition is None or m.partition == partition)]
        self.storage.delete_many([self._path(m.topic, m.partition) for m in cleared])
        with self._lock:
            if self._listed is not None:
                for m in cleared:
                    self._listed.pop((m.topic, m.partition), None)
        return cleared

    def forget_topic(self, topic: str) -> None:
        """Drop every mark of a deleted topic (Kafka removes deleted partitions from its set)."""
        self.storage.delete_tree(self.storage.location(STATE_DIR, UNCLEANABLE_DIR, topic))
        with self._lock:
            if self._listed is not None:
                self._listed = {tp: m for tp, m in self._listed.items() if tp[0] != topic}


def _valid(mark: UncleanableMark, topic: str, partition: int) -> bool:
    """The mark is the one its file's path names, with the types deltalog writes."""
    def opt_int(v: object) -> bool:
        return v is None or (isinstance(v, int) and not isinstance(v, bool))

    return (mark.topic == topic and mark.partition == partition and isinstance(mark.marked_ms, int)
            and isinstance(mark.error_type, str) and isinstance(mark.message, str)
            and opt_int(mark.first_dirty_offset) and opt_int(mark.first_uncleanable_offset)
            and (mark.topic_id is None or isinstance(mark.topic_id, str)))
