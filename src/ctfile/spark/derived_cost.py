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
  the driver's MERGE).

Touched rows assume the changed rows fall at random: ``k`` changed derived
rows among ``P`` equal partitions of ``D`` rows touch ``D * (1 - (1 -
1/P)**k)`` stored rows. A row-level plan's inserts touch none (they add
rows); its updates and deletes each touch the derived rows of their
source row. Every change of an aggregate's source touches its group.
Clustered changes touch fewer partitions than this says, so the model errs
toward ``FULL`` for them. The constants are set from ``benchmarks/bench_derived.py``
at 10,000,000 rows (RESULTS.md); they order the two actions, they do not
predict seconds.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import ctfile
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


@dataclass(frozen=True)
class TargetShape:
    """The derived table's live rows and partitions, from its snapshot."""

    rows: int
    partitions: int

    def touched_rows(self, hits: int) -> float:
        """The stored rows of the partitions ``hits`` random rows fall in."""
        if hits <= 0 or self.rows <= 0:
            return 0.0
        parts = max(1, self.partitions)
        return self.rows * (1.0 - (1.0 - 1.0 / parts) ** hits)


@dataclass(frozen=True)
class CostInputs:
    """What the model reads: the sources' rows at the new frontier, their
    changed rows (inserted, updated, deleted) and of those the updated and
    deleted ones, the derived table's shape, whether the plan aggregates,
    whether the delta would be computed in the driver, and how many stored
    rows the driver's MERGE takes (``spark.ctfile.local.targetRows``)."""

    source_rows: int
    changed_rows: int
    removed_rows: int
    target: TargetShape
    aggregate: bool
    driver_delta: bool
    driver_merge_rows: int

    @property
    def hits(self) -> int:
        """The derived rows the change lands on (module docstring)."""
        return self.changed_rows if self.aggregate else self.removed_rows


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
    full = FULL_JOBS * JOB_COST + inputs.source_rows + FULL_ROW * inputs.target.rows
    if inputs.driver_delta:
        delta = DRIVER_CHANGE_ROW * inputs.changed_rows
    else:
        delta = SPARK_DELTA_JOBS * JOB_COST + SPARK_CHANGE_ROW * inputs.changed_rows
    touched = inputs.target.touched_rows(inputs.hits)
    merge = MERGE_ROW * touched + (0 if touched <= inputs.driver_merge_rows else MERGE_JOBS * JOB_COST)
    return RefreshCost(incremental=delta + merge, full=full)


def refresh_cost(spark: Any, plan: Any, sources: Sequence[SourceState], table: ctfile.Table) -> RefreshCost:
    """The estimates for refreshing ``table`` by the compiled ``plan`` from
    the frontier to ``sources`` (which the caller checked moved), from the
    logs and the session's driver limits."""
    moved = [s for s in sources if s.moved]
    snapshot = table.snapshot()
    limits = LocalLimits.of(spark)
    changed = sum(s.estimate.changed_rows for s in moved)
    removed = sum(s.estimate.removed_rows for s in moved)
    inputs = CostInputs(
        source_rows=sum(s.estimate.rows_at_end for s in sources), changed_rows=changed, removed_rows=removed,
        target=TargetShape(snapshot.num_records, len(snapshot.partitions)),
        aggregate=plan.keyed_by_group, driver_delta=_driver_delta(plan, sources, limits, changed + removed),
        driver_merge_rows=limits.target_rows if limits.enabled else 0,
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
