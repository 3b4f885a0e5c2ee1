"""Window functions in the compiler (ctfile.derived.windows, SPEC §Derived
tables "Incremental rules: windows"), without Spark: what is incremental,
the blockers, the tie-break and explain(). tests/spark/test_derived_compiler.py
runs the SQL against Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctfile.derived import OperatorKind, SourceViews, ViewNames, compile_query
from ctfile.derived.version import PLAN_VERSION

SOURCES = ("src", "dim")
COLUMNS = {"src": ["id", "key", "ts", "v"], "dim": ["key", "name"]}
VIEWS = SourceViews({s: ViewNames(new=f"{s}_n", old=f"{s}_o", delta=f"{s}_d") for s in SOURCES})
DEDUP = "SELECT * FROM src QUALIFY ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts DESC) = 1"
SUBQUERY = ("SELECT id, key, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts DESC) AS rn "
            "FROM src WHERE v > 0) AS t WHERE rn = 1")


def _plan(query):
    return compile_query(query, sources=SOURCES, columns=COLUMNS)


@pytest.mark.parametrize("query, outputs", [
    (DEDUP, ("id", "key", "ts", "v")),
    (SUBQUERY, ("id", "key", "v")),
    ("WITH t AS (SELECT id, key, RANK() OVER (PARTITION BY key ORDER BY ts) AS r FROM src) "
     "SELECT t.id, r FROM t WHERE r <= 2", ("id", "r")),
    ("SELECT * FROM (SELECT id, DENSE_RANK() OVER (PARTITION BY key ORDER BY v) AS dr FROM src) q WHERE dr <= 2",
     ("id", "dr")),
    ("SELECT id, LAG(v) OVER (PARTITION BY key ORDER BY ts) AS p, LEAD(v, 2, 0) OVER (PARTITION BY key ORDER BY ts) AS n "
     "FROM src", ("id", "p", "n")),
    ("SELECT id, last_value(v) OVER (PARTITION BY key ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED "
     "FOLLOWING) AS l FROM src", ("id", "l")),
    ("SELECT id, sum(v) OVER (PARTITION BY key ORDER BY ts) AS s, count(*) OVER (PARTITION BY key) AS c, "
     "avg(v) OVER (PARTITION BY key ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS a, "
     "min(v) OVER (PARTITION BY key ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS m FROM src",
     ("id", "s", "c", "a", "m")),
    ("SELECT s.id, d.name, ROW_NUMBER() OVER (PARTITION BY d.name ORDER BY s.ts) AS rn FROM src s JOIN dim d "
     "ON s.key = d.key", ("id", "name", "rn")),
])
def test_window_blocks_are_incremental_with_row_keys(query, outputs):
    plan = _plan(query)
    assert plan.incremental, plan.blockers
    assert plan.output_columns == outputs
    # The key, then one partition value per PARTITION BY expression (all these partition by one),
    # then a deduplication's ORDER BY values (both dedups order by ts).
    dedup = (("_ct_dt_wo0", None),) if query in (DEDUP, SUBQUERY) else ()
    assert plan.hidden_columns == (("_ct_dt_key", "string"), ("_ct_dt_wp0", None), *dedup)
    kinds = []
    op = plan.operators
    while op is not None:
        kinds.append(op.kind)
        op = op.inputs[0] if op.inputs else None
    assert OperatorKind.WINDOW in kinds


@pytest.mark.parametrize("query, operator, reason", [
    ("SELECT id, ROW_NUMBER() OVER (ORDER BY ts) AS rn FROM src", "window without PARTITION BY", "refreshed in full"),
    ("SELECT id FROM src QUALIFY RANK() OVER (ORDER BY ts) = 1", "window without PARTITION BY", "refreshed in full"),
    ("SELECT id, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS a, RANK() OVER (PARTITION BY v ORDER BY ts) AS b "
     "FROM src", "window function", "partition differently"),
    ("SELECT id, NTILE(2) OVER (PARTITION BY key ORDER BY ts) AS t FROM src", "window function", "only ROW_NUMBER"),
    ("SELECT id, PERCENT_RANK() OVER (PARTITION BY key ORDER BY ts) AS t FROM src", "window function", "only ROW_NUMBER"),
    ("SELECT id, count(DISTINCT v) OVER (PARTITION BY key) AS t FROM src", "window function", "DISTINCT"),
    ("SELECT id, last_value(v) OVER (PARTITION BY key ORDER BY ts) AS t FROM src", "window function", "RANGE frame"),
    ("SELECT id, first_value(v) OVER (PARTITION BY key ORDER BY ts RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) "
     "AS t FROM src", "window function", "write a ROWS frame"),
    ("SELECT key, count(*) AS n, RANK() OVER (PARTITION BY key ORDER BY count(*)) AS r FROM src GROUP BY key",
     "window function", "GROUP BY"),
    ("SELECT id FROM src QUALIFY v > 1", "QUALIFY", "without a window function"),
    ("SELECT id, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS r FROM src UNION ALL SELECT id, 1 AS r FROM src",
     "UNION ALL", "window functions"),
    ("SELECT s.id, ROW_NUMBER() OVER (PARTITION BY s.key ORDER BY s.ts) AS r FROM src s LEFT JOIN dim d ON s.key = d.key",
     "window function", "outer, semi or anti joins"),
    ("SELECT id, ROW_NUMBER() OVER (PARTITION BY key ORDER BY rand()) AS r FROM src", "rand()", "non-deterministic"),
    ("SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS rn FROM src) t "
     "WHERE rn = 1 ORDER BY id", "ORDER BY", "unordered"),
])
def test_windows_without_a_rule_are_blockers(query, operator, reason):
    plan = _plan(query)
    assert not plan.incremental
    found = [b for b in plan.blockers if b.operator == operator]
    assert found and reason in found[0].reason, plan.blockers
    assert "incremental: no" in str(plan.explain())


def test_window_without_partition_by_says_it_is_refreshed_in_full():
    plan = _plan("SELECT id, ROW_NUMBER() OVER (ORDER BY ts) AS rn FROM src")
    assert str(plan.blockers[0]).startswith("window without PARTITION BY: refreshed in full")
    assert "ROW_NUMBER" in plan.full(VIEWS, data_timestamp_ms=0).source_sql


def test_tie_break_by_row_id_only_where_peers_are_ordered():
    plan = _plan("SELECT id, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS a, RANK() OVER (PARTITION BY key "
                 "ORDER BY ts) AS b, LAG(v) OVER (PARTITION BY key ORDER BY ts) AS c, sum(v) OVER (PARTITION BY key "
                 "ORDER BY ts) AS d, sum(v) OVER (PARTITION BY key ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT "
                 "ROW) AS e, DENSE_RANK() OVER (PARTITION BY key ORDER BY ts) AS f FROM src")
    full = plan.full(VIEWS, data_timestamp_ms=0).source_sql
    delta = plan.delta(VIEWS, data_timestamp_ms=0, appended_only={"src": False}).source_sql
    tied = "ORDER BY ts, `src`.`METADATA$ROW_ID`"
    for sql in (full, delta):
        assert f"ROW_NUMBER() OVER (PARTITION BY key {tied})" in sql
        assert f"LAG(v) OVER (PARTITION BY key {tied})" in sql
        assert f"SUM(v) OVER (PARTITION BY key {tied} ROWS BETWEEN" in sql.replace("rows BETWEEN", "ROWS BETWEEN")
        assert "RANK() OVER (PARTITION BY key ORDER BY ts) AS `b`" in sql
        assert "DENSE_RANK() OVER (PARTITION BY key ORDER BY ts) AS `f`" in sql
        assert "SUM(v) OVER (PARTITION BY key ORDER BY ts) AS `d`" in sql
    assert full.count("`src`.`METADATA$ROW_ID`") == 3 + 1  # three tie-broken windows and the key
    assert plan.delta(VIEWS, data_timestamp_ms=0, appended_only={"src": False}).control_columns == ("_ct_dt_op",)


def test_delta_recomputes_the_touched_partitions():
    refresh = _plan(SUBQUERY).delta(VIEWS, data_timestamp_ms=0, appended_only={"src": True})
    sql = refresh.source_sql
    # Affected partitions from every image of the change scan (with the block's WHERE).
    assert "SELECT key AS `_ct_p0` FROM `src_d` AS src WHERE v > 0" in sql
    # New and old rows of those partitions only, matched null-safely.
    assert sql.count("`_ct_p`.`_ct_p0` IS NOT DISTINCT FROM (key)") == 2
    assert "FROM `src_n` AS src WHERE v > 0 AND EXISTS" in sql and "FROM `src_o` AS src WHERE v > 0 AND EXISTS" in sql
    # Old and new rows of a key side by side: a key only old is a delete,
    # a new or changed row an upsert, an unchanged row left out.
    assert "FROM `_ct_n` AS n FULL OUTER JOIN `_ct_o` AS o ON n.`_ct_dt_key` = o.`_ct_dt_key`" in sql
    assert "CASE WHEN n.`_ct_dt_key` IS NULL THEN 'delete' ELSE 'upsert' END" in sql
    assert ("WHERE n.`_ct_dt_key` IS NULL OR o.`_ct_dt_key` IS NULL OR NOT (n.`id` <=> o.`id` AND n.`key` <=> o.`key` "
            "AND n.`v` <=> o.`v` AND n.`_ct_dt_wp0` <=> o.`_ct_dt_wp0` AND n.`_ct_dt_wo0` <=> o.`_ct_dt_wo0`)") in sql
    assert [c.kind.value for c in refresh.clauses] == ["when_matched_delete", "when_matched_update",
                                                       "when_not_matched_insert"]


def test_delta_reads_the_old_rows_from_the_table_when_offered():
    """With the derived table as the target view, the affected partitions'
    old rows are the table's rows whose stored partition values match: the
    sources' old state is not read."""
    views = SourceViews(dict(VIEWS), target="dt")
    sql = _plan(SUBQUERY).delta(views, data_timestamp_ms=0, appended_only={"src": False}).source_sql
    assert "`src_o`" not in sql
    assert ("`_ct_o` AS (SELECT `_ct_t`.`id`, `_ct_t`.`key`, `_ct_t`.`v`, `_ct_t`.`_ct_dt_key`, `_ct_t`.`_ct_dt_wp0`, `_ct_t`.`_ct_dt_wo0` "
            "FROM `dt` AS `_ct_t` WHERE EXISTS (SELECT 1 FROM `_ct_p` WHERE `_ct_p`.`_ct_p0` <=> `_ct_t`.`_ct_dt_wp0`))") in sql
    # The new rows carry the partition value the table stores.
    assert "key AS `_ct_dt_wp0`" in sql


def test_join_delta_takes_partitions_from_each_telescoping_term():
    plan = _plan("SELECT s.id, d.name, ROW_NUMBER() OVER (PARTITION BY d.name ORDER BY s.ts) AS rn "
                 "FROM src s JOIN dim d ON s.key = d.key")
    sql = plan.delta(VIEWS, data_timestamp_ms=0, appended_only={"src": False, "dim": False}).source_sql
    assert "FROM `src_d` AS s JOIN `dim_o` AS d" in sql and "FROM `src_n` AS s JOIN `dim_d` AS d" in sql
    assert "ORDER BY s.ts, `s`.`METADATA$ROW_ID`, `d`.`METADATA$ROW_ID`" in sql


def test_explain_names_the_window_rule():
    text = str(_plan(DEDUP).explain())
    assert text.splitlines()[0] == "incremental: yes"
    window = next(line for line in text.splitlines() if line.strip().startswith("window "))
    assert "PARTITION BY key" in window and "QUALIFY ROW_NUMBER()" in window
    assert ("partitions touched by the delta are recomputed from the new state (-old rows of those partitions, "
            "+new rows); ties broken by row id") in window
    rows = _plan(DEDUP).explain().as_json()["operators"]
    assert [r["operator"] for r in rows] == ["project", "window", "scan"]


def test_qualify_alias_of_a_source_column_is_the_column():
    """A QUALIFY name that is a source column means the column (not an
    output alias of the same name)."""
    plan = _plan("SELECT id, v * 2 AS ts FROM src QUALIFY ROW_NUMBER() OVER (PARTITION BY key ORDER BY v) = 1 AND ts > 0")
    assert "AND ts > 0) AS `_ct_q`" in plan.full(VIEWS, data_timestamp_ms=0).source_sql
    plan = _plan("SELECT id, RANK() OVER (PARTITION BY key ORDER BY v) AS r FROM src QUALIFY r <= 2")
    assert "(RANK() OVER (PARTITION BY key ORDER BY v) <= 2) AS `_ct_q`" in plan.full(VIEWS, data_timestamp_ms=0).source_sql


def test_subquery_forms_that_are_not_a_filter_stay_blocked():
    # The outer reads a column the inner does not have: planned as written.
    plan = _plan("SELECT id, ts FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) AS rn FROM src) t "
                 "WHERE rn = 1")
    assert "subquery" in [b.operator for b in plan.blockers]
    # A subquery without windows is not this rule's.
    plan = _plan("SELECT id FROM (SELECT id, v FROM src) t WHERE v > 1")
    assert "subquery" in [b.operator for b in plan.blockers]


def test_plan_version_counts_the_window_partition_columns():
    """Version 3 added the window plans' stored partition (and order)
    values and the NOT IN rule, version 4 count(DISTINCT) over appends: a
    table made by earlier rules re-initializes once."""
    assert PLAN_VERSION == 4


_FUNCS = ["ROW_NUMBER()", "RANK()", "DENSE_RANK()", "LAG(v)", "LEAD(v, 1)", "sum(v)", "count(*)", "max(v)"]


@settings(max_examples=30, deadline=None)
@given(funcs=st.lists(st.sampled_from(_FUNCS), min_size=1, max_size=3),
       partition=st.sampled_from(["key", "key, v", "upper(CAST(key AS STRING))"]),
       filtered=st.booleans(), form=st.sampled_from(["qualify", "subquery"]))
def test_random_window_blocks_compile(funcs, partition, filtered, form):
    """Every supported function under one PARTITION BY is incremental in both
    forms, and full()/delta() are one SQL text each."""
    calls = [f"{f} OVER (PARTITION BY {partition} ORDER BY ts) AS w{i}" for i, f in enumerate(funcs)]
    where = " WHERE v > 0" if filtered else ""
    if form == "qualify":
        query = f"SELECT id, {', '.join(calls)} FROM src{where} QUALIFY w0 IS NOT NULL"
    else:
        query = f"SELECT * FROM (SELECT id, {', '.join(calls)} FROM src{where}) AS t WHERE w0 IS NOT NULL"
    plan = _plan(query)
    assert plan.incremental, plan.blockers
    assert plan.output_columns == ("id", *(f"w{i}" for i in range(len(funcs))))
    delta = plan.delta(VIEWS, data_timestamp_ms=0, appended_only={"src": False}).source_sql
    assert delta.count("IS NOT DISTINCT FROM") == 2 * len(partition.split(", "))


def test_a_deduplication_over_appends_compares_with_the_stored_row():
    """A deduplication over one source (one ROW_NUMBER, QUALIFY keeps row
    1) ranks the appended rows against the table's rows when the interval
    only appended and the table is offered; explain() says so."""
    plan = _plan(DEDUP)
    with_table = SourceViews(dict(VIEWS), target="dt")
    appended = plan.delta(with_table, data_timestamp_ms=0, appended_only={"src": True}).source_sql
    assert "`_ct_b`" in appended and "`src_n`" not in appended and "`src_o`" not in appended
    assert "ORDER BY `_ct_dt_wo0` DESC, `_ct_dt_key` ASC NULLS FIRST" in appended
    # An interval that deleted or updated, or no table offered: the partitions are recomputed.
    assert "`_ct_b`" not in plan.delta(with_table, data_timestamp_ms=0, appended_only={"src": False}).source_sql
    assert "`_ct_b`" not in plan.delta(VIEWS, data_timestamp_ms=0, appended_only={"src": True}).source_sql
    window = [r for r in plan.explain(append_only=("src",)).rows if r.operator == "window"][0]
    assert "compared with the row the table holds" in window.rule and "append-only" in window.rule
    window = [r for r in plan.explain().rows if r.operator == "window"][0]
    assert "when the source only appended, else" in window.rule


@pytest.mark.parametrize("query", [
    "SELECT id FROM src QUALIFY ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) = 2",
    "SELECT id FROM src QUALIFY ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) = 1 AND v > 0",
    "SELECT id, RANK() OVER (PARTITION BY key ORDER BY ts) AS r FROM src QUALIFY r = 1",
    "SELECT id, count(*) OVER (PARTITION BY key) AS n FROM src QUALIFY ROW_NUMBER() OVER (PARTITION BY key ORDER BY ts) = 1",
])
def test_other_windows_are_not_deduplications(query):
    """Only a block whose one window is a ROW_NUMBER kept at row 1 can
    compare appends with the stored row: a second row, an extra QUALIFY
    condition (the stored row may be a filtered-out first row's
    successor), a RANK (ties keep several rows) or another window function
    (its value changes with the partition) recompute the partitions."""
    plan = _plan(query)
    views = SourceViews(dict(VIEWS), target="dt")
    assert "`_ct_b`" not in plan.delta(views, data_timestamp_ms=0, appended_only={"src": True}).source_sql
