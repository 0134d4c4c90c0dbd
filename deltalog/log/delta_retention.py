"""Delta's retention table properties, kept in step with the topic's ``file.delete.delay.ms``.

Kafka's ``file.delete.delay.ms`` (how long a replaced segment file stays before it is unlinked, so that readers
in flight finish) and Delta's ``delta.deletedFileRetentionDuration`` (how long a file a commit removed stays
before VACUUM may delete it, so that readers of older snapshots and time travel keep working) are one setting
on a deltalog partition: every VACUUM that honours either name removes the same files at the same time.

* At create and at every alter, the topic config writes both: ``deltalog.topic.file.delete.delay.ms`` and
  ``delta.deletedFileRetentionDuration`` (``interval <ms> milliseconds``), on every partition table.
* Read back, ``delta.deletedFileRetentionDuration`` is the effective value: an engine that changed the table
  property (Databricks' ``ALTER TABLE ... SET TBLPROPERTIES``, delta-rs' ``alter.set_table_properties``) changed
  what its own VACUUM will do, so deltalog's VACUUM and ``describe`` follow it rather than keep a promise the
  other engine's VACUUM no longer keeps. A value deltalog cannot parse leaves deltalog's own.
* ``delta.logRetentionDuration`` (how long a Delta engine's log cleanup, run when it writes a checkpoint, keeps
  commit files) is set to the longer of Delta's default (30 days) and ``file.delete.delay.ms``: a version whose
  files are still kept must also keep the commits that describe it, or time travel to it fails for a missing
  log entry instead.

Delta's intervals are Spark's ``CalendarInterval`` strings: ``interval 7 days``, ``interval 1 hour 30 minutes``,
``168 hours``; months and years are refused by Delta for these properties, and by :func:`parse_interval_ms` too.
"""

from __future__ import annotations

import re

#: Delta's table property for how long a removed file stays before VACUUM may delete it.
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
#: Delta's table property for how long commit files stay before a checkpointing engine cleans them up.
LOG_RETENTION = "delta.logRetentionDuration"
#: Delta's defaults (``DeltaConfigs.TOMBSTONE_RETENTION`` and ``DeltaConfigs.LOG_RETENTION``).
DELTA_DEFAULT_DELETED_FILE_RETENTION_MS = 7 * 86_400_000
DELTA_DEFAULT_LOG_RETENTION_MS = 30 * 86_400_000

_UNIT_MS = {
    "nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1_000, "minute": 60_000,
    "hour": 3_600_000, "day": 86_400_000, "week": 7 * 86_400_000,
}
_PART = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+?)s?\b")


def interval(ms: int) -> str:
    """``ms`` as a Delta interval string."""
    return f"interval {int(ms)} milliseconds"


def parse_interval_ms(text: str | None) -> int | None:
    """A Delta interval string in whole milliseconds, or None when it is not one deltalog reads."""
    if text is None:
        return None
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval"):].strip()
    if not s:
        return None
    total = 0.0
    pos = 0
    for m in _PART.finditer(s):
        if s[pos:m.start()].strip():
            return None
        unit = m.group(2)
        if unit not in _UNIT_MS:
            return None
        total += float(m.group(1)) * _UNIT_MS[unit]
        pos = m.end()
    if pos == 0 or s[pos:].strip() or total < 0:
        return None
    return int(total)


def table_properties(file_delete_delay_ms: int) -> dict[str, str]:
    """The Delta retention properties a topic with this ``file.delete.delay.ms`` sets on its partition tables."""
    return {
        DELETED_FILE_RETENTION: interval(file_delete_delay_ms),
        LOG_RETENTION: interval(max(DELTA_DEFAULT_LOG_RETENTION_MS, file_delete_delay_ms)),
    }


def effective_file_delete_delay_ms(props: dict[str, str], topic_value: int) -> int:
    """The file delete delay a partition table promises: Delta's ``delta.deletedFileRetentionDuration`` when set
    and readable (what every Delta engine's VACUUM honours), else the topic's own ``file.delete.delay.ms``."""
    delta_ms = parse_interval_ms(props.get(DELETED_FILE_RETENTION))
    return topic_value if delta_ms is None else delta_ms
