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
import re
import struct
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from deltalog import errors
from deltalog.errors import CorruptLogError, DeltalogError
from deltalog.spark import default_parallelism
from deltalog.storage import Storage, join

P = TypeVar("P")
R = TypeVar("R")

#: Pickled payloads up to this many bytes in all ride in the tasks' closure; beyond, each goes through storage.
INLINE_PAYLOAD_BYTES = 4 << 20

_RESULT_SCHEMA = pa.schema([pa.field("index", pa.int64()), pa.field("result", pa.binary())])
_RESULT_DDL = "index long, result binary"


_bound = threading.local()


def bind(jobs: Any) -> None:
    """Route this thread's :func:`run_tasks` through ``jobs`` (a :class:`~deltalog.cleaner.shared_jobs.SharedJobs`;
    None: run them itself). Only the driver binds; the workers never see it."""
    _bound.jobs = jobs


def bound() -> Any:
    """The round's shared jobs this thread is bound to (:func:`bind`), or None."""
    return getattr(_bound, "jobs", None)


def parallelism(spark: Any) -> int:
    """How many tasks a pass's job should have (:func:`~deltalog.spark.default_parallelism`); on a thread bound to a
    round's shared jobs, the round's figure, asked once for the round (a pass's thread then makes no call to the
    JVM: each new thread that does opens a gateway connection of its own)."""
    jobs = getattr(_bound, "jobs", None)
    if jobs is not None:
        return jobs.parallelism
    return default_parallelism(spark)


def run_tasks(spark: Any, fn: Callable[[P], R], payloads: Sequence[P], *, storage: Storage, work_dir: str) -> list[R]:
    """``[fn(p) for p in payloads]``, one Spark task each (all in one wave when the session has the cores),
    in ``payloads``' order. ``fn`` must be importable by the workers (a module-level function, or a
    ``partial`` of one); ``work_dir`` (a location of the store) holds spilled payloads while the job runs. On a
    thread bound to a round's shared jobs (:func:`bind`), the tasks run in a job shared with the round's other
    passes."""
    if len(payloads) == 0:
        return []
    jobs = getattr(_bound, "jobs", None)
    if jobs is not None:
        return jobs.run(fn, payloads, storage=storage, work_dir=work_dir)
    out = run_task_groups(spark, [(fn, payloads, storage, work_dir)], isolate=False)[0]
    assert not isinstance(out, BaseException)
    return out


def run_task_groups(spark: Any, groups: Sequence[tuple[Callable[[Any], Any], Sequence[Any], Storage, str]], *,
                    isolate: bool, max_tasks: int | None = None) -> list[list[Any] | BaseException]:
    """Each group's ``[fn(p) for p in payloads]`` in one Spark job; a group's ``storage`` and ``work_dir`` hold its
    spilled payloads. With ``isolate`` (several passes' groups) a task that raises fails only its own group, whose
    entry is then the worker's error (:func:`worker_error`); without, the job fails with it, as one pass's own job
    does. One Spark task a payload, or at most ``max_tasks``: then payloads share Spark tasks (small passes ride
    together), a group's payloads spread over different ones (a large pass's runs still run side by side), see
    :func:`assign`."""
    owners = [g for g, (_fn, payloads, _s, _w) in enumerate(groups) for _ in payloads]
    n = len(owners)
    if n == 0:
        return [[] for _ in groups]
    pickled = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for _fn, payloads, _s, _w in groups for p in payloads]
    spilled: list[tuple[Storage, str]] = []
    if sum(map(len, pickled)) > INLINE_PAYLOAD_BYTES:
        items: list[tuple[Storage | None, Any]] = []
        for i, data in enumerate(pickled):
            _fn, _p, storage, work_dir = groups[owners[i]]
            location = join(work_dir, f"task-{i:05d}.pkl")
            storage.write_bytes(location, data)
            spilled.append((storage, location))
            items.append((storage, location))
    else:
        items = [(None, data) for data in pickled]
    slots = None if max_tasks is None or n <= max_tasks else assign([len(p) for _f, p, _s, _w in groups], max_tasks)
    source = (tuple(fn for fn, _p, _s, _w in groups), tuple(owners), tuple(items), isolate, slots)
    rows = n if slots is None else len(slots)
    try:
        job = spark.range(0, rows, 1, numPartitions=rows).mapInArrow(partial(_run_indexes, source), _RESULT_DDL)
        table = job.toArrow()
    except Exception as e:
        raised = worker_error(e)
        if raised is e:
            raise
        raise raised from e
    finally:
        for storage, location in spilled:
            storage.delete_many([location])
    indexes = table.column("index").to_pylist()
    results = table.column("result").to_pylist()
    if sorted(indexes) != list(range(n)):  # a task that ran twice or not at all would be a Spark bug; say so
        raise RuntimeError(f"Spark returned results for tasks {sorted(indexes)} of {n}")
    ordered: list[Any] = [None] * n
    for i, data in zip(indexes, results, strict=True):
        ordered[i] = pickle.loads(data)
    out: list[list[Any] | BaseException] = [[] for _ in groups]
    for i, (ok, value) in enumerate(ordered):
        g = owners[i]
        if isinstance(out[g], BaseException):
            continue
        if ok:
            out[g].append(value)  # type: ignore[union-attr]
        else:
            out[g] = worker_error(RuntimeError(value))  # the worker's text, as Spark's own error carries it
    return out


#: The last line of a worker's traceback when deltalog raised the error on purpose (``deltalog.errors.XError: ...``).
_DELTALOG_RAISED = re.compile(r"^deltalog\.errors\.([A-Za-z_]\w*): (.+)$", re.MULTILINE)


def worker_error(error: BaseException) -> BaseException:
    """The error a task's worker raised, as its own class: Spark brings a failed task's error to the driver only as
    its traceback's text (a ``PythonException``), and a shared job's isolated task as the same text (in a
    ``RuntimeError``, read as Spark's), so the last ``deltalog.errors.SomeError: message`` line in it is raised
    again as ``SomeError(message)``, its cause the text. A single pass's job and a shared round's then fail a pass with the
    same error (Kafka's ``Errors.forException`` likewise maps a class back from what was sent). An error deltalog did
    not raise, or whose class needs more than a message (``StorageFullError``: the text still says the storage is
    full), is returned unchanged."""
    found = _DELTALOG_RAISED.findall(str(error))
    if not found:
        return error
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, DeltalogError)):
        return error
    try:
        raised = cls(message.strip())
    except TypeError:  # keyword-only fields the text does not carry
        return error
    raised.__cause__ = error
    return raised


def assign(sizes: Sequence[int], tasks: int) -> tuple[tuple[int, ...], ...]:
    """The payload indexes (numbered group after group, ``sizes[g]`` payloads in group ``g``) each of ``tasks`` Spark
    tasks runs: the groups with most payloads first, each payload to the task with the fewest so far, so one group's
    payloads land on different tasks and small groups fill the gaps."""
    starts = [sum(sizes[:g]) for g in range(len(sizes))]
    slots: list[list[int]] = [[] for _ in range(tasks)]
    for g in sorted(range(len(sizes)), key=lambda g: -sizes[g]):
        for i in range(starts[g], starts[g] + sizes[g]):
            min(slots, key=len).append(i)
    return tuple(tuple(slot) for slot in slots if slot)


def _run_indexes(source: tuple[tuple[Callable[[Any], Any], ...], tuple[int, ...], tuple[Any, ...], bool,
                               tuple[tuple[int, ...], ...] | None],
                 batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of each Spark task (``mapInArrow``): run the payload of each task index it was given (or, with
    ``slots``, of each payload its row is assigned), with its group's function; with ``isolate``, an error is
    returned as its traceback's text instead of failing the job."""
    fns, owners, items, isolate, slots = source
    for batch in batches:
        for row in batch.column(0).to_pylist():
            for i in (row,) if slots is None else slots[row]:
                storage, item = items[i]
                data = item if storage is None else storage.read_bytes(item)
                result = pickle.dumps(_answer(fns[owners[i]], data, isolate), protocol=pickle.HIGHEST_PROTOCOL)
                yield pa.RecordBatch.from_arrays([pa.array([i], pa.int64()), pa.array([result], pa.binary())],
                                                 schema=_RESULT_SCHEMA)


def _answer(fn: Callable[[Any], Any], data: bytes, isolate: bool) -> tuple[bool, Any]:
    """(True, ``fn(payload)``); with ``isolate``, (False, the traceback's text) when it raises."""
    if not isolate:
        return True, fn(pickle.loads(data))
    try:
        return True, fn(pickle.loads(data))
    except Exception as e:  # noqa: BLE001 - fails its own pass only, which reads the text
        return False, "".join(traceback.format_exception(e))


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
