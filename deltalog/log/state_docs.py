"""Reading the JSON documents deltalog keeps beside the Delta logs, refusing damage with a clear error.

Kafka keeps its coordinator state in compacted topics whose records are checked by their schemas when a
coordinator loads them (``TransactionLog.readTxnRecordValue``, ``ProducerIdManager`` refusing a block it cannot
parse); a record it cannot read fails that one coordinator partition, not the broker. deltalog keeps the same
state in small JSON documents under ``_deltalog/``; each is read through :class:`Document` here, which turns a
torn file, a value of the wrong type or out of range, or a missing key into a
:class:`~deltalog.errors.CorruptStateError` naming the file, what was wrong and the fix, instead of a raw
``JSONDecodeError``/``KeyError``/``ValueError`` that stops everything above it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from deltalog.errors import CorruptStateError, shown


class Document:
    """One parsed document and where it came from, with typed accessors that raise
    :class:`~deltalog.errors.CorruptStateError` naming the file, the key and ``fix``."""

    def __init__(self, data: Mapping[str, Any], location: str, what: str, fix: str) -> None:
        self.data, self.location, self.what, self.fix = data, location, what, fix

    @classmethod
    def parse(cls, raw: bytes, location: str, what: str, fix: str) -> Document:
        """``raw`` as a JSON object; refuses anything else (a torn write, an empty file, a list)."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise corrupt(location, what, f"is not valid JSON ({e}; {len(raw)} bytes)", fix) from None
        if not isinstance(data, dict):
            raise corrupt(location, what, f"holds a JSON {type(data).__name__}, not an object", fix)
        return cls(data, location, what, fix)

    def bad(self, key: str, value: Any, expected: str) -> CorruptStateError:
        return corrupt(self.location, self.what, f"has {key}={shown(value)}; expected {expected}", self.fix)

    def int(self, key: str, *, minimum: int | None = 0, maximum: int | None = None, default: Any = ...,
            nullable: bool = False) -> Any:
        """The integer at ``key`` in ``[minimum, maximum]`` (a bool or a float is refused)."""
        if key not in self.data or (self.data[key] is None and not nullable):
            if default is not ...:
                return default
            raise corrupt(self.location, self.what, f"has no {key!r}", self.fix)
        value = self.data[key]
        if value is None and nullable:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum) \
            and (maximum is None or value <= maximum)
        if not ok:
            bounds = "" if minimum is None and maximum is None else (
                f" >= {minimum}" if maximum is None else f" in [{minimum}, {maximum}]")
            raise self.bad(key, value, f"an integer{bounds}")
        return value

    def str(self, key: str, *, choices: tuple[str, ...] | None = None, default: Any = ...) -> Any:
        """The string at ``key`` (one of ``choices`` when given)."""
        if key not in self.data or self.data[key] is None:
            if default is not ...:
                return default
            raise corrupt(self.location, self.what, f"has no {key!r}", self.fix)
        value = self.data[key]
        if not isinstance(value, str) or (choices is not None and value not in choices):
            raise self.bad(key, value, f"one of {', '.join(choices)}" if choices else "a string")
        return value

    def list(self, key: str, *, default: Any = ...) -> Any:
        """The list at ``key``."""
        if key not in self.data or self.data[key] is None:
            if default is not ...:
                return default
            raise corrupt(self.location, self.what, f"has no {key!r}", self.fix)
        value = self.data[key]
        if not isinstance(value, list):
            raise self.bad(key, value, "a list")
        return value


def corrupt(location: str, what: str, problem: str, fix: str) -> CorruptStateError:
    """The error for a damaged document: which file, what it is, what is wrong, and how to recover."""
    return CorruptStateError(f"{location}: the {what} {problem}. {fix}", location=location, fix=fix)
