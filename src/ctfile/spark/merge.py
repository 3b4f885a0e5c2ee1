"""MERGE with ordered conditional clauses on Spark's executors (SPEC
§Copy-on-write, MERGE; §Copy-on-write, distributed statements).

:meth:`ctfile.spark.CtfileTable.merge_builder` returns the Python API's
builder (:class:`ctfile.MergeBuilder`: the same methods, checks and
statement object) over Spark's expressions (:data:`SPARK_EXPRESSIONS`:
Spark SQL strings or Columns, Python values as literals); its ``execute``
runs :class:`SparkMerge`:

1. the source is persisted for the statement, each row numbered
   (:data:`SOURCE_ROW`), and the ranges of its key columns found (one
   Spark job) to prune the candidates by statistics;
2. the statement is checked against the table on the driver
   (:meth:`ctfile.RewriteJob.for_merge_statement`, which also evolves the
   schema of a statement with schema evolution), before any job writes;
3. the candidates (``candidate_rows``) are joined with the source on the
   key pairs and the ON condition, once: an inner join, or an outer join
   that keeps the candidate rows in no pair when the statement has ``NOT
   MATCHED BY SOURCE`` clauses and the source rows in no pair when it has
   ``NOT MATCHED`` clauses (a broadcast source is not kept: its unmatched
   rows are an anti-join with the pairs). Each matched pair gets the index
   of the first ``MATCHED`` clause whose condition holds (a ``CASE WHEN``,
   evaluated in order) and the values that clause assigns, each in a column
   of its own (``merge_rows``); each unmatched row likewise with the
   clauses of its kind, over its own side's columns alone;
4. the multiple-match rule is checked on the pairs (the join persisted,
   one Spark job) before anything is written, when two source rows share
   a key (one Spark job over the source's keys finds out): a table row in
   two pairs one of which falls to an UPDATE is an
   :class:`ctfile.InvalidArgumentError` naming its key;
5. the rows that fall to a clause are the tasks' rows, grouped by file;
6. one task per touched partition rewrites it, others insert
   (:meth:`ctfile.RewriteJob.rewrite` and ``insert``): the writer, not
   Spark, turns the clause and values of each row into the new row, as the
   Python engine does (:mod:`ctfile.writer.merge_rows`), so row ids and
   row versions, the no-op rule and change capture are the writer's.

The engines agree on what Spark and pyarrow compute alike; Spark's own
semantics hold for its expressions (ANSI arithmetic, its casts). The
candidates of a statement with ``NOT MATCHED BY SOURCE`` clauses are every
live partition whose statistics allow a row one of the clauses' conditions
selects (:func:`ctfile.spark.local.unmatched_target_pruning`; every live
partition when one has no condition or does not translate), and those of
the ``MATCHED`` side further by the ON condition's conjuncts over the table
alone (:func:`ctfile.spark.local.matched_target_pruning`).
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable, Mapping

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

import ctfile
from ctfile.spark.dml import (
    GROUP_COLUMN, INSERT_PREFIX, Results, analyze, counts, execute_tasks, in_table_timestamps, join_sides, prunable,
    to_column,
)
from ctfile.spark.local import (
    LocalRun, known_unique, local_frame, matched_target_pruning, run_in_driver, run_rows_in_driver, spread_runner,
    unmatched_target_pruning,
)
from ctfile.spark.merge_clauses import SPARK_EXPRESSIONS, SPARK_TEXT_EXPRESSIONS, render  # noqa: F401 -- re-exported
from ctfile.spark.merge_clauses import expression, with_clauses, with_kinds
from ctfile.spark.scan import FILE_COLUMN, SparkRowsPredicate, candidate_rows
from ctfile.spark.session import default_parallelism, fits_broadcast
from ctfile.spark.sqltext import SqlConf, sql_columns
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

#: The number of each source row, in the persisted source.
SOURCE_ROW = "_ct_source_row"
_KEY_PREFIX = "_ct_key_"  # a matched table row's key columns, for the multiple-match error


# ---------------------------------------------------------------- the statement


class SparkMerge:
    """A MERGE of the Spark DataFrame ``source`` run on the executors.
    ``plan_job(tx, source_schema, key_ranges)`` checks it against the table
    in ``tx`` and returns its :class:`ctfile.RewriteJob`;
    ``unique_keys`` refuses a source with two rows of one key whatever the
    table holds (the shorthand ``merge``'s rule); ``local`` runs it in the
    driver with the Python engine when it is small
    (:func:`ctfile.spark.local.run_in_driver`)."""

    def __init__(self, spark: SparkSession, source: DataFrame, statement: ctfile.MergeStatement,
                 plan_job: Callable[..., ctfile.RewriteJob] | None = None, *, unique_keys: bool = False,
                 local: LocalRun | None = None):
        self.spark = spark
        self._local = local or _execute_merge
        self._custom_local = local is not None  # its own checks: not spread (ctfile.spark.local.run_spread)
        self.statement = statement
        self.unique_keys = unique_keys
        self._given = source
        self._plan_job = plan_job or self._job
        self._source: DataFrame | None = None  # persisted, numbered, once prepared
        self._ranges: dict | None = None

    def close(self) -> None:
        if self._source is not None:
            self._source.unpersist()
            self._source = None

    def _job(self, tx: ctfile.WriteTransaction, source_schema: pa.Schema, key_ranges: Mapping) -> ctfile.RewriteJob:
        value_types = self._value_types(tx, source_schema)
        target = tx.schema.to_arrow(field_ids=False)
        conf = SqlConf.of(self.spark)
        return ctfile.RewriteJob.for_merge_statement(
            tx, self.statement, source_schema, key_ranges=key_ranges, value_types=value_types,
            prune_by=unmatched_target_pruning(self.statement, target, conf),
            match_prune_by=matched_target_pruning(self.statement, target, conf),
        )

    def run(self, tx: ctfile.WriteTransaction) -> dict[str, int]:
        """Run the statement in ``tx``; the counts it staged."""
        tx.check_row_change("MERGE")  # SPEC §Derived tables: before any check of the statement
        if not self.statement.inserts_only:  # SPEC §Append-only tables: before any file is written
            tx.check_keeps_rows("MERGE")
        if tx.is_replay:
            return counts(Results([], []))
        given = in_table_timestamps(self._given, tx.schema.to_arrow(field_ids=False))
        spread = None if self._custom_local else spread_runner(self.spark)
        done = run_in_driver(self.spark, tx, self.statement, given, self._local, spread=spread)
        if done is not None:
            return done
        source = self._prepare(tx)
        schema = spark_arrow_schema(source.drop(SOURCE_ROW).schema)
        job = self._plan_job(tx, schema, self._ranges["ranges"])
        if self.unique_keys:
            _check_unique_keys(source, list(self.statement.source_keys))
        rows, persisted = self._task_rows(job, source)
        try:
            n_inserts = self._insert_groups(job)
            results = execute_tasks(self.spark, job, rows, groups=len(job.candidates) + n_inserts)
        finally:
            for df in persisted:
                df.unpersist()
        job.stage(tx, results.rewrites, results.inserted, predicate=self._read_predicate(job, source))
        return counts(results)

    # ------------------------------------------------------------ the source

    def _prepare(self, tx: ctfile.WriteTransaction) -> DataFrame:
        """The source persisted with its rows numbered, its timestamps of
        the table's kinds; the key ranges and row count found once."""
        if self._source is not None:
            return self._source
        table_schema = tx.schema.to_arrow(field_ids=False)
        source = in_table_timestamps(self._given, table_schema).withColumn(SOURCE_ROW, F.monotonically_increasing_id())
        self._source = source.persist(StorageLevel.MEMORY_AND_DISK)
        pairs = [(t, s) for t, s in self.statement.keys
                 if t in table_schema.names and s in self._source.columns and prunable(table_schema.field(t).type)]
        aggs = [F.count(F.lit(1)).alias("n")]
        for i, (_, s) in enumerate(pairs):
            aggs += [F.min(s).alias(f"lo{i}"), F.max(s).alias(f"hi{i}")]
        row = self._source.agg(*aggs).first()
        ranges = {t: (row[f"lo{i}"], row[f"hi{i}"]) for i, (t, _) in enumerate(pairs)}
        self._ranges = {"rows": row["n"], "ranges": ranges}
        return self._source

    def _value_types(self, tx: ctfile.WriteTransaction, source_schema: pa.Schema) -> dict[str, pa.DataType]:
        """The Spark types of the values a statement with schema evolution
        assigns to columns the table lacks (Spark's analysis, no job)."""
        if not self.statement.schema_evolution:
            return {}
        new = ctfile.assigned_new_columns(tx.schema, self.statement)
        if not new:
            return {}
        target = self.spark.createDataFrame([], spark_schema(tx.schema.to_arrow(field_ids=False)))
        source = self.spark.createDataFrame([], spark_schema(source_schema))
        both = target.alias(self.statement.target_alias).crossJoin(source.alias(self.statement.source_alias))
        values = [expression(v, None).alias(name) for _, name, v in new]
        analyzed = analyze(lambda: both.select(*values), what="merge values")
        return {f.name: f.type for f in spark_arrow_schema(analyzed.schema)}

    def _insert_groups(self, job: ctfile.RewriteJob) -> int:
        """How many groups the inserted rows are spread over: about
        ``ctfile.partitionRows`` source rows each, at least one per core."""
        if not job.merge.inserts_unmatched:
            return 0
        rows = self._ranges["rows"]
        return max(default_parallelism(self.spark), math.ceil(max(rows, 1) / job.partition_rows))

    # ------------------------------------------------------------ the rows of the tasks

    def _task_rows(self, job: ctfile.RewriteJob, source: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
        """The rows the tasks get (group, position, clause, values) and the
        DataFrames persisted for them, which the caller unpersists.

        One join finds every kind of row (:func:`_join_type`): the matched
        pairs, and as an outer join the candidate rows and (unless the
        source is broadcast, which an outer join cannot do for the side it
        keeps) the source rows that match nothing. It is persisted when
        read twice: by the multiple-match check, or by the anti-join that
        finds the unmatched source rows of a broadcast source."""
        plan = job.merge
        broadcast = fits_broadcast(self.spark, source, self._ranges["rows"])
        target, src = self._sides(job, source, broadcast=broadcast)
        source_by_join = plan.inserts_unmatched and not broadcast
        how = _join_type(keeps_target=plan.reads_unmatched_target, keeps_source=source_by_join)
        joined = self._join(target, src, how)
        checks = self._checks_matches(job, source)
        persisted = []
        if checks or (plan.inserts_unmatched and not source_by_join):
            joined = joined.persist(StorageLevel.MEMORY_AND_DISK)
            persisted.append(joined)
        try:
            parts = self._row_parts(job, joined, (target, src), how, checks=checks, source_by_join=source_by_join)
            if how != "inner" and not persisted:
                parts = self._in_one_pass(job, joined, source_by_join=source_by_join) or parts
        except BaseException:
            for df in persisted:
                df.unpersist()
            raise
        rows = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        return rows, persisted

    def _row_parts(self, job: ctfile.RewriteJob, joined: DataFrame, sides: tuple[DataFrame, DataFrame], how: str,
                   *, checks: bool, source_by_join: bool) -> list[DataFrame]:
        """The tasks' rows of the matched pairs (checked for multiple
        matches when ``checks``) and of the unmatched rows of each side."""
        pairs = self._pairs(job.merge, self._matched(joined, how))
        if checks:
            self._check_multiple_matches(job.merge, pairs)
        keys = [c for c in pairs.columns if c.startswith(_KEY_PREFIX)]
        parts = [pairs.where(F.col(ctfile.CLAUSE_COLUMN).isNotNull()).drop(SOURCE_ROW, *keys)]
        return parts + self._unmatched(job, joined, sides, pairs, source_by_join=source_by_join)

    def _unmatched(self, job: ctfile.RewriteJob, joined: DataFrame, sides: tuple[DataFrame, DataFrame],
                   pairs: DataFrame, *, source_by_join: bool) -> list[DataFrame]:
        """The unmatched rows that fall to a clause: the candidate rows the
        outer join ``joined`` kept, and the source rows it kept
        (``source_by_join``) or that are in no pair."""
        target, src = sides
        t_alias, s_alias = self.statement.target_alias, self.statement.source_alias
        parts = []
        if job.merge.reads_unmatched_target:
            parts.append(self._unmatched_target(job.merge, self._side_alone(joined, target, t_alias,
                                                                            absent=~_source_present())))
        if source_by_join:
            parts.append(self._unmatched_source(job, self._side_alone(joined, src, s_alias, absent=~_target_present())))
        elif job.merge.inserts_unmatched:
            alone = src.join(pairs.select(SOURCE_ROW), [SOURCE_ROW], "left_anti").alias(s_alias)
            parts.append(self._unmatched_source(job, alone))
        return parts

    def _in_one_pass(self, job: ctfile.RewriteJob, joined: DataFrame, *, source_by_join: bool) -> list[DataFrame]:
        """The rows of every kind as one projection of the outer join
        ``joined`` (the parts :meth:`_task_rows` built read it once each, and
        Spark would join once for each), or none when an expression does not
        resolve over both sides' columns (a name both sides have, left
        unqualified: the parts resolve it on their own side). The parts were
        built first, so an expression that does not resolve on its own side
        is refused as before."""
        t_alias, s_alias = self.statement.target_alias, self.statement.source_alias
        kinds = [(ctfile.MatchKind.MATCHED, _target_present() & _source_present())]
        if job.merge.reads_unmatched_target:
            kinds.append((ctfile.MatchKind.NOT_MATCHED_BY_SOURCE, ~_source_present()))
        if source_by_join:
            kinds.append((ctfile.MatchKind.NOT_MATCHED, ~_target_present()))
        group = F.when(_target_present(), F.col(f"{t_alias}.{FILE_COLUMN}")).otherwise(self._insert_group(job))
        ids = [group.alias(GROUP_COLUMN), F.col(f"{t_alias}.{ctfile.POSITION_COLUMN}")]
        try:
            rows = with_kinds(joined, job.merge, kinds, ids, s_alias)
            rows.schema  # noqa: B018 -- analysed now (Spark Connect analyses lazily)
        except (AnalysisException, ctfile.CtfileError):
            return []
        return [rows.where(F.col(ctfile.CLAUSE_COLUMN).isNotNull())]

    def _insert_group(self, job: ctfile.RewriteJob) -> Column:
        """The insert group of a source row: its number's hash over the groups."""
        n = max(1, self._insert_groups(job))
        return F.concat(F.lit(INSERT_PREFIX), F.pmod(F.hash(F.col(SOURCE_ROW)), F.lit(n)).cast("string"))

    def _checks_matches(self, job: ctfile.RewriteJob, source: DataFrame) -> bool:
        """Whether the pairs need the multiple-match check: a statement that
        updates matched rows, unless no table row can be in two pairs
        because no two source rows share a key (one Spark job over the
        source's keys, far cheaper than grouping the pairs; valid when each
        key pair has one type on both sides, so that Spark compares keys as
        it groups them). The shorthand checks its source itself."""
        if self.unique_keys or not any(_updates_a_match(c) for c in job.merge.clauses):
            return False
        table = {f.name: f.dataType for f in spark_schema(job.schema.to_arrow(field_ids=False)).fields}
        given = {f.name: f.dataType for f in source.schema.fields}
        if not all(_typed_alike(table, given, t, s) for t, s in self.statement.keys):
            return True
        if known_unique(self._given, list(self.statement.source_keys)):  # checked by its maker (a refresh)
            return False
        return _a_key_twice(source, list(self.statement.source_keys))

    def _sides(self, job: ctfile.RewriteJob, source: DataFrame, *, broadcast: bool) -> tuple[DataFrame, DataFrame]:
        """The candidates' rows and the source, aliased, hinted for the join
        (:func:`ctfile.spark.dml.join_sides`)."""
        target = candidate_rows(self.spark, job, self._target_columns(job.merge, job.schema))
        target, src = join_sides(target, source, broadcast=broadcast)
        return target.alias(self.statement.target_alias), src.alias(self.statement.source_alias)

    def _join(self, target: DataFrame, src: DataFrame, how: str) -> DataFrame:
        """The candidates' rows joined (``how``) with the source on the key
        pairs and the ON condition."""
        st = self.statement
        t_alias, s_alias = st.target_alias, st.source_alias
        on = [F.col(f"{t_alias}.{t}") == F.col(f"{s_alias}.{s}") for t, s in st.keys]
        if st.on_condition is not None:
            on.append(to_column(st.on_condition, what="on_condition"))
        return analyze(lambda: target.join(src, functools.reduce(operator.and_, on), how), what="ON condition")

    def _matched(self, joined: DataFrame, how: str) -> DataFrame:
        """The matched pairs of ``joined`` (an outer join's rows with both sides)."""
        if how == "inner":
            return joined
        return joined.where(_target_present() & _source_present())

    def _side_alone(self, joined: DataFrame, side: DataFrame, alias: str, *, absent: Column) -> DataFrame:
        """The rows of one side of the outer join ``joined`` that matched
        nothing (``absent``: true where the other side is missing), with that side's
        columns alone, under its alias, as its expressions resolve on it."""
        columns = [F.col(f"{alias}.{_quoted(c)}") for c in side.columns]
        return joined.where(absent).select(*columns).alias(alias)

    def _pairs(self, plan: ctfile.MergePlan, joined: DataFrame) -> DataFrame:
        """The matched pairs: group (file), position, source row, the table
        row's key (``_ct_key_<i>``), the ``MATCHED`` clause and its values."""
        st = self.statement
        t_alias, s_alias = st.target_alias, st.source_alias
        keys = [F.col(f"{t_alias}.{t}").alias(f"{_KEY_PREFIX}{i}") for i, (t, _) in enumerate(st.keys)]
        ids = [F.col(f"{t_alias}.{FILE_COLUMN}").alias(GROUP_COLUMN),
               F.col(f"{t_alias}.{ctfile.POSITION_COLUMN}"), F.col(f"{s_alias}.{SOURCE_ROW}")]
        kind = ctfile.MatchKind.MATCHED
        return analyze(lambda: with_clauses(joined, plan, kind, ids + keys, s_alias), what=kind.sql)

    def _target_columns(self, plan: ctfile.MergePlan, schema: Any) -> list[str]:
        """The table columns the join and the clauses may read, in table
        order: the keys and every column the statement's expressions over
        the table name (:func:`ctfile.spark.sqltext.sql_columns`, a
        superset); every column when one is a Column."""
        exprs = [self.statement.on_condition, *_target_expressions(plan)]
        texts = [e for e in exprs if isinstance(e, str)]
        if any(isinstance(e, Column) for e in exprs):
            return list(schema.names)
        found = sql_columns(texts, schema.to_arrow(field_ids=False), SqlConf.of(self.spark)) if texts else []
        if found is None:
            return list(schema.names)
        wanted = set(found) | set(self.statement.target_keys)
        return [n for n in schema.names if n in wanted]

    def _check_multiple_matches(self, plan: ctfile.MergePlan, pairs: DataFrame) -> None:
        """SPEC §Copy-on-write, MERGE, multiple matches: a table row in two
        or more pairs, one of which falls to an UPDATE, is refused."""
        updates = [i for i, c in enumerate(plan.clauses) if _updates_a_match(c)]
        if not updates:
            return
        found = _a_row_updated_twice(pairs, updates)
        if not found:
            return
        row = found[0]
        key = {t: row[f"{_KEY_PREFIX}{i}"] for i, (t, _) in enumerate(self.statement.keys)}
        raise ctfile.InvalidArgumentError(
            f"{row['n']} source rows match the table row with key {key}, and {plan.clauses[row['c']].clause} "
            f"applies to one of them: a table row may be updated by one source row only (deduplicate the "
            f"source, or give the clause a condition that tells them apart)"
        )

    def _unmatched_target(self, plan: ctfile.MergePlan, alone: DataFrame) -> DataFrame:
        """The candidate rows in no pair (``alone``), with their ``NOT MATCHED BY SOURCE`` clause."""
        ids = [F.col(FILE_COLUMN).alias(GROUP_COLUMN), F.col(ctfile.POSITION_COLUMN)]
        kind = ctfile.MatchKind.NOT_MATCHED_BY_SOURCE
        rows = analyze(lambda: with_clauses(alone, plan, kind, ids, self.statement.source_alias), what=kind.sql)
        return rows.where(F.col(ctfile.CLAUSE_COLUMN).isNotNull())

    def _unmatched_source(self, job: ctfile.RewriteJob, alone: DataFrame) -> DataFrame:
        """The source rows in no pair (``alone``), with their ``NOT MATCHED``
        clause, spread over the insert groups."""
        ids = [self._insert_group(job).alias(GROUP_COLUMN), F.lit(None).cast("long").alias(ctfile.POSITION_COLUMN)]
        kind = ctfile.MatchKind.NOT_MATCHED
        rows = analyze(lambda: with_clauses(alone, job.merge, kind, ids, self.statement.source_alias), what=kind.sql)
        return rows.where(F.col(ctfile.CLAUSE_COLUMN).isNotNull())

    def _read_predicate(self, job: ctfile.RewriteJob, source: DataFrame) -> SparkRowsPredicate:
        """SPEC §Conflict detection: the table rows whose key is one of the
        source's; with ``NOT MATCHED BY SOURCE`` clauses, every row."""
        targets = list(self.statement.target_keys)
        keys = source.select(*[F.col(s).alias(t) for t, s in self.statement.keys])
        described = f"rows whose key ({', '.join(targets)}) is one of the source's"
        if not job.merge.reads_unmatched_target:
            return SparkRowsPredicate(self.spark, job, targets, lambda rows: rows.join(keys, targets, "left_semi"),
                                      described)
        conditions = [c.condition for c in self.statement.clauses_of(ctfile.MatchKind.NOT_MATCHED_BY_SOURCE)]
        if any(c is None for c in conditions):
            return SparkRowsPredicate(self.spark, job, targets, lambda rows: rows,
                                      "every row (a NOT MATCHED BY SOURCE clause has no condition)")
        alias = self.statement.target_alias
        selects = functools.reduce(operator.or_, [to_column(c, what="condition") for c in conditions])

        def select(rows: DataFrame) -> DataFrame:
            return rows.join(keys, targets, "left_semi").unionByName(rows.alias(alias).where(selects))

        return SparkRowsPredicate(self.spark, job, list(job.schema.names), select,
                                  f"{described}, or that a NOT MATCHED BY SOURCE clause selects")


class RowsMerge:
    """A MERGE of Arrow ``rows`` the driver holds: run by the Python engine
    in the driver when it translates and is small
    (:func:`ctfile.spark.local.run_rows_in_driver`: no DataFrame, no Spark
    job), else as :class:`SparkMerge` of a local DataFrame of the rows."""

    def __init__(self, spark: SparkSession, rows: pa.Table, statement: ctfile.MergeStatement):
        self.spark = spark
        self.rows = rows
        self.statement = statement

    def run(self, tx: ctfile.WriteTransaction) -> dict[str, int]:
        tx.check_row_change("MERGE")  # SPEC §Derived tables: before any check of the statement
        if tx.is_replay:
            return counts(Results([], []))
        done = run_rows_in_driver(self.spark, tx, self.statement, self.rows, _execute_merge)
        if done is not None:
            return done
        frame = local_frame(self.spark, self.rows, spark_schema(self.rows.schema))
        merge = SparkMerge(self.spark, frame, self.statement)
        try:
            return merge.run(tx)
        finally:
            merge.close()


def _execute_merge(tx: ctfile.WriteTransaction, prepared: ctfile.PreparedMerge) -> dict:
    return tx.execute_prepared_merge(prepared)


def _typed_alike(table: Mapping[str, Any], given: Mapping[str, Any], target: str, source: str) -> bool:
    """Whether key pair ``target``/``source`` has one Spark type on both
    sides (``table``, ``given``: column name -> type)."""
    return target in table and source in given and table[target] == given[source]


def _check_unique_keys(source: DataFrame, keys: list[str]) -> None:
    """The shorthand's one source row per key (SPEC key equality: a row
    with a null key part is no key)."""
    keyed = source.where(functools.reduce(operator.and_, (F.col(k).isNotNull() for k in keys)))
    worst = keyed.groupBy(*keys).count().agg(F.max("count")).first()[0]
    if worst and worst > 1:
        raise ctfile.InvalidArgumentError(
            f"merge source has {worst} rows with the same key {keys}; a MERGE needs at most one "
            f"source row per key (deduplicate the source first)"
        )


def _a_key_twice(source: DataFrame, keys: list[str]) -> bool:
    """Whether two rows of ``source`` share a key (SPEC key equality: a row
    with a null key part is no key)."""
    keyed = source.where(functools.reduce(operator.and_, (F.col(k).isNotNull() for k in keys)))
    return bool(keyed.groupBy(*keys).count().where(F.col("count") > 1).limit(1).collect())


def _join_type(*, keeps_target: bool, keeps_source: bool) -> str:
    """The join that finds, with the matched pairs, the candidate rows
    (``keeps_target``) and the source rows (``keeps_source``) in no pair.

    >>> _join_type(keeps_target=True, keeps_source=True), _join_type(keeps_target=False, keeps_source=False)
    ('full_outer', 'inner')
    """
    return {(False, False): "inner", (True, False): "left_outer", (False, True): "right_outer",
            (True, True): "full_outer"}[keeps_target, keeps_source]


def _target_present() -> Column:
    """Whether a row of an outer join has a candidate row (its file is never null)."""
    return F.col(FILE_COLUMN).isNotNull()


def _source_present() -> Column:
    """Whether a row of an outer join has a source row (its number is never null)."""
    return F.col(SOURCE_ROW).isNotNull()


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ---------------------------------------------------------------- entry points


def merge_on(on: Any, on_condition: Any, target: list[str], source: list[str], *, source_alias: str,
             target_alias: str) -> tuple[Any, Any]:
    """``on`` and ``on_condition`` as the builder takes them: an ON
    condition given as SQL text (anything but a plain column name) is split
    into its key pairs and the rest, which joins ``on_condition``
    (:func:`ctfile.spark.arrow_sql.split_on`)."""
    if not isinstance(on, str) or _is_name(on):
        return on, on_condition
    from ctfile.spark.arrow_sql import split_on

    keys, rest = split_on(on, target_alias, source_alias, target, source)
    if rest is None:
        return keys, on_condition
    if on_condition is None:
        return keys, rest
    if isinstance(on_condition, str):
        return keys, f"({rest}) AND ({on_condition})"
    return keys, to_column(rest, what="on") & to_column(on_condition, what="on_condition")


def _is_name(text: str) -> bool:
    return text.replace("_", "a").isalnum() or (text.startswith("`") and text.endswith("`") and "`" not in text[1:-1])


def parameters(statement: ctfile.MergeStatement) -> dict:
    """The statement as its commit's ``operationParameters``."""
    return {**statement.parameters(render), "engine": "spark"}


def run_builder(
    ct: Any, source: DataFrame,
) -> Callable[[ctfile.MergeStatement, ctfile.CommitOptions], ctfile.CommitResult]:
    """The builder's runner for the table handle ``ct``: one version."""

    def run(statement: ctfile.MergeStatement, commit: ctfile.CommitOptions) -> ctfile.CommitResult:
        merge = SparkMerge(ct.spark, source, statement)
        try:
            return ct.table.run_statement("MERGE", merge.run, parameters=parameters(statement), commit=commit)
        finally:
            merge.close()

    return run


def shorthand_merge(spark: SparkSession, source: DataFrame, on: Any, when_matched: Any,
                    when_not_matched: Any) -> SparkMerge:
    """``CtfileTable.merge``'s statement: the shorthand (one source row per
    key, the source's columns checked as ``Table.merge`` checks them)."""
    statement = ctfile.shorthand_statement(on, when_matched=when_matched, when_not_matched=when_not_matched)
    kw = {"when_matched": when_matched, "when_not_matched": when_not_matched}

    def plan_job(tx: ctfile.WriteTransaction, schema: pa.Schema, ranges: Mapping) -> ctfile.RewriteJob:
        return ctfile.RewriteJob.for_merge(tx, schema, on, key_ranges=ranges, **kw)

    def local(tx: ctfile.WriteTransaction, prepared: ctfile.PreparedMerge) -> dict:
        return tx.merge(prepared.source, on, **kw)  # the shorthand's own checks

    return SparkMerge(spark, source, statement, plan_job, unique_keys=True, local=local)


def _target_expressions(plan: ctfile.MergePlan) -> list[Any]:
    """The conditions and values of the clauses that see a table row (all
    but ``NOT MATCHED``), as given."""
    exprs: list[Any] = []
    for c in plan.clauses:
        if c.kind is not ctfile.MatchKind.NOT_MATCHED:
            exprs += [c.condition, *(v for _, v in c.values)]
    return exprs


def _updates_a_match(clause: Any) -> bool:
    """Whether ``clause`` is a ``WHEN MATCHED`` clause that updates."""
    return clause.kind is ctfile.MatchKind.MATCHED and clause.action.updates


def _a_row_updated_twice(pairs: DataFrame, updates: list[int]) -> list[Any]:
    """At most one table row of ``pairs`` (source row, table row) matched
    by two or more source rows, one of them falling to a clause of
    ``updates``: its count ``n``, the first such clause ``c`` and its keys."""
    is_update = F.col(ctfile.CLAUSE_COLUMN).isin(updates)
    keys = [c for c in pairs.columns if c.startswith(_KEY_PREFIX)]
    return (pairs.groupBy(GROUP_COLUMN, ctfile.POSITION_COLUMN)
            .agg(F.count(F.lit(1)).alias("n"), F.max(is_update.cast("int")).alias("u"),
                 F.min(F.when(is_update, F.col(ctfile.CLAUSE_COLUMN))).alias("c"),
                 *[F.first(k).alias(k) for k in keys])
            .where((F.col("n") > 1) & (F.col("u") == 1)).limit(1).collect())
