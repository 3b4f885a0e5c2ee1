"""``Table.update_schema()`` and change scans across schema changes
(SPEC §Schema evolution, §Change scans)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import FEATURE_SCHEMA_EVOLUTION
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError, UnsupportedFeatureError
from ctfile.format.paths import commit_path

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("n", pa.int32())])


def make(tmp_path, **props) -> ctfile.Table:
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, properties=props or None)
    t.insert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "n": pa.array([10, 20, 30], pa.int32())}))
    return t


def log_entry(t: ctfile.Table, version: int) -> list[dict]:
    return [json.loads(line) for line in t.storage.read_bytes(commit_path(version)).decode().splitlines()]


def rows(cs) -> list[dict]:
    out = cs.to_arrow().drop_columns(["METADATA$ROW_ID"]).to_pylist()
    return sorted(out, key=lambda r: (r["id"], r["METADATA$ACTION"]))


def test_one_version_per_block_and_nothing_when_nothing_changes(tmp_path):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.add_column("email", pa.string()).rename_column("name", "full_name")
    assert (t.version, u.result.version, u.result.operation) == (2, 2, "SCHEMA CHANGE")
    with t.update_schema() as u:
        u.rename_column("full_name", "full_name")
    assert u.result is None and t.version == 2
    entry = log_entry(t, 2)
    info = entry[0]["commitInfo"]
    assert info["dataChange"] is False and info["operationParameters"]["changes"] == [
        {"change": "add", "path": "email", "detail": "string"},
        {"change": "rename", "path": "name", "detail": "full_name"},
    ]
    assert not any("add" in a or "remove" in a for a in entry)


def test_a_refused_change_or_an_exception_leaves_the_table_untouched(tmp_path, file_tree):
    t = make(tmp_path)
    before = file_tree(t.uri)
    with pytest.raises(SchemaMismatchError, match="from integer to short"):
        with t.update_schema() as u:
            u.add_column("email", pa.string())
            u.widen_column("n", pa.int16())
    with pytest.raises(RuntimeError):
        with t.update_schema() as u:
            u.add_column("email", pa.string())
            raise RuntimeError("changed my mind")
    assert file_tree(t.uri) == before and t.version == 1


def test_the_feature_is_added_only_by_changes_older_readers_would_misread(tmp_path):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.add_column("email", pa.string()).make_nullable("id").move_column("email", first=True)
    assert FEATURE_SCHEMA_EVOLUTION not in t.snapshot().protocol.reader_features
    assert not any("protocol" in a for a in log_entry(t, 2))
    with t.update_schema() as u:
        u.widen_column("n", pa.int64())
    protocol = t.snapshot().protocol
    assert FEATURE_SCHEMA_EVOLUTION in protocol.reader_features and FEATURE_SCHEMA_EVOLUTION in protocol.writer_features
    with t.update_schema() as u:
        u.drop_column("email")
    assert not any("protocol" in a for a in log_entry(t, 4))  # added once, kept


def test_a_reader_without_the_feature_refuses_the_table(tmp_path, monkeypatch):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.rename_column("name", "full_name")
    # A revision 3 reader: the same code without the feature among those it supports.
    from ctfile.format import actions
    from ctfile.log import replay

    monkeypatch.setattr(replay, "SUPPORTED_READER_FEATURES", actions.SUPPORTED_READER_FEATURES - {FEATURE_SCHEMA_EVOLUTION})
    with pytest.raises(UnsupportedFeatureError, match="schemaEvolution"):
        ctfile.open_table(t.uri).to_arrow()


def test_retired_ids_survive_a_metadata_rewrite(tmp_path):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.drop_column("n")  # id 3, the highest
    t.set_properties({"owner": "me"})  # rewrites metadata: lastFieldId must stay
    assert log_entry(t, 3)[-1]["metadata"]["lastFieldId"] == 3
    with t.update_schema() as u:
        u.add_column("n", pa.int32())
    assert t.snapshot().table_schema.field("n").id == 4
    assert t.to_arrow().column("n").to_pylist() == [None, None, None]  # old values never reappear


def test_snapshots_of_each_version_have_that_versions_schema(tmp_path):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.rename_column("name", "full_name").widen_column("n", pa.int64()).add_column("email", pa.string())
    t.insert(pa.table({"id": [4], "full_name": ["d"], "n": [2**40], "email": ["d@x"]}))
    assert t.snapshot(1).schema == SCHEMA
    assert t.snapshot(1).to_arrow().num_rows == 3
    latest = t.to_arrow().sort_by("id")
    assert latest.schema.names == ["id", "full_name", "n", "email"] and latest.schema.field("n").type == pa.int64()
    assert latest.to_pylist()[0] == {"id": 1, "full_name": "a", "n": 10, "email": None}
    assert latest.to_pylist()[3] == {"id": 4, "full_name": "d", "n": 2**40, "email": "d@x"}
    # Filters on the new name prune and select by field id across files.
    assert t.to_arrow(filter=pc.field("full_name") == "b").column("id").to_pylist() == [2]


def test_a_schema_change_must_come_first_in_its_transaction(tmp_path):
    t = make(tmp_path)
    with pytest.raises(InvalidArgumentError, match="before the statements"):
        with t.transaction() as tx:
            tx.insert(pa.table({"id": [9], "name": ["z"], "n": pa.array([1], pa.int32())}))
            tx.evolve_schema(lambda e: e.add_column("email", pa.string()))
    with t.transaction() as tx:  # first: the statements then write the new schema
        tx.evolve_schema(lambda e: e.add_column("email", pa.string()))
        tx.insert(pa.table({"id": [9], "name": ["z"], "n": pa.array([1], pa.int32()), "email": ["z@x"]}))
    assert t.to_arrow(filter=pc.field("id") == 9).column("email").to_pylist() == ["z@x"]


# ---------------------------------------------------------------- change scans


@pytest.mark.parametrize("capture", [False, True])
def test_change_scans_across_a_schema_change_are_in_the_end_schema(tmp_path, capture):
    t = make(tmp_path, **({"ctfile.changeCapture": "before_after"} if capture else {}))
    t.update(pc.field("id") == 1, {"name": "A"})  # v2: before the change, old schema
    with t.update_schema() as u:  # v3
        u.rename_column("name", "full_name").widen_column("n", pa.int64()).add_column("email", pa.string())
    t.update(pc.field("id") == 2, {"email": "b@x"})  # v4: differs only in a new column: still a pair
    t.delete(pc.field("id") == 3)  # v5
    cs = t.changes(start_version=2, end_version=5)
    assert cs.plan_shape.value == ("CAPTURED" if capture else "MINIMIZE")
    assert cs.schema.names[:4] == ["id", "full_name", "n", "email"] and cs.schema.field("n").type == pa.int64()
    assert rows(cs) == [
        {"id": 1, "full_name": "a", "n": 10, "email": None, "METADATA$ACTION": "DELETE", "METADATA$ISUPDATE": True},
        {"id": 1, "full_name": "A", "n": 10, "email": None, "METADATA$ACTION": "INSERT", "METADATA$ISUPDATE": True},
        {"id": 2, "full_name": "b", "n": 20, "email": None, "METADATA$ACTION": "DELETE", "METADATA$ISUPDATE": True},
        {"id": 2, "full_name": "b", "n": 20, "email": "b@x", "METADATA$ACTION": "INSERT", "METADATA$ISUPDATE": True},
        {"id": 3, "full_name": "c", "n": 30, "email": None, "METADATA$ACTION": "DELETE", "METADATA$ISUPDATE": False},
    ]
    audit = t.changes(start_version=2, end_version=5, information="audit").to_arrow()
    assert audit.schema.names[:4] == ["id", "full_name", "n", "email"]
    assert sorted(set(audit.column("METADATA$COMMIT_VERSION").to_pylist())) == [2, 4, 5]  # v3 is not a data change
    # An interval ending before the change has the old schema.
    assert t.changes(start_version=2, end_version=2).schema.names[:3] == ["id", "name", "n"]
    assert t.changes(start_version=3, end_version=3).to_arrow().num_rows == 0


def test_a_pair_differing_only_in_a_dropped_column_is_not_output(tmp_path):
    t = make(tmp_path)
    t.update(pc.field("id") == 1, {"n": 11})  # v2
    with t.update_schema() as u:
        u.drop_column("n")  # v3
    assert t.changes(start_version=2).to_arrow().num_rows == 0
    assert t.changes(start_version=2, end_version=2).to_arrow().num_rows == 2  # in the schema of v2: a pair


def test_append_only_and_initial_rows_project_too(tmp_path):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.add_column("email", pa.string()).drop_column("name")
    t.insert(pa.table({"id": [4], "n": pa.array([40], pa.int32()), "email": ["d@x"]}))
    got = t.changes(start_version=1, information="append_only").to_arrow().sort_by("id")
    assert got.select(["id", "n", "email"]).to_pylist() == [
        {"id": 1, "n": 10, "email": None}, {"id": 2, "n": 20, "email": None},
        {"id": 3, "n": 30, "email": None}, {"id": 4, "n": 40, "email": "d@x"},
    ]
    init = t.changes(start_version=3, initial_rows=True).to_arrow()
    assert init.num_rows == 4 and "name" not in init.column_names


def test_a_filter_names_the_columns_of_the_intervals_end(tmp_path):
    t = make(tmp_path)
    t.update(pc.field("id") == 1, {"name": "A"})  # v2
    with t.update_schema() as u:
        u.rename_column("name", "full_name")  # v3
    old = t.changes(start_version=2, end_version=2, filter=pc.field("name") == "A").to_arrow()
    assert old.column("name").to_pylist() == ["A"]
    new = t.changes(start_version=2, filter=pc.field("full_name") == "a").to_arrow()
    assert new.column("full_name").to_pylist() == ["a"]
    with pytest.raises(SchemaMismatchError, match="full_name"):
        t.changes(start_version=2, filter=pc.field("name") == "A")


def test_retired_ids_survive_a_checkpoint(tmp_path):
    t = make(tmp_path)
    with t.update_schema() as u:
        u.drop_column("n")
    t.checkpoint()
    reopened = ctfile.open_table(t.uri)
    assert reopened.snapshot().metadata.assigned_field_ids == 3
    with reopened.update_schema() as u:
        u.add_column("n", pa.int32())
    assert reopened.snapshot().table_schema.field("n").id == 4
