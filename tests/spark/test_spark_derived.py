"""Derived tables on Spark (SPEC §Derived tables): the derivation columns are
hidden from ``spark.read.format("ctfile")`` and ``ctfile.spark`` reads, a
MERGE on the executors inside a refresh transaction carries them for the rows
it copies, and every Spark write outside a refresh is refused with
DerivedTableError, nothing written."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from ctfile.spark import CtfileTable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "table"))
from derived_support import full_refresh, make_pair, refresh_info  # noqa: E402
from spark_helpers import spark_conf  # noqa: E402

VISIBLE = ["id", "v"]


def _files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


@pytest.fixture
def pair(tmp_path, spark):
    source, derived = make_pair(tmp_path, partition_rows=2)
    full_refresh(derived, source)
    return source, derived, CtfileTable.for_path(spark, derived.uri)


def test_spark_reads_hide_the_derivation_columns(spark, pair):
    _, derived, ct = pair
    df = spark.read.format("ctfile").load(derived.uri)
    assert df.columns == VISIBLE and sorted(r.id for r in df.collect()) == [1, 2, 3, 4]
    assert ct.to_df().columns == VISIBLE
    changes = spark.read.format("ctfile").option("changes", "default").option("startingVersion", 1).load(derived.uri)
    assert changes.columns[:2] == VISIBLE and "_ct_dt_key" not in changes.columns
    assert ct.changes_df(1).columns[:2] == VISIBLE


@pytest.mark.parametrize("spread", ["0", "100000"], ids=["join", "spread"])
def test_a_spark_merge_in_a_refresh_carries_the_derivation_columns(spark, pair, spread):
    """On Spark's join and spread over the executors (ctfile.spark.local.run_spread)."""
    source, derived, ct = pair
    keys = {r["id"]: r["_ct_dt_key"] for r in derived.to_arrow(include_hidden=True).to_pylist()}
    source.insert(pa.table({"id": [5], "v": ["e"]}))  # the delta below is what a refresh would compute
    delta = spark.createDataFrame([(1, "A", keys[1], 1), (5, "e", "k5", 1)],
                                  "id long, v string, _ct_dt_key string, _ct_dt_rows long")
    with spark_conf(spark, "spark.ctfile.local.spreadRows", spread), \
            ct.transaction(refresh=refresh_info(source, "INCREMENTAL", 2, 2)) as tx:
        got = (tx.merge_builder(delta, on="_ct_dt_key").when_matched_update(set={"v": "s.v"})
               .when_not_matched_insert_all().execute())
    assert (got["inserted"], got["updated"]) == (1, 1) and tx.result.operation == "REFRESH"
    rows = {r["id"]: (r["v"], r["_ct_dt_key"], r["_ct_dt_rows"]) for r in derived.to_arrow(include_hidden=True).to_pylist()}
    assert rows == {1: ("A", keys[1], 1), 2: ("b", keys[2], 1), 3: ("c", keys[3], 1), 4: ("d", keys[4], 1),
                    5: ("e", "k5", 1)}  # id 2 was copied by the executor's rewrite, with its key
    assert derived.refresh().derived.frontier[0].version == source.version


def test_spark_writes_outside_a_refresh_are_refused(spark, pair):
    _, derived, ct = pair
    before = _files(derived.uri)
    row = spark.createDataFrame([(9, "z")], "id long, v string")
    writes = [
        lambda: ct.merge(row, on="id"),
        lambda: ct.update("id = 1", {"v": "'q'"}),
        lambda: ct.delete("id = 1"),
        lambda: ct.restore(version=0),
        lambda: row.write.format("ctfile").mode("append").save(derived.uri),
        lambda: row.write.format("ctfile").mode("overwrite").save(derived.uri),
    ]
    for write in writes:
        with pytest.raises(Exception, match="derivedTables"):
            write()
    with pytest.raises(ctfile.DerivedTableError, match="derivedTables"):
        with ct.transaction() as tx:
            tx.insert(row)
    assert _files(derived.uri) == before and derived.refresh().version == 1
