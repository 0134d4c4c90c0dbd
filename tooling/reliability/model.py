"""What producers were told, and the store checked against it: the harness's independent model.

Every producer (:class:`Producer`, in the harness's process or in a process of its own) writes two kinds of
line to a side file of its own, each with one ``write`` on a file opened ``O_APPEND``, so a SIGKILL leaves
every line that was written whole (a torn last line is ignored):

* ``intent``: the batch it is about to append (topic, partition, every record with a unique id), before
  the append is called;
* ``ack``: the offsets the append returned, after it returned.

A batch with an intent and no ack was in flight when its producer died: it may or may not be in the log
(its Delta commit may have landed before the kill), but all or nothing of it. Every record carries its id
as a header, so a record read back says which intent it came from.

:func:`verify` reads every partition back through the public API and checks, from the side files alone
(never from deltalog's own bookkeeping):

A. offsets strictly increase in a read (order kept, no offset twice);
B. every record read is one a producer sent, with its key, value and timestamp unchanged, at the offset
   its producer was told (acknowledged), or in a gap no acknowledged batch holds (in flight), each batch
   in flight contiguous; no id appears twice;
C. every acknowledged record is present unless it was allowed to go: a record of the same key is present
   at a higher offset (superseded), or it lies below the log start offset and is older than
   ``retention.ms`` (retention, delete policy only), or a tombstone of its key at or after it is older
   than ``delete.retention.ms`` (the tombstone's delete horizon may have passed);
D. for each key, the records still present form a suffix of that key's records in offset order: cleaning
   removes older records of a key before newer ones, so an old value never comes back once a newer one
   (or a tombstone) is gone;
E. the log end offset lies past every acknowledged offset;
F. (:func:`verify_compacted`, once nothing writes) the cleaned section holds each key once, and no
   partition is marked uncleanable.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalog.log.record import Record

#: The header that carries a record's id: ``<producer>:<batch>:<index>``.
ID_HEADER = "tooling.reliability.id"
#: Slack on a tombstone's age before check C lets it be gone: a pass reads its clock just before its snapshot,
#: so a delete horizon may start a little before the tombstone's append.
HORIZON_SLACK_MS = 2_000


def wall_ms() -> int:
    return int(time.time() * 1000)


# -- the side files --------------------------------------------------------------------------------------


class SideFile:
    """One producer's log of intents and acknowledgements (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, entry: Mapping[str, Any]) -> None:
        os.write(self._fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class SentRecord:
    id: str
    key: str | None
    value: str | None
    timestamp_ms: int

    def as_record(self) -> Record:
        return Record(self.key, self.value, headers={ID_HEADER: self.id}, timestamp_ms=self.timestamp_ms)


@dataclass
class Batch:
    """One append a producer meant to make, and (if it returned) the offsets it was told."""

    id: str
    topic: str
    partition: int
    records: list[SentRecord]
    intent_ms: int
    offsets: list[int] | None = None
    ack_ms: int | None = None

    @property
    def acked(self) -> bool:
        return self.offsets is not None


def read_side_errors(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Every ``error`` line of the side files: the sends that raised (see :class:`Producer`)."""
    return [entry for entry in _side_entries(paths) if "error" in entry]


def _side_entries(paths: Iterable[str | os.PathLike[str]]) -> Iterator[dict[str, Any]]:
    """The lines of the side files as JSON objects, file by file; a line cut by a kill is skipped."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


def read_side_files(paths: Iterable[str | os.PathLike[str]]) -> list[Batch]:
    """Every batch of every side file, in the order each producer wrote them."""
    batches: dict[str, Batch] = {}
    for entry in _side_entries(paths):
        if "intent" in entry:
            batches[entry["intent"]] = Batch(
                entry["intent"], entry["topic"], entry["partition"],
                [SentRecord(r["id"], r["key"], r["value"], r["ts"]) for r in entry["records"]], entry["t"])
        elif "ack" in entry and entry["ack"] in batches:
            batches[entry["ack"]].offsets = entry["offsets"]
            batches[entry["ack"]].ack_ms = entry["t"]
    return list(batches.values())


# -- producers ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What a producer appends: batches of 1..``max_batch`` records to random partitions of ``topics``, keys
    from ``keys`` per topic (so producers supersede each other), a tombstone with ``tombstones`` probability,
    a roll after a batch with ``rolls`` probability, timestamps from the wall clock minus ``age_ms``."""

    topics: Mapping[str, int]  # topic -> partitions
    keys: int = 40
    max_batch: int = 8
    tombstones: float = 0.1
    rolls: float = 0.3
    age_ms: Mapping[str, int] = field(default_factory=dict)  # topic -> how old its records' timestamps are
    pause_s: float = 0.0
    value_bytes: int = 0  # random hex after each value's id (the full-disk attack fills a disk with it)

    def as_json(self) -> dict[str, Any]:
        return {"topics": dict(self.topics), "keys": self.keys, "max_batch": self.max_batch,
                "tombstones": self.tombstones, "rolls": self.rolls, "age_ms": dict(self.age_ms),
                "pause_s": self.pause_s, "value_bytes": self.value_bytes}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Workload:
        return cls(**d)


class Producer:
    """Appends a :class:`Workload` to a store, recording intents and acknowledgements in its side file.

    ``send(topic, partition, records) -> offsets`` is how a batch goes out (default: ``store.append``; the
    attacks send through Kafka's idempotent or transactional producer). An exception of a type in ``tolerate``
    is written to the side file as the batch's ``error`` (its type, message and whether it is a
    :class:`~deltalog.errors.DeltalogError`) and the producer goes on: the batch stays unacknowledged, so the
    model allows it to have landed whole or not at all, as Kafka's producer leaves a batch whose send failed."""

    def __init__(self, store: Any, name: str, side_file: str | os.PathLike[str], workload: Workload,
                 seed: int | None = None, *, send: Callable[[str, int, list[Record]], Sequence[int]] | None = None,
                 tolerate: tuple[type[BaseException], ...] = ()) -> None:
        self.store = store
        self.name = name
        self.side = SideFile(side_file)
        self.workload = workload
        self.rng = random.Random(seed)
        self.batches = 0
        self.errors = 0
        self.last: tuple[str, list[int]] = ("", [])
        self._send = send or (lambda topic, partition, records: self.store.append(topic, partition, records))
        self._tolerate = tolerate

    def batch(self, topic: str | None = None, partition: int | None = None, *, ack: bool = True) -> list[int]:
        """Append one random batch (to ``topic``/``partition`` if given); returns its offsets. ``ack=False``: the
        offsets are written as ``pending``, not acknowledged (a batch in a transaction still open: it counts once
        :meth:`acknowledge` is called, after its commit)."""
        w, rng = self.workload, self.rng
        topic = topic if topic is not None else rng.choice(sorted(w.topics))
        partition = partition if partition is not None else rng.randrange(w.topics[topic])
        now = wall_ms()
        ts = now - w.age_ms.get(topic, 0)
        batch_id = f"{self.name}:{self.batches}"
        self.batches += 1
        records = [SentRecord(f"{batch_id}:{i}", f"k{rng.randrange(w.keys)}",
                              None if rng.random() < w.tombstones else f"{batch_id}:{i}{self._pad()}", ts)
                   for i in range(rng.randint(1, w.max_batch))]
        self.side.write({"intent": batch_id, "topic": topic, "partition": partition, "t": now,
                         "records": [{"id": r.id, "key": r.key, "value": r.value, "ts": r.timestamp_ms}
                                     for r in records]})
        try:
            offsets = [int(o) for o in self._send(topic, partition, [r.as_record() for r in records])]
        except self._tolerate as e:
            from deltalog.errors import DeltalogError

            self.errors += 1
            self.side.write({"error": batch_id, "type": type(e).__name__, "message": str(e)[:2000],
                             "deltalog": isinstance(e, DeltalogError), "t": wall_ms()})
            return []
        self.side.write({"ack" if ack else "pending": batch_id, "offsets": offsets, "t": wall_ms()})
        self.last = (batch_id, offsets)
        if rng.random() < w.rolls:
            self.store.roll(topic, partition)
        return offsets

    def _pad(self) -> str:
        """Random hex (it does not compress away), ``value_bytes`` long; "" by default."""
        n = self.workload.value_bytes
        return f":{self.rng.randbytes((n + 1) // 2).hex()[:n]}" if n else ""

    def acknowledge(self) -> None:
        """Acknowledge the last batch (sent with ``ack=False``), once its transaction committed."""
        batch_id, offsets = self.last
        self.side.write({"ack": batch_id, "offsets": offsets, "t": wall_ms()})

    def run(self, *, batches: int | None = None, seconds: float | None = None) -> int:
        """Append ``batches`` batches, or for ``seconds``; returns how many were appended."""
        deadline = None if seconds is None else time.monotonic() + seconds
        n = 0
        while (batches is None or n < batches) and (deadline is None or time.monotonic() < deadline):
            self.batch()
            n += 1
            if self.workload.pause_s:
                time.sleep(self.rng.uniform(0, 2 * self.workload.pause_s))
        return n

    def close(self) -> None:
        self.side.close()


# -- verification --------------------------------------------------------------------------------------------


@dataclass
class PartitionReport:
    topic: str
    partition: int
    records_read: int = 0
    acked: int = 0  # acknowledged records sent to this partition
    acked_present: int = 0
    superseded: int = 0  # acknowledged, gone, and a newer record of the key is present
    expired_tombstones: int = 0  # acknowledged, gone under an old enough tombstone
    retained_out: int = 0  # acknowledged, gone by retention (below the log start, older than retention.ms)
    tombstones_acked: int = 0
    tombstones_present: int = 0  # acknowledged tombstones still in the log (the others were cleaned away)
    in_flight_landed: int = 0  # records of unacknowledged batches found in the log
    landed_batches: list[str] = field(default_factory=list)  # unacknowledged batches found in the log
    lost: list[str] = field(default_factory=list)  # check C
    changed: list[str] = field(default_factory=list)  # check B: content or offset differs
    duplicated: list[str] = field(default_factory=list)  # check A/B: an offset or id twice
    unknown: list[str] = field(default_factory=list)  # check B: a record no producer sent
    order: list[str] = field(default_factory=list)  # checks A and D
    other: list[str] = field(default_factory=list)  # check E, F

    @property
    def problems(self) -> list[str]:
        return [*self.lost, *self.changed, *self.duplicated, *self.unknown, *self.order, *self.other]


@dataclass
class Verification:
    """The outcome of one :func:`verify`: per-partition reports and the totals the figures use."""

    partitions: list[PartitionReport]
    at_ms: int

    def total(self, name: str) -> int:
        return sum(len(v) if isinstance(v := getattr(p, name), list) else v for p in self.partitions)

    @property
    def problems(self) -> list[str]:
        return [f"{p.topic}-{p.partition}: {m}" for p in self.partitions for m in p.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (f"{self.total('records_read')} records read, {self.total('acked')} acknowledged "
                f"({self.total('acked_present')} present, {self.total('superseded')} superseded, "
                f"{self.total('expired_tombstones')} under expired tombstones, {self.total('retained_out')} "
                f"deleted by retention), {self.total('in_flight_landed')} in-flight records landed; lost "
                f"{self.total('lost')}, changed {self.total('changed')}, duplicated {self.total('duplicated')}, "
                f"unknown {self.total('unknown')}, out of order {self.total('order')}")


def verify(store: Any, batches: Sequence[Batch], *, now_ms: int | None = None) -> Verification:
    """Check every partition the batches went to against the model (checks A to E of the module docstring)."""
    now = wall_ms() if now_ms is None else now_ms
    by_partition: dict[tuple[str, int], list[Batch]] = {}
    for b in batches:
        by_partition.setdefault((b.topic, b.partition), []).append(b)
    reports = [_verify_partition(store, topic, partition, bs, now)
               for (topic, partition), bs in sorted(by_partition.items())]
    return Verification(reports, now)


def _verify_partition(store: Any, topic: str, partition: int, batches: list[Batch], now: int) -> PartitionReport:
    rep = PartitionReport(topic, partition)
    config = store.topic_config(topic)
    head = store.log(topic, partition).head()
    records = store.read(topic, partition, "earliest")
    rep.records_read = len(records)
    sent: dict[str, tuple[Batch, int, SentRecord]] = {r.id: (b, i, r) for b in batches
                                                      for i, r in enumerate(b.records)}
    acked_at: dict[int, str] = {}
    for b in batches:
        if b.acked:
            assert b.offsets is not None
            if len(b.offsets) != len(b.records) or b.offsets != list(range(b.offsets[0], b.offsets[0] + len(b.records))):
                rep.order.append(f"batch {b.id} was told offsets {b.offsets}, not {len(b.records)} contiguous ones")
            for o, r in zip(b.offsets, b.records, strict=False):
                acked_at[o] = r.id
            rep.acked += len(b.records)

    # A and B: what was read
    present: dict[str, int] = {}  # id -> offset
    landed_base: dict[str, int] = {}  # in-flight batch -> offset of its first record
    previous = None
    for r in records:
        if previous is not None and r.offset <= previous:
            (rep.duplicated if r.offset == previous else rep.order).append(
                f"offset {r.offset} read after offset {previous}")
        previous = r.offset
        ids = [v for name, v in r.headers if name == ID_HEADER]
        rid = ids[0].decode() if ids and ids[0] is not None else None
        if rid is None or rid not in sent:
            rep.unknown.append(f"offset {r.offset}: a record no producer sent (id {rid!r}, key {r.key!r})")
            continue
        if rid in present:
            rep.duplicated.append(f"record {rid} at offsets {present[rid]} and {r.offset}")
            continue
        present[rid] = r.offset
        batch, index, s = sent[rid]
        expected = (None if s.key is None else s.key.encode(), None if s.value is None else s.value.encode(),
                    s.timestamp_ms)
        if (r.key, r.value, r.timestamp_ms) != expected:
            rep.changed.append(f"offset {r.offset}: record {rid} reads {(r.key, r.value, r.timestamp_ms)}, "
                               f"was sent as {expected}")
        if batch.acked:
            assert batch.offsets is not None
            if batch.offsets[index] != r.offset:
                rep.changed.append(f"record {rid} was told offset {batch.offsets[index]}, reads at {r.offset}")
        else:
            rep.in_flight_landed += 1
            if r.offset in acked_at:
                rep.changed.append(f"in-flight record {rid} reads at offset {r.offset}, which {acked_at[r.offset]} "
                                   "was told")
            base = landed_base.setdefault(batch.id, r.offset - index)
            if r.offset - index != base:
                rep.order.append(f"in-flight batch {batch.id} is not contiguous (record {index} at {r.offset})")

    rep.landed_batches = sorted(landed_base)

    # C and D, key by key, over every record whose offset is known (acknowledged, or landed in flight)
    known: dict[str, list[tuple[int, SentRecord, Batch]]] = {}
    for b in batches:
        base = b.offsets[0] if b.acked else landed_base.get(b.id)  # type: ignore[index]
        if base is None:
            continue
        for i, r in enumerate(b.records):
            known.setdefault(r.key or "", []).append((base + i, r, b))
    in_flight_tombstones: dict[str, list[Batch]] = {}
    for b in batches:
        if not b.acked and b.id not in landed_base:
            for r in b.records:
                if r.value is None:
                    in_flight_tombstones.setdefault(r.key or "", []).append(b)
    horizon = config.delete_retention_ms - HORIZON_SLACK_MS
    for key, entries in known.items():
        entries.sort(key=lambda e: e[0])
        present_offsets = [o for o, r, _ in entries if r.id in present]
        newest_present = max(present_offsets, default=-1)
        # D: present records of a key form a suffix of its records
        first_present = next((i for i, (_, r, _) in enumerate(entries) if r.id in present), len(entries))
        gone_after = [(o, r) for o, r, _ in entries[first_present:] if r.id not in present]
        for o, r in gone_after:
            rep.order.append(f"key {key!r}: offset {o} ({r.id}) is gone while the older offset "
                             f"{entries[first_present][0]} is still there (an older value outlived a newer one)")
        tombstone_times = [(o, b.intent_ms) for o, r, b in entries if r.value is None]
        for o, r, b in entries:
            if not b.acked:
                continue
            if r.value is None:
                rep.tombstones_acked += 1
                rep.tombstones_present += r.id in present
            if r.id in present:
                rep.acked_present += 1
            elif newest_present > o:
                rep.superseded += 1
            elif any(t_o >= o and t_ms + horizon <= now for t_o, t_ms in tombstone_times) or any(
                    fb.intent_ms + horizon <= now for fb in in_flight_tombstones.get(key, ())):
                rep.expired_tombstones += 1
            elif config.delete and config.retention_ms >= 0 and o < head.log_start_offset and \
                    r.timestamp_ms < now - config.retention_ms:
                rep.retained_out += 1
            else:
                rep.lost.append(f"acknowledged record {r.id} (offset {o}, key {key!r}) is gone and nothing "
                                f"allows it (log start {head.log_start_offset})")
    # E
    if acked_at and head.log_end_offset <= max(acked_at):
        rep.other.append(f"log end offset {head.log_end_offset} is not past acknowledged offset {max(acked_at)}")
    return rep


def verify_compacted(store: Any, batches: Sequence[Batch]) -> list[str]:
    """Check F, for when nothing writes any more and a clean has run: each key once in the cleaned section
    of every compacted partition, and no partition marked uncleanable."""
    problems: list[str] = []
    partitions = sorted({(b.topic, b.partition) for b in batches})
    for topic, partition in partitions:
        if not store.topic_config(topic).compact:
            continue
        snap = store.log(topic, partition).snapshot()
        first_uncleanable = snap.active_segment_base
        seen: dict[bytes | None, int] = {}
        for r in store.read(topic, partition, "earliest"):
            if r.offset >= min(first_uncleanable, snap.first_dirty_offset):
                break
            if r.key in seen:
                problems.append(f"{topic}-{partition}: key {r.key!r} at offsets {seen[r.key]} and {r.offset} in "
                                "the cleaned section")
            seen[r.key] = r.offset  # type: ignore[index]
    for topic, partition in store.log_cleaner().manager.uncleanable_partitions():
        problems.append(f"{topic}-{partition} is marked uncleanable")
    return problems


def side_files(directory: str | os.PathLike[str]) -> list[Path]:
    return sorted(Path(directory).glob("*.side.jsonl"))
