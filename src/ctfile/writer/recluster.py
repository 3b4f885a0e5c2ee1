"""Reclustering: the COMPACT of a table with clustering keys (SPEC
§Clustering, **COMPACT**).

Planning is apart from execution. :func:`plan_groups` finds, from the
partitions' statistics alone, the *groups* worth rewriting: runs of
partitions (in key order) whose key ranges overlap, or small neighbours, and
the partitions without a key range; it orders them greedily, deepest first,
as Snowflake's reclustering picks its work. :func:`choose_groups` bounds the
rows rewritten. :func:`rewrite_group` then reads a group with its hidden
columns materialized (row ids and row versions are kept, so the commit is
``dataChange`` false and change scans skip it), sorts it into the
clustering order and cuts it as a clustered write does. A group larger than
``memory_rows`` is rewritten in ranges of its first key, each range read
from the members whose statistics can hold it, so memory stays bounded at
the price of reading a member once per range it spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import Partition
from ctfile.format.schema import ROW_ID_COLUMN, ROW_VERSION_COLUMN, Schema
from ctfile.log.transaction import StagedFile
from ctfile.reader.clustering import KeyRange, key_ranges, max_depth
from ctfile.reader.expressions import evaluate_mask
from ctfile.reader.partition_reader import read_partition_table
from ctfile.reader.pruning import prune
from ctfile.writer.clustering import ClusterOrder

if TYPE_CHECKING:
    from ctfile.writer.partition_writer import PartitionWriter
    from ctfile.writer.transaction import WriteTransaction

#: A group of at most this many times ``ctfile.partitionRows`` rows is
#: sorted in memory at once; a larger one is rewritten in key ranges.
MEMORY_PARTITIONS = 8


def is_small(p: Partition, target_rows: int) -> bool:
    """Whether ``p`` holds fewer than half of ``target_rows`` rows (SPEC
    §Copy-on-write, COMPACT)."""
    return p.num_records < max(1, target_rows // 2)


@dataclass(frozen=True)
class Group:
    """Partitions rewritten together, and the largest number of their key
    ranges that contain one point (the partitions without a key range count
    as all overlapping)."""

    partitions: tuple[Partition, ...]
    depth: int

    @property
    def rows(self) -> int:
        return sum(p.num_records for p in self.partitions)


def _joins(group: list[KeyRange], high: object, r: KeyRange, target_rows: int) -> bool:
    """Whether ``r`` (the next range in key order) joins the group whose
    ranges are ``group`` and whose range ends at ``high``: it overlaps the
    group's range, or it and the group's last member are both small."""
    overlapping = r.low < high and group[0].low < r.high
    small = is_small(r.partition, target_rows) and is_small(group[-1].partition, target_rows)
    return overlapping or small


def plan_groups(partitions: Sequence[Partition], schema: Schema, key: str, target_rows: int) -> list[Group]:
    """The groups of two or more partitions worth rewriting, deepest first
    then smallest (SPEC §Clustering, COMPACT): runs that overlap or join
    small neighbours, and the small partitions without a key range. ``key``
    is the first clustering key.

    Examples
    --------
    A run of overlapping partitions makes one group; a partition that
    overlaps nothing is left alone.

    >>> import pyarrow as pa
    >>> from ctfile.format.actions import Partition, PartitionStats
    >>> from ctfile.format.schema import schema_from_arrow
    >>> schema = schema_from_arrow(pa.schema([("id", pa.int64())]))
    >>> def part(name, lo, hi, rows=100):
    ...     return Partition(name, 1, rows, 0, 1, 0, None, PartitionStats(rows, {1: lo}, {1: hi}, {1: 0}, {}))
    >>> groups = plan_groups([part("a", 0, 50), part("b", 40, 90), part("c", 100, 150)], schema, "id", 100)
    >>> [([p.path for p in g.partitions], g.depth) for g in groups]
    [(['a', 'b'], 2)]
    """
    ranged, unranged = key_ranges(partitions, schema, key)
    groups = [_run_group(run) for run in _runs(ranged, target_rows) if len(run) > 1]
    # Sorting cannot narrow a range the statistics do not give: only merging
    # small partitions helps, and rewriting the others would never converge.
    small = [p for p in unranged if is_small(p, target_rows)]
    if len(small) > 1:
        groups.append(Group(tuple(small), len(small)))
    groups.sort(key=lambda g: (-g.depth, g.rows))
    return groups


def _runs(ranged: Sequence[KeyRange], target_rows: int) -> list[list[KeyRange]]:
    """``ranged`` (sorted by low bound) cut into runs: each range joins the
    run before it when it overlaps it or joins small neighbours
    (:func:`_joins`)."""
    runs: list[list[KeyRange]] = []
    high: object = None
    for r in ranged:
        if runs and _joins(runs[-1], high, r, target_rows):
            runs[-1].append(r)
            high = max(high, r.high)
        else:
            runs.append([r])
            high = r.high
    return runs


def _run_group(run: Sequence[KeyRange]) -> Group:
    """The group rewriting a run, as deep as its ranges overlap."""
    return Group(tuple(m.partition for m in run), max_depth([(m.low, m.high) for m in run]))


def choose_groups(groups: Sequence[Group], max_rows: int | None) -> list[Group]:
    """The groups to rewrite under a budget of ``max_rows`` rows (None: all):
    each in the given order that still fits.

    >>> choose_groups([Group((), 3), Group((), 2)], None) == [Group((), 3), Group((), 2)]
    True
    """
    if max_rows is None:
        return list(groups)
    chosen, used = [], 0
    for g in groups:
        if used + g.rows <= max_rows:
            chosen.append(g)
            used += g.rows
    return chosen


def read_with_lineage(tx: "WriteTransaction", p: Partition, where: pc.Expression | None = None) -> pa.Table:
    """The rows of ``p`` (those where ``where`` holds, if given) with both
    hidden columns materialized, as a compaction writes them back."""
    t = read_partition_table(tx.storage, p, tx.schema, hidden=True)
    t = t.select(tx.schema.names + [ROW_ID_COLUMN, ROW_VERSION_COLUMN])
    return t if where is None else t.filter(evaluate_mask(t, where))


def key_splits(tx: "WriteTransaction", group: Group, key: str, memory_rows: int, target_rows: int) -> list[pc.Expression | None]:
    """The first-key ranges a group is rewritten in: ``[None]`` (all at
    once) when it fits ``memory_rows``; otherwise filters ``key < b1``,
    ``b1 <= key < b2`` ... ``key >= bm or key is null or NaN`` whose cut
    points are the group's key values every ``memory_rows`` rows (rounded
    down to whole partitions), read from the key column alone. NaN is never
    a cut point: it compares false with everything, so a range bounded by it
    would hold no row."""
    if group.rows <= memory_rows:
        return [None]
    values = pa.chunked_array(
        [read_partition_table(tx.storage, p, tx.schema, columns=[key]).column(key) for p in group.partitions]
    )
    values = values.filter(pc.invert(pc.is_null(values, nan_is_null=True)))
    values = values.take(pc.sort_indices(values))
    step = max(target_rows, memory_rows // target_rows * target_rows)
    cuts = []
    for i in range(step, len(values), step):
        v = values[i]
        if not cuts or v.as_py() != cuts[-1].as_py():
            cuts.append(v)
    if not cuts:
        return [None]
    x = pc.field(key)
    out: list[pc.Expression | None] = [x < cuts[0]]
    out += [(x >= lo) & (x < hi) for lo, hi in zip(cuts, cuts[1:])]
    out.append((x >= cuts[-1]) | x.is_null(nan_is_null=True))  # NaN and null sort last
    return out


def rewrite_group(tx: "WriteTransaction", group: Group, order: ClusterOrder, writer: "PartitionWriter") -> list[StagedFile]:
    """Rewrite ``group`` in the clustering order, in key ranges when it is
    larger than :data:`MEMORY_PARTITIONS` partitions of the writer's size;
    returns the staged files. The members are marked read and removed (SPEC
    §Conflict detection)."""
    target = writer.target_rows
    memory_rows = MEMORY_PARTITIONS * target
    files: list[StagedFile] = []
    for p in group.partitions:
        tx.mark_read(p)
    try:
        for where in key_splits(tx, group, order.keys[0], memory_rows, target):
            members = group.partitions if where is None else prune(group.partitions, tx.schema, where)
            if not members:
                continue
            t = pa.concat_tables([read_with_lineage(tx, p, where) for p in members])
            files += writer.write(t.to_batches(), with_hidden=True, cluster=order, window_bytes=None)
    except BaseException:
        tx.storage.delete([f.path for f in files])  # the ranges already written
        raise
    for p in group.partitions:
        tx.remove(p)
    return files
