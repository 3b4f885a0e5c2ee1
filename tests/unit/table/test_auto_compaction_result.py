"""The follow-up compaction of ``ctfile.autoCompact`` is reported in the
``CommitResult`` the ``Table`` statements return (``auto_compaction``), not
only in the return value of ``WriteTransaction.commit``: ``Table.insert`` and
the DML return the transaction's ``result`` (SPEC §Clustering, automatic
compaction)."""

from __future__ import annotations

import pyarrow as pa

import ctfile


def _table(tmp_path):
    props = {"ctfile.clusterBy": "id", "ctfile.partitionRows": "100", "ctfile.autoCompact": "true"}
    return ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64()), ("v", pa.int64())]), properties=props)


def test_table_statements_report_their_auto_compaction(tmp_path):
    t = _table(tmp_path)
    results = [t.insert(pa.table({"id": list(range(i * 10, i * 10 + 10)), "v": [0] * 10})) for i in range(4)]
    compacting = [r for r in results if r.auto_compaction is not None]
    compactions = [h for h in t.history() if h.operation == "COMPACT"]
    assert len(compacting) == len(compactions) == 1
    r = compacting[0]
    assert r.auto_compaction.version == r.version + 1 == compactions[0].version
    assert r.auto_compaction.operation == "COMPACT" and r.auto_compaction.num_removed_partitions == 4
    m = t.merge(pa.table({"id": [5, 1000], "v": [1, 1]}), "id")  # one partition left: nothing to compact
    assert m.num_updated_rows == 1 and m.num_inserted_rows == 1 and m.auto_compaction is None
