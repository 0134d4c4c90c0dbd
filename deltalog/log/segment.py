"""Segments: the data files of one partition that share a segment base offset.

Kafka names a segment file by its base offset; deltalog stores the base offset in every row's
``segment`` column and in each file's stats, so the segment list is derived from the Delta add actions
alone. A segment spans ``[base_offset, next segment's base_offset)``; the active segment spans
``[base_offset, log end)`` and may be empty right after a roll.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deltalog.log.delta import DataFile


@dataclass(frozen=True)
class Segment:
    """One segment: its base offset, its files, and figures summed from their stats."""

    base_offset: int
    end_offset: int  # exclusive: the next segment's base offset, or the log end for the active segment
    files: tuple[DataFile, ...]
    is_active: bool

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def num_records(self) -> int:
        return sum(f.num_records for f in self.files)

    @property
    def tombstones(self) -> int:
        return sum(f.tombstones for f in self.files)

    @property
    def largest_timestamp_ms(self) -> int | None:
        """Kafka's ``largestTimestamp``: the newest record timestamp in the segment (None when empty)."""
        stamps = [f.max_timestamp_ms for f in self.files if f.max_timestamp_ms is not None]
        return max(stamps) if stamps else None

    @property
    def first_offset(self) -> int | None:
        return min((f.min_offset for f in self.files), default=None)

    @property
    def last_offset(self) -> int | None:
        return max((f.max_offset for f in self.files), default=None)

    def as_dict(self) -> dict[str, object]:
        return {
            "base_offset": self.base_offset,
            "end_offset": self.end_offset,
            "size_bytes": self.size_bytes,
            "num_records": self.num_records,
            "num_files": len(self.files),
            "tombstones": self.tombstones,
            "largest_timestamp_ms": self.largest_timestamp_ms,
            "active": self.is_active,
        }


def build_segments(files: Sequence[DataFile], active_base: int, log_end_offset: int) -> tuple[Segment, ...]:
    """Group files by segment base offset, oldest first; the active segment is always last (maybe empty).

    ``files`` are the snapshot's per-segment parts: a file in deltalog's layout is one part; a file another
    engine's OPTIMIZE merged is one part per segment its rows hold (:mod:`deltalog.log.layout`), so a segment's
    figures never count another segment's rows."""
    by_base: dict[int, list[DataFile]] = {}
    for f in files:
        by_base.setdefault(f.segment, []).append(f)
    by_base.setdefault(active_base, [])
    bases = sorted(by_base)
    segments = []
    for i, base in enumerate(bases):
        end = bases[i + 1] if i + 1 < len(bases) else log_end_offset
        group = tuple(sorted(by_base[base], key=lambda f: f.min_offset))
        segments.append(Segment(base, end, group, is_active=(base == active_base)))
    return tuple(segments)
