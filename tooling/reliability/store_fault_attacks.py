"""Attack class ``store-faults``: the object store's answers fail between the client and the store.

An object store's client loses answers: a gateway answers 500 after the backend stored the object, a
connection resets before the answer arrives, or the request never gets there. A Delta commit whose PUT landed
but whose answer was lost must not be taken for a lost race (its data files removed under a committed
version), and a failed write must leave all of its batch or none. Kafka's producer has the same problem with a
produce request whose response is lost (``Sender`` retries it, and the broker's ``ProducerStateManager`` answers
the retry with the batch's first offsets).

Each run starts three producer processes (idempotent, transactional, and plain ``store.append``) whose store
endpoint is :class:`tooling.fault_proxy.FaultProxy` in front of the S3 server, with one fault plan: which
requests (PUTs of Delta commits or of data files, 30% of them by a seeded draw; or the first three of the
store's own documents), before or after the store applied them, a 500 or a dropped connection. The producers
write through it, their failed sends written to their side files; then the faults are cleared and
:func:`~tooling.reliability.attacks.judge` reads the store straight from the S3 server (and, with a Spark
session, runs the next cleaning pass there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tooling.reliability.attacks import AttackOutcome, finish, judge, start_producer
from tooling.reliability.model import Workload

TOPIC = "faulty"
WORKLOAD = Workload({TOPIC: 2}, keys=20, max_batch=5, tombstones=0.0, rolls=0.2)
#: Which PUTs a plan fails: (what the report says, the key pattern searched in the request's bucket/key path,
#: the probability of each matching PUT, at most how many). The store's documents are few (a producer id, a
#: transactional id's state changes), so their plan fails the first ones; commits and data files, a share.
TARGETS = {
    "commit": ("Delta commits", r"/_delta_log/", 0.3, None),
    "data": ("data files", r"\.parquet$", 0.3, None),
    "state": ("the store's documents", r"/_deltalog/", 1.0, 3),
}
WHEN = ("after", "before")
ACTIONS = ("500", "drop")
#: The transactional producer's timeout: a transaction its failed answers left open is aborted by the
#: coordinator's timer after it, before the verdict.
TRANSACTION_TIMEOUT_MS = 3_000


def plans() -> list[tuple[str, str, str]]:
    """Every (target, when, action), the commits' first: the order runs take them in."""
    return [(t, w, a) for t in TARGETS for w in WHEN for a in ACTIONS]


def describe(plan: tuple[str, str, str]) -> str:
    target, when, action = plan
    return (f"PUTs of {TARGETS[target][0]}: {'a 500' if action == '500' else 'connection dropped'} "
            f"{'after the store applied them' if when == 'after' else 'before they reach the store'}")


def store_fault_run(harness: Any, proxy: Any, plan: tuple[str, str, str], *, clean: Callable[[], Any] | None = None,
                    batches: int = 8, sabotage: Callable[[Any], None] | None = None) -> AttackOutcome:
    """One run of ``plan`` on ``harness``'s (fresh) S3 store, its producers going through ``proxy`` (a started
    :class:`~tooling.fault_proxy.FaultProxy` in front of the store's endpoint)."""
    target, when, action = plan
    side = harness.workdir / "side"
    side.mkdir(parents=True, exist_ok=True)
    store = harness.store()
    store.create_topic(TOPIC, 2, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    for partition in range(2):
        store.log(TOPIC, partition).head()
    options = proxy.storage_options(harness.storage_options)
    env = {"AWS_ENDPOINT_URL": proxy.url, "AWS_ENDPOINT_URL_S3": proxy.url}
    proxy.clear()
    _, key, probability, times = TARGETS[target]
    proxy.add(method="PUT", key=key, when=when, action=action, times=times, probability=probability)
    producers = (("idem", {"mode": "idempotent"}), ("plain", {"mode": "append"}),
                 ("txn", {"mode": "transactional", "transactional_id": "faulty-writer",
                          "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS}))
    started = [start_producer(harness, side, name, WORKLOAD, batches=batches, tolerate=True, env=env,
                              storage_options=options, **spec) for name, spec in producers]
    errors: list[tuple[str, Any]] = []
    for (proc, logfile), (name, _) in zip(started, producers, strict=True):
        if (e := finish(proc, logfile)) is not None:
            errors.append((f"the {name} producer", e))
    injected = sum(proxy.fired())
    proxy.clear()
    time.sleep(TRANSACTION_TIMEOUT_MS / 1000 + 1.0)  # a transaction left open is past its timeout
    if sabotage is not None:
        sabotage(store)
    outcome = AttackOutcome("store-faults", describe(plan), injected=injected, detail="/".join(plan))
    judge(outcome, harness.store(), side, txn_timers=True, clean=clean, extra_errors=errors)
    harness.log(f"store faults ({'/'.join(plan)}): {injected} fault(s) injected; {outcome.verdict()} "
                f"({outcome.acked} records acknowledged){'' if outcome.held else ': ' + str(outcome.problems[:3])}")
    return outcome
