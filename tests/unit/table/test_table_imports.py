"""The modules of ``ctfile.table`` import one another without a cycle
(imports inside functions count; ``if TYPE_CHECKING:`` blocks do not): the
table imports its helpers (consumption, streams, stream jobs, maintenance,
MERGE), which reach the table only through the objects and the
``open_table`` they are handed."""

from __future__ import annotations

import ast
from pathlib import Path

import ctfile.table

PACKAGE = "ctfile.table"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n) for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body for n in ast.walk(stmt)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    root = Path(ctfile.table.__file__).parent
    modules = {f"{PACKAGE}.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    return {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its modules in order, the first repeated last), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            found = visit(imported, path + [module])
            if found:
                return found
        done.add(module)
        return None

    return next((c for c in (visit(m, []) for m in sorted(graph)) if c), None)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_table_modules_import_no_cycle():
    graph = _graph()
    assert {"ctfile.table.table", "ctfile.table.consumption", "ctfile.table.streams"} <= set(graph)
    assert _cycle(graph) is None, f"import cycle in {PACKAGE}: {' -> '.join(_cycle(graph) or [])}"
