"""The package layout is the architecture (README "Layout"): lower layers
never import upper ones, the Spark data source and the CLI use only the
public API, and ``__init__`` modules only re-export. Checked on the source's
import statements, so a new import that breaks the layering fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ctfile"

# What each layer may import from ctfile (besides itself). "ctfile" is the
# public API: the top-level package only.
ALLOWED = {
    "format": set(),
    "log": {"format"},
    "reader": {"format", "log"},
    "writer": {"format", "log", "reader"},
    "table": {"format", "log", "reader", "writer"},
    "spark_datasource": {"ctfile"},
    # ``ctfile derived run`` drives ctfile.spark.derived (imported when it runs).
    "tools": {"ctfile", "spark"},
    "derived": {"ctfile"},
    "spark": {"ctfile", "spark_datasource", "derived"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _ctfile_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, layer)`` of every absolute import of ctfile in ``path``;
    layer "ctfile" for the top-level package itself."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}:{node.lineno}: relative import (the code base uses absolute imports)")
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "ctfile":
                out.append((node.lineno, parts[1] if len(parts) > 1 else "ctfile"))
    return out


MODULES = sorted(p for p in SRC.rglob("*.py") if _layer(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_layer_imports_only_lower_layers(path):
    layer = _layer(path)
    bad = [(line, target) for line, target in _ctfile_imports(path) if target != layer and target not in ALLOWED[layer]]
    assert not bad, f"{path.relative_to(SRC)} ({layer}) may import only {sorted(ALLOWED[layer]) or 'nothing'} of ctfile, found {bad}"


def test_every_layer_is_known():
    """A new top-level module or package must be placed in the layering."""
    layers = {_layer(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert layers <= set(ALLOWED), sorted(layers - set(ALLOWED))


def _is_reexport(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
        return True  # the docstring
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) and t.id in ("__all__", "__version__") for t in stmt.targets):
        return isinstance(stmt.value, (ast.List, ast.Tuple, ast.Constant))
    return False


@pytest.mark.parametrize("path", sorted(SRC.rglob("__init__.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_init_modules_only_reexport(path):
    body = ast.parse(path.read_text()).body
    bad = [s.lineno for s in body if not _is_reexport(s)]
    assert not bad, f"{path.relative_to(SRC)}: logic at lines {bad}; __init__ modules only re-export"
