"""Copy-on-write DML over a :class:`~ctfile.log.transaction.Transaction`
(SPEC §Copy-on-write, writer requirements). MERGE is in
:mod:`ctfile.writer.merge`, on the same rewrite machinery.

Each statement:

1. prunes the live partitions with their statistics (only partitions that can
   hold a matching row are read);
2. reads each candidate with its hidden columns materialized and evaluates
   the predicate; a partition with no matching row is left alone, and one
   whose every row is deleted is removed without writing anything;
3. rewrites each touched partition in row order: unchanged rows keep their
   row id and row version, updated rows keep their row id and get a null
   row version (= the commit's version), inserted rows get nulls for both;
4. records the removes, the new files and the row counts in the transaction,
   and what it read: the partitions it opened and its row predicate (SPEC
   §Conflict detection), so that a concurrent commit that changed or added
   rows it selects conflicts instead of being overlooked;
5. when the transaction captures changes (SPEC §Change capture), hands the
   old images of the rows it deletes and the old and new images of the rows
   it updates to the transaction's change writer
   (:mod:`ctfile.writer.change_writer`), and marks the partitions it removes
   whole with ``deletesAllRows`` (a partition this transaction wrote has no
   remove action: the rows of it that the transaction did not insert are
   captured as deletes instead).

An UPDATE or MERGE that sets a row to the values it already had leaves that
row unchanged (its row version is kept), so it shows up in no change scan.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import ROW_ID_COLUMN, ROW_VERSION_COLUMN
from ctfile.log.transaction import PENDING, StagedFile, Transaction
from ctfile.reader.expressions import (
    check_predicate,
    check_value_expression,
    evaluate_mask,
    evaluate_values,
    is_distinct,
)
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import prune
from ctfile.writer.conflicts import RowPredicate
from ctfile.writer.clustering import SORT_WINDOW_BYTES, ClusterOrder
from ctfile.writer.input import Conformer, is_reusable, to_reader
from ctfile.format.properties import TableProperties
from ctfile.writer.partition_writer import PartitionWriter

if TYPE_CHECKING:
    from ctfile.writer.transaction import WriteTransaction

_DML_WORKERS = 2


@dataclass
class Rewrite:
    """The outcome of rewriting one partition."""

    partition: Partition
    files: list[StagedFile]
    deleted: int = 0
    updated: int = 0
    copied: int = 0
    matched_source: np.ndarray | None = None
    unchanged: bool = False  # read (and maybe matched) but not rewritten
    deletes_all_rows: bool = False  # no row survives (SPEC §Change capture)


def cluster_order(tx: Transaction) -> ClusterOrder | None:
    """The clustering order the statements of ``tx`` write in (SPEC §Clustering)."""
    return ClusterOrder.of(tx.metadata.properties, tx.schema)


def writer_for(tx: Transaction, *, workers: int | None = None, target_rows: int | None = None) -> PartitionWriter:
    props = TableProperties.from_mapping(tx.metadata.properties)
    return PartitionWriter.for_properties(
        tx.storage, tx.schema, tx.next_file_path, props, workers=workers, target_rows=target_rows
    )


# ---------------------------------------------------------------- INSERT


def insert(tx: Transaction, data: Any) -> int:
    """Append rows as fresh micro-partitions. Returns the number of rows."""
    reader = to_reader(data)
    conformer = Conformer(tx.schema)
    conformer.check_schema(reader.schema)  # fail before any file is written
    counted = [0]

    def counting():
        for b in conformer.conform_stream(reader):
            counted[0] += b.num_rows
            yield b

    # An input already in memory is sorted whole; a stream in windows.
    window = None if is_reusable(data) else SORT_WINDOW_BYTES
    files = writer_for(tx).write(counting(), with_hidden=False, cluster=cluster_order(tx), window_bytes=window)
    tx.stage(files)
    tx.add_metrics(inserted=counted[0])
    return counted[0]


# ---------------------------------------------------------------- shared rewrite machinery


def rewrite_all(
    tx: Transaction,
    candidates: Sequence[Partition],
    fn: Callable[[Partition, pa.Table], Rewrite | None],
) -> list[Rewrite]:
    """Read each candidate (hidden columns materialized), apply ``fn``, and
    record the results in ``tx``. Partitions are processed concurrently."""
    done = rewrite_partitions(tx, candidates, fn)
    stage_rewrites(tx, done)
    return done


def rewrite_partitions(
    tx: Transaction,
    candidates: Sequence[Partition],
    fn: Callable[[Partition, pa.Table], Rewrite | None],
) -> list[Rewrite]:
    """:func:`rewrite_all` without staging the results (the candidates are
    marked read): for a statement with more to check before its rewrites
    join the transaction (:func:`discard_rewrites` if it fails). On an
    error every file written is deleted."""

    def work(p: Partition) -> Rewrite | None:
        t = read_partition_table(tx.storage, p, tx.schema, hidden=True)
        return fn(p, t)

    for p in candidates:
        tx.mark_read(p)
    results: list[Rewrite | None] = []
    errors: list[BaseException] = []
    with ThreadPoolExecutor(max_workers=_DML_WORKERS) as pool:
        futures = [pool.submit(work, p) for p in candidates]
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as e:  # collect: every finished file must be cleaned up
                errors.append(e)
                results.append(None)
    done = [r for r in results if r is not None]
    if errors:
        discard_rewrites(tx, done)
        raise errors[0]
    return done


def discard_rewrites(tx: Transaction, rewrites: Sequence[Rewrite]) -> None:
    """Delete the files of rewrites that will not be staged."""
    tx.storage.delete([s.path for r in rewrites for s in r.files])


def stage_rewrites(tx: Transaction, rewrites: Sequence[Rewrite]) -> None:
    """Record rewrites in ``tx``: each partition removed, its files staged."""
    for r in rewrites:
        if r.unchanged:
            continue
        tx.remove(r.partition, deletes_all_rows=r.deletes_all_rows)
        tx.stage(r.files)
        tx.add_metrics(deleted=r.deleted, updated=r.updated, copied=r.copied)


def write_rows(tx: Transaction, t: pa.Table, *, keep_order: bool = False) -> list[StagedFile]:
    """Write copy-on-write output: table columns then the two hidden columns.

    The rows are sorted into the table's clustering order, if it has one,
    unless ``keep_order`` (a DELETE's survivors, SPEC §Copy-on-write)."""
    if t.num_rows == 0:
        return []
    order = None if keep_order else cluster_order(tx)
    if order is not None:
        t = order.sort(t)
    t = t.select(tx.schema.names + [ROW_ID_COLUMN, ROW_VERSION_COLUMN])
    return writer_for(tx, workers=1).write(t.to_batches(), with_hidden=True)


# ---------------------------------------------------------------- DELETE


def capture_deletes(tx: "WriteTransaction", p: Partition, t: pa.Table, deleted: pa.Array | None) -> bool:
    """Capture the rows of ``t`` (partition ``p`` read with its hidden
    columns) that a statement deletes: those where ``deleted`` is true, or
    every row if ``deleted`` is None. Returns True when no row of ``p``
    survives and ``p`` is a committed partition: its remove then carries
    ``deletesAllRows`` and no change row is written (SPEC §Change capture).
    A partition this transaction wrote has no remove to mark, so its
    deleted rows are captured whatever survives."""
    if tx.changes is None:
        return False
    rows = t if deleted is None else t.filter(deleted)
    if rows.num_rows == t.num_rows and p.first_row_id != PENDING:
        return True
    tx.changes.deletes(p, rows)
    return False


def remove_whole(tx: "WriteTransaction", p: Partition) -> None:
    """Remove ``p`` and every row of it (a metadata-only delete, TRUNCATE).
    Capturing a partition this transaction wrote reads it (see
    :func:`capture_deletes`)."""
    if tx.changes is not None and p.first_row_id == PENDING:
        capture_deletes(tx, p, read_partition_table(tx.storage, p, tx.schema, hidden=True), None)
    tx.remove(p, deletes_all_rows=True)


def delete(tx: "WriteTransaction", where: pc.Expression) -> int:
    """Delete the rows matching ``where``. Returns the number deleted."""
    check_predicate(where, tx.schema.to_arrow(field_ids=False))
    tx.record_read_predicate(RowPredicate(where))
    live = tx.live_partitions()
    candidates = prune(live, tx.schema, where)
    # Partitions where no row can survive are removed without reading them
    # (Snowflake's metadata-only delete); a row survives where `where` is
    # false or null.
    survivors = {p.path for p in prune(candidates, tx.schema, ~where | where.is_null())}
    before = tx.metrics.deleted
    for p in candidates:
        if p.path not in survivors:
            tx.mark_read(p)
            remove_whole(tx, p)
            tx.add_metrics(deleted=p.num_records)

    def fn(p: Partition, t: pa.Table) -> Rewrite | None:
        mask = evaluate_mask(t, where)
        n = pc.sum(mask).as_py() or 0
        if n == 0:
            return None
        kept = t.filter(pc.invert(mask))
        whole = capture_deletes(tx, p, t, mask)
        return Rewrite(p, write_rows(tx, kept, keep_order=True), deleted=n, copied=kept.num_rows,
                       deletes_all_rows=whole)

    rewrite_all(tx, [p for p in candidates if p.path in survivors], fn)
    return tx.metrics.deleted - before


# ---------------------------------------------------------------- UPDATE


def _normalize_set(tx: Transaction, set_: Mapping[str, Any]) -> dict[str, pc.Expression]:
    if not isinstance(set_, Mapping) or not set_:
        raise InvalidArgumentError(
            f"set must be a non-empty mapping of column name to value or Expression, found {set_!r}"
        )
    arrow = tx.schema.to_arrow(field_ids=False)
    out = {}
    for name, value in set_.items():
        if name not in arrow.names:
            raise SchemaMismatchError(f"set names unknown column {name!r}; table columns are {arrow.names}")
        if isinstance(value, pc.Expression):
            check_value_expression(value, arrow, what=f"set[{name!r}]")
            out[name] = value
        else:
            out[name] = literal(value, arrow.field(name), what=f"set[{name!r}]")
    return out


def literal(value: Any, field: pa.Field, *, what: str) -> pc.Expression:
    """A Python value (or ``pa.Scalar``) set into column ``field``, as an
    expression of the column's type.

    Raises
    ------
    SchemaMismatchError
        The value does not fit the type, or is null for a non-nullable column.

    >>> literal(3, pa.field("n", pa.int8()), what="set['n']")
    <pyarrow.compute.Expression 3>
    >>> literal(None, pa.field("n", pa.int8(), nullable=False), what="set['n']")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.SchemaMismatchError: set['n'] is null but column 'n' is not nullable
    """
    try:
        scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value, type=field.type)
        scalar = scalar.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError) as e:
        raise SchemaMismatchError(f"{what} = {value!r} does not fit column type {field.type}: {e}") from e
    if not field.nullable and not scalar.is_valid:
        raise SchemaMismatchError(f"{what} is null but column {field.name!r} is not nullable")
    return pc.scalar(scalar)


def apply_changes(
    tx: "WriteTransaction", p: Partition, t: pa.Table, positions: np.ndarray, new_values: dict[str, pa.Array]
) -> Rewrite | None:
    """The rows at ``positions`` (ascending, distinct) take ``new_values``
    (one value per position); rows that really change get a null row
    version. Returns None when nothing changes (:func:`updated_rows`)."""
    updated = updated_rows(tx, p, t, positions, new_values)
    if updated is None:
        return None
    t, n_changed = updated
    return Rewrite(p, write_rows(tx, t), updated=n_changed, copied=t.num_rows - n_changed)


def _in_column_type(values: pa.Array, field: pa.Field, p: Partition) -> pa.Array:
    if not values.type.equals(field.type):
        try:
            values = values.cast(field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatchError(f"new value of column {field.name!r} cannot be cast to {field.type}: {e}") from e
    if not field.nullable and values.null_count:
        raise SchemaMismatchError(f"update would write null into non-nullable column {field.name!r} ({p.path})")
    return values


def updated_rows(
    tx: "WriteTransaction", p: Partition, t: pa.Table, positions: np.ndarray, new_values: Mapping[str, pa.Array]
) -> tuple[pa.Table, int] | None:
    """``t`` with the rows at ``positions`` (ascending, distinct) set to
    ``new_values`` (one value per position), and the number of rows that
    changed; rows that really change get a null row version. None when no
    row changes.

    Values are compared at the given positions only, and a column none of
    whose values differs is left as it was (an upsert that sends every
    column usually changes one or two): no full-length work for it, and its
    column chunks come out byte-identical, which the change scan exploits
    (``same_columns``). In a column that changes, a value not distinct from
    the old one leaves the old one too (SPEC §Copy-on-write: ``-0.0`` over
    ``0.0`` keeps ``0.0``). With change capture, the old and new images of
    the changed rows go to the transaction's change writer.
    """
    arrow = tx.schema.to_arrow(field_ids=False)
    at = pa.array(positions)
    changed = np.zeros(len(positions), dtype=bool)
    touched: dict[str, tuple[pa.Array, np.ndarray]] = {}  # column -> (new values, which differ)
    for name, values in new_values.items():
        values = _in_column_type(values, arrow.field(name), p)
        differs = is_distinct(t.column(name).take(at), values)
        if differs.any():
            touched[name] = (values, differs)
            changed |= differs
    n_changed = int(np.count_nonzero(changed))
    if n_changed == 0:
        return None
    old = t
    for name, (values, differs) in touched.items():
        mask = np.zeros(t.num_rows, dtype=bool)
        mask[positions[differs]] = True
        t = t.set_column(t.schema.get_field_index(name), name, _replaced(t.column(name), mask, values.filter(differs)))
    is_changed = np.zeros(t.num_rows, dtype=bool)
    is_changed[positions[changed]] = True
    rv = _replaced(t.column(ROW_VERSION_COLUMN), is_changed, pa.nulls(n_changed, pa.int64()))
    t = t.set_column(t.schema.get_field_index(ROW_VERSION_COLUMN), ROW_VERSION_COLUMN, rv)
    if tx.changes is not None:
        at_changed = pa.array(positions[changed])
        tx.changes.updates(p, old.take(at_changed), t.take(at_changed))
    return t, n_changed


def _replaced(column: pa.ChunkedArray, mask: np.ndarray, values: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` with its rows where ``mask`` is true set to ``values``, in
    row order: one pass over the column (``replace_with_mask``); for the
    types that function lacks (lists, structs, maps) the values are
    gathered onto the column's length and chosen row by row.

    >>> _replaced(pa.chunked_array([["a", "b", "c"]]), np.array([False, True, True]), pa.array(["B", None])).to_pylist()
    ['a', 'B', None]
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    try:
        return pc.replace_with_mask(column, pa.array(mask), values)
    except pa.ArrowNotImplementedError:
        scatter = np.zeros(len(mask), dtype=np.int64)
        scatter[mask] = np.arange(len(values))
        return pc.if_else(pa.array(mask), values.take(pa.array(scatter)), column)


#: Survivors in at most one run per this many rows are sliced, not copied.
_ROWS_PER_RUN = 256


def surviving_rows(t: pa.Table, gone: np.ndarray) -> pa.Table:
    """``t`` without the rows where ``gone`` is true, in order. When the
    survivors form few runs (a few rows deleted out of many, as a MERGE's
    batch deletes), the result is zero-copy slices of ``t``: copying every
    column of the partition once more cost more than writing the slices
    (bench_merge.py); many runs are copied by ``filter``.

    >>> surviving_rows(pa.table({"x": [1, 2, 3, 4]}), np.array([False, True, False, False])).column("x").to_pylist()
    [1, 3, 4]
    >>> gone = np.zeros(1000, dtype=bool); gone[[0, 500, 999]] = True
    >>> kept = surviving_rows(pa.table({"x": np.arange(1000)}), gone)   # two runs: sliced
    >>> kept.column("x").num_chunks, kept.num_rows, kept.column("x")[497:500].to_pylist()
    (2, 997, [498, 499, 501])
    """
    keep = ~gone
    edges = np.flatnonzero(np.diff(np.concatenate([[False], keep, [False]]).astype(np.int8)))
    starts, ends = edges[0::2], edges[1::2]
    if not len(starts) or len(starts) * _ROWS_PER_RUN > t.num_rows:
        return t.filter(pa.array(keep))
    return pa.concat_tables([t.slice(a, b - a) for a, b in zip(starts, ends)])


def rewrite_positions(
    tx: "WriteTransaction", p: Partition, t: pa.Table, positions: np.ndarray,
    new_values: Mapping[str, pa.Array] | None, *, deleted: np.ndarray | None = None,
) -> Rewrite | None:
    """The rewrite of partition ``p`` (read as ``t``, hidden columns
    materialized) in which each row at ``positions`` (ascending, distinct)
    is deleted or updated: ``deleted`` says which, one flag per position
    (default: every row when ``new_values`` is None, none otherwise), and
    ``new_values`` holds, per column, one value per position (those of
    deleted rows are ignored) which an updated row takes, with the no-op
    rule (:func:`updated_rows`). None when no row changes.

    One rewrite for the matched rows of a MERGE, whose clauses delete some
    and update others (SPEC §Copy-on-write, MERGE), and for a rewrite whose
    rows another engine found (:class:`ctfile.RewriteJob`), so that the two
    cannot differ in what they write. The survivors keep their order when no
    row is updated (a DELETE's, SPEC §Copy-on-write); updated partitions are
    written in the table's clustering order.
    """
    if deleted is None:
        deleted = np.full(len(positions), new_values is None)
    updated = _updated_survivors(tx, p, t, positions, deleted, new_values)
    n_deleted = int(np.count_nonzero(deleted))
    if updated is None and n_deleted == 0:
        return None
    new, n_updated = (t, 0) if updated is None else updated
    if n_deleted == 0:
        return Rewrite(p, write_rows(tx, new), updated=n_updated, copied=new.num_rows - n_updated)
    gone = np.zeros(t.num_rows, dtype=bool)
    gone[positions[deleted]] = True
    kept = surviving_rows(new, gone)
    whole = capture_deletes(tx, p, t, pa.array(gone))
    return Rewrite(
        p, write_rows(tx, kept, keep_order=n_updated == 0), deleted=n_deleted, updated=n_updated,
        copied=kept.num_rows - n_updated, deletes_all_rows=whole,
    )


def _updated_survivors(
    tx: "WriteTransaction", p: Partition, t: pa.Table, positions: np.ndarray, deleted: np.ndarray,
    new_values: Mapping[str, pa.Array] | None,
) -> tuple[pa.Table, int] | None:
    """:func:`updated_rows` for the rows at the ``positions`` not
    ``deleted``, with their ``new_values``; None when none is updated."""
    kept_positions = positions[~deleted]
    values = {c: v.filter(pa.array(~deleted)) for c, v in (new_values or {}).items()}
    return updated_rows(tx, p, t, kept_positions, values) if len(kept_positions) and values else None


def update(tx: Transaction, where: pc.Expression | None, set_: Mapping[str, Any]) -> int:
    """Set columns of the rows matching ``where`` (all rows if None). Returns rows changed."""
    arrow = tx.schema.to_arrow(field_ids=False)
    if where is None:
        where = pc.scalar(True)
    check_predicate(where, arrow)
    exprs = _normalize_set(tx, set_)
    tx.record_read_predicate(RowPredicate(where))
    candidates = prune(tx.live_partitions(), tx.schema, where)
    before = tx.metrics.updated

    def fn(p: Partition, t: pa.Table) -> Rewrite | None:
        positions = np.flatnonzero(np.asarray(evaluate_mask(t, where).to_numpy(zero_copy_only=False), dtype=bool))
        if not len(positions):
            return None
        # SET expressions are evaluated for the matched rows only, as in SQL
        # (an expression that fails on a row the predicate excludes, say a
        # division by zero, does not fail the statement).
        values = evaluate_values(t.take(pa.array(positions)), exprs, what=f"set {sorted(exprs)} on partition {p.path}")
        return apply_changes(tx, p, t, positions, {n: values.column(n) for n in exprs})

    rewrite_all(tx, candidates, fn)
    return tx.metrics.updated - before


# ---------------------------------------------------------------- TRUNCATE / OVERWRITE


def truncate(tx: "WriteTransaction") -> int:
    """Remove every partition (metadata only). Returns rows deleted."""
    tx.mark_reads_whole_table()
    n = 0
    for p in tx.live_partitions():
        remove_whole(tx, p)
        n += p.num_records
    tx.add_metrics(deleted=n)
    return n
