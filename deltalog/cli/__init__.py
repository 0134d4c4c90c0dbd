"""The ``deltalog`` command line.

Each command group is a module with a ``register(subparsers)`` function that adds its sub-commands and
binds each to a handler ``func(args) -> int`` via ``set_defaults(func=...)``. To add a command, write
such a module and add it to :data:`COMMAND_MODULES`.

Exit codes: 0 success, 1 a :class:`~deltalog.errors.DeltalogError` (or an OS error such as a store
that cannot be written, or an error Spark raised), 2 bad usage; 130 on Ctrl-C. Errors are printed as
``deltalog: error: ...`` on stderr, never as a traceback; a Spark error as Spark's message, without the Java
stack. Every command takes ``--output text|json`` and ``--verbose`` (:mod:`deltalog.cli.output`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deltalog import __version__, extras
from deltalog.cli import (
    check,
    clean,
    cleaner,
    common,
    consume,
    consumer_groups,
    demo,
    doctor,
    output,
    produce,
    serve,
    sql,
    topics,
    transactions,
)
from deltalog.errors import DeltalogError
from deltalog.log import damage

#: The command groups, in the order ``deltalog --help`` lists them.
COMMAND_MODULES = [
    topics,
    produce,
    consume,
    consumer_groups,
    transactions,
    demo,
    doctor,
    sql,
    serve,
    check,
    clean,
    cleaner,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltalog",
        description="Kafka's log compaction (cleanup.policy=compact) on Delta Lake tables and Spark.",
        epilog="Run 'deltalog COMMAND --help' for the options of a command. "
        "Start with 'deltalog demo' or 'deltalog doctor'.",
    )
    parser.add_argument("--version", action="version", version=f"deltalog {__version__}")
    common.add_global_options(parser)
    output.add_verbose_option(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    for _, leaf in output.leaf_parsers(parser):  # --verbose also after the command, as --store
        output.add_verbose_option(leaf, suppress_default=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, and usage errors (argparse has printed them)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        common.require_extras(args)  # a command that needs Spark says which extra brings it, in one line
        with output.command_output(bool(getattr(args, "verbose", False))):
            return int(func(args) or 0)
    except common.UsageError as e:
        print(f"deltalog: error: {e}", file=sys.stderr)
        return 2
    except (DeltalogError, OSError) as e:
        if isinstance(e, BrokenPipeError):  # `deltalog consume ... | head`: the reader has what it wanted
            return 0
        print(f"deltalog: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("deltalog: interrupted", file=sys.stderr)
        return 130
    except ImportError as e:  # a path that reached pyspark or great-expectations without asking first
        missing = extras.from_import_error(e, f"deltalog {args.command}")
        if missing is None:
            raise
        print(f"deltalog: error: {missing}", file=sys.stderr)
        return 1
    except Exception as e:
        if not output.is_spark_error(e):
            raise
        corrupt = damage.worker_error(e)  # a Spark task found a damaged file: its own words, not the stack
        print(f"deltalog: error: {corrupt if corrupt is not None else output.spark_error_message(e)}", file=sys.stderr)
        return 1


def console_main(argv: Sequence[str] | None = None) -> int:
    """The ``deltalog`` command (console script and ``python -m deltalog``): :func:`main`, then the embedded Spark
    session it started, if any, is stopped before the process exits (see
    :func:`deltalog.sql.session.stop_embedded_sessions`)."""
    try:
        return main(argv)
    finally:
        session = sys.modules.get("deltalog.sql.session")  # only commands that used Spark imported it
        if session is not None:
            session.stop_embedded_sessions()


__all__ = ["COMMAND_MODULES", "build_parser", "console_main", "main"]
