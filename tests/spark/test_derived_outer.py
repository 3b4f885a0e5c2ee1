"""Outer, semi and anti joins and HAVING end to end (SPEC §Derived tables,
``ctfile.derived.outer_joins``): a fact table ``a`` joined to a dimension
``b`` whose rows appear and disappear, so facts gain and lose their
partner; every refresh is INCREMENTAL, and after it the table equals its
query at the recorded frontier and its change scan is exactly the
difference (check_exact of test_derived)."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.spark import derived
from derived_helpers import apply_op, make_sources
from test_derived import check_exact

QUERIES = {
    "left_join": "SELECT a.id, a.k, b.w FROM a LEFT JOIN b ON a.k = b.k",
    "full_join": "SELECT a.id, b.k AS bk, b.w FROM a FULL OUTER JOIN b ON a.k = b.k AND b.w < 150",
    "not_exists": "SELECT a.id, a.s FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.w < 100)",
    "having": ("SELECT a.k, count(*) AS n, max(b.w) AS mw FROM a LEFT JOIN b ON a.k = b.k "
               "GROUP BY a.k HAVING count(*) > 4"),
}

#: b's keys start as 0, 1, 1, 2, NULL; a's are 0..3 and NULL. Each batch is one refresh.
HISTORY = [
    [("b_delete", 1, 0)],                      # the facts of key 1 lose both partners
    [("b_insert", 1, 3)],                      # ... and gain one again (plus a NULL-keyed dim row)
    [("b_insert", 3, 0), ("update", 2, 3)],    # key 3 gains a partner; facts move to key 3
    [("b_delete", 3, 0), ("delete", 0, 0)],    # key 3 loses it; the facts of key 0 go
    [("insert", 1, 4), ("b_delete", 2, 0)],    # new facts (some NULL-keyed); key 2 loses its partner
]


#: Behind ``-m long`` (a minute or more each on the suite's machine); the
#: compiler's differential test runs their rules on every default run.
SLOW = ("full_join", "having")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n in SLOW else n for n in sorted(QUERIES)])
def test_outer_joins_refresh_incrementally_as_partners_come_and_go(spark, tmp_path, name):
    a, b = make_sources(tmp_path)
    sources = {"a": a, "b": b}
    t = derived.create(spark, str(tmp_path / "d"), QUERIES[name], sources={"a": a.uri, "b": b.uri},
                       refresh_mode="incremental")
    contents = check_exact(spark, t, sources, None)
    for batch in HISTORY:
        for op in batch:
            apply_op(a, b, op)
        r = t.refresh()
        assert r.action is ctfile.RefreshAction.INCREMENTAL, r
        contents = check_exact(spark, t, sources, contents if r.version is not None else None)


def test_a_fact_gaining_its_partner_is_a_delete_and_an_insert(spark, tmp_path):
    """The null-extended row and the matched row are different derivation
    keys, so the table's change scan shows the null-extended row deleted
    and the matched one inserted (as Snowflake's outer join does)."""
    a, b = make_sources(tmp_path)
    t = derived.create(spark, str(tmp_path / "d"), QUERIES["left_join"], sources={"a": a.uri, "b": b.uri},
                       refresh_mode="incremental")
    facts = sorted(r["id"] for r in a.to_arrow().filter(pc.field("k") == 3).to_pylist())
    assert facts, "the sources have facts of key 3 without a partner"
    apply_op(a, b, ("b_insert", 3, 0))  # a dimension row of key 3 (w = 100) and one of key NULL
    assert t.refresh().action is ctfile.RefreshAction.INCREMENTAL
    table = t.table.refresh()
    changes = table.changes(start_version=table.version, end_version=table.version).to_arrow().to_pylist()
    deleted = sorted(r["id"] for r in changes if r["METADATA$ACTION"] == "DELETE")
    inserted = sorted((r["id"], r["w"]) for r in changes if r["METADATA$ACTION"] == "INSERT")
    assert deleted == facts and inserted == [(i, 100) for i in facts]
    assert all(r["w"] is None for r in changes if r["METADATA$ACTION"] == "DELETE")
