"""Another engine running OPTIMIZE and Z-order on a store's partition tables while deltalog works: the seeded
random races that ``tests/test_concurrent_optimize_processes.py`` and the harness's ``other-engines`` class run.

:class:`OtherEngine` runs real delta-rs ``optimize.compact()`` / ``optimize.z_order(["key"])`` in a loop, in
another process (or a thread, for the quick run), until stopped. :func:`run_rounds` appends, relays out, applies
retention and (with Spark) cleans, in a seeded random order, and checks the model after every round: every
acknowledged offset at or above the log start is served exactly once, in the table's current version as any other
engine reads it and through ``store.read``; every key's latest record is present.
"""

from __future__ import annotations

import collections
import json
import random
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from deltalake import DeltaTable

from deltalog import CommitConflictError, Record, Store

COMPACTED = "c"
DELETED = "d"
SEGMENT_MS = 1000
TOPIC_CONFIGS = {
    COMPACTED: {"cleanup.policy": "compact", "segment.ms": SEGMENT_MS, "min.cleanable.dirty.ratio": 0.01,
                "delete.retention.ms": 0},
    DELETED: {"cleanup.policy": "delete", "segment.ms": SEGMENT_MS, "retention.ms": 3 * SEGMENT_MS},
}

OPTIMIZER = textwrap.dedent(
    """
    import json, os, random, sys, time
    from deltalake import DeltaTable
    stop, seed, ops, uris = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4:]
    rng = random.Random(seed)
    landed = {op: 0 for op in ops}
    landed["failed"] = 0
    while not os.path.exists(stop):
        uri = rng.choice(uris)
        how = rng.choice(ops)
        try:
            dt = DeltaTable(uri)
            before = dt.version()
            if how == "compact":
                dt.optimize.compact()
            elif how == "z_order":
                dt.optimize.z_order(["key"])
            else:  # VACUUM as Delta's default allows it: files removed longer ago than the table's retention
                dt.vacuum(dry_run=False)
            landed[how] += DeltaTable(uri).version() > before
        except Exception:
            landed["failed"] += 1
        time.sleep(rng.uniform(0, 0.02))
    print(json.dumps(landed), flush=True)
    """
)

#: What the other engine does by default: Databricks' OPTIMIZE (bin-packing) and Z-order.
OPTIMIZE_OPS = ("compact", "z_order")


def optimize_once(uri: str, how: str) -> bool:
    dt = DeltaTable(uri)
    before = dt.version()
    if how == "compact":
        dt.optimize.compact()
    else:
        dt.optimize.z_order(["key"])
    return DeltaTable(uri).version() > before


class OtherEngine:
    """OPTIMIZE and Z-order (``ops``; ``"vacuum"`` too, in a process) of the tables at ``uris`` in a loop, in another
    process or a thread, until stopped."""

    def __init__(self, uris: list[str], seed: int, work_dir: Path, *, in_thread: bool = False,
                 ops: tuple[str, ...] = OPTIMIZE_OPS):
        self.stop_file = work_dir / f"stop-optimizer-{seed}"
        self.counts: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None
        if in_thread:
            self._stopping = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(uris, seed), daemon=True)
            self._thread.start()
        else:
            self._proc = subprocess.Popen([sys.executable, "-c", OPTIMIZER, str(self.stop_file), str(seed),
                                           ",".join(ops), *uris],
                                          stdout=subprocess.PIPE, text=True)

    def _loop(self, uris: list[str], seed: int) -> None:
        rng = random.Random(seed)
        counts = {"compact": 0, "z_order": 0, "failed": 0}
        while not self._stopping.is_set():
            how = rng.choice(["compact", "z_order"])
            try:
                counts[how] += optimize_once(rng.choice(uris), how)
            except Exception:  # noqa: BLE001 - a lost race of the other engine: it tries again
                counts["failed"] += 1
            time.sleep(rng.uniform(0, 0.02))
        self.counts = counts

    def stop(self) -> dict[str, int]:
        if self._thread is not None:
            self._stopping.set()
            self._thread.join(timeout=60)
        else:
            assert self._proc is not None
            self.stop_file.touch()
            out, _ = self._proc.communicate(timeout=120)
            assert self._proc.returncode == 0, out
            self.counts = json.loads(out.strip().splitlines()[-1])
        return self.counts


def table_offsets(uri: str) -> list[int]:
    """The offset of every row of the table's current version, as any other engine reads it."""
    return [o for path in DeltaTable(uri).file_uris()
            for o in pq.read_table(path, columns=["offset"]).column("offset").to_pylist()]


@dataclass
class RoundFigures:
    rounds: int = 0
    appended: int = 0
    relayouts: int = 0
    retentions: int = 0
    cleans: int = 0
    lost_races: int = 0
    duplicated_offsets: int = 0
    violations: list[str] = field(default_factory=list)


def create_topics(store: Store) -> None:
    for topic, config in TOPIC_CONFIGS.items():
        store.create_topic(topic, 1, config=config)


def run_rounds(store: Store, clock, rounds: int, seed: int, *, clean: bool = False,
               check_every: int = 1) -> RoundFigures:
    """``rounds`` seeded random steps (append, relayout, retention, clean with ``clean``) on the topics of
    :func:`create_topics`, checking the model every ``check_every`` rounds and at the end."""
    rng = random.Random(seed)
    acked: dict[str, dict[int, tuple[bytes, bytes]]] = {COMPACTED: {}, DELETED: {}}
    figures = RoundFigures()
    for r in range(rounds):
        topic = rng.choice([COMPACTED, DELETED])
        records = [Record(key=f"k{rng.randrange(6)}".encode(), value=f"{seed}.{r}.{i}".encode())
                   for i in range(rng.randint(1, 4))]
        for offset, rec in zip(store.append(topic, 0, records), records, strict=True):
            acked[topic][offset] = (rec.key, rec.value)
        figures.appended += len(records)
        clock.advance(rng.choice([0, 200, 700, 1500]))
        step = rng.random()
        try:
            if step < 0.3:
                store.log(rng.choice([COMPACTED, DELETED]), 0).relayout(clock.now_ms())
                figures.relayouts += 1
            elif step < 0.5:
                store.delete_old_segments(DELETED)
                figures.retentions += 1
            elif clean and step < 0.65:
                store.clean(COMPACTED)
                figures.cleans += 1
        except CommitConflictError:
            figures.lost_races += 1
        figures.rounds += 1
        if (r + 1) % check_every == 0 or r + 1 == rounds:
            check_model(store, acked, figures, cleaned=clean)
            if figures.violations:
                break
    return figures


def check_model(store: Store, acked: dict[str, dict[int, tuple[bytes, bytes]]], figures: RoundFigures, *,
                cleaned: bool) -> None:
    """Every acknowledged offset at or above the log start served once (by the table and by ``store.read``),
    in order; of a cleaned topic, every key's latest record present and nothing not acknowledged."""
    for topic, records in acked.items():
        log = store.log(topic, 0)
        start = log.snapshot().log_start_offset
        raw = collections.Counter(o for o in table_offsets(log.uri) if o >= start)
        twice = sorted(o for o, n in raw.items() if n > 1)
        if twice:
            figures.duplicated_offsets += len(twice)
            figures.violations.append(f"{topic}: offsets in the table more than once: {twice[:10]}")
        read = [(r.offset, r.key, r.value) for r in store.read(topic, 0, start)]
        offsets = [o for o, _, _ in read]
        if offsets != sorted(set(offsets)):
            figures.violations.append(f"{topic}: store.read served offsets out of order or twice")
        expected = [(o, *records[o]) for o in sorted(records) if o >= start]
        if topic == COMPACTED and cleaned:
            latest: dict[bytes, int] = {}
            for o in sorted(records):
                latest[records[o][0]] = o
            served = {o for o, _, _ in read}
            missing = [o for o in latest.values() if o not in served]
            unknown = [o for o, k, v in read if records.get(o) != (k, v)]
            if missing or unknown:
                figures.violations.append(f"{topic}: latest records missing {missing[:10]}, records not "
                                          f"acknowledged or changed {unknown[:10]}")
        elif read != expected:
            figures.violations.append(f"{topic}: served {len(read)} records, acknowledged {len(expected)} at or "
                                      f"above the log start {start}")


def duplicate_by_stale_commit(store: Store, topic: str, partition: int = 0) -> int:
    """Damage a partition the way the race did before deltalog checked its removes: a rewrite of every file planned
    at version v, another engine's Z-order committed, then the rewrite committed with delta-rs's own retries
    (which accept its stale removes over OPTIMIZE's ``dataChange=false`` ones): every offset in the table twice.
    Returns the damaged version. For the tests of the damage class and of the harness's verdict."""
    from deltalake.transaction import CommitProperties

    from deltalog.log import delta
    from deltalog.log.record import TABLE_SCHEMA, conform
    from deltalog.storage import join

    log = store.log(topic, partition)
    stale = DeltaTable(log.uri)
    files = delta.data_files(stale)
    now = store.clock.now_ms()
    adds = [delta.write_data_file(log.storage, log.uri, conform(log.storage.parquet_file(join(log.uri, f.path))
                                                                .read(), TABLE_SCHEMA), now) for f in files]
    DeltaTable(log.uri).optimize.z_order(["key"])  # rewrites even a table of one file
    stale.create_write_transaction(
        [*[delta.remove_action(f, now) for f in files], *adds], mode="append", schema=TABLE_SCHEMA,
        commit_properties=CommitProperties(custom_metadata={"deltalog.operation": "relayout",
                                                            delta.COMMIT_ID: delta.new_commit_id()}))
    return DeltaTable(log.uri).version()

