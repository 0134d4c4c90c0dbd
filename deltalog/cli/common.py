"""What every command shares: the global options, opening the store, ``key=value`` parsing (output: :mod:`.output`)."""

from __future__ import annotations

import argparse
import os

from deltalog.errors import NoStoreError, UsageError
from deltalog.store import TOPICS_DIR, Store

STORE_ENV = "DELTALOG_STORE"
DEFAULT_STORE = "./deltalog-store"

__all__ = ["DEFAULT_STORE", "STORE_ENV", "NoStoreError", "UsageError", "add_global_options", "add_store_option",
           "key_value", "open_store", "store_path"]


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


def store_path(args: argparse.Namespace) -> str:
    """The ``--store`` given, else ``$DELTALOG_STORE``, else ``./deltalog-store``."""
    return getattr(args, "store", None) or os.environ.get(STORE_ENV) or DEFAULT_STORE


def open_store(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The store the command works on. Commands that only read pass ``create=False`` so that a typo in
    ``--store`` is an error rather than a new, empty store."""
    path = store_path(args)
    if not create and not os.path.isdir(os.path.join(path, TOPICS_DIR)):
        raise NoStoreError(
            f"no deltalog store at {os.path.abspath(path)}; create a topic first "
            f"('deltalog topics create NAME') or point --store / ${STORE_ENV} at an existing store"
        )
    return Store(path, config=dict(getattr(args, "store_config", None) or []))
