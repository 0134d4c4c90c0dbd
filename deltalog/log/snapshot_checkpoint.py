"""What a cleaner cycle learnt of each partition, kept across processes: the log-snapshot checkpoint.

A Kafka broker does not rescan its logs when it restarts: ``LogManager`` keeps ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``cleaner-offset-checkpoint`` files (``OffsetCheckpointFile``: one line per
partition, written whole and renamed into place) and trusts them for every partition whose log they still describe.
A scheduled deltalog cleaner starts as a fresh process each cycle, and its first read of every partition's Delta log
(delta-rs opening the table, the check for other engines' commits, the log positions, the add actions) was most of
an idle cycle. This is the same parallel: at the end of a cycle each topic's partitions' snapshots (the log
positions, the data files' add-action figures, so the dirty ratio, the segments and retention's due times, and
when VACUUM is next due for files replaced but inside ``file.delete.delay.ms``) are written as one object per
topic, keyed by each partition's Delta version; the next process's cycle seeds its partitions from it
(:meth:`PartitionLog.seed`).

It is never trusted over the Delta log. An entry holds only while ``_delta_log/<version + 1>.json`` does not exist:
every Delta commit, deltalog's or another engine's (an OPTIMIZE, a VACUUM, a DELETE), writes that file, so one
existence check a partition tells an entry still true from one the log has moved past, and a moved partition is
read from its Delta log as before (its other engines' commits checked as before). An entry is written only for a
snapshot checked free of other engines' standing commits at its very version and laid out by deltalog alone. The
object names the topic's id, so a topic deleted and created again under its name does not take the old one's
entries. A missing, unreadable or foreign object (another format) just means a full read; writing one is best
effort (a cycle never fails for it), whole and atomic like every JSON document of the store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from deltalog.log import vacuum
from deltalog.log.data_file import DataFile
from deltalog.log.log_manager import STATE_DIR, LogManager
from deltalog.log.partition_log import (
    LogSnapshot,
    PartitionLog,
    config_from_table_properties,
    config_to_table_properties,
)
from deltalog.log.segment import build_segments
from deltalog.log.walk import each_partition

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "log-snapshot-checkpoint"
FORMAT = 1
#: A data file's fields, in the order an entry lists them (one list per file: a compact object).
FILE_FIELDS = tuple(f.name for f in fields(DataFile))
#: A partition of more data files than this gets no entry: the checkpoint is rewritten whole whenever one of its
#: topic's partitions moves, so it stays small (about 250 bytes a file); a partition that large is read from its
#: Delta log, a cost small beside its passes. The many small partitions of a fleet are what it is for.
MAX_FILES = 200

#: (store root, topic) -> the entries last read or written, so an unchanged topic is not written again.
_last: dict[tuple[str, str], dict[str, Any]] = {}
_lock = threading.Lock()


def location(logs: LogManager, topic: str) -> str:
    return logs.storage.location(STATE_DIR, CHECKPOINT_DIR, f"{topic}.json")


def encode(snap: LogSnapshot, vacuum_until_ms: int | None) -> dict[str, Any] | None:
    """One partition's entry (None when its config would not read back the same from the properties kept)."""
    props = config_to_table_properties(snap.config)
    if config_from_table_properties(props) != snap.config:
        return None
    return {"version": snap.version, "config": props, "topic_id": snap.topic_id,
            "log_start_offset": snap.log_start_offset, "log_end_offset": snap.log_end_offset,
            "active_segment_base": snap.active_segment_base, "active_segment_opened_ms": snap.active_segment_opened_ms,
            "cleaner_checkpoint": snap.cleaner_checkpoint,
            "files": [[getattr(f, n) for n in FILE_FIELDS] for f in snap.files],
            "vacuum_until_ms": vacuum_until_ms}


def decode(topic: str, partition: int, entry: Mapping[str, Any]) -> LogSnapshot:
    """The snapshot an entry holds (raises KeyError, TypeError or ValueError on an entry this does not read)."""
    files = tuple(DataFile(**dict(zip(FILE_FIELDS, row, strict=True))) for row in entry["files"])
    leo, active = int(entry["log_end_offset"]), int(entry["active_segment_base"])
    return LogSnapshot(
        topic=topic, partition=partition, version=int(entry["version"]),
        config=config_from_table_properties(dict(entry["config"])), topic_id=entry["topic_id"],
        log_start_offset=int(entry["log_start_offset"]), log_end_offset=leo, active_segment_base=active,
        active_segment_opened_ms=entry["active_segment_opened_ms"], cleaner_checkpoint=entry["cleaner_checkpoint"],
        files=files, segments=build_segments(files, active, leo))


def _by_topic(logs: Iterable[PartitionLog]) -> dict[str, list[PartitionLog]]:
    out: dict[str, list[PartitionLog]] = {}
    for plog in logs:
        out.setdefault(plog.topic, []).append(plog)
    return out


def load(logs: LogManager) -> int:
    """Seed the partitions this process has not read yet from their topics' checkpoints (one read of each such
    topic's object and of its marker, :attr:`LogManager.walk_threads` topics at a time); how many were seeded.
    Never raises for a checkpoint it cannot use."""
    todo = [(topic, fresh) for topic, plogs in _by_topic(logs.logs()).items()
            if (fresh := [p for p in plogs if p.unread])]
    walked = each_partition(todo, lambda item: _load_topic(logs, *item), logs.walk_threads)
    for w in walked:
        if w.error is not None:
            log.warning("the log-snapshot checkpoint of topic %s was not used (%s); its partitions are read from "
                        "their Delta logs", w.item[0], w.error)
    return sum(w.result or 0 for w in walked)


def _load_topic(logs: LogManager, topic: str, fresh: list[PartitionLog]) -> int:
    doc = logs.storage.read_json(location(logs, topic))
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT or doc.get("topic") != topic:
        return 0
    topic_id = logs.topic_id(topic)
    if topic_id is None or doc.get("topic_id") != topic_id:
        return 0  # another incarnation of the topic, or one without an id: read the logs
    entries = doc["partitions"]
    seeded = 0
    for plog in fresh:
        entry = entries.get(str(plog.partition))
        if entry is None:
            continue
        snap = decode(topic, plog.partition, entry)
        if snap.topic_id != topic_id or not plog.seed(snap):
            continue
        seeded += 1
        if entry.get("vacuum_until_ms") is not None:
            vacuum.keep_quiet(plog.uri, snap.topic_id, snap.version, int(entry["vacuum_until_ms"]))
    with _lock:
        _last[(logs.root, topic)] = dict(entries)
    return seeded


def save(logs: LogManager) -> int:
    """Write each topic's checkpoint from the snapshots this process holds (an unchanged topic is not written,
    :attr:`LogManager.walk_threads` topics at a time); how many topics were written. Never raises: a cycle's work
    does not depend on it."""
    walked = each_partition(list(_by_topic(logs.logs()).items()), lambda item: _save_topic(logs, *item),
                            logs.walk_threads)
    for w in walked:
        if w.error is not None:
            log.warning("the log-snapshot checkpoint of topic %s was not written: %s", w.item[0], w.error)
    return sum(1 for w in walked if w.result)


def _save_topic(logs: LogManager, topic: str, plogs: list[PartitionLog]) -> bool:
    entries: dict[str, Any] = {}
    topic_id = None
    for plog in plogs:
        snap = plog.checkpointable()
        if snap is None or snap.topic_id is None or len(snap.files) > MAX_FILES:
            continue
        topic_id = topic_id or snap.topic_id
        if snap.topic_id != topic_id:
            continue
        entry = encode(snap, vacuum.quiet_until(plog.uri, snap.topic_id, snap.version))
        if entry is not None:
            entries[str(plog.partition)] = entry
    with _lock:
        if not entries or _last.get((logs.root, topic)) == entries:
            return False
    logs.storage.write_json(location(logs, topic), {"format": FORMAT, "topic": topic, "topic_id": topic_id,
                                                   "partitions": entries}, indent=None)
    with _lock:
        _last[(logs.root, topic)] = entries
    return True
