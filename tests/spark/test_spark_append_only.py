"""Append-only tables through Spark (SPEC §Append-only tables): ``ctfile.spark``
DML, its SQL statements and the data source's overwrite refuse a table with
``ctfile.appendOnly`` before any task writes a file; INSERT and an
insert-only MERGE go through; a derived table over an append-only source
says so in ``explain()`` and keeps ``min``/``max`` and ``count(DISTINCT)``
incrementally."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
import ctfile.spark
from ctfile.spark import derived
from derived_helpers import expected_rows, multiset

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def events(tmp_path) -> ctfile.Table:
    t = ctfile.create_table(str(tmp_path / "events"), SCHEMA, properties={"ctfile.appendOnly": "true"})
    t.insert(pa.table({"id": [1, 2, 3, 4], "k": [0, 0, 1, 1], "v": [5, 7, 1, 9]}, schema=SCHEMA))
    return t


def test_spark_dml_is_refused_and_inserts_go_through(spark, events):
    root = Path(events.uri)
    ct = ctfile.spark.CtfileTable.for_path(spark, events.uri)
    uri = f"ctfile.`{events.uri}`"
    source = spark.createDataFrame([(1, 0, 50), (9, 2, 90)], "id long, k long, v long")
    refused = {
        "delete": lambda: ct.delete("id = 1"),
        "update": lambda: ct.update("id = 1", {"v": "0"}),
        "merge": lambda: ct.merge(source, on="id"),
        "sql delete": lambda: ctfile.spark.sql(spark, f"DELETE FROM {uri} WHERE k = 0"),
        "sql merge": lambda: ctfile.spark.sql(spark, f"""
            MERGE INTO {uri} AS t USING (SELECT 1L AS id, 0L AS k, 0L AS v) AS s ON t.id = s.id
            WHEN MATCHED THEN DELETE"""),
        "sql insert overwrite": lambda: ctfile.spark.sql(spark, f"INSERT OVERWRITE {uri} VALUES (5, 0, 1)"),
        "data source overwrite": lambda: source.write.format("ctfile").mode("overwrite").save(events.uri),
    }
    for name, call in refused.items():
        before = _files(root)
        with pytest.raises(Exception) as info:
            call()
        assert "ctfile.appendOnly" in str(info.value), (name, info.value)
        assert _files(root) == before, name
        assert ctfile.open_table(events.uri).version == 1, name
    r = ctfile.spark.sql(spark, f"""
        MERGE INTO {uri} AS t USING (SELECT * FROM VALUES (1L, 0L, 0L), (5L, 2L, 3L) AS s(id, k, v)) AS s
        ON t.id = s.id WHEN NOT MATCHED THEN INSERT *""")
    assert (r.num_inserted_rows, r.num_updated_rows, r.num_deleted_rows) == (1, 0, 0)
    assert sorted(ctfile.open_table(events.uri).to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_a_derived_min_max_over_an_append_only_source(spark, tmp_path, events):
    query = "SELECT k, min(v) AS lo, max(v) AS hi, count(*) AS n FROM events GROUP BY k"
    gold = derived.create(spark, str(tmp_path / "gold"), query, sources={"events": events.uri},
                          refresh_mode="incremental")
    text = str(gold.explain())
    assert "append-only sources: events (ctfile.appendOnly)" in text
    assert "min/max: combined with the stored value (least/greatest): every source is append-only" in text
    assert "the append-only change scan" in text
    events.insert(pa.table({"id": [5, 6, 7], "k": [0, 1, 2], "v": [1, 20, 4]}, schema=SCHEMA))
    r = gold.refresh()
    assert r.action is ctfile.RefreshAction.INCREMENTAL and "events appended 3 rows" in r.reason, r
    table = gold.table.refresh()
    cols = ["k", "lo", "hi", "n"]
    want = multiset(expected_rows(spark, query, {"events": events}, table.derived.frontier), cols)
    assert multiset(table.to_arrow(), cols) == want
    assert want[(1, 1, 20, 3)] == 1 and want[(2, 4, 4, 1)] == 1


def test_a_derived_count_distinct_over_an_append_only_source(spark, tmp_path, events):
    """count(DISTINCT) over appends through a real refresh: a value the
    group held (k 0: 5), a NULL, a new value (k 1: 2) and a new group (k 2)."""
    query = "SELECT k, count(DISTINCT v) AS nv, sum(v) AS sv FROM events GROUP BY k"
    gold = derived.create(spark, str(tmp_path / "gold"), query, sources={"events": events.uri},
                          refresh_mode="incremental")
    assert "count(DISTINCT): the stored count plus" in str(gold.explain())
    events.insert(pa.table({"id": [5, 6, 7, 8], "k": [0, 1, 2, 0], "v": [5, 2, 4, None]}, schema=SCHEMA))
    r = gold.refresh()
    assert r.action is ctfile.RefreshAction.INCREMENTAL and "events appended 4 rows" in r.reason, r
    table = gold.table.refresh()
    cols = ["k", "nv", "sv"]
    want = multiset(expected_rows(spark, query, {"events": events}, table.derived.frontier), cols)
    assert multiset(table.to_arrow(), cols) == want
    assert want == multiset(pa.table({"k": [0, 1, 2], "nv": [2, 3, 1], "sv": [17, 12, 4]}), cols)
