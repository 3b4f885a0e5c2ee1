"""Writing change files (SPEC §Change capture, writer requirements).

With ``ctfile.changeCapture = before_after`` in the version a transaction
read, its DML statements hand the old and new images of the rows they
change to the transaction's :class:`ChangeWriter`, while they hold the
partition decoded anyway:

* :meth:`ChangeWriter.deletes` -- the old images of deleted rows;
* :meth:`ChangeWriter.updates` -- the old and new images of updated rows,
  written as ``update_preimage`` immediately followed by ``update_postimage``.

Rows whose ``_ct_row_id`` is null are fresh rows of this transaction (inserted
by an earlier statement, SPEC §Hidden columns): they get no change row, since
the commit inserts them. A partition a statement removes whole is marked
``deletesAllRows`` instead (see :mod:`ctfile.writer.dml`).

The writer buffers rows across the partitions of a statement (the rewrite
runs on worker threads: every method is thread-safe) and writes files of
about ``ctfile.partitionRows`` rows, never splitting a pair, with the table's
codec, field ids, statistics and whole-file checksum, like data files. At the
end of a statement the files are staged in the transaction; a statement that
fails discards its own.

A transaction whose statements touch the same row more than once (an UPDATE
then a DELETE of a row, an UPDATE of rows an earlier statement copied) would
otherwise describe intermediate states; :meth:`ChangeWriter.consolidate`
rewrites its change rows before the commit so that each row id has at most
its first old image (the state at the read version) and its last new image
(:func:`consolidate_rows`).
"""

from __future__ import annotations

import threading
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctfile.format.actions import Partition
from ctfile.format.change_files import (
    CHANGE_TYPE_COLUMN,
    CHANGE_TYPES,
    DELETE_CODE,
    POSTIMAGE_CODE,
    PREIMAGE_CODE,
    ChangeType,
    change_file_schema,
    change_type_codes,
)
from ctfile.format.properties import TableProperties
from ctfile.format.schema import ROW_ID_COLUMN, ROW_ID_FIELD_ID, ROW_VERSION_COLUMN, Schema
from ctfile.log.transaction import PENDING, StagedFile, Transaction
from ctfile.reader.change_events import first_old_last_new
from ctfile.reader.expressions import is_distinct
from ctfile.writer.partition_writer import row_id_encoding, stat_columns, write_parquet_file


class ChangeWriter:
    """The change rows of one transaction (see the module docstring).

    ``overlaps`` is True once a statement captured a row out of a partition
    this transaction wrote: that row may already have a change row, and the
    transaction's rows need :meth:`consolidate`.
    """

    def __init__(self, tx: Transaction):
        props = TableProperties.from_mapping(tx.metadata.properties)
        self._tx = tx
        self.schema: Schema = tx.schema
        self.target_rows = props.partition_rows
        self._row_group_rows = min(props.partition_rows, props.row_group_rows)
        self._compression = props.compression
        self._file_schema = change_file_schema(self.schema)
        # What the buffer holds: the file's types, every field nullable, so
        # that rows read from partitions and rows built from a MERGE source
        # concatenate.
        self._buffer_schema = pa.schema([pa.field(f.name, f.type) for f in self._file_schema])
        self._columns = self.schema.names + [ROW_ID_COLUMN, ROW_VERSION_COLUMN]
        self._stat_columns = {**stat_columns(self.schema), ROW_ID_COLUMN: (ROW_ID_FIELD_ID, "long")}
        self._options = row_id_encoding(self._file_schema)
        self._lock = threading.Lock()
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._written: list[StagedFile] = []  # the files of the running statement
        self.overlaps = False

    # ------------------------------------------------------------ rows

    def deletes(self, p: Partition, rows: pa.Table) -> None:
        """The old images of rows deleted out of ``p``: ``rows`` holds the
        table columns and the hidden columns as the statement read them."""
        rows = self._captured(p, rows)
        if rows.num_rows:
            self._append(_with_type(rows, ChangeType.DELETE))

    def updates(self, p: Partition, old: pa.Table, new: pa.Table) -> None:
        """Rows of ``p`` updated from ``old`` to ``new`` (aligned row by row,
        every row really changed); the new images get a null row version."""
        keep = pc.is_valid(old.column(ROW_ID_COLUMN))
        old, new = self._captured(p, old), new.select(self._columns).filter(keep)
        if not old.num_rows:
            return
        new = new.set_column(
            len(self._columns) - 1, ROW_VERSION_COLUMN, pa.nulls(new.num_rows, pa.int64())
        )
        # The two sides may differ in nullability (a column the statement
        # set is rebuilt nullable): conform both to the buffer's schema.
        pairs = pa.concat_tables([
            self._conform(_with_type(old, ChangeType.UPDATE_PREIMAGE)),
            self._conform(_with_type(new, ChangeType.UPDATE_POSTIMAGE)),
        ])
        n = old.num_rows
        order = np.empty(2 * n, dtype=np.int64)
        order[0::2] = np.arange(n)
        order[1::2] = np.arange(n, 2 * n)
        self._append(pairs.take(pa.array(order)))

    def _captured(self, p: Partition, rows: pa.Table) -> pa.Table:
        """``rows`` without the fresh ones (null row id), noting an overlap."""
        rows = rows.select(self._columns)
        rid = rows.column(ROW_ID_COLUMN)
        if rid.null_count:
            rows = rows.filter(pc.is_valid(rid))
        if rows.num_rows and p.first_row_id == PENDING:
            self.overlaps = True
        return rows

    def _conform(self, rows: pa.Table) -> pa.Table:
        """``rows`` (the buffer's columns in its order) in the buffer's schema."""
        return pa.Table.from_arrays(
            [c if c.type.equals(f.type) else c.cast(f.type) for c, f in zip(rows.columns, self._buffer_schema)],
            schema=self._buffer_schema,
        )

    def _append(self, rows: pa.Table) -> None:
        """Buffer ``rows`` (whole pairs); write full files outside the lock."""
        rows = self._conform(rows)
        with self._lock:
            self._buffer.append(rows)
            self._buffered += rows.num_rows
            full = self._take(final=False)
        for chunk, path in full:
            self._write(chunk, path)

    def _take(self, *, final: bool) -> list[tuple[pa.Table, str]]:
        """Cut the buffer into files of about ``target_rows`` rows (every row
        of it if ``final``); called under the lock, which also guards the
        transaction's file counter."""
        out = []
        while self._buffered >= self.target_rows or (final and self._buffered):
            rows = pa.concat_tables(self._buffer)
            cut = _cut(rows, self.target_rows) if not final or self._buffered > self.target_rows else rows.num_rows
            out.append((rows.slice(0, cut), self._tx.next_change_path()))
            rest = rows.slice(cut)
            self._buffer, self._buffered = ([rest], rest.num_rows) if rest.num_rows else ([], 0)
        return out

    def _write(self, rows: pa.Table, path: str) -> None:
        table = pa.Table.from_arrays(rows.columns, schema=self._file_schema)
        staged = write_parquet_file(
            self._tx.storage, path, table, compression=self._compression, row_group_rows=self._row_group_rows,
            options=self._options, stat_columns=self._stat_columns,
        )
        with self._lock:
            self._written.append(staged)

    # ------------------------------------------------------------ statements

    def _flush(self) -> list[StagedFile]:
        """Write what is buffered; the files written since the last flush, by path."""
        with self._lock:
            rest = self._take(final=True)
        for chunk, path in rest:
            self._write(chunk, path)
        with self._lock:
            files, self._written = self._written, []
        return sorted(files, key=lambda f: f.path)

    def finish_statement(self) -> None:
        """Write what is buffered and stage the statement's files in the transaction."""
        self._tx.stage_changes(self._flush())

    def discard_statement(self) -> None:
        """Drop the rows and files of a statement that failed."""
        with self._lock:
            files, self._written = self._written, []
            self._buffer, self._buffered = [], 0
        self._tx.storage.delete([f.path for f in files])

    def consolidate(self) -> None:
        """Rewrite the transaction's change rows so that each row id has its
        first old image and its last new image (:func:`consolidate_rows`);
        nothing to do unless statements overlapped (:attr:`overlaps`)."""
        if not self.overlaps:
            return
        files = self._tx.staged_changes()
        if files:
            rows = pa.concat_tables([self._read(f) for f in files])
            result = consolidate_rows(rows, self.schema.names, where=self._tx.storage.uri)
            with self._lock:
                self._buffer, self._buffered = [result], result.num_rows
        self._tx.replace_changes(self._flush())
        self.overlaps = False

    def _read(self, f: StagedFile) -> pa.Table:
        data = self._tx.storage.read_bytes(f.path)
        t = pq.read_table(pa.BufferReader(data), use_threads=False)
        return pa.Table.from_arrays(t.columns, schema=self._buffer_schema)


def _with_type(rows: pa.Table, change_type: ChangeType) -> pa.Table:
    return rows.append_column(CHANGE_TYPE_COLUMN, pa.array([change_type.value] * rows.num_rows, pa.string()))


def _cut(rows: pa.Table, target: int) -> int:
    """Where to end a file of about ``target`` rows: after row ``target - 1``,
    or one row later if that row is an ``update_preimage`` (a pair is never
    split)."""
    if target >= rows.num_rows:
        return rows.num_rows
    last = rows.column(CHANGE_TYPE_COLUMN)[target - 1].as_py()
    return target + 1 if last == ChangeType.UPDATE_PREIMAGE.value else target


def consolidate_rows(rows: pa.Table, columns: list[str], *, where: str) -> pa.Table:
    """The change rows of a transaction, one event per row id (SPEC §Change capture).

    ``rows`` are change rows in statement order: each ``delete`` row and each
    ``update_preimage``/``update_postimage`` pair is one event of its row id.
    The result holds, per row id in row-id order, the old image of its first
    event and the new image of its last
    (:func:`~ctfile.reader.change_events.first_old_last_new`, the rule change
    scans consolidate by): a ``delete`` if the last event deleted the row,
    else an update pair, dropped when the two images are equal in every
    column of ``columns`` (null equals null).

    Examples
    --------
    >>> t = pa.table({"v": ["a", "b", "b", "a", "x", "y"], "_ct_row_id": [7, 7, 7, 7, 8, 8],
    ...               "_ct_row_version": [1, None, None, None, 2, None],
    ...               "_ct_change_type": ["update_preimage", "update_postimage"] * 3})
    >>> consolidate_rows(t, ["v"], where="t").to_pydict()["_ct_row_id"]  # 7 went a -> b -> a
    [8, 8]
    >>> d = pa.table({"v": ["a", "b", "b"], "_ct_row_id": [7, 7, 7], "_ct_row_version": [1, None, None],
    ...               "_ct_change_type": ["update_preimage", "update_postimage", "delete"]})
    >>> r = consolidate_rows(d, ["v"], where="t")
    >>> r.column("v").to_pylist(), r.column("_ct_change_type").to_pylist(), r.column("_ct_row_version").to_pylist()
    (['a'], ['delete'], [1])
    """
    codes = change_type_codes(rows.column(CHANGE_TYPE_COLUMN), uri=where, path="(staged change rows)", version=-1)
    ids = np.asarray(rows.column(ROW_ID_COLUMN).to_numpy(zero_copy_only=False), dtype=np.int64)
    post = codes == POSTIMAGE_CODE
    event = np.cumsum(~post)  # a postimage belongs to the event of the preimage before it
    sel = first_old_last_new(ids, post, event)
    old, new = sel.old, sel.new
    has_new = new >= 0
    same = np.zeros(len(old), dtype=bool)
    if has_new.any():
        same[has_new] = ~_differs(rows.take(pa.array(old[has_new])), rows.take(pa.array(new[has_new])), columns)
    # Per row id: a delete (1 row), a pair (2 rows) or nothing (equal images).
    counts = np.where(~has_new, 1, np.where(same, 0, 2))
    offsets = np.cumsum(counts) - counts
    out_rows = np.empty(int(counts.sum()), dtype=np.int64)
    out_codes = np.empty(len(out_rows), dtype=np.int8)
    one, two = counts >= 1, counts == 2
    out_rows[offsets[one]] = old[one]
    out_codes[offsets[one]] = np.where(has_new[one], PREIMAGE_CODE, DELETE_CODE)
    out_rows[offsets[two] + 1] = new[two]
    out_codes[offsets[two] + 1] = POSTIMAGE_CODE
    out = rows.take(pa.array(out_rows))
    types = pa.array(np.asarray(CHANGE_TYPES, dtype=object)[out_codes], pa.string()) if len(out_codes) else pa.array([], pa.string())
    return out.set_column(out.schema.get_field_index(CHANGE_TYPE_COLUMN), CHANGE_TYPE_COLUMN, types)


def _differs(a: pa.Table, b: pa.Table, columns: list[str]) -> np.ndarray:
    out = np.zeros(a.num_rows, dtype=bool)
    for name in columns:
        out |= is_distinct(a.column(name), b.column(name))
    return out

