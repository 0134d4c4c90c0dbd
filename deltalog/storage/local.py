"""A store on a local disk (or a filesystem mounted as one): :class:`LocalStorage`, the OS called directly.

object_store's ``LocalFileSystem`` does the same things through a runtime of its own, at many times the cost of a
small read (docs/performance.md has the figures); here each primitive is the OS's: a whole-file write is a temporary
file renamed over the target, a create-if-absent a hard link of a temporary file (``O_EXCL`` where a filesystem has
no hard links), a compare-and-swap an ``flock`` on the file while its etag is compared and the new content renamed
over it. Etags are made as ``LocalFileSystem`` makes them (inode, modification time, size), so a rename over a file
changes its etag. A write killed between its temporary file and the rename leaves a ``*.deltalog-tmp`` file, which
listings leave out and :meth:`LocalStorage.list_temp_files` finds.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import InvalidArgumentError
from deltalog.storage import TMP_SUFFIX, FileInfo, ParquetSink, Storage, Versioned, remove_quietly
from deltalog.storage_faults import storage_full_as_error


class LocalStorage(Storage):
    """A store root that is a local path: every operation of :class:`~deltalog.storage.Storage` on the OS."""

    local = True

    # -- locations -------------------------------------------------------------------------------------

    def key(self, location: str) -> str:
        prefix = self.root.rstrip(os.sep) + os.sep
        if (location.startswith(prefix) and os.sep == "/" and "//" not in location and "/." not in location
                and not location.endswith("/")):
            return location[len(prefix):]  # already normal and under the root: what the general path computes
        path = os.path.abspath(location)
        if path != self.root and not path.startswith(self.root.rstrip(os.sep) + os.sep):
            raise InvalidArgumentError(f"{location!r} is outside the store root {self.root!r}")
        rel = os.path.relpath(path, self.root)
        return "" if rel == "." else rel.replace(os.sep, "/")

    def _path(self, location: str) -> str:
        """A local location, checked to lie under the root."""
        self.key(location)
        return os.path.abspath(location)

    def _make_store(self) -> Any:
        from obstore.store import LocalStore

        os.makedirs(self.root, exist_ok=True)
        return LocalStore(self.root)

    # -- bytes ---------------------------------------------------------------------------------------

    def read_bytes(self, location: str) -> bytes:
        with open(self._path(location), "rb") as f:
            return f.read()

    def read_versioned(self, location: str) -> Versioned | None:
        path = self._path(location)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except FileNotFoundError:
            return None
        return Versioned(data, local_etag(st), int(st.st_mtime * 1000))

    def write_bytes(self, location: str, data: bytes) -> None:
        self._write_whole(self._path(location), data)

    def _write_whole(self, path: str, data: bytes) -> None:
        """``data`` in a temporary file beside ``path``, renamed over it: readers see the old file or the new."""
        tmp = self._tmp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            remove_quietly(tmp)
            raise

    def create(self, location: str, data: bytes) -> str | None:
        path = self._path(location)
        tmp = self._tmp(path, data)
        try:
            os.link(tmp, path)  # atomic, and fails if ``path`` exists
        except FileExistsError:
            return None
        except OSError:  # a filesystem without hard links (some FUSE mounts): O_EXCL instead
            with storage_full_as_error(self.root, f"creating {path}"):
                if not _create_exclusive(path, data):
                    return None
        finally:
            remove_quietly(tmp)
        return local_etag(os.stat(path))

    def replace(self, location: str, data: bytes, etag: str) -> str | None:
        import fcntl

        path = self._path(location)
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
            if local_etag(current) != etag or current.st_ino != os.fstat(fd).st_ino:
                return None
            self._write_whole(path, data)
            return local_etag(os.stat(path))
        finally:
            os.close(fd)  # releases the lock

    def _tmp(self, path: str, data: bytes) -> str:
        """``data`` in a new temporary file beside ``path`` (same directory: same filesystem for the rename).
        A write that fails (a full disk) removes its temporary file: it would hold the space just freed."""
        tmp = f"{path}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"
        with storage_full_as_error(self.root, f"writing {path}"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
            except BaseException:
                remove_quietly(tmp)
                raise
        return tmp

    def info(self, location: str) -> FileInfo | None:
        try:
            st = os.stat(self._path(location))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return FileInfo(location, st.st_size, int(st.st_mtime * 1000), local_etag(st))

    def delete_many(self, locations: Sequence[str]) -> None:
        for loc in locations:
            remove_quietly(self._path(loc))

    def delete_tree(self, location: str) -> None:
        shutil.rmtree(self._path(location), ignore_errors=True)

    def prune_empty_dirs(self, location: str, *, keep: Sequence[str] = (), include_self: bool = False) -> None:
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
        return _walk(self._path(location), temporary=False)

    def list_temp_files(self, location: str) -> list[FileInfo]:
        return _walk(self._path(location), temporary=True)

    def list_dirs(self, location: str) -> list[str]:
        path = self._path(location)
        try:
            return sorted(e.name for e in os.scandir(path) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- Parquet ---------------------------------------------------------------------------------------

    def open_input(self, location: str) -> Any:
        return pa.OSFile(self._path(location), "rb")  # raises FileNotFoundError

    def read_parquet(self, locations: Sequence[str], *, schema: pa.Schema, filter: Any = None) -> pa.Table:
        if not locations:
            return schema.empty_table()
        paths = [self._path(loc) for loc in locations]
        for p in paths:
            if not os.path.exists(p):
                raise FileNotFoundError(p)
        import pyarrow.dataset as ds  # here, not at the top: it imports pandas (deltalog sql's start-up)

        return ds.dataset(paths, schema=schema, format="parquet").to_table(filter=filter)

    def write_parquet(self, location: str, table: pa.Table, **options: Any) -> int:
        path = self._path(location)
        with storage_full_as_error(self.root, f"writing {location}"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                pq.write_table(table, path, **options)
            except BaseException:  # a full disk: the partial file would hold the space
                remove_quietly(path)
                raise
        return os.path.getsize(path)

    def open_parquet_writer(self, location: str, schema: pa.Schema, **options: Any) -> ParquetSink:
        return LocalParquetSink(self, location, schema, options)


class LocalParquetSink(ParquetSink):
    """A Parquet file written in place: it is at its location while it is written, whole once closed."""

    def __init__(self, storage: LocalStorage, location: str, schema: pa.Schema, options: Mapping[str, Any]) -> None:
        target = storage._path(location)
        with storage_full_as_error(storage.root, f"writing {location}"):
            os.makedirs(os.path.dirname(target), exist_ok=True)
        super().__init__(storage, location, target, storage.root, schema, options)


def _walk(top: str, *, temporary: bool) -> list[FileInfo]:
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
            out.append(FileInfo(full, st.st_size, int(st.st_mtime * 1000), local_etag(st)))
    return sorted(out, key=lambda f: f.location)


def local_etag(st: os.stat_result) -> str:
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
        remove_quietly(path)
        raise
    os.close(fd)
    return True
