"""Hostile input, property-based: every category of bad input is refused with a DeltalogError (the CLI: exit 1
or 2 and a ``deltalog: error:`` line) whose message names the problem, and every file under the arena (the
store and everything beside it) is byte-for-byte unchanged. The strategies and the check live in
:mod:`tooling.reliability.hostile`, which ``python -m tooling.reliability`` runs too.

The default run tries a modest number of inputs per category; ``-m slow`` tries many more.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltalog import Record
from tooling.reliability import hostile
from tooling.reliability.hostile import CATEGORIES, Arena, Case, check_case, run_category

#: Inputs per category: the default run, and the slow suite.
QUICK_EXAMPLES = 150
SLOW_EXAMPLES = 600

IDS = [c.name.replace(" ", "-") for c in CATEGORIES]

#: The default run draws the same cases every time (see the test); the slow run draws fresh ones.
QUICK_SEED = 20261123


@pytest.fixture
def arena(tmp_path) -> Arena:
    return Arena(tmp_path / "arena")


@pytest.mark.parametrize("category", CATEGORIES, ids=IDS)
def test_hostile_inputs_are_refused_and_change_nothing(arena, category):
    # A fixed seed: the default suite (CI) must not fail on the day hypothesis happens to draw a new case; the
    # slow run below draws fresh cases every time.
    tally = run_category(category, arena, max_examples=QUICK_EXAMPLES, seed=QUICK_SEED)
    assert tally.tried >= QUICK_EXAMPLES // 2, tally  # hypothesis may stop early only on a small space


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES, ids=IDS)
def test_many_hostile_inputs_are_refused_and_change_nothing(arena, category):
    tally = run_category(category, arena, max_examples=SLOW_EXAMPLES)
    assert tally.tried >= SLOW_EXAMPLES // 2, tally


# -- the bugs the issue listed, and the ones the strategies found, as plain examples -----------------------
# Each is one Case through the same check (DeltalogError naming the problem, no file changed).

def _case(op, *args, mentions=("",), stdin=None):
    return Case(op, args, mentions, stdin=stdin)


REGRESSIONS = [
    # listed in the issue
    _case("append", "prices", 0.0, [Record(b"k", b"v")], mentions=("a partition is an int, not a float",)),
    _case("read", "prices", 0.0, mentions=("a partition is an int, not a float",)),
    _case("Store", "", {}, mentions=("non-empty path",)),
    _case("create_topic_kw", "new-topic", 1, {"config": [("cleanup.policy", "compact")]}, mentions=("mapping",)),
    _case("create_topic_kw", "new-topic", 1, {"config": "cleanup.policy=compact"}, mentions=("mapping",)),
    _case("Record", {"headers": 5}, mentions=("headers must be",)),
    # found by the strategies
    _case("append", ["prices"], 0, [Record(b"k", b"v")], mentions=("topic name",)),  # TypeError: unhashable
    _case("append", "prices", 0, None, mentions=("records must be",)),  # TypeError: not iterable
    _case("append", "prices", 0, 5, mentions=("records must be",)),
    _case("append", "prices", 0, b"abc", mentions=("records must be",)),  # was "record 0 is a int"
    _case("Record", {"key": "\ud800"}, mentions=("utf-8",)),  # UnicodeEncodeError
    _case("Record", {"key": b"k", "headers": {"\udfff": b"v"}}, mentions=("header name",)),
    _case("Record", {"key": b"k", "offset": "x"}, mentions=("offset",)),  # was accepted
    _case("append", "typed", 0, [Record("k", b"[" * 100_000 + b"]" * 100_000)], mentions=("nested too deeply",)),
    _case("append", "prices", 0, pa.Table.from_arrays([pa.array([b"k"]), pa.array([b"v"]), pa.array([b"w"])],
                                                      names=["key", "value", "value"]), mentions=("more than once",)),
    _case("append", "prices", 0, pa.table({"key": [b"k"], "value": [b"v"],
                                           "timestamp_ms": pa.array([2**64 - 1], pa.uint64())}),
          mentions=("64 bits",)),  # TypeError from pyarrow.compute
    _case("create_topic_kw", "new-topic", 1, {"config": {"segment.ms": "1_000"}}, mentions=("whole number",)),
    _case("create_topic_kw", "new-topic", 1, {"config": {"segment.ms": "١٢٣"}}, mentions=("whole number",)),
    _case("create_topic_kw", "new-topic", 1, {"config": {"segment.ms": 10**5000}}, mentions=("bits",)),  # repr fails
    _case("create_topic_kw", "new-topic", 1, {"config": {"x" * 100_000: 1}}, mentions=("unknown",)),  # 100 kB message
    _case("Store", "store\x00", {}, mentions=("NUL",)),  # ValueError: embedded null byte
    _case("Store", "\ud800", {}, mentions=("can name",)),  # UnicodeEncodeError
    _case("Store", "s" * 300, {}, mentions=("300 bytes",)),  # OSError: File name too long
    _case("Store", "/".join(["d" * 200] * 25), {}, mentions=("bytes long",)),  # created 20 directories, then failed
    _case("Store", "../a-file", {}, mentions=("cannot use",)),  # NotADirectoryError
    _case("Store", "store", {"clock": 5}, mentions=("clock",)),  # AttributeError at the first append
    _case("cli", ["--store", "", "topics", "list"], mentions=("--store is empty",)),  # used ./deltalog-store
    _case("cli", ["--store", "new-store", "topics", "create", "../x"], mentions=("topic name",)),  # left new-store/
    _case("cli", ["--store", "store", "topics", "describe", ""], mentions=("topic name",)),  # described every topic
    _case("cli", ["--store", "store", "produce", "prices", "--file", ""], mentions=("--file",)),  # read stdin
    _case("cli", ["--store", "store", "produce", "prices", "--file", "\x00"], mentions=("--file",)),  # ValueError
    _case("cli", ["--store", "store", "produce", "prices", "--file", "../binary.bin"], mentions=("not UTF-8",)),
    _case("cli", ["--store", "store", "produce", "prices"], mentions=("not UTF-8",), stdin=b'{"key": "\xff"}\n'),
    _case("cli", ["--store", "store", "produce", "prices"], mentions=("valid Unicode",),
          stdin='{"key": "\\ud800", "value": "v"}\n'),  # UnicodeEncodeError traceback
    _case("cli", ["--store", "store", "produce", "prices"], mentions=("nested too deeply",),
          stdin="[" * 100_000 + "]" * 100_000 + "\n"),  # RecursionError traceback
    _case("cli", ["--store", "s" * 5000, "topics", "list"], mentions=("bytes long",)),  # a 5,000-character message
]


@pytest.mark.parametrize("case", REGRESSIONS, ids=[f"{i}-{c.op}" for i, c in enumerate(REGRESSIONS)])
def test_regressions(arena, case):
    check_case(arena, case)


def test_what_the_regressions_refused_still_works_when_valid(arena):
    """The other side of the fixes: the valid neighbours of those inputs keep working."""
    store = arena.store
    assert len(store.read("prices", 0, "earliest", max_records=2**70)) == 4  # an enormous limit is no limit
    assert store.append("prices", 1, iter([Record(b"k", b"v")])) == [1]  # any iterable of Records
    assert store.create_topic("new-topic", 1, config={"segment.ms": " 1000 ", "min.cleanable.dirty.ratio": "1e-1"
                                                      }).segment_ms == 1000
    assert Record("caf\u00e9", "\U0001f600").key == "café".encode()
    code, out, _ = hostile.run_cli(["--store", str(arena.root), "topics", "describe", "prices"])
    assert code == 0 and "prices" in out


@pytest.mark.parametrize(("argv", "words"), [
    (["sql", "--engine", "spark", "select \x00"], "Syntax error"),  # printed "deltalog: error:" and nothing else
    (["sql", "--engine", "spark", "select * from no_such_topic"], "no_such_topic"),
    (["sql", "select \x00"], "BinderException"),  # the embedded engine (DuckDB) alike
    (["sql", "select * from no_such_topic"], "no_such_topic"),
    (["clean", "../x"], "Topic name"),
    (["clean", "prices", "-p", "7"], "Partition 7"),
    (["check", ""], "Topic name"),
])
def test_spark_commands_refuse_hostile_arguments(arena, spark, argv, words):
    code, _, err = hostile.run_cli(["--store", str(arena.root), *argv])
    assert code == 1 and words in err and "Traceback" not in err, err
    assert hostile.CLI_ERROR_LINE.search(err), err
