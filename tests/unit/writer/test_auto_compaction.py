"""Automatic compaction (SPEC §Clustering, automatic compaction) as a user
sees it: the follow-up COMPACT is reported in the statement's
``CommitResult.auto_compaction``, whichever API committed the statement.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import ctfile

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.string())])


def _table(path, **props) -> ctfile.Table:
    base = {"ctfile.partitionRows": "8", "ctfile.autoCompact": "true", **props}
    return ctfile.create_table(path, SCHEMA, properties=base)


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "k": [f"k{i % 5}" for i in ids]}, schema=SCHEMA)


@pytest.mark.parametrize("keys", [None, "k,id"])
@pytest.mark.parametrize("api", ["insert", "transaction"])
def test_statement_result_reports_its_auto_compaction(tmp_path, keys, api):
    """The fourth one-row insert leaves four small partitions: the COMPACT
    that follows it is version 5, and the insert's result says so (it used
    to be committed but missing from the result of ``Table.insert`` and of a
    ``with table.transaction()`` block)."""
    t = _table(tmp_path / "t", **({"ctfile.clusterBy": keys} if keys else {}))
    for i in range(3):
        assert t.insert(_rows([i])).auto_compaction is None
    if api == "insert":
        r = t.insert(_rows([3]))
    else:
        with t.transaction() as tx:
            tx.insert(_rows([3]))
        r = tx.result
    assert (r.version, r.committed) == (4, True)
    ac = r.auto_compaction
    assert ac is not None, r
    assert (ac.version, ac.committed, ac.operation, ac.num_removed_partitions) == (5, True, "COMPACT", 4)
    fresh = ctfile.open_table(tmp_path / "t")
    assert fresh.version == t.version == 5
    assert len(fresh.snapshot().partitions) == 1
    assert sorted(fresh.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]
