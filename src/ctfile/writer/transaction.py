"""A transaction with DML statements: ``with table.transaction() as tx: ...``."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import FEATURE_SCHEMA_EVOLUTION, Partition
from ctfile.format.derived import ALTER_OPERATION, REFRESH_OPERATION, DerivedDefinition, RefreshInfo
from ctfile.format.errors import (
    CtfileError, DerivedTableError, InvalidArgumentError, SchemaMismatchError, VersionNotFoundError,
)
from ctfile.format.append_only import refuse_row_removal
from ctfile.format.properties import CLUSTER_BY, TableProperties
from ctfile.format.schema import Schema
from ctfile.format.schema_evolution import (
    SchemaChange,
    SchemaEditor,
    changes_need_feature,
    diff_schemas,
    replacement_schema,
    retires_ids,
)
from ctfile.format.validators import is_int
from ctfile.log.commit_options import CommitOptions
from ctfile.log.transaction import CommitResult, Transaction
from ctfile.writer import derived as derived_writes
from ctfile.writer import dml
from ctfile.writer import merge_run
from ctfile.writer.merge_builder import MergeBuilder
from ctfile.writer.merge_statement import MergeStatement
from ctfile.writer.change_writer import ChangeWriter
from ctfile.writer.compaction import CompactionPlan, plan_auto_compaction, plan_compaction, run_compaction
from ctfile.writer.restore import RestorePlan, apply_restore, check_files, plan_restore

log = logging.getLogger("ctfile")

_NO_ROWS = {"inserted": 0, "updated": 0, "deleted": 0}  # a replayed statement's counts


class WriteTransaction(Transaction):
    """A :class:`~ctfile.log.transaction.Transaction` whose statements are DML.

    Every statement sees the effects of the earlier ones in the same
    transaction; all of them commit as one version. In a transaction that is
    a replay of an application batch already committed (:attr:`is_replay`,
    after :meth:`set_app_transaction`), statements do nothing and return 0.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
    >>> batch = ctfile.CommitOptions(app_id="loader", app_version=7)
    >>> with t.transaction(commit=batch) as tx:
    ...     tx.insert(pa.table({"id": [1, 2]}))
    2
    >>> with t.transaction(commit=batch) as tx:   # the same batch again
    ...     tx.insert(pa.table({"id": [1, 2]}))
    0
    >>> tx.result.committed, tx.result.app_transaction_replayed, t.to_arrow().num_rows
    (False, True, 2)

    With ``ctfile.changeCapture = before_after`` in the version read, each
    statement's change rows go to :attr:`changes`; a statement that raises
    leaves none, and the commit consolidates the rows of statements that
    touched the same rows (:mod:`ctfile.writer.change_writer`).
    """

    _change_writer: ChangeWriter | None = None
    #: Statements begun, for :class:`~ctfile.writer.merge_run.PreparedMerge`'s state.
    _statements_begun: int = 0
    #: The version a :meth:`restore` of this transaction restores (None: none).
    _restored_version: int | None = None
    #: SPEC §Derived tables: the definition a refresh commit records (None: the current one).
    _refresh_definition: DerivedDefinition | None = None

    def begin_refresh(self, refresh: RefreshInfo, *, definition: DerivedDefinition | None = None) -> None:
        """Make this transaction a refresh of a derived table (SPEC §Derived
        tables): its statements may change the table's rows, and its commit
        (operation ``REFRESH``) records ``refresh`` in ``commitInfo.refresh``
        and the new frontier in ``metadata.derived`` (``definition``, if
        given, replaces the definition: a ``REINITIALIZE``). A refresh whose
        frontier and data timestamp are already recorded commits nothing.

        Raises
        ------
        DerivedTableError
            The table is not derived.
        InvalidArgumentError
            ``refresh`` is not a :class:`~ctfile.RefreshInfo`, its frontier does
            not name the sources, or the transaction already holds a statement.
        """
        self._check_open()
        derived_writes.check_refresh(self.base.metadata, refresh, definition, self.storage.uri)
        if not self.is_empty or self.refresh is not None:
            raise InvalidArgumentError("begin_refresh() must come first in its transaction, and once")
        self.refresh, self._refresh_definition = refresh, definition
        self.operation = REFRESH_OPERATION

    def update_refresh(
        self, *, action: Any = None, reason: str | None = None, rows_in: int | None = None,
        rows_out: int | None = None, duration_ms: int | None = None,
    ) -> RefreshInfo:
        """Replace fields of the refresh record before the commit, once the
        statements know them (the rows a MERGE changed, how long it took);
        the frontier and data timestamp stay those the refresh began with.
        Returns the new record (checked as :class:`~ctfile.RefreshInfo` is).

        Raises
        ------
        DerivedTableError
            This transaction is not a refresh.
        InvalidArgumentError
            A value :class:`~ctfile.RefreshInfo` refuses.
        """
        self._check_open()
        if self.refresh is None:
            raise DerivedTableError(
                f"update_refresh on {self.storage.uri}: expected a refresh transaction (transaction(refresh=...)); "
                f"found a {self.operation} transaction"
            )
        given = {"action": action, "reason": reason, "rows_in": rows_in, "rows_out": rows_out,
                 "duration_ms": duration_ms}
        self.refresh = replace(self.refresh, **{k: v for k, v in given.items() if v is not None})
        return self.refresh

    def alter_derived(self, *, refresh_mode: Any, target_lag: str | None) -> bool:
        """Make this transaction an alter commit of a derived table (SPEC
        §Derived tables, changing a definition): its commit (operation
        ``ALTER DERIVED``, ``dataChange`` false, no rows) records
        ``refresh_mode`` and ``target_lag`` (None: no lag) in
        ``metadata.derived`` and keeps everything else, the frontier
        included. The only statement of its transaction. Returns whether
        anything changes (False: the transaction commits nothing).

        This storage-level step cannot compile the query, so it does not
        check that an ``incremental`` mode fits it:
        ``ctfile.spark.derived.DerivedTable.alter`` does, before calling it.

        Raises
        ------
        DerivedTableError
            The table is not derived.
        InvalidArgumentError
            An unknown mode, a lag that is neither None nor a non-empty
            string, or the transaction already holds a statement.
        """
        self._check_open()
        self._check_not_restoring()
        if self.is_refresh or self.has_statements or self.metadata is not self.base.metadata:
            raise InvalidArgumentError(
                "alter_derived() must be the only statement of its transaction: this transaction already wrote "
                "rows, changed the table's metadata or is a refresh"
            )
        new = derived_writes.altered_metadata(self.base.metadata, refresh_mode, target_lag, self.storage.uri)
        self.operation, self.data_change = ALTER_OPERATION, False  # no row changes: change scans skip it
        d = new.derived if new is not None else self.base.metadata.derived
        self.parameters.update({"refreshMode": d.refresh_mode.value, "targetLag": d.target_lag})
        if new is not None:
            self.set_metadata(new)
        return new is not None

    @property
    def is_refresh(self) -> bool:
        """Whether this transaction is a refresh of a derived table."""
        return self.refresh is not None

    def check_row_change(self, what: str) -> None:
        """Refuse ``what``, a statement that changes rows or the schema, on a
        derived table outside a refresh (:class:`~ctfile.DerivedTableError`
        naming ``derivedTables``, SPEC §Derived tables); engines that stage
        files themselves call it before writing any."""
        if not self.is_refresh:
            derived_writes.refuse_outside_refresh(self.base.metadata, what, self.storage.uri)

    def check_keeps_rows(self, what: str) -> None:
        """Refuse ``what``, a statement that deletes, changes or brings back
        rows, when the table is append-only (``ctfile.appendOnly`` in the
        version read or in the metadata this transaction sets:
        :class:`~ctfile.AppendOnlyError` naming the property, SPEC
        §Append-only tables); engines that stage files themselves call it
        before writing any. Inserts, insert-only MERGEs and compaction never
        call it."""
        committed = self.metadata.properties if self.metadata is not self.base.metadata else None
        refuse_row_removal(self.base.metadata.properties, what, self.storage.uri, committed=committed)

    @property
    def changes(self) -> ChangeWriter | None:
        """The change writer of the running statement (None when the
        transaction does not capture changes)."""
        return self._change_writer

    @contextlib.contextmanager
    def statement(self, *, compaction: bool = False, planned: bool = False) -> Iterator[None]:
        """Run one statement: its change rows are staged when it returns and
        discarded when it raises. The writer is made here, on the caller's
        thread, before the statement's workers use it.

        A compaction commits ``dataChange: false`` for every action of its
        entry (SPEC §Copy-on-write), so it cannot share a transaction with a
        statement that changes rows: either order is refused before anything
        is written (the rows changed would vanish from change scans).
        ``planned``: the statement is a worker's part of a job whose
        coordinator checked, when it planned the job, that it may change
        rows (:class:`~ctfile.RewriteJob`; SPEC §Derived tables)."""
        self._check_not_restoring()
        self._check_data_change(compaction)
        if not compaction and not planned:  # SPEC §Derived tables: only a refresh changes a derived table's rows
            self.check_row_change(self.operation)
        if self._change_writer is None and self.captures_changes:
            self._change_writer = ChangeWriter(self)
        self._statements_begun += 1
        try:
            yield
        except BaseException:
            if self._change_writer is not None:
                self._change_writer.discard_statement()
            raise
        if self._change_writer is not None:
            self._change_writer.finish_statement()

    def _check_data_change(self, compaction: bool) -> None:
        """Refuse a compaction after other statements, or a statement that
        changes rows after a compaction (see :meth:`statement`)."""
        if compaction and not self.is_empty:
            raise InvalidArgumentError(
                "compact() must be the only statement of its transaction: it commits dataChange false, and this "
                "transaction already changed rows or metadata"
            )
        if not compaction and not self.data_change:
            raise InvalidArgumentError(
                "a transaction that compacted (dataChange false) cannot also change rows; commit the compaction first"
            )

    def commit(self) -> CommitResult:
        """Commit the statements as one version; then, under
        ``ctfile.autoCompact``, the follow-up compaction
        (:func:`auto_compact`), reported in ``result.auto_compaction`` and
        in :attr:`result` (which statements and ``with`` blocks return)."""
        self.result = auto_compact(self, self._commit_statements())
        return self.result

    def _commit_statements(self) -> CommitResult:
        if self.is_refresh and not self._done and not self._record_refresh():
            return self.result  # type: ignore[return-value]
        if self._change_writer is not None and not self._done:
            try:
                self._change_writer.consolidate()
            except BaseException:
                self.abort()
                raise
        return super().commit()

    def _record_refresh(self) -> bool:
        """Put the refresh's metadata into the commit; False (nothing
        committed, :attr:`result` set) when the frontier is already recorded
        and nothing else was done (SPEC §Derived tables)."""
        assert self.refresh is not None and self.base.metadata.derived is not None
        recorded = derived_writes.is_recorded(self.base.metadata.derived, self.refresh)
        if recorded and self._refresh_definition is None and self.is_empty:
            super().commit()  # an empty transaction: commits nothing, sets the result
            return False
        if recorded and self._refresh_definition is None:
            self.abort()
            raise DerivedTableError(
                f"a refresh of {self.storage.uri} changed rows but records the frontier already recorded; "
                f"expected a new frontier or data timestamp, nothing was written (SPEC §Derived tables)"
            )
        try:
            self.set_metadata(derived_writes.refresh_metadata(self.metadata, self.refresh, self._refresh_definition,
                                                              self.storage.uri))
        except BaseException:
            self.abort()
            raise
        return True

    # ------------------------------------------------------------ schema changes

    def _check_schema_change_first(self, what: str) -> None:
        self._check_open()
        self._check_not_restoring()
        if self.has_statements or self.metadata is not self.base.metadata:
            raise InvalidArgumentError(
                f"{what} must come before the statements of its transaction, and once: this transaction already "
                f"wrote rows or changed the table's metadata"
            )

    def evolve_schema(self, edit: Callable[[SchemaEditor], None]) -> list[SchemaChange]:
        """Change the schema in this transaction (SPEC §Schema evolution):
        ``edit`` applies changes to a :class:`~ctfile.format.schema_evolution.SchemaEditor`
        over the schema read. The statements that follow write with the new
        schema. Adds the ``schemaEvolution`` feature when a change needs it.
        Returns the changes (empty: nothing changed, nothing is set)."""
        if not callable(edit):
            raise InvalidArgumentError(f"edit must be a callable taking a SchemaEditor, found {edit!r:.80}")
        self.check_row_change("SCHEMA CHANGE")
        self._check_schema_change_first("a schema change")
        md = self.metadata
        editor = SchemaEditor(md.schema, md.assigned_field_ids, derived_columns=self.is_refresh)
        edit(editor)
        if editor.schema == md.schema:
            return []
        self._check_keeps_cluster_keys(editor.schema)
        self.set_metadata(replace(md, schema=editor.schema, last_field_id=editor.last_field_id))
        if changes_need_feature(editor.changes):
            self.require_feature(FEATURE_SCHEMA_EVOLUTION, reader=True)
        return list(editor.changes)

    def replace_schema(self, schema: pa.Schema) -> list[SchemaChange]:
        """Replace the schema by ``schema`` (Spark's ``overwriteSchema``):
        fields of the same name and type keep their ids, others get new ones
        (:func:`~ctfile.format.schema_evolution.replacement_schema`). Meant to
        be followed by :meth:`truncate` and an insert: the rows written
        before cannot be assumed to fit the new schema."""
        self.check_row_change("REPLACE SCHEMA")
        self._check_schema_change_first("replacing the schema")
        md = self.metadata
        new, last = replacement_schema(md.schema, md.assigned_field_ids, schema,
                                       derived_columns=self._derivation_columns())
        if new == md.schema:
            return []
        self._check_keeps_cluster_keys(new)
        self.set_metadata(replace(md, schema=new, last_field_id=last))
        if retires_ids(md.schema, new):
            self.require_feature(FEATURE_SCHEMA_EVOLUTION, reader=True)
        return diff_schemas(md.schema, new)

    def _derivation_columns(self) -> tuple[str, ...]:
        """The ``_ct_dt_`` columns a schema written by this transaction may
        hold: those of the definition a refresh records (SPEC §Derived
        tables; a replace records a new one), none outside a refresh."""
        if not self.is_refresh:
            return ()
        target = self._refresh_definition or self.base.metadata.derived
        return target.hidden_columns if target is not None else ()

    def _check_keeps_cluster_keys(self, new: Schema) -> None:
        """Refuse a schema change that drops or renames a clustering key
        (SPEC §Clustering, writer requirements)."""
        old = self.metadata.schema
        for key in TableProperties.from_mapping(self.metadata.properties).cluster_by:
            if key in old.names and key not in new.names:
                raise SchemaMismatchError(
                    f"column {key!r} is a clustering key ({CLUSTER_BY} = "
                    f"{self.metadata.properties[CLUSTER_BY]!r}); set {CLUSTER_BY} without it before dropping "
                    f"or renaming it"
                )

    def _check_not_restoring(self) -> None:
        if self._restored_version is not None:
            raise InvalidArgumentError(
                f"this transaction restores version {self._restored_version}: a RESTORE is the only statement of "
                "its transaction (SPEC §Restore)"
            )

    def restore(self, version: int) -> RestorePlan:
        """RESTORE (SPEC §Restore): make the table equal to ``version`` in
        this transaction's commit, which must hold nothing else (operation
        ``RESTORE``). Re-adds the partitions of ``version`` that are not live
        (their rows come back with their row ids and row versions), removes
        those it does not hold, and sets its metadata back (the schema by
        field id; a field dropped since is refused); application
        transactions and streams are left as they are. Returns the plan
        (:class:`~ctfile.writer.restore.RestorePlan`); when the table already
        is that version, nothing is committed.

        Raises
        ------
        InvalidArgumentError
            ``version`` is not an int >= 0, or the transaction already holds
            a statement.
        VersionNotFoundError
            ``version`` is beyond the version read, or expired by a vacuum.
        SchemaMismatchError
            Its schema holds a field dropped since.
        MissingDataFileError
            A file it would re-add is gone; nothing is written.
        AppendOnlyError
            The table is append-only and the RESTORE would remove or re-add
            a partition (SPEC §Append-only tables); nothing is written.
        """
        self._check_open()
        derived_writes.refuse_outside_refresh(self.base.metadata, "RESTORE", self.storage.uri)
        if not is_int(version) or version < 0:
            raise InvalidArgumentError(f"the version to restore must be an int >= 0, found {version!r}")
        if self.has_statements or self.metadata is not self.base.metadata or self._restored_version is not None:
            raise InvalidArgumentError("restore() must be the only statement of its transaction (SPEC §Restore)")
        if version > self.base.version:
            raise VersionNotFoundError(
                f"cannot restore {self.storage.uri} to version {version}: the latest version is {self.base.version}"
            )
        self._restored_version = version
        self.operation = "RESTORE"
        self.parameters["version"] = version
        if self.is_replay:
            return RestorePlan(version, (), (), None)
        plan = plan_restore(self.base, self.log.load_state(version, latest=self.base.version))
        if plan.removed or plan.re_added:  # SPEC §Append-only tables: it removes or brings back rows
            self.check_keeps_rows("RESTORE")
        check_files(self.storage, plan.re_added, version=version)
        apply_restore(self, plan)
        return plan

    def insert(self, data: Any) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        with self.statement():
            return dml.insert(self, data)

    def delete(self, where: pc.Expression) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        self.check_keeps_rows("DELETE")  # SPEC §Append-only tables
        with self.statement():
            return dml.delete(self, where)

    def update(self, where: pc.Expression | None, set: Mapping[str, Any]) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        self.check_keeps_rows("UPDATE")  # SPEC §Append-only tables
        with self.statement():
            return dml.update(self, where, set)

    def merge(
        self,
        source: Any,
        on: str | Sequence[str],
        *,
        when_matched: str | None = "update",
        when_not_matched: str | None = "insert",
    ) -> dict[str, int]:
        """The shorthand MERGE (SPEC §Copy-on-write, MERGE, the shorthand),
        as :meth:`ctfile.Table.merge`; returns the counts."""
        self._check_open()
        if self.is_replay:
            return dict(_NO_ROWS)
        if when_matched is not None:  # SPEC §Append-only tables: only WHEN NOT MATCHED INSERT keeps rows
            self.check_keeps_rows("MERGE")
        with self.statement():
            return merge_run.merge(self, source, on, when_matched=when_matched, when_not_matched=when_not_matched)

    def merge_builder(
        self, source: Any, on: Any, *, on_condition: pc.Expression | None = None, source_alias: str = "s",
        target_alias: str = "t",
    ) -> MergeBuilder:
        """A MERGE of ``source`` as the next statement of this transaction
        (:class:`~ctfile.writer.merge_builder.MergeBuilder`, as from
        :meth:`ctfile.Table.merge_builder`); its ``execute()`` returns the
        ``inserted``/``updated``/``deleted`` counts.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("v", pa.string())]))
        >>> with t.transaction() as tx:
        ...     _ = tx.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
        ...     tx.merge_builder(pa.table({"id": [2]}), on="id").when_not_matched_by_source_delete().execute()
        {'inserted': 0, 'updated': 0, 'deleted': 1}
        >>> t.version, t.to_arrow().to_pylist()
        (1, [{'id': 2, 'v': 'b'}])
        """

        def run(statement: MergeStatement, _: CommitOptions) -> dict[str, int]:
            return self.execute_merge(statement, source)

        return MergeBuilder.start(run, on, on_condition=on_condition, source_alias=source_alias,
                                  target_alias=target_alias, in_transaction=True)

    def merge_candidates(self, statement: MergeStatement, source: Any) -> list[Partition]:
        """The live partitions the Python engine would read to run the MERGE
        ``statement`` (pyarrow expressions) of ``source`` as the next
        statement (SPEC §Copy-on-write, MERGE, candidates): to size the work
        before running it. Reads and writes nothing. :meth:`prepare_merge`
        gives them with the plan, so that running it plans it once."""
        return list(self.prepare_merge(statement, source).candidates)

    @property
    def _merge_state(self) -> tuple[int, Any]:
        """What a :class:`~ctfile.writer.merge_run.PreparedMerge` was
        planned over: the statements begun and the metadata object (a
        schema change replaces it; compared by identity, held so its id
        cannot be reused)."""
        return self._statements_begun, self.metadata

    def prepare_merge(self, statement: MergeStatement, source: Any) -> merge_run.PreparedMerge:
        """The MERGE ``statement`` (pyarrow expressions) of ``source``
        planned as the next statement, with the live partitions it would
        read (SPEC §Copy-on-write, MERGE, candidates), for
        :meth:`execute_prepared_merge`. Reads and writes nothing.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]), partition_rows=2)
        >>> _ = t.insert(pa.table({"id": [1, 2, 3, 4]}))
        >>> stmt = t.merge_builder(pa.table({"id": [4]}), on="id").when_matched_delete().statement
        >>> with t.transaction(operation="MERGE") as tx:
        ...     prepared = tx.prepare_merge(stmt, pa.table({"id": [4]}))
        ...     prepared.candidate_rows, tx.execute_prepared_merge(prepared)
        (2, {'inserted': 0, 'updated': 0, 'deleted': 1})
        """
        return merge_run.prepare(self, statement, source, self._merge_state)

    def holds_prepared(self, prepared: merge_run.PreparedMerge) -> bool:
        """Whether ``prepared`` was planned over this transaction's current
        state (no statement or schema change came between)."""
        begun, metadata = self._merge_state
        return prepared.state[0] == begun and prepared.state[1] is metadata

    def execute_prepared_merge(self, prepared: merge_run.PreparedMerge) -> dict[str, int]:
        """Run a MERGE :meth:`prepare_merge` planned as the next statement
        (planned again if another statement or a schema change came
        between); returns the counts."""
        self._check_open()
        if self.is_replay:
            return dict(_NO_ROWS)
        if not prepared.merge.plan.statement.inserts_only:  # SPEC §Append-only tables
            self.check_keeps_rows("MERGE")
        if not self.holds_prepared(prepared):
            return self.execute_merge(prepared.merge.plan.statement, prepared.source)
        with self.statement():
            return merge_run.run_merge(self, prepared.merge, prepared.candidates)

    def execute_merge(self, statement: MergeStatement, source: Any) -> dict[str, int]:
        """Run a MERGE ``statement`` of ``source`` as the next statement;
        returns the counts."""
        self._check_open()
        if self.is_replay:
            return dict(_NO_ROWS)
        if not statement.inserts_only:  # SPEC §Append-only tables
            self.check_keeps_rows("MERGE")
        with self.statement():
            return merge_run.execute(self, statement, source)

    def compact(self, *, target_rows: int | None = None, max_rows: int | None = None) -> int:
        """COMPACT (SPEC §Copy-on-write; with clustering keys, the recluster
        of SPEC §Clustering): returns the number of partitions rewritten."""
        self._check_open()
        if self.is_replay:
            return 0
        return self.compact_plan(plan_compaction(self, target_rows=target_rows, max_rows=max_rows))

    def compact_plan(self, plan: CompactionPlan) -> int:
        """Run a planned compaction (:mod:`ctfile.writer.compaction`) as
        this transaction's only statement."""
        self._check_open()
        with self.statement(compaction=True):
            return run_compaction(self, plan, dml.writer_for(self, target_rows=plan.target_rows))

    def truncate(self) -> int:
        self._check_open()
        if self.is_replay:
            return 0
        self.check_keeps_rows("OVERWRITE" if self.operation == "OVERWRITE" else "TRUNCATE")  # SPEC §Append-only tables
        with self.statement():
            return dml.truncate(self)


def auto_compact(committed: WriteTransaction, result: CommitResult) -> CommitResult:
    """After ``committed`` committed ``result``: the result, with the
    follow-up compaction ``ctfile.autoCompact`` asks for, if any, in its
    ``auto_compaction`` (:func:`~ctfile.writer.compaction.plan_auto_compaction`).
    Attempted once, as its own commit: a conflict or an error is logged and
    abandons it (its files are deleted), never raised (SPEC §Clustering,
    automatic compaction)."""
    state = committed.committed_state
    if state is None or not result.committed or not committed.data_change:
        return result
    if not TableProperties.from_mapping(state.metadata.properties).auto_compact:
        return result
    tx = WriteTransaction(committed.log, state, operation="COMPACT", parameters={"auto": True})
    tx.on_commit = committed.on_commit
    try:
        plan = plan_auto_compaction(tx, set(committed.staged_data_paths()))
        if plan is None:
            return result
        tx.compact_plan(plan)
        committed.result = replace(result, auto_compaction=tx.commit())
        return committed.result
    except (CtfileError, OSError) as e:
        tx.abort()
        log.warning("automatic compaction after version %d of %s abandoned: %s", result.version, tx.storage.uri, e)
        return result
