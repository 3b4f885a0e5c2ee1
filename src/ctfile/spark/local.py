"""Small MERGE statements and change scans run in the driver by the Python
engine (issue 27: a fixed cost in proportion to the work).

A Spark MERGE pays a few Spark jobs (the source's checks, the join, the
rewrite tasks) whatever its size. When the source and the partitions the
statement touches are small, as Spark broadcasts a small join side, the
driver runs the statement itself with the Python engine
(``WriteTransaction.execute_merge``, the code of ``Table.merge_builder``):
one Spark job collects the source, nothing else runs on the executors.

It does so only when the result is Spark's: every condition and value is
Spark SQL text that :mod:`ctfile.spark.arrow_sql` translates to a pyarrow
expression computing Spark's value (a Column, or text with a part whose
value could differ, runs on the executors), the source has at most
``sourceRows`` rows and the candidate partitions at most ``targetRows``
rows (:class:`LocalLimits`, the one place the thresholds and their
defaults are stated; 0 turns the driver path off).

A change scan that reads at most ``changeRows`` rows
(:attr:`ctfile.ChangePlan.rows_to_read`, from the log alone: what it changed
where change capture is on, the partitions the interval rewrote where it is
off) is read by ctfile's own reader in the driver and handed to Spark as a
local relation (:func:`changes_in_driver`), as Spark itself plans a small
local table: no Python worker and no job reads it, and the Spark jobs over
it (a derived table's refresh) start at once. Larger scans run on the
executors, so the driver never holds more than ``changeRows`` rows.

A MERGE whose source has at most ``spreadRows`` rows but whose candidates
are more than the driver takes is *spread* (:func:`run_spread`; SPEC
§Copy-on-write, distributed statements, a spread MERGE;
:class:`ctfile.SpreadMerge`). Spark's own MERGE plan
(:class:`ctfile.spark.merge.SparkMerge`) persists the source, finds its key
ranges, joins it with the candidates' rows and shuffles the matched rows to
one task per partition: several Spark jobs and their planning, whatever the
statement's size. A source small enough to collect needs none of that: the
driver plans the statement over the collected rows, and one Spark job of a
few tasks (``spark.range`` with as many partitions, so no shuffle and no
JVM handle: it runs on Spark Connect too) rewrites the candidates, each
task carrying the planned statement in its closure as Spark carries a
broadcast join side and running the Python engine over partitions of its
own. The driver inserts the unmatched rows and stages the rest
(:meth:`ctfile.SpreadMerge.finish`). The translation rule above holds for
it too.

A DataFrame made from rows the driver already holds (:func:`local_frame`:
a collected MERGE source, a delta computed in the driver) remembers them,
so a statement run in the driver over it reads them back without the
Spark job that collecting it again would start.
"""

from __future__ import annotations

import functools
import logging
import operator
import pickle
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame

import ctfile
from ctfile.spark.arrow_sql import SideColumns, SqlScope, Untranslatable, to_arrow
from ctfile.spark.session import default_parallelism
from ctfile.spark.sqltext import SqlConf
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

log = logging.getLogger(__name__)

#: Spark settings of the driver path (session configuration).
SOURCE_ROWS_CONF = "spark.ctfile.local.sourceRows"
TARGET_ROWS_CONF = "spark.ctfile.local.targetRows"
CHANGE_ROWS_CONF = "spark.ctfile.local.changeRows"
SPREAD_ROWS_CONF = "spark.ctfile.local.spreadRows"


@dataclass(frozen=True)
class LocalLimits:
    """The largest statement the driver runs: ``source_rows`` source rows
    and ``target_rows`` rows in the candidate partitions (0: never); the
    largest change scan it reads: ``change_rows`` rows read (0: never); the
    largest source it collects to spread a statement over the executors
    (:func:`run_spread`): ``spread_rows`` rows (0: never), as many as the
    largest change scan it reads, which a derived table's MERGE source
    comes from."""

    source_rows: int = 10_000
    target_rows: int = 2_000_000
    change_rows: int = 500_000
    spread_rows: int = 500_000

    @classmethod
    def of(cls, spark: Any) -> "LocalLimits":
        """The limits of ``spark``'s configuration (the defaults where unset)."""
        return cls(_setting(spark, SOURCE_ROWS_CONF, cls.source_rows),
                   _setting(spark, TARGET_ROWS_CONF, cls.target_rows),
                   _setting(spark, CHANGE_ROWS_CONF, cls.change_rows),
                   _setting(spark, SPREAD_ROWS_CONF, cls.spread_rows))

    @property
    def enabled(self) -> bool:
        """Whether the driver runs small statements itself."""
        return self.source_rows > 0 and self.target_rows > 0

    def collected_rows(self, *, spreads: bool) -> int:
        """The most source rows a statement is collected for: to run it in
        the driver, or (``spreads``) to spread it (0: never collected)."""
        driver = self.source_rows if self.enabled else 0
        return max(driver, self.spread_rows) if spreads else driver


def _setting(spark: Any, key: str, default: int) -> int:
    text = spark.conf.get(key, str(default))
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ctfile.InvalidArgumentError(f"{key} must be a non-negative number of rows, found {text!r}")
    return value


def _translate(value: Any, scope: SqlScope, *, condition: bool) -> Any:
    """A Spark condition or value as the Python engine's; raises
    :class:`Untranslatable` for a Column or untranslatable text."""
    if isinstance(value, Column):
        raise Untranslatable("a Column")
    if isinstance(value, str):
        return to_arrow(value, scope, condition=condition)
    return value  # a literal, or a SourceColumn-free None condition


def arrow_statement(statement: ctfile.MergeStatement, target: pa.Schema, source: pa.Schema,
                    conf: SqlConf) -> ctfile.MergeStatement:
    """``statement`` with its Spark SQL text as pyarrow expressions over
    the aliased sides each part sees.

    Raises
    ------
    Untranslatable
        A part the Python engine would not compute as Spark does.
    """
    t = SideColumns(statement.target_alias, target)
    s = SideColumns(statement.source_alias, source)
    scopes = {
        ctfile.MatchKind.MATCHED: SqlScope((t, s), conf),
        ctfile.MatchKind.NOT_MATCHED: SqlScope((s,), conf, unseen=(t.alias,)),
        ctfile.MatchKind.NOT_MATCHED_BY_SOURCE: SqlScope((t,), conf, unseen=(s.alias,)),
    }
    clauses = []
    for c in statement.clauses:
        scope = scopes[c.kind]
        cond = None if c.condition is None else _translate(c.condition, scope, condition=True)
        values = tuple((name, _translate(v, scope, condition=False)) for name, v in c.assignments)
        clauses.append(ctfile.MergeClause(c.kind, c.action, cond, values))
    on = statement.on_condition
    on = None if on is None else _translate(on, scopes[ctfile.MatchKind.MATCHED], condition=True)
    return ctfile.MergeStatement(statement.keys, tuple(clauses), on, statement.source_alias, statement.target_alias,
                                 statement.schema_evolution)


#: Runs the translated statement, prepared over the collected source, in the transaction.
LocalRun = Callable[[ctfile.WriteTransaction, ctfile.PreparedMerge], dict]
#: Runs it spread over the executors; None when it cannot (:meth:`ctfile.SpreadMerge.plan`).
SpreadRun = Callable[[ctfile.WriteTransaction, ctfile.PreparedMerge], "dict | None"]


def run_in_driver(spark: Any, tx: ctfile.WriteTransaction, statement: ctfile.MergeStatement, source: DataFrame,
                  run: LocalRun, *, spread: SpreadRun | None = None) -> dict[str, int] | None:
    """Run ``statement`` of ``source`` in the driver with ``run`` when it
    is small and translates (module docstring), or with ``spread`` (the
    Python engine on the executors, :func:`run_spread`) when
    its source is small but its candidates are not; the counts, or None
    when Spark's join must run it (nothing was read from the table then)."""
    limits = LocalLimits.of(spark)
    collected = limits.collected_rows(spreads=spread is not None)
    if collected == 0 or _known_too_many(source, collected):
        return None
    local = _translated(spark, tx, statement, spark_arrow_schema(source.schema))
    if local is None:
        return None
    rows = held_rows(source)
    if rows is None:
        rows = _collected(source, collected, count_first=collected > limits.source_rows)
    return None if rows is None else _run_small(tx, local, rows, limits, run, spread)


def _collected(source: DataFrame, limit: int, *, count_first: bool) -> pa.Table | None:
    """``source``'s rows when it has at most ``limit`` of them (None: more).
    With ``count_first`` (a limit as large as the spread path's) a source
    whose size is unknown is counted first, a job that moves no rows to the
    driver, so a large one is refused without collecting ``limit`` rows."""
    if count_first and _known(source).count is None and source.limit(limit + 1).count() > limit:
        return None
    return source.limit(limit + 1).toArrow()


def run_rows_in_driver(spark: Any, tx: ctfile.WriteTransaction, statement: ctfile.MergeStatement, rows: pa.Table,
                       run: LocalRun) -> dict[str, int] | None:
    """:func:`run_in_driver` for a source the driver holds as Arrow
    ``rows``: no DataFrame is made and no Spark job runs; None when the
    executors must run it (nothing was read from the table then)."""
    limits = LocalLimits.of(spark)
    if not limits.enabled or rows.num_rows > limits.source_rows:
        return None
    local = _translated(spark, tx, statement, rows.schema)
    return None if local is None else _run_small(tx, local, rows, limits, run, None)


def _translated(spark: Any, tx: ctfile.WriteTransaction, statement: ctfile.MergeStatement,
                source: pa.Schema) -> ctfile.MergeStatement | None:
    try:
        return arrow_statement(statement, tx.schema.to_arrow(field_ids=False), source, SqlConf.of(spark))
    except Untranslatable as e:
        log.info("MERGE runs on the executors: %s does not translate to the Python engine", e)
        return None


def _run_small(tx: ctfile.WriteTransaction, local: ctfile.MergeStatement, rows: pa.Table, limits: LocalLimits,
               run: LocalRun, spread: SpreadRun | None) -> dict[str, int] | None:
    """Run ``local`` over ``rows`` in the driver when both sides are within
    ``limits``, else spread when the source is; None when neither."""
    if rows.num_rows > limits.collected_rows(spreads=spread is not None):
        return None
    prepared = tx.prepare_merge(local, rows)
    in_driver = limits.enabled and rows.num_rows <= limits.source_rows
    if in_driver and prepared.candidate_rows <= limits.target_rows:
        log.info("MERGE of %d source rows over %d candidate rows runs in the driver", rows.num_rows,
                 prepared.candidate_rows)
        return run(tx, prepared)
    if spread is None or rows.num_rows > limits.spread_rows:
        return None
    return spread(tx, prepared)


@dataclass(frozen=True)
class _Known:
    """What the driver knows of a DataFrame it made or checked: its rows,
    its row count, the columns no two of its rows share."""

    rows: pa.Table | None = None
    count: int | None = None
    unique: tuple[str, ...] | None = None


#: id of a DataFrame -> (weak reference to it, what is known of it).
_KNOWN: dict[int, tuple[weakref.ref, _Known]] = {}


def _known(df: Any) -> _Known:
    entry = _KNOWN.get(id(df))
    return entry[1] if entry is not None and entry[0]() is df else _Known()


def _note(df: Any, **facts: Any) -> None:
    key = id(df)
    _KNOWN[key] = (weakref.ref(df, lambda _ref, key=key: _KNOWN.pop(key, None)), replace(_known(df), **facts))


def local_frame(spark: Any, rows: pa.Table, schema: Any) -> DataFrame:
    """``rows`` as a DataFrame over a local relation of Spark ``schema``,
    remembering them for :func:`held_rows` while the DataFrame lives, when
    Spark would hand back the same Arrow types (no timestamps, whose time
    zone Spark sets, and no nested types)."""
    df = spark.createDataFrame(rows, schema=schema)
    if all(_round_trips(f.type) for f in rows.schema):
        _note(df, rows=rows, count=rows.num_rows)
    return df


def note_rows(df: Any, count: int) -> None:
    """Remember that ``df`` (computed once: persisted) has ``count`` rows,
    so a statement over it that the driver could not hold goes to the
    executors without collecting it first."""
    _note(df, count=count)


def note_unique(df: Any, columns: Sequence[str]) -> None:
    """Remember that no two rows of ``df`` (computed once: persisted) share
    their values of ``columns`` (a checked refresh source: one row per
    derivation key), so a MERGE on them skips its own check."""
    _note(df, unique=tuple(columns))


def held_rows(df: Any) -> pa.Table | None:
    """The rows :func:`local_frame` made ``df`` from, or None."""
    return _known(df).rows


def known_unique(df: Any, columns: Sequence[str]) -> bool:
    """Whether :func:`note_unique` said ``columns`` are unique in ``df``."""
    unique = _known(df).unique
    return unique is not None and set(unique) <= set(columns)


def _known_too_many(df: Any, limit: int) -> bool:
    count = _known(df).count
    return count is not None and count > limit


def _round_trips(t: pa.DataType) -> bool:
    return not (pa.types.is_timestamp(t) or pa.types.is_nested(t) or pa.types.is_dictionary(t))


def changes_in_driver(spark: Any, table: ctfile.Table, changes: ctfile.ChangeSet) -> DataFrame | None:
    """``changes`` read in the driver as a DataFrame over a local relation,
    in the data source's columns and types, when it reads at most
    ``changeRows`` rows (module docstring); else None (nothing was read).
    The rows are read and checked by ctfile's reader (checksums included)."""
    limit = LocalLimits.of(spark).change_rows
    if limit == 0 or changes.plan.rows_to_read > limit:  # 0: never, even for a scan that reads nothing
        return None
    rows = changes.to_arrow()
    log.info("change scan of %s, versions %d..%d, read in the driver: %d rows", table.uri,
             changes.start_version, changes.end_version, rows.num_rows)
    return spark.createDataFrame(rows, schema=spark_schema(changes.schema))


def unmatched_target_pruning(statement: ctfile.MergeStatement, target: pa.Schema, conf: SqlConf) -> Any:
    """A pyarrow expression over the table's columns true for every table
    row a ``NOT MATCHED BY SOURCE`` clause of ``statement`` may select (the
    disjunction of their conditions, each translated exactly), to prune the
    partitions those clauses read by statistics; None when it cannot: a
    clause without a condition, or with a Column or text that does not
    translate (every live partition is read then)."""
    clauses = statement.clauses_of(ctfile.MatchKind.NOT_MATCHED_BY_SOURCE)
    if not clauses or any(not isinstance(c.condition, str) for c in clauses):
        return None
    out = None
    for c in clauses:
        expr = _over_target(c.condition, statement, target, conf)
        if expr is None:
            return None
        out = expr if out is None else out | expr
    return out


def matched_target_pruning(statement: ctfile.MergeStatement, target: pa.Schema, conf: SqlConf) -> Any:
    """A pyarrow expression over the table's columns true for every table
    row the ON condition may match: the conjuncts of its SQL text beyond
    the key pairs that name only the table's columns and translate exactly
    (``t.region = 'EU'`` of ``t.id = s.id AND t.region = 'EU'``), to prune
    the partitions a ``MATCHED`` clause reads by statistics; None when no
    conjunct does (a Column, or conjuncts over the source). Dropping a
    conjunct only weakens the expression, so what it prunes holds no row
    the ON condition matches."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    if not isinstance(statement.on_condition, str):
        return None
    try:
        parsed = sqlglot.parse_one(statement.on_condition, dialect="spark")
    except SqlglotError:
        return None
    conjuncts = parsed.flatten() if isinstance(parsed, exp.And) else [parsed]
    found = [_over_target(c.sql(dialect="spark"), statement, target, conf) for c in conjuncts]
    kept = [e for e in found if e is not None]
    return functools.reduce(operator.and_, kept) if kept else None


def _over_target(text: str, statement: ctfile.MergeStatement, target: pa.Schema, conf: SqlConf) -> Any:
    """The condition ``text`` of ``statement`` as a pyarrow expression over
    the table's own columns, or None when it names the source or does not
    translate exactly."""
    scope = SqlScope((SideColumns(None, target),), conf, unseen=(statement.source_alias,))
    unqualified = _unqualified(text, statement.target_alias, conf)
    try:
        return None if unqualified is None else to_arrow(unqualified, scope, condition=True)
    except (Untranslatable, ctfile.CtfileError):
        return None


def _unqualified(text: str, alias: str, conf: SqlConf) -> str | None:
    """``text`` with the table alias dropped from its columns (``t.a`` ->
    ``a``), or None when it does not parse."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    same = (lambda a, b: a == b) if conf.case_sensitive else (lambda a, b: a.lower() == b.lower())

    def strip(node: Any) -> Any:
        if isinstance(node, exp.Column) and node.table and same(node.table, alias) and not node.args.get("db"):
            return exp.column(node.this.copy())
        return node

    try:
        return sqlglot.parse_one(text, dialect="spark").transform(strip).sql(dialect="spark")
    except SqlglotError:
        return None


# ---------------------------------------------------------------- a MERGE spread over the executors


_SPREAD_RESULT = "kind string, payload binary"
#: At most this many tasks per core: a task's work is whole partitions,
#: so more tasks than that only add their start-up cost.
TASKS_PER_CORE = 2


def spread_runner(spark: Any) -> SpreadRun:
    """The ``spread`` argument of :func:`ctfile.spark.local.run_in_driver` for ``spark``."""
    return lambda tx, prepared: run_spread(spark, tx, prepared)


def run_spread(spark: Any, tx: ctfile.WriteTransaction, prepared: ctfile.PreparedMerge) -> dict[str, int] | None:
    """Run ``prepared`` (planned in ``tx``'s current statement) over the
    executors; its counts, or None when it does not spread
    (:meth:`ctfile.SpreadMerge.plan`: nothing was written then)."""
    spread = ctfile.SpreadMerge.plan(tx, prepared)
    if spread is None:
        log.info("MERGE is not spread: its source repeats a key it updates, or it evolves the schema")
        return None
    paths = [p.path for p in spread.job.candidates]
    log.info("MERGE of %d source rows spread over %d candidate partitions (%d rows)",
             spread.merge.source.num_rows, len(paths), prepared.candidate_rows)
    rewrites = _rewritten(spark, spread, paths) if paths else []
    return spread.finish(tx, rewrites)


def _rewritten(spark: Any, spread: ctfile.SpreadMerge, paths: list[str]) -> list[ctfile.PartitionRewrite]:
    """Every candidate at ``paths`` rewritten by the executors; on a task's
    ctfile error every file written is deleted and the error raised."""
    tasks = max(1, min(len(paths), TASKS_PER_CORE * default_parallelism(spark)))
    out = spark.range(0, tasks, 1, tasks).mapInArrow(_spread_task_fn(spread, paths, tasks), _SPREAD_RESULT).collect()
    rewrites, errors = [], []
    for kind, payload in out:
        (rewrites if kind == "rewrite" else errors).append(pickle.loads(payload))
    if errors:
        spread.job.discard(rewrites)
        raise errors[0]
    return rewrites


def _spread_task_fn(spread: ctfile.SpreadMerge, paths: list[str],
                    tasks: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: task ``i`` rewrites ``paths[i::tasks]``;
    a ctfile error is returned as a row, not raised, so the driver can
    delete what the other tasks wrote."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                kinds, payloads = [], []
                for path in paths[task::tasks]:
                    try:
                        kind, value = "rewrite", spread.rewrite(path)
                    except ctfile.CtfileError as e:
                        kind, value = "error", e
                    kinds.append(kind)
                    payloads.append(pickle.dumps(value))
                yield pa.RecordBatch.from_pydict({"kind": kinds, "payload": payloads},
                                                 schema=pa.schema([("kind", pa.string()), ("payload", pa.binary())]))

    return run
