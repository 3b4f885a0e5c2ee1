"""``ctfile.log``'s modules import one another without a cycle (lazy imports
count: a cycle broken only by importing late is still one concept in two
modules); ``if TYPE_CHECKING:`` blocks do not count."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

LOG = Path(__file__).resolve().parents[3] / "src" / "ctfile" / "log"


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports anywhere, but under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(n) for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body for n in ast.walk(stmt)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_import_cycle_in_the_log_package():
    modules = {f"ctfile.log.{p.stem}": p for p in LOG.glob("*.py") if p.stem != "__init__"}
    graph = {m: _imports(p) & modules.keys() - {m} for m, p in modules.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as e:
        raise AssertionError(f"import cycle among ctfile.log modules: {e.args[1]}") from None
