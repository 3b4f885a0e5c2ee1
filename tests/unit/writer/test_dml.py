"""Copy-on-write DML: update, delete, merge, truncate, overwrite."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError


def _by_id(t: ctfile.Table, *, hidden: bool = False) -> dict[int, dict]:
    got = t.to_arrow(include_hidden=hidden)
    return {r["id"]: r for r in got.to_pylist()}


@pytest.fixture
def t3(new_table, make_rows):
    """partition_rows=10; version 1 inserts ids 0..29 as three partitions."""
    t = new_table(partition_rows=10)
    t.insert(make_rows(30))
    assert len(t.snapshot().partitions) == 3
    return t


def _log_files(t):
    return sorted(i.path for i in t.storage.list_dir("_ct_log"))


def _data_files(t):
    return sorted(i.path for i in t.storage.list_dir("data"))


# ---------------------------------------------------------------- UPDATE


def test_update_with_expression(t3):
    before = _by_id(t3, hidden=True)
    r = t3.update(pc.field("id") < 5, {"x": pc.field("x") * 2, "s": pc.scalar("u")})
    assert (r.version, r.committed, r.num_updated_rows, r.num_copied_rows) == (2, True, 5, 5)
    assert (r.num_added_partitions, r.num_removed_partitions) == (1, 1)
    after = _by_id(t3, hidden=True)
    for i in range(30):
        row, old = after[i], before[i]
        assert row["_ct_row_id"] == old["_ct_row_id"]  # lineage kept
        if i < 5:
            assert (row["x"], row["s"], row["_ct_row_version"]) == (i * 20, "u", 2)
        else:
            assert (row["x"], row["s"], row["_ct_row_version"]) == (i * 10, f"s{i}", 1)


def test_update_with_scalars_and_null(t3):
    r = t3.update(pc.field("id").isin([3, 13, 23]), {"x": None, "s": "z"})
    assert r.num_updated_rows == 3 and r.num_removed_partitions == 3
    rows = _by_id(t3)
    assert [(rows[i]["x"], rows[i]["s"]) for i in (3, 13, 23)] == [(None, "z")] * 3
    assert rows[4]["x"] == 40


def test_update_evaluates_set_only_for_matched_rows(t3):
    """As in SQL, a SET expression is computed for the rows the predicate
    matches: one that fails on an excluded row (integer division by zero for
    id 0, whose x is 0) does not fail the statement."""
    r = t3.update(pc.field("x") != 0, {"x": pc.divide(pc.scalar(1000), pc.field("x"))})
    assert r.num_updated_rows == 29
    rows = _by_id(t3)
    assert rows[0]["x"] == 0 and rows[1]["x"] == 100 and rows[29]["x"] == 3


def test_merge_leaves_columns_it_does_not_change_byte_identical(t3):
    """An upsert that sends every column but changes one rewrites only that
    column: the other column chunks of the rewritten file are identical to
    the old file's, which the change scan uses to decode them once."""
    from ctfile.reader.partition_reader import same_columns

    old = {p.first_row_id: p for p in t3.snapshot().partitions}
    src = t3.to_arrow().filter(pc.field("id") < 4)
    src = src.set_column(src.schema.get_field_index("s"), "s", pa.array(["new"] * src.num_rows))
    r = t3.merge(src, "id", when_matched="update", when_not_matched="insert")
    assert (r.num_updated_rows, r.num_inserted_rows) == (4, 0)
    (removed,) = [p for p in old.values() if p.path not in {q.path for q in t3.snapshot().partitions}]
    (added,) = [p for p in t3.snapshot().partitions if p.path not in {q.path for q in old.values()}]
    shared = same_columns(t3.storage, removed, added, t3.snapshot().table_schema)
    assert shared == set(t3.snapshot().schema.names) - {"s"}


def test_update_all_rows(t3):
    r = t3.update(None, {"x": 0})
    assert r.num_updated_rows == 29  # id 0 already had x == 0
    assert set(t3.to_arrow().column("x").to_pylist()) == {0}


def test_update_same_value_commits_nothing(t3):
    logs, data = _log_files(t3), _data_files(t3)
    r = t3.update(pc.field("id") < 15, {"x": pc.field("x"), "s": pc.field("s")})
    assert (r.committed, r.version, r.num_updated_rows) == (False, 1, 0)
    assert _log_files(t3) == logs and _data_files(t3) == data
    r = t3.update(pc.field("id") == 7, {"x": 70})
    assert r.committed is False


def test_partial_no_op_update_keeps_unchanged_row_versions(t3):
    r = t3.update(pc.field("id") < 4, {"x": 20})  # id 2 already has x == 20
    assert r.num_updated_rows == 3
    rows = _by_id(t3, hidden=True)
    assert rows[2]["_ct_row_version"] == 1
    assert [rows[i]["_ct_row_version"] for i in (0, 1, 3)] == [2, 2, 2]


def test_nan_to_nan_and_equal_nested_values_are_no_ops(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64()), ("tags", pa.list_(pa.string()))])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"id": [1, 2], "f": [float("nan"), 1.0], "tags": [["a"], ["b", "c"]]}, schema=schema))
    # NaN to NaN and a list to an equal list change nothing: nothing commits.
    assert t.update(pc.field("id") == 1, {"f": float("nan")}).committed is False
    assert t.update(pc.field("id") == 2, {"tags": pa.scalar(["b", "c"], pa.list_(pa.string()))}).committed is False
    # A real change still commits, and only the changed row gets a new version.
    r = t.update(pc.field("id") >= 1, {"f": float("nan")})
    assert (r.committed, r.num_updated_rows) == (True, 1)
    r = t.update(pc.field("id") == 2, {"tags": pa.scalar(["b"], pa.list_(pa.string()))})
    assert (r.committed, r.num_updated_rows) == (True, 1)
    rows = {row["id"]: row for row in t.to_arrow(include_hidden=True).to_pylist()}
    assert rows[1]["_ct_row_version"] == 1 and rows[2]["_ct_row_version"] == 3
    assert rows[2]["tags"] == ["b"]


@pytest.mark.parametrize(
    "where, set_, err, match",
    [
        (pc.field("id") == 1, {"nope": 1}, SchemaMismatchError, "unknown column 'nope'"),
        (pc.field("id") == 1, {"x": "abc"}, SchemaMismatchError, "does not fit column type"),
        (pc.field("id") == 1, {"id": None}, SchemaMismatchError, "not nullable"),
        (pc.field("id") == 1, {"x": pc.field("missing")}, SchemaMismatchError, "does not fit"),
        (pc.field("missing") == 1, {"x": 1}, SchemaMismatchError, "does not fit the table schema"),
        (pc.field("id") == 1, {}, InvalidArgumentError, "non-empty mapping"),
        ("id = 1", {"x": 1}, InvalidArgumentError, "must be a pyarrow.compute.Expression"),
    ],
)
def test_update_errors(t3, file_tree, where, set_, err, match):
    before = file_tree(t3.storage.root)
    with pytest.raises(err, match=match):
        t3.update(where, set_)
    assert file_tree(t3.storage.root) == before


def test_update_expression_producing_null_in_not_null_column(t3, file_tree):
    before = file_tree(t3.storage.root)
    with pytest.raises(SchemaMismatchError, match="non-nullable column 'id'"):
        t3.update(pc.field("id") == 1, {"id": pc.field("x") / pc.scalar(pa.scalar(None, pa.int64()))})
    assert file_tree(t3.storage.root) == before


def test_update_expression_overflowing_column_type(new_table, file_tree):
    t = new_table(pa.schema([("id", pa.int64()), ("small", pa.int8())]))
    t.insert(pa.table({"id": [1], "small": pa.array([100], pa.int8())}))
    before = file_tree(t.storage.root)
    with pytest.raises(SchemaMismatchError):
        t.update(None, {"small": pc.field("id") + 1000})
    assert file_tree(t.storage.root) == before


# ---------------------------------------------------------------- DELETE


def test_delete_rewrites_partition(t3):
    before = _by_id(t3, hidden=True)
    r = t3.delete(pc.field("id").isin([1, 2]))
    assert (r.version, r.num_deleted_rows, r.num_copied_rows) == (2, 2, 8)
    assert (r.num_added_partitions, r.num_removed_partitions) == (1, 1)
    after = _by_id(t3, hidden=True)
    assert sorted(after) == [i for i in range(30) if i not in (1, 2)]
    for i, row in after.items():
        assert (row["_ct_row_id"], row["_ct_row_version"]) == (before[i]["_ct_row_id"], 1)


def test_delete_no_match_commits_nothing(t3):
    logs, data = _log_files(t3), _data_files(t3)
    r = t3.delete(pc.field("id") > 1000)
    assert (r.committed, r.version, r.num_deleted_rows) == (False, 1, 0)
    r = t3.delete(pc.field("s") == "nope")  # read but nothing matched
    assert r.committed is False
    assert _log_files(t3) == logs and _data_files(t3) == data


def test_delete_whole_partition_by_stats_is_metadata_only(t3):
    data = _data_files(t3)
    r = t3.delete((pc.field("id") >= 10) & (pc.field("id") < 20))
    assert (r.committed, r.num_deleted_rows, r.num_copied_rows) == (True, 10, 0)
    assert (r.num_added_partitions, r.num_removed_partitions) == (0, 1)
    assert _data_files(t3) == data  # no file written (and none deleted: time travel)
    assert sorted(t3.to_arrow().column("id").to_pylist()) == list(range(10)) + list(range(20, 30))


def test_delete_whole_partition_by_reading(t3):
    # `s` has no useful bounds for this predicate: the partition is read,
    # every row matches, and no empty file is written.
    data = _data_files(t3)
    r = t3.delete(pc.field("s").isin([f"s{i}" for i in range(10)]))
    assert (r.num_deleted_rows, r.num_added_partitions, r.num_removed_partitions) == (10, 0, 1)
    assert _data_files(t3) == data


def test_delete_with_nulls_in_predicate_keeps_null_rows(new_table):
    t = new_table()
    t.insert(pa.table({"id": [1, 2, 3], "x": [1, None, 5]}))
    t.delete(pc.field("x") < 3)
    assert sorted(t.to_arrow().column("id").to_pylist()) == [2, 3]
    t.delete(~(pc.field("x") < 3))
    assert t.to_arrow().column("id").to_pylist() == [2]


def test_delete_errors(t3):
    with pytest.raises(SchemaMismatchError):
        t3.delete(pc.field("nope") == 1)
    with pytest.raises(InvalidArgumentError):
        t3.delete(None)
    assert t3.refresh().version == 1


# ---------------------------------------------------------------- MERGE


def _src(ids, xs, ss=None):
    cols = {"id": pa.array(ids, pa.int64()), "x": pa.array(xs, pa.int64())}
    if ss is not None:
        cols["s"] = pa.array(ss, pa.string())
    return pa.table(cols)


def test_merge_update_and_insert(t3):
    before = _by_id(t3, hidden=True)
    r = t3.merge(_src([5, 25, 100, 101], [-5, -25, -100, -101], ["a", "b", "c", "d"]), "id")
    assert (r.committed, r.version, r.operation) == (True, 2, "MERGE")
    assert (r.num_updated_rows, r.num_inserted_rows) == (2, 2)
    assert r.num_removed_partitions == 2
    rows = _by_id(t3, hidden=True)
    assert len(rows) == 32
    assert (rows[5]["x"], rows[5]["s"], rows[5]["_ct_row_version"]) == (-5, "a", 2)
    assert rows[5]["_ct_row_id"] == before[5]["_ct_row_id"]
    assert (rows[100]["x"], rows[100]["s"]) == (-100, "c")
    assert rows[100]["_ct_row_id"] >= 30  # fresh ids, beyond every earlier one
    assert rows[6]["_ct_row_version"] == 1
    params = t3.history(limit=1)[0].operation_parameters
    assert params == {"on": "id", "whenMatched": "update", "whenNotMatched": "insert"}


def test_merge_updates_only_source_columns(t3):
    t3.merge(_src([7], [777]), "id")  # no `s` in the source: kept
    rows = _by_id(t3)
    assert (rows[7]["x"], rows[7]["s"]) == (777, "s7")


def test_merge_delete(t3):
    r = t3.merge(_src([1, 2, 500], [0, 0, 0]), "id", when_matched="delete", when_not_matched=None)
    assert (r.num_deleted_rows, r.num_inserted_rows) == (2, 0)
    assert sorted(_by_id(t3)) == [i for i in range(30) if i not in (1, 2)]


def test_merge_insert_only(t3):
    before = _by_id(t3, hidden=True)
    r = t3.merge(_src([3, 40], [-3, -40]), "id", when_matched=None)
    assert (r.num_inserted_rows, r.num_updated_rows, r.num_removed_partitions) == (1, 0, 0)
    rows = _by_id(t3, hidden=True)
    assert rows[3] == before[3]
    assert rows[40]["x"] == -40 and rows[40]["s"] is None


def test_merge_matching_with_equal_values_is_no_op(t3):
    logs = _log_files(t3)
    r = t3.merge(_src([4, 5], [40, 50], ["s4", "s5"]), "id")
    assert (r.committed, r.version) == (False, 1)
    assert _log_files(t3) == logs


def test_merge_composite_key(new_table):
    t = new_table(pa.schema([("a", pa.int64()), ("b", pa.string()), ("v", pa.int64())]))
    t.insert(pa.table({"a": [1, 1, 2], "b": ["x", "y", "x"], "v": [1, 2, 3]}))
    t.merge(pa.table({"a": [1, 2], "b": ["y", "y"], "v": [20, 30]}), ["a", "b"])
    got = sorted(tuple(r.values()) for r in t.to_arrow().to_pylist())
    assert got == [(1, "x", 1), (1, "y", 20), (2, "x", 3), (2, "y", 30)]


@pytest.mark.parametrize(
    "source, kwargs, err, match",
    [
        (_src([1, 1], [0, 1]), {}, InvalidArgumentError, "same key"),
        (pa.table({"x": [1]}), {}, SchemaMismatchError, "'id'.* is missing"),
        (pa.table({"id": [1], "s": ["a"]}), {"on": "x"}, SchemaMismatchError, "merge key 'x' is missing from the source"),
        (_src([1], [1]), {"on": "x2"}, SchemaMismatchError, "merge key 'x2'"),
        (_src([1], [1]).append_column("zz", pa.array([1])), {}, SchemaMismatchError, "not in the table"),
        (_src([1], [1]), {"when_matched": "upsert"}, InvalidArgumentError, "when_matched"),
        (_src([1], [1]), {"when_not_matched": "delete"}, InvalidArgumentError, "when_not_matched"),
        (_src([1], [1]), {"when_matched": None, "when_not_matched": None}, InvalidArgumentError, "both are None"),
        (_src([1], [1]), {"on": []}, InvalidArgumentError, "key columns"),
    ],
)
def test_merge_errors(t3, file_tree, source, kwargs, err, match):
    kwargs = {"on": "id", **kwargs}
    before = file_tree(t3.storage.root)
    with pytest.raises(err, match=match):
        t3.merge(source, **kwargs)
    assert file_tree(t3.storage.root) == before


# ---------------------------------------------------------------- TRUNCATE / OVERWRITE


def test_truncate(t3):
    data = _data_files(t3)
    r = t3.truncate()
    assert (r.version, r.num_deleted_rows, r.num_removed_partitions, r.num_added_partitions) == (2, 30, 3, 0)
    assert t3.to_arrow().num_rows == 0
    assert _data_files(t3) == data  # metadata only; old version still readable
    assert t3.snapshot(1).to_arrow().num_rows == 30
    r = t3.truncate()
    assert r.committed is False


def test_overwrite(t3, make_rows):
    r = t3.overwrite(make_rows(4, start=100))
    assert (r.version, r.operation, r.num_inserted_rows, r.num_deleted_rows) == (2, "OVERWRITE", 4, 30)
    assert sorted(t3.to_arrow().column("id").to_pylist()) == [100, 101, 102, 103]
    hidden = t3.to_arrow(include_hidden=True)
    assert set(hidden.column("_ct_row_version").to_pylist()) == {2}
    assert min(hidden.column("_ct_row_id").to_pylist()) >= 30


def test_overwrite_with_bad_data_changes_nothing(t3, file_tree):
    before = file_tree(t3.storage.root)
    with pytest.raises(SchemaMismatchError):
        t3.overwrite(pa.table({"id": ["not", "ints"]}))
    assert file_tree(t3.storage.root) == before
    assert t3.to_arrow().num_rows == 30
