"""ChangeSet.tasks(): a change scan split into independent picklable tasks
(what the Spark data source ships to executors) yields exactly the rows of the
serial scan, as a multiset, in every mode."""

from __future__ import annotations

import math
import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import Partition, PartitionStats
from ctfile.format.schema import ROW_ID_FIELD_ID
from ctfile.reader.change_plan import PlanShape
from ctfile.reader.change_scan import ChangeTask
from ctfile.reader.change_tasks import components, row_id_range

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())])


def rows(n0: int, n1: int) -> pa.Table:
    ids = list(range(n0, n1))
    return pa.table({"id": ids, "x": ids, "s": [f"s{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> ctfile.Table:
    """Several micro-partitions of 10 rows and every kind of change:
    v1, v2 inserts; v3 update over several partitions; v4 delete; v5 merge
    (updates, inserts); v6 update, a no-op for one row; v7 insert;
    v8 update then v9 delete of rows inserted in the interval; v10 compaction."""
    t = ctfile.create_table(str(tmp_path_factory.mktemp("ct") / "t"), SCHEMA, partition_rows=10)
    t.insert(rows(0, 40))  # v1: 4 partitions
    t.insert(rows(40, 65))  # v2: 3 partitions
    t.update(pc.field("id").isin(list(range(0, 65, 7))), {"x": pc.field("x") + 100})  # v3
    t.delete((pc.field("id") >= 5) & (pc.field("id") <= 12))  # v4
    src = pa.table({"id": [20, 41, 70, 71], "x": [-1, -2, -3, -4], "s": ["m", "m", "m", "m"]}, schema=SCHEMA)
    t.merge(src, "id")  # v5
    t.update(pc.field("id").isin([30, 31]), {"x": 30})  # v6: a no-op for id 30 (x is already 30)
    t.insert(rows(100, 115))  # v7
    t.update(pc.field("id") >= 105, {"s": "late"})  # v8
    t.delete(pc.field("id") == 110)  # v9
    t.compact(target_rows=30)  # v10: dataChange false
    assert t.version == 10
    return t


def multiset(tbl: pa.Table) -> list[tuple]:
    key = lambda r: tuple((v is None, str(v)) for v in r)  # noqa: E731
    return sorted((tuple(r.values()) for r in tbl.to_pylist()), key=key)


def run_tasks(cs, **kw) -> tuple[pa.Table, list[ChangeTask]]:
    tasks = cs.tasks(**kw)
    # Shipped to another process: pickled, read there.
    shipped = [pickle.loads(pickle.dumps(t)) for t in tasks]
    batches = [b for t in shipped for b in t.to_batches()]
    for b in batches:
        assert b.schema.equals(cs.schema)
    return pa.Table.from_batches(batches, schema=cs.schema), tasks


CASES = [
    pytest.param(dict(information=info, start_version=a, end_version=b, initial_rows=init, changelog=log, filter=flt),
                 id=f"{info}-{a}..{b}-init{int(init)}-{log}-{'f' if flt is not None else 'nf'}")
    for info in ("default", "append_only", "audit")
    for (a, b), log in (((1, 10), None), ((3, 5), "op"), ((4, 9), None), ((6, 6), None))
    for init in (False, True)
    for flt in (None, pc.field("x") > 20)
]


@pytest.mark.parametrize("kwargs", CASES)
def test_tasks_equal_the_serial_scan(table, kwargs):
    cs = table.changes(**kwargs)
    expected = cs.to_arrow()
    for max_rows in (1, None):
        got, tasks = run_tasks(cs, max_rows_per_task=max_rows)
        assert multiset(got) == multiset(expected), (max_rows, len(tasks))
        if expected.num_rows:
            assert tasks


def test_tasks_split_every_mode(table):
    # Versions 1-9 (before the compaction, whose outputs mix every range of ids):
    # the three modes run as many tasks, not one.
    for info, minimum in (("default", 8), ("append_only", 10), ("audit", 20)):
        tasks = table.changes(start_version=1, end_version=9, information=info).tasks(max_rows_per_task=1)
        assert len(tasks) >= minimum, (info, len(tasks))
    # Initial rows: one task per partition of the starting snapshot.
    snap_parts = len(table.snapshot(10).partitions)
    assert len(table.changes(start_version=5, initial_rows=True).tasks(max_rows_per_task=1)) == snap_parts
    # Default packing: the small tasks are packed together (about 1 Mi rows per task).
    assert len(table.changes(start_version=1).tasks()) == 1


def test_empty_scan_has_no_tasks(table):
    cs = table.changes(start_version=10, end_version=10)  # compaction only
    assert cs.plan_shape is PlanShape.EMPTY
    assert cs.tasks() == []
    assert cs.to_arrow().num_rows == 0


def test_filter_prunes_while_planning(table):
    flt = pc.field("id") >= 100
    cs = table.changes(start_version=7, end_version=7, information="append_only", filter=flt)
    tasks = cs.tasks(max_rows_per_task=1)
    assert tasks and all(p.num_records for t in tasks for p in t.plan.appended)
    none = table.changes(start_version=7, end_version=7, information="append_only", filter=pc.field("id") < 50)
    assert none.tasks() == []


# ---------------------------------------------------------------- row-id ranges


def part(first: int, n: int, stats: PartitionStats | None) -> Partition:
    return Partition(f"p{first}-{n}", 1, n, first, 1, 0, None, stats)


def test_row_id_range_from_the_log():
    inherited = PartitionStats(10, null_count={ROW_ID_FIELD_ID: 10})
    assert row_id_range(part(100, 10, inherited)) == (100, 109)
    stored = PartitionStats(10, {ROW_ID_FIELD_ID: 3}, {ROW_ID_FIELD_ID: 50}, {ROW_ID_FIELD_ID: 0})
    assert row_id_range(part(100, 10, stored)) == (3, 50)
    mixed = PartitionStats(10, {ROW_ID_FIELD_ID: 3}, {ROW_ID_FIELD_ID: 50}, {ROW_ID_FIELD_ID: 4})
    assert row_id_range(part(100, 10, mixed)) == (3, 109)
    unbounded = (-math.inf, math.inf)
    assert row_id_range(part(100, 10, None)) == unbounded
    assert row_id_range(part(100, 10, PartitionStats(10))) == unbounded
    no_max = PartitionStats(10, {ROW_ID_FIELD_ID: 3}, {}, {ROW_ID_FIELD_ID: 0})
    assert row_id_range(part(100, 10, no_max)) == unbounded


def test_components_group_overlapping_ranges():
    inh = lambda first, n: part(first, n, PartitionStats(n, null_count={ROW_ID_FIELD_ID: n}))  # noqa: E731

    def stored(lo, hi, n):
        return part(1000 + lo, n, PartitionStats(n, {ROW_ID_FIELD_ID: lo}, {ROW_ID_FIELD_ID: hi}, {ROW_ID_FIELD_ID: 0}))

    r0, r1, r2 = inh(0, 10), inh(10, 10), inh(20, 10)
    a0, a1 = stored(0, 9, 10), stored(12, 25, 5)  # a1 holds ids of r1 and r2
    fresh = inh(30, 5)
    groups = components([a0, a1, fresh], [r0, r1, r2])
    assert [(len(a), len(r)) for a, r in groups] == [(1, 1), (1, 2), (1, 0)]
    assert groups[1] == ([a1], [r1, r2])
    # A partition without statistics joins everything.
    blind = part(500, 3, None)
    assert len(components([a0, a1, fresh, blind], [r0, r1, r2])) == 1


def test_captured_pieces_stay_in_version_order(tmp_path):
    """A task packing pieces of a MIXED plan consolidates them in version
    order: a row deleted by a captured commit (v4) and brought back by a
    RESTORE (v7, read from partitions) is an INSERT of 1..7, as the serial
    scan says (the pieces were once packed v1, v2, v3, v7, v4, v6, and the
    row's last event was then the delete)."""
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA, partition_rows=4,
                            properties={"ctfile.changeCapture": "before_after"})
    t.insert(rows(0, 10))  # v1
    t.update(pc.field("id") < 3, {"x": 7})  # v2
    t.merge(pa.table({"id": [4, 20], "x": [40, 20], "s": ["m", "m"]}, schema=SCHEMA), "id")  # v3
    t.delete(pc.field("id") == 9)  # v4
    t.compact()  # v5
    t.insert(rows(30, 31))  # v6
    t.restore(version=2)  # v7
    cs = t.changes(start_version=1, end_version=7)
    assert cs.plan.shape is PlanShape.MIXED
    got, tasks = run_tasks(cs)
    assert multiset(got) == multiset(cs.to_arrow()) and 9 in got.column("id").to_pylist()
    for task in tasks:
        starts = [s.start_version for s in task.plan.segments]
        assert starts == sorted(starts)
