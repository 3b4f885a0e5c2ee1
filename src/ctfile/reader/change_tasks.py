"""Picklable units of a change scan, for engines that read in parallel.

:meth:`ctfile.reader.change_scan.ChangeSet.tasks` plans a change scan into
:class:`ChangeTask` objects whose outputs, taken together, are the scan's
output (as a multiset: the order of rows across tasks is not kept). A task
carries the table URI, storage options and a *restricted* change plan, so it
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
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.schema import ROW_ID_FIELD_ID, Schema
from ctfile.log.replay import TableState
from ctfile.log.storage import Storage
from ctfile.reader.change_plan import ChangePlan, CommitChanges, PlanShape
from ctfile.reader.pruning import prune
from ctfile.reader.scan_task import storage_for

DEFAULT_ROWS_PER_TASK = 1 << 20


@dataclass(frozen=True)
class ChangeTask:
    """One independent part of a change scan (see the module docstring)."""

    uri: str
    storage_options: dict | None
    table_schema: Schema
    table_id: str
    plan: ChangePlan
    changelog: str | None = None
    filter: pc.Expression | None = None
    initial_state: TableState | None = None
    num_records: int = 0  # rows of the partitions this task reads (a cost estimate)

    def change_set(self, *, batch_rows: int = 65536):
        """The :class:`~ctfile.reader.change_scan.ChangeSet` of this task's part."""
        from ctfile.reader.change_scan import ChangeSet

        return ChangeSet(
            storage_for(self.uri, self.storage_options), self.table_schema, self.table_id, self.plan,
            changelog=self.changelog, filter=self.filter, initial_state=self.initial_state,
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
    rows: int
    initial: list[Partition] = dataclasses.field(default_factory=list)
    appended: list[Partition] = dataclasses.field(default_factory=list)
    added: list[Partition] = dataclasses.field(default_factory=list)
    removed: list[Partition] = dataclasses.field(default_factory=list)
    commits: list[CommitChanges] = dataclasses.field(default_factory=list)


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
    plan: ChangePlan,
    *,
    changelog: str | None = None,
    filter: pc.Expression | None = None,
    initial_state: TableState | None = None,
    max_rows_per_task: int | None = None,
) -> list[ChangeTask]:
    """Split the change scan ``plan`` (with ``initial_state`` rows first, as
    :class:`~ctfile.reader.change_scan.ChangeSet` does) into independent
    tasks; see the module docstring. An empty scan has no tasks."""
    target = max_rows_per_task or DEFAULT_ROWS_PER_TASK

    def pruned(parts) -> list[Partition]:
        return prune(list(parts), table_schema, filter)

    units: list[_Unit] = []
    info = plan.information
    if initial_state is not None:
        for p in pruned(initial_state.partitions.values()):
            units.append(_Unit(p.num_records, initial=[p]))
    only_initial = initial_state is not None and info == "default"
    if not only_initial and plan.shape is not PlanShape.EMPTY:
        if info == "append_only":
            for p in pruned(plan.appended):
                fresh = p.fresh_rows
                units.append(_Unit(p.num_records if fresh is None else fresh, appended=[p]))
        elif info == "audit":
            for c in plan.commits:
                for a, r in components(pruned(c.added), pruned(c.removed)):
                    rows = sum(p.num_records for p in a + r)
                    units.append(_Unit(rows, commits=[CommitChanges(c.version, c.timestamp, tuple(a), tuple(r))]))
        else:
            for a, r in components(pruned(plan.added), pruned(plan.removed)):
                units.append(_Unit(sum(p.num_records for p in a + r), added=a, removed=r))

    # Pack consecutive units into tasks of about `target` rows.
    packs: list[_Unit] = []
    for u in units:
        if packs and packs[-1].rows + u.rows <= target:
            last = packs[-1]
            last.rows += u.rows
            last.initial += u.initial
            last.appended += u.appended
            last.added += u.added
            last.removed += u.removed
            last.commits += u.commits
        else:
            packs.append(dataclasses.replace(
                u, initial=list(u.initial), appended=list(u.appended), added=list(u.added),
                removed=list(u.removed), commits=list(u.commits),
            ))

    tasks = []
    for u in packs:
        has_changes = bool(u.appended or u.added or u.removed or u.commits)
        sub = dataclasses.replace(
            plan,
            shape=plan.shape if has_changes else PlanShape.EMPTY,
            added=tuple(u.added), removed=tuple(u.removed), appended=tuple(u.appended), commits=tuple(u.commits),
        )
        init = None
        if initial_state is not None and u.initial:
            init = dataclasses.replace(
                initial_state, partitions={p.path: p for p in u.initial}, app_transactions={},
            )
        if init is None and not has_changes:
            continue
        tasks.append(
            ChangeTask(
                storage.uri, storage.storage_options, table_schema, table_id, sub,
                changelog=changelog, filter=filter, initial_state=init, num_records=u.rows,
            )
        )
    return tasks
