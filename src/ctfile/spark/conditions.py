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
  pushdown, applied to the condition after Spark's optimizer has folded its
  constants and casts (:mod:`ctfile.spark.catalyst`);
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

from ctfile.spark.predicates import to_pyarrow
from ctfile.spark.session import is_classic
from ctfile.spark.sqltext import SqlConf, sql_tree

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

        from ctfile.spark.catalyst import catalyst_tree

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
