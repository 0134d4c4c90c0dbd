"""The attack classes in ``docs/RELIABILITY.md``, and the previous report's parts kept when a part is not re-run.

Each class gets a row in the Summary table (its runs, the runs whose attack landed, the runs that held), a line
under it with its counts, and a section: per thing attacked, the runs and the model's verdict (records lost,
offsets changed, reads stuck, partitions unreadable, producers fenced wrongly, unclear errors, errors naming
the file). :func:`carry` takes from the previous report the row, line and section of every part that this run
left out (``--skip``/``--only``), so re-running one class keeps every other figure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tooling.reliability.attacks import CLASSES, AttackOutcome

#: What each class's section says it did.
ABOUT = {
    "state": "`tooling/reliability/state_attacks.py`: a producer process writes to a fresh store; one document outside "
             "the Delta logs is deleted, cut in half or given JSON of the wrong type through the store's Storage; a new "
             "producer process (a new producer id) and, for a transactional id, a new process with the same id write "
             "more. Every error met must be a deltalog error naming the damaged document; a read refused that way is "
             "counted apart, not as unreadable.",
    "clock": "`tooling/reliability/clock_attacks.py`: a transactional producer process whose store clock runs a day "
             "ahead or behind (`Store(clock=...)`) beside one on the wall clock. When it dies mid-transaction, once "
             "`transaction.timeout.ms` has passed on the store's clock the coordinator's timer must abort it, so no "
             "`read_committed` reader or cleaner is held at the last stable offset; while it lives, the timer must not "
             "fence it.",
    "disk": "`tooling/reliability/disk_attacks.py`: a small tmpfs per run (`mount -t tmpfs`), filled with a ballast "
            "file but for 1.5 MB, then two producer processes writing incompressible values and a cleaning round until "
            "refused for space; the ballast is deleted and the store judged. Also: no temporary file left on the disk, "
            "no partition marked uncleanable. Any error must be a deltalog error.",
    "store-faults": "`tooling/reliability/store_fault_attacks.py` with `tooling/fault_proxy.py`: three producer "
                    "processes (idempotent, transactional and plain) write through a fault-injecting proxy in front of "
                    "moto's S3 server; each run one plan fails 30% (seeded) of the PUTs of Delta commits or of data "
                    "files, or the first three PUTs of the store's documents, with a 500 or a dropped connection, "
                    "before or after the store applied them. The store is then judged straight from the server. Any "
                    "error must be a deltalog error.",
    "other-engines": "`tooling/reliability/engine_attacks.py` with `tooling/reliability/other_engines.py`: two producer "
                     "processes append to a compacted topic (2 partitions) and a `compact,delete` one whose records are "
                     "older than its retention, while this process applies retention, runs cleaning rounds and reads "
                     "every partition, and another process runs real delta-rs on the partition tables in a loop: "
                     "OPTIMIZE (`optimize.compact()`), Z-order by key, or both with VACUUM (Delta's retention); or, once "
                     "the producers are done, a DELETE, which every read must refuse naming it, then Delta's RESTORE. "
                     "Faults injected counts the other engine's commits that landed. Besides the model's verdict, no "
                     "partition may hold an offset twice (`describe`'s `duplicated_offsets`).",
    "writer-clocks": "`tooling/reliability/writer_clock_attacks.py`: appends alternate between this process and a "
                     "writer process whose system clock libfaketime moves 2 s behind, 1 h behind or 1 h ahead (its "
                     "Delta commits carry that clock's timestamps, as a writer on another host's would). Between "
                     "every two commits a time T is noted on the wall clock; a read as of each T must hold no record "
                     "the wall-clock writer appended after T (offsets changed) and, when no writer ran ahead, every "
                     "record acknowledged before T (records lost: with a writer ahead, Delta's rule pushes later "
                     "commits' times forward, so that case checks the first property only); `history` must list "
                     "versions in order with increasing times, and a time before the topic existed must be refused "
                     "(`VersionNotAvailableError`, counted as errors naming the file). Faults injected counts the "
                     "skewed writer's commits.",
}

_OTHER_PARTS = {"kills": "## Kills", "concurrency": "## Concurrency", "hostile": "## Hostile input",
                "damage": "## Damage"}
KILL_ROWS = ("producers SIGKILLed", "producers killed at", "cleaner runs SIGKILLed", "cleaner runs killed at")
_BULLETS = {"kills": "- **Records lost", "concurrency": "- Concurrency:", "hostile": "- Hostile input:",
            "damage": "- Damage:"}


def summary_row(cls: str, outcomes: Sequence[AttackOutcome]) -> list[object]:
    return [CLASSES[cls], len(outcomes), sum(1 for o in outcomes if o.injected), sum(o.held for o in outcomes)]


def summary_line(cls: str, outcomes: Sequence[AttackOutcome]) -> str:
    held = sum(o.held for o in outcomes)
    return (f"- {CLASSES[cls]}: {len(outcomes)} runs, {sum(o.acked for o in outcomes):,} records acknowledged; "
            f"records lost {sum(o.lost for o in outcomes)}, offsets changed {sum(o.changed for o in outcomes)}, "
            f"reads stuck in {sum(1 for o in outcomes if o.stuck)} run(s), partitions unreadable in "
            f"{sum(1 for o in outcomes if o.unreadable)}, unclear errors {sum(len(o.errors_other) for o in outcomes)}; "
            f"**{held} of {len(outcomes)} held**.")


def section(cls: str, outcomes: Sequence[AttackOutcome], table: object) -> list[str]:
    """The class's section; ``table(header, rows, align)`` is the report's table renderer."""
    out = ["", f"## {CLASSES[cls]}", "", ABOUT[cls], ""]
    attacks = list(dict.fromkeys(o.attack for o in outcomes))
    fenced, reused = cls == "clock", cls == "state"
    header = ["what was attacked", "runs", "faults injected", "records lost", "offsets changed", "reads stuck",
              "unreadable", *(["fenced wrongly"] if fenced else []), *(["producer id given twice"] if reused else []),
              "unclear errors", "errors naming the file", "held"]
    rows = []
    for attack in attacks:
        os_ = [o for o in outcomes if o.attack == attack]
        rows.append([attack, len(os_), sum(o.injected for o in os_), sum(o.lost for o in os_),
                     sum(o.changed for o in os_), sum(1 for o in os_ if o.stuck),
                     sum(1 for o in os_ if o.unreadable), *([sum(1 for o in os_ if o.fenced)] if fenced else []),
                     *([sum(1 for o in os_ if o.reused_ids)] if reused else []),
                     sum(len(o.errors_other) for o in os_),
                     sum(o.errors_named for o in os_) + sum(len(o.refused) for o in os_),
                     f"{sum(o.held for o in os_)} of {len(os_)}"])
    out += table(header, rows, "l" + "r" * (len(header) - 1))  # type: ignore[operator]
    out += ["", "Reads stuck, unreadable, fenced and producer ids given twice count runs; the other columns count "
            "records or errors."]
    hanging = sum(o.hanging_aborted for o in outcomes)
    if hanging:
        out += ["", f"Hanging transactions (their transactional id's document lost while open) found by "
                f"`find-hanging` and ended by `transactions abort`, the operator's way out as in Kafka: {hanging}; "
                "a run holds only if, after that, no partition's reads are stuck."]
    failed = [o for o in outcomes if not o.held]
    if failed:
        out += ["", "Not held (first finding of each run):", ""]
        out += [f"- {o.attack}: {o.problems[0][:400]}" for o in failed[:12]]
        if len(failed) > 12:
            out.append(f"- ... and {len(failed) - 12} more run(s)")
    return out


# -- keeping what was not re-run ------------------------------------------------------------------------


@dataclass
class Carried:
    """A previous report's pieces of the parts not re-run: Summary rows, Summary lines and sections, by part."""

    rows: dict[str, list[str]] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)
    sections: dict[str, list[str]] = field(default_factory=dict)
    written: str = ""  # the previous report's "Written by" line


def _part_of_heading(heading: str) -> str | None:
    for part, h in _OTHER_PARTS.items():
        if heading == h:
            return part
    for cls, title in CLASSES.items():
        if heading == f"## {title}":
            return cls
    return None


def carry(previous: str, parts: Iterable[str]) -> Carried:
    """The pieces of ``parts`` (kills, concurrency, hostile, damage, or attack classes) in ``previous``."""
    wanted = set(parts)
    out = Carried()
    lines = previous.splitlines()
    out.written = next((line for line in lines if line.startswith("Written by")), "")
    heading = None
    for line in lines:
        if line.startswith("## "):
            heading = line
            part = _part_of_heading(line)
            if part in wanted:
                out.sections.setdefault(part, [])
            continue
        if heading == "## Summary":
            part = _part_of_summary(line)
            if part in wanted:
                (out.rows if line.startswith("| ") else out.lines).setdefault(part, []).append(line)
        elif heading is not None and (part := _part_of_heading(heading)) in wanted:
            out.sections[part].append(line)
    for part, body in out.sections.items():
        title = {**_OTHER_PARTS, **{c: f"## {t}" for c, t in CLASSES.items()}}[part]
        while body and body[-1] == "":
            body.pop()
        out.sections[part] = ["", title, *body]
    return out


def _part_of_summary(line: str) -> str | None:
    if line.startswith("| "):
        label = line[2:].split(" | ", 1)[0]
        if label.startswith(KILL_ROWS):
            return "kills"
        return next((cls for cls, title in CLASSES.items() if label == title), None)
    for part, prefix in _BULLETS.items():
        if line.startswith(prefix):
            return part
    return next((cls for cls, title in CLASSES.items() if line.startswith(f"- {title}:")), None)


def previous_date(written: str) -> str:
    found = re.search(r" on (\d{4}-\d{2}-\d{2})", written)
    return found.group(1) if found else "an earlier run"
