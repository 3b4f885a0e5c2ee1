"""Update pairs reuse the columns a copy-on-write rewrite left byte-identical.

``same_columns`` must report exactly the columns an UPDATE did not set, and a
change scan must give the same rows whether or not it reuses them.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import AddPartition, RemovePartition
from ctfile.reader import min_delta, partition_reader
from ctfile.reader.partition_reader import same_columns


def _table(new_table, n=2000):
    t = new_table(partition_rows=1000)
    ids = list(range(n))
    t.insert(pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array([i % 7 for i in ids], pa.int64()),
        "s": pa.array([f"s{i}" if i % 5 else None for i in ids], pa.string()),
    }))
    return t


def _update_entry(t, v):
    entry = t.log.read_entry(v)
    return ([a.partition for a in entry if isinstance(a, AddPartition)],
            [r.partition for r in entry if isinstance(r, RemovePartition)])


def test_same_columns_reports_the_columns_an_update_did_not_set(new_table):
    t = _table(new_table)
    r = t.update(pc.field("x") == 3, {"s": "new"})
    assert r.committed
    added, removed = _update_entry(t, r.version)
    assert len(added) == len(removed) == 2
    schema = t.snapshot().table_schema
    by_ids = {tuple(partition_reader.read_hidden(t.storage, a)[0]): a for a in added}
    for old in removed:
        new = by_ids[tuple(partition_reader.read_hidden(t.storage, old)[0])]
        assert same_columns(t.storage, old, new, schema) == {"id", "x"}
    # A file shares every column with itself; files of different row counts share none.
    assert same_columns(t.storage, removed[0], removed[0], schema) == {"id", "x", "s"}
    t.delete(pc.field("id") == 1500)
    (shorter,) = [p for p in t.snapshot().partitions if p.num_records == 999]
    assert same_columns(t.storage, removed[1], shorter, schema) == set()


def test_change_scan_identical_with_and_without_column_reuse(new_table, monkeypatch):
    t = _table(new_table)
    v1 = t.update(pc.field("x") == 3, {"s": "new"}).version
    v2 = t.update(pc.field("x") == 4, {"x": 40, "s": None}).version
    v3 = t.update(pc.field("x") == 5, {"x": 5}).version  # no-op: nothing to commit
    calls = []
    real = min_delta.same_columns

    def counting(*a, **k):
        out = real(*a, **k)
        calls.append(out)
        return out

    monkeypatch.setattr(min_delta, "same_columns", counting)
    results = {}
    for reuse in (True, False):
        if not reuse:
            monkeypatch.setattr(min_delta, "same_columns", lambda *a, **k: set())
        for a, b in ((v1, v1), (v2, v2), (v1, v2), (1, v3)):
            for info in ("default", "audit"):
                results[(reuse, a, b, info)] = t.changes(start_version=a, end_version=b, information=info).to_arrow()
    assert calls and any(c for c in calls)  # the reuse path ran and found shared columns
    for (reuse, a, b, info), got in results.items():
        if reuse:
            assert got.equals(results[(False, a, b, info)]), (a, b, info)
    one = results[(True, v1, v1, "default")]
    assert one.num_rows == 2 * pc.sum(pc.equal(pa.array([i % 7 for i in range(2000)]), 3)).as_py()
    assert set(one.column("s").to_pylist()) >= {"new"}


def test_read_rows_reads_selected_columns_and_rows(new_table):
    t = _table(new_table)
    (p,) = [q for q in t.snapshot().partitions if q.first_row_id == 0]
    schema = t.snapshot().table_schema
    import numpy as np

    pos = np.array([0, 5, 999])
    got = partition_reader.read_rows(t.storage, p, schema, pos, columns=["s", "id"])
    assert got.column_names == ["s", "id"]
    assert got.column("id").to_pylist() == [0, 5, 999]
    assert got.column("s").to_pylist() == [None, None, "s999"]
    assert partition_reader.read_rows(t.storage, p, schema, pos[:0]).num_rows == 0
