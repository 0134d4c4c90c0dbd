"""One error root: every exception class deltalog defines is a DeltalogError and importable from deltalog.errors, and
what the public API raises on bad input is one of them (keeping the builtin it always was, so ``except ValueError``
and ``except TypeError`` still catch it)."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from pathlib import Path

import pyarrow as pa
import pytest

import deltalog
from deltalog import errors
from deltalog.errors import DeltalogError, InvalidArgumentError, InvalidTypeError
from deltalog.producer.partitioner import partition_for_key, partitions_for_keys

PACKAGE = Path(deltalog.__file__).resolve().parent

#: Builtin exceptions raised inside deltalog on purpose, each caught where it is raised and turned into a
#: DeltalogError (or never reached by a user's input): module -> why. Anything else raising a builtin fails the test.
BUILTIN_RAISES = {
    "deltalog/schemas.py": "the DDL parser's ValueError; parse_schema_config turns it into InvalidConfigError",
    "deltalog/log/encoding.py": "json.loads' parse_constant hook; check_bytes turns it into the refusal's reason",
    "deltalog/config.py": "a number that Java's Double.parseDouble refuses; caught beside it as InvalidConfigError",
    "deltalog/coordinator/group/offsets_topic.py": "OffsetCommitValue decoding; the replay turns it into CorruptLogError",
    "deltalog/sql/kafka/options.py": "startingOffsets / ...ByTimestamp JSON; caught beside it as InvalidArgumentError",
    "deltalog/log/transactions.py": "marker_row's control type: the callers pass the module's own constants",
    "deltalog/cleaner/tasks.py": "Spark answering for tasks it was not given: a broken invariant, not input",
    "deltalog/log/faults.py": "DELTALOG_FAULT_KILL, the crash harness's variable, never a user's",
    "deltalog/storage/local.py": "read_parquet's documented FileNotFoundError, which the log's readers turn into "
                           "CorruptLogError",
}
#: Exceptions that are Python's protocol, not errors: a module's ``__getattr__``, an iterator's end, an exit code.
PROTOCOL = {"AttributeError", "StopIteration", "SystemExit", "KeyboardInterrupt", "AssertionError"}
BUILTINS = {name for name, obj in vars(builtins).items()
            if isinstance(obj, type) and issubclass(obj, BaseException)} - PROTOCOL


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]


def error_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a deltalog module. The source says which modules define a class with a
    base named like an exception (``...Error``, ``...Exception``, a builtin); only those are imported, and there
    ``issubclass`` decides."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, ast.ClassDef) and any(b.endswith(("Error", "Exception")) or b in BUILTINS | PROTOCOL
                                                       for b in _base_names(n)) for n in ast.walk(tree)):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def test_every_error_class_of_deltalog_comes_from_the_one_root_and_is_importable_from_deltalog_errors():
    classes = error_classes()
    assert "deltalog.errors.DataLossError" in classes and "deltalog.errors.InvalidTypeError" in classes
    assert [q for q, cls in classes.items() if not issubclass(cls, DeltalogError)] == []
    public = {q: cls for q, cls in classes.items() if not cls.__name__.startswith("_")}
    assert [q for q, cls in public.items() if getattr(errors, cls.__name__, None) is not cls] == []


def test_the_errors_the_package_exports_are_those_of_deltalog_errors():
    exported = [n for n in deltalog.__all__ if n.endswith("Error")]
    assert exported and [n for n in exported if getattr(deltalog, n) is not getattr(errors, n)] == []


def test_nothing_raises_a_builtin_exception_outside_the_named_places():
    """A ``raise ValueError(...)`` in a public path would escape ``except DeltalogError``."""
    bad = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE.parent))
        if rel in BUILTIN_RAISES or rel == "deltalog/errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in BUILTINS:
                    bad.append(f"{rel}:{node.lineno} raises {exc.id}")
    assert bad == []


def test_the_named_places_still_raise_a_builtin():
    """An entry of BUILTIN_RAISES goes when its module stops raising builtins."""
    stale = []
    for rel in BUILTIN_RAISES:
        tree = ast.parse((PACKAGE.parent / rel).read_text())
        names = [(n.exc.func if isinstance(n.exc, ast.Call) else n.exc) for n in ast.walk(tree)
                 if isinstance(n, ast.Raise) and n.exc is not None]
        if not any(isinstance(e, ast.Name) and e.id in BUILTINS for e in names):
            stale.append(rel)
    assert stale == []


def test_a_wrong_call_shape_is_a_deltalog_error_and_still_a_type_error(store):
    store.create_topic("t", 2)
    producer = store.producer()
    for call in (lambda: producer.send("t"), lambda: producer.send("t", [deltalog.Record(b"k", b"v")], key=b"k"),
                 lambda: producer.produce("t", value=b"v", records=[deltalog.Record(b"k", b"v")])):
        with pytest.raises(InvalidTypeError) as raised:
            call()
        assert isinstance(raised.value, TypeError) and isinstance(raised.value, InvalidArgumentError)
    consumer = store.consumer(group_id="g")
    with pytest.raises(InvalidTypeError, match="a list of topics"):
        consumer.subscribe(5)
    with pytest.raises(InvalidTypeError, match="a list of group ids"):
        store.delete_consumer_groups(5)
    with pytest.raises(InvalidArgumentError, match="partition count"):
        partition_for_key(b"k", 0)
    for keys in ([1.5], pa.array([1.5])):
        with pytest.raises(InvalidTypeError, match="binary or string"):
            partitions_for_keys(keys, 3)


#: Where Kafka's own client and kafka-python disagree on retriability, deltalog follows Kafka's (Java) classes.
KAFKA_RETRIABLE_DIFFERS = {2: "Kafka's CorruptRecordException is a RetriableException; kafka-python's is not"}


def test_every_error_carries_a_kafka_code_kafka_python_knows_and_its_retriability():
    """The Kafka code is on the error class (``errno``, ``retriable``, as kafka-python's ``kafka.errors``), looked up
    through the class hierarchy: a child that says nothing answers as its parent."""
    kafka_errors = pytest.importorskip("kafka.errors")
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.DeltalogError)]
    assert len(classes) > 30
    for cls in classes:
        known = kafka_errors.for_code(cls.errno)
        assert known is not kafka_errors.UnknownError or cls.errno == -1, cls
        if cls.errno not in KAFKA_RETRIABLE_DIFFERS:
            assert cls.retriable == known.retriable, (cls, known)
    assert errors.kafka_errno(errors.UnknownProducerIdError("x")) == kafka_errors.UnknownProducerIdError.errno
    assert errors.kafka_errno(errors.InvalidTypeError("x")) == kafka_errors.InvalidRequestError.errno  # a parent's
    assert errors.kafka_errno(KeyError("x")) == kafka_errors.UnknownError.errno
