"""Plain text for humans: aligned tables, byte sizes and times, shared by every command that prints.

Kept hand-written: each is a few lines with deltalog's own conventions (``-`` for none, ``yes``/``no``, numbers
right-aligned, IEC units exact below 1 KiB), which a table library (tabulate) or a units library (humanize) would
need as much configuration to reproduce as the code they would replace, for a dependency in every command's import.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "", sep: str = "  ",
                 rule: bool = True) -> str:
    """An aligned text table; numbers are right-aligned, everything else left-aligned. ``sep`` goes between
    columns; ``rule`` draws a line of dashes under the headers (with ``+`` where ``sep`` has ``|``)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                  for r in rows if r[i] is not None) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return (indent + sep.join(parts)).rstrip()

    out = [line(list(headers))]
    if rule:
        out.append((indent + sep.replace(" ", "-").replace("|", "+").join("-" * w for w in widths)).rstrip())
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
