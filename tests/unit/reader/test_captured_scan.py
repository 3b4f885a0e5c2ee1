"""Change scans over captured commits (SPEC §Change scans, "Using change
files"; §Change capture): plan shapes CAPTURED and MIXED, the files a scan
opens, parallel tasks, and damaged or missing change files."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ctfile
from ctfile.format.actions import ChangeFile, RemovePartition
from ctfile.format.errors import CorruptDataFileError, MissingDataFileError
from ctfile.reader import integrity
from ctfile.reader.integrity import unchecked_reads
from ctfile.reader.captured import CapturedCommit
from ctfile.reader.change_plan import PartitionDelta, PlanShape, plan_changes
from ctfile.reader.change_scan import ChangeSet

CAPTURE = {"ctfile.changeCapture": "before_after"}
ROW_ID = "METADATA$ROW_ID"


def history(t: ctfile.Table, make_rows) -> None:
    """v1 insert 0..59 (6 partitions); v2 update scattered rows; v3 delete
    some; v4 insert 100..104; v5 merge (update + insert)."""
    t.insert(make_rows(60))
    t.update(pc.field("id").isin([3, 17, 25, 41, 58]), {"s": "u"})
    t.delete(pc.field("id").isin([4, 30, 31]))
    t.insert(make_rows(5, 100))
    src = pa.table({"id": pa.array([17, 40, 200], pa.int64()), "x": pa.array([-1, -2, -3], pa.int64()),
                    "s": pa.array(["m", "m", "m"])})
    t.merge(src, "id", when_matched="update", when_not_matched="insert")


@pytest.fixture
def captured(new_table, make_rows) -> ctfile.Table:
    t = new_table(partition_rows=10, properties=CAPTURE)
    history(t, make_rows)
    return t


@pytest.fixture
def uncaptured(new_table, make_rows) -> ctfile.Table:
    t = new_table(partition_rows=10)
    history(t, make_rows)
    return t


def by_partitions(t: ctfile.Table, cs: ChangeSet) -> ChangeSet:
    snap = t.snapshot()
    plan = plan_changes(t.log, cs.scan, latest=t.version, use_change_files=False)
    return ChangeSet(t.storage, snap.metadata.schema, snap.metadata.table_id, cs.scan, plan)


def multiset(table: pa.Table) -> list:
    return sorted(map(repr, table.to_pylist()))


def check_pairs_adjacent(table: pa.Table) -> None:
    rows = table.to_pylist()
    for i, r in enumerate(rows):
        if r.get("METADATA$ISUPDATE") and r["METADATA$ACTION"] == "DELETE":
            assert rows[i + 1]["METADATA$ACTION"] == "INSERT" and rows[i + 1][ROW_ID] == r[ROW_ID]


# ---------------------------------------------------------------- planning


def test_capture_off_plans_unchanged(uncaptured):
    cs = uncaptured.changes(start_version=2, end_version=5)
    assert cs.plan_shape is PlanShape.MINIMIZE
    assert [type(s) for s in cs.plan.segments] == [PartitionDelta]
    assert not cs.plan.change_files_to_read()
    audit = uncaptured.changes(start_version=2, end_version=5, information="audit")
    assert audit.plan_shape is PlanShape.MINIMIZE and all(isinstance(s, PartitionDelta) for s in audit.plan.segments)


def test_captured_plan(captured):
    cs = captured.changes(start_version=2, end_version=5)
    assert cs.plan_shape is PlanShape.CAPTURED
    assert [(type(s), s.start_version) for s in cs.plan.segments] == [(CapturedCommit, v) for v in (2, 3, 4, 5)]
    # The UPDATE's change file and the MERGE's are read; no partition either rewrote.
    rewritten = {r.path for v in (2, 3, 5) for r in captured.log.read_entry(v) if isinstance(r, RemovePartition)}
    assert rewritten and not rewritten & {p.path for p in cs.plan.partitions_to_read()}
    files = cs.plan.change_files_to_read()
    assert {f.path for f in files} == {
        a.path for v in (2, 3, 5) for a in captured.log.read_entry(v) if isinstance(a, ChangeFile)
    }
    assert cs.plan.bytes_to_read == sum(f.size_bytes for f in files) + sum(
        p.size_bytes for p in cs.plan.partitions_to_read()
    )
    ref = by_partitions(captured, cs)
    assert ref.plan_shape is PlanShape.MINIMIZE
    # Rows read: the change files' and the fresh rows', at least the rows
    # output, fewer than the partitions the same scan reads without them.
    assert cs.to_arrow().num_rows <= cs.plan.rows_to_read < ref.plan.rows_to_read
    assert ref.plan.rows_to_read == sum(p.num_records for p in ref.plan.partitions_to_read())
    # An interval of inserts only has no change action: the partition shapes.
    assert captured.changes(start_version=4, end_version=4).plan_shape is PlanShape.ADDED_ONLY
    assert captured.changes(start_version=1, end_version=1).plan_shape is PlanShape.ADDED_ONLY


def test_mixed_plan(new_table, make_rows):
    t = new_table(partition_rows=10)
    t.insert(make_rows(40))  # v1
    t.update(pc.field("id") == 5, {"s": "a"})  # v2, not captured
    t.update(pc.field("id") == 15, {"s": "b"})  # v3, not captured
    t.set_properties(CAPTURE)  # v4, metadata only
    t.update(pc.field("id").isin([5, 25]), {"s": "c"})  # v5, captured
    t.delete(pc.field("id") == 15)  # v6, captured
    cs = t.changes(start_version=2, end_version=6)
    assert cs.plan_shape is PlanShape.MIXED
    segs = cs.plan.segments
    assert [(type(s), s.start_version, s.end_version) for s in segs] == [
        (PartitionDelta, 2, 3), (CapturedCommit, 5, 5), (CapturedCommit, 6, 6)
    ]
    audit = t.changes(start_version=2, end_version=6, information="audit")
    assert audit.plan_shape is PlanShape.MIXED
    assert [(type(s), s.start_version) for s in audit.plan.segments] == [
        (PartitionDelta, 2), (PartitionDelta, 3), (CapturedCommit, 5), (CapturedCommit, 6)
    ]
    # Row 5 updated before and after capture was on: one pair, first old, last new image.
    rows = cs.to_arrow().to_pylist()
    five = [(r["s"], r["METADATA$ACTION"]) for r in rows if r["id"] == 5]
    assert five == [("s5", "DELETE"), ("c", "INSERT")]
    assert [(r["id"], r["METADATA$ACTION"]) for r in rows if r["id"] == 15] == [(15, "DELETE")]
    for info in ("default", "audit", "append_only"):
        got = t.changes(start_version=2, end_version=6, information=info)
        assert multiset(got.to_arrow()) == multiset(by_partitions(t, got).to_arrow()), info
    # Capture on, but the interval's only change-file commit is outside it: partition shapes.
    assert t.changes(start_version=2, end_version=4).plan_shape is PlanShape.MINIMIZE


@pytest.mark.parametrize("info", ["default", "audit", "append_only"])
@pytest.mark.parametrize("changelog", [None, "op"])
@pytest.mark.parametrize("flt", [None, "s", "id"])
def test_captured_equals_partition_scan(captured, info, changelog, flt):
    expr = {None: None, "s": pc.field("s") == "u", "id": pc.field("id") < 30}[flt]
    for a in range(1, 6):
        for b in range(a, 6):
            cs = captured.changes(start_version=a, end_version=b, information=info, changelog=changelog, filter=expr)
            got = cs.to_arrow()
            assert multiset(got) == multiset(by_partitions(captured, cs).to_arrow()), (a, b)
            if changelog is None:
                check_pairs_adjacent(got)
    for info_ in ("audit", "append_only"):  # initial rows: the interval's rows follow the snapshot's
        cs = captured.changes(start_version=3, information=info_, initial_rows=True)
        assert multiset(cs.to_arrow()) == multiset(by_partitions(captured, cs).to_arrow())


# ---------------------------------------------------------------- files opened


def test_captured_scan_opens_no_rewritten_partition(captured, monkeypatch):
    opened: list[str] = []
    real_fetch = integrity.DataFiles.fetch

    def fetch(files, p):
        opened.append(p.path)
        return real_fetch(files, p)

    monkeypatch.setattr(integrity.DataFiles, "fetch", fetch)
    for v in (2, 3, 5):  # the UPDATE, the DELETE, the MERGE
        entry = captured.log.read_entry(v)
        removed = {a.path for a in entry if isinstance(a, RemovePartition)}
        changes = {a.path for a in entry if isinstance(a, ChangeFile)}
        for info in ("default", "audit"):
            opened.clear()
            cs = captured.changes(start_version=v, end_version=v, information=info)
            assert cs.plan_shape is PlanShape.CAPTURED
            assert cs.to_arrow().num_rows > 0
            assert removed and not removed & set(opened), (v, info, removed & set(opened))
            assert changes <= set(opened), (v, info)
            # The partition-based plan of the same commit does open them.
            opened.clear()
            by_partitions(captured, cs).to_arrow()
            assert removed & set(opened)
    opened.clear()
    cs = captured.changes(start_version=2, end_version=5)
    cs.to_arrow()
    removed = {a.path for v in (2, 3, 5) for a in captured.log.read_entry(v) if isinstance(a, RemovePartition)}
    assert not removed & set(opened)


# ---------------------------------------------------------------- tasks


def run_tasks(cs: ChangeSet, **kw) -> tuple[int, list]:
    tasks = cs.tasks(**kw)
    rows = []
    for task in tasks:
        rows += task.change_set().to_arrow().to_pylist()
        restored = pickle.loads(pickle.dumps(task))
        assert restored.plan == task.plan
    return len(tasks), sorted(map(repr, rows))


@pytest.mark.parametrize("info", ["default", "audit"])
def test_tasks_split_captured_plan(new_table, make_rows, info):
    t = new_table(partition_rows=100, properties=CAPTURE)
    t.insert(make_rows(1000))  # v1
    # Rows of distant row-id ranges updated, so that change files' ranges are disjoint.
    t.update(pc.field("id") < 150, {"s": "a"})  # v2
    t.update(pc.field("id") >= 850, {"s": "b"})  # v3
    t.delete(pc.field("id").isin([10, 20]))  # v4
    t.insert(make_rows(5, 5000))  # v5
    cs = t.changes(start_version=2, end_version=5, information=info)
    assert cs.plan_shape is PlanShape.CAPTURED
    n, rows = run_tasks(cs, max_rows_per_task=1)
    assert rows == multiset(cs.to_arrow()) and n >= 3
    # Row 10 is updated by v2 then deleted by v4: its events in two segments meet in one task.
    if info == "default":
        assert [r["METADATA$ACTION"] for r in cs.to_arrow().to_pylist() if r["id"] == 10] == ["DELETE"]
    filtered = t.changes(start_version=2, end_version=5, information=info, filter=pc.field("s") == "s10")
    assert filtered.to_arrow().num_rows > 0
    assert run_tasks(filtered, max_rows_per_task=1)[1] == multiset(filtered.to_arrow())


@pytest.mark.parametrize("info", ["default", "audit"])
def test_tasks_split_mixed_plan(new_table, make_rows, info):
    t = new_table(partition_rows=100)
    t.insert(make_rows(1000))  # v1
    t.update(pc.field("id") < 120, {"s": "a"})  # v2, from partitions
    t.set_properties(CAPTURE)  # v3
    t.update(pc.field("id").isin([5, 110, 990]), {"s": "c"})  # v4, captured
    t.insert(make_rows(3, 5000))  # v5
    cs = t.changes(start_version=2, end_version=5, information=info)
    assert cs.plan_shape is PlanShape.MIXED
    n, rows = run_tasks(cs, max_rows_per_task=1)
    assert rows == multiset(cs.to_arrow()) == multiset(by_partitions(t, cs).to_arrow()) and n >= 2
    assert run_tasks(cs)[1] == rows  # one task


# ---------------------------------------------------------------- damaged change files


def _change_file(t: ctfile.Table, version: int) -> ChangeFile:
    return next(a for a in t.log.read_entry(version) if isinstance(a, ChangeFile))


def test_missing_change_file(captured):
    f = _change_file(captured, 2)
    captured.storage.delete([f.path])
    with pytest.raises(MissingDataFileError, match=f.path.replace(".", r"\.")):
        captured.changes(start_version=2, end_version=2).to_arrow()
    with pytest.raises(MissingDataFileError, match=f.path.replace(".", r"\.")):
        captured.changes(start_version=2, end_version=2, information="audit").to_arrow()
    # A scan that reads partitions only does not need it.
    captured.changes(start_version=2, end_version=2, information="append_only").to_arrow()


def test_corrupt_change_file(captured):
    f = _change_file(captured, 2)
    path = captured.storage.arrow_path(f.path)
    with open(path, "r+b") as fh:  # flip a byte inside the file: the checksum no longer matches
        fh.seek(f.size_bytes // 2)
        b = fh.read(1)
        fh.seek(f.size_bytes // 2)
        fh.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(CorruptDataFileError, match=f.path.replace(".", r"\.")):
        captured.changes(start_version=2, end_version=2).to_arrow()


def test_change_file_breaking_the_row_rules(captured):
    """A change file whose rows break SPEC §Change capture (here: a
    postimage before its preimage) is corrupt, even when the length and
    checksum checks are off (they would catch the rewrite first)."""
    f = _change_file(captured, 2)
    path = captured.storage.arrow_path(f.path)
    table = pq.read_table(path)
    assert table.num_rows >= 2
    order = list(range(table.num_rows))
    order[0], order[1] = 1, 0
    pq.write_table(table.take(order), path)
    with unchecked_reads():
        with pytest.raises(CorruptDataFileError, match=f"{f.path}.*update_postimage that does not follow"):
            captured.changes(start_version=2, end_version=2).to_arrow()
