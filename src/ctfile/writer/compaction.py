"""COMPACT and automatic compaction (SPEC §Copy-on-write, COMPACT; SPEC
§Clustering).

Planning is apart from execution. :func:`plan_compaction` decides what a
COMPACT rewrites: with clustering keys, the groups of
:func:`~ctfile.writer.recluster.plan_groups` (deepest first, within a row
budget); without, the small partitions. :func:`plan_auto_compaction` decides
what, if anything, follows a commit under ``ctfile.autoCompact``: only the
groups holding a small partition that commit added, once they hold
:data:`AUTO_COMPACT_MIN_SMALL` small partitions, bounded to
:data:`AUTO_COMPACT_PARTITIONS` partitions' worth of rows. :func:`run_compaction`
executes a plan in a transaction;
:func:`ctfile.writer.transaction.auto_compact` commits one after a commit,
once, and never raises.

Every compaction keeps each row's row id and row version (materialized) and
commits ``dataChange`` false, so change scans skip it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection

from ctfile.format.actions import Partition
from ctfile.format.log_values import require_long
from ctfile.format.properties import TableProperties
from ctfile.writer.clustering import ClusterOrder
from ctfile.writer.recluster import Group, choose_groups, is_small, plan_groups, read_with_lineage, rewrite_group

if TYPE_CHECKING:
    from ctfile.writer.partition_writer import PartitionWriter
    from ctfile.writer.transaction import WriteTransaction

#: Automatic compaction waits until the groups a commit touched hold this
#: many small partitions (Delta's auto compaction waits for ``minNumFiles``).
AUTO_COMPACT_MIN_SMALL = 4
#: It rewrites at most this many times ``ctfile.partitionRows`` rows.
AUTO_COMPACT_PARTITIONS = 4


@dataclass(frozen=True)
class CompactionPlan:
    """What a COMPACT rewrites: ``groups`` (each rewritten into partitions
    of ``target_rows``), sorted into ``order`` when the table has clustering
    keys."""

    groups: tuple[Group, ...]
    order: ClusterOrder | None
    target_rows: int

    @property
    def partitions(self) -> list[Partition]:
        return [p for g in self.groups for p in g.partitions]

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)


def check_compaction_options(target_rows: object, max_rows: object) -> None:
    """Refuse a ``target_rows`` or ``max_rows`` that is not None or a
    positive int the log can hold (they go into the commit's
    ``operationParameters``, SPEC §Conventions)."""
    for value, what in ((target_rows, "target_rows"), (max_rows, "max_rows")):
        if value is not None:
            require_long(value, what, minimum=1)


def _small_group(partitions: list[Partition], target_rows: int, max_rows: int | None) -> list[Group]:
    """The small partitions of ``partitions`` as one group (when two or
    more), within ``max_rows``: COMPACT without clustering keys, and the
    fallback of automatic compaction when no group fits its bound."""
    small = [p for p in partitions if is_small(p, target_rows)]
    if max_rows is not None:
        kept, used = [], 0
        for p in small:
            if used + p.num_records <= max_rows:
                kept.append(p)
                used += p.num_records
        small = kept
    return [Group(tuple(small), len(small))] if len(small) > 1 else []


def plan_compaction(
    tx: "WriteTransaction", *, target_rows: int | None = None, max_rows: int | None = None
) -> CompactionPlan:
    """The COMPACT of ``tx``'s live partitions; ``target_rows`` defaults to
    ``ctfile.partitionRows``, ``max_rows`` (None: no bound) bounds the rows
    rewritten."""
    check_compaction_options(target_rows, max_rows)
    target = target_rows or TableProperties.from_mapping(tx.metadata.properties).partition_rows
    order = ClusterOrder.of(tx.metadata.properties, tx.schema)
    live = tx.live_partitions()
    if order is None:
        return CompactionPlan(tuple(_small_group(live, target, max_rows)), None, target)
    groups = choose_groups(plan_groups(live, tx.schema, order.keys[0], target), max_rows)
    return CompactionPlan(tuple(groups), order, target)


def plan_auto_compaction(tx: "WriteTransaction", added: Collection[str]) -> CompactionPlan | None:
    """The compaction that follows a commit that added the partitions
    ``added`` (``tx`` reads the committed version), or None (SPEC
    §Clustering, automatic compaction)."""
    props = TableProperties.from_mapping(tx.metadata.properties)
    target = props.partition_rows
    live = tx.live_partitions()
    if not any(p.path in added and is_small(p, target) for p in live):
        return None
    budget = AUTO_COMPACT_PARTITIONS * target
    order = ClusterOrder.of(tx.metadata.properties, tx.schema)
    if order is None:
        touched = [Group(tuple(p for p in live if is_small(p, target)), 0)]
    else:
        touched = [g for g in plan_groups(live, tx.schema, order.keys[0], target)
                   if any(p.path in added for p in g.partitions)]
    small = [p for g in touched for p in g.partitions if is_small(p, target)]
    if len(small) < AUTO_COMPACT_MIN_SMALL:
        return None
    groups = choose_groups(touched, budget) if order is not None else []
    if not groups:
        # Too large to recluster within the budget: merge the small
        # partitions among themselves, which cuts the count and widens no
        # group (each already overlapped it).
        groups = _small_group(small, target, budget)
    return CompactionPlan(tuple(groups), order, target) if groups else None


def run_compaction(tx: "WriteTransaction", plan: CompactionPlan, writer: "PartitionWriter") -> int:
    """Rewrite the plan's groups in ``tx`` (``dataChange`` false); returns
    the number of partitions rewritten (0: nothing to do)."""
    if not plan.groups:
        return 0
    tx.data_change = False
    for g in plan.groups:
        if plan.order is None:
            _merge_unordered(tx, g, writer)
        else:
            tx.stage(rewrite_group(tx, g, plan.order, writer))
    tx.add_metrics(copied=plan.rows)
    return len(plan.partitions)


def _merge_unordered(tx: "WriteTransaction", group: Group, writer: "PartitionWriter") -> None:
    """Without clustering keys: the group's rows, in partition order,
    streamed into partitions of the writer's size."""

    def batches():
        for p in group.partitions:
            tx.mark_read(p)
            yield from read_with_lineage(tx, p).to_batches()

    files = writer.write(batches(), with_hidden=True)
    for p in group.partitions:
        tx.remove(p)
    tx.stage(files)
