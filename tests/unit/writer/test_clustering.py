"""Clustering keys (SPEC §Clustering): the property, clustered writes, the
recluster of COMPACT and its plan, on real tables."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.reader.clustering import key_ranges, overlaps
from ctfile.writer import recluster
from ctfile.writer.clustering import ClusterOrder

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64()), ("blob", pa.binary())])


def _rows(ids, regions=None) -> pa.Table:
    ids = list(ids)
    regions = regions or [f"r{i % 3}" for i in ids]
    return pa.table({"id": ids, "region": regions, "v": [float(i) for i in ids], "blob": [b"x"] * len(ids)},
                    schema=SCHEMA)


def _table(tmp_path, *, keys="id", rows=100, auto=False, name="t") -> ctfile.Table:
    props = {"ctfile.partitionRows": str(rows)}
    if keys is not None:
        props["ctfile.clusterBy"] = keys
    if auto:
        props["ctfile.autoCompact"] = "true"
    return ctfile.create_table(tmp_path / name, SCHEMA, properties=props)


def _shuffled(n, seed=0):
    return np.random.default_rng(seed).permutation(n)


def _file_ids(t: ctfile.Table, p) -> list:
    return pq.read_table(os.path.join(t.uri, p.path), columns=["id"]).column("id").to_pylist()


def _ranges(t: ctfile.Table, key="id"):
    snap = t.snapshot()
    return key_ranges(snap.partitions, snap.table_schema, key)[0]


def _no_overlaps(ranges) -> bool:
    return not any(overlaps(a, b) for i, a in enumerate(ranges) for b in ranges[i + 1:])


def _with_lineage(t: ctfile.Table, version=None) -> list[tuple]:
    rows = t.snapshot(version).to_arrow(include_hidden=True).select(["id", "region", ctfile.ROW_ID_COLUMN,
                                                                      ctfile.ROW_VERSION_COLUMN])
    return sorted(tuple(r.values()) for r in rows.to_pylist())


# ---------------------------------------------------------------- the property


@pytest.mark.parametrize("value, message", [
    ("nope", "ctfile.clusterBy: the table has no column 'nope'"),
    ("blob", "ctfile.clusterBy: column 'blob' is of type binary, which has no min/max statistics"),
    ("id,id", "must be a comma-separated list"),
    ("id, region", "must be a comma-separated list"),
    ("id,", "must be a comma-separated list"),
])
def test_bad_cluster_keys_are_refused_before_anything_is_written(tmp_path, value, message):
    with pytest.raises(ctfile.InvalidArgumentError, match=message):
        ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.clusterBy": value})
    assert not (tmp_path / "t").exists()
    t = _table(tmp_path, keys=None, name="u")
    with pytest.raises(ctfile.InvalidArgumentError, match=message):
        t.set_properties({"ctfile.clusterBy": value})
    assert ctfile.open_table(t.uri).version == 0


def test_auto_compact_takes_true_or_false(tmp_path):
    with pytest.raises(ctfile.InvalidArgumentError, match="ctfile.autoCompact must be true or false, found 'yes'"):
        ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.autoCompact": "yes"})


def test_keys_set_later_and_dropped_with_the_empty_value(tmp_path):
    t = _table(tmp_path, keys=None)
    t.insert(_rows(_shuffled(300)))
    assert t.clustering_info() is None
    assert t.clustering_info(keys="id").max_depth == 3  # three files, each spanning about 0..299
    t.set_properties({"ctfile.clusterBy": "id"})
    t.insert(_rows(_shuffled(300) + 1000))
    assert t.snapshot().cluster_keys == ("id",)
    newest = [p for p in t.snapshot().partitions if p.path not in {q.path for q in t.snapshot(2).partitions}]
    assert all(_file_ids(t, p) == sorted(_file_ids(t, p)) for p in newest)
    t.set_properties({"ctfile.clusterBy": ""})
    assert t.snapshot().cluster_keys == () and t.clustering_info() is None


def test_a_schema_change_that_drops_or_renames_a_key_is_refused(tmp_path):
    t = _table(tmp_path, keys="region,id")
    for edit in (lambda u: u.drop_column("id"), lambda u: u.rename_column("region", "area")):
        with pytest.raises(ctfile.SchemaMismatchError, match="is a clustering key"):
            with t.update_schema() as u:
                edit(u)
    assert ctfile.open_table(t.uri).version == 0
    with t.update_schema() as u:
        u.drop_column("v")  # not a key
    t.set_properties({"ctfile.clusterBy": "id"})
    with t.update_schema() as u:
        u.rename_column("region", "area")
    assert t.schema.names == ["id", "area", "blob"]


def test_keys_another_writer_left_unusable_mean_no_clustering(tmp_path):
    t = _table(tmp_path, keys=None)
    # A value no writer of this revision sets (as a later revision or a
    # damaged writer might leave it): writers write unclustered, nothing fails.
    from dataclasses import replace

    with t.transaction() as tx:
        tx.set_metadata(replace(tx.metadata, properties={**tx.metadata.properties, "ctfile.clusterBy": "gone"}))
    t.insert(_rows([5, 1, 3]))
    assert t.snapshot().cluster_keys == ()
    assert _file_ids(t, t.snapshot().partitions[0]) == [5, 1, 3]


# ---------------------------------------------------------------- writes


def test_insert_sorts_and_cuts_at_the_target(tmp_path):
    t = _table(tmp_path)
    t.insert(_rows(_shuffled(1000)))
    parts = sorted(t.snapshot().partitions, key=lambda p: _file_ids(t, p)[0])
    assert [p.num_records for p in parts] == [100] * 10
    assert [_file_ids(t, p) for p in parts] == [list(range(i, i + 100)) for i in range(0, 1000, 100)]
    assert t.clustering_info().average_depth == 1.0


def test_cuts_move_forward_to_a_change_of_the_first_key(tmp_path):
    t = _table(tmp_path, keys="region,id")
    regions = ["a"] * 110 + ["b"] * 150 + ["c"] * 40
    t.insert(_rows(range(300), regions=regions))
    parts = sorted(t.snapshot().partitions, key=lambda p: _file_ids(t, p)[0])
    # 110 rows of "a": the cut at 100 moves to 110 (within 25 rows); "b"
    # has no change within 25 rows of 210, so that cut stays.
    assert [p.num_records for p in parts] == [110, 100, 90]
    assert _no_overlaps(_ranges(t, "region"))


def test_a_stream_is_sorted_in_windows_with_full_files(tmp_path, monkeypatch):
    t = _table(tmp_path)
    # Windows of ~4 KiB of Arrow data: the stream is sorted piecewise, and
    # the short tail of each window is carried into the next.
    monkeypatch.setattr("ctfile.writer.clustering.SORT_WINDOW_BYTES", 4096)
    monkeypatch.setattr("ctfile.writer.dml.SORT_WINDOW_BYTES", 4096)
    data = _rows(_shuffled(1000))
    t.insert(pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=64)))
    parts = t.snapshot().partitions
    assert sum(p.num_records for p in parts) == 1000
    assert sum(p.num_records < 100 for p in parts) <= 1  # only the very last file is short
    assert all(_file_ids(t, p) == sorted(_file_ids(t, p)) for p in parts)
    assert t.clustering_info().average_depth > 1.0  # windows overlap until a compact
    t.compact()
    assert _no_overlaps(_ranges(t)) and t.to_arrow().num_rows == 1000


def test_nulls_and_nans_sort_last(tmp_path):
    schema = pa.schema([("k", pa.float64()), ("n", pa.int64())])
    t = ctfile.create_table(tmp_path / "t", schema, properties={"ctfile.clusterBy": "k"})
    t.insert(pa.table({"k": [2.0, None, float("nan"), -1.0, 0.5], "n": [1, 2, 3, 4, 5]}, schema=schema))
    stored = pq.read_table(os.path.join(t.uri, t.snapshot().partitions[0].path)).column("n").to_pylist()
    assert stored == [4, 5, 1, 3, 2]


def test_a_nan_before_numbers_is_moved_last(tmp_path):
    schema = pa.schema([("k", pa.float64())])
    t = ctfile.create_table(tmp_path / "t", schema, properties={"ctfile.clusterBy": "k"})
    t.insert(pa.table({"k": [float("nan"), 1.0, 2.0]}, schema=schema))
    stored = pq.read_table(os.path.join(t.uri, t.snapshot().partitions[0].path)).column("k").to_pylist()
    assert stored[:2] == [1.0, 2.0] and stored[2] != stored[2]


def test_update_sorts_its_rewrite_and_delete_keeps_the_order(tmp_path):
    t = _table(tmp_path, rows=1000)
    t.insert(_rows(range(100)))
    t.update(pc.field("id") == 10, {"id": 500})  # the key moves: the rewrite is sorted again
    (p,) = t.snapshot().partitions
    assert _file_ids(t, p) == sorted(_file_ids(t, p)) and _file_ids(t, p)[-1] == 500
    t.delete(pc.field("id") == 20)
    (p,) = t.snapshot().partitions
    assert _file_ids(t, p) == sorted(_file_ids(t, p)) and 20 not in _file_ids(t, p)


def _changes_without_ids(t: ctfile.Table, v: int) -> list[str]:
    rows = t.changes(start_version=v, end_version=v).to_arrow().drop_columns(["METADATA$ROW_ID"])
    return sorted(map(str, rows.to_pylist()))


def test_clustered_writes_change_no_row(tmp_path):
    """The same statements on a clustered and an unclustered table give the
    same rows and the same changes. Fresh rows take their row ids from
    their position in the file (SPEC §Row lineage), so a sorted insert
    numbers them differently: ids are compared as a relabelling."""
    a, b = _table(tmp_path, name="a"), _table(tmp_path, keys=None, name="b")
    for t in (a, b):
        t.insert(_rows(_shuffled(500)))
        t.update(pc.field("id") < 50, {"v": -1.0})
        t.merge(_rows([7, 600, 1, 999]), on="id")
        t.delete(pc.field("id") > 450)
    for v in range(1, a.version + 1):
        assert _changes_without_ids(a, v) == _changes_without_ids(b, v)
    ids = {}
    for t in (a, b):
        rows = t.snapshot().to_arrow(include_hidden=True).to_pylist()
        ids[t.uri] = {r["id"]: (r[ctfile.ROW_ID_COLUMN], r[ctfile.ROW_VERSION_COLUMN]) for r in rows}
        assert len({rid for rid, _ in ids[t.uri].values()}) == len(rows)  # row ids stay unique
    assert {k: rv for k, (_, rv) in ids[a.uri].items()} == {k: rv for k, (_, rv) in ids[b.uri].items()}


# ---------------------------------------------------------------- COMPACT


def test_compact_reclusters_overlapping_partitions_deepest_first(tmp_path):
    t = _table(tmp_path)
    for seed in range(3):
        t.insert(_rows(_shuffled(300, seed) + 300 * (seed == 2) * 10))  # two overlapping inserts, one apart
    info = t.clustering_info()
    assert info.max_depth == 2 and info.partitions == 9
    before = _with_lineage(t)
    version = t.version
    r = t.compact()
    assert r.committed and r.num_removed_partitions == 6  # the third insert overlaps nothing
    assert _no_overlaps(_ranges(t)) and t.clustering_info().average_depth == 1.0
    assert _with_lineage(t) == before
    assert t.changes(start_version=version + 1, end_version=t.version).to_arrow().num_rows == 0
    again = t.compact()
    assert not again.committed and again.num_removed_partitions == 0  # converged: nothing to do


def test_max_rows_bounds_the_work_and_takes_the_deepest_group(tmp_path):
    t = _table(tmp_path)
    for _ in range(3):
        t.insert(_rows(_shuffled(200)))  # depth 3 over 0..199
    for _ in range(2):
        t.insert(_rows(_shuffled(200) + 1000))  # depth 2 over 1000..1199
    r = t.compact(max_rows=600)
    assert r.num_removed_partitions == 6 and r.num_copied_rows == 600  # the depth-3 group only
    info = t.clustering_info()
    assert info.max_depth == 2
    assert t.compact().num_removed_partitions == 4 and t.clustering_info().max_depth == 1


def test_small_neighbours_merge_without_widening_overlap(tmp_path):
    t = _table(tmp_path)
    t.insert(_rows(range(0, 1000)))
    for start in (1000, 1010, 1020, 1030):
        t.insert(_rows(range(start, start + 10)))  # small files appended above the maximum
    assert t.clustering_info().partitions == 14
    r = t.compact()
    assert r.num_removed_partitions == 4 and t.clustering_info().partitions == 11
    assert _no_overlaps(_ranges(t))


def test_a_large_group_is_rewritten_in_key_ranges(tmp_path, monkeypatch):
    monkeypatch.setattr(recluster, "MEMORY_PARTITIONS", 2)  # groups above 200 rows go by ranges
    t = _table(tmp_path)
    for seed in range(4):
        t.insert(_rows(_shuffled(400, seed)))
    before = _with_lineage(t)
    reads = []
    real = recluster.read_with_lineage
    monkeypatch.setattr(recluster, "read_with_lineage", lambda tx, p, where: reads.append(where) or real(tx, p, where))
    t.compact()
    assert len({str(w) for w in reads}) > 1  # several ranges
    assert _with_lineage(t) == before
    assert _no_overlaps(_ranges(t)) and t.clustering_info().partitions == 16
    assert all(_file_ids(t, p) == sorted(_file_ids(t, p)) for p in t.snapshot().partitions)


def test_a_failed_recluster_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(recluster, "MEMORY_PARTITIONS", 1)
    t = _table(tmp_path)
    for seed in range(2):
        t.insert(_rows(_shuffled(300, seed)))
    files_before = set(os.listdir(os.path.join(t.uri, "data")))
    calls = []
    real = recluster.read_with_lineage

    def failing(tx, p, where):
        calls.append(p)
        if len(calls) > 4:  # after the first ranges were written
            raise RuntimeError("injected read failure")
        return real(tx, p, where)

    monkeypatch.setattr(recluster, "read_with_lineage", failing)
    with pytest.raises(RuntimeError, match="injected"):
        t.compact()
    assert set(os.listdir(os.path.join(t.uri, "data"))) == files_before
    assert ctfile.open_table(t.uri).version == 2


def test_compact_without_keys_merges_small_partitions_as_before(tmp_path):
    t = _table(tmp_path, keys=None)
    for i in range(4):
        t.insert(_rows([i * 10 + 3, i * 10 + 1]))
    r = t.compact()
    assert r.num_removed_partitions == 4 and r.num_added_partitions == 1
    with pytest.raises(ctfile.InvalidArgumentError, match="max_rows must be an int in 1..9223372036854775807, found 0"):
        t.compact(max_rows=0)


def test_timestamps_strings_and_dates_cluster_too(tmp_path):
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("s", pa.string()), ("d", pa.date32())])
    t = ctfile.create_table(tmp_path / "t", schema, properties={"ctfile.clusterBy": "s", "ctfile.partitionRows": "50"})
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for seed in range(2):
        order = _shuffled(200, seed)
        t.insert(pa.table({"ts": [base + dt.timedelta(minutes=int(i)) for i in order],
                           "s": [f"k{i:04d}" for i in order],
                           "d": [dt.date(2026, 1, 1) + dt.timedelta(days=int(i)) for i in order]}, schema=schema))
    assert t.clustering_info().max_depth == 2
    t.compact()
    assert t.clustering_info().max_depth == 1 and t.clustering_info(keys=["d"]).max_depth == 1


def test_cluster_order_helpers():
    order = ClusterOrder(("a", "b"))
    t = pa.table({"a": [2, 1, 2, 1], "b": ["y", "z", "x", None]})
    assert order.sort(t).to_pydict() == {"a": [1, 1, 2, 2], "b": ["z", None, "x", "y"]}
    sorted_t = order.sort(t)
    assert order.sort(sorted_t) is sorted_t  # already in order: no copy
    assert order.cut_ends(pa.table({"a": list(range(10)), "b": ["x"] * 10}), 4) == [4, 8, 10]
    assert order.cut_ends(pa.table({"a": [], "b": []}, schema=t.schema), 4) == [0]
