"""How a topic's keys and values are encoded: the names and the schemas the topic configs declare.

Kafka stores keys and values as opaque bytes and leaves their meaning to serializers; deltalog does the
same by default. A topic may declare, with the topic configs ``key.encoding`` / ``value.encoding``:

* ``bytes`` (default): no constraint; SQL sees ``BINARY``;
* ``string``: UTF-8 text; SQL sees ``STRING``;
* ``json``: a UTF-8 JSON object that matches ``key.schema`` / ``value.schema``; SQL sees a ``STRUCT``.

A schema is a Spark DDL field list (``"price DOUBLE, currency STRING, tags ARRAY<STRING>"``) or the JSON
form of a Spark ``StructType`` (``{"type": "struct", "fields": [...]}``). It is parsed here without a
JVM. This module sits beside :mod:`deltalog.config` at the bottom of the package, as Kafka's ``LogConfig``
validators sit with the configs they check: the configs parse and refuse a bad encoding or schema with it,
the log checks each appended record against the parsed schema (:mod:`deltalog.log.encoding`) and the SQL
views decode with it (:mod:`deltalog.sql.encoding`).
"""

from __future__ import annotations

import json
import re
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
