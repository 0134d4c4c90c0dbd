"""The ``deltalog`` command line.

Each command group is a module with a ``register(subparsers)`` function that adds its sub-commands and
binds each to a handler ``func(args) -> int`` via ``set_defaults(func=...)``. To add a command, write
such a module and add its commands to :data:`COMMANDS`.

A command's module is imported only when that command runs (or its ``--help`` is asked for): ``deltalog --help``
lists every command from :data:`COMMANDS` alone, so it imports neither the store nor pyarrow, and ``deltalog
topics list`` imports neither Spark nor the cleaner (``tests/test_cli_startup.py`` checks which modules each
loads; ``benchmarks/cli_startup.py`` times them).

Exit codes (:mod:`deltalog.cli.exit_codes`): 0 success, 1 a failure to run (a
:class:`~deltalog.errors.DeltalogError`, an OS error such as a store that cannot be written, or an error Spark
raised), 2 bad usage (the command's usage is printed), 3 broken data found (``check``, ``doctor``); 130 on Ctrl-C. Errors are printed as
``deltalog: error: ...`` on stderr (under ``--output json``: one JSON object, ``{"error": ...}``), never as a
traceback; a Spark error as Spark's message, without the Java stack. Every command takes the global options
(``--store``, ``--storage-option``, ``--config``, ``--output text|json``, ``--verbose``: :mod:`deltalog.cli.output`),
documented once, in ``deltalog --help``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from deltalog.cli import common, output
from deltalog.cli.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE
from deltalog.errors import DeltalogError
from deltalog.version import __version__

#: Every command, in the order ``deltalog --help`` lists them: its name, the module of ``deltalog.cli`` whose
#: ``register`` adds it, and its line in ``deltalog --help``, kept here so that listing the commands imports none of
#: their modules (``tests/test_cli_startup.py`` checks that each module registers its commands with these lines).
COMMANDS: dict[str, tuple[str, str]] = {
    "topics": ("topics", "create, list, describe, alter and delete topics"),
    "create": ("topics", "same as 'topics create'"),
    "list": ("topics", "same as 'topics list'"),
    "describe": ("topics", "same as 'topics describe'"),
    "alter": ("topics", "same as 'topics alter'"),
    "produce": ("produce", "append records given as JSON lines or as Kafka's console lines"),
    "consume": ("consume", "print a topic's records (all partitions, or one), optionally following new ones"),
    "history": ("history", "list a topic's Delta commits (DESCRIBE HISTORY): appends, cleans, retention, ..."),
    "consumer-groups": ("consumer_groups", "list, describe, reset and delete consumer groups (kafka-consumer-groups)"),
    "transactions": ("transactions",
                     "list and describe transactions, find hanging ones, abort (kafka-transactions)"),
    "demo": ("demo", "replay the fruit-prices walkthrough on a fresh demo store"),
    "doctor": ("doctor", "check Java, Spark, delta-rs and package versions, and say what to fix"),
    "sql": ("sql", "run SQL over the topics' log and current-state views (DuckDB in-process, or Spark)"),
    "views": ("views", "print the SQL views of the topics' log and current state for Spark, Databricks, DuckDB, "
              "Trino"),
    "serve": ("serve", "serve the store to Kafka clients (kcat, librdkafka, kafka-python) on a Kafka port"),
    "ping": ("serve", "wait until a Kafka endpoint (deltalog serve, or a broker) answers; for scripts"),
    "configs": ("configs", "users' SCRAM credentials and topic configs, as kafka-configs (--entity-type users|topics)"),
    "state": ("state", "the state tables: one row per live key, a plain Delta table beside each topic"),
    "check": ("check", "check that compaction kept its guarantees (Great Expectations suites)"),
    "clean": ("clean", "run cleaning passes now and print their figures"),
    "cleaner": ("cleaner", "run the log cleaner (retention, compaction, VACUUM); manage uncleanable partitions"),
    "status": ("cleaner", "cleaner metrics: dirty %%, uncleanable partitions, last clean, ..."),
    "completion": ("completion", "print the shell completion script (bash, zsh, fish, tcsh, powershell)"),
}

#: The global options that take a value, so that :func:`command_word` can skip it (``--store DIR topics``).
_GLOBAL_VALUE_OPTIONS = frozenset({"--store", "--storage-option", "--config", "-o", "--output"})

#: The options every command takes, documented once in ``deltalog --help`` rather than in each command's help.
_GLOBAL_ON_LEAVES = frozenset({"store", "command_storage_options", "bootstrap_server", "verbose"})
_LEAF_EPILOG = ("Global options (--store, --storage-option, --config, --output/--json, --verbose; "
                "see 'deltalog --help') are accepted before or after the command.")


def command_module(name: str) -> ModuleType:
    """The module of ``deltalog.cli`` that registers command ``name`` (imported now, if it was not). Imported with
    ``__import__``, the import statement's own path, so ``python -X importtime`` lists it (``importlib``'s does not)."""
    module = f"deltalog.cli.{COMMANDS[name][0]}"
    __import__(module)
    return sys.modules[module]


def __getattr__(name: str) -> object:
    """``deltalog.cli.COMMAND_MODULES``: every command module, imported (what tools that walk all the commands
    want; the command line itself imports only the one it runs)."""
    if name == "COMMAND_MODULES":
        return [command_module(next(n for n, (m, _) in COMMANDS.items() if m == module))
                for module in dict.fromkeys(m for m, _ in COMMANDS.values())]
    raise AttributeError(f"module 'deltalog.cli' has no attribute {name!r}")


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


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The command line's parser. ``command``: the command whose module is imported and registered, every other one
    being a stub that only lists it (``None``: stubs only, for ``deltalog --help``); the default ``"*"`` registers
    every command (documentation, tests, completion of a command not yet typed)."""
    parser = _Parser(
        prog="deltalog",
        description="Kafka's log compaction (cleanup.policy=compact) on Delta Lake tables and Spark.",
        epilog="The options above are global: every command also accepts them after its name, and accepts and "
        "ignores Kafka's --bootstrap-server. Run 'deltalog COMMAND --help' for the options of a command. "
        "Start with 'deltalog demo' or 'deltalog doctor'.",
    )
    parser.add_argument("--version", action="version", version=f"deltalog {__version__}")
    common.add_global_options(parser)
    output.add_global_output_option(parser)
    output.add_verbose_option(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    registered: set[str] = set()
    for name, (module_name, help_line) in COMMANDS.items():
        if name in subparsers.choices:
            continue
        if command == "*" or (command is not None and COMMANDS.get(command, ("",))[0] == module_name):
            if module_name not in registered:
                registered.add(module_name)
                command_module(name).register(subparsers)
            continue
        subparsers.add_parser(name, help=help_line, add_help=False)  # a stub: never parsed (main registers it first)
    for _, leaf in output.leaf_parsers(parser):
        if leaf.get_default("func") is None:  # a stub
            continue
        output.add_verbose_option(leaf, suppress_default=True)  # --verbose also after the command, as --store
        leaf.set_defaults(leaf_parser=leaf)  # for its usage on a usage error
        output.mark_output_unset(leaf)  # --output before the command applies unless one follows it
        for action in leaf._actions:
            if action.dest in _GLOBAL_ON_LEAVES:
                action.help = argparse.SUPPRESS
        leaf.epilog = f"{leaf.epilog}\n\n{_LEAF_EPILOG}" if leaf.epilog else _LEAF_EPILOG
    return parser


def command_word(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs (its first word that is not a global option or an option's value), or ``None``
    (``deltalog --help``, ``deltalog --version``, a misspelt command)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--":
            return None
        elif word.startswith("-"):
            skip = word in _GLOBAL_VALUE_OPTIONS
        else:
            return word if word in COMMANDS else None
    return None


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
    argv = kafka_topics_actions(sys.argv[1:] if argv is None else argv)
    _complete(argv)
    parser = build_parser(command_word(argv))
    try:
        args, extra = parser.parse_known_args(argv)
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
        if leaf is not None and not output.wants_json(args):
            leaf.print_usage(sys.stderr)
        return _error(args, str(e), EXIT_USAGE, e)
    except (DeltalogError, OSError) as e:
        if isinstance(e, BrokenPipeError):  # `deltalog consume ... | head`: the reader has what it wanted
            return 0
        return _error(args, str(_store_error(e, args) or e), EXIT_FAILURE, e)
    except KeyboardInterrupt as e:
        if output.wants_json(args):
            return _error(args, "interrupted", EXIT_INTERRUPTED, e)
        print("deltalog: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ImportError as e:  # a path that reached pyspark or great-expectations without asking first
        from deltalog import extras

        missing = extras.from_import_error(e, f"deltalog {args.command}")
        if missing is None:
            raise
        return _error(args, str(missing), EXIT_FAILURE, e)
    except Exception as e:
        unreachable = _store_error(e, args)  # obstore's and delta-rs's own errors: one line, not their dumps
        if unreachable is not None:
            return _error(args, unreachable, EXIT_FAILURE, e)
        if not output.is_spark_error(e):
            raise
        from deltalog.log import damage  # pyarrow: only once Spark has failed

        corrupt = damage.worker_error(e)  # a Spark task found a damaged file: its own words, not the stack
        return _error(args, str(corrupt) if corrupt is not None else output.spark_error_message(e), EXIT_FAILURE, e)


def _error(args: argparse.Namespace, message: str, code: int, error: BaseException) -> int:
    """Say why the command failed on stderr: ``deltalog: error: ...``, or under ``--output json`` one JSON object
    (``{"error": message, "type": the exception's class, "exit_code": code}``) a script reads as it reads the
    command's output. Returns ``code``."""
    if output.wants_json(args):
        import json

        print(json.dumps({"error": message, "type": type(error).__name__, "exit_code": code}, ensure_ascii=False),
              file=sys.stderr)
    else:
        print(f"deltalog: error: {message}", file=sys.stderr)
    return code


def _complete(argv: Sequence[str]) -> None:
    """Answer the shell's completion request (argcomplete's ``_ARGCOMPLETE``, set by the script ``deltalog completion
    SHELL`` prints) and exit: the parser of the command on the line (all the command names while none is typed).
    Does nothing, and imports nothing, on an ordinary run."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import shlex

    import argcomplete  # only while completing (above)

    try:
        words = shlex.split(os.environ.get("COMP_LINE", ""))[1:]
    except ValueError:  # an unclosed quote on the line being completed
        words = list(argv)
    argcomplete.autocomplete(build_parser(command_word(kafka_topics_actions(words))))


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
    from deltalog.cli import store_errors  # only on a failure

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
