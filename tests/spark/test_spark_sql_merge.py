"""``MERGE INTO`` through ``ctfile.spark.sql``: the five patterns of issue 27
(conditional upsert, upsert with delete, accumulate, snapshot sync with NOT
MATCHED BY SOURCE, SCD type 2) as SQL text give the same table as the
Python builder (``Table.merge_builder``) on a copy: rows with their hidden
columns, counts, the log entry and the change scans in every mode
(:func:`dml_helpers.assert_same`); and a differential property test:
random statements (tests/property/merge_statements.py, ``to_sql``) as SQL
text against the Python builder.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings

import ctfile
import ctfile.spark
from dml_helpers import assert_same, files, row_ids, twins

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "property"))
from merge_statements import SOURCE_SCHEMA, MultipleMatch, run_model, table_of  # noqa: E402
from test_merge_model import _changes, _files, _setup  # noqa: E402
from test_spark_merge_builder import CASES, SETTINGS, SOURCE_DDL, _state  # noqa: E402

ACCOUNTS = pa.schema([("id", pa.int64()), ("total", pa.int64()), ("ts", pa.int64())])
CAPTURE = {"ctfile.changeCapture": "before_after"}
MODES = ("default", "audit", "append_only")


@pytest.fixture
def accounts(tmp_path):
    """Twin tables (SQL, Python) of accounts 1-4, with change capture."""
    data = pa.table({"id": [1, 2, 3, 4], "total": [10, 20, 30, 40], "ts": [5, 5, 5, 5]}, schema=ACCOUNTS)
    return twins(tmp_path, ACCOUNTS, data, partition_rows=2, properties=CAPTURE)


def run_both(spark, twin, sql_text: str, python_builder) -> ctfile.CommitResult:
    """Run ``sql_text`` (``{t}``: the SQL twin) and the Python builder on the
    other twin; check they agree; the SQL result."""
    st, pt = twin
    old = row_ids(pt)
    r1 = ctfile.spark.sql(spark, sql_text.format(t=f"ctfile.`{st.uri}`"))
    r2 = python_builder(pt).execute()
    assert_same(st, pt, r1, r2, old, modes=MODES)
    return r1


def test_conditional_upsert(spark, accounts):
    r = run_both(spark, accounts, """
        MERGE INTO {t} AS t
        USING (SELECT * FROM VALUES (1L, 11L, 9L), (2L, 21L, 1L), (7L, 70L, 9L) AS v(id, total, ts)) AS s
        ON t.id = s.id
        WHEN MATCHED AND s.ts > t.ts THEN UPDATE SET *
        WHEN NOT MATCHED THEN INSERT *""",
        lambda t: t.merge_builder(pa.table({"id": [1, 2, 7], "total": [11, 21, 70], "ts": [9, 1, 9]}), on="id")
        .when_matched_update_all(condition=pc.field("s.ts") > pc.field("t.ts")).when_not_matched_insert_all())
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 1)


def test_upsert_with_delete(spark, accounts):
    rows = {"id": [1, 2, 8, 9], "total": [11, 0, 80, 0], "ts": [9, 9, 9, 9], "op": ["u", "delete", "u", "delete"]}
    spark.createDataFrame(list(zip(*rows.values())), "id long, total long, ts long, op string") \
        .createOrReplaceTempView("batch")
    r = run_both(spark, accounts, """
        MERGE INTO {t} t USING batch s ON t.id = s.id
        WHEN MATCHED AND s.op = 'delete' THEN DELETE
        WHEN MATCHED THEN UPDATE SET total = s.total, t.ts = s.ts
        WHEN NOT MATCHED AND s.op <> 'delete' THEN INSERT (id, total, ts) VALUES (s.id, s.total, s.ts)""",
        lambda t: t.merge_builder(pa.table(rows), on="id")
        .when_matched_delete(condition=pc.field("s.op") == "delete")
        .when_matched_update({"total": pc.field("s.total"), "ts": pc.field("s.ts")})
        .when_not_matched_insert({"id": pc.field("s.id"), "total": pc.field("s.total"), "ts": pc.field("s.ts")},
                                 condition=pc.field("s.op") != "delete"))
    assert (r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (1, 1, 1)


def test_accumulate_from_a_registered_table(spark, accounts, tmp_path):
    deltas = pa.table({"id": [1, 3, 5], "amount": [5, -30, 50]})
    src = ctfile.create_table(str(tmp_path / "deltas"), deltas.schema)
    src.insert(deltas)
    ctfile.spark.register(spark, "deltas", src.uri)
    r = run_both(spark, accounts, """
        MERGE INTO {t} AS t USING deltas ON t.id = deltas.id
        WHEN MATCHED THEN UPDATE SET t.total = t.total + deltas.amount
        WHEN NOT MATCHED THEN INSERT (id, total, ts) VALUES (deltas.id, deltas.amount, 0)""",
        lambda t: t.merge_builder(deltas, on="id")
        .when_matched_update({"total": pc.field("t.total") + pc.field("s.amount")})
        .when_not_matched_insert({"id": pc.field("s.id"), "total": pc.field("s.amount"), "ts": 0}))
    assert (r.num_updated_rows, r.num_inserted_rows) == (2, 1)


def test_snapshot_sync_with_not_matched_by_source(spark, accounts):
    snapshot = {"id": [1, 2, 6], "total": [10, 99, 60], "ts": [5, 5, 5]}
    r = run_both(spark, accounts, """
        MERGE INTO {t} AS t
        USING (SELECT * FROM VALUES (1L, 10L, 5L), (2L, 99L, 5L), (6L, 60L, 5L) AS v(id, total, ts)) AS s
        ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET *
        WHEN NOT MATCHED BY TARGET THEN INSERT *
        WHEN NOT MATCHED BY SOURCE AND t.total > 0 THEN DELETE""",
        lambda t: t.merge_builder(pa.table(snapshot), on="id").when_matched_update_all().when_not_matched_insert_all()
        .when_not_matched_by_source_delete(condition=pc.field("t.total") > 0))
    assert (r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (1, 1, 2)


def test_scd2(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("addr", pa.string()), ("current", pa.bool_()),
                        ("start", pa.int64()), ("end", pa.int64())])
    data = pa.table({"id": [1, 2], "addr": ["a", "b"], "current": [True, True], "start": [1, 1],
                     "end": [None, None]}, schema=schema)
    dim = twins(tmp_path, schema, data, partition_rows=2, properties=CAPTURE)
    spark.createDataFrame([(1, "a2", 5), (2, "b", 5), (3, "c", 5)], "id long, addr string, ts long") \
        .createOrReplaceTempView("updates")
    staged = pa.table({"merge_key": [1, 2, 3, None], "id": [1, 2, 3, 1], "addr": ["a2", "b", "c", "a2"],
                       "ts": [5, 5, 5, 5]})
    r = run_both(spark, dim, """
        MERGE INTO {t} AS t
        USING (SELECT id AS merge_key, * FROM updates
               UNION ALL SELECT NULL AS merge_key, u.* FROM updates u WHERE u.id = 1) AS s
        ON t.id = s.merge_key AND t.current = true
        WHEN MATCHED AND t.addr <> s.addr THEN UPDATE SET current = false, `end` = s.ts
        WHEN NOT MATCHED THEN INSERT (id, addr, current, start) VALUES (s.id, s.addr, true, s.ts)""",
        lambda t: t.merge_builder(staged, on={"id": "merge_key"}, on_condition=pc.field("t.current"))
        .when_matched_update({"current": False, "end": pc.field("s.ts")},
                             condition=pc.field("t.addr") != pc.field("s.addr"))
        .when_not_matched_insert({"id": pc.field("s.id"), "addr": pc.field("s.addr"), "current": True,
                                  "start": pc.field("s.ts")}))
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 2)


def test_a_refused_merge_changes_nothing(spark, accounts):
    st, _ = accounts
    before = files(st)
    text = (f"MERGE INTO ctfile.`{st.uri}` t USING (SELECT * FROM VALUES (2L, 1L), (2L, 2L) AS v(id, a)) s "
            f"ON t.id = s.id WHEN MATCHED THEN UPDATE SET total = s.a")
    with pytest.raises(ctfile.InvalidArgumentError, match="2 source rows match the table row"):
        ctfile.spark.sql(spark, text)
    with pytest.raises(ctfile.SchemaMismatchError):
        ctfile.spark.sql(spark, text.replace("total = s.a", "nope = s.a"))
    assert files(st) == before


def test_merge_with_schema_evolution_adds_the_sources_columns(spark, accounts):
    st, _ = accounts
    r = ctfile.spark.sql(spark, f"""
        MERGE WITH SCHEMA EVOLUTION INTO ctfile.`{st.uri}` AS t
        USING (SELECT * FROM VALUES (1L, 11L, 9L, 'web'), (9L, 90L, 9L, 'app') AS v(id, total, ts, channel)) AS s
        ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *""")
    assert r.version == 3 and st.refresh().schema.names == ["id", "total", "ts", "channel"]
    assert {x["id"]: x["channel"] for x in st.to_arrow().to_pylist()} == {1: "web", 2: None, 3: None, 4: None, 9: "app"}


# ---------------------------------------------------------------- differential


def check_sql_text(spark, stmt, target, source, capture: bool) -> None:
    """``stmt`` as SQL text and through the Python builder on copies of one
    table: same rows (hidden columns too), counts and change scans."""
    root = tempfile.mkdtemp(prefix="ctfile-sql-merge-")
    try:
        py, ids = _setup(root + "/py", target, capture)
        shutil.copytree(root + "/py", root + "/sql")
        sq = ctfile.open_table(root + "/sql")
        before = _files(root + "/sql")
        spark.createDataFrame([tuple(r[c] for c in SOURCE_SCHEMA.names) for r in source], SOURCE_DDL) \
            .createOrReplaceTempView("merge_source")
        text = stmt.to_sql(f"ctfile.`{sq.uri}`", "merge_source")
        py_builder = stmt.builder(py, table_of(source, SOURCE_SCHEMA))
        try:
            outcome = run_model(stmt, target, source)
        except MultipleMatch as e:
            for run in (py_builder.execute, lambda: ctfile.spark.sql(spark, text)):
                with pytest.raises(ctfile.InvalidArgumentError, match=f"{e.count} source rows match the table row"):
                    run()
            assert _files(root + "/sql") == before
            return
        r_py, r_sql = py_builder.execute(), ctfile.spark.sql(spark, text)
        for r in (r_py, r_sql):
            assert (r.num_inserted_rows, r.num_updated_rows, r.num_deleted_rows) == outcome.counts, text
        assert r_sql.committed == r_py.committed and sq.refresh().version == py.refresh().version
        assert _state(sq, ids) == _state(py, ids), text
        if r_sql.committed:
            for mode in MODES:
                assert _changes(sq, r_sql.version, mode) == _changes(py, r_py.version, mode), (mode, text)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=4, **SETTINGS)
@given(**CASES)
def test_sql_text_matches_the_python_builder(spark, stmt, target, source):
    check_sql_text(spark, stmt, target, source, capture=bool(len(target) % 2))


@pytest.mark.long
@settings(max_examples=150, **{**SETTINGS, "derandomize": False})
@given(**CASES)
def test_sql_text_matches_the_python_builder_long(spark, stmt, target, source):
    check_sql_text(spark, stmt, target, source, capture=bool(len(target) % 2))
