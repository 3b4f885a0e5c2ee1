"""Shared fixtures for the unit tests: real tables in ``tmp_path``, no mocks."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

import ctfile

_counter = itertools.count()


def _file_tree(root) -> dict[str, bytes]:
    root = Path(root)
    if not root.exists():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def file_tree():
    """``file_tree(root)`` -> {relative path: bytes} of every file under root."""
    return _file_tree


@pytest.fixture
def new_table(tmp_path):
    """``new_table(schema=None, **create_kwargs)`` creates a fresh table in tmp_path.

    The default schema is (id int64 not null, x int64, s string).
    """

    def make(schema: pa.Schema | None = None, **kwargs) -> ctfile.Table:
        if schema is None:
            schema = pa.schema(
                [pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())]
            )
        root = tmp_path / f"table{next(_counter)}"
        return ctfile.create_table(root, schema, **kwargs)

    return make


def rows(n: int, start: int = 0) -> pa.Table:
    """(id, x, s) rows ``start..start+n-1`` matching the default schema."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([i * 10 for i in ids], pa.int64()),
            "s": pa.array([f"s{i}" for i in ids], pa.string()),
        }
    )


@pytest.fixture
def make_rows():
    return rows
