"""The log's check of a record against its topic's declared encoding, before anything is written.

The encodings and schemas (``key.encoding`` / ``value.encoding``, ``key.schema`` / ``value.schema``) are declared
in the topic configs and parsed by :mod:`deltalog.schemas`. Appends, which never start Spark, check every record
here: a value that does not match its declared encoding is refused with :class:`~deltalog.errors.InvalidRecordError`
before anything is written. Tombstones (``value=None``) and, on non-compacted topics, keyless records always pass.

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

import dataclasses
import datetime as _dt
import json
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from deltalog.errors import InvalidRecordError
from deltalog.schemas import parse_schema

if TYPE_CHECKING:
    from pyspark.sql.types import DataType  # only for json encodings: appends of bytes never import pyspark

    from deltalog.log.record import Record


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


def decode_data(data: bytes | None, encoding: str) -> Any:
    """A stored key or value as its topic declares it: ``string`` -> ``str``, ``json`` -> the decoded JSON (a
    ``dict`` for an object, as ``deltalog consume`` prints it and SQL's typed columns hold it), ``bytes`` (and
    ``None``, a tombstone) as stored. Data the encoding does not decode (written before the topic declared it) is
    returned as stored, bytes, as ``consume`` prints such a record's text."""
    if data is None or encoding == "bytes":
        return data
    try:
        text = data.decode("utf-8")
        return text if encoding == "string" else json.loads(text, parse_constant=_reject_constant)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError alike
        return data


def encode_data(data: Any) -> bytes | None:
    """:func:`decode_data` undone: a ``str`` as UTF-8, a JSON value (``dict``, ``list``, number, boolean) as compact
    JSON text, bytes and ``None`` as they are."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    try:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise InvalidRecordError(f"a record key or value must be bytes, str, None or a JSON value (dict, list, "
                                 f"number, boolean), not {type(data).__name__}: {e}") from None


def decoded_records(records: list[Record], key_encoding: str, value_encoding: str) -> list[Record]:
    """``records`` with their keys and values as the topic declares them (:func:`decode_data`); the same list when
    both are ``bytes``. A decoded record is a :class:`~deltalog.log.record.Record` holding ``str`` or JSON values
    where it would hold bytes (set past its constructor, which turns a ``str`` into bytes for writers)."""
    if key_encoding == "bytes" and value_encoding == "bytes":
        return records
    out = []
    for r in records:
        copy = dataclasses.replace(r)
        object.__setattr__(copy, "key", decode_data(r.key, key_encoding))
        object.__setattr__(copy, "value", decode_data(r.value, value_encoding))
        out.append(copy)
    return out
