"""A clustered write does not hold a sorted copy of its whole window
(``ClusterOrder.chunks``, SPEC §Clustering **Writes**): each partition's rows
are gathered when the writer asks for that partition, so memory stays near
the input plus one partition, and the gather overlaps the encoding of the
partitions before it (benchmarks/bench_clustering.py, insert)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ctfile.writer.clustering import ClusterOrder


def test_first_partition_comes_without_a_sorted_copy_of_the_window():
    n = 200_000
    rng = np.random.default_rng(16)
    t = pa.table({"k": rng.permutation(n), **{f"v{i}": rng.random(n) for i in range(4)}})  # 40 bytes a row
    before = pa.total_allocated_bytes()
    chunks = ClusterOrder(("k",)).chunks(t.to_batches(), 10_000, window_bytes=None)
    first = pa.Table.from_batches(next(chunks))
    extra = pa.total_allocated_bytes() - before
    # the permutation and the sorted key (16 bytes a row) and one partition, not a sorted copy of all 40
    assert extra < 0.75 * t.nbytes, (extra, t.nbytes)
    assert first.column("k").to_pylist() == list(range(10_000))
    rest = [pa.Table.from_batches(c) for c in chunks]
    assert [c.num_rows for c in rest] == [10_000] * 19
    out = pa.concat_tables([first, *rest])
    assert out.column("k").to_numpy().tolist() == list(range(n))
    assert out.equals(t.sort_by("k"))
