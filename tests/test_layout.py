"""The layout docs/ARCHITECTURE.md draws, checked on every import the source names: module level, inside a
function and under ``if TYPE_CHECKING:`` alike (a function-level import is still a dependency, only a later one;
a type-only one still ties the two modules when someone reads or moves them). Every module of deltalog/ belongs to
one layer of :data:`LAYERS`; a module imports only its own package and the layers below its own, and there is no
import cycle at all. The few imports that point up on purpose are :data:`UPWARD_EXCEPTIONS`, each with its reason."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "deltalog"

#: The layers, bottom first. A unit is a module (``deltalog.config``) or a package with everything in it
#: (``deltalog.log``). A unit imports only itself and the units of the layers below; units of one layer never
#: import each other. The package's own ``__init__`` (``deltalog``) is the public face: it sits above the Store it
#: re-exports, and only the command line imports it.
LAYERS: list[tuple[str, ...]] = [
    ("deltalog.errors", "deltalog.version", "deltalog.text", "deltalog.structs", "deltalog.ignored_configs",
     "deltalog.option_spec"),
    # (the first layer imports nothing of deltalog)
    ("deltalog.clock", "deltalog.extras", "deltalog.storage_faults", "deltalog.metrics_http"),
    ("deltalog.storage", "deltalog.schemas", "deltalog.spark"),
    ("deltalog.config", "deltalog.scram", "deltalog.acls"),  # store-wide configs; SCRAM credentials; ACLs
    ("deltalog.log",),            # LogManager, UnifiedLog, per-partition producer state: Kafka's storage module
    # Kafka's coordinators, apart from its storage; the two never import each other
    ("deltalog.coordinator", "deltalog.coordinator.transaction", "deltalog.coordinator.group"),
    ("deltalog.groups",),         # the consumer clients, on the log and __consumer_offsets
    ("deltalog.producer",),       # Kafka's producer clients, on the log (and the offsets topic, for transactions)
    ("deltalog.cleaner",),        # LogCleaner, on the log (and the offsets topic: a compacted topic like any other)
    ("deltalog.state",),          # the state tables: one row per live key, read from the log as a consumer reads it
    ("deltalog.sql",),            # Spark's reads and Spark's Kafka source, on the log, the producer and the cleaner
    ("deltalog.quality", "deltalog.describe", "deltalog.state_check", "deltalog.admin", "deltalog.server"),
    ("deltalog.store",),          # the facade over all of the above
    ("deltalog.jobs", "deltalog"),
    ("deltalog.cli",),
    ("deltalog.__main__",),
]

#: Imports that point up or sideways on purpose: (importer, imported) -> why. Keep this tiny; an entry that no
#: longer matches an import fails the test, so it goes as soon as the code no longer needs it.
UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_names() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def import_sites() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> where (``file:line``), for every import statement anywhere in a module: at module
    level, in functions, under ``TYPE_CHECKING``. ``from pkg import name`` imports ``pkg.name`` when that is a
    module, else ``pkg``; relative imports are resolved. Importing a module also runs its packages' ``__init__``,
    so those count too (but not the importer's own packages, which have run already)."""
    mods = module_names()
    sites: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([module] if module else []))
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
            else:
                continue
            for target in targets:
                while target not in mods and "." in target:  # import a.b.c where c is a name, not a module
                    target = target.rsplit(".", 1)[0]
                if target not in mods or target == name:
                    continue
                where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                pieces = target.split(".")
                for i in range(1, len(pieces) + 1):
                    reached = ".".join(pieces[:i])
                    if reached in mods and reached != name and not name.startswith(reached + "."):
                        sites[(name, reached)].append(where)
    return sites


def module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in module_names()}
    for importer, imported in import_sites():
        graph[importer].add(imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def unit_of(module: str) -> tuple[int, str]:
    """(layer, unit) of a module: the unit with the longest name that is the module or a package holding it."""
    best = None
    for layer, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or (unit != "deltalog" and module.startswith(unit + ".")):
                if best is None or len(unit) > len(best[1]):
                    best = (layer, unit)
    if best is None:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in tests/test_layout.py")
    return best


def test_every_module_of_deltalog_belongs_to_a_layer():
    assert [m for m in module_names() if m != "deltalog" and unit_of(m)[1] == "deltalog"] == []
    for module in module_names():
        unit_of(module)


def test_the_graph_sees_function_level_and_type_checking_imports():
    """The import graph is read from every statement, not only the module level that runs at import."""
    sites = import_sites()
    assert ("deltalog.store", "deltalog.quality") in sites  # inside Store.check: Great Expectations on first use
    # under TYPE_CHECKING and in a function
    assert ("deltalog.coordinator.transaction.hanging", "deltalog.log.partition_log") in sites


def excused(importer: str, imported: str) -> bool:
    """An import of :data:`UPWARD_EXCEPTIONS`, or of a package that holds its target (whose ``__init__`` runs)."""
    return any(importer == i and (imported == t or t.startswith(imported + ".")) for i, t in UPWARD_EXCEPTIONS)


def upward_imports() -> list[str]:
    """Every import that goes neither to the importer's own unit nor to a lower layer, with where it is."""
    bad = []
    for (importer, imported), where in sorted(import_sites().items()):
        (layer, unit), (their_layer, their_unit) = unit_of(importer), unit_of(imported)
        if unit == their_unit or their_layer < layer or excused(importer, imported):
            continue
        bad.append(f"{importer} ({unit}, layer {layer}) imports {imported} ({their_unit}, layer {their_layer}) "
                   f"at {', '.join(where)}")
    return bad


def test_there_is_no_import_cycle_in_deltalog():
    graph = module_graph()
    for importer in graph:
        graph[importer] = {t for t in graph[importer] if not excused(importer, t)}
    assert cycles(graph) == []


def test_nothing_imports_back_up():
    """Every import goes to the importer's own unit or to a lower layer; the exceptions are named and justified."""
    assert upward_imports() == []


def test_each_upward_exception_is_still_needed():
    sites = import_sites()
    assert [pair for pair in UPWARD_EXCEPTIONS if pair not in sites] == []


@pytest.mark.parametrize("package, forbidden", [
    ("deltalog.log", ("deltalog.coordinator", "deltalog.producer", "deltalog.groups", "deltalog.cleaner",
                      "deltalog.sql", "deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.coordinator", ("deltalog.producer", "deltalog.groups", "deltalog.cleaner", "deltalog.sql",
                              "deltalog.quality", "deltalog.server", "deltalog.cli", "deltalog.store")),
    ("deltalog.coordinator.transaction", ("deltalog.coordinator.group",)),
    ("deltalog.coordinator.group", ("deltalog.coordinator.transaction",)),
    ("deltalog.producer", ("deltalog.cleaner", "deltalog.sql", "deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.groups", ("deltalog.producer", "deltalog.cleaner", "deltalog.sql", "deltalog.cli", "deltalog.store")),
    ("deltalog.cleaner", ("deltalog.sql", "deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.sql", ("deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.quality", ("deltalog.cli", "deltalog.store")),
])
def test_each_package_imports_only_what_lies_below_it(package, forbidden):
    """The layer rule spelled out for the packages docs/ARCHITECTURE.md draws (a change to LAYERS cannot loosen it)."""
    bad = sorted((m, t) for (m, t) in import_sites() if m == package or m.startswith(package + ".")
                 if any(t == f or t.startswith(f + ".") for f in forbidden))
    assert bad == []


def test_a_cycle_and_an_upward_import_are_found(tmp_path, monkeypatch):
    """The checks can fail: a copy of two modules that import each other, one inside a function, is a cycle, and
    the log importing the cleaner under TYPE_CHECKING is an import back up."""
    pkg = tmp_path / "deltalog"
    (pkg / "log").mkdir(parents=True)
    (pkg / "cleaner").mkdir()
    for init in (pkg / "__init__.py", pkg / "log" / "__init__.py", pkg / "cleaner" / "__init__.py"):
        init.write_text("")
    (pkg / "log" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from deltalog.cleaner.b import B\n")
    (pkg / "cleaner" / "b.py").write_text("def f():\n    from deltalog.log import a\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    assert cycles(module_graph()) == [["deltalog.cleaner.b", "deltalog.log.a"]]
    assert [line.split(" (")[0] + " -> " + line.split(" imports ")[1].split(" (")[0] for line in upward_imports()] \
        == ["deltalog.log.a -> deltalog.cleaner", "deltalog.log.a -> deltalog.cleaner.b"]


def test_the_cleaners_task_modules_never_import_delta_rs_or_spark():
    """Spark's Python workers import these; delta-rs and pyspark would cost every worker start-up time."""
    for module in ("cleaner/offset_map.py", "cleaner/recopy.py", "cleaner/task_plan.py",
                   "cleaner/offset_bitmap.py", "log/record.py", "log/key_hash.py"):
        tree = ast.parse((PACKAGE / module).read_text())
        names = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module]
        assert not [n for n in names if n.split(".")[0] in ("deltalake", "pyspark")], module


def _all_imports(path: Path) -> list[str]:
    """Every module a file names in an import, at any depth (function-level imports included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_the_wheel_never_imports_the_repositorys_tooling_or_test_libraries():
    """tooling/ (the reliability harness, the services tests start) and the test libraries stay out of the wheel;
    a user's install has neither, so nothing in deltalog/ may import them, not even inside a function."""
    assert not (PACKAGE / "reliability").exists() and not (PACKAGE / "testing").exists()
    bad = sorted((str(path.relative_to(PACKAGE.parent)), name) for path in PACKAGE.rglob("*.py")
                 for name in _all_imports(path)
                 if name.split(".")[0] in ("tooling", "tests", "benchmarks", "hypothesis", "moto", "pytest"))
    assert bad == []


def test_what_only_the_command_line_uses_lives_in_cli():
    """The demo walkthrough, the doctor's checks and the text reports serve the CLI alone: only cli/ (and the
    ``python -m deltalog`` entry) imports deltalog.cli."""
    graph = module_graph()
    for module in ("demo_walkthrough", "doctor_checks", "report"):
        assert f"deltalog.cli.{module}" in graph
    bad = sorted((m, t) for m, targets in graph.items() if not m.startswith("deltalog.cli")
                 and m != "deltalog.__main__" for t in targets if t.startswith("deltalog.cli"))
    assert bad == []


def test_every_import_of_deltalog_names_a_module_that_exists():
    """An import of a module that is gone (after a move) fails at run time only where it runs: under
    ``TYPE_CHECKING`` or inside a function that no test reaches, it would never fail. Every ``deltalog.*`` module an
    import names must exist."""
    mods = module_names()
    missing = []
    for path in mods.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            else:
                continue
            missing += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {t}" for t in targets
                        if t.split(".")[0] == "deltalog" and t not in mods]
    assert missing == []
