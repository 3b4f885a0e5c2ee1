"""COMPACT and automatic compaction (SPEC §Copy-on-write, COMPACT; SPEC
§Clustering).

Planning is apart from execution. :func:`plan_compaction` decides what a
COMPACT rewrites: with clustering keys, the groups of
:func:`~ctfile.writer.recluster.plan_groups` (deepest first, within a row
budget); without, the small partitions. :func:`plan_auto_compaction` decides
what, if anything, follows a commit under ``ctfile.autoCompact``: the
groups holding a small partition that commit added, once they hold
:data:`AUTO_COMPACT_MIN_SMALL` small partitions, bounded to
:data:`AUTO_COMPACT_PARTITIONS` partitions' worth of rows; and, with
clustering keys, the lightest sorted runs of every stretch of the key range
deeper than ``ctfile.autoCompactMaxDepth`` (:func:`bound_depth`), which
keeps the depth bounded whatever the commits wrote. :func:`run_compaction`
executes a plan in a transaction;
:func:`ctfile.writer.transaction.auto_compact` commits one after a commit,
once, and never raises.

Every compaction keeps each row's row id and row version (materialized) and
commits ``dataChange`` false, so change scans skip it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence

from ctfile.format.actions import Partition
from ctfile.format.log_values import require_long
from ctfile.format.properties import TableProperties
from ctfile.format.schema import Schema
from ctfile.reader.clustering import key_ranges, sorted_runs, stretches
from ctfile.writer.clustering import ClusterOrder
from ctfile.writer.recluster import Group, choose_groups, is_small, plan_groups, read_with_lineage, rewrite_group

if TYPE_CHECKING:
    from ctfile.writer.partition_writer import PartitionWriter
    from ctfile.writer.transaction import WriteTransaction

#: Automatic compaction waits until the groups a commit touched hold this
#: many small partitions (Delta's auto compaction waits for ``minNumFiles``).
AUTO_COMPACT_MIN_SMALL = 4
#: For small partitions it rewrites at most this many times
#: ``ctfile.partitionRows`` rows (the depth bound has no such budget: see
#: :func:`bound_depth`).
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
    §Clustering, automatic compaction): the small partitions' groups
    (:func:`_small_partition_groups`), then, with clustering keys, what keeps
    the depth at most ``ctfile.autoCompactMaxDepth`` (:func:`bound_depth`)."""
    props = TableProperties.from_mapping(tx.metadata.properties)
    target = props.partition_rows
    live = tx.live_partitions()
    order = ClusterOrder.of(tx.metadata.properties, tx.schema)
    groups = _small_partition_groups(live, added, target, order, tx.schema)
    if order is not None:
        groups = bound_depth(groups, live, tx.schema, order.keys[0], props.auto_compact_max_depth, target)
    return CompactionPlan(tuple(groups), order, target) if groups else None


def _small_partition_groups(
    live: list[Partition], added: Collection[str], target: int, order: ClusterOrder | None, schema: Schema
) -> list[Group]:
    """The groups holding a small partition of ``added``, once they hold
    :data:`AUTO_COMPACT_MIN_SMALL` small partitions, within
    :data:`AUTO_COMPACT_PARTITIONS` partitions' worth of rows; when none fits,
    their small partitions merged among themselves."""
    if not _adds_small(live, added, target):
        return []
    budget = AUTO_COMPACT_PARTITIONS * target
    touched = _touched_groups(live, added, target, order, schema)
    small = [p for g in touched for p in g.partitions if is_small(p, target)]
    if len(small) < AUTO_COMPACT_MIN_SMALL:
        return []
    groups = choose_groups(touched, budget) if order is not None else []
    # Too large to recluster within the budget: merge the small partitions
    # among themselves, which cuts the count (the depth bound then merges
    # what that would leave too deep).
    return groups or _small_group(small, target, budget)


def _adds_small(live: list[Partition], added: Collection[str], target: int) -> bool:
    """Whether the commit that added ``added`` left one of them small."""
    return any(p.path in added and is_small(p, target) for p in live)


def _touched_groups(
    live: list[Partition], added: Collection[str], target: int, order: ClusterOrder | None, schema: Schema
) -> list[Group]:
    """The groups a commit that added ``added`` touched: with clustering
    keys, the groups of :func:`~ctfile.writer.recluster.plan_groups` holding
    a partition of ``added``; without, the small partitions as one group."""
    if order is None:
        return [Group(tuple(p for p in live if is_small(p, target)), 0)]
    groups = plan_groups(live, schema, order.keys[0], target)
    return [g for g in groups if any(p.path in added for p in g.partitions)]


@dataclass(frozen=True)
class _Span:
    """A key range as automatic compaction plans with it: a live partition
    it leaves alone, or the hull of a group it rewrites (whose output, one
    sorted run, lies inside the hull)."""

    low: Any
    high: Any
    partitions: tuple[Partition, ...]
    group: Group | None = None

    @property
    def rows(self) -> int:
        return sum(p.num_records for p in self.partitions)


def _spans(planned: Sequence[Group], live: Sequence[Partition], schema: Schema, key: str) -> list[_Span]:
    """The key ranges of the version after ``planned`` is rewritten, as far
    as the statistics tell before it is: the live partitions with a range
    outside ``planned``, and each planned group's hull; sorted."""
    ranged, _ = key_ranges(live, schema, key)
    by_path = {r.partition.path: r for r in ranged}
    planned_paths = {p.path for g in planned for p in g.partitions}
    spans = [_Span(r.low, r.high, (r.partition,)) for r in ranged if r.partition.path not in planned_paths]
    hulls = (_hull(g, by_path) for g in planned)
    spans.extend(h for h in hulls if h is not None)
    spans.sort(key=lambda s: (s.low, s.high))
    return spans


def _hull(group: Group, by_path: Mapping[str, Any]) -> _Span | None:
    """The span of a planned ``group``: the hull of the key ranges of its
    partitions (``by_path``: path -> key range), or None when none has one."""
    rs = [by_path[p.path] for p in group.partitions if p.path in by_path]
    if not rs:
        return None
    return _Span(min(r.low for r in rs), max(r.high for r in rs), group.partitions, group)


def _runs_to_merge(weights: list[int], max_depth: int, target_rows: int) -> int:
    """How many of the runs weighing ``weights`` (ascending; more than
    ``max_depth`` of them) to merge: the lightest ``len - max_depth + 1``,
    which the bound needs, then each next
    one no heavier than ``F`` times what is merged so far, with ``F`` =
    (rows / ``target_rows``) ** (1 / ``max_depth``), at least 2.

    Merging only what the bound needs would feed every new run into the same
    light run, which grows without end and is rewritten at each commit; a
    run that has grown to 1/F of the next is merged into it instead, so runs
    weigh about geometrically apart, as the levels of a size-tiered LSM
    tree, and a row is rewritten a few times rather than at every commit.

    >>> _runs_to_merge([10, 20, 1000], 2, 100)  # F = 10**0.5: 30 is too light to join 1000
    2
    >>> _runs_to_merge([10, 400, 1000], 2, 100)
    3
    """
    count = len(weights) - max_depth + 1
    factor = max(2.0, (sum(weights) / max(1, target_rows)) ** (1 / max_depth))
    merged = sum(weights[:count])
    while count < len(weights) and weights[count] <= factor * merged:
        merged += weights[count]
        count += 1
    return count


def bound_depth(
    planned: Sequence[Group], live: Sequence[Partition], schema: Schema, key: str, max_depth: int,
    target_rows: int,
) -> list[Group]:
    """``planned`` plus the groups that keep every key value inside at most
    ``max_depth`` key ranges after the compaction (SPEC §Clustering,
    automatic compaction).

    The ranges after ``planned`` (:func:`_spans`) are cut into stretches
    that do not overlap one another; a stretch that needs more than
    ``max_depth`` runs (:func:`~ctfile.reader.clustering.sorted_runs`, by
    rows) has its lightest runs merged into one group, as many as leave
    ``max_depth`` runs: that group's output is one sorted run inside the
    stretch, so no value lies in more than ``max_depth`` ranges of it,
    whatever the cut points turn out to be (values in two partitions, which
    sorting cannot separate, apart). A planned group the merge takes is
    folded into it.

    There is no budget: the work is the runs merged, at most the stretches
    deeper than the bound (the whole table, the first time on a deep one).
    A depth bound cannot come with a per-commit budget that does not grow
    with the table, since a commit of keys spread over the key range adds a
    run across all of it and only a rewrite removes it; what keeps the work
    down over a history is merging runs of similar weight
    (:func:`_runs_to_merge`).

    Examples
    --------
    Two ranges across a sorted run of three: with a bound of 2 the lighter
    of the two crossing runs is merged with the other one.

    >>> import pyarrow as pa
    >>> from ctfile.format.actions import PartitionStats
    >>> from ctfile.format.schema import schema_from_arrow
    >>> schema = schema_from_arrow(pa.schema([("id", pa.int64())]))
    >>> def part(name, lo, hi, rows):
    ...     return Partition(name, 1, rows, 0, 1, 0, None, PartitionStats(rows, {1: lo}, {1: hi}, {1: 0}, {}))
    >>> live = [part("a", 0, 9, 100), part("b", 10, 19, 100), part("c", 20, 29, 100),
    ...         part("w", 1, 28, 10), part("x", 2, 27, 20)]
    >>> [sorted(p.path for p in g.partitions) for g in bound_depth([], live, schema, "id", 2, 100)]
    [['w', 'x']]
    >>> [sorted(p.path for p in g.partitions) for g in bound_depth([], live, schema, "id", 3, 100)]
    []
    """
    spans = _spans(planned, live, schema, key)
    out = list(planned)
    for stretch in stretches([(s.low, s.high) for s in spans]):
        members = spans[stretch.start:stretch.stop]
        runs = sorted_runs([(s.low, s.high) for s in members], [s.rows for s in members])
        if len(runs) > max_depth:
            out = _fold(out, _lightest_runs(members, runs, max_depth, target_rows), len(runs))
    return out


def _lightest_runs(members: Sequence[_Span], runs: Sequence[Sequence[int]], max_depth: int,
                   target_rows: int) -> list[_Span]:
    """The spans of the runs of a stretch too deep (``runs``: the indexes
    into ``members`` of each sorted run) that :func:`_runs_to_merge` merges,
    lightest run first."""
    weights = sorted((sum(members[i].rows for i in run), n) for n, run in enumerate(runs))
    count = _runs_to_merge([w for w, _ in weights], max_depth, target_rows)
    return [members[i] for _, n in weights[:count] for i in runs[n]]


def _fold(groups: list[Group], taken: Sequence[_Span], depth: int) -> list[Group]:
    """``groups`` with the spans ``taken`` merged into one new group (of a
    stretch ``depth`` runs deep), which absorbs the planned groups among
    them."""
    folded = [s.group for s in taken if s.group is not None]
    kept = [g for g in groups if not any(g is f for f in folded)]
    return kept + [Group(tuple(p for s in taken for p in s.partitions), depth)]


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
