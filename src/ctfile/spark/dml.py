"""MERGE, UPDATE and DELETE run on Spark's executors (SPEC §Copy-on-write,
distributed statements).

Each statement is planned on the driver in a transaction of its own
(``Table.run_statement``, so a conflict re-runs it at the latest version):

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

import functools
import math
import operator
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, TimestampNTZType, TimestampType

import ctfile
from ctfile.spark.conditions import pruning_expression
from ctfile.spark.scan import FILE_COLUMN, SparkRowsPredicate, candidate_rows
from ctfile.spark.session import default_parallelism, fits_broadcast, is_classic
from ctfile.spark.sqltext import SqlConf, sql_columns
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

GROUP_COLUMN = "_ct_group"
_RESULT_SCHEMA = "kind string, payload binary"
_INSERT_PREFIX = "+"  # groups of inserted rows: "+0", "+1" ... (never a partition path)


# ---------------------------------------------------------------- the tasks


def _task_fn(job: ctfile.RewriteJob) -> Callable[[pa.Table], pa.Table]:
    """The ``applyInArrow`` function of one group: rewrite the partition it
    names, or insert its rows; a ctfile error is returned, not raised."""

    def run(rows: pa.Table) -> pa.Table:
        group = rows.column(GROUP_COLUMN)[0].as_py()
        try:
            if group.startswith(_INSERT_PREFIX):
                data = rows.drop_columns([c for c in (GROUP_COLUMN, ctfile.POSITION_COLUMN) if c in rows.column_names])
                kind, value = "insert", job.insert(data)
            else:
                kind, value = "rewrite", job.rewrite(group, rows)
        except ctfile.CtfileError as e:
            kind, value = "error", e
        return pa.table({"kind": [kind], "payload": [pickle.dumps(value)]})

    return run


@dataclass
class _Results:
    rewrites: list
    inserted: list


def _execute(spark: SparkSession, job: ctfile.RewriteJob, rows: DataFrame, *, groups: int) -> _Results:
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
    results, errors = _Results([], []), []
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


def _analyze(build: Callable[[], DataFrame], *, what: str) -> DataFrame:
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
        if not given or any(isinstance(g, Column) for g in given):
            return list(schema.names)
        found = sql_columns([g for g in given if isinstance(g, str)], schema, SqlConf.of(spark))
        return list(schema.names) if found is None else found
    it = analyzed._jdf.queryExecution().analyzed().references().iterator()
    used = set()
    while it.hasNext():
        used.add(it.next().name())
    return [n for n in schema.names if n in used]


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

    def run(self, tx: ctfile.WriteTransaction) -> None:
        if tx.is_replay:
            return
        job, matched, used, cond = self._plan(tx)
        results = _execute(self.spark, job, matched, groups=len(job.candidates))
        predicate = SparkRowsPredicate(
            self.spark, job, used, lambda rows: rows.where(cond), f"rows where {_describe(self.condition)}"
        )
        job.stage(tx, results.rewrites, predicate=predicate)

    def _plan(self, tx: ctfile.WriteTransaction) -> tuple[ctfile.RewriteJob, DataFrame, list[str], Column]:
        """The job, the matched rows (group, position, SET values), the
        columns the statement reads and its condition; every check is made
        here, before a Spark job runs."""
        schema = tx.schema.to_arrow(field_ids=False)
        if self.set is not None:
            unknown = [c for c in self.set if c not in schema.names]
            if unknown:
                raise ctfile.SchemaMismatchError(f"set names unknown columns {unknown}; table columns are {schema.names}")
        cond = F.lit(True) if self.condition is None else self.condition
        values = [v.alias(c) for c, v in (self.set or {}).items()]
        used = _analyze(lambda: referenced_columns(self.spark, schema, [cond, *values], self.given),
                        what="condition or set")
        prune_by = None
        if self.condition is not None:
            source = self.given[0] if self.given and self.given[0] is not None else cond
            prune_by = _analyze(lambda: pruning_expression(self.spark, schema, source), what="condition")
        probe = ctfile.RewriteJob.for_delete(tx, prune_by=prune_by)
        target = candidate_rows(self.spark, probe, used)
        keep = [F.col(FILE_COLUMN).alias(GROUP_COLUMN), F.col(ctfile.POSITION_COLUMN)]
        matched = _analyze(lambda: target.where(cond).select(*keep, *values), what="condition or set")
        if self.set is None:
            return probe, matched, used, cond
        values = _decimals_to_float(values, matched.schema, schema)
        matched = in_table_timestamps(target.where(cond).select(*keep, *values), schema)
        set_fields = [f for f in spark_arrow_schema(matched.schema) if f.name in self.set]
        return ctfile.RewriteJob.for_update(tx, pa.schema(set_fields), prune_by=prune_by), matched, used, cond


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


# ---------------------------------------------------------------- MERGE


class MergeStatement:
    """A MERGE of a Spark source on ``keys``. The source is persisted for the
    statement (its joins, checks and conflict checks must see the same rows;
    a source the caller already cached is used as is and stays cached) and
    checked once: one row per key, and each key column's range for pruning."""

    def __init__(self, spark: SparkSession, source: DataFrame, keys: list[str], when_matched: Any, when_not_matched: Any):
        self.spark = spark
        self.source = source
        self.keys = keys
        self.when_matched = when_matched
        self.when_not_matched = when_not_matched
        self._checked: dict | None = None  # ranges and row count, once checked
        self._persisted = False  # whether this statement persisted the source (a caller's cache stays)

    def close(self) -> None:
        if self._persisted:
            self.source.unpersist()

    def _check_source(self, spec: ctfile.MergeSpec, table_schema: pa.Schema) -> dict:
        """Persist the source (its timestamps of the table's kinds,
        :func:`in_table_timestamps`), refuse two rows with one key, and find
        each key column's range and the row count (two Spark jobs).

        Keys are counted by SPEC §Copy-on-write (MERGE, key equality), as
        ``Table.merge`` counts them: Spark's grouping already takes ``-0.0``
        and ``0.0`` (and every NaN) for one key; a row with a null key part
        is no key, so it is left out."""
        if self._checked is not None:
            return self._checked
        self.source = in_table_timestamps(self.source, table_schema)
        if not self.source.is_cached:
            self.source = self.source.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted = True
        keys = list(spec.keys)
        keyed = self.source.where(functools.reduce(operator.and_, (F.col(k).isNotNull() for k in keys)))
        worst = keyed.groupBy(*keys).count().agg(F.max("count")).first()[0]
        if worst and worst > 1:
            raise ctfile.InvalidArgumentError(
                f"merge source has {worst} rows with the same key {keys}; a MERGE needs at most one "
                f"source row per key (deduplicate the source first)"
            )
        rangeable = [k for k in keys if _prunable(table_schema.field(k).type)]
        aggs = [F.count(F.lit(1)).alias("n")]
        for k in rangeable:
            aggs += [F.min(k).alias(f"lo_{k}"), F.max(k).alias(f"hi_{k}")]
        row = self.source.agg(*aggs).first()
        self._checked = {"rows": row["n"], "ranges": {k: (row[f"lo_{k}"], row[f"hi_{k}"]) for k in rangeable}}
        return self._checked

    def run(self, tx: ctfile.WriteTransaction) -> None:
        if tx.is_replay:
            return
        kw = {"when_matched": self.when_matched, "when_not_matched": self.when_not_matched}
        spec = ctfile.RewriteJob.for_merge(tx, spark_arrow_schema(self.source.schema), self.keys, **kw).merge
        checked = self._check_source(spec, tx.schema.to_arrow(field_ids=False))
        source_schema = spark_arrow_schema(self.source.schema)  # its timestamps now of the table's kinds
        job = ctfile.RewriteJob.for_merge(tx, source_schema, self.keys, key_ranges=checked["ranges"], **kw)
        keys = list(spec.keys)
        n_inserts = self._insert_groups(job, checked["rows"])
        rows, cached = self._grouped_rows(job, keys, n_inserts)
        try:
            results = _execute(self.spark, job, rows, groups=len(job.candidates) + n_inserts)
        finally:
            if cached is not None:
                cached.unpersist()
        src_keys = self.source.select(*keys)
        predicate = SparkRowsPredicate(
            self.spark, job, keys, lambda rows: rows.join(src_keys, keys, "left_semi"),
            f"rows whose key ({', '.join(keys)}) is one of the source's",
        )
        job.stage(tx, results.rewrites, results.inserted, predicate=predicate)

    def _insert_groups(self, job: ctfile.RewriteJob, n_rows: int) -> int:
        """How many groups a MERGE's unmatched rows are spread over: about
        ``ctfile.partitionRows`` source rows each, at least one per core."""
        if not job.merge.inserts_unmatched:
            return 0
        return max(default_parallelism(self.spark), math.ceil(max(n_rows, 1) / job.partition_rows))

    def _grouped_rows(self, job: ctfile.RewriteJob, keys: list[str], n_groups: int) -> tuple[DataFrame, DataFrame | None]:
        """The rows of the tasks, each in its group: a matched source row in
        the partition it rewrites, an unmatched one in one of ``n_groups``
        insert groups; and the DataFrame persisted for them (None if none),
        which the caller unpersists once the tasks ran.

        The candidates are *inner*-joined with the source (:func:`_join_sides`
        chooses how), so that a small source is broadcast and the
        candidates' keys stream through it without a shuffle; a left join of
        the source could only broadcast the candidates. The unmatched rows
        are then the source anti-joined with the matched keys, so the
        matched rows are persisted: the candidates are read once."""
        spec = job.merge
        rewrites, inserts = spec.rewrites_matched, spec.inserts_unmatched
        cols = [c for c in self.source.columns if c in set(job.schema.names)]
        if not rewrites and not inserts:
            return self.source.limit(0).select(F.lit("").alias(GROUP_COLUMN)), None
        source = self.source.select(*cols)
        broadcast = fits_broadcast(self.spark, source, self._checked["rows"])
        candidates, source = _join_sides(candidate_rows(self.spark, job, keys), source, broadcast=broadcast)
        matched = candidates.join(source, keys, "inner")
        if not inserts:
            return matched.select(F.col(FILE_COLUMN).alias(GROUP_COLUMN), F.col(ctfile.POSITION_COLUMN), *cols), None
        matched = matched.persist(StorageLevel.MEMORY_AND_DISK)
        matched.count()  # materialized once, before two plans read it
        unmatched = self.source.select(*cols).join(matched.select(*keys), keys, "left_anti")
        insert_group = F.concat(F.lit(_INSERT_PREFIX), F.pmod(F.hash(*keys), F.lit(max(1, n_groups))).cast("string"))
        rows = unmatched.select(insert_group.alias(GROUP_COLUMN), F.lit(None).cast("long").alias(ctfile.POSITION_COLUMN), *cols)
        if rewrites:
            found = matched.select(F.col(FILE_COLUMN).alias(GROUP_COLUMN), F.col(ctfile.POSITION_COLUMN), *cols)
            rows = found.unionByName(rows)
        return rows, matched


def _join_sides(candidates: DataFrame, source: DataFrame, *, broadcast: bool) -> tuple[DataFrame, DataFrame]:
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


def _prunable(t: pa.DataType) -> bool:
    """Key types whose Spark min/max compare with the statistics exactly
    (timestamps come back in the session's time zone, so they do not prune)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) or pa.types.is_date(t)
