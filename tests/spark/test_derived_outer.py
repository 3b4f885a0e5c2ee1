"""Outer, semi and anti joins and HAVING end to end (SPEC §Derived tables,
``ctfile.derived.outer_joins``): a fact table ``a`` joined to a dimension
``b`` whose rows appear and disappear, so facts gain and lose their
partner; every refresh is INCREMENTAL, and after it the table equals its
query at the recorded frontier and its change scan is exactly the
difference (check_exact of test_derived).

``NOT IN (subquery)`` (the null-aware anti join) has a differential test
of its own over the compiler's views (test_derived_compiler's
``run_history``): random histories whose subquery table becomes empty and
non-empty and gains and loses NULL values, under outer rows with NULL
keys; after each delta the table equals Spark's own NOT IN."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.spark import derived
from derived_helpers import apply_op, make_sources
from test_derived import check_exact
import test_derived_compiler
from test_derived_compiler import run_history

#: The session with one shuffle partition (test_derived_compiler's fixture).
small_spark = test_derived_compiler.small_spark

QUERIES = {
    "left_join": "SELECT a.id, a.k, b.w FROM a LEFT JOIN b ON a.k = b.k",
    "full_join": "SELECT a.id, b.k AS bk, b.w FROM a FULL OUTER JOIN b ON a.k = b.k AND b.w < 150",
    "not_exists": "SELECT a.id, a.s FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.w < 100)",
    "having": ("SELECT a.k, count(*) AS n, max(b.w) AS mw FROM a LEFT JOIN b ON a.k = b.k "
               "GROUP BY a.k HAVING count(*) > 4"),
    # Through the executor; NOT_IN_QUERIES below walk the subquery through its states.
    "not_in": "SELECT a.id, a.s FROM a WHERE a.k NOT IN (SELECT b.k FROM b WHERE b.w < 99)",
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
SLOW = ("full_join", "having", "not_in", "not_exists")


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


# ------------------------------------------------ NOT IN (null-aware anti join)

#: Over test_derived_compiler's sources: a (id, k, v, s, d), b (id, k, w,
#: name), c (id, k, x); c is the subquery's table.
NOT_IN_QUERIES = {
    "not_in": "SELECT a.id, a.k FROM a WHERE a.k NOT IN (SELECT c.k FROM c WHERE c.x > 0)",
    "not_in_filtered": "SELECT a.id, a.v FROM a WHERE a.v IS NOT NULL AND a.k NOT IN (SELECT c.k FROM c)",
    # The null-extended b rows have a NULL a.k: kept only while c is empty.
    "not_in_full_join": ("SELECT a.id, b.id AS bid FROM a FULL OUTER JOIN b ON a.k = b.k "
                         "WHERE a.k NOT IN (SELECT c.k FROM c WHERE c.x >= 0)"),
    "not_in_group": ("SELECT a.s, count(*) AS n, max(a.v) AS mv FROM a "
                     "WHERE a.k NOT IN (SELECT c.k FROM c WHERE c.x > 0) GROUP BY a.s"),
}
_KEY = st.one_of(st.none(), st.integers(0, 3))
_ROWS = {
    "a": st.tuples(_KEY, st.one_of(st.none(), st.integers(-2, 3)), st.sampled_from(["x", "y", None]), st.none()),
    "b": st.tuples(_KEY, st.integers(0, 3), st.sampled_from(["n", "m"])),
    "c": st.tuples(_KEY, st.integers(-1, 2)),
}
_CHANGE = st.sampled_from(["keep"] * 6 + ["update", "delete"])


@st.composite
def not_in_histories(draw, steps: int = 3):
    """Per source, ``steps + 1`` states. a and b change a little between
    states (most rows kept), so most keys are not in the delta and a row
    whose outcome changes must be recomputed through the subquery's state;
    c's states are drawn on their own from four row ids (rows kept,
    updated, deleted or inserted), often empty, with keys often NULL."""
    ids = st.sampled_from([f"c{n}" for n in range(4)])
    out = {"c": [draw(st.dictionaries(ids, _ROWS["c"], max_size=4)) for _ in range(steps + 1)]}
    for source in ("a", "b"):
        out[source] = [{f"{source}{n}": draw(_ROWS[source]) for n in range(draw(st.integers(1, 6)))}]
        for step in range(steps):
            out[source].append(_next_state(draw, source, out[source][-1], step))
    return out


def _next_state(draw, source: str, state: dict, step: int) -> dict:
    """``state`` with most rows kept, some updated or deleted, and at most one inserted."""
    change = {rid: draw(_CHANGE) for rid in state}
    state = {rid: draw(_ROWS[source]) if change[rid] == "update" else values
             for rid, values in state.items() if change[rid] != "delete"}
    state.update({f"{source}+{step}": draw(_ROWS[source]) for _ in range(draw(st.integers(0, 1)))})
    return state


#: c's subquery (with ``c.x > 0`` or ``>= 0``) goes: non-empty without NULL, holding a
#: NULL, empty, non-empty again, then a NULL the WHERE filters out (without a WHERE: a
#: NULL held); a's NULL-keyed row stays, and a fact moves from NULL to key 3 and back.
FIXED_NOT_IN = {
    "a": [{"a0": (1, 1, "x", None), "a1": (2, 2, "y", None), "a2": (None, 3, "x", None), "a3": (None, 1, "y", None)},
          {"a0": (1, 1, "x", None), "a1": (2, 2, "y", None), "a2": (None, 3, "x", None), "a3": (None, 1, "y", None)},
          {"a0": (1, 1, "x", None), "a1": (2, 2, "y", None), "a2": (None, 3, "x", None), "a3": (3, 1, "y", None)},
          {"a0": (1, 1, "x", None), "a1": (2, 2, "y", None), "a2": (None, 3, "x", None), "a3": (3, 1, "y", None)},
          {"a0": (1, 1, "x", None), "a1": (2, 2, "y", None), "a2": (None, 3, "x", None), "a3": (None, 1, "y", None)}],
    "b": [{"b0": (1, 0, "n"), "b1": (0, 1, "m")}] * 5,
    "c": [{"c0": (1, 1)}, {"c0": (1, 1), "c1": (None, 1)}, {}, {"c2": (2, 1)}, {"c2": (2, 1), "c3": (None, -1)}],
}


# By default the FULL JOIN form only (its flag must add every table's keys,
# and its NULL outer keys are kept only while the subquery is empty); the
# other forms run under -m long (the suite's 20-minute budget).
@pytest.mark.parametrize("name", [n if n == "not_in_full_join" else pytest.param(n, marks=pytest.mark.long)
                                  for n in sorted(NOT_IN_QUERIES)])
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@example(history=FIXED_NOT_IN)
@given(history=not_in_histories())
def test_not_in_delta_equals_sparks_not_in(small_spark, name, history):
    """The fixed history walks c's subquery through every state; one random
    history per query by default (25 each in the long run below)."""
    run_history(small_spark, None, history, query=NOT_IN_QUERIES[name])


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("name", sorted(NOT_IN_QUERIES))
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=not_in_histories(steps=4))
def test_not_in_delta_equals_sparks_not_in_long(small_spark, name, history):
    run_history(small_spark, None, history, query=NOT_IN_QUERIES[name])
