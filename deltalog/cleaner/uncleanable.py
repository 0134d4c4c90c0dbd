"""The uncleanable set: partitions whose cleaning threw, kept out of later runs until reset.

Kafka's ``LogCleaner.tryCleanFilthiestLog`` catches an unexpected exception from a pass, logs "Marking
its partition (...) as uncleanable" and adds the partition to ``LogCleanerManager.uncleanablePartitions``;
every later selection skips it, and the ``uncleanable-partitions-count`` / ``uncleanable-bytes`` metrics
report it (seed 000 "uncleanable", seed 001). deltalog keeps one small JSON file per partition::

    <root>/_deltalog/uncleanable/<topic>/<partition>.json

Deliberate difference: Kafka forgets the set on restart (a broker restart is the usual cure); deltalog's
cleaner is a job that starts afresh every run, so the mark is durable and only
``deltalog cleaner reset-uncleanable`` (:meth:`Quarantine.reset`) clears it, once someone has repaired or
accepted the partition. A corrupt data file would otherwise fail every scheduled run.
"""

from __future__ import annotations

import json
import os
import traceback
import uuid
from dataclasses import asdict, dataclass

UNCLEANABLE_DIR = os.path.join("_deltalog", "uncleanable")


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

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class Quarantine:
    """The durable uncleanable set of one store."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.dir = os.path.join(root, UNCLEANABLE_DIR)

    def _path(self, topic: str, partition: int) -> str:
        return os.path.join(self.dir, topic, f"{int(partition)}.json")

    def mark(self, topic: str, partition: int, error: BaseException, now_ms: int, *, owner: str = "",
             first_dirty_offset: int | None = None, first_uncleanable_offset: int | None = None) -> UncleanableMark:
        """Record that cleaning ``topic-partition`` failed with ``error``; later runs skip it."""
        mark = UncleanableMark(
            topic=topic, partition=int(partition), marked_ms=now_ms, error_type=type(error).__name__,
            message=str(error)[:4000], first_dirty_offset=first_dirty_offset,
            first_uncleanable_offset=first_uncleanable_offset, owner=owner,
            traceback="".join(traceback.format_exception(error))[-8000:],
        )
        path = self._path(topic, partition)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(mark.as_dict(), f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return mark

    def get(self, topic: str, partition: int) -> UncleanableMark | None:
        try:
            with open(self._path(topic, partition), encoding="utf-8") as f:
                return UncleanableMark(**json.load(f))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):  # a damaged mark still marks the partition
            return UncleanableMark(topic, int(partition), 0, "Unknown", "the uncleanable mark is unreadable",
                                   None, None, "")

    def is_marked(self, topic: str, partition: int) -> bool:
        return os.path.exists(self._path(topic, partition))

    def marks(self) -> list[UncleanableMark]:
        """Every marked partition, ordered by topic and partition."""
        out = []
        if not os.path.isdir(self.dir):
            return out
        for topic in sorted(os.listdir(self.dir)):
            tdir = os.path.join(self.dir, topic)
            if not os.path.isdir(tdir):
                continue
            parts = sorted(int(n[:-5]) for n in os.listdir(tdir) if n.endswith(".json") and n[:-5].isdigit())
            for p in parts:
                mark = self.get(topic, p)
                if mark is not None:
                    out.append(mark)
        return out

    def partitions(self) -> set[tuple[str, int]]:
        return {(m.topic, m.partition) for m in self.marks()}

    def reset(self, topic: str | None = None, partition: int | None = None) -> list[UncleanableMark]:
        """Clear the marks of one partition, of a topic, or of the whole store; returns what was cleared."""
        if partition is not None and topic is None:
            raise ValueError("a partition needs its topic")
        cleared = [m for m in self.marks()
                   if (topic is None or m.topic == topic) and (partition is None or m.partition == partition)]
        for m in cleared:
            try:
                os.remove(self._path(m.topic, m.partition))
            except FileNotFoundError:
                pass
        return cleared
