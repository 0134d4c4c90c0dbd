"""The report: a markdown table of medians and ratios against the targets, and a PNG plot, into ``docs/``."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from benchmarks.cli_startup import DELTA_OPEN, DESCRIBE, HELP, PYTHON_START
from benchmarks.cold_pass import COLD, DUCKDB_PROCESS, PROCESS, WARM
from benchmarks.embedded_sql import DUCKDB_COUNT, EMBEDDED_SQL
from benchmarks.endpoint import API_PRODUCE, API_READ, ENDPOINT_CONSUME, ENDPOINT_PRODUCE
from benchmarks.fleet import COMMIT, IDLE_CYCLE, MARGINAL
from benchmarks.runner import (
    CASE_SECONDS,
    CONNECT_PASS,
    PARQUET_LOG,
    PARQUET_READ,
    PARQUET_STATE,
    PYARROW_BASELINE,
    S3_PASS,
    SOURCE_APPEND,
    SOURCE_READ,
    SOURCE_STREAM,
    SOURCE_WRITE,
    VIEW_LOG,
    VIEW_STATE,
    Timings,
)
from benchmarks.transactions import PLAIN_CLEAN, PLAIN_PRODUCE, TXN_CLEAN, TXN_PRODUCE
from benchmarks.workload import Workload

PASS = "deltalog clean pass"

#: (label, deltalog side, alternative, target ratio or None); ratio = deltalog time / alternative time.
TIME_COMPARISONS = [
    ("1. pass vs Spark `row_number()` dedupe", PASS, "spark row_number() dedupe", 0.5),
    ("2. pass vs Spark read + rewrite of every byte", PASS, "spark read + rewrite", 1.0),
    ("3. pass vs DuckDB dedupe (same Parquet files)", PASS, "duckdb dedupe", 1.0),
    ("4. pass vs delta-rs MERGE into a current-state table", PASS, "delta-rs MERGE", None),
    ("7. read current state: compacted vs uncompacted", "read current state, compacted",
     "read current state, uncompacted", None),
    ("8. pass on Spark Connect vs the same pass on the classic session", CONNECT_PASS, PASS, 1.2),
    ("9. pass on a store on the local S3 server (moto) vs the same pass on a local disk", S3_PASS, PASS, None),
    ('10. batch read through format("deltalog") vs spark.read.parquet of the same files', SOURCE_READ,
     PARQUET_READ, 1.2),
    ('11. df.write.format("deltalog") vs store.append of the same Arrow data', SOURCE_WRITE, SOURCE_APPEND, 1.5),
    ("13. transactional produce (one transaction, 3 partitions) vs store.produce of the same batches",
     TXN_PRODUCE, PLAIN_PRODUCE, 1.5),
    ("14. pass over a log with 10% aborted transactions vs the same log without transactions", TXN_CLEAN,
     PLAIN_CLEAN, 1.2),
    ("15. `deltalog sql` count of the current state vs DuckDB's dedupe of the same files (processes, start to exit)",
     EMBEDDED_SQL, DUCKDB_COUNT, 2.0),
    ("16. Spark view of the log (local store) vs the same count over spark.read.parquet", VIEW_LOG, PARQUET_LOG,
     1.1),
    ("17. Spark view of the current state (local store) vs the same query over spark.read.parquet", VIEW_STATE,
     PARQUET_STATE, 1.1),
    ("18. confluent-kafka producer through `deltalog serve`'s endpoint vs store.produce of the same records",
     ENDPOINT_PRODUCE, API_PRODUCE, 2.0),
    ("19. confluent-kafka consumer through the endpoint vs store.read of the same partition", ENDPOINT_CONSUME,
     API_READ, 2.0),
    ("20. pass vs a plain pyarrow dedupe (read + dedupe + write of the same files, one process, all cores; a "
     "baseline, not a floor: the pass beats it at the medium preset)", PASS, PYARROW_BASELINE, None),
    ("21. `deltalog --help` vs the interpreter's own start, `python -c pass` (processes, start to exit; target: the "
     "help under 0.5 s)", HELP, PYTHON_START, None),
    ("21. `deltalog topics describe` vs delta-rs opening the same partition table (processes, start to exit)",
     DESCRIBE, DELTA_OPEN, None),
    ("22. the first pass of a fresh process vs the same pass run again in it (the scheduled job's pass is always "
     "the first; the issue sets the target at the medium preset)", COLD, WARM, 1.3),
    ("22. a pass, fresh process to exit (Spark's own start, its warm-up included, in the times table) vs DuckDB's "
     "dedupe of the same files as a whole process", PROCESS, DUCKDB_PROCESS, None),
    ("23. cleaning N small partitions (N = 1,000; 200 at the tiny preset): marginal cost per partition vs one Delta "
     "commit of such a partition", MARGINAL, COMMIT, 3.0),
]
#: Row 24's target: an idle cycle over the N partitions in a fresh process, seconds, with no JVM started.
IDLE_CYCLE_TARGET_S = 5.0


def _sec(v: float) -> str:
    """Seconds with two decimals, three below 0.1 s (row 23's marginal cost and its commit are hundredths)."""
    return f"{v:.3f}" if abs(v) < 0.1 else f"{v:.2f}"


def _fmt_s(values: list[float]) -> str:
    return ", ".join(_sec(v) for v in values)


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def ratios(t: Timings) -> dict[str, Any]:
    """The figures the targets are about, as data."""
    out: dict[str, Any] = {}
    for label, ours, theirs, target in TIME_COMPARISONS:
        if ours not in t.seconds or theirs not in t.seconds:  # a run without that case (--no-connect, --no-s3,
            continue  # or from before the case existed)
        r = t.median(ours) / t.median(theirs)
        out[label] = {"ours": t.median(ours), "theirs": t.median(theirs), "ratio": r, "target": target,
                      "met": None if target is None else r <= target}
    n = t.figures["append_records"]
    store_rate = n / t.median("store.append")
    delta_rate = n / t.median("delta-rs write_deltalake")
    out["6. appends"] = {"store_rate": store_rate, "delta_rate": delta_rate, "ratio": store_rate / delta_rate,
                         "records_rate": n / t.median("store.append, Records"),
                         "target": 0.8, "met": store_rate / delta_rate >= 0.8}
    if IDLE_CYCLE in t.seconds:  # older runs did not measure it
        s = t.median(IDLE_CYCLE)
        out["24. idle cycle"] = {"seconds": s, "partitions": t.figures.get("fleet_partitions"),
                                 "target": IDLE_CYCLE_TARGET_S, "met": s <= IDLE_CYCLE_TARGET_S}
    if SOURCE_STREAM in t.seconds:  # older runs did not measure it
        out["12. streaming read"] = {"records_per_s": t.figures["stream_records"] / t.median(SOURCE_STREAM)}
    if "idempotent producer.send, 3 partitions" in t.seconds:  # older runs did not measure it
        idem, plain = t.median("idempotent producer.send, 3 partitions"), t.median("store.produce, 3 partitions")
        out["6. idempotent produce"] = {"idempotent_rate": n / idem, "plain_rate": n / plain, "ratio": idem / plain}
    return out


def write_markdown(path: str, w: Workload, t: Timings, machine: dict[str, Any], repeats: int,
                   plot_name: str) -> None:
    r = ratios(t)
    mem = t.figures["map_memory"]
    gen = t.figures["generated"]
    dirty = gen["dirty_records"]
    map_s = t.median("offset map build")
    cores = machine["cores"]
    clean = t.figures["clean"][-1]
    lines = [
        "# Benchmarks",
        "",
        f"Written by `python -m benchmarks --preset {w.name} --workload {w.values}` on {dt.date.today().isoformat()}; "
        "[how the harness works](#how-it-works). Every row is the median of "
        f"{repeats} rounds run side by side in one process, alternating; ratios are deltalog's time over the "
        "alternative's (below 1: deltalog is faster).",
        "",
        f"![benchmark results]({plot_name})",
        "",
        "## Results",
        "",
        "| comparison | deltalog (s) | alternative (s) | ratio | target | |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, v in r.items():
        if label.startswith(("6.", "12.", "24.")):
            continue
        target = "" if v["target"] is None else f"<= {v['target']:.1f}x"
        lines.append(f"| {label} | {_sec(v['ours'])} | {_sec(v['theirs'])} | {v['ratio']:.2f}x | {target} | "
                     f"{_met(v['met'])} |")
    a = r["6. appends"]
    lines += [
        "",
        "| appends (6) | records/s | ratio | target | |",
        "|---|---:|---:|---:|---|",
        f"| `store.append` of Arrow batches ({w.append_batch:,} records each) | {a['store_rate']:,.0f} | "
        f"{a['ratio']:.2f}x | >= 0.8x | {_met(a['met'])} |",
        f"| `store.append` of `Record` lists, same batches | {a['records_rate']:,.0f} | "
        f"{a['records_rate'] / a['delta_rate']:.2f}x | | |",
        f"| delta-rs `write_deltalake`, same Arrow batches | {a['delta_rate']:,.0f} | 1.00x | | |",
    ]
    if "6. idempotent produce" in r:
        ip = r["6. idempotent produce"]
        lines += [
            f"| `store.produce` of the same batches to 3 partitions | {ip['plain_rate']:,.0f} | | | |",
            f"| idempotent `producer.send`, same batches, 3 partitions (time ratio vs `store.produce`) | "
            f"{ip['idempotent_rate']:,.0f} | {ip['ratio']:.2f}x | | |",
        ]
    if "24. idle cycle" in r:
        ic = r["24. idle cycle"]
        lines += ["", f"Idle cycle (24): a cleaner cycle over the {ic['partitions']:,} cleaned partitions of row 23, in a "
                  f"fresh process with no JVM started, took {ic['seconds']:.2f} s (target <= {ic['target']:.0f} s: "
                  f"{_met(ic['met'])})."]
    if "12. streaming read" in r:
        lines += ["", f"Streaming read through `format(\"deltalog\")` (12), earliest offset to the end with "
                  f"`availableNow` into Spark's `noop` sink: {r['12. streaming read']['records_per_s']:,.0f} "
                  "records/s."]
    lines += [
        "",
        "| offset map (5) | measured | Kafka | target | |",
        "|---|---:|---:|---:|---|",
        f"| map build (pass 1), records/s per core ({dirty:,} records, {mem['entries']:,} keys, {cores} cores) | "
        f"{dirty / map_s / cores:,.0f} | | | |",
        f"| the map (hash halves + latest offset, sorted arrays), bytes/entry | "
        f"{mem['map_bytes_per_entry']:.1f} | 24 | <= 48 | {_met(mem['map_bytes_per_entry'] <= 48)} |",
        f"| latest-offset bitmap, beside the map ({mem['bitmap_bytes']:,} bytes for {mem['range']:,} offsets), bytes/entry | "
        f"{mem['bitmap_bytes_per_entry']:.2f} | | | |",
        f"| hashes sent to the pass-2 tasks that read clean files, bytes/entry | "
        f"{mem['broadcast_bytes_per_entry']:.1f} | | | |",
        f"| keys one pass's map holds in 128 MiB x 0.9 | {mem['keys_in_128mib']:,} | 5,033,164 | "
        f">= 5,000,000 | {_met(mem['keys_in_128mib'] >= 5_000_000)} |",
        "",
        "### Every round (seconds)",
        "",
        "| measured | rounds | median |",
        "|---|---|---:|",
    ]
    for name, rounds in t.seconds.items():
        lines.append(f"| {name} | {_fmt_s(rounds)} | {_sec(t.median(name))} |")
    for name, why in t.figures.get("skipped", {}).items():
        lines.append(f"| {name} | skipped in {len(why)} round(s): {why[-1]} | |")
    lines += _run_time(t)
    values = (f"{w.value_bytes}-byte random values" if w.values == "random"
              else "JSON changelog documents (`--workload json`)")
    lines += [
        "",
        f"The last pass: {clean['records_read']:,} records read, {clean['records_written']:,} written, "
        f"{clean['bytes_read'] / 1e6:,.1f} MB -> {clean['bytes_written'] / 1e6:,.1f} MB, map {clean['map_ms']:,} ms, "
        f"copy {clean['copy_ms']:,} ms. Current state read via {t.figures.get('current_state_via')}.",
        "",
        "## Workload",
        "",
        f"Preset `{w.name}` (seed {w.seed}): {w.records:,} appends over {w.keys:,} keys, {values}, "
        f"{w.tombstone_fraction:.0%} tombstones, the last {w.dirty_fraction:.0%} of the log dirty. The log "
        f"holds {gen['records_in_log']:,} records ({gen['clean_records']:,} in the clean prefix, "
        f"{gen['dirty_records']:,} dirty) in {gen['files']} files, {gen['bytes'] / 1e6:,.1f} MB; "
        f"{gen['survivors']:,} survive a pass ({gen['live_keys']:,} live keys). Appends: "
        f"{w.append_records:,} records in batches of {w.append_batch:,}.",
        "",
        "## Machine",
        "",
        f"- {machine['cores']} cores ({machine['cpu']}), {machine['memory_gib']} GiB memory, {machine['os']}; "
        f"load average at start {', '.join(f'{x:.1f}' for x in machine['load_average'] or ())} (a shared machine: "
        "absolute times are noisy, ratios hold better)",
        f"- Python {machine['python']}, {machine['java']}",
        "- " + ", ".join(f"{k} {v}" for k, v in machine["versions"].items()),
        "",
    ]
    notes_path = os.path.join(os.path.dirname(__file__), "NOTES.md")
    if os.path.exists(notes_path):
        with open(notes_path) as f:
            lines.append(f.read().rstrip() + "\n")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def _run_time(t: Timings) -> list[str]:
    """What the run cost in wall time, case by case (all rounds; a case's setup and checks included): what a quiet
    machine must be kept quiet for. Runs from before the figure existed have none."""
    took = t.figures.get(CASE_SECONDS)
    if not took:
        return []
    from benchmarks.runner import ROW_CASES

    rows = {case: [r for r, cases in ROW_CASES.items() if case in cases] for case in took}
    whole = t.figures.get("run_seconds")
    lines = ["", "### How long the run took (wall seconds)", "",
             f"The whole run: {whole / 60:.1f} min (Spark's start, the servers' and the report included)."
             if whole else "", "", "| case | report rows | every round | all rounds |", "|---|---|---|---:|"]
    for case, rounds in took.items():
        lines.append(f"| {case} | {', '.join(map(str, rows[case])) or '-'} | {', '.join(f'{v:.0f}' for v in rounds)} | "
                     f"{sum(rounds):.0f} |")
    return lines


def write_plot(path: str, w: Workload, t: Timings, machine: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = ratios(t)
    r.pop("6. idempotent produce", None)  # a table row only: the plot's ratios are the targeted ones
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    names = [n for n in t.seconds if n not in ("store.append", "store.append, Records", "delta-rs write_deltalake",
                                               "store.produce, 3 partitions",
                                               "idempotent producer.send, 3 partitions")]
    medians = [t.median(n) for n in names]
    colors = ["tab:blue" if n == PASS or n.startswith("offset map") or "compacted" == n[-9:] else "tab:gray"
              for n in names]
    left.barh(names[::-1], medians[::-1], color=colors[::-1])
    left.set_xlabel("seconds (median)")
    left.set_title(f"preset {w.name} ({w.values}): {t.figures['generated']['records_in_log']:,} records, "
                   f"{machine['cores']} cores")
    labels, values, targets, at_least = [], [], [], []
    for label, v in r.items():
        if "ratio" not in v or "target" not in v:  # figures without a ratio target (idempotent produce, streaming,
            # the idle cycle's seconds)
            continue
        appends = label == "6. appends"  # a rate: deltalog must be at least this fast
        labels.append("appends vs delta-rs" if appends else label.split(":")[0].split(" vs ")[-1][:38])
        values.append(v["ratio"])
        targets.append(v["target"])
        at_least.append(appends)
    y = list(range(len(labels)))[::-1]
    right.barh(y, values, color=["tab:green" if (tg is None or (v >= tg if up else v <= tg)) else "tab:red"
                                 for v, tg, up in zip(values, targets, at_least, strict=True)])
    for yi, tg in zip(y, targets, strict=True):
        if tg is not None:
            right.plot([tg, tg], [yi - 0.4, yi + 0.4], color="black", linewidth=2)
    right.set_yticks(y, labels)
    right.set_xlabel("ratio (deltalog / alternative; appends: rate ratio); black: target")
    right.set_title("ratios")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
