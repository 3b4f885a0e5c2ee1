"""No import cycle inside a package, and the homes issue 28 gave concepts stay
put. ``test_layers`` orders the packages; this orders the modules inside each
one: a cycle between two modules means neither can be read, tested or moved
without the other, which is what the table/ and reader/ cycles were.

Every import counts, a lazy one inside a function included (it is the same
dependency, only hidden); imports under ``if TYPE_CHECKING:`` do not, since
they never run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ctfile"
PACKAGES = sorted(p for p in SRC.rglob("*") if p.is_dir() and (p / "__init__.py").exists() and p != SRC)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports at run time (``from m import x`` counts
    ``m`` and ``m.x``, since ``x`` may be a submodule)."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def package_graph(package: Path) -> dict[str, set[str]]:
    """The import graph among the modules directly in ``package`` (not its
    ``__init__``, which only re-exports: ``test_layers``)."""
    modules = {_module_name(p): p for p in package.glob("*.py") if p.stem != "__init__"}
    return {name: (imported_modules(path) & modules.keys()) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_cycle_inside_a_package(package):
    found = cycles(package_graph(package))
    assert not found, f"import cycles in {package.relative_to(SRC)}: {found}"


# Homes (issue 28): a concept is defined once, in the lowest layer that needs
# it, and the modules that use it import it from there.
HOMES = {
    "ChangeMode": "ctfile.format.change_modes",
    "Changelog": "ctfile.format.change_modes",
    "TableLocation": "ctfile.log.location",
    "CommitOptions": "ctfile.log.commit_options",
}


def _definitions() -> dict[str, list[str]]:
    defined: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and node.name in HOMES:
                defined.setdefault(node.name, []).append(_module_name(path))
    return defined


@pytest.mark.parametrize("name", sorted(HOMES))
def test_concept_has_one_home(name):
    assert _definitions().get(name) == [HOMES[name]]


def test_table_helpers_do_not_import_the_table():
    """The helper objects of ``table/`` (consumption, streams, maintenance,
    merges, history, stream jobs) work over ``Table``'s public surface, handed
    to them; only ``table.py`` and ``create.py`` know the class."""
    graph = package_graph(SRC / "table")
    owners = {"ctfile.table.table", "ctfile.table.create"}
    bad = {module: sorted(imports & owners) for module, imports in graph.items() if module not in owners and imports & owners}
    assert not bad, bad
