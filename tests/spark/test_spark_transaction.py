"""``CtfileTable.transaction``: several Spark statements, one version
(SPEC §Copy-on-write; §Streams for ``consuming``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from ctfile.spark import CtfileTable
from spark_helpers import spark_conf

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())])
DDL = "id long, v string, n long"


def _files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


@pytest.fixture
def table(tmp_path, spark):
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, partition_rows=2)
    t.insert(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"], "n": [1, 2, 3, 4]}, schema=SCHEMA))
    return t, CtfileTable.for_path(spark, t.uri)


def test_statements_commit_as_one_version_each_seeing_the_earlier(spark, table):
    t, ct = table
    ids = {r["id"]: r[ctfile.ROW_ID_COLUMN] for r in t.to_arrow(include_hidden=True).to_pylist()}
    batch = spark.createDataFrame([(2, "B", 20, "upsert"), (3, None, None, "delete"), (5, "e", 5, "upsert")],
                                  DDL + ", op string")
    with ct.transaction() as tx:
        got = [tx.insert(spark.createDataFrame([(6, "f", 6)], DDL)),
               tx.merge_builder(batch, on="id").when_matched_delete(condition="s.op = 'delete'")
                 .when_matched_update(set={"v": "s.v", "n": "t.n + s.n"})
                 .when_not_matched_insert_all(condition="s.op = 'upsert'").execute(),
               tx.update("id >= 5", {"n": "n * 100"}),   # sees the rows the insert and the merge staged
               tx.delete("id = 1"),
               tx.merge(spark.createDataFrame([(4, "D", 4)], DDL), on="id")]
        assert t.refresh().version == 1  # nothing committed yet
    assert [(c["inserted"], c["updated"], c["deleted"]) for c in got] == [
        (1, 0, 0), (1, 1, 1), (0, 2, 0), (0, 0, 1), (0, 1, 0)]
    assert tx.result.version == 2 and t.refresh().version == 2
    rows = {r["id"]: r for r in t.to_arrow(include_hidden=True).to_pylist()}
    assert {i: (r["v"], r["n"]) for i, r in rows.items()} == {
        2: ("B", 22), 4: ("D", 4), 5: ("e", 500), 6: ("f", 600)}
    assert rows[2][ctfile.ROW_ID_COLUMN] == ids[2] and rows[4][ctfile.ROW_ID_COLUMN] == ids[4]
    assert t.history()[0].operation_parameters["engine"] == "spark"


def test_a_failed_statement_commits_nothing(spark, table):
    t, ct = table
    before = _files(t.uri)
    dup = spark.createDataFrame([(2, "x", 1), (2, "y", 2)], DDL)
    with pytest.raises(ctfile.InvalidArgumentError, match="2 source rows match the table row with key"):
        with ct.transaction() as tx:
            tx.update("id = 1", {"v": "'z'"})
            tx.insert(spark.createDataFrame([(9, "i", 9)], DDL))
            tx.merge_builder(dup, on="id").when_matched_update_all().execute()
    assert t.refresh().version == 1 and _files(t.uri) == before
    with pytest.raises(ctfile.SchemaMismatchError):
        with ct.transaction() as tx:
            tx.delete("id = 1")
            tx.update("nope = 1", {"v": "'z'"})
    assert t.refresh().version == 1 and _files(t.uri) == before


def test_app_transactions_are_exactly_once(spark, table):
    t, ct = table
    for _ in range(2):
        with ct.transaction(app_id="job", app_version=7) as tx:
            tx.update("id = 1", {"n": "n + 1"})
    assert tx.result.app_transaction_replayed and t.refresh().version == 2
    assert {r["id"]: r["n"] for r in t.to_arrow().to_pylist()}[1] == 2


def test_consuming_a_stream_exactly_once(spark, tmp_path, table):
    silver, ct = table
    bronze = ctfile.create_table(str(tmp_path / "bronze"), SCHEMA)
    stream = bronze.create_stream("to_silver")
    bronze.insert(pa.table({"id": [2, 7], "v": ["B", "g"], "n": [20, 70]}, schema=SCHEMA))

    def apply_pending():
        with ct.transaction(consuming=stream) as tx:
            changes = stream.pending().to_arrow()
            upserts = changes.filter(pa.compute.field("METADATA$ACTION") == "INSERT").select(SCHEMA.names)
            if upserts.num_rows:
                tx.merge_builder(spark.createDataFrame(upserts), on="id").when_matched_update_all() \
                    .when_not_matched_insert_all().execute()
        return tx.result

    r = apply_pending()
    assert r.committed and (r.num_updated_rows, r.num_inserted_rows) == (1, 1)
    assert not stream.pending().to_arrow().num_rows
    again = apply_pending()  # nothing pending: no row changes
    assert again.num_inserted_rows == again.num_updated_rows == 0
    assert {x["id"]: x["v"] for x in silver.to_arrow().to_pylist()} == {1: "a", 2: "B", 3: "c", 4: "d", 7: "g"}


@pytest.mark.parametrize("local", ["0", "10000"], ids=["executors", "driver"])
def test_a_transaction_captures_the_changes_a_python_one_does(spark, tmp_path, local):
    """With change capture on, statements that rewrite what earlier ones of
    the transaction wrote give the change rows of the Python transaction
    doing the same (SPEC §Change capture: one version's net changes)."""
    import pyarrow.compute as pc
    import shutil

    props = {"ctfile.changeCapture": "before_after"}
    py = ctfile.create_table(str(tmp_path / "py"), SCHEMA, partition_rows=2, properties=props)
    py.insert(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"], "n": [1, 2, 3, 4]}, schema=SCHEMA))
    shutil.copytree(tmp_path / "py", tmp_path / "sp")
    sp = ctfile.open_table(str(tmp_path / "sp"))
    new = pa.table({"id": [5, 6], "v": ["e", "f"], "n": [5, 6]}, schema=SCHEMA)
    with py.transaction() as tx:
        tx.insert(new)
        tx.update(pc.field("id") >= 4, {"n": pc.field("n") * 10})
        tx.delete(pc.field("id") == 6)
        tx.update(pc.field("id") == 4, {"v": "D"})   # the second update of row 4 in the transaction
        tx.merge_builder(pa.table({"id": [1, 5]}), on="id").when_matched_delete(condition=pc.field("t.id") == 1) \
            .when_matched_update(set={"v": "E"}).execute()
    ct = CtfileTable.for_path(spark, sp.uri)
    with spark_conf(spark, "spark.ctfile.local.sourceRows", local), ct.transaction() as stx:
        stx.insert(spark.createDataFrame(new.to_pylist(), DDL))
        stx.update("id >= 4", {"n": "n * 10"})
        stx.delete("id = 6")
        stx.update("id = 4", {"v": "'D'"})
        stx.merge_builder(spark.createDataFrame([(1,), (5,)], "id long"), on="id") \
            .when_matched_delete(condition="t.id = 1").when_matched_update(set={"v": "'E'"}).execute()
    assert py.version == sp.refresh().version == 2

    def state(t):
        rows = t.to_arrow(include_hidden=True).to_pylist()
        return sorted((r["id"], r["v"], r["n"], r[ctfile.ROW_VERSION_COLUMN]) for r in rows)

    def changes(t, mode):
        rows = t.changes(start_version=2, end_version=2, information=mode).to_arrow().to_pylist()
        return sorted((r["METADATA$ACTION"], r["METADATA$ISUPDATE"], r["id"], r["v"], r["n"]) for r in rows)

    assert state(sp) == state(py)
    for mode in ("default", "append_only", "audit"):
        assert changes(sp, mode) == changes(py, mode), mode
    assert changes(sp, "default") == [("DELETE", False, 1, "a", 1), ("DELETE", True, 4, "d", 4),
                                      ("INSERT", False, 5, "E", 50), ("INSERT", True, 4, "D", 40)]
