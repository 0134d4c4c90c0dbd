"""Attack class ``writer-clocks``: writers whose clocks disagree, and time travel over their commits.

A Delta commit's ``timestamp`` (its ``commitInfo``) comes from the clock of the process that wrote it: delta-rs
stamps it from the system clock and refuses one set by the caller. Writers on hosts whose clocks differ leave
timestamps that do not increase with the version, and ``timestamp_as_of`` resolves on them. Each run alternates
appends by this process (the wall clock) with appends by a writer process whose system clock is moved by
libfaketime (``LD_PRELOAD``, ``FAKETIME``): a genuinely skewed writer, as on another host. Between every two
commits the run notes a time ``T`` on the wall clock, then checks:

* ``store.history`` lists the versions newest first with strictly decreasing times (Delta's DeltaHistoryManager
  rule: a commit's time is ``max(its own, the previous commit's + 1 ms)``);
* a read as of each ``T`` holds no record the wall-clock writer appended after ``T`` (counted as offsets changed)
  and, when no writer ran ahead, every record acknowledged before ``T`` (counted as records lost). A writer whose
  clock runs *ahead* pushes the times of the commits after its own forward (as in Delta), so "as of T" may then
  leave out what was written before ``T``; that case checks the first property only;
* a time before the topic was created is refused with ``VersionNotAvailableError``;
* the latest read holds every acknowledged record once, in order.

Cases: ``behind-2s``, ``behind-1h``, ``ahead-1h`` (the skewed writer's offset from the wall clock).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tooling.reliability.attacks import AttackOutcome

TOPIC = "travel"
HOUR_S = 3600
CASES: dict[str, tuple[str, int]] = {
    "behind-2s": ("a writer whose clock is 2 s behind, time travel between its commits", -2),
    "behind-1h": ("a writer whose clock is 1 h behind, time travel between its commits", -HOUR_S),
    "ahead-1h": ("a writer whose clock is 1 h ahead, time travel between its commits", HOUR_S),
}
#: Appends per run, alternating: the skewed writer first (so it makes the topic's first record commit).
APPENDS = 6

_WRITER = ("import json, sys; from deltalog import Record, Store; "
           "print(json.dumps(Store(sys.argv[1]).append(sys.argv[2], 0, "
           "[Record(b'k%d' % i, v.encode()) for i, v in enumerate(sys.argv[3:])])))")


def libfaketime() -> str | None:
    """libfaketime's preload library, installed (Debian's ``faketime``) when missing and apt-get can; None when it
    cannot be had, which the run reports as a problem."""
    from tooling.services import ServiceError, ensure_libfaketime

    try:
        return ensure_libfaketime()
    except ServiceError:
        return None


def _skewed_append(root: str, values: list[str], offset_s: int, preload: str) -> list[int]:
    env = {**os.environ, "LD_PRELOAD": preload, "FAKETIME": f"{offset_s:+d}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                       os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _WRITER, root, TOPIC, *values], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the skewed writer failed: {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pause() -> int:
    time.sleep(0.03)
    t = int(time.time() * 1000)
    time.sleep(0.03)
    return t


def writer_clock_run(harness: Any, case: str) -> AttackOutcome:
    """One run of ``case`` on ``harness``'s (fresh) store."""
    from deltalog import Record
    from deltalog.errors import VersionNotAvailableError

    what, offset_s = CASES[case]
    outcome = AttackOutcome("writer-clocks", what, detail=case)
    preload = libfaketime()
    if preload is None:
        outcome.problems.append("libfaketime is not installed (apt-get install faketime): no skewed writer to run")
        return outcome
    store = harness.store()
    store.create_topic(TOPIC, 1)
    created = min(e.timestamp_ms for e in store.history(TOPIC, 0))
    root = str(store.root)
    acked: list[tuple[int, str, bool]] = []  # (offset, value, by the wall-clock writer)
    probes: list[tuple[int, int]] = []  # (T, appends made before T)
    for n in range(APPENDS):
        probes.append((_pause(), n))
        values = [f"{case}-{n}-{i}" for i in range(1 + harness.rng.randrange(3))]
        wall = n % 2 == 1
        if wall:
            offsets = store.append(TOPIC, 0, [Record(b"k%d" % i, v.encode()) for i, v in enumerate(values)])
        else:
            offsets = _skewed_append(root, values, offset_s, preload)
            outcome.injected += 1
        acked += [(o, v, wall) for o, v in zip(offsets, values, strict=True)]
    probes.append((_pause(), APPENDS))
    outcome.acked = len(acked)
    batches = _batches(acked)
    fresh = harness.store()
    entries = fresh.history(TOPIC, 0)
    versions = [e.version for e in entries]
    times = [e.timestamp_ms for e in entries]
    if versions != sorted(versions, reverse=True) or any(a <= b for a, b in zip(times, times[1:], strict=False)):
        outcome.problems.append(f"history out of version order or times not increasing: {list(zip(versions, times, strict=True))}")
    for t, before in probes:
        try:
            served = {r.value.decode() for r in fresh.read(TOPIC, 0, "earliest", timestamp_as_of=t)}
        except VersionNotAvailableError:
            served = set()
        after_wall = {v for n, batch in enumerate(batches) if n >= before for v, wall in batch if wall}
        early = sorted(served & after_wall)
        if early:
            outcome.changed += len(early)
            outcome.problems.append(f"as of T={t}: served {len(early)} record(s) the wall-clock writer appended "
                                    f"after T: {early[:5]}")
        if offset_s < 0:
            missing = sorted({v for batch in batches[:before] for v, _ in batch} - served)
            if missing:
                outcome.lost += len(missing)
                outcome.problems.append(f"as of T={t}: {len(missing)} record(s) acknowledged before T left out: "
                                        f"{missing[:5]}")
    try:
        fresh.read(TOPIC, 0, "earliest", timestamp_as_of=created - HOUR_S * 1000 // 2)
        outcome.problems.append("a time before the topic was created read data instead of VersionNotAvailableError")
    except VersionNotAvailableError:
        outcome.errors_named += 1
    latest = [(r.offset, r.value.decode()) for r in fresh.read(TOPIC, 0, "earliest")]
    expected = sorted((o, v) for o, v, _ in acked)
    if latest != expected:
        outcome.lost += len(set(expected) - set(latest))
        outcome.changed += len(set(latest) - set(expected))
        outcome.problems.append(f"the latest read holds {len(latest)} records, {len(expected)} acknowledged")
    harness.log(f"writer-clocks ({case}): {outcome.verdict()} ({outcome.acked} records acknowledged)"
                f"{'' if outcome.held else ': ' + str(outcome.problems[:3])}")
    return outcome


def _batches(acked: list[tuple[int, str, bool]]) -> list[list[tuple[str, bool]]]:
    """The acknowledged records grouped by append, in the order of the appends (values carry the append's index)."""
    out: dict[int, list[tuple[str, bool]]] = {}
    for _, value, wall in acked:
        out.setdefault(int(value.split("-")[-2]), []).append((value, wall))
    return [out[n] for n in sorted(out)]
