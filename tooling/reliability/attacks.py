"""What the attack classes share: one run's outcome, and the verdict on a store after an attack.

An attack class (:mod:`~tooling.reliability.state_attacks`, :mod:`~tooling.reliability.clock_attacks`,
:mod:`~tooling.reliability.disk_attacks`, :mod:`~tooling.reliability.store_fault_attacks`) does something hostile
to a store while real producer processes (:mod:`tooling.reliability.worker`) write to it: damages or removes a
document outside the Delta logs, skews a process's clock, fills the disk, fails the object store's answers. Each
run gets a store of its own. Then :func:`judge` gives the verdict, from the side files alone, as the kills get
theirs (:func:`tooling.reliability.model.verify`):

* **records lost** and **offsets changed** (changed, duplicated, unknown or out-of-order records): the model;
* **reads stuck**: a partition whose last stable offset stays below its log end after every transaction's
  ``transaction.timeout.ms`` has passed on the store's clock and the coordinator's timer
  (:meth:`~deltalog.cleaner.maintenance.StoreMaintenance.abort_timed_out_transactions`, Kafka's
  ``TransactionStateManager`` timer) has run, so ``read_committed`` readers and the cleaner are held back;
* **partition unreadable**: a read of a partition, or the verification's own reads, raised (unless the error is
  a deltalog error naming the damaged document: then the read was *refused* clearly, which is counted apart);
* **errors**: every error a producer, a read or a cleaning pass met, sorted into those that are a
  :class:`~deltalog.errors.DeltalogError` naming the damaged file (a clear answer) and all others (an error
  that is not deltalog's, or does not say which file; a silent wrong answer shows up as a loss instead).

A run *held* when nothing was lost or changed, nothing is stuck or unreadable, and every error named the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooling.reliability.model import (
    Batch,
    Verification,
    read_side_errors,
    read_side_files,
    verify,
    verify_compacted,
    wall_ms,
)

#: The attack classes, by the name ``--only`` and ``--skip`` take, with their report heading.
CLASSES = {
    "state": "Damaged or lost state documents",
    "clock": "Clock skew between processes",
    "disk": "A full disk",
    "store-faults": "Object-store faults between the client and the store",
    "other-engines": "Other engines at the same time",
    "writer-clocks": "Clock skew between writers",
}


@dataclass
class AttackOutcome:
    """One run of an attack class: what was attacked, and the verdict."""

    cls: str  # a key of CLASSES
    attack: str  # what was attacked, as the report shows it
    injected: int = 0  # faults injected (answers failed, documents damaged, writes refused for space)
    acked: int = 0  # acknowledged records
    lost: int = 0
    changed: int = 0  # changed, duplicated, unknown or out-of-order records
    stuck: list[str] = field(default_factory=list)
    #: Hanging transactions that find-hanging named and abort ended (the operator's way out, as in Kafka).
    hanging_aborted: int = 0
    unreadable: list[str] = field(default_factory=list)
    errors_named: int = 0  # DeltalogErrors that named the damaged file (or, with no file to name, any DeltalogError)
    refused: list[str] = field(default_factory=list)  # reads refused with an error naming the damaged file
    fenced: list[str] = field(default_factory=list)  # live producers fenced as if they had timed out
    reused_ids: list[str] = field(default_factory=list)  # one producer id given to two producers
    errors_other: list[str] = field(default_factory=list)
    verification: Verification | None = None
    problems: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def held(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        if self.held:
            return "held"
        parts = [f"{n} {what}" for n, what in ((self.lost, "records lost"), (self.changed, "offsets changed"),
                                                (len(self.stuck), "reads stuck"),
                                                (len(self.unreadable), "partitions unreadable"),
                                                (len(self.fenced), "producers fenced wrongly"),
                                                (len(self.reused_ids), "producer ids given twice"),
                                                (len(self.errors_other), "unclear errors")) if n]
        return ", ".join(parts) or "failed: " + self.problems[0][:200]


def error_names(error: BaseException | dict[str, Any], names: Sequence[str]) -> bool:
    """Whether an error (an exception, or a side file's ``error`` entry) is a DeltalogError naming one of
    ``names`` (file names or paths; none given: any DeltalogError will do)."""
    from deltalog.errors import DeltalogError

    if isinstance(error, dict):
        is_ours, message = bool(error.get("deltalog")), str(error.get("message", ""))
    else:
        is_ours, message = isinstance(error, DeltalogError), str(error)
    return is_ours and (not names or any(n in message for n in names))


def describe_error(where: str, error: BaseException | dict[str, Any]) -> str:
    if isinstance(error, dict):
        return f"{where}: {error.get('type')}: {str(error.get('message'))[:300]}"
    return f"{where}: {type(error).__name__}: {str(error)[:300]}"


def side_files(side_dir: Path) -> list[Path]:
    return sorted(side_dir.glob("*.side.jsonl"))


def judge(outcome: AttackOutcome, store: Any, side_dir: Path, *, names: Sequence[str] = (),
          txn_timers: bool = False, clean: Callable[[], Any] | None = None,
          extra_errors: Iterable[tuple[str, BaseException]] = (),
          recover_hanging_after_ms: int | None = None) -> AttackOutcome:
    """The verdict on ``store`` (module docstring): the producers' errors from their side files, the
    ``extra_errors`` the attack met itself, the model's checks, with ``txn_timers`` the coordinator's timer and
    the last-stable-offset check, and with ``clean`` (a cleaning round, the harness's own) the next pass, which
    must complete, after which the store is checked again with the compaction check. With
    ``recover_hanging_after_ms`` the operator's way out of a hanging transaction (a transaction whose coordinator
    state was lost: Kafka's ``kafka-transactions.sh find-hanging``, then ``abort``) runs before the
    last-stable-offset check: a run holds only if find-hanging names every transaction that would hold reads back."""
    paths = side_files(side_dir)
    batches: list[Batch] = read_side_files(paths)
    outcome.acked = sum(len(b.records) for b in batches if b.acked)
    errors: list[tuple[str, BaseException | dict[str, Any]]] = [
        (f"a send by {e['error'].split(':')[0]}", e) for e in read_side_errors(paths)]
    errors += list(extra_errors)
    if txn_timers:
        try:
            store.log_cleaner().maintenance.abort_timed_out_transactions()
        except Exception as e:  # noqa: BLE001 - the verdict sorts it
            errors.append(("the coordinator's timer", e))
    if recover_hanging_after_ms is not None:
        try:
            found = store.find_hanging_transactions(max_transaction_timeout_ms=recover_hanging_after_ms)
            for h in found:
                store.abort_transaction(h.topic, h.partition, start_offset=h.start_offset)
            outcome.hanging_aborted += len(found)
        except Exception as e:  # noqa: BLE001 - the verdict sorts it
            errors.append(("find-hanging and abort", e))
    _model(outcome, store, batches, errors, "", names)
    if txn_timers and not (outcome.unreadable or outcome.refused):
        for topic, partition in sorted({(b.topic, b.partition) for b in batches}):
            try:
                state = store.describe(topic)[partition]
                store.read(topic, partition, "earliest", isolation_level="read_committed")
            except Exception as e:  # noqa: BLE001
                _unreadable(outcome, f"{topic}-{partition} read_committed", e, names)
                errors.append((f"reading {topic}-{partition} read_committed", e))
                continue
            if state.last_stable_offset is not None and state.last_stable_offset < state.log_end_offset:
                outcome.stuck.append(
                    f"{topic}-{partition}: last stable offset {state.last_stable_offset} < log end offset "
                    f"{state.log_end_offset} after every transaction.timeout.ms passed and the coordinator's timer ran "
                    f"(ongoing: {state.ongoing_transactions if hasattr(state, 'ongoing_transactions') else '?'})")
    if clean is not None and not (outcome.unreadable or outcome.refused):
        try:
            round_ = clean()
        except Exception as e:  # noqa: BLE001
            errors.append(("the next cleaning pass", e))
            round_ = None
        if round_ is not None:
            for f in round_.failures:
                outcome.problems.append(f"the next cleaning pass failed on {f.topic}-{f.partition}: {f.message[:300]}")
            if round_.uncleanable:
                outcome.problems.append(f"partitions left uncleanable: {sorted(map(str, round_.uncleanable))}")
            if round_.busy or round_.conflicts:
                outcome.problems.append(f"the next cleaning pass found {len(round_.busy)} partition(s) busy and lost "
                                        f"{len(round_.conflicts)} race(s)")
        _model(outcome, store, batches, errors, "after the next pass: ", names)
        if not outcome.unreadable:
            try:
                outcome.problems += [f"after the next pass: {p}" for p in verify_compacted(store, batches)]
            except Exception as e:  # noqa: BLE001
                errors.append(("the compaction check", e))
    for where, e in errors:
        if error_names(e, names):
            outcome.errors_named += 1
        else:
            outcome.errors_other.append(describe_error(where, e))
    outcome.reused_ids += reused_producer_ids(paths)
    outcome.problems += outcome.stuck + outcome.unreadable + outcome.fenced + outcome.reused_ids + outcome.errors_other
    return outcome


def reused_producer_ids(paths: Iterable[Path]) -> list[str]:
    """Producer ids that two producers got (the ids the workers wrote to their side files): Kafka's
    ``ProducerIdManager`` never hands one out twice, and producers of one transactional id share theirs by design."""
    import json

    holders: dict[int, set[tuple[str, str | None]]] = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "producer_id" in entry:
                holders.setdefault(entry["producer_id"], set()).add((entry["name"], entry.get("transactional_id")))
    out = []
    for pid, who in sorted(holders.items()):
        ids = {tid for _, tid in who}
        if len(who) > 1 and (len(ids) > 1 or None in ids):
            out.append(f"producer id {pid} was given to {len(who)} producers: {', '.join(sorted(n for n, _ in who))}")
    return out


def _unreadable(outcome: AttackOutcome, what: str, e: BaseException, names: Sequence[str]) -> None:
    line = f"{what} raised {type(e).__name__}: {str(e)[:300]}"
    (outcome.refused if names and error_names(e, names) else outcome.unreadable).append(line)


def _model(outcome: AttackOutcome, store: Any, batches: list[Batch], errors: list[Any], prefix: str,
           names: Sequence[str]) -> None:
    try:
        v = verify(store, batches)
    except Exception:  # noqa: BLE001 - partition by partition: which ones are unreadable, and the others' figures
        reports = []
        for (topic, partition) in sorted({(b.topic, b.partition) for b in batches}):
            try:
                reports += verify(store, [b for b in batches if (b.topic, b.partition) == (topic, partition)]
                                  ).partitions
            except Exception as e:  # noqa: BLE001 - a read that raises is the verdict "unreadable"
                _unreadable(outcome, f"{prefix}{topic}-{partition}: the model's read", e, names)
                errors.append((f"{prefix}reading {topic}-{partition} back", e))
        v = Verification(reports, wall_ms())
    outcome.verification = v
    outcome.lost = max(outcome.lost, v.total("lost"))
    outcome.changed = max(outcome.changed, v.total("changed") + v.total("duplicated") + v.total("unknown")
                          + v.total("order"))
    outcome.problems += [f"{prefix}{p}" for p in v.problems]


# -- processes ----------------------------------------------------------------------------------------------


def start_producer(harness: Any, side_dir: Path, name: str, workload: Any, *, batches: int | None = None,
                   seconds: float | None = None, env: dict[str, str] | None = None,
                   storage_options: dict[str, str] | None = None, **spec: Any) -> tuple[Any, Path]:
    """A producer process (:mod:`tooling.reliability.worker`) on ``harness``'s store, with the worker's attack
    options in ``spec`` (``mode``, ``clock_offset_ms``, ``tolerate``, ``open_transaction``, ...);
    ``storage_options`` replace the store's (an endpoint through the fault proxy)."""
    import json
    import sys

    store = harness._spec_store()
    if storage_options is not None:
        store["storage_options"] = storage_options
    full = {**store, "name": name, "side": str(side_dir / f"{name}.side.jsonl"), "workload": workload.as_json(),
            "seed": harness.rng.randrange(2**31), "batches": batches, "seconds": seconds, **spec}
    return harness._start([sys.executable, "-m", "tooling.reliability.worker", "producer", json.dumps(full)], name, env)


def finish(proc: Any, logfile: Path, timeout_s: float = 600) -> dict[str, Any] | None:
    """Wait for a worker; the error it died of (as a side file's ``error`` entry), or None if it exited 0 or was
    SIGKILLed (by itself or the harness: a kill is the attack, not an answer)."""
    import re
    import signal
    import subprocess

    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        import os

        os.killpg(proc.pid, signal.SIGKILL)  # unreaped: the group is still this worker's
        proc.wait()
        return {"type": "Timeout", "message": f"{logfile.name} ran for {timeout_s:.0f} s", "deltalog": False}
    if code in (0, -signal.SIGKILL):
        return None
    text = logfile.read_text(errors="replace")
    last = re.findall(r"^([\w.]+(?:Error|Exception|Exit)\w*): (.*)$", text, re.M)
    if not last:
        return {"type": f"exit {code}", "message": text[-1000:], "deltalog": False}
    kind, message = last[-1]
    return {"type": kind.rsplit(".", 1)[-1], "message": message, "deltalog": kind.startswith("deltalog.errors.")}
