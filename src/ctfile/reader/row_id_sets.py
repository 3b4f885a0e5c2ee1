"""Row-id set arithmetic of the minimum delta (SPEC §Change scans, `default`).

From the hidden values alone, :func:`classify` tells which rows of the
interval's net added and net removed partitions are candidate INSERTs,
candidate DELETEs and halves of update pairs, and returns each side of the
delta as a :class:`Side`. Row ids are dense (they count rows from 0), so
:class:`IdSet` answers membership with a boolean table over the ids' range,
in linear time, and falls back to a sorted array when the ids are sparse.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ctfile.format.actions import Partition
from ctfile.reader.partition_reader import hidden_values_only_inherited

# Row-id sets use a boolean table over the ids' range when the range is at
# most this many times the number of ids (plus the slack), else sorted arrays.
ID_TABLE_FACTOR = 4
ID_TABLE_SLACK = 1 << 20


class IdSet:
    """Membership of int64 row ids in one set at a time.

    Row ids are dense (they count rows from 0), so when the ids of a scan's
    partitions span a range not much larger than their number a boolean
    table over that range answers in linear time, without sorting or
    hashing; it is allocated once and refilled for each set. Otherwise the
    set is kept sorted and probed with a binary search.
    """

    def __init__(self, universe: Sequence[np.ndarray]):
        nonempty = [u for u in universe if len(u)]
        total = sum(len(u) for u in nonempty)
        self._lo = min((int(u.min()) for u in nonempty), default=0)
        hi = max((int(u.max()) for u in nonempty), default=-1)
        span = hi - self._lo + 1
        dense = 0 < span <= ID_TABLE_FACTOR * total + ID_TABLE_SLACK
        self._table = np.zeros(span, dtype=bool) if dense else None
        self._sorted = np.empty(0, np.int64)

    def fill(self, rids: Sequence[np.ndarray], masks: Sequence[np.ndarray | None]) -> None:
        """The set becomes ``rids[i][masks[i]]`` over all ``i`` (a None mask:
        all of ``rids[i]``). The ids of all ``rids`` must be distinct."""
        if self._table is not None:
            t = self._table
            t[:] = False
            for rid, mask in zip(rids, masks):
                if mask is None:
                    t[rid - self._lo] = True
                elif 4 * np.count_nonzero(mask) < len(mask):
                    t[rid[mask] - self._lo] = True
                elif len(rid):
                    # Mostly members, distinct ids: scattering the mask itself
                    # sets exactly the members, without compressing the ids.
                    t[rid - self._lo] = mask
        else:
            parts = [rid if mask is None else rid[mask] for rid, mask in zip(rids, masks)]
            self._sorted = np.sort(np.concatenate(parts or [np.empty(0, np.int64)]))

    def contains(self, values: np.ndarray, dense: bool = False) -> np.ndarray:
        """``values[i] in set``; ``values`` must lie within the universe.
        ``dense``: ``values`` is known to be an ascending run of consecutive
        ids (a plain insert's), answered by a slice of the table."""
        if self._table is not None:
            if dense and len(values):
                start = int(values[0]) - self._lo
                return self._table[start:start + len(values)].copy()
            return self._table[values - self._lo]
        s = self._sorted
        if not len(s) or not len(values):
            return np.zeros(len(values), dtype=bool)
        i = np.searchsorted(s, values)
        np.minimum(i, len(s) - 1, out=i)
        return s[i] == values

    def members(self) -> np.ndarray:
        """The set, sorted."""
        if self._table is not None:
            return np.flatnonzero(self._table).astype(np.int64) + self._lo
        return self._sorted


@dataclass(frozen=True, eq=False)
class Side:
    """One side of a minimum delta: the net added partitions (``insert``:
    new images, candidate INSERTs) or the net removed ones (old images,
    candidate DELETEs), with, per partition (aligned with ``parts``), the row
    id of each of its rows, the rows the delta needs (``selected``) and which
    of those are halves of update pairs (``pairs``, a subset of
    ``selected``).

    >>> side = Side(True, ["p"], [np.array([4, 5, 6, 7])],
    ...             [np.array([False, True, True, True])], [np.array([False, False, True, True])])
    >>> side.positions(0).tolist(), side.pairs_in(0, 6, 7).tolist(), side.shape(0)
    ([1, 2, 3], [2], (4, 4, 7))
    >>> side.only_pairs(0), side.pairs_only().only_pairs(0)
    (False, True)
    """

    insert: bool
    parts: Sequence[Partition]
    rids: Sequence[np.ndarray]  # per partition: the row id of every row
    selected: Sequence[np.ndarray]  # per partition: bool per row, needed by the delta
    pairs: Sequence[np.ndarray]  # per partition: bool per row, half of an update pair

    def __len__(self) -> int:
        return len(self.parts)

    def positions(self, i: int) -> np.ndarray:
        """Indices of the needed rows of partition ``i``, as int32 when they
        fit (half the memory of the index arrays a scan of a large change
        keeps)."""
        mask = self.selected[i]
        pos = np.flatnonzero(mask)
        return pos.astype(np.int32) if len(mask) < 2**31 else pos

    def pairs_in(self, i: int, lo: int, hi: int) -> np.ndarray:
        """Indices of the pair rows of partition ``i`` with ids in ``[lo, hi)``."""
        rid = self.rids[i]
        return np.flatnonzero(self.pairs[i] & (rid >= lo) & (rid < hi))

    def shape(self, i: int) -> tuple[int, int, int] | None:
        """``(rows, first id, last id)`` of partition ``i`` (None when empty):
        equal for a partition and a copy-on-write rewrite of it with the same
        rows in the same order."""
        rid = self.rids[i]
        return (len(rid), int(rid[0]), int(rid[-1])) if len(rid) else None

    def only_pairs(self, i: int) -> bool:
        """Every needed row of partition ``i`` is half of an update pair."""
        return np.array_equal(self.selected[i], self.pairs[i])

    def pairs_only(self) -> Side:
        """This side with only its update pairs needed (its lone rows taken
        care of): the selection arrays are no longer referenced."""
        return dataclasses.replace(self, selected=self.pairs)


def classify(
    added: Sequence[Partition],
    a_rid: Sequence[np.ndarray],
    a_sel: Sequence[np.ndarray],
    removed: Sequence[Partition],
    r_rid: Sequence[np.ndarray],
) -> tuple[Side, Side, np.ndarray]:
    """From the hidden values: the new side (``added``, whose rows ``a_sel``
    were written in the interval), the old side (``removed``: its rows not
    copied unchanged are needed) with the halves of update pairs of both, and
    the sorted pair ids."""
    no_pairs = _none(a_rid)
    if not removed:
        return Side(True, added, a_rid, a_sel, no_pairs), Side(False, removed, r_rid, [], []), np.empty(0, np.int64)
    ids = IdSet(list(a_rid) + list(r_rid))
    dense = [hidden_values_only_inherited(p) for p in removed]
    # U: ids of the unchanged copies; a removed row not in U was deleted or updated.
    ids.fill(a_rid, [~sel for sel in a_sel])
    r_sel = [~ids.contains(rid, d) for rid, d in zip(r_rid, dense)]
    if not _any_needed(a_sel) or not _any_needed(r_sel):
        old = Side(False, removed, r_rid, r_sel, _none(r_rid))
        return Side(True, added, a_rid, a_sel, no_pairs), old, np.empty(0, np.int64)
    # Ids on both sides are the updates.
    ids.fill(r_rid, r_sel)
    a_pair = _pair_halves(ids, a_rid, a_sel, [False] * len(a_rid))
    ids.fill(a_rid, a_pair)
    r_pair = _pair_halves(ids, r_rid, r_sel, dense)
    return Side(True, added, a_rid, a_sel, a_pair), Side(False, removed, r_rid, r_sel, r_pair), ids.members()


def _none(rids: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per partition of row ids ``rids``, a mask selecting no row."""
    return [np.zeros(len(rid), dtype=bool) for rid in rids]


def _any_needed(selected: Sequence[np.ndarray]) -> bool:
    """Whether a partition of a side needs a row."""
    return any(sel.any() for sel in selected)


def _pair_halves(ids: IdSet, rids: Sequence[np.ndarray], selected: Sequence[np.ndarray], dense: Sequence[bool]) -> list[np.ndarray]:
    """Per partition, its needed rows whose ids are in ``ids`` (the other
    side's needed ids): its halves of update pairs. ``dense``: the
    partition's ids are an ascending run (see :meth:`IdSet.contains`)."""
    return [
        sel & ids.contains(rid, d) if sel.any() else np.zeros(len(rid), dtype=bool)
        for rid, sel, d in zip(rids, selected, dense)
    ]
