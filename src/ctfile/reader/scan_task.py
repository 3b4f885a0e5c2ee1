"""Picklable units of a snapshot scan, for engines that read in parallel.

:meth:`ctfile.Snapshot.scan_tasks` plans a scan into :class:`ScanTask`
objects (a micro-partition, or a range of its row groups, plus the columns
and filter). A task carries the table's
:class:`~ctfile.log.location.TableLocation`, so it can be shipped to another
process (a Spark executor) and read there with :meth:`ScanTask.to_batches`;
storage handles are cached per process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.schema import Schema
from ctfile.log.location import TableLocation
from ctfile.log.storage import Storage
from ctfile.reader.expressions import referenced_columns
from ctfile.reader.integrity import DataFiles
from ctfile.reader.partition_reader import small_dictionary_columns
from ctfile.reader.change_rows import ROW_ID_OUT_COLUMN
from ctfile.format.schema import ROW_ID_COLUMN
from ctfile.reader.projection import Projection
from ctfile.reader.pruning import prune
from ctfile.reader.row_ids import row_id_strings

#: The column :meth:`ScanTask.to_batches` adds with ``positions=True``.
POSITION_COLUMN = "_ct_pos"

@dataclass(frozen=True)
class ScanTask:
    """One unit of a snapshot scan (see the module docstring): the rows of
    ``partition`` (of row groups ``row_group_start`` up to ``row_group_stop``)
    in ``columns``, that satisfy ``filter``, read with table schema ``schema``."""

    location: TableLocation
    schema: Schema
    partition: Partition
    columns: tuple[str, ...]
    filter: pc.Expression | None = None
    row_group_start: int = 0
    row_group_stop: int | None = None  # None: through the last row group
    # With a seed (the table's, ctfile.reader.row_ids.table_seed): each row's
    # METADATA$ROW_ID as the last column (Snapshot.scan_tasks(row_ids=True)).
    row_id_seed: int | None = None

    def to_batches(
        self, *, batch_rows: int = 131072, use_threads: bool = True, positions: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """Read this task's rows (table columns, no hidden columns).

        ``positions=True`` adds a last column :data:`POSITION_COLUMN`: each
        row's position in its file (0 for the file's first row), which
        names the row to a rewrite (:class:`ctfile.RewriteJob`). A task
        planned with row ids (:attr:`row_id_seed`) adds, last,
        ``METADATA$ROW_ID``: the value change scans give the row (SPEC
        §Change scans), from its materialized row id (SPEC §Hidden columns,
        the position counted before the filter).

        ``use_threads=False`` decodes on the calling thread only: right for an
        engine that already runs one task per core (a Spark executor's Python
        worker), where pyarrow's thread pool only adds switching overhead.
        String columns whose column chunks are small dictionaries (flags,
        codes) are read as dictionary indices and turned into strings with a
        ``take``, about half the decode cost of Parquet's own dictionary
        decoding; the output types are the table's either way.

        The file is verified against its ``add`` action before any row is
        returned (:mod:`ctfile.reader.integrity`): it is read whole, also by a
        task that reads only some of its row groups.
        """
        storage = self.location.open()
        arrow = self.schema.to_arrow(field_ids=False)
        out_schema = _output_schema(arrow, self.columns, positions=positions, row_ids=self.row_id_seed is not None)
        wanted = self._read_columns(arrow)
        files = DataFiles(storage)
        with files.open(self.partition) as source:
            pf = files.parquet(source, self.partition)
            groups = self._row_groups(pf.metadata.num_row_groups)
            if not groups:
                return
            # SPEC §Schema evolution: the file's columns are found by field id.
            projection = Projection(pf.schema_arrow, self.schema, wanted)
            read_cols = list(projection.read_columns)
            if self._stored_row_ids(pf.schema_arrow.names):
                read_cols.append(ROW_ID_COLUMN)
            dict_cols = small_dictionary_columns(pf, groups, read_cols)
            if dict_cols:
                pf = files.parquet(source, self.partition, metadata=pf.metadata, read_dictionary=dict_cols)
            offset = sum(pf.metadata.row_group(i).num_rows for i in range(groups[0]))
            for b in pf.iter_batches(batch_size=batch_rows, row_groups=groups, columns=read_cols, use_threads=use_threads):
                out = self._output(projection, wanted, b, offset, out_schema, positions=positions)
                offset += b.num_rows
                if out is not None:
                    yield out

    def _read_columns(self, arrow: pa.Schema) -> list[str]:
        """The table columns to read: the task's, then those its filter also uses."""
        wanted = list(self.columns)
        if self.filter is not None:
            wanted += [c for c in referenced_columns(self.filter, arrow) if c not in wanted]
        return wanted

    def _stored_row_ids(self, file_names: Sequence[str]) -> bool:
        """Whether the task reads the file's stored row ids: it adds row ids
        and the file has them (a file without them inherits every one)."""
        return self.row_id_seed is not None and ROW_ID_COLUMN in file_names

    def _row_ids(self, b: pa.RecordBatch, offset: int) -> pa.Array:
        """The materialized row ids of file batch ``b`` (its first row at
        ``offset``): stored, else ``firstRowId + pos(r)`` (SPEC §Hidden columns)."""
        n = b.num_rows
        pos = pa.array(np.arange(self.partition.first_row_id + offset, self.partition.first_row_id + offset + n, dtype=np.int64))
        if ROW_ID_COLUMN not in b.schema.names:
            return pos
        return pc.coalesce(b.column(ROW_ID_COLUMN), pos)

    def _row_groups(self, total: int) -> list[int]:
        """The task's row groups of a file of ``total`` row groups."""
        stop = total if self.row_group_stop is None else min(self.row_group_stop, total)
        return list(range(min(self.row_group_start, total), stop))

    def _output(
        self, projection: Projection, wanted: list[str], b: pa.RecordBatch, offset: int, out_schema: pa.Schema, *,
        positions: bool,
    ) -> pa.RecordBatch | None:
        """File batch ``b`` (its first row at position ``offset``) in
        ``out_schema``: the ``wanted`` columns projected, their file
        positions (with ``positions``) and row ids (with a seed), the
        filter applied; None when no row is left."""
        n = b.num_rows
        arrays = [projection.column(c, b, n) for c in wanted]
        names = list(wanted)
        if positions:
            arrays.append(pa.array(np.arange(offset, offset + n, dtype=np.int64)))
            names.append(POSITION_COLUMN)
        if self.row_id_seed is not None:  # materialized before the filter: positions count every row
            arrays.append(self._row_ids(b, offset))
            names.append(ROW_ID_OUT_COLUMN)
        b = pa.RecordBatch.from_arrays(arrays, names=names)
        if self.filter is not None:
            b = b.filter(self.filter)
        if not b.num_rows:
            return None
        cols = [b.column(c) for c in out_schema.names]
        if self.row_id_seed is not None:
            cols[-1] = row_id_strings(cols[-1], self.row_id_seed)
        return pa.RecordBatch.from_arrays(cols, schema=out_schema)


def _output_schema(arrow: pa.Schema, columns: Sequence[str], *, positions: bool, row_ids: bool = False) -> pa.Schema:
    """The schema of a task's batches: its ``columns`` of the table's
    ``arrow`` schema, then :data:`POSITION_COLUMN` with ``positions``, then
    ``METADATA$ROW_ID`` with ``row_ids``."""
    out = pa.schema([arrow.field(c) for c in columns])
    if positions:
        out = out.append(pa.field(POSITION_COLUMN, pa.int64(), nullable=False))
    if row_ids:
        out = out.append(pa.field(ROW_ID_OUT_COLUMN, pa.string(), nullable=False))
    return out


def plan_scan_tasks(
    storage: Storage,
    schema: Schema,
    partitions: Sequence[Partition],
    *,
    columns: Sequence[str],
    filter: pc.Expression | None,
    row_group_rows: int,
    max_rows_per_task: int | None,
    row_id_seed: int | None = None,
) -> list[ScanTask]:
    """One task per partition, or per range of row groups for partitions
    larger than ``max_rows_per_task`` (so one big file spreads over cores).

    Row-group counts are derived from ``numRecords`` and the writer's row
    group size, not read from footers: if a file's real layout differs, the
    last task of the file reads through its last row group, so every row is
    read exactly once either way.
    """
    location = TableLocation.of(storage)
    tasks = []
    for p in prune(list(partitions), schema, filter):
        expected_groups = max(1, math.ceil(p.num_records / max(1, row_group_rows)))
        per_task = expected_groups
        if max_rows_per_task:
            per_task = max(1, max_rows_per_task // max(1, row_group_rows))
        if per_task >= expected_groups:
            tasks.append(ScanTask(location, schema, p, tuple(columns), filter, row_id_seed=row_id_seed))
            continue
        for start in range(0, expected_groups, per_task):
            stop = start + per_task
            tasks.append(
                ScanTask(
                    location, schema, p, tuple(columns), filter,
                    row_group_start=start, row_group_stop=None if stop >= expected_groups else stop,
                    row_id_seed=row_id_seed,
                )
            )
    return tasks
