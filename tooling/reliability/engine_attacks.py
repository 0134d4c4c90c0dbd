"""Attack class ``other-engines``: another Delta engine acting on the partition tables while deltalog works.

A partition is a Delta table in the users' lakehouse, and other engines act on it whenever they like: Databricks'
predictive optimization and auto-compaction run OPTIMIZE, a Z-order job rewrites files by key, a VACUUM removes
old files, and someone runs a DELETE. Each run starts a process of real delta-rs doing one of those in a loop
(:class:`tooling.reliability.other_engines.OtherEngine`) while two producer processes append
(:mod:`tooling.reliability.worker`) and this process, until they finish, applies retention, cleans (with
``clean``) and reads every partition. Cases:

* ``optimize`` / ``z-order`` / ``vacuum``: ``optimize.compact()``; ``optimize.z_order(["key"])``; OPTIMIZE and
  Z-order with ``vacuum()`` as Delta's default allows it (files removed longer ago than the table's retention). All
  three are tolerated: the verdict is :func:`~tooling.reliability.attacks.judge`'s, plus no partition holding an
  offset twice (``describe``'s ``duplicated_offsets``);
* ``delete``: once the producers are done, another engine DELETEs some rows. That changes records behind the log's
  back, so every read must be refused with an error naming the DELETE (counted as refused, not unreadable); then
  Delta's RESTORE to the version before it, the way out the error names, and the store must be whole again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tooling.reliability.attacks import AttackOutcome, finish, judge, start_producer
from tooling.reliability.model import Workload
from tooling.reliability.other_engines import OtherEngine

COMPACTED = "engines"
RETAINED = "engines-retained"
#: Records of the retained topic carry timestamps older than its retention.ms: retention deletes its closed
#: segments while the other engine rewrites them.
RETENTION_MS = 60_000
WORKLOAD = Workload({COMPACTED: 2, RETAINED: 1}, keys=20, max_batch=5, tombstones=0.05, rolls=0.4,
                    age_ms={RETAINED: 2 * RETENTION_MS}, pause_s=0.02)

CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "optimize": ("OPTIMIZE (delta-rs optimize.compact) in a loop", ("compact",)),
    "z-order": ("Z-order (delta-rs optimize.z_order by key) in a loop", ("z_order",)),
    "vacuum": ("OPTIMIZE, Z-order and VACUUM (Delta's retention) in a loop", ("compact", "z_order", "vacuum")),
    "delete": ("a DELETE by another engine, then RESTORE", ()),
}


def engine_run(harness: Any, case: str, *, clean: Callable[[], Any] | None = None, batches: int = 20,
               sabotage: Callable[[Any], None] | None = None) -> AttackOutcome:
    """One run of ``case`` on ``harness``'s (fresh) store; ``sabotage(store)``, for the tests, does something the
    verdict must catch before it is given."""
    what, ops = CASES[case]
    side = harness.workdir / "side"
    side.mkdir(parents=True, exist_ok=True)
    store = harness.store()
    store.create_topic(COMPACTED, 2, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                             "segment.ms": 300})
    store.create_topic(RETAINED, 1, config={"cleanup.policy": "compact,delete", "retention.ms": RETENTION_MS,
                                            "min.cleanable.dirty.ratio": "0.01", "segment.ms": 300})
    uris = [store.log(t, p).uri for t, n in WORKLOAD.topics.items() for p in range(n)]
    outcome = AttackOutcome("other-engines", what, detail=case)
    errors: list[tuple[str, BaseException]] = []
    producers = [start_producer(harness, side, f"p{i}", WORKLOAD, batches=batches, mode="idempotent",
                                tolerate=True) for i in range(2)]
    engine = OtherEngine(uris, harness.rng.randrange(2**31), harness.workdir, ops=ops) if ops else None
    steps = 0
    try:
        while any(proc.poll() is None for proc, _ in producers) or steps < 2:
            steps += 1
            for where, step in (("retention", store.delete_old_segments),
                                ("a cleaning round", clean or (lambda: None)),
                                ("reads", lambda: _read_all(store))):
                try:
                    step()
                except Exception as e:  # noqa: BLE001 - the verdict sorts it
                    errors.append((f"{where} during the run", e))
            time.sleep(0.05)
    finally:
        counts = engine.stop() if engine is not None else {}
    for proc, logfile in producers:
        if (e := finish(proc, logfile)) is not None:
            errors.append(("a producer", e))  # type: ignore[arg-type]
    outcome.injected = sum(v for k, v in counts.items() if k != "failed")
    if case == "delete":
        _delete_then_restore(harness, store, outcome, uris[0])
    if sabotage is not None:
        sabotage(store)
    judge(outcome, harness.store(), side, clean=clean, extra_errors=errors)
    for t, n in WORKLOAD.topics.items():
        for p in range(n):
            twice = harness.store().log(t, p).duplicated_offsets()
            if twice is not None:
                outcome.changed += twice.extra_rows
                outcome.problems.append(twice.message())
    harness.log(f"other engines ({case}): {outcome.verdict()} ({outcome.acked} records acknowledged, "
                f"{outcome.injected} other-engine commits: {counts})")
    return outcome


def _read_all(store: Any) -> None:
    for t, n in WORKLOAD.topics.items():
        for p in range(n):
            store.read(t, p, "earliest")


def _delete_then_restore(harness: Any, store: Any, outcome: AttackOutcome, uri: str) -> None:
    """Another engine's DELETE: every read of that partition must be refused naming it; then RESTORE."""
    from deltalake import DeltaTable

    from deltalog.errors import ForeignCommitError

    first = store.read(COMPACTED, 0, "earliest", max_records=1)
    if not first:
        outcome.problems.append(f"{COMPACTED}-0 holds no record for the DELETE to remove")
        return
    dt = DeltaTable(uri)
    before = dt.version()
    dt.delete(f"offset = {first[0].offset}")
    if DeltaTable(uri).version() == before:
        outcome.problems.append("the other engine's DELETE committed nothing")
        return
    outcome.injected += 1
    try:
        harness.store().read(COMPACTED, 0, "earliest")
        outcome.problems.append("a read after another engine's DELETE was served instead of refused")
    except ForeignCommitError as e:
        if "DELETE" not in str(e):
            outcome.problems.append(f"the refusal does not name the DELETE: {str(e)[:300]}")
        else:
            outcome.refused.append(f"{COMPACTED}-0 refused after the DELETE: {str(e)[:200]}")
    DeltaTable(uri).restore(before)
