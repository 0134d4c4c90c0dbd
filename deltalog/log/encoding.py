"""How a topic's keys and values are encoded, so SQL sees typed columns instead of bytes.

Kafka stores keys and values as opaque bytes and leaves their meaning to serializers; deltalog does the
same by default. A topic may declare, with the topic configs ``key.encoding`` / ``value.encoding``:

* ``bytes`` (default): no constraint; SQL sees ``BINARY``;
* ``string``: UTF-8 text; SQL sees ``STRING``;
* ``json``: a UTF-8 JSON object that matches ``key.schema`` / ``value.schema``; SQL sees a ``STRUCT``.

A schema is a Spark DDL field list (``"price DOUBLE, currency STRING, tags ARRAY<STRING>"``) or the JSON
form of a Spark ``StructType`` (``{"type": "struct", "fields": [...]}``). It is parsed here without a
JVM, so appends, which never start Spark, can check every record: a value that does not match its
declared encoding is refused with :class:`~deltalog.errors.InvalidRecordError` before anything is
written. Tombstones (``value=None``) and, on non-compacted topics, keyless records always pass.

What "matches" means for JSON: the text parses as standard JSON (no ``NaN``/``Infinity``), the top level
is an object, it has no field the schema does not declare, a missing or ``null`` field is allowed only
where the schema allows null, and every value has the declared type (integers for integral types, in
range; any number for ``FLOAT``/``DOUBLE``/``DECIMAL``; ISO-8601 strings for ``DATE``/``TIMESTAMP``).
This is stricter than Spark's ``from_json``, which turns a mismatch into a silent ``null``: with the
check at append, a typed column is null only where the producer wrote null.

Changing an encoding on a topic that already holds records does not rewrite them; records that do not
match the new encoding read as ``null`` in the typed SQL columns.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Iterable
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from deltalog import extras
from deltalog.errors import InvalidConfigError, shown

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType  # only for json encodings: appends of bytes never import pyspark


ENCODINGS = ("bytes", "string", "json")


# -- config parsing ------------------------------------------------------------------------------------


def parse_encoding(name: str, raw: Any) -> str:
    """Config parser for ``key.encoding`` / ``value.encoding``."""
    value = str(raw).strip().lower()
    if value not in ENCODINGS:
        raise InvalidConfigError(
            f"Invalid value {shown(raw)} for configuration {name}: expected one of {', '.join(ENCODINGS)}"
        )
    return value


def parse_schema_config(name: str, raw: Any) -> str:
    """Config parser for ``key.schema`` / ``value.schema``: keeps the text, refuses what does not parse."""
    text = "" if raw is None else str(raw).strip()
    if text:
        try:
            parse_schema(text)
        except ValueError as e:
            raise InvalidConfigError(f"Invalid value {shown(text)} for configuration {name}: {e}") from None
    return text


# -- schemas --------------------------------------------------------------------------------------------

_SIMPLE_TYPES = {
    "string": "StringType", "varchar": "StringType", "char": "StringType",
    "boolean": "BooleanType", "bool": "BooleanType",
    "tinyint": "ByteType", "byte": "ByteType",
    "smallint": "ShortType", "short": "ShortType",
    "int": "IntegerType", "integer": "IntegerType",
    "bigint": "LongType", "long": "LongType",
    "float": "FloatType", "real": "FloatType",
    "double": "DoubleType",
    "date": "DateType",
    "timestamp": "TimestampType", "timestamp_ltz": "TimestampType", "timestamp_ntz": "TimestampNTZType",
}
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|'(?:[^']|'')*'|[<>(),:])")


class _DDLParser:
    """A recursive-descent parser for the subset of Spark's DDL that JSON can carry."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ValueError(f"cannot parse the schema at {text[pos:pos + 20]!r}")
            self.tokens.append(m.group(1))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise ValueError("the schema ends too early")
        if expected is not None and tok.lower() != expected:
            raise ValueError(f"expected {expected!r} in the schema, found {tok!r}")
        self.i += 1
        return tok

    def fields(self, end: str | None) -> StructType:
        from pyspark.sql.types import (  # only for json encodings: appends of bytes never import pyspark
            StructField,
            StructType,
        )

        fields = []
        while True:
            name = self.take()
            if name in "<>(),:":
                raise ValueError(f"expected a field name in the schema, found {name!r}")
            if name.startswith("`"):
                name = name[1:-1].replace("``", "`")
            if self.peek() == ":":
                self.take()
            dtype = self.type()
            nullable = True
            if (self.peek() or "").lower() == "not":
                self.take()
                self.take("null")
                nullable = False
            if (self.peek() or "").lower() == "comment":
                self.take()
                self.take()
            if name in {f.name for f in fields}:
                raise ValueError(f"field {name!r} is declared twice")
            fields.append(StructField(name, dtype, nullable))
            if self.peek() == ",":
                self.take()
                continue
            if self.peek() == end:
                return StructType(fields)
            raise ValueError(f"expected ',' or the end of the field list, found {self.peek()!r}")

    def type(self) -> DataType:
        from pyspark.sql import types as T  # only for json encodings: appends of bytes never import pyspark

        word = self.take().lower()
        if word in _SIMPLE_TYPES:
            if word in ("varchar", "char") and self.peek() == "(":
                self.take("(")
                self.take()
                self.take(")")
            return getattr(T, _SIMPLE_TYPES[word])()
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = int(self.take())
                if self.peek() == ",":
                    self.take(",")
                    scale = int(self.take())
                self.take(")")
            return T.DecimalType(precision, scale)
        if word == "array":
            self.take("<")
            element = self.type()
            self.take(">")
            return T.ArrayType(element, True)
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            if not isinstance(key, T.StringType):
                raise ValueError("a MAP in a JSON schema must have STRING keys (JSON object keys are strings)")
            return T.MapType(key, value, True)
        if word == "struct":
            self.take("<")
            if self.peek() == ">":
                self.take(">")
                return T.StructType([])
            inner = self.fields(">")
            self.take(">")
            return inner
        if word in ("binary",):
            raise ValueError("BINARY cannot be carried by JSON; use STRING (e.g. base64 text)")
        raise ValueError(
            f"unknown or unsupported type {word!r}; supported: {', '.join(sorted(set(_SIMPLE_TYPES)))}, "
            "DECIMAL(p,s), ARRAY<T>, MAP<STRING,T>, STRUCT<...>"
        )


@lru_cache(maxsize=256)
def parse_schema(text: str) -> StructType:
    """A Spark ``StructType`` from a DDL field list or the JSON form of a ``StructType`` (no JVM needed, but
    pyspark's types: a schema needs the spark extra, which the base install leaves out)."""
    extras.require("spark", "key.schema / value.schema (a json encoding's schema)")
    from pyspark.sql.types import StructType  # only for json encodings: appends of bytes never import pyspark

    text = text.strip()
    if not text:
        raise ValueError("the schema is empty")
    if text.startswith("{"):
        try:
            schema = StructType.fromJson(json.loads(text))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a Spark StructType in JSON ({e})") from None
        _check_supported(schema)
        return schema
    parser = _DDLParser(text)
    schema = parser.fields(None)
    if parser.peek() is not None:
        raise ValueError(f"unexpected {parser.peek()!r} after the field list")
    return schema


def _check_supported(dtype: DataType) -> None:
    from pyspark.sql import types as T  # only for json encodings: appends of bytes never import pyspark

    if isinstance(dtype, T.StructType):
        for f in dtype.fields:
            _check_supported(f.dataType)
    elif isinstance(dtype, T.ArrayType):
        _check_supported(dtype.elementType)
    elif isinstance(dtype, T.MapType):
        if not isinstance(dtype.keyType, T.StringType):
            raise ValueError("a MAP in a JSON schema must have STRING keys")
        _check_supported(dtype.valueType)
    elif isinstance(dtype, T.BinaryType):
        raise ValueError("BINARY cannot be carried by JSON; use STRING")


# -- checking records ------------------------------------------------------------------------------------

_INT_RANGES = {
    "ByteType": (-(2**7), 2**7 - 1),
    "ShortType": (-(2**15), 2**15 - 1),
    "IntegerType": (-(2**31), 2**31 - 1),
    "LongType": (-(2**63), 2**63 - 1),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _type_error(path: str, expected: str, value: Any) -> str:
    shown = json.dumps(value)[:60]
    return f"field {path or '(top level)'} must be {expected}, found {shown}"


def _first_problem(dtype: DataType, elements: Iterable[tuple[str, Any]]) -> str | None:
    """What is wrong with the first non-null element (path, value) that does not fit ``dtype``, or None."""
    for path, v in elements:
        if v is not None:
            problem = _match(dtype, v, path)
            if problem:
                return problem
    return None


def _match(dtype: DataType, value: Any, path: str) -> str | None:
    """None if ``value`` (parsed JSON) fits ``dtype``; else what is wrong, naming the field."""
    from pyspark.sql import types as T  # only for json encodings: appends of bytes never import pyspark

    name = type(dtype).__name__
    if isinstance(dtype, T.StructType):
        if not isinstance(value, dict):
            return _type_error(path, "an object", value)
        declared = {f.name: f for f in dtype.fields}
        extra = [k for k in value if k not in declared]
        if extra:
            return (f"field {path + '.' if path else ''}{extra[0]} is not in the schema; declared fields: "
                    f"{', '.join(declared) or '(none)'}")
        for f in dtype.fields:
            child = f"{path}.{f.name}" if path else f.name
            v = value.get(f.name)
            if v is None:
                if not f.nullable:
                    return f"field {child} is declared NOT NULL but is missing or null"
                continue
            problem = _match(f.dataType, v, child)
            if problem:
                return problem
        return None
    if isinstance(dtype, T.ArrayType):
        if not isinstance(value, list):
            return _type_error(path, "an array", value)
        return _first_problem(dtype.elementType, ((f"{path}[{i}]", v) for i, v in enumerate(value)))
    if isinstance(dtype, T.MapType):
        if not isinstance(value, dict):
            return _type_error(path, "an object (map)", value)
        return _first_problem(dtype.valueType, ((f"{path}[{k!r}]", v) for k, v in value.items()))
    if isinstance(dtype, T.StringType):
        return None if isinstance(value, str) else _type_error(path, "a string", value)
    if isinstance(dtype, T.BooleanType):
        return None if isinstance(value, bool) else _type_error(path, "true or false", value)
    if name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        if isinstance(value, bool) or not isinstance(value, int):
            return _type_error(path, f"a whole number ({dtype.simpleString().upper()})", value)
        if not lo <= value <= hi:
            return f"field {path} is {value}, out of range for {dtype.simpleString().upper()} [{lo}, {hi}]"
        return None
    if isinstance(dtype, (T.FloatType, T.DoubleType, T.DecimalType)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _type_error(path, "a number", value)
        if isinstance(dtype, T.DecimalType):
            digits = Decimal(str(value)).as_tuple()
            scale = -digits.exponent if isinstance(digits.exponent, int) else 0
            integer_digits = len(digits.digits) - max(scale, 0)
            if integer_digits > dtype.precision - dtype.scale:
                return f"field {path} is {value}, too large for {dtype.simpleString().upper()}"
        return None
    if isinstance(dtype, T.DateType):
        try:
            _dt.date.fromisoformat(value)
            return None
        except (TypeError, ValueError):
            return _type_error(path, "an ISO-8601 date string (YYYY-MM-DD)", value)
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        try:
            _dt.datetime.fromisoformat(value)
            return None
        except (TypeError, ValueError):
            return _type_error(path, "an ISO-8601 timestamp string", value)
    return f"field {path} has a type deltalog cannot check ({dtype.simpleString()})"


def check_bytes(data: bytes, encoding: str, schema_text: str) -> str | None:
    """None if ``data`` is valid for ``encoding`` (and schema); else what is wrong."""
    if encoding == "bytes":
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"it is not valid UTF-8 ({e.reason} at byte {e.start})"
    if encoding == "string":
        return None
    try:
        parsed = json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:
        return f"it is not valid JSON ({e})"
    except RecursionError:
        return "it is JSON nested too deeply to check (more levels than Python's recursion limit)"
    problem = _match(parse_schema(schema_text), parsed, "")
    return f"it does not match the declared schema: {problem}" if problem else None


# -- Spark side ----------------------------------------------------------------------------------------
