"""Row-id sets of the minimum delta (reader/row_id_sets.py): the table over
the ids' range and the sorted-array fallback answer like ``numpy.isin``."""

from __future__ import annotations

import numpy as np
import pytest

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
