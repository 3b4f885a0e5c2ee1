"""Picklable units of a change scan, for engines that read in parallel.

:meth:`ctfile.reader.change_scan.ChangeSet.tasks` plans a change scan into
:class:`ChangeTask` objects whose outputs, taken together, are the scan's
output (as a multiset: the order of rows across tasks is not kept). A task
carries the table URI, storage options, the scan's
:class:`~ctfile.reader.change_spec.ChangeScan` and a *restricted* change
plan (:meth:`ChangePlan.restricted
<ctfile.reader.change_plan.ChangePlan.restricted>`), so it
can be shipped to another process (a Spark executor) and run there with
:meth:`ChangeTask.to_batches`, which executes an ordinary
:class:`~ctfile.reader.change_scan.ChangeSet` over its part of the plan.

Why the split is exact
----------------------
Every output row of a change scan is decided by one row id alone: whether the
id is in a net-removed partition, in a net-added partition with a row version
inside the interval, or in an added partition as an unchanged copy (SPEC
§Change scans). So the minimum delta over a set of partitions is the union of
the minimum deltas over any grouping of those partitions in which every row
id's partitions share a group. Grouping partitions whose row-id ranges
overlap (connected components of the interval graph) gives such a grouping:
all partitions holding a given id contain it in their ranges, so they overlap
pairwise. A partition's row-id range comes from the log alone: inherited ids
are ``firstRowId .. firstRowId + numRecords - 1``, stored ids are bounded by
the ``_ct_row_id`` statistics; without statistics the range is unbounded and
the partition joins every group.

Each segment of the plan splits into units:

* ``append_only``: one unit per appended partition (rows are independent).
* ``default``: one unit per component of the net added and removed partitions.
* ``audit``: one unit per component of each commit's added and removed
  partitions (each commit's delta is computed on its own anyway).
* initial rows: one unit per partition of the initial snapshot.

Units are packed into tasks of about ``max_rows_per_task`` rows (rows of the
partitions a task reads); a unit larger than that stays one task.
Partitions that a ``filter`` prunes by statistics are dropped while planning,
exactly as the serial scan drops them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa

from ctfile.format.actions import Partition
from ctfile.format.schema import ROW_ID_FIELD_ID, Schema
from ctfile.log.storage import Storage
from ctfile.reader.change_plan import ChangePlan, Segment
from ctfile.reader.change_spec import ChangeMode, ChangeScan
from ctfile.reader.pruning import prune
from ctfile.reader.scan_task import storage_for

DEFAULT_ROWS_PER_TASK = 1 << 20


@dataclass(frozen=True)
class ChangeTask:
    """One independent part of a change scan (see the module docstring):
    the whole scan's ``scan`` spec and this task's part of its ``plan``."""

    uri: str
    storage_options: dict | None
    table_schema: Schema
    table_id: str
    scan: ChangeScan
    plan: ChangePlan
    num_records: int = 0  # rows of the partitions this task reads (a cost estimate)

    def change_set(self, *, batch_rows: int = 65536):
        """The :class:`~ctfile.reader.change_scan.ChangeSet` of this task's part."""
        from ctfile.reader.change_scan import ChangeSet

        return ChangeSet(
            storage_for(self.uri, self.storage_options), self.table_schema, self.table_id, self.scan, self.plan,
            batch_rows=batch_rows,
        )

    def to_batches(self, *, batch_rows: int = 65536, use_threads: bool = True) -> Iterator[pa.RecordBatch]:
        """This task's change rows, in the schema of the whole scan, in
        batches of at most ``batch_rows``. ``use_threads=False`` decodes with
        one thread (see :meth:`ChangeSet.to_batches
        <ctfile.reader.change_scan.ChangeSet.to_batches>`), as
        :meth:`ScanTask.to_batches` does."""
        yield from self.change_set(batch_rows=batch_rows).to_batches(use_threads=use_threads)


@dataclass
class _Unit:
    """Partitions that must be read by one task: initial-row partitions and
    pieces of the plan's segments."""

    rows: int
    initial: list[Partition] = dataclasses.field(default_factory=list)
    segments: list[Segment] = dataclasses.field(default_factory=list)

    def absorb(self, other: "_Unit") -> None:
        """Add ``other``'s partitions; pieces of one segment merge back into one
        (exact: the minimum delta of a union of components is the union of
        theirs, see the module docstring)."""
        self.rows += other.rows
        self.initial += other.initial
        for piece in other.segments:
            last = self.segments[-1] if self.segments else None
            if last is not None and _same_segment(last, piece):
                self.segments[-1] = dataclasses.replace(
                    last, added=last.added + piece.added, removed=last.removed + piece.removed
                )
            else:
                self.segments.append(piece)


def _same_segment(a: Segment, b: Segment) -> bool:
    return type(a) is type(b) and (a.start_version, a.end_version, a.timestamp) == (
        b.start_version, b.end_version, b.timestamp
    )


def row_id_range(p: Partition) -> tuple[float, float]:
    """Bounds of the row ids of ``p``'s rows, from the log alone; ``(-inf, inf)``
    when the statistics do not bound them."""
    n = p.num_records
    inherited = (p.first_row_id, p.first_row_id + n - 1)
    s = p.stats
    if s is None:
        return (-math.inf, math.inf)
    nulls = s.null_count.get(ROW_ID_FIELD_ID)
    if nulls is None:
        return (-math.inf, math.inf)
    if nulls >= n:
        return inherited
    lo, hi = s.min_values.get(ROW_ID_FIELD_ID), s.max_values.get(ROW_ID_FIELD_ID)
    if lo is None or hi is None:
        return (-math.inf, math.inf)
    lo, hi = int(lo), int(hi)
    if nulls == 0:
        return (lo, hi)
    return (min(lo, inherited[0]), max(hi, inherited[1]))


def components(added: Sequence[Partition], removed: Sequence[Partition]) -> list[tuple[list[Partition], list[Partition]]]:
    """Groups ``(added, removed)`` such that every row id's partitions fall in
    one group: the connected components of overlapping row-id ranges, in
    ascending range order, each side in its original order."""
    items = [(row_id_range(p), 0, i) for i, p in enumerate(added)]
    items += [(row_id_range(p), 1, i) for i, p in enumerate(removed)]
    items.sort(key=lambda t: (t[0][0], t[0][1]))
    groups: list[list[tuple[int, int]]] = []
    hi = -math.inf
    for (lo, h), side, i in items:
        if not groups or lo > hi:
            groups.append([])
            hi = h
        else:
            hi = max(hi, h)
        groups[-1].append((side, i))
    out = []
    for g in groups:
        a = sorted(i for side, i in g if side == 0)
        r = sorted(i for side, i in g if side == 1)
        out.append(([added[i] for i in a], [removed[i] for i in r]))
    return out


def plan_change_tasks(
    storage: Storage,
    table_schema: Schema,
    table_id: str,
    scan: ChangeScan,
    plan: ChangePlan,
    *,
    max_rows_per_task: int | None = None,
) -> list[ChangeTask]:
    """Split ``plan``, the plan of ``scan``, into independent tasks (initial
    rows first, as :class:`~ctfile.reader.change_scan.ChangeSet` reads
    them); see the module docstring. An empty scan has no tasks."""
    target = max_rows_per_task or DEFAULT_ROWS_PER_TASK
    packs: list[_Unit] = []
    for u in _units(table_schema, scan, plan):
        if packs and packs[-1].rows + u.rows <= target:
            packs[-1].absorb(u)
        else:
            packs.append(_Unit(0))
            packs[-1].absorb(u)
    tasks = []
    for u in packs:
        initial = None
        if plan.initial is not None and u.initial:
            initial = dataclasses.replace(plan.initial, partitions=tuple(u.initial))
        if initial is None and not u.segments:
            continue
        tasks.append(ChangeTask(
            storage.uri, storage.storage_options, table_schema, table_id, scan,
            plan.restricted(u.segments, initial), num_records=u.rows,
        ))
    return tasks


def _units(table_schema: Schema, scan: ChangeScan, plan: ChangePlan) -> list[_Unit]:
    """The smallest independent parts of ``plan``, in reading order (partitions
    a ``filter`` prunes by statistics dropped)."""

    def pruned(parts) -> list[Partition]:
        return prune(list(parts), table_schema, scan.row_filter)

    units = []
    if plan.initial is not None:
        units += [_Unit(p.num_records, initial=[p]) for p in pruned(plan.initial.partitions)]
    for seg in plan.segments:
        if scan.mode is ChangeMode.APPEND_ONLY:
            for p in pruned(seg.added):
                fresh = p.fresh_rows
                piece = dataclasses.replace(seg, added=(p,))
                units.append(_Unit(p.num_records if fresh is None else fresh, segments=[piece]))
        else:
            for a, r in components(pruned(seg.added), pruned(seg.removed)):
                piece = dataclasses.replace(seg, added=tuple(a), removed=tuple(r))
                units.append(_Unit(sum(p.num_records for p in a + r), segments=[piece]))
    return units
