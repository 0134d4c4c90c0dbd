"""``python -m benchmarks.scaling --presets small,medium,large``: does a pass's time grow linearly with the records?

Runs the cases behind rows 3 and 20 (the pass, DuckDB's dedupe and the pyarrow baseline (once called the floor), side by side, checked every round as
``python -m benchmarks`` checks them) at each preset in turn, in one Spark session, each preset's files removed
before the next is generated (the large preset's take ~6 GB, and each pass copies them). Each preset's figures go
to a JSON-lines file as soon as they are measured (``--out``), so presets run at different times can be put in one
table: ``--table`` prints the markdown table of such a file (records in the log, MB of files, pass seconds and
seconds per million records, DuckDB, the pyarrow baseline, the load before and after) without running anything.

A case that cannot run at a size (the pyarrow baseline holds the whole log decoded; DuckDB may run out of memory) is reported
as skipped, with the reason, instead of timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from benchmarks.workload import PRESETS, VALUE_KINDS, with_values

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASS = "deltalog clean pass"
DUCKDB = "duckdb dedupe"


def measure(spark: Any, preset: str, values: str, cores: int, repeats: int, work_root: str | None) -> dict[str, Any]:
    """Rows 3 and 20 at ``preset``: the medians, every round, and the load around them."""
    from benchmarks.runner import PYARROW_BASELINE, Bench

    w = with_values(PRESETS[preset], values)
    work = tempfile.mkdtemp(prefix=f"deltalog-scaling-{preset}-", dir=work_root)
    load_before = os.getloadavg()
    started = time.monotonic()
    try:
        t = Bench(w, work, spark, cores).run(repeats, rows={3, 20})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gen = t.figures["generated"]
    row: dict[str, Any] = {
        "preset": preset, "workload": values, "records": gen["records_in_log"], "dirty": gen["dirty_records"],
        "survivors": gen["survivors"], "mb": gen["bytes"] / 1e6, "files": gen["files"], "cores": cores,
        "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": round((time.monotonic() - started) / 60, 1),
        "generate_s": gen["seconds"], "rounds": t.seconds, "skipped": t.figures.get("skipped", {}),
        # Each pass's own figures (map_ms, copy_ms, records and bytes read and written): where its time went.
        "passes": t.figures.get("clean", []),
    }
    for key, name in (("pass", PASS), ("duckdb", DUCKDB), ("floor", PYARROW_BASELINE)):
        row[key] = t.median(name) if name in t.seconds else None
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The scaling table of measured rows (one line each, in the order given)."""
    lines = ["| preset (values) | records in the log | MB of files | pass (s) | s per M records | DuckDB (s) | "
             "pyarrow baseline (s) | pass / DuckDB | pass / pyarrow | load before / after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        def cell(key: str, r: dict[str, Any] = r) -> str:
            return "skipped" if r[key] is None else f"{r[key]:.2f}"

        def ratio(key: str, r: dict[str, Any] = r) -> str:
            return "" if r[key] is None else f"{r['pass'] / r[key]:.2f}x"

        lines.append(f"| {r['preset']} ({r['workload']}) | {r['records']:,} | {r['mb']:,.0f} | {r['pass']:.2f} | "
                     f"{r['pass'] / r['records'] * 1e6:.3f} | {cell('duckdb')} | {cell('floor')} | {ratio('duckdb')} | "
                     f"{ratio('floor')} | {r['load_before'][0]:.0f} / {r['load_after'][0]:.0f} |")
    skipped = []
    for r in rows:
        for name, why in r["skipped"].items():
            why = [why] if isinstance(why, str) else why
            ran = sum(len(v) for k, v in r.get("rounds", {}).items() if k == name)
            skipped.append(f"{r['preset']} ({r['workload']}) {name}: skipped in {len(why)} round(s)"
                           f"{f' (the median is of the {ran} it ran)' if ran else ''}: {why[-1]}")
    return "\n".join(lines + ([""] + [f"- skipped: {s}" for s in skipped] if skipped else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__)
    p.add_argument("--presets", default="small,medium,large", help="comma-separated presets, run in this order")
    p.add_argument("--workload", choices=VALUE_KINDS, default="random")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cores", type=int, default=None, help="Spark local[N] and DuckDB threads (default: all)")
    p.add_argument("--work-dir", default=None, help="where each preset's tables go (default: the temporary directory)")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks-scaling.jsonl"),
                   help="JSON lines, one per preset measured (appended; default: docs/benchmarks-scaling.jsonl)")
    p.add_argument("--table", action="store_true", help="print the table of --out and run nothing")
    args = p.parse_args(argv)
    if not args.table:
        presets = [x.strip() for x in args.presets.split(",") if x.strip()]
        unknown = [x for x in presets if x not in PRESETS]
        if unknown or not presets:
            p.error(f"--presets takes names among {', '.join(sorted(PRESETS))}, got {args.presets!r}")
        from benchmarks import machine
        from deltalog.sql.session import local_session

        cores = args.cores or int(machine.describe()["cores"])
        spark = local_session(master=f"local[{cores}]", app_name="deltalog-scaling")
        try:
            for preset in presets:
                row = measure(spark, preset, args.workload, cores, args.repeats, args.work_dir)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(table([row]), flush=True)
        finally:
            spark.stop()
    with open(args.out) as f:
        print(table([json.loads(line) for line in f if line.strip()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
