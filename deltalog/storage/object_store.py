"""A store on an object store (S3, Azure Blob/ADLS, GCS, or a service that speaks one of them):
:class:`ObjectStoreStorage`, through obstore.

Why obstore: it is the Python binding of the Rust ``object_store`` crate that delta-rs itself commits through, so a
store URI, its ``storage_options`` and the standard environment variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``, ``AZURE_STORAGE_*``,
``GOOGLE_*``) mean exactly the same to deltalog's own files as to its Delta commits. It also offers the two
primitives object stores give for mutual exclusion: a conditional put (``If-None-Match: *``: create only if absent)
and a compare-and-swap (``If-Match: <etag>``: replace only what was read), on S3, Azure and GCS alike. (pyarrow.fs
has no conditional put and ignores ``AWS_ENDPOINT_URL``; fsspec's semantics differ per backend.)

A put is atomic, so there are no temporary files and no directories. A conditional put whose answer is lost is
resolved by reading the object back (:meth:`ObjectStoreStorage._conditional_put`). Parquet files are read through
obstore readers, and written whole or streamed to a local temporary file that is uploaded on close.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
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
)
from deltalog.storage import FileInfo, ParquetSink, Storage, Versioned, check_segments, remove_quietly
from deltalog.storage_faults import storage_full_as_error

#: Storage options that are HTTP client settings for obstore rather than store config (delta-rs takes both
#: in one mapping).
_CLIENT_OPTIONS = ("allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url")
#: Options that only delta-rs reads (object_store refuses unknown keys).
_DELTA_ONLY_OPTIONS = ("aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "aws_force_credential_load",
                       "delta_dynamo_table_name")
#: The object metadata key of a conditional put's write id (letters only: a valid metadata name on S3, Azure
#: and GCS alike), by which a write whose answer was lost is recognised as one's own.
WRITE_ID_ATTRIBUTE = "deltalogwriteid"
#: Puts of one conditional write whose outcome was unknown and proven not landed, and reads back to tell.
CONDITIONAL_PUT_ATTEMPTS = 3


class ObjectStoreStorage(Storage):
    """A store root that is an object-store URI: every operation of :class:`~deltalog.storage.Storage` through
    obstore."""

    local = False

    # -- locations -------------------------------------------------------------------------------------

    def key(self, location: str) -> str:
        if location != self.root and not location.startswith(self.root + "/"):
            raise InvalidArgumentError(f"{location!r} is outside the store root {self.root!r}")
        key = location[len(self.root):].lstrip("/")
        check_segments(key, location)
        return key

    def _make_store(self) -> Any:
        return _make_store(self.root, self.options)

    # -- bytes ---------------------------------------------------------------------------------------

    def read_bytes(self, location: str) -> bytes:
        import obstore as obs

        try:
            return bytes(obs.get(self.store, self.key(location)).bytes())
        except Exception as e:
            raise _not_found(e, location) from None

    def read_versioned(self, location: str) -> Versioned | None:
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
        import obstore as obs

        with storage_full_as_error(self.root, f"writing {location}"):
            obs.put(self.store, self.key(location), data)

    def create(self, location: str, data: bytes) -> str | None:
        return self._conditional_put(location, data, None)

    def replace(self, location: str, data: bytes, etag: str) -> str | None:
        return self._conditional_put(location, data, etag)

    def _conditional_put(self, location: str, data: bytes, etag: str | None) -> str | None:
        """A create (``etag`` None) or compare-and-swap, resolved when its answer is lost.

        The object store's client retries a PUT whose answer was lost (a timeout, a dropped connection, a 5xx
        after the store applied it), and the retry is refused: the object is there, or no longer has ``etag``,
        because of the write itself. Nor can the content tell whose write is stored: two writers of a counter
        write the same bytes. So every conditional put carries a write id of its own (object metadata
        :data:`WRITE_ID_ATTRIBUTE`), and a refused or failed put reads the object back: if it carries this write's
        id, the write landed and is this caller's. A failed put that did not land (the object is absent, or still
        has ``etag``) is tried again; one that cannot be read back raises :class:`CommitOutcomeUnknownError`.
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

    def info(self, location: str) -> FileInfo | None:
        import obstore as obs

        try:
            meta = obs.head(self.store, self.key(location))
        except Exception as e:
            if isinstance(_not_found(e, location), FileNotFoundError):
                return None
            raise
        return FileInfo(location, int(meta["size"]), _ms(meta["last_modified"]), meta.get("e_tag"))

    def delete_many(self, locations: Sequence[str]) -> None:
        import obstore as obs

        for loc in locations:  # object_store's bulk delete fails on a missing key for some backends
            try:
                obs.delete(self.store, self.key(loc))
            except Exception as e:
                if not isinstance(_not_found(e, loc), FileNotFoundError):
                    raise

    def delete_tree(self, location: str) -> None:
        self.delete_many([f.location for f in self.list_files(location)])

    def prune_empty_dirs(self, location: str, *, keep: Sequence[str] = (), include_self: bool = False) -> None:
        """Object stores have no directories: nothing to do."""

    # -- listings ------------------------------------------------------------------------------------

    def list_files(self, location: str) -> list[FileInfo]:
        import obstore as obs

        prefix = self.key(location)
        out = []
        for batch in obs.list(self.store, prefix or None):
            for meta in batch:
                out.append(FileInfo(self.location(meta["path"]), int(meta["size"]), _ms(meta["last_modified"]),
                                    meta.get("e_tag")))
        return sorted(out, key=lambda f: f.location)

    def list_temp_files(self, location: str) -> list[FileInfo]:
        """None: a put is atomic on an object store."""
        return []

    def list_dirs(self, location: str) -> list[str]:
        import obstore as obs

        prefix = self.key(location)
        result = obs.list_with_delimiter(self.store, prefix or None)
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"])

    # -- Parquet ---------------------------------------------------------------------------------------

    def open_input(self, location: str) -> Any:
        import obstore as obs

        try:
            reader = obs.open_reader(self.store, self.key(location))
        except Exception as e:
            raise _not_found(e, location) from None
        return pa.PythonFile(_Reader(reader), mode="r")

    def read_parquet(self, locations: Sequence[str], *, schema: pa.Schema, filter: Any = None) -> pa.Table:
        if not locations:
            return schema.empty_table()
        tables = []
        for loc in locations:
            with self.open_input(loc) as f:
                tables.append(pq.read_table(f, schema=schema, filters=filter))
        return pa.concat_tables(tables)

    def write_parquet(self, location: str, table: pa.Table, **options: Any) -> int:
        buffer = io.BytesIO()
        pq.write_table(table, buffer, **options)
        data = buffer.getvalue()
        self.write_bytes(location, data)
        return len(data)

    def open_parquet_writer(self, location: str, schema: pa.Schema, **options: Any) -> ParquetSink:
        return UploadingParquetSink(self, location, schema, options)


class UploadingParquetSink(ParquetSink):
    """A Parquet file written to a local temporary file and uploaded on close: an object appears whole or not at
    all. A full local disk is named as such (the temporary directory), not as the store's."""

    def __init__(self, storage: ObjectStoreStorage, location: str, schema: pa.Schema,
                 options: Mapping[str, Any]) -> None:
        storage.key(location)
        where = f"{tempfile.gettempdir()} (the local copy of {location})"
        with storage_full_as_error(where, f"writing {location}"):
            fd, target = tempfile.mkstemp(prefix="deltalog-", suffix=".parquet")
            os.close(fd)
        super().__init__(storage, location, target, where, schema, options)

    def _publish(self) -> None:
        import obstore as obs

        try:
            with open(self._target, "rb") as f:
                obs.put(self.storage.store, self.storage.key(self.location), f)
        finally:
            remove_quietly(self._target)


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


def _make_store(root: str, options: Mapping[str, str]) -> Any:
    from obstore.store import AzureStore, from_url

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


def _not_found(error: Exception, location: str) -> Exception:
    """obstore's NotFoundError as Python's FileNotFoundError (which every caller here already handles)."""
    from obstore.exceptions import NotFoundError

    if isinstance(error, (NotFoundError, FileNotFoundError)):
        return FileNotFoundError(location)
    return error


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)
