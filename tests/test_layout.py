"""The layout docs/ARCHITECTURE.md draws: no import cycle in deltalog/, the log never imports the cleaner or Spark
code, and no service imports the Store facade. Read from the source (module-level imports, the ones that run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "deltalog"


def module_graph() -> dict[str, set[str]]:
    """Module -> the deltalog modules its module-level imports load (``from pkg import submodule`` loads the
    submodule; importing a module also runs its packages' ``__init__``)."""
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.parse(path.read_text()).body:  # module level only; `if TYPE_CHECKING:` blocks do not run
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [t for t in subs if t in mods]
                if len(targets) < len(subs):
                    targets.append(node.module)
            else:
                continue
            for target in targets:
                if target not in mods or target == name:
                    continue
                graph[name].add(target)
                pieces = target.split(".")
                for i in range(1, len(pieces)):  # the packages of what it imports run their __init__ too
                    parent = ".".join(pieces[:i])
                    if parent in mods and parent != name and not name.startswith(parent + "."):
                        graph[name].add(parent)
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


def test_there_is_no_import_cycle_in_deltalog():
    assert cycles(module_graph()) == []


@pytest.mark.parametrize("package, forbidden", [
    ("deltalog.log", ("deltalog.cleaner", "deltalog.sql", "deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.cleaner", ("deltalog.sql", "deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.sql", ("deltalog.quality", "deltalog.cli", "deltalog.store")),
    ("deltalog.quality", ("deltalog.cli", "deltalog.store")),
])
def test_each_package_imports_only_what_lies_below_it(package, forbidden):
    graph = module_graph()
    bad = sorted((m, t) for m, targets in graph.items() if m == package or m.startswith(package + ".")
                 for t in targets if any(t == f or t.startswith(f + ".") for f in forbidden))
    assert bad == []


def test_the_cleaners_task_modules_never_import_delta_rs_or_spark():
    """Spark's Python workers import these; delta-rs and pyspark would cost every worker start-up time."""
    for module in ("cleaner/offset_map.py", "cleaner/recopy.py", "cleaner/key_hash.py", "cleaner/task_plan.py",
                   "cleaner/offset_bitmap.py", "log/record.py"):
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
