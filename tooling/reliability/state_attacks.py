"""Attack class ``state``: the documents a store keeps outside its Delta logs, damaged or lost between processes.

The Delta logs are checked by Delta's own protocol; the store's other documents (``_deltalog/``) are plain JSON
written with conditional puts, and nothing but deltalog reads them: the producer-id counter
(``producers/producer_ids.json``, Kafka's ``ProducerIdManager`` block), a transactional id's document
(``producers/transactional_ids/<sha256>.json``, Kafka's ``TransactionMetadata`` in ``__transaction_state``), a
partition's cleaning lease, the topic marker (``topics/<t>/_topic.json``, what Kafka keeps in ZooKeeper/KRaft)
and an uncleanable mark (Kafka's ``uncleanablePartitions``). Each run:

1. a producer process (idempotent; transactional for the transactional-id kinds) writes batches to a fresh store,
   and for ``transactional-id-lost-open`` dies with its last transaction open (SIGKILL);
2. the document is deleted, cut in half, or replaced by JSON of the wrong type, through the store's Storage;
3. a second producer process (idempotent: it needs a producer id) and, for the transactional kinds, a new
   process with the same transactional id (its ``init_transactions()``), write more;
4. once ``transaction.timeout.ms`` has passed, :func:`~tooling.reliability.attacks.judge`: the model, the
   coordinator's timer and the last stable offsets, every read, and (with a Spark session) the next cleaning
   pass. Every error met must be a deltalog error naming the damaged document.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tooling.reliability.attacks import AttackOutcome, finish, judge, start_producer
from tooling.reliability.model import Workload

TOPIC = "state"
WORKLOAD = Workload({TOPIC: 2}, keys=20, max_batch=5, tombstones=0.0, rolls=0.3)
TRANSACTIONAL_ID = "state-writer"
#: Short, so a run waits for it: the transaction the first producer leaves open must be aborted by then.
TRANSACTION_TIMEOUT_MS = 3_000

#: kind -> (what the report says, how the document is damaged).
KINDS: dict[str, tuple[str, str]] = {
    "producer-ids-deleted": ("`producer_ids.json` deleted", "delete"),
    "producer-ids-truncated": ("`producer_ids.json` cut in half", "truncate"),
    "producer-ids-wrong-type": ("`producer_ids.json` holding a string for the counter", "wrong-type"),
    "transactional-id-truncated": ("a transactional id's document cut in half", "truncate"),
    "transactional-id-lost-open": ("a transactional id's document deleted while its transaction is open "
                                   "(its producer SIGKILLed)", "delete"),
    "lease-truncated": ("a partition's cleaning lease cut in half", "truncate"),
    "topic-marker-truncated": ("the topic marker `_topic.json` cut in half", "truncate"),
    "uncleanable-mark-damaged": ("an uncleanable mark that is not JSON", "wrong-type"),
}


def _document(kind: str, store: Any) -> str:
    """The location of the document ``kind`` attacks (created first when nothing else makes it)."""
    from deltalog.coordinator.transaction import producer_ids
    from deltalog.log import producer_state

    storage = store.storage
    if kind.startswith("producer-ids"):
        return storage.location(*producer_ids.PRODUCER_IDS)
    if kind.startswith("transactional-id"):
        return producer_state.transactional_location(storage, TRANSACTIONAL_ID)
    if kind == "lease-truncated":
        from deltalog.log.lease import LeaseManager

        lease = LeaseManager(storage, store.clock).acquire(TOPIC, 0, "clean")
        assert lease is not None, "a fresh store's partition has no lease holder"
        lease.release()  # a finished cleaner's lease: released, not deleted
        return lease.path
    if kind == "topic-marker-truncated":
        return storage.location("topics", TOPIC, "_topic.json")
    return storage.location("_deltalog", "uncleanable", TOPIC, "1.json")


def damage(kind: str, store: Any) -> str:
    """Damage the document ``kind`` names; returns its location."""
    location = _document(kind, store)
    how = KINDS[kind][1]
    if how == "delete":
        store.storage.delete(location)
    elif how == "truncate":
        data = store.storage.read_bytes(location)
        store.storage.write_bytes(location, data[: len(data) // 2])
    elif kind == "uncleanable-mark-damaged":
        store.storage.write_bytes(location, b"\x00not json at all")
    else:
        store.storage.write_bytes(location, b'{"next_producer_id": "seven"}')
    return location


def state_run(harness: Any, kind: str, *, clean: Callable[[], Any] | None = None,
              sabotage: Callable[[Any], None] | None = None) -> AttackOutcome:
    """One run of ``kind`` on ``harness``'s (fresh) store; ``sabotage(store)``, for the tests, does something
    the verdict must catch, after the attack and before the verdict."""
    side = harness.workdir / "side"
    side.mkdir(parents=True, exist_ok=True)
    store = harness.store()
    store.create_topic(TOPIC, 2, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    transactional = kind.startswith("transactional-id")
    first = {"mode": "transactional", "transactional_id": TRANSACTIONAL_ID,
             "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS} if transactional else {"mode": "idempotent"}
    if kind == "transactional-id-lost-open":
        first["open_transaction"] = "die"
    errors: list[tuple[str, Any]] = []
    proc, logfile = start_producer(harness, side, "a", WORKLOAD, batches=6, tolerate=True, **first)
    if (e := finish(proc, logfile)) is not None:
        errors.append(("producer a, before the attack", e))
    location = damage(kind, store)
    proc, logfile = start_producer(harness, side, "b", WORKLOAD, batches=6, tolerate=True, mode="idempotent")
    if (e := finish(proc, logfile)) is not None:
        errors.append(("producer b (a new producer id)", e))
    if transactional:
        proc, logfile = start_producer(harness, side, "c", WORKLOAD, batches=3, tolerate=True, **{
            **first, "open_transaction": None})
        if (e := finish(proc, logfile)) is not None:
            errors.append((f"producer c ({TRANSACTIONAL_ID!r} again: init_transactions)", e))
        time.sleep(TRANSACTION_TIMEOUT_MS / 1000 + 1.0)  # every transaction past its timeout, on every clock here
    if kind == "uncleanable-mark-damaged":
        # The damaged mark keeps its partition uncleanable (the safe direction): the operator's way out is what
        # doctor says, 'deltalog cleaner reset-uncleanable'. The run holds only if doctor names the file.
        from deltalog.cleaner.uncleanable import UncleanablePartitions
        from deltalog.state_check import scan_state

        named = [p for p in scan_state(store.storage)[1] if Path(location).name in p.detail + p.name]
        if named:
            UncleanablePartitions(store.storage).reset()
        else:
            errors.append(("doctor", RuntimeError(f"doctor did not name the damaged mark {location}")))
    if kind == "lease-truncated":  # a damaged lease holds its partition for moments (lease.UNREADABLE_GRACE_MS)
        from deltalog.log.lease import UNREADABLE_GRACE_MS

        time.sleep(UNREADABLE_GRACE_MS / 1000 + 0.5)
    if sabotage is not None:
        sabotage(store)
    outcome = AttackOutcome("state", KINDS[kind][0], injected=1, detail=kind)
    judge(outcome, harness.store(), side, names=(Path(location).name,), txn_timers=True, clean=clean,
          extra_errors=errors,
          recover_hanging_after_ms=TRANSACTION_TIMEOUT_MS if kind == "transactional-id-lost-open" else None)
    harness.log(f"state ({kind}): {outcome.verdict()} ({outcome.acked} records acknowledged, "
                f"{outcome.errors_named} error(s) naming the file){'' if outcome.held else ': ' + str(outcome.problems[:3])}")
    return outcome
