"""A struct needs at least one field, each of its own name (SPEC §Schema,
§Schema evolution). Parquet cannot store a struct with no field, so a
schema holding one would make every later write of the table fail (found by
``tests/property/test_schema_model.py``); two fields of one name in a struct
make a path such as ``s.a`` name both."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import SchemaMismatchError
from ctfile.format.schema import schema_from_arrow
from ctfile.format.schema_evolution import SchemaEditor

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.struct([("a", pa.int32())]))])


def test_a_new_schema_with_an_empty_struct_is_refused(tmp_path):
    with pytest.raises(SchemaMismatchError, match=r"s\.t.*at least one field"):
        schema_from_arrow(pa.schema([("id", pa.int64()), ("s", pa.struct([("t", pa.struct([]))]))]))
    with pytest.raises(SchemaMismatchError, match="at least one field"):
        ctfile.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("s", pa.struct([]))]))
    assert not (tmp_path / "t").exists()


def test_the_only_field_of_a_struct_cannot_be_dropped():
    e = SchemaEditor(schema_from_arrow(SCHEMA), 3)
    with pytest.raises(SchemaMismatchError, match=r"'s\.a'.*only field of 's'"):
        e.drop_column("s.a")
    with pytest.raises(SchemaMismatchError, match="at least one field"):
        e.add_column("e", pa.struct([]))
    e.add_column("s.b", pa.string())
    e.drop_column("s.a")  # no longer the only one
    assert [f.name for f in e.schema.field("s").type.fields] == ["b"]


def test_the_table_stays_writable(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA)
    t.insert(pa.table({"id": [1], "s": [{"a": 1}]}, schema=SCHEMA))
    with pytest.raises(SchemaMismatchError):
        with t.update_schema() as u:
            u.drop_column("s.a")
    assert t.version == 1
    t.update(pc.field("id") == 1, {"id": 2})
    assert t.to_arrow().to_pylist() == [{"id": 2, "s": {"a": 1}}]


def test_a_struct_with_two_fields_of_one_name_is_refused(tmp_path):
    """SPEC §Schema: a path (``s.a``) must name one field; a struct with two
    fields named ``a`` was accepted, and a rename of ``s.a`` renamed both."""
    dup = pa.schema([("id", pa.int64()), ("s", pa.struct([("a", pa.int32()), ("a", pa.string())]))])
    with pytest.raises(SchemaMismatchError, match=r"s: duplicate field name 'a'"):
        schema_from_arrow(dup)
    with pytest.raises(SchemaMismatchError, match="duplicate field name"):
        ctfile.create_table(str(tmp_path / "t"), dup)
    e = SchemaEditor(schema_from_arrow(SCHEMA), 3)
    with pytest.raises(SchemaMismatchError, match="duplicate field name"):
        e.add_column("t", pa.struct([("x", pa.int32()), ("x", pa.int64())]))
