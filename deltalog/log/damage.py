"""Damage to a partition table: finding it, and saying it in deltalog's words.

A partition table can be damaged outside deltalog's control: a data file deleted, truncated or overwritten,
a commit file (``_delta_log/<version>.json``) lost in the middle of the log, a ``_last_checkpoint`` hint left
pointing at a checkpoint that is gone, a checkpoint file that no longer parses. delta-rs, pyarrow and Spark
then each raise their own error, deep in a stack. This module is the one place that looks at a table's files
and names what is wrong, so every entry point can say it the same way: a
:class:`~deltalog.errors.CorruptLogError` that names the partition, the file, what is wrong with it and what
to do. It reads only through :class:`~deltalog.storage.Storage` (so it works on object stores too) and needs
neither Spark nor a readable Delta log:

* :func:`log_damage` walks ``_delta_log``: the hint names an existing, readable checkpoint; every checkpoint
  file has a readable Parquet footer; the commit files from the checkpoint on have no gap and parse;
* :func:`data_damage` checks the data files a snapshot references: present, of the size their add action
  records, and (``footers``) with a readable Parquet footer holding the rows the add action counts;
* :func:`orphans` lists the Parquet files no commit references (left by writers killed before their commit).

``deltalog doctor`` runs all three on every partition; the read paths call :func:`log_error` and
:func:`data_file_error` to turn a raw error into the diagnosis.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow.parquet as pq

from deltalog.errors import CorruptLogError, plain
from deltalog.storage import Storage, basename, join

if TYPE_CHECKING:
    from deltalog.log.data_file import DataFile

DELTA_LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
#: What to do about a damaged file, whatever it is: the one fix that never loses data.
RESTORE = "restore it from a backup"
DOCTOR = "run 'deltalog doctor --no-spark' to list every damaged file of the store"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet$")
_PARTITION_DIR = re.compile(r"(?:^|[/\\])topics[/\\]([^/\\]+)[/\\](\d+)(?:[/\\]|$)")


@dataclass(frozen=True)
class Damage:
    """One damaged file of a partition: which, what is wrong with it, and what to do."""

    topic: str
    partition: int
    file: str  # its location
    problem: str
    fix: str

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def message(self) -> str:
        return f"partition {self.partition_name} is damaged: {self.file} {self.problem}; {self.fix}; {DOCTOR}"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def partition_of(location: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a location inside a partition table (``.../topics/<topic>/<partition>/...``)."""
    found = _PARTITION_DIR.findall(location)
    if not found:
        return None
    topic, partition = found[-1]
    return topic, int(partition)


def _named(location: str) -> tuple[str, int]:
    return partition_of(location) or ("?", -1)


# -- the Delta log ---------------------------------------------------------------------------------------


def log_damage(storage: Storage, table_uri: str) -> list[Damage]:
    """Every damage to the table's Delta log that stops a reader from building its latest snapshot."""
    topic, partition = _named(table_uri)
    log_dir = join(table_uri, DELTA_LOG_DIR)
    names = [basename(f.location) for f in storage.list_files(log_dir)]
    commits = sorted(int(m.group(1)) for m in map(_COMMIT.match, names) if m)
    checkpoints: dict[int, list[str]] = {}
    for name in names:
        m = _CHECKPOINT.match(name)
        if m:
            checkpoints.setdefault(int(m.group(1)), []).append(name)
    out: list[Damage] = []

    def damage(name: str, problem: str, fix: str) -> None:
        out.append(Damage(topic, partition, join(log_dir, name), problem, fix))

    replayable = bool(commits) and commits == list(range(commits[-1] + 1))  # every commit from version 0 on
    unreadable: set[int] = set()
    for version, files in sorted(checkpoints.items()):
        for name in sorted(files):
            problem = _footer_problem(storage, join(log_dir, name))
            if problem is not None:
                unreadable.add(version)
                damage(name, f"is a checkpoint that cannot be read ({problem})",
                       f"{RESTORE}, or delete it and {LAST_CHECKPOINT}: readers then replay the commit files"
                       if replayable else RESTORE)
    start = -1  # the version a reader starts from: the hint's checkpoint, else the newest checkpoint
    if LAST_CHECKPOINT in names:
        hint = _hint_version(storage, join(log_dir, LAST_CHECKPOINT))
        if hint is None:
            damage(LAST_CHECKPOINT, "is not a valid checkpoint hint (not JSON with a version)",
                   "delete it: readers then find the newest checkpoint themselves")
        elif hint not in checkpoints:
            damage(LAST_CHECKPOINT, f"points at the checkpoint of version {hint}, which is missing "
                   f"({hint:020d}.checkpoint.parquet)",
                   f"{RESTORE} ({hint:020d}.checkpoint.parquet), or delete {LAST_CHECKPOINT}: readers then "
                   "replay the commit files" if replayable else f"{RESTORE} ({hint:020d}.checkpoint.parquet)")
            start = hint
        else:
            start = hint
    elif checkpoints:
        start = max(checkpoints)
    if not commits and not checkpoints:
        damage("", "holds no commit file: the table has no version", RESTORE)
        return out
    latest = max(commits[-1] if commits else -1, start)
    present = set(commits)
    first = start + 1 if start >= 0 else 0
    missing = [v for v in range(first, latest + 1) if v not in present]
    for v in missing:
        damage(f"{v:020d}.json", f"is missing: the commit files from version {first} to {latest} must all be "
               f"there to read the table, and version {v} is not", RESTORE)
    for v in range(first, latest + 1):
        if v in present and v not in missing:
            problem = _commit_problem(storage, join(log_dir, f"{v:020d}.json"))
            if problem is not None:
                damage(f"{v:020d}.json", f"is a commit file that cannot be read ({problem})", RESTORE)
    return out


def _hint_version(storage: Storage, location: str) -> int | None:
    try:
        version = json.loads(storage.read_bytes(location))["version"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) and version >= 0 else None


def _commit_problem(storage: Storage, location: str) -> str | None:
    try:
        text = storage.read_bytes(location).decode("utf-8")
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except FileNotFoundError:
        return "it is gone"
    except (UnicodeDecodeError, ValueError) as e:
        return f"not JSON lines: {str(e)[:120]}"
    if not lines or not all(isinstance(a, dict) for a in lines):
        return "it holds no Delta actions"
    return None


def _footer_problem(storage: Storage, location: str) -> str | None:
    try:
        with storage.open_input(location) as f:
            pq.read_metadata(f)
    except FileNotFoundError:
        return "it is gone"
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged footer
        return f"no readable Parquet footer: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"
    return None


# -- data files ----------------------------------------------------------------------------------------------


def data_damage(storage: Storage, table_uri: str, files: Sequence[DataFile], *, footers: bool = True) -> list[Damage]:
    """The data files of a snapshot that are missing, of another size than their add action records, or
    (``footers``) without a readable Parquet footer or with another row count. One listing of the table;
    with ``footers``, one footer read per file."""
    topic, partition = _named(table_uri)
    listed = _listing(storage, table_uri)
    out: list[Damage] = []
    for f in files:
        rel = unquote(f.path)
        location = join(table_uri, rel)
        size = listed.get(rel)
        problem = None
        if size is None:
            problem = "is missing (the current version of the table references it)"
        elif size != f.size_bytes:
            problem = (f"is {size:,} bytes but its Delta add action records {f.size_bytes:,} "
                       "(truncated or overwritten)")
        elif footers:
            problem = _data_footer_problem(storage, location, f.num_records)
        if problem is not None:
            out.append(Damage(topic, partition, location, problem,
                              f"{RESTORE} (offsets {f.min_offset}..{f.max_offset} are in it)"))
    return out


def _data_footer_problem(storage: Storage, location: str, rows: int) -> str | None:
    try:
        with storage.open_input(location) as f:
            meta = pq.read_metadata(f)
    except FileNotFoundError:
        return "is missing (the current version of the table references it)"
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged footer
        first = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        return f"has no readable Parquet footer (overwritten or truncated: {first})"
    if meta.num_rows != rows:
        return f"holds {meta.num_rows} rows but its Delta add action records {rows} (overwritten)"
    return None


def _listing(storage: Storage, table_uri: str) -> dict[str, int]:
    """``relative path -> size`` of every file of the table outside ``_delta_log``."""
    base = storage.key(table_uri)
    out = {}
    for f in storage.list_files(table_uri):
        rel = storage.key(f.location)[len(base):].lstrip("/")
        if rel.split("/", 1)[0] != DELTA_LOG_DIR:
            out[rel] = f.size
    return out


def orphans(storage: Storage, table_uri: str, referenced: Sequence[str], removed: Sequence[str]) -> list[str]:
    """Parquet files of the table that no add action of the current version and no remove action still in the
    log names: the files of writers killed before their commit (VACUUM removes them after the delay)."""
    known = {unquote(p) for p in referenced} | {unquote(p) for p in removed}
    return sorted(rel for rel in _listing(storage, table_uri) if rel.endswith(".parquet") and rel not in known)


# -- turning raw errors into deltalog's ------------------------------------------------------------------------


def log_error(storage: Storage, table_uri: str, error: BaseException) -> CorruptLogError:
    """The :class:`CorruptLogError` for a Delta log delta-rs could not read: the diagnosis of :func:`log_damage`
    (every damaged file named), or, when it finds nothing, delta-rs's own words and where to look."""
    try:
        found = log_damage(storage, table_uri)
    except Exception as e:  # noqa: BLE001 - the diagnosis must not hide the error it explains
        found = []
        detail = f"; looking for the cause failed too: {e}"
    else:
        detail = ""
    if found:
        return CorruptLogError("; ".join(d.message() for d in found))
    topic, partition = _named(table_uri)
    text = " ".join(plain(str(error)).split())[:600]  # delta-rs colours its chain of causes
    return CorruptLogError(f"partition {topic}-{partition}: the Delta log at {join(table_uri, DELTA_LOG_DIR)} cannot "
                           f"be read ({type(error).__name__}: {text}){detail}; {DOCTOR}")


@contextmanager
def reading_log(storage: Storage, table_uri: str) -> Iterator[None]:
    """Around delta-rs calls that load a table's log: its errors become a :func:`log_error`."""
    from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

    try:
        yield
    except (TableNotFoundError, CommitFailedError):
        raise
    except (DeltaError, OSError) as e:
        raise log_error(storage, table_uri, e) from None


def data_file_error(location: str, error: BaseException) -> CorruptLogError:
    """The :class:`CorruptLogError` for a data file that could not be read (in a reader or a Spark task)."""
    topic, partition = _named(location)
    if isinstance(error, FileNotFoundError):
        problem = "is missing (the current version of the table references it)"
    else:
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        problem = f"cannot be read as Parquet (truncated or overwritten: {first})"
    return CorruptLogError(Damage(topic, partition, location, problem, RESTORE).message())


def raise_data_damage(storage: Storage, table_uri: str, files: Sequence[DataFile], *, footers: bool = False) -> None:
    """Raise the :class:`CorruptLogError` of the first damaged file of ``files``, if any (every damaged one named)."""
    found = data_damage(storage, table_uri, files, footers=footers)
    if found:
        raise CorruptLogError("; ".join(d.message() for d in found[:5])
                              + (f"; and {len(found) - 5} more" if len(found) > 5 else ""))


_WORKER_ERROR = re.compile(r"CorruptLogError: (.+)")


def worker_error(error: BaseException) -> CorruptLogError | None:
    """The :class:`CorruptLogError` a Spark task raised, from the text Spark's error carries to the driver."""
    found = _WORKER_ERROR.findall(str(error))
    return CorruptLogError(found[-1].strip()) if found else None
