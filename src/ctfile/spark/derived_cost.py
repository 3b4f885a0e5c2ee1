"""The cost model by which ``refresh_mode="auto"`` chooses between an
``INCREMENTAL`` and a ``FULL`` refresh (SPEC §Derived tables, refresh
actions; the Dynamic Tables paper, section 3.3.2: a full refresh costs
about what the defining query costs, an incremental one has fixed costs and
costs that grow with the changed data).

Both estimates come from the logs alone (commit metrics, partition counts),
before any Spark job, in one unit: a row that a full recomputation reads or
writes through Spark. Under copy-on-write an incremental refresh also pays
for every stored row of each derived partition its change touches, and
that is what makes it lose to a full refresh: the rows of a join are keyed
by source row ids, so an update of 0.1% of a source's rows at random lands
in every partition of the derived table.

* ``full``: :data:`FULL_JOBS` Spark jobs, every source row read and every
  derived row written (:data:`FULL_ROW` each: computed, persisted, its key
  checked unique across the whole result, and written by ctfile's writer
  from Spark); ``auto``'s full refresh overwrites the table (Snowflake's
  FULL, "essentially an INSERT OVERWRITE"), so no stored row is read back.
* ``incremental``: the delta, computed by pyarrow in the driver
  (:mod:`ctfile.spark.derived_driver`, no Spark job,
  :data:`DRIVER_CHANGE_ROW` per change row) or by Spark
  (:data:`SPARK_DELTA_JOBS` jobs, :data:`SPARK_CHANGE_ROW` per change row:
  the delta joins each change with the stored states), plus the MERGE's
  rewrite of the touched partitions (:data:`MERGE_ROW` per stored row;
  :data:`MERGE_JOBS` more jobs unless the touched rows are few enough for
  the driver's MERGE), plus
* what the incremental delta reads besides the change, by the plan's
  :class:`~ctfile.derived.DeltaKind` (``CompiledQuery.delta_kind``): a
  plan that recomputes groups scans the new state of every source
  (:data:`SCAN_ROW` per source row, what a full refresh pays to read it),
  one that recomputes join keys the new and the old states; a window plan
  scans the new state (the touched partitions are picked out after the
  scan), reads the derived table (its touched partitions' old rows,
  :data:`SCAN_ROW` per stored row) and windows the source rows of the
  touched partitions (:data:`WINDOW_ROW` each: their sort, their full
  outer join with the old rows, and the MERGE source rows that grow with
  them); a deduplication over an interval that only appended ranks the
  appended rows with the table's rows of their partitions, which reads
  the table and no source state.

Touched rows assume the changed rows fall at random: ``k`` changed rows
among ``P`` equal partitions of ``D`` rows touch ``D * (1 - (1 -
1/P)**k)`` rows. A row-level plan's inserts touch no stored row (they add
rows); its updates and deletes each touch the derived rows of their
source row. Every change of an aggregate's source touches its group, and
every change of a window plan's source its window partition. The logs do
not say how many window partitions the source holds; the model takes the
derived table's row count, which is exact for a deduplication (one row
per partition) and too high for a window that keeps every row (whose
touched rows it then underestimates; its source scan still counts).
Clustered changes touch fewer partitions than this says, so the model errs
toward ``FULL`` for them. The constants are set from
``benchmarks/bench_derived.py`` at 10,000,000 rows (RESULTS.md); they
order the two actions, they do not predict seconds: :data:`WINDOW_ROW`
makes the deduplication's refresh of 0.1% and 1% of its 10,000,000 or
2,000,000 rows incremental and of 10% full. Its MERGE of a 1% change
(about 10,000 rows into 1,000,000) is spread over the executors
(:func:`ctfile.spark.local.run_spread`), no longer Spark's join whose jobs
made that refresh slower than ``auto``'s full refresh (an overwrite,
measured at about twice a plain recomputation); at 10% the windows of the
touched partitions make it slower.

Limits: a full refresh's own sort of every row of a window plan is left
in its per-row read. A ``NOT IN`` whose subquery's null-aware state
changes (its filtered values become empty or not, or gain or lose a NULL:
``ctfile.derived.outer_joins.NotIn``) recomputes every key, about two full
refreshes' work; the logs cannot tell that cheaply (commit metrics count
rows, not the subquery's filtered values or their NULLs), so the model
costs it as any join-key refresh and errs toward ``INCREMENTAL`` for it.

Examples
--------
>>> groups = TargetShape(rows=250, partitions=1)            # an aggregate's few groups
>>> big = CostInputs(source_rows=10_000_000, changed_rows=3_000_000, removed_rows=1_000_000, target=groups,
...                  aggregate=True, driver_delta=False, driver_merge_rows=2_000_000)
>>> estimate(big).prefers_full                               # a Spark delta of 3,000,000 change rows
True
>>> estimate(CostInputs(source_rows=10_000_000, changed_rows=100_000, removed_rows=50_000, target=groups,
...                     aggregate=True, driver_delta=True, driver_merge_rows=2_000_000)).prefers_full
False
>>> blocks = TargetShape(rows=1_000_000, partitions=1)      # a deduplication's one row per block of 10 ids
>>> def dedup(changed, kind=DeltaKind.PARTITIONS):
...     return estimate(CostInputs(source_rows=10_000_000, changed_rows=changed, removed_rows=changed // 2,
...                                target=blocks, aggregate=False, driver_delta=False,
...                                driver_merge_rows=2_000_000, kind=kind))
>>> dedup(100_000).prefers_full, dedup(1_000_000).prefers_full  # 1% and 10% of the rows changed
(False, True)
>>> dedup(1_000_000, DeltaKind.APPENDED_TOP_ROWS).prefers_full  # 10% appended: no partition recomputed
False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import ctfile
from ctfile.derived import DeltaKind
from ctfile.spark.derived_sources import SourceState
from ctfile.spark.local import LocalLimits

#: A Spark job's fixed cost (scheduling, task start, a Python worker), in rows.
JOB_COST = 1_000_000
#: A full refresh: the query computed and persisted, its keys checked, its rows written.
FULL_JOBS = 3
#: A delta computed by Spark: the delta, its key check, its count.
SPARK_DELTA_JOBS = 3
#: A MERGE on the executors: its source's ranges, the join, the rewrite.
MERGE_JOBS = 3
#: ``auto`` refreshes in full only when that is estimated to cost less than
#: the incremental refresh divided by this: the model is rough, and an
#: incremental refresh keeps row ids (a minimal change for readers of the
#: table's own changes) where ``auto``'s full refresh replaces every row.
FULL_MARGIN = 2.0
#: A derived row a full refresh writes: about what a stored row costs the
#: MERGE (both go through the key check and ctfile's writer).
FULL_ROW = 8.0
DRIVER_CHANGE_ROW = 1.0
SPARK_CHANGE_ROW = 20.0
MERGE_ROW = 8.0
#: A row of a source's state or of the derived table that a delta reads
#: whole (a full refresh reads each source row once at this cost).
SCAN_ROW = 1.0
#: A source row of a partition a window plan's delta recomputes.
WINDOW_ROW = 15.0
#: The whole source states a delta scans, by what it reads (a window plan
#: reads the new state; join keys are recomputed over the new and the old).
STATE_SCANS = {DeltaKind.CHANGE: 0, DeltaKind.GROUPS: 1, DeltaKind.JOIN_KEYS: 2, DeltaKind.PARTITIONS: 1,
               DeltaKind.APPENDED_TOP_ROWS: 0}
#: The deltas that read the derived table itself (a window's old rows).
READS_TARGET = frozenset({DeltaKind.PARTITIONS, DeltaKind.APPENDED_TOP_ROWS})
#: The deltas whose every change row lands on its window partition's rows.
BY_PARTITION = READS_TARGET


@dataclass(frozen=True)
class TargetShape:
    """The derived table's live rows and partitions, from its snapshot."""

    rows: int
    partitions: int

    def touched_rows(self, hits: int) -> float:
        """The stored rows of the partitions ``hits`` random rows fall in."""
        return random_hits(self.rows, self.partitions, hits)


def random_hits(rows: float, partitions: int, hits: int) -> float:
    """The rows of the partitions ``hits`` random rows fall in, of ``rows``
    rows in ``partitions`` equal partitions (module docstring).

    >>> [round(random_hits(1_000, 10, hits)) for hits in (0, 1, 2, 100)]  # the second hit may share the first's
    [0, 100, 190, 1000]
    """
    if hits <= 0 or rows <= 0:
        return 0.0
    return rows * (1.0 - (1.0 - 1.0 / max(1, partitions)) ** hits)


@dataclass(frozen=True)
class CostInputs:
    """What the model reads: the sources' rows at the new frontier, their
    changed rows (inserted, updated, deleted) and of those the updated and
    deleted ones, the derived table's shape, whether the plan aggregates,
    whether the delta would be computed in the driver, how many stored
    rows the driver's MERGE takes (``spark.ctfile.local.targetRows``), and
    what the plan's delta reads besides the change (``kind``)."""

    source_rows: int
    changed_rows: int
    removed_rows: int
    target: TargetShape
    aggregate: bool
    driver_delta: bool
    driver_merge_rows: int
    kind: DeltaKind = DeltaKind.CHANGE

    @property
    def hits(self) -> int:
        """The derived rows the change lands on (module docstring)."""
        every = self.aggregate or self.kind in BY_PARTITION
        return self.changed_rows if every else self.removed_rows

    @property
    def window_rows(self) -> float:
        """The source rows of the window partitions the change touches (a
        window plan), the derived table's rows standing for the number of
        partitions (module docstring)."""
        if self.kind is not DeltaKind.PARTITIONS:
            return 0.0
        return random_hits(self.source_rows, self.target.rows, self.changed_rows)


@dataclass(frozen=True)
class RefreshCost:
    """The two estimates, in rows of a full recomputation."""

    incremental: float
    full: float

    @property
    def prefers_full(self) -> bool:
        return self.full * FULL_MARGIN < self.incremental

    def __str__(self) -> str:
        return f"estimated cost incremental {self.incremental:,.0f}, full {self.full:,.0f}"


def estimate(inputs: CostInputs) -> RefreshCost:
    """The estimated cost of each refresh of ``inputs`` (module docstring)."""
    full = FULL_JOBS * JOB_COST + SCAN_ROW * inputs.source_rows + FULL_ROW * inputs.target.rows
    if inputs.driver_delta:
        delta = DRIVER_CHANGE_ROW * inputs.changed_rows
    else:
        delta = SPARK_DELTA_JOBS * JOB_COST + SPARK_CHANGE_ROW * inputs.changed_rows
    delta += state_reads(inputs)
    touched = inputs.target.touched_rows(inputs.hits)
    merge = MERGE_ROW * touched + (0 if touched <= inputs.driver_merge_rows else MERGE_JOBS * JOB_COST)
    return RefreshCost(incremental=delta + merge, full=full)


def state_reads(inputs: CostInputs) -> float:
    """What the delta reads besides the change, by ``inputs.kind``: whole
    source states, the derived table, a window's touched partitions."""
    scans = STATE_SCANS[inputs.kind] * SCAN_ROW * inputs.source_rows
    target = SCAN_ROW * inputs.target.rows if inputs.kind in READS_TARGET else 0.0
    return scans + target + WINDOW_ROW * inputs.window_rows


def refresh_cost(spark: Any, plan: Any, sources: Sequence[SourceState], table: ctfile.Table) -> RefreshCost:
    """The estimates for refreshing ``table`` by the compiled ``plan`` from
    the frontier to ``sources`` (which the caller checked moved), from the
    logs and the session's driver limits."""
    moved = [s for s in sources if s.moved]
    snapshot = table.snapshot()
    limits = LocalLimits.of(spark)
    changed = sum(s.estimate.changed_rows for s in moved)
    removed = sum(s.estimate.removed_rows for s in moved)
    appended = {s.name: s.estimate.appended_only for s in sources}
    inputs = CostInputs(
        source_rows=sum(s.estimate.rows_at_end for s in sources), changed_rows=changed, removed_rows=removed,
        target=TargetShape(snapshot.num_records, len(snapshot.partitions)),
        aggregate=plan.keyed_by_group, driver_delta=_driver_delta(plan, sources, limits, changed + removed),
        driver_merge_rows=limits.target_rows if limits.enabled else 0,
        kind=plan.delta_kind(appended_only=appended),
    )
    return estimate(inputs)


def _driver_delta(plan: Any, sources: Sequence[SourceState], limits: LocalLimits, scan_rows: int) -> bool:
    """Whether the driver would compute the delta: a linear aggregate whose
    change scan reads at most ``spark.ctfile.local.changeRows`` rows (an
    update is two change rows: ``scan_rows`` counts it twice)."""
    if limits.change_rows == 0 or scan_rows > limits.change_rows:
        return False
    appended = {s.name: s.estimate.appended_only for s in sources}
    return plan.linear_aggregate(data_timestamp_ms=0, appended_only=appended) is not None
