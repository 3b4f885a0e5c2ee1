"""The classic front end of condition translation: Spark's own.

On a classic session (a JVM in this process) the condition is analysed and
optimized by Spark over an opaque relation of the table's schema, so its
constants and implicit casts are folded as Spark folds them, and each
conjunct is translated with Spark's filter pushdown for data sources
(``DataSourceV2Strategy.translateFilterV2``). The translated V2 predicates
become the tree of :mod:`ctfile.spark.predicates`, whose rules decide what
pyarrow can express.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import Column, SparkSession

from ctfile.spark.predicates import Lit, Pred, Ref, epoch_date
from ctfile.spark_datasource.types import spark_schema


def catalyst_tree(spark: SparkSession, schema: pa.Schema, condition: Column) -> Any:
    """The predicate tree of ``condition`` (a conjunction of its translated
    conjuncts, None for one Spark does not translate), ``Pred("ALWAYS_FALSE")``
    when Spark's optimizer proved it never true, None when it folded to true.
    Spark's analysis errors propagate."""
    jvm = spark._jvm  # a classic session's py4j gateway (ctfile.spark.session.is_classic)
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
