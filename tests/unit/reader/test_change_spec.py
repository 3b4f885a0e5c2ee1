"""The spec of a change scan (ChangeScan, ChangeMode, Changelog) and the plan
it yields: immutable, validated in one place, initial rows planned as what
they are (a snapshot read first), one object shipped with every task."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile import ChangeMode, Changelog, ChangeScan, InvalidArgumentError, PlanShape
from ctfile.reader.change_plan import PartitionDelta

PEOPLE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def people_rows(pairs) -> pa.Table:
    return pa.table({"id": [p[0] for p in pairs], "name": [p[1] for p in pairs]}, schema=PEOPLE)


@pytest.fixture
def people(new_table) -> ctfile.Table:
    """v1, v2 inserts; v3, v4 updates; v5 delete; v6 compaction (no data change)."""
    t = new_table(PEOPLE)
    t.insert(people_rows([(1, "Jeff"), (2, "Donny")]))
    t.insert(people_rows([(3, "Walter"), (4, "Maud"), (5, "Uli")]))
    t.update(pc.field("id") == 1, {"name": "Jeffrey"})
    t.update(pc.field("id") == 4, {"name": "Maude"})
    t.delete(pc.field("id").isin([2, 5]))
    t.compact()
    assert t.version == 6
    return t


def ids(cs) -> list[tuple]:
    return sorted((r["id"], r["name"], r["METADATA$ACTION"]) for r in cs.to_arrow().to_pylist())


# ---------------------------------------------------------------- the spec


def test_spec_is_frozen_and_copies_are_validated():
    s = ChangeScan(2, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.mode = ChangeMode.AUDIT  # type: ignore[misc]
    a = s.with_mode("audit").with_changelog("op").with_initial_rows()
    assert (a.mode, a.changelog, a.initial_rows) == (ChangeMode.AUDIT, Changelog.OP, True)
    assert (s.mode, s.changelog, s.initial_rows) == (ChangeMode.DEFAULT, None, False), "the original is unchanged"
    assert s.with_interval(3, 3).start_version == 3 and s.start_version == 2
    with pytest.raises(InvalidArgumentError, match="mode must be one of default, append_only, audit, found 'redo'"):
        s.with_mode("redo")
    with pytest.raises(InvalidArgumentError, match="reversed interval: start_version 6 is after end_version 4"):
        s.with_interval(6, 4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(start_version=-1, end_version=3), "start_version must be >= 0, found -1"),
        (dict(start_version=True, end_version=3), "start_version must be an int, found True"),
        (dict(start_version=0, end_version="3"), "end_version must be an int, found '3'"),
        (dict(start_version=5, end_version=3), "reversed interval: start_version 5 is after end_version 3"),
        (dict(start_version=0, end_version=3, mode="Audit"), "mode must be one of default, append_only, audit, found 'Audit'"),
        (dict(start_version=0, end_version=3, mode=2), "mode must be one of default, append_only, audit, found 2"),
        (dict(start_version=0, end_version=3, changelog="ops"), "changelog must be None or 'op', found 'ops'"),
        (dict(start_version=0, end_version=3, initial_rows=1), "initial_rows must be a bool, found 1"),
        (dict(start_version=0, end_version=3, row_filter="id > 1"), "row_filter must be a pyarrow.compute.Expression or None, found str"),
    ],
)
def test_spec_validation_names_expected_and_found(kwargs, message):
    with pytest.raises(InvalidArgumentError) as e:
        ChangeScan(**kwargs)
    assert message in str(e.value)


def test_mode_and_changelog_parse_user_strings():
    assert ChangeMode("audit") is ChangeMode.AUDIT
    assert [ChangeMode.parse(m.value) for m in ChangeMode] == list(ChangeMode)
    assert ChangeScan(0, 0, mode="append_only").mode is ChangeMode.APPEND_ONLY
    assert ChangeScan(0, 0, changelog="op").changelog is Changelog.OP
    assert ChangeScan(1, 0).start_version == 1, "a == b + 1 is the empty interval"
    with pytest.raises(InvalidArgumentError, match="option changelog must be 'op', found None"):
        Changelog.parse(None, what="option changelog", optional=False)


def test_filter_ands_and_spec_pickles():
    s = ChangeScan(1, 4).filter(pc.field("id") > 1).filter(pc.field("id") < 4)
    assert s.row_filter.equals((pc.field("id") > 1) & (pc.field("id") < 4))
    back = pickle.loads(pickle.dumps(s))
    assert back.row_filter.equals(s.row_filter) and dataclasses.replace(back, row_filter=None) == dataclasses.replace(s, row_filter=None)
    with pytest.raises(InvalidArgumentError, match="filter must be a pyarrow.compute.Expression, found str"):
        s.filter("id > 1")


def test_initial_version_by_mode():
    assert ChangeScan(3, 5).initial_version is None
    assert ChangeScan(3, 5, initial_rows=True).initial_version == 5  # default: the snapshot at the end
    assert ChangeScan(3, 5, mode="audit", initial_rows=True).initial_version == 2
    assert ChangeScan(0, 5, mode="append_only", initial_rows=True).initial_version is None  # empty before v0


# ---------------------------------------------------------------- Table.changes builds the spec


def test_changes_carries_one_spec(people):
    flt = pc.field("id") > 1
    cs = people.changes(start_version=2, end_version=5, information="audit", changelog="op", filter=flt)
    assert cs.scan == ChangeScan(2, 5, mode=ChangeMode.AUDIT, changelog=Changelog.OP, row_filter=flt)
    assert (cs.start_version, cs.end_version) == (2, 5)
    # A member is accepted wherever the string is, with the same result.
    assert people.changes(start_version=2, information=ChangeMode.AUDIT).to_arrow().equals(
        people.changes(start_version=2, information="audit").to_arrow()
    )
    for task in cs.tasks(max_rows_per_task=1):
        assert task.scan == cs.scan, "every task carries the whole scan's spec"


def test_changes_rejects_bad_mode_and_changelog(people):
    with pytest.raises(InvalidArgumentError, match="information must be one of default, append_only, audit, found 'AUDIT'"):
        people.changes(information="AUDIT")
    with pytest.raises(InvalidArgumentError, match="changelog must be None or 'op', found 'OP'"):
        people.changes(changelog="OP")


# ---------------------------------------------------------------- planning


def test_default_plan_is_one_net_segment(people):
    plan = people.changes(start_version=2, end_version=5).plan
    assert plan.shape is PlanShape.MINIMIZE and plan.initial is None
    (seg,) = plan.segments
    assert (seg.start_version, seg.end_version) == (2, 5)
    assert (seg.added, seg.removed) == (plan.added, plan.removed)


def test_audit_and_append_only_plans_have_a_segment_per_commit(people):
    audit = people.changes(start_version=2, end_version=6, information="audit").plan
    # v6 is a compaction (no data change): no segment.
    assert [(s.start_version, s.end_version) for s in audit.segments] == [(v, v) for v in (2, 3, 4, 5)]
    assert [s.timestamp for s in audit.segments] == [c.timestamp for c in audit.commits]
    ao = people.changes(start_version=2, end_version=6, information="append_only").plan
    # append_only reads only what the commits added, never a removed partition.
    assert all(s.removed == () for s in ao.segments)
    assert [p.path for s in ao.segments for p in s.added] == [p.path for p in ao.appended]


def test_initial_rows_default_plans_the_snapshot_at_the_end(people):
    cs = people.changes(start_version=2, end_version=5, initial_rows=True)
    plan = cs.plan
    assert plan.shape is PlanShape.INITIAL_ROWS and cs.plan_shape is PlanShape.INITIAL_ROWS
    assert plan.initial is not None and plan.initial.version == 5
    assert plan.segments == () and plan.commits == (), "the interval's own changes are not read"
    assert {p.path for p in plan.partitions_to_read()} == {p.path for p in people.snapshot(5).partitions}
    assert (cs.start_version, cs.end_version) == (2, 5), "the interval is the spec's, nothing is patched"
    assert ids(cs) == [(1, "Jeffrey", "INSERT"), (3, "Walter", "INSERT"), (4, "Maude", "INSERT")]


def test_initial_rows_other_modes_plan_the_snapshot_before(people):
    for mode in ("audit", "append_only"):
        plan = people.changes(start_version=3, end_version=5, information=mode, initial_rows=True).plan
        assert plan.initial is not None and plan.initial.version == 2, mode
        assert plan.shape is not PlanShape.INITIAL_ROWS and plan.segments, mode
        assert plan.initial.timestamp == people.log.commit_info(2).timestamp, mode
        # From version 0 the snapshot before is empty: nothing to read first.
        assert people.changes(information=mode, initial_rows=True).plan.initial is None, mode


def test_initial_rows_tasks_split_the_snapshot(people):
    cs = people.changes(start_version=3, end_version=5, information="audit", initial_rows=True)
    tasks = [pickle.loads(pickle.dumps(t)) for t in cs.tasks(max_rows_per_task=1)]
    initial = [p.path for t in tasks if t.plan.initial is not None for p in t.plan.initial.partitions]
    assert sorted(initial) == sorted(p.path for p in cs.plan.initial.partitions)
    assert all(t.plan.initial is None or t.plan.initial.version == 2 for t in tasks)
    rows = pa.Table.from_batches([b for t in tasks for b in t.to_batches()], schema=cs.schema)
    key = lambda r: (r["id"], r["METADATA$ACTION"], r["METADATA$COMMIT_VERSION"])  # noqa: E731
    assert sorted(rows.to_pylist(), key=key) == sorted(cs.to_arrow().to_pylist(), key=key)


def test_restricted_plan_keeps_only_its_partitions(people):
    plan = people.changes(start_version=2, end_version=5, information="audit").plan
    first = plan.segments[0]
    part = plan.restricted([first], None)
    assert part.segments == (first,) and part.shape is plan.shape
    assert {p.path for p in part.partitions_to_read()} == {p.path for p in first.partitions}
    # The summary keeps what the segment reads: commit 2's own partitions, not
    # commit 4's removal of one of them (another segment's business).
    assert part.commits == (plan.commits[0],)
    assert plan.restricted(plan.segments[1:], None).commits == plan.commits[1:]
    assert plan.restricted([], None).shape is PlanShape.EMPTY
    assert isinstance(first, PartitionDelta)
