"""COMPACT of a clustered table converges (SPEC §Clustering, COMPACT): a
second ``compact()`` right after one rewrites nothing, also for partitions
without a key range (an all-null first key, a string maximum the statistics
truncate), which sorting cannot narrow.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import ctfile

LONG = "z" * 40  # over the 32-character statistics prefix: the maximum is not kept


@pytest.mark.parametrize(
    "batches",
    [
        [[None], [None, None, None]],  # all-null keys: 1 + 3 rows, target 3
        [[LONG, LONG], [LONG + "a", LONG]],  # truncated maxima: 2 + 2 rows, target 3
        [[None], [None], [None, None, None], [None, None, None]],
    ],
    ids=["nulls", "long-strings", "nulls-4"],
)
def test_second_compact_rewrites_nothing_without_key_ranges(tmp_path, batches):
    schema = pa.schema([("k", pa.string()), ("tag", pa.int64())])
    t = ctfile.create_table(tmp_path / "t", schema,
                            properties={"ctfile.clusterBy": "k", "ctfile.partitionRows": "3"})
    tag = 0
    for b in batches:
        t.insert(pa.table({"k": b, "tag": list(range(tag, tag + len(b)))}, schema=schema))
        tag += len(b)
    t.compact()
    info = t.clustering_info()
    v = t.version
    again = t.compact()
    assert not again.committed, (again, info)
    assert t.version == v
    assert sorted(t.to_arrow().column("tag").to_pylist()) == list(range(tag))
