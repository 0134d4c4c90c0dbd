"""VACUUM: physical removal of the files a partition no longer uses, after ``file.delete.delay.ms``.

Kafka renames a replaced segment to ``.deleted`` and unlinks it ``file.delete.delay.ms`` later so that
in-flight reads can finish (``UnifiedLog.deleteSegmentFiles``, ``LogSegment.deleteIfExists`` after the
``.deleted`` rename). In deltalog the rename is the
Delta commit that removes the file (cleaning, retention, DeleteRecords); this module is the unlink. A file
is deleted only when

* the current version of the table does not reference it, and
* ``file.delete.delay.ms`` has passed, measured with the store's clock, since it was removed: the
  ``deletionTimestamp`` of its remove action in the Delta log, or, for a file no commit ever added (the
  output of a pass that failed or lost a race, or of an append that lost the race for the log end), its
  modification time. Such an orphan is given at least :data:`ORPHAN_MIN_AGE_MS`, because it may also be
  the file of a commit still in flight: one whose answer the store lost is retried by the object store's
  client for minutes, and may land long after its file was written.

Until then a reader holding an older snapshot, and Delta time travel to an older version, keep working.

The delay is one setting with Delta's: the topic's ``file.delete.delay.ms`` is also written as the table
property ``delta.deletedFileRetentionDuration`` (7 days by default, Delta's own default), and a value another
engine set there is read back as the effective delay (:mod:`deltalog.log.delta_retention`). So this VACUUM,
delta-rs's ``DeltaTable.vacuum()`` and Databricks' ``VACUUM`` with their defaults remove the same removed
files at the same time, and none removes one a reader of a version inside the delay still needs.

Why not delta-rs's ``DeltaTable.vacuum`` itself: it takes whole hours (``retention_hours: int``), reads the wall
clock rather than the store's, and refuses less than the table's ``delta.deletedFileRetentionDuration`` unless
``enforce_retention_duration=False``; with ``full=True`` it also lists orphans but judges them by modification
time against that same whole-hour retention, where a pass's output in flight needs its own minimum (below). So
the listing is done here from the Delta log (checkpoint + later JSON commits); like delta-rs, ``dry_run`` is the
default and only lists what would go. The table's files and its Delta log are listed and read through the
store's :class:`~deltalog.storage.Storage`, so VACUUM works on an object store too (an object's
last-modified time is its modification time).

Callers that run beside a cleaner hold the partition's lease (:mod:`deltalog.log.lease`): the files of a pass
in flight are orphans until its commit.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from deltalog.errors import CorruptLogError, ForeignCommitError
from deltalog.log import delta
from deltalog.log.log_manager import NO_COMMIT_PURPOSE, LogManager
from deltalog.log.partition_log import LogSnapshot, PartitionLog, snapshot_of
from deltalog.storage import TMP_SUFFIX, FileInfo, Storage, basename, join

log = logging.getLogger(__name__)

DELTA_LOG_DIR = "_delta_log"
#: A file no commit references is never removed younger than this: it may belong to a commit in flight. An hour
#: is far beyond the longest a commit can take: object_store retries a request for up to 3 minutes (its
#: ``retry_timeout``), a commit that loses races is planned again a bounded number of times, and a commit whose
#: outcome is unknown is resolved by reading the log before anything retries it (see ``delta.commit``).
ORPHAN_MIN_AGE_MS = 3_600_000
#: Where ``df.write.format("deltalog")`` tasks stage records until the write's commit appends them and removes
#: the staged files (``deltalog.sql.kafka.writes.STAGING_DIR``; a test checks they agree). A write whose job
#: failed without running its abort, or whose driver died, leaves them behind.
SINK_STAGING_DIR = "_deltalog/sink"
#: A staged file is removed once it is this old: no write job of deltalog's runs for a day between staging its
#: records and committing them (Delta's own VACUUM waits a week for files of unknown use; these have one use).
STAGED_MAX_AGE_MS = 24 * 3_600_000
#: The ``partition`` of the :class:`VacuumResult` for the store's staging directory (``topic`` is its path).
STORE_LEVEL = -1


@dataclass(frozen=True)
class VacuumResult:
    """One partition's VACUUM: the files removed (or, on a dry run, that would be), and what must wait."""

    topic: str
    partition: int
    version: int
    dry_run: bool
    files: tuple[str, ...]  # paths relative to the table
    bytes: int
    files_waiting: int  # unreferenced files still inside their delay
    now_ms: int
    #: When the first of the waiting files is due (None: none waits).
    next_due_ms: int | None = None

    @property
    def files_deleted(self) -> int:
        return 0 if self.dry_run else len(self.files)


def removal_times(storage: Storage, table_uri: str) -> dict[str, int]:
    """``path -> deletionTimestamp`` of every remove action still in the Delta log.

    Reads the last checkpoint (which keeps tombstones younger than ``delta.deletedFileRetentionDuration``)
    and every JSON commit after it, so the cost is bounded by the checkpoint interval, not the history.
    """
    log_dir = join(table_uri, DELTA_LOG_DIR)
    checkpoint = -1
    last = storage.read_json(join(log_dir, "_last_checkpoint"))
    try:
        checkpoint = int(last["version"]) if last is not None else -1
    except (KeyError, TypeError, ValueError):
        pass
    names = sorted(basename(f.location) for f in storage.list_files(log_dir))
    out: dict[str, int] = {}
    if checkpoint >= 0:
        prefix = f"{checkpoint:020d}.checkpoint"
        for name in names:
            if not (name.startswith(prefix) and name.endswith(".parquet")):
                continue
            removes = storage.parquet_file(join(log_dir, name)).read(columns=["remove"]).column("remove").to_pylist()
            for r in removes:
                if r and r.get("path"):
                    out[unquote(r["path"])] = int(r.get("deletionTimestamp") or 0)
    for name in names:
        if not (name.endswith(".json") and name[:20].isdigit() and int(name[:20]) > checkpoint):
            continue
        for line in storage.read_bytes(join(log_dir, name)).decode("utf-8").splitlines():
            if '"remove"' not in line:
                continue
            r = json.loads(line).get("remove")
            if r and r.get("path"):
                out[unquote(r["path"])] = int(r.get("deletionTimestamp") or 0)
    return out


def _files_on_disk(storage: Storage, table_uri: str) -> dict[str, tuple[int, int]]:
    """``relative path -> (size, mtime ms)`` of every file of the table outside ``_delta_log``."""
    base = storage.key(table_uri)
    out: dict[str, tuple[int, int]] = {}
    for f in storage.list_files(table_uri):
        rel = storage.key(f.location)[len(base):].lstrip("/")
        if rel.split("/", 1)[0] == DELTA_LOG_DIR:
            continue
        out[rel] = (f.size, f.modified_ms)
    return out


def vacuum(log_: PartitionLog, now_ms: int, *, dry_run: bool = True, delay_ms: int | None = None) -> VacuumResult:
    """Remove (or, with ``dry_run``, list) the partition's files that are unreferenced and past their delay.

    ``delay_ms`` defaults to the topic's ``file.delete.delay.ms``.
    """
    uri, storage = log_.uri, log_.storage
    on_disk = _files_on_disk(storage, uri)  # list before the snapshot: a file committed meanwhile is referenced
    snap = _latest_snapshot(log_)
    version = snap.version
    delay = snap.config.file_delete_delay_ms if delay_ms is None else delay_ms
    referenced = {unquote(f.path) for f in snap.files}
    removed_at = removal_times(storage, uri)
    doomed: list[str] = []
    size = 0
    waiting = 0
    next_due: int | None = None
    for path, (nbytes, mtime_ms) in sorted(on_disk.items()):
        if path in referenced:
            continue
        if path in removed_at:
            due = removed_at[path] + delay
        else:
            due = orphan_written_ms(path, mtime_ms) + max(delay, ORPHAN_MIN_AGE_MS)
        if now_ms >= due:
            doomed.append(path)
            size += nbytes
        else:
            waiting += 1
            next_due = due if next_due is None else min(next_due, due)
    if not dry_run:
        storage.delete_many([join(uri, path) for path in doomed])
        storage.prune_empty_dirs(uri, keep=(DELTA_LOG_DIR,))
        if doomed:
            log.info("VACUUM removed %d file(s), %d bytes, of %s-%d", len(doomed), size, log_.topic, log_.partition)
    return VacuumResult(log_.topic, log_.partition, version, dry_run, tuple(doomed), size, waiting, now_ms, next_due)


def _latest_snapshot(log_: PartitionLog) -> LogSnapshot:
    """The partition's latest snapshot: the process's own (brought up to date, one look for a next commit when the
    log did not move) unless another engine's commit stands in the log, which the partition's reads refuse but
    VACUUM need not (it removes only what no version references), or a data file the snapshot's figures could not
    be read from: then a handle of its own, paths only (as VACUUM always read it)."""
    try:
        return log_.snapshot()
    except (ForeignCommitError, CorruptLogError):
        dt = delta.open_table(log_.storage, log_.uri)
        return snapshot_of(dt, log_.topic, log_.partition)  # paths only: no figures read


def orphan_written_ms(path: str, mtime_ms: int) -> int:
    """When an unreferenced file was written, on the store's clock where the file says so.

    A cleaning pass writes into ``cleaned-<clock ms>-<pass id>/`` (see :mod:`deltalog.cleaner.cleaner`), so the
    output of a pass that died is aged on the same clock as everything else; other files fall back to
    their modification time.
    """
    top = path.split("/", 1)[0]
    if top.startswith(delta.CLEANED_DIR_PREFIX):
        stamp = top[len(delta.CLEANED_DIR_PREFIX):].split("-", 1)[0]
        if stamp.isdigit():
            return int(stamp)
    return mtime_ms


def vacuum_staged(storage: Storage, now_ms: int, *, dry_run: bool = True,
                  max_age_ms: int = STAGED_MAX_AGE_MS) -> VacuumResult:
    """Remove (or list) the staged files of ``format("deltalog")`` writes that never committed: those older than
    ``max_age_ms`` by their modification time. Reported as a :class:`VacuumResult` whose ``topic`` is the
    staging directory and whose ``partition`` is :data:`STORE_LEVEL`."""
    location = storage.location(SINK_STAGING_DIR)
    doomed, size, waiting = _aged_out(storage.list_files(location), now_ms, max_age_ms)
    if doomed and not dry_run:
        storage.delete_many(doomed)
        log.info("VACUUM removed %d staged file(s) of unfinished format(\"deltalog\") writes, %d bytes",
                 len(doomed), size)
    base = storage.key(location)
    files = tuple(sorted(storage.key(d)[len(base):].lstrip("/") for d in doomed))
    return VacuumResult(SINK_STAGING_DIR, STORE_LEVEL, -1, dry_run, files, size, waiting, now_ms)


def _aged_out(files: Iterable[FileInfo], now_ms: int, max_age_ms: int) -> tuple[list[str], int, int]:
    """The locations of ``files`` at least ``max_age_ms`` old by their modification time, their bytes, and how
    many are younger (they wait)."""
    doomed, size, waiting = [], 0, 0
    for f in files:
        if now_ms >= f.modified_ms + max_age_ms:
            doomed.append(f.location)
            size += f.size
        else:
            waiting += 1
    return doomed, size, waiting


#: The ``topic`` of the :class:`VacuumResult` of :func:`vacuum_temp_files`.
TEMP_FILES = "*" + TMP_SUFFIX
#: A temporary file of a local write is removed once it is this old: a write renames its temporary file into
#: place within moments, so one a day old belongs to a process that was killed between the two.
TEMP_MAX_AGE_MS = 24 * 3_600_000


def vacuum_temp_files(storage: Storage, now_ms: int, *, dry_run: bool = True,
                      max_age_ms: int = TEMP_MAX_AGE_MS) -> VacuumResult:
    """Remove (or list) the temporary files (``*.deltalog-tmp``) that local writes of state files left anywhere in
    the store when killed before their rename, once older than ``max_age_ms`` by their modification time: on a
    disk that filled up, they hold space the operator freed. A write that fails removes its own; an object store
    has none. Reported as a :class:`VacuumResult` whose ``topic`` is :data:`TEMP_FILES` and whose ``partition``
    is :data:`STORE_LEVEL`."""
    doomed, size, waiting = _aged_out(storage.list_temp_files(storage.root), now_ms, max_age_ms)
    if doomed and not dry_run:
        storage.delete_many(doomed)
        log.info("VACUUM removed %d temporary file(s) of killed writes, %d bytes", len(doomed), size)
    files = tuple(sorted(storage.key(d) for d in doomed))
    return VacuumResult(TEMP_FILES, STORE_LEVEL, -1, dry_run, files, size, waiting, now_ms)


def has_unreferenced_files(log_: PartitionLog, snapshot: Callable[[PartitionLog], LogSnapshot] | None = None) -> bool:
    """Whether the partition's directory holds a data file its latest snapshot does not reference: the only case
    in which :func:`vacuum` has anything to do. One listing of the table's files (listed before the snapshot is
    refreshed, as :func:`vacuum` does) and the partition's cached snapshot, brought up to date from the commits
    since this process last read it (``snapshot``, when given: the cycle's, :meth:`LogManager.snapshot`; one taken
    before the listing may say yes too often, and :func:`vacuum` plans again under the lease, or leave a file another
    process removed since to the next cycle); a partition
    another engine changed is always looked at."""
    on_disk = _files_on_disk(log_.storage, log_.uri)
    if not on_disk:
        return False
    try:
        referenced = {unquote(f.path) for f in (snapshot or PartitionLog.snapshot)(log_).files}
    except ForeignCommitError:
        return True
    return any(path not in referenced for path in on_disk)


def vacuum_store(logs: LogManager, topic: str | None = None, *, dry_run: bool = True,
                 keep_going: bool = False, only_due: bool = False,
                 progress: Callable[[int, int, str], None] | None = None) -> list[VacuumResult]:
    """VACUUM every partition (of ``topic``, or of the store), each under its lease; busy ones are skipped.
    (The store's staging directory is swept by :func:`vacuum_staged`.) With ``only_due`` (the cleaner's cycle)
    a partition without an unreferenced file (:func:`has_unreferenced_files`) is neither leased nor reported, and a
    partition is not even listed while this process knows nothing of it can be due (:func:`_quiet`).
    ``progress``: told ``(done, total, partition)`` as each partition starts (``deltalog cleaner vacuum``'s bar)."""
    if not only_due:
        return logs.each_leased(topic, NO_COMMIT_PURPOSE, lambda log_: vacuum(log_, logs.clock.now_ms(),
                                                                              dry_run=dry_run), keep_going=keep_going,
                                progress=progress)

    def needed(log_: PartitionLog) -> bool:
        try:
            snap = logs.snapshot(log_)
        except ForeignCommitError:
            return True
        now = logs.clock.now_ms()
        if _quiet(log_.uri, snap.topic_id, snap.version, now):
            return False
        if has_unreferenced_files(log_, lambda _: snap):
            return True
        _keep_quiet(log_.uri, snap.topic_id, snap.version, now + ORPHAN_MIN_AGE_MS)
        return False

    def step(log_: PartitionLog) -> VacuumResult:
        now = logs.clock.now_ms()
        result = vacuum(log_, now, dry_run=dry_run)
        if not dry_run:
            until = now + ORPHAN_MIN_AGE_MS
            _keep_quiet(log_.uri, logs.snapshot(log_).topic_id, result.version,
                        until if result.next_due_ms is None else min(until, result.next_due_ms))
        return result

    return logs.each_leased(topic, NO_COMMIT_PURPOSE, step, keep_going=keep_going, needed=needed, progress=progress)


#: ``(table uri, topic id) -> (version, until ms)``: this process found nothing VACUUM could remove in the table at
#: that version before that time (the store's clock). A file no version references gets there in one of two ways:
#: a commit removes it (a new version: looked at again) or a write no commit took up (an orphan: due no sooner than
#: :data:`ORPHAN_MIN_AGE_MS` after it was written, so after the look that missed it). Until then, and while the
#: version holds, the cycle skips the partition's listing: an idle partition costs no listing of its files, and one
#: whose replaced files wait out ``file.delete.delay.ms`` is looked at again when the first of them is due.
_QUIET: dict[tuple[str, str | None], tuple[int, int]] = {}
_QUIET_LOCK = threading.Lock()


def _quiet(uri: str, topic_id: str | None, version: int, now_ms: int) -> bool:
    with _QUIET_LOCK:
        known = _QUIET.get((uri, topic_id))
    return known is not None and known[0] == version and now_ms < known[1]


def _keep_quiet(uri: str, topic_id: str | None, version: int, until_ms: int) -> None:
    with _QUIET_LOCK:
        _QUIET[(uri, topic_id)] = (version, until_ms)


def keep_quiet(uri: str, topic_id: str | None, version: int, until_ms: int) -> None:
    """What another process found (:mod:`deltalog.log.snapshot_checkpoint`): nothing VACUUM can remove in the table at
    ``version`` before ``until_ms``; what this process found itself stands."""
    with _QUIET_LOCK:
        _QUIET.setdefault((uri, topic_id), (version, until_ms))


def quiet_until(uri: str, topic_id: str | None, version: int) -> int | None:
    """Until when this process knows nothing VACUUM can remove in the table at ``version`` (None: unknown)."""
    with _QUIET_LOCK:
        known = _QUIET.get((uri, topic_id))
    return known[1] if known is not None and known[0] == version else None
