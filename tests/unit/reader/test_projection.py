"""Reading files into a later schema by field id (SPEC §Schema evolution, projection)."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import UnsupportedFeatureError
from ctfile.format.schema import schema_from_arrow
from ctfile.format.schema_evolution import SchemaEditor
from ctfile.reader.projection import Projection

NESTED = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
    ("lines", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int16())]))),
    ("attrs", pa.map_(pa.string(), pa.struct([("unit", pa.string()), ("v", pa.float32())]))),
    ("amount", pa.decimal128(10, 2)),
])
ROWS = [
    {"id": 1, "address": {"city": "Oslo", "zip": 150}, "lines": [{"sku": "a", "qty": 2}],
     "attrs": [("w", {"unit": "kg", "v": 1.5})], "amount": decimal.Decimal("1.25")},
    {"id": 2, "address": None, "lines": None, "attrs": None, "amount": None},
    {"id": 3, "address": {"city": None, "zip": 7}, "lines": [{"sku": "b", "qty": 1}, None],
     "attrs": [("h", None)], "amount": decimal.Decimal("-3.50")},
]


@pytest.fixture
def nested(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), NESTED)
    t.insert(pa.Table.from_pylist(ROWS, schema=NESTED))
    return t


def test_nested_fields_follow_their_ids_through_every_change(nested):
    with nested.update_schema() as u:
        u.rename_column("address.zip", "postcode").widen_column("address.postcode", pa.int64())
        u.add_column("address.street", pa.string(), after="city")
        u.drop_column("address.city")
        u.rename_column("lines.element.sku", "code").widen_column("lines.element.qty", pa.int64())
        u.add_column("lines.element.note", pa.string())
        u.widen_column("attrs.value.v", pa.float64()).drop_column("attrs.value.unit")
        u.widen_column("amount", pa.decimal128(14, 2))
        u.rename_column("attrs", "properties")
    got = nested.to_arrow().sort_by("id")
    assert got.schema == nested.schema
    assert got.to_pylist() == [
        {"id": 1, "address": {"street": None, "postcode": 150}, "lines": [{"code": "a", "qty": 2, "note": None}],
         "properties": [("w", {"v": 1.5})], "amount": decimal.Decimal("1.25")},
        {"id": 2, "address": None, "lines": None, "properties": None, "amount": None},
        {"id": 3, "address": {"street": None, "postcode": 7}, "lines": [{"code": "b", "qty": 1, "note": None}, None],
         "properties": [("h", None)], "amount": decimal.Decimal("-3.50")},
    ]
    # The old version reads in its own schema, unchanged.
    assert nested.snapshot(1).to_arrow().sort_by("id").to_pylist() == ROWS
    # Every reader path agrees: batches, hidden columns, scan tasks, rows by position.
    snap = nested.snapshot()
    assert pa.Table.from_batches(list(snap.to_batches()), schema=snap.schema).sort_by("id").equals(got)
    assert snap.to_arrow(include_hidden=True).drop_columns(["_ct_row_id", "_ct_row_version"]).sort_by("id").equals(got)
    tasks = snap.scan_tasks()
    assert pa.Table.from_batches([b for task in tasks for b in task.to_batches()], schema=snap.schema).sort_by("id").equals(got)


def test_dml_rewrites_old_partitions_into_the_new_schema(nested):
    with nested.update_schema() as u:
        u.rename_column("address.zip", "postcode").add_column("email", pa.string())
    nested.update(pc.field("id") == 3, {"email": "x@y"})
    got = {r["id"]: r for r in nested.to_arrow().to_pylist()}
    assert got[3]["email"] == "x@y" and got[3]["address"] == {"city": None, "postcode": 7}
    assert got[1]["address"] == {"city": "Oslo", "postcode": 150} and got[1]["email"] is None


def test_by_name_is_false_when_a_name_matching_reader_would_misread():
    old = schema_from_arrow(pa.schema([("a", pa.int32()), ("b", pa.string())]))
    file_schema = old.to_arrow(field_ids=True)
    e = SchemaEditor(old, 2)
    e.add_column("c", pa.string())
    assert Projection(file_schema, e.schema, e.schema.names).by_name  # added: absent both ways
    for change in (
        lambda x: x.rename_column("b", "bb"),
        lambda x: x.widen_column("a", pa.int64()),
        lambda x: (x.drop_column("b"), x.add_column("b", pa.string())),  # same name, new id
    ):
        x = SchemaEditor(old, 2)
        change(x)
        assert not Projection(file_schema, x.schema, x.schema.names).by_name


def test_by_name_widening_allows_only_integer_and_float_widenings():
    old = schema_from_arrow(pa.schema([("a", pa.int32()), ("f", pa.float32()), ("d", pa.decimal128(5, 2)), ("b", pa.string())]))
    file_schema = old.to_arrow(field_ids=True)
    for change, ok in (
        (lambda x: x.widen_column("a", pa.int64()), True),
        (lambda x: x.widen_column("f", pa.float64()), True),
        (lambda x: x.add_column("c", pa.string()), True),
        (lambda x: x.widen_column("d", pa.decimal128(9, 2)), False),
        (lambda x: x.rename_column("b", "bb"), False),
        (lambda x: (x.drop_column("b"), x.add_column("b", pa.string())), False),
    ):
        x = SchemaEditor(old, 4)
        change(x)
        p = Projection(file_schema, x.schema, x.schema.names)
        assert not p.by_name or p.by_name_widening
        assert p.by_name_widening == ok


def test_projection_of_sliced_nested_arrays():
    old = schema_from_arrow(NESTED)
    data = pa.Table.from_pylist(ROWS, schema=old.to_arrow(field_ids=True))
    e = SchemaEditor(old, old.max_field_id())
    e.rename_column("lines.element.sku", "code")
    e.widen_column("attrs.value.v", pa.float64())
    p = Projection(data.schema, e.schema, e.schema.names)
    sliced = data.slice(1, 2).to_batches()[0]
    out = pa.Table.from_arrays([p.column(n, sliced, sliced.num_rows) for n in e.schema.names], names=e.schema.names)
    assert out.column("lines").to_pylist() == [None, [{"code": "b", "qty": 1}, None]]
    assert out.column("attrs").to_pylist() == [None, [("h", None)]]


def test_snapshot_filters_on_a_renamed_column_use_the_statistics_of_its_id(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("k", pa.int32()), ("v", pa.string())]))
    for i in range(3):
        t.insert(pa.table({"k": pa.array([i * 10, i * 10 + 5], pa.int32()), "v": ["a", "b"]}))
    with t.update_schema() as u:
        u.rename_column("k", "key").widen_column("key", pa.int64())
    snap = t.snapshot()
    assert len(snap._plan(pc.field("key") >= 20)) == 1
    assert snap.to_arrow(filter=pc.field("key") >= 20).to_pylist() == [{"key": 20, "v": "a"}, {"key": 25, "v": "b"}]
    t.insert(pa.table({"key": [2**40], "v": ["big"]}))
    assert t.to_arrow(filter=pc.field("key") > 2**35).column("v").to_pylist() == ["big"]
    report = ctfile.verify_table(t.uri, all_versions=True)
    assert report.healthy, report.problems  # the int32 file's bounds checked in the widened type


def test_to_dataset_refuses_files_a_name_matching_engine_would_misread(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("k", pa.int64()), ("v", pa.string())]))
    t.insert(pa.table({"k": [1], "v": ["a"]}))
    with t.update_schema() as u:
        u.add_column("w", pa.string())
    assert t.snapshot().to_dataset().to_table().to_pylist() == [{"k": 1, "v": "a", "w": None}]  # additive: fine
    with t.update_schema() as u:
        u.rename_column("v", "value")
    with pytest.raises(UnsupportedFeatureError, match="to_arrow"):
        t.snapshot().to_dataset()
    t.update(pc.field("k") == 1, {"w": "b"})  # a rewrite writes the current names
    assert t.snapshot().to_dataset().to_table().to_pylist() == [{"k": 1, "value": "a", "w": "b"}]
