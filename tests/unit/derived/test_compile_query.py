"""compile_query (contract C3 of issue 29): validation, blockers, the plan's
surface and explain(), without Spark (tests/spark/test_derived_compiler.py
runs the SQL)."""

from __future__ import annotations

import json

import pytest

import ctfile
from ctfile.derived import (
    Blocker, ClauseKind, CompiledQuery, MergeClause, NonIncrementalPlanError, OperatorKind, SourceViews, ViewNames, compile_query,
)

SOURCES = ("silver", "dim")
VIEWS = SourceViews({s: ViewNames(new=f"{s}_n", old=f"{s}_o", delta=f"{s}_d") for s in SOURCES})
APPENDED = {"silver": False, "dim": False}


def _error(query, **kwargs) -> str:
    with pytest.raises(ctfile.InvalidArgumentError) as info:
        compile_query(query, sources=kwargs.pop("sources", SOURCES), **kwargs)
    return str(info.value)


@pytest.mark.parametrize("query, expected", [
    ("SELECT a FROM silver; SELECT b FROM dim", "one SELECT statement, found 2 statements"),
    ("INSERT INTO silver VALUES (1)", "must be a SELECT statement, found INSERT"),
    ("SELECT a FROM", "not valid Spark SQL"),
    ("", "non-empty Spark SQL text"),
    ("SELECT a FROM gold", "table 'gold', which is not a source; the sources are ['dim', 'silver']"),
    ("SELECT a FROM db.silver", "table 'db.silver', which is not a source"),
    ("SELECT a FROM silver JOIN (SELECT * FROM other) o ON silver.a = o.a", "table 'other'"),
    ("SELECT a, b AS a FROM silver", "'a' appears twice"),
    ("SELECT a, b AS A FROM silver", "'A' appears twice"),
    ("SELECT a AS _ct_x FROM silver", "'_ct_x' starts with '_ct_'"),
    ("SELECT a + 1 FROM silver", "output column 1 (a + 1) has no name: give it one with AS <name>"),
    ("SELECT * FROM silver", "pass columns={source: [column names]}"),
    ("SELECT x.a FROM silver x JOIN silver x ON x.a = x.a", "each table occurrence needs its own alias"),
    ("SELECT a FROM silver VERSION AS OF 3", "time travel (VERSION/TIMESTAMP AS OF) is not allowed"),
    ("SELECT", "must select at least one column"),
])
def test_invalid_queries_raise_typed_errors_naming_what_was_found(query, expected):
    assert expected in _error(query)


def test_invalid_arguments():
    assert "non-empty sequence of source names" in _error("SELECT a FROM silver", sources="silver")
    assert "unique" in _error("SELECT a FROM silver", sources=("silver", "SILVER"))
    assert "columns must be a mapping" in _error("SELECT a FROM silver", columns=["a"])
    assert "columns has no entry for 'dim'" in _error("SELECT * FROM dim", columns={"silver": ["a"]})
    plan = compile_query("SELECT a FROM silver", sources=SOURCES)
    with pytest.raises(ctfile.InvalidArgumentError, match="views has no entry for the sources"):
        plan.full(SourceViews({"dim": VIEWS["dim"]}), data_timestamp_ms=0)
    with pytest.raises(ctfile.InvalidArgumentError, match="must be a ctfile.derived.SourceViews"):
        plan.full({"silver": VIEWS["silver"]}, data_timestamp_ms=0)
    with pytest.raises(ctfile.InvalidArgumentError, match="data_timestamp_ms must be a non-negative int"):
        plan.full(VIEWS, data_timestamp_ms=-1)
    with pytest.raises(ctfile.InvalidArgumentError, match="appended_only must map every source"):
        plan.delta(VIEWS, data_timestamp_ms=0, appended_only={})
    with pytest.raises(ctfile.InvalidArgumentError, match="ViewNames.delta must be a non-empty view name"):
        ViewNames(new="a", old="b", delta="")
    with pytest.raises(ctfile.InvalidArgumentError, match="no views for source 'x'"):
        VIEWS["x"]


def test_star_expands_from_the_given_columns():
    plan = compile_query("SELECT *, d.name FROM silver s JOIN dim d ON s.k = d.k", sources=SOURCES,
                         columns={"silver": ["k", "v"], "dim": ["dk", "name2"]})
    assert plan.output_columns == ("k", "v", "dk", "name2", "name")
    assert compile_query("SELECT d.* FROM silver s JOIN dim d ON s.k = d.k", sources=SOURCES,
                         columns={"silver": ["k"], "dim": ["x", "y"]}).output_columns == ("x", "y")
    assert "'k' appears twice" in _error("SELECT * FROM silver s JOIN dim d ON s.k = d.k",
                                         columns={"silver": ["k"], "dim": ["k"]})


@pytest.mark.parametrize("query, operator", [
    ("SELECT k, row_number() OVER (ORDER BY k) AS r FROM silver", "window without PARTITION BY"),
    ("SELECT k, ntile(2) OVER (PARTITION BY k ORDER BY v) AS r FROM silver", "window function"),
    ("SELECT s.k FROM silver s LEFT JOIN dim d ON s.k < d.k", "LEFT OUTER JOIN"),
    ("SELECT s.k FROM silver s FULL OUTER JOIN dim d ON k = d.k", "FULL OUTER JOIN"),
    ("SELECT s.k FROM silver s LEFT SEMI JOIN dim d ON s.k = d.k OR s.v = d.v", "LEFT SEMI JOIN"),
    ("SELECT s.k FROM silver s LEFT ANTI JOIN dim d", "LEFT ANTI JOIN without ON"),
    ("SELECT s.k FROM silver s LEFT JOIN dim d ON s.k = d.k LEFT JOIN dim e ON e.k = s.v", "LEFT OUTER JOIN"),
    ("SELECT s.k FROM silver s NATURAL LEFT JOIN dim d", "NATURAL LEFT JOIN"),
    ("SELECT s.k FROM silver s WHERE (s.k, s.v) NOT IN (SELECT d.k, d.v FROM dim d)", "NOT IN (subquery)"),
    ("SELECT s.k FROM silver s WHERE s.k NOT IN (SELECT d.k FROM dim d WHERE d.v > s.v)", "NOT IN (subquery)"),
    ("SELECT s.k FROM silver s WHERE EXISTS (SELECT 1 FROM dim d WHERE d.k = s.k GROUP BY d.k)", "EXISTS"),
    ("SELECT s.k FROM silver s WHERE NOT EXISTS (SELECT 1 FROM dim WHERE k = s.k)", "NOT EXISTS"),
    ("SELECT s.k FROM silver s WHERE EXISTS (SELECT 1 FROM dim s WHERE s.k = 1)", "EXISTS"),
    ("SELECT s.k FROM silver s WHERE s.k IN (SELECT d.k, d.v FROM dim d)", "IN (subquery)"),
    ("SELECT s.k FROM silver s WHERE s.k > 0 OR EXISTS (SELECT 1 FROM dim d WHERE d.k = s.k)", "subquery"),
    ("SELECT k FROM silver HAVING k > 1", "HAVING"),
    ("SELECT s.k FROM silver s CROSS JOIN dim d", "CROSS JOIN"),
    ("SELECT s.k FROM silver s JOIN dim d ON s.k < d.k", "INNER JOIN"),
    ("SELECT s.k FROM silver s JOIN dim d USING (k)", "JOIN USING"),
    ("SELECT k FROM silver UNION SELECT k FROM dim", "UNION"),
    ("SELECT k FROM silver INTERSECT SELECT k FROM dim", "INTERSECT"),
    ("SELECT k FROM silver EXCEPT SELECT k FROM dim", "EXCEPT"),
    ("SELECT k FROM silver ORDER BY k", "ORDER BY"),
    ("SELECT k FROM silver LIMIT 3", "LIMIT"),
    ("SELECT k FROM silver UNION ALL SELECT k FROM dim ORDER BY k", "ORDER BY"),
    ("SELECT k FROM silver WHERE k IN (SELECT k FROM dim)", "subquery"),
    ("SELECT k FROM (SELECT k FROM silver) AS q", "FROM"),
    ("WITH q AS (SELECT k FROM silver) SELECT k FROM q", "WITH"),
    ("SELECT k, rand() AS r FROM silver", "rand()"),
    ("SELECT k FROM silver TABLESAMPLE (10 PERCENT)", "TABLESAMPLE"),
    ("SELECT s.k FROM silver s LATERAL VIEW explode(s.a) t AS x", "LATERAL VIEW"),
    ("SELECT id FROM range(10)", "FROM"),
    ("SELECT k, random() AS r FROM silver", "rand()"),
    ("SELECT k, uuid() AS r FROM silver", "uuid()"),
    ("SELECT k, shuffle(arr) AS r FROM silver", "shuffle()"),
    ("SELECT k, monotonically_increasing_id() AS r FROM silver", "monotonically_increasing_id()"),
    ("SELECT k, my_udf(k) AS r FROM silver", "my_udf()"),
    ("SELECT k, collect_list(v) AS l FROM silver GROUP BY k", "aggregate"),
    ("SELECT k, sum(DISTINCT v) AS l FROM silver GROUP BY k", "aggregate"),
    ("SELECT k, sum(v) / count(*) AS l FROM silver GROUP BY k", "aggregate"),
    ("SELECT k, v, count(*) AS n FROM silver GROUP BY k", "aggregate"),
    ("SELECT k, count(DISTINCT v, w) AS n FROM silver GROUP BY k", "aggregate"),
    ("SELECT k, count(*) AS n FROM silver GROUP BY ROLLUP (k)", "GROUP BY ROLLUP/CUBE/GROUPING SETS"),
    ("SELECT k, count(*) AS n FROM silver GROUP BY k UNION ALL SELECT k, 1 AS n FROM dim", "UNION ALL"),
])
def test_constructs_without_an_incremental_rule_are_blockers(query, operator):
    plan = compile_query(query, sources=SOURCES)
    assert not plan.incremental
    assert operator in [b.operator for b in plan.blockers], plan.blockers
    assert all(isinstance(b, Blocker) and b.reason for b in plan.blockers)
    explanation = plan.explain()
    assert not explanation.incremental and operator in str(explanation)
    with pytest.raises(NonIncrementalPlanError, match="no incremental plan"):
        plan.delta(VIEWS, data_timestamp_ms=0, appended_only=APPENDED)
    full = plan.full(VIEWS, data_timestamp_ms=0)
    assert "ROW_NUMBER() OVER (PARTITION BY" in full.source_sql and plan.hidden_columns == (("_ct_dt_key", "string"),)
    assert [c.kind for c in full.clauses][-1] is ClauseKind.NOT_MATCHED_BY_SOURCE_DELETE


def test_time_functions_are_bound_to_the_data_timestamp():
    plan = compile_query("SELECT k, current_timestamp() AS ts, now() AS n, current_date() AS d FROM silver",
                         sources=SOURCES)
    assert plan.incremental
    sql = plan.full(VIEWS, data_timestamp_ms=1700000000123).source_sql
    assert sql.count("TIMESTAMP_MILLIS(1700000000123)") == 3 and "TO_DATE(TIMESTAMP_MILLIS" in sql
    assert "CURRENT_TIMESTAMP" not in sql.upper().replace("TIMESTAMP_MILLIS", "")


def test_sources_are_in_first_use_order_and_views_are_read():
    plan = compile_query("SELECT d.k FROM dim d JOIN silver s ON d.k = s.k JOIN dim e ON e.k = s.k", sources=SOURCES)
    assert plan.sources == ("dim", "silver") and plan.output_columns == ("k",)
    delta = plan.delta(VIEWS, data_timestamp_ms=0, appended_only=APPENDED)
    # three telescoping terms: (d delta, s old, e old), (d new, s delta, e old), (d new, s new, e delta)
    assert delta.source_sql.count("`dim_d` AS d") == 1 and delta.source_sql.count("`dim_d` AS e") == 1
    assert delta.source_sql.count("`silver_d` AS s") == 1 and delta.source_sql.count("`silver_o` AS s") == 1
    assert delta.control_columns == ("_ct_dt_op",)


@pytest.mark.parametrize("query, hidden", [
    ("SELECT k, v FROM silver", ["_ct_dt_key"]),
    ("SELECT k, count(*) AS n, count(v) AS c, max(v) AS m FROM silver GROUP BY k", ["_ct_dt_key", "_ct_dt_rows"]),
    ("SELECT k, sum(v) AS s, avg(w) AS a FROM silver GROUP BY k",
     ["_ct_dt_key", "_ct_dt_rows", "_ct_dt_cnt_1", "_ct_dt_sum_2", "_ct_dt_cnt_2"]),
    ("SELECT DISTINCT k, v FROM silver", ["_ct_dt_key", "_ct_dt_rows"]),
])
def test_hidden_columns(query, hidden):
    plan = compile_query(query, sources=SOURCES)
    assert [c for c, _ in plan.hidden_columns] == hidden
    assert plan.hidden_columns[0] == ("_ct_dt_key", "string")


def test_min_max_combine_when_appended_and_recompute_otherwise():
    plan = compile_query("SELECT k, min(v) AS lo, max(v) AS hi FROM silver GROUP BY k", sources=SOURCES)
    appended = plan.delta(VIEWS, data_timestamp_ms=0, appended_only={"silver": True, "dim": False})
    assert "LEAST(t.`lo`, s.`lo`)" in str(appended) and not appended.control_columns
    recomputed = plan.delta(VIEWS, data_timestamp_ms=0, appended_only=APPENDED)
    assert "`silver_n` AS silver" in recomputed.source_sql and recomputed.control_columns == ("_ct_dt_op",)


_JOIN = "FROM silver s JOIN dim d ON s.k = d.k"


@pytest.mark.parametrize("query, appended, combined", [
    ("SELECT k, count(DISTINCT v) AS n FROM silver GROUP BY k", ("silver",), True),
    ("SELECT k, count(DISTINCT v) AS n FROM silver GROUP BY k", (), False),
    ("SELECT count(DISTINCT v) AS n, sum(v) AS t, min(v) AS lo FROM silver", ("silver",), True),
    (f"SELECT s.k, count(DISTINCT d.x) AS n {_JOIN} GROUP BY s.k", ("silver", "dim"), True),
    (f"SELECT s.k, count(DISTINCT d.x) AS n {_JOIN} GROUP BY s.k", ("silver",), False),
    ("SELECT s.k, count(DISTINCT d.x) AS n FROM silver s LEFT JOIN dim d ON s.k = d.k GROUP BY s.k",
     ("silver", "dim"), False),
    ("SELECT k, count(DISTINCT v) AS n FROM silver GROUP BY k HAVING count(DISTINCT v) > 1", ("silver",), False),
])
def test_count_distinct_combines_only_over_appends(query, appended, combined):
    """A block whose sources all only appended, without outer join or
    HAVING, adds to the stored count the appended values its group's old
    rows lack (an anti join against the block over the old views); any
    other recomputes the affected groups. explain() says which."""
    plan = compile_query(query, sources=SOURCES)
    delta = plan.delta(VIEWS, data_timestamp_ms=0, appended_only={s: s in appended for s in SOURCES})
    has_anti_join = "LEFT ANTI JOIN `_ct_m" in delta.source_sql
    assert has_anti_join is combined and ("`_ct_f`" in delta.source_sql) is not combined
    assert delta.control_columns == (() if combined else ("_ct_dt_op",))
    if combined:
        assert all(f"`{s}_o` AS" in delta.source_sql for s in plan.sources)  # the old state of every occurrence
        assert "(t.`n` + s.`n`)" in str(delta)
    declared = tuple(s for s in appended if s in plan.sources)
    rule = {r.operator: r.rule for r in plan.explain(append_only=declared).rows}["aggregate"]
    assert ("every source is append-only (ctfile.appendOnly), no group is recomputed" in rule) is combined
    assert plan.linear_aggregate(data_timestamp_ms=0, appended_only=dict.fromkeys(SOURCES, True)) is None


def test_each_count_distinct_has_its_own_anti_join():
    plan = compile_query("SELECT k, count(DISTINCT v) AS a, count(DISTINCT w) AS b, count(*) AS n "
                         "FROM silver GROUP BY k", sources=SOURCES)
    sql = plan.delta(VIEWS, data_timestamp_ms=0, appended_only=dict.fromkeys(SOURCES, True)).source_sql
    assert sql.count("LEFT ANTI JOIN") == 2 and "`_ct_n1`" in sql and "`_ct_n2`" in sql
    assert "COALESCE(`_ct_n1`.`_ct_new`, 0) AS `a`" in sql


def test_explain_rows_text_and_json():
    plan = compile_query("SELECT s.k, count(*) AS n FROM silver s JOIN dim d ON s.k = d.k WHERE d.x > 0 GROUP BY s.k",
                         sources=SOURCES)
    explanation = plan.explain()
    assert [r.operator for r in explanation.rows] == ["aggregate", "filter", "inner join", "scan", "scan"]
    assert all(r.incremental for r in explanation.rows)
    root = plan.operators
    assert (root.kind, root.inputs[0].kind, root.inputs[0].inputs[0].kind) == (
        OperatorKind.AGGREGATE, OperatorKind.FILTER, OperatorKind.INNER_JOIN)
    text = str(explanation).splitlines()
    assert text[0] == "incremental: yes" and text[3].startswith("    inner join 2 inputs  [incremental] telescoping")
    data = json.loads(explanation.to_json())
    assert data == explanation.as_json() and data["blockers"] == [] and data["operators"][3]["detail"] == "silver AS s"
    blocked = compile_query("SELECT k FROM silver ORDER BY k", sources=SOURCES).explain()
    assert blocked.as_json()["blockers"][0]["operator"] == "ORDER BY"
    assert str(blocked).splitlines()[:2] == ["incremental: no (full refresh only)",
                                              "query full recomputation  [full] blocked by 1 operator(s)"]


def test_union_all_keys_are_prefixed_by_branch():
    plan = compile_query("SELECT k FROM silver UNION ALL SELECT k FROM dim UNION ALL SELECT v AS k FROM silver",
                         sources=SOURCES)
    assert plan.incremental and plan.explain().rows[0].detail == "3 branches"
    sql = plan.full(VIEWS, data_timestamp_ms=0).source_sql
    assert "CONCAT_WS(':', 'b0'," in sql and "'b2'" in sql


def test_merge_clause_text_and_repr():
    clause = MergeClause(ClauseKind.MATCHED_UPDATE, "NOT (t.a <=> s.a)", (("a", "s.a"),))
    assert str(clause) == "WHEN MATCHED AND NOT (t.a <=> s.a) THEN UPDATE SET a = s.a"
    plan = compile_query("SELECT k FROM silver", sources=SOURCES)
    assert isinstance(plan, CompiledQuery) and "incremental=True" in repr(plan)
    full = plan.full(VIEWS, data_timestamp_ms=0)
    assert str(full).splitlines()[1:] == [
        "WHEN MATCHED AND NOT (t.`k` <=> s.`k`) THEN UPDATE SET k = s.`k`",
        "WHEN NOT MATCHED THEN INSERT _ct_dt_key = s.`_ct_dt_key`, k = s.`k`",
        "WHEN NOT MATCHED BY SOURCE THEN DELETE",
    ]


def test_group_by_an_output_alias_groups_by_its_expression():
    """Spark's ``groupByAliases``: a GROUP BY name that is no source column
    but an output alias groups by the output's expression; a source column
    of that name wins; with the source columns unknown it stays a blocker."""
    columns = {"silver": ["id", "k", "v", "s"]}
    plan = compile_query("SELECT upper(s) AS u, count(*) AS n FROM silver GROUP BY U", sources=("silver",), columns=columns)
    assert plan.incremental
    assert "GROUP BY UPPER(s)" in plan.full(VIEWS, data_timestamp_ms=0).source_sql
    shadowed = compile_query("SELECT k + 1 AS k, count(*) AS n FROM silver GROUP BY k", sources=("silver",), columns=columns)
    assert [b.operator for b in shadowed.blockers] == ["aggregate"]  # grouped by the column k, not by k + 1
    unknown = compile_query("SELECT upper(s) AS u, count(*) AS n FROM silver GROUP BY u", sources=("silver",))
    assert [b.operator for b in unknown.blockers] == ["aggregate"]
