"""What every command shares: the global options, opening the store, ``key=value`` parsing, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from deltalog.errors import NoStoreError, UsageError
from deltalog.store import TOPICS_DIR, Store, _store_root

STORE_ENV = "DELTALOG_STORE"
DEFAULT_STORE = "./deltalog-store"

__all__ = ["DEFAULT_STORE", "STORE_ENV", "NoStoreError", "UsageError", "add_global_options", "add_json_option",
           "add_store_option", "key_value", "open_store", "print_json", "store_path"]


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``--config key=value``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, e.g. cleanup.policy=compact, not {text!r}")
    return key.strip(), value.strip()


def add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", metavar="PATH", default=None,
        help=f"the store's root directory (default: ${STORE_ENV}, else {DEFAULT_STORE})",
    )
    parser.add_argument(
        "--config", dest="store_config", metavar="KEY=VALUE", type=key_value, action="append", default=[],
        help="a store-level setting with its Kafka broker name, e.g. log.cleaner.threads=2 (repeatable)",
    )


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """Let ``--store`` also follow the command (``deltalog topics list --store PATH``)."""
    parser.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS,
                        help=f"the store's root directory (default: ${STORE_ENV}, else {DEFAULT_STORE})")


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def store_path(args: argparse.Namespace) -> str:
    """The ``--store`` given, else ``$DELTALOG_STORE``, else ``./deltalog-store``. An empty ``--store`` (or
    ``$DELTALOG_STORE``) is an error, not the default: ``--store "$UNSET_VARIABLE"`` must not pick a store."""
    given = getattr(args, "store", None)
    if given is None:
        given = os.environ.get(STORE_ENV)
        if given is not None and not given.strip():
            raise UsageError(f"${STORE_ENV} is set but empty; set it to the store's path, or unset it")
    elif not given.strip():
        raise UsageError("--store is empty; give the store's path, e.g. --store ./deltalog-store")
    return given or DEFAULT_STORE


def open_store(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The store the command works on. Commands that only read pass ``create=False`` so that a typo in
    ``--store`` is an error rather than a new, empty store."""
    path = _store_root(store_path(args))  # a path no filesystem can hold is refused as such, before any look
    if not create and not os.path.isdir(os.path.join(path, TOPICS_DIR)):
        raise NoStoreError(
            f"no deltalog store at {os.path.abspath(path)}; create a topic first "
            f"('deltalog topics create NAME') or point --store / ${STORE_ENV} at an existing store"
        )
    return Store(path, config=dict(getattr(args, "store_config", None) or []))


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
