"""The store's producer-id counter, and its rebuild from the Delta logs when its document is lost.

Kafka's ``ProducerIdManager`` never hands out an id twice: its blocks live in the controller's metadata log,
and a broker that cannot read the current block refuses to hand out ids rather than guess. Here the counter is
one document, ``_deltalog/producers/producer_ids.json`` (``{"next_producer_id": N}``). If it is deleted, starting
again at 0 would give a new producer the id of an old one; its first batch, equal to the old producer's last,
would be acknowledged with the old batch's offsets and never written. So a lost counter is rebuilt as one more
than the largest producer id any record of the store still carries:

* every partition's app-transaction ids ``deltalog.producer.<pid>...`` (read from its Delta log: the last
  checkpoint's ``txn`` actions and the commits after it; delta-rs has no call that lists them);
* the producer columns of every partition's data files (their stats' maximum ``producer_id``);
* every transactional id's document (its producer id, and the previous one while a transaction completes).

A counter that is present but damaged (not JSON, a wrong type, a negative id) is refused with a
:class:`~deltalog.errors.CorruptStateError`: deleting it lets the next allocation rebuild it.
"""

from __future__ import annotations

import json
import logging
import re

import pyarrow.parquet as pq

from deltalog.clock import WallClock
from deltalog.errors import CommitConflictError, CorruptStateError, InvalidTopicError, UnknownTopicOrPartitionError
from deltalog.log.log_manager import TOPICS_DIR, LogManager
from deltalog.log.producer_state import TRANSACTIONAL_IDS
from deltalog.log.state_docs import Document
from deltalog.storage import Storage, join

log = logging.getLogger(__name__)

PRODUCER_IDS = ("_deltalog", "producers", "producer_ids.json")
#: Kafka's producer ids are int64 and never negative.
MAX_PRODUCER_ID = 2**63 - 1
CAS_ATTEMPTS = 100
FIX = ("Delete the file: the next producer rebuilds the counter from the partitions' Delta logs and the "
       "transactional-id documents (no id is handed out twice); 'deltalog doctor' reports it meanwhile")
_APP_ID = re.compile(r"^deltalog\.producer\.(\d+)(?:\.|$)")
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")


def counter_location(storage: Storage) -> str:
    return storage.location(*PRODUCER_IDS)


def parse_counter(raw: bytes, location: str) -> int:
    """The next producer id the counter document holds; refuses damage."""
    doc = Document.parse(raw, location, "producer-id counter", FIX)
    return doc.int("next_producer_id", minimum=0, maximum=MAX_PRODUCER_ID)


def allocate(storage: Storage, logs: LogManager | None = None) -> int:
    """A producer id no other producer of the store ever got (compare-and-swap on the counter; Kafka's
    ``ProducerIdManager.generateProducerId``); a lost counter is rebuilt first (see the module doc)."""
    location = counter_location(storage)
    for _ in range(CAS_ATTEMPTS):
        current = storage.read_versioned(location)
        if current is None:
            first = rebuilt_next_id(storage, logs)
            if first:
                log.warning("%s was missing: rebuilt from the Delta logs, next producer id %d", location, first)
            if storage.create_json(location, {"next_producer_id": first + 1}) is not None:
                return first
            continue
        nxt = parse_counter(current.data, location)
        if nxt >= MAX_PRODUCER_ID:
            raise CorruptStateError(f"{location}: the producer-id counter is exhausted ({nxt}). {FIX}",
                                    location=location, fix=FIX)
        if storage.replace_json(location, {"next_producer_id": nxt + 1}, current.etag) is not None:
            return nxt
    raise CommitConflictError(f"allocating a producer id lost the race for {location} {CAS_ATTEMPTS} times")


def rebuilt_next_id(storage: Storage, logs: LogManager | None = None) -> int:
    """One more than the largest producer id the store's records and transactional-id documents carry (0 for a
    store that never had a producer)."""
    logs = logs if logs is not None else LogManager(storage, WallClock(), create=False)
    top = -1
    # every topic directory, not list_topics(): a topic whose marker is damaged is hidden there, and its
    # producer ids must not be handed out again, so its damage stops the rebuild instead
    for topic in storage.list_dirs(storage.location(TOPICS_DIR)):
        try:
            partitions = logs.partitions(topic)
        except (UnknownTopicOrPartitionError, InvalidTopicError):
            continue  # being created or deleted, or not a topic
        except CorruptStateError as e:
            location = counter_location(storage)
            raise CorruptStateError(f"{location} is missing and cannot be rebuilt while a topic's marker is "
                                    f"damaged (its partitions may hold producer ids): {e}", location=e.location,
                                    fix=e.fix) from None
        for partition in partitions:
            top = max(top, max_producer_id_of_partition(logs, topic, partition))
    return max(top, max_transactional_producer_id(storage)) + 1


def max_producer_id_of_partition(logs: LogManager, topic: str, partition: int) -> int:
    """The largest producer id in one partition's app-transaction ids and data-file stats (-1: none)."""
    plog = logs.log(topic, partition)
    top = max(app_producer_ids(logs.storage, plog.uri), default=-1)
    for f in plog.snapshot().files:
        if f.max_producer_id is not None:
            top = max(top, int(f.max_producer_id))
    return top


def app_producer_ids(storage: Storage, table_uri: str) -> set[int]:
    """The producer ids of every ``deltalog.producer.*`` app-transaction id the table's Delta log holds: those of
    its last checkpoint and of every commit after it (an id dropped by Delta's expiry is gone from both)."""
    log_dir = join(table_uri, "_delta_log")
    commits, checkpoints = {}, {}
    for info in storage.list_files(log_dir):
        name = info.location.rsplit("/", 1)[-1]
        if m := _COMMIT.match(name):
            commits[int(m.group(1))] = info.location
        elif m := _CHECKPOINT.match(name):
            checkpoints.setdefault(int(m.group(1)), []).append(info.location)
    ids: set[int] = set()
    since = -1
    if checkpoints:
        since = max(checkpoints)
        for part in checkpoints[since]:
            with storage.open_input(part) as f:
                table = pq.read_table(f, columns=["txn"])
            for txn in table.column("txn").to_pylist():
                if txn and (m := _APP_ID.match(txn.get("appId") or "")):
                    ids.add(int(m.group(1)))
    for version in sorted(v for v in commits if v > since):
        for line in storage.read_bytes(commits[version]).splitlines():
            if b'"txn"' not in line:
                continue
            txn = json.loads(line).get("txn") or {}
            if m := _APP_ID.match(txn.get("appId") or ""):
                ids.add(int(m.group(1)))
    return ids


def max_transactional_producer_id(storage: Storage) -> int:
    """The largest producer id the readable transactional-id documents name (-1: none); a damaged one is
    skipped here (its producer's records still carry its id)."""
    top = -1
    for info in storage.list_files(storage.location(*TRANSACTIONAL_IDS)):
        if not info.location.endswith(".json"):
            continue
        try:
            doc = json.loads(storage.read_bytes(info.location))
        except (FileNotFoundError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        for key in ("producer_id", "previous_producer_id"):
            value = doc.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                top = max(top, value)
    return top
