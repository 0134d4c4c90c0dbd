"""The SQL names of a topic's views, shared by every engine (Spark's temp views, the embedded engine, the view DDL).

Kept apart from :mod:`deltalog.sql.views` so that the paths that never start Spark (``deltalog sql`` on the
embedded engine, ``deltalog views``) name views the same way without importing pyspark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CURRENT_SUFFIX = "_current"
#: The name of a topic's state table (a Delta table, docs/state-table.md) in SQL: ``<view name>_state``.
STATE_SUFFIX = "_state"
#: The SQL name of the cleaner's metrics table (``<store>/_deltalog/metrics``, a Delta table a row per partition per
#: job cycle: :mod:`deltalog.cleaner.metrics`) in ``deltalog views``.
METRICS_VIEW = "deltalog_metrics"
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_WORD = re.compile(r"[A-Za-z0-9_]+")


def view_name(topic: str) -> str:
    """The SQL name of a topic's full-log view (its current-state view adds ``_current``)."""
    return _UNSAFE.sub("_", topic)


def view_names(topics: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    """Lower-cased view name -> the (topic, kind) pairs that claim it (more than one: ambiguous)."""
    names: dict[str, list[tuple[str, str]]] = {}
    for t in topics:
        base = view_name(t)
        names.setdefault(base.lower(), []).append((t, "log"))
        names.setdefault((base + CURRENT_SUFFIX).lower(), []).append((t, "current"))
        names.setdefault((base + STATE_SUFFIX).lower(), []).append((t, "state"))
    return names


def ambiguity(name: str, claims: list[tuple[str, str]]) -> str:
    """What an ambiguous view name stands for, for the error that refuses a query using it."""
    return (f"view name {name!r} is ambiguous: it stands for "
            + ", ".join(f"the {_KINDS.get(k, k)} of topic {t!r}" for t, k in claims))


_KINDS = {"current": "current state", "log": "log", "state": "state table"}


def topics_in_query(query: str, topics: Iterable[str]) -> tuple[list[str], list[tuple[str, list[tuple[str, str]]]]]:
    """The topics whose view names appear as words of ``query`` (case-insensitive), and the ambiguous names used."""
    words = {w.lower() for w in _WORD.findall(query)}
    names = view_names(topics)
    used = sorted({topic for name, claims in names.items() if name in words for topic, _ in claims})
    ambiguous = [(name, claims) for name, claims in names.items() if name in words and len(claims) > 1]
    return used, ambiguous
