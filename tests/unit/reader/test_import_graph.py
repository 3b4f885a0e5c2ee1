"""The modules of ``ctfile.reader`` import one another without a cycle:
imports anywhere in a module count (a lazy import inside a function is a
dependency too); ``if TYPE_CHECKING:`` blocks do not."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

READER = Path(__file__).resolve().parents[3] / "src" / "ctfile" / "reader"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    modules = {f"ctfile.reader.{p.stem}": p for p in READER.glob("*.py") if p.stem != "__init__"}
    return {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}


def test_reader_modules_have_no_import_cycle():
    try:
        tuple(TopologicalSorter(_graph()).static_order())
    except CycleError as e:
        pytest.fail(f"import cycle among reader modules: {' -> '.join(e.args[1])}")


def test_the_graph_sees_lazy_imports(tmp_path):
    # A lazy import is a dependency: the check would catch a cycle made of one.
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ctfile.reader.change_scan import ChangeSet\n")
    assert _imports(module) == {"ctfile.reader.change_scan"}
