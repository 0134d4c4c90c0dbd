"""How the cleaner runs its Spark tasks: one task per payload, on a classic session or on Spark Connect alike.

Spark Connect has no ``sparkContext``, no RDDs and no broadcast variables, so a pass cannot
``parallelize`` its task inputs. It runs them through the DataFrame API instead: a ``range`` of N task
indexes in exactly N partitions, ``mapInArrow`` of a function that runs the payload of each index it sees
and yields its pickled result as one binary cell, then a collect to the driver. Both kinds of session run
that alike (the payloads ride in the function's closure, which cloudpickle ships with the plan).

A closure is shipped with every task (and through Connect's gRPC channel, whose messages are capped at
128 MiB), so the payloads ride in it only while they are small: past :data:`INLINE_PAYLOAD_BYTES` in all,
each payload is written once to the pass's working directory through :class:`~deltalog.storage.Storage` and
its task reads only its own. Data every task shares and that may be big (the offset map's hashes) is written
there by the caller, and the tasks that need it read it (:func:`save_arrays`, :func:`load_arrays`).
"""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from deltalog.errors import CorruptLogError
from deltalog.storage import Storage, join

P = TypeVar("P")
R = TypeVar("R")

#: Pickled payloads up to this many bytes in all ride in the tasks' closure; beyond, each goes through storage.
INLINE_PAYLOAD_BYTES = 4 << 20

_RESULT_SCHEMA = pa.schema([pa.field("index", pa.int64()), pa.field("result", pa.binary())])
_RESULT_DDL = "index long, result binary"


def run_tasks(spark: Any, fn: Callable[[P], R], payloads: Sequence[P], *, storage: Storage, work_dir: str) -> list[R]:
    """``[fn(p) for p in payloads]``, one Spark task each (all in one wave when the session has the cores),
    in ``payloads``' order. ``fn`` must be importable by the workers (a module-level function, or a
    ``partial`` of one); ``work_dir`` (a location of the store) holds spilled payloads while the job runs."""
    n = len(payloads)
    if n == 0:
        return []
    pickled = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for p in payloads]
    spilled: list[str] = []
    if sum(map(len, pickled)) > INLINE_PAYLOAD_BYTES:
        for i, data in enumerate(pickled):
            location = join(work_dir, f"task-{i:05d}.pkl")
            storage.write_bytes(location, data)
            spilled.append(location)
        source: tuple[Any, ...] = (storage, tuple(spilled))
    else:
        source = (None, tuple(pickled))
    try:
        job = spark.range(0, n, 1, numPartitions=n).mapInArrow(partial(_run_indexes, fn, source), _RESULT_DDL)
        table = job.toArrow()
    finally:
        if spilled:
            storage.delete_many(spilled)
    indexes = table.column("index").to_pylist()
    results = table.column("result").to_pylist()
    if sorted(indexes) != list(range(n)):  # a task that ran twice or not at all would be a Spark bug; say so
        raise RuntimeError(f"Spark returned results for tasks {sorted(indexes)} of {n}")
    ordered: list[Any] = [None] * n
    for i, data in zip(indexes, results, strict=True):
        ordered[i] = pickle.loads(data)
    return ordered


def _run_indexes(fn: Callable[[Any], Any], source: tuple[Storage | None, tuple[Any, ...]],
                 batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of each Spark task (``mapInArrow``): run the payload of each task index it was given."""
    storage, items = source
    for batch in batches:
        for i in batch.column(0).to_pylist():
            data = items[i] if storage is None else storage.read_bytes(items[i])
            result = pickle.dumps(fn(pickle.loads(data)), protocol=pickle.HIGHEST_PROTOCOL)
            yield pa.RecordBatch.from_arrays([pa.array([i], pa.int64()), pa.array([result], pa.binary())],
                                             schema=_RESULT_SCHEMA)


#: The layout of :func:`save_arrays`' files: this line, a 4-byte little-endian header length, the JSON header
#: (each array's name, dtype, shape and byte offset), then the arrays' raw bytes, each at a 64-byte boundary.
_ARRAYS_MAGIC = b"deltalog-arrays-1\n"
_ALIGN = 64


def save_arrays(storage: Storage, location: str, **arrays: np.ndarray) -> None:
    """Write numpy arrays to ``location`` as their raw bytes behind a small header, once.

    Not ``np.savez``: its zip container checksums and copies every array on both sides (docs/performance.md has
    what that cost pass 1's partial maps); these files live for
    one pass, are read by the same version that wrote them, and :func:`load_arrays` maps them without a copy."""
    entries, parts, at = [], [], 0
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        entries.append([name, array.dtype.str, list(array.shape), at])
        padded = -(-array.nbytes // _ALIGN) * _ALIGN
        parts += [array.reshape(-1).view(np.uint8).data, bytes(padded - array.nbytes)]
        at += padded
    header = json.dumps(entries).encode()
    head = _ARRAYS_MAGIC + struct.pack("<I", len(header)) + header
    start = -(-len(head) // _ALIGN) * _ALIGN
    storage.write_bytes(location, b"".join([head, bytes(start - len(head)), *parts]))


def load_arrays(storage: Storage, location: str) -> dict[str, np.ndarray]:
    """The arrays :func:`save_arrays` wrote, read in a task (or on the driver): views of the bytes read, read-only."""
    data = storage.read_bytes(location)
    if not data.startswith(_ARRAYS_MAGIC):
        raise CorruptLogError(f"{location} is not a file of arrays this version of deltalog wrote (a pass's own "
                              "working file, changed or replaced while the pass ran)")
    size = struct.unpack_from("<I", data, len(_ARRAYS_MAGIC))[0]
    body = len(_ARRAYS_MAGIC) + 4
    start = -(-(body + size) // _ALIGN) * _ALIGN
    out = {}
    for name, dtype, shape, offset in json.loads(data[body:body + size]):
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(data, dtype=dt, count=count, offset=start + offset).reshape(shape)
    return out
