"""ctfile.format.schema: field ids, JSON form, Arrow mapping."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from ctfile.format.errors import CorruptLogError, SchemaMismatchError
from ctfile.format.schema import (
    PARQUET_FIELD_ID_KEY,
    ROW_ID_FIELD_ID,
    ROW_VERSION_FIELD_ID,
    ArrayType,
    Field,
    MapType,
    Schema,
    StructType,
    schema_from_arrow,
    schema_from_json,
    schema_to_json,
)

NESTED_ARROW = pa.schema(
    [
        pa.field("a", pa.int64(), nullable=False),
        pa.field(
            "b",
            pa.struct([pa.field("c", pa.int32()), pa.field("d", pa.list_(pa.string()))]),
        ),
        pa.field("e", pa.map_(pa.string(), pa.float64())),
        pa.field("f", pa.list_(pa.field("element", pa.struct([("g", pa.bool_())]), nullable=False))),
    ]
)


def test_nested_ids_are_assigned_depth_first():
    s = schema_from_arrow(NESTED_ARROW)
    a, b, e, f = s.fields
    assert (a.id, a.name, a.type, a.nullable) == (1, "a", "long", False)
    assert b.id == 2
    c, d = b.type.fields
    assert (c.id, c.type) == (3, "integer")
    assert d.id == 4 and d.type == ArrayType(5, "string", True)
    assert e.id == 6 and e.type == MapType(7, "string", 8, "double", True)
    assert f.id == 9
    assert f.type.element_id == 10 and f.type.contains_null is False
    (g,) = f.type.element_type.fields
    assert (g.id, g.type) == (11, "boolean")
    assert s.max_field_id() == 11


def test_json_round_trip_nested():
    s = schema_from_arrow(NESTED_ARROW)
    s = Schema(s.fields[:1] + (Field(12, "m", "decimal(10,2)", True, {"comment": "money"}),) + s.fields[1:])
    obj = schema_to_json(s)
    # Through real JSON text, as the log stores it.
    back = schema_from_json(json.loads(json.dumps(obj)))
    assert back == s
    assert back.field("m").metadata == {"comment": "money"}
    assert obj["fields"][2]["type"]["type"] == "struct"
    assert obj["fields"][3]["type"] == {
        "type": "map", "keyId": 7, "keyType": "string", "valueId": 8,
        "valueType": "double", "valueContainsNull": True,
    }


def test_to_arrow_round_trip_and_field_ids():
    s = schema_from_arrow(NESTED_ARROW)
    assert s.to_arrow(field_ids=False).equals(NESTED_ARROW)
    with_ids = s.to_arrow()
    assert with_ids.field("a").metadata[PARQUET_FIELD_ID_KEY] == b"1"
    b_type = with_ids.field("b").type
    assert b_type.field("d").metadata[PARQUET_FIELD_ID_KEY] == b"4"
    assert b_type.field("d").type.value_field.metadata[PARQUET_FIELD_ID_KEY] == b"5"
    m = with_ids.field("e").type
    assert m.key_field.metadata[PARQUET_FIELD_ID_KEY] == b"7"
    assert m.item_field.metadata[PARQUET_FIELD_ID_KEY] == b"8"
    hidden = s.to_arrow(include_hidden=True)
    assert hidden.names[-2:] == ["_ct_row_id", "_ct_row_version"]
    assert hidden.field("_ct_row_id").metadata[PARQUET_FIELD_ID_KEY] == str(ROW_ID_FIELD_ID).encode()
    assert hidden.field("_ct_row_version").metadata[PARQUET_FIELD_ID_KEY] == str(ROW_VERSION_FIELD_ID).encode()


def test_flat_ids_are_one_to_n():
    arrow = pa.schema([(f"c{i}", pa.int32()) for i in range(7)])
    assert [f.id for f in schema_from_arrow(arrow).fields] == list(range(1, 8))


@pytest.mark.parametrize(
    "arrow_type, name",
    [
        (pa.bool_(), "boolean"), (pa.int8(), "byte"), (pa.int16(), "short"), (pa.int32(), "integer"),
        (pa.int64(), "long"), (pa.float32(), "float"), (pa.float64(), "double"),
        (pa.string(), "string"), (pa.large_string(), "string"), (pa.binary(), "binary"),
        (pa.date32(), "date"), (pa.timestamp("us", tz="UTC"), "timestamp"),
        (pa.timestamp("ns", tz="Europe/Paris"), "timestamp"), (pa.timestamp("ms"), "timestamp_ntz"),
        (pa.decimal128(38, 9), "decimal(38,9)"), (pa.dictionary(pa.int32(), pa.string()), "string"),
    ],
)
def test_primitive_type_names(arrow_type, name):
    assert schema_from_arrow(pa.schema([("v", arrow_type)])).fields[0].type == name


@pytest.mark.parametrize("name", ["_ct_x", "_ct_row_id", "METADATA$X", "METADATA$ACTION"])
def test_reserved_names_rejected(name):
    with pytest.raises(SchemaMismatchError, match="reserved"):
        schema_from_arrow(pa.schema([("ok", pa.int64()), (name, pa.int64())]))


def test_similar_but_unreserved_names_accepted():
    s = schema_from_arrow(pa.schema([("ct_x", pa.int64()), ("metadata$x", pa.int64()), ("_c", pa.int8())]))
    assert s.names == ["ct_x", "metadata$x", "_c"]


def test_duplicate_names_rejected():
    with pytest.raises(SchemaMismatchError, match="duplicate column name 'a'"):
        schema_from_arrow(pa.schema([("a", pa.int64()), ("b", pa.int64()), ("a", pa.string())]))


@pytest.mark.parametrize("t", [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()])
def test_unsigned_ints_rejected_with_clear_message(t):
    with pytest.raises(SchemaMismatchError) as ei:
        schema_from_arrow(pa.schema([("id", pa.int64()), ("u", t)]))
    msg = str(ei.value)
    assert "'u'" in msg or "u:" in msg  # names the column
    assert str(t) in msg
    assert "signed integer" in msg


def test_unsigned_nested_rejected_names_path():
    with pytest.raises(SchemaMismatchError, match=r"s\.inner"):
        schema_from_arrow(pa.schema([("s", pa.struct([("inner", pa.uint32())]))]))


def test_other_unsupported_types_rejected():
    for t in (pa.decimal256(50, 2), pa.time64("us"), pa.null(), pa.duration("s")):
        with pytest.raises(SchemaMismatchError):
            schema_from_arrow(pa.schema([("v", t)]))


def test_empty_schema_rejected():
    with pytest.raises(SchemaMismatchError, match="at least one column"):
        schema_from_arrow(pa.schema([]))


def test_field_lookup():
    s = schema_from_arrow(pa.schema([("a", pa.int64()), ("b", pa.string())]))
    assert s.field("b").id == 2
    assert s.field_by_id(1).name == "a"
    assert s.field_by_id(99) is None
    with pytest.raises(SchemaMismatchError, match="no column 'zz'"):
        s.field("zz")


@pytest.mark.parametrize(
    "obj, match",
    [
        ({"fields": [{"id": 1, "name": "a", "type": "long", "nullable": True},
                     {"id": 1, "name": "b", "type": "long", "nullable": True}]}, "duplicate field ids"),
        ({"fields": [{"id": 1, "name": "a", "type": "uint32", "nullable": True}]}, "unknown type"),
        ({"fields": [{"id": 1, "name": "a", "type": "decimal(40,2)", "nullable": True}]}, "unknown type"),
        ({"fields": [{"id": 1, "name": "a", "type": "decimal(5,6)", "nullable": True}]}, "unknown type"),
        ({"fields": [{"id": "1", "name": "a", "type": "long", "nullable": True}]}, "'id' should be int"),
        ({"fields": [{"id": True, "name": "a", "type": "long", "nullable": True}]}, "'id' should be int"),
        ({"fields": [{"id": 1, "name": "a", "type": "long"}]}, "'nullable' is missing"),
        ({"fields": [{"id": 1, "type": "long", "nullable": True}]}, "'name' is missing"),
        ({"fields": [{"id": 1, "name": "a", "type": {"type": "tensor"}, "nullable": True}]}, "unknown nested type"),
        ({"fields": [{"id": 1, "name": "a", "type": {"type": "array", "elementType": "long"},
                      "nullable": True}]}, "'elementId' is missing"),
        ({}, "'fields' is missing"),
    ],
)
def test_schema_from_json_errors(obj, match):
    with pytest.raises(CorruptLogError, match=match):
        schema_from_json(obj)


def test_struct_type_equality_is_structural():
    a = StructType((Field(1, "x", "long"),))
    b = StructType((Field(1, "x", "long"),))
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize("key, value", [("id", 0), ("id", 2**31), ("id", 2**40), ("elementId", -1)])
def test_field_ids_fit_parquet_field_id(key, value):
    """A field id is what Parquet stores as a 32-bit field_id: 1..2^31 - 1
    (review finding: 2^40 was accepted and written into data files)."""
    from ctfile.format.errors import CorruptLogError
    from ctfile.format.schema import schema_from_json

    field = {"id": 1, "name": "tags", "type": {"type": "array", "elementId": 2, "elementType": "string", "containsNull": True}, "nullable": True}
    if key == "id":
        field["id"] = value
    else:
        field["type"]["elementId"] = value
    with pytest.raises(CorruptLogError, match=f"{key} {value} is not a field id"):
        schema_from_json({"type": "struct", "fields": [field]})
