"""UPDATE and DELETE run on Spark's executors (SPEC §Copy-on-write,
distributed statements), and the parts MERGE shares with them
(:mod:`ctfile.spark.merge` runs MERGE): the tasks, expressions, analysis.

Each statement is planned on the driver in a transaction of its own
(``Table.run_statement``, so a conflict re-runs it at the latest version),
or in the caller's (:mod:`ctfile.spark.transaction`):

1. the statement is checked as the Python helpers check it
   (:class:`ctfile.RewriteJob`), before any file is written: unknown
   columns, types that do not fit, a MERGE source with two rows per key;
2. Spark finds the matched rows: the candidate partitions (pruned by
   statistics: a MERGE by the source's key ranges, an UPDATE or DELETE by
   the part of its condition pyarrow can express,
   :mod:`ctfile.spark.conditions`) are read on the executors with each
   row's file and position (:func:`ctfile.spark.scan.candidate_rows`),
   joined with the MERGE source on the keys or filtered by the condition,
   and SET values are computed;
3. the rows are grouped by file, and one Spark task per touched partition
   rewrites it (:meth:`ctfile.RewriteJob.rewrite`); a MERGE's unmatched
   source rows are spread over more groups and written as new partitions
   (:meth:`ctfile.RewriteJob.insert`) in the same job;
4. the driver collects only the tasks' results (file descriptions and
   counts, never rows) and commits them as one version.

A task that meets bad data (a null for a non-nullable column, a value that
does not fit) returns the error instead of failing alone; the driver then
deletes every task's files and raises it, typed as in the Python API.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, TimestampNTZType, TimestampType

import ctfile
from ctfile.spark.conditions import pruning_expression
from ctfile.spark.scan import FILE_COLUMN, SparkRowsPredicate, candidate_rows
from ctfile.spark.session import default_parallelism, is_classic
from ctfile.spark.sqltext import SqlConf, sql_columns
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

GROUP_COLUMN = "_ct_group"
_RESULT_SCHEMA = "kind string, payload binary"
INSERT_PREFIX = "+"  # groups of inserted rows: "+0", "+1" ... (never a partition path)


# ---------------------------------------------------------------- the tasks


def _task_fn(job: ctfile.RewriteJob) -> Callable[[pa.Table], pa.Table]:
    """The ``applyInArrow`` function of one group: rewrite the partition it
    names, or insert its rows; a ctfile error is returned, not raised."""

    def run(rows: pa.Table) -> pa.Table:
        group = rows.column(GROUP_COLUMN)[0].as_py()
        try:
            if group.startswith(INSERT_PREFIX):
                data = rows.drop_columns([c for c in (GROUP_COLUMN, ctfile.POSITION_COLUMN) if c in rows.column_names])
                kind, value = "insert", job.insert(data)
            else:
                kind, value = "rewrite", job.rewrite(group, rows)
        except ctfile.CtfileError as e:
            kind, value = "error", e
        return pa.table({"kind": [kind], "payload": [pickle.dumps(value)]})

    return run


@dataclass
class Results:
    rewrites: list
    inserted: list


def execute_tasks(spark: SparkSession, job: ctfile.RewriteJob, rows: DataFrame, *, groups: int) -> Results:
    """Run the tasks over ``rows`` (grouped by :data:`GROUP_COLUMN`, at most
    ``groups`` groups) and gather their results; on a task's ctfile error
    every file is deleted and the error raised.

    The rows are repartitioned into one Spark partition per group (hash
    collisions aside; at most four per core) before grouping: the shuffled rows are small (positions
    and new values) while each group's work (reading and writing a whole
    partition) is not, so adaptive execution must not coalesce the groups
    into one task, which it does to a shuffle it sizes by its bytes."""
    cap = 4 * default_parallelism(spark)  # empty tasks cost too, when few groups have rows
    spread = rows.repartition(max(1, min(groups, cap)), GROUP_COLUMN)
    out = spread.groupBy(GROUP_COLUMN).applyInArrow(_task_fn(job), _RESULT_SCHEMA).collect()
    results, errors = Results([], []), []
    for kind, payload in out:
        value = pickle.loads(payload)
        if kind == "rewrite":
            results.rewrites.append(value)
        elif kind == "insert":
            results.inserted.extend(value)
        else:
            errors.append(value)
    if errors:
        job.discard(results.rewrites, results.inserted)
        raise errors[0]
    return results


def counts(results: Results) -> dict[str, int]:
    """The ``inserted``/``updated``/``deleted`` counts of a statement's results."""
    return {
        "inserted": sum(f.num_records for f in results.inserted),
        "updated": sum(r.updated for r in results.rewrites if not r.unchanged),
        "deleted": sum(r.deleted for r in results.rewrites if not r.unchanged),
    }


# ---------------------------------------------------------------- expressions


def to_column(value: Any, *, what: str) -> Column:
    """A Spark SQL string as an expression, a Column as is (``what`` names it in errors)."""
    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        try:
            return F.expr(value)  # PySpark 4 parses when the expression is used (see _analyze)
        except ParseException as e:
            raise ctfile.InvalidArgumentError(f"{what} is not a Spark SQL expression: {value!r} ({e})") from e
    raise ctfile.InvalidArgumentError(f"{what} must be a Spark SQL string or a Column, found {type(value).__name__}")


def analyze(build: Callable[[], DataFrame], *, what: str) -> DataFrame:
    """``build()``, with Spark's analysis errors (an unknown column, a type
    error) raised as :class:`ctfile.SchemaMismatchError` before anything runs,
    and a SQL string that does not parse (``F.expr`` parses lazily since
    PySpark 4) as :class:`ctfile.InvalidArgumentError`. A DataFrame is
    analysed here (its schema asked for): Spark Connect analyses lazily."""
    try:
        out = build()
        if isinstance(out, DataFrame):
            out.schema  # noqa: B018 -- analysis now, on Connect too
        return out
    except ParseException as e:
        raise ctfile.InvalidArgumentError(f"{what} is not a Spark SQL expression: {e.getMessage()}") from e
    except AnalysisException as e:
        raise ctfile.SchemaMismatchError(f"{what}: {e.getMessage() if hasattr(e, 'getMessage') else e}") from e


def in_table_timestamps(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """``df`` with each top-level timestamp column of the other kind than
    its table column in ``schema`` (Spark's TIMESTAMP, an instant, for a
    column without a time zone; TIMESTAMP_NTZ for one with) cast by Spark,
    in the session time zone. Spark compares the two kinds that way (a
    MERGE's join on such a key), so the values written must be converted
    the same way, not by Arrow (which converts in UTC). Timestamps nested in
    structs, lists or maps are left to Arrow's conversion."""
    casts = {}
    for f in df.schema.fields:
        if f.name not in schema.names or not isinstance(f.dataType, (TimestampType, TimestampNTZType)):
            continue
        want = schema.field(f.name).type
        if pa.types.is_timestamp(want):
            kind = TimestampNTZType() if want.tz is None else TimestampType()
            if type(f.dataType) is not type(kind):
                casts[f.name] = F.col(f.name).cast(kind)
    return df.withColumns(casts) if casts else df


def referenced_columns(spark: SparkSession, schema: pa.Schema, exprs: Sequence[Column],
                       given: Sequence[Any] = ()) -> list[str]:
    """The table columns ``exprs`` use, in table order, so that the candidate
    scan reads only those. Raises Spark's AnalysisException for an unknown
    column.

    On a classic session, from Spark's analysis of ``exprs`` over an empty
    relation of the table's schema (no job). On Spark Connect, from the SQL
    text of the expressions as ``given`` (strings; other values are
    literals), every column whose name is one of their words
    (:func:`ctfile.spark.sqltext.sql_columns`); a Column given has no SQL
    text, so then (or with nothing given) every column is read."""
    analyzed = spark.createDataFrame([], spark_schema(schema)).select(*exprs)
    analyzed.schema  # noqa: B018 -- an unknown column fails here, on Connect too
    if not is_classic(spark):
        return _columns_in_text(spark, schema, given)
    it = analyzed._jdf.queryExecution().analyzed().references().iterator()
    used = set()
    while it.hasNext():
        used.add(it.next().name())
    return [n for n in schema.names if n in used]


def _columns_in_text(spark: SparkSession, schema: pa.Schema, given: Sequence[Any]) -> list[str]:
    """:func:`referenced_columns` on Spark Connect: the columns named in the
    SQL text of ``given``; all of them when a Column (no text) or nothing
    was given, or when the text cannot be read."""
    if not given or any(isinstance(g, Column) for g in given):
        return list(schema.names)
    found = sql_columns([g for g in given if isinstance(g, str)], schema, SqlConf.of(spark))
    return list(schema.names) if found is None else found


# ---------------------------------------------------------------- UPDATE and DELETE


@dataclass
class ConditionStatement:
    """An UPDATE (``set`` given) or DELETE where ``condition`` (None: every
    row); ``given``: the condition and SET values as the caller gave them
    (SQL strings, Columns or plain values), whose SQL text prunes and
    chooses columns on Spark Connect."""

    spark: SparkSession
    condition: Column | None
    set: dict[str, Column] | None = None
    given: tuple = ()

    def run(self, tx: ctfile.WriteTransaction) -> dict[str, int]:
        """Run the statement in ``tx``; the counts it staged."""
        tx.check_row_change("UPDATE" if self.set is not None else "DELETE")  # SPEC §Derived tables
        tx.check_keeps_rows("UPDATE" if self.set is not None else "DELETE")  # SPEC §Append-only tables
        if tx.is_replay:
            return counts(Results([], []))
        job, matched, used, cond = self._plan(tx)
        results = execute_tasks(self.spark, job, matched, groups=len(job.candidates))
        predicate = SparkRowsPredicate(
            self.spark, job, used, lambda rows: rows.where(cond), f"rows where {_describe(self.condition)}"
        )
        job.stage(tx, results.rewrites, predicate=predicate)
        return counts(results)

    def _plan(self, tx: ctfile.WriteTransaction) -> tuple[ctfile.RewriteJob, DataFrame, list[str], Column]:
        """The job, the matched rows (group, position, SET values), the
        columns the statement reads and its condition; every check is made
        here, before a Spark job runs."""
        schema = tx.schema.to_arrow(field_ids=False)
        self._check_set_columns(schema)
        cond = F.lit(True) if self.condition is None else self.condition
        values = [v.alias(c) for c, v in (self.set or {}).items()]
        used = analyze(lambda: referenced_columns(self.spark, schema, [cond, *values], self.given),
                        what="condition or set")
        prune_by = None if self.condition is None else self._pruning(schema, cond)
        probe = ctfile.RewriteJob.for_delete(tx, prune_by=prune_by)
        target = candidate_rows(self.spark, probe, used)
        keep = [F.col(FILE_COLUMN).alias(GROUP_COLUMN), F.col(ctfile.POSITION_COLUMN)]
        matched = analyze(lambda: target.where(cond).select(*keep, *values), what="condition or set")
        if self.set is None:
            return probe, matched, used, cond
        values = _decimals_to_float(values, matched.schema, schema)
        matched = in_table_timestamps(target.where(cond).select(*keep, *values), schema)
        set_fields = [f for f in spark_arrow_schema(matched.schema) if f.name in self.set]
        return ctfile.RewriteJob.for_update(tx, pa.schema(set_fields), prune_by=prune_by), matched, used, cond


    def _check_set_columns(self, schema: pa.Schema) -> None:
        """An UPDATE sets only columns of the table."""
        unknown = [c for c in self.set or () if c not in schema.names]
        if unknown:
            raise ctfile.SchemaMismatchError(f"set names unknown columns {unknown}; table columns are {schema.names}")

    def _pruning(self, schema: pa.Schema, cond: Column) -> Any:
        """The pyarrow expression that prunes partitions for the condition,
        from its text as given (the Column ``cond`` where none was)."""
        source = self.given[0] if self.given and self.given[0] is not None else cond
        return analyze(lambda: pruning_expression(self.spark, schema, source), what="condition")


def update_statement(spark: Any, condition: Any, set: Any) -> ConditionStatement:
    """The UPDATE of :meth:`ctfile.spark.CtfileTable.update`, checked."""
    if not isinstance(set, Mapping) or not set:
        raise ctfile.InvalidArgumentError(f"set must be a non-empty mapping of column to value, found {set!r}")
    values = {str(k): _set_value(v, what=f"set[{k!r}]") for k, v in set.items()}
    cond = None if condition is None else to_column(condition, what="condition")
    return ConditionStatement(spark, cond, values, given=(condition, *set.values()))


def delete_statement(spark: Any, condition: Any) -> ConditionStatement:
    """The DELETE of :meth:`ctfile.spark.CtfileTable.delete`, checked."""
    cond = None if condition is None else to_column(condition, what="condition")
    return ConditionStatement(spark, cond, given=(condition,))


def spark_dataframe(source: Any) -> DataFrame:
    """``source`` if it is a Spark DataFrame; else :class:`ctfile.InvalidArgumentError`."""
    if not isinstance(source, DataFrame):
        raise ctfile.InvalidArgumentError(f"source must be a Spark DataFrame, found {type(source).__name__}")
    return source


def _set_value(v: Any, *, what: str) -> Column:
    """A SET value as a Column: SQL text or a Column as given, anything else a literal."""
    if isinstance(v, (str, Column)):
        return to_column(v, what=what)
    return F.lit(v)


def _decimals_to_float(values: list[Column], analyzed: Any, schema: pa.Schema) -> list[Column]:
    """``values`` with a decimal SET value for a floating-point column cast
    to the column's type: Spark SQL types ``2.5`` as a decimal, which a
    ``double`` column takes on assignment (Spark's ANSI store assignment
    rules), while ctfile's own check refuses decimal to float as lossy."""
    out = []
    for v, f in zip(values, analyzed.fields[2:]):
        target = schema.field(f.name).type
        if isinstance(f.dataType, DecimalType) and pa.types.is_floating(target):
            v = v.cast(spark_schema(pa.schema([schema.field(f.name)])).fields[0].dataType).alias(f.name)
        out.append(v)
    return out


def _describe(c: Column | None) -> str:
    return "true" if c is None else str(c)


# ---------------------------------------------------------------- MERGE (ctfile.spark.merge)


def join_sides(candidates: DataFrame, source: DataFrame, *, broadcast: bool) -> tuple[DataFrame, DataFrame]:
    """The two sides of a MERGE's join, hinted so that the candidates are
    never broadcast: Spark estimates their size from the small DataFrame of
    task numbers they are read from (:func:`ctfile.spark.scan.candidate_rows`),
    so unhinted it would collect every candidate row on the driver to
    broadcast it. The source is broadcast when its size (known: it is
    persisted and counted) is within ``spark.sql.autoBroadcastJoinThreshold``
    (:func:`ctfile.spark.session.fits_broadcast`); otherwise the join is a
    sort-merge join."""
    if broadcast:
        return candidates, F.broadcast(source)
    return candidates.hint("merge"), source


def prunable(t: pa.DataType) -> bool:
    """Key types whose Spark min/max compare with the statistics exactly
    (timestamps come back in the session's time zone, so they do not prune)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) or pa.types.is_date(t)
