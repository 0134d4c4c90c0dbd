"""Plain-text views for humans: aligned tables, byte sizes, and the state of a topic's partitions.

The CLI (``deltalog topics describe``) and the demo print the same view of a partition, so it lives
here, beside the data it renders (:class:`~deltalog.describe.TopicDescription`), not in either of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from deltalog.config import TopicConfig
from deltalog.describe import PartitionState, TopicDescription


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "") -> str:
    """An aligned text table; numbers are right-aligned, everything else left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                  for r in rows if r[i] is not None) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def format_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``; exact below 1 KiB."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def format_timestamp(ms: int | None) -> str:
    """Epoch milliseconds as UTC ISO-8601 to the second, ``-`` for none."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def config_lines(config: TopicConfig) -> str:
    """Every topic config, with ``(default)`` beside the ones nobody set."""
    rows = []
    for key in TopicConfig.KEYS:
        value = getattr(config, key.attr)
        rows.append((key.name, key.render(value), "default" if value == key.default else "set"))
    return format_table(("config", "value", "source"), rows, indent="  ")


def partition_lines(state: PartitionState) -> str:
    """Offsets, cleaning figures and the segment table of one partition."""
    head = [
        f"{state.topic}-{state.partition} (Delta version {state.version})",
        f"  log start offset {state.log_start_offset}, log end offset {state.log_end_offset}, "
        f"{state.num_records} records in {format_bytes(state.size_bytes)}",
        f"  clean [{state.log_start_offset}, {state.first_dirty_offset}), "
        f"cleanable [{state.first_dirty_offset}, {state.first_uncleanable_offset}), "
        f"active segment from {state.active_segment_base_offset}",
        f"  clean {format_bytes(state.clean_bytes)}, dirty {format_bytes(state.dirty_bytes)}, "
        f"dirty ratio {state.dirty_ratio:.2f}, eligible for cleaning: {'yes' if state.eligible_for_cleaning else 'no'}",
    ]
    rows = [
        (s.base_offset, s.end_offset, s.num_records, len(s.files), s.size_bytes, s.tombstones,
         format_timestamp(s.largest_timestamp_ms), "active" if s.is_active else "closed")
        for s in state.segments
    ]
    table = format_table(
        ("segment", "end", "records", "files", "bytes", "tombstones", "newest record (UTC)", "state"), rows,
        indent="  ",
    )
    return "\n".join(head) + "\n" + table


def describe_lines(description: TopicDescription, *, with_config: bool = True) -> str:
    """The whole ``describe`` view: configs, then each partition."""
    parts = [f"Topic {description.topic}: {len(description)} partition(s), "
             f"cleanup.policy={','.join(description.config.cleanup_policy)}"]
    if with_config:
        parts.append(config_lines(description.config))
    parts.extend(partition_lines(p) for p in description)
    return "\n\n".join(parts)
