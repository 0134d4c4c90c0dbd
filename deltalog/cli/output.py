"""What every command prints, and what it keeps off the terminal.

* ``--output text|json`` (``--json`` is short for ``--output json``) on every command. JSON is always JSON lines,
  one format for every command: one compact object per line, one line per thing the command reports (a record,
  a row, a topic, a cleaning pass, a produced record's metadata), so ``jq`` and line-by-line readers handle
  every command alike, and a command that never ends (``consume --follow``) streams as well as one that does.
* ``--verbose`` (before or after the command): Spark's and Java's own output (log4j's console lines, JVM
  warnings, Python worker crashes, PySpark's logged query errors) reaches stderr only when asked for, and
  deltalog's own INFO logging is switched on. Without it they go to ``$DELTALOG_SPARK_OUTPUT`` (default: the
  null device), see :func:`deltalog.sql.session.local_session`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from deltalog.sql.session import SPARK_OUTPUT_ENV

TEXT = "text"
JSON = "json"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_output_option(parser: argparse.ArgumentParser, *, default: str | None = TEXT, text: str = "readable text",
                      json_help: str = "JSON lines, one object per line", default_help: str | None = None) -> None:
    """``--output text|json`` (``-o``) and its short form ``--json``."""
    parser.add_argument("-o", "--output", choices=(TEXT, JSON), default=default,
                        help=f"'{TEXT}': {text}; '{JSON}': {json_help} (default: {default_help or default})")
    parser.add_argument("--json", dest="output", action="store_const", const=JSON, help="same as --output json")


def add_global_output_option(parser: argparse.ArgumentParser) -> None:
    """``--output``/``-o``/``--json`` before the command too (``deltalog -o json topics list``); the one after the
    command wins when both are given (see :func:`apply_global_output`)."""
    parser.add_argument("-o", "--output", dest="global_output", choices=(TEXT, JSON), default=None,
                        help=f"'{TEXT}' or '{JSON}' (JSON lines), for every command; also accepted after the command")
    parser.add_argument("--json", dest="global_output", action="store_const", const=JSON,
                        help="same as --output json")


#: What a command's ``--output`` holds when it was not given after the command (see :func:`mark_output_unset`).
UNSET = "(unset)"


def mark_output_unset(leaf: argparse.ArgumentParser) -> None:
    """Let a command tell ``--output`` given after it from its default: the default moves to ``output_default``
    and ``output`` holds :data:`UNSET` until :func:`apply_global_output` resolves it."""
    for action in leaf._actions:
        if action.dest == "output" and action.default != UNSET:
            if action.default is not None:  # --output's default; --json (store_const) has none of its own
                leaf.set_defaults(output_default=action.default)
            action.default = UNSET


def apply_global_output(args: argparse.Namespace) -> None:
    """The command's ``--output``: the one given after the command, else the one given before it, else the
    command's default."""
    if getattr(args, "output", None) == UNSET:
        given = getattr(args, "global_output", None)
        args.output = given if given is not None else getattr(args, "output_default", None)


def add_verbose_option(parser: argparse.ArgumentParser, *, suppress_default: bool = False) -> None:
    """``--verbose``: let Spark's and Java's output through to stderr, and log deltalog's INFO lines."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=argparse.SUPPRESS if suppress_default else False,
                        help="show Spark's and Java's own output and deltalog's progress logging on stderr")


def wants_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", TEXT) == JSON


def emit(value: Any) -> None:
    """One JSON line on stdout (the one format of ``--output json``)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")


def leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser that runs a command (``"topics create"``, ``"produce"``, ...), with its command line."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield "", parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            for rest, leaf in leaf_parsers(sub):
                yield f"{name} {rest}".strip(), leaf


@contextlib.contextmanager
def command_output(verbose: bool) -> Iterator[None]:
    """Around one command: quiet Spark and PySpark unless ``verbose``; with it, deltalog's INFO logging on
    stderr. Everything is put back afterwards (the CLI also runs in-process, in tests and notebooks)."""
    saved_env = os.environ.get(SPARK_OUTPUT_ENV)
    root = logging.getLogger()
    saved_level, added = root.level, None
    with warnings.catch_warnings():
        if verbose:
            if saved_env is not None and saved_env == os.devnull:
                os.environ.pop(SPARK_OUTPUT_ENV)
            if not root.handlers:
                added = logging.StreamHandler(sys.stderr)
                added.setFormatter(logging.Formatter(LOG_FORMAT))
                root.addHandler(added)
                root.setLevel(logging.INFO)
            logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per Spark call otherwise
        else:
            os.environ.setdefault(SPARK_OUTPUT_ENV, os.devnull)
            warnings.filterwarnings("ignore", module=r"pyspark(\.|$)")
            warnings.filterwarnings("ignore", module=r"py4j(\.|$)")
        muted = [] if verbose else _mute_pyspark_query_loggers()
        try:
            yield
        finally:
            for logger, disabled in muted:
                logger.disabled = disabled
            if saved_env is None:
                os.environ.pop(SPARK_OUTPUT_ENV, None)
            else:
                os.environ[SPARK_OUTPUT_ENV] = saved_env
            if added is not None:
                root.removeHandler(added)
                root.setLevel(saved_level)


def _mute_pyspark_query_loggers() -> list[tuple[logging.Logger, bool]]:
    """When a Spark session already runs in this process (the CLI called from a notebook or a test), PySpark's
    query-error loggers were not pointed away at its start (:func:`deltalog.sql.session.local_session`): mute them
    for the command. Without pyspark imported there is nothing to mute, and nothing is imported."""
    if sys.modules.get("pyspark") is None:  # never imported (or blocked, as an uninstalled extra)
        return []
    from pyspark.logger import PySparkLogger  # pyspark is imported already (above): this costs nothing

    from deltalog.sql.session import PYSPARK_QUERY_LOGGERS

    muted: list[tuple[logging.Logger, bool]] = []
    for name in PYSPARK_QUERY_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        muted.append((logger, logger.disabled))
        logger.disabled = True
    return muted


def is_spark_error(error: BaseException) -> bool:
    """An exception raised by PySpark or py4j (a query error, a failed job, a JVM that went away)."""
    return type(error).__module__.split(".")[0] in ("pyspark", "py4j")


_PLAN = re.compile(r"(SQLSTATE: \w+(?:; line \d+ pos \d+)?);\n.*\Z", re.S)
_STACK_LINE = re.compile(r"\s+(at |\.\.\. \d+ more)|Driver stacktrace:")


def spark_error_message(error: BaseException) -> str:
    """Spark's message for ``error``: its error class, message, SQLSTATE and the place in the query, as Spark's
    own SQL shell prints them, without the Java stack or the analyzed plan PySpark appends."""
    java = getattr(error, "java_exception", None)  # py4j's Py4JJavaError: a Java exception Spark did not classify
    text = str(java.toString()) if java is not None else str(error)
    text = text.split("\n\nJVM stacktrace:")[0].strip()
    text = _PLAN.sub(r"\1", text)
    lines = [line for line in text.splitlines() if not _STACK_LINE.match(line)]
    return "\n".join(lines).strip() or type(error).__name__
