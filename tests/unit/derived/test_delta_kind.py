"""What a plan's delta reads besides the change (``CompiledQuery.delta_kind``,
``ctfile.derived.DeltaKind``), which ``refresh_mode="auto"``'s cost model
weighs (``ctfile.spark.derived_cost``): checked against the views the
rendered delta SQL itself reads, without Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctfile import InvalidArgumentError
from ctfile.derived import DeltaKind, NonIncrementalPlanError, SourceViews, ViewNames, compile_query

SOURCES = ("a", "b")
VIEWS = {s: ViewNames(new=f"{s}_n", old=f"{s}_o", delta=f"{s}_d") for s in SOURCES}
#: One query per kind of delta; the benchmark's deduplication (a window
#: count beside the ROW_NUMBER: not a deduplication's rule) among them.
QUERIES = {
    "filter": "SELECT a.id, a.v FROM a WHERE a.v > 0",
    "inner join": "SELECT a.id, b.w FROM a JOIN b ON a.k = b.k",
    "linear aggregate": "SELECT k, sum(v) AS s, count(*) AS n FROM a GROUP BY k",
    "min": "SELECT k, min(v) AS m FROM a GROUP BY k",
    "having": "SELECT k, sum(v) AS s FROM a GROUP BY k HAVING sum(v) > 3",
    "left join": "SELECT a.id, b.w FROM a LEFT JOIN b ON a.k = b.k",
    "not in": "SELECT a.id FROM a WHERE a.k NOT IN (SELECT b.k FROM b WHERE b.w > 0)",
    "dedup": "SELECT id, v FROM a QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) = 1",
    "bench dedup": ("SELECT id, k, v, count(*) OVER (PARTITION BY id DIV 10) AS n FROM a "
                    "QUALIFY ROW_NUMBER() OVER (PARTITION BY id DIV 10 ORDER BY v DESC, id) = 1"),
    "running sum": "SELECT id, sum(v) OVER (PARTITION BY k ORDER BY id) AS s FROM a",
}


def _plan(name: str):
    return compile_query(QUERIES[name], sources=SOURCES)


def _reads(sql: str, view: str) -> bool:
    return f"`{view}`" in sql


@pytest.mark.parametrize("name, updated, appended", [
    ("filter", DeltaKind.CHANGE, DeltaKind.CHANGE),
    ("inner join", DeltaKind.CHANGE, DeltaKind.CHANGE),
    ("linear aggregate", DeltaKind.CHANGE, DeltaKind.CHANGE),
    ("min", DeltaKind.GROUPS, DeltaKind.CHANGE),  # min over appends combines with the stored value
    ("having", DeltaKind.GROUPS, DeltaKind.GROUPS),
    ("left join", DeltaKind.JOIN_KEYS, DeltaKind.JOIN_KEYS),
    ("not in", DeltaKind.JOIN_KEYS, DeltaKind.JOIN_KEYS),
    ("dedup", DeltaKind.PARTITIONS, DeltaKind.APPENDED_TOP_ROWS),
    ("bench dedup", DeltaKind.PARTITIONS, DeltaKind.PARTITIONS),
    ("running sum", DeltaKind.PARTITIONS, DeltaKind.PARTITIONS),
])
def test_each_rule_says_what_its_delta_reads(name, updated, appended):
    plan = _plan(name)
    everything = {s: False for s in plan.sources}
    assert plan.delta_kind(appended_only=everything) is updated
    assert plan.delta_kind(appended_only={s: True for s in plan.sources}) is appended


def test_a_deduplication_without_the_table_offered_recomputes_partitions():
    assert _plan("dedup").delta_kind(appended_only={"a": True}, target=False) is DeltaKind.PARTITIONS


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(QUERIES)), appended=st.booleans(), other=st.booleans(), target=st.booleans())
def test_the_kind_is_what_the_delta_sql_reads(name, appended, other, target):
    """Differential: the kind a plan states equals what its rendered delta
    reads: no source state for CHANGE over one source and for the
    deduplication over appends, the new state for GROUPS and PARTITIONS,
    the new and the old states for JOIN_KEYS; a window plan offered the
    table reads its old rows there, else from the old state."""
    plan = _plan(name)
    appended_only = {s: (appended if i == 0 else other) for i, s in enumerate(plan.sources)}
    views = SourceViews(VIEWS, target="dt" if target else None)
    sql = plan.delta(views, data_timestamp_ms=0, appended_only=appended_only).source_sql
    kind = plan.delta_kind(appended_only=appended_only, target=target)
    states = {(s, state): _reads(sql, getattr(VIEWS[s], state)) for s in plan.sources for state in ("new", "old")}
    first = plan.sources[0]
    if kind is DeltaKind.APPENDED_TOP_ROWS:
        assert not any(states.values()) and _reads(sql, "dt")
    elif kind is DeltaKind.CHANGE and len(plan.sources) == 1:
        assert not any(states.values())
    elif kind is DeltaKind.GROUPS:
        assert states[(first, "new")]  # (HAVING's held groups come from the table, when offered)
    elif kind is DeltaKind.PARTITIONS:
        assert states[(first, "new")] and _reads(sql, "dt") == target and states[(first, "old")] != target
    elif kind is DeltaKind.JOIN_KEYS:
        assert all(states.values())


def test_delta_kind_refuses_what_delta_refuses():
    with pytest.raises(NonIncrementalPlanError):
        compile_query("SELECT id, row_number() OVER (ORDER BY id) AS rn FROM a", sources=SOURCES).delta_kind(
            appended_only={"a": False})
    with pytest.raises(InvalidArgumentError, match="appended_only"):
        _plan("inner join").delta_kind(appended_only={"a": False})
