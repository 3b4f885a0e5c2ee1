"""Shared fixtures for the unit tests: real tables in ``tmp_path``, no mocks."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.paths import LOG_DIR
from ctfile.log.storage import LocalStorage

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


class RacingStorage(LocalStorage):
    """Local storage that runs ``before_put()`` once, just before the first
    put-if-absent of a log entry at or above version ``at``."""

    def __init__(self, root: str, *, at: int, before_put):
        super().__init__(root)
        self.at, self.before_put, self.fired = at, before_put, 0

    def put_if_absent(self, path: str, data: bytes) -> None:
        name = path.rsplit("/", 1)[-1]
        if path.startswith(LOG_DIR + "/") and name[:20].isdigit() and int(name[:20]) >= self.at and not self.fired:
            self.fired += 1
            self.before_put()
        super().put_if_absent(path, data)


@pytest.fixture
def racing():
    """``racing(t, before_put)``: the table at ``t.uri``, opened through a
    :class:`RacingStorage` that runs ``before_put`` when its next statement
    is about to commit (a concurrent commit lands just before it)."""

    def make(t: ctfile.Table, before_put) -> ctfile.Table:
        return ctfile.Table(RacingStorage(t.uri, at=t.version + 1, before_put=before_put))

    return make


_ADDRESS = pa.struct([("city", pa.string())])


def _evolved_table(root: Path) -> ctfile.Table:
    """v0 create (id int32 not null, name, legacy, address struct<city>);
    v1 insert; v2 add email; v3 rename name -> full_name, drop legacy;
    v4 set a property (metadata, same schema); v5 widen id, add address.zip;
    v6 add legacy again (a new id)."""
    t = ctfile.create_table(root, pa.schema([
        pa.field("id", pa.int32(), nullable=False), ("name", pa.string()), ("legacy", pa.string()), ("address", _ADDRESS),
    ]))
    t.insert(pa.table({"id": pa.array([1], pa.int32()), "name": ["a"], "legacy": ["x"], "address": [{"city": "c"}]}))
    with t.update_schema() as u:
        u.add_column("email", pa.string(), doc="primary contact")
    with t.update_schema() as u:
        u.rename_column("name", "full_name").drop_column("legacy")
    t.set_properties({"owner": "data-eng"})
    with t.update_schema() as u:
        u.widen_column("id", pa.int64()).add_column("address.zip", pa.string())
    with t.update_schema() as u:
        u.add_column("legacy", pa.int64())
    return t


@pytest.fixture(scope="session")
def evolved_table():
    """``evolved_table(root)``: a table whose columns were added (nested too),
    renamed, dropped, widened and added again under a dropped name (SPEC
    §Schema evolution); :func:`_evolved_table` lists the versions."""
    return _evolved_table
