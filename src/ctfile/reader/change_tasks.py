"""Splitting a change plan into independent parts, for engines that read in parallel.

:meth:`ctfile.reader.change_scan.ChangeSet.tasks` plans a change scan into
:class:`~ctfile.reader.change_scan.ChangeTask` objects whose outputs, taken
together, are the scan's output (as a multiset: the order of rows across
tasks is not kept). This module finds the parts: :func:`plan_parts` splits
the scan's plan into *restricted* change plans (:meth:`ChangePlan.restricted
<ctfile.reader.change_plan.ChangePlan.restricted>`); each task carries one,
with the table's location and the scan's
:class:`~ctfile.reader.change_spec.ChangeScan`, so it can be shipped to
another process (a Spark executor) and run there as an ordinary
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

The same holds for captured segments (SPEC §Change scans, "Using change
files"): the consolidated change of a row id depends only on its events,
which come from the sources holding that id: change files (their ids bounded
by their ``_ct_row_id`` statistics), the partitions a captured commit added
(fresh rows) or removed with ``deletesAllRows``, and the partitions of the
runs computed from partitions.

Each segment of the plan splits into units:

* ``append_only``: one unit per appended partition (rows are independent).
* ``default``: one unit per component of the net added and removed
  partitions; with captured segments (plan shapes CAPTURED and MIXED), one
  unit per component of the sources of all segments together, as the pieces
  of each segment it reads (a row id's events in different segments must be
  consolidated in one task).
* ``audit``: one unit per component of each commit's sources (each commit's
  delta is computed on its own anyway).
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
from typing import Callable, Sequence

from ctfile.format.actions import ChangeFile, Partition
from ctfile.format.change_modes import ChangeMode
from ctfile.format.schema import ROW_ID_FIELD_ID, Schema
from ctfile.reader.captured import CapturedCommit
from ctfile.reader.change_plan import ChangePlan, InitialRows, PartitionDelta, Segment
from ctfile.reader.change_spec import ChangeScan
from ctfile.reader.pruning import prune

DEFAULT_ROWS_PER_TASK = 1 << 20


@dataclass(frozen=True)
class PlanPart:
    """One independent part of a change plan: the plan restricted to it, and
    the rows of the partitions it reads (a cost estimate)."""

    plan: ChangePlan
    num_records: int


@dataclass
class _Unit:
    """Partitions and change files that must be read by one task:
    initial-row partitions and pieces of the plan's segments."""

    rows: int
    initial: list[Partition] = dataclasses.field(default_factory=list)
    segments: list[Segment] = dataclasses.field(default_factory=list)

    def absorb(self, other: "_Unit") -> None:
        """Add ``other``'s sources; pieces of one segment merge into one
        (exact: the change of a union of components is the union of theirs,
        see the module docstring). Pieces stay in version order: a
        consolidation takes a row id's old image from its first event and
        its new image from its last (SPEC §Change scans, "Using change
        files"), so a piece of a later segment appended before an earlier
        one would reverse them."""
        self.rows += other.rows
        self.initial += other.initial
        for piece in other.segments:
            at = next((i for i, s in enumerate(self.segments) if _segment_key(s) == _segment_key(piece)), None)
            if at is None:
                self.segments.append(piece)
            else:
                self.segments[at] = self.segments[at].merged(piece)
        self.segments.sort(key=lambda s: s.start_version)  # segments of one plan never share a version


def _segment_key(s: Segment) -> tuple:
    return (type(s).__name__, s.start_version, s.end_version, s.timestamp)


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


def change_file_row_id_range(c: ChangeFile) -> tuple[float, float]:
    """Bounds of the row ids in change file ``c``, from its ``_ct_row_id``
    statistics; ``(-inf, inf)`` without them."""
    s = c.stats
    lo = s.min_values.get(ROW_ID_FIELD_ID) if s is not None else None
    hi = s.max_values.get(ROW_ID_FIELD_ID) if s is not None else None
    if lo is None or hi is None:
        return (-math.inf, math.inf)
    return (int(lo), int(hi))


def connected(ranges: Sequence[tuple[float, float]]) -> list[list[int]]:
    """Indices of ``ranges`` grouped into the connected components of
    overlapping ranges, in ascending range order, each group ascending."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    groups: list[list[int]] = []
    hi = -math.inf
    for i in order:
        lo, h = ranges[i]
        if not groups or lo > hi:
            groups.append([])
            hi = h
        else:
            hi = max(hi, h)
        groups[-1].append(i)
    return [sorted(g) for g in groups]


def components(added: Sequence[Partition], removed: Sequence[Partition]) -> list[tuple[list[Partition], list[Partition]]]:
    """Groups ``(added, removed)`` such that every row id's partitions fall in
    one group: the connected components of overlapping row-id ranges, in
    ascending range order, each side in its original order."""
    n = len(added)
    out = []
    for g in connected([row_id_range(p) for p in [*added, *removed]]):
        out.append(([added[i] for i in g if i < n], [removed[i - n] for i in g if i >= n]))
    return out


_SOURCE_FIELDS = {CapturedCommit: ("change_files", "inserted", "deleted"), PartitionDelta: ("added", "removed")}


def _sources(seg: Segment) -> list[tuple[str, object, tuple[float, float]]]:
    """``(field, source, row-id range)`` of each file ``seg`` reads; ``field``
    names the segment field the source belongs to."""
    if isinstance(seg, CapturedCommit):
        out = [("change_files", c, change_file_row_id_range(c)) for c in seg.change_files]
        out += [("inserted", p, row_id_range(p)) for p in seg.inserted]
        return out + [("deleted", p, row_id_range(p)) for p in seg.deleted]
    return [("added", p, row_id_range(p)) for p in seg.added] + [("removed", p, row_id_range(p)) for p in seg.removed]


def _split_segments(segments: Sequence[Segment]) -> list[list[Segment]]:
    """The sources of ``segments`` grouped so that every row id's sources,
    in all of them, fall in one group (the components of their row-id
    ranges); each group as the pieces of the segments it reads, in order."""
    flat = [(k, field, src, rng) for k, seg in enumerate(segments) for field, src, rng in _sources(seg)]
    out = []
    for g in connected([rng for _, _, _, rng in flat]):
        fields: dict[int, dict[str, list]] = {}
        for i in g:
            k, field, src, _ = flat[i]
            fields.setdefault(k, {}).setdefault(field, []).append(src)
        pieces = []
        for k in sorted(fields):
            empty = dict.fromkeys(_SOURCE_FIELDS[type(segments[k])], ())
            pieces.append(dataclasses.replace(segments[k], **{**empty, **{f: tuple(v) for f, v in fields[k].items()}}))
        out.append(pieces)
    return out


def plan_parts(
    table_schema: Schema,
    scan: ChangeScan,
    plan: ChangePlan,
    *,
    max_rows_per_task: int | None = None,
) -> list[PlanPart]:
    """Split ``plan``, the plan of ``scan``, into independent parts of about
    ``max_rows_per_task`` rows (initial rows first, as
    :class:`~ctfile.reader.change_scan.ChangeSet` reads them); see the module
    docstring. An empty scan has no parts."""
    parts = []
    for u in _packed(_units(table_schema, scan, plan), max_rows_per_task or DEFAULT_ROWS_PER_TASK):
        initial = _initial_part(plan, u)
        if initial is None and not u.segments:
            continue
        parts.append(PlanPart(plan.restricted(u.segments, initial), u.rows))
    return parts


def _packed(units: list[_Unit], target: int) -> list[_Unit]:
    """``units`` packed in order into units of at most ``target`` rows (a
    unit larger than that stays alone)."""
    packs: list[_Unit] = []
    for u in units:
        if not packs or packs[-1].rows + u.rows > target:
            packs.append(_Unit(0))
        packs[-1].absorb(u)
    return packs


def _initial_part(plan: ChangePlan, u: _Unit) -> InitialRows | None:
    """The initial rows of ``plan`` that unit ``u`` reads (None: none)."""
    if plan.initial is None or not u.initial:
        return None
    return dataclasses.replace(plan.initial, partitions=tuple(u.initial))


def _units(table_schema: Schema, scan: ChangeScan, plan: ChangePlan) -> list[_Unit]:
    """The smallest independent parts of ``plan``, in reading order (partitions
    a ``filter`` prunes by statistics dropped where the serial scan drops
    them)."""

    def pruned(parts) -> list[Partition]:
        return prune(list(parts), table_schema, scan.row_filter)

    units = []
    if plan.initial is not None:
        units += [_Unit(p.num_records, initial=[p]) for p in pruned(plan.initial.partitions)]
    if scan.mode is ChangeMode.DEFAULT and plan.consolidates:
        # One consolidation over every segment: a row id's events in all of
        # them in one task; nothing pruned (see ChangeSet._consolidated).
        return units + [_Unit(sum(_rows(p) for p in pieces), segments=pieces) for pieces in _split_segments(plan.segments)]
    mode = ChangeMode.APPEND_ONLY if plan.reads_fresh_rows else scan.mode  # SPEC §Append-only tables
    for seg in plan.segments:
        units += _segment_units(seg, mode, pruned)
    return units


def _segment_units(seg: Segment, mode: ChangeMode, pruned: Callable[[Sequence[Partition]], list[Partition]]) -> list[_Unit]:
    """The units of one segment of a scan in ``mode`` that does not
    consolidate; ``pruned`` drops the partitions the scan's filter prunes."""
    if mode is ChangeMode.APPEND_ONLY:
        # One per appended partition, costing its fresh rows.
        return [
            _Unit(p.num_records if p.fresh_rows is None else p.fresh_rows, segments=[dataclasses.replace(seg, added=(p,))])
            for p in pruned(seg.added)
        ]
    if isinstance(seg, CapturedCommit):
        # audit: the commit's own change, split by row ids.
        return [_Unit(_rows(piece), segments=[piece]) for (piece,) in _split_segments([seg])]
    return [
        _Unit(sum(p.num_records for p in a + r), segments=[dataclasses.replace(seg, added=tuple(a), removed=tuple(r))])
        for a, r in components(pruned(seg.added), pruned(seg.removed))
    ]


def _rows(seg: Segment) -> int:
    """Rows of the files ``seg`` reads (a cost estimate)."""
    if isinstance(seg, CapturedCommit):
        return seg.num_records
    return sum(p.num_records for p in seg.partitions)
