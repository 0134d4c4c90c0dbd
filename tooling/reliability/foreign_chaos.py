"""Other engines' delta-rs operations, of every kind, at random moments, while real producer processes append
(plain records, tombstones, transactions that commit or abort) and deltalog cleans and refreshes a state table:
the acceptance test of ``tests/test_foreign_chaos.py``.

Roles, each a process (``python -m tooling.reliability.foreign_chaos <role> '<json spec>'``):

* ``producer``: keyed records and tombstones through ``store.produce`` and Kafka's transactional producer (each
  transaction commits or aborts); one JSON line per call to its side file: what was acknowledged (offsets), what
  was aborted, and what failed with an unknown outcome.
* ``engine``: another engine's delta-rs operations on the partition tables at random moments: OPTIMIZE
  (``optimize.compact()``, ``optimize.z_order``), VACUUM with no retention, and the destructive ones (DELETE,
  MERGE, RESTORE to an old version, ``alter.set_table_properties``), each undone a moment later as deltalog's
  error says (``restore`` to the version before it). One JSON line per operation to its side file.

The test process cleans and refreshes the state table in a loop meanwhile (:func:`run`), reads every partition
between them (every read's offsets strictly increasing, an offset never served with two different records), and
after a final clean and refresh checks Kafka's guarantees against the acknowledged records (:func:`verify`).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOPIC = "t"
PARTITIONS = 3
KEYS = 24
DELETE_RETENTION_MS = 1500
CONFIG = {"cleanup.policy": "compact", "segment.ms": 300, "min.cleanable.dirty.ratio": 0.01,
          "min.compaction.lag.ms": 0, "delete.retention.ms": DELETE_RETENTION_MS, "state.table.enable": "true",
          "key.encoding": "string", "value.encoding": "string"}
#: The other engine's operations and their weights.
OPERATIONS = {"compact": 4, "z_order": 3, "vacuum": 3, "delete": 2, "merge": 2, "restore": 2, "alter": 1,
              "alter_retention": 1}
DESTRUCTIVE = frozenset({"delete", "merge", "restore", "alter"})


def _store(spec: dict[str, Any]) -> Any:
    from deltalog import Store

    return Store(spec["store"])


def _key(rng: random.Random) -> str:
    return f"k{rng.randrange(KEYS)}"


def _transactional(store: Any, transactional_id: str, deadline: float) -> Any:
    """A transactional producer, once its init could end the previous one's transaction: the markers need every
    partition it wrote to writable, which another engine's pending change refuses (ForeignCommitError)."""
    from deltalog.errors import DeltalogError

    while True:
        txn = store.producer(transactional_id=transactional_id)
        try:
            txn.init_transactions()
            return txn
        except DeltalogError:
            if time.monotonic() > deadline + 30:
                raise
            time.sleep(0.2)


def producer(spec: dict[str, Any]) -> None:
    from deltalog import Record
    from deltalog.errors import DeltalogError

    store = _store(spec)
    rng = random.Random(spec["seed"])
    out = open(spec["out"], "a", buffering=1)  # noqa: SIM115 - one line a call, until the process ends
    name = spec["name"]
    deadline = time.monotonic() + spec["seconds"]
    txn = _transactional(store, f"chaos-{name}", deadline)
    n = 0
    while time.monotonic() < deadline:
        n += 1
        shown = [[_key(rng), None if rng.random() < 0.15 else f"{name}.{n}.{i}"] for i in range(rng.randint(1, 5))]
        records = [Record(key=k.encode(), value=None if v is None else v.encode()) for k, v in shown]
        if rng.random() < 0.6:
            try:
                meta = store.produce(TOPIC, records)
                out.write(json.dumps({"kind": "acked", "records": [[m.partition, m.offset, *s] for m, s
                                                                  in zip(meta, shown, strict=True)]}) + "\n")
            except DeltalogError as e:
                out.write(json.dumps({"kind": "failed", "records": shown, "error": repr(e)[:300]}) + "\n")
        else:
            commit = rng.random() < 0.7
            sent: list[list[Any]] = []
            try:
                txn.begin_transaction()
                meta = txn.send(TOPIC, records)
                sent = [[m.partition, m.offset, *s] for m, s in zip(meta, shown, strict=True)]
                if commit:
                    txn.commit_transaction()
                else:
                    txn.abort_transaction()
                out.write(json.dumps({"kind": "acked" if commit else "aborted", "records": sent}) + "\n")
            except DeltalogError as e:
                out.write(json.dumps({"kind": "failed", "records": sent or shown, "error": repr(e)[:300]}) + "\n")
                try:
                    if txn.in_transaction:
                        txn.abort_transaction()
                except DeltalogError:
                    pass
                # Kafka's way on from a failed transaction: a producer of the same id, whose init fences the
                # old one and starts its sequences again
                txn = _transactional(store, f"chaos-{name}", deadline)
        time.sleep(rng.uniform(0, 0.05))
    out.close()


def _undo(uri: str, version: int) -> str:
    """RESTORE to the version before another engine's ``version`` (deltalog's way out), tried again as a user
    would when a concurrent commit took the version."""
    from deltalake import DeltaTable

    error = None
    for attempt in range(5):
        try:
            DeltaTable(uri).restore(version - 1)
            return "restored"
        except Exception as e:  # noqa: BLE001 - recorded: the partition stays detected
            error = e
            time.sleep(0.2 * (attempt + 1))
    return f"restore failed: {error!r}"[:300]


def engine(spec: dict[str, Any]) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable

    from deltalog.log import commit_infos  # delta-rs's own history numbers versions wrongly under concurrency

    rng = random.Random(spec["seed"])
    out = open(spec["out"], "a", buffering=1)  # noqa: SIM115
    ops, weights = list(OPERATIONS), list(OPERATIONS.values())
    deadline = time.monotonic() + spec["seconds"]
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 1.2))
        uri = rng.choice(spec["uris"])
        how = rng.choices(ops, weights)[0]
        entry: dict[str, Any] = {"uri": uri, "op": how}
        try:
            dt = DeltaTable(uri)
            entry["before"] = dt.version()
            if how == "compact":
                dt.optimize.compact()
            elif how == "z_order":
                dt.optimize.z_order(["key"])
            elif how == "vacuum":
                entry["removed"] = len(dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False))
            elif how == "delete":
                offsets = _some_offsets(dt, rng)
                if offsets:
                    dt.delete(f"offset IN ({', '.join(map(str, offsets))})")
            elif how == "merge":
                offsets = _some_offsets(dt, rng)
                if offsets:
                    source = pa.table({"offset": pa.array(offsets, pa.int64()),
                                       "value": pa.array([b"merged"] * len(offsets), pa.binary())})
                    (dt.merge(source, "t.offset = s.offset", source_alias="s", target_alias="t")
                     .when_matched_update({"value": "s.value"}).execute())
            elif how == "restore":
                if entry["before"] > 1:
                    dt.restore(rng.randrange(max(0, entry["before"] - 8), entry["before"]))
            elif how == "alter":
                dt.alter.set_table_properties({"chaos.note": str(rng.random())}, raise_if_not_exists=False)
            elif how == "alter_retention":
                dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"},
                                              raise_if_not_exists=False)
            after = DeltaTable(uri)
            entry["after"] = after.version()
            if how in DESTRUCTIVE and entry["after"] > entry["before"]:
                # the version this operation landed as: the first after `before` that is not deltalog's
                own = [h for h in commit_infos.history(after, entry["after"] - entry["before"])
                       if h.get("deltalog.commit_id") is None and h.get("deltalog.operation") is None]
                entry["version"] = min(int(h["version"]) for h in own)
                entry["deltalog_between"] = entry["version"] - entry["before"] - 1
                time.sleep(rng.uniform(0.2, 1.5))  # deltalog works on (and must refuse) the partition meanwhile
                entry["undo"] = _undo(uri, entry["version"])
        except Exception as e:  # noqa: BLE001 - a lost race of the other engine: recorded, and it goes on
            entry["error"] = repr(e)[:300]
        out.write(json.dumps(entry) + "\n")
    out.close()


def _some_offsets(dt: Any, rng: random.Random) -> list[int]:
    import pyarrow.parquet as pq

    files = dt.file_uris()
    if not files:
        return []
    offsets = pq.read_table(rng.choice(files), columns=["offset"]).column("offset").to_pylist()
    return sorted(rng.sample(offsets, min(len(offsets), rng.randint(1, 3))))


ROLES = {"producer": producer, "engine": engine}


def main(argv: list[str]) -> None:
    ROLES[argv[0]](json.loads(argv[1]))


def start(role: str, spec: dict[str, Any]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tooling.reliability.foreign_chaos", role, json.dumps(spec)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@dataclass
class ChaosFigures:
    acked: int = 0
    aborted: int = 0
    failed_calls: int = 0
    cleans: int = 0
    clean_errors: dict[str, int] = field(default_factory=dict)
    refreshes: int = 0
    refresh_errors: dict[str, int] = field(default_factory=dict)
    reads: int = 0
    read_errors: dict[str, int] = field(default_factory=dict)
    engine_ops: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    #: partitions left with another engine's change the undo could not take back: every read must refuse them
    stuck: list[int] = field(default_factory=list)


def _count(d: dict[str, int], e: BaseException) -> None:
    k = type(e).__name__
    d[k] = d.get(k, 0) + 1


def run(store: Any, work: Path, seed: int, *, seconds: float = 40.0, producers: int = 2) -> ChaosFigures:
    """The race: producers and the other engine in processes for ``seconds``, while this process cleans,
    refreshes the state table and reads; then one final clean and refresh, and :func:`verify`."""
    from deltalog.errors import DeltalogError

    store.create_topic(TOPIC, PARTITIONS, config=CONFIG)
    uris = [store.log(TOPIC, p).uri for p in range(PARTITIONS)]
    env_spec = {"store": str(store.root), "seconds": seconds}
    procs = [start("producer", {**env_spec, "seed": seed * 100 + i, "name": f"p{i}",
                                "out": str(work / f"producer-{i}.jsonl")}) for i in range(producers)]
    procs.append(start("engine", {**env_spec, "seed": seed, "uris": uris, "out": str(work / "engine.jsonl")}))
    figures = ChaosFigures()
    seen: dict[tuple[int, int], tuple[Any, Any]] = {}
    try:
        while any(p.poll() is None for p in procs):
            try:
                store.clean(TOPIC)
                figures.cleans += 1
            except DeltalogError as e:
                _count(figures.clean_errors, e)
            try:
                store.refresh_state(TOPIC, check=False)
                figures.refreshes += 1
            except DeltalogError as e:
                _count(figures.refresh_errors, e)
            _read_all(store, figures, seen)
    finally:
        for p in procs:
            try:
                _, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode != 0:
                figures.violations.append(f"a chaos process failed ({p.returncode}): {err[-2000:]}")
    verify(store, work, figures, seen)
    return figures


def _read_all(store: Any, figures: ChaosFigures, seen: dict[tuple[int, int], tuple[Any, Any]]) -> None:
    """Read every partition both ways: offsets strictly increasing, an offset never two different records."""
    from deltalog.errors import DeltalogError

    for p in range(PARTITIONS):
        for level in ("read_uncommitted", "read_committed"):
            try:
                records = store.read(TOPIC, p, "earliest", isolation_level=level)
            except DeltalogError as e:
                _count(figures.read_errors, e)
                continue
            figures.reads += 1
            offsets = [r.offset for r in records]
            bad = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b <= a]
            if bad:
                figures.violations.append(f"partition {p} ({level}) served offsets out of order or twice: {bad[:5]}")
            for r in records:
                before = seen.setdefault((p, r.offset), (r.key, r.value))
                if before != (r.key, r.value) and r.value != "merged":
                    figures.violations.append(f"offset {p}:{r.offset} served as {before} and as {(r.key, r.value)}")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def verify(store: Any, work: Path, figures: ChaosFigures, seen: dict[tuple[int, int], tuple[Any, Any]]) -> None:
    """After a final clean and refresh: Kafka's guarantees against what the producers were acknowledged."""
    from deltalog.errors import DeltalogError, ForeignCommitError

    acked: dict[tuple[int, int], tuple[Any, Any]] = {}
    aborted: set[tuple[int, int]] = set()
    uncertain_keys: set[str] = set()
    for path in sorted(work.glob("producer-*.jsonl")):
        for line in _lines(path):
            if line["kind"] == "acked":
                for p, o, k, v in line["records"]:
                    acked[(p, o)] = (k, v)
            elif line["kind"] == "aborted":
                aborted.update((p, o) for p, o, _, _ in line["records"])
            else:
                figures.failed_calls += 1
                uncertain_keys.update(r[-2] for r in line["records"])
    figures.acked, figures.aborted = len(acked), len(aborted)
    engine_log = _lines(work / "engine.jsonl")
    for e in engine_log:
        k = e["op"] + (" failed" if "error" in e else "")
        figures.engine_ops[k] = figures.engine_ops.get(k, 0) + 1
    stuck = [e for e in engine_log if e.get("undo", "restored") != "restored"]
    for name, step in (("clean", lambda: store.clean(TOPIC)), ("refresh", lambda: store.refresh_state(TOPIC))):
        try:
            step()
        except DeltalogError as e:
            if not stuck:
                figures.violations.append(f"the final {name} failed: {e!r}"[:600])
    _read_all(store, figures, seen)
    latest: dict[str, tuple[int, int, Any]] = {}  # key -> (partition, offset, value) of its last acked record
    for (p, o), (k, v) in sorted(acked.items(), key=lambda kv: kv[0][1]):
        latest[k] = (p, o, v)
    for p in range(PARTITIONS):
        log = store.log(TOPIC, p)
        try:
            committed = store.read(TOPIC, p, "earliest", isolation_level="read_committed")
            uncommitted = store.read(TOPIC, p, "earliest", isolation_level="read_uncommitted")
        except DeltalogError as e:
            if not stuck or not isinstance(e, ForeignCommitError):
                figures.violations.append(f"partition {p} unreadable at the end with every foreign commit undone: "
                                          f"{e!r}"[:600])
            figures.stuck.append(p)
            continue
        snap = log.snapshot()
        if snap.cleaner_checkpoint is not None and snap.cleaner_checkpoint > snap.log_end_offset:
            figures.violations.append(f"partition {p}: cleaner checkpoint {snap.cleaner_checkpoint} past the log "
                                      f"end {snap.log_end_offset}")
        for r in uncommitted:
            if (p, r.offset) in acked and acked[(p, r.offset)] != (r.key, r.value):
                figures.violations.append(f"offset {p}:{r.offset} holds {(r.key, r.value)}, acknowledged as "
                                          f"{acked[(p, r.offset)]}")
        visible = {r.offset for r in committed}
        leaked = sorted(visible & {o for q, o in aborted if q == p})
        if leaked:
            figures.violations.append(f"partition {p}: aborted records visible to read_committed: {leaked[:10]}")
        last: dict[Any, tuple[int, Any]] = {}
        for r in committed:
            last[r.key] = (r.offset, r.value)
        for k, (q, o, v) in latest.items():
            if q != p or k in uncertain_keys:
                continue
            got = last.get(k)
            if got is None:
                if v is not None:
                    figures.violations.append(f"key {k}: its latest acknowledged value {v!r} (offset {p}:{o}) "
                                              f"is gone")
            elif got[0] < o:
                figures.violations.append(f"key {k}: latest served is offset {got[0]} ({got[1]!r}), older than "
                                          f"its acknowledged {p}:{o} ({v!r})")
    manager = store.log_cleaner().manager
    for p in range(PARTITIONS):
        mark = manager.uncleanable_mark(TOPIC, p)
        if mark is not None:
            figures.violations.append(f"partition {p} marked uncleanable: {mark.error_type}: {mark.message[:300]}")
    if stuck:
        return
    try:
        comparison = store.compare_state(TOPIC)
        if not comparison.equal:
            figures.violations.append(f"state table differs from the log: {comparison.examples}")
    except DeltalogError as e:
        figures.violations.append(f"compare_state failed: {e!r}"[:600])


if __name__ == "__main__":
    main(sys.argv[1:])
    os._exit(0)
