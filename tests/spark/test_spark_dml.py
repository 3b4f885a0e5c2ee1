"""MERGE, UPDATE and DELETE through ``ctfile.spark.CtfileTable`` behave as the
Python helpers do.

Each comparison starts two byte-identical copies of one table (the second a
``shutil.copytree`` of the first, so row ids, row versions and table id
agree), runs the statement through Spark on one and through
``Table.merge/update/delete`` on the other, and compares:

- the snapshots: rows that existed before the statement with their
  ``_ct_row_id`` and ``_ct_row_version``; rows the statement inserted with
  their ``_ct_row_version`` (their row ids depend on the order in which the
  inserted files are committed, which differs between one process and many
  tasks; they must only be fresh and distinct);
- the ``CommitResult`` counts;
- for a table with change capture, the change scans of the statement's
  version in every mode (fresh inserts' ``METADATA$ROW_ID`` aside, for the
  same reason).

Errors are checked to leave the table directory as it was: no new file, no
new version.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import ctfile
from ctfile.spark import CtfileTable
from spark_helpers import spark_conf

ROW_ID, ROW_VERSION = ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("qty", pa.int64())])
SPARK_SCHEMA = "id long, name string, qty long"
RESULT_FIELDS = (
    "version", "committed", "operation", "num_inserted_rows", "num_updated_rows", "num_deleted_rows",
    "num_copied_rows", "num_removed_partitions", "app_transaction_replayed",
)


# ---------------------------------------------------------------- helpers


def _people(n: int = 12) -> pa.Table:
    return pa.table(
        {"id": list(range(1, n + 1)), "name": [f"n{i}" for i in range(1, n + 1)], "qty": [i * 10 for i in range(1, n + 1)]},
        schema=SCHEMA,
    )


def twins(tmp_path: Path, schema: pa.Schema = SCHEMA, data: pa.Table | None = None, **create) -> tuple[ctfile.Table, ctfile.Table]:
    """Two identical tables (``spark``, ``python``): created with ``create``
    (3 rows per partition unless given), ``data`` inserted in two commits."""
    create.setdefault("partition_rows", 3)
    data = _people() if data is None else data
    t = ctfile.create_table(str(tmp_path / "spark"), schema, **create)
    half = data.num_rows // 2
    t.insert(data.slice(0, half))
    t.insert(data.slice(half))
    shutil.copytree(tmp_path / "spark", tmp_path / "python")
    return ctfile.open_table(str(tmp_path / "spark")), ctfile.open_table(str(tmp_path / "python"))


def _key(row: tuple) -> tuple:
    return tuple((v is not None, repr(v)) for v in row)


def table_state(t: ctfile.Table, old_ids: set[int]) -> tuple[list, list]:
    """(rows that existed before with all columns, fresh rows without their row id)."""
    rows = t.refresh().snapshot().to_arrow(include_hidden=True).to_pylist()
    ids = [r[ROW_ID] for r in rows]
    assert len(ids) == len(set(ids)), f"row ids repeat in {t.uri}: {ids}"
    old = sorted((tuple(sorted(r.items())) for r in rows if r[ROW_ID] in old_ids), key=_key)
    new = sorted((tuple(sorted((k, v) for k, v in r.items() if k != ROW_ID)) for r in rows if r[ROW_ID] not in old_ids), key=_key)
    return old, new


def row_ids(t: ctfile.Table) -> set[int]:
    return set(t.refresh().snapshot().to_arrow(include_hidden=True).column(ROW_ID).to_pylist())


def counts(r: ctfile.CommitResult) -> dict:
    return {f: getattr(r, f) for f in RESULT_FIELDS}


def change_rows(t: ctfile.Table, version: int, mode: str) -> list:
    """The change scan of ``version`` alone; a fresh insert's row id is replaced
    by a marker (see the module docstring), the commit time dropped."""
    out = []
    for r in t.changes(start_version=version, end_version=version, information=mode).to_arrow().to_pylist():
        r.pop("METADATA$COMMIT_TIMESTAMP", None)
        if r.get("METADATA$ACTION") == "INSERT" and not r.get("METADATA$ISUPDATE"):
            r["METADATA$ROW_ID"] = "fresh"
        out.append(tuple(sorted(r.items())))
    return sorted(out, key=_key)


def assert_same(spark_t: ctfile.Table, py_t: ctfile.Table, spark_r, py_r, old_ids: set[int], *, modes=()) -> None:
    assert counts(spark_r) == counts(py_r)
    assert table_state(spark_t, old_ids) == table_state(py_t, old_ids)
    for mode in modes:
        assert change_rows(spark_t, spark_r.version, mode) == change_rows(py_t, py_r.version, mode), mode


def files(t: ctfile.Table) -> set[str]:
    """Every file under the table's directory (relative paths)."""
    root = Path(t.uri.removeprefix("file://"))
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def source(spark, rows, schema: str = SPARK_SCHEMA, partitions: int = 2):
    return spark.createDataFrame(rows, schema).repartition(partitions)


# ---------------------------------------------------------------- same results as the Python helpers


def test_merge_update_and_insert(spark, tmp_path):
    st, pt = twins(tmp_path)
    old = row_ids(pt)
    rows = [(2, "two", 21), (7, "seven", 71), (12, "twelve", 121), (20, "twenty", 200), (21, None, None)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(pa.table(list(zip(*rows)), names=["id", "name", "qty"]), "id")
    assert (r1.num_updated_rows, r1.num_inserted_rows) == (3, 2)
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
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id", when_matched="delete", when_not_matched=None)
    r2 = pt.merge(spark.createDataFrame(rows, SPARK_SCHEMA).toArrow(), "id", when_matched="delete", when_not_matched=None)
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
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string(), nullable=False), ("v", pa.int64())])
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
    data = _people(12)
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
        task = ctfile.ScanTask(st.uri, None, st.schema_at(), p, ("id",))
        ids = pa.Table.from_batches(list(task.to_batches())).column("id").to_pylist()
        assert ids == sorted(ids), (p.path, ids)


def test_auto_compaction_follows_as_after_a_python_statement(spark, tmp_path):
    """``ctfile.autoCompact``: the small partitions a MERGE leaves are
    compacted in a follow-up commit, reported in ``auto_compaction``."""
    st, pt = twins(tmp_path, partition_rows=40, properties={"ctfile.autoCompact": "true", "ctfile.clusterBy": "id"})
    for t in (st, pt):  # three small partitions: one fewer than an automatic compaction needs
        assert t.insert(_people(14).slice(12)).auto_compaction is None
    old = row_ids(pt)
    rows = [(2, "two", 21), (9, "nine", 91), (30, "thirty", 300)]
    r1 = CtfileTable.for_path(spark, st.uri).merge(source(spark, rows), "id")
    r2 = pt.merge(pa.table(list(zip(*rows)), names=["id", "name", "qty"]), "id")
    assert r1.auto_compaction is not None and r1.auto_compaction.committed
    assert counts(r1.auto_compaction) == counts(r2.auto_compaction)
    assert_same(st, pt, r1, r2, old)
    assert sorted(p.num_records for p in st.snapshot().partitions) == sorted(p.num_records for p in pt.snapshot().partitions)


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
    r2 = pt.merge(spark.createDataFrame([(3, None, 0), (41, "x", 1)], SPARK_SCHEMA).toArrow(), "id", when_matched="delete")
    assert_same(st, pt, r1, r2, old, modes=modes)
    # The whole history reads the same too.
    for mode in modes:
        assert change_rows_all(st, mode) == change_rows_all(pt, mode), mode


def change_rows_all(t: ctfile.Table, mode: str) -> list:
    out = []
    for r in t.changes(information=mode).to_arrow().to_pylist():
        r.pop("METADATA$COMMIT_TIMESTAMP", None)
        r.pop("METADATA$ROW_ID", None)
        out.append(tuple(sorted(r.items())))
    return sorted(out, key=_key)


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
    r2 = pt.update(pc.field("full_name").isin(["n5", "Two"]), {"full_name": pc.binary_join_element_wise(pc.field("full_name"), "!", "")})
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
    data = pa.table({"at": [dt.datetime(2026, 1, 1, h) for h in range(6)], "v": [f"v{h}" for h in range(6)]}, schema=schema)
    st, _ = twins(tmp_path, schema, data)
    t = CtfileTable.for_path(spark, st.uri)
    with spark_conf(spark, "spark.sql.session.timeZone", "America/New_York"):
        src = spark.sql("SELECT timestamp'2026-01-01 02:00:00' AS at, 'X' AS v "
                        "UNION ALL SELECT timestamp'2026-01-05 00:00:00' AS at, 'Y' AS v")
        first, again = t.merge(src, "at"), t.merge(src, "at")
        assert (first.num_updated_rows, first.num_inserted_rows, again.num_inserted_rows) == (1, 1, 0)
        t.update("v = 'v3'", {"at": "timestamp'2026-02-01 00:00:00'"})
    got = sorted((r["at"], r["v"]) for r in st.refresh().to_arrow().to_pylist())
    want = sorted([(dt.datetime(2026, 1, 1, h), f"v{h}") for h in (0, 1, 4, 5)]
                  + [(dt.datetime(2026, 1, 1, 2), "X"), (dt.datetime(2026, 1, 5), "Y"), (dt.datetime(2026, 2, 1), "v3")])
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


@contextlib.contextmanager
def watching(t: ctfile.Table):
    """Every file seen under the table's directory while the block runs
    (polled by a thread): the files a statement wrote and later deleted."""
    seen: set[str] = set()
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                seen.update(files(t))
            except OSError:  # a file deleted while listed
                pass
            time.sleep(0.005)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


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
    _refused(st, ctfile.InvalidArgumentError, lambda: t.merge(source(spark, [(1, "a", 1)]), "id", when_matched="upsert"), "upsert")
    _refused(st, ctfile.InvalidArgumentError, lambda: t.merge(_people(), "id"), "DataFrame")


def test_null_for_a_non_nullable_column_found_on_the_executors(spark, tmp_path):
    """Only one task meets the null; the others wrote their files, which are deleted."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                        pa.field("qty", pa.int64(), nullable=False)])
    st, _ = twins(tmp_path, schema, _people().cast(schema))
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


# ---------------------------------------------------------------- exactly once


def test_app_transaction_makes_a_merge_exactly_once(spark, tmp_path):
    st, pt = twins(tmp_path)
    t = CtfileTable.for_path(spark, st.uri)
    src = source(spark, [(1, "one", 1), (50, "fifty", 500)])
    first = t.merge(src, "id", app_id="q", app_version=3)
    assert first.committed and st.refresh().app_version("q") == 3
    version, before, rows = st.version, files(st), st.snapshot().to_arrow(include_hidden=True).to_pylist()
    for v in (3, 2):
        again = t.merge(source(spark, [(1, "other", 2), (51, "new", 1)]), "id", app_id="q", app_version=v)
        assert (again.committed, again.app_transaction_replayed, again.version) == (False, True, version)
    assert st.refresh().version == version and files(st) == before
    assert st.snapshot().to_arrow(include_hidden=True).to_pylist() == rows
    # UPDATE and DELETE take application transactions too.
    assert t.update("id = 2", {"qty": 0}, app_id="q", app_version=4).committed
    version = st.refresh().version
    for replayed in (t.update("id = 3", {"qty": 0}, app_id="q", app_version=4), t.delete(None, app_id="q", app_version=1)):
        assert (replayed.committed, replayed.app_transaction_replayed, replayed.version) == (False, True, version)
    assert st.refresh().version == version
    # The Python helper agrees on the first commit and on the replay.
    py_first = pt.merge(src.toArrow(), "id", app_id="q", app_version=3)
    assert counts(py_first) == counts(first)
    assert counts(pt.merge(src.toArrow(), "id", app_id="q", app_version=3)) == counts(again)


def test_batch_committed_concurrently_is_a_replay(spark, tmp_path):
    """Another writer commits the same application batch while the Spark
    MERGE runs: the MERGE finds it at commit, commits nothing and deletes
    the files its executors wrote (SPEC §Conflict detection, application
    transactions)."""
    st, _ = twins(tmp_path)
    racing = pa.table({"id": [2], "name": ["python"], "qty": [0]}, schema=SCHEMA)
    rows = [(2, "spark two", 2), (3, "spark three", 3), (90, "spark ninety", 9)]
    src = _committing_source(spark, rows, st.uri, tmp_path / "committed", racing, "merge", app_id="q", app_version=5)
    start, before = st.version, files(st)
    with watching(st) as seen:
        r = CtfileTable.for_path(spark, st.uri).merge(src, "id", app_id="q", app_version=5)
    assert (r.committed, r.app_transaction_replayed) == (False, True)
    st.refresh()
    assert st.version == start + 1 and st.history(limit=1)[0].operation == "MERGE"  # only the Python batch
    python_files = files(st) - before
    assert [p for p in seen - before - python_files if p.startswith("data/")], "the executors wrote files"
    live = {p.path for p in st.snapshot().partitions} | {p.path for p in st.snapshot(start).partitions}
    assert {p for p in files(st) if p.startswith("data/")} <= live  # nothing of the Spark MERGE is left
    assert sorted(st.to_arrow().column("name").to_pylist()).count("python") == 1


def test_batches_that_change_nothing_still_record_their_app_version(spark, tmp_path):
    """An empty micro-batch, or one whose rows are already there, commits a
    version holding only its ``txn`` (as the Python helper does), so that
    Spark replaying it later is recognised as a replay."""
    st, pt = twins(tmp_path)
    t = CtfileTable.for_path(spark, st.uri)
    empty = spark.createDataFrame([], SPARK_SCHEMA)
    same = source(spark, [(1, "n1", 10), (2, "n2", 20)])
    batches = [(empty, 0), (same, 1)]
    for df, batch_id in batches:
        r1 = t.merge(df, "id", app_id="q", app_version=batch_id)
        r2 = pt.merge(df.toArrow(), "id", app_id="q", app_version=batch_id)
        assert counts(r1) == counts(r2)
        assert r1.committed and st.refresh().app_version("q") == batch_id
    r1 = t.update("id = 1", {"qty": "qty"}, app_id="q", app_version=2)
    r2 = pt.update(pc.field("id") == 1, {"qty": pc.field("qty")}, app_id="q", app_version=2)
    assert counts(r1) == counts(r2) and st.refresh().app_version("q") == 2
    assert st.changes(start_version=r1.version - 2).to_arrow().num_rows == 0


# ---------------------------------------------------------------- conflicts


def once(marker: Path | str, action):
    """A function running ``action()`` on its first call in any process
    (``marker`` is created exclusively), for Spark workers that may evaluate
    a source or a condition more than once. It is a closure, so cloudpickle
    ships it by value (this test module is not importable in the workers)."""
    path = str(marker)

    def run() -> None:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        action()

    return run


def _committing_source(spark, rows, uri: str, marker: Path, racing: pa.Table, how: str, **app):
    """A source DataFrame whose first evaluation (in a Python worker) commits
    ``racing`` to the table at ``uri`` with the Python API (``how``:
    ``"insert"`` or ``"merge"`` on ``id``; ``app``: its ``app_id`` and
    ``app_version``). The statement reads the source
    after it opened its transaction (to check its keys), so the commit
    lands between its planning and its commit. ``marker`` (created
    exclusively) makes the commit happen once, whatever the evaluations."""
    payload, schema = racing.to_pylist(), racing.schema

    def commit():
        t, data = ctfile.open_table(uri), pa.Table.from_pylist(payload, schema=schema)
        t.insert(data, **app) if how == "insert" else t.merge(data, "id", **app)

    commit_once = once(marker, commit)

    def evaluate(batches):
        commit_once()
        yield from batches

    df = spark.createDataFrame(rows, SPARK_SCHEMA).repartition(2)
    return df.mapInArrow(evaluate, df.schema)


def _race(spark, tmp_path, caplog, racing: pa.Table, how: str, **create):
    """MERGE ``RACE_ROWS`` through Spark while ``racing`` commits (``how``)
    in between; the same serially through Python (racing first). Returns
    (Spark result, Python result, whether the statement was re-run, the
    read version of the Spark commit minus the start version)."""
    st, pt = twins(tmp_path, **create)
    src = _committing_source(spark, RACE_ROWS, st.uri, tmp_path / "committed", racing, how)
    start = st.version
    with caplog.at_level("INFO", logger="ctfile"):
        r1 = CtfileTable.for_path(spark, st.uri).merge(src, "id")
    assert (tmp_path / "committed").exists()
    merge, raced = st.refresh().history(limit=2)
    assert (raced.version, raced.operation, merge.version, r1.version) == (start + 1, how.upper(), start + 2, start + 2)
    re_run = any("re-running" in m for m in caplog.messages)

    getattr(pt, how)(racing, *(["id"] if how == "merge" else []))
    old = row_ids(pt)
    r2 = pt.merge(pa.table(list(zip(*RACE_ROWS)), schema=SCHEMA), "id")
    assert counts(r1) == counts(r2)
    assert table_state(st, old) == table_state(pt, old)  # the serial result
    assert ctfile.verify_table(st.uri).unreferenced_files == []  # a lost run's files are deleted
    return r1, re_run, merge.read_version - start


RACE_ROWS = [(17, "spark seventeen", 77), (3, "spark three", 33), (80, "spark eighty", 88)]
RACE_17 = pa.table({"id": [17, 70], "name": ["python seventeen", "python seventy"], "qty": [-17, -70]}, schema=SCHEMA)


@pytest.mark.parametrize(
    "how, level",
    [("merge", "WriteSerializable"), ("insert", "Serializable")],
    ids=["python-merge", "python-insert-serializable"],
)
def test_concurrent_commit_of_a_merged_key_re_runs_the_merge(spark, tmp_path, caplog, how, level):
    """A Python commit of the new key 17 lands between the Spark MERGE's read
    and its commit: the MERGE conflicts (SPEC §Conflict detection, rule 4),
    is re-run at the new version, and key 17 ends up once, updated by the
    MERGE (at the default level only a commit that is not a blind append
    conflicts: the Python MERGE; at Serializable an INSERT does too)."""
    r1, re_run, read_at = _race(spark, tmp_path, caplog, RACE_17, how, properties={"ctfile.isolationLevel": level})
    assert re_run and read_at == 1 and r1.attempts > 1, caplog.messages
    assert r1.num_updated_rows == 2 and r1.num_inserted_rows == 1  # 17 and 3 updated, 80 inserted


def test_concurrent_blind_append_does_not_re_run(spark, tmp_path, caplog):
    """WriteSerializable: a blind append is treated as committed after the
    MERGE, so it is not checked against the MERGE's keys; the commit is
    rebased over it (a second commit attempt), the statement not re-run."""
    racing = pa.table({"id": [1000], "name": ["python"], "qty": [1]}, schema=SCHEMA)
    r1, re_run, read_at = _race(spark, tmp_path, caplog, racing, "insert")
    assert not re_run and read_at == 0 and r1.attempts == 2, caplog.messages


def test_concurrent_update_re_runs_a_delete(spark, tmp_path, caplog):
    """A DELETE whose condition (a Python UDF) commits, on its first
    evaluation, a Python UPDATE that makes one more row match: the DELETE
    read the partitions the UPDATE rewrote, conflicts, and is re-run, so the
    updated row is deleted too, as in the serial order."""
    st, pt = twins(tmp_path)
    uri = st.uri
    update_once = once(tmp_path / "committed", lambda: ctfile.open_table(uri).update(pc.field("id") == 2, {"qty": 500}))

    def qty_after_racing_update(q):
        update_once()
        return q

    qty = F.udf(qty_after_racing_update, "long")(F.col("qty"))
    start = st.version
    with caplog.at_level("INFO", logger="ctfile"):
        r1 = CtfileTable.for_path(spark, st.uri).delete(qty > 100)
    delete, update = st.refresh().history(limit=2)
    assert (update.operation, update.version, delete.version, delete.read_version) == ("UPDATE", start + 1, start + 2, start + 1)
    assert any("re-running" in m for m in caplog.messages), caplog.messages
    pt.update(pc.field("id") == 2, {"qty": 500})
    old = row_ids(pt)
    r2 = pt.delete(pc.field("qty") > 100)
    assert r1.num_deleted_rows == 3  # ids 11, 12 and the updated 2
    assert counts(r1) == counts(r2)
    assert table_state(st, old) == table_state(pt, old)
    assert ctfile.verify_table(st.uri).unreferenced_files == []
