"""The images of a captured commit (SPEC §Change capture, §Change scans).

A commit is *captured* when its change files, its added partitions and its
``deletesAllRows`` removes say everything it changed: :func:`captured_commit`
recognises one from its actions alone, and :func:`read_captured` turns it
into :class:`~ctfile.reader.change_events.Images`, reading

* its change files whole (old images of deleted rows; old and new images of
  updated rows), each checked against the rules of SPEC §Change capture;
* the fresh rows (null stored ``_ct_row_id``) of the partitions it added:
  inserts, new images with no old one; a partition whose statistics show no
  null row id is not opened;
* the partitions it removed with ``deletesAllRows``: old images with no new
  one.

It never opens a partition the commit rewrote.
"""

from __future__ import annotations

import dataclasses
import functools
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import AddPartition, ChangeFile, Partition, RemovePartition
from ctfile.format.change_files import (
    CHANGE_TYPE_COLUMN,
    CHANGE_TYPE_FIELD_ID,
    DELETE_CODE,
    POSTIMAGE_CODE,
    check_change_rows,
    is_captured,
)
from ctfile.format.errors import CorruptDataFileError
from ctfile.format.schema import ROW_ID_COLUMN, ROW_ID_FIELD_ID, ROW_VERSION_FIELD_ID, Schema
from ctfile.reader.change_events import Images
from ctfile.reader.integrity import DataFiles
from ctfile.reader.projection import Projection, field_ids
from ctfile.reader.partition_reader import hidden_values_only_inherited, read_partition_table, read_rows


# The field ids of a change file's columns that are not table columns.
_CHANGE_FILE_IDS = frozenset({ROW_ID_FIELD_ID, ROW_VERSION_FIELD_ID, CHANGE_TYPE_FIELD_ID})


@dataclass(frozen=True)
class CapturedCommit:
    """A segment of a change plan: what a captured commit's change is made
    of (see the module docstring). A task may hold part of one (the sources
    of some row ids), see :mod:`ctfile.reader.change_tasks`."""

    version: int
    timestamp: int
    change_files: tuple[ChangeFile, ...] = ()
    inserted: tuple[Partition, ...] = ()  # partitions added with dataChange: their fresh rows
    deleted: tuple[Partition, ...] = ()  # partitions removed with deletesAllRows

    @property
    def start_version(self) -> int:
        return self.version

    @property
    def end_version(self) -> int:
        return self.version

    @property
    def partitions(self) -> tuple[Partition, ...]:
        """The partitions a scan of this commit may open: its inserted
        partitions that may hold fresh rows, and its ``deletesAllRows``
        partitions. Never one it rewrote."""
        return tuple(p for p in self.inserted if p.fresh_rows != 0) + self.deleted

    @property
    def num_records(self) -> int:
        """Rows a scan of this commit reads at most (a task's cost estimate)."""
        fresh = sum(p.num_records if p.fresh_rows is None else p.fresh_rows for p in self.inserted)
        return sum(c.num_records for c in self.change_files) + fresh + sum(p.num_records for p in self.deleted)

    @property
    def bytes_to_read(self) -> int:
        """Bytes of the files a scan of this commit may open (an upper bound:
        an added partition whose statistics are missing is counted whole)."""
        return sum(c.size_bytes for c in self.change_files) + sum(p.size_bytes for p in self.partitions)

    def merged(self, other: "CapturedCommit") -> "CapturedCommit":
        """This commit's sources and ``other``'s (two parts of one commit)."""
        return dataclasses.replace(
            self,
            change_files=self.change_files + other.change_files,
            inserted=self.inserted + other.inserted,
            deleted=self.deleted + other.deleted,
        )


def captured_commit(version: int, timestamp: int, actions: Sequence) -> CapturedCommit | None:
    """The :class:`CapturedCommit` of an entry's actions, or None when the
    commit is not captured (SPEC §Change capture: it has a data-changing
    ``remove`` without ``deletesAllRows`` and no ``change`` action, or it
    re-adds a partition, SPEC §Restore)."""
    if not is_captured(actions):
        return None
    changes = tuple(a for a in actions if isinstance(a, ChangeFile))
    adds = _data_changing(actions, AddPartition)
    removes = _data_changing(actions, RemovePartition)
    return CapturedCommit(
        version,
        timestamp,
        changes,
        tuple(a.partition for a in adds),
        tuple(r.partition for r in removes if r.deletes_all_rows),
    )


def _data_changing(actions: Sequence, kind: type) -> list:
    """The ``dataChange: true`` actions of type ``kind`` among ``actions``, in order."""
    return [a for a in actions if isinstance(a, kind) and a.data_change]


def change_file_partition(c: ChangeFile, version: int) -> Partition:
    """``c`` as the descriptor :class:`DataFiles` checks and opens (and
    :func:`~ctfile.reader.pruning.prune` judges): its length, checksum, row
    count and statistics; ``version`` (the commit naming it) is what a null
    ``_ct_row_version`` means and what errors name."""
    return Partition(c.path, c.size_bytes, c.num_records, 0, version, c.modification_time, c.checksum, c.stats)


def read_change_file(files: DataFiles, c: ChangeFile, version: int, schema: Schema, *, use_threads: bool = True) -> Images:
    """The images in change file ``c`` of commit ``version``, checked. Table
    columns are found by field id, as in partitions (a column the file lacks
    reads as nulls); the hidden and change-type columns must be there.
    When ``schema`` lacks a field the file has (dropped since the commit),
    update pairs that differed only there are equal and left out."""
    p = change_file_partition(c, version)
    data_schema = schema.to_arrow(field_ids=False)
    with files.open(p) as src:
        pf = files.parquet(src, p)
        missing = [n for n in (ROW_ID_COLUMN, CHANGE_TYPE_COLUMN) if n not in pf.schema_arrow.names]
        if missing:
            raise files.error(CorruptDataFileError, p, f"is not a change file: it lacks the columns {missing}")
        projection = Projection(pf.schema_arrow, schema, data_schema.names)
        t = pf.read(columns=[*projection.read_columns, ROW_ID_COLUMN, CHANGE_TYPE_COLUMN], use_threads=use_threads)
    codes = check_change_rows(t, uri=files.storage.uri, path=c.path, version=version)
    data = pa.Table.from_arrays([projection.column(n, t, t.num_rows) for n in data_schema.names], schema=data_schema)
    rid = np.asarray(t.column(ROW_ID_COLUMN).to_numpy(), dtype=np.int64)
    images = Images(data, rid, codes == POSTIMAGE_CODE, codes != DELETE_CODE)
    dropped = field_ids(pf.schema_arrow) - field_ids(schema.to_arrow()) - _CHANGE_FILE_IDS
    return images.without_equal_pairs() if dropped else images


def fresh_positions(files: DataFiles, p: Partition) -> np.ndarray:
    """Positions of the rows of ``p`` whose stored ``_ct_row_id`` is null
    (inserted by the commit that added ``p``), reading only that column, and
    nothing when statistics decide."""
    n = p.num_records
    s = p.stats
    if p.is_restored:  # its rows were inserted before the RESTORE that re-added it (SPEC §Restore)
        return np.empty(0, dtype=np.int64)
    if hidden_values_only_inherited(p):
        return np.arange(n, dtype=np.int64)
    if s is not None and s.null_count.get(ROW_ID_FIELD_ID) == 0:
        return np.empty(0, dtype=np.int64)
    with files.open(p) as src:
        pf = files.parquet(src, p)
        if ROW_ID_COLUMN not in pf.schema_arrow.names:
            return np.arange(n, dtype=np.int64)
        col = pf.read(columns=[ROW_ID_COLUMN]).column(0)
    return np.flatnonzero(np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool))


def read_inserts(files: DataFiles, p: Partition, schema: Schema, *, use_threads: bool = True) -> Images:
    """The fresh rows of added partition ``p`` as new images."""
    pos = fresh_positions(files, p)
    data_schema = schema.to_arrow(field_ids=False)
    if not len(pos):
        return Images.empty(data_schema)
    if len(pos) == p.num_records:
        data = read_partition_table(files, p, schema, use_threads=use_threads)
    else:
        data = read_rows(files, p, schema, pos, use_threads=use_threads)
    return Images(data, p.first_row_id + pos, np.ones(len(pos), dtype=bool))


def read_deleted(files: DataFiles, p: Partition, schema: Schema, *, use_threads: bool = True) -> Images:
    """Every row of ``p`` (removed with ``deletesAllRows``) as an old image."""
    t = read_partition_table(files, p, schema, hidden=True, use_threads=use_threads)
    names = schema.to_arrow(field_ids=False).names
    rid = np.asarray(t.column(ROW_ID_COLUMN).to_numpy(), dtype=np.int64)
    return Images(t.select(names), rid, np.zeros(t.num_rows, dtype=bool))


def reads_of(c: CapturedCommit, files: DataFiles, schema: Schema, *, use_threads: bool = True) -> list[Callable[[], Images]]:
    """One call per file of captured commit ``c`` to read, each returning
    that file's images: run them on a pool to read the files in parallel."""
    kw = {"use_threads": use_threads}
    out: list[Callable[[], Images]] = [functools.partial(read_change_file, files, f, c.version, schema, **kw) for f in c.change_files]
    out += [functools.partial(read_inserts, files, p, schema, **kw) for p in c.inserted]
    out += [functools.partial(read_deleted, files, p, schema, **kw) for p in c.deleted]
    return out


def read_captured(
    files: DataFiles, c: CapturedCommit, schema: Schema, *, use_threads: bool = True, pool: Executor | None = None
) -> Images:
    """All images of captured commit ``c`` (see the module docstring), its
    files read on ``pool`` when given."""
    calls = reads_of(c, files, schema, use_threads=use_threads)
    parts = list(pool.map(lambda f: f(), calls)) if pool is not None else [f() for f in calls]
    return Images.concat(parts, schema.to_arrow(field_ids=False))
