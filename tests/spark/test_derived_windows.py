"""Window functions in derived tables end to end (SPEC §Derived tables,
"Incremental rules: windows"; ``ctfile.derived.windows``): a deduplication
query over a real ctfile source refreshes INCREMENTALLY through inserts,
updates, deletes and a MERGE, and after each refresh the table equals the
query run by Spark at the recorded frontier and its change scan is the
minimal difference (``check_exact`` of test_derived)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.spark import derived
from derived_helpers import a_rows, make_sources
from test_derived import check_exact

#: Deduplication by ``k`` (NULL is a key of its own), latest ``s`` first;
#: ``id`` makes Spark's own result, the oracle, independent of row order.
DEDUP = {
    "qualify": "SELECT * FROM a QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY s DESC, id) = 1",
    "subquery": ("SELECT id, k, s FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY s DESC, id) AS rn "
                 "FROM a WHERE v IS NOT NULL) AS t WHERE rn = 1"),
}


@pytest.mark.parametrize("form", [pytest.param(f, marks=pytest.mark.long) if f == "subquery" else f
                                  for f in sorted(DEDUP)])  # one form by default: the planner makes them one
def test_dedup_refreshes_incrementally(spark, tmp_path, form):
    a, _ = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "dedup"), DEDUP[form], sources={"a": a.uri}, refresh_mode="incremental")
    assert "ties broken by row id" in str(t.explain())
    contents = check_exact(spark, t, {"a": a}, None)
    steps = [
        lambda: a.insert(a_rows([100, 101, 102], 3)),  # new rows, some of them winners
        lambda: a.update(pc.field("id") == 101, {"s": pa.scalar("zz")}),  # a winner changes
        lambda: a.update(pc.field("k") == 1, {"k": pa.scalar(2, pa.int32())}),  # rows move between partitions
        lambda: a.delete(pc.field("s") == "zz"),  # a winner goes: the runner-up takes its place
        lambda: a.merge(a_rows([3, 4, 200], 5), "id"),
        lambda: a.delete(pc.is_null(pc.field("k"))),  # the NULL partition empties out
    ]
    for step in steps:
        step()
        r = t.refresh()
        assert r.action is ctfile.RefreshAction.INCREMENTAL, r
        contents = check_exact(spark, t, {"a": a}, contents)
    assert len(contents) == len({row[1] for row in contents.elements()})  # one row per k


def test_dedup_of_an_append_only_source_compares_appends_with_the_table(spark, tmp_path):
    """Over an append-only source (``ctfile.appendOnly``) a deduplication's
    refresh ranks the appended rows against the rows the table holds, by
    their stored ORDER BY values and row ids: late older rows change
    nothing, newer ones replace their partition's row, and a NULL key is a
    partition of its own (ties by row id: the compiler's tests; here ``id``
    ends the ORDER BY so Spark's own result is the oracle)."""
    a = ctfile.create_table(str(tmp_path / "a"), a_rows([0], 0).schema, partition_rows=8,
                            properties={"ctfile.appendOnly": "true"})
    a.insert(a_rows(list(range(20)), 0))
    query = "SELECT id, k, s FROM a QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY s DESC NULLS LAST, v, id) = 1"
    t = derived.create(spark, str(tmp_path / "dedup"), query, sources={"a": a.uri}, refresh_mode="incremental")
    window = [r for r in t.explain().rows if r.operator == "window"][0]
    assert "compared with the row the table holds" in window.rule and "append-only" in window.rule
    contents = check_exact(spark, t, {"a": a}, None)
    for ids, seed in [([100, 101, 102], 3), ([103, 104], 1), (list(range(200, 230)), 2), ([300], 5)]:
        a.insert(a_rows(ids, seed))
        r = t.refresh()
        assert r.action is ctfile.RefreshAction.INCREMENTAL, r
        contents = check_exact(spark, t, {"a": a}, contents)
    assert len(contents) == len({row[1] for row in contents.elements()})  # one row per k
