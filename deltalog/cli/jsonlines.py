"""Records as JSON lines, for ``produce`` (in) and ``consume`` (out).

One object per line::

    {"key": "grape", "value": "2.69", "headers": {"source": "pos"}, "timestamp_ms": 1700000000000}

Keys, values and header values are UTF-8 strings. Bytes that are not valid UTF-8 travel in base64 under
a ``_b64`` name (``key_b64``, ``value_b64``; a header value as ``{"b64": "..."}``), which is also what
``consume`` prints for them, so ``consume`` output can be piped back into ``produce``. ``value`` (or
``value_b64``) must be present: ``null`` is a tombstone, and a misspelt field is an error, never a
silent tombstone. ``offset`` and ``delete_horizon_ms`` are accepted and ignored: the log assigns them.

On a topic whose ``key.encoding`` / ``value.encoding`` is ``json`` the key or value is JSON itself, as a
change-data-capture producer writes it: ``produce`` takes the object (``{"key": 7, "value": {"id": 7, "status":
"paid"}}``; a string is still taken as the JSON text, so escaped input keeps working) and the log checks it against
the declared schema at append; ``consume`` prints the object, not its escaped text (``json_fields``).

Confluent's wire framing (a magic byte 0 and a 4-byte schema id before the Avro, Protobuf or JSON Schema
payload) is not decoded: such values are bytes to deltalog (``value.encoding=bytes``, ``value_b64`` here) and
need the Schema Registry's deserializer to read; a ``json`` topic refuses them at append, as they are not JSON.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from typing import Any

from deltalog.errors import InvalidRecordError, shown
from deltalog.log.record import Record

FIELDS = ("key", "key_b64", "value", "value_b64", "headers", "timestamp_ms", "partition", "topic", "offset",
          "delete_horizon_ms")


def _utf8(where: str, text: str) -> bytes:
    """A JSON string as UTF-8; JSON's ``\ud800`` escapes can make strings (lone surrogates) UTF-8 cannot hold."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidRecordError(f"{where} is not valid Unicode text ({e.reason} at index {e.start}); send binary "
                                 "data base64-encoded (key_b64, value_b64, {\"b64\": ...})") from None


def _b64(where: str, text: Any) -> bytes:
    if not isinstance(text, str):
        raise InvalidRecordError(f"{where} must be a base64 string, not {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRecordError(f"{where} is not valid base64: {text[:40]!r}") from None


def _json_text(where: str, value: Any) -> bytes:
    """A key or value of a JSON-encoded topic given as JSON (an object, an array, a number, true/false), as the
    compact UTF-8 text the log stores and checks against the topic's schema."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except ValueError as e:  # NaN or Infinity, which JSON has no words for
        raise InvalidRecordError(f"{where} is not valid JSON: {e}") from None


def _bytes_field(obj: dict[str, Any], name: str, where: str, *, required: bool,
                 json_fields: frozenset[str] = frozenset()) -> bytes | None:
    plain, encoded = name in obj, f"{name}_b64" in obj
    if plain and encoded:
        raise InvalidRecordError(f"{where}: give {name!r} or {name + '_b64'!r}, not both")
    if encoded:
        return _b64(f"{where}: {name}_b64", obj[f"{name}_b64"])
    if not plain:
        if required:
            raise InvalidRecordError(
                f"{where}: no {name!r} field; give a string, null (a tombstone) or {name + '_b64'!r}"
            )
        return None
    value = obj[name]
    if value is not None and not isinstance(value, str):
        if name in json_fields:
            return _json_text(f"{where}: {name!r}", value)
        raise InvalidRecordError(
            f"{where}: {name!r} must be a string or null, not {type(value).__name__} "
            f"(JSON-encode structured values into a string, or declare the topic's {name}.encoding=json and "
            f"{name}.schema to produce JSON objects)"
        )
    return None if value is None else _utf8(f"{where}: {name!r}", value)


def _header_value(where: str, value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _utf8(where, value)
    if isinstance(value, dict) and set(value) == {"b64"}:
        return _b64(where, value["b64"])
    raise InvalidRecordError(f"{where} must be a string, null or {{\"b64\": \"...\"}}, not {shown(value)}")


def _headers(where: str, raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    if raw is None:
        return ()
    if isinstance(raw, dict):
        pairs: Iterable[Any] = raw.items()
    elif isinstance(raw, list):
        pairs = raw
    else:
        raise InvalidRecordError(f"{where}: 'headers' must be an object or a list of [name, value] pairs")
    out = []
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise InvalidRecordError(f"{where}: a header must be a [name, value] pair with a string name, not {shown(pair)}")
        out.append((pair[0], _header_value(f"{where}: header {shown(pair[0], 40)}", pair[1])))
    return tuple(out)


def record_from_json(obj: Any, where: str = "record", json_fields: frozenset[str] = frozenset()) -> Record:
    """One record from one parsed JSON object; ``where`` (e.g. ``line 3``) prefixes every error. ``json_fields``:
    ``"key"`` and/or ``"value"``, those the topic encodes as JSON, which may be given as JSON values."""
    if not isinstance(obj, dict):
        raise InvalidRecordError(f"{where}: expected a JSON object, not {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise InvalidRecordError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(FIELDS)}")
    ts = obj.get("timestamp_ms")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < 2**63):
        raise InvalidRecordError(f"{where}: 'timestamp_ms' must be a whole number of epoch milliseconds >= 0 that fits "
                                 f"in 64 bits, not {shown(ts)}")
    return Record(
        key=_bytes_field(obj, "key", where, required=False, json_fields=json_fields),
        value=_bytes_field(obj, "value", where, required=True, json_fields=json_fields),
        headers=_headers(where, obj.get("headers")),
        timestamp_ms=ts,
    )


def partition_from_json(obj: dict[str, Any], where: str = "record") -> int | None:
    """The record's ``partition`` field: a whole number >= 0, or None (absent or null: the partitioner chooses)."""
    p = obj.get("partition")
    if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 0):
        raise InvalidRecordError(f"{where}: 'partition' must be a whole number >= 0 or null, not {p!r}")
    return p


def entries_from_lines(lines: Iterable[str], source: str = "input", json_fields: frozenset[str] = frozenset()
                       ) -> Iterator[tuple[int, Record, int | None]]:
    """(line number, record, partition or None) from JSON lines; blank lines are skipped; errors name the source
    and line number. ``json_fields``: as for :func:`record_from_json`."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidRecordError(f"{source} line {n}: not valid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise InvalidRecordError(f"{source} line {n}: JSON nested too deeply; a record is one flat object") from None
        where = f"{source} line {n}"
        record = record_from_json(obj, where, json_fields)
        yield n, record, partition_from_json(obj, where)


def records_from_lines(lines: Iterable[str], source: str = "input") -> Iterator[Record]:
    """Records from JSON lines (see :func:`entries_from_lines`)."""
    for _, record, _ in entries_from_lines(lines, source):
        yield record


def _text_or_b64(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode("ascii")}


def _json_or_text(name: str, data: bytes | None, as_json: bool) -> dict[str, Any]:
    if as_json and data is not None:
        try:
            return {name: json.loads(data)}
        except ValueError:  # written before the topic was declared json, or not JSON: its text, as on other topics
            pass
    return _text_or_b64(name, data)


def record_to_json(record: Record, topic: str | None = None, partition: int | None = None,
                   json_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A read record as a JSON-ready dict (topic and partition when given, offset, key, value, headers,
    timestamp_ms, delete_horizon_ms). ``json_fields``: ``"key"`` and/or ``"value"``, those the topic encodes as
    JSON, given as the JSON they hold rather than as its text."""
    headers = []
    for name, value in record.headers:
        h = _text_or_b64("v", value)
        headers.append([name, h["v"] if "v" in h else {"b64": h["v_b64"]}])
    where: dict[str, Any] = {}
    if topic is not None:
        where["topic"] = topic
    if partition is not None:
        where["partition"] = partition
    return {
        **where,
        "offset": record.offset,
        **_json_or_text("key", record.key, "key" in json_fields),
        **_json_or_text("value", record.value, "value" in json_fields),
        "headers": headers,
        "timestamp_ms": record.timestamp_ms,
        "delete_horizon_ms": record.delete_horizon_ms,
    }


def json_fields_of(config: Any) -> frozenset[str]:
    """The fields of a topic's records that it encodes as JSON (its ``TopicConfig``'s ``key.encoding`` and
    ``value.encoding``)."""
    return frozenset(name for name in ("key", "value") if getattr(config, f"{name}_encoding", "bytes") == "json")
