"""Property test of change scans against real snapshots (SPEC §Change scans).

Hypothesis draws a random history of INSERT, DELETE, UPDATE, MERGE, TRUNCATE,
OVERWRITE and COMPACT statements on a real table with tiny micro-partitions.
Each row carries ``uid`` (assigned by the test, never updated). A small model
tracks the live rows (checked against every snapshot) and, per version, the
rows each commit inserted with their inserted values.

For every interval ``[a, b]`` with ``1 <= a <= b <= latest``:

(i)    the default changes applied to ``snapshot(a - 1)`` by ``METADATA$ROW_ID``
       give ``snapshot(b)`` exactly;
(ii)   at most one row per (ROW_ID, ACTION);
(iii)  a DELETE names a ROW_ID of ``snapshot(a - 1)`` with that row's values;
(iv)   an INSERT of a ROW_ID live in ``snapshot(a - 1)`` is half of an update
       pair, and an INSERT carries the row's values in ``snapshot(b)``;
(v)    update pairs are adjacent DELETE-then-INSERT with one ROW_ID and
       different values (no-op updates produce nothing);
(vi)   the audit changes, grouped by METADATA$COMMIT_VERSION and applied
       commit by commit, give ``snapshot(v)`` for every ``v`` in ``[a, b]``,
       each group being that commit's own minimum delta;
(vii)  append_only equals the model's rows inserted in ``[a, b]``, with the
       values they were inserted with.

Also: initial_rows in each mode, and a random ``filter`` equals the
unfiltered output filtered row by row (a pair losing one side becomes a lone
row with ISUPDATE false).

Change capture (SPEC §Change capture) is off, on from the start, or switched
on (a metadata-only commit) at a drawn point of the history, so intervals
read change files, partitions, or both (plan shapes CAPTURED and MIXED).
Every scan is also planned from partitions alone on the same table
(``plan_changes(..., use_change_files=False)``), and the two must return the
same rows (as a multiset; update pairs adjacent either way).
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.reader import min_delta
from ctfile.reader.row_ids import row_id_strings, table_seed

from change_checks import ACTION, CTS, CVERSION, ISUPDATE, OP_CODES, ROW_ID, filtered, scan_rows, srt

SCHEMA = pa.schema(
    [pa.field("uid", pa.int64(), nullable=False), pa.field("k", pa.int64()), pa.field("v", pa.string())]
)

K = st.one_of(st.none(), st.integers(-1, 3))
V = st.sampled_from([None, "a", "b", "c"])
NEW_ROWS = st.lists(st.tuples(K, V), min_size=1, max_size=6)

# ---------------------------------------------------------------- predicates

_CMP = {
    "==": (lambda a, b: a == b, lambda f, c: f == c),
    "!=": (lambda a, b: a != b, lambda f, c: f != c),
    "<": (lambda a, b: a < b, lambda f, c: f < c),
    ">=": (lambda a, b: a >= b, lambda f, c: f >= c),
}
LEAVES = st.one_of(
    st.tuples(st.just("cmp"), st.just("k"), st.sampled_from(sorted(_CMP)), st.integers(-1, 3)),
    st.tuples(st.just("cmp"), st.just("v"), st.sampled_from(["==", "!=", "<"]), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("isnull"), st.sampled_from(["k", "v"])),
)
FILTERS = st.one_of(
    LEAVES,
    st.tuples(st.just("cmp"), st.just("uid"), st.sampled_from(sorted(_CMP)), st.integers(0, 20)),
    st.tuples(st.just("or"), LEAVES, LEAVES),
)


def to_expr(p) -> pc.Expression:
    if p[0] == "cmp":
        return _CMP[p[2]][1](pc.field(p[1]), pc.scalar(p[3]))
    if p[0] == "isnull":
        return pc.field(p[1]).is_null()
    if p[0] == "uids":
        return pc.field("uid").isin(list(p[1]))
    if p[0] == "or":
        return to_expr(p[1]) | to_expr(p[2])
    raise AssertionError(p)


def holds(p, row: dict) -> bool:
    """True where the predicate is true (SQL: null and false both fail)."""
    if p[0] == "cmp":
        x = row[p[1]]
        return x is not None and _CMP[p[2]][0](x, p[3])
    if p[0] == "isnull":
        return row[p[1]] is None
    if p[0] == "uids":
        return row["uid"] in p[1]
    if p[0] == "or":
        return holds(p[1], row) or holds(p[2], row)
    raise AssertionError(p)


# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Insert:
    rows: list


@dataclass(frozen=True)
class Delete:
    pred: tuple  # a leaf, or ("pick", [indices]) resolved against the live uids


@dataclass(frozen=True)
class Update:
    pred: tuple
    set: tuple  # (("k", value|"k+1"), ("v", value)) subset


@dataclass(frozen=True)
class Merge:
    entries: list  # ("live", index, k, v) | ("new", k, v)
    mode: tuple
    columns: tuple


@dataclass(frozen=True)
class Truncate:
    pass


@dataclass(frozen=True)
class Overwrite:
    rows: list


@dataclass(frozen=True)
class Compact:
    pass


PICK = st.tuples(st.just("pick"), st.lists(st.integers(0, 30), min_size=1, max_size=3))
PREDS = st.one_of(LEAVES, PICK, PICK)
SETS = st.one_of(
    st.tuples(st.tuples(st.just("k"), K)),
    st.tuples(st.tuples(st.just("v"), V)),
    st.tuples(st.tuples(st.just("k"), K), st.tuples(st.just("v"), V)),
    st.just((("k", "k+1"),)),
)
MERGE_ENTRY = st.one_of(
    st.tuples(st.just("live"), st.integers(0, 30), K, V),
    st.tuples(st.just("new"), K, V),
)
STATEMENTS = st.one_of(
    st.builds(Insert, NEW_ROWS),
    st.builds(Delete, PREDS),
    st.builds(Update, PREDS, SETS),
    st.builds(Update, PREDS, SETS),
    st.builds(
        Merge,
        st.lists(MERGE_ENTRY, min_size=1, max_size=5),
        st.sampled_from([("update", "insert"), ("delete", None), (None, "insert"), ("update", None)]),
        st.sampled_from([("k", "v"), ("k",)]),
    ),
    st.just(Truncate()),
    st.builds(Overwrite, NEW_ROWS),
    st.just(Compact()),
)
CAPTURE = {"ctfile.changeCapture": "before_after"}
# Off, on from version 0, or switched on before the statement at this index.
CAPTURES = st.one_of(st.just("off"), st.just("on"), st.integers(1, 7))
HISTORIES = st.tuples(st.builds(Insert, NEW_ROWS), st.lists(STATEMENTS, min_size=3, max_size=7))


class History:
    """Runs statements on a real table and on the model."""

    def __init__(self, root: str, partition_rows: int, *, capture: bool = False):
        props = CAPTURE if capture else None
        self.table = ctfile.create_table(root, SCHEMA, partition_rows=partition_rows, properties=props)
        self.live: dict[int, tuple] = {}  # uid -> (k, v)
        self.inserted: dict[int, list[tuple]] = {}  # version -> [(uid, k, v)] inserted by it
        self.data_change: dict[int, bool] = {}
        self.next_uid = 0

    def fresh(self) -> int:
        self.next_uid += 1
        return self.next_uid - 1

    def _rows_table(self, rows: list[tuple]) -> pa.Table:
        return pa.table(
            {"uid": [r[0] for r in rows], "k": [r[1] for r in rows], "v": [r[2] for r in rows]}, schema=SCHEMA
        )

    def _resolve(self, pred):
        if pred[0] == "pick":
            live = sorted(self.live)
            return ("uids", tuple(sorted({live[i % len(live)] for i in pred[1]})) if live else (-1,))
        return pred

    def capture_on(self) -> None:
        """Switch change capture on: a metadata-only commit."""
        result = self.table.set_properties(CAPTURE)
        assert result.committed
        self.inserted[result.version] = []
        self.data_change[result.version] = False

    def run(self, stmt) -> None:
        t = self.table
        work = dict(self.live)
        new: list[tuple] = []
        data_change = True
        if isinstance(stmt, (Insert, Overwrite)):
            if isinstance(stmt, Overwrite):
                work.clear()
            new = [(self.fresh(), k, v) for k, v in stmt.rows]
            work.update({u: (k, v) for u, k, v in new})
            data = self._rows_table(new)
            result = t.insert(data) if isinstance(stmt, Insert) else t.overwrite(data)
        elif isinstance(stmt, Truncate):
            work.clear()
            result = t.truncate()
        elif isinstance(stmt, Compact):
            data_change = False
            result = t.compact(target_rows=8)
        elif isinstance(stmt, Delete):
            pred = self._resolve(stmt.pred)
            for u, (k, v) in list(work.items()):
                if holds(pred, {"uid": u, "k": k, "v": v}):
                    del work[u]
            result = t.delete(to_expr(pred))
        elif isinstance(stmt, Update):
            pred = self._resolve(stmt.pred)
            for u, (k, v) in list(work.items()):
                if holds(pred, {"uid": u, "k": k, "v": v}):
                    nk, nv = k, v
                    for col, val in stmt.set:
                        if col == "k":
                            nk = (None if k is None else k + 1) if val == "k+1" else val
                        else:
                            nv = val
                    work[u] = (nk, nv)
            sets = {col: (pc.field("k") + 1 if val == "k+1" else pa.scalar(val, SCHEMA.field(col).type)) for col, val in stmt.set}
            result = t.update(to_expr(pred), sets)
        elif isinstance(stmt, Merge):
            live = sorted(work)
            source: dict[int, tuple] = {}
            for e in stmt.entries:
                if e[0] == "live":
                    if not live:
                        continue
                    uid, k, v = live[e[1] % len(live)], e[2], e[3]
                else:
                    uid, k, v = self.fresh(), e[1], e[2]
                source.setdefault(uid, (k, v))
            matched, not_matched = stmt.mode
            for uid, (k, v) in source.items():
                sv = v if "v" in stmt.columns else None
                if uid in work:
                    if matched == "delete":
                        del work[uid]
                    elif matched == "update":
                        work[uid] = (k, sv if "v" in stmt.columns else work[uid][1])
                elif not_matched == "insert":
                    work[uid] = (k, sv)
                    new.append((uid, k, sv))
            cols = {"uid": pa.array(list(source), pa.int64()), "k": pa.array([s[0] for s in source.values()], pa.int64())}
            if "v" in stmt.columns:
                cols["v"] = pa.array([s[1] for s in source.values()], pa.string())
            src = pa.table(cols, schema=pa.schema([SCHEMA.field(c) for c in cols]))
            result = t.merge(src, "uid", when_matched=matched, when_not_matched=not_matched)
        else:
            raise AssertionError(stmt)
        if result.committed:
            self.inserted[result.version] = new
            self.data_change[result.version] = data_change
        else:
            assert not new and work == self.live, (stmt, result)
        self.live = work
        snap = t.snapshot().to_arrow()
        got = {u: (k, v) for u, k, v in zip(*(snap.column(c).to_pylist() for c in ("uid", "k", "v")))}
        assert got == self.live, (stmt, got, self.live)


# ---------------------------------------------------------------- checks


def rows_of(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def values(r: dict) -> tuple:
    return (r["uid"], r["k"], r["v"])


def check_min_delta(rows: list[dict], before: dict, after: dict, ctx) -> None:
    """(i)-(v) for ``rows`` as the minimum delta from ``before`` to ``after``
    (both ROW_ID -> (uid, k, v))."""
    keys = Counter((r[ROW_ID], r[ACTION]) for r in rows)
    assert all(n == 1 for n in keys.values()), (ctx, keys)  # (ii)
    actions = defaultdict(set)
    for r in rows:
        actions[r[ROW_ID]].add(r[ACTION])
    i = 0
    while i < len(rows):  # (v)
        r = rows[i]
        paired = len(actions[r[ROW_ID]]) == 2
        assert r[ISUPDATE] == paired, (ctx, r)
        if r[ISUPDATE]:
            assert r[ACTION] == "DELETE" and i + 1 < len(rows), (ctx, rows)
            nxt = rows[i + 1]
            assert nxt[ACTION] == "INSERT" and nxt[ISUPDATE] and nxt[ROW_ID] == r[ROW_ID], (ctx, r, nxt)
            assert values(r) != values(nxt), (ctx, "no-op update emitted", r)
            i += 2
        else:
            i += 1
    state = dict(before)
    for r in rows:
        if r[ACTION] == "DELETE":  # (iii)
            assert r[ROW_ID] in before, (ctx, "DELETE of a row absent before", r)
            assert before[r[ROW_ID]] == values(r), (ctx, r, before[r[ROW_ID]])
            del state[r[ROW_ID]]
    for r in rows:
        if r[ACTION] == "INSERT":  # (iv)
            if r[ROW_ID] in before:
                assert r[ISUPDATE], (ctx, "INSERT of a live row", r)
            assert r[ROW_ID] not in state, (ctx, r)
            state[r[ROW_ID]] = values(r)
    assert state == after, (ctx, "applying the changes", state, after)  # (i)


def expected_filtered(rows: list[dict], pred) -> list[tuple]:
    return summary(filtered(rows, lambda r: holds(pred, r)))


def summary(rows: list[dict]) -> list[tuple]:
    return srt((values(r), r[ACTION], r[ISUPDATE], r[ROW_ID], r.get(CVERSION)) for r in rows)


def check_history(h: History, flt) -> int:
    t = ctfile.open_table(h.table.uri)  # read through a fresh handle
    latest = t.version
    seed = table_seed(t.snapshot().metadata.table_id)
    snaps: list[dict] = []
    uid_rid: dict[int, str] = {}
    for v in range(latest + 1):
        s = t.snapshot(v).to_arrow(include_hidden=True)
        rids = row_id_strings(s.column(ctfile.ROW_ID_COLUMN).combine_chunks(), seed).to_pylist()
        vals = list(zip(*(s.column(c).to_pylist() for c in ("uid", "k", "v"))))
        snaps.append(dict(zip(rids, vals)))
        for rid, (u, _, _) in zip(rids, vals):
            assert uid_rid.setdefault(u, rid) == rid, (v, u)
    assert len(set(uid_rid.values())) == len(uid_rid)  # ROW_ID <-> uid is a bijection
    hist = {e.version: e.timestamp for e in t.history()}
    checked = 0
    for a in range(1, latest + 1):
        for b in range(a, latest + 1):
            ctx = (a, b)
            # default
            cs = t.changes(start_version=a, end_version=b)
            default = scan_rows(t, ctx, start_version=a, end_version=b)
            check_min_delta(default, snaps[a - 1], snaps[b], ctx)
            if not any(h.data_change[v] for v in range(a, b + 1)):
                assert cs.plan_shape.value == "EMPTY" and not default, ctx
            # changelog="op": the same rows, ACTION/ISUPDATE as one op code
            op = scan_rows(t, ctx, start_version=a, end_version=b, changelog="op")
            assert srt((values(r), r["op"], r[ROW_ID]) for r in op) == srt(
                (values(r), OP_CODES[r[ACTION], r[ISUPDATE]], r[ROW_ID]) for r in default
            ), (ctx, "changelog op")
            # audit (vi)
            audit = scan_rows(t, ctx, start_version=a, end_version=b, information="audit")
            versions = [r[CVERSION] for r in audit]
            assert versions == sorted(versions) and all(a <= x <= b for x in versions), (ctx, versions)
            for v in range(a, b + 1):
                group = [r for r in audit if r[CVERSION] == v]
                check_min_delta(group, snaps[v - 1], snaps[v], (ctx, "audit", v))
                assert all(r[CTS] == hist[v] for r in group), (ctx, v)
            # append_only (vii)
            ao = rows_of(t.changes(start_version=a, end_version=b, information="append_only").to_arrow())
            want = srt(r for v in range(a, b + 1) for r in h.inserted[v])
            assert srt(values(r) for r in ao) == want, (ctx, "append_only")
            assert all(r[ACTION] == "INSERT" and not r[ISUPDATE] for r in ao)
            for r in ao:
                if r["uid"] in uid_rid:
                    assert r[ROW_ID] == uid_rid[r["uid"]], (ctx, r)
            assert len({r[ROW_ID] for r in ao}) == len(ao)
            # filter: row by row over the unfiltered output
            for info, full in (("default", default), ("audit", audit)):
                got = scan_rows(t, ctx, start_version=a, end_version=b, information=info, filter=to_expr(flt))
                assert summary(got) == expected_filtered(full, flt), (ctx, info, flt)
            checked += 1
        # initial rows from a: default = snapshot(latest); the others start at snapshot(a - 1)
        ir = rows_of(t.changes(start_version=a, initial_rows=True).to_arrow())
        assert srt((r[ROW_ID], values(r)) for r in ir) == srt(snaps[latest].items())
        assert all(r[ACTION] == "INSERT" and not r[ISUPDATE] for r in ir)
        ir_ao = rows_of(t.changes(start_version=a, information="append_only", initial_rows=True).to_arrow())
        n0 = len(snaps[a - 1])
        assert srt((r[ROW_ID], values(r)) for r in ir_ao[:n0]) == srt(snaps[a - 1].items()), a
        assert srt(values(r) for r in ir_ao[n0:]) == srt(r for v in range(a, latest + 1) for r in h.inserted[v])
        ir_audit = scan_rows(t, a, start_version=a, information="audit", initial_rows=True)
        head = [r for r in ir_audit if r[CVERSION] == a - 1]
        assert ir_audit[: len(head)] == head and len(head) == n0
        assert srt((r[ROW_ID], values(r)) for r in head) == srt(snaps[a - 1].items())
        assert all(r[CTS] == hist[a - 1] for r in head)
        assert summary(ir_audit[n0:]) == summary(audit)  # audit is [a, latest] here
    return checked


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    history=HISTORIES, partition_rows=st.sampled_from([2, 3, 5]), flt=FILTERS, small_budget=st.booleans(),
    capture=CAPTURES,
)
def test_changes_match_snapshots(history, partition_rows, flt, small_budget, capture):
    first, rest = history
    budget = min_delta.PAIR_MEMORY_BUDGET
    with tempfile.TemporaryDirectory(prefix="ctfile-changes-") as root:
        h = History(root, partition_rows, capture=capture == "on")
        for i, stmt in enumerate([first, *rest]):
            if i == capture:
                h.capture_on()
            h.run(stmt)
        if small_budget:  # update pairs aligned in many row-id buckets
            min_delta.PAIR_MEMORY_BUDGET = 4096
        try:
            check_history(h, flt)
        finally:
            min_delta.PAIR_MEMORY_BUDGET = budget
