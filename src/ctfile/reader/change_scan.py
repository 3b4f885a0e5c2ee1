"""Executing a change scan (SPEC §Change scans).

:class:`ChangeSet` is what :meth:`ctfile.Table.changes` returns: a
:class:`~ctfile.reader.change_spec.ChangeScan` (what is asked), its
:class:`~ctfile.reader.change_plan.ChangePlan` (what is read) and the ways to
read it. It reads the plan's initial rows, then its segments in order, each
producing :class:`~ctfile.reader.change_rows.Chunk` objects formatted into
the output schema at the end:

* ``default`` runs the minimum delta (:mod:`ctfile.reader.min_delta`) over the
  interval's net added and net removed partitions; ADDED_ONLY and
  REMOVED_ONLY simply have no pairs. Across a RESTORE it matches rows by row
  id and row version (SPEC §Restore).
* ``append_only`` is a filter over the appended partitions on the stored
  ``_ct_row_id`` being null: no join, and no removed partition is read (nor
  a partition a RESTORE re-added: its rows were inserted before).
* ``audit`` runs the minimum delta of each commit in turn.
* With captured segments (plan shapes CAPTURED and MIXED, SPEC §Change
  scans, "Using change files"), a captured commit's change is the images in
  its change files, the fresh rows of the partitions it added and the rows
  of those it removed with ``deletesAllRows``
  (:mod:`ctfile.reader.captured`): ``default`` consolidates the images of
  every segment per row id (:mod:`ctfile.reader.change_events`), a run of
  commits that are not captured giving the rows of its minimum delta;
  ``audit`` outputs each captured commit's images as its change.
* *initial rows* put the rows of a snapshot first (the one before the
  interval; for ``default`` the one at its end, which is then the whole
  result).

A ``filter`` on data columns prunes partitions by their statistics and is
applied to every output row.

One scan opens a partition several times (hidden columns, then rows, then a
comparison with its copy-on-write successor); all opens of one
:meth:`ChangeSet.to_batches` share one
:class:`~ctfile.reader.integrity.DataFiles`, so each file is verified once per
scan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from ctfile.format.actions import Partition
from ctfile.format.change_modes import ChangeMode
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.log_values import require_long
from ctfile.format.schema import Schema
from ctfile.log.location import TableLocation
from ctfile.log.storage import Storage
from ctfile.reader.captured import CapturedCommit, change_file_partition, fresh_positions, read_captured, reads_of
from ctfile.reader.change_events import Images, consolidate, emit_commit
from ctfile.reader.change_plan import ChangePlan, InitialRows, PlanShape, Segment
from ctfile.reader.change_rows import Chunk, change_schema, filter_chunk, format_chunk
from ctfile.reader.change_spec import ChangeScan
from ctfile.reader.change_tasks import plan_parts
from ctfile.reader.integrity import DataFiles
from ctfile.reader.min_delta import MinimumDelta
from ctfile.reader.partition_reader import read_hidden, read_partition, read_rows
from ctfile.reader.pruning import prune
from ctfile.reader.row_ids import table_seed

# Partitions decode in parallel on a pool of this many threads (pyarrow
# releases the GIL while decoding).
READ_WORKERS = max(2, min(8, os.cpu_count() or 1))


@dataclasses.dataclass(frozen=True)
class ChangeTask:
    """One independent part of a change scan (see :mod:`ctfile.reader.change_tasks`):
    the whole scan's ``scan`` spec and this task's part of its ``plan``,
    made by :meth:`ChangeSet.tasks`."""

    location: TableLocation
    table_schema: Schema
    table_id: str
    scan: ChangeScan
    plan: ChangePlan
    num_records: int = 0  # rows of the partitions this task reads (a cost estimate)

    def change_set(self, *, batch_rows: int = 65536) -> "ChangeSet":
        """The :class:`ChangeSet` of this task's part."""
        return ChangeSet(
            self.location.open(), self.table_schema, self.table_id, self.scan, self.plan, batch_rows=batch_rows,
        )

    def to_batches(self, *, batch_rows: int = 65536, use_threads: bool = True) -> Iterator[pa.RecordBatch]:
        """This task's change rows, in the schema of the whole scan, in
        batches of at most ``batch_rows``. ``use_threads=False`` decodes with
        one thread (see :meth:`ChangeSet.to_batches`), as
        :meth:`ScanTask.to_batches <ctfile.reader.scan_task.ScanTask.to_batches>` does."""
        yield from self.change_set(batch_rows=batch_rows).to_batches(use_threads=use_threads)


class ChangeSet:
    """The changes of a table over an interval. Obtain one with :meth:`ctfile.Table.changes`.

    Attributes
    ----------
    scan : ChangeScan
        What the scan asks for: interval, mode, changelog, filter, initial rows.
    plan : ChangePlan
        What it reads (planned from the log alone).
    plan_shape : PlanShape
        EMPTY, ADDED_ONLY, REMOVED_ONLY, MINIMIZE, INITIAL_ROWS, CAPTURED or MIXED.
    start_version, end_version : int
        The interval, both ends included.
    schema : pyarrow.Schema
        Table columns plus the metadata columns.
    """

    def __init__(
        self,
        storage: Storage,
        table_schema: Schema,
        table_id: str,
        scan: ChangeScan,
        plan: ChangePlan,
        *,
        batch_rows: int = 65536,
    ):
        self._storage = storage
        self._table_schema = table_schema
        self._data_schema = table_schema.to_arrow(field_ids=False)
        self._table_id = table_id
        self._seed = table_seed(table_id)
        self.scan = scan
        self.plan = plan
        self._batch_rows = batch_rows
        self.schema = change_schema(self._data_schema, audit=scan.is_audit, changelog=scan.changelog)

    def __repr__(self) -> str:
        return (
            f"ChangeSet({self._storage.uri!r}, {self.start_version}..{self.end_version}, "
            f"information={self.scan.mode.value!r}, plan_shape={self.plan_shape})"
        )

    @property
    def plan_shape(self) -> PlanShape:
        return self.plan.shape

    @property
    def start_version(self) -> int:
        return self.scan.start_version

    @property
    def end_version(self) -> int:
        return self.scan.end_version

    # ------------------------------------------------------------ public reads

    def to_batches(self, *, use_threads: bool = True) -> Iterator[pa.RecordBatch]:
        """Stream the change rows; memory is bounded by a few partitions plus
        the int64 hidden values of the interval's partitions.

        Parameters
        ----------
        use_threads : bool
            True (default): partitions decode in parallel on a pool of up to
            8 threads (as many as CPUs, at least 2), and pyarrow may use its
            own threads within a file. False: one decoding thread, which
            overlaps with the caller but does not multiply: right for an
            engine that already runs one scan per core (the Spark data
            source's workers).
        """
        if not isinstance(use_threads, bool):
            raise InvalidArgumentError(f"use_threads must be a bool, found {use_threads!r}")
        return self._batches(use_threads)

    def _batches(self, use_threads: bool) -> Iterator[pa.RecordBatch]:
        for chunk in self._chunks(DataFiles(self._storage), use_threads):
            yield from format_chunk(
                chunk, self.schema, changelog=self.scan.changelog, audit=self.scan.is_audit, seed=self._seed,
                batch_rows=self._batch_rows,
            )

    def to_arrow(self, *, use_threads: bool = True) -> pa.Table:
        """All change rows in one Table (see :meth:`to_batches`)."""
        return pa.Table.from_batches(list(self.to_batches(use_threads=use_threads)), schema=self.schema)

    def tasks(self, *, max_rows_per_task: int | None = None) -> list["ChangeTask"]:
        """Plan this scan as independent picklable :class:`ChangeTask`
        objects for parallel engines: together their ``to_batches()`` yield
        this scan's rows (as a multiset). See :mod:`ctfile.reader.change_tasks`."""
        if max_rows_per_task is not None:
            require_long(max_rows_per_task, "max_rows_per_task", minimum=1)
        location = TableLocation.of(self._storage)
        return [
            ChangeTask(location, self._table_schema, self._table_id, self.scan, part.plan, num_records=part.num_records)
            for part in plan_parts(self._table_schema, self.scan, self.plan, max_rows_per_task=max_rows_per_task)
        ]

    def to_pandas(self):
        return self.to_arrow().to_pandas()

    # ------------------------------------------------------------ planning of chunks

    def _chunks(self, files: DataFiles, use_threads: bool) -> Iterator[Chunk]:
        """The initial rows, then each segment's rows in order."""
        if self.plan.initial is not None:
            yield from self._initial_rows(files, self.plan.initial, use_threads)
        if not self.plan.segments:
            return
        if self.plan.reads_fresh_rows:  # append_only, or default over an append-only interval
            for seg in self.plan.segments:
                yield from self._append_only(files, self._prune(seg.added), use_threads)
            return
        with ThreadPoolExecutor(max_workers=READ_WORKERS) if use_threads else contextlib.nullcontext() as pool:
            if self.scan.mode is ChangeMode.DEFAULT and self.plan.consolidates:
                yield from self._consolidated(files, use_threads, pool)
            else:
                yield from self._per_segment(files, use_threads, pool)

    def _per_segment(self, files: DataFiles, use_threads: bool, pool) -> Iterator[Chunk]:
        """``default`` read from partitions, or ``audit``: each segment's
        change on its own (a captured one from its files), in order."""
        md = self._minimum_delta(files, use_threads, filtered=True)
        for seg in self.plan.segments:
            version, timestamp = self._commit_tags(seg)
            if isinstance(seg, CapturedCommit):
                images = read_captured(files, self._pruned_commit(seg), self._table_schema, use_threads=use_threads, pool=pool)
                yield from emit_commit(images, filter=self.scan.row_filter, version=version, timestamp_ms=timestamp)
            else:
                yield from md.run(
                    self._prune(seg.added), self._prune(seg.removed), seg.start_version,
                    version=version, timestamp_ms=timestamp, match_versions=seg.match_versions,
                )

    def _commit_tags(self, seg: Segment) -> tuple[int | None, int | None]:
        """``(version, timestamp)`` the rows of ``seg`` carry: audit segments
        are single commits, whose rows carry the commit; None otherwise."""
        if self.scan.is_audit:
            return seg.start_version, seg.timestamp
        return None, None

    def _minimum_delta(self, files: DataFiles, use_threads: bool, *, filtered: bool) -> MinimumDelta:
        return MinimumDelta(
            files, self._table_schema, filter=self.scan.row_filter if filtered else None, batch_rows=self._batch_rows,
            workers=READ_WORKERS if use_threads else 1, use_threads=use_threads,
        )

    def _consolidated(self, files: DataFiles, use_threads: bool, pool) -> Iterator[Chunk]:
        """``default`` over captured segments (SPEC §Change scans, "Using
        change files"): the events of every segment, consolidated per row
        id, the filter applied once at the end. A run of commits that are
        not captured gives the rows of its unfiltered partition-based minimum
        delta; nothing is pruned by statistics, since a row's first or last
        event may fail the filter while the consolidated row passes it. The
        captured commits' files are read on ``pool``, all at once."""
        md = self._minimum_delta(files, use_threads, filtered=False)
        captured = [s for s in self.plan.segments if isinstance(s, CapturedCommit)]
        per_commit = self._captured_images(files, captured, use_threads, pool)
        if len(self.plan.segments) == 1 and len(captured) == 1:  # one captured commit: its images are its minimum delta
            yield from emit_commit(Images.concat(per_commit[0], self._data_schema), filter=self.scan.row_filter)
            return
        captured_images = iter(per_commit)
        segments = []
        for seg in self.plan.segments:
            if isinstance(seg, CapturedCommit):
                segments.append(Images.concat(next(captured_images), self._data_schema))
            else:
                chunks = md.run(seg.added, seg.removed, seg.start_version, match_versions=seg.match_versions)
                segments.append(Images.from_chunks(list(chunks), self._data_schema))
        yield from consolidate(segments, filter=self.scan.row_filter, batch_rows=self._batch_rows)

    def _captured_images(
        self, files: DataFiles, captured: Sequence[CapturedCommit], use_threads: bool, pool,
    ) -> list[list[Images]]:
        """Per commit of ``captured``, the images of its files, all read at
        once on ``pool`` (on this thread without one)."""
        calls = [(i, f) for i, c in enumerate(captured) for f in reads_of(c, files, self._table_schema, use_threads=use_threads)]
        read = pool.map(lambda call: call[1](), calls) if pool is not None else (f() for _, f in calls)
        per_commit: list[list[Images]] = [[] for _ in captured]
        for (i, _), images in zip(calls, read):
            per_commit[i].append(images)
        return per_commit

    def _pruned_commit(self, c: CapturedCommit) -> CapturedCommit:
        """``c`` without the files whose statistics show no row passes the
        filter (exact for one commit's own change: every row id's images of
        the commit are in one file)."""
        if self.scan.row_filter is None:
            return c
        keep = {p.path for p in self._prune([change_file_partition(f, c.version) for f in c.change_files])}
        return dataclasses.replace(
            c, change_files=tuple(f for f in c.change_files if f.path in keep),
            inserted=tuple(self._prune(c.inserted)), deleted=tuple(self._prune(c.deleted)),
        )

    def _prune(self, parts: Sequence[Partition]) -> list[Partition]:
        return prune(list(parts), self._table_schema, self.scan.row_filter)

    def _rows_chunk(
        self, files: DataFiles, p: Partition, positions: np.ndarray, ids: np.ndarray, *, insert: bool, use_threads: bool,
        version=None, timestamp_ms=None,
    ) -> Chunk | None:
        if len(positions) == 0:
            return None
        if len(positions) == p.num_records:
            data = pa.Table.from_batches(
                list(read_partition(files, p, self._table_schema, use_threads=use_threads)), schema=self._data_schema
            )
        else:
            data = read_rows(files, p, self._table_schema, positions, use_threads=use_threads)
        return filter_chunk(data, ids, insert, self.scan.row_filter, version=version, timestamp_ms=timestamp_ms)

    # ------------------------------------------------------------ modes

    def _initial_rows(self, files: DataFiles, initial: InitialRows, use_threads: bool) -> Iterator[Chunk]:
        for p in self._prune(initial.partitions):
            rid, _ = read_hidden(files, p)
            c = self._rows_chunk(
                files, p, np.arange(p.num_records), rid, insert=True, use_threads=use_threads,
                version=initial.version if self.scan.is_audit else None,
                timestamp_ms=initial.timestamp,
            )
            if c is not None:
                yield c

    def _append_only(self, files: DataFiles, parts: Sequence[Partition], use_threads: bool) -> Iterator[Chunk]:
        for p in parts:
            fresh = fresh_positions(files, p)
            c = self._rows_chunk(files, p, fresh, p.first_row_id + fresh, insert=True, use_threads=use_threads)
            if c is not None:
                yield c
