"""A series of runs of one attack class, each on a fresh store: what ``python -m tooling.reliability`` calls.

The runs take the class's cases in turn (every kind of damaged document, every clock case, every fault plan),
so ``runs`` at least the number of cases covers each once. ``clean`` adds the next cleaning pass to every
verdict (a Spark session in this process); without it the verdict reads and checks the store only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tooling.reliability.attacks import CLASSES, AttackOutcome
from tooling.reliability.harness import Harness


def _cleaner(harness: Harness) -> Callable[[], Any]:
    return lambda: harness.store().log_cleaner().clean_filthiest_logs()


def run_class(cls: str, runs: int, workdir: Path, log: Callable[[str], None], *, seed: int = 0, clean: bool = True,
              spark: Any = None, s3: Any = None) -> list[AttackOutcome]:
    """``runs`` runs of attack class ``cls`` (a key of :data:`~tooling.reliability.attacks.CLASSES`) under
    ``workdir``. ``s3`` (a started :class:`tooling.services.S3Server`) is the store-faults class's server; None:
    one is started for the series."""
    if cls not in CLASSES:
        raise ValueError(f"unknown attack class {cls!r}; one of {', '.join(CLASSES)}")
    base = workdir / cls
    base.mkdir(parents=True, exist_ok=True)

    def harness(n: int, location: str | None = None, **kw: Any) -> Harness:
        return Harness(location or str(base / f"run-{n}" / "store"), base / f"run-{n}" / "work", spark=spark,
                       seed=seed * 1000 + n, log=log, **kw)

    out: list[AttackOutcome] = []
    if cls == "state":
        from tooling.reliability.state_attacks import KINDS, state_run

        kinds = list(KINDS)
        for n in range(runs):
            h = harness(n)
            out.append(state_run(h, kinds[n % len(kinds)], clean=_cleaner(h) if clean else None))
    elif cls == "clock":
        from tooling.reliability.clock_attacks import CASES, clock_run

        cases = list(CASES)
        for n in range(runs):
            h = harness(n)
            out.append(clock_run(h, cases[n % len(cases)], clean=_cleaner(h) if clean else None))
    elif cls == "disk":
        from tooling.reliability.disk_attacks import disk_run

        for n in range(runs):
            def clean_round(store: Any) -> Any:
                return store.log_cleaner().clean_filthiest_logs()

            out.append(disk_run(lambda location, n=n: harness(n, location), base / f"run-{n}" / "disk",
                                clean=clean_round if clean else None))
    elif cls == "other-engines":
        from tooling.reliability.engine_attacks import CASES as ENGINE_CASES
        from tooling.reliability.engine_attacks import engine_run

        engine_cases = list(ENGINE_CASES)
        for n in range(runs):
            h = harness(n)
            out.append(engine_run(h, engine_cases[n % len(engine_cases)], clean=_cleaner(h) if clean else None))
    elif cls == "writer-clocks":
        out = _writer_clocks(runs, harness)
    else:
        out = _store_faults(runs, harness, log, seed=seed, clean=clean, s3=s3)
    return out


def _writer_clocks(runs: int, harness: Callable[..., Harness]) -> list[AttackOutcome]:
    from tooling.reliability.writer_clock_attacks import CASES, writer_clock_run

    cases = list(CASES)
    return [writer_clock_run(harness(n), cases[n % len(cases)]) for n in range(runs)]


def _store_faults(runs: int, harness: Callable[..., Harness], log: Callable[[str], None], *, seed: int, clean: bool,
                  s3: Any) -> list[AttackOutcome]:
    from tooling.fault_proxy import FaultProxy
    from tooling.reliability.store_fault_attacks import plans, store_fault_run
    from tooling.services import S3Server

    owned = None
    if s3 is None:
        owned = S3Server()
        s3 = owned.start()
        log(f"store faults: moto's S3 server at {s3.endpoint_url}")
    try:
        bucket = s3.create_bucket(f"reliability-{seed}-{uuid.uuid4().hex[:8]}")
        every = plans()
        out = []
        with FaultProxy(s3.endpoint_url, seed=seed, max_seconds=max(900.0, 120.0 * runs)) as proxy:
            for n in range(runs):
                h = harness(n, f"{bucket}/run-{n}", storage_options=s3.storage_options, env=s3.env)
                out.append(store_fault_run(h, proxy, every[n % len(every)], clean=_cleaner(h) if clean else None))
        return out
    finally:
        if owned is not None:
            owned.stop()
