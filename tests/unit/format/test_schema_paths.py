"""Columns whose names hold dots or backticks through ``Table.update_schema()``
and the CLI (SPEC §Schema evolution: backticks quote a name in a path, as in
Spark SQL): added, renamed, widened, made nullable, moved and dropped, at the
top level and nested; the paths ``field_paths``, ``history`` and ``ctfile
schema`` print are the paths ``update_schema()`` takes."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.format.actions import FEATURE_SCHEMA_EVOLUTION
from ctfile.tools.cli import app

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("a.b", pa.int32(), nullable=False),
    ("tick`name", pa.string()),
    ("s", pa.struct([("x.y", pa.int32()), ("q", pa.string())])),
])


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(pa.table({"id": [1, 2], "a.b": pa.array([10, 20], pa.int32()), "tick`name": ["p", "q"],
                       "s": [{"x.y": 1, "q": "u"}, {"x.y": 2, "q": "v"}]}, schema=SCHEMA))
    return t


def _cli_json(*args) -> dict:
    r = CliRunner().invoke(app, [str(a) for a in args] + ["--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_every_change_of_a_dotted_or_backticked_name(table):
    with table.update_schema() as u:
        u.widen_column("`a.b`", pa.int64())
        u.make_nullable("`a.b`")
        u.rename_column("`a.b`", "c.d")
        u.move_column("`c.d`", first=True)
        u.rename_column("s.`x.y`", "x.z")
        u.widen_column("s.`x.z`", pa.int64())
        u.add_column("s.`new.f`", pa.string(), after="x.z")
        u.add_column("`top.new`", pa.float64())
        u.drop_column("`tick``name`")
    assert [str(c) for c in u.changes] == [
        "widen `a.b` (integer -> long)", "make_nullable `a.b`", "rename `a.b` (c.d)", "move `c.d` (first)",
        "rename s.`x.y` (x.z)", "widen s.`x.z` (integer -> long)", "add s.`new.f` (string)",
        "add `top.new` (double)", "drop `tick``name`",
    ]
    assert table.schema == pa.schema([
        ("c.d", pa.int64()), pa.field("id", pa.int64(), nullable=False),
        ("s", pa.struct([("x.z", pa.int64()), ("new.f", pa.string()), ("q", pa.string())])), ("top.new", pa.float64()),
    ])
    rows = table.to_arrow().sort_by("id").to_pylist()
    assert rows[0] == {"c.d": 10, "id": 1, "s": {"x.z": 1, "new.f": None, "q": "u"}, "top.new": None}
    assert [str(c) for c in table.history(limit=1)[0].schema_changes] == [
        "drop `tick``name`", "rename `a.b` (c.d)", "widen `c.d` (integer -> long)", "make_nullable `c.d`",
        "rename s.`x.y` (x.z)", "widen s.`x.z` (integer -> long)", "add s.`new.f` (string)", "add `top.new` (double)",
        "move `c.d` (first)",
    ]


def test_a_top_level_dotted_column_is_a_top_level_change(table):
    """Adding and moving a top-level column named with a dot keeps the table
    readable by older readers (no schemaEvolution feature), as for any
    top-level add (SPEC §Schema evolution, protocol)."""
    with table.update_schema() as u:
        u.add_column("`n.m`", pa.string())
        u.move_column("`n.m`", first=True)
    assert [c.top_level for c in u.changes] == [True, True]
    assert FEATURE_SCHEMA_EVOLUTION not in table.snapshot().state.protocol.reader_features
    assert table.schema.names[0] == "n.m"


def test_paths_printed_are_paths_taken(table):
    """``field_paths`` and ``ctfile schema`` print the dotted names quoted;
    each printed path works as input."""
    paths = ctfile.field_paths(table.schema_at())
    assert list(paths.values()) == ["id", "`a.b`", "`tick``name`", "s", "s.`x.y`", "s.q"]
    fields = _cli_json("schema", table.uri)["fields"]
    assert [f["name"] for f in fields] == list(paths.values())
    with table.update_schema() as u:
        for i, f in enumerate(fields):
            if f["name"] != "s":
                u.rename_column(f["name"], f"c{i}.x")
    assert list(ctfile.field_paths(table.schema_at()).values()) == [
        "`c0.x`", "`c1.x`", "`c2.x`", "s", "s.`c4.x`", "s.`c5.x`"]
    history = _cli_json("schema", table.uri)["history"]
    assert [c["path"] for c in history[0]["changes"]] == ["id", "`a.b`", "`tick``name`", "s.`x.y`", "s.q"]
    shown = _cli_json("history", table.uri)
    assert [c["path"] for c in shown["versions"][0]["schema_changes"]] == ["id", "`a.b`", "`tick``name`", "s.`x.y`", "s.q"]


def test_unquoted_dots_still_separate_names(table):
    """A path without backticks means what it always did: "a.b" is field b
    of a column a, not the column named a.b (which must be quoted)."""
    with pytest.raises(ctfile.SchemaMismatchError, match="no field 'a'"):
        table.update_schema().drop_column("a.b")
    with pytest.raises(ctfile.SchemaMismatchError, match="never closed"):
        table.update_schema().drop_column("`a.b")
    u = table.update_schema().drop_column(("a.b",))  # a tuple of names needs no quoting
    assert [str(c) for c in u.changes] == ["drop `a.b`"]
    assert table.version == 1


def test_clustering_keys_name_dotted_columns_as_they_are(tmp_path):
    """``ctfile.clusterBy`` names top-level columns literally (no path, no
    quoting): a dotted column is a clustering key by its name."""
    t = ctfile.create_table(tmp_path / "c", pa.schema([("g.id", pa.int64())]),
                            properties={"ctfile.clusterBy": "g.id", "ctfile.partitionRows": "2"})
    t.insert(pa.table({"g.id": [3, 1, 2, 0]}))
    assert [p.stats.min_values for p in sorted(t.snapshot().partitions, key=lambda p: p.first_row_id)] == [
        {1: 0}, {1: 2}]
