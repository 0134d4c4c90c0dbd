"""What ``store.describe(topic)`` returns: the state of each partition, as data.

Every figure a user may act on (offsets, segment sizes, clean and cleanable bytes, dirty ratio) is an
attribute here and a key of :meth:`PartitionState.as_dict`, not only a line of text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from deltalog.cleaner.log_to_clean import LogToClean
from deltalog.config import TopicConfig
from deltalog.log.duplicates import DuplicatedOffsets
from deltalog.log.partition_log import LogSnapshot
from deltalog.log.segment import Segment
from deltalog.log.transactions import TxnIndex
from deltalog.state.lag import StateLag


@dataclass(frozen=True)
class PartitionState:
    """One partition at one Delta version. Also readable as a mapping: ``state["dirty_ratio"]``."""

    topic: str
    partition: int
    version: int
    log_start_offset: int
    log_end_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    active_segment_base_offset: int
    segments: tuple[Segment, ...]
    size_bytes: int
    num_records: int
    clean_bytes: int
    dirty_bytes: int
    dirty_ratio: float
    eligible_for_cleaning: bool
    max_compaction_delay_ms: int
    #: Why the partition is in the cleaner's uncleanable set (None: it is not); it is then never eligible.
    uncleanable_reason: str | None = None
    #: The first offset of the earliest ongoing transaction, else the log end offset (Kafka's LSO): where
    #: read_committed readers stop, and a bound of the cleaner's dirty section.
    last_stable_offset: int | None = None
    #: Producer id -> first offset of each transaction ongoing in the partition.
    ongoing_transactions: Mapping[int, int] = field(default_factory=dict)
    #: Offsets this version holds more than once (:mod:`deltalog.log.duplicates`): 0 in a sound partition. Such a
    #: partition is eligible for cleaning whatever its dirty ratio: the next clean keeps one copy of each.
    duplicated_offsets: int = 0
    #: What :attr:`duplicated_offsets` counts, in words (the version, the first offsets, what repairs it).
    duplicates: str | None = None

    @property
    def uncleanable(self) -> bool:
        return self.uncleanable_reason is not None

    @classmethod
    def of(cls, snap: LogSnapshot, now_ms: int, *, uncleanable_reason: str | None = None,
           txns: TxnIndex | None = None, duplicated: DuplicatedOffsets | None = None) -> PartitionState:
        ltc = LogToClean.of(snap, now_ms, last_stable_offset=None if txns is None else txns.last_stable_offset)
        return cls(
            topic=snap.topic,
            partition=snap.partition,
            version=snap.version,
            log_start_offset=snap.log_start_offset,
            log_end_offset=snap.log_end_offset,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset,
            active_segment_base_offset=snap.active_segment_base,
            segments=snap.segments,
            size_bytes=snap.size_bytes,
            num_records=snap.num_records,
            clean_bytes=ltc.clean_bytes,
            dirty_bytes=ltc.cleanable_bytes,
            dirty_ratio=ltc.cleanable_ratio,
            eligible_for_cleaning=(ltc.eligible or duplicated is not None) and uncleanable_reason is None,
            max_compaction_delay_ms=ltc.max_compaction_delay_ms,
            uncleanable_reason=uncleanable_reason,
            last_stable_offset=snap.log_end_offset if txns is None else txns.last_stable_offset,
            ongoing_transactions=dict(txns.ongoing) if txns is not None else {},
            duplicated_offsets=0 if duplicated is None else duplicated.count,
            duplicates=None if duplicated is None else duplicated.message(),
        )

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "segments"}
        d["uncleanable"] = self.uncleanable
        d["segments"] = [s.as_dict() for s in self.segments]
        return d

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]


@dataclass(frozen=True)
class TopicDescription:
    """A topic's config and the state of each of its partitions; ``description[p]`` is partition ``p``."""

    topic: str
    config: TopicConfig
    partitions: tuple[PartitionState, ...]
    #: The lag of the topic's state table (docs/state-table.md), None for a topic without one.
    state_table: StateLag | None = None

    def __getitem__(self, partition: int) -> PartitionState:
        return self.partitions[partition]

    def __iter__(self) -> Iterator[PartitionState]:
        return iter(self.partitions)

    def __len__(self) -> int:
        return len(self.partitions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "config": self.config.to_properties(),
            "partitions": [p.as_dict() for p in self.partitions],
            "state_table": None if self.state_table is None else self.state_table.as_dict(),
        }
