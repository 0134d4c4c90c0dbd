"""What every command shares: the global options, opening the store, ``key=value`` parsing (output: :mod:`.output`)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from deltalog import extras
from deltalog.errors import NoStoreError, UsageError

if TYPE_CHECKING:
    from deltalog.store import Store

STORE_ENV = "DELTALOG_STORE"
DEFAULT_STORE = "./deltalog-store"

__all__ = ["DEFAULT_STORE", "STORE_ENV", "NoStoreError", "UsageError", "add_global_options", "add_store_option",
           "key_value", "needs_extras", "open_store", "require_extras", "storage_options", "store_path"]

_STORE_HELP = (f"the store: a local path or an s3://, az://, abfss:// or gs:// URI (default: ${STORE_ENV}, else "
               f"{DEFAULT_STORE}); credentials and endpoints come from the cloud's environment variables "
               "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...) or --storage-option")
_OPTION_HELP = ("a storage option for delta-rs and the object store, e.g. AWS_REGION=eu-west-1 or "
                "AWS_ENDPOINT_URL=http://localhost:9000 (repeatable)")


def whole_number(minimum: int):  # noqa: ANN201 - an argparse type
    """An argparse ``type``: a whole number >= ``minimum``, refused in argparse's words otherwise."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, not {text!r}")
        return n

    return parse


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``--config key=value``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, e.g. cleanup.policy=compact, not {text!r}")
    return key.strip(), value.strip()


def add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", metavar="URI", default=None, help=_STORE_HELP)
    parser.add_argument("--storage-option", dest="storage_options", metavar="KEY=VALUE", type=key_value,
                        action="append", default=[], help=_OPTION_HELP)
    parser.add_argument(
        "--config", dest="store_config", metavar="KEY=VALUE", type=key_value, action="append", default=[],
        help="a store-level setting with its Kafka broker name, e.g. log.cleaner.threads=2 (repeatable)",
    )


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """Let ``--store`` and ``--storage-option`` also follow the command (``deltalog topics list --store URI``)."""
    parser.add_argument("--store", metavar="URI", default=argparse.SUPPRESS, help=_STORE_HELP)
    parser.add_argument("--storage-option", dest="command_storage_options", metavar="KEY=VALUE", type=key_value,
                        action="append", default=[], help=_OPTION_HELP)
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", default=argparse.SUPPRESS,
                        help="accepted for Kafka's command lines and ignored: there is no broker; deltalog works on "
                        "the store (--store or $DELTALOG_STORE)")


def store_path(args: argparse.Namespace) -> str:
    """The ``--store`` given, else ``$DELTALOG_STORE``, else ``./deltalog-store`` (a path or a URI). An empty
    ``--store`` (or ``$DELTALOG_STORE``) is an error, not the default: ``--store "$UNSET_VARIABLE"`` must not pick a
    store."""
    given = getattr(args, "store", None)
    if given is None:
        given = os.environ.get(STORE_ENV)
        if given is not None and not given.strip():
            raise UsageError(f"${STORE_ENV} is set but empty; set it to the store's path or URI, or unset it")
    elif not given.strip():
        raise UsageError("--store is empty; give the store's path or URI, e.g. --store ./deltalog-store")
    return given or DEFAULT_STORE


def storage_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``--storage-option KEY=VALUE`` given before and after the command (the later win)."""
    return {**dict(getattr(args, "storage_options", None) or []),
            **dict(getattr(args, "command_storage_options", None) or [])}


def open_store(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The store the command works on. Commands that only read pass ``create=False`` so that a typo in
    ``--store`` is an error rather than a new, empty store (on an object store as on a disk: a store is
    recognised by its marker, ``_deltalog/store.json``)."""
    from deltalog.storage import normalize_root
    from deltalog.store import Store  # the store (pyarrow, delta-rs): imported by the commands that open one

    where = store_path(args)
    try:
        return Store(where, storage_options=storage_options(args) or None,
                     config=dict(getattr(args, "store_config", None) or []), create=create)
    except NoStoreError:
        raise NoStoreError(
            f"no deltalog store at {normalize_root(where)}; create a topic first "
            f"('deltalog topics create NAME') or point --store / ${STORE_ENV} at an existing store"
        ) from None


def needs_extras(parser: argparse.ArgumentParser, *extra_names: str) -> None:
    """Mark a command as needing extras the base install leaves out (``spark``, ``quality``): before it runs,
    :func:`deltalog.cli.main` checks they are importable and otherwise names the one to install, in one line."""
    parser.set_defaults(needs_extras=(parser.prog, extra_names))


def require_extras(args: argparse.Namespace) -> None:
    """Raise :class:`~deltalog.errors.MissingExtraError` if the command ``args`` parsed needs a missing extra."""
    prog, extra_names = getattr(args, "needs_extras", ("", ()))
    for extra in extra_names:
        extras.require(extra, prog)
