"""compile_query on random token soup and random well-formed queries: it
returns a plan or raises a typed InvalidArgumentError, never anything else,
and every SQL text a plan renders parses back as Spark SQL."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.derived import SourceViews, ViewNames, compile_query

SOURCES = ("silver", "dim")
COLUMNS = {"silver": ["k", "v"], "dim": ["k", "name"]}
VIEWS = SourceViews({s: ViewNames(f"{s}_n", f"{s}_o", f"{s}_d") for s in SOURCES})
TOKENS = ["SELECT", "DISTINCT", "k", "v", "s.k", "d.k", "name", ",", "FROM", "silver", "dim", "s", "d", "x", "JOIN",
          "LEFT", "ON", "=", "(", ")", "GROUP BY", "count(*)", "sum(v)", "avg(v)", "min(v)", "count(DISTINCT v)",
          "AS", "n", "*", "UNION ALL", "UNION", "WHERE", ">", "1", "ORDER BY", "LIMIT", "OVER", ";", "'", "`",
          "rand()", "now()", "_ct_k", "WITH", "HAVING", "NULL", "+", "AND",
          "RIGHT", "FULL", "OUTER", "SEMI", "ANTI", "EXISTS", "NOT", "IN", "CASE", "WHEN", "THEN", "END"]


def _exercise(query: str) -> None:
    try:
        plan = compile_query(query, sources=SOURCES, columns=COLUMNS)
    except ctfile.InvalidArgumentError:
        return
    str(plan.explain()), plan.explain().as_json(), plan.hidden_columns
    refreshes = [plan.full(VIEWS, data_timestamp_ms=5)]
    if plan.incremental:
        refreshes += [plan.delta(VIEWS, data_timestamp_ms=5, appended_only=dict.fromkeys(SOURCES, a)) for a in (True, False)]
    for refresh in refreshes:
        sqlglot.parse_one(refresh.source_sql, read="spark")
        for clause in refresh.clauses:
            for text in [clause.condition or "TRUE", *(v for _, v in clause.assignments)]:
                sqlglot.parse_one(text, read="spark")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join))
def test_token_soup_is_planned_or_refused_with_a_typed_error(query):
    _exercise(query)


select_item = st.sampled_from(["s.k", "s.v", "s.v + 1 AS w", "d.name", "upper(d.name) AS u", "*"])
aggregate = st.sampled_from(["count(*) AS n", "sum(s.v) AS t", "avg(s.v) AS a", "min(s.v) AS lo",
                             "max(d.name) AS hi", "count(DISTINCT s.v) AS c", "count(s.v) AS c2"])


@st.composite
def queries(draw):
    join = draw(st.sampled_from(["", " JOIN dim d ON s.k = d.k", " JOIN dim d ON s.k = d.k AND d.name > 'a'",
                                 " LEFT JOIN dim d ON s.k = d.k", " FULL OUTER JOIN dim d ON d.k = s.k AND s.v > 1"]))
    where = draw(st.sampled_from(["", " WHERE s.v > 0", " WHERE s.v IS NULL OR s.k = 1",
                                  " WHERE EXISTS (SELECT 1 FROM dim e WHERE e.k = s.k)",
                                  " WHERE s.v > 0 AND s.k NOT IN (SELECT e.k FROM dim e)"]))
    frm = f" FROM silver s{join}{where}"
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(["s.k"] + (["d.name"] if join else [])), min_size=0, max_size=2, unique=True))
        aggs = draw(st.lists(aggregate, min_size=1, max_size=4, unique=True))
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        group += draw(st.sampled_from(["", " HAVING count(*) > 1"]))
        return f"SELECT {', '.join(keys + aggs)}{frm}{group}"
    items = draw(st.lists(select_item.filter(lambda i: join or "d." not in i), min_size=1, max_size=3, unique=True))
    distinct = draw(st.sampled_from(["", "DISTINCT "]))
    query = f"SELECT {distinct}{', '.join(items)}{frm}"
    return query + (f" UNION ALL {query}" if draw(st.booleans()) else "")


@settings(max_examples=50, deadline=None)
@given(queries())
def test_well_formed_queries_render_parseable_sql(query):
    _exercise(query)


@pytest.mark.long
@settings(max_examples=5000, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=20).map(" ".join))
def test_token_soup_long(query):
    _exercise(query)
