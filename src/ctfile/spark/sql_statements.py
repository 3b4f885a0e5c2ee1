"""UPDATE, DELETE FROM, INSERT and RESTORE TABLE in the SQL text of
:func:`ctfile.spark.sql`, planned from sqlglot's parse (Spark dialect)
into the ctfile call each one is (docs/spark.md "SQL"):

* ``UPDATE t [AS a] SET c = expr, ... [WHERE cond]`` and ``DELETE FROM t
  [AS a] [WHERE cond]``: :meth:`CtfileTable.update` and
  :meth:`CtfileTable.delete`, the condition and values as Spark SQL text
  (columns qualified by the table's name or alias unqualified);
* ``INSERT INTO|OVERWRITE [TABLE] t [(c, ...)] [BY NAME] query`` (a query or
  ``VALUES``): the query's DataFrame written by :func:`write_dataframe`,
  by position (the listed columns, or all the table's), or by name with
  ``BY NAME``; ``OVERWRITE`` replaces every row;
* ``RESTORE [TABLE] t [TO] VERSION AS OF n | TIMESTAMP AS OF expr``:
  :meth:`CtfileTable.restore` (the timestamp evaluated by Spark).

Planning checks the statement, without Spark: a part ctfile does not run
(``UPDATE ... FROM``, ``DELETE ... USING``, ``LIMIT``, ``PARTITION``, a
subquery in a condition, time travel on the written table ...) raises
:class:`ctfile.UnsupportedFeatureError` naming it. A statement's run
returns its :class:`ctfile.CommitResult`, after which the view of a
registered name is made again, so that ``spark.sql`` reads the new version.
"""

from __future__ import annotations

import itertools
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql.types import StructField, StructType
from sqlglot import exp

import ctfile
from ctfile.spark.sql_reads import CtfileRef, Names, QueryPlan, ReadView, instant, plan_query, travel_view
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

# Words that name a statement's part in messages (sqlglot's argument names otherwise).
_PART_WORDS = {
    "from_": "FROM", "with_": "WITH", "order": "ORDER BY", "limit": "LIMIT", "returning": "RETURNING",
    "using": "USING", "partition": "PARTITION", "where": "REPLACE WHERE", "exists": "IF NOT EXISTS",
    "version": "time travel", "sample": "TABLESAMPLE", "hints": "hints", "alternative": "OR",
    "ignore": "IGNORE", "conflict": "ON CONFLICT", "tables": "several tables", "cluster": "CLUSTER",
}


def check_parts(node: exp.Expression, allowed: set[str], what: str) -> None:
    """Refuse every part of ``node`` but the ``allowed`` ones, naming it."""
    for key, value in node.args.items():
        if key not in allowed and value not in (None, False, [], ""):
            raise ctfile.UnsupportedFeatureError(f"{what} with {_PART_WORDS.get(key, key.upper())} is not supported")


def check_no_subquery(e: exp.Expression | None, what: str) -> None:
    if e is not None and e.find(exp.Query) is not None:
        raise ctfile.UnsupportedFeatureError(f"a subquery in {what} is not supported: {e.sql(dialect='spark')}")


def target_table(node: exp.Expression) -> exp.Table | None:
    """The table a statement writes (an INSERT's column list aside)."""
    this = node.this
    if isinstance(this, exp.Schema):
        this = this.this
    return this if isinstance(this, exp.Table) else None


def resolve_target(table: exp.Table, names: Names, what: str) -> CtfileRef | None:
    """The ctfile table a statement writes (None: not a ctfile table, left
    to Spark); a part of the reference ctfile cannot write is refused."""
    ref = names.resolve(table)
    if ref is not None:
        check_parts(table, {"this", "db", "alias"}, f"{what} {ref}")
    return ref


def qualifiers(table: exp.Table) -> set[str]:
    """The names a statement's columns may be qualified with: the table's
    alias and name (lower case: Spark resolves them so)."""
    out = {table.name.lower()}
    if table.alias:
        out.add(table.alias.lower())
    return out


def unqualified(e: exp.Expression, names: set[str]) -> exp.Expression:
    """``e`` with its columns qualified by one of ``names`` unqualified:
    CtfileTable's conditions and values are over the table's columns."""

    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table.lower() in names and not node.args.get("db"):
            return exp.Column(this=node.this.copy())
        return node

    return e.copy().transform(strip)


def column_name(col: exp.Expression, names: set[str], what: str) -> str:
    """The table column a SET or an INSERT column list names."""
    if isinstance(col, exp.Identifier):
        return col.name
    if not isinstance(col, exp.Column) or col.args.get("db") or (col.table and col.table.lower() not in names):
        raise ctfile.UnsupportedFeatureError(
            f"{what} names {col.sql(dialect='spark')}: only columns of the target table (no nested fields) can be set"
        )
    return col.name


def refresh(spark: Any, ref: CtfileRef) -> None:
    """Make the view of a registered name again after a statement wrote it."""
    if ref.name is not None:
        ReadView(ref).create(spark)


def sql_text(e: exp.Expression | None) -> str | None:
    return None if e is None else e.sql(dialect="spark")


# ---------------------------------------------------------------- UPDATE and DELETE


@dataclass(frozen=True)
class SqlUpdate:
    """``UPDATE``: ``set`` (column, Spark SQL value) and ``where`` (None: every row)."""

    target: CtfileRef
    set: tuple[tuple[str, str], ...]
    where: str | None = None

    def run(self, spark: Any) -> ctfile.CommitResult:
        result = self.target.table(spark).update(self.where, dict(self.set))
        refresh(spark, self.target)
        return result


@dataclass(frozen=True)
class SqlDelete:
    """``DELETE FROM``: ``where`` (None: every row)."""

    target: CtfileRef
    where: str | None = None

    def run(self, spark: Any) -> ctfile.CommitResult:
        result = self.target.table(spark).delete(self.where)
        refresh(spark, self.target)
        return result


def _condition(node: exp.Expression, table: exp.Table, what: str) -> str | None:
    where = node.args.get("where")
    if where is None:
        return None
    check_no_subquery(where.this, f"the WHERE of {what}")
    return sql_text(unqualified(where.this, qualifiers(table)))


def plan_update(tree: exp.Update, ref: CtfileRef) -> SqlUpdate:
    check_parts(tree, {"this", "expressions", "where"}, "UPDATE")
    table, names = tree.this, qualifiers(tree.this)
    assignments = []
    for eq in tree.expressions:
        if not isinstance(eq, exp.EQ):
            raise ctfile.UnsupportedFeatureError(f"UPDATE SET {eq.sql(dialect='spark')} is not supported")
        check_no_subquery(eq.expression, "the SET of UPDATE")
        assignments.append((column_name(eq.this, names, "UPDATE SET"), sql_text(unqualified(eq.expression, names))))
    return SqlUpdate(ref, tuple(assignments), _condition(tree, table, "UPDATE"))


def plan_delete(tree: exp.Delete, ref: CtfileRef) -> SqlDelete:
    check_parts(tree, {"this", "where"}, "DELETE")
    return SqlDelete(ref, _condition(tree, tree.this, "DELETE"))


# ---------------------------------------------------------------- INSERT


@dataclass(frozen=True)
class SqlInsert:
    """``INSERT INTO|OVERWRITE``: the ``query`` written, its columns named
    by position (``columns``, or all the table's when None) unless
    ``by_name``."""

    target: CtfileRef
    query: QueryPlan
    columns: tuple[str, ...] | None = None
    by_name: bool = False
    overwrite: bool = False

    def run(self, spark: Any) -> ctfile.CommitResult:
        table = ctfile.open_table(self.target.uri, storage_options=self.target.storage_options)
        df = self.query.dataframe(spark)
        if not self.by_name:
            df = self._by_position(df, self.columns or tuple(table.schema.names))
        result = write_dataframe(spark, table, df, mode="overwrite" if self.overwrite else "append")
        refresh(spark, self.target)
        return result

    def _by_position(self, df: Any, columns: tuple[str, ...]) -> Any:
        if len(df.columns) != len(columns):
            raise ctfile.SchemaMismatchError(
                f"INSERT into {self.target} gives {len(df.columns)} values a row for the {len(columns)} columns "
                f"{list(columns)}"
            )
        return df.toDF(*columns)


def plan_insert(tree: exp.Insert, ref: CtfileRef, names: Names) -> SqlInsert:
    check_parts(tree, {"this", "expression", "overwrite", "by_name", "with_"}, "INSERT")
    query = tree.expression
    if not isinstance(query, (exp.Query, exp.Values)):
        raise ctfile.UnsupportedFeatureError(f"INSERT takes a query or VALUES, found {sql_text(query)}")
    query = query.copy()
    if tree.args.get("with_"):  # WITH c AS (...) INSERT ... SELECT: the query's own WITH
        query.set("with_", tree.args["with_"].copy())
    columns = None
    if isinstance(tree.this, exp.Schema):
        columns = tuple(column_name(c, qualifiers(tree.this.this), "INSERT") for c in tree.this.expressions)
        if len(set(columns)) < len(columns):
            raise ctfile.InvalidArgumentError(f"INSERT names a column twice: {list(columns)}")
    return SqlInsert(ref, plan_query(query, names), columns, bool(tree.args.get("by_name")),
                     bool(tree.args.get("overwrite")))


# ---------------------------------------------------------------- the write of an INSERT


_RESULT_SCHEMA = "kind string, payload binary"


def write_dataframe(spark: Any, table: ctfile.Table, df: Any, *, mode: str) -> ctfile.CommitResult:
    """Write ``df`` into ``table`` (``mode`` ``"append"`` or
    ``"overwrite"``) as one version: SQL's ``INSERT``.

    The write is the data source's (``df.write.format("ctfile")``): a
    :class:`ctfile.WriteJob` planned on the driver, whose tasks write
    micro-partitions on the executors and return their descriptions, committed
    by the driver as one version. Here the driver is this process, so the
    commit's result comes back (the data source's commit runs in a Python
    worker Spark starts, out of reach); the tasks run as ``mapInArrow``, on a
    classic session and on Spark Connect alike.

    The DataFrame's columns take the table's types as SQL's INSERT gives them
    (Spark's ``DataFrame.to``: numeric to numeric, a timestamp of the other
    kind in the session time zone, ``NULL`` to any type; not a string to a
    number), so that ``VALUES (1, 2.5)`` fits a ``bigint`` and a ``double``
    column. Nullability is left to ctfile's own check of the values written.

    A task that meets bad data (a null for a non-nullable column) returns the
    error instead of failing alone; the driver then deletes every task's files
    and raises it. A job Spark itself fails leaves the files of its finished
    tasks unreferenced, as any failed write does ("Upserts from Spark").

    Raises
    ------
    SchemaMismatchError
        A column the table lacks or a type that does not fit (before any
        task runs), a null for a non-nullable column (nothing is left
        written).
    """
    df = _as_table_types(df, table.schema)
    job = table.write_job(mode=mode, schema=spark_arrow_schema(df.schema))
    files, errors = [], []
    for kind, payload in df.mapInArrow(_task_fn(job), _RESULT_SCHEMA).collect():
        value = pickle.loads(payload)
        if kind == "files":
            files.extend(value)
        else:
            errors.append(value)
    if errors:
        job.abort(files)
        raise errors[0]
    return job.commit(files)


def _as_table_types(df: Any, schema: pa.Schema) -> Any:
    """``df`` with the table's types (module docstring); as it is when it has
    a column the table lacks (the write job names it)."""
    if any(c not in schema.names for c in df.columns):
        return df
    fields = spark_schema(pa.schema([schema.field(c) for c in df.columns])).fields
    try:
        out = df.to(StructType([StructField(f.name, f.dataType, True) for f in fields]))
        out.schema  # noqa: B018 -- analysis now, on Spark Connect too
        return out
    except AnalysisException as e:
        raise ctfile.SchemaMismatchError(
            f"the written columns {df.schema.simpleString()} do not fit the table's "
            f"{StructType(fields).simpleString()}: {e}"
        ) from None


def _task_fn(job: ctfile.WriteJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: write a task's rows, return the files
    (or the ctfile error) as one row."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        if first is None:
            return
        try:
            kind, value = "files", job.write(pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches)))
        except ctfile.CtfileError as e:
            kind, value = "error", e
        yield pa.RecordBatch.from_pydict({"kind": [kind], "payload": [pickle.dumps(value)]})

    return run


# ---------------------------------------------------------------- RESTORE


@dataclass(frozen=True)
class SqlRestore:
    """``RESTORE``: to ``version``, or to the timestamp the Spark SQL
    expression ``timestamp`` evaluates to."""

    target: CtfileRef
    version: int | None = None
    timestamp: str | None = None

    def run(self, spark: Any) -> ctfile.CommitResult:
        ts = None if self.timestamp is None else instant(spark, self.timestamp)
        result = self.target.table(spark).restore(version=self.version, timestamp=ts)
        refresh(spark, self.target)
        return result


def plan_restore(table: exp.Table, ref: CtfileRef) -> SqlRestore:
    """``table``: the restored table with its time travel (the parse of
    ``SELECT * FROM <table> VERSION|TIMESTAMP AS OF ...``)."""
    check_parts(table, {"this", "db", "version"}, f"RESTORE {ref}")
    travel = table.args.get("version")
    if travel is None:
        raise ctfile.InvalidArgumentError(f"RESTORE {ref} needs TO VERSION AS OF <n> or TO TIMESTAMP AS OF <timestamp>")
    view = travel_view(ref, travel)
    if view.options:
        return SqlRestore(ref, version=int(dict(view.options)["versionAsOf"]))
    return SqlRestore(ref, timestamp=dict(view.instants)["timestampAsOf"])
