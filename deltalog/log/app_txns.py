"""The application-transaction versions of a partition's Delta log, read once per process and then incrementally.

deltalog keeps a partition's log positions (log end, log start, active segment, cleaner checkpoint) as Delta
application transactions (``txn`` actions), so a snapshot is built without reading data. delta-rs answers
``DeltaTable.transaction_version(app_id)`` by replaying the table's log (its checkpoint and every JSON commit after
it) on each call, and a snapshot asks for five of them: five replays of the same log for every snapshot, which on an
object store is five GETs of each commit since the last checkpoint. Kafka reads its log's positions from files it
holds open; the Delta equivalent is to replay once and then read only what was committed since.

:func:`txn_versions` does that: per process and per table, the ``txn`` actions as of the version last read, brought
to a newer version by reading only the JSON commits in between; a table never read is replayed once from its
last checkpoint. Anything unexpected (a commit file gone, a v2 or unreadable checkpoint, a version older than the
one read) falls back to delta-rs, which stays the authority. The producer transactions (``deltalog.producer.*``,
which Delta may expire) are not served here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from deltalog.storage import Storage, join

DELTA_LOG_DIR = "_delta_log"
#: App ids whose versions delta-rs may expire (``lastUpdated`` with a retention): always asked of delta-rs.
EXPIRING_APP_PREFIX = "deltalog.producer."

_lock = threading.Lock()
#: (table location, the table's metadata id) -> (version, {app id: version}) as of that version. The id tells a
#: table deleted and created again at the same location (a topic of the same name) from the one read before.
_read: dict[tuple[str, str], tuple[int, dict[str, int]]] = {}


def txn_versions(dt: Any, storage: Storage, uri: str, app_ids: Iterable[str]) -> dict[str, int | None]:
    """``app_ids``' versions at ``dt``'s version (a :class:`deltalake.DeltaTable` of the table at ``uri``)."""
    wanted = list(app_ids)
    version = dt.version()
    txns = _known(storage, (uri, dt.metadata().id), version)
    if txns is None or any(a.startswith(EXPIRING_APP_PREFIX) for a in wanted):
        return {a: dt.transaction_version(a) for a in wanted}
    return {a: txns.get(a) for a in wanted}


def forget(uri: str | None = None) -> None:
    """Drop what was read of ``uri`` (or of every table): the next read replays from the checkpoint."""
    with _lock:
        if uri is None:
            _read.clear()
        else:
            for key in [k for k in _read if k[0] == uri]:
                del _read[key]


def _known(storage: Storage, key: tuple[str, str], version: int) -> dict[str, int] | None:
    uri = key[0]
    with _lock:
        cached = _read.get(key)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        if cached is not None and cached[0] < version:
            txns = dict(cached[1])
            _apply_commits(storage, uri, range(cached[0] + 1, version + 1), txns)
        else:
            txns = _replay(storage, uri, version)
            if txns is None:
                return None
    except (OSError, ValueError, KeyError, TypeError):  # a commit gone (log cleanup), a torn file: delta-rs decides
        return None
    with _lock:
        held = _read.get(key)
        if held is None or held[0] <= version:
            _read[key] = (version, txns)
    return txns


def _replay(storage: Storage, uri: str, version: int) -> dict[str, int] | None:
    """The ``txn`` actions at ``version`` from the last checkpoint at or before it and the commits after; None
    when the checkpoint is not one this reads (v2, or past ``version``)."""
    log_dir = join(uri, DELTA_LOG_DIR)
    last = storage.read_json(join(log_dir, "_last_checkpoint"))
    txns: dict[str, int] = {}
    checkpoint = -1
    if last is not None:
        checkpoint = int(last["version"])
        if checkpoint > version or "v2Checkpoint" in last:
            return None
        parts = int(last.get("parts") or 1)
        names = ([f"{checkpoint:020d}.checkpoint.parquet"] if parts == 1 and last.get("parts") is None else
                 [f"{checkpoint:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)])
        for name in names:
            table = storage.parquet_file(join(log_dir, name)).read(columns=["txn"])
            for t in table.column("txn").to_pylist():
                if t and t.get("appId") is not None:
                    txns[t["appId"]] = int(t["version"])
    _apply_commits(storage, uri, range(checkpoint + 1, version + 1), txns)
    return txns


def _apply_commits(storage: Storage, uri: str, versions: range, txns: dict[str, int]) -> None:
    log_dir = join(uri, DELTA_LOG_DIR)
    for v in versions:
        for line in storage.read_bytes(join(log_dir, f"{v:020d}.json")).decode("utf-8").splitlines():
            if '"txn"' not in line:
                continue
            txn = json.loads(line).get("txn")
            if isinstance(txn, Mapping) and txn.get("appId") is not None:
                txns[str(txn["appId"])] = int(txn["version"])
