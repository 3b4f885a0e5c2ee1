"""DELETE, UPDATE and MERGE whose rows another engine finds, rewritten by
many workers and committed once (SPEC §Copy-on-write, distributed
statements).

A :class:`RewriteJob` is planned on a coordinator from an open
:class:`~ctfile.WriteTransaction` (:meth:`RewriteJob.for_delete`,
:meth:`for_update`, :meth:`for_merge`): the statement is checked there, as
the Python helpers check it, before any file is written. The job is a
picklable frozen dataclass. Workers call :meth:`RewriteJob.rewrite` once per
partition holding matched rows, naming the rows by their position in the
file (``ScanTask.to_batches(positions=True)``) with their new values, and
:meth:`RewriteJob.insert` for a MERGE's unmatched source rows. The
coordinator stages what they return in the transaction
(:meth:`RewriteJob.stage`), which commits as one version, with the conflict
detection of any statement.

A rewrite applies the same code as a statement run in one process
(:func:`ctfile.writer.dml.rewrite_positions`): hidden columns, the no-op
rule, clustering, and the change rows of a table with change capture, which
each worker writes into change files of its own.

Examples
--------
>>> import ctfile, pyarrow as pa, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("v", pa.string())]))
>>> _ = t.insert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
>>> with t.transaction(operation="UPDATE") as tx:
...     job = RewriteJob.for_update(tx, pa.schema([("v", pa.string())]))
...     path = job.candidates[0].path                      # a worker found row 1 of it:
...     done = job.rewrite(path, pa.table({"_ct_pos": [1], "v": ["B"]}))
...     job.stage(tx, [done])
>>> sorted(t.to_arrow().column("v").to_pylist()), tx.result.num_updated_rows
(['B', 'a', 'c'], 1)
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Metadata, Partition, Protocol
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.properties import TableProperties
from ctfile.format.schema import Schema
from ctfile.log.conflicts import ReadPredicate
from ctfile.log.location import TableLocation
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState
from ctfile.log.staged import StagedFile
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import prune
from ctfile.reader.scan_task import POSITION_COLUMN
from ctfile.writer.merge import check_shorthand_source, shorthand_statement
from ctfile.writer.merge_plan import MergePlan, plan_statement
from ctfile.writer.merge_rows import CLAUSE_COLUMN, inserted_rows, row_deletes, updated_values
from ctfile.writer.merge_statement import MergeStatement
from ctfile.writer.distributed import WriteJob
from ctfile.writer.dml import Rewrite, rewrite_positions
from ctfile.writer.input import Conformer
from ctfile.writer.transaction import WriteTransaction


class RewriteKind(str, enum.Enum):
    """The statement a :class:`RewriteJob` runs (its commit's operation)."""

    DELETE = "DELETE"
    UPDATE = "UPDATE"
    MERGE = "MERGE"


#: The column of a MERGE's rows that says, row by row, what
#: :meth:`RewriteJob.rewrite` does to the row at its position.
ACTION_COLUMN = "_ct_action"


class RowAction(str, enum.Enum):
    """What a rewrite does to one row (:data:`ACTION_COLUMN`)."""

    UPDATE = "update"
    DELETE = "delete"

    @classmethod
    def deletes(cls, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Per row, whether ``column`` (action names) deletes it.

        >>> RowAction.deletes(pa.array(["delete", "update"])).tolist()
        [True, False]
        >>> RowAction.deletes(pa.array(["upsert"]))
        Traceback (most recent call last):
        ...
        ctfile.format.errors.InvalidArgumentError: _ct_action must hold 'update' or 'delete', found ['upsert']
        """
        names = set(pc.unique(column).to_pylist())
        unknown = sorted(map(str, names - {a.value for a in cls}))
        if unknown:
            raise InvalidArgumentError(f"{ACTION_COLUMN} must hold 'update' or 'delete', found {unknown}")
        return np.asarray(pc.equal(column, cls.DELETE.value).to_numpy(zero_copy_only=False), dtype=bool)


@dataclass(frozen=True)
class PartitionRewrite:
    """What a worker returns for one partition: the files that replace it
    (none when no row survives), its change files, and counts.
    ``unchanged``: rows matched, but none changed (the partition stays)."""

    path: str
    files: tuple[StagedFile, ...] = ()
    changes: tuple[StagedFile, ...] = ()
    deleted: int = 0
    updated: int = 0
    copied: int = 0
    unchanged: bool = False
    deletes_all_rows: bool = False
    #: Change rows were captured out of a partition an earlier statement of
    #: the transaction wrote: the transaction consolidates its change rows.
    overlaps: bool = False
    #: The numbers of the source rows a MERGE run by the Python engine on
    #: the worker matched here (:class:`ctfile.writer.merge_spread.SpreadMerge`).
    matched_source: Any = None

    @property
    def written(self) -> list[str]:
        """Every file this rewrite wrote."""
        return [f.path for f in self.files + self.changes]


@dataclass(frozen=True)
class RewriteJob:
    """A planned distributed DELETE, UPDATE or MERGE (see the module docstring).

    ``candidates`` are the live partitions at ``version`` that may hold a
    matched row, in table order: the engine searches exactly these, and
    they are the statement's read set. ``set_columns`` are the columns a
    rewrite's rows carry new values for (none for a DELETE or a keyed
    delete).
    """

    location: TableLocation
    version: int
    protocol: Protocol
    metadata: Metadata
    kind: RewriteKind
    candidates: tuple[Partition, ...]
    set_columns: tuple[str, ...] = ()
    merge: MergePlan | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    # ------------------------------------------------------------ planning (coordinator)

    @classmethod
    def _plan(cls, tx: WriteTransaction, kind: RewriteKind, candidates: Iterable[Partition], **kw) -> "RewriteJob":
        """The job over ``candidates``: live partitions of ``tx``, which
        include the files earlier statements of ``tx`` staged (they exist on
        storage, so workers read them like any other; SPEC §Copy-on-write:
        each statement sees the effects of the earlier ones)."""
        tx.check_row_change(kind.value)  # SPEC §Derived tables: before any file is written
        parts = tuple(p for p in candidates if p.num_records)
        return cls(TableLocation.of(tx.storage), tx.base.version, tx.base.protocol, tx.metadata, kind, parts, **kw)

    @classmethod
    def for_delete(cls, tx: WriteTransaction, *, prune_by: pc.Expression | None = None) -> "RewriteJob":
        """A DELETE in ``tx``. The candidates are the live partitions whose
        statistics allow a row satisfying ``prune_by`` (every live partition
        when None).

        ``prune_by`` is a pyarrow expression true for every row the engine's
        condition selects (the condition itself, or a weaker translation of
        it, such as the conjuncts pyarrow can express): it only prunes; the
        engine still evaluates its own condition on the candidates' rows.
        """
        tx.check_keeps_rows(RewriteKind.DELETE.value)  # SPEC §Append-only tables
        return cls._plan(tx, RewriteKind.DELETE, prune(tx.live_partitions(), tx.schema, prune_by))

    @classmethod
    def for_update(
        cls, tx: WriteTransaction, set_schema: pa.Schema, *, prune_by: pc.Expression | None = None
    ) -> "RewriteJob":
        """An UPDATE in ``tx`` setting the columns of ``set_schema`` (the
        types of the engine's SET values), its candidates pruned by
        ``prune_by`` as in :meth:`for_delete`.

        Raises
        ------
        SchemaMismatchError
            A column not in the table, or a value type that does not fit it.
        """
        tx.check_keeps_rows(RewriteKind.UPDATE.value)  # SPEC §Append-only tables
        names = list(set_schema.names)
        if not names:
            raise InvalidArgumentError("set must name at least one column")
        Conformer(tx.schema, what="set", columns=[n for n in names if n in tx.schema.names]).check_schema(set_schema)
        candidates = prune(tx.live_partitions(), tx.schema, prune_by)
        return cls._plan(tx, RewriteKind.UPDATE, candidates, set_columns=tuple(names))

    @classmethod
    def for_merge(
        cls,
        tx: WriteTransaction,
        source_schema: pa.Schema,
        on: str | Sequence[str],
        *,
        when_matched: Any,
        when_not_matched: Any,
        key_ranges: Mapping[str, tuple[Any, Any]] | None = None,
    ) -> "RewriteJob":
        """The shorthand MERGE in ``tx`` of a source with ``source_schema``,
        checked as :meth:`ctfile.Table.merge` checks it (:meth:`for_merge_statement`
        of its statement)."""
        statement = shorthand_statement(on, when_matched=when_matched, when_not_matched=when_not_matched)
        job = cls.for_merge_statement(tx, statement, source_schema, key_ranges=key_ranges)
        check_shorthand_source(tx.schema, source_schema, statement)
        return job

    @classmethod
    def for_prepared_merge(cls, tx: WriteTransaction, prepared: Any) -> "RewriteJob":
        """The job over the candidates of a MERGE ``prepared`` in ``tx``
        (:meth:`ctfile.WriteTransaction.prepare_merge`, which checked it),
        whose workers run it with the Python engine
        (:class:`ctfile.writer.merge_spread.SpreadMerge`)."""
        plan = prepared.merge.plan
        return cls._plan(tx, RewriteKind.MERGE, prepared.candidates, set_columns=plan.update_columns, merge=plan)

    @classmethod
    def for_merge_statement(
        cls,
        tx: WriteTransaction,
        statement: MergeStatement,
        source_schema: pa.Schema,
        *,
        key_ranges: Mapping[str, tuple[Any, Any]] | None = None,
        prune_by: pc.Expression | None = None,
        match_prune_by: pc.Expression | None = None,
        value_types: Mapping[str, pa.DataType] | None = None,
    ) -> "RewriteJob":
        """A MERGE ``statement`` in ``tx`` of a source with
        ``source_schema``, checked against the table
        (:func:`~ctfile.writer.merge_plan.plan_statement`; ``value_types``:
        the types of values assigned to columns schema evolution adds). The
        job's ``merge`` is the checked plan; its ``set_columns`` the
        columns the statement's updates set (:attr:`MergePlan.update_columns`),
        which every updated row carries. A statement with schema evolution
        changes the schema in ``tx`` first: the job reads and writes in the
        new schema.

        Candidates: ``key_ranges`` (key column -> (min, max) of the source's
        non-null values; ``(None, None)`` when every value is null) prunes
        by statistics (SPEC §Copy-on-write, MERGE: by each key column's
        range; a range with a NaN bound does not prune), and
        ``match_prune_by`` further (a pyarrow expression over the table's
        columns true for every table row a source row may match and a clause
        act on: the target's part of the ON condition, say). A statement with
        ``NOT MATCHED BY SOURCE`` clauses also reads the partitions that may
        hold a row they select: those whose statistics allow ``prune_by``
        (a pyarrow expression over the table's columns true for every such
        row; every live partition when None).
        """
        tx.check_row_change(RewriteKind.MERGE.value)  # SPEC §Derived tables: before the plan's own checks
        if not statement.inserts_only:  # SPEC §Append-only tables: WHEN NOT MATCHED INSERT only is an insert
            tx.check_keeps_rows(RewriteKind.MERGE.value)
        md = tx.metadata
        plan = plan_statement(md.schema, md.assigned_field_ids, statement, source_schema, value_types=value_types)
        if plan.evolution is not None:
            tx.evolve_schema(plan.evolution.apply)
        live = tx.live_partitions()
        paths: set[str] = set()
        if statement.matches_source:
            paths.update(p.path for p in _by_key(live, tx.schema, plan.keys, key_ranges, match_prune_by))
        if plan.reads_unmatched_target:
            paths.update(p.path for p in prune(live, tx.schema, prune_by))
        candidates = [p for p in live if p.path in paths]
        return cls._plan(tx, RewriteKind.MERGE, candidates, set_columns=plan.update_columns, merge=plan)

    # ------------------------------------------------------------ workers

    @property
    def schema(self) -> Schema:
        return self.metadata.schema

    @property
    def partition_rows(self) -> int:
        """``ctfile.partitionRows`` of the version read: the rows a written partition holds."""
        return TableProperties.from_mapping(self.metadata.properties).partition_rows

    def partition(self, path: str) -> Partition:
        """The candidate at ``path``."""
        for p in self.candidates:
            if p.path == path:
                return p
        raise InvalidArgumentError(f"{path} is not a candidate partition of this {self.kind.value} job")

    def rewrite(self, path: str, rows: pa.Table) -> PartitionRewrite:
        """Rewrite the candidate at ``path``: the rows at the positions in
        ``rows``'s :data:`~ctfile.reader.scan_task.POSITION_COLUMN` are
        deleted, or (when the job has ``set_columns``) take the values of
        those columns of ``rows``. A MERGE's rows may say which, row by
        row, in :data:`ACTION_COLUMN` (:class:`RowAction` values); a
        deleted row's values are ignored. Or they name the clause that
        applies to each (:data:`~ctfile.writer.merge_rows.CLAUSE_COLUMN`)
        with the values it assigns in the engine's types
        (:mod:`ctfile.writer.merge_rows`): the writer then converts them
        and takes a row's own value for the columns its clause does not
        set. One rewrite applies them together
        (:func:`~ctfile.writer.dml.rewrite_positions`).

        Raises
        ------
        InvalidArgumentError
            A position twice, unless every row at it is a delete (two source
            rows matched one row, SPEC §Copy-on-write, MERGE, multiple
            matches), a position out of range, or an unknown action.
        SchemaMismatchError
            A value that does not fit its column (a null for a non-nullable
            one). Nothing is left written.
        """
        p = self.partition(path)
        positions, deleted, rows = self._positions(path, rows)
        if len(positions) and (positions[0] < 0 or positions[-1] >= p.num_records):
            raise InvalidArgumentError(f"row positions of {path} must lie in [0, {p.num_records}), found {positions[-1]}")

        def apply(tx: WriteTransaction, p: Partition, t: pa.Table) -> Rewrite | None:
            return rewrite_positions(tx, p, t, positions, self._new_values(t, positions, rows), deleted=deleted)

        return self.rewrite_by(path, apply)

    def rewrite_by(self, path: str, apply: Callable[[WriteTransaction, Partition, pa.Table], Rewrite | None]
                   ) -> PartitionRewrite:
        """Rewrite the candidate at ``path`` by ``apply(tx, partition,
        rows)``, which returns the rewrite of the partition read as
        ``rows`` (hidden columns materialized) in ``tx``, a transaction
        over that partition alone, or None when no row changes. What it
        stages there (files, change files) is returned for the
        coordinator's :meth:`stage`; a rewrite's ``matched_source`` (the
        source rows a MERGE matched) is passed on."""
        p = self.partition(path)
        storage = self.location.open()
        state = TableState(self.version, 0, self.protocol, self.metadata, {p.path: p}, 0)
        tx = WriteTransaction(ManifestLog(storage), state, operation=self.kind.value)
        t = read_partition_table(storage, p, self.schema, hidden=True)
        with tx.statement(planned=True):  # checked by the coordinator's plan (_plan)
            r = apply(tx, p, t)
            overlaps = tx.changes is not None and tx.changes.overlaps
        matched = None if r is None else r.matched_source
        if r is None or r.unchanged:
            return PartitionRewrite(path, unchanged=True, matched_source=matched)
        return PartitionRewrite(
            path, tuple(r.files), tuple(tx.staged_changes()), r.deleted, r.updated, r.copied,
            deletes_all_rows=r.deletes_all_rows, overlaps=overlaps, matched_source=matched,
        )

    def _new_values(self, t: pa.Table, positions: np.ndarray, rows: pa.Table) -> dict[str, pa.Array] | None:
        """The values of :attr:`set_columns`, one per position (None: none)."""
        if not self.set_columns:
            return None
        if CLAUSE_COLUMN in rows.column_names and self.merge is not None:
            return updated_values(self.merge, t, positions, rows)
        return {c: rows.column(c).combine_chunks() for c in self.set_columns}

    def _positions(self, path: str, rows: pa.Table) -> tuple[np.ndarray, np.ndarray | None, pa.Table]:
        """``rows`` in position order, one row per position: their
        positions, which are deleted (None: as the job's kind says), and the
        rows. Rows of one position that all delete it become one."""
        rows = rows.take(pc.sort_indices(rows.column(POSITION_COLUMN)))
        positions = rows.column(POSITION_COLUMN).to_numpy()
        deleted = self._row_deletes(rows)
        repeated = np.flatnonzero(np.diff(positions) == 0) if len(positions) > 1 else np.array([], dtype=np.int64)
        if not len(repeated):
            return positions, deleted, rows
        if deleted is None or not (deleted[repeated] & deleted[repeated + 1]).all():
            raise InvalidArgumentError(
                f"two rows of the source matched the same row of {path} (position "
                f"{int(positions[repeated[0]])}); a {self.kind.value} needs at most one source row per "
                "target row it updates"
            )
        keep = np.ones(len(positions), dtype=bool)
        keep[repeated + 1] = False
        return positions[keep], deleted[keep], rows.filter(pa.array(keep))

    def _row_deletes(self, rows: pa.Table) -> np.ndarray | None:
        """Per row, whether it is deleted, from :data:`ACTION_COLUMN` or
        the clause it names (None: as the job's kind says)."""
        if CLAUSE_COLUMN in rows.column_names and self.merge is not None:
            return row_deletes(self.merge, rows)
        if ACTION_COLUMN in rows.column_names:
            return RowAction.deletes(rows.column(ACTION_COLUMN))
        return None

    def insert(self, data: Any) -> list[StagedFile]:
        """Write a MERGE's unmatched source rows (any input
        :meth:`ctfile.WriteJob.write` takes) as new partitions; a missing
        nullable column is null. A table with
        :data:`~ctfile.writer.merge_rows.CLAUSE_COLUMN` names the ``NOT
        MATCHED`` clause of each row, whose values it holds as
        :meth:`rewrite` describes (:func:`~ctfile.writer.merge_rows.inserted_rows`)."""
        if self.merge is None or not self.merge.inserts_unmatched:
            raise InvalidArgumentError(f"this {self.kind.value} job inserts no rows")
        if isinstance(data, pa.Table) and CLAUSE_COLUMN in data.column_names:
            data = inserted_rows(self.merge, data)
        props = dict(self.metadata.properties)
        job = WriteJob(self.location, self.schema, props, self.version, "append", self.job_id)
        return job.write(data)

    # ------------------------------------------------------------ coordinator

    def stage(
        self,
        tx: WriteTransaction,
        rewrites: Iterable[PartitionRewrite],
        inserted: Iterable[StagedFile] = (),
        *,
        predicate: ReadPredicate | None = None,
    ) -> None:
        """Stage the workers' results in ``tx`` (the transaction the job was
        planned in), rewrites in table order, then the inserted files. The
        candidates become the read set; ``predicate`` (the statement's rows,
        evaluated by the engine when a winner is checked) its read
        predicate. Nothing is staged for a replayed application batch: the
        files are deleted."""
        if tx.base.version != self.version:
            raise InvalidArgumentError(f"this job read version {self.version}; the transaction read {tx.base.version}")
        rewrites, inserted = list(rewrites), list(inserted)
        if tx.is_replay:
            self.discard(rewrites, inserted)
            return
        for p in self.candidates:
            tx.mark_read(p)
        if predicate is not None:
            tx.record_read_predicate(predicate)
        order = {p.path: i for i, p in enumerate(self.candidates)}
        for r in sorted(rewrites, key=lambda r: order[r.path]):
            if not r.unchanged:
                self._stage_rewrite(tx, r)
        tx.stage(inserted)
        tx.add_metrics(inserted=sum(f.num_records for f in inserted))

    def _stage_rewrite(self, tx: WriteTransaction, r: PartitionRewrite) -> None:
        """Stage one worker's rewrite of a candidate: its removal, the files
        and change files written, their counts."""
        tx.remove(self.partition(r.path), deletes_all_rows=r.deletes_all_rows)
        tx.stage(list(r.files))
        tx.stage_changes(list(r.changes))
        if r.overlaps and tx.changes is not None:
            tx.changes.overlaps = True
        tx.add_metrics(deleted=r.deleted, updated=r.updated, copied=r.copied)

    def discard(self, rewrites: Iterable[PartitionRewrite], inserted: Iterable[StagedFile] = ()) -> None:
        """Delete every file the workers wrote (a statement that failed)."""
        paths = [p for r in rewrites for p in r.written] + [f.path for f in inserted]
        self.location.open().delete(paths)


def _by_key(
    live: Sequence[Partition], schema: Schema, keys: Sequence[str], ranges: Mapping[str, tuple[Any, Any]] | None,
    prune_by: pc.Expression | None,
) -> list[Partition]:
    """The partitions that may hold a row a source row matches: by each key
    column's range of the source (``ranges``; None: every partition), then
    by ``prune_by``."""
    by_key = live if ranges is None else _prune_by_ranges(live, schema, keys, ranges)
    return prune(by_key, schema, prune_by)


def _prune_by_ranges(
    live: Sequence[Partition], schema: Schema, keys: Sequence[str], ranges: Mapping[str, tuple[Any, Any]]
) -> list[Partition]:
    """The partitions whose statistics may hold a key within ``ranges``."""
    expr = None
    for k in keys:
        lo, hi = ranges.get(k, (np.nan, np.nan))  # a key without a range does not prune
        if lo is None or hi is None:
            return []  # every source key is null there: no row can match
        if _is_nan(lo) or _is_nan(hi):
            continue
        bound = (pc.field(k) >= lo) & (pc.field(k) <= hi)
        expr = bound if expr is None else expr & bound
    if expr is None:
        return list(live)
    try:
        return prune(list(live), schema, expr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, SchemaMismatchError):
        return list(live)  # a bound the statistics cannot compare: no pruning, never a wrong answer


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and v != v
