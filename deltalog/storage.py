"""The one filesystem layer: every data and state file of a store goes through :class:`Storage`.

A store lives at a *root*: a local path (or ``file://`` URI), or an object-store URI: ``s3://bucket/prefix``,
``az://container/prefix`` / ``abfss://container@account.dfs.core.windows.net/prefix``, ``gs://bucket/prefix``.
Every file of the store has a *location* under that root, a string in the root's form (a local path, or a
URI), so the same location can be given to delta-rs, to pyarrow and to this layer.

Why obstore: it is the Python binding of the Rust ``object_store`` crate that delta-rs itself commits
through, so a store URI, its ``storage_options`` and the standard environment variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``, ``AZURE_STORAGE_*``,
``GOOGLE_*``) mean exactly the same to deltalog's own files as to its Delta commits. It also offers the two
primitives object stores give for mutual exclusion: a conditional put (``If-None-Match: *``: create only if
absent) and a compare-and-swap (``If-Match: <etag>``: replace only what was read), on S3, Azure and GCS alike;
leases and topic markers need them. Nothing in deltalog relies on rename or ``O_EXCL`` on an object store.
(pyarrow.fs has no conditional put and ignores ``AWS_ENDPOINT_URL``; fsspec's semantics differ per backend.)

On a local disk the same operations go to the OS directly, which is what object_store's ``LocalFileSystem``
does too, at a twentieth of the cost of a call through it (8 us against 176 us to read a small file,
measured): a whole-file write is a temporary file renamed over the target, a create-if-absent a hard link
of a temporary file (``O_EXCL`` where a filesystem has no hard links), a compare-and-swap an ``flock`` on
the file while its etag is compared and the new content renamed over it.

Parquet data files are read with pyarrow over obstore readers (a local file is opened by pyarrow
directly, the same bytes, faster) and written whole, or streamed to a local temporary file and uploaded
on close. A :class:`Storage` pickles as its root and options, so Spark tasks carry it and open their own
connections on the executors, which never need the driver's disk.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import (
    CommitOutcomeUnknownError,
    InvalidArgumentError,
    InvalidConfigError,
    StorageError,
    StorageFullError,
    shown,
)
from deltalog.storage_faults import storage_full_as_error

#: URI schemes of object stores (``file`` is a local path).
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure")
#: Storage options that are HTTP client settings for obstore rather than store config (delta-rs takes both
#: in one mapping).
_CLIENT_OPTIONS = ("allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url")
#: The object metadata key of a conditional put's write id (letters only: a valid metadata name on S3, Azure
#: and GCS alike), by which a write whose answer was lost is recognised as one's own.
WRITE_ID_ATTRIBUTE = "deltalogwriteid"
#: Puts of one conditional write whose outcome was unknown and proven not landed, and reads back to tell.
CONDITIONAL_PUT_ATTEMPTS = 3
#: Suffix of the temporary files a local write renames into place (listings of state skip them).
TMP_SUFFIX = ".deltalog-tmp"


@dataclass(frozen=True)
class FileInfo:
    """One file: where it is, its size, when it was last written (epoch ms) and its etag (a version tag that
    changes with every write; None where a listing does not give it)."""

    location: str
    size: int
    modified_ms: int
    etag: str | None = None


@dataclass(frozen=True)
class Versioned:
    """A file's content with the etag a compare-and-swap (:meth:`Storage.replace`) needs and its time."""

    data: bytes
    etag: str
    modified_ms: int


def normalize_root(root: object) -> str:
    """A store root as deltalog keeps it: an absolute local path, or a URI without a trailing slash."""
    if not isinstance(root, (str, os.PathLike)):
        raise InvalidArgumentError(f"a store root must be a path or a URI (str or os.PathLike), not {type(root).__name__}")
    text = os.fspath(root)
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(
            "a store root must be a non-empty path or URI such as './deltalog-store', '/data/store' or "
            f"'s3://bucket/store', not {shown(text)}"
        )
    text = text.strip()
    scheme = _scheme(text)
    if "\x00" in text:
        raise InvalidArgumentError(f"a store root cannot contain a NUL character: {shown(text)}")
    if scheme in ("", "file"):
        path = urlparse(text).path if scheme == "file" else text
        return _local_root(os.path.abspath(os.path.expanduser(path)), text)
    if scheme not in OBJECT_STORE_SCHEMES:
        raise InvalidArgumentError(
            f"store root {text!r} has the scheme {scheme!r}; a store is a local path or a file://, s3://, "
            "az://, abfss:// or gs:// URI"
        )
    parsed = urlparse(text)
    if not parsed.netloc:
        raise InvalidArgumentError(f"store root {text!r} names no bucket or container")
    _check_segments(parsed.path.strip("/"), text)
    return text.rstrip("/")


#: Linux's NAME_MAX and PATH_MAX (a store path may hold a 249-character topic and more beneath it).
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


def _local_root(path: str, text: str) -> str:
    """``path`` if a local filesystem can hold it. Checked before anything is created: ``os.makedirs`` would
    create the first directories of a path too long and then fail."""
    try:
        os.fsencode(path)
    except UnicodeEncodeError as e:  # a lone surrogate that no file name can hold (not one of surrogateescape's)
        raise InvalidArgumentError(f"a store root must be a path the filesystem can name: {shown(text)} holds "
                                   f"{shown(e.object[e.start:e.end])} at index {e.start}") from None
    too_long = [part for part in path.split(os.sep) if len(os.fsencode(part)) > MAX_NAME_BYTES]
    if too_long or len(os.fsencode(path)) >= MAX_PATH_BYTES:
        what = (f"its component {shown(too_long[0], 40)} is {len(os.fsencode(too_long[0]))} bytes long" if too_long
                else f"it is {len(os.fsencode(path))} bytes long")
        raise InvalidArgumentError(f"a store root must be a path the filesystem can hold (names of at most "
                                   f"{MAX_NAME_BYTES} bytes, {MAX_PATH_BYTES - 1} in all): {what}")
    return path


def _scheme(text: str) -> str:
    if "://" not in text:
        return ""
    return text.split("://", 1)[0].lower()


def is_object_store(location: str) -> bool:
    return _scheme(location) in OBJECT_STORE_SCHEMES


def join(location: str, *parts: str) -> str:
    """``location`` / ``parts``: ``os.path.join`` for a local path, ``/`` for a URI. ``parts`` may hold ``/``
    (a Delta add action's relative path)."""
    if not is_object_store(location):
        return os.path.join(location, *(p.replace("/", os.sep) for p in parts))
    out = location.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


def basename(location: str) -> str:
    """The last part of a location (a file's name)."""
    if not is_object_store(location):
        return os.path.basename(location)
    return location.rstrip("/").rsplit("/", 1)[-1]


def _check_segments(key: str, location: str) -> None:
    """An object key must not climb out of the root: no empty, ``.`` or ``..`` segment."""
    if not key:
        return
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgumentError(
                f"{location!r} is not a valid store location: its path has an empty, '.' or '..' segment"
            )


class Storage:
    """A store root and its storage options: reads, writes, conditional creates, compare-and-swaps, listings and
    deletes of the store's files. Every location passed in must lie under the root (:meth:`key` refuses any
    other, so a name can never make deltalog write outside its store)."""

    def __init__(self, root: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = normalize_root(root)
        self.options = _check_options(storage_options)
        self.local = not is_object_store(self.root)
        self._store: Any = None

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Storage) and (self.root, self.options) == (other.root, other.options)

    def __hash__(self) -> int:
        return hash(self.root)

    def __getstate__(self) -> dict[str, Any]:
        # What a Spark task gets: the options, plus the driver's standard cloud variables (AWS_ENDPOINT_URL,
        # AWS_ACCESS_KEY_ID, ...) that the options do not set. Executors of a real cluster do not share the
        # driver's environment (measured on the standalone cluster: without this, a store the driver reached
        # through AWS_* variables alone made every task fall back to the instance metadata service), and the
        # variables are how each cloud's users are told to configure their clients.
        return {"root": self.root, "options": {**cloud_environment(self.root, self.options), **self.options}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root = state["root"]
        self.options = state["options"]
        self.local = not is_object_store(self.root)
        self._store = None

    # -- locations -------------------------------------------------------------------------------------

    def location(self, *parts: str) -> str:
        """The location of ``parts`` under the root."""
        return join(self.root, *parts)

    def key(self, location: str) -> str:
        """``location`` relative to the root (``/``-separated); refuses a location outside the root."""
        if self.local:
            path = os.path.abspath(location)
            if path != self.root and not path.startswith(self.root.rstrip(os.sep) + os.sep):
                raise InvalidArgumentError(f"{location!r} is outside the store root {self.root!r}")
            rel = os.path.relpath(path, self.root)
            return "" if rel == "." else rel.replace(os.sep, "/")
        if location != self.root and not location.startswith(self.root + "/"):
            raise InvalidArgumentError(f"{location!r} is outside the store root {self.root!r}")
        key = location[len(self.root):].lstrip("/")
        _check_segments(key, location)
        return key

    def _path(self, location: str) -> str:
        """A local location, checked to lie under the root."""
        self.key(location)
        return os.path.abspath(location)

    @property
    def delta_options(self) -> dict[str, str] | None:
        """``storage_options`` for delta-rs (None: its defaults and the environment).

        No locking option is needed for safe concurrent commits: delta-rs 1.6 writes every commit file with
        object_store's ``PutMode::Create`` (``If-None-Match: *`` on S3, which AWS S3 and moto honour; Azure and
        GCS have their own precondition), so of two commits of one version the second gets
        ``VersionAlreadyExists`` and is retried or fails; ``AWS_S3_ALLOW_UNSAFE_RENAME`` no longer changes how
        commits are written, and a DynamoDB locking provider is no longer used. What remains unsafe is an
        S3-compatible service that ignores the precondition: a store refuses to be created on one
        (:meth:`check_conditional_put`).
        """
        return dict(self.options) if self.options else None

    # -- the object store ----------------------------------------------------------------------------

    @property
    def store(self) -> Any:
        """The obstore store for the root, created on first use (in each process that uses it)."""
        if self._store is None:
            self._store = _make_store(self.root, self.options, local=self.local)
        return self._store

    # -- bytes ---------------------------------------------------------------------------------------

    def read_bytes(self, location: str) -> bytes:
        """The whole file; ``FileNotFoundError`` when there is none."""
        if self.local:
            with open(self._path(location), "rb") as f:
                return f.read()
        import obstore as obs

        try:
            return bytes(obs.get(self.store, self.key(location)).bytes())
        except Exception as e:
            raise _not_found(e, location) from None

    def read_versioned(self, location: str) -> Versioned | None:
        """The file's content, etag and time; None when there is none."""
        if self.local:
            path = self._path(location)
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    data = f.read()
            except FileNotFoundError:
                return None
            return Versioned(data, _local_etag(st), int(st.st_mtime * 1000))
        import obstore as obs

        try:
            result = obs.get(self.store, self.key(location))
            data = bytes(result.bytes())
        except Exception as e:
            if isinstance(_not_found(e, location), FileNotFoundError):
                return None
            raise
        meta = result.meta
        return Versioned(data, str(meta["e_tag"]), _ms(meta["last_modified"]))

    def write_bytes(self, location: str, data: bytes) -> None:
        """Write the whole file; readers see the old content or the new, never a torn file."""
        if self.local:
            path = self._path(location)
            tmp = self._local_tmp(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                _remove_quietly(tmp)
                raise
            return
        import obstore as obs

        with storage_full_as_error(self.root, f"writing {location}"):
            obs.put(self.store, self.key(location), data)

    def create(self, location: str, data: bytes) -> str | None:
        """Write the file only if there is none (a conditional put); returns its etag, or None when a file
        was already there (then nothing is written).

        On an object store the write carries a write id of its own (object metadata :data:`WRITE_ID_ATTRIBUTE`),
        so a create whose answer was lost is resolved by reading back (see :meth:`_conditional_put`)."""
        if self.local:
            path = self._path(location)
            tmp = self._local_tmp(path, data)
            try:
                os.link(tmp, path)  # atomic, and fails if ``path`` exists
            except FileExistsError:
                return None
            except OSError:  # a filesystem without hard links (some FUSE mounts): O_EXCL instead
                with storage_full_as_error(self.root, f"creating {path}"):
                    if not _create_exclusive(path, data):
                        return None
            finally:
                _remove_quietly(tmp)
            return _local_etag(os.stat(path))
        return self._conditional_put(location, data, None)

    def replace(self, location: str, data: bytes, etag: str) -> str | None:
        """Compare-and-swap: write the file only if it still has ``etag`` (nobody wrote it since it was read);
        returns the new etag, or None when it changed or is gone (then nothing is written). Resolved like
        :meth:`create` when the store loses the answer."""
        if self.local:
            return self._local_replace(self._path(location), data, etag)
        return self._conditional_put(location, data, etag)

    def _conditional_put(self, location: str, data: bytes, etag: str | None) -> str | None:
        """A create (``etag`` None) or compare-and-swap on an object store, resolved when its answer is lost.

        The object store's client retries a PUT whose answer was lost (a timeout, a dropped connection, a 5xx
        after the store applied it), and the retry is refused: the object is there, or no longer has ``etag``,
        because of the write itself. Nor can the content tell whose write is stored: two writers of a counter
        write the same bytes. So every conditional put carries a write id of its own, and a refused or failed
        put reads the object back: if it carries this write's id, the write landed and is this caller's. A
        failed put that did not land (the object is absent, or still has ``etag``) is tried again; one that
        cannot be read back raises :class:`CommitOutcomeUnknownError`.
        """
        import obstore as obs
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

        key = self.key(location)
        write_id = uuid.uuid4().hex
        mode: Any = "create" if etag is None else {"e_tag": etag}
        error: Exception | None = None
        for _ in range(CONDITIONAL_PUT_ATTEMPTS):
            try:
                with storage_full_as_error(self.root, f"writing {location}"):
                    result = obs.put(self.store, key, data, mode=mode, attributes={WRITE_ID_ATTRIBUTE: write_id})
            except StorageFullError:
                raise  # the store refused it for want of space: nothing landed
            except (AlreadyExistsError, PreconditionError, NotFoundError, FileNotFoundError) as e:
                if etag is None and isinstance(e, (NotFoundError, FileNotFoundError)):
                    raise  # a create has nothing to find: the bucket or container itself is missing
                refused, error = True, e
            except Exception as e:  # noqa: BLE001 - the outcome is unknown: the store says what it holds
                refused, error = False, e
            else:
                return str(result["e_tag"]) if result.get("e_tag") else self._etag(location)
            stored = self._stored_write(location)
            if stored is not None and stored[1] == write_id:
                return stored[0]  # this write landed; its answer was lost
            if refused:
                return None  # another writer's object (or none, where one was expected)
            if etag is None and stored is not None:
                return None  # failed, and another writer created it meanwhile
            if etag is not None and (stored is None or stored[0] != etag):
                return None  # failed, and another writer changed or removed it meanwhile
            # failed and did not land: put again
        raise StorageError(f"the conditional write of {location} failed {CONDITIONAL_PUT_ATTEMPTS} times and has not "
                           f"landed (read back, the store holds no write of this call yet): {error}. A write the "
                           "store did not answer may still be applied later; calling again is safe, as a conditional "
                           "write lands at most once (its condition refuses the other)")

    def _stored_write(self, location: str) -> tuple[str, str | None] | None:
        """(etag, write id) of the object now stored, or None when there is none; raises
        :class:`CommitOutcomeUnknownError` when the store cannot be read."""
        import obstore as obs

        last: Exception | None = None
        for attempt in range(CONDITIONAL_PUT_ATTEMPTS):
            try:
                result = obs.get(self.store, self.key(location))
                result.bytes()
            except Exception as e:  # noqa: BLE001
                if isinstance(_not_found(e, location), FileNotFoundError):
                    return None
                last = e
                time.sleep(0.2 * (attempt + 1))
                continue
            attributes = result.attributes or {}
            return str(result.meta["e_tag"]), attributes.get(WRITE_ID_ATTRIBUTE)
        raise CommitOutcomeUnknownError(
            f"a conditional write of {location} failed and the file could not be read back to tell whether it "
            f"landed: {last}; look again once the store answers")

    def _etag(self, location: str) -> str:
        info = self.info(location)
        if info is None or info.etag is None:
            raise StorageError(f"{location} has no etag: the store cannot compare-and-swap it")
        return info.etag

    def _local_tmp(self, path: str, data: bytes) -> str:
        """``data`` in a new temporary file beside ``path`` (same directory: same filesystem for the rename).
        A write that fails (a full disk) removes its temporary file: it would hold the space just freed."""
        tmp = f"{path}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"
        with storage_full_as_error(self.root, f"writing {path}"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
            except BaseException:
                _remove_quietly(tmp)
                raise
        return tmp

    def _local_replace(self, path: str, data: bytes, etag: str) -> str | None:
        import fcntl

        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            # The lock is on the file being replaced: a racer that opened it too waits here, then finds its etag
            # changed (the rename gave the path a new inode), and one that opens it later sees the new file.
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                return None
            if _local_etag(current) != etag or current.st_ino != os.fstat(fd).st_ino:
                return None
            tmp = self._local_tmp(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                _remove_quietly(tmp)
                raise
            return _local_etag(os.stat(path))
        finally:
            os.close(fd)  # releases the lock

    def exists(self, location: str) -> bool:
        return self.info(location) is not None

    def info(self, location: str) -> FileInfo | None:
        """Size, time and etag of the file; None when there is none."""
        if self.local:
            try:
                st = os.stat(self._path(location))
            except (FileNotFoundError, NotADirectoryError):
                return None
            if not stat.S_ISREG(st.st_mode):
                return None
            return FileInfo(location, st.st_size, int(st.st_mtime * 1000), _local_etag(st))
        import obstore as obs

        try:
            meta = obs.head(self.store, self.key(location))
        except Exception as e:
            if isinstance(_not_found(e, location), FileNotFoundError):
                return None
            raise
        return FileInfo(location, int(meta["size"]), _ms(meta["last_modified"]), meta.get("e_tag"))

    def delete(self, location: str) -> None:
        """Remove the file; a file already gone is not an error."""
        self.delete_many([location])

    def delete_many(self, locations: Sequence[str]) -> None:
        if self.local:
            for loc in locations:
                _remove_quietly(self._path(loc))
            return
        import obstore as obs

        for loc in locations:  # object_store's bulk delete fails on a missing key for some backends
            try:
                obs.delete(self.store, self.key(loc))
            except Exception as e:
                if not isinstance(_not_found(e, loc), FileNotFoundError):
                    raise

    def delete_tree(self, location: str) -> None:
        """Remove every file under ``location`` (and, on a local disk, its directories)."""
        if self.local:
            shutil.rmtree(self._path(location), ignore_errors=True)
            return
        self.delete_many([f.location for f in self.list_files(location)])

    def prune_empty_dirs(self, location: str, *, keep: Sequence[str] = (), include_self: bool = False) -> None:
        """Remove the empty directories under ``location`` (and ``location`` itself with ``include_self``), but
        not a directory named in ``keep`` nor any inside one. Object stores have no directories: nothing to do."""
        if not self.local:
            return
        top = self._path(location)
        for dirpath, _dirnames, _filenames in os.walk(top, topdown=False):
            if (dirpath == top and not include_self) or set(os.path.relpath(dirpath, top).split(os.sep)) & set(keep):
                continue
            try:
                os.rmdir(dirpath)
            except OSError:
                pass

    # -- listings ------------------------------------------------------------------------------------

    def list_files(self, location: str) -> list[FileInfo]:
        """Every file under ``location`` (recursively), in location order; a local write's temporary file is
        left out."""
        if self.local:
            return _walk_local(self._path(location), temporary=False)
        import obstore as obs

        prefix = self.key(location)
        out = []
        for batch in obs.list(self.store, prefix or None):
            for meta in batch:
                out.append(FileInfo(self.location(meta["path"]), int(meta["size"]), _ms(meta["last_modified"]),
                                    meta.get("e_tag")))
        return sorted(out, key=lambda f: f.location)

    def list_temp_files(self, location: str) -> list[FileInfo]:
        """The temporary files (``*.deltalog-tmp``) of local writes under ``location`` that were never renamed into
        place: a write killed between the two (a write that fails removes its own). An object store has none (a
        put is atomic there)."""
        if not self.local:
            return []
        return _walk_local(self._path(location), temporary=True)

    def list_dirs(self, location: str) -> list[str]:
        """The names of the directories (common prefixes) right under ``location``, sorted."""
        if self.local:
            path = self._path(location)
            try:
                return sorted(e.name for e in os.scandir(path) if e.is_dir())
            except (FileNotFoundError, NotADirectoryError):
                return []
        import obstore as obs

        prefix = self.key(location)
        result = obs.list_with_delimiter(self.store, prefix or None)
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"])

    # -- JSON state files ------------------------------------------------------------------------------

    def read_json(self, location: str) -> Any | None:
        """The JSON document; None when there is none or it is not valid JSON."""
        try:
            return json.loads(self.read_bytes(location))
        except (FileNotFoundError, ValueError):
            return None

    def write_json(self, location: str, payload: Any, *, indent: int | None = 2) -> None:
        """Write a JSON document whole (readers never see a torn file)."""
        self.write_bytes(location, _json_bytes(payload, indent))

    def create_json(self, location: str, payload: Any) -> str | None:
        """Write a JSON document only if there is none; its etag, or None when one already existed."""
        return self.create(location, _json_bytes(payload, None))

    def replace_json(self, location: str, payload: Any, etag: str) -> str | None:
        """:meth:`replace` of a JSON document."""
        return self.replace(location, _json_bytes(payload, None), etag)

    # -- conditional puts --------------------------------------------------------------------------------

    def check_conditional_put(self, location: str) -> None:
        """Prove that the storage refuses a second create of one file (``If-None-Match``), which every Delta
        commit, lease and topic marker relies on; raises :class:`StorageError` when it does not. Leaves
        nothing behind."""
        probe = join(location, f"probe-{uuid.uuid4().hex}")
        try:
            if self.create(probe, b"first") is None:
                raise StorageError(f"{self.root}: a probe file that did not exist was reported as existing")
            if self.create(probe, b"second") is not None or self.read_bytes(probe) != b"first":
                raise StorageError(
                    f"the storage at {self.root} does not honour conditional puts (If-None-Match: *): a second "
                    "create of one file overwrote the first. Delta commits, leases and topic markers would not "
                    "be safe under concurrent writers; use a store that supports conditional writes (AWS S3, "
                    "Azure Blob/ADLS, GCS, MinIO, a local disk)"
                )
        finally:
            self.delete(probe)

    # -- Parquet ---------------------------------------------------------------------------------------

    def open_input(self, location: str) -> Any:
        """A random-access file for pyarrow; ``FileNotFoundError`` when there is none."""
        if self.local:
            return pa.OSFile(self._path(location), "rb")  # raises FileNotFoundError
        import obstore as obs

        try:
            reader = obs.open_reader(self.store, self.key(location))
        except Exception as e:
            raise _not_found(e, location) from None
        return pa.PythonFile(_Reader(reader), mode="r")

    def parquet_file(self, location: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.open_input(location))

    def read_parquet(self, locations: Sequence[str], *, schema: pa.Schema, filter: Any = None) -> pa.Table:
        """The rows of Parquet files in ``schema``, in file order, those matching ``filter`` (a dataset
        expression) only; ``FileNotFoundError`` when one is missing."""
        if not locations:
            return schema.empty_table()
        if self.local:
            paths = [self._path(loc) for loc in locations]
            for p in paths:
                if not os.path.exists(p):
                    raise FileNotFoundError(p)
            import pyarrow.dataset as ds  # here, not at the top: it imports pandas (~0.3 s; deltalog sql's start)

            return ds.dataset(paths, schema=schema, format="parquet").to_table(filter=filter)
        tables = []
        for loc in locations:
            with self.open_input(loc) as f:
                tables.append(pq.read_table(f, schema=schema, filters=filter))
        return pa.concat_tables(tables)

    def write_parquet(self, location: str, table: pa.Table, **options: Any) -> int:
        """Write ``table`` as one Parquet file; returns its size in bytes."""
        if self.local:
            path = self._path(location)
            with storage_full_as_error(self.root, f"writing {location}"):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                try:
                    pq.write_table(table, path, **options)
                except BaseException:  # a full disk: the partial file would hold the space
                    _remove_quietly(path)
                    raise
            return os.path.getsize(path)
        buffer = io.BytesIO()
        pq.write_table(table, buffer, **options)
        data = buffer.getvalue()
        self.write_bytes(location, data)
        return len(data)

    def open_parquet_writer(self, location: str, schema: pa.Schema, **options: Any) -> ParquetSink:
        """A Parquet writer whose file appears at ``location`` on :meth:`ParquetSink.close` (on an object store:
        written to a local temporary file, uploaded on close); :meth:`ParquetSink.abort` leaves no file."""
        return ParquetSink(self, location, schema, options)

    @contextmanager
    def parquet_writer(self, location: str, schema: pa.Schema, **options: Any) -> Iterator[pq.ParquetWriter]:
        """:meth:`open_parquet_writer` as a ``with`` block: the file appears when the block ends without an
        error."""
        sink = self.open_parquet_writer(location, schema, **options)
        try:
            yield sink.writer
        except BaseException:
            sink.abort()
            raise
        sink.close()

    def unique_name(self) -> str:
        """A short random name for a new file or directory."""
        return uuid.uuid4().hex[:12]


class ParquetSink:
    """A ``pyarrow.parquet.ParquetWriter`` for one file of a :class:`Storage` (see
    :meth:`Storage.open_parquet_writer`)."""

    def __init__(self, storage: Storage, location: str, schema: pa.Schema, options: Mapping[str, Any]) -> None:
        self.storage = storage
        self.location = location
        if storage.local:
            self._target = storage._path(location)
        else:
            storage.key(location)
        # On an object store the file is first written locally: a full local disk is named as such.
        self._where = storage.root if storage.local else f"{tempfile.gettempdir()} (the local copy of {location})"
        with storage_full_as_error(self._where, f"writing {location}"):
            if storage.local:
                os.makedirs(os.path.dirname(self._target), exist_ok=True)
            else:
                fd, self._target = tempfile.mkstemp(prefix="deltalog-", suffix=".parquet")
                os.close(fd)
            try:
                self.writer = pq.ParquetWriter(self._target, schema, **options)
            except BaseException:
                _remove_quietly(self._target)
                raise
        self.closed = False

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        """Write ``table`` in row groups of at most ``row_group_size`` rows; a full disk raises
        :class:`~deltalog.errors.StorageFullError` (then :meth:`abort` removes the partial file)."""
        with storage_full_as_error(self._where, f"writing {self.location}"):
            self.writer.write_table(table, row_group_size=row_group_size)

    def close(self) -> int:
        """Finish the file (upload it, on an object store); returns its size in bytes."""
        if self.closed:
            raise StorageError(f"the writer of {self.location} is already closed")
        self.closed = True
        with storage_full_as_error(self._where, f"writing {self.location}"):
            try:
                self.writer.close()
                size = os.path.getsize(self._target)
            except BaseException:  # the footer did not fit: no partial file stays behind
                _remove_quietly(self._target)
                raise
        with storage_full_as_error(self.storage.root, f"writing {self.location}"):
            if not self.storage.local:
                import obstore as obs

                try:
                    with open(self._target, "rb") as f:
                        obs.put(self.storage.store, self.storage.key(self.location), f)
                finally:
                    _remove_quietly(self._target)
        return size

    def abort(self) -> None:
        """Stop without a file: a local partial file is removed, nothing is uploaded."""
        if self.closed:
            return
        self.closed = True
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - the caller's error is the one to report
            pass
        _remove_quietly(self._target)


class _Reader(io.RawIOBase):
    """An obstore ``ReadableFile`` as the raw file pyarrow's ``PythonFile`` wraps (it needs ``readinto``)."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._reader.read(len(buffer))
        n = len(data)
        buffer[:n] = memoryview(data)
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._reader.seek(offset, whence)

    def tell(self) -> int:
        return self._reader.tell()

    def close(self) -> None:
        self._reader.close()
        super().close()


def _walk_local(top: str, *, temporary: bool) -> list[FileInfo]:
    """The files under the local directory ``top``, in order: the temporary files of writes (``*.deltalog-tmp``)
    when ``temporary``, else every other file."""
    out = []
    for dirpath, _dirnames, filenames in os.walk(top):
        for name in filenames:
            if name.endswith(TMP_SUFFIX) != temporary:
                continue
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full)
            except FileNotFoundError:
                continue  # removed while listed
            out.append(FileInfo(full, st.st_size, int(st.st_mtime * 1000), _local_etag(st)))
    return sorted(out, key=lambda f: f.location)


def _json_bytes(payload: Any, indent: int | None) -> bytes:
    return json.dumps(payload, indent=indent, sort_keys=indent is None, default=str).encode("utf-8")


def _local_etag(st: os.stat_result) -> str:
    """A local file's version tag, as object_store's ``LocalFileSystem`` makes it: a rename over the file
    gives it a new inode, so any write changes it."""
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


def _create_exclusive(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:  # a full disk: no half-written file is left under the name
        os.close(fd)
        _remove_quietly(path)
        raise
    os.close(fd)
    return True


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        pass


#: The standard environment variables of each cloud that object_store reads, by URI scheme.
_CLOUD_VARIABLES = {
    "s3": ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
           "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST"),
    "az": ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY",
           "AZURE_STORAGE_ENDPOINT", "AZURE_STORAGE_USE_EMULATOR", "AZURE_STORAGE_CLIENT_ID",
           "AZURE_STORAGE_CLIENT_SECRET", "AZURE_STORAGE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET",
           "AZURE_TENANT_ID", "AZURE_ALLOW_HTTP"),
    "gs": ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_KEY", "GOOGLE_BUCKET"),
}
_CLOUD_VARIABLES["abfss"] = _CLOUD_VARIABLES["abfs"] = _CLOUD_VARIABLES["az"]


def cloud_environment(root: str, options: Mapping[str, str]) -> dict[str, str]:
    """The standard variables of ``root``'s cloud set in this process and not already given (in any case) in
    ``options``, as storage options."""
    given = {k.lower() for k in options}
    return {name.lower(): os.environ[name] for name in _CLOUD_VARIABLES.get(_scheme(root), ())
            if os.environ.get(name) and name.lower() not in given}


def _check_options(options: Mapping[str, Any] | None) -> dict[str, str]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidConfigError(
            "storage_options must be a mapping of option names to strings, e.g. "
            f"{{'AWS_REGION': 'eu-west-1'}}, not {type(options).__name__}"
        )
    out = {}
    for k, v in options.items():
        if not isinstance(k, str) or not k:
            raise InvalidConfigError(f"storage option names must be non-empty strings, not {k!r}")
        if isinstance(v, bool):
            v = "true" if v else "false"
        if not isinstance(v, (str, int, float)):
            raise InvalidConfigError(f"storage option {k!r} must be a string, not {type(v).__name__}")
        out[k] = str(v)
    return out


def _make_store(root: str, options: Mapping[str, str], *, local: bool) -> Any:
    from obstore.store import AzureStore, LocalStore, from_url

    if local:
        os.makedirs(root, exist_ok=True)
        return LocalStore(root)
    config: dict[str, str] = {}
    client: dict[str, str] = {}
    for k, v in options.items():
        name = k.lower()
        for prefix in ("aws_", "azure_storage_", "azure_", "google_"):
            if name.startswith(prefix) and name[len(prefix):] in _CLIENT_OPTIONS:
                name = name[len(prefix):]
        if name in _CLIENT_OPTIONS:
            client[name] = v
        elif name not in _DELTA_ONLY_OPTIONS:
            config[k] = v
    if os.environ.get("AWS_ALLOW_HTTP", "").lower() == "true" and "allow_http" not in client:
        client["allow_http"] = "true"
    parsed = urlparse(root)
    config_arg: Any = config or None
    client_arg: Any = client or None
    try:
        if parsed.scheme.lower() == "az":  # az://container/prefix, as delta-rs reads it (obstore's from_url differs)
            return AzureStore(parsed.netloc, prefix=parsed.path.strip("/") or None, config=config_arg,
                              client_options=client_arg)
        return from_url(root, config=config_arg, client_options=client_arg)
    except Exception as e:  # an unknown option key, a malformed URL: name the store and the options given
        raise InvalidConfigError(f"cannot open the object store at {root} with storage options "
                                 f"{sorted(options)}: {e}") from None


#: Options that only delta-rs reads (object_store refuses unknown keys).
_DELTA_ONLY_OPTIONS = ("aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "aws_force_credential_load",
                       "delta_dynamo_table_name")


def _not_found(error: Exception, location: str) -> Exception:
    """obstore's NotFoundError as Python's FileNotFoundError (which every caller here already handles)."""
    from obstore.exceptions import NotFoundError

    if isinstance(error, (NotFoundError, FileNotFoundError)):
        return FileNotFoundError(location)
    return error


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def as_storage(where: Storage | str | os.PathLike[str]) -> Storage:
    """A :class:`Storage` given as itself, or a local path or URI (with no storage options)."""
    return where if isinstance(where, Storage) else Storage(where)
