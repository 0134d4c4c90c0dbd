"""``deltalog doctor``'s look at the documents kept beside the Delta logs, and at hanging transactions.

Each document under ``_deltalog/`` (and each topic's marker) is read through the same validation the code that
uses it applies (:mod:`deltalog.log.state_docs`), so the doctor reports exactly what would fail, naming the file
and the fix: the producer-id counter, every transactional id's document, every topic marker, every uncleanable
mark, the cleaner's last figures and every user's SCRAM credentials. Transactions that hang (open with no coordinator state left to end them,
see :mod:`deltalog.coordinator.transaction.hanging`) are reported too, with the command that ends each one. No Spark is needed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from deltalog.errors import CorruptStateError, DeltalogError
from deltalog.storage import Storage

#: What the doctor says of a problem: FAIL (it stops something) or WARN (nothing depends on it).
FAIL, WARN = "FAIL", "WARN"


@dataclass(frozen=True)
class StateProblem:
    """One damaged document, or one hanging transaction."""

    status: str
    name: str
    detail: str
    fix: str


def scan_state(storage: Storage, *, now_ms: int | None = None) -> tuple[int, list[StateProblem]]:
    """(documents read, problems) for the store at ``storage``."""
    from deltalog.cleaner.metrics import CLEANER_STATE_DIR
    from deltalog.cleaner.uncleanable import UNCLEANABLE_DIR
    from deltalog.coordinator.transaction import hanging, producer_ids
    from deltalog.coordinator.transaction.transaction_coordinator import TransactionMetadata
    from deltalog.log import producer_state
    from deltalog.log.log_manager import STATE_DIR, TOPIC_MARKER, TOPICS_DIR, TopicMarker

    problems: list[StateProblem] = []
    count = 0

    def each(location: str, check: Callable[[bytes, str], object], status: str = FAIL) -> None:
        nonlocal count
        found = storage.read_versioned(location)
        if found is None:
            return
        count += 1
        try:
            check(found.data, location)
        except CorruptStateError as e:
            message = str(e)
            detail = message[: -len(e.fix)].rstrip(" .") if e.fix and message.endswith(e.fix) else message
            problems.append(StateProblem(status, "state document", detail, e.fix or "delete the file"))

    each(storage.location(*producer_ids.PRODUCER_IDS), producer_ids.parse_counter)
    for info in storage.list_files(storage.location(*producer_state.TRANSACTIONAL_IDS)):
        if info.location.endswith(".json"):
            each(info.location, TransactionMetadata.parse)

    def marker(raw: bytes, location: str) -> None:
        if TopicMarker.parse(raw) is None:
            fix = ("The topic is hidden from every listing until it is fixed: restore it from a backup, or remove "
                   "it and the topic's files to drop the topic")
            raise CorruptStateError(f"{location}: the topic marker is not valid JSON or holds a wrong state, "
                                    f"partition count or type. {fix}", location=location, fix=fix)

    for topic in storage.list_dirs(storage.location(TOPICS_DIR)):
        each(storage.location(TOPICS_DIR, topic, TOPIC_MARKER), marker)

    def json_object(what: str, fix: str) -> Callable[[bytes, str], None]:
        def check(raw: bytes, location: str) -> None:
            try:
                ok = isinstance(json.loads(raw), dict)
            except ValueError:
                ok = False
            if not ok:
                raise CorruptStateError(f"{location}: the {what} is not a JSON object. {fix}", location=location,
                                        fix=fix)
        return check

    from deltalog import scram

    for info in storage.list_files(storage.location(*scram.USERS_DIR)):
        if info.location.endswith(".json"):
            each(info.location, scram.parse_document)
    for info in storage.list_files(storage.location(STATE_DIR, UNCLEANABLE_DIR)):
        each(info.location, json_object(
            "uncleanable mark", "The partition stays uncleanable: 'deltalog cleaner reset-uncleanable' clears it"))
    for info in storage.list_files(storage.location(STATE_DIR, CLEANER_STATE_DIR)):
        if info.location.endswith(".json"):
            each(info.location, json_object("cleaner figures", "Only reports read it: delete the file"), WARN)

    if not any(p.status == FAIL and "topic marker" in p.detail for p in problems):
        problems += hanging_problems(storage, now_ms=now_ms, hanging=hanging)
    return count, problems


def hanging_problems(storage: Storage, *, now_ms: int | None, hanging) -> list[StateProblem]:  # noqa: ANN001
    from deltalog.clock import WallClock
    from deltalog.log.log_manager import LogManager

    logs = LogManager(storage, WallClock(), create=False)
    unreadable: list = []
    try:
        found = hanging.find_hanging(logs, now_ms=now_ms, damaged=[], unreadable=unreadable)
    except DeltalogError as e:
        return [StateProblem(WARN, "hanging transactions", f"not searched: {e}", "see the rows above")]
    skipped = [StateProblem(WARN, "hanging transactions", f"a partition was not searched: {e}",
                            "see the damage rows: repair the partition, then run doctor again") for e in unreadable]
    return skipped + [StateProblem(
        WARN, f"hanging {t.topic}-{t.partition}",
        f"producer {t.producer_id} (epoch {t.producer_epoch}) has a transaction open since offset {t.start_offset}, "
        f"last written {(logs.clock.now_ms() if now_ms is None else now_ms) - t.last_timestamp_ms} ms ago, that no "
        "transactional id will end: read_committed readers and the cleaner stop at that offset",
        f"deltalog transactions abort --topic {t.topic} --partition {t.partition} --start-offset {t.start_offset}")
        for t in found]
