"""``CtfileTable``: a ctfile table as a PySpark application sees it."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import ctfile
from ctfile.spark.dml import delete_statement, spark_dataframe, update_statement
from ctfile.spark.transaction import SparkTransaction


class CtfileTable:
    """A handle on the ctfile table at a URI, for one SparkSession: a classic
    one or a Spark Connect session (docs/spark.md "Spark Connect"). On Connect a
    condition prunes the candidates by statistics only when it is a SQL
    string (a Column has no SQL text through PySpark's public API: every
    live partition is read), a MERGE source's size is estimated from its row
    count for the broadcast decision, and ``to_df``/``changes_df`` read
    natively only local paths.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> uri = tempfile.mkdtemp()
    >>> _ = ctfile.create_table(uri, pa.schema([("id", pa.int64())]))
    >>> CtfileTable.for_path(None, uri).table.version
    0
    """

    def __init__(self, spark: Any, table: ctfile.Table):
        self.spark = spark
        self.table = table

    @classmethod
    def for_path(cls, spark: Any, uri: str, *, storage_options: dict | None = None) -> "CtfileTable":
        """The table at ``uri`` (a local path or an fsspec URL such as
        ``s3://bucket/t``; ``storage_options`` as for :func:`ctfile.open_table`).

        Raises
        ------
        TableNotFoundError
            No ctfile table at ``uri``.
        """
        return cls(spark, ctfile.open_table(uri, storage_options=storage_options))

    @property
    def uri(self) -> str:
        return self.table.uri

    def __repr__(self) -> str:
        return f"CtfileTable({self.uri!r})"

    def to_df(self, *, version: int | None = None, timestamp: Any = None, row_ids: bool = False):
        """The snapshot at ``version`` or ``timestamp`` (default: latest) as a
        DataFrame over Spark's own Parquet reader: the table's columns (no
        hidden ones) in its order and types; column pruning, filter pushdown
        and ``count()`` from the footers come from Spark.

        ``row_ids=True`` adds a last column ``METADATA$ROW_ID`` (string):
        each row's id exactly as change scans give it (SPEC §Change scans),
        from its materialized row id (the stored one, or its partition's
        ``firstRowId`` plus Spark's ``_metadata.row_index``), hashed in Spark
        SQL (:mod:`ctfile.spark.lineage`); the fallback reads it with the
        data source's ``rowIds`` option.

        The snapshot is resolved now, on the driver: later commits are not
        seen. Where Spark's reader would not read the files exactly as
        ctfile does (files written before a rename, drop or widening; storage
        Spark's Hadoop cannot open), this is ``spark.read.format("ctfile")``
        at the same version instead, logged at INFO
        (:mod:`ctfile.spark.native`). Spark opens the files itself, so they
        are not checked against their checksums as ctfile's own reads do.

        Raises
        ------
        VersionNotFoundError
            A version or timestamp the table does not have.
        InvalidArgumentError
            Both ``version`` and ``timestamp``; a ``row_ids`` that is not a bool.
        """
        from ctfile.spark.lineage import snapshot_with_row_ids
        from ctfile.spark.native import snapshot_df

        if not isinstance(row_ids, bool):
            raise ctfile.InvalidArgumentError(f"row_ids must be a bool, found {row_ids!r:.80}")
        read = snapshot_with_row_ids if row_ids else snapshot_df
        return read(self.spark, self.table, self.table.snapshot(version, timestamp=timestamp))

    def changes_df(self, start_version: int | None = None, end_version: int | None = None, *,
                   information: str = "append_only"):
        """The change scan of ``start_version..end_version`` (both included;
        defaults: the whole history, the latest version) as a DataFrame
        over Spark's own Parquet reader, with the columns of
        ``spark.read.format("ctfile").option("changes", information)``:
        the table's columns in the schema of ``end_version``, then
        ``METADATA$ACTION``, ``METADATA$ISUPDATE`` and ``METADATA$ROW_ID``.

        ``information``: ``"append_only"`` (the default: the fresh rows of
        the partitions the interval added, :mod:`ctfile.spark.changes`) or
        ``"default"`` (the minimum delta: the net change per row id between
        the snapshots at ``start_version - 1`` and ``end_version``, an
        update as a DELETE of its old and an INSERT of its new values,
        :mod:`ctfile.spark.min_delta`). ``audit`` is read with
        ``spark.read.format("ctfile")``. Either mode falls back to that
        data source as :meth:`to_df` does, logged at INFO. A scan that
        reads at most ``spark.ctfile.local.changeRows`` rows (default
        500,000; 0: never), judged from the log, is read by ctfile's reader
        in the driver instead and handed to Spark as a local relation
        (:func:`ctfile.spark.local.changes_in_driver`).

        Raises
        ------
        InvalidArgumentError
            A mode other than ``append_only`` or ``default``, or a reversed interval.
        VersionNotFoundError, StaleIntervalError
            As :meth:`ctfile.Table.changes`.
        """
        from ctfile.spark.changes import append_only_df
        from ctfile.spark.local import changes_in_driver
        from ctfile.spark.min_delta import default_df

        mode = ctfile.ChangeMode.parse(information)
        read = {ctfile.ChangeMode.APPEND_ONLY: append_only_df, ctfile.ChangeMode.DEFAULT: default_df}.get(mode)
        if read is None:
            raise ctfile.InvalidArgumentError(
                f"changes_df reads append_only and default change scans, found information={information!r}; "
                f"read {mode.value} with spark.read.format('ctfile').option('changes', '{mode.value}')"
            )
        changes = self.table.changes(start_version=start_version, end_version=end_version, information=mode)
        small = changes_in_driver(self.spark, self.table, changes)
        return small if small is not None else read(self.spark, self.table, changes)

    # ------------------------------------------------------------ DML on the executors

    def merge_builder(
        self, source: Any, on: Any, *, on_condition: Any = None, source_alias: str = "s", target_alias: str = "t",
    ) -> ctfile.MergeBuilder:
        """A MERGE of the DataFrame ``source`` into this table, with the
        methods and semantics of :meth:`ctfile.Table.merge_builder` (SPEC
        §Copy-on-write, MERGE): add ``when_...`` clauses in order, then
        ``execute(commit=)`` (a :class:`ctfile.CommitOptions`, or its
        shorthand ``app_id=``/``app_version=``) runs it on the executors and
        commits one version (a :class:`ctfile.CommitResult`).

        ``on``: a key column, a sequence of them, a mapping of table column
        to source column, or an ON condition as Spark SQL text
        (``"t.id = s.id AND t.region = 'EU'"``: its equalities of a table
        and a source column are the key pairs, the rest joins
        ``on_condition``). Conditions and values are Spark SQL strings
        (quote string literals: ``"'EUR'"``) or Columns over the sides the
        clause sees, named ``t.x`` and ``s.x`` (the aliases as given) or by
        the name alone where Spark resolves it; a SET or VALUES value may
        also be a Python value (a literal). See :mod:`ctfile.spark.merge`.

        Raises
        ------
        InvalidArgumentError
            A malformed clause or ``on``, when it is given; at ``execute``,
            a table row matched by two source rows one of which would update
            it (naming its key), before anything is written.
        SchemaMismatchError
            At ``execute``: a column either side lacks, a type that does not
            fit; nothing is left written.
        """
        from ctfile.spark.merge import SPARK_EXPRESSIONS, merge_on, run_builder

        source = spark_dataframe(source)
        keys, on_condition = merge_on(on, on_condition, self.table.schema.names, source.columns,
                                      source_alias=source_alias, target_alias=target_alias)
        return ctfile.MergeBuilder.start(
            run_builder(self, source), keys, on_condition=on_condition, source_alias=source_alias,
            target_alias=target_alias, expressions=SPARK_EXPRESSIONS,
        )

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        when_matched: str | None = "update",
        when_not_matched: str | None = "insert",
        commit: ctfile.CommitOptions | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> ctfile.CommitResult:
        """Upsert the DataFrame ``source`` on the key columns ``on``, with the
        semantics of :meth:`ctfile.Table.merge` (one source row per key, the
        columns a MERGE needs, the no-op rule, change capture): the
        shorthand of :meth:`merge_builder` (``WHEN MATCHED THEN UPDATE SET
        *`` or ``DELETE``, ``WHEN NOT MATCHED THEN INSERT *``), run on the
        executors and committed as one version. ``commit`` (a
        :class:`ctfile.CommitOptions`, or its shorthand
        ``app_id``/``app_version``: a streaming query's id and
        ``foreachBatch``'s batch id) makes it exactly-once: a batch already
        committed commits nothing.

        Raises
        ------
        InvalidArgumentError
            Two source rows with one key, an unknown action; nothing is written.
        SchemaMismatchError
            A key or column the table lacks, a type that does not fit, a null
            for a non-nullable column; nothing is left written.
        """
        from ctfile.spark.merge import shorthand_merge

        params = {"on": on if isinstance(on, str) else list(on) if isinstance(on, Sequence) else on,
                  "whenMatched": when_matched, "whenNotMatched": when_not_matched, "engine": "spark"}
        statement = shorthand_merge(self.spark, spark_dataframe(source), on, when_matched, when_not_matched)
        try:
            return self.table.run_statement("MERGE", statement.run, parameters=params, commit=commit, app_id=app_id,
                                            app_version=app_version)
        finally:
            statement.close()

    def update(
        self, condition: Any = None, set: Mapping[str, Any] | None = None, *,
        commit: ctfile.CommitOptions | None = None, app_id: str | None = None, app_version: int | None = None,
    ) -> ctfile.CommitResult:
        """Set columns where ``condition`` (a Spark SQL string or Column; None:
        every row) holds. ``set`` maps a column to a Spark SQL expression
        string (``"price * 2"``; quote literals: ``"'EUR'"``), a Column, or a
        plain Python value. Semantics as :meth:`ctfile.Table.update`."""
        statement = update_statement(self.spark, condition, set)
        params = {"predicate": _text(condition), "set": {k: _text(v) for k, v in set.items()}, "engine": "spark"}
        return self.table.run_statement("UPDATE", statement.run, parameters=params, commit=commit, app_id=app_id,
                                        app_version=app_version)

    def delete(
        self, condition: Any = None, *, commit: ctfile.CommitOptions | None = None, app_id: str | None = None,
        app_version: int | None = None,
    ) -> ctfile.CommitResult:
        """Delete the rows where ``condition`` (a Spark SQL string or Column;
        None: every row) holds. Semantics as :meth:`ctfile.Table.delete`."""
        statement = delete_statement(self.spark, condition)
        params = {"predicate": _text(condition), "engine": "spark"}
        return self.table.run_statement("DELETE", statement.run, parameters=params, commit=commit, app_id=app_id,
                                        app_version=app_version)

    @contextlib.contextmanager
    def transaction(
        self, *, commit: ctfile.CommitOptions | None = None, app_id: str | None = None, app_version: int | None = None,
        consuming: ctfile.Stream | None = None, refresh: ctfile.RefreshInfo | None = None,
        refresh_definition: ctfile.DerivedDefinition | None = None,
    ) -> Iterator[SparkTransaction]:
        """Several statements (``merge_builder(...).execute()``, ``merge``,
        ``update``, ``delete``, ``insert``) committed as one version when
        the block is left (:class:`ctfile.spark.transaction.SparkTransaction`);
        nothing is committed when it raises. ``commit`` (or its shorthand
        ``app_id``/``app_version``) and ``consuming`` as for :meth:`ctfile.Table.transaction`: a batch
        already committed is a replay whose statements do nothing; a named
        stream's pending changes (``consuming.pending()``, pinned when the
        block begins) are consumed exactly once, with the commit.
        ``refresh`` (and ``refresh_definition``) make it the refresh of a
        derived table, as for :meth:`ctfile.Table.transaction`: the only
        way to change a derived table's rows (SPEC §Derived tables).

        Raises
        ------
        CommitConflictError
            A concurrent commit conflicts with a statement's reads or
            writes (the statements are not re-run).
        """
        tx = self.table.transaction(parameters={"engine": "spark"}, commit=commit, app_id=app_id,
                                    app_version=app_version, consuming=consuming, refresh=refresh,
                                    refresh_definition=refresh_definition)
        with tx:
            yield SparkTransaction(self, tx)

    def restore(self, *, version: int | None = None, timestamp: Any = None) -> ctfile.CommitResult:
        """RESTORE the table to ``version`` or ``timestamp`` (exactly one) in
        one commit: :meth:`ctfile.Table.restore`, which needs no Spark job
        (it re-adds files and writes none)."""
        return self.table.restore(version=version, timestamp=timestamp)


def _text(v: Any) -> str:
    return "true" if v is None else str(v)
