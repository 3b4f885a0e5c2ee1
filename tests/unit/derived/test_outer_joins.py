"""Outer, semi and anti joins, EXISTS/IN subqueries and HAVING in the
compiler (``ctfile.derived.outer_joins``, aggregates' recompute path),
without Spark: what is incremental, the blockers, the key, the SQL's shape
and explain() (tests/spark/test_derived_compiler.py runs the SQL)."""

from __future__ import annotations

import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from ctfile.derived import OperatorKind, SourceViews, ViewNames, compile_query

SOURCES = ("a", "b", "c")
VIEWS = SourceViews({s: ViewNames(new=f"{s}_n", old=f"{s}_o", delta=f"{s}_d") for s in SOURCES})
NOT_APPENDED = dict.fromkeys(SOURCES, False)
COLUMNS = {"a": ["id", "k", "v"], "b": ["id", "k", "w"], "c": ["id", "k", "x"]}


def _delta(plan, appended=False):
    return plan.delta(VIEWS, data_timestamp_ms=0, appended_only={s: appended for s in plan.sources})


def _kinds(plan):
    found, stack = [], [plan.operators]
    while stack:
        op = stack.pop()
        found.append(op.kind)
        stack.extend(reversed(op.inputs))
    return found


def test_outer_join_keys_keep_an_empty_slot_for_the_null_extended_side():
    plan = compile_query("SELECT a.id, b.w FROM a LEFT JOIN b ON a.k = b.k", sources=SOURCES)
    assert plan.incremental and plan.hidden_columns == (("_ct_dt_key", "string"),)
    full = plan.full(VIEWS, data_timestamp_ms=0).source_sql
    assert ("CONCAT_WS(':', COALESCE(`a`.`METADATA$ROW_ID`, ''), COALESCE(`b`.`METADATA$ROW_ID`, ''))" in full)
    assert "LEFT JOIN `b_n` AS b ON a.k = b.k" in full


def test_semi_and_anti_joins_are_keyed_by_the_left_side_only():
    for kind in ("LEFT SEMI", "LEFT ANTI"):
        plan = compile_query(f"SELECT a.id FROM a {kind} JOIN b ON a.k = b.k", sources=SOURCES)
        full = plan.full(VIEWS, data_timestamp_ms=0).source_sql
        assert plan.incremental and "CONCAT_WS(':', COALESCE(`a`.`METADATA$ROW_ID`, ''))" in full
        assert "`b`.`METADATA$ROW_ID`" not in full


def test_the_delta_recomputes_the_affected_keys_of_both_states():
    plan = compile_query("SELECT a.id, b.w FROM a FULL OUTER JOIN b ON a.k = b.k WHERE b.w > 0 OR b.w IS NULL",
                         sources=SOURCES)
    refresh = _delta(plan)
    sql = refresh.source_sql
    assert refresh.control_columns == ("_ct_dt_op",) and [c.kind.value for c in refresh.clauses] == [
        "when_matched_delete", "when_matched_update", "when_not_matched_insert"]
    # The affected keys: both sources' change rows (either image), restricting every view null-safely.
    assert sql.count("SELECT `k` AS `_ct_jk` FROM `a_d` UNION ALL SELECT `k` AS `_ct_jk` FROM `b_d`") == 4
    assert sql.count("IS NOT DISTINCT FROM `_ct_ks`.`_ct_jk`") == 4
    for view in ("a_n", "a_o", "b_n", "b_o"):
        assert f"FROM `{view}` AS `_ct_v`" in sql
    assert "CASE WHEN n.`_ct_dt_key` IS NULL THEN 'delete' ELSE 'upsert' END AS `_ct_dt_op`" in sql
    sqlglot.parse_one(sql, read="spark")


def test_exists_not_exists_and_in_become_semi_and_anti_joins():
    cases = {
        "SELECT a.id FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.w > 0) AND a.v > 1":
            ("LEFT SEMI JOIN `b_n` AS b ON b.k = a.k AND b.w > 0 WHERE a.v > 1", OperatorKind.SEMI_JOIN),
        "SELECT a.id FROM a WHERE NOT EXISTS (SELECT * FROM c x WHERE x.k = a.k)":
            ("LEFT ANTI JOIN `c_n` AS x ON x.k = a.k", OperatorKind.ANTI_JOIN),
        "SELECT a.id FROM a WHERE a.k IN (SELECT b.k FROM b WHERE b.w IS NOT NULL)":
            ("LEFT SEMI JOIN `b_n` AS b ON a.k = b.k AND NOT b.w IS NULL", OperatorKind.SEMI_JOIN),
    }
    for query, (text, kind) in cases.items():
        plan = compile_query(query, sources=SOURCES)
        assert plan.incremental, plan.blockers
        assert text in plan.full(VIEWS, data_timestamp_ms=0).source_sql
        assert kind in _kinds(plan)


_STATE = "(SELECT CASE WHEN COUNT(*) = 0 THEN 0 WHEN COUNT(*) > COUNT(b.k) THEN 1 ELSE 2 END FROM `{}` AS `b` WHERE b.w > 0)"


def test_not_in_is_an_anti_join_with_the_subquerys_state():
    """NOT IN: the anti join ON x = y, kept rows filtered by the subquery's
    state read from its whole table at the same state."""
    plan = compile_query("SELECT a.id FROM a WHERE a.v > 1 AND a.k NOT IN (SELECT b.k FROM b WHERE b.w > 0)",
                         sources=SOURCES)
    assert plan.incremental, plan.blockers
    assert OperatorKind.NULL_AWARE_ANTI_JOIN in _kinds(plan) and OperatorKind.ANTI_JOIN not in _kinds(plan)
    full = plan.full(VIEWS, data_timestamp_ms=0).source_sql
    condition = f"CASE {_STATE.format('b_n')} WHEN 0 THEN TRUE WHEN 2 THEN NOT a.k IS NULL ELSE FALSE END"
    assert full.endswith(f"LEFT ANTI JOIN `b_n` AS b ON a.k = b.k AND b.w > 0 WHERE a.v > 1 AND {condition}")
    sql = _delta(plan).source_sql
    sqlglot.parse_one(sql, read="spark")
    # The new rows read the new state, the old rows the old one.
    assert sql.count(condition) == 1 and sql.count(condition.replace("b_n", "b_o")) == 1
    # A change of state makes every key of a's new and old states affected (in each of the 4 restrictions).
    changed = f"{_STATE.format('b_n')} <> {_STATE.format('b_o')}"
    assert [sql.count(f"SELECT `k` AS `_ct_jk` FROM `{v}` WHERE {changed}") for v in ("a_n", "a_o")] == [4, 4]
    assert "FROM `b_n` WHERE" not in sql and "FROM `b_o` WHERE" not in sql  # the subquery's keys are not needed


def test_explain_names_the_null_aware_anti_join():
    plan = compile_query("SELECT a.id FROM a WHERE a.k NOT IN (SELECT b.k FROM b WHERE b.w > 0)", sources=SOURCES)
    row = next(r for r in plan.explain().rows if r.operator == "null-aware anti join (NOT IN)")
    assert row.detail == "ON a.k = b.k AND b.w > 0" and "every key is recomputed when the subquery's state" in row.rule


def test_not_in_over_a_full_join_recomputes_both_sides_keys():
    """A null-extended row of b has a NULL a.k: kept only while c is empty,
    so a change of c's state must recompute b's keys too."""
    plan = compile_query("SELECT a.id, b.w FROM a FULL OUTER JOIN b ON a.k = b.k WHERE a.k NOT IN (SELECT c.k FROM c)",
                         sources=SOURCES)
    assert plan.incremental, plan.blockers
    sql = _delta(plan).source_sql
    for view in ("a_n", "a_o", "b_n", "b_o"):
        assert f"SELECT `k` AS `_ct_jk` FROM `{view}` WHERE (SELECT CASE" in sql


def test_multi_column_and_correlated_not_in_are_refreshed_in_full():
    cases = {
        "SELECT a.id FROM a WHERE (a.k, a.v) NOT IN (SELECT b.k, b.w FROM b)": "multi-column NOT IN",
        "SELECT a.id FROM a WHERE a.k NOT IN (SELECT b.k FROM b WHERE b.w > a.v)": "correlated NOT IN",
    }
    for query, named in cases.items():
        plan = compile_query(query, sources=SOURCES)
        reasons = {b.operator: b.reason for b in plan.blockers}
        assert not plan.incremental and named in reasons["NOT IN (subquery)"], reasons
        assert "null-aware" in reasons["NOT IN (subquery)"] and "NOT EXISTS" in reasons["NOT IN (subquery)"]
        assert "LEFT ANTI JOIN" not in plan.full(VIEWS, data_timestamp_ms=0).source_sql  # Spark runs it as written


def test_star_over_a_semi_join_is_the_left_columns():
    plan = compile_query("SELECT * FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k)", sources=SOURCES,
                         columns=COLUMNS)
    assert plan.output_columns == ("id", "k", "v") and plan.incremental
    explicit = compile_query("SELECT * FROM a LEFT ANTI JOIN b ON a.k = b.k", sources=SOURCES, columns=COLUMNS)
    assert explicit.output_columns == ("id", "k", "v")


def test_explain_names_each_join_and_its_rule():
    plan = compile_query("SELECT a.id, b.w, c.x FROM a JOIN b ON a.k = b.k RIGHT JOIN c ON c.k = b.k", sources=SOURCES)
    rows = plan.explain().rows
    assert [(r.operator, r.detail) for r in rows[1:3]] == [
        ("right outer join", "ON c.k = b.k"), ("inner join by key", "ON a.k = b.k")]
    assert all(r.rule.startswith("the join keys touched by the delta are recomputed from the new state: "
                                 "-old rows, +new rows") for r in rows[1:3])
    assert "empty slot for a null-extended side" in rows[1].rule
    inner = compile_query("SELECT a.id, b.w FROM a JOIN b ON a.k = b.k", sources=SOURCES).explain().rows
    assert inner[1].operator == "inner join" and inner[1].rule.startswith("telescoping")


def test_having_recomputes_the_affected_groups_with_the_old_membership():
    plan = compile_query("SELECT k, count(*) AS n, sum(v) AS sv FROM a GROUP BY k HAVING sum(v) > 10", sources=SOURCES)
    assert plan.incremental and _kinds(plan)[:2] == [OperatorKind.HAVING, OperatorKind.AGGREGATE]
    assert plan.linear_aggregate(data_timestamp_ms=0, appended_only={"a": True}) is None
    sql = _delta(plan, appended=True).source_sql  # appends can make a group leave a HAVING too
    assert "`_ct_o` AS (SELECT" in sql and "FROM `a_o` AS a" in sql and sql.count("HAVING SUM(v) > 10") == 2
    assert "`_ct_net` < 0" not in sql
    rows = plan.explain().rows
    assert rows[0].operator == "having" and "a group leaving it is deleted, one entering it inserted" in rows[0].rule
    full = plan.full(VIEWS, data_timestamp_ms=0).source_sql
    assert "HAVING SUM(v) > 10" in full


def test_an_aggregate_over_an_outer_join_signs_the_affected_keys_rows():
    plan = compile_query("SELECT b.w, count(*) AS n, max(a.v) AS m FROM a LEFT JOIN b ON a.k = b.k GROUP BY b.w",
                         sources=SOURCES)
    assert plan.incremental
    sql = _delta(plan, appended=True).source_sql
    # Appending to b can remove a null-extended row: max is recomputed, never combined with GREATEST.
    assert "`_ct_f`" in sql and "1 AS `_ct_sign`" in sql and "-1 AS `_ct_sign`" in sql
    explained = str(plan.explain(append_only=("a", "b")))
    assert "min/max: combined" not in explained and "min/max: the affected groups are recomputed" in explained
    linear = compile_query("SELECT b.w, count(*) AS n FROM a LEFT JOIN b ON a.k = b.k GROUP BY b.w", sources=SOURCES)
    refresh = _delta(linear)
    assert not refresh.control_columns and "(t.`n` + s.`n`)" in str(refresh)


def test_a_union_all_mixes_keyed_and_telescoped_branches():
    plan = compile_query("SELECT a.id, b.w FROM a LEFT JOIN b ON a.k = b.k UNION ALL SELECT b.id, b.w FROM b "
                         "UNION ALL SELECT a.id, c.x FROM a LEFT SEMI JOIN c ON a.k = c.k", sources=SOURCES)
    assert plan.incremental
    sql = _delta(plan).source_sql
    assert sql.startswith("WITH `_ct_d` AS") and "AS `_ct_k0`" in sql and "AS `_ct_k1`" in sql
    assert "'b0'" in sql and "'b1'" in sql and "'b2'" in sql
    sqlglot.parse_one(sql, read="spark")


_KINDS = ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL OUTER JOIN", "LEFT SEMI JOIN", "LEFT ANTI JOIN"]


@settings(max_examples=60, deadline=None)
@given(joins=st.lists(st.tuples(st.sampled_from(_KINDS), st.sampled_from(["k", "k", "id"]), st.booleans()),
                      min_size=1, max_size=2))
def test_a_block_is_keyed_iff_every_join_meets_the_key(joins):
    """Random join chains over a, b, c: incremental exactly when some join
    is outer/semi/anti and every join equates its table's key with the key
    column of the FROM table (or is all inner, telescoped); the blocker
    names the first join that breaks the key."""
    tables = ["b", "c"]
    text, key_of_a, keyed, breaks = "SELECT a.id FROM a", None, False, None
    for (kind, col, extra), table in zip(joins, tables):
        filter_ = f" AND {table}.id > 0" if extra else ""
        text += f" {kind} {table} ON a.{col} = {table}.k{filter_}"
        keyed |= kind != "JOIN"
        key_of_a = key_of_a or col
        if col != key_of_a and breaks is None:
            breaks = kind
    plan = compile_query(text, sources=SOURCES)
    assert plan.incremental == (not keyed or breaks is None), (text, plan.blockers)
    if not plan.incremental:
        assert all("key column of an earlier table" in b.reason for b in plan.blockers)
    else:
        sqlglot.parse_one(_delta(plan).source_sql, read="spark")
