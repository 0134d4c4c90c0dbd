"""Which storage failures are the storage's and pass: a full disk, a used-up quota, a store that is full or out of
reach.

Kafka tells the two kinds of failure apart. An ``IOException`` on a log directory (a full disk among them) goes to
``LogDirFailureChannel``: the directory is taken offline until the operator repairs it, and nothing about the
log's records is concluded from it. The cleaner's ``tryCleanFilthiestLog`` marks a partition uncleanable for
errors of the log itself (a corrupt batch, a bug), which repeat on every try. A full disk is the first kind: once
the operator frees space the same write works again, so deltalog

* turns it, wherever it surfaces (Python's ``OSError`` with ``ENOSPC``/``EDQUOT``, pyarrow's ``OSError`` whose
  errno is lost in the text, delta-rs's and object_store's wrapped messages, an object store's HTTP 507), into
  one :class:`~deltalog.errors.StorageFullError` naming the location and the fix (:func:`full_storage_error`);
* has the cleaner retry the partition next cycle instead of marking it uncleanable (:func:`is_transient`: a full
  storage, or an object store that could not be reached or asked the client to back off).

This module runs in Spark's Python workers too (the cleaner's tasks write files): it imports only the standard
library and :mod:`deltalog.errors`.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from deltalog.errors import StorageFullError, error_chain

#: What a full disk or quota says, in the words of the OS (strerror), Rust's ``io::Error`` (``os error 28``),
#: pyarrow (``[errno 28]``), an object store (HTTP 507, MinIO's ``XMinioStorageFull``) and a JVM
#: (``java.io.IOException: No space left on device``), whichever layer wrapped it.
_FULL = re.compile(
    r"No space left on device|Disk quota exceeded|\bos error (?:28|122)\b|\[errno (?:28|122)\]|\bENOSPC\b|\bEDQUOT\b"
    r"|Insufficient Storage|XMinioStorageFull|StorageFullError",
    re.IGNORECASE,
)
_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", 122)})


def is_storage_full(error: BaseException) -> bool:
    """Whether ``error`` (or any error in its chain of causes) says the storage is full."""
    for e in error_chain(error):
        if isinstance(e, StorageFullError):
            return True
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        if _FULL.search(str(e)):
            return True
    return False


#: What object_store (through obstore or delta-rs) and the JVM say when the store could not be reached or asked the
#: client to back off: the storage's passing trouble, not the log's. A missing or unreadable file is not among them.
_UNREACHABLE = re.compile(
    r"error sending request|Connection refused|Connection reset|connection closed before message completed"
    r"|operation timed out|\b503 Service Unavailable\b|<Code>SlowDown</Code>|<Code>RequestTimeout</Code>"
    r"|\b(?:ServerBusy|OperationTimedOut)\b",
    re.IGNORECASE,
)


def is_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or any in its chain) says the object store could not be reached or asked to back off."""
    return any(isinstance(e, ConnectionError) or _UNREACHABLE.search(str(e)) for e in error_chain(error))


def is_transient(error: BaseException) -> bool:
    """Whether a failed clean is the storage's passing failure rather than its log's (a full disk, a store that
    could not be reached): the partition is not marked uncleanable, and the next cycle tries it again (after
    ``log.cleaner.backoff.ms`` when it cleaned nothing)."""
    return is_storage_full(error) or is_unreachable(error)


#: What :func:`_reason` reports for each way of saying it.
_REASONS = (
    (re.compile(r"No space left on device|os error 28\b|errno 28\b|\bENOSPC\b", re.I), "No space left on device"),
    (re.compile(r"Disk quota exceeded|os error 122\b|errno 122\b|\bEDQUOT\b", re.I), "Disk quota exceeded"),
    (re.compile(r"Insufficient Storage|XMinioStorageFull", re.I), "the object store answered 507 Insufficient Storage"),
)


def _reason(error: BaseException) -> str:
    """What the OS or the store said, in its words (``No space left on device``), not a bare errno or a worker's
    traceback."""
    for e in error_chain(error):
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return os.strerror(e.errno or errno.ENOSPC)
    text = " ".join(str(e) for e in error_chain(error))
    for pattern, reason in _REASONS:
        if pattern.search(text):
            return reason
    return "the storage is full"


def full_storage_error(error: BaseException, location: str, what: str) -> StorageFullError:
    """``error`` (a full disk, see :func:`is_storage_full`) as the one :class:`StorageFullError`: what was
    being written, where, and what to do."""
    if isinstance(error, StorageFullError):
        return error
    reason = _reason(error)
    return StorageFullError(
        f"{what} failed: the storage at {location} is full ({reason}); nothing was half-written and nothing "
        "acknowledged was lost. Free space there (or raise the quota), then retry: the same call works again",
        location=location, reason=reason,
    )


@contextmanager
def storage_full_as_error(location: str, what: str) -> Iterator[None]:
    """Run the block; a full-storage error out of it becomes :class:`StorageFullError` (others pass unchanged)."""
    try:
        yield
    except StorageFullError:
        raise
    except Exception as e:
        if is_storage_full(e):
            raise full_storage_error(e, location, what) from e
        raise
