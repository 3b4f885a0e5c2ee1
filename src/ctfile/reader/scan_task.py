"""Picklable units of a snapshot scan, for engines that read in parallel.

:meth:`ctfile.Snapshot.scan_tasks` plans a scan into :class:`ScanTask`
objects (a micro-partition, or a range of its row groups, plus the columns
and filter). A task carries the table URI and storage options, so it can be
shipped to another process (a Spark executor) and read there with
:meth:`ScanTask.to_batches`; storage handles are cached per process.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ctfile.format.actions import Partition
from ctfile.format.schema import Schema
from ctfile.log.storage import Storage, open_storage
from ctfile.reader.pruning import prune

_STORAGES: dict[tuple, Storage] = {}
_LOCK = threading.Lock()


def storage_for(uri: str, storage_options: dict | None) -> Storage:
    """A per-process cached storage handle for ``uri``."""
    key = (uri, tuple(sorted((storage_options or {}).items(), key=lambda kv: kv[0])).__repr__())
    with _LOCK:
        st = _STORAGES.get(key)
        if st is None:
            st = _STORAGES[key] = open_storage(uri, storage_options)
        return st


@dataclass(frozen=True)
class ScanTask:
    uri: str
    storage_options: dict | None
    schema: Schema
    partition: Partition
    columns: tuple[str, ...]
    filter: pc.Expression | None = None
    row_group_start: int = 0
    row_group_stop: int | None = None  # None: through the last row group

    def to_batches(self, *, batch_rows: int = 131072) -> Iterator[pa.RecordBatch]:
        """Read this task's rows (table columns, no hidden columns)."""
        storage = storage_for(self.uri, self.storage_options)
        arrow = self.schema.to_arrow(field_ids=False)
        fmt = ds.ParquetFileFormat()
        path = storage.arrow_path(self.partition.path)
        fs = storage.arrow_filesystem
        if self.row_group_start == 0 and self.row_group_stop is None:
            frag = fmt.make_fragment(path, filesystem=fs)
        else:
            meta_frag = fmt.make_fragment(path, filesystem=fs)
            total = meta_frag.metadata.num_row_groups
            stop = total if self.row_group_stop is None else min(self.row_group_stop, total)
            groups = list(range(min(self.row_group_start, total), stop))
            if not groups:
                return
            frag = fmt.make_fragment(path, filesystem=fs, row_groups=groups)
        out_schema = pa.schema([arrow.field(c) for c in self.columns])
        for b in frag.to_batches(schema=arrow, columns=list(self.columns), filter=self.filter, batch_size=batch_rows):
            if b.num_rows:
                yield pa.RecordBatch.from_arrays(b.columns, schema=out_schema)


def plan_scan_tasks(
    storage: Storage,
    schema: Schema,
    partitions: Sequence[Partition],
    *,
    columns: Sequence[str],
    filter: pc.Expression | None,
    row_group_rows: int,
    max_rows_per_task: int | None,
) -> list[ScanTask]:
    """One task per partition, or per range of row groups for partitions
    larger than ``max_rows_per_task`` (so one big file spreads over cores).

    Row-group counts are derived from ``numRecords`` and the writer's row
    group size, not read from footers: if a file's real layout differs, the
    last task of the file reads through its last row group, so every row is
    read exactly once either way.
    """
    tasks = []
    for p in prune(list(partitions), schema, filter):
        expected_groups = max(1, math.ceil(p.num_records / max(1, row_group_rows)))
        per_task = expected_groups
        if max_rows_per_task:
            per_task = max(1, max_rows_per_task // max(1, row_group_rows))
        if per_task >= expected_groups:
            tasks.append(ScanTask(storage.uri, storage.storage_options, schema, p, tuple(columns), filter))
            continue
        for start in range(0, expected_groups, per_task):
            stop = start + per_task
            tasks.append(
                ScanTask(
                    storage.uri, storage.storage_options, schema, p, tuple(columns), filter,
                    row_group_start=start, row_group_stop=None if stop >= expected_groups else stop,
                )
            )
    return tasks
