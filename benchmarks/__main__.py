"""``python -m benchmarks --preset small``: run every comparison and write docs/benchmarks.md and .png."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace

from benchmarks.check import BenchmarkFailure
from benchmarks.workload import KEY_HASH_KINDS, PRESETS, VALUE_KINDS, with_values

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--workload", choices=VALUE_KINDS, default="random",
                   help="the values: random bytes (incompressible) or JSON changelog documents keyed by customer id "
                        "(compress about 5x); every row runs on either")
    p.add_argument("--key-hash", choices=KEY_HASH_KINDS, default="all",
                   help="which generated files carry the key-hash columns appends write: all, none (an older "
                        "store: pass 1 hashes every key) or half (every other file)")
    p.add_argument("--repeats", type=int, default=3, help="rounds; each measured thing runs once a round")
    p.add_argument("--cores", type=int, default=None, help="Spark local[N] and DuckDB threads (default: all)")
    p.add_argument("--driver-memory", default=None, help="spark.driver.memory (default: the embedded session's)")
    p.add_argument("--no-s3", action="store_true",
                   help="skip the pass on a store on the local S3 server (moto, from the dev extras)")
    p.add_argument("--no-connect", action="store_true",
                   help="skip the pass through Spark Connect (which starts a Connect server JVM beside the session)")
    p.add_argument("--work-dir", default=None, help="where the tables go (default: a temporary directory)")
    p.add_argument("--out-dir", default=os.path.join(REPO, "docs"), help="where benchmarks.md/.png are written")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--rows", default=None,
                   help="run only the cases behind these report rows (comma-separated numbers, e.g. 10,11): "
                        "prints their rounds and ratios and writes no report (a partial run cannot fill it)")
    p.add_argument("--report-only", action="store_true",
                   help="re-render benchmarks.md/.png from the benchmarks.json of the last run (e.g. after editing "
                        "benchmarks/NOTES.md), without running anything")
    args = p.parse_args(argv)
    rows = _rows(p, args.rows)
    raw = os.path.join(args.out_dir, "benchmarks.json")
    if args.report_only:
        return _render(args, raw)

    from benchmarks import machine, report
    from benchmarks.runner import Bench
    from deltalog.sql.session import DEFAULT_SPARK_CONF, local_session

    info = machine.describe()
    cores = args.cores or int(info["cores"])
    conf = {"spark.driver.memory": args.driver_memory} if args.driver_memory else {}
    spark = local_session(master=f"local[{cores}]", conf=conf, app_name="deltalog-benchmarks")
    work = args.work_dir or tempfile.mkdtemp(prefix="deltalog-bench-")
    os.makedirs(work, exist_ok=True)
    w = replace(with_values(PRESETS[args.preset], args.workload), key_hash=args.key_hash)
    started = time.monotonic()
    server = None
    s3 = None
    try:
        connect = None
        if not args.no_connect and (rows is None or 8 in rows):
            from tooling.services import ConnectServer

            # A server JVM with the classic session's cores and settings, so the two passes differ by the session only.
            server = ConnectServer(os.path.join(work, "connect-server"), master=f"local[{cores}]",
                                   conf={k: str(v) for k, v in {**DEFAULT_SPARK_CONF, **conf}.items()}).start()
            connect = server.session()
        s3 = None
        if not args.no_s3 and (rows is None or 9 in rows):
            from tooling.services import S3Server

            s3 = S3Server(os.path.join(work, "s3-server")).start()
        timings = Bench(w, work, spark, cores, connect=connect, s3=s3).run(args.repeats, rows=rows)
    except BenchmarkFailure as e:
        print(f"BENCHMARK FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
        if s3 is not None:
            s3.stop()
        if not args.keep and args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if rows is not None:
        _print_partial(timings)
        print(f"in {time.monotonic() - started:.0f} s")
        return 0
    info["cores"] = cores
    timings.figures["run_seconds"] = time.monotonic() - started  # Spark's and the servers' start included
    os.makedirs(args.out_dir, exist_ok=True)
    with open(raw, "w") as f:
        json.dump({"preset": args.preset, "workload": args.workload, "repeats": args.repeats, "machine": info, "seconds": timings.seconds,
                   "figures": timings.figures}, f, indent=1, default=str)
    print(json.dumps({k: v for k, v in report.ratios(timings).items()}, indent=1, default=str))
    print(json.dumps(timings.figures["map_memory"], indent=1))
    _render(args, raw)
    print(f"in {time.monotonic() - started:.0f} s")
    return 0


def _rows(p: argparse.ArgumentParser, text: str | None) -> set[int] | None:
    from benchmarks.runner import ROW_CASES

    if text is None:
        return None
    try:
        rows = {int(r) for r in text.split(",") if r.strip()}
    except ValueError:
        rows = set()
    if not rows or not rows <= set(ROW_CASES):
        p.error(f"--rows takes report row numbers among {', '.join(map(str, sorted(ROW_CASES)))}, got {text!r}")
    return rows


def _print_partial(timings: object) -> None:
    """The rounds and medians of a ``--rows`` run, the ratios of the comparisons it ran both sides of, and what each
    case took."""
    from benchmarks import report
    from benchmarks.runner import CASE_SECONDS

    t = timings
    for name, values in t.seconds.items():  # type: ignore[attr-defined]
        print(f"{name}: {', '.join(f'{v:.2f}' for v in values)} (median {t.median(name):.2f})")  # type: ignore[attr-defined]
    for label, ours, theirs, target in report.TIME_COMPARISONS:
        if ours in t.seconds and theirs in t.seconds:  # type: ignore[attr-defined]
            r = t.median(ours) / t.median(theirs)  # type: ignore[attr-defined]
            print(f"{label}: {r:.2f}x" + (f" (target <= {target}x)" if target else ""))
    for name, values in t.figures.items():  # type: ignore[attr-defined]
        if isinstance(values, list) and values and all(isinstance(v, int | float) for v in values):
            print(f"{name}: {', '.join(f'{v:g}' for v in values)}")  # per-round figures, e.g. the endpoint's CPU
    for case, rounds in t.figures.get(CASE_SECONDS, {}).items():  # type: ignore[attr-defined]
        print(f"wall time of {case}: {', '.join(f'{v:.0f}' for v in rounds)} s")


def _render(args: argparse.Namespace, raw: str) -> int:
    """benchmarks.md and .png from a run's raw figures (benchmarks.json)."""
    from benchmarks import report
    from benchmarks.runner import Timings

    with open(raw) as f:
        data = json.load(f)
    timings = Timings(seconds=data["seconds"], figures=data["figures"])
    md = os.path.join(args.out_dir, "benchmarks.md")
    png = os.path.join(args.out_dir, "benchmarks.png")
    w = with_values(PRESETS[data["preset"]], data.get("workload", "random"))
    report.write_markdown(md, w, timings, data["machine"], data["repeats"], os.path.basename(png))
    report.write_plot(png, w, timings, data["machine"])
    print(f"wrote {md} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
