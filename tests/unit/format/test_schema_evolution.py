"""SchemaEditor, diff_schemas and replacement_schema (SPEC §Schema evolution)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ctfile.format.errors import SchemaMismatchError
from ctfile.format.schema import ArrayType, MapType, StructType, schema_from_arrow
from ctfile.format.schema_evolution import (
    SchemaChangeKind,
    SchemaEditor,
    can_widen,
    changes_need_feature,
    diff_schemas,
    replacement_schema,
    restored_schema,
    retires_ids,
)

ADDRESS = pa.struct([("city", pa.string()), ("zip", pa.int32())])
BASE = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("name", pa.string()),
    ("n32", pa.int32()),
    ("address", ADDRESS),
    ("tags", pa.list_(pa.int16())),
    ("attrs", pa.map_(pa.string(), pa.float32())),
    ("amount", pa.decimal128(10, 2)),
])


def editor() -> SchemaEditor:
    s = schema_from_arrow(BASE)
    return SchemaEditor(s, s.max_field_id())


def test_new_fields_get_ids_above_the_last_assigned_in_pre_order():
    e = editor()
    assert e.last_field_id == 12
    e.add_column("lines", pa.list_(pa.struct([("sku", pa.string())])))
    f = e.schema.field("lines")
    assert f.id == 13 and isinstance(f.type, ArrayType) and f.type.element_id == 14
    assert f.type.element_type.fields[0].id == 15 and e.last_field_id == 15
    assert f.nullable


def test_a_dropped_name_added_again_is_a_new_column():
    e = editor()
    e.drop_column("name")
    e.add_column("name", pa.string())
    assert e.schema.field("name").id == 13
    # The retired id is not reused even after the highest id is dropped.
    e.drop_column("name")
    e.add_column("other", pa.string())
    assert e.schema.field("other").id == 14


def test_nested_changes_by_path():
    e = editor()
    e.add_column("address.street", pa.string(), after="city")
    e.rename_column("address.zip", "postcode")
    e.widen_column("address.postcode", pa.int64())
    e.widen_column("tags.element", pa.int64())
    e.widen_column("attrs.value", pa.float64())
    e.make_nullable("id")
    addr = e.schema.field("address").type
    assert isinstance(addr, StructType)
    assert [(f.name, f.type) for f in addr.fields] == [("city", "string"), ("street", "string"), ("postcode", "long")]
    assert e.schema.field("tags").type.element_type == "long"
    attrs = e.schema.field("attrs").type
    assert isinstance(attrs, MapType) and attrs.value_type == "double"
    assert e.schema.field("id").nullable
    assert [c.kind for c in e.changes] == [
        SchemaChangeKind.ADD, SchemaChangeKind.RENAME, SchemaChangeKind.WIDEN, SchemaChangeKind.WIDEN, SchemaChangeKind.WIDEN, SchemaChangeKind.MAKE_NULLABLE,
    ]


def test_a_name_containing_a_dot_is_reached_by_a_tuple_path():
    s = schema_from_arrow(pa.schema([("a.b", pa.int32()), ("c", pa.int32())]))
    e = SchemaEditor(s, s.max_field_id())
    e.rename_column(("a.b",), "ab")
    assert e.schema.names == ["ab", "c"]


@pytest.mark.parametrize(
    "old, new, ok",
    [
        ("byte", "short", True), ("byte", "long", True), ("integer", "long", True), ("float", "double", True),
        ("long", "integer", False), ("integer", "double", False), ("date", "timestamp_ntz", False),
        ("decimal(10,2)", "decimal(12,2)", True), ("decimal(10,2)", "decimal(12,3)", False),
        ("decimal(10,2)", "decimal(9,2)", False), ("string", "binary", False),
    ],
)
def test_widening_rules(old, new, ok):
    assert can_widen(old, new) is ok


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda e: e.add_column("name", pa.string()), "exists"),
        (lambda e: e.add_column("_ct_x", pa.string()), "reserved prefix"),
        (lambda e: e.add_column("missing.x", pa.string()), "no field 'missing'"),
        (lambda e: e.add_column("name.x", pa.string()), "not a struct"),
        (lambda e: e.add_column("x", pa.string(), after="nope"), "names no sibling"),
        (lambda e: e.drop_column("nope"), "no field 'nope'"),
        (lambda e: e.rename_column("name", "n32"), "already exists"),
        (lambda e: e.rename_column("address.zip", "city"), "already exists"),
        (lambda e: e.widen_column("n32", pa.int16()), "from integer to short"),
        (lambda e: e.widen_column("name", pa.binary()), "from string to binary"),
        (lambda e: e.widen_column("address", pa.int64()), "from struct to long"),
        (lambda e: e.widen_column("amount", pa.decimal128(12, 3)), r"decimal\(10,2\) to decimal\(12,3\)"),
        (lambda e: e.make_nullable("attrs.key"), "map keys are never null"),
        (lambda e: e.widen_column("tags.value", pa.int64()), "'element'"),
        (lambda e: e.move_column("name"), "exactly one of"),
    ],
)
def test_changes_not_allowed_are_refused_naming_the_field(change, message):
    e = editor()
    before = e.schema
    with pytest.raises(SchemaMismatchError, match=message):
        change(e)
    assert e.schema == before and e.changes == []


def test_the_only_column_cannot_be_dropped():
    s = schema_from_arrow(pa.schema([("id", pa.int64())]))
    with pytest.raises(SchemaMismatchError, match="only column"):
        SchemaEditor(s, 1).drop_column("id")


def test_move_and_add_positions():
    e = editor()
    e.move_column("amount", first=True)
    e.add_column("z", pa.int8(), after="id")
    e.add_column("a", pa.int8(), first=True)
    assert e.schema.names[:4] == ["a", "amount", "id", "z"]


def test_which_changes_need_the_feature():
    e = editor()
    e.add_column("email", pa.string())
    e.move_column("email", first=True)
    e.make_nullable("id")
    assert not changes_need_feature(e.changes)
    for change in (
        lambda x: x.rename_column("name", "full_name"),
        lambda x: x.drop_column("name"),
        lambda x: x.widen_column("n32", pa.int64()),
        lambda x: x.add_column("address.street", pa.string()),
    ):
        x = editor()
        change(x)
        assert changes_need_feature(x.changes)


def test_diff_schemas_reports_each_kind_by_field_id():
    e = editor()
    e.rename_column("name", "full_name")
    e.drop_column("address")
    e.widen_column("n32", pa.int64())
    e.make_nullable("id")
    e.add_column("email", pa.string())
    e.add_column("tags2", pa.list_(pa.struct([("k", pa.string())])))
    diff = {(c.kind, c.path) for c in diff_schemas(schema_from_arrow(BASE), e.schema)}
    assert diff == {
        (SchemaChangeKind.RENAME, "name"), (SchemaChangeKind.DROP, "address"), (SchemaChangeKind.WIDEN, "n32"),
        (SchemaChangeKind.MAKE_NULLABLE, "id"), (SchemaChangeKind.ADD, "email"), (SchemaChangeKind.ADD, "tags2"),
    }


def test_replacement_keeps_ids_of_same_name_and_type_only():
    old = schema_from_arrow(BASE)
    new, last = replacement_schema(old, 20, pa.schema([("id", pa.int64()), ("name", pa.int64()), ("address", ADDRESS)]))
    assert new.field("id").id == 1 and new.field("id").nullable  # the new schema's nullability
    assert new.field("name").id == 21  # a different type: a new column
    assert new.field("address").id == old.field("address").id
    assert new.field("address").type == old.field("address").type  # nested ids kept too
    assert last == 21
    assert retires_ids(old, new)


def test_diff_reports_the_fewest_moves():
    old = schema_from_arrow(pa.schema([(c, pa.int8()) for c in "abcde"]))
    e = SchemaEditor(old, 5)
    e.move_column("e", first=True)
    e.move_column("b", after="d")
    moves = [(c.path, c.detail) for c in diff_schemas(old, e.schema) if c.kind is SchemaChangeKind.MOVE]
    assert e.schema.names == ["e", "a", "c", "d", "b"]
    assert moves == [("e", "first"), ("b", "after d")]
    assert diff_schemas(old, old) == []


# ---------------------------------------------------------------- RESTORE (SPEC §Restore, metadata)


def test_restored_schema_is_the_old_one_by_id_with_todays_types_and_nullability():
    old = schema_from_arrow(BASE)
    e = SchemaEditor(old, old.max_field_id())
    e.rename_column("address.city", "town")
    e.widen_column("tags.element", pa.int64())
    e.widen_column("attrs.value", pa.float64())
    e.make_nullable("id")
    e.add_column("address.street", pa.string())
    e.add_column("email", pa.string())
    e.move_column("amount", first=True)
    got = restored_schema(e.schema, old)
    assert got.names == old.names and got.max_field_id() == old.max_field_id()
    assert [f.id for f in got.fields] == [f.id for f in old.fields]
    address = got.field("address").type
    assert [f.name for f in address.fields] == ["city", "zip"]  # renamed back, the added field dropped
    assert got.field("tags").type.element_type == "long" and got.field("attrs").type.value_type == "double"
    assert got.field("id").nullable  # made nullable since: stays nullable
    changes = diff_schemas(e.schema, got)
    assert {c.kind for c in changes} == {SchemaChangeKind.DROP, SchemaChangeKind.RENAME, SchemaChangeKind.MOVE}
    assert changes_need_feature(changes)
    assert restored_schema(old, old) == old


def test_restored_schema_refuses_a_nested_field_dropped_since():
    old = schema_from_arrow(BASE)
    e = SchemaEditor(old, old.max_field_id())
    e.drop_column("address.zip")
    with pytest.raises(SchemaMismatchError, match=r"field address\.zip \(id 6\).*dropped since"):
        restored_schema(e.schema, old)
