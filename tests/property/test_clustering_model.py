"""Differential property test of clustering (SPEC §Clustering): a table with
clustering keys and automatic compaction holds exactly what a table without
them holds, at every version, and its change scans say exactly the same.

A hypothesis state machine runs one random history of user statements on two
real tables in temporary directories and on a plain Python model:

* ``clustered``: ``ctfile.clusterBy`` drawn among single and composite keys
  over a string column (nulls, an empty string, strings longer than the
  32-character statistics prefix), a double column (nulls, NaN, -0.0) and an
  int column, ``ctfile.autoCompact`` on, a small ``ctfile.partitionRows``;
* ``plain``: the same ``ctfile.partitionRows``, no clustering keys.

Statements: INSERT, DELETE, UPDATE (of the clustering keys too), MERGE
(update/insert, delete, insert only), ``compact(max_rows=...)``, and
``set_properties`` switching the clustered table's keys to another set and
``ctfile.autoCompact`` of either table on and off. ``ctfile.changeCapture``
is drawn per table. A statement that auto compaction follows commits two
versions on one table and one on the other, so each table maps statement
index -> version (``CommitResult.version`` and
``CommitResult.auto_compaction``), and everything is compared through that
map:

* at every statement, the snapshot (and the snapshot after its automatic
  compaction) of each table equals the model: user columns and row version
  (the version of the statement that last changed the row), as multisets;
  row ids are unique, and stable for a logical row across all versions
  (clustered writes sort before assigning row ids, so the two tables number
  rows differently: the row ids must correspond one to one, not be equal);
* a compaction (by ``compact()`` or automatic) is ``dataChange`` false and
  changes no row, no row id and no row version;
* change scans between random statements, in every ``information`` mode,
  with and without ``changelog="op"`` and ``initial_rows``, are the same on
  both tables (``METADATA$ROW_ID`` checked against the row's row id, commit
  versions mapped back to statements), and ``default``, ``audit`` and
  ``append_only`` equal the model's minimum delta, per-commit deltas and
  inserted rows.

Each logical row carries ``uid`` (the MERGE key, never updated).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import ctfile
from ctfile.format.actions import CommitInfo

from change_checks import ACTION, CTS, CVERSION, ISUPDATE, OP_CODES, ROW_ID, row_id_string, scan_rows

SCHEMA = pa.schema(
    [
        pa.field("uid", pa.int64(), nullable=False),
        pa.field("a", pa.string()),
        pa.field("f", pa.float64()),
        pa.field("n", pa.int64()),
        pa.field("v", pa.string()),
    ]
)
COLS = ("a", "f", "n", "v")
LONG = "x" * 40  # longer than the 32-character statistics prefix: no max bound
A_VALUES = st.sampled_from([None, "", "a", "b", "c", LONG, LONG + "y"])
F_VALUES = st.sampled_from([None, math.nan, -1.5, -0.0, 0.0, 2.0])
N_VALUES = st.one_of(st.none(), st.integers(-2, 3))
V_VALUES = st.sampled_from([None, "p", "q"])
ROW = st.tuples(A_VALUES, F_VALUES, N_VALUES, V_VALUES)
KEY_SETS = ["a", "f", "n", "a,n", "n,a", "f,n", "n,uid", "a,f,n"]
OPS = {v: k for k, v in OP_CODES.items()}


def norm(x):
    """A value as compared: NaN is one value, -0.0 is 0.0."""
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else x + 0.0
    return x


def same(a: tuple, b: tuple) -> bool:
    """Equal as an UPDATE's no-op rule sees it (nulls equal, NaNs equal)."""
    return tuple(map(norm, a)) == tuple(map(norm, b))


# ---------------------------------------------------------------- predicates
# (column, op, constant) leaves combined by and/or/not; `ev` is SQL
# three-valued logic on a model row (None = unknown), as Arrow computes it.

_CMP = {
    "==": lambda x, c: x == c, "!=": lambda x, c: x != c, "<": lambda x, c: x < c,
    "<=": lambda x, c: x <= c, ">": lambda x, c: x > c, ">=": lambda x, c: x >= c,
}
_leaf = st.one_of(
    st.tuples(st.just("cmp"), st.just("uid"), st.sampled_from(sorted(_CMP)), st.integers(0, 40)),
    st.tuples(st.just("cmp"), st.just("n"), st.sampled_from(sorted(_CMP)), st.integers(-2, 3)),
    st.tuples(st.just("cmp"), st.just("a"), st.sampled_from(sorted(_CMP)), st.sampled_from(["", "a", "b", LONG])),
    st.tuples(st.just("cmp"), st.just("f"), st.sampled_from(sorted(_CMP)), st.sampled_from([-1.5, 0.0, 2.0])),
    st.tuples(st.just("isnull"), st.sampled_from(["a", "f", "n"])),
)
PREDICATES = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.tuples(st.just("not"), inner), st.tuples(st.sampled_from(["and", "or"]), inner, inner)),
    max_leaves=3,
)


def expr(p) -> pc.Expression:
    if p[0] == "cmp":
        return _CMP[p[2]](pc.field(p[1]), pc.scalar(p[3]))
    if p[0] == "isnull":
        return pc.field(p[1]).is_null()
    if p[0] == "not":
        return ~expr(p[1])
    return (expr(p[1]) & expr(p[2])) if p[0] == "and" else (expr(p[1]) | expr(p[2]))


def ev(p, cols: dict):
    if p[0] == "cmp":
        x = cols[p[1]]
        return None if x is None else _CMP[p[2]](x, p[3])  # NaN compares false, as in Arrow
    if p[0] == "isnull":
        return cols[p[1]] is None
    if p[0] == "not":
        r = ev(p[1], cols)
        return None if r is None else not r
    a, b = ev(p[1], cols), ev(p[2], cols)
    if p[0] == "and":
        return False if False in (a, b) else (None if None in (a, b) else True)
    return True if True in (a, b) else (None if None in (a, b) else False)


# Set clauses: column -> constant, or ("n+1",).
SETS = st.one_of(
    st.fixed_dictionaries({"a": A_VALUES}),
    st.fixed_dictionaries({"f": F_VALUES}),
    st.fixed_dictionaries({"n": st.just(("n+1",))}),
    st.fixed_dictionaries({"n": N_VALUES, "v": V_VALUES}),
    st.fixed_dictionaries({"a": A_VALUES, "f": F_VALUES, "n": N_VALUES}),
)


@dataclass(frozen=True)
class Merge:
    # ("live", index, row) picks a live uid by position, ("new", row) a fresh
    # uid, ("dead", index, row) a uid deleted earlier.
    entries: list
    mode: tuple  # (when_matched, when_not_matched)
    columns: tuple  # source columns besides uid


_entry = st.one_of(
    st.tuples(st.just("live"), st.integers(0, 60), ROW),
    st.tuples(st.just("new"), ROW),
    st.tuples(st.just("dead"), st.integers(0, 60), ROW),
)
MERGES = st.builds(
    Merge,
    st.lists(_entry, max_size=8),
    st.sampled_from([("update", "insert"), ("delete", None), (None, "insert"), ("update", None)]),
    st.sampled_from([("a", "f", "n", "v"), ("a",), ("f", "v"), ("n",)]),
)


class Side:
    """One of the two tables and its statement -> version map."""

    def __init__(self, root: str, properties: dict):
        self.root = root
        self.table = ctfile.create_table(root, SCHEMA, properties=properties)
        self.user = [0]  # statement index -> the version its own commit left (or the one it read)
        self.final = [0]  # statement index -> the version after its automatic compaction, if any
        self.stmt_of = {0: 0}  # data version -> statement index (not compactions, nor metadata)
        self.compactions: list[int] = []  # versions of automatic compactions
        self.row_ids: dict[int, int] = {}  # uid -> row id
        self.id_owner: dict[int, int] = {}

    def record(self, r: ctfile.CommitResult | None, *, data: bool) -> None:
        """Record the versions of the next statement (``r`` None: it did
        not run on this table)."""
        if r is None or not r.committed:
            self.user.append(self.final[-1])
            self.final.append(self.final[-1])
            return
        assert r.version == self.final[-1] + 1, (r, self.final)
        self.user.append(r.version)
        if data:
            self.stmt_of[r.version] = len(self.user) - 1
        end = r.version
        if r.auto_compaction is not None:
            ac = r.auto_compaction
            assert ac.committed and ac.version == r.version + 1 and ac.operation == "COMPACT", ac
            self.compactions.append(ac.version)
            end = ac.version
            event("auto compaction")
        self.final.append(end)
        assert self.table.version == end


class ClusteringModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dirs = [tempfile.mkdtemp(prefix="ctfile-clu-"), tempfile.mkdtemp(prefix="ctfile-plain-")]
        self.sides: dict[str, Side] = {}
        # Statement index -> {uid: (a, f, n, v, statement that last changed it)}.
        self.states: list[dict[int, tuple]] = [{}]
        self.inserted: dict[int, tuple] = {}  # uid -> (statement, values inserted)
        self.next_uid = 0
        self.dead: list[int] = []
        self.keys = ""

    def teardown(self):
        try:
            if self.sides:
                for side in self.sides.values():
                    fresh = ctfile.open_table(side.root)
                    assert fresh.version == side.final[-1]
                    for j in range(len(self.states)):
                        self.check_snapshot(side, fresh, j)
                    self.check_compactions_hidden(fresh, side)
                n = len(self.states) - 1
                if n:
                    for information in ("default", "audit", "append_only"):
                        for a in sorted({0, n // 2, n - 1}):
                            self.compare_scans(a, n, information, a == n // 2, a == 0)
        finally:
            for d in self.dirs:
                shutil.rmtree(d, ignore_errors=True)

    # ------------------------------------------------------------ set-up

    @initialize(
        keys=st.sampled_from(KEY_SETS),
        rows=st.sampled_from([6, 10]),
        capture=st.tuples(st.booleans(), st.booleans()),
        batches=st.lists(st.lists(ROW, min_size=1, max_size=3), max_size=5),
    )
    def create(self, keys, rows, capture, batches):
        self.keys = keys
        base = {"ctfile.partitionRows": str(rows)}
        props = [
            {**base, "ctfile.clusterBy": keys, "ctfile.autoCompact": "true"},
            dict(base),
        ]
        for name, d, p, cap in zip(("clustered", "plain"), self.dirs, props, capture):
            if cap:
                p["ctfile.changeCapture"] = "before_after"
            self.sides[name] = Side(d, p)
        event(f"keys {keys}")
        for b in batches:  # small inserts first, so automatic compaction has work early
            self.insert(b)

    # ------------------------------------------------------------ model semantics

    def fresh_uid(self) -> int:
        self.next_uid += 1
        return self.next_uid - 1

    def commit_statement(self, work: dict[int, tuple], results: dict[str, ctfile.CommitResult | None],
                         *, data: bool = True) -> None:
        """Record statement ``j`` = len(states): its model state ``work``
        (rows it wrote have statement None) and each table's result."""
        j = len(self.states)
        prev = self.states[-1]
        changed = bool(set(prev) - set(work)) or any(r[4] is None for r in work.values())
        for name, side in self.sides.items():
            r = results.get(name)
            if data and r is not None:
                assert r.committed == changed, (name, r, changed)
            side.record(r, data=data and changed)
        self.dead.extend(u for u in prev if u not in work)
        state = {u: row[:4] + ((j if row[4] is None else row[4]),) for u, row in work.items()}
        for u, row in state.items():
            if u not in prev:
                self.inserted[u] = (j, row[:4])
        self.states.append(state)

    def run(self, fn) -> dict[str, ctfile.CommitResult]:
        return {name: fn(side.table) for name, side in self.sides.items()}

    # ------------------------------------------------------------ rules

    @rule(rows=st.lists(ROW, min_size=1, max_size=4))
    def small_insert(self, rows):
        self.insert(rows)

    @rule(rows=st.lists(ROW, min_size=1, max_size=24))
    def insert(self, rows):
        uids = [self.fresh_uid() for _ in rows]
        work = dict(self.states[-1])
        for u, r in zip(uids, rows):
            work[u] = r + (None,)
        data = pa.table({"uid": uids, **{c: [r[i] for r in rows] for i, c in enumerate(COLS)}}, schema=SCHEMA)
        res = self.run(lambda t: t.insert(data))
        for r in res.values():
            assert r.num_inserted_rows == len(rows)
        self.commit_statement(work, res)

    @rule(pred=PREDICATES)
    def delete(self, pred):
        work = {u: r for u, r in self.states[-1].items()
                if ev(pred, {"uid": u, **dict(zip(COLS, r))}) is not True}
        res = self.run(lambda t: t.delete(expr(pred)))
        for r in res.values():
            assert r.num_deleted_rows == len(self.states[-1]) - len(work)
        self.commit_statement(work, res)

    @rule(pred=st.one_of(st.none(), PREDICATES), sets=SETS)
    def update(self, pred, sets):
        work = dict(self.states[-1])
        n = 0
        for u, row in list(work.items()):
            cols = {"uid": u, **dict(zip(COLS, row))}
            if pred is not None and ev(pred, cols) is not True:
                continue
            new = dict(cols)
            for c, val in sets.items():
                new[c] = (None if cols["n"] is None else cols["n"] + 1) if val == ("n+1",) else val
            new_row = tuple(new[c] for c in COLS)
            if not same(new_row, row[:4]):
                work[u] = new_row + (None,)
                n += 1
        args = {c: (pc.field("n") + 1 if val == ("n+1",) else val) for c, val in sets.items()}
        res = self.run(lambda t: t.update(None if pred is None else expr(pred), args))
        for r in res.values():
            assert r.num_updated_rows == n, (r, n)
        self.commit_statement(work, res)

    @rule(m=MERGES)
    def merge(self, m):
        work = dict(self.states[-1])
        matched, not_matched = m.mode
        live = sorted(work)
        source: dict[int, tuple] = {}
        for e in m.entries:
            if e[0] == "live" and live:
                uid, row = live[e[1] % len(live)], e[2]
            elif e[0] == "dead" and self.dead and not_matched != "insert":
                uid, row = self.dead[e[1] % len(self.dead)], e[2]
            elif e[0] == "new" and not_matched == "insert":
                uid, row = self.fresh_uid(), e[1]
            else:
                continue
            source.setdefault(uid, row)
        counts = Counter()
        for uid, row in source.items():
            given = {c: row[i] for i, c in enumerate(COLS) if c in m.columns}
            if uid in work:
                old = work[uid]
                if matched == "delete":
                    del work[uid]
                    counts["deleted"] += 1
                elif matched == "update":
                    new = tuple(given.get(c, old[i]) for i, c in enumerate(COLS))
                    if not same(new, old[:4]):
                        work[uid] = new + (None,)
                        counts["updated"] += 1
            elif not_matched == "insert":
                work[uid] = tuple(given.get(c) for c in COLS) + (None,)
                counts["inserted"] += 1
        uids = list(source)
        cols = {"uid": pa.array(uids, pa.int64())}
        for i, c in enumerate(COLS):
            if c in m.columns:
                cols[c] = pa.array([source[u][i] for u in uids], SCHEMA.field(c).type)
        src = pa.table(cols, schema=pa.schema([SCHEMA.field(c) for c in cols]))
        res = self.run(lambda t: t.merge(src, "uid", when_matched=matched, when_not_matched=not_matched))
        for r in res.values():
            got = (r.num_inserted_rows, r.num_updated_rows, r.num_deleted_rows)
            assert got == (counts["inserted"], counts["updated"], counts["deleted"]), (r, counts)
        self.commit_statement(work, res)

    @rule(max_rows=st.one_of(st.none(), st.integers(1, 30)))
    def compact(self, max_rows):
        res = self.run(lambda t: t.compact(max_rows=max_rows))
        for r in res.values():
            assert r.num_inserted_rows == r.num_deleted_rows == r.num_updated_rows == 0
            assert r.auto_compaction is None
        self.commit_statement(dict(self.states[-1]), res, data=False)

    @rule(keys=st.sampled_from(KEY_SETS), auto=st.tuples(st.booleans(), st.booleans()), which=st.integers(0, 2))
    def set_properties(self, keys, auto, which):
        res: dict[str, ctfile.CommitResult | None] = {"clustered": None, "plain": None}
        if which in (0, 2):
            self.keys = keys
            res["clustered"] = self.sides["clustered"].table.set_properties(
                {"ctfile.clusterBy": keys, "ctfile.autoCompact": str(auto[0]).lower()})
        if which in (1, 2):
            res["plain"] = self.sides["plain"].table.set_properties({"ctfile.autoCompact": str(auto[1]).lower()})
        self.commit_statement(dict(self.states[-1]), res, data=False)

    @precondition(lambda self: len(self.states) > 1)
    @rule(
        a=st.integers(0, 40), b=st.integers(0, 40), information=st.sampled_from(["default", "append_only", "audit"]),
        op=st.booleans(), initial=st.booleans(),
    )
    def change_scan(self, a, b, information, op, initial):
        n = len(self.states)
        a, b = sorted((a % n, b % n))
        if a == b:
            b = min(n - 1, a + 1)
            a = b - 1
        self.compare_scans(a, b, information, op, initial)

    def last_statement_scans(self):
        """The change of the latest statement alone, in one mode a step."""
        j = len(self.states) - 1
        if j:
            self.compare_scans(j - 1, j, ("default", "audit", "append_only")[j % 3], bool(j % 2), False)

    def compare_scans(self, a: int, b: int, information: str, op: bool, initial: bool) -> None:
        """Statements ``a+1..b``: the same change rows on both tables, and
        the model's (without initial rows)."""
        kw = {"information": information, "changelog": "op" if op else None}
        if initial and information != "audit" and all(s.final[a] < s.final[b] for s in self.sides.values()):
            kw["initial_rows"] = True  # (the initial rows of an interval without versions are not asked for)
        got = {name: self.scan(side, a, b, kw) for name, side in self.sides.items()}
        assert got["clustered"] == got["plain"], (a, b, kw, got)
        if "initial_rows" not in kw:
            assert got["plain"] == self.model_scan(a, b, information), (a, b, kw, got["plain"])
        event(f"scan {information}: {'empty' if not got['plain'] else 'rows'}")

    # ------------------------------------------------------------ change scans

    def scan(self, side: Side, a: int, b: int, kw: dict) -> Counter:
        """The change rows of statements ``a+1..b`` on ``side``, normalised:
        ``METADATA$ROW_ID`` checked against the row id and dropped, commit
        versions as statement indices, an op code as (action, isupdate)."""
        start, end = side.final[a] + 1, side.final[b]
        if start > end:
            return Counter()
        t = side.table
        rows = scan_rows(t, (side.root, a, b), start_version=start, end_version=end, **kw)
        tid = t.snapshot().metadata.table_id
        out = Counter()
        for r in rows:
            uid = r["uid"]
            assert r[ROW_ID] == row_id_string(tid, side.row_ids[uid]), (r, side.row_ids.get(uid))
            action = OPS[r["op"]] if "op" in r else (r[ACTION], r[ISUPDATE])
            stmt = None
            if CVERSION in r:
                assert r[CVERSION] in side.stmt_of, (r, side.stmt_of)  # never a compaction's
                stmt = side.stmt_of[r[CVERSION]]
                assert CTS in r
            out[(uid, *map(norm, (r[c] for c in COLS)), *action, stmt)] += 1
        return out

    def delta(self, old: dict, new: dict, stmt) -> Counter:
        """The minimum delta from ``old`` to ``new`` (SPEC §Change scans, default)."""
        out = Counter()
        for u in old.keys() | new.keys():
            o, n = old.get(u), new.get(u)
            if o is not None and n is not None and same(o[:4], n[:4]):
                continue
            upd = o is not None and n is not None
            if o is not None:
                out[(u, *map(norm, o[:4]), "DELETE", upd, stmt)] += 1
            if n is not None:
                out[(u, *map(norm, n[:4]), "INSERT", upd, stmt)] += 1
        return out

    def model_scan(self, a: int, b: int, information: str) -> Counter:
        if information == "default":
            return self.delta(self.states[a], self.states[b], None)
        if information == "audit":
            out = Counter()
            for j in range(a + 1, b + 1):
                out += self.delta(self.states[j - 1], self.states[j], j)
            return out
        return Counter((u, *map(norm, vals), "INSERT", False, None)
                       for u, (j, vals) in self.inserted.items() if a < j <= b)

    # ------------------------------------------------------------ snapshots

    @invariant()
    def latest_matches_model(self):
        if not self.sides:
            return
        j = len(self.states) - 1
        for side in self.sides.values():
            self.check_snapshot(side, side.table, j)
        self.last_statement_scans()  # (after the snapshots: they record the row ids)

    def check_snapshot(self, side: Side, table: ctfile.Table, j: int) -> None:
        """The versions of statement ``j`` (its own and the one after its
        automatic compaction) hold the model's rows, row versions and stable
        row ids."""
        model = self.states[j]
        want = Counter((u, *map(norm, r[:4]), side.user[r[4]]) for u, r in model.items())
        for version in sorted({side.user[j], side.final[j]}):
            t = table.snapshot(version).to_arrow(include_hidden=True)
            cols = [t.column(c).to_pylist() for c in ("uid", *COLS, ctfile.ROW_VERSION_COLUMN)]
            got = Counter((r[0], *map(norm, r[1:5]), r[5]) for r in zip(*cols))
            assert got == want, (side.root, j, version, got, want)
            rids = t.column(ctfile.ROW_ID_COLUMN).to_pylist()
            assert len(set(rids)) == len(rids) and None not in rids, (version, rids)
            for uid, rid in zip(t.column("uid").to_pylist(), rids):
                assert side.row_ids.setdefault(uid, rid) == rid, (side.root, uid, rid, side.row_ids[uid])
                assert side.id_owner.setdefault(rid, uid) == uid, (side.root, rid, uid)

    def check_compactions_hidden(self, table: ctfile.Table, side: Side) -> None:
        """Every version that is not a data statement's is ``dataChange``
        false (automatic compactions are COMPACTs)."""
        for v in range(1, side.final[-1] + 1):
            info = next(a for a in table.log.read_entry(v) if isinstance(a, CommitInfo))
            if v in side.compactions:
                assert info.operation == "COMPACT", (v, info)
            if v not in side.stmt_of:
                assert not info.data_change, (v, info)


_SETTINGS = dict(
    stateful_step_count=25,
    deadline=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ClusteringModel.TestCase.settings = settings(max_examples=15, **_SETTINGS)
TestClusteringModel = ClusteringModel.TestCase


@pytest.mark.long
class TestClusteringModelLong(ClusteringModel.TestCase):
    """More histories than the default run's (the suite's time budget)."""

    settings = settings(max_examples=80, **_SETTINGS)
