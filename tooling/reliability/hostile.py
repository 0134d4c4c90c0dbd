"""Hostile input: every kind of bad argument a caller can hand deltalog, and the check that it is refused cleanly.

Each :class:`Category` has a hypothesis strategy that draws :class:`Case` s: one call of the public API (or one
``deltalog`` command line with its standard input) in which at least one argument is wrong: of the wrong type,
out of range, an unknown key, a record too large, a path that cannot be a store. The strategies are built
from the documented rules (Kafka's topic name rule, the config table's ranges, ``max.message.bytes``, ...),
never by asking deltalog whether an input is valid, so a rule deltalog forgets to check shows up as an input
that was accepted.

For every case :func:`check_case` requires, in an :class:`Arena` (a populated store in a directory of its
own, the working directory of the call):

* the call raises a :class:`~deltalog.errors.DeltalogError` (the CLI: exits 1 or 2 with a
  ``deltalog: error: ...`` line and no traceback), never another exception and never success;
* its message is non-empty, short enough to read (at most :data:`MAX_MESSAGE` characters, whatever the size
  of the input), and names what was wrong (the case's ``mentions``);
* every file and directory under the arena, the store's and everything beside it, is byte-for-byte what
  it was: nothing written, nothing created inside or outside the store root.

``tests/test_hostile_input.py`` runs every category; ``python -m tooling.reliability`` runs them again and
reports how many inputs each tried. Needs hypothesis (the ``dev`` extra).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog.clock import ManualClock
from deltalog.errors import DeltalogError
from deltalog.log.record import Record

#: The longest error message a hostile input may get: a message that echoes a megabyte of input is not clear.
MAX_MESSAGE = 4000
#: The arena's clock: the store never reads the wall clock, so two runs build the same files.
ARENA_TIME_MS = 1_700_000_000_000

# -- the documented rules, restated independently of deltalog's code ------------------------------------

#: Kafka's ``Topic.validate``: 1 to 249 of ``[a-zA-Z0-9._-]``, not "." or "..".
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
LONG_MIN, LONG_MAX, INT_MAX = -(2**63), 2**63 - 1, 2**31 - 1


def legal_topic(name: object) -> bool:
    return isinstance(name, str) and bool(_LEGAL_TOPIC.fullmatch(name)) and name not in (".", "..")


def _whole_number(raw: object) -> int | None:
    """The value a config of type long documents accepting: an int (not a bool), a float with no fraction,
    or a string of ASCII digits with an optional sign (surrounding spaces allowed). None otherwise."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return int(raw) if math.isfinite(raw) and raw.is_integer() else None
    if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", raw):
        return int(raw)
    return None


def _number(raw: object) -> float | None:
    """The value a config of type double documents accepting: an int or float (not a bool), or a decimal
    string ("0.5", "1e-3", "inf"). None otherwise."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)\s*", raw,
                                             re.IGNORECASE):
        return float(raw)
    return None


@dataclass(frozen=True)
class LongKey:
    name: str
    lo: int
    hi: int

    def valid(self, raw: object) -> bool:
        v = _whole_number(raw)
        return v is not None and self.lo <= v <= self.hi


@dataclass(frozen=True)
class DoubleKey:
    name: str
    lo: float
    hi: float
    lo_open: bool = False

    def valid(self, raw: object) -> bool:
        v = _number(raw)
        if v is None or math.isnan(v):
            return False
        return (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi


#: Topic configs with a numeric range, as docs/configs.md's table documents them (Kafka's ranges).
TOPIC_LONGS = (
    LongKey("segment.bytes", 14, INT_MAX), LongKey("segment.ms", 1, LONG_MAX),
    LongKey("min.compaction.lag.ms", 0, LONG_MAX), LongKey("max.compaction.lag.ms", 1, LONG_MAX),
    LongKey("delete.retention.ms", 0, LONG_MAX), LongKey("retention.ms", -1, LONG_MAX),
    LongKey("retention.bytes", -1, LONG_MAX), LongKey("file.delete.delay.ms", 0, LONG_MAX),
    LongKey("max.message.bytes", 0, INT_MAX),
)
TOPIC_DOUBLES = (DoubleKey("min.cleanable.dirty.ratio", 0.0, 1.0),)
TOPIC_KEYS = ("cleanup.policy", "key.encoding", "value.encoding", "key.schema", "value.schema",
              *(k.name for k in TOPIC_LONGS), *(k.name for k in TOPIC_DOUBLES))
STORE_LONGS = (LongKey("log.cleaner.threads", 1, 1024), LongKey("log.cleaner.backoff.ms", 0, LONG_MAX),
               LongKey("log.cleaner.dedupe.buffer.size", 1024 * 1024 + 1, LONG_MAX))
STORE_DOUBLES = (DoubleKey("log.cleaner.io.buffer.load.factor", 0.0, 1.0, lo_open=True),
                 DoubleKey("log.cleaner.io.max.bytes.per.second", 0.0, math.inf, lo_open=True))
STORE_KEYS = ("deltalog.check.after.clean", *(k.name for k in STORE_LONGS), *(k.name for k in STORE_DOUBLES))
ENCODINGS = ("bytes", "string", "json")


def _valid_policy(raw: object) -> bool:
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    words = {str(p).strip().lower() for p in items if str(p).strip()}
    return bool(words) and words <= {"compact", "delete"}


# -- the arena ------------------------------------------------------------------------------------------


class Arena:
    """A populated store in a directory of its own, and a fingerprint of everything under that directory.

    Layout: ``<base>/cwd`` is the working directory of every call, ``<base>/cwd/store`` the store, and
    ``<base>/a-file`` / ``<base>/binary.bin`` are files a hostile path or ``--file`` may point at. A path
    like ``../x`` or a topic like ``../../x`` therefore lands inside ``<base>``, where the fingerprint sees it.

    Topics: ``prices`` (compact, 2 partitions, ``max.message.bytes=1000``, records with headers and a
    tombstone in partition 0), ``events`` (delete, a keyless record), ``typed`` (string keys, JSON values
    with schema ``price DOUBLE``).
    """

    TOPICS = ("prices", "events", "typed")
    PARTITIONS = {"prices": 2, "events": 1, "typed": 1}

    def __init__(self, base: str | os.PathLike[str]) -> None:
        from deltalog.store import Store  # the store pulls in delta-rs; the strategies alone do not need it

        self.base = Path(base).resolve()
        self.cwd = self.base / "cwd"
        self.root = self.cwd / "store"
        self.cwd.mkdir(parents=True, exist_ok=True)
        (self.base / "a-file").write_text("not a store\n")
        (self.base / "binary.bin").write_bytes(bytes(range(256)) * 4)
        self.clock = ManualClock(ARENA_TIME_MS)
        self.store = Store(self.root, clock=self.clock)
        s = self.store
        if not s.topic_exists("prices"):
            s.create_topic("prices", 2, config={"cleanup.policy": "compact", "max.message.bytes": 1000})
            s.append("prices", 0, [Record(b"grape", b"2.69", headers={"source": b"till"}),
                                   Record("lime", "0.49"), Record(b"grape", None)])
            s.roll("prices", 0)
            s.append("prices", 0, [Record(b"kiwi", b"0.35")])
            s.append("prices", 1, [Record(b"apple", b"1.10")])
            s.create_topic("events", 1, config={"cleanup.policy": "delete"})
            s.append("events", 0, [Record(None, b"opened"), Record(b"door", b"closed")])
            s.create_topic("typed", 1, config={"key.encoding": "string", "value.encoding": "json",
                                               "value.schema": "price DOUBLE"})
            s.append("typed", 0, [Record("grape", b'{"price": 2.69}')])
        #: log end offset of each partition: offsets beyond it (or below 0) are out of range
        self.log_end = {(t, p): s.log(t, p).head().log_end_offset for t in self.TOPICS for p in range(self.PARTITIONS[t])}

    def fingerprint(self) -> dict[str, str | None]:
        """Every directory (None) and file (SHA-256 of its bytes) under the arena, by relative path."""
        out: dict[str, str | None] = {}
        for dirpath, _dirnames, filenames in os.walk(self.base):
            rel = os.path.relpath(dirpath, self.base)
            out[rel + "/"] = None
            for name in filenames:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    out[os.path.join(rel, name)] = hashlib.sha256(f.read()).hexdigest()
        return out

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """Run with the arena's ``cwd`` as the working directory, so relative paths stay in the arena."""
        old = os.getcwd()
        os.chdir(self.cwd)
        try:
            yield
        finally:
            os.chdir(old)


def fingerprint_changes(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> list[str]:
    """What differs between two fingerprints, one line per path."""
    changes = [f"created {p}" for p in sorted(set(after) - set(before))]
    changes += [f"removed {p}" for p in sorted(set(before) - set(after))]
    changes += [f"changed {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return changes


# -- cases ------------------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Case:
    """One hostile call: ``op`` names it, ``args`` are what it is called with, ``mentions`` are words of which
    the error message must contain at least one (case-insensitive) to count as naming what was wrong."""

    op: str
    args: tuple[Any, ...]
    mentions: tuple[str, ...]
    stdin: bytes | str | None = None

    def __repr__(self) -> str:
        shown = ", ".join(_short(a) for a in self.args)
        extra = "" if self.stdin is None else f", stdin={_short(self.stdin, 200)}"
        return f"{self.op}({shown}{extra})"


def _store_call(name: str) -> Callable[[Arena, tuple[Any, ...]], Any]:
    def call(arena: Arena, args: tuple[Any, ...]) -> Any:
        return getattr(arena.store, name)(*args)

    return call


def _record_call(arena: Arena, args: tuple[Any, ...]) -> Any:
    (kwargs,) = args
    return Record(**kwargs)


def _new_store_call(arena: Arena, args: tuple[Any, ...]) -> Any:
    from deltalog.store import Store

    root, kwargs = args
    return Store(root, **kwargs)


def _kw_call(name: str) -> Callable[[Arena, tuple[Any, ...]], Any]:
    def call(arena: Arena, args: tuple[Any, ...]) -> Any:
        *positional, kwargs = args
        return getattr(arena.store, name)(*positional, **kwargs)

    return call


def _log_cleaner_call(arena: Arena, args: tuple[Any, ...]) -> Any:
    (kwargs,) = args
    return arena.store.log_cleaner(**kwargs)


#: How each ``Case.op`` is performed in an arena (the CLI ops are run by :func:`run_cli`).
CALLS: dict[str, Callable[[Arena, tuple[Any, ...]], Any]] = {
    **{name: _store_call(name) for name in (
        "create_topic", "append", "read", "describe", "partitions", "topic_config", "alter_topic_config",
        "delete_topic", "roll", "log", "logs", "delete_records", "topic_exists", "clean", "clean_partition",
        "vacuum", "delete_old_segments")},
    "create_topic_kw": _kw_call("create_topic"),
    "read_kw": _kw_call("read"),
    "Record": _record_call,
    "Store": _new_store_call,
    "log_cleaner": _log_cleaner_call,
}


# -- strategies: topic names ------------------------------------------------------------------------------

_NOT_STR = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.binary(max_size=12),
                     st.lists(st.text(max_size=4), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                     st.tuples(st.text(max_size=3)), st.builds(object), st.just(Path("prices")))

ILLEGAL_TOPIC_NAMES = st.one_of(
    st.sampled_from(["", ".", "..", "../x", "../../x", "../../../cwd-escape", "/abs-escape", "a/b", "a\\b",
                     "a\x00b", "\x00", "x\n", "x\r", " x", "x ", "café", "a b", "*", "?", "~", "$HOME",
                     "prices/../events", "prices/", "\ud800", "\U0001f600", "a" * 250, "nul\x00"]),
    st.integers(250, 3000).map(lambda n: "a" * n),
    st.text(max_size=300).filter(lambda s: not legal_topic(s)),
    _NOT_STR,
)
#: Legal names of topics the arena does not have.
MISSING_TOPIC_NAMES = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True).filter(
    lambda s: legal_topic(s) and s not in Arena.TOPICS)

#: Calls that name a topic, with the other arguments valid. Ops where ``None`` means "every topic" take no None.
_TOPIC_OPS: tuple[tuple[str, Callable[[Any], tuple[Any, ...]], bool], ...] = (
    ("append", lambda t: (t, 0, [Record(b"k", b"v")]), True),
    ("read", lambda t: (t, 0), True),
    ("describe", lambda t: (t,), True),
    ("partitions", lambda t: (t,), True),
    ("topic_config", lambda t: (t,), True),
    ("alter_topic_config", lambda t: (t, {"segment.ms": 1000}), True),
    ("delete_topic", lambda t: (t,), True),
    ("roll", lambda t: (t, 0), True),
    ("log", lambda t: (t, 0), True),
    ("delete_records", lambda t: (t, 0, 0), True),
    ("topic_exists", lambda t: (t,), True),
    ("clean_partition", lambda t: (t, 0), True),
    ("clean", lambda t: (t,), False),
    ("logs", lambda t: (t,), False),
    ("vacuum", lambda t: (t,), False),
    ("delete_old_segments", lambda t: (t,), False),
)


@st.composite
def topic_name_cases(draw: st.DrawFn) -> Case:
    if draw(st.booleans()):  # creating a topic of an illegal name
        name = draw(ILLEGAL_TOPIC_NAMES)
        return Case("create_topic_kw", (name, 1, {}), ("topic",))
    op, args, none_ok = draw(st.sampled_from(_TOPIC_OPS))
    names = ILLEGAL_TOPIC_NAMES if none_ok else ILLEGAL_TOPIC_NAMES.filter(lambda n: n is not None)
    name = draw(st.one_of(names, MISSING_TOPIC_NAMES))
    if op == "topic_exists" and legal_topic(name):
        name = draw(names)  # topic_exists of a legal missing name is a valid question (False)
    return Case(op, args(name), ("topic",))


# -- strategies: configs ----------------------------------------------------------------------------------

_ODD_VALUES = st.one_of(st.none(), st.booleans(), st.lists(st.integers(), max_size=3), st.dictionaries(
    st.text(max_size=3), st.integers(), max_size=2), st.builds(object), st.binary(max_size=10),
    st.just(float("nan")), st.just(float("inf")), st.just(-float("inf")), st.just("x" * 100_000),
    st.just("\ud800"), st.just("1_000"), st.just("١٢٣"), st.just("0x10"), st.just(""), st.just("   "))


def _bad_long(key: LongKey) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(max_value=key.lo - 1), st.integers(min_value=key.hi + 1),
        st.sampled_from([key.lo - 1, key.hi + 1, 10**400, -(10**400)]),
        st.floats().filter(lambda f: not key.valid(f)),
        st.integers().map(str).filter(lambda s: not key.valid(s)),
        st.text(max_size=30), _ODD_VALUES,
    ).filter(lambda v: not key.valid(v))


def _bad_double(key: DoubleKey) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(allow_nan=True), st.integers(), st.text(max_size=30), _ODD_VALUES,
        st.sampled_from([key.lo - 0.001, key.hi + 0.5, "-1", "2.5", "nan"]),
    ).filter(lambda v: not key.valid(v))


_BAD_ENCODING = st.one_of(st.text(max_size=20), _ODD_VALUES, st.integers()).filter(
    lambda v: str(v).strip().lower() not in ENCODINGS)
_BAD_POLICY = st.one_of(st.text(max_size=30), _ODD_VALUES, st.integers(),
                        st.lists(st.sampled_from(["compact", "delete", "shred", ""]), max_size=3),
                        st.sampled_from(["compact;delete", "compact delete", "compacted", "Delete,x"])).filter(
    lambda v: not _valid_policy(v))
#: Schemas no parser takes: an unbalanced bracket, a trailing comma, a type that does not exist, or a value
#: whose text is a bare word.
_BAD_SCHEMA = st.one_of(
    st.sampled_from(["{{{", "price", "price DOUBLE,", "price NOPE", "struct<", "price DOUBLE\x00", "5", "a INT)",
                     '{"type": "struct"}', '{"type": "struct", "fields": 5}', "a ARRAY<INT", "x" * 100_000]),
    st.text(max_size=30).map(lambda s: s + " <"),
)


def _unknown_key(known: tuple[str, ...]) -> st.SearchStrategy[str]:
    near = [f"{k} " for k in known[:3]] + [k.upper() for k in known[:3]] + [k.replace(".", "_") for k in known[:3]]
    return st.one_of(st.sampled_from(["log.segment.bytes", "compression.type", "cleanup_policy", "", "\x00",
                                      "\ud800", "x" * 10_000, *near]),
                     st.text(max_size=40)).filter(lambda k: k not in known)


@st.composite
def bad_topic_configs(draw: st.DrawFn) -> tuple[Any, tuple[str, ...]]:
    """A topic config that must be refused, and words its error must contain one of."""
    kind = draw(st.sampled_from(["not-a-mapping", "key-type", "unknown-key", "long", "double", "policy",
                                 "encoding", "schema", "conflict"]))
    valid_extra = draw(st.dictionaries(st.sampled_from(["segment.ms", "retention.ms"]),
                                       st.integers(1, 10**9), max_size=1))
    if kind == "not-a-mapping":
        value = draw(st.one_of(st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), min_size=1, max_size=3),
                               st.text(min_size=1, max_size=40), st.integers(), st.binary(min_size=1, max_size=10),
                               st.sets(st.text(max_size=4), min_size=1, max_size=2), st.builds(object),
                               st.just("cleanup.policy=compact"), st.just([("cleanup.policy", "compact")])))
        return value, ("config", "mapping")
    if kind == "key-type":
        key = draw(st.one_of(st.integers(), st.binary(max_size=5), st.tuples(st.integers()), st.just(None)))
        return {**valid_extra, key: 1}, ("config", "key")
    if kind == "unknown-key":
        key = draw(_unknown_key(TOPIC_KEYS))
        return {**valid_extra, key: draw(st.integers(0, 10))}, ("unknown", "config")
    if kind == "long":
        k = draw(st.sampled_from(TOPIC_LONGS))
        return {**valid_extra, k.name: draw(_bad_long(k))}, (k.name,)
    if kind == "double":
        k = draw(st.sampled_from(TOPIC_DOUBLES))
        return {**valid_extra, k.name: draw(_bad_double(k))}, (k.name,)
    if kind == "policy":
        return {**valid_extra, "cleanup.policy": draw(_BAD_POLICY)}, ("cleanup.policy",)
    if kind == "encoding":
        side = draw(st.sampled_from(["key", "value"]))
        return {f"{side}.encoding": draw(_BAD_ENCODING)}, (f"{side}.encoding",)
    if kind == "schema":
        side = draw(st.sampled_from(["key", "value"]))
        return {f"{side}.encoding": "json", f"{side}.schema": draw(_BAD_SCHEMA)}, (f"{side}.schema",)
    # conflict: each value valid alone, the pair not
    if draw(st.booleans()):
        side = draw(st.sampled_from(["key", "value"]))
        return {f"{side}.encoding": "json"}, (f"{side}.schema",)
    hi = draw(st.integers(1, 10**12))
    return {"min.compaction.lag.ms": hi + draw(st.integers(1, 10**6)), "max.compaction.lag.ms": hi}, (
        "min.compaction.lag.ms",)


@st.composite
def bad_store_configs(draw: st.DrawFn) -> tuple[Any, tuple[str, ...]]:
    kind = draw(st.sampled_from(["not-a-mapping", "unknown-key", "long", "double", "bool", "buffer"]))
    if kind == "not-a-mapping":
        return draw(st.one_of(st.lists(st.integers(), min_size=1, max_size=3), st.text(min_size=1, max_size=20),
                              st.integers())), ("config",)
    if kind == "unknown-key":
        return {draw(_unknown_key(STORE_KEYS)): 1}, ("unknown", "config")
    if kind == "long":
        k = draw(st.sampled_from(STORE_LONGS))
        return {k.name: draw(_bad_long(k))}, (k.name,)
    if kind == "double":
        k = draw(st.sampled_from(STORE_DOUBLES))
        return {k.name: draw(_bad_double(k))}, (k.name,)
    if kind == "bool":
        v = draw(st.one_of(st.text(max_size=10), st.integers(), _ODD_VALUES).filter(
            lambda v: not isinstance(v, bool) and str(v).strip().lower() not in ("true", "false")))
        return {"deltalog.check.after.clean": v}, ("deltalog.check.after.clean",)
    # buffer: more than 1 MiB per cleaner thread is required (Kafka's broker rule)
    threads = draw(st.integers(1, 64))
    return {"log.cleaner.threads": threads,
            "log.cleaner.dedupe.buffer.size": draw(st.integers(1024 * 1024 + 1, threads * (1024 * 1024 + 1) - 1))
            if threads > 1 else 1024 * 1024}, ("log.cleaner.dedupe.buffer.size",)


@st.composite
def config_cases(draw: st.DrawFn) -> Case:
    where = draw(st.sampled_from(["create", "alter", "store", "new-store", "threads"]))
    if where in ("create", "alter"):
        config, mentions = draw(bad_topic_configs())
        if where == "create":
            return Case("create_topic_kw", ("new-topic", 1, {"config": config}), mentions)
        return Case("alter_topic_config", ("prices", config), mentions)
    if where == "threads":
        bad = draw(st.one_of(st.integers(max_value=0), st.booleans(), st.floats(), st.text(max_size=5)))
        return Case("log_cleaner", ({"threads": bad},), ("threads",))
    config, mentions = draw(bad_store_configs())
    root = "store" if where == "store" else "new-store"  # relative to the arena's cwd
    return Case("Store", (root, {"config": config}), mentions)


# -- strategies: records ----------------------------------------------------------------------------------

_LONE_SURROGATE = st.sampled_from(["\ud800", "a\udfffb", "\udc80"])
_BAD_BYTES_FIELD = st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=3),
                             st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.builds(object),
                             st.tuples(st.binary(max_size=3)), _LONE_SURROGATE)
_GOOD_BYTES = st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=20).filter(
    lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)))
_BAD_HEADERS = st.one_of(
    st.integers(), st.floats(), st.booleans(), st.text(min_size=1, max_size=10), st.binary(min_size=1, max_size=10),
    st.builds(object),
    st.lists(st.one_of(st.tuples(st.text(max_size=3)), st.tuples(st.text(max_size=3), st.binary(max_size=3),
                                                                   st.binary(max_size=3)),
                       st.integers(), st.none()), min_size=1, max_size=3),
    st.lists(st.tuples(st.one_of(st.integers(), st.binary(max_size=3), st.none(), _LONE_SURROGATE),
                       st.binary(max_size=3)), min_size=1, max_size=3),
    st.lists(st.tuples(st.text(max_size=3), _BAD_BYTES_FIELD), min_size=1, max_size=3),
    st.dictionaries(st.one_of(st.integers(), st.binary(min_size=1, max_size=3)), st.binary(max_size=3), min_size=1,
                    max_size=2),
)
_BAD_TIMESTAMP = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63), st.floats(), st.booleans(),
                           st.text(max_size=10), st.binary(max_size=5))


@st.composite
def bad_record_kwargs(draw: st.DrawFn) -> tuple[dict[str, Any], tuple[str, ...]]:
    kwargs: dict[str, Any] = {"key": draw(_GOOD_BYTES), "value": draw(_GOOD_BYTES)}
    field_ = draw(st.sampled_from(["key", "value", "headers", "timestamp_ms", "offset", "delete_horizon_ms"]))
    if field_ in ("key", "value"):
        kwargs[field_] = draw(_BAD_BYTES_FIELD)
        return kwargs, (field_,)
    if field_ == "headers":
        kwargs["headers"] = draw(_BAD_HEADERS)
        return kwargs, ("header",)
    if field_ == "timestamp_ms":
        kwargs["timestamp_ms"] = draw(_BAD_TIMESTAMP)
        return kwargs, ("timestamp_ms",)
    kwargs[field_] = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63), st.floats(),
                                    st.booleans(), st.text(max_size=5)))
    return kwargs, (field_,)


@st.composite
def oversize_records(draw: st.DrawFn) -> Record:
    """A record over the ``prices`` topic's ``max.message.bytes=1000``, by its key, value or headers."""
    extra = draw(st.integers(1, 200_000))
    where = draw(st.sampled_from(["key", "value", "headers"]))
    if where == "key":
        return Record(b"k" * (1000 + extra), b"")
    if where == "value":
        return Record(b"k", b"v" * (999 + extra))
    return Record(b"k", b"v", headers={"h": b"x" * (997 + extra)})


@st.composite
def _batch_with(draw: st.DrawFn, bad: st.SearchStrategy[Any]) -> list[Any]:
    good = [Record(b"k%d" % i, b"v") for i in range(draw(st.integers(0, 3)))]
    at = draw(st.integers(0, len(good)))
    return [*good[:at], draw(bad), *good[at:]]


_NOT_RECORDS = st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), st.text(min_size=1, max_size=10),
                         st.binary(min_size=1, max_size=10), st.builds(object),
                         st.dictionaries(st.text(min_size=1, max_size=3), st.binary(max_size=3), min_size=1, max_size=2),
                         st.builds(lambda: iter([b"k"])), st.just(pa.array([b"k"])))
_NOT_A_RECORD = st.one_of(st.tuples(st.binary(max_size=3), st.binary(max_size=3)), st.binary(max_size=3),
                          st.text(max_size=3), st.none(), st.integers(),
                          st.dictionaries(st.sampled_from(["key", "value"]), st.binary(max_size=3), max_size=2))


def _bad_json_value(draw: st.DrawFn) -> bytes:
    """A value ``typed``'s ``value.encoding=json`` (schema ``price DOUBLE``) must refuse."""
    return draw(st.one_of(
        st.sampled_from([b"not json", b"{", b"[1, 2]", b'"price"', b"3.5", b"true", b'{"price": "cheap"}',
                         b'{"price": 1, "currency": "EUR"}', b"\xff\xfe", b'{"price": NaN}', b'{"price": Infinity}',
                         b"[" * 100_000 + b"]" * 100_000, b'{"price": ' * 50_000]),
        st.binary(min_size=1, max_size=30).filter(lambda b: not _json_object(b)),
    ))


def _json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):
        return False


@st.composite
def _bad_arrow(draw: st.DrawFn) -> tuple[Any, tuple[str, ...]]:
    """An Arrow batch for ``prices`` that must be refused."""
    n = draw(st.integers(1, 4))
    keys = pa.array([b"k%d" % i for i in range(n)])
    values = pa.array([b"v"] * n)
    kind = draw(st.sampled_from(["missing", "unknown", "type", "duplicate", "timestamp", "headers", "null-key",
                                 "oversize"]))
    if kind == "missing":
        return pa.table({draw(st.sampled_from(["key", "value"])): keys}), ("column",)
    if kind == "unknown":
        name = draw(st.sampled_from(["offset", "segment", "delete_horizon_ms", "Key", "extra", ""]))
        return pa.table({"key": keys, "value": values, name: pa.array(range(n))}), ("column",)
    if kind == "type":
        bad = draw(st.sampled_from([pa.array(range(n)), pa.array([1.5] * n), pa.array([[1]] * n),
                                    pa.nulls(n), pa.array(["a"] * n).dictionary_encode(), pa.array([True] * n)]))
        side = draw(st.sampled_from(["key", "value"]))
        return pa.table({"key": keys, "value": values, side: bad} if side == "value" else
                        {"key": bad, "value": values}), ("column",)
    if kind == "duplicate":
        return pa.Table.from_arrays([keys, values, values], names=["key", "value", draw(
            st.sampled_from(["key", "value"]))]), ("column",)
    if kind == "timestamp":
        ts = draw(st.sampled_from([pa.array([-1] * n), pa.array([2**64 - 1] * n, pa.uint64()),
                                   pa.array([1.5] * n), pa.array(["now"] * n), pa.nulls(n)]))
        return pa.table({"key": keys, "value": values, "timestamp_ms": ts}), ("timestamp_ms",)
    if kind == "headers":
        h = draw(st.sampled_from([pa.array([1] * n), pa.array([[{"name": "a", "v": b"x"}]] * n),
                                  pa.array([[{"key": None, "value": b"x"}]] * n,
                                           pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                                  pa.array(["h"] * n)]))
        return pa.table({"key": keys, "value": values, "headers": h}), ("header",)
    if kind == "null-key":
        return pa.table({"key": pa.array([None] * n, pa.binary()), "value": values}), ("key",)
    return pa.table({"key": keys, "value": pa.array([b"v" * 2000] * n)}), ("max.message.bytes",)


@st.composite
def record_cases(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["Record", "not-a-record", "records-arg", "oversize", "keyless", "encoding",
                                 "arrow", "big-value"]))
    if kind == "Record":
        kwargs, mentions = draw(bad_record_kwargs())
        return Case("Record", (kwargs,), mentions)
    if kind == "not-a-record":
        return Case("append", ("prices", 0, draw(_batch_with(_NOT_A_RECORD))), ("record",))
    if kind == "records-arg":
        return Case("append", ("prices", 0, draw(_NOT_RECORDS)), ("record",))
    if kind == "oversize":
        return Case("append", ("prices", draw(st.integers(0, 1)), draw(_batch_with(oversize_records()))),
                    ("max.message.bytes",))
    if kind == "keyless":
        return Case("append", ("prices", 0, draw(_batch_with(st.builds(Record, st.none(), _GOOD_BYTES)))),
                    ("key",))
    if kind == "encoding":
        if draw(st.booleans()):  # key.encoding=string: keys must be UTF-8
            bad = Record(draw(st.sampled_from([b"\xff", b"a\xc3", b"\xed\xa0\x80", b"\x80abc"])), b'{"price": 1}')
            return Case("append", ("typed", 0, draw(_batch_with(st.just(bad)))), ("key",))
        return Case("append", ("typed", 0, [Record("k", _bad_json_value(draw))]), ("value",))
    if kind == "arrow":
        table, mentions = draw(_bad_arrow())
        if draw(st.booleans()):
            table = table.to_batches()[0] if table.num_rows else table
        return Case("append", ("prices", 0, table), mentions)
    # a value over the default max.message.bytes (1,048,588) of the events topic
    return Case("append", ("events", 0, [Record(b"k", b"v" * (1_048_589 + draw(st.integers(0, 1000))))]),
                ("max.message.bytes",))


# -- strategies: partitions and offsets ---------------------------------------------------------------------

def _bad_partitions(count: int) -> st.SearchStrategy[Any]:
    import numpy as np

    return st.one_of(
        st.integers(max_value=-1), st.integers(min_value=count), st.sampled_from([count, 2**31, 2**63, 2**100]),
        st.floats(), st.sampled_from([0.0, 1.0, -0.0]), st.booleans(), st.text(max_size=5), st.none(),
        st.binary(max_size=3), st.lists(st.integers(0, 1), max_size=2), st.just(np.int64(0)),
        st.just(complex(0, 0)), st.builds(object),
    )


_PARTITION_OPS: tuple[tuple[str, Callable[[Any], tuple[Any, ...]]], ...] = (
    ("append", lambda p: ("prices", p, [Record(b"k", b"v")])),
    ("read", lambda p: ("prices", p)),
    ("roll", lambda p: ("prices", p)),
    ("log", lambda p: ("prices", p)),
    ("delete_records", lambda p: ("prices", p, 0)),
    ("clean_partition", lambda p: ("prices", p)),
)


@st.composite
def partition_offset_cases(draw: st.DrawFn, log_end: Mapping[tuple[str, int], int]) -> Case:
    kind = draw(st.sampled_from(["partition", "partition-count", "from-offset", "max-records", "before-offset"]))
    if kind == "partition":
        op, args = draw(st.sampled_from(_PARTITION_OPS))
        return Case(op, args(draw(_bad_partitions(Arena.PARTITIONS["prices"]))), ("partition",))
    if kind == "partition-count":
        count = draw(st.one_of(st.integers(max_value=0), st.integers(min_value=10_001), st.floats(), st.booleans(),
                               st.text(max_size=4), st.none(), st.just(2**64)))
        return Case("create_topic", ("new-topic", count), ("partitions",))
    p = draw(st.integers(0, 1))
    leo = log_end[("prices", p)]
    if kind == "from-offset":
        bad = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=leo + 1), st.floats(), st.booleans(),
                             st.none(), st.text(max_size=10).filter(lambda s: s not in ("earliest", "latest")),
                             st.sampled_from(["EARLIEST", "Latest", "first", "end", " earliest"]),
                             st.just(2**64), st.binary(max_size=3)))
        return Case("read", ("prices", p, bad), ("offset",))
    if kind == "max-records":
        bad = draw(st.one_of(st.integers(max_value=-1), st.floats(), st.booleans(), st.text(max_size=5),
                             st.binary(max_size=3), st.just(-(2**70))))
        return Case("read_kw", ("prices", p, 0, {"max_records": bad}), ("max_records",))
    bad = draw(st.one_of(st.integers(max_value=-2), st.integers(min_value=leo + 1), st.floats(), st.booleans(),
                         st.none(), st.text(max_size=5), st.just(2**64)))
    return Case("delete_records", ("prices", p, bad), ("offset",))


# -- strategies: store paths ------------------------------------------------------------------------------


class _BytesPath:
    """An ``os.PathLike`` whose path is bytes: deltalog takes text paths only."""

    def __fspath__(self) -> bytes:
        return b"store"

    def __repr__(self) -> str:
        return "_BytesPath(b'store')"


@st.composite
def store_path_cases(draw: st.DrawFn) -> Case:
    """Store roots that cannot be a store: wrong types, empty, NUL, names too long for the filesystem, a
    path that is a file or runs through one. Relative ones resolve inside the arena's cwd."""
    root = draw(st.one_of(
        st.none(), st.integers(), st.floats(), st.binary(max_size=10), st.lists(st.text(max_size=3), max_size=2),
        st.builds(object), st.just(_BytesPath()),
        st.sampled_from(["", " ", "\t\n", "\x00", "store\x00", "a\x00/b", "../a-file", "../a-file/store",
                         "../binary.bin/x/y", "\ud800", "store/\udbff/x"]),  # lone surrogates no file name holds
        st.integers(256, 2000).map(lambda n: "s" * n),  # one path component longer than NAME_MAX (255 bytes)
        st.integers(4200, 9000).map(lambda n: "/".join(["d" * 200] * (n // 200))),  # longer than PATH_MAX
        st.text(max_size=20).map(lambda s: s + "\x00"),
    ))
    return Case("Store", (root, {}), ("store", "path", "root"))


# -- the CLI ----------------------------------------------------------------------------------------------


def run_cli(argv: list[str], stdin: bytes | str | None = None) -> tuple[int, str, str]:
    """``deltalog.cli.main(argv)`` in this process with ``stdin``: (exit code, stdout, stderr).

    Bytes on stdin are decoded as a real UTF-8 terminal would (strictly), so invalid UTF-8 reaches the
    command as the decoding error a real process gets. An exception escaping ``main`` is re-raised: the
    CLI promises exit codes, never a traceback.
    """
    from deltalog.cli import main

    out, err = io.StringIO(), io.StringIO()
    if isinstance(stdin, bytes):
        stream: Any = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    else:
        stream = io.StringIO(stdin or "")
    old_stdin = sys.stdin
    sys.stdin = stream
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        sys.stdin = old_stdin
    return code, out.getvalue(), err.getvalue()


#: What the CLI must print for a refused command: its error line (argparse's usage errors name the sub-command).
CLI_ERROR_LINE = re.compile(r"^deltalog(?: [\w-]+)*: error: \S", re.MULTILINE)


def _bad_json_lines(draw: st.DrawFn) -> str:
    """One line ``produce`` must refuse (for ``prices``, a compacted topic with max.message.bytes=1000)."""
    return draw(st.one_of(
        st.text(min_size=1, max_size=40).filter(lambda s: s.strip() and not _json_object(s.encode("utf-8", "replace"))
                                                and "\n" not in s and "\r" not in s),
        st.sampled_from([
            "[1, 2]", "null", "42", '"grape"', "{}", '{"key": "k"}', '{"key": 5, "value": "v"}',
            '{"key": "k", "value": 5}', '{"key": "k", "value": {"a": 1}}', '{"key": "k", "value": "v", "x": 1}',
            '{"key": "k", "value": "v", "timestamp_ms": -1}', '{"key": "k", "value": "v", "timestamp_ms": 1.5}',
            '{"key": "k", "value": "v", "timestamp_ms": "now"}', '{"key": "k", "value": "v", "timestamp_ms": true}',
            '{"key": "k", "value": "v", "timestamp_ms": 99999999999999999999999}',
            '{"key": "k", "value": "v", "headers": 5}', '{"key": "k", "value": "v", "headers": [["h"]]}',
            '{"key": "k", "value": "v", "headers": [[1, "x"]]}', '{"key": "k", "value": "v", "headers": {"h": 5}}',
            '{"key": "k", "key_b64": "aw==", "value": "v"}', '{"key_b64": "!!!", "value": "v"}',
            '{"key_b64": 5, "value": "v"}', '{"key": "\\ud800", "value": "v"}', '{"key": "k", "value": "\\udfff"}',
            '{"key": "k", "value": "v", "headers": {"\\ud800": "x"}}', '{"value": "keyless"}',
            '{"key": null, "value": "keyless"}', "[" * 100_000 + "]" * 100_000, '{"key": ' * 50_000,
            '{"key": "k", "value": "' + "v" * 1001 + '"}', '{"key": "' + "k" * 5000 + '", "value": null}',
        ]),
    ))


@st.composite
def cli_cases(draw: st.DrawFn, log_end: Mapping[tuple[str, int], int]) -> Case:
    """A ``deltalog`` command line with one hostile part (the others valid for the arena's store), and now and then
    a hostile ``--store`` as well. ``mentions`` holds what the error must name: the hostile part's words."""
    store = "store"  # relative to the arena's cwd
    # Words starting with '-' are options to argparse ('-h' is a legal topic name, and prints the help).
    bad_topic = st.one_of(ILLEGAL_TOPIC_NAMES.filter(lambda n: isinstance(n, str)), MISSING_TOPIC_NAMES).filter(
        lambda n: not n.startswith("-"))
    bad_store = st.sampled_from(["", "\x00", "store\x00x", "../a-file", "../a-file/s", "s" * 300, "nowhere",
                                 "../nowhere", "/".join(["d" * 200] * 25)])
    bad_partition = st.one_of(st.sampled_from(["x", "1.5", "-1", "2", "99999999999999999999", "", "0x1", "one",
                                               "0.0", "nan"]),
                              st.text(max_size=6).filter(lambda s: _py_int(s) is None or not 0 <= _py_int(s) < 2))
    command = draw(st.sampled_from(["create", "alter", "describe", "delete", "produce", "produce-file", "consume",
                                    "delete-records", "retention", "vacuum", "reset-uncleanable", "list", "status",
                                    "global-config"]))
    argv: list[str]
    stdin: bytes | str | None = None
    topic_words, partition_words, config_words = ("topic",), ("partition",), ("config",)
    if command == "create":
        part = draw(st.sampled_from(["topic", "partitions", "config"]))
        topic = draw(ILLEGAL_TOPIC_NAMES.filter(lambda n: isinstance(n, str) and not n.startswith("-"))
                     ) if part == "topic" else "new-topic"
        count = draw(st.sampled_from(["0", "-1", "10001", "x", "1.5", ""])) if part == "partitions" else "1"
        config = draw(_bad_cli_config(TOPIC_KEYS)) if part == "config" else "segment.ms=1000"
        argv = ["topics", "create", topic, "-p", count, "--config", config]
        mentions = {"topic": topic_words, "partitions": ("partitions",), "config": config_words}[part]
    elif command == "alter":
        if draw(st.booleans()):
            argv, mentions = ["topics", "alter", draw(bad_topic), "--config", "segment.ms=1000"], topic_words
        else:
            argv, mentions = ["topics", "alter", "prices", "--config", draw(_bad_cli_config(TOPIC_KEYS))], config_words
    elif command == "describe":
        argv, mentions = ["topics", "describe", draw(bad_topic)], topic_words
    elif command == "delete":
        if draw(st.booleans()):
            argv, mentions = ["topics", "delete", draw(bad_topic), "--yes"], topic_words
        else:
            argv, mentions = ["topics", "delete", "prices"], ("--yes",)
    elif command in ("produce", "produce-file"):
        part = draw(st.sampled_from(["topic", "partition", "input", "input", "input", "binary", "batch-size"]))
        topic = draw(bad_topic) if part == "topic" else "prices"
        partition = draw(bad_partition) if part == "partition" else "0"
        argv = ["produce", topic, "-p", partition]
        mentions = {"topic": topic_words, "partition": partition_words, "input": ("stdin", "record"),
                    "binary": ("stdin",), "batch-size": ("batch-size",)}[part]
        good = [json.dumps({"key": f"k{i}", "value": f"v{i}"}) for i in range(draw(st.integers(0, 3)))]
        if part == "batch-size":
            argv += ["--batch-size", draw(st.sampled_from(["0", "-5", "x", "1.5"]))]
        if part == "binary":
            lines = [line.encode() for line in good]
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(
                [b"\xff\xfe", b'{"key": "k", "value": "\xc3"}', b"\x80", b'{"key": "\xed\xa0\x80", "value": "v"}'])))
            stdin = b"\n".join(lines) + b"\n"
        else:
            lines = list(good)
            if part == "input":
                lines.insert(draw(st.integers(0, len(lines))), _bad_json_lines(draw))
            stdin = "\n".join(lines) + "\n"
        if command == "produce-file":
            if part in ("input", "binary"):  # the hostile part is the file itself
                mentions = ("file", "directory", "utf-8")
            argv += ["--file", draw(st.sampled_from(["../nowhere.jsonl", "..", "../binary.bin", "../a-file/x", "",
                                                     "\x00"])) if part in ("input", "binary") else "../a-file"]
            stdin = None
    elif command == "consume":
        part = draw(st.sampled_from(["topic", "partition", "from", "max"]))
        argv = ["consume", draw(bad_topic) if part == "topic" else "prices",
                "-p", draw(bad_partition) if part == "partition" else "0"]
        mentions = {"topic": topic_words, "partition": partition_words, "from": ("offset",),
                    "max": ("max-records",)}[part]
        if part == "from":
            leo = log_end[("prices", 0)]
            argv += ["--from-offset", draw(st.one_of(
                # not "EARLIEST": Kafka's console consumer lower-cases --offset, and so does deltalog's
                st.sampled_from(["x", "first", "1.5", "", "-1", str(leo + 1), str(2**70)]),
                st.integers(min_value=leo + 1).map(str), st.integers(max_value=-1).map(str)))]
        if part == "max":
            argv += ["--max-records", draw(st.sampled_from(["-1", "x", "1.5", "", "-99999999999999999999"]))]
    elif command == "delete-records":
        part = draw(st.sampled_from(["topic", "partition", "offset"]))
        leo = log_end[("prices", 0)]
        argv = ["cleaner", "delete-records", draw(bad_topic) if part == "topic" else "prices",
                draw(bad_partition) if part == "partition" else "0",
                draw(st.one_of(st.sampled_from(["x", "1.5", "-2", str(leo + 1), str(2**70), ""]),
                               st.integers(min_value=leo + 1).map(str))) if part == "offset" else "0"]
        mentions = {"topic": topic_words, "partition": partition_words, "offset": ("offset",)}[part]
    elif command in ("retention", "vacuum"):
        argv, mentions = ["cleaner", command, draw(bad_topic)], topic_words
    elif command == "reset-uncleanable":
        if draw(st.booleans()):
            argv, mentions = ["cleaner", "reset-uncleanable", draw(bad_topic)], topic_words
        else:
            argv = ["cleaner", "reset-uncleanable", "prices", draw(bad_partition.filter(
                lambda s: _py_int(s) is None and not s.startswith("-")))]  # argparse takes '-x' for an option
            mentions = partition_words
    elif command in ("list", "status"):
        argv = ["topics", "list"] if command == "list" else ["status"]
        store, mentions = draw(bad_store), ("store",)
    else:  # a bad store-level --config before a command that would otherwise work
        argv, mentions = ["--config", draw(_bad_cli_config(STORE_KEYS)), "topics", "list"], config_words
    if command not in ("list", "status") and draw(st.integers(0, 9)) == 0:
        store = draw(bad_store.filter(lambda s: s not in ("nowhere", "../nowhere") or command != "create"))
        mentions = (*mentions, "store")  # whichever of the two is found first
    return Case("cli", (["--store", store, *argv],), mentions, stdin=stdin)


def _py_int(text: str) -> int | None:
    """What argparse's ``type=int`` makes of a command-line word (Python's ``int``)."""
    try:
        return int(text)
    except ValueError:
        return None


@st.composite
def _bad_cli_config(draw: st.DrawFn, known: tuple[str, ...]) -> str:
    """A ``KEY=VALUE`` word that must be refused: malformed, an unknown key, or a value out of its range."""
    kind = draw(st.sampled_from(["malformed", "unknown", "value"]))
    if kind == "malformed":
        return draw(st.sampled_from(["noequals", "=1", " =1", "", "=", "segment.ms"]))
    if kind == "unknown":
        return f"{draw(_unknown_key(known).filter(lambda k: '=' not in k and k.strip() and k.strip() not in known))}=1"
    longs = TOPIC_LONGS if known is TOPIC_KEYS else STORE_LONGS
    k = draw(st.sampled_from(longs))
    value = draw(st.one_of(st.sampled_from([str(k.lo - 1), str(k.hi + 1), "x", "", "1.5", "1e3", str(10**30)]),
                           st.text(max_size=8)).filter(lambda v: "\n" not in v and not k.valid(v.strip())))
    return f"{k.name}={value}"


# -- running a category -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Category:
    """A family of hostile inputs: its name and description (as RELIABILITY.md lists them) and its strategy,
    built for an arena (some ranges depend on the arena's log end offsets)."""

    name: str
    what: str
    strategy: Callable[[Arena], st.SearchStrategy[Case]]


CATEGORIES: tuple[Category, ...] = (
    Category("topic names", "illegal names (path separators, '..', NUL, unicode, 250+ characters, non-strings) "
             "for every call that takes a topic; legal names of missing topics", lambda a: topic_name_cases()),
    Category("configs", "topic and store configs: not a mapping, non-string or unknown keys, values of the wrong "
             "type or out of range, conflicting pairs, oversized values; log_cleaner(threads=...)",
             lambda a: config_cases()),
    Category("records", "Record fields of wrong types (lone surrogates, numbers, containers), bad headers and "
             "timestamps, non-Records in a batch, oversize records, keyless records on a compacted topic, keys "
             "and values against key/value encodings, malformed Arrow batches", lambda a: record_cases()),
    Category("partitions and offsets", "partitions of the wrong type or out of range for every call that takes "
             "one, partition counts, read from_offset/max_records, delete_records before_offset",
             lambda a: partition_offset_cases(a.log_end)),
    Category("store paths", "Store(root) with non-path types, empty or blank roots, NUL, a component longer "
             "than 255 bytes, a path longer than PATH_MAX, a file, a path through a file",
             lambda a: store_path_cases()),
    Category("command line", "deltalog command lines with one hostile word (topic, partition, offset, "
             "KEY=VALUE, --store, --file) or a hostile line on produce's standard input (malformed JSON, wrong "
             "types, lone surrogates, deep nesting, invalid UTF-8, oversize records)",
             lambda a: cli_cases(a.log_end)),
)


@dataclass
class Tally:
    """How many inputs a category tried, and which exception types they got."""

    tried: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def check_case(arena: Arena, case: Case, tally: Tally | None = None) -> None:
    """Run one hostile case in the arena; raise AssertionError saying what went wrong if it was not refused
    cleanly (see the module docstring)."""
    before = arena.fingerprint()
    if case.op == "cli":
        (argv,) = case.args
        try:
            with arena.inside():
                code, _out, err = run_cli(argv, case.stdin)
        except BaseException as e:
            raise AssertionError(f"{case!r}: {type(e).__name__} escaped the CLI (a traceback): {_short(str(e), 500)}"
                                 ) from e
        if code not in (1, 2) or not CLI_ERROR_LINE.search(err) or "Traceback" in err:
            raise AssertionError(f"{case!r}: exit code {code}, stderr {err[-1500:]!r}")
        message = CLI_ERROR_LINE.search(err) and err[CLI_ERROR_LINE.search(err).start():].strip()  # type: ignore[union-attr]
        kind = f"exit {code}"
    else:
        call = CALLS[case.op]
        try:
            with arena.inside():
                result = call(arena, case.args)
        except DeltalogError as e:
            message, kind = str(e), type(e).__name__
        except Exception as e:
            raise AssertionError(f"{case!r} raised {type(e).__name__}, not a DeltalogError: {_short(str(e), 500)}") from e
        else:
            raise AssertionError(f"{case!r} was accepted: returned {_short(result, 300)}")
    if not message.strip():
        raise AssertionError(f"{case!r}: {kind} with an empty message")
    if len(message) > MAX_MESSAGE:
        raise AssertionError(f"{case!r}: {kind} message of {len(message)} characters: {message[:300]!r}...")
    if not any(m.lower() in message.lower() for m in case.mentions):
        raise AssertionError(f"{case!r}: {kind} message does not mention any of {case.mentions}: {message!r}")
    changes = fingerprint_changes(before, arena.fingerprint())
    if changes:
        raise AssertionError(f"{case!r} ({kind}: {_short(message, 200)}) changed files: {changes[:10]}")
    if tally is not None:
        tally.tried += 1
        tally.errors[kind] = tally.errors.get(kind, 0) + 1


def run_category(category: Category, arena: Arena, *, max_examples: int, seed: int | None = None) -> Tally:
    """Try ``max_examples`` inputs of ``category`` in ``arena`` with hypothesis (which shrinks a failure to a
    small input and raises it); returns the tally of inputs tried."""
    tally = Tally()
    strategy = category.strategy(arena)

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=strategy)
    def prop(case: Case) -> None:
        check_case(arena, case, tally)

    if seed is not None:
        from hypothesis import seed as hypothesis_seed

        prop = hypothesis_seed(seed)(prop)
    prop()
    return tally
