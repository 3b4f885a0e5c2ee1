"""Writes that change the schema (SPEC §Schema evolution, merging write and
replacing the schema): ``plan_merge`` on its own, then ``Table.write_job``
with ``schema_mode`` end to end on real tables, as the Spark data source
drives it (plan on the driver, write files, commit once)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.schema import schema_from_arrow
from ctfile.format.schema_evolution import SchemaChangeKind
from ctfile.writer.schema_merge import plan_schema_merge as plan_merge

BASE = pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string())])


def data_files(t: ctfile.Table) -> set[str]:
    d = Path(t.uri) / "data"
    return {p.name for p in d.iterdir()} if d.exists() else set()


@pytest.fixture
def table(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), BASE)
    t.insert(pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]}, schema=BASE))
    return t


def write(t: ctfile.Table, data: pa.Table, **kwargs) -> ctfile.CommitResult:
    job = t.write_job(schema=data.schema, **kwargs)
    return job.commit(job.write(data))


# ---------------------------------------------------------------- plan_merge


def test_plan_merge_adds_and_widens_nested_fields_too():
    have = schema_from_arrow(pa.schema([
        ("id", pa.int32()),
        ("addr", pa.struct([("zip", pa.int16())])),
        ("tags", pa.list_(pa.float32())),
        ("attrs", pa.map_(pa.string(), pa.decimal128(5, 2))),
    ]))
    incoming = pa.schema([
        ("id", pa.int64()),
        ("addr", pa.struct([("zip", pa.int32()), ("city", pa.string())])),
        ("tags", pa.list_(pa.float64())),
        ("attrs", pa.map_(pa.string(), pa.decimal128(9, 2))),
        ("email", pa.string()),
    ])
    plan = plan_merge(have, have.max_field_id(), incoming)
    assert [(s.kind, ".".join(s.path)) for s in plan.steps] == [
        (SchemaChangeKind.WIDEN, "id"),
        (SchemaChangeKind.WIDEN, "addr.zip"),
        (SchemaChangeKind.ADD, "addr.city"),
        (SchemaChangeKind.WIDEN, "tags.element"),
        (SchemaChangeKind.WIDEN, "attrs.value"),
        (SchemaChangeKind.ADD, "email"),
    ]
    merged = plan.schema.to_arrow(field_ids=False)
    assert merged.field("addr").type == pa.struct([("zip", pa.int32()), ("city", pa.string())])
    assert merged.field("attrs").type == pa.map_(pa.string(), pa.decimal128(9, 2))
    # New ids above the table's last id, never reused; old ids kept.
    last = have.max_field_id()
    assert plan.schema.field("email").id == plan.last_field_id > last
    assert plan.schema.field("id").id == have.field("id").id


@pytest.mark.parametrize(
    "incoming",
    [
        pa.schema([("id", pa.int16()), ("name", pa.string())]),  # narrower: written in the table's type
        pa.schema([("id", pa.float64())]),  # not a widening (the write's own check refuses it)
        pa.schema([("id", pa.int32()), ("name", pa.large_string())]),  # the same ctfile type
        pa.schema([("id", pa.decimal128(12, 3))]),  # a scale change is no widening
    ],
    ids=["narrower", "int-to-double", "large-string", "decimal-scale"],
)
def test_plan_merge_never_narrows_or_changes_other_types(incoming):
    have = schema_from_arrow(BASE)
    plan = plan_merge(have, 2, incoming)
    assert plan.steps == () and plan.schema == have and plan.last_field_id == 2


def test_plan_merge_refuses_a_column_differing_only_in_case():
    with pytest.raises(ctfile.SchemaMismatchError, match=r"columns 'ID' \(table column 'id'\) into the table"):
        plan_merge(schema_from_arrow(BASE), 2, pa.schema([("ID", pa.int64()), ("Extra", pa.int8())]))


def test_plan_merge_ids_continue_after_dropped_ones():
    # lastFieldId 7: ids 3..7 were assigned and dropped; they are never reused.
    plan = plan_merge(schema_from_arrow(BASE), 7, pa.schema([("email", pa.string())]))
    assert plan.schema.field("email").id == 8 == plan.last_field_id


# ---------------------------------------------------------------- write_job(schema_mode="merge")


def test_merge_adds_and_widens_in_the_version_of_the_rows(table):
    data = pa.table({"id": pa.array([3], pa.int64()), "email": ["c@x"]})  # no name: nulls
    job = table.write_job(schema=data.schema, schema_mode="merge")
    assert pickle.loads(pickle.dumps(job)) == job  # shipped to workers
    r = job.commit(job.write(data))
    assert r.version == 2  # the schema change and the rows: one version
    t = ctfile.open_table(table.uri)
    assert t.schema == pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("email", pa.string())])
    assert [(f.id, f.name) for f in t.schema_at().fields] == [(1, "id"), (2, "name"), (3, "email")]
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a", "email": None}, {"id": 2, "name": "b", "email": None},
        {"id": 3, "name": None, "email": "c@x"},
    ]
    h = t.history(limit=1)[0]
    assert (h.operation, h.operation_parameters["schemaMode"], h.data_change) == ("WRITE", "merge", True)
    # A widening needs the feature (SPEC §Schema evolution, protocol): added in the same entry.
    entry = (Path(t.uri) / "_ct_log" / f"{2:020d}.json").read_text()
    assert '"schemaEvolution"' in entry and '"metadata"' in entry and '"add"' in entry
    # The change scan of that version: the new row, in the new schema.
    assert t.changes(start_version=2).to_arrow().select(["id", "email", "METADATA$ACTION"]).to_pylist() == [
        {"id": 3, "email": "c@x", "METADATA$ACTION": "INSERT"}
    ]


def test_merge_of_an_incompatible_type_fails_before_anything_is_written(table):
    before = data_files(table)
    data = pa.table({"id": pa.array([3], pa.int32()), "name": pa.array([1.5]), "more": [True]})
    with pytest.raises(ctfile.SchemaMismatchError, match=r"column 'name' has type double, expected string"):
        table.write_job(schema=data.schema, schema_mode="merge")
    assert table.refresh().version == 1 and data_files(table) == before
    assert table.schema == BASE


def test_a_sink_job_merges_once_then_later_batches_find_the_schema(table):
    # A streaming sink plans one job and commits it once per micro-batch.
    data = pa.table({"id": pa.array([10], pa.int32()), "name": ["x"], "n": pa.array([1], pa.int64())})
    job = table.write_job(schema=data.schema, schema_mode="merge")
    assert job.commit(job.write(data), app_id="q", app_version=0, against_latest=True).version == 2
    assert job.commit(job.write(data), app_id="q", app_version=1, against_latest=True).version == 3
    t = ctfile.open_table(table.uri)
    assert t.schema.names == ["id", "name", "n"]
    assert [h.operation_parameters.get("schemaMode") for h in t.history(limit=2)] == ["merge", "merge"]
    assert t.to_arrow().filter(pc.field("id") == 10).num_rows == 2
    assert (Path(t.uri) / "_ct_log" / f"{3:020d}.json").read_text().count('"metadata"') == 0


def test_a_concurrent_schema_change_fails_the_commit_and_deletes_its_files(table):
    data = pa.table({"id": pa.array([3], pa.int32()), "name": ["c"], "email": ["c@x"]})
    job = table.write_job(schema=data.schema, schema_mode="merge")
    batch_files, sink_files = job.write(data), job.write(data)
    # Another column is added first: it takes the id the job planned for email.
    with table.update_schema() as u:
        u.add_column("phone", pa.string())
    # A batch write commits on the version it planned on: the schema change
    # that won conflicts with it (SPEC §Conflict detection, rule 1).
    with pytest.raises(ctfile.CommitConflictError, match="changed the table's schema"):
        job.commit(batch_files)
    # A sink commits on the latest version: its schema is neither the job's
    # nor the one the job was planned from.
    with pytest.raises(ctfile.SchemaMismatchError, match=r"changed since this write was planned \(at version 1\).*add phone"):
        job.commit(sink_files, app_id="q", app_version=0, against_latest=True)
    # So does a job that changes no schema.
    plain = table.write_job(schema=BASE)
    with table.update_schema() as u:
        u.drop_column("phone")
    plain_files = plain.write(pa.table({"id": pa.array([4], pa.int32()), "name": ["d"]}))
    with pytest.raises(ctfile.SchemaMismatchError, match=r"planned \(at version 2\): drop phone"):
        plain.commit(plain_files, app_id="q", app_version=0, against_latest=True)
    assert table.refresh().version == 3
    assert not any(table.storage.exists(f.path) for f in batch_files + sink_files + plain_files)


def test_merge_without_a_difference_is_an_ordinary_write(table):
    data = pa.table({"id": pa.array([3], pa.int16()), "name": ["c"]})  # narrower id: no change
    job = table.write_job(schema=data.schema, schema_mode="merge")
    assert job.schema_update is None
    job.commit(job.write(data))
    t = ctfile.open_table(table.uri)
    assert t.schema == BASE and "schemaMode" not in t.history(limit=1)[0].operation_parameters


# ---------------------------------------------------------------- write_job(schema_mode="overwrite")


def test_overwrite_schema_replaces_rows_and_schema_in_one_version(table):
    data = pa.table({"id": pa.array([7], pa.int32()), "score": [0.5]})
    with pytest.raises(ctfile.InvalidArgumentError, match="needs mode 'overwrite', found 'append'"):
        table.write_job(schema=data.schema, schema_mode="overwrite")
    r = write(table, data, mode="overwrite", schema_mode="overwrite")
    assert r.version == 2
    t = ctfile.open_table(table.uri)
    # id kept its id (same name and type); score is new; name's id 2 is retired.
    assert [(f.id, f.name) for f in t.schema_at().fields] == [(1, "id"), (3, "score")]
    assert t.to_arrow().to_pylist() == [{"id": 7, "score": 0.5}]
    # SPEC §Change scans: deletes of every old row, inserts of the new, in the new schema.
    rows = t.changes(start_version=2).to_arrow().select(["id", "score", "METADATA$ACTION"]).to_pylist()
    assert sorted(rows, key=lambda r: (r["METADATA$ACTION"], r["id"])) == [
        {"id": 1, "score": None, "METADATA$ACTION": "DELETE"},
        {"id": 2, "score": None, "METADATA$ACTION": "DELETE"},
        {"id": 7, "score": 0.5, "METADATA$ACTION": "INSERT"},
    ]
    # The old version still reads in its own schema.
    assert t.snapshot(1).schema == BASE


def test_schema_mode_is_checked(table):
    with pytest.raises(ctfile.InvalidArgumentError, match="schema_mode must be one of merge, overwrite"):
        table.write_job(schema=BASE, schema_mode="replace")
    with pytest.raises(ctfile.InvalidArgumentError, match="needs the schema of the data"):
        table.write_job(schema_mode="merge")


def test_merge_of_nested_fields_writes_and_reads_back(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("addr", pa.struct([("zip", pa.int32()), ("street", pa.string())]))])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"id": [1], "addr": [{"zip": 1, "street": "s"}]}, schema=schema))
    # zip widened, city added; street missing from the data (null there).
    addr = pa.struct([("zip", pa.int64()), ("city", pa.string())])
    write(t, pa.table({"id": [2], "addr": pa.array([{"zip": 2**40, "city": "c"}], addr)}), schema_mode="merge")
    t = ctfile.open_table(t.uri)
    assert t.schema.field("addr").type == pa.struct([("zip", pa.int64()), ("street", pa.string()), ("city", pa.string())])
    assert t.to_arrow().sort_by("id").column("addr").to_pylist() == [
        {"zip": 1, "street": "s", "city": None}, {"zip": 2**40, "street": None, "city": "c"}
    ]
