"""A Spark condition as a pyarrow expression for statistics pruning.

A distributed UPDATE or DELETE (SPEC §Copy-on-write, distributed
statements) skips the live partitions whose statistics prove that no row
satisfies its condition. The condition is Spark's, so the coordinator
derives from it a pyarrow expression *true for every row the condition is
true for* and prunes with that (:meth:`ctfile.RewriteJob.for_delete`);
Spark still evaluates the condition itself on the candidates' rows, so a
weaker expression only prunes less.

The derivation uses Spark's own translation of a filter for data source
pushdown (``DataSourceV2Strategy.translateFilterV2``), applied to the
condition after Spark's optimizer has folded its constants and casts over an
opaque relation of the table's schema. ctfile then maps the translated
predicate tree onto pyarrow, keeping only what means the same in both:

* comparisons of a top-level column with a literal of the column's own type
  family (integers, strings, dates, timestamps, decimals, booleans,
  binaries), ``IN``, ``IS [NOT] NULL``, ``<=>``, ``AND``, ``OR``, ``NOT``;
* for floating-point columns only ``=``, ``<``, ``<=`` and ``IN`` with
  non-NaN literals, and null tests: Spark orders NaN above every number and
  equal to itself, which Arrow does not, so ``x > 1`` is true for a NaN in
  Spark and false in Arrow;
* an ``AND`` with an untranslatable side keeps the other side (weaker);
  ``OR`` needs both sides; ``NOT`` needs a *faithful* inner expression,
  one that is also false wherever Spark's is false (nulls may differ).

Functions of columns (``upper(s)``, ``a + 1``, casts of the column),
collations, nested fields and non-deterministic parts are not translated.
On Spark Connect (no JVM plan in this process) nothing is, and every live
partition is searched.
"""

from __future__ import annotations

import datetime
import logging
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, SparkSession

from ctfile.spark_datasource.types import spark_schema

log = logging.getLogger("ctfile")

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}
_COMPARE = {
    "=": lambda f, v: f == v, "<>": lambda f, v: f != v, "<": lambda f, v: f < v,
    "<=": lambda f, v: f <= v, ">": lambda f, v: f > v, ">=": lambda f, v: f >= v,
}
_FLOAT_SAFE = {"=", "<", "<="}  # false for NaN in both engines
_EPOCH = datetime.date(1970, 1, 1)


@dataclass(frozen=True)
class _Translated:
    """A pyarrow expression true wherever Spark's is true; ``faithful``: also
    false wherever Spark's is false (so its negation may be taken)."""

    expr: pc.Expression
    faithful: bool


def pruning_expression(spark: SparkSession, schema: pa.Schema, condition: Column) -> pc.Expression | None:
    """A pyarrow expression true for every row of a table with ``schema``
    for which ``condition`` is true, or None when nothing of it translates.

    The ``is_valid`` tests are Spark's (its optimizer infers them from the
    comparisons); ``upper(name) = 'X'`` is dropped, the rest is kept. The
    negation of a conjunction so weakened would select too little, so it
    translates to nothing.

    Examples
    --------
    >>> from pyspark.sql import SparkSession, functions as F
    >>> spark = SparkSession.builder.master("local[1]").getOrCreate()  # the running session, if any
    >>> s = pa.schema([("id", pa.int64()), ("name", pa.string())])
    >>> pruning_expression(spark, s, F.expr("id > 5 AND upper(name) = 'X'"))
    <pyarrow.compute.Expression ((is_valid(id) and is_valid(name)) and (id > 5))>
    >>> print(pruning_expression(spark, s, F.expr("NOT (id = 1 AND upper(name) = 'X')")))
    None
    """
    try:
        jvm = spark._jvm
        relation = spark.createDataFrame(spark.sparkContext.emptyRDD(), spark_schema(schema))
        plan = relation.where(condition)._jdf.queryExecution().optimizedPlan()
    except (AttributeError, NotImplementedError):  # Spark Connect: no JVM plan here
        return None
    node = plan.nodeName()
    if node == "LocalRelation":  # the optimizer proved the condition never true
        return pc.scalar(False)
    if node != "Filter":  # the condition folded to true
        return None
    translate = getattr(getattr(jvm.org.apache.spark.sql.execution.datasources.v2, "DataSourceV2Strategy$"), "MODULE$")
    parts = [_conjunct(translate, c, schema) for c in _conjuncts(plan.condition())]
    exprs = [p.expr for p in parts if p is not None]
    if not exprs:
        return None
    out = exprs[0]
    for e in exprs[1:]:
        out = out & e
    return out


def _conjuncts(expr: Any) -> list:
    """The Catalyst conjuncts of ``expr`` (its ``And`` tree flattened), each
    translated on its own so that one untranslatable part drops only itself."""
    if expr.getClass().getSimpleName() == "And":
        return _conjuncts(expr.left()) + _conjuncts(expr.right())
    return [expr]


def _conjunct(translate: Any, expr: Any, schema: pa.Schema) -> _Translated | None:
    if not expr.deterministic():
        return None
    v2 = translate.translateFilterV2(expr)
    return _predicate(v2.get(), schema) if v2.isDefined() else None


def _predicate(p: Any, schema: pa.Schema) -> _Translated | None:
    """A V2 ``Predicate`` tree as pyarrow (see the module docstring)."""
    name = p.name()
    children = list(p.children())
    if name in _COMPARE or name == "<=>":
        return _comparison(name, children, schema)
    handler = _HANDLERS.get(name)
    return None if handler is None else handler(name, children, schema)


def _connective(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    """AND keeps a side it can translate (weaker, so no longer faithful); OR needs both."""
    left, right = (_predicate(c, schema) for c in children)
    if left is None or right is None:
        if name == "OR" or (left is None and right is None):
            return None
        return _Translated((left or right).expr, False)
    combined = left.expr & right.expr if name == "AND" else left.expr | right.expr
    return _Translated(combined, left.faithful and right.faithful)


def _negation(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    inner = _predicate(children[0], schema)
    return _Translated(~inner.expr, True) if inner is not None and inner.faithful else None


def _constant(name: str, children: list, schema: pa.Schema) -> _Translated:
    return _Translated(pc.scalar(name == "ALWAYS_TRUE"), True)


def _column(e: Any, schema: pa.Schema) -> pa.Field | None:
    if e.getClass().getSimpleName() != "FieldReference":
        return None
    names = list(e.fieldNames())
    if len(names) != 1 or names[0] not in schema.names:
        return None
    return schema.field(names[0])


def _is_literal(e: Any) -> bool:
    return e.getClass().getSimpleName() == "LiteralValue"


def _null_test(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    child = children[0]
    if _is_literal(child):  # Spark's expansion of <=> tests literals too
        return _Translated(pc.scalar((child.value() is None) == (name == "IS_NULL")), True)
    col = _column(child, schema)
    if col is None:
        return None
    f = pc.field(col.name)
    return _Translated(f.is_null() if name == "IS_NULL" else f.is_valid(), True)


def _in(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    col = _column(children[0], schema)
    if col is None or not all(_is_literal(c) for c in children[1:]):
        return None
    values = []
    for c in children[1:]:
        if c.value() is None:
            continue  # never true; Arrow's false where Spark's null keeps it faithful
        v = _literal(c, col)
        if v is None or (pa.types.is_floating(col.type) and math.isnan(v.as_py())):
            return None
        values.append(v)
    if not values:
        return None
    f = pc.field(col.name)
    if pa.types.is_floating(col.type):
        # Spark's IN finds -0.0 among 0.0 (it compares); Arrow's is_in hashes
        # and does not, so floats become a disjunction of equalities.
        expr = f == values[0]
        for v in values[1:]:
            expr = expr | (f == v)
        return _Translated(expr, True)
    return _Translated(f.isin(pa.array([v.as_py() for v in values], col.type)), True)


def _comparison(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    left, right = children
    if _is_literal(left) and not _is_literal(right):
        left, right, name = right, left, _FLIP.get(name, name)
    col = _column(left, schema)
    if col is None or not _is_literal(right) or right.value() is None:
        return None
    value = _literal(right, col)
    if value is None:
        return None
    if pa.types.is_floating(col.type) and (name not in _FLOAT_SAFE or math.isnan(value.as_py())):
        return None
    f = pc.field(col.name)
    if name == "<=>":  # false, not null, for a null column value
        return _Translated((f == value) & f.is_valid(), True)
    return _Translated(_COMPARE[name](f, value), True)


_HANDLERS = {
    "AND": _connective, "OR": _connective, "NOT": _negation, "ALWAYS_TRUE": _constant, "ALWAYS_FALSE": _constant,
    "IS_NULL": _null_test, "IS_NOT_NULL": _null_test, "IN": _in,
}


def _literal(lit: Any, col: pa.Field) -> pa.Scalar | None:
    """A V2 literal as a pyarrow scalar of ``col``'s type, or None when the
    literal is of another type family than the column (Spark then compares
    differently than Arrow would) or does not fit it exactly."""
    kind = lit.dataType().typeName()
    family, build = _LITERALS.get("decimal" if kind.startswith("decimal") else kind, (None, None))
    if family is None or not family(col.type):
        return None
    try:
        return build(lit.value()).cast(col.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, ValueError):
        return None


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _is_instant(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is not None


def _is_local_timestamp(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is None


def _integer(v: Any) -> pa.Scalar:
    return pa.scalar(int(v), pa.int64())


def _floating(v: Any) -> pa.Scalar:
    return pa.scalar(float(v), pa.float64())


#: Spark type name -> (the Arrow column types it compares with as Arrow
#: does, the literal's Catalyst value as a pyarrow scalar). Catalyst values:
#: strings are UTF8String, dates days since the epoch, timestamps
#: microseconds (UTC for TIMESTAMP, local for TIMESTAMP_NTZ), decimals
#: Spark Decimals.
_LITERALS = {
    "boolean": (pa.types.is_boolean, lambda v: pa.scalar(bool(v))),
    "byte": (pa.types.is_signed_integer, _integer),
    "short": (pa.types.is_signed_integer, _integer),
    "integer": (pa.types.is_signed_integer, _integer),
    "long": (pa.types.is_signed_integer, _integer),
    "float": (pa.types.is_floating, _floating),
    "double": (pa.types.is_floating, _floating),
    "string": (_is_string, lambda v: pa.scalar(str(v.toString()), pa.string())),
    "binary": (_is_binary, lambda v: pa.scalar(bytes(v), pa.binary())),
    "date": (pa.types.is_date, lambda v: pa.scalar(_EPOCH + datetime.timedelta(days=int(v)), pa.date32())),
    "timestamp": (_is_instant, lambda v: pa.scalar(int(v), pa.timestamp("us", tz="UTC"))),
    "timestamp_ntz": (_is_local_timestamp, lambda v: pa.scalar(int(v), pa.timestamp("us"))),
    "decimal": (pa.types.is_decimal, lambda v: pa.scalar(v.toJavaBigDecimal())),
}
