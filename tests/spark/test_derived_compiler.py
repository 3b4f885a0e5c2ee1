"""Differential tests of the derived-table compiler (``ctfile.derived``,
contract C3 of issue 29) on Spark: random small sources (ints with
duplicates and NULLs, strings, a decimal) and random change intervals
(inserts, updates, deletes), registered as the temp views a refresh reads
(``new``/``old`` with ``METADATA$ROW_ID``, ``delta`` with Snowflake's
minimum-delta columns). ``full()`` builds the derived table at the first
state; each ``delta()`` is merged by a small MERGE interpreter
(``derived_merge``); after every step the table's visible columns equal
the query run by Spark on the new state (as multisets), the MERGE source
has one row per key and deletes only existing keys, no update is a no-op,
and a ``full()`` over the unchanged state changes nothing."""

from __future__ import annotations

import hashlib
from collections import Counter
from decimal import Decimal

import pytest
from derived_merge import TABLE_VIEW, apply_merge
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctfile.derived import SourceViews, ViewNames, compile_query

SCHEMAS = {
    "a": [("id", "INT"), ("k", "INT"), ("v", "INT"), ("s", "STRING"), ("d", "DECIMAL(10,2)")],
    "b": [("id", "INT"), ("k", "INT"), ("w", "INT"), ("name", "STRING")],
    "c": [("id", "INT"), ("k", "INT"), ("x", "INT")],
}
COLUMNS = {s: [c for c, _ in f] for s, f in SCHEMAS.items()}
ROW_ID = [("`METADATA$ROW_ID`", "STRING")]
CHANGE = [("`METADATA$ACTION`", "STRING"), ("`METADATA$ISUPDATE`", "BOOLEAN"), *ROW_ID]

QUERIES = {
    "filter_project": "SELECT a.id, a.v + 1 AS v1, upper(a.s) AS s FROM a WHERE a.v IS NULL OR a.v > 1",
    "join2": "SELECT a.id AS aid, b.id AS bid, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "join3": "SELECT a.id AS aid, b.name, c.x FROM a JOIN b ON a.k = b.k JOIN c ON c.k = b.k AND c.x >= b.w",
    "self_join": "SELECT x.id AS i1, y.id AS i2, x.d FROM a x JOIN a y ON x.k = y.k WHERE x.v <= y.v",
    "union_all": "SELECT id, k FROM a WHERE v > 0 UNION ALL SELECT id, k FROM b UNION ALL SELECT id, k FROM a",
    "group_all": ("SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS sv, avg(v) AS av, sum(d) AS sd, "
                  "avg(d) AS ad, min(v) AS mn, max(s) AS mx FROM a GROUP BY k"),
    "group_linear": "SELECT s, k, count(*) AS n, sum(d) AS sd, count(s) AS ns, avg(v) AS av FROM a GROUP BY s, k",
    "count_distinct": "SELECT k, count(DISTINCT s) AS ns, count(*) AS n FROM a GROUP BY k",
    **{  # count(DISTINCT) combined over appends (aggregates._distinct_ctes), recomputed otherwise
        "distinct_mixed": ("SELECT s, count(DISTINCT v) AS nv, sum(d) AS sd, min(v) AS mn, count(DISTINCT k) AS nk "
                           "FROM a GROUP BY s"),
        "distinct_global": "SELECT count(DISTINCT k) AS nk, max(d) AS md FROM a",
        "distinct_join": ("SELECT b.name, count(DISTINCT a.v) AS nv, count(*) AS n FROM a JOIN b ON a.k = b.k "
                          "WHERE a.v IS NULL OR a.v >= 0 GROUP BY b.name"),
        "distinct_expr": "SELECT k % 2 AS parity, count(DISTINCT upper(s)) AS ns, avg(v) AS av FROM a GROUP BY k % 2",
    },
    "distinct": "SELECT DISTINCT k, s FROM a",
    "join_group": "SELECT b.name, sum(a.v) AS sv, count(*) AS n, max(a.d) AS md FROM a JOIN b ON a.k = b.k GROUP BY b.name",
    "global": "SELECT count(*) AS n, sum(d) AS sd, min(v) AS mv FROM a",
    "group_alias": "SELECT upper(s) AS u, count(*) AS n, sum(v) AS sv FROM a GROUP BY u",
    "case_project": ("SELECT a.id, CASE WHEN a.v > 1 THEN 'big' WHEN a.v IS NULL THEN 'none' ELSE 'small' END AS size, "
                     "CASE a.s WHEN 'x' THEN a.d END AS dx FROM a"),
    **{  # outer, semi and anti joins and HAVING (ctfile.derived.outer_joins; aggregates' recompute path)
        "left_join": "SELECT a.id, a.v, b.id AS bid, b.name FROM a LEFT JOIN b ON a.k = b.k",
        "right_join": "SELECT a.id AS aid, b.id AS bid, b.w FROM a RIGHT JOIN b ON a.k = b.k AND b.w >= a.v",
        "full_join": "SELECT a.id AS aid, b.id AS bid, coalesce(a.k, b.k) AS k FROM a FULL OUTER JOIN b ON a.k = b.k",
        "left_semi": "SELECT a.id, a.s FROM a LEFT SEMI JOIN b ON a.k = b.k AND b.w > 0",
        "left_anti": "SELECT a.id, a.k FROM a LEFT ANTI JOIN b ON a.k = b.k",
        "exists": "SELECT a.id, a.v FROM a WHERE a.v IS NOT NULL AND EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.w >= a.v)",
        "not_exists": "SELECT a.id FROM a WHERE NOT EXISTS (SELECT * FROM c WHERE c.k = a.k)",
        "in_subquery": "SELECT a.id, a.d FROM a WHERE a.k IN (SELECT b.k FROM b WHERE b.name IS NOT NULL)",
        # Null-aware; test_derived_outer walks its subquery through every state.
        "not_in": "SELECT a.id, a.s FROM a WHERE a.k NOT IN (SELECT c.k FROM c WHERE c.x > 0)",
        "outer_chain": ("SELECT a.id, b.name, c.x, c.id AS cid FROM a LEFT JOIN b ON a.k = b.k "
                        "FULL OUTER JOIN c ON c.k = a.k WHERE c.x IS NULL OR c.x >= 0"),
        "outer_union": "SELECT a.id, b.w FROM a LEFT JOIN b ON a.k = b.k UNION ALL SELECT id, v FROM a WHERE v > 0",
        "left_join_group": ("SELECT b.name, count(*) AS n, sum(a.v) AS sv, count(b.id) AS nb, min(a.d) AS md "
                            "FROM a LEFT JOIN b ON a.k = b.k GROUP BY b.name"),
        "having_count": "SELECT k, count(*) AS n FROM a GROUP BY k HAVING count(*) > 1",
        "having_sum": "SELECT s, sum(v) AS sv, max(d) AS md FROM a GROUP BY s HAVING sum(v) > 0 OR s IS NULL",
        "having_global": "SELECT count(*) AS n, sum(v) AS sv FROM a HAVING count(*) > 2",
        "having_join": ("SELECT a.s, count(*) AS n FROM a LEFT SEMI JOIN b ON a.k = b.k AND a.v <= b.w "
                        "GROUP BY a.s HAVING n >= 2"),
    },
}
#: The queries of the outer/semi/anti join and HAVING rules, also run on their own below.
KEYED = ("case_project", "left_join", "right_join", "full_join", "left_semi", "left_anti", "exists", "not_exists",
         "in_subquery", "outer_chain", "outer_union", "left_join_group", "having_count", "having_sum",
         "having_global", "having_join")
# Window queries (derived.windows). Their ORDER BY ends with the unique id
# where ties would make Spark's own result depend on the row order, so Spark
# running the text is a deterministic reference; TIED_QUERIES below have ties.
WINDOW_QUERIES = {
    "qualify_dedup": "SELECT * FROM a QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, id) = 1",
    "subquery_dedup": ("SELECT id, k, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, id) AS rn "
                       "FROM a WHERE s IS NOT NULL OR v > 0) AS t WHERE rn = 1"),
    "cte_dedup": ("WITH t AS (SELECT id, s, d, ROW_NUMBER() OVER (PARTITION BY s, k ORDER BY d, id DESC) AS rn FROM a) "
                  "SELECT t.id, t.s, t.d FROM t WHERE t.rn <= 2"),
    "rank_filter": "SELECT id, k, v, RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM a QUALIFY r <= 2",
    "dense_rank_filter": ("SELECT id, s, DENSE_RANK() OVER (PARTITION BY s ORDER BY v DESC) AS dr FROM a "
                          "WHERE k IS NOT NULL QUALIFY DENSE_RANK() OVER (PARTITION BY s ORDER BY v DESC) <= 2"),
    "lag_lead": ("SELECT id, k, LAG(v) OVER (PARTITION BY k ORDER BY id) AS pv, "
                 "LEAD(d, 1) OVER (PARTITION BY k ORDER BY id) AS nd FROM a"),
    "running": ("SELECT id, k, sum(d) OVER (PARTITION BY k ORDER BY v) AS rs, avg(v) OVER (PARTITION BY k) AS av, "
                "count(*) OVER (PARTITION BY k ORDER BY v, id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS c2, "
                "max(s) OVER (PARTITION BY k ORDER BY v RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS ms FROM a"),
    "window_join": ("SELECT a.id AS aid, b.id AS bid, ROW_NUMBER() OVER (PARTITION BY b.name ORDER BY a.v, a.id, b.id) AS rn "
                    "FROM a JOIN b ON a.k = b.k WHERE b.w IS NOT NULL"),
}
QUERIES.update(WINDOW_QUERIES)
#: Windows whose ORDER BY has ties: the table is the query with ties broken
#: by row id, so the reference is the plan's own full() at the new state.
TIED_QUERIES = {
    "tied_dedup": "SELECT id, k, v FROM a QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) = 1",
    "tied_rows": ("SELECT id, LAG(s) OVER (PARTITION BY k ORDER BY v) AS ps, first_value(d) OVER (PARTITION BY k ORDER BY v ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS fd, "
                  "sum(v) OVER (PARTITION BY k ORDER BY v ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS rs FROM a"),
    "tied_join": ("SELECT a.id, b.id AS bid, ROW_NUMBER() OVER (PARTITION BY a.k ORDER BY b.w) AS rn "
                  "FROM a JOIN b ON a.k = b.k"),
}

small_int = st.one_of(st.none(), st.integers(-2, 3))
key_int = st.one_of(st.none(), st.integers(0, 3))
text = st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))
money = st.one_of(st.none(), st.decimals(min_value=-50, max_value=50, places=2).map(lambda d: Decimal(d)))
ROW = {
    "a": st.tuples(key_int, small_int, text, money),
    "b": st.tuples(key_int, small_int, text),
    "c": st.tuples(key_int, small_int),
}


def _row_id(source: str, n: int) -> str:
    return hashlib.blake2b(f"{source}:{n}".encode(), digest_size=8).hexdigest()


@st.composite
def histories(draw, steps: int = 2, *, appends_only: bool = False):
    """Per source: a list of states (row id -> values); ``appends_only``:
    every interval only inserts rows."""
    out = {}
    for source, row in ROW.items():
        state = {_row_id(source, n): draw(row) for n in range(draw(st.integers(0, 6)))}
        states, counter = [dict(state)], len(state)
        for _ in range(steps):
            state = dict(state)
            for rid in list(state) if not appends_only else ():
                action = draw(st.sampled_from(["keep", "keep", "update", "delete"]))
                if action == "update":
                    state[rid] = draw(row)
                elif action == "delete":
                    del state[rid]
            for _ in range(draw(st.integers(0, 3))):
                state[_row_id(source, counter)] = draw(row)
                counter += 1
            states.append(state)
        out[source] = states
    return out


class Sources:
    """Registers a refresh's views; ids are stable per row id."""

    def __init__(self, spark, history):
        self.spark = spark
        self.history = history
        self.ids = {s: {rid: n for n, rid in enumerate(sorted({r for st_ in states for r in st_}))}
                    for s, states in history.items()}

    def _tuples(self, source, state):
        return [(self.ids[source][rid], *values, rid) for rid, values in state.items()]

    def _view(self, name: str, fields: list[tuple[str, str]], rows: list[tuple]) -> None:
        """A temp view over SQL VALUES (much cheaper than createDataFrame)."""
        names = ", ".join(f[0] for f in fields)
        casts = ", ".join(f"CAST({f[0]} AS {f[1]}) AS {f[0]}" for f in fields)
        values = ", ".join("(" + ", ".join(map(_literal, row)) + ")" for row in rows)
        if not rows:
            values, where = "(" + ", ".join("NULL" for _ in fields) + ")", " WHERE FALSE"
        else:
            where = ""
        self.spark.sql(f"CREATE OR REPLACE TEMP VIEW `{name}` AS SELECT {casts} "
                       f"FROM VALUES {values} AS v({names}){where}")

    def register(self, step: int, used: tuple[str, ...], *, target: bool = True) -> SourceViews:
        """The views at ``step``; ``target``: offer the maintained table as
        the refresh's target view (as the executor does), else only the
        sources (rules then recompute old rows from the old state)."""
        views = {}
        for source in used:
            states = self.history[source]
            names = ViewNames(new=f"{source}_new", old=f"{source}_old", delta=f"{source}_delta")
            cols = SCHEMAS[source] + ROW_ID
            new, old = states[step], states[step - 1] if step else {}
            self._view(names.new, cols, self._tuples(source, new))
            self._view(names.old, cols, self._tuples(source, old))
            self._view(names.delta, SCHEMAS[source] + CHANGE, self._delta(source, old, new))
            listed = ", ".join(c for c, _ in SCHEMAS[source])
            self.spark.sql(f"CREATE OR REPLACE TEMP VIEW {source} AS SELECT {listed} FROM `{names.new}`")
            views[source] = names
        return SourceViews(views, target=TABLE_VIEW if target else None)

    def _delta(self, source, old, new):
        """Minimum delta: an update is a DELETE of the old image and an INSERT
        of the new one with the same row id (ISUPDATE); unchanged rows are absent."""
        out = []
        for rid in sorted(old.keys() | new.keys()):
            i = self.ids[source][rid]
            if rid in old and rid in new and old[rid] == new[rid]:
                continue
            both = rid in old and rid in new
            if rid in old:
                out.append((i, *old[rid], "DELETE", both, rid))
            if rid in new:
                out.append((i, *new[rid], "INSERT", both, rid))
        return out

    def appended_only(self, step: int) -> dict[str, bool]:
        return {s: set(states[step - 1]) <= set(states[step]) and
                all(states[step][r] == v for r, v in states[step - 1].items())
                for s, states in self.history.items()}


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _visible(rows, names):
    return Counter(tuple(r[n] for n in names) for r in rows)


def _table_schema(spark, refresh):
    """The derived table's schema: the full query's types, every column
    nullable (as the executor creates it; an example's first state may have
    no NULLs where later ones do)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True) for f in spark.sql(refresh.source_sql).schema.fields])


def _check_step(spark, plan, query, table, schema, refresh, *, full=None):
    """Apply ``refresh``; the table must then equal Spark's run of ``query``
    or, given ``full`` (the plan's full() at the new state), that query's
    rows, derivation key included."""
    after, stats = apply_merge(spark, table, schema, refresh)
    assert stats.duplicate_keys == 0, refresh.source_sql
    assert stats.deletes_of_missing_keys == 0, refresh.source_sql
    assert stats.noop_updates == 0, refresh.source_sql
    if full is None:
        expected = Counter(tuple(r) for r in spark.sql(query).collect())
        assert _visible(after, plan.output_columns) == expected, refresh.source_sql
    else:
        names = [f.name for f in schema.fields]
        expected = Counter(tuple(r[n] for n in names) for r in spark.sql(full.source_sql).collect())
        assert _visible(after, names) == expected, refresh.source_sql
    return after, stats


@pytest.fixture
def small_spark(spark):
    """The session with one shuffle partition and no adaptive planning: the
    tables here have a few rows, and these fixed costs dominate."""
    keys = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false"}
    old = {k: spark.conf.get(k, None) for k in keys}
    for k, v in keys.items():
        spark.conf.set(k, v)
    yield spark
    for k, v in old.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def run_history(spark, name, history, *, query=None, tied=False, target=True):
    """Build the table by full() at the first state, maintain it by delta()
    over the later ones; ``tied``: compare with the plan's full() instead of
    Spark's run of the query (whose result then depends on row order);
    ``target``: whether the refreshes may read the table itself."""
    query = query or QUERIES[name]
    plan = compile_query(query, sources=tuple(SCHEMAS), columns=COLUMNS)
    assert plan.incremental, plan.blockers
    sources = Sources(spark, history)
    views = sources.register(0, plan.sources)
    refresh = plan.full(views, data_timestamp_ms=0)
    schema = _table_schema(spark, refresh)
    assert [f.name for f in schema.fields] == [*plan.output_columns, *(c for c, _ in plan.hidden_columns)]
    table, _ = _check_step(spark, plan, query, [], schema, refresh, full=refresh if tied else None)
    for step in range(1, len(history["a"])):
        views = sources.register(step, plan.sources, target=target)
        refresh = plan.delta(views, data_timestamp_ms=step, appended_only=sources.appended_only(step))
        full = plan.full(views, data_timestamp_ms=step) if tied else None
        table, _ = _check_step(spark, plan, query, table, schema, refresh, full=full)
    # The maintained table (state columns included) is what a full refresh would build.
    full = plan.full(views, data_timestamp_ms=step)
    _, stats = _check_step(spark, plan, query, table, schema, full, full=full if tied else None)
    assert stats.changes == 0, f"a full refresh over the maintained table changed {stats}"


@pytest.mark.parametrize("name", sorted(WINDOW_QUERIES))
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=2))
def test_window_delta_equals_recomputation(small_spark, name, history):
    """Each window query, every run (the sampled test above may miss some);
    one random history by default, 25 in the long run above."""
    run_history(small_spark, name, history)


@pytest.mark.parametrize("name", ["lag_lead", "having_sum",
                                  *(pytest.param(n, marks=pytest.mark.long) for n in ("subquery_dedup", "window_join"))])
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=2))
def test_delta_without_the_table_recomputes_old_rows(small_spark, name, history):
    """Where the executor cannot offer the derived table's own rows, the
    old rows of the affected window partitions and HAVING groups are
    recomputed from the old state."""
    run_history(small_spark, name, history, target=False)


@pytest.mark.parametrize("name", sorted(TIED_QUERIES))
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=2))
def test_window_ties_are_broken_as_full_breaks_them(small_spark, name, history):
    """With ties in the ORDER BY, the maintained table equals the plan's
    full() at each state (both break ties by row id), keys included."""
    run_history(small_spark, None, history, query=TIED_QUERIES[name], tied=True)


#: Deduplications (one ROW_NUMBER, QUALIFY keeps row 1), whose appends are
#: compared with the stored rows (windows.appended_top_rows_sql).
DEDUPS = {"qualify_dedup": (WINDOW_QUERIES["qualify_dedup"], False),
          "subquery_dedup": (WINDOW_QUERIES["subquery_dedup"], False),
          "tied_dedup": (TIED_QUERIES["tied_dedup"], True),
          "dedup_no_order": ("SELECT id, k, v FROM a WHERE v IS NOT NULL "
                             "QUALIFY ROW_NUMBER() OVER (PARTITION BY k, s) <= 1", True),
          "dedup_nulls": ("SELECT id, k, d, ROW_NUMBER() OVER (PARTITION BY k ORDER BY d ASC NULLS LAST, v DESC "
                          "NULLS FIRST) AS rn FROM a QUALIFY rn = 1", True)}


@pytest.mark.parametrize("name", sorted(DEDUPS))
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=3, appends_only=True))
def test_appended_rows_are_compared_with_the_stored_top_row(small_spark, name, history):
    """Over intervals that only append, a deduplication's refresh ranks the
    appended rows against the row each partition holds (ties by row id,
    NULLs ordered as written); the table equals the query at each state."""
    query, tied = DEDUPS[name]
    plan = compile_query(query, sources=tuple(SCHEMAS), columns=COLUMNS)
    views = SourceViews({s: ViewNames(new="n", old="o", delta="d") for s in plan.sources}, target="t")
    assert "`_ct_b`" in plan.delta(views, data_timestamp_ms=0, appended_only={"a": True}).source_sql
    run_history(small_spark, None, history, query=query, tied=tied)


#: The count(DISTINCT) queries, whose appends are counted against the old state.
COUNT_DISTINCTS = ("count_distinct", "distinct_mixed", "distinct_global", "distinct_join", "distinct_expr")
#: Appends that repeat a group's old value (k 1: v 1, s 'x'), add a new one,
#: repeat one within an append (r8, r9), add NULL values and groups new to
#: the table (k 2 with only a NULL, then a value; k NULL), and a b row that
#: joins a's old rows (b k 2 meets r5, r8, r9 at step 2).
APPENDS = {
    "a": [{"r1": (1, 1, "x", Decimal("1.00")), "r2": (1, None, None, None)},
          {"r3": (1, 1, "x", None), "r4": (1, 2, "y", Decimal("2.00")), "r5": (2, None, None, None),
           "r6": (None, 3, "x", Decimal("-1.00"))},
          {"r7": (None, 3, "x", None), "r8": (2, 4, "x", None), "r9": (2, 4, "x", Decimal("0.50"))}],
    "b": [{"q1": (1, 0, "n")}, {"q2": (None, 1, "m")}, {"q3": (2, 1, "n")}],
    "c": [{}, {}, {}],
}


def _accumulated(history):
    """Each state holds the rows of the states before it (appends only)."""
    out = {}
    for source, steps in history.items():
        state, states = {}, []
        for added in steps:
            state = {**state, **added}
            states.append(state)
        out[source] = states
    return out


@pytest.mark.parametrize("name", COUNT_DISTINCTS)
def test_count_distinct_over_fixed_appends(small_spark, name):
    """The appends of APPENDS: each count(DISTINCT) grows by the values new
    to its group only (the table equals Spark's run at each state)."""
    plan = compile_query(QUERIES[name], sources=tuple(SCHEMAS), columns=COLUMNS)
    views = SourceViews({s: ViewNames(new="n", old="o", delta="d") for s in SCHEMAS}, target="t")
    sql = plan.delta(views, data_timestamp_ms=0, appended_only=dict.fromkeys(SCHEMAS, True)).source_sql
    assert "LEFT ANTI JOIN `_ct_m" in sql and "`_ct_f`" not in sql
    run_history(small_spark, name, _accumulated(APPENDS))


@pytest.mark.parametrize("name", COUNT_DISTINCTS)
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=3, appends_only=True))
def test_count_distinct_over_appends(small_spark, name, history):
    """Over intervals that only append, count(DISTINCT) adds the appended
    values its group's old rows lack; the table equals the query at each
    state (two examples each; 25 in the long run below)."""
    run_history(small_spark, name, history)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("name", COUNT_DISTINCTS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=3, appends_only=True))
def test_count_distinct_over_appends_long(small_spark, name, history):
    run_history(small_spark, name, history)


def test_tie_break_is_by_row_id(small_spark):
    """Peers of a ROW_NUMBER are ordered by row id: the dedup keeps, of the
    two rows with the top v, the one whose row id sorts first."""
    history = {"a": [{"r2": (1, 5, "x", None), "r1": (1, 5, "y", None), "r0": (1, 2, "z", None)}],
               "b": [{}], "c": [{}]}
    plan = compile_query(TIED_QUERIES["tied_dedup"], sources=tuple(SCHEMAS), columns=COLUMNS)
    sources = Sources(small_spark, history)
    rows = small_spark.sql(plan.full(sources.register(0, plan.sources), data_timestamp_ms=0).source_sql).collect()
    assert [(r["_ct_dt_key"], r["v"]) for r in rows] == [("r1", 5)]


# One interval per example keeps the default run near a minute; the long
# variant below runs three intervals per example for every query.
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(QUERIES)), history=histories(steps=1))
def test_delta_equals_recomputation(small_spark, name, history):
    run_history(small_spark, name, history)


# Each outer/semi/anti join and HAVING query on its own, one random history
# by default (the long runs above take 25 each): two intervals, so a
# fact can gain a partner and lose it again, or a group enter and leave.
@pytest.mark.parametrize("name", KEYED)
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=2))
def test_keyed_delta_equals_recomputation(small_spark, name, history):
    run_history(small_spark, name, history)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("name", sorted(QUERIES))
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(steps=3))
def test_delta_equals_recomputation_long(small_spark, name, history):
    run_history(small_spark, name, history)


@st.composite
def random_queries(draw):
    """Random queries of every incremental shape over a and b."""
    join = draw(st.sampled_from(["", " JOIN b ON a.k = b.k", " JOIN b ON a.k = b.k AND b.w >= a.v"]))
    where = draw(st.sampled_from(["", " WHERE a.v > 0", " WHERE a.v IS NULL OR a.k = 1"]))
    frm = f" FROM a{join}{where}"
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(["a.k", "a.s"] + (["b.name"] if join else [])), max_size=2, unique=True))
        aggs = draw(st.lists(st.sampled_from([
            "count(*) AS n", "sum(a.v) AS t", "avg(a.d) AS ad", "min(a.d) AS lo", "max(a.s) AS hi",
            "count(DISTINCT a.v) AS c", "count(a.s) AS c2", "sum(a.d) AS sd", "avg(a.v) AS av"]),
            min_size=1, max_size=4, unique=True))
        return f"SELECT {', '.join(keys + aggs)}{frm}" + (f" GROUP BY {', '.join(keys)}" if keys else "")
    items = draw(st.lists(st.sampled_from(["a.k", "a.v", "a.d", "a.v + 1 AS w"] + (["b.name", "b.id AS bid"] if join else [])),
                          min_size=1, max_size=3, unique=True))
    query = f"SELECT {', '.join(items)}{frm}"
    if draw(st.booleans()):
        return f"SELECT DISTINCT {', '.join(items)}{frm}"  # DISTINCT branches of a UNION ALL are blocked
    return query + (f" UNION ALL {query}" if draw(st.booleans()) else "")


@pytest.mark.slow
@pytest.mark.long
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(query=random_queries(), history=histories(steps=2))
def test_random_queries_delta_equals_recomputation_long(small_spark, query, history):
    run_history(small_spark, None, history, query=query)


NON_INCREMENTAL = {
    "left_join_window": "SELECT a.id, b.w, row_number() OVER (PARTITION BY a.k ORDER BY a.id, b.id) AS r FROM a LEFT JOIN b ON a.k = b.k",
    "star_union": "SELECT * FROM a UNION SELECT * FROM a",
    "cte_having": "WITH q AS (SELECT k, s FROM a) SELECT k, count(*) AS n FROM q GROUP BY k HAVING count(*) > 1",
}
FIXED = {
    "a": [{"r1": (1, 1, "x", Decimal("1.50")), "r2": (1, 2, "y", None), "r3": (None, None, None, None)},
          {"r1": (1, 1, "x", Decimal("1.50")), "r2": (2, 2, "y", None), "r4": (1, 5, "x", Decimal("-2.00")),
           "r5": (1, 5, "x", Decimal("-2.00"))}],
    "b": [{"q1": (1, 10, "n"), "q2": (1, 11, "m")}, {"q1": (1, 10, "n"), "q3": (2, 12, None)}],
    "c": [{}, {}],
}


@pytest.mark.parametrize("name", sorted(NON_INCREMENTAL))
def test_full_refresh_of_a_non_incremental_query(small_spark, name):
    """Keyed by the row's values and its ordinal among equal rows: a full
    refresh rebuilds the result exactly and changes nothing when run again."""
    query = NON_INCREMENTAL[name]
    plan = compile_query(query, sources=tuple(SCHEMAS), columns=COLUMNS)
    assert not plan.incremental
    sources = Sources(small_spark, FIXED)
    refresh = plan.full(sources.register(0, plan.sources), data_timestamp_ms=0)
    schema = _table_schema(small_spark, refresh)
    table, _ = _check_step(small_spark, plan, query, [], schema, refresh)
    for step in (1, 1):
        refresh = plan.full(sources.register(step, plan.sources), data_timestamp_ms=step)
        table, stats = _check_step(small_spark, plan, query, table, schema, refresh)
    assert stats.changes == 0


def test_time_functions_read_the_data_timestamp(small_spark):
    import datetime

    plan = compile_query("SELECT id, current_timestamp() AS ts, now() AS n FROM a", sources=("a",))
    Sources(small_spark, FIXED).register(1, ("a",))
    rows = small_spark.sql(plan.full(SourceViews({"a": ViewNames("a_new", "a_old", "a_delta")}),
                                     data_timestamp_ms=86_400_123).source_sql).collect()
    expected = datetime.datetime(1970, 1, 2, 0, 0, 0, 123000)
    assert len(rows) == 4 and {(r["ts"], r["n"]) for r in rows} == {(expected, expected)}


def test_clauses_are_accepted_by_the_spark_merge_builder(spark):
    """Every clause of every rule is a valid ctfile.spark MergeBuilder call
    (conditions and values parse as Spark SQL; no clause is unreachable)."""
    import ctfile
    from ctfile.spark.merge import SPARK_EXPRESSIONS

    views = SourceViews({s: ViewNames(f"{s}_new", f"{s}_old", f"{s}_delta") for s in SCHEMAS})
    for query in QUERIES.values():
        plan = compile_query(query, sources=tuple(SCHEMAS), columns=COLUMNS)
        refreshes = [plan.full(views, data_timestamp_ms=0)] + [
            plan.delta(views, data_timestamp_ms=0, appended_only=dict.fromkeys(SCHEMAS, appended))
            for appended in (True, False)]
        for refresh in refreshes:
            builder = ctfile.MergeBuilder.start(None, on="_ct_dt_key", expressions=SPARK_EXPRESSIONS)
            for clause in refresh.clauses:
                builder = clause.apply(builder)
            assert len(builder.clauses) == len(refresh.clauses)
