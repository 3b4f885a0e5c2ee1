"""Differential test of :mod:`ctfile.spark.arrow_sql`: random expressions of
the translated forms (arithmetic, comparisons, ``CASE``, ``CAST``,
``coalesce``, ``least``, ``greatest``) over columns with NULLs, evaluated by
Spark SQL and by pyarrow through the translation; the values must be equal,
row by row. A MERGE run in the driver (:mod:`ctfile.spark.local`) is right
only where they are."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctfile.spark.arrow_sql import SideColumns, SqlScope, Untranslatable, to_arrow
from ctfile.spark.sqltext import SqlConf

ROWS = pa.table({
    "a": pa.array([1, None, -3, 7, 0], pa.int32()),
    "b": pa.array([None, 5, 6, -2, 0], pa.int64()),
    "c": pa.array([2, 2, None, -1, 9], pa.int16()),
    "s": pa.array(["x", None, "z", "x", ""], pa.string()),
    "d": pa.array([Decimal("1.50"), None, Decimal("-2.25"), Decimal("0.00"), Decimal("9.99")], pa.decimal128(10, 2)),
})
SPARK_TYPES = {"a": "INT", "b": "BIGINT", "c": "SMALLINT", "s": "STRING", "d": "DECIMAL(10,2)"}


def _ints(depth: int) -> st.SearchStrategy[str]:
    leaf = st.sampled_from(["a", "b", "c", "1", "-4", "NULL", "7L"])
    if depth == 0:
        return leaf
    sub = _ints(depth - 1)
    return st.one_of(
        leaf,
        st.builds(lambda x, op, y: f"({x} {op} {y})", sub, st.sampled_from(["+", "-", "*"]), sub),
        st.builds(lambda c, x, y: f"CASE WHEN {c} THEN {x} ELSE {y} END", _bools(depth - 1), sub, sub),
        st.builds(lambda c, x: f"CASE WHEN {c} THEN {x} END", _bools(depth - 1), sub),
        st.builds(lambda x: f"CAST({x} AS BIGINT)", sub),
        st.builds(lambda f, xs: f"{f}({', '.join(xs)})", st.sampled_from(["least", "greatest"]),
                  st.lists(sub, min_size=2, max_size=3)),
        st.builds(lambda xs: f"coalesce({', '.join(xs)})", st.lists(sub, min_size=1, max_size=3)),
    )


def _strings(depth: int) -> st.SearchStrategy[str]:
    leaf = st.sampled_from(["s", "'x'", "'y'", "NULL"])
    if depth == 0:
        return leaf
    return st.one_of(
        leaf,
        st.builds(lambda c, x, y: f"CASE WHEN {c} THEN {x} ELSE {y} END", _bools(depth - 1), _strings(depth - 1),
                  _strings(depth - 1)),
        st.builds(lambda x: f"CAST({x} AS STRING)", _strings(depth - 1)),
        st.builds(lambda f, x, y: f"{f}({x}, {y})", st.sampled_from(["least", "greatest", "coalesce"]),
                  _strings(depth - 1), _strings(depth - 1)),
    )


def _decimals(depth: int) -> st.SearchStrategy[str]:
    leaf = st.just("d")
    if depth == 0:
        return leaf
    return st.one_of(
        leaf,
        st.builds(lambda c: f"CASE WHEN {c} THEN d ELSE NULL END", _bools(depth - 1)),
        st.just("CAST(d AS DECIMAL(10,2))"),
        st.builds(lambda f: f"{f}(d, d)", st.sampled_from(["least", "greatest", "coalesce"])),
    )


def _bools(depth: int) -> st.SearchStrategy[str]:
    ints = _ints(max(depth - 1, 0))
    compared = st.one_of(
        st.builds(lambda x, op, y: f"{x} {op} {y}", ints, st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "<=>"]), ints),
        st.builds(lambda x, op: f"s {op} {x}", _strings(0), st.sampled_from(["=", "<", "<=>"])),
        st.builds(lambda x: f"{x} IS NULL", ints),
    )
    if depth == 0:
        return compared
    sub = _bools(depth - 1)
    return st.one_of(compared, st.builds(lambda x, op, y: f"({x} {op} {y})", sub, st.sampled_from(["AND", "OR"]), sub),
                     st.builds(lambda x: f"NOT ({x})", sub))


EXPRESSIONS = st.lists(st.one_of(_ints(2), _strings(2), _decimals(2), _bools(2)), min_size=6, max_size=12)


def _spark_values(spark, exprs: list[str]) -> list[list]:
    casts = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in SPARK_TYPES.items())
    rows = ", ".join("(" + ", ".join(_literal(v) for v in row.values()) + ")" for row in ROWS.to_pylist())
    items = ", ".join(f"{e} AS e{i}" for i, e in enumerate(exprs))
    sql = (f"SELECT {items} FROM (SELECT {casts} FROM VALUES {rows} AS v({', '.join(SPARK_TYPES)})) "
           f"ORDER BY a NULLS FIRST, b NULLS FIRST")
    got = spark.sql(sql).collect()
    return [[r[f"e{i}"] for r in got] for i in range(len(exprs))]


def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def _arrow_values(exprs: list[str]) -> list[list | None]:
    scope = SqlScope((SideColumns(None, ROWS.schema),), SqlConf())
    ordered = ROWS.take(pa.compute.sort_indices(ROWS, sort_keys=[("a", "ascending", "at_start"), ("b", "ascending", "at_start")]))
    out = []
    for e in exprs:
        try:
            expr = to_arrow(e, scope, condition=False)
        except Untranslatable:
            out.append(None)
            continue
        out.append(ds.dataset(ordered).to_table(columns={"x": expr}).column("x").to_pylist())
    return out


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(exprs=EXPRESSIONS)
def test_translated_expressions_compute_spark_s_values(spark, exprs):
    arrow = _arrow_values(exprs)
    spark_values = _spark_values(spark, exprs)
    translated = [(e, a, s) for e, a, s in zip(exprs, arrow, spark_values) if a is not None]
    for expr, a, s in translated:
        assert a == s, expr
    # The grammar draws only translated forms but for ``CAST(x AS BIGINT)``
    # of a NULL-typed value and comparisons of NULLs: most must translate.
    assert len(translated) >= len(exprs) // 2, [e for e, a in zip(exprs, arrow) if a is None]


@pytest.mark.parametrize("text", [
    "CAST(b AS INT)",                # narrowing: Spark fails (ANSI) or wraps
    "CAST(d AS DECIMAL(10,1))",      # rounds
    "CASE a WHEN 1 THEN 2 END",      # Spark's equality coercions
    "least(a, s)",                   # no common type
    "greatest(a)",                   # Spark's analysis error
    "CAST(a AS DOUBLE)",
])
def test_casts_and_cases_that_could_differ_run_on_the_executors(text):
    with pytest.raises(Untranslatable):
        to_arrow(text, SqlScope((SideColumns(None, ROWS.schema),), SqlConf()))


@pytest.mark.long
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(exprs=EXPRESSIONS)
def test_translated_expressions_compute_spark_s_values_long(spark, exprs):
    test_translated_expressions_compute_spark_s_values.hypothesis.inner_test(spark, exprs)
