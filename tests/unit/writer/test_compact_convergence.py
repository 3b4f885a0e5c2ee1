"""COMPACT of a clustered table converges (SPEC §Clustering, COMPACT): a
second ``compact()`` right after one rewrites nothing, also for partitions
without a key range (an all-null first key) and for strings whose values
share the 32-code-point statistics prefix (their ranges touch: SPEC
§Clustering), which sorting cannot narrow.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import ctfile

LONG = "z" * 40  # over the 32-character statistics prefix: the maximum is rounded up


@pytest.mark.parametrize(
    "batches",
    [
        pytest.param([[None], [None, None, None]], id="nulls"),  # all-null keys: 1 + 3 rows, target 3
        pytest.param([[LONG, LONG], [LONG + "a", LONG]], id="long-strings"),  # truncated maxima: 2 + 2 rows, target 3
        pytest.param([[None], [None], [None, None, None], [None, None, None]], id="nulls-4"),
        # Distinct values sharing the 32-code-point prefix, written in two overlapping inserts.
        pytest.param([[LONG + str(i) for i in (5, 1, 3)], [LONG + str(i) for i in (4, 2, 0)]], id="shared-prefix"),
    ],
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
