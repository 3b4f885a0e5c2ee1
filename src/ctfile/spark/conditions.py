"""A Spark condition as a pyarrow expression for statistics pruning.

A distributed UPDATE or DELETE (SPEC §Copy-on-write, distributed
statements) skips the live partitions whose statistics prove that no row
satisfies its condition. The condition is Spark's, so the coordinator
derives from it a pyarrow expression *true for every row the condition is
true for* and prunes with that (:meth:`ctfile.RewriteJob.for_delete`);
Spark still evaluates the condition itself on the candidates' rows, so a
weaker expression only prunes less.

Two front ends read the condition into one predicate tree, and one back end
(:mod:`ctfile.spark.predicates`) maps the tree onto pyarrow:

* on a classic session, Spark's own translation of a filter for data source
  pushdown (``DataSourceV2Strategy.translateFilterV2``, through py4j),
  applied to each conjunct of the condition after Spark's optimizer has
  folded its constants and implicit casts over an opaque relation of the
  table's schema (:func:`catalyst_tree`);
* on Spark Connect (no JVM in this process), the condition's SQL text parsed
  with sqlglot, with Spark's literal typing and the implicit casts that are
  exact done by ctfile, and anything it is not sure of left out
  (:mod:`ctfile.spark.sqltext`). A Column condition has no SQL text through
  PySpark's public API, so on Connect it does not prune: every live
  partition is searched.

The back end keeps only what means the same in both engines:

* comparisons of a top-level column with a literal of the column's own type
  family (integers, strings, dates, timestamps, decimals, booleans,
  binaries), ``IN``, ``IS [NOT] NULL``, ``<=>``, ``AND``, ``OR``, ``NOT``;
* for floating-point columns only ``=``, ``<``, ``<=`` and ``IN`` with
  non-NaN literals the column's type holds exactly, and null tests: Spark
  orders NaN above every number and equal to itself, which Arrow does not,
  so ``x > 1`` is true for a NaN in Spark and false in Arrow;
* an ``AND`` with an untranslatable side keeps the other side (weaker);
  ``OR`` needs both sides; ``NOT`` needs a *faithful* inner expression,
  one that is also false wherever Spark's is false (nulls may differ).

Functions of columns (``upper(s)``, ``a + 1``, casts of the column),
collations, nested fields and non-deterministic parts are not translated.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, SparkSession

from ctfile.spark.predicates import Lit, Pred, Ref, epoch_date, to_pyarrow
from ctfile.spark.session import is_classic
from ctfile.spark.sqltext import SqlConf, sql_tree
from ctfile.spark_datasource.types import spark_schema

log = logging.getLogger("ctfile")


def pruning_expression(spark: Any, schema: pa.Schema, condition: Any) -> pc.Expression | None:
    """A pyarrow expression true for every row of a table with ``schema``
    for which ``condition`` (a Spark SQL string or a Column) is true, or
    None when nothing of it translates.

    The ``is_valid`` tests are Spark's (its optimizer infers them from the
    comparisons); ``upper(name) = 'X'`` is dropped, the rest is kept. The
    negation of a conjunction so weakened would select too little, so it
    translates to nothing.

    Examples
    --------
    >>> import os, sys
    >>> _ = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers run this interpreter
    >>> from pyspark.sql import SparkSession
    >>> spark = SparkSession.builder.master("local[1]").getOrCreate()  # the running session, if any
    >>> s = pa.schema([("id", pa.int64()), ("name", pa.string())])
    >>> pruning_expression(spark, s, "id > 5 AND upper(name) = 'X'")
    <pyarrow.compute.Expression ((is_valid(id) and is_valid(name)) and (id > 5))>
    >>> print(pruning_expression(spark, s, "NOT (id = 1 AND upper(name) = 'X')"))
    None
    """
    if is_classic(spark):
        from pyspark.sql import functions as F

        column = F.expr(condition) if isinstance(condition, str) else condition
        return to_pyarrow(catalyst_tree(spark, schema, column), schema)
    if not isinstance(condition, str):
        log.info("ctfile: a Column condition on Spark Connect has no SQL text to prune by: every live partition is read")
        return None
    return sql_pruning_expression(condition, schema, SqlConf.of(spark))


def sql_pruning_expression(text: str, schema: pa.Schema, conf: SqlConf) -> pc.Expression | None:
    """:func:`pruning_expression` of the SQL text of a condition, as on Spark
    Connect: no session needed but its settings ``conf``.

    Examples
    --------
    >>> s = pa.schema([("id", pa.int64()), ("d", pa.date32())])
    >>> sql_pruning_expression("id BETWEEN 1 AND 3 OR d = '2020-02-29'", s, SqlConf())
    <pyarrow.compute.Expression (((id >= 1) and (id <= 3)) or (d == 2020-02-29))>
    """
    return to_pyarrow(sql_tree(text, schema, conf), schema)


# ---------------------------------------------------------------- the classic front end


def catalyst_tree(spark: SparkSession, schema: pa.Schema, condition: Column) -> Any:
    """The predicate tree of ``condition`` (a conjunction of its translated
    conjuncts, None for one Spark does not translate), ``Pred("ALWAYS_FALSE")``
    when Spark's optimizer proved it never true, None when it folded to true.
    Spark's analysis errors propagate."""
    jvm = spark._jvm  # a classic session's py4j gateway (is_classic)
    relation = spark.createDataFrame(spark.sparkContext.emptyRDD(), spark_schema(schema))
    plan = relation.where(condition)._jdf.queryExecution().optimizedPlan()
    node = plan.nodeName()
    if node == "LocalRelation":  # the optimizer proved the condition never true
        return Pred("ALWAYS_FALSE")
    if node != "Filter":  # the condition folded to true
        return None
    translate = getattr(getattr(jvm.org.apache.spark.sql.execution.datasources.v2, "DataSourceV2Strategy$"), "MODULE$")
    is_predicate = _predicate_test(spark)
    tree = None
    for c in _conjuncts(plan.condition()):
        part = _conjunct(translate, c, is_predicate)
        tree = part if tree is None else Pred("AND", (tree, part))
    return tree


def _conjuncts(expr: Any) -> list:
    """The Catalyst conjuncts of ``expr`` (its ``And`` tree flattened), each
    translated on its own so that one untranslatable part drops only itself."""
    if expr.getClass().getSimpleName() == "And":
        return _conjuncts(expr.left()) + _conjuncts(expr.right())
    return [expr]


def _predicate_test(spark: SparkSession) -> Any:
    """Whether a py4j object is a V2 ``Predicate`` (py4j objects answer any
    attribute, so only the JVM can tell)."""
    from py4j.java_gateway import is_instance_of

    gateway = spark.sparkContext._gateway
    return lambda e: is_instance_of(gateway, e, "org.apache.spark.sql.connector.expressions.filter.Predicate")


def _conjunct(translate: Any, expr: Any, is_predicate: Any) -> Any:
    if not expr.deterministic():
        return None
    v2 = translate.translateFilterV2(expr)
    return _node(v2.get(), is_predicate) if v2.isDefined() else None


def _node(e: Any, is_predicate: Any) -> Any:
    """A V2 expression as a tree node: a predicate, a top-level column, a literal, or None."""
    kind = e.getClass().getSimpleName()
    if kind == "FieldReference":
        names = list(e.fieldNames())
        return Ref(names[0]) if len(names) == 1 else None
    if kind == "LiteralValue":
        return _literal(e)
    if is_predicate(e):
        return Pred(str(e.name()), tuple(_node(c, is_predicate) for c in e.children()))
    return None


def _literal(lit: Any) -> Lit | None:
    """A V2 literal with its Catalyst value in Python (strings are
    UTF8String, dates days since the epoch, timestamps microseconds,
    decimals Spark Decimals)."""
    kind = lit.dataType().typeName()
    kind = "decimal" if kind.startswith("decimal") else kind
    v = lit.value()
    if v is None:
        return Lit(kind, None)
    convert = _VALUES.get(kind)
    return None if convert is None else Lit(kind, convert(v))


_VALUES = {
    "boolean": bool, "byte": int, "short": int, "integer": int, "long": int, "float": float, "double": float,
    "string": lambda v: str(v.toString()), "binary": bytes, "date": epoch_date,
    "timestamp": int, "timestamp_ntz": int, "decimal": lambda v: v.toJavaBigDecimal(),
}
