"""Row-id sets of the minimum delta (reader/row_id_sets.py): the table over
the ids' range and the sorted-array fallback answer like ``numpy.isin``."""

from __future__ import annotations

import numpy as np
import pytest

from ctfile.format.actions import Partition
from ctfile.reader import row_id_sets


@pytest.mark.parametrize("n", [0, 1, 5, 200])
def test_id_set_matches_isin(n):
    rng = np.random.default_rng(n)
    universe = [rng.choice(10**7, size=n, replace=False) + 10**6, np.arange(50, 50 + n), np.array([7, 10**6 - 1, 3])]
    values = np.concatenate(universe)
    for rids, masks in (
        ([universe[0]], [np.arange(n) < n // 2]),
        ([universe[1], universe[2]], [np.arange(n) % 3 == 0, None]),
        ([universe[1]], [None]),
        ([], []),
    ):
        ref = np.concatenate([r if m is None else r[m] for r, m in zip(rids, masks)] or [np.empty(0, np.int64)])
        for slack in (0, 1 << 20):  # sorted arrays / a table over the range
            ids = row_id_sets.IdSet(universe)
            if not slack:
                ids._table = None
            ids.fill(rids, masks)
            assert np.array_equal(ids.contains(values), np.isin(values, ref))
            assert np.array_equal(ids.members(), np.unique(ref))
            # A run of consecutive ids answered by a slice.
            assert np.array_equal(ids.contains(universe[1], dense=True), np.isin(universe[1], ref))


@pytest.mark.parametrize("seed", range(6))
def test_classify_sides_match_set_arithmetic(seed):
    """The sides :func:`classify` returns agree with the definition computed
    with ``numpy.isin``: a removed row is needed unless an added row copies
    it unchanged, and ids needed on both sides are the update pairs."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(400)
    removed_ids = np.split(ids[:300], [120, 200])  # 3 removed partitions, ids out of order
    kept = rng.random(300) < 0.6  # copied unchanged
    updated = ~kept & (rng.random(300) < 0.5)  # rewritten with a new version (the rest deleted)
    flat = np.concatenate(removed_ids)
    new_rows = np.concatenate([flat[kept | updated], ids[300:]])  # plus inserts
    written = np.concatenate([updated[kept | updated], np.ones(100, bool)])
    cut = [len(new_rows) // 3, 2 * len(new_rows) // 3]
    a_rid, a_sel = np.split(new_rows, cut), np.split(written, cut)
    parts = [Partition(f"p{i}", 1, len(r), 0, 0, 0) for i, r in enumerate(removed_ids)]
    new, old, pair_ids = row_id_sets.classify(["a"] * 3, a_rid, a_sel, parts, removed_ids)
    assert new.insert and not old.insert and len(new) == len(old) == 3
    unchanged = new_rows[~written]
    want_pairs = np.sort(flat[updated])
    assert np.array_equal(pair_ids, want_pairs)
    for i, rid in enumerate(removed_ids):
        assert np.array_equal(old.selected[i], ~np.isin(rid, unchanged))
        assert np.array_equal(old.pairs[i], np.isin(rid, want_pairs))
        assert np.array_equal(rid[old.positions(i)], rid[old.selected[i]])
    for j, rid in enumerate(a_rid):
        assert new.selected[j] is a_sel[j]
        assert np.array_equal(new.pairs[j], a_sel[j] & np.isin(rid, want_pairs))
        lo, hi = int(want_pairs[len(want_pairs) // 5]), int(want_pairs[len(want_pairs) // 2])
        assert np.array_equal(new.pairs_in(j, lo, hi), np.flatnonzero(new.pairs[j] & (rid >= lo) & (rid < hi)))
    assert all(old.pairs_only().only_pairs(i) for i in range(3))
