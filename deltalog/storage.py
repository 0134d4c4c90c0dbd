"""The one filesystem layer: every data and state file of a store goes through :class:`Storage`.

A store lives at a *root*: a local path (or ``file://`` URI), or an object-store URI: ``s3://bucket/prefix``,
``az://container/prefix`` / ``abfss://container@account.dfs.core.windows.net/prefix``, ``gs://bucket/prefix``.
Every file of the store has a *location* under that root, a string in the root's form (a local path, or a
URI), so the same location can be given to delta-rs, to pyarrow and to this layer.

Why obstore: it is the Python binding of the Rust ``object_store`` crate that delta-rs itself commits
through, so a store URI, its ``storage_options`` and the standard environment variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``, ``AZURE_STORAGE_*``,
``GOOGLE_*``) mean exactly the same to deltalog's own files as to its Delta commits. It also offers the one
primitive object stores give for mutual exclusion: a conditional put (``If-None-Match: *``: create only if
absent) on S3, Azure, GCS and local disks alike, which leases need. Nothing in deltalog relies on rename or
``O_EXCL``. (pyarrow.fs has no conditional put and ignores ``AWS_ENDPOINT_URL``; fsspec's semantics differ
per backend.)

Parquet data files are read with pyarrow over obstore readers (a local file is opened by pyarrow
directly, which is the same bytes, faster) and written whole, or streamed to a local temporary file and
uploaded on close. A :class:`Storage` pickles as its root and options, so Spark tasks carry it and open
their own connections on the executors, which never need the driver's disk.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import InvalidArgumentError, InvalidConfigError

#: URI schemes of object stores (``file`` is a local path).
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure")
#: Storage options that are HTTP client settings for obstore rather than store config (delta-rs takes both
#: in one mapping).
_CLIENT_OPTIONS = ("allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url")


@dataclass(frozen=True)
class FileInfo:
    """One file: where it is, its size, and when it was last written (epoch ms)."""

    location: str
    size: int
    modified_ms: int


def normalize_root(root: object) -> str:
    """A store root as deltalog keeps it: an absolute local path, or a URI without a trailing slash."""
    if not isinstance(root, (str, os.PathLike)):
        raise InvalidArgumentError(f"a store root must be a path or a URI (str or os.PathLike), not {type(root).__name__}")
    text = os.fspath(root)
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(
            "a store root must be a non-empty path or URI such as './deltalog-store', '/data/store' or "
            f"'s3://bucket/store', not {text!r}"
        )
    text = text.strip()
    scheme = _scheme(text)
    if scheme in ("", "file"):
        path = urlparse(text).path if scheme == "file" else text
        return os.path.abspath(os.path.expanduser(path))
    if scheme not in OBJECT_STORE_SCHEMES:
        raise InvalidArgumentError(
            f"store root {text!r} has the scheme {scheme!r}; a store is a local path or a file://, s3://, "
            "az://, abfss:// or gs:// URI"
        )
    parsed = urlparse(text)
    if not parsed.netloc:
        raise InvalidArgumentError(f"store root {text!r} names no bucket or container")
    return text.rstrip("/")


def _scheme(text: str) -> str:
    if "://" not in text:
        return ""
    return text.split("://", 1)[0].lower()


def is_object_store(location: str) -> bool:
    return _scheme(location) in OBJECT_STORE_SCHEMES


def join(location: str, *parts: str) -> str:
    """``location`` / ``parts``: ``os.path.join`` for a local path, ``/`` for a URI."""
    if not is_object_store(location):
        return os.path.join(location, *parts)
    out = location.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


class Storage:
    """A store root and its storage options: reads, writes, conditional creates, listings and deletes of the
    store's files. Every location passed in must lie under the root."""

    def __init__(self, root: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = normalize_root(root)
        self.options = _check_options(storage_options)
        self.local = not is_object_store(self.root)
        self._store: Any = None

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "options": self.options}

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
            if path != self.root and not path.startswith(self.root + os.sep):
                raise InvalidArgumentError(f"{location!r} is outside the store root {self.root!r}")
            rel = os.path.relpath(path, self.root)
            return "" if rel == "." else rel.replace(os.sep, "/")
        if location != self.root and not location.startswith(self.root + "/"):
            raise InvalidArgumentError(f"{location!r} is outside the store root {self.root!r}")
        return location[len(self.root):].lstrip("/")

    @property
    def delta_options(self) -> dict[str, str] | None:
        """``storage_options`` for delta-rs (None: its defaults and the environment)."""
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
        import obstore as obs

        try:
            return bytes(obs.get(self.store, self.key(location)).bytes())
        except FileNotFoundError:
            raise
        except Exception as e:
            raise _not_found(e, location) from None

    def write_bytes(self, location: str, data: bytes) -> None:
        """Write the whole file; readers see the old content or the new, never a torn file."""
        import obstore as obs

        obs.put(self.store, self.key(location), data)

    def create(self, location: str, data: bytes) -> bool:
        """Write the file only if there is none (a conditional put); False when it already existed."""
        import obstore as obs
        from obstore.exceptions import AlreadyExistsError

        try:
            obs.put(self.store, self.key(location), data, mode="create")
        except AlreadyExistsError:
            return False
        return True

    def exists(self, location: str) -> bool:
        return self.info(location) is not None

    def info(self, location: str) -> FileInfo | None:
        """Size and time of the file; None when there is none."""
        import obstore as obs

        try:
            meta = obs.head(self.store, self.key(location))
        except Exception as e:
            if isinstance(_not_found(e, location), FileNotFoundError):
                return None
            raise
        return FileInfo(location, int(meta["size"]), _ms(meta["last_modified"]))

    def delete(self, location: str) -> None:
        """Remove the file; a file already gone is not an error."""
        self.delete_many([location])

    def delete_many(self, locations: Sequence[str]) -> None:
        import obstore as obs

        for loc in locations:  # object_store's bulk delete fails on a missing key for some backends
            try:
                obs.delete(self.store, self.key(loc))
            except Exception as e:
                if not isinstance(_not_found(e, loc), FileNotFoundError):
                    raise

    def delete_tree(self, location: str) -> None:
        """Remove every file under ``location``."""
        if self.local:
            shutil.rmtree(location, ignore_errors=True)
            return
        self.delete_many([f.location for f in self.list_files(location)])

    # -- listings ------------------------------------------------------------------------------------

    def list_files(self, location: str) -> list[FileInfo]:
        """Every file under ``location`` (recursively), in location order."""
        import obstore as obs

        prefix = self.key(location)
        if self.local and not os.path.isdir(location):
            return []
        out = []
        for batch in obs.list(self.store, prefix or None):
            for meta in batch:
                out.append(FileInfo(self.location(meta["path"]), int(meta["size"]), _ms(meta["last_modified"])))
        return sorted(out, key=lambda f: f.location)

    def list_dirs(self, location: str) -> list[str]:
        """The names of the directories (common prefixes) right under ``location``, sorted."""
        import obstore as obs

        if self.local:
            try:
                return sorted(n for n in os.listdir(location) if os.path.isdir(os.path.join(location, n)))
            except FileNotFoundError:
                return []
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
        self.write_bytes(location, json.dumps(payload, indent=indent, default=str).encode("utf-8"))

    def create_json(self, location: str, payload: Any) -> bool:
        """Write a JSON document only if there is none; False when it already existed."""
        return self.create(location, json.dumps(payload, sort_keys=True, default=str).encode("utf-8"))

    # -- Parquet ---------------------------------------------------------------------------------------

    def open_input(self, location: str) -> Any:
        """A random-access file for pyarrow; ``FileNotFoundError`` when there is none."""
        if self.local:
            self.key(location)
            return pa.OSFile(location, "rb")  # raises FileNotFoundError
        import obstore as obs

        try:
            reader = obs.open_reader(self.store, self.key(location))
        except Exception as e:
            raise _not_found(e, location) from None
        return pa.PythonFile(_Reader(reader), mode="r")

    def parquet_file(self, location: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.open_input(location))

    def write_parquet(self, location: str, table: pa.Table, **options: Any) -> int:
        """Write ``table`` as one Parquet file; returns its size in bytes."""
        if self.local:
            os.makedirs(os.path.dirname(location), exist_ok=True)
            pq.write_table(table, location, **options)
            return os.path.getsize(location)
        buffer = io.BytesIO()
        pq.write_table(table, buffer, **options)
        data = buffer.getvalue()
        self.write_bytes(location, data)
        return len(data)

    @contextmanager
    def parquet_writer(self, location: str, schema: pa.Schema, **options: Any) -> Iterator[pq.ParquetWriter]:
        """A ``ParquetWriter`` whose file appears at ``location`` when the block ends without an error (on an
        object store: written to a local temporary file, uploaded on close)."""
        if self.local:
            os.makedirs(os.path.dirname(location), exist_ok=True)
            writer = pq.ParquetWriter(location, schema, **options)
            try:
                yield writer
            finally:
                writer.close()
            return
        import obstore as obs

        fd, tmp = tempfile.mkstemp(prefix="deltalog-", suffix=".parquet")
        os.close(fd)
        try:
            writer = pq.ParquetWriter(tmp, schema, **options)
            try:
                yield writer
            finally:
                writer.close()
            with open(tmp, "rb") as f:
                obs.put(self.store, self.key(location), f)
        finally:
            os.remove(tmp)

    def unique_name(self) -> str:
        """A short random name for a new file or directory."""
        return uuid.uuid4().hex[:12]


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
        (client if name in _CLIENT_OPTIONS else config)[k if name not in _CLIENT_OPTIONS else name] = v
    if os.environ.get("AWS_ALLOW_HTTP", "").lower() == "true" and "allow_http" not in client:
        client["allow_http"] = "true"
    parsed = urlparse(root)
    if parsed.scheme.lower() == "az":  # az://container/prefix, as delta-rs reads it (obstore's from_url differs)
        return AzureStore(parsed.netloc, prefix=parsed.path.strip("/") or None, config=config or None,
                          client_options=client or None)
    return from_url(root, config=config or None, client_options=client or None)


def _not_found(error: Exception, location: str) -> Exception:
    """obstore's NotFoundError as Python's FileNotFoundError (which every caller here already handles)."""
    from obstore.exceptions import NotFoundError

    if isinstance(error, (NotFoundError, FileNotFoundError)):
        return FileNotFoundError(location)
    return error


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


# -- module-level helpers for local state files (kept for callers not yet given a Storage) ------------------


def write_json(path: str, payload: Any, *, indent: int | None = 2) -> None:
    """Write ``payload`` as JSON to a local ``path`` atomically (a temporary file, then a rename over it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=indent, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_json(path: str) -> Any | None:
    """The JSON document at a local ``path``; None when there is none or it is not valid JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None
