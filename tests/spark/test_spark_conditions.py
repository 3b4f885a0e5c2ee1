"""Statistics pruning of Spark UPDATE and DELETE (:mod:`ctfile.spark.conditions`).

The translated pyarrow expression must be true for every row Spark's
condition is true for (soundness, checked by hypothesis over random
conditions on rows with nulls, NaNs and extreme values), and the pruned
partitions are really not read (a pruned partition's file is replaced by
garbage while the statement runs). Both front ends are checked against the
same Spark evaluation: Spark's own translation (classic sessions) and the
SQL text parsed with sqlglot (Spark Connect; it needs no session, only the
session's settings, so it is checked here on the local session; its
pruning on a real Connect server is in test_spark_clusters.py).
"""

from __future__ import annotations

import datetime as dt
import shutil
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import ctfile
from ctfile.spark import CtfileTable
from ctfile.spark.conditions import pruning_expression, sql_pruning_expression
from ctfile.spark.sqltext import SqlConf
from ctfile.spark_datasource.types import spark_schema
from spark_helpers import by_first_id, ranged_table, spark_conf, spoiled

UTC = dt.timezone.utc
SCHEMA = pa.schema([
    ("i", pa.int64()), ("j", pa.int32()), ("s", pa.string()), ("f", pa.float64()), ("b", pa.bool_()),
    ("d", pa.date32()), ("t", pa.timestamp("us", tz="UTC")), ("n", pa.timestamp("us")),
    ("x", pa.decimal128(10, 2)),
])
ROWS = pa.table({
    "i": [None, -(2**63), -1, 0, 1, 5, 9, 2**63 - 1],
    "j": [3, None, -7, 0, 2, 5, 2**31 - 1, -(2**31)],
    "s": ["", "a", None, "ab", "b", "\u00e9", "Z", "ab\u0000"],
    "f": [float("nan"), -0.0, 0.0, None, 1.5, float("inf"), -float("inf"), 2.5],
    "b": [True, False, None, True, False, True, None, False],
    "d": [dt.date(1970, 1, 1), None, dt.date(2020, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31),
          dt.date(2000, 1, 1), dt.date(1969, 12, 31), dt.date(2020, 3, 1)],
    "t": [dt.datetime(2020, 1, 1, tzinfo=UTC), None, dt.datetime(1970, 1, 1, tzinfo=UTC),
          dt.datetime(2020, 1, 1, 0, 0, 0, 1, tzinfo=UTC), dt.datetime(1900, 1, 1, tzinfo=UTC),
          dt.datetime(2020, 6, 1, tzinfo=UTC), dt.datetime(2038, 1, 19, tzinfo=UTC), dt.datetime(2000, 1, 1, tzinfo=UTC)],
    "n": [None, dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 1), dt.datetime(1970, 1, 1),
          dt.datetime(2021, 1, 1), dt.datetime(1999, 12, 31, 23, 59, 59), dt.datetime(2020, 1, 1), None],
    "x": [Decimal("1.50"), Decimal("-1.00"), None, Decimal("0.00"), Decimal("99999999.99"), Decimal("1.49"),
          Decimal("1.51"), Decimal("-99999999.99")],
}, schema=SCHEMA)

LITERALS = {
    "i": ["0", "1", "-1", "5", "9223372036854775807", "-9223372036854775808", "2.5", "null", "'5'", "5L", "1E0",
          "9223372036854775808"],
    "j": ["0", "3", "-7", "2147483647", "3000000000", "5L", "null", "5S", "-(7)"],
    "s": ["''", "'a'", "'ab'", "'b'", "'\u00e9'", "'Z'", "null", "'a' 'b'", "'\\u005A'", "\"b\""],
    "f": ["0.0", "-0.0", "1.5", "double('NaN')", "double('inf')", "-double('inf')", "2", "null", "1.5D", "-0.0D",
          "2.5F", "0.1", "1E0", "9007199254740993"],
    "b": ["true", "false", "null"],
    "d": ["date'2020-02-29'", "date'1970-01-01'", "date'0001-01-01'", "timestamp'2020-02-29 00:00:00'", "null",
          "'2020-02-29'", "'2020-2-29'", "'1970-01-01 00:00:00'"],
    "t": ["timestamp'2020-01-01 00:00:00'", "timestamp'2020-01-01 00:00:00.000001'", "date'2020-01-01'",
          "timestamp_ntz'2020-01-01 00:00:00'", "null", "timestamp_ltz'2020-06-01 00:00:00'", "'2020-01-01 00:00:00'"],
    "n": ["timestamp_ntz'2020-01-01 00:00:00'", "timestamp_ntz'2020-01-01 00:00:01'",
          "timestamp'2020-01-01 00:00:00'", "null", "timestamp_ntz'2020-01-01T00:00:00'"],
    "x": ["1.5", "1.50", "1.505", "-1", "99999999.99", "null", "1", "1.5D"],
}
OPERATORS = ["=", "<>", "<", "<=", ">", ">=", "<=>", "!="]


@st.composite
def conditions(draw, depth: int = 0) -> str:
    """A Spark SQL condition over :data:`SCHEMA`: comparisons, IN, null tests,
    functions Spark cannot push down (none that can fail at run time under
    ANSI mode: all conditions are evaluated in one job), and AND/OR/NOT of
    those."""
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "null", "func", "bool", "between"]
                                + (["and", "or", "not"] * 2 if depth < 3 else [])))
    col = draw(st.sampled_from(SCHEMA.names))
    if kind == "between":
        return f"({col.upper()} BETWEEN {draw(st.sampled_from(LITERALS[col]))} AND {draw(st.sampled_from(LITERALS[col]))})"
    lit = lambda: draw(st.sampled_from(LITERALS[col]))  # noqa: E731
    if kind == "cmp":
        left, right = col, lit()
        if draw(st.booleans()):
            left, right = right, left
        return f"({left} {draw(st.sampled_from(OPERATORS))} {right})"
    if kind == "in":
        values = draw(st.lists(st.sampled_from(LITERALS[col]), min_size=1, max_size=3))
        return f"({col} {'NOT ' if draw(st.booleans()) else ''}IN ({', '.join(values)}))"
    if kind == "null":
        return f"({col} IS {'NOT ' if draw(st.booleans()) else ''}NULL)"
    if kind == "func":
        return draw(st.sampled_from(["(try_add(i, 1) > 5)", "(upper(s) = 'A')", "(isnan(f))", "(s LIKE 'a%')", "(try_cast(i AS int) = 1)",
                                     "(collate(s, 'UTF8_LCASE') = 'z')", "(j % 3 = 1)"]))
    if kind == "bool":
        return draw(st.sampled_from(["b", "(NOT b)", "true", "false", "(b IS TRUE)"]))
    if kind == "not":
        return f"(NOT {draw(conditions(depth + 1))})"
    op = "AND" if kind == "and" else "OR"
    return f"({draw(conditions(depth + 1))} {op} {draw(conditions(depth + 1))})"


def _spark_matches(spark, conds: list[str]) -> list[list[bool]]:
    """For each condition, whether Spark's condition is true on each row of :data:`ROWS`
    (one Spark job for all of them)."""
    df = spark.createDataFrame(ROWS.to_pylist(), schema=spark_schema(SCHEMA)).coalesce(1)
    df = df.withColumn("_row", F.monotonically_increasing_id())
    cols = [F.coalesce(F.expr(c), F.lit(False)).alias(f"c{k}") for k, c in enumerate(conds)]
    rows = sorted(df.select("_row", *cols).collect(), key=lambda r: r[0])
    return [[bool(r[k + 1]) for r in rows] for k in range(len(conds))]


def _translations(spark, c: str) -> dict:
    """The pruning expression of ``c`` by each front end."""
    return {"catalyst": pruning_expression(spark, SCHEMA, F.expr(c)),
            "sqlglot": sql_pruning_expression(c, SCHEMA, SqlConf.of(spark))}


def _check_sound(spark, conds: list[str]) -> None:
    """Every row Spark's condition selects satisfies the expression each front
    end translates it to. Conditions that fail to analyse (a type Spark will
    not compare) are skipped."""
    usable, exprs = [], []
    for c in conds:
        try:
            spark.createDataFrame([], spark_schema(SCHEMA)).where(F.expr(c)).schema  # noqa: B018
        except Exception:  # noqa: BLE001 -- e.g. a DATATYPE_MISMATCH: not a condition anyone can run
            continue
        usable.append(c)
        exprs.append(_translations(spark, c))
    if not usable:
        return
    keyed = ROWS.add_column(0, "_k", pa.array(range(ROWS.num_rows)))
    for c, by_front_end, spark_true in zip(usable, exprs, _spark_matches(spark, usable)):
        for front_end, expr in by_front_end.items():
            if expr is None:
                continue
            selected = set(keyed.filter(expr).column("_k").to_pylist())
            missed = [k for k, hit in enumerate(spark_true) if hit and k not in selected]
            assert not missed, f"{c}: Spark selects rows {missed}, the {front_end} pruning expression {expr} does not"


# No shrinking: each example runs Spark; the assertion names the condition.
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
@given(conds=st.lists(conditions(), min_size=30, max_size=30))
def test_translation_is_true_wherever_spark_is(spark, conds):
    """Soundness on random conditions over rows with nulls, NaN, -0.0,
    infinities and extreme values."""
    _check_sound(spark, conds)


def test_translation_is_true_wherever_spark_is_on_known_edges(spark):
    """Soundness on the cases random search found or that differ between the
    engines: Spark's IN finds -0.0 among 0.0 (Arrow's is_in hashes and does
    not), NaN orders above every number in Spark, nulls in IN lists."""
    _check_sound(spark, [
        "f IN (0.0, 0.0, 2) OR NOT (n IS NOT NULL)", "f IN (-0.0)", "f = 0.0", "f <=> -0.0", "NOT (f IN (1.5))",
        "f > 2.5", "f >= double('inf')", "NOT (f < 1.5)", "i IN (1, NULL)", "NOT (i IN (1, NULL))",
        "x IN (1.50, 1.505)", "b <=> NULL", "NOT (s > 'a')",
        # the SQL text front end: literal typing and Spark's implicit casts
        "f < 0.1", "f <= 1.5", "f = -0.0", "NOT (f = -0.0D)", "f IN (0, -0.0D)", "f < 1E0", "f < 1.5F",
        "f = 9007199254740993", "i = 5L", "j = 5S", "x = 1", "x > 1.505", "NOT (x < 1)", "i IN (1, 2.5)",
        "i > 9223372036854775808", "i = -9223372036854775808", "d = '2020-02-29'", "NOT (d < '2020-02-29')",
        "d < '2020-2-29'", "s = 'a' 'b'", "s = \"b\"", "s = 'it''s'", "s = '\\u005A'", "NOT (s = '\\u005A')", "ID = 1", "`i` = 1",
        "i BETWEEN 0 AND 5", "NOT (i BETWEEN 0 AND 5)", "b", "NOT b", "i <=> NULL", "NOT (i <=> NULL)",
        "t = timestamp_ltz'2020-01-01 00:00:00'", "n = timestamp_ntz'2020-01-01 00:00:00'", "t < '2020-01-02'",
        "i = - -1", "j = -(7)", "NOT (j = -(7))",
    ])


def test_sql_text_translation_is_sound_in_another_time_zone(spark):
    """Timestamp literals are instants in the session time zone; local times
    that zone skips or repeats are not translated."""
    with spark_conf(spark, "spark.sql.session.timeZone", "America/Los_Angeles"):
        _check_sound(spark, [
            "t < timestamp'2019-12-31 16:00:00'", "t = timestamp'2019-12-31 16:00:00'",
            "NOT (t = timestamp'2019-12-31 16:00:00')", "t >= timestamp'2020-03-08 02:30:00'",
            "t < timestamp'2020-11-01 01:30:00'", "n = timestamp_ntz'2020-01-01 00:00:00'",
        ])
        conf = SqlConf.of(spark)
        assert str(sql_pruning_expression("t = timestamp'2019-12-31 16:00:00'", SCHEMA, conf)) == \
            "(t == 2020-01-01 00:00:00.000000Z)"
        for skipped_or_repeated in ("2020-03-08 02:30:00", "2020-11-01 01:30:00"):
            assert sql_pruning_expression(f"t = timestamp'{skipped_or_repeated}'", SCHEMA, conf) is None


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        # Spark's optimizer infers the is_valid tests; what pyarrow cannot express is dropped
        ("i > 5 AND upper(s) = 'X'", "((is_valid(i) and is_valid(s)) and (i > 5))"),
        ("upper(s) = 'X'", "is_valid(s)"),
        ("NOT (i = 1 AND upper(s) = 'X')", None),  # the negation of a weakened conjunction
        ("NOT (i = 1) OR NOT (x > 1.5)", "(invert((i == 1)) or (x <= 1.50))"),
        ("f > 2.5", "is_valid(f)"),  # Spark's NaN is above 2.5, Arrow's is not
        ("f < 2.5", "(is_valid(f) and (f < 2.5))"),
        ("f IN (0.0, 2)", "((f == 0) or (f == 2))"),  # equalities: Spark's IN finds -0.0 among 0.0
        ("i = 2.5", "false"),  # Spark folds it: no long equals 2.5
        ("j > 3000000000", "false"),
        ("d >= date'2020-02-29'", "(is_valid(d) and (d >= 2020-02-29))"),
        ("t < timestamp'2020-01-01 00:00:00'", "(is_valid(t) and (t < 2020-01-01 00:00:00.000000Z))"),
        ("n <=> timestamp_ntz'2020-01-01 00:00:00'", "((n == 2020-01-01 00:00:00.000000) and is_valid(n))"),
        ("i IN (1, NULL) OR s = 'a'", '(is_in(i, {value_set=int64:[\n  1\n], null_matching_behavior=MATCH}) or (s == "a"))'),
        ("collate(s, 'UTF8_LCASE') = 'a'", None),
        ("true", None),
    ],
)
def test_translation_examples(spark, condition, expected):
    expr = pruning_expression(spark, SCHEMA, F.expr(condition))
    assert (None if expr is None else str(expr)) == expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("i > 5 AND upper(s) = 'X'", "(i > 5)"),
        ("NOT (i = 1 AND upper(s) = 'X')", None),  # the negation of a weakened conjunction
        ("NOT (i = 1) OR NOT (x > 1.5)", "(invert((i == 1)) or invert((x > 1.50)))"),
        ("f > 2.5", None),  # Spark's NaN is above 2.5, Arrow's is not
        ("f < 2", "(f < 2)"),  # Spark casts the integer to the double 2.0
        ("f < 0.1", None),  # the decimal 0.1 is no double: Spark's rounding is not sure to be Python's
        ("f IN (0.0, 2)", "((f == 0) or (f == 2))"),
        ("i = 2.5", None),  # Spark compares as decimals: not translated
        ("I BETWEEN 1 AND 3", "((i >= 1) and (i <= 3))"),
        ("j > 3000000000", None),  # no int32 holds it: not translated (Spark folds it to false)
        ("d >= '2020-02-29'", "(d >= 2020-02-29)"),  # Spark casts the string to a date
        ("d >= '2020-2-29'", None),  # not the strict form
        ("t < timestamp'2020-01-01 00:00:00'", "(t < 2020-01-01 00:00:00.000000Z)"),
        ("n <=> timestamp_ntz'2020-01-01 00:00:00'", "((n == 2020-01-01 00:00:00.000000) and is_valid(n))"),
        ("b AND x <=> NULL", "((b == true) and is_null(x, {nan_is_null=false}))"),
        ("s = 'a' OR s = 'it''s'", None),  # adjacent literals: Spark concatenates them
        ("s = 'a\\\\b'", None),  # an escape: its value depends on Spark's settings
        ("i IN (1, NULL) OR s = 'a'", '(is_in(i, {value_set=int64:[\n  1\n], null_matching_behavior=MATCH}) or (s == "a"))'),
        ("collate(s, 'UTF8_LCASE') = 'a'", None),
        ("true", "true"),
        ("i >", None),  # does not parse: no pruning (Spark reports the error)
    ],
)
def test_sql_text_translation_examples(spark, condition, expected):
    expr = sql_pruning_expression(condition, SCHEMA, SqlConf.of(spark))
    assert (None if expr is None else str(expr)) == expected


def test_update_and_delete_read_only_the_partitions_statistics_allow(spark, tmp_path):
    """The partitions that cannot match are never opened: their files are
    garbage while the statements run, and the statements still succeed."""
    t = ranged_table(tmp_path / "t")
    parts = by_first_id(t)
    with t.transaction() as tx:
        where = pruning_expression(spark, tx.schema.to_arrow(field_ids=False), F.expr("id >= 650 AND v <> 'x'"))
        assert [p.path for p in ctfile.RewriteJob.for_delete(tx, prune_by=where).candidates] == [p.path for p in parts[6:]]
    before = t.version
    ct = CtfileTable.for_path(spark, t.uri)
    with spoiled(t, parts[:6]):
        r1 = ct.update("id >= 650 AND v <> 'x'", {"v": F.upper(F.col("v"))})
        r2 = ct.delete(F.col("id") > 740)
    assert (r1.num_updated_rows, r2.num_deleted_rows) == (150, 59)
    t = ctfile.open_table(t.uri)
    assert t.version == before + 2
    got = t.to_arrow().sort_by("id")
    assert got.num_rows == 741 and got.column("v")[650].as_py() == "V650" and got.column("v")[649].as_py() == "v649"
