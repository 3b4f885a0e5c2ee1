"""The expressions of a MERGE on Spark's executors (:mod:`ctfile.spark.merge`):
the builder's expressions (:data:`SPARK_EXPRESSIONS`), and the columns that
name, row by row, the clause that applies and the values it assigns
(:mod:`ctfile.writer.merge_rows` reads them; SPEC §Copy-on-write,
distributed statements).

A clause is chosen by a ``CASE WHEN`` over the clauses of its kind in
statement order (the first whose condition holds), and each value is
computed only on the rows of its clause (``CASE WHEN clause = i``), as the
Python engine computes it: Spark evaluates the branches of a ``CASE`` lazily,
so a value that would fail (an ANSI overflow) on another clause's rows does
not fail.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, NullType

import ctfile
from ctfile.spark.dml import to_column
from ctfile.spark_datasource.types import spark_schema


# ---------------------------------------------------------------- the builder's expressions


def _condition(value: Any, *, what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) and value is True:
        return None
    to_column(value, what=what)  # a string or a Column, or a typed error
    return value


def _value(value: Any, *, what: str) -> Any:
    if isinstance(value, (str, Column)):
        to_column(value, what=what)
    return value  # anything else is a literal, which Spark types (F.lit)


#: Spark's expressions for :class:`ctfile.MergeBuilder`: conditions are Spark
#: SQL strings or Columns; a SET or VALUES value is a Spark SQL string (quote
#: string literals: ``"'EUR'"``), a Column, or a Python value (a literal).
SPARK_EXPRESSIONS = ctfile.MergeExpressions("Spark SQL string or Column", _condition, _value)


def _condition_text(value: Any, *, what: str) -> Any:
    return value if isinstance(value, str) else _condition(value, what=what)


def _value_text(value: Any, *, what: str) -> Any:
    return value if isinstance(value, str) else _value(value, what=what)


#: :data:`SPARK_EXPRESSIONS` with Spark SQL strings kept as text, not made
#: Columns (a JVM round trip each) when the builder takes them: for a
#: statement the driver may run (:meth:`ctfile.spark.transaction.SparkTransaction.merge_rows_builder`);
#: PySpark 4 parses a string only when Spark uses it, so no check is lost.
SPARK_TEXT_EXPRESSIONS = ctfile.MergeExpressions("Spark SQL string or Column", _condition_text, _value_text)


def render(value: Any) -> str:
    """An expression as the commit's ``operationParameters`` record it."""
    if isinstance(value, Column):
        text = str(value)
        return text[len("Column<'"):-2] if text.startswith("Column<'") and text.endswith("'>") else text
    return value if isinstance(value, str) else repr(value)


def expression(value: Any, typ: Any) -> Column:
    """A condition or value as a Column: SQL text, a Column, a copied
    source column (``s_alias`` qualified by the caller), or a literal of
    Spark type ``typ`` (None: Spark's)."""
    if isinstance(value, (str, Column)):
        return to_column(value, what="merge expression")
    if value is None and typ is not None:
        return F.lit(None).cast(typ)
    return F.lit(value)


def with_clauses(rows: DataFrame, plan: ctfile.MergePlan, kind: ctfile.MatchKind, ids: list[Column],
                  source_alias: str) -> DataFrame:
    """``ids`` of ``rows``, the index of the first clause of ``kind`` whose
    condition holds (null: none) and each value of each such clause (null
    on the rows of other clauses, so that a value is computed only where its
    clause applies, as the Python engine computes it)."""
    return with_kinds(rows, plan, [(kind, None)], ids, source_alias)


def with_kinds(rows: DataFrame, plan: ctfile.MergePlan, kinds: list[tuple[ctfile.MatchKind, Column | None]],
                ids: list[Column], source_alias: str) -> DataFrame:
    """:func:`_with_clauses` for rows of several kinds: each ``(kind,
    where)`` chooses among the clauses of ``kind`` on the rows ``where``
    holds for (None: every row; the kinds' rows are disjoint)."""
    table = spark_schema(plan.schema.to_arrow(field_ids=False))
    chosen = None
    values = []
    for kind, where in kinds:
        choice, found = _choice(plan, kind, table, source_alias)
        if choice is None:
            continue
        values += found
        if where is None:
            chosen = choice
        else:
            chosen = F.when(where, choice) if chosen is None else chosen.when(where, choice)
    if chosen is None:
        return rows.select(*ids, F.lit(None).cast("int").alias(ctfile.CLAUSE_COLUMN))
    with_clause = rows.withColumn(ctfile.CLAUSE_COLUMN, chosen.cast("int"))
    clause = F.col(ctfile.CLAUSE_COLUMN)
    out = with_clause.select(*ids, clause, *[F.when(clause == F.lit(i), e).alias(col) for i, _, e, col in values])
    return _values_for_table(out, table, values)


def _choice(plan: ctfile.MergePlan, kind: ctfile.MatchKind, table: Any, source_alias: str) -> tuple[Any, list]:
    """The ``CASE WHEN`` choosing the first clause of ``kind`` whose
    condition holds (None: no clause of ``kind``), and each value of each
    such clause: (clause index, column, expression, value column)."""
    chosen = None
    values = []
    for i, c in enumerate(plan.clauses):
        if c.kind is not kind:
            continue
        cond = F.lit(True) if c.condition is None else to_column(c.condition, what=f"the condition of {c.clause}")
        chosen = F.when(cond, F.lit(i)) if chosen is None else chosen.when(cond, F.lit(i))
        for j, (name, v) in enumerate(c.values):
            if isinstance(v, ctfile.SourceColumn):
                expr = F.col(f"{source_alias}.{v.name}")
            else:
                expr = expression(v, table[name].dataType)
            values.append((i, name, expr, ctfile.value_column(i, j)))
    return chosen, values


def _values_for_table(df: DataFrame, table: Any, values: list) -> DataFrame:
    """``df`` with a decimal value of a floating-point column cast to the
    column's type (Spark SQL types ``2.5`` as a decimal, which a double
    column takes on assignment; ctfile's own conversion refuses decimal to
    float as lossy) and an untyped null typed as its column."""
    casts = {}
    types = {f.name: f.dataType for f in df.schema.fields}
    names = {f.name for f in table.fields}
    for _, name, _, col in values:
        if name not in names:
            continue
        want, got = table[name].dataType, types[col]
        float_target = want.typeName() in ("double", "float")
        if (isinstance(got, DecimalType) and float_target) or isinstance(got, NullType):
            casts[col] = F.col(col).cast(want)
    return df.withColumns(casts) if casts else df
