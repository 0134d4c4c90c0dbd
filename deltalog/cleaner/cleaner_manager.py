"""Which partition to clean next (Kafka's LogCleanerManager: policy, not mechanism).

``grab_filthiest`` ranks every compacted partition of the store by cleanable ratio, keeps those that
are eligible (ratio above ``min.cleanable.dirty.ratio``, or ``max.compaction.lag.ms`` passed with
cleanable bytes) and returns the filthiest. Everything is planned from Delta snapshots: no data is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from deltalog.cleaner.log_to_clean import LogToClean

if TYPE_CHECKING:
    from deltalog.store import Store

PartitionId = tuple[str, int]


class CleanerManager:
    """Chooses partitions for cleaning from the store's current snapshots."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def logs_to_clean(self, now_ms: int, topics: Iterable[str] | None = None,
                      exclude: Iterable[PartitionId] = ()) -> list[LogToClean]:
        """Eligible partitions, filthiest first."""
        skip = set(exclude)
        names = list(topics) if topics is not None else self.store.list_topics()
        candidates = []
        for topic in names:
            for log in self.store.logs(topic):
                if (log.topic, log.partition) in skip:
                    continue
                snap = log.snapshot()
                if not snap.config.compact:
                    continue
                ltc = LogToClean.of(snap, now_ms)
                if ltc.eligible:
                    candidates.append(ltc)
        return sorted(candidates, reverse=True)

    def grab_filthiest(self, now_ms: int, topics: Iterable[str] | None = None,
                       exclude: Iterable[PartitionId] = ()) -> LogToClean | None:
        """The eligible partition with the highest cleanable ratio, or None when none is eligible."""
        ranked = self.logs_to_clean(now_ms, topics, exclude)
        return ranked[0] if ranked else None
