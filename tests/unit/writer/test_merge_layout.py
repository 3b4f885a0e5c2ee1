"""A MERGE of ordered clauses keeps what the shorthand MERGE has (SPEC
§Change capture, §Clustering): the change rows of a partition whose
matched rows are partly deleted, partly updated, and whose unmatched rows
are updated by ``NOT MATCHED BY SOURCE``, written by one rewrite; a
partition of which no row survives removed with ``deletesAllRows``;
clustered output; automatic compaction after it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import ctfile
from ctfile.format.actions import ChangeFile, RemovePartition
from ctfile.format.change_files import CHANGE_TYPE_COLUMN, check_change_rows
from ctfile.reader.change_plan import PlanShape, plan_changes
from ctfile.reader.change_scan import ChangeSet

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())])


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "v": [f"v{i}" for i in ids], "n": [i * 10 for i in ids]}, schema=SCHEMA)


def _merge(t: ctfile.Table, source: pa.Table) -> ctfile.CommitResult:
    """Delete where s.op = 'd', add s.n where 'u', insert the others;
    mark the unmatched rows of ids below 5."""
    return (t.merge_builder(source, on="id")
            .when_matched_delete(condition=pc.field("s.op") == "d")
            .when_matched_update({"n": pc.field("t.n") + pc.field("s.n")}, condition=pc.field("s.op") == "u")
            .when_not_matched_insert({"id": pc.field("s.id"), "n": pc.field("s.n")})
            .when_not_matched_by_source_update({"v": "stale"}, condition=pc.field("t.id") < 5)
            .execute())


def _source(ids, ops) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "n": [1] * len(ids), "op": ops})


def _captured(t: ctfile.Table, version: int) -> list[tuple]:
    out = []
    for c in (a for a in t.log.read_entry(version) if isinstance(a, ChangeFile)):
        rows = pq.read_table(pa.BufferReader(t.storage.read_bytes(c.path)))
        check_change_rows(rows, uri=t.uri, path=c.path, version=version)
        out += [(r["id"], r["v"], r["n"], r[CHANGE_TYPE_COLUMN]) for r in rows.to_pylist()]
    return sorted(out)


def test_one_rewrite_captures_deletes_updates_and_not_matched_by_source_updates(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, partition_rows=10,
                            properties={"ctfile.changeCapture": "before_after"})
    t.insert(_rows(range(10)))
    t.insert(_rows(range(10, 13)))
    r = _merge(t, _source([2, 3, 11, 12, 10, 50], ["d", "u", "d", "d", "d", "u"]))
    assert (r.num_deleted_rows, r.num_updated_rows, r.num_inserted_rows) == (4, 4, 1)
    assert r.num_removed_partitions == 2  # each partition rewritten once
    assert _captured(t, 3) == [
        (0, "stale", 0, "update_postimage"), (0, "v0", 0, "update_preimage"),
        (1, "stale", 10, "update_postimage"), (1, "v1", 10, "update_preimage"),
        (2, "v2", 20, "delete"),
        (3, "v3", 30, "update_preimage"), (3, "v3", 31, "update_postimage"),
        (4, "stale", 40, "update_postimage"), (4, "v4", 40, "update_preimage"),
    ]
    # The second partition lost every row: removed with deletesAllRows, no change rows of its own.
    removes = sorted((a.partition.num_records, a.deletes_all_rows)
                     for a in t.log.read_entry(3) if isinstance(a, RemovePartition))
    assert removes == [(3, True), (10, False)]
    captured = t.changes(start_version=3)
    assert captured.plan_shape is PlanShape.CAPTURED
    by_partitions = ChangeSet(t.storage, t.schema_at(), t.table_id, captured.scan,
                              plan_changes(t.log, captured.scan, latest=t.version, use_change_files=False))
    key = lambda r: (r["id"], r["METADATA$ACTION"], r["METADATA$ISUPDATE"])  # noqa: E731
    assert sorted(captured.to_arrow().to_pylist(), key=key) == sorted(by_partitions.to_arrow().to_pylist(), key=key)


def test_clustered_output_and_the_same_changes_as_unclustered(tmp_path):
    tables = []
    for name, props in (("plain", {}), ("clustered", {"ctfile.clusterBy": "n"})):
        t = ctfile.create_table(tmp_path / name, SCHEMA, partition_rows=50, properties=props or None)
        t.insert(_rows(range(40)))
        _merge(t, _source([3, 4, 7, 30, 41, 45], ["u", "d", "u", "u", "x", "x"]))
        tables.append(t)
    plain, clustered = tables
    rows = [sorted(map(str, t.changes(start_version=2).to_arrow().drop_columns(["METADATA$ROW_ID"]).to_pylist()))
            for t in tables]
    assert rows[0] == rows[1] and len(rows[0]) == 15  # 1 delete, 3 + 3 (stale) update pairs, 2 inserts
    for p in clustered.snapshot().partitions:
        n = pq.read_table(f"{clustered.uri}/{p.path}", columns=["n"]).column("n").to_pylist()
        assert n == sorted(n, key=lambda x: (x is None, x)), p.path


def test_auto_compaction_follows_a_merge_that_leaves_small_partitions(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, properties={
        "ctfile.partitionRows": "100", "ctfile.autoCompact": "true", "ctfile.clusterBy": "id"})
    t.insert(_rows(range(1000)))
    top, results = 1000, []
    for _ in range(8):  # each MERGE deletes, updates and inserts recent ids
        ids = list(range(top - 20, top - 10)) + list(range(top, top + 15))
        results.append(_merge(t, _source(ids, ["d", "u"] * 5 + ["i"] * 15)))
        top += 15
    assert any(r.auto_compaction is not None and r.auto_compaction.committed for r in results)
    live = t.snapshot().partitions
    assert len(live) <= -(-sum(p.num_records for p in live) // 100) + 3
    assert t.clustering_info().average_depth == 1.0


def test_a_few_deletes_out_of_a_large_partition_keep_every_other_row_and_its_lineage(tmp_path):
    """Survivors in few runs are written from slices of the partition read
    (``dml.surviving_rows``): the same rows, row ids and change rows."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.changeCapture": "before_after"})
    t.insert(_rows(range(3000)))
    before = {r["id"]: r for r in t.to_arrow(include_hidden=True).to_pylist()}
    r = _merge(t, _source([10, 2000, 2500], ["d", "d", "u"]))
    assert (r.num_deleted_rows, r.num_updated_rows, r.num_removed_partitions) == (2, 1 + 5, 1)  # 5 stale rows
    after = {x["id"]: x for x in t.to_arrow(include_hidden=True).to_pylist()}
    assert set(before) - set(after) == {10, 2000}
    for i, row in after.items():
        assert row[ctfile.ROW_ID_COLUMN] == before[i][ctfile.ROW_ID_COLUMN]
        changed = i == 2500 or i < 5
        assert row[ctfile.ROW_VERSION_COLUMN] == (2 if changed else 1), i
        assert (row["n"], row["v"]) == ((25001, "v2500") if i == 2500 else (i * 10, "stale" if i < 5 else f"v{i}"))
    assert [x[0] for x in _captured(t, 2) if x[3] == "delete"] == [10, 2000]
