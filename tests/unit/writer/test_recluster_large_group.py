"""A COMPACT group larger than ``MEMORY_PARTITIONS`` partitions' worth of
rows is rewritten in ranges of the first key (SPEC §Clustering, COMPACT):
every row lands in exactly one range, NaN and null included, whatever value
a cut point falls on. ``MEMORY_PARTITIONS`` is the size threshold, lowered
here so that a small group takes that path (patched in
``ctfile.writer.recluster``, which reads it at each rewrite).
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

import ctfile
import ctfile.writer.recluster as recluster

NAN = math.nan


@pytest.mark.parametrize("memory", [1, 2])
def test_large_group_keeps_nan_and_null_keys(tmp_path, monkeypatch, memory):
    monkeypatch.setattr(recluster, "MEMORY_PARTITIONS", memory)  # read by rewrite_group at each call
    schema = pa.schema([("f", pa.float64()), ("tag", pa.int64())])
    t = ctfile.create_table(tmp_path / "t", schema,
                            properties={"ctfile.clusterBy": "f", "ctfile.partitionRows": "3"})
    # Overlapping ranges, most values NaN: the sorted key values end in NaNs,
    # so cut points fall on NaN.
    batches = [[1.0, NAN, NAN], [2.0, NAN, None], [0.5, NAN, 3.0], [NAN, 2.5, NAN]]
    for i, b in enumerate(batches):
        t.insert(pa.table({"f": b, "tag": [10 * i + j for j in range(len(b))]}, schema=schema))
    before = t.snapshot().to_arrow(include_hidden=True)
    r = t.compact()
    assert r.committed and r.num_removed_partitions == 4
    after = t.snapshot().to_arrow(include_hidden=True)

    def rows(tb):
        return sorted((r["tag"], r[ctfile.ROW_ID_COLUMN], r[ctfile.ROW_VERSION_COLUMN]) for r in tb.to_pylist())

    assert rows(after) == rows(before)
    assert after.num_rows == 12
