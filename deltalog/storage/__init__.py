"""The one filesystem layer: every data and state file of a store goes through a :class:`Storage`.

A store lives at a *root*: a local path (or ``file://`` URI), or an object-store URI: ``s3://bucket/prefix``,
``az://container/prefix`` / ``abfss://container@account.dfs.core.windows.net/prefix``, ``gs://bucket/prefix``.
Every file of the store has a *location* under that root, a string in the root's form (a local path, or a
URI), so the same location can be given to delta-rs, to pyarrow and to this layer.

:class:`Storage` is the one interface, as ``pyarrow.fs.FileSystem``, fsspec's ``AbstractFileSystem`` and
object_store's ``ObjectStore`` are: reads, whole-file writes, the two primitives object stores give for mutual
exclusion (a conditional put, ``If-None-Match: *``: create only if absent; a compare-and-swap, ``If-Match:
<etag>``: replace only what was read), listings, deletes and Parquet files. ``Storage(root, options)`` picks the
backend from the root, each in its own class and module: :class:`~deltalog.storage.local.LocalStorage` (the OS
directly) and :class:`~deltalog.storage.object_store.ObjectStoreStorage` (obstore: the object_store crate delta-rs
commits through). Leases and topic markers need the two primitives; nothing in deltalog relies on rename or
``O_EXCL`` on an object store. What is written once for both (JSON documents, the conditional-put probe, the
``with`` form of a Parquet writer) lives here.

A :class:`Storage` pickles as its root and options, so Spark tasks carry it and open their own connections on
the executors, which never need the driver's disk.
"""

from __future__ import annotations

import json
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import InvalidArgumentError, InvalidConfigError, StorageError, shown
from deltalog.storage_faults import storage_full_as_error

#: URI schemes of object stores (``file`` is a local path).
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure")
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
    check_segments(parsed.path.strip("/"), text)
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


def check_segments(key: str, location: str) -> None:
    """An object key must not climb out of the root: no empty, ``.`` or ``..`` segment."""
    if not key:
        return
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgumentError(
                f"{location!r} is not a valid store location: its path has an empty, '.' or '..' segment"
            )


class Storage(ABC):
    """A store root and its storage options: reads, writes, conditional creates, compare-and-swaps, listings and
    deletes of the store's files. Every location passed in must lie under the root (:meth:`key` refuses any
    other, so a name can never make deltalog write outside its store).

    ``Storage(root, storage_options)`` is a factory: it returns the backend the root names, a
    :class:`~deltalog.storage.local.LocalStorage` for a local path, an
    :class:`~deltalog.storage.object_store.ObjectStoreStorage` for an object-store URI. A new backend is one
    subclass that implements the abstract methods."""

    #: True for a store on a local disk (files, directories, renames), False for an object store.
    local: bool

    def __new__(cls, root: str | os.PathLike[str] | None = None,
                storage_options: Mapping[str, Any] | None = None) -> Storage:
        if cls is Storage:  # the factory; unpickling and the backends' own constructors skip it
            # the backends import this module: imported here, when the first store is opened
            from deltalog.storage.local import LocalStorage
            from deltalog.storage.object_store import ObjectStoreStorage

            cls = ObjectStoreStorage if is_object_store(normalize_root(root)) else LocalStorage
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = normalize_root(root)
        if is_object_store(self.root) == self.local:
            raise InvalidArgumentError(
                f"{type(self).__name__} cannot open {self.root!r}: it is "
                f"{'an object-store URI' if self.local else 'a local path'}; Storage(root) picks the backend")
        self.options = _check_options(storage_options)
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
        # driver's environment (on the standalone cluster, without this, a store the driver reached through
        # AWS_* variables alone made every task fall back to the instance metadata service), and the
        # variables are how each cloud's users are told to configure their clients.
        return {"root": self.root, "options": {**cloud_environment(self.root, self.options), **self.options}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root = state["root"]
        self.options = state["options"]
        self._store = None

    # -- locations -------------------------------------------------------------------------------------

    def location(self, *parts: str) -> str:
        """The location of ``parts`` under the root."""
        return join(self.root, *parts)

    @abstractmethod
    def key(self, location: str) -> str:
        """``location`` relative to the root (``/``-separated); refuses a location outside the root."""

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
            self._store = self._make_store()
        return self._store

    @abstractmethod
    def _make_store(self) -> Any:
        """The obstore store of the root."""

    # -- bytes ---------------------------------------------------------------------------------------

    @abstractmethod
    def read_bytes(self, location: str) -> bytes:
        """The whole file; ``FileNotFoundError`` when there is none."""

    @abstractmethod
    def read_versioned(self, location: str) -> Versioned | None:
        """The file's content, etag and time; None when there is none."""

    @abstractmethod
    def write_bytes(self, location: str, data: bytes) -> None:
        """Write the whole file; readers see the old content or the new, never a torn file."""

    @abstractmethod
    def create(self, location: str, data: bytes) -> str | None:
        """Write the file only if there is none (a conditional put); returns its etag, or None when a file
        was already there (then nothing is written). A create whose answer the store lost is resolved by
        reading back, never guessed (see :meth:`ObjectStoreStorage._conditional_put
        <deltalog.storage.object_store.ObjectStoreStorage._conditional_put>`)."""

    @abstractmethod
    def replace(self, location: str, data: bytes, etag: str) -> str | None:
        """Compare-and-swap: write the file only if it still has ``etag`` (nobody wrote it since it was read);
        returns the new etag, or None when it changed or is gone (then nothing is written). Resolved like
        :meth:`create` when the store loses the answer."""

    def exists(self, location: str) -> bool:
        return self.info(location) is not None

    @abstractmethod
    def info(self, location: str) -> FileInfo | None:
        """Size, time and etag of the file; None when there is none."""

    def delete(self, location: str) -> None:
        """Remove the file; a file already gone is not an error."""
        self.delete_many([location])

    @abstractmethod
    def delete_many(self, locations: Sequence[str]) -> None:
        """Remove the files; those already gone are not an error."""

    @abstractmethod
    def delete_tree(self, location: str) -> None:
        """Remove every file under ``location`` (and, on a local disk, its directories)."""

    @abstractmethod
    def prune_empty_dirs(self, location: str, *, keep: Sequence[str] = (), include_self: bool = False) -> None:
        """Remove the empty directories under ``location`` (and ``location`` itself with ``include_self``), but
        not a directory named in ``keep`` nor any inside one. Object stores have no directories: nothing to do."""

    # -- listings ------------------------------------------------------------------------------------

    @abstractmethod
    def list_files(self, location: str) -> list[FileInfo]:
        """Every file under ``location`` (recursively), in location order; a local write's temporary file is
        left out."""

    @abstractmethod
    def list_temp_files(self, location: str) -> list[FileInfo]:
        """The temporary files (``*.deltalog-tmp``) of local writes under ``location`` that were never renamed into
        place: a write killed between the two (a write that fails removes its own). An object store has none (a
        put is atomic there)."""

    @abstractmethod
    def list_dirs(self, location: str) -> list[str]:
        """The names of the directories (common prefixes) right under ``location``, sorted."""

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

    @abstractmethod
    def open_input(self, location: str) -> Any:
        """A random-access file for pyarrow; ``FileNotFoundError`` when there is none."""

    def parquet_file(self, location: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.open_input(location))

    @abstractmethod
    def read_parquet(self, locations: Sequence[str], *, schema: pa.Schema, filter: Any = None) -> pa.Table:
        """The rows of Parquet files in ``schema``, in file order, those matching ``filter`` (a dataset
        expression) only; ``FileNotFoundError`` when one is missing."""

    @abstractmethod
    def write_parquet(self, location: str, table: pa.Table, **options: Any) -> int:
        """Write ``table`` as one Parquet file; returns its size in bytes."""

    @abstractmethod
    def open_parquet_writer(self, location: str, schema: pa.Schema, **options: Any) -> ParquetSink:
        """A Parquet writer whose file appears at ``location`` on :meth:`ParquetSink.close` (on an object store:
        written to a local temporary file, uploaded on close); :meth:`ParquetSink.abort` leaves no file."""

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
    :meth:`Storage.open_parquet_writer`), writing to ``target`` (the file itself on a local disk, a temporary file
    an object store's backend uploads in :meth:`_publish`). ``where`` names the disk a full-disk error is about."""

    def __init__(self, storage: Storage, location: str, target: str, where: str, schema: pa.Schema,
                 options: Mapping[str, Any]) -> None:
        self.storage = storage
        self.location = location
        self._target = target
        self._where = where
        with storage_full_as_error(self._where, f"writing {location}"):
            try:
                self.writer = pq.ParquetWriter(self._target, schema, **options)
            except BaseException:
                remove_quietly(self._target)
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
                remove_quietly(self._target)
                raise
        with storage_full_as_error(self.storage.root, f"writing {self.location}"):
            self._publish()
        return size

    def _publish(self) -> None:
        """Make the finished file appear at its location (written in place: nothing to do)."""

    def abort(self) -> None:
        """Stop without a file: a local partial file is removed, nothing is uploaded."""
        if self.closed:
            return
        self.closed = True
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - the caller's error is the one to report
            pass
        remove_quietly(self._target)


def _json_bytes(payload: Any, indent: int | None) -> bytes:
    return json.dumps(payload, indent=indent, sort_keys=indent is None, default=str).encode("utf-8")


def remove_quietly(path: str) -> None:
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


def as_storage(where: Storage | str | os.PathLike[str]) -> Storage:
    """A :class:`Storage` given as itself, or a local path or URI (with no storage options)."""
    return where if isinstance(where, Storage) else Storage(where)
