"""Change scans (SPEC §Change scans): ``Table.changes`` over real tables.

Semantics: ``changes(start_version=a, end_version=b)`` is the difference
between ``snapshot(a - 1)`` and ``snapshot(b)``. Cost claims are checked by
instrumenting the real readers the change scan calls (counting wrappers that
delegate), never by timing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.errors import (
    InvalidArgumentError,
    StaleIntervalError,
    VersionNotFoundError,
)
from ctfile.reader import change_scan, integrity, min_delta, partition_reader, read_ahead
from ctfile.reader.change_plan import PlanShape

ACTION = "METADATA$ACTION"
ISUPDATE = "METADATA$ISUPDATE"
ROW_ID = "METADATA$ROW_ID"
CVERSION = "METADATA$COMMIT_VERSION"
CTS = "METADATA$COMMIT_TIMESTAMP"

PEOPLE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def people_rows(pairs) -> pa.Table:
    return pa.table(
        {"id": pa.array([p[0] for p in pairs], pa.int64()), "name": pa.array([p[1] for p in pairs], pa.string())},
        schema=PEOPLE,
    )


@pytest.fixture
def people(new_table):
    """The worked example: v1..v5 as in Snowflake's Listing 2."""
    t = new_table(PEOPLE)
    assert t.insert(people_rows([(1, "Jeff"), (2, "Donny")])).version == 1
    assert t.insert(people_rows([(3, "Walter"), (4, "Maud"), (5, "Uli")])).version == 2
    assert t.update(pc.field("id") == 1, {"name": "Jeffrey"}).version == 3
    assert t.update(pc.field("id") == 4, {"name": "Maude"}).version == 4
    assert t.delete(pc.field("id").isin([2, 5])).version == 5
    return t


def simple(cs, *cols) -> list[tuple]:
    """Rows as tuples (id, name, ACTION, ISUPDATE, *cols) in output order."""
    return [
        (r["id"], r["name"], r[ACTION], r[ISUPDATE], *(r[c] for c in cols))
        for r in cs.to_arrow().to_pylist()
    ]


def assert_pairs_adjacent(table: pa.Table) -> None:
    """Every ISUPDATE row is in an adjacent DELETE-then-INSERT pair with one ROW_ID."""
    rows = table.to_pylist()
    i = 0
    while i < len(rows):
        if rows[i][ISUPDATE]:
            assert rows[i][ACTION] == "DELETE", rows[i]
            assert i + 1 < len(rows), rows
            nxt = rows[i + 1]
            assert nxt[ISUPDATE] and nxt[ACTION] == "INSERT" and nxt[ROW_ID] == rows[i][ROW_ID], (rows[i], nxt)
            i += 2
        else:
            i += 1


class ReadCounter:
    """Counting wrappers around the real readers the change scan uses."""

    def __init__(self, monkeypatch):
        self.payload: list[tuple[str, int]] = []  # (path, rows requested)
        self.hidden: list[str] = []
        self.opened: list[str] = []
        real_rows, real_part = partition_reader.read_rows, partition_reader.read_partition
        real_iter = partition_reader.iter_rows
        real_hidden, real_fetch = partition_reader.read_hidden, integrity.DataFiles.fetch

        def read_rows(storage, p, schema, positions, **kw):
            self.payload.append((p.path, len(positions)))
            return real_rows(storage, p, schema, positions, **kw)

        def iter_rows(storage, p, schema, positions, **kw):
            self.payload.append((p.path, len(positions)))
            return real_iter(storage, p, schema, positions, **kw)

        def read_partition(storage, p, schema, **kw):
            self.payload.append((p.path, p.num_records))
            return real_part(storage, p, schema, **kw)

        def read_hidden(storage, p):
            self.hidden.append(p.path)
            return real_hidden(storage, p)

        def fetch(files, p):
            self.opened.append(p.path)
            return real_fetch(files, p)

        # Each reader is patched where the scan's modules look it up (inside
        # partition_reader only the opening of files, so no read is counted twice).
        for module in (change_scan, min_delta, read_ahead):
            for name, fn in (("read_rows", read_rows), ("iter_rows", iter_rows), ("read_partition", read_partition),
                             ("read_hidden", read_hidden)):
                if hasattr(module, name):
                    monkeypatch.setattr(module, name, fn)
        monkeypatch.setattr(integrity.DataFiles, "fetch", fetch)

    @property
    def payload_rows(self) -> int:
        return sum(n for _, n in self.payload)

    def touched(self) -> set[str]:
        return {p for p, _ in self.payload} | set(self.hidden) | set(self.opened)

    def reset(self) -> None:
        self.payload.clear()
        self.hidden.clear()
        self.opened.clear()


# ---------------------------------------------------------------- worked example


def test_worked_example_default(people):
    cs = people.changes(start_version=2, end_version=5)
    assert (cs.start_version, cs.end_version) == (2, 5)
    assert cs.plan_shape is PlanShape.MINIMIZE
    out = cs.to_arrow()
    rows = simple(cs)
    assert len(rows) == 5
    assert sorted(rows) == sorted(
        [
            (3, "Walter", "INSERT", False),
            (1, "Jeff", "DELETE", True),
            (1, "Jeffrey", "INSERT", True),
            (4, "Maude", "INSERT", False),
            (2, "Donny", "DELETE", False),
        ]
    )
    assert_pairs_adjacent(out)
    by_name = {r["name"]: r[ROW_ID] for r in out.to_pylist()}
    assert by_name["Jeff"] == by_name["Jeffrey"]
    assert len(set(by_name.values())) == 4
    # ROW_ID is stable: Maud's append-only id equals Maude's minimum-delta id,
    # and Jeff's id at insertion equals the update pair's id.
    ao = {r["name"]: r[ROW_ID] for r in people.changes(start_version=2, end_version=5, information="append_only").to_arrow().to_pylist()}
    assert ao["Maud"] == by_name["Maude"] and ao["Walter"] == by_name["Walter"]
    v1 = {r["name"]: r[ROW_ID] for r in people.changes(start_version=1, end_version=1).to_arrow().to_pylist()}
    assert v1["Jeff"] == by_name["Jeff"] and v1["Donny"] == by_name["Donny"]
    # The default interval is the whole history.
    whole = people.changes()
    assert (whole.start_version, whole.end_version) == (0, 5)
    assert sorted(simple(whole)) == [(1, "Jeffrey", "INSERT", False), (3, "Walter", "INSERT", False), (4, "Maude", "INSERT", False)]


def test_worked_example_append_only(people):
    cs = people.changes(start_version=2, end_version=5, information="append_only")
    assert cs.plan_shape is PlanShape.ADDED_ONLY
    assert sorted(simple(cs)) == [
        (3, "Walter", "INSERT", False),
        (4, "Maud", "INSERT", False),
        (5, "Uli", "INSERT", False),
    ]


def test_worked_example_audit(people):
    cs = people.changes(start_version=2, end_version=5, information="audit")
    out = cs.to_arrow()
    assert out.num_rows == 9
    versions = out.column(CVERSION).to_pylist()
    assert versions == sorted(versions)
    rows = simple(cs, CVERSION)
    by_version = {v: sorted(r[:4] for r in rows if r[4] == v) for v in (2, 3, 4, 5)}
    assert by_version[2] == [(3, "Walter", "INSERT", False), (4, "Maud", "INSERT", False), (5, "Uli", "INSERT", False)]
    assert by_version[3] == [(1, "Jeff", "DELETE", True), (1, "Jeffrey", "INSERT", True)]
    assert by_version[4] == [(4, "Maud", "DELETE", True), (4, "Maude", "INSERT", True)]
    assert by_version[5] == [(2, "Donny", "DELETE", False), (5, "Uli", "DELETE", False)]
    assert_pairs_adjacent(out)
    # Commit timestamps are the log's commit times.
    hist = {h.version: h.timestamp for h in people.history()}
    for r in out.to_pylist():
        assert r[CTS] == hist[r[CVERSION]]
    assert out.schema.field(CTS).type == pa.timestamp("us", tz="UTC")
    assert out.schema.field(CVERSION).type == pa.int64()
    # Uli's insert and delete share one ROW_ID.
    uli = {r[ACTION]: r[ROW_ID] for r in out.to_pylist() if r["id"] == 5}
    assert uli["INSERT"] == uli["DELETE"]


@pytest.mark.parametrize("information", ["default", "append_only", "audit"])
def test_changelog_op(people, information):
    plain = people.changes(start_version=2, end_version=5, information=information).to_arrow()
    cs = people.changes(start_version=2, end_version=5, information=information, changelog="op")
    out = cs.to_arrow()
    assert ACTION not in out.schema.names and ISUPDATE not in out.schema.names
    assert out.schema.field("op").type == pa.uint8()
    assert not out.schema.field("op").nullable
    code = {("INSERT", False): 0, ("DELETE", False): 1, ("DELETE", True): 2, ("INSERT", True): 3}
    expected = [
        (r["id"], r["name"], code[(r[ACTION], r[ISUPDATE])], r[ROW_ID]) for r in plain.to_pylist()
    ]
    got = [(r["id"], r["name"], r["op"], r[ROW_ID]) for r in out.to_pylist()]
    assert got == expected
    ops = out.column("op").to_pylist()
    if information == "default":
        assert sorted(ops) == [0, 0, 1, 2, 3]
    elif information == "append_only":
        assert ops == [0, 0, 0]
    else:
        assert sorted(ops) == [0, 0, 0, 1, 1, 2, 2, 3, 3]
        assert out.column(CVERSION).to_pylist() == plain.column(CVERSION).to_pylist()
    # correct-from immediately precedes correct-to for the same row.
    for i, op in enumerate(ops):
        if op == 2:
            assert ops[i + 1] == 3 and got[i][3] == got[i + 1][3]


# ---------------------------------------------------------------- plan shapes


def test_append_only_table_is_added_only(new_table, make_rows):
    t = new_table()
    for i in range(3):
        t.insert(make_rows(5, start=10 * i))
    for info in ("default", "append_only", "audit"):
        cs = t.changes(start_version=2, information=info)
        assert cs.plan_shape is PlanShape.ADDED_ONLY, info
        assert cs.plan.removed == ()
        assert sorted(cs.to_arrow().column("id").to_pylist()) == list(range(10, 15)) + list(range(20, 25))


def test_delete_only_interval_is_removed_only(new_table, make_rows):
    t = new_table()
    t.insert(make_rows(5))
    t.insert(make_rows(5, start=100))
    t.insert(make_rows(5, start=200))
    r = t.delete(pc.field("id") >= 100)  # matches two whole partitions: nothing rewritten
    assert r.version == 4
    cs = t.changes(start_version=4)
    assert cs.plan_shape is PlanShape.REMOVED_ONLY
    assert cs.plan.added == ()
    out = cs.to_arrow()
    assert set(out.column(ACTION).to_pylist()) == {"DELETE"}
    assert not any(out.column(ISUPDATE).to_pylist())
    assert sorted(out.column("id").to_pylist()) == list(range(100, 105)) + list(range(200, 205))
    assert sorted(out.column("s").to_pylist()) == sorted(f"s{i}" for i in list(range(100, 105)) + list(range(200, 205)))
    # A truncate is REMOVED_ONLY too.
    t.truncate()
    cs = t.changes(start_version=5)
    assert cs.plan_shape is PlanShape.REMOVED_ONLY
    assert sorted(cs.to_arrow().column("id").to_pylist()) == list(range(5))


def test_compaction_only_interval_is_empty_and_reads_nothing(new_table, make_rows, monkeypatch):
    t = new_table(partition_rows=100)
    for i in range(4):
        t.insert(make_rows(10, start=10 * i))
    r = t.compact()
    assert r.committed and r.version == 5
    assert len(t.snapshot().partitions) == 1
    counter = ReadCounter(monkeypatch)
    for info in ("default", "append_only", "audit"):
        cs = t.changes(start_version=5, information=info)
        assert cs.plan_shape is PlanShape.EMPTY, info
        assert cs.plan.partitions_to_read() == []
        assert cs.plan.bytes_to_read == 0
        out = cs.to_arrow()
        assert out.num_rows == 0 and out.schema == cs.schema
    assert counter.touched() == set()
    # An interval holding inserts and the compaction: only the inserted rows.
    counter.reset()
    cs = t.changes(start_version=3)
    out = cs.to_arrow()
    assert sorted(out.column("id").to_pylist()) == list(range(20, 40))
    assert set(out.column(ACTION).to_pylist()) == {"INSERT"}
    assert counter.payload_rows == out.num_rows == 20
    # Audit over the same interval: the compaction contributes nothing.
    audit = t.changes(start_version=3, information="audit").to_arrow()
    assert sorted(set(audit.column(CVERSION).to_pylist())) == [3, 4]
    assert audit.num_rows == 20
    # A compaction of partitions live before the interval, then an insert:
    # ADDED_ONLY, and only the inserted partition is touched.
    r = t.insert(make_rows(60, start=100))
    assert r.version == 6
    new_part = {p.path for p in t.snapshot().partitions} - {p.path for p in t.snapshot(5).partitions}
    counter.reset()
    cs = t.changes(start_version=5)
    assert cs.plan_shape is PlanShape.ADDED_ONLY
    assert {p.path for p in cs.plan.partitions_to_read()} == new_part
    assert sorted(cs.to_arrow().column("id").to_pylist()) == list(range(100, 160))
    assert counter.touched() == new_part


def test_set_properties_only_interval_is_empty(people, monkeypatch):
    r = people.set_properties({"owner": "dude"})
    assert r.committed and r.version == 6
    counter = ReadCounter(monkeypatch)
    for info in ("default", "append_only", "audit"):
        cs = people.changes(start_version=6, information=info)
        assert cs.plan_shape is PlanShape.EMPTY
        assert cs.to_arrow().num_rows == 0
    assert counter.touched() == set()


def test_noop_update_commits_nothing(people):
    before = people.version
    r = people.update(pc.field("id") == 3, {"name": "Walter"})
    assert not r.committed and r.version == before
    assert people.refresh().version == before
    # A statement changing one row and leaving another equal: only the change shows.
    r = people.update(pc.field("id").isin([3, 4]), {"name": "Walter"})
    assert r.committed
    rows = simple(people.changes(start_version=r.version))
    assert sorted(rows) == [(4, "Maude", "DELETE", True), (4, "Walter", "INSERT", True)]


def test_update_and_back_produces_nothing(people):
    r1 = people.update(pc.field("id") == 3, {"name": "Walt"})
    r2 = people.update(pc.field("id") == 3, {"name": "Walter"})
    assert (r1.version, r2.version) == (6, 7)
    cs = people.changes(start_version=6, end_version=7)
    assert cs.to_arrow().num_rows == 0
    # Other changes in the interval still show; row 3 does not.
    people.insert(people_rows([(9, "Bunny")]))
    assert simple(people.changes(start_version=6)) == [(9, "Bunny", "INSERT", False)]
    # The audit log shows both updates.
    audit = people.changes(start_version=6, end_version=7, information="audit").to_arrow()
    assert audit.column("name").to_pylist() == ["Walter", "Walt", "Walt", "Walter"]


def test_insert_then_delete_and_insert_then_update(people):
    people.insert(people_rows([(7, "Smokey"), (8, "Bunny")]))
    people.delete(pc.field("id") == 7)
    people.update(pc.field("id") == 8, {"name": "Bunny L."})
    people.update(pc.field("id") == 8, {"name": "Bunny Lebowski"})
    rows = simple(people.changes(start_version=6))
    assert rows == [(8, "Bunny Lebowski", "INSERT", False)]
    ao = simple(people.changes(start_version=6, information="append_only"))
    assert sorted(ao) == [(7, "Smokey", "INSERT", False), (8, "Bunny", "INSERT", False)]


def test_insert_then_delete_whole_partition(people):
    """Partitions added and removed inside the interval: nothing in the minimum
    delta, and not read; the audit log still lists both commits."""
    people.insert(people_rows([(7, "Smokey")]))  # v6
    people.delete(pc.field("id") == 7)  # v7: removes v6's partition whole
    cs = people.changes(start_version=6)
    assert cs.plan_shape is PlanShape.EMPTY
    assert cs.plan.partitions_to_read() == [] and cs.to_arrow().num_rows == 0
    audit = people.changes(start_version=6, information="audit")
    assert audit.plan_shape is PlanShape.MINIMIZE
    assert simple(audit, CVERSION) == [(7, "Smokey", "INSERT", False, 6), (7, "Smokey", "DELETE", False, 7)]
    ao = people.changes(start_version=6, information="append_only")
    assert ao.plan_shape is PlanShape.ADDED_ONLY
    assert simple(ao) == [(7, "Smokey", "INSERT", False)]


# ---------------------------------------------------------------- initial rows


def test_initial_rows_default(people):
    cs = people.changes(start_version=2, end_version=5, initial_rows=True)
    assert cs.plan_shape is PlanShape.INITIAL_ROWS
    assert (cs.start_version, cs.end_version) == (2, 5)
    out = cs.to_arrow()
    assert sorted(simple(cs)) == [
        (1, "Jeffrey", "INSERT", False),
        (3, "Walter", "INSERT", False),
        (4, "Maude", "INSERT", False),
    ]
    ids = {r["id"]: r[ROW_ID] for r in out.to_pylist()}
    delta = {r["id"]: r[ROW_ID] for r in people.changes(start_version=2, end_version=5).to_arrow().to_pylist()}
    assert ids[1] == delta[1] and ids[3] == delta[3] and ids[4] == delta[4]
    assert sorted(simple(people.changes(end_version=3, initial_rows=True))) == [
        (1, "Jeffrey", "INSERT", False),
        (2, "Donny", "INSERT", False),
        (3, "Walter", "INSERT", False),
        (4, "Maud", "INSERT", False),
        (5, "Uli", "INSERT", False),
    ]


def test_initial_rows_append_only(people):
    rows = simple(people.changes(start_version=2, end_version=5, information="append_only", initial_rows=True))
    assert sorted(rows[:2]) == [(1, "Jeff", "INSERT", False), (2, "Donny", "INSERT", False)]
    assert sorted(rows[2:]) == [(3, "Walter", "INSERT", False), (4, "Maud", "INSERT", False), (5, "Uli", "INSERT", False)]
    # From version 0 (or 1) snapshot(start - 1) is empty.
    assert len(simple(people.changes(information="append_only", initial_rows=True))) == 5
    assert len(simple(people.changes(start_version=1, information="append_only", initial_rows=True))) == 5


def test_initial_rows_audit(people):
    cs = people.changes(start_version=3, end_version=5, information="audit", initial_rows=True)
    out = cs.to_arrow()
    rows = simple(cs, CVERSION)
    hist = {h.version: h.timestamp for h in people.history()}
    initial = [r for r in rows if r[4] == 2]
    assert rows[: len(initial)] == initial  # the initial rows come first
    assert sorted(initial) == [
        (1, "Jeff", "INSERT", False, 2),
        (2, "Donny", "INSERT", False, 2),
        (3, "Walter", "INSERT", False, 2),
        (4, "Maud", "INSERT", False, 2),
        (5, "Uli", "INSERT", False, 2),
    ]
    assert all(r[CTS] == hist[2] for r in out.to_pylist()[:5])
    assert out.num_rows == 5 + 6
    assert out.column(CVERSION).to_pylist()[5:] == [3, 3, 4, 4, 5, 5]


# ---------------------------------------------------------------- filters


def _expected_filtered(rows: list[dict], keep) -> list[tuple]:
    """Apply the filter rule to unfiltered output: drop failing rows, then a
    pair with one side dropped becomes a lone row with ISUPDATE false."""
    kept = [r for r in rows if keep(r)]
    by_id = Counter((r[ROW_ID], r.get(CVERSION)) for r in kept if r[ISUPDATE])
    out = []
    for r in kept:
        upd = r[ISUPDATE] and by_id[r[ROW_ID], r.get(CVERSION)] == 2
        out.append((r["id"], r["name"], r[ACTION], upd))
    return sorted(out)


@pytest.mark.parametrize(
    "expr, keep",
    [
        (pc.field("name") == "Jeffrey", lambda r: r["name"] == "Jeffrey"),
        (pc.field("name") == "Jeff", lambda r: r["name"] == "Jeff"),
        (pc.field("id") == 1, lambda r: r["id"] == 1),
        (pc.field("id") >= 3, lambda r: r["id"] >= 3),
        (pc.field("name") < "K", lambda r: r["name"] < "K"),
        (pc.field("name").isin(["Maud", "Maude", "Jeff"]), lambda r: r["name"] in ("Maud", "Maude", "Jeff")),
    ],
)
@pytest.mark.parametrize("information", ["default", "append_only", "audit"])
def test_filter_applies_to_every_row(people, expr, keep, information):
    full = people.changes(start_version=2, end_version=5, information=information).to_arrow().to_pylist()
    cs = people.changes(start_version=2, end_version=5, information=information, filter=expr)
    out = cs.to_arrow()
    assert sorted(simple(cs)) == _expected_filtered(full, keep)
    assert_pairs_adjacent(out)
    if information == "audit":
        got = sorted((r["id"], r["name"], r[CVERSION]) for r in out.to_pylist())
        assert got == sorted((r["id"], r["name"], r[CVERSION]) for r in full if keep(r))


def test_filter_splits_update_pair(people):
    # Old image passes, new image fails: a lone DELETE, not an update.
    rows = simple(people.changes(start_version=3, end_version=3, filter=pc.field("name") == "Jeff"))
    assert rows == [(1, "Jeff", "DELETE", False)]
    rows = simple(people.changes(start_version=3, end_version=3, filter=pc.field("name") == "Jeffrey"))
    assert rows == [(1, "Jeffrey", "INSERT", False)]
    op = people.changes(start_version=3, end_version=3, filter=pc.field("name") == "Jeffrey", changelog="op").to_arrow()
    assert op.column("op").to_pylist() == [0]
    rows = simple(people.changes(start_version=3, end_version=3, filter=pc.field("id") == 1))
    assert rows == [(1, "Jeff", "DELETE", True), (1, "Jeffrey", "INSERT", True)]
    # Audit: Maud -> Maude with a filter on the new value only.
    rows = simple(people.changes(start_version=2, information="audit", filter=pc.field("name") == "Maude"), CVERSION)
    assert rows == [(4, "Maude", "INSERT", False, 4)]


def test_filter_initial_rows(people):
    rows = simple(people.changes(start_version=2, initial_rows=True, filter=pc.field("id") <= 3))
    assert sorted(rows) == [(1, "Jeffrey", "INSERT", False), (3, "Walter", "INSERT", False)]
    rows = simple(people.changes(start_version=3, information="append_only", initial_rows=True, filter=pc.field("id") == 4))
    assert rows == [(4, "Maud", "INSERT", False)]


def test_filter_prunes_partitions(new_table, make_rows, monkeypatch):
    t = new_table()
    for start in (0, 100, 200):
        t.insert(make_rows(10, start=start))
    target = t.snapshot().partitions[-1].path
    counter = ReadCounter(monkeypatch)
    cs = t.changes(start_version=1, filter=pc.field("id") >= 200)
    out = cs.to_arrow()
    assert sorted(out.column("id").to_pylist()) == list(range(200, 210))
    assert counter.touched() == {target}
    counter.reset()
    out = t.changes(start_version=1, information="append_only", filter=pc.field("id") < 5).to_arrow()
    assert sorted(out.column("id").to_pylist()) == list(range(5))
    assert counter.touched() == {t.snapshot().partitions[0].path}


def test_filter_must_name_table_columns(people):
    with pytest.raises(ctfile.SchemaMismatchError):
        people.changes(filter=pc.field("nope") == 1)


# ---------------------------------------------------------------- timestamps


@pytest.fixture
def spaced(new_table, make_rows):
    """v1..v5, each commit at least 5 ms after the previous one."""
    t = new_table()
    t.insert(make_rows(3))
    for v in range(2, 6):
        time.sleep(0.005)
        t.insert(make_rows(1, start=10 * v))
    hist = {h.version: h.timestamp for h in t.history()}
    return t, hist


def test_timestamps_select_commits_by_commit_time(spaced):
    t, hist = spaced
    ms = dt.timedelta(milliseconds=1)
    cs = t.changes(start_timestamp=hist[3], end_timestamp=hist[4])
    assert (cs.start_version, cs.end_version) == (3, 4)
    assert sorted(cs.to_arrow().column("id").to_pylist()) == [30, 40]
    cs = t.changes(start_timestamp=hist[3] - 2 * ms, end_timestamp=hist[4] + 2 * ms)
    assert (cs.start_version, cs.end_version) == (3, 4)
    cs = t.changes(start_timestamp=hist[3] + ms, end_timestamp=hist[5] - ms)
    assert (cs.start_version, cs.end_version) == (4, 4)
    # ISO strings and naive datetimes (UTC).
    iso = hist[2].isoformat().replace("+00:00", "Z")
    assert t.changes(start_timestamp=iso).start_version == 2
    assert t.changes(end_timestamp=hist[2].replace(tzinfo=None)).end_version == 2
    # Mixed: a start version with an end timestamp.
    cs = t.changes(start_version=2, end_timestamp=hist[3])
    assert (cs.start_version, cs.end_version) == (2, 3)
    assert sorted(cs.to_arrow().column("id").to_pylist()) == [20, 30]


def test_start_timestamp_after_latest_commit_is_empty(spaced):
    t, hist = spaced
    cs = t.changes(start_timestamp=hist[5] + dt.timedelta(seconds=1))
    assert (cs.start_version, cs.end_version) == (6, 5)
    assert cs.plan_shape is PlanShape.EMPTY
    out = cs.to_arrow()
    assert out.num_rows == 0 and out.schema == cs.schema
    assert t.changes(start_timestamp=hist[5] + dt.timedelta(seconds=1), information="audit").to_arrow().num_rows == 0


def test_timestamp_before_first_commit(spaced):
    t, hist = spaced
    early = hist[0] - dt.timedelta(days=1)
    with pytest.raises(VersionNotFoundError):
        t.changes(start_timestamp=early)
    with pytest.raises(VersionNotFoundError):
        t.changes(end_timestamp=early)


# ---------------------------------------------------------------- errors


def test_argument_errors(people):
    with pytest.raises(InvalidArgumentError):
        people.changes(start_version=4, end_version=2)
    with pytest.raises(VersionNotFoundError):
        people.changes(start_version=2, end_version=6)
    with pytest.raises(VersionNotFoundError):
        people.changes(start_version=6)
    with pytest.raises(InvalidArgumentError):
        people.changes(information="redo")
    with pytest.raises(InvalidArgumentError):
        people.changes(information="redo", initial_rows=True)
    with pytest.raises(InvalidArgumentError):
        people.changes(changelog="debezium")
    with pytest.raises(InvalidArgumentError):
        people.changes(start_version=1, start_timestamp=dt.datetime.now(dt.timezone.utc))
    with pytest.raises(InvalidArgumentError):
        people.changes(end_version=1, end_timestamp=dt.datetime.now(dt.timezone.utc))
    with pytest.raises(InvalidArgumentError):
        people.changes(start_version=-1)
    with pytest.raises(InvalidArgumentError):
        people.changes(start_version="2")
    with pytest.raises(InvalidArgumentError):
        people.changes(initial_rows="yes")
    hist = {h.version: h.timestamp for h in people.history()}
    with pytest.raises(InvalidArgumentError):
        people.changes(start_timestamp=hist[4], end_timestamp=hist[2])
    # InvalidArgumentError is also a ValueError; StaleIntervalError is a VersionNotFoundError.
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(StaleIntervalError, VersionNotFoundError)


def _log_dir(t) -> str:
    path = t.uri
    if path.startswith("file://"):
        path = path[len("file://"):]
    return os.path.join(path, "_ct_log")


@pytest.mark.parametrize("deleted", [(1, 2), (0, 1, 2)], ids=["gap", "retention"])
def test_stale_interval(new_table, make_rows, deleted):
    t = new_table(properties={"ctfile.checkpointInterval": "3"})
    for i in range(5):
        t.insert(make_rows(2, start=10 * i))
    log_dir = _log_dir(t)
    assert os.path.exists(os.path.join(log_dir, f"{3:020d}.checkpoint.parquet"))
    for v in deleted:
        os.remove(os.path.join(log_dir, f"{v:020d}.json"))
    t = ctfile.open_table(t.uri)
    for kwargs in (
        {"start_version": 1},
        {"start_version": 2, "end_version": 4},
        {"start_version": 1, "information": "append_only"},
        {"start_version": 2, "information": "audit"},
    ):
        with pytest.raises(StaleIntervalError) as ei:
            t.changes(**kwargs)  # raised when planning: never partial results
        assert ei.value.oldest_available == 3, kwargs
        assert "3" in str(ei.value)
    # The oldest available version really is usable.
    cs = t.changes(start_version=3)
    assert sorted(cs.to_arrow().column("id").to_pylist()) == [20, 21, 30, 31, 40, 41]
    assert t.snapshot(3).num_records == 6
    if deleted == (0, 1, 2):
        hist = {h.version: h.timestamp for h in t.history()}
        with pytest.raises(StaleIntervalError) as ei:
            t.changes(start_timestamp=hist[3] - dt.timedelta(milliseconds=1))
        assert ei.value.oldest_available == 3


# ---------------------------------------------------------------- cost


def test_minimize_update_reads_payload_of_changed_rows_only(new_table, make_rows, monkeypatch):
    t = new_table(partition_rows=1000)
    t.insert(make_rows(5000))
    before = {p.path for p in t.snapshot().partitions}
    assert len(before) == 5
    r = t.update(pc.field("id") == 2500, {"x": -1})
    assert r.version == 2 and r.num_updated_rows == 1
    after = {p.path for p in t.snapshot().partitions}
    counter = ReadCounter(monkeypatch)
    cs = t.changes(start_version=2)
    assert cs.plan_shape is PlanShape.MINIMIZE
    read = {p.path for p in cs.plan.partitions_to_read()}
    assert read == (before - after) | (after - before)
    assert len(read) == 2  # the rewritten partition and its replacement, not the other 4
    assert [p.num_records for p in cs.plan.removed] == [1000]
    out = cs.to_arrow()
    assert simple_xs(out) == [(2500, 25000, "DELETE", True), (2500, -1, "INSERT", True)]
    # Payload read for 1 old + 1 new row; the 999 unchanged copies cost only hidden columns.
    assert counter.payload_rows == out.num_rows == 2
    assert counter.touched() <= read
    # Audit reads the same way.
    counter.reset()
    audit = t.changes(start_version=2, information="audit").to_arrow()
    assert audit.num_rows == 2 and counter.payload_rows == 2
    # Append-only reads no removed partition and no payload (no row was inserted).
    counter.reset()
    assert t.changes(start_version=2, information="append_only").to_arrow().num_rows == 0
    assert counter.payload_rows == 0
    assert not counter.touched() & (before - after)


def simple_xs(out: pa.Table) -> list[tuple]:
    return [(r["id"], r["x"], r[ACTION], r[ISUPDATE]) for r in out.to_pylist()]


def test_mixed_interval_payload_rows_equal_output_rows(new_table, make_rows, monkeypatch):
    t = new_table(partition_rows=200)
    t.insert(make_rows(1000))
    t.update(pc.field("id").isin([3, 250, 251, 777]), {"s": "changed"})
    t.delete(pc.field("id").isin([10, 410]))
    t.insert(make_rows(5, start=5000))
    t.merge(make_rows(3, start=998).set_column(1, "x", pa.array([0, 0, 0], pa.int64())), on="id")
    counter = ReadCounter(monkeypatch)
    cs = t.changes(start_version=2)
    assert cs.plan_shape is PlanShape.MINIMIZE
    out = cs.to_arrow()
    # 4 updates (pairs) + 2 deletes + 5 inserts + 2 merge updates (pairs) + 1 merge insert.
    assert out.num_rows == 8 + 2 + 5 + 4 + 1
    assert counter.payload_rows == out.num_rows
    assert counter.touched() <= {p.path for p in cs.plan.partitions_to_read()}
    assert_pairs_adjacent(out)


def test_update_pairs_across_many_buckets(new_table, make_rows, monkeypatch):
    """Pairs are aligned by row id in buckets sized to a memory budget; a tiny
    budget (many buckets) gives the same output as one bucket."""
    t = new_table(partition_rows=50)
    t.insert(make_rows(300))
    t.update(pc.field("id").isin([i for i in range(300) if i % 7 == 0]), {"s": "seven"})
    t.update(pc.field("id").isin([i for i in range(300) if i % 5 == 0]), {"x": -5})
    t.delete(pc.field("id").isin([i for i in range(300) if i % 11 == 0]))
    one = t.changes(start_version=2).to_arrow()
    counter = ReadCounter(monkeypatch)
    monkeypatch.setattr(min_delta, "PAIR_MEMORY_BUDGET", 2000)
    buckets = []
    real_emit = min_delta.MinimumDelta._emit_pairs

    def emit(self, old, new, *a, **k):
        buckets.append(len(old[1]))
        return real_emit(self, old, new, *a, **k)

    monkeypatch.setattr(min_delta.MinimumDelta, "_emit_pairs", emit)
    many = t.changes(start_version=2).to_arrow()
    assert len(buckets) > 2 * len(t.snapshot().partitions)  # really bucketed
    # Pair ids ascend in file order, so buckets stream through each partition:
    # every partition's payload is decoded once, whatever the number of buckets.
    paths = [p for p, _ in counter.payload]
    assert len(paths) == len(set(paths))
    key = lambda tb: sorted(map(tuple, (r.values() for r in tb.to_pylist())))  # noqa: E731
    assert key(many) == key(one)
    assert_pairs_adjacent(many)
    n_pairs = sum(1 for i in range(300) if (i % 7 == 0 or i % 5 == 0) and i % 11 != 0)
    n_deletes = sum(1 for i in range(300) if i % 11 == 0)
    assert many.num_rows == 2 * n_pairs + n_deletes
    assert counter.payload_rows == many.num_rows


def test_append_only_reads_only_appended_partitions(people, monkeypatch):
    counter = ReadCounter(monkeypatch)
    cs = people.changes(start_version=2, information="append_only")
    out = cs.to_arrow()
    appended = {p.path for p in cs.plan.appended}
    assert counter.touched() <= appended
    assert counter.payload_rows == out.num_rows == 3
    # Partitions removed in the interval are never opened.
    removed = {p.path for p in people.changes(start_version=2).plan.removed}
    assert not counter.touched() & (removed - appended)


# ---------------------------------------------------------------- output shape


@pytest.mark.parametrize("information", ["default", "append_only", "audit"])
@pytest.mark.parametrize("changelog", [None, "op"])
@pytest.mark.parametrize("interval", [(2, 5), (5, 5), (1, 1), (6, 5)])
def test_batches_and_schema(people, information, changelog, interval, monkeypatch):
    a, b = interval
    if a > b:
        hist = people.history()
        cs = people.changes(start_timestamp=hist[0].timestamp + dt.timedelta(seconds=1), information=information, changelog=changelog)
    else:
        cs = people.changes(start_version=a, end_version=b, information=information, changelog=changelog)
    monkeypatch.setattr(cs, "_batch_rows", 1)  # many small batches
    batches = list(cs.to_batches())
    for batch in batches:
        assert batch.schema == cs.schema
    full = cs.to_arrow()
    assert full.schema == cs.schema
    assert pa.Table.from_batches(batches, schema=cs.schema).equals(full)
    # Exactly the table schema (string, not large_string; nullability kept) + metadata.
    expected = [pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())]
    if changelog == "op":
        expected.append(pa.field("op", pa.uint8(), nullable=False))
    else:
        expected += [pa.field(ACTION, pa.string(), nullable=False), pa.field(ISUPDATE, pa.bool_(), nullable=False)]
    expected.append(pa.field(ROW_ID, pa.string(), nullable=False))
    if information == "audit":
        expected += [pa.field(CVERSION, pa.int64(), nullable=False), pa.field(CTS, pa.timestamp("us", tz="UTC"), nullable=False)]
    assert cs.schema == pa.schema(expected)
    for r in full.column(ROW_ID).to_pylist():
        assert len(r) == 16 and int(r, 16) >= 0
    assert full.to_pandas().shape[0] == full.num_rows


def test_to_batches_streams_in_bounded_batches(new_table, make_rows):
    t = new_table(partition_rows=500)
    t.insert(make_rows(2000))
    whole = t.changes(start_version=1)
    cs = change_scan.ChangeSet(
        t.storage, t.snapshot().table_schema, t.snapshot().metadata.table_id, whole.scan, whole.plan, batch_rows=300,
    )
    sizes = [b.num_rows for b in cs.to_batches()]
    assert max(sizes) <= 300 and sum(sizes) == 2000


def test_value_changed_and_changed_back_to_nan_is_no_net_change(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"id": [1, 2], "f": [float("nan"), 1.0]}, schema=schema))
    v1 = t.update(pc.field("id") >= 1, {"f": 5.0}).version
    v2 = t.update(pc.field("id") == 1, {"f": float("nan")}).version
    # Each commit alone is an update; over both, row 1 ends where it began and
    # only row 2 changed (row 2 makes the column chunks differ, so the pair of
    # row 1 is really compared, NaN with NaN).
    assert t.changes(start_version=v1, end_version=v1).to_arrow().num_rows == 4
    got = t.changes(start_version=v1, end_version=v2).to_arrow()
    assert sorted(zip(got["id"].to_pylist(), got["f"].to_pylist())) == [(2, 1.0), (2, 5.0)]
