"""Read-ahead of change-scan partitions (reader/read_ahead.py)."""

from __future__ import annotations

import itertools
import threading

import pyarrow as pa

from ctfile.reader import read_ahead


def test_read_ahead_is_bounded():
    """A read runs ahead of its consumer by at most ``max_rows`` rows (at
    least one item), then stops until the consumer takes rows."""
    from concurrent.futures import ThreadPoolExecutor

    produced = itertools.count()
    seen = []

    def items():
        for k in range(0, 1000, 10):
            seen.append(next(produced))
            yield k, pa.table({"a": pa.array(range(10))})

    with ThreadPoolExecutor(2) as pool:
        ahead = read_ahead.Ahead(pool, items(), 30)
        first = next(ahead)
        assert first[0] == 0
        for _ in range(200):  # let the worker run as far as it may
            if len(seen) >= 4:
                break
            threading.Event().wait(0.005)
        threading.Event().wait(0.05)
        assert 1 <= len(seen) <= 4  # 30 rows buffered = 3 items, + the one taken
        rest = list(ahead)
    assert [k for k, _ in [first, *rest]] == list(range(0, 1000, 10))
