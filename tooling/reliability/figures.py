"""``python -m tooling.reliability``: run the hostile-input suite, the crash harness, the damage matrix and the
attack classes (:mod:`tooling.reliability.attacks`: damaged state documents, clock skew, a full disk, object-store
faults), and write the figures.

One command anyone can run from a checkout with the ``dev`` extra installed::

    python -m tooling.reliability                    # full size: 30 kills of each kind, 60 s of concurrency
    python -m tooling.reliability --quick            # a few of each, for a smoke run (minutes)
    python -m tooling.reliability --out /tmp/r.md    # write somewhere else than docs/RELIABILITY.md
    python -m tooling.reliability --only state       # one part; the others' sections are kept from --out

It prints a line per step and writes a Markdown report: what was tried, where each kill landed, what the
model found (records lost, offsets changed or duplicated), what the concurrency run did, how many hostile
inputs each category tried, which entry points named each kind of damage, and each attack class's verdicts.
A part left out (``--skip``, or not named by ``--only``) keeps its Summary row and line and its section from
the report already at ``--out``. The exit code is 0 when
everything held, 1 otherwise (the report says what broke).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from tooling.reliability import attack_report
from tooling.reliability.attack_runs import run_class
from tooling.reliability.attacks import CLASSES, AttackOutcome
from tooling.reliability.damage import BLIND_SPOTS, ENTRIES, KINDS
from tooling.reliability.damage import TOPIC as DAMAGE_TOPIC
from tooling.reliability.harness import (
    CLEANER_ENTRIES,
    ConcurrencyOutcome,
    Harness,
    KillOutcome,
    cleaner_boundary_plan,
    producer_boundary_plan,
)

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "docs" / "RELIABILITY.md"
#: The parts ``--skip`` and ``--only`` take: the first four, then the attack classes.
PARTS = ("hostile", "kills", "concurrency", "damage", *CLASSES)
#: Runs of each attack class: every case of the class at least twice (one case for the disk).
ATTACK_RUNS = {"state": 16, "clock": 8, "disk": 6, "store-faults": 12, "other-engines": 8, "writer-clocks": 9}
QUICK_ATTACK_RUNS = {"state": 8, "clock": 4, "disk": 1, "store-faults": 4, "other-engines": 4, "writer-clocks": 3}


@dataclass
class HostileFigure:
    category: str
    what: str
    tried: int
    errors: dict[str, int]
    failure: str | None
    seconds: float


@dataclass
class Run:
    """Everything one run measured."""

    started: datetime
    options: dict[str, Any]
    hostile: list[HostileFigure] = field(default_factory=list)
    producer_kills: list[KillOutcome] = field(default_factory=list)
    cleaner_kills: list[KillOutcome] = field(default_factory=list)
    producer_recovery: tuple[str, list[str]] | None = None
    concurrency: ConcurrencyOutcome | None = None
    orphaned_files: int | None = None
    damage: list[Any] = field(default_factory=list)  # tooling.reliability.damage.Outcome
    orphan_round_trip: Any = None  # tooling.reliability.damage.OrphanOutcome
    attacks: dict[str, list[AttackOutcome]] = field(default_factory=dict)  # attack class -> its runs
    carried: attack_report.Carried | None = None  # the previous report's parts this run left out
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def kills(self) -> list[KillOutcome]:
        return self.producer_kills + self.cleaner_kills

    @property
    def problems(self) -> list[str]:
        out = [f"{k.kind} kill ({k.entry}, {k.target or 'random'}): {p}" for k in self.kills for p in k.problems]
        if self.producer_recovery:
            out += [f"after the producer kills: {p}" for p in self.producer_recovery[1]]
        if self.concurrency:
            out += [f"concurrency: {p}" for p in self.concurrency.problems]
        out += [f"hostile input, {h.category}: {h.failure}" for h in self.hostile if h.failure]
        out += [f"damage {o.kind} at {o.entry}: {o.detail}" for o in self.damage
                if not o.held and (o.kind, o.entry) not in BLIND_SPOTS]
        if self.orphan_round_trip is not None and not self.orphan_round_trip.held:
            out.append(f"orphaned file: {self.orphan_round_trip}")
        out += [f"{CLASSES[cls]}, {o.attack}: {o.problems[0]}" for cls, os_ in self.attacks.items() for o in os_
                if not o.held]
        return out


def run_hostile(examples: int, log: Any) -> list[HostileFigure]:
    from tooling.reliability.hostile import CATEGORIES, Arena, run_category

    figures = []
    for category in CATEGORIES:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="deltalog-hostile-") as d:
            arena = Arena(Path(d) / "arena")
            try:
                tally = run_category(category, arena, max_examples=examples)
                failure = None
            except (AssertionError, Exception) as e:  # noqa: BLE001 - a failing category is a figure, not a crash
                tally, failure = None, f"{type(e).__name__}: {str(e).splitlines()[0][:500]}"
        fig = HostileFigure(category.name, category.what, tally.tried if tally else 0,
                            dict(tally.errors) if tally else {}, failure, time.monotonic() - started)
        log(f"hostile input, {category.name}: {fig.tried} tried, {fig.errors}{'; FAILED ' + failure if failure else ''}")
        figures.append(fig)
    return figures


def run_damage(workdir: Path, run: Run, log: Any) -> None:
    """Every kind of damage at every entry point, on a local Spark session of this process."""
    from deltalog.sql.session import local_session
    from tooling.reliability.damage import measure, orphan_round_trip

    started = time.monotonic()
    run.damage = measure(str(workdir / "damage"), local_session(), log)
    run.orphan_round_trip = orphan_round_trip(str(workdir / "orphans"))
    log(f"orphaned file: {run.orphan_round_trip}")
    run.seconds["damage"] = time.monotonic() - started


def run_kills(harness: Harness, kills: int, run: Run) -> None:
    started = time.monotonic()
    run.producer_kills += [harness.producer_kill() for _ in range(kills)]
    run.producer_kills += [harness.producer_kill(boundary) for boundary in producer_boundary_plan(kills)]
    run.producer_recovery = harness.recover_after_producer_kills()
    run.seconds["producer kills"] = time.monotonic() - started
    started = time.monotonic()
    entries = itertools.cycle(CLEANER_ENTRIES)
    random_kills: list[KillOutcome] = []
    while sum(k.killed for k in random_kills) < kills and len(random_kills) < 2 * kills:
        random_kills.append(harness.cleaner_kill(next(entries)))
    boundary_kills = [harness.cleaner_kill(entry, point) for entry, point in cleaner_boundary_plan(kills)]
    run.cleaner_kills += random_kills + boundary_kills
    run.seconds["cleaner kills"] = time.monotonic() - started
    run.orphaned_files = harness.orphaned_files()


# -- the report ------------------------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    versions = ", ".join(f"{p} {_version(p)}" for p in ("pyspark", "deltalake", "pyarrow", "hypothesis"))
    return (f"{cores} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
            f"{versions}; load average at the end {load}")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _held(kills: Sequence[KillOutcome]) -> str:
    killed = [k for k in kills if k.killed]
    return f"{sum(k.survived for k in killed)} of {len(killed)}"


def _count(kills: Sequence[KillOutcome], name: str) -> int:
    """A model figure (records lost, say) over the kills: after each kill or after the next pass, whichever found more."""
    return sum(max(k.verification.total(name), k.recovery.total(name) if k.recovery else 0)
               for k in kills if k.verification)


def render(run: Run) -> str:
    total_s = sum(run.seconds.values())
    out = [
        "# Reliability",
        "",
        f"Written by `python -m tooling.reliability{' ' + run.options['argv'] if run.options.get('argv') else ''}` "
        f"on {run.started:%Y-%m-%d} in {total_s / 60:.0f} minutes ({_machine()}). Run it again to refresh "
        "every figure; `--quick` runs a few of each for a smoke test. How each check works is at the end "
        "([the model](#how-the-store-is-checked)).",
        "",
        "Kafka's promise, which deltalog keeps: an acknowledged record is never lost and compaction removes only "
        "records that a newer record of their key supersedes (and tombstones after `delete.retention.ms`, "
        "segments after `retention.ms`); an offset never changes, never repeats, and order is kept.",
        "",
        "## Summary",
        "",
    ]
    pk, ck = run.producer_kills, run.cleaner_kills
    carried = run.carried or attack_report.Carried()
    if carried.rows or carried.lines or carried.sections:
        kept = [p for p in ("kills", "concurrency", "hostile", "damage", *CLASSES) if p in carried.sections]
        out[2] += (f" Not run this time and kept from the previous report "
                   f"({attack_report.previous_date(carried.written)}): {', '.join(kept)}.")

    def row(label: str, kills: list[KillOutcome]) -> list[Any]:
        return [label, len(kills), sum(k.killed for k in kills), sum(k.survived for k in kills)]

    rows = [
        row("producers SIGKILLed at a random moment", [k for k in pk if k.how == "random"]),
        row("producers killed at an append/roll commit boundary", [k for k in pk if k.how == "boundary"]),
        row("cleaner runs SIGKILLed at a random moment (with their Spark JVM)", [k for k in ck if k.how == "random"]),
        row("cleaner runs killed at a cleaning/retention commit boundary", [k for k in ck if k.how == "boundary"]),
    ]
    table = ["| " + " | ".join(str(c) for c in r) + " |" for r in rows] if run.kills else carried.rows.get("kills", [])
    table += ["| " + " | ".join(str(c) for c in attack_report.summary_row(cls, run.attacks[cls])) + " |"
              if cls in run.attacks else line for cls in CLASSES for line in
              ([""] if cls in run.attacks else carried.rows.get(cls, []))]
    if table:
        out += _table(["tried", "runs", "killed or attacked", "store intact, next pass completed / held"], [])
        out += table
    if any(line.startswith(attack_report.KILL_ROWS, 2) for line in table):
        out += ["", "A run that finished before its random moment came, or never reached its boundary, is not a kill."]
    acked = sum(k.verification.total("acked") for k in run.kills[-1:] if k.verification)
    c = run.concurrency
    out += [""]
    out += carried.lines.get("kills", []) if not run.kills else [
            f"- **Records lost: {_count(run.kills, 'lost') + (c.verification.total('lost') if c and c.verification else 0)}**; "
            f"offsets changed: {_count(run.kills, 'changed') + (c.verification.total('changed') if c and c.verification else 0)}; "
            f"duplicated: {_count(run.kills, 'duplicated') + (c.verification.total('duplicated') if c and c.verification else 0)}; "
            f"out of order: {_count(run.kills, 'order') + (c.verification.total('order') if c and c.verification else 0)}; "
            f"records no producer sent: {_count(run.kills, 'unknown')} "
            f"(checked after every kill and again after the next pass; {acked:,} acknowledged records in the "
            "kill scenarios' store at the end).",
            ]
    out += carried.lines.get("concurrency", []) if not c else []
    out += carried.lines.get("hostile", []) if not run.hostile else []
    out += carried.lines.get("damage", []) if not run.damage else []
    if c:
        out.append(f"- Concurrency: {c.producers} producer processes x {c.seconds:.0f} s with {c.jobs} cleaner jobs started "
                   f"together: {c.records_acked:,} records acknowledged, {sum(c.passes)} passes, "
                   f"{'nothing lost' if not c.problems else f'{len(c.problems)} problem(s)'}.")
    if run.hostile:
        out.append(f"- Hostile input: {sum(h.tried for h in run.hostile):,} inputs in {len(run.hostile)} categories, "
                   f"{sum(1 for h in run.hostile if not h.failure)} of {len(run.hostile)} categories refused every "
                   "one cleanly with the store's files unchanged.")
    if run.damage:
        held = sum(o.held for o in run.damage)
        blind = sum(1 for o in run.damage if not o.held and (o.kind, o.entry) in BLIND_SPOTS)
        out.append(f"- Damage: {len({o.kind for o in run.damage})} kinds x {len({o.entry for o in run.damage})} entry "
                   f"points: {held} of {len(run.damage)} answered with a deltalog error naming the partition and the "
                   f"file; {blind} known blind spot(s) (below); "
                   f"{len(run.damage) - held - blind} other failure(s).")
    for cls in CLASSES:
        out += [attack_report.summary_line(cls, run.attacks[cls])] if cls in run.attacks else carried.lines.get(cls, [])
    problems = run.problems
    if problems:
        out += ["", "**What broke:**", ""] + [f"- {p[:600]}" for p in problems[:30]]

    if not run.kills:
        out += carried.sections.get("kills", [])
    if run.kills:
        out += ["", "## Kills", "",
                "A kill is SIGKILL, not an exception: nothing in the process runs after it. A cleaner run is killed "
                "with its whole process group (the driver, Spark's JVM and its Python workers). Random kills are "
                "drawn uniformly after the worker's ready line (its Spark session up, or its store open), within a "
                "span that follows the length of a cycle (it grows by a quarter after each kill, and shrinks to the "
                "length of a cycle that ended before its kill), so some runs finish first; boundary kills come from `DELTALOG_FAULT_KILL` "
                "(`deltalog/log/faults.py`), which makes the process SIGKILL itself right before a Delta commit "
                "(its files written) or right after it (committed, nothing after it done)."]
    if pk:
        out += ["", "### Producers", "",
                "A victim producer appends random batches (1-8 records over 30 keys, 10% tombstones, a roll after "
                "30% of batches) to three partitions beside a bystander producer; the model checks the store right "
                "after each kill.", ""]
        where = Counter((k.how, k.where) for k in pk)
        out += _table(["kill", "where it landed", "kills", "held"],
                      [[how, w, n, _held([k for k in pk if (k.how, k.where) == (how, w)])]
                       for (how, w), n in sorted(where.items())])
        landed = len({b for k in pk if k.verification for p in k.verification.partitions for b in p.landed_batches})
        out += ["", f"In-flight batches found in the log (committed, never acknowledged): {landed}, each whole and where "
                "no acknowledged batch is. "
                + (f"After the series, the next cleaning pass: {run.producer_recovery[0]}." if run.producer_recovery
                   else "")]
        if run.orphaned_files is not None:
            out.append(f"Data files left on disk that no commit references (appends and passes killed before their "
                       f"commit): {run.orphaned_files}; VACUUM removes such files after `file.delete.delay.ms` "
                       "(at least an hour), which the damage work measures.")
    if ck:
        out += ["", "### Cleaner runs", "",
                "Before each run the harness appends two batches to every partition of `crash` (compact, 3 "
                "partitions) and old records to `crash-retained` (compact,delete, retention 60 s), and rolls, so "
                "every run has passes to make and segments to delete. The entry points take turns: `deltalog "
                "cleaner run --once` (cli), `python -m deltalog.jobs.cleaner_job --once` (job), and a script "
                "calling `Store.clean()` (api). After each kill the store is checked as the kill left it; then a "
                "pass in the harness's process must complete (no failure, no busy partition, no lost race) and the "
                "store is checked again, with every key once in each cleaned section and no partition uncleanable.",
                "", "Random moments:", ""]
        rnd = [k for k in ck if k.how == "random"]
        where = Counter((k.entry, k.where.split(" (")[0]) for k in rnd)
        out += _table(["entry", "where it landed", "runs", "held"],
                      [[e, w, n, _held([k for k in rnd if (k.entry, k.where.split(" (")[0]) == (e, w)])
                        if "finished" not in w else "(not a kill)"] for (e, w), n in sorted(where.items())])
        secs = sorted(k.seconds for k in rnd if k.killed)
        if secs:
            out += ["", f"Kills landed {secs[0]:.1f} s to {secs[-1]:.1f} s after the ready line "
                        f"(median {secs[len(secs) // 2]:.1f} s)."]
        out += ["", "Commit boundaries:", ""]
        bnd = [k for k in ck if k.how == "boundary"]
        groups = Counter((k.target, k.entry) for k in bnd)
        out += _table(["boundary", "entry", "runs", "killed there", "held"],
                      [[t, e, n, sum(k.killed for k in bnd if (k.target, k.entry) == (t, e)),
                        _held([k for k in bnd if (k.target, k.entry) == (t, e)])] for (t, e), n in sorted(groups.items())])
    if not c:
        out += carried.sections.get("concurrency", [])
    if c:
        out += ["", "## Concurrency", "",
                f"{c.producers} producer processes appended for {c.seconds:.0f} s (batches of 1-10 records over 50 keys, "
                "15% tombstones) to `busy` (compact, 3 partitions) and `busy-retained` (compact,delete), whose segments "
                "roll every 500 ms, whose tombstones expire after 3 s and records after 4 s (retention), and whose "
                f"replaced files VACUUM removes after 2 s, while {c.jobs} cleaner jobs started at the same moment ran "
                "continuously (`log.cleaner.backoff.ms=200`). Once the producers had stopped, the jobs ran until "
                f"each had found nothing left to clean ({c.drain_seconds:.0f} s), and were stopped with SIGTERM to "
                "their process groups, as a terminal's Ctrl-C or a service manager does. The store also holds the "
                "kill scenarios' topics, which the jobs retain, clean and VACUUM too.", ""]
        v = c.verification
        rows = [
            ["records acknowledged", f"{c.records_acked:,} in {c.batches_acked:,} batches"],
            ["cleaner job cycles", " + ".join(map(str, c.job_cycles))],
            ["cleaning passes committed", " + ".join(map(str, c.passes))],
            ["partitions skipped because the other job held them", c.busy_skips],
            ["passes that lost a commit race", c.lost_races],
            ["segments deleted by retention (every topic of the store)", c.segments_deleted],
            ["files removed by VACUUM (every topic of the store)", c.files_vacuumed],
            ["job exit codes after SIGTERM", ", ".join(map(str, c.job_exit_codes))],
        ]
        if v:
            rows += [
                ["acknowledged records present at the end", f"{v.total('acked_present'):,}"],
                ["... gone, superseded by a newer record of their key", f"{v.total('superseded'):,}"],
                ["... gone under a tombstone past delete.retention.ms", f"{v.total('expired_tombstones'):,}"],
                ["tombstones acknowledged, of which still in the log",
                 f"{v.total('tombstones_acked'):,}, {v.total('tombstones_present'):,}"],
                ["... gone by retention", f"{v.total('retained_out'):,}"],
                ["**lost, changed, duplicated, out of order**",
                 f"**{v.total('lost')}, {v.total('changed')}, {v.total('duplicated')}, {v.total('order')}**"],
            ]
        out += _table(["", ""], rows, "lr")
    if not run.hostile:
        out += carried.sections.get("hostile", [])
    if run.hostile:
        out += ["", "## Hostile input", "",
                "Property-based (hypothesis, `tooling/reliability/hostile.py`, also `tests/test_hostile_input.py`): "
                "each input is one call of the public API, or one `deltalog` command line with its standard input, "
                "with at least one wrong part, drawn from the documented rules rather than from deltalog's own checks. "
                "Each must raise a `DeltalogError` (the CLI: exit 1 or 2 with a `deltalog: error:` line, no "
                "traceback) whose message names what was wrong in at most 4,000 characters, and leave every file "
                "under the test directory, the store's and everything beside it, byte-for-byte as it was.", ""]
        out += _table(["category", "inputs tried", "refused with", "result", "what is drawn"],
                      [[h.category, f"{h.tried:,}", ", ".join(f"{k} {n}" for k, n in sorted(h.errors.items())),
                        "**FAILED**" if h.failure else "all refused, nothing changed", h.what] for h in run.hostile],
                      "lrlll")
    if run.damage:
        out += _damage_section(run.damage, run.orphan_round_trip)
    else:
        out += carried.sections.get("damage", [])
    for cls in CLASSES:
        out += attack_report.section(cls, run.attacks[cls], _table) if cls in run.attacks else \
            carried.sections.get(cls, [])
    out += ["", "## How the store is checked", "",
            "Every producer writes, before each append, the batch it is about to send (each record with a unique "
            "id, also carried as a header) and, after the append returns, the offsets it was told, each as one "
            "`write` to a side file of its own (`tooling/reliability/model.py`). The store is then read back "
            "through the public API and checked against those files alone:", "",
            "- offsets strictly increase in a read (order kept, none twice);",
            "- every record read was sent by a producer, unchanged (key, value, timestamp), at the offset its "
            "producer was told, or, for a batch whose producer died before the acknowledgement, all of it or none, "
            "in offsets no acknowledged batch holds;",
            "- every acknowledged record is present unless a newer record of its key is present, or it is below "
            "the log start and older than `retention.ms` (delete policy), or a tombstone of its key at or after it "
            "is older than `delete.retention.ms`;",
            "- for each key the records still present are the newest ones (an older value never outlives a newer "
            "one);",
            "- the log end offset lies past every acknowledged offset;",
            "- once the next pass has run: each key once in every cleaned section, and no partition marked "
            "uncleanable.",
            "", "Times: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in run.seconds.items()) + "."]
    return "\n".join(out) + "\n"


def _damage_section(outcomes: Sequence[Any], orphans: Any) -> list[str]:
    kinds = list(dict.fromkeys(o.kind for o in outcomes))
    entries = list(dict.fromkeys(o.entry for o in outcomes))
    by = {(o.kind, o.entry): o for o in outcomes}

    def cell(kind: str, entry: str) -> str:
        o = by.get((kind, entry))
        if o is None:
            return "-"
        return "held" if o.held else ("not held (blind spot)" if (kind, entry) in BLIND_SPOTS else "**NOT HELD**")

    out = ["", "## Damage", "",
           "`tooling/reliability/damage.py` (also `tests/test_damage.py`) builds, for each kind of damage, a store "
           f"whose topic `{DAMAGE_TOPIC}` has two compacted partitions of 220 records with a checkpoint at version 8; "
           "partition 0 is damaged through the store's Storage, partition 1 stays healthy. Each entry point is then "
           "tried for real: the API, or the `deltalog` command in the same process. *Held* means a `DeltalogError` "
           "(the CLI: `deltalog: error: ...` and exit 1 without a traceback; `deltalog check`: a failed check; "
           "`doctor`: a FAIL row, exit 1) that names the partition and the damaged file and says what to do; for "
           "`store.clean()` also that the healthy partition was cleaned before the error was raised.", ""]
    out += _table(["entry point", *kinds], [[f"`{ENTRIES.get(e, e)}`", *[cell(k, e) for k in kinds]] for e in entries],
                  "l" * (len(kinds) + 1))
    out += ["", "Kinds: " + "; ".join(f"`{k}`: {KINDS[k]}" for k in kinds) + "."]
    blind = [(k, e) for (k, e) in BLIND_SPOTS if (k, e) in by and not by[k, e].held]
    if blind:
        out += ["", "Blind spots (by design): " + "; ".join(f"{e} on `{k}`: {BLIND_SPOTS[k, e]}" for k, e in blind)
                + ". `deltalog doctor`, reads, the cleaner and checks read the footers and name the file."]
    failed = [o for o in outcomes if not o.held and (o.kind, o.entry) not in BLIND_SPOTS]
    if failed:
        out += ["", "**Not held:**", ""] + [f"- {o.kind} at {o.entry}: {o.detail[:400]}" for o in failed]
    example = next((o for o in outcomes if o.held and o.entry == "read" and o.kind == "commit_missing"), None)
    if example:
        out += ["", f"For example, `store.read` on `commit_missing`: {example.detail}"]
    out += ["", "A damaged partition is marked uncleanable by the cleaner (the job's cycle goes on with the others, "
            "then `deltalog cleaner run` exits 1 naming it); `deltalog cleaner reset-uncleanable` clears the mark once "
            "it is repaired."]
    if orphans is not None:
        out += ["", "Orphaned data files (an append killed between writing its file and committing it leaves one): a "
                "file written that way and never committed was "
                f"{'counted by doctor as 1 orphan (WARN)' if orphans.doctor_warned == 1 else f'counted as {orphans.doctor_warned} orphan(s) by doctor'}; "
                f"VACUUM inside the delay {'kept it' if orphans.kept_inside_delay else '**removed it**'}; VACUUM once "
                f"`file.delete.delay.ms` and the one-hour orphan minimum had passed on the store's clock "
                f"{'removed it, and nothing else' if orphans.removed_after_delay else '**did not remove it (alone)**'}; "
                f"doctor afterwards: {orphans.doctor_after}; the committed records "
                f"{'read as before' if orphans.records_intact else '**changed**'}."]
    return out


# -- the command ------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tooling.reliability", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the report to write (default: docs/RELIABILITY.md)")
    p.add_argument("--quick", action="store_true", help="a few of each: 3 kills of each kind, 15 s, 100 inputs")
    p.add_argument("--kills", type=int, help="kills of each kind (default 30)")
    p.add_argument("--seconds", type=float, help="length of the concurrency run (default 60)")
    p.add_argument("--producers", type=int, default=3, help="producer processes in the concurrency run")
    p.add_argument("--examples", type=int, help="hostile inputs per category (default 1000)")
    p.add_argument("--store", help="the store location for the kills and the concurrency run (default: a new "
                   "directory under --workdir)")
    p.add_argument("--workdir", help="where side files and logs go (default: a new temporary directory, kept)")
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--skip", action="append", default=[], choices=PARTS,
                   help="leave a part out (repeatable); its section of the previous report at --out is kept")
    p.add_argument("--only", action="append", default=[], choices=PARTS,
                   help="run only this part (repeatable); every other section of the previous report is kept")
    p.add_argument("--runs", type=int, help="runs of each attack class (default: "
                   + ", ".join(f"{c} {n}" for c, n in ATTACK_RUNS.items()) + "; --quick: "
                   + ", ".join(f"{c} {n}" for c, n in QUICK_ATTACK_RUNS.items()) + ")")
    p.add_argument("--no-clean-after-attacks", action="store_true",
                   help="judge each attack without the next cleaning pass (no Spark session: faster)")
    args = p.parse_args(argv)
    if args.only:
        args.skip = [part for part in PARTS if part not in args.only]
    if "hostile" not in args.skip:
        try:
            import hypothesis  # noqa: F401 - only checked: the hostile-input part draws its inputs with it
        except ImportError:
            p.error("the hostile-input part needs hypothesis: pip install -e '.[dev]' (or --skip hostile)")
    kills = args.kills or (3 if args.quick else 30)
    seconds = args.seconds or (15 if args.quick else 60)
    examples = args.examples or (100 if args.quick else 1000)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="deltalog-reliability-"))
    location = args.store or str(workdir / "store")

    def log(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    shown = [f"--{k} {getattr(args, k)}" for k in ("kills", "seconds", "examples") if getattr(args, k) is not None]
    shown = (["--quick"] if args.quick else []) + shown + (
        [f"--only {s}" for s in args.only] if args.only else [f"--skip {s}" for s in args.skip])
    run = Run(datetime.now(timezone.utc), {"argv": " ".join(shown)})
    log(f"store {location}, side files and logs in {workdir}")
    if "hostile" not in args.skip:
        started = time.monotonic()
        run.hostile = run_hostile(examples, log)
        run.seconds["hostile input"] = time.monotonic() - started
    harness = Harness(location, workdir, seed=args.seed, log=log)
    if "kills" not in args.skip:
        run_kills(harness, kills, run)
    if "concurrency" not in args.skip:
        started = time.monotonic()
        run.concurrency = harness.concurrency(seconds, producers=args.producers, jobs=2)
        run.seconds["concurrency"] = time.monotonic() - started
    if "damage" not in args.skip:
        run_damage(workdir, run, log)
    for cls in CLASSES:
        if cls not in args.skip:
            started = time.monotonic()
            runs = args.runs or (QUICK_ATTACK_RUNS if args.quick else ATTACK_RUNS)[cls]
            run.attacks[cls] = run_class(cls, runs, workdir / "attacks", log, seed=args.seed,
                                         clean=not args.no_clean_after_attacks)
            run.seconds[cls] = time.monotonic() - started
    previous = Path(args.out)
    if args.skip and previous.exists():
        run.carried = attack_report.carry(previous.read_text(), args.skip)
    Path(args.out).write_text(render(run))
    log(f"wrote {args.out}: {'everything held' if not run.problems else f'{len(run.problems)} problem(s)'}")
    return 0 if not run.problems else 1
