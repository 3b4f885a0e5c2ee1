"""``Table.schema_at`` and change scans read into another schema of the
table (``Table.changes(read_schema=...)``, what a stream whose schema was
fixed when it started reads with; SPEC §Change scans, streams)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int32()), ("name", pa.string()), ("old", pa.string())])


@pytest.fixture
def evolved(tmp_path):
    """v1 rows 1-2; v2 renames name -> full_name, widens n, drops old, adds
    email; v3 inserts 3 (n beyond int32 for id 4 at v4); v5 sets the email
    of id 3, v6 that of id 1."""
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA)
    t.insert(pa.table({"id": [1, 2], "n": pa.array([10, 20], pa.int32()), "name": ["a", "b"], "old": ["x", "y"]}, schema=SCHEMA))
    with t.update_schema() as u:
        u.rename_column("name", "full_name").widen_column("n", pa.int64()).drop_column("old").add_column("email", pa.string())
    t.insert(pa.table({"id": [3], "n": [30], "full_name": ["c"], "email": ["c@x"]}))
    t.insert(pa.table({"id": [4], "n": [2**40], "full_name": ["d"], "email": ["d@x"]}))
    t.update(pc.field("id") == 3, {"email": "c@y"})
    t.update(pc.field("id") == 1, {"email": "a@x"})
    return t


def test_schema_at_each_version(evolved):
    assert [(f.id, f.name, f.type) for f in evolved.schema_at(1).fields] == [
        (1, "id", "long"), (2, "n", "integer"), (3, "name", "string"), (4, "old", "string")
    ]
    assert [(f.id, f.name, f.type) for f in evolved.schema_at(2).fields] == [
        (1, "id", "long"), (2, "n", "long"), (3, "full_name", "string"), (5, "email", "string")
    ]
    assert evolved.schema_at() == evolved.schema_at(evolved.version) == evolved.snapshot().table_schema
    with pytest.raises(ctfile.VersionNotFoundError):
        evolved.schema_at(99)
    with pytest.raises(ctfile.InvalidArgumentError, match="version must be an int"):
        evolved.schema_at("1")


def test_changes_read_in_an_older_schema_by_field_id(evolved):
    old = evolved.schema_at(1)
    cs = evolved.changes(start_version=3, end_version=3, read_schema=old)
    assert cs.schema.names[:4] == ["id", "n", "name", "old"]
    assert str(cs.schema.field("n").type) == "int32"
    # Renamed: under the old name; dropped: null; added: not there.
    assert cs.to_arrow().select(["id", "n", "name", "old"]).to_pylist() == [{"id": 3, "n": 30, "name": "c", "old": None}]
    # An update whose only difference is a column the read schema lacks is no change in it.
    assert evolved.changes(start_version=5, end_version=5, read_schema=old).to_arrow().num_rows == 0
    assert evolved.changes(start_version=5, end_version=5).to_arrow().num_rows == 2
    # A dropped column is null in rows written after the drop; an old image
    # read from a file written before it still has its value there.
    rows = evolved.changes(start_version=6, read_schema=old).to_arrow().select(["id", "old", "METADATA$ACTION"])
    assert rows.to_pylist() == [
        {"id": 1, "old": "x", "METADATA$ACTION": "DELETE"}, {"id": 1, "old": None, "METADATA$ACTION": "INSERT"}
    ]
    # A widened value the old type cannot hold is an error, not a changed value.
    with pytest.raises(ctfile.SchemaMismatchError, match=r"column 'n' of the file holds a value that column 'n' of the read schema cannot hold"):
        evolved.changes(start_version=4, end_version=4, read_schema=old).to_arrow()
    with pytest.raises(ctfile.InvalidArgumentError, match="read_schema must be a ctfile.format.Schema"):
        evolved.changes(start_version=3, read_schema=SCHEMA)
