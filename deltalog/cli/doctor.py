"""``deltalog doctor``: check Java, Spark, delta-rs, package versions and the store (see :mod:`deltalog.cli.doctor_checks`)."""

from __future__ import annotations

import argparse

import deltalog.cli.common as common
from deltalog.cli import doctor_checks as checks
from deltalog.cli import output
from deltalog.cli.exit_codes import EXIT_BROKEN_DATA, EXIT_FAILURE, EXIT_OK
from deltalog.cli.progress import Steps


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor", help="check Java, Spark, delta-rs and package versions, and say what to fix",
        description="Check that this machine can run deltalog: Python, Java 17+, a local Spark session "
        "(started for real, about 10 s), delta-rs, package versions, whether the store is writable, and every "
        "partition of the store (without Spark): its Delta log (no gap in the commit files, the checkpoint hint "
        "names a readable checkpoint) and its data files (present, of the size their commit records, with a "
        "readable Parquet footer); orphaned data files are a warning. Exits 3 if a partition is damaged (broken data), else 1 if any other "
        "check FAILs.",
    )
    p.add_argument("--no-spark", action="store_true", help="skip starting a Spark session")
    output.add_output_option(p, text="one line per check, and what to fix",
                             json_help="one object: ok, checks (name, status, detail, fix)")
    common.add_store_option(p)
    p.set_defaults(func=doctor)


def doctor(args: argparse.Namespace) -> int:
    with Steps("doctor", unit=" steps") as steps:
        results = checks.run_checks(common.store_path(args), spark=not args.no_spark,
                                    storage_options=common.storage_options(args) or None, progress=steps)
    if output.wants_json(args):
        output.emit({"ok": not checks.failed(results), "checks": [c.as_dict() for c in results]})
    else:
        checks.render(results)
    if any(c.status == checks.FAIL and c.name.startswith("damage ") for c in results):
        return EXIT_BROKEN_DATA
    return EXIT_FAILURE if checks.failed(results) else EXIT_OK
