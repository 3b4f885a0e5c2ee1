"""Change events and their consolidation (SPEC §Change scans, "Using change files").

A change scan over captured commits does not compare partitions: each
*segment* of its interval (a captured commit, or a run of commits that are
not captured, computed from partitions) yields *images*, rows of table
columns tagged with their row id and whether they are an old image (the
row's value before the segment) or a new image (its value after it).
:class:`Images` holds one segment's images; :func:`consolidate` merges the
segments of an interval into its minimum delta: per row id, the old image of
its first segment and the new image of its last. An old and a new image make
an update pair (dropped when every column is equal, the no-op rule), an old
image alone a DELETE, a new image alone an INSERT.

A scan of a single captured commit (and each commit of an ``audit`` scan)
needs no consolidation: :func:`emit_commit` outputs the commit's images as
they stand, which the writer requirements of SPEC §Change capture make its
minimum delta.

Consolidation holds the images of the interval in memory (they are the
change itself, which is what a captured scan reads); the partition-based
path, :mod:`ctfile.reader.min_delta`, bounds its memory by row-id buckets
instead.

Examples
--------
>>> import numpy as np, pyarrow as pa
>>> s1 = Images(pa.table({"v": ["a", "b"]}), np.array([7, 7]), np.array([False, True]))  # 7: a -> b
>>> s2 = Images(pa.table({"v": ["b", "c"]}), np.array([7, 7]), np.array([False, True]))  # 7: b -> c
>>> [(c.data.column("v").to_pylist(), c.insert.tolist()) for c in consolidate([s1, s2], filter=None, batch_rows=10)]
[(['a', 'c'], [False, True])]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.reader.change_rows import Chunk, const, filter_mask
from ctfile.reader.expressions import is_distinct


@dataclass
class Images:
    """The images of one segment: ``data`` (table columns), with per row its
    row id and whether it is a new image (else an old one). A row id has at
    most one old and one new image in a segment."""

    data: pa.Table
    row_id: np.ndarray  # int64
    new: np.ndarray  # bool
    #: per row: half of an update pair, the old image immediately followed by
    #: the new one (None: no pairs)
    update: np.ndarray | None = None

    @classmethod
    def empty(cls, schema: pa.Schema) -> "Images":
        return cls(schema.empty_table(), np.empty(0, np.int64), np.empty(0, bool))

    def pairs(self) -> np.ndarray:
        """:attr:`update` as a bool array (all False when None)."""
        return np.zeros(len(self), dtype=bool) if self.update is None else self.update

    def without_equal_pairs(self) -> "Images":
        """These images less the update pairs whose old and new image are
        equal in every column. A captured commit's pairs are never equal in
        the schema the commit wrote them with, but may be in a read schema
        that dropped the only columns they differ in (SPEC §Change scans,
        schema changes)."""
        update = self.pairs()
        pre = np.flatnonzero(update & ~self.new)  # each pair's old image; its new one is next
        if not len(pre):
            return self
        changed = changed_rows(self.data.take(pa.array(pre)), self.data.take(pa.array(pre + 1)))
        if changed.all():
            return self
        keep = np.ones(len(self), dtype=bool)
        keep[pre[~changed]] = keep[pre[~changed] + 1] = False
        return Images(self.data.filter(pa.array(keep)), self.row_id[keep], self.new[keep], update[keep])

    @classmethod
    def concat(cls, parts: Sequence["Images"], schema: pa.Schema) -> "Images":
        parts = [p for p in parts if p.data.num_rows]
        if not parts:
            return cls.empty(schema)
        return cls(
            _concat_tables([p.data for p in parts]),
            np.concatenate([p.row_id for p in parts]),
            np.concatenate([p.new for p in parts]),
            _concat_updates(parts),
        )

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk], schema: pa.Schema) -> "Images":
        """The images of a partition-based minimum delta's output: an INSERT
        row is a new image, a DELETE row an old one."""
        return cls.concat([cls(c.data, c.row_id, np.asarray(c.insert, dtype=bool), c.update) for c in chunks], schema)

    def __len__(self) -> int:
        return self.data.num_rows


def _concat_tables(tables: list[pa.Table]) -> pa.Table:
    """``tables`` (at least one) as one table; one table as it is."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _concat_updates(parts: Sequence[Images]) -> np.ndarray | None:
    """The :attr:`Images.update` of ``parts`` concatenated (None when none has pairs)."""
    if all(p.update is None for p in parts):
        return None
    return np.concatenate([p.pairs() for p in parts])


@dataclass(frozen=True)
class Selection:
    """Per row id of an interval, which image rows describe it: positions
    into the concatenated images, ``-1`` for none."""

    row_id: np.ndarray
    old: np.ndarray
    new: np.ndarray


def select(segments: Sequence[Images]) -> Selection:
    """For each row id: the old image of its first segment and the new image
    of its last (SPEC §Change scans: the event of a row id over the
    interval)."""
    rid = np.concatenate([s.row_id for s in segments]) if segments else np.empty(0, np.int64)
    new = np.concatenate([s.new for s in segments]) if segments else np.empty(0, bool)
    seg = np.concatenate([np.full(len(s), i, dtype=np.int64) for i, s in enumerate(segments)]) if segments else rid
    return first_old_last_new(rid, new, seg)


def disjoint_row_ids(segments: Sequence[Images]) -> bool:
    """Whether no row id has images in two of ``segments``, told by their
    ranges of row ids: then each segment's own change is the interval's
    change for its row ids, and consolidation is a concatenation (an
    interval of updates then inserts: fresh row ids lie above every older
    one).

    >>> a = Images(pa.table({"x": [1, 2]}), np.array([5, 9]), np.array([True, True]))
    >>> b = Images(pa.table({"x": [3]}), np.array([12]), np.array([True]))
    >>> disjoint_row_ids([a, b]), disjoint_row_ids([a, a])
    (True, False)
    """
    ranges = sorted((int(s.row_id.min()), int(s.row_id.max())) for s in segments if len(s))
    return all(prev[1] < cur[0] for prev, cur in zip(ranges, ranges[1:]))


def first_old_last_new(row_id: np.ndarray, new: np.ndarray, event: np.ndarray) -> Selection:
    """Per row id, the old image of its first event and the new image of its
    last, where image row ``i`` of row id ``row_id[i]`` belongs to event
    ``event[i]`` (events ordered by number; an event holds at most one old and
    one new image of a row id). Also the writer's rule for the change rows of
    a multi-statement transaction (SPEC §Change capture).

    Examples
    --------
    >>> sel = first_old_last_new(np.array([7, 7, 7, 8]), np.array([False, True, False, False]), np.array([0, 0, 1, 0]))
    >>> sel.row_id.tolist(), sel.old.tolist(), sel.new.tolist()  # 7 updated then deleted; 8 deleted
    ([7, 8], [0, 3], [-1, -1])
    """
    order = np.lexsort((event, row_id))  # by row id, then event
    r, g, nw = row_id[order], event[order], new[order]
    starts = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1]))) if len(r) else np.empty(0, np.int64)
    ends = np.append(starts[1:], len(r))
    group = np.repeat(np.arange(len(starts)), ends - starts)
    old_pick = np.full(len(starts), -1, dtype=np.int64)
    new_pick = np.full(len(starts), -1, dtype=np.int64)
    is_old = ~nw & (g == g[starts][group])
    is_new = nw & (g == g[ends - 1][group])
    old_pick[group[is_old]] = order[is_old]
    new_pick[group[is_new]] = order[is_new]
    return Selection(r[starts], old_pick, new_pick)


def consolidate(
    segments: Sequence[Images],
    *,
    filter: pc.Expression | None,
    batch_rows: int,
    version: int | None = None,
    timestamp_ms: int | None = None,
) -> Iterator[Chunk]:
    """The minimum delta of ``segments`` (in version order) as chunks:
    update pairs first (DELETE then INSERT, adjacent, in row-id order), then
    lone DELETEs, then lone INSERTs; ``version``/``timestamp_ms`` tag an
    audit scan's rows. Segments that share no row id are each their own
    minimum delta, in their own order (:func:`disjoint_row_ids`)."""
    segments = [s for s in segments if len(s)]
    kw = {"version": version, "timestamp_ms": timestamp_ms}
    if disjoint_row_ids(segments):
        for s in segments:
            yield from emit_commit(s, filter=filter, **kw)
        return
    yield from _consolidated(segments, filter, batch_rows, kw)


def _consolidated(segments: Sequence[Images], filter: pc.Expression | None, batch_rows: int,
                  kw: dict) -> Iterator[Chunk]:
    """:func:`consolidate` of segments that share row ids."""
    sel = select(segments)
    data = _concat_tables([s.data for s in segments])
    both = (sel.old >= 0) & (sel.new >= 0)
    if both.any():
        old = data.take(pa.array(sel.old[both]))
        new = data.take(pa.array(sel.new[both]))
        yield from emit_pairs(old, new, sel.row_id[both], filter=filter, batch_rows=batch_rows, **kw)
    for picks, insert in ((sel.old, False), (sel.new, True)):
        lone = (picks >= 0) & ~both
        if lone.any():
            chunk = _lone_chunk(data.take(pa.array(picks[lone])), sel.row_id[lone], insert, filter, **kw)
            if chunk is not None:
                yield chunk


def _lone_chunk(
    rows: pa.Table, ids: np.ndarray, insert: bool, filter: pc.Expression | None, *,
    version: int | None, timestamp_ms: int | None,
) -> Chunk | None:
    """Lone INSERTs (``insert``) or DELETEs: the images ``rows`` of row ids
    ``ids`` that pass ``filter``; None when none does."""
    keep = filter_mask(rows, filter)
    if keep is not None:
        rows, ids = rows.filter(pa.array(keep)), ids[keep]
    if not rows.num_rows:
        return None
    return Chunk(rows, const(rows.num_rows, insert), const(rows.num_rows, False), ids, version=version, timestamp_ms=timestamp_ms)


def emit_commit(
    images: Images,
    *,
    filter: pc.Expression | None,
    version: int | None = None,
    timestamp_ms: int | None = None,
) -> Iterator[Chunk]:
    """One captured commit's change, in the order of its images, without
    consolidation: a commit's images hold at most one event per row id, and
    its update pairs are adjacent and never equal (SPEC §Change capture,
    writer requirements), so they are its minimum delta as they stand. Only
    the filter is applied: a pair of which one image fails it becomes the
    other image alone, with ``METADATA$ISUPDATE`` false. Nothing is copied
    when no filter is given."""
    n = len(images)
    if n == 0:
        return
    update = images.pairs()
    keep = filter_mask(images.data, filter)
    data, ids, new = images.data, images.row_id, images.new
    if keep is not None:
        pre = np.flatnonzero(update & ~new)  # each pair's old image; its new one is next
        whole = keep[pre] & keep[pre + 1]
        update = update.copy()
        update[pre[~whole]] = False
        update[pre[~whole] + 1] = False
        data, ids, new, update = data.filter(pa.array(keep)), ids[keep], new[keep], update[keep]
        if not len(ids):
            return
    yield Chunk(data, new, update, ids, version, timestamp_ms)


def emit_pairs(
    old: pa.Table,
    new: pa.Table,
    ids: np.ndarray,
    *,
    filter: pc.Expression | None,
    batch_rows: int,
    version: int | None = None,
    timestamp_ms: int | None = None,
    skip: frozenset = frozenset(),
) -> Iterator[Chunk]:
    """Update pairs aligned row by row (``old[i]`` and ``new[i]`` are row id
    ``ids[i]``): pairs equal in every column but those in ``skip`` (known
    equal) are dropped; a pair with both images passing ``filter`` is output
    DELETE then INSERT, adjacent, with ``METADATA$ISUPDATE`` true; a pair with
    one image passing it, as that image alone with ISUPDATE false (SPEC
    §Change scans, filters)."""
    n = len(ids)
    if n == 0:
        return
    changed = changed_rows(old, new, skip=skip)
    f_old, f_new = filter_mask(old, filter), filter_mask(new, filter)
    f_old = changed if f_old is None else changed & f_old
    f_new = changed if f_new is None else changed & f_new
    both_idx = np.flatnonzero(f_old & f_new)
    step = max(1, batch_rows // 2)
    for s in range(0, len(both_idx), step):
        # A slice at a time, so only one output batch's rows are copied at
        # once; each slice first cuts both sides to the rows it spans.
        idx = both_idx[s:s + step]
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        k = len(idx)
        take = np.empty(2 * k, dtype=np.int64)
        take[0::2] = idx - lo
        take[1::2] = idx - lo + (hi - lo)
        data = pa.concat_tables([old.slice(lo, hi - lo), new.slice(lo, hi - lo)]).take(pa.array(take))
        ins = np.zeros(2 * k, dtype=bool)
        ins[1::2] = True
        yield Chunk(data, ins, const(2 * k, True), np.repeat(ids[idx], 2), version, timestamp_ms)
    for mask, table, insert in ((f_old & ~f_new, old, False), (f_new & ~f_old, new, True)):
        pick = np.flatnonzero(mask)
        if len(pick):
            yield Chunk(table.take(pa.array(pick)), const(len(pick), insert), const(len(pick), False), ids[pick], version, timestamp_ms)


def changed_rows(old: pa.Table, new: pa.Table, *, skip: frozenset = frozenset()) -> np.ndarray:
    """Per row, whether ``old[i]`` and ``new[i]`` differ in a column not in
    ``skip`` (SQL IS DISTINCT FROM: null equals null): the update-pair
    comparison of SPEC §Change scans."""
    changed = np.zeros(old.num_rows, dtype=bool)
    for name in old.schema.names:
        if name not in skip:
            changed |= is_distinct(old.column(name), new.column(name))
    return changed
