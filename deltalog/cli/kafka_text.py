"""Kafka's console text formats: ``DefaultMessageFormatter`` (what ``kafka-console-consumer`` prints) and
``LineMessageReader`` (what ``kafka-console-producer`` reads), driven by the same ``--property key=value`` names.

Both follow Kafka's tools (``org.apache.kafka.tools``, 4.0): the formatter prints, in this order and each
followed by ``key.separator`` when a later field is printed, ``CreateTime:<ms>``, ``Partition:<p>``,
``Offset:<o>``, ``Delivery:NOT_PRESENT``, ``Epoch:NOT_PRESENT``, the headers (``k:v`` joined by
``headers.separator``, or ``NO_HEADERS``), the key and the value, then ``line.separator``; a null key or value
(a tombstone) prints ``null.literal``. The reader splits ``[headers<headers.delimiter>][key<key.separator>]value``
at the first separator, turns ``null.marker`` into null, and names the line number of a line it cannot split.
Property values are taken literally, as Kafka takes them: ``key.separator=\\t`` is a backslash and a ``t``
(the default is a real TAB; in a shell, ``$'\\t'``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from deltalog.errors import InvalidRecordError, UsageError
from deltalog.log.record import Record

__all__ = ["FORMATTER_DEFAULTS", "READER_DEFAULTS", "LineMessageReader", "MessageFormatter", "kafka_property"]

#: DefaultMessageFormatter's properties and defaults.
FORMATTER_DEFAULTS: dict[str, str] = {
    "print.timestamp": "false", "print.key": "false", "print.value": "true", "print.partition": "false",
    "print.offset": "false", "print.delivery": "false", "print.epoch": "false", "print.headers": "false",
    "key.separator": "\t", "line.separator": "\n", "headers.separator": ",", "null.literal": "null",
}
#: LineMessageReader's properties and defaults (``null.marker`` has none: no value is null unless it is set).
READER_DEFAULTS: dict[str, str | None] = {
    "parse.key": "false", "key.separator": "\t", "parse.headers": "false", "headers.delimiter": "\t",
    "headers.separator": ",", "headers.key.separator": ":", "ignore.error": "false", "null.marker": None,
}
#: Kafka's names deltalog's tools do not take, with why.
_UNSUPPORTED = {
    "key.deserializer": "deltalog prints keys and values as their raw bytes",
    "value.deserializer": "deltalog prints keys and values as their raw bytes",
    "headers.deserializer": "deltalog prints keys and values as their raw bytes",
}


def kafka_property(text: str) -> tuple[str, str]:
    """argparse type for ``--property key=value``: split at the first ``=``, as Kafka's CommandLineUtils does
    (the value may hold ``=``; ``key`` alone is the empty string)."""
    key, _, value = text.partition("=")
    if not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, e.g. print.key=true, not {text!r}")
    return key, value


def _checked(props: Iterable[tuple[str, str]], defaults: Mapping[str, str | None], tool: str) -> dict[str, str | None]:
    out = dict(defaults)
    for key, value in props:
        if key not in defaults:
            why = f" ({_UNSUPPORTED[key]})" if key in _UNSUPPORTED else ""
            raise UsageError(f"unknown {tool} property {key!r}{why}; allowed: {', '.join(defaults)}")
        out[key] = value
    return out


def _true(value: str | None) -> bool:
    """Kafka's reading of a boolean property: ``true`` in any case, trimmed; anything else is false."""
    return value is not None and value.strip().lower() == "true"


class MessageFormatter:
    """Kafka's ``DefaultMessageFormatter``: one record as the bytes ``kafka-console-consumer`` prints for it."""

    def __init__(self, props: Iterable[tuple[str, str]] = ()) -> None:
        p = _checked(props, FORMATTER_DEFAULTS, "formatter")
        flags = ("timestamp", "partition", "offset", "delivery", "epoch", "headers", "key", "value")
        self.fields = [f for f in flags if _true(p[f"print.{f}"])]
        self.key_separator = str(p["key.separator"]).encode("utf-8")
        self.line_separator = str(p["line.separator"]).encode("utf-8")
        self.headers_separator = str(p["headers.separator"]).encode("utf-8")
        self.null_literal = str(p["null.literal"]).encode("utf-8")

    def format(self, partition: int, record: Record) -> bytes:
        parts = []
        for field in self.fields:
            if field == "timestamp":
                parts.append(b"NO_TIMESTAMP" if record.timestamp_ms is None else b"CreateTime:%d" % record.timestamp_ms)
            elif field == "partition":
                parts.append(b"Partition:%d" % partition)
            elif field == "offset":
                parts.append(b"Offset:%d" % (record.offset or 0))  # a read record always has one
            elif field == "delivery":  # the console consumer passes no delivery count (Kafka 4.0: the same)
                parts.append(b"Delivery:NOT_PRESENT")
            elif field == "epoch":  # deltalog has no leader epochs
                parts.append(b"Epoch:NOT_PRESENT")
            elif field == "headers":
                parts.append(self.headers_separator.join(
                    name.encode("utf-8") + b":" + (self.null_literal if value is None else value)
                    for name, value in record.headers) if record.headers else b"NO_HEADERS")
            elif field == "key":
                parts.append(self.null_literal if record.key is None else record.key)
            else:
                parts.append(self.null_literal if record.value is None else record.value)
        if not parts:
            return b""
        return self.key_separator.join(parts) + self.line_separator


@dataclass(frozen=True)
class ReadLine:
    """One record read from one input line, with the line's number (1-based, every line counted)."""

    line: int
    record: Record


class LineMessageReader:
    """Kafka's ``LineMessageReader``: one record per input line, ``[headers<delim>][key<sep>]value``.

    Without ``parse.key`` every line is a value with no key (an empty line is an empty value, as in Kafka).
    """

    def __init__(self, props: Iterable[tuple[str, str]] = ()) -> None:
        p = _checked(props, READER_DEFAULTS, "reader")
        self.parse_key = _true(p["parse.key"])
        self.key_separator = str(p["key.separator"])
        self.parse_headers = _true(p["parse.headers"])
        self.headers_delimiter = str(p["headers.delimiter"])
        self.headers_separator = str(p["headers.separator"])
        self.headers_key_separator = str(p["headers.key.separator"])
        self.ignore_error = _true(p["ignore.error"])
        self.null_marker = p["null.marker"]
        self._split_headers = re.compile(self.headers_separator)  # a regex in Kafka too
        self._check()

    def _check(self) -> None:
        """LineMessageReader.configure's checks, with Kafka's messages."""
        names = ("headers.delimiter", "headers.separator", "headers.key.separator")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if self._prop(a) == self._prop(b):
                    raise UsageError(f"{a} and {b} may not be equal")
        if self.null_marker is not None:
            for other in ("key.separator", "headers.separator", "headers.delimiter", "headers.key.separator"):
                if self.null_marker == self._prop(other):
                    raise UsageError(f"null.marker and {other} may not be equal")

    def _prop(self, name: str) -> str:
        return getattr(self, name.replace(".", "_"))

    def _null(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode("utf-8")

    def read(self, lines: Iterable[str], source: str = "input") -> Iterator[ReadLine]:
        """Records from text lines (their line ends are dropped); errors name ``source`` and the line."""
        for number, raw in enumerate(lines, start=1):
            line = raw[:-1] if raw.endswith("\n") else raw
            yield ReadLine(number, self._record(line, number, source))

    def _split(self, line: str, start: int, separator: str, what: str, prop: str, number: int,
               source: str) -> str | None:
        """``line[start:i]`` where ``i`` is the next ``separator``; None when there is none and ignore.error is set."""
        at = line.find(separator, start)
        if at >= 0:
            return line[start:at]
        if self.ignore_error:
            return None
        raise InvalidRecordError(
            f"{source} line {number}: No {what} found on line number {number}: {_shown(line)} "
            f"({prop}={separator!r}; ignore.error=true reads such a line without it)")

    def _record(self, line: str, number: int, source: str) -> Record:
        headers = None
        if self.parse_headers:
            headers = self._split(line, 0, self.headers_delimiter, "headers delimiter", "headers.delimiter", number,
                                  source)
        start = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = None
        if self.parse_key:
            key = self._split(line, start, self.key_separator, "key separator", "key.separator", number, source)
        value = line[start + (0 if key is None else len(key) + len(self.key_separator)):]
        parsed_headers = () if headers is None or headers == self.null_marker else \
            tuple(self._headers(headers, number, f"{source} line {number}"))
        return Record(key=None if key is None else self._null(key), value=self._null(value), headers=parsed_headers)

    def _headers(self, text: str, number: int, where: str) -> list[tuple[str, bytes | None]]:
        out: list[tuple[str, bytes | None]] = []
        for pair in self._split_headers.split(text):
            at = pair.find(self.headers_key_separator)
            if at < 0:
                if self.ignore_error:
                    out.append((pair, None))
                    continue
                raise InvalidRecordError(
                    f"{where}: No header key separator found in pair {_shown(pair)} on line number {number} "
                    f"(headers.key.separator={self.headers_key_separator!r})")
            name = pair[:at]
            if self.null_marker is not None and name == self.null_marker:
                raise InvalidRecordError(f"{where}: Header keys should not be equal to the null marker "
                                         f"'{self.null_marker}' as they can't be null")
            out.append((name, self._null(pair[at + len(self.headers_key_separator):])))
        return out


def _shown(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
