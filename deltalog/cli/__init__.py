"""The ``deltalog`` command line.

Each command group is a module with a ``register(subparsers)`` function that adds its sub-commands and
binds each to a handler ``func(args) -> int`` via ``set_defaults(func=...)``. To add a command, write
such a module and add it to :data:`COMMAND_MODULES`.

Exit codes (:mod:`deltalog.cli.exit_codes`): 0 success, 1 a failure to run (a
:class:`~deltalog.errors.DeltalogError`, an OS error such as a store that cannot be written, or an error Spark
raised), 2 bad usage (the command's usage is printed), 3 broken data found (``check``, ``doctor``); 130 on Ctrl-C. Errors are printed as
``deltalog: error: ...`` on stderr, never as a traceback; a Spark error as Spark's message, without the Java
stack. Every command takes ``--output text|json`` and ``--verbose`` (:mod:`deltalog.cli.output`).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from deltalog import __version__, extras
from deltalog.cli import (
    check,
    clean,
    cleaner,
    common,
    configs,
    consume,
    consumer_groups,
    demo,
    doctor,
    history,
    output,
    produce,
    serve,
    sql,
    state,
    store_errors,
    topics,
    transactions,
    views,
)
from deltalog.cli.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE
from deltalog.errors import DeltalogError
from deltalog.log import damage

#: The command groups, in the order ``deltalog --help`` lists them.
COMMAND_MODULES = [
    topics,
    produce,
    consume,
    history,
    consumer_groups,
    transactions,
    demo,
    doctor,
    sql,
    views,
    state,
    serve,
    configs,
    check,
    clean,
    cleaner,
]


class _Parser(argparse.ArgumentParser):
    """argparse's parser (every subcommand's too: subparsers take their parent's class) that suggests the nearest
    command for a misspelt one, as git does: ``deltalog topcis`` -> ``did you mean 'topics'?``."""

    def error(self, message: str) -> NoReturn:
        m = _INVALID_CHOICE.search(message)
        if m is not None:
            choices = re.findall(r"'([^']*)'", m.group("choices"))
            near = difflib.get_close_matches(m.group("given"), choices, n=1, cutoff=0.6)
            if near:
                message = f"{message}; did you mean {near[0]!r}?"
        super().error(message)


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="deltalog",
        description="Kafka's log compaction (cleanup.policy=compact) on Delta Lake tables and Spark.",
        epilog="Run 'deltalog COMMAND --help' for the options of a command. "
        "Start with 'deltalog demo' or 'deltalog doctor'.",
    )
    parser.add_argument("--version", action="version", version=f"deltalog {__version__}")
    common.add_global_options(parser)
    output.add_global_output_option(parser)
    output.add_verbose_option(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    for _, leaf in output.leaf_parsers(parser):  # --verbose also after the command, as --store
        output.add_verbose_option(leaf, suppress_default=True)
        leaf.set_defaults(leaf_parser=leaf)  # for its usage on a usage error
        output.mark_output_unset(leaf)  # --output before the command applies unless one follows it
    return parser


#: kafka-topics.sh's action flags, and the ``deltalog topics`` subcommand each one names.
TOPICS_ACTIONS = {"--create": "create", "--list": "list", "--describe": "describe", "--alter": "alter",
                  "--delete": "delete"}


def kafka_topics_actions(argv: Sequence[str]) -> list[str]:
    """``deltalog topics --create --topic t ...`` (kafka-topics.sh's shape) as ``deltalog topics create --topic t
    ...``: the first action flag after ``topics`` becomes its subcommand, wherever it stands among the flags."""
    args = list(argv)
    if "topics" not in args:
        return args
    at = args.index("topics")
    rest = args[at + 1:]
    if not rest or rest[0] in TOPICS_ACTIONS.values() or rest[0] in ("-h", "--help"):
        return args
    for i, word in enumerate(rest):
        if word in TOPICS_ACTIONS:
            return args[:at + 1] + [TOPICS_ACTIONS[word]] + rest[:i] + rest[i + 1:]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(kafka_topics_actions(sys.argv[1:] if argv is None else argv))
        if extra:  # said by the command's own parser: its usage, and the nearest option it has
            _unrecognized(getattr(args, "leaf_parser", None) or parser, extra)
    except SystemExit as e:  # --help, --version, and usage errors (argparse has printed them)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    leaf = getattr(args, "leaf_parser", None)
    output.apply_global_output(args)
    try:
        common.require_extras(args)  # a command that needs Spark says which extra brings it, in one line
        with output.command_output(bool(getattr(args, "verbose", False))):
            return int(func(args) or 0)
    except common.UsageError as e:  # the command's usage, then the error, as argparse prints its own
        if leaf is not None:
            leaf.print_usage(sys.stderr)
        print(f"deltalog: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (DeltalogError, OSError) as e:
        if isinstance(e, BrokenPipeError):  # `deltalog consume ... | head`: the reader has what it wanted
            return 0
        print(f"deltalog: error: {_store_error(e, args) or e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("deltalog: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ImportError as e:  # a path that reached pyspark or great-expectations without asking first
        missing = extras.from_import_error(e, f"deltalog {args.command}")
        if missing is None:
            raise
        print(f"deltalog: error: {missing}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as e:
        unreachable = _store_error(e, args)  # obstore's and delta-rs's own errors: one line, not their dumps
        if unreachable is not None:
            print(f"deltalog: error: {unreachable}", file=sys.stderr)
            return EXIT_FAILURE
        if not output.is_spark_error(e):
            raise
        corrupt = damage.worker_error(e)  # a Spark task found a damaged file: its own words, not the stack
        print(f"deltalog: error: {corrupt if corrupt is not None else output.spark_error_message(e)}", file=sys.stderr)
        return EXIT_FAILURE


def _unrecognized(parser: argparse.ArgumentParser, extra: list[str]) -> NoReturn:
    message = f"unrecognized arguments: {' '.join(extra)}"
    first = next((a for a in extra if a.startswith("-")), None)
    if first is not None:
        options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
        near = difflib.get_close_matches(first.split("=", 1)[0], options, n=1, cutoff=0.6)
        if near:
            message += f"; did you mean {near[0]!r}?"
    parser.error(message)


def _store_error(error: BaseException, args: argparse.Namespace) -> str | None:
    """One line for an object store that is unreachable or refuses the credentials (:mod:`.store_errors`)."""
    try:
        store = common.store_path(args)
    except DeltalogError:
        return None
    return store_errors.one_line(error, store)


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
