"""Attack class ``clock``: a producer process whose clock is a day ahead of, or behind, everyone else's.

Processes sharing a store run on different machines, and their clocks disagree; Kafka has one clock that
matters for a transaction, the coordinator broker's (``TransactionMetadata.txnStartTimestamp`` is stamped by the
``TransactionCoordinator``, and ``TransactionStateManager.timedOutTransactions`` compares it with the same
broker's clock). Here whoever holds a transactional id drives its protocol, so a producer's skewed clock
(:class:`tooling.reliability.worker.SkewedClock`, the store's ``clock`` hook) may leak into the store's times.
Each run takes one of four cases:

* ``ahead-dies`` / ``behind-dies``: the skewed producer commits a few transactions, opens one more, sends a
  batch in it and SIGKILLs itself. Once its ``transaction.timeout.ms`` has passed on the store's (wall) clock the
  coordinator's timer must abort it: no ``read_committed`` reader, and no cleaner, may be held at its last
  stable offset for a day;
* ``ahead-lives`` / ``behind-lives``: the skewed producer keeps its transaction open (well inside its
  timeout) while the coordinator's timer runs on the wall clock; then it commits. A producer whose clock is
  behind must not be fenced as timed out (Kafka fences only a transaction older than its timeout); its
  records must then be committed.

The verdict is :func:`~tooling.reliability.attacks.judge`'s (records lost, offsets changed, reads stuck,
unreadable partitions, errors), plus "fenced wrongly" for a live producer whose commit was refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tooling.reliability.attacks import AttackOutcome, finish, judge, start_producer
from tooling.reliability.model import Workload
from tooling.reliability.worker import IN_TRANSACTION

TOPIC = "skewed"
WORKLOAD = Workload({TOPIC: 2}, keys=20, max_batch=5, tombstones=0.0, rolls=0.3)
DAY_MS = 86_400_000
#: A dead producer's transaction must be aborted this soon after it opened (plus the harness's wait).
DEAD_TIMEOUT_MS = 3_000
#: A live producer's transaction stays open a few seconds, well inside this.
LIVE_TIMEOUT_MS = 120_000

CASES: dict[str, tuple[str, int]] = {
    "ahead-dies": ("producer clock 1 day ahead, SIGKILLed mid-transaction", DAY_MS),
    "behind-dies": ("producer clock 1 day behind, SIGKILLed mid-transaction", -DAY_MS),
    "ahead-lives": ("producer clock 1 day ahead, transaction open while the timer runs", DAY_MS),
    "behind-lives": ("producer clock 1 day behind, transaction open while the timer runs", -DAY_MS),
}


def clock_run(harness: Any, case: str, *, clean: Callable[[], Any] | None = None,
              sabotage: Callable[[Any], None] | None = None, dead_timeout_ms: int = DEAD_TIMEOUT_MS) -> AttackOutcome:
    """One run of ``case`` on ``harness``'s (fresh) store; ``sabotage(store)``, for the tests, does something the
    verdict must catch before it is given. The verdict comes :data:`DEAD_TIMEOUT_MS` after a dead producer's
    transaction opened, whatever ``dead_timeout_ms`` the transaction has (the tests lengthen it to make reads
    stuck on purpose)."""
    what, offset = CASES[case]
    side = harness.workdir / "side"
    side.mkdir(parents=True, exist_ok=True)
    store = harness.store()
    store.create_topic(TOPIC, 2, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    outcome = AttackOutcome("clock", what, injected=1, detail=case)
    errors: list[tuple[str, Any]] = []
    # a bystander on the wall clock, writing beside the skewed producer
    bystander = start_producer(harness, side, "wall", WORKLOAD, batches=6, mode="idempotent", tolerate=True)
    spec = {"mode": "transactional", "transactional_id": f"skewed-{case}", "clock_offset_ms": offset,
            "tolerate": True}
    if case.endswith("dies"):
        proc, logfile = start_producer(harness, side, "skewed", WORKLOAD, batches=4, open_transaction="die",
                                       transaction_timeout_ms=dead_timeout_ms, **spec)
        if (e := finish(proc, logfile)) is not None:
            errors.append(("the skewed producer", e))
        if IN_TRANSACTION not in logfile.read_text(errors="replace"):
            outcome.problems.append(f"the skewed producer never opened its last transaction: "
                                    f"{logfile.read_text(errors='replace')[-1500:]}")
        time.sleep(DEAD_TIMEOUT_MS / 1000 + 1.0)
    else:
        go = harness.workdir / "go"
        proc, logfile = start_producer(harness, side, "skewed", WORKLOAD, batches=4, open_transaction=f"wait:{go}",
                                       transaction_timeout_ms=LIVE_TIMEOUT_MS, **spec)
        if harness._wait_for(logfile, IN_TRANSACTION, proc, 300) is None:
            outcome.problems.append(f"the skewed producer never opened its last transaction: "
                                    f"{logfile.read_text(errors='replace')[-1500:]}")
        try:
            aborted = harness.store().log_cleaner().maintenance.abort_timed_out_transactions()
        except Exception as e:  # noqa: BLE001 - the verdict sorts it
            errors.append(("the coordinator's timer, during the transaction", e))
            aborted = []
        go.touch()
        if (e := finish(proc, logfile)) is not None:
            errors.append(("the skewed producer", e))
        answers = [json.loads(line) for line in logfile.read_text(errors="replace").splitlines()
                   if line.startswith('{"committed"')]
        if aborted or (answers and not answers[-1]["committed"]):
            refusal = answers[-1] if answers else {}
            outcome.fenced.append(f"fenced wrongly: the coordinator's timer aborted {aborted} "
                                    f"{LIVE_TIMEOUT_MS // 1000} s inside its transaction.timeout.ms, and its commit "
                                    f"got {refusal.get('type')}: {str(refusal.get('message'))[:300]}")
        elif not answers:
            outcome.problems.append("the live producer never answered its commit")
    if (e := finish(*bystander)) is not None:
        errors.append(("the bystander producer", e))
    if sabotage is not None:
        sabotage(store)
    judge(outcome, harness.store(), side, txn_timers=True, clean=clean, extra_errors=errors)
    harness.log(f"clock ({case}): {outcome.verdict()} ({outcome.acked} records acknowledged)"
                f"{'' if outcome.held else ': ' + str(outcome.problems[:3])}")
    return outcome
