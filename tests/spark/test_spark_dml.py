"""MERGE, UPDATE and DELETE through ``ctfile.spark.CtfileTable`` behave as the
Python helpers do, on twin tables (:mod:`dml_helpers`); errors are typed and
leave the table directory as it was: no new file, no new version. Exactly
once and concurrency: ``test_spark_dml_concurrency.py``.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import ctfile
from ctfile.spark import CtfileTable
from dml_helpers import (
    ROW_VERSION, SPARK_SCHEMA, assert_same, change_rows_all, counts, files, people_data, row_ids, source, twins,
    watching,
)
from spark_helpers import spark_conf


# ---------------------------------------------------------------- same results as the Python helpers


def test_merge_update_and_insert(spark, tmp_path):
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    rows = [(2, "two", 21), (7, "seven", 71), (12, "twelve", 121), (20, "twenty", 200), (21, None, None)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(pa.table(list(zip(*rows)), names=["id", "name", "qty"]), "id")
    assert (r1.num_updated_rows, r1.num_inserted_rows) == (3, 2)
    assert_same(st, pt, r1, r2, old)


def test_merge_of_a_source_too_large_to_broadcast(spark, tmp_path):
    """With broadcasting off (a source above ``autoBroadcastJoinThreshold``)
    the MERGE joins by sort-merge, with the same result."""
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    rows = [(3, "three", 31), (8, None, 81), (30, "thirty", 300), (31, None, None)]
    with spark_conf(spark, "spark.sql.autoBroadcastJoinThreshold", "-1"):
        r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(pa.table(list(zip(*rows)), names=["id", "name", "qty"]), "id")
    assert (r1.num_updated_rows, r1.num_inserted_rows) == (2, 2)
    assert_same(st, pt, r1, r2, old)


def test_merge_leaves_the_callers_cache_alone(spark, tmp_path):
    """A source the caller persisted (to write a micro-batch to two tables,
    say) is still cached after the MERGE; one it did not is not left cached."""
    st, _ = twins(tmp_path)
    t = CtfileTable.for_path(spark, st.uri)
    mine = source(spark, [(1, "a", 1), (40, "b", 2)]).persist()
    assert mine.count() == 2 and mine.is_cached
    t.merge(mine, "id")
    assert mine.is_cached
    mine.unpersist()
    theirs = source(spark, [(2, "a", 1), (41, "b", 2)])
    t.merge(theirs, "id")
    assert not theirs.is_cached


def test_keyed_delete(spark, tmp_path):
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    rows = [(1, "x", 0), (6, "x", 0), (11, "x", 0), (99, "absent", 0)]
    keyed_delete = {"when_matched": "delete", "when_not_matched": None}
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id", **keyed_delete)
    r2 = pt.merge(spark.createDataFrame(rows, SPARK_SCHEMA).toArrow(), "id", **keyed_delete)
    assert r1.num_deleted_rows == 3 and r1.num_inserted_rows == 0
    assert_same(st, pt, r1, r2, old)


def test_insert_only_merge(spark, tmp_path):
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    rows = [(3, "not applied", 0), (30, "thirty", 300), (31, "thirty-one", 310)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id", when_matched=None)
    r2 = pt.merge(spark.createDataFrame(rows, SPARK_SCHEMA).toArrow(), "id", when_matched=None)
    assert (r1.num_inserted_rows, r1.num_updated_rows, r1.num_removed_partitions) == (2, 0, 0)
    assert_same(st, pt, r1, r2, old)


def test_update_only_merge_of_some_columns(spark, tmp_path):
    """A source with the key and one column: the other columns keep their values."""
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    rows = [(4, 4000), (5, 5000), (50, 1)]
    src = spark.createDataFrame(rows, "id long, qty long")
    r1 = CtfileTable.for_path(spark, st.uri).merge(src, "id", when_not_matched=None)
    r2 = pt.merge(src.toArrow(), "id", when_not_matched=None)
    assert (r1.num_updated_rows, r1.num_inserted_rows) == (2, 0)
    assert_same(st, pt, r1, r2, old)
    names = {r["id"]: r["name"] for r in st.to_arrow().to_pylist()}
    assert (names[4], names[5]) == ("n4", "n5")


def test_multi_column_keys(spark, tmp_path):
    schema = pa.schema(
        [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string(), nullable=False), ("v", pa.int64())]
    )
    data = pa.table({"a": [1, 1, 2, 2, 3, 3, 4, 4], "b": list("xyxyxyxy"), "v": list(range(8))}, schema=schema)
    st, pt = twins(tmp_path, schema, data)
    old = row_ids(pt)
    rows = [(1, "y", 100), (2, "x", 200), (3, "z", 300), (5, "x", 500)]  # (1,y), (2,x) match; (3,z), (5,x) do not
    src = spark.createDataFrame(rows, "a long, b string, v long")
    r1 = CtfileTable.for_path(spark, st.uri).merge(src, ["a", "b"])
    r2 = pt.merge(src.toArrow(), ["a", "b"])
    assert (r1.num_updated_rows, r1.num_inserted_rows) == (2, 2)
    assert_same(st, pt, r1, r2, old)


def test_null_keys_are_inserted_never_matched(spark, tmp_path):
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    data = pa.table({"k": ["a", None, "b", "c"], "v": [1, 2, 3, 4]}, schema=schema)
    st, pt = twins(tmp_path, schema, data, partition_rows=2)
    old = row_ids(pt)
    src = spark.createDataFrame([(None, 20), ("b", 30)], "k string, v long")
    r1 = CtfileTable.for_path(spark, st.uri).merge(src, "k")
    r2 = pt.merge(src.toArrow(), "k")
    assert (r1.num_updated_rows, r1.num_inserted_rows) == (1, 1)
    assert_same(st, pt, r1, r2, old)
    assert sorted(r["v"] for r in st.to_arrow().to_pylist() if r["k"] is None) == [2, 20]


def test_update_with_column_string_and_literal_values(spark, tmp_path):
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    r1 = CtfileTable.for_path(spark, st.uri).update(
        F.col("id").isin(3, 6, 9, 12), {"qty": F.col("qty") * 2 + 1, "name": "upper(name)"}
    )
    r2 = pt.update(
        pc.field("id").isin([3, 6, 9, 12]),
        {"qty": pc.add(pc.multiply(pc.field("qty"), 2), 1), "name": pc.utf8_upper(pc.field("name"))},
    )
    assert r1.num_updated_rows == 4
    assert_same(st, pt, r1, r2, old)

    old = row_ids(pt)
    r1 = CtfileTable.for_path(spark, st.uri).update("id > 9", {"qty": 0, "name": None})
    r2 = pt.update(pc.field("id") > 9, {"qty": 0, "name": None})
    assert r1.num_updated_rows == 3
    assert_same(st, pt, r1, r2, old)


def test_delete_without_condition_deletes_every_row(spark, tmp_path):
    st, pt = twins(tmp_path)
    r1 = CtfileTable.for_path(spark, st.uri).delete()
    r2 = pt.delete(pc.scalar(True))
    assert r1.num_deleted_rows == 12 and st.refresh().to_arrow().num_rows == 0
    assert_same(st, pt, r1, r2, set())


def test_delete_with_condition(spark, tmp_path):
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    r1 = CtfileTable.for_path(spark, st.uri).delete("qty between 35 and 75")
    r2 = pt.delete((pc.field("qty") >= 35) & (pc.field("qty") <= 75))
    assert r1.num_deleted_rows == 4
    assert_same(st, pt, r1, r2, old)


def test_clustered_table(spark, tmp_path):
    data = people_data(12)
    data = data.take(pa.array([11, 3, 7, 0, 9, 5, 1, 10, 2, 6, 4, 8]))  # inserted out of key order
    st, pt = twins(tmp_path, data=data, properties={"ctfile.clusterBy": "id"})
    old = row_ids(pt)
    rows = [(3, "three", 33), (8, "eight", 88), (13, "thirteen", 130), (0, "zero", 0)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(spark.createDataFrame(rows, SPARK_SCHEMA).toArrow(), "id")
    assert_same(st, pt, r1, r2, old)
    # Rewritten and inserted partitions are sorted by the clustering key, as the Python path writes them.
    before = {p.path for p in st.snapshot(r1.version - 1).partitions}
    written = [p for p in st.snapshot().partitions if p.path not in before]
    assert written
    for p in written:
        task = ctfile.ScanTask(ctfile.TableLocation(st.uri), st.schema_at(), p, ("id",))
        ids = pa.Table.from_batches(list(task.to_batches())).column("id").to_pylist()
        assert ids == sorted(ids), (p.path, ids)


def test_auto_compaction_follows_as_after_a_python_statement(spark, tmp_path):
    """``ctfile.autoCompact``: the small partitions a MERGE leaves are
    compacted in a follow-up commit, reported in ``auto_compaction``."""
    st, pt = twins(tmp_path, partition_rows=40, properties={"ctfile.autoCompact": "true", "ctfile.clusterBy": "id"})
    for t in (st, pt):  # three small partitions: one fewer than an automatic compaction needs
        assert t.insert(people_data(14).slice(12)).auto_compaction is None
    old = row_ids(pt)
    rows = [(2, "two", 21), (9, "nine", 91), (30, "thirty", 300)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(pa.table(list(zip(*rows)), names=["id", "name", "qty"]), "id")
    assert r1.auto_compaction is not None and r1.auto_compaction.committed
    assert counts(r1.auto_compaction) == counts(r2.auto_compaction)
    assert_same(st, pt, r1, r2, old)
    sizes = lambda t: sorted(p.num_records for p in t.snapshot().partitions)  # noqa: E731
    assert sizes(st) == sizes(pt)


def test_change_capture_scans_equal_in_every_mode(spark, tmp_path):
    st, pt = twins(tmp_path, properties={"ctfile.changeCapture": "before_after"})
    spark_t = CtfileTable.for_path(spark, st.uri)
    modes = ("default", "append_only", "audit")

    old = row_ids(pt)
    rows = [(2, "two", 21), (8, "eight", 81), (40, "forty", 400)]
    r1 = spark_t.merge(source(spark, rows), "id")
    r2 = pt.merge(spark.createDataFrame(rows, SPARK_SCHEMA).toArrow(), "id")
    assert_same(st, pt, r1, r2, old, modes=modes)
    assert any(p.startswith("_ct_changes/") for p in files(st))  # the executors wrote change files

    old = row_ids(pt)
    r1 = spark_t.update("id <= 4", {"qty": "qty + 1"})
    r2 = pt.update(pc.field("id") <= 4, {"qty": pc.add(pc.field("qty"), 1)})
    assert_same(st, pt, r1, r2, old, modes=modes)

    old = row_ids(pt)
    r1 = spark_t.delete(F.col("id").isin(1, 9, 40))
    r2 = pt.delete(pc.field("id").isin([1, 9, 40]))
    assert_same(st, pt, r1, r2, old, modes=modes)

    old = row_ids(pt)
    r1 = spark_t.merge(source(spark, [(3, None, 0), (41, "x", 1)]), "id", when_matched="delete")
    r2 = pt.merge(
        spark.createDataFrame([(3, None, 0), (41, "x", 1)], SPARK_SCHEMA).toArrow(), "id", when_matched="delete"
    )
    assert_same(st, pt, r1, r2, old, modes=modes)
    # The whole history reads the same too.
    for mode in modes:
        assert change_rows_all(st, mode) == change_rows_all(pt, mode), mode


def test_after_renaming_a_column(spark, tmp_path):
    st, pt = twins(tmp_path)
    for t in (st, pt):
        with t.update_schema() as u:
            u.rename_column("name", "full_name")
    spark_t = CtfileTable.for_path(spark, st.uri)

    old = row_ids(pt)
    src = spark.createDataFrame([(2, "Two", 22), (60, "Sixty", 600)], "id long, full_name string, qty long")
    r1 = spark_t.merge(src, "id")
    r2 = pt.merge(src.toArrow(), "id")
    assert_same(st, pt, r1, r2, old)

    old = row_ids(pt)
    r1 = spark_t.update("full_name in ('n5', 'Two')", {"full_name": "concat(full_name, '!')"})
    exclaimed = pc.binary_join_element_wise(pc.field("full_name"), "!", "")
    r2 = pt.update(pc.field("full_name").isin(["n5", "Two"]), {"full_name": exclaimed})
    assert r1.num_updated_rows == 2
    assert_same(st, pt, r1, r2, old)
    # The old name is not a column any more.
    with pytest.raises(ctfile.SchemaMismatchError):
        spark_t.update("name = 'n1'", {"qty": 0})


def test_timestamps_of_the_other_kind_convert_in_the_session_time_zone(spark, tmp_path):
    """A Spark TIMESTAMP (an instant) merged or set into a column without a
    time zone, under a session time zone other than UTC: Spark's join
    compares the two in the session time zone, so the values written must
    be converted the same way (the session's wall clock), or a key the
    MERGE inserted would not match the same source row again."""
    schema = pa.schema([("at", pa.timestamp("us")), ("v", pa.string())])
    hours = [dt.datetime(2026, 1, 1, h) for h in range(6)]
    data = pa.table({"at": hours, "v": [f"v{h}" for h in range(6)]}, schema=schema)
    st, _ = twins(tmp_path, schema, data)
    t = CtfileTable.for_path(spark, st.uri)
    with spark_conf(spark, "spark.sql.session.timeZone", "America/New_York"):
        src = spark.sql("SELECT timestamp'2026-01-01 02:00:00' AS at, 'X' AS v "
                        "UNION ALL SELECT timestamp'2026-01-05 00:00:00' AS at, 'Y' AS v")
        first, again = t.merge(src, "at"), t.merge(src, "at")
        assert (first.num_updated_rows, first.num_inserted_rows, again.num_inserted_rows) == (1, 1, 0)
        t.update("v = 'v3'", {"at": "timestamp'2026-02-01 00:00:00'"})
    got = sorted((r["at"], r["v"]) for r in st.refresh().to_arrow().to_pylist())
    kept = [(dt.datetime(2026, 1, 1, h), f"v{h}") for h in (0, 1, 4, 5)]
    changed = [(dt.datetime(2026, 1, 1, 2), "X"), (dt.datetime(2026, 1, 5), "Y"), (dt.datetime(2026, 2, 1), "v3")]
    want = sorted(kept + changed)
    assert got == want


# ---------------------------------------------------------------- the no-op rule


def test_update_and_merge_setting_the_same_values_rewrite_nothing(spark, tmp_path):
    st, pt = twins(tmp_path)
    spark_t = CtfileTable.for_path(spark, st.uri)
    before = st.snapshot().to_arrow(include_hidden=True).to_pylist()
    start, start_files = st.version, files(st)

    r1 = spark_t.update("id < 5", {"qty": "qty", "name": F.col("name")})
    r2 = pt.update(pc.field("id") < 5, {"qty": pc.field("qty"), "name": pc.field("name")})
    assert counts(r1) == counts(r2)
    r3 = spark_t.merge(source(spark, [(6, "n6", 60), (9, "n9", 90)]), "id", when_not_matched=None)
    r4 = pt.merge(pa.table({"id": [6, 9], "name": ["n6", "n9"], "qty": [60, 90]}), "id", when_not_matched=None)
    assert counts(r3) == counts(r4)

    assert (r1.committed, r3.committed, r1.num_updated_rows, r3.num_updated_rows) == (False, False, 0, 0)
    st.refresh()
    assert st.version == start and files(st) == start_files
    assert st.snapshot().to_arrow(include_hidden=True).to_pylist() == before  # row versions kept


def test_merge_rewrites_only_partitions_with_a_changed_row(spark, tmp_path):
    """Rows 1 and 5 get their own values (their partitions stay); 10 changes
    and 11 does not (their partition is rewritten, 11 keeps its row version)."""
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    before = {r["id"]: r for r in st.snapshot().to_arrow(include_hidden=True).to_pylist()}
    start_parts = {p.path for p in st.snapshot().partitions}
    rows = [(1, "n1", 10), (5, "n5", 50), (10, "ten", 100), (11, "n11", 110)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(pa.table(list(zip(*rows)), names=["id", "name", "qty"]), "id")
    assert_same(st, pt, r1, r2, old, modes=("default",))
    assert (r1.num_updated_rows, r1.num_removed_partitions) == (1, 1)
    after = {r["id"]: r for r in st.snapshot().to_arrow(include_hidden=True).to_pylist()}
    assert [i for i in after if after[i][ROW_VERSION] != before[i][ROW_VERSION]] == [10]
    assert len(start_parts - {p.path for p in st.snapshot().partitions}) == 1
    assert [(r["id"], r["METADATA$ACTION"]) for r in st.changes(start_version=r1.version).to_arrow().to_pylist()] in (
        [(10, "DELETE"), (10, "INSERT")], [(10, "INSERT"), (10, "DELETE")])


# ---------------------------------------------------------------- typed errors, nothing written


def _refused(t: ctfile.Table, error: type, statement, match: str | None = None) -> set[str]:
    """Run ``statement``, expecting ``error``: no version and no file left.
    Returns the files that existed for a while during the statement."""
    version, before = t.refresh().version, files(t)
    with watching(t) as seen, pytest.raises(error, match=match):
        statement()
    assert t.refresh().version == version
    assert files(t) == before
    return seen - before


def test_errors_are_typed_and_write_nothing(spark, tmp_path):
    st, _ = twins(tmp_path)
    t = CtfileTable.for_path(spark, st.uri)
    dup = source(spark, [(1, "a", 1), (1, "b", 2), (30, "c", 3)])
    _refused(st, ctfile.InvalidArgumentError, lambda: t.merge(dup, "id"), "same key")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.merge(source(spark, [(1, "a", 1)]), "nope"), "nope")
    extra = spark.createDataFrame([(1, "a", 1, "z")], "id long, name string, qty long, zzz string")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.merge(extra, "id"), "zzz")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.update("nope > 1", {"qty": 0}), "nope")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.delete("nope = 1"), "nope")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.update("id = 1", {"nope": 0}), "nope")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.update("id = 1", {"qty": "nope + 1"}), "nope")
    as_text = spark.createDataFrame([(1, "a", "lots")], "id long, name string, qty string")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.merge(as_text, "id"), "qty")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.update("id = 1", {"qty": "'lots'"}), "qty")
    _refused(st, ctfile.SchemaMismatchError, lambda: t.delete("qty + 1"), "qty")  # not a boolean
    _refused(st, ctfile.InvalidArgumentError, lambda: t.delete("id = = 1"), "not a Spark SQL expression")
    _refused(st, ctfile.InvalidArgumentError, lambda: t.update("id = 1", {}), "set")
    one = source(spark, [(1, "a", 1)])
    _refused(st, ctfile.InvalidArgumentError, lambda: t.merge(one, "id", when_matched="upsert"), "upsert")
    _refused(st, ctfile.InvalidArgumentError, lambda: t.merge(people_data(), "id"), "DataFrame")


def test_null_for_a_non_nullable_column_found_on_the_executors(spark, tmp_path):
    """Only one task meets the null; the others wrote their files, which are deleted."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                        pa.field("qty", pa.int64(), nullable=False)])
    st, _ = twins(tmp_path, schema, people_data().cast(schema))
    t = CtfileTable.for_path(spark, st.uri)
    assert len(st.snapshot().partitions) == 4
    # UPDATE: a nullable expression, null for one row of one of four partitions.
    written = _refused(st, ctfile.SchemaMismatchError,
                       lambda: t.update(None, {"qty": "CASE WHEN id = 11 THEN NULL ELSE qty + 1 END"}), "qty")
    assert [p for p in written if p.startswith("data/")], "the other tasks wrote their partitions"
    # MERGE: updates in every partition, one inserted row lacks its non-nullable qty.
    rows = [(i, f"m{i}", i) for i in range(1, 13)] + [(i, f"m{i}", i) for i in range(20, 30)] + [(31, "bad", None)]
    written = _refused(st, ctfile.SchemaMismatchError, lambda: t.merge(source(spark, rows, partitions=3), "id"), "qty")
    assert [p for p in written if p.startswith("data/")], "the other tasks wrote their partitions"
    # An inserted null key.
    rows = [(None, "no key", 1), (40, "ok", 4)]
    _refused(st, ctfile.SchemaMismatchError, lambda: t.merge(source(spark, rows), "id"), "id")
