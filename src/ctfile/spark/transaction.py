"""Spark statements that commit together (SPEC §Copy-on-write, each
statement of a transaction sees the effects of the earlier ones).

``with ct.transaction(commit=, consuming=) as tx:`` opens a
:class:`ctfile.Table` transaction (the same object the Python API's
``Table.transaction`` returns: ``commit``, a :class:`ctfile.CommitOptions`
or its shorthand ``app_id=``/``app_version=``, makes a batch
exactly-once, ``consuming`` consumes a named stream's pending changes
exactly once) and hands a :class:`SparkTransaction` whose statements run on
the executors as :class:`ctfile.spark.CtfileTable`'s do, each against the
table as the earlier statements left it (their files exist on storage, so
the executors read them like any other). Leaving the block commits every
statement as one version; an exception leaves it with nothing committed
and every file the statements wrote deleted.

A statement of a transaction is not re-run after a conflict (the whole
transaction would have to be): a concurrent commit that conflicts makes the
commit raise :class:`ctfile.CommitConflictError`, as a Python transaction's.
"""

from __future__ import annotations

import pickle
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pyarrow as pa

import ctfile
from ctfile.spark.dml import delete_statement, in_table_timestamps, spark_dataframe, update_statement
from ctfile.spark.merge import (
    SPARK_EXPRESSIONS, SPARK_TEXT_EXPRESSIONS, RowsMerge, SparkMerge, merge_on, shorthand_merge,
)


class SparkTransaction:
    """The statements of one transaction on ``table`` (a
    :class:`ctfile.spark.CtfileTable`); ``tx``: the
    :class:`ctfile.WriteTransaction` they are staged in. Each statement
    returns its ``inserted``/``updated``/``deleted`` counts; the commit's
    :class:`ctfile.CommitResult` is :attr:`result` once the block is left."""

    def __init__(self, table: Any, tx: ctfile.WriteTransaction):
        self._table = table
        self.tx = tx

    @property
    def spark(self) -> Any:
        return self._table.spark

    @property
    def result(self) -> ctfile.CommitResult | None:
        return self.tx.result

    def merge_builder(self, source: Any, on: Any, *, on_condition: Any = None, source_alias: str = "s",
                      target_alias: str = "t") -> ctfile.MergeBuilder:
        """:meth:`ctfile.spark.CtfileTable.merge_builder` as this
        transaction's next statement: ``execute()`` returns the counts."""
        source = spark_dataframe(source)
        return self._builder(lambda st: SparkMerge(self.spark, source, st), source.columns, on,
                             _Aliases(on_condition, source_alias, target_alias), SPARK_EXPRESSIONS)

    def merge_rows_builder(self, rows: pa.Table, on: Any, *, on_condition: Any = None, source_alias: str = "s",
                           target_alias: str = "t") -> ctfile.MergeBuilder:
        """:meth:`merge_builder` for a source the driver holds as Arrow
        ``rows`` (a refresh's delta computed in the driver): with Spark SQL
        text it runs in the driver with no DataFrame and no Spark job when
        it translates and is small, and on the executors otherwise
        (:class:`ctfile.spark.merge.RowsMerge`)."""
        return self._builder(lambda st: RowsMerge(self.spark, rows, st), rows.column_names, on,
                             _Aliases(on_condition, source_alias, target_alias), SPARK_TEXT_EXPRESSIONS)

    def _builder(self, merge: Callable[[ctfile.MergeStatement], Any], columns: list[str], on: Any,
                 aliases: "_Aliases", expressions: Any) -> ctfile.MergeBuilder:
        """A MergeBuilder whose statement runs as ``merge(statement)`` in this
        transaction, over a source of ``columns``."""
        keys, on_condition = merge_on(on, aliases.on_condition, self.tx.schema.names, columns,
                                      source_alias=aliases.source, target_alias=aliases.target)

        def run(statement: ctfile.MergeStatement, _: ctfile.CommitOptions) -> dict[str, int]:
            return self._run(merge(statement))

        return ctfile.MergeBuilder.start(run, keys, on_condition=on_condition, source_alias=aliases.source,
                                         target_alias=aliases.target, expressions=expressions, in_transaction=True)

    def merge(self, source: Any, on: Any, *, when_matched: str | None = "update",
              when_not_matched: str | None = "insert") -> dict[str, int]:
        """The shorthand MERGE (:meth:`ctfile.spark.CtfileTable.merge`)."""
        return self._run(shorthand_merge(self.spark, spark_dataframe(source), on, when_matched, when_not_matched))

    def update(self, condition: Any = None, set: Mapping[str, Any] | None = None) -> dict[str, int]:
        """:meth:`ctfile.spark.CtfileTable.update` as the next statement."""
        return self._run(update_statement(self.spark, condition, set))

    def delete(self, condition: Any = None) -> dict[str, int]:
        """:meth:`ctfile.spark.CtfileTable.delete` as the next statement."""
        return self._run(delete_statement(self.spark, condition))

    def insert(self, data: Any) -> dict[str, int]:
        """Append the rows of the DataFrame ``data`` (columns by name, as
        ``spark.read.format("ctfile")`` writes them), written by the
        executors, as the next statement."""
        data = spark_dataframe(data)
        self.tx.check_row_change("INSERT")  # SPEC §Derived tables: before any file is written
        if self.tx.is_replay:
            return {"inserted": 0, "updated": 0, "deleted": 0}
        tx = self.tx
        st = tx.storage
        job = ctfile.WriteJob(ctfile.TableLocation.of(st), tx.schema, dict(tx.metadata.properties), tx.base.version,
                              "append", uuid.uuid4().hex)
        rows = in_table_timestamps(data, tx.schema.to_arrow(field_ids=False))
        out = rows.mapInArrow(_write_fn(job), "payload binary").collect()
        files, errors = [], []
        for (payload,) in out:
            kind, value = pickle.loads(payload)
            (files.extend(value) if kind == "files" else errors.append(value))
        if errors:
            job.abort(files)
            raise errors[0]
        tx.stage(files)
        n = sum(f.num_records for f in files)
        tx.add_metrics(inserted=n)
        return {"inserted": n, "updated": 0, "deleted": 0}

    def _run(self, statement: Any) -> dict[str, int]:
        """Run ``statement`` as one statement of :attr:`tx`: in its
        ``statement()`` block, so that change rows captured out of files an
        earlier statement wrote are consolidated at the commit (SPEC §Change
        capture)."""
        try:
            with self.tx.statement():
                return statement.run(self.tx)
        finally:
            close = getattr(statement, "close", None)
            if close is not None:
                close()


@dataclass(frozen=True)
class _Aliases:
    """A MERGE's ON condition and the aliases of its sides."""

    on_condition: Any
    source: str
    target: str


def _write_fn(job: ctfile.WriteJob):
    """The ``mapInArrow`` function writing one task's rows; a ctfile error
    is returned, not raised, so that the driver deletes every task's files."""

    def write(batches):
        rows = [b for b in batches if b.num_rows]  # one task's rows, in memory
        try:
            value = ("files", job.write(pa.Table.from_batches(rows)) if rows else [])
        except ctfile.CtfileError as e:
            value = ("error", e)
        yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(value)]})

    return write

