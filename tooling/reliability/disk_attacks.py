"""Attack class ``disk``: the store's disk fills up while producers and a cleaner write to it, then space is freed.

A disk that fills is the commonest real failure of a local store. Kafka answers it by taking the log directory
offline (``LogDirFailureChannel``) and never acknowledging a write that did not reach the disk; a broker
restarted on a disk with room serves everything acknowledged. Here each run mounts a small tmpfs of its own
(``mount -t tmpfs -o size=...``: root only), puts a fresh store on it, fills all but a little of it with a
ballast file, and runs two producer processes writing incompressible values (and, with a Spark session, a
cleaning round in the harness's process) until their writes are refused for space. Then the ballast is deleted
and the verdict is :func:`~tooling.reliability.attacks.judge`'s (every acknowledged record still there,
offsets unchanged, every partition readable, every error a deltalog error, the next cleaning pass completes),
plus: no temporary file left on the disk, and no partition marked uncleanable.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tooling.reliability.attacks import AttackOutcome, finish, judge, start_producer
from tooling.reliability.model import Workload

TOPIC = "full"
WORKLOAD = Workload({TOPIC: 2}, keys=40, max_batch=8, tombstones=0.05, rolls=0.3, value_bytes=6_000)
SIZE_MB = 24
#: Room left beside the ballast: the producers fill it within a few dozen batches.
HEADROOM_BYTES = 1_500_000


class DiskAttackError(RuntimeError):
    """The harness could not set the attack up (no root, no tmpfs): says how to run without it."""


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int = SIZE_MB) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` mounted at ``path`` for the block's duration (unmounted even if it fails)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DiskAttackError(f"mounting a {size_mb} MB tmpfs at {path} failed ({done.stderr.strip() or 'exit '}"
                              f"{done.returncode}); the full-disk class needs root (or CAP_SYS_ADMIN): run as root, "
                              "or leave it out with --skip disk")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _fill(mount: Path) -> Path:
    """Write a ballast file taking all the free space of ``mount`` but :data:`HEADROOM_BYTES`."""
    ballast = mount / "ballast"
    st = os.statvfs(mount)
    size = max(0, st.f_bavail * st.f_frsize - HEADROOM_BYTES)
    with open(ballast, "wb") as f:
        chunk = os.urandom(1 << 20)
        while size > 0:
            f.write(chunk[: min(size, len(chunk))])
            size -= len(chunk)
    return ballast


def leftover_temporary_files(root: Path) -> list[str]:
    """Temporary files under a local store: a write cut short by the full disk must remove its own."""
    from deltalog.storage import TMP_SUFFIX

    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith((TMP_SUFFIX, ".tmp")) or ".tmp." in name or name.startswith((".tmp", "tmp")):
                out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def disk_run(harness_for: Callable[[str], Any], mount: Path, *, clean: Callable[[Any], Any] | None = None,
             batches: int = 40, sabotage: Callable[[Any], None] | None = None) -> AttackOutcome:
    """One run: a tmpfs at ``mount``, a store on it (``harness_for(location)`` makes the run's harness), full,
    written to, freed and judged. ``clean(store)`` runs a cleaning round (None: no cleaner in this run)."""
    with tmpfs(mount):
        harness = harness_for(str(mount / "store"))
        side = harness.workdir / "side"
        side.mkdir(parents=True, exist_ok=True)
        store = harness.store()
        store.create_topic(TOPIC, 2, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                             "segment.bytes": "200000"})
        for partition in range(2):
            store.log(TOPIC, partition).head()
        ballast = _fill(mount)
        started = [start_producer(harness, side, name, WORKLOAD, batches=batches, tolerate=True, mode=mode)
                   for name, mode in (("idem", "idempotent"), ("plain", "append"))]
        errors: list[tuple[str, Any]] = []
        refused = 0
        for (proc, logfile), name in zip(started, ("idempotent", "plain"), strict=True):
            if (e := finish(proc, logfile)) is not None:
                errors.append((f"the {name} producer", e))
        if clean is not None:  # on the disk the producers filled: its output has no room
            try:
                round_ = clean(harness.store())
                refused += len(round_.failures)
            except Exception as e:  # noqa: BLE001 - the verdict sorts it
                errors.append(("the cleaning round on the full disk", e))
                refused += 1
        free_at_end = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        ballast.unlink()
        if sabotage is not None:
            sabotage(harness.store())
        from tooling.reliability.model import read_side_errors

        refused += len(read_side_errors(sorted(side.glob("*.side.jsonl")))) + len(errors)
        outcome = AttackOutcome("disk", f"a {SIZE_MB} MB tmpfs filled by 2 producers"
                                + (" and a cleaning round" if clean else ""), injected=refused,
                                detail=f"{free_at_end} bytes free when the writers stopped")
        if refused == 0:
            outcome.problems.append(f"the disk never filled: no write was refused ({free_at_end} bytes free at the "
                                    "end); the attack did not happen")
        # the marks the full disk may have left, before the next pass could clear or add any
        for left in leftover_temporary_files(mount / "store"):
            outcome.problems.append(f"a temporary file was left on the disk: {left}")
        try:
            marked = harness.store().log_cleaner().manager.uncleanable_partitions()
        except Exception as e:  # noqa: BLE001
            errors.append(("listing uncleanable partitions", e))
            marked = set()
        outcome.problems += [f"left uncleanable by the full disk: {p}" for p in sorted(map(str, marked))]
        judge(outcome, harness.store(), side, clean=None if clean is None else (lambda: clean(harness.store())),
              extra_errors=errors)
        harness.log(f"disk: {refused} write(s) refused; {outcome.verdict()} ({outcome.acked} records acknowledged)"
                    f"{'' if outcome.held else ': ' + str(outcome.problems[:3])}")
        return outcome
