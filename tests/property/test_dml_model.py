"""Model-based test of copy-on-write DML (SPEC §Copy-on-write, §Hidden columns).

A hypothesis state machine runs random sequences of INSERT, DELETE, UPDATE,
MERGE (update+insert, delete, insert-only), TRUNCATE, OVERWRITE and
multi-statement transactions against a real table in a temporary directory
and against a plain Python model of the rows. The model records every
committed version; after each step the latest snapshot, and at teardown every
version (read through a freshly opened table), must match it:

* content (as a sorted list of rows) equals the model at that version;
* ``_ct_row_id`` is unique within a snapshot, stable for a logical row across
  all versions (an update keeps it), and never shared by two logical rows;
* ``_ct_row_version`` is the version that last really changed the row (a
  no-op update keeps the old one);
* a statement that changes nothing commits no version, and the row counts a
  statement reports equal the model's.

Each logical row carries ``uid`` (assigned by the model, never updated), so
rows can be told apart even when ``k``/``v`` repeat.

Change capture (SPEC §Change capture) runs off, on from the start, or
switched on (and off again) mid-history. Every commit made while it was on
must describe exactly the model's own change of that commit: the change
files' rows plus the rows of the partitions removed with ``deletesAllRows``
hold one old image (values and row version at the read version, row id)
per row the commit deleted, and an update pair per row whose values it
changed (none for one changed back within a transaction), no row it
inserted; a commit made while it was off names no change file and marks no
remove.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet  # noqa: F401 -- pa.parquet
import pyarrow.compute as pc
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import ctfile
from ctfile.format.actions import ChangeFile, RemovePartition
from ctfile.format.change_files import check_change_rows
from ctfile.format.paths import commit_path
from ctfile.reader.partition_reader import read_partition_table

SCHEMA = pa.schema(
    [
        pa.field("uid", pa.int64(), nullable=False),
        pa.field("k", pa.int64()),
        pa.field("v", pa.string()),
    ]
)
LONG = "x" * 40  # longer than the 32-char statistics prefix
K_VALUES = st.one_of(st.none(), st.integers(-2, 3))
V_VALUES = st.sampled_from([None, "", "a", "b", "c", LONG, LONG + "y", LONG[:32]])

Row = tuple  # (k, v, row_version or None while dirty in the pending commit)


# ---------------------------------------------------------------- predicates
# A predicate is a small tree; `expr` builds the pyarrow Expression, `ev`
# evaluates it on a model row with SQL three-valued logic (None = unknown).

_CMP = {
    "==": (lambda a, b: a == b, lambda x, c: x == c),
    "!=": (lambda a, b: a != b, lambda x, c: x != c),
    "<": (lambda a, b: a < b, lambda x, c: x < c),
    "<=": (lambda a, b: a <= b, lambda x, c: x <= c),
    ">": (lambda a, b: a > b, lambda x, c: x > c),
    ">=": (lambda a, b: a >= b, lambda x, c: x >= c),
}


def expr(p) -> pc.Expression:
    tag = p[0]
    if tag == "cmp":
        _, col, op, c = p
        return _CMP[op][1](pc.field(col), pc.scalar(c))
    if tag == "isnull":
        return pc.field(p[1]).is_null()
    if tag == "isvalid":
        return pc.field(p[1]).is_valid()
    if tag == "isin":
        return pc.field("k").isin(list(p[1]))
    if tag == "not":
        return ~expr(p[1])
    if tag == "and":
        return expr(p[1]) & expr(p[2])
    if tag == "or":
        return expr(p[1]) | expr(p[2])
    raise AssertionError(p)


def ev(p, uid: int, row: Row):
    cols = {"uid": uid, "k": row[0], "v": row[1]}
    tag = p[0]
    if tag == "cmp":
        _, col, op, c = p
        x = cols[col]
        return None if x is None else _CMP[op][0](x, c)
    if tag == "isnull":
        return cols[p[1]] is None
    if tag == "isvalid":
        return cols[p[1]] is not None
    if tag == "isin":
        # Arrow's is_in: a null input is simply "not in" a null-free set.
        return cols["k"] in p[1]
    if tag == "not":
        r = ev(p[1], uid, row)
        return None if r is None else not r
    if tag == "and":
        a, b = ev(p[1], uid, row), ev(p[2], uid, row)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True
    if tag == "or":
        a, b = ev(p[1], uid, row), ev(p[2], uid, row)
        if a is True or b is True:
            return True
        return None if a is None or b is None else False
    raise AssertionError(p)


_ops = st.sampled_from(sorted(_CMP))
_leaf = st.one_of(
    st.tuples(st.just("cmp"), st.just("k"), _ops, st.integers(-2, 3)),
    st.tuples(st.just("cmp"), st.just("v"), _ops, st.sampled_from(["", "a", "b", LONG, LONG + "y", LONG[:32]])),
    st.tuples(st.just("cmp"), st.just("uid"), _ops, st.integers(0, 30)),
    st.tuples(st.sampled_from(["isnull", "isvalid"]), st.sampled_from(["k", "v"])),
    st.tuples(st.just("isin"), st.frozensets(st.integers(-2, 3), min_size=1, max_size=3).map(lambda s: tuple(sorted(s)))),
)
PREDICATES = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.tuples(st.just("not"), inner),
        st.tuples(st.sampled_from(["and", "or"]), inner, inner),
    ),
    max_leaves=3,
)

# ---------------------------------------------------------------- statements
# Set clauses of an UPDATE: column -> ("const", value) or ("k+1",).
SETS = st.one_of(
    st.fixed_dictionaries({"k": st.tuples(st.just("const"), K_VALUES)}),
    st.fixed_dictionaries({"v": st.tuples(st.just("const"), V_VALUES)}),
    st.fixed_dictionaries({"k": st.tuples(st.just("const"), K_VALUES), "v": st.tuples(st.just("const"), V_VALUES)}),
    st.fixed_dictionaries({"k": st.just(("k+1",))}),
)
NEW_ROWS = st.lists(st.tuples(K_VALUES, V_VALUES), max_size=7)


@dataclass(frozen=True)
class Insert:
    rows: list


@dataclass(frozen=True)
class Delete:
    pred: tuple


@dataclass(frozen=True)
class Update:
    pred: tuple | None
    set: dict


@dataclass(frozen=True)
class Merge:
    # entries: ("live", index, k, v) picks a live row by position,
    # ("new", k, v) a fresh uid, ("dead", index, k, v) a uid no longer live.
    entries: list
    mode: tuple  # (when_matched, when_not_matched)
    columns: tuple  # source columns besides uid


@dataclass(frozen=True)
class Truncate:
    pass


@dataclass(frozen=True)
class Overwrite:
    rows: list


_merge_entry = st.one_of(
    st.tuples(st.just("live"), st.integers(0, 50), K_VALUES, V_VALUES),
    st.tuples(st.just("new"), K_VALUES, V_VALUES),
    st.tuples(st.just("dead"), st.integers(0, 50), K_VALUES, V_VALUES),
)
MERGES = st.builds(
    Merge,
    st.lists(_merge_entry, max_size=6),
    st.sampled_from([("update", "insert"), ("delete", None), (None, "insert"), ("update", None)]),
    st.sampled_from([("k", "v"), ("k",), ("v",)]),
)
INSERTS = st.builds(Insert, st.lists(st.tuples(K_VALUES, V_VALUES), min_size=1, max_size=8))
REPLACES = st.one_of(st.just(Truncate()), st.builds(Overwrite, NEW_ROWS))
# Statements inside a transaction; listed twice = drawn more often, so the
# table does not stay empty.
STATEMENTS = st.one_of(
    INSERTS,
    INSERTS,
    st.builds(Delete, PREDICATES),
    st.builds(Update, st.one_of(st.none(), PREDICATES), SETS),
    st.builds(Update, st.one_of(st.none(), PREDICATES), SETS),
    MERGES,
    MERGES,
    REPLACES,
)


class DmlModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="ctfile-model-")
        self.table = ctfile.create_table(self.root, SCHEMA, partition_rows=3)
        self.rows: dict[int, Row] = {}  # the latest committed version
        self.versions: list[dict[int, Row]] = [{}]  # model content of every version
        self.next_uid = 0
        self.dead: list[int] = []  # uids that were live once and are not any more
        self.row_ids: dict[int, int] = {}  # uid -> row id, as first observed
        self.id_owner: dict[int, int] = {}  # row id -> uid
        self.consistent = True  # False while a step runs (and after one failed)
        self.capture = False  # ctfile.changeCapture of the latest version
        self.capture_mode = "off"

    def teardown(self):
        try:
            if self.consistent:
                # Every version, through a table opened afresh from the log.
                fresh = ctfile.open_table(self.root)
                assert fresh.version == len(self.versions) - 1
                for v in range(len(self.versions)):
                    self.check_version(fresh, v)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ model semantics

    def _fresh_uid(self) -> int:
        self.next_uid += 1
        return self.next_uid - 1

    def apply(self, stmt, work: dict[int, Row]):
        """Apply ``stmt`` to ``work`` (in place); return the counts the real
        statement must report, plus the pyarrow-level arguments to run it."""
        if isinstance(stmt, (Insert, Overwrite)):
            n_deleted = 0
            if isinstance(stmt, Overwrite):
                n_deleted = len(work)
                work.clear()
            uids = [self._fresh_uid() for _ in stmt.rows]
            for uid, (k, v) in zip(uids, stmt.rows):
                work[uid] = (k, v, None)
            data = pa.table(
                {"uid": uids, "k": [r[0] for r in stmt.rows], "v": [r[1] for r in stmt.rows]}, schema=SCHEMA
            )
            return {"inserted": len(uids), "deleted": n_deleted}, data
        if isinstance(stmt, Truncate):
            n = len(work)
            work.clear()
            return {"deleted": n}, None
        if isinstance(stmt, Delete):
            gone = [u for u, r in work.items() if ev(stmt.pred, u, r) is True]
            for u in gone:
                del work[u]
            return {"deleted": len(gone)}, expr(stmt.pred)
        if isinstance(stmt, Update):
            changed = 0
            for u, (k, v, rv) in list(work.items()):
                if stmt.pred is not None and ev(stmt.pred, u, (k, v, rv)) is not True:
                    continue
                nk, nv = k, v
                for col, how in stmt.set.items():
                    if how[0] == "k+1":
                        val = None if k is None else k + 1
                    else:
                        val = how[1]
                    if col == "k":
                        nk = val
                    else:
                        nv = val
                if (nk, nv) != (k, v):
                    work[u] = (nk, nv, None)
                    changed += 1
            sets = {
                col: (pc.field("k") + 1 if how[0] == "k+1" else how[1]) for col, how in stmt.set.items()
            }
            return {"updated": changed}, (None if stmt.pred is None else expr(stmt.pred), sets)
        if isinstance(stmt, Merge):
            return self._apply_merge(stmt, work)
        raise AssertionError(stmt)

    def _apply_merge(self, stmt: Merge, work: dict[int, Row]):
        matched_mode, not_matched_mode = stmt.mode
        live = sorted(work)
        source: dict[int, tuple] = {}  # uid -> (k, v); one row per key
        for e in stmt.entries:
            if e[0] == "live":
                if not live:
                    continue
                uid, k, v = live[e[1] % len(live)], e[2], e[3]
            elif e[0] == "dead":
                # A dead uid would be re-inserted under its old name; only use
                # it where unmatched source rows are ignored.
                if not self.dead or not_matched_mode == "insert":
                    continue
                uid, k, v = self.dead[e[1] % len(self.dead)], e[2], e[3]
            else:
                if not_matched_mode != "insert":
                    continue  # fresh uids are only useful for inserts
                uid, k, v = self._fresh_uid(), e[1], e[2]
            if uid not in source:
                source[uid] = (k, v)
        counts = {"inserted": 0, "updated": 0, "deleted": 0}
        for uid, (k, v) in source.items():
            # A source without a column reads it as null for inserts and
            # leaves it alone for updates.
            sk = k if "k" in stmt.columns else None
            sv = v if "v" in stmt.columns else None
            if uid in work:
                ok, ov, orv = work[uid]
                if matched_mode == "delete":
                    del work[uid]
                    counts["deleted"] += 1
                elif matched_mode == "update":
                    nk = sk if "k" in stmt.columns else ok
                    nv = sv if "v" in stmt.columns else ov
                    if (nk, nv) != (ok, ov):
                        work[uid] = (nk, nv, None)
                        counts["updated"] += 1
            elif not_matched_mode == "insert":
                work[uid] = (sk, sv, None)
                counts["inserted"] += 1
        uids = list(source)
        cols = {"uid": pa.array(uids, pa.int64())}
        if "k" in stmt.columns:
            cols["k"] = pa.array([source[u][0] for u in uids], pa.int64())
        if "v" in stmt.columns:
            cols["v"] = pa.array([source[u][1] for u in uids], pa.string())
        src = pa.table(cols, schema=pa.schema([SCHEMA.field(c) for c in cols]))
        return counts, src

    @staticmethod
    def run_in_tx(tx, stmt, arg):
        """Run one statement inside an open transaction; return its counts."""
        if isinstance(stmt, Insert):
            return {"inserted": tx.insert(arg)}
        if isinstance(stmt, Overwrite):
            return {"deleted": tx.truncate(), "inserted": tx.insert(arg)}
        if isinstance(stmt, Truncate):
            return {"deleted": tx.truncate()}
        if isinstance(stmt, Delete):
            return {"deleted": tx.delete(arg)}
        if isinstance(stmt, Update):
            return {"updated": tx.update(arg[0], arg[1])}
        if isinstance(stmt, Merge):
            m, nm = stmt.mode
            return dict(tx.merge(arg, "uid", when_matched=m, when_not_matched=nm))
        raise AssertionError(stmt)

    def run_alone(self, stmt, arg) -> ctfile.CommitResult:
        t = self.table
        if isinstance(stmt, Insert):
            return t.insert(arg)
        if isinstance(stmt, Overwrite):
            return t.overwrite(arg)
        if isinstance(stmt, Truncate):
            return t.truncate()
        if isinstance(stmt, Delete):
            return t.delete(arg)
        if isinstance(stmt, Update):
            return t.update(arg[0], arg[1])
        if isinstance(stmt, Merge):
            m, nm = stmt.mode
            return t.merge(arg, "uid", when_matched=m, when_not_matched=nm)
        raise AssertionError(stmt)

    def finish(self, work: dict[int, Row], result: ctfile.CommitResult, label: str) -> None:
        """Compare the commit decision with the model's and record the version."""
        base_version = len(self.versions) - 1
        event(f"{label}: {'committed' if result.committed else 'no commit'}")
        # The statement commits iff a row of the base version went away or
        # some row was really written (inserted or changed: row version None).
        expect_commit = bool(set(self.rows) - set(work)) or any(r[2] is None for r in work.values())
        assert result.committed == expect_commit, (result, work, self.rows)
        if not expect_commit:
            assert result.version == base_version
            assert self.table.version == base_version
            assert not self.table.storage.exists(commit_path(base_version + 1))
            self.consistent = True
            return
        new_version = base_version + 1
        assert result.version == new_version
        assert self.table.version == new_version
        self.check_change_capture(new_version, self.rows, work)
        self.dead.extend(u for u in self.rows if u not in work)
        self.rows = {u: (k, v, new_version if rv is None else rv) for u, (k, v, rv) in work.items()}
        self.versions.append(dict(self.rows))
        self.consistent = True

    def check_change_capture(self, version: int, old: dict[int, Row], new: dict[int, Row]) -> None:
        """The commit ``version`` (read version: ``old``; result: ``new``) is
        captured exactly when capture was on, and its images are the model's."""
        entry = self.table.log.read_entry(version)
        changes = [a for a in entry if isinstance(a, ChangeFile)]
        whole = [a for a in entry if isinstance(a, RemovePartition) and a.deletes_all_rows]
        if not self.capture:
            assert not changes and not whole, f"version {version}: capture off, but {changes + whole}"
            return
        storage = self.table.storage
        got = []  # (uid, k, v, row id, row version, change type)
        for c in changes:
            t = pa.parquet.read_table(pa.BufferReader(storage.read_bytes(c.path)))
            assert t.num_rows == c.num_records
            check_change_rows(t, uri=self.root, path=c.path, version=version)
            got += [tuple(r.values()) for r in t.to_pylist()]
        schema = self.table.log.load_state(version).metadata.schema
        for rm in whole:  # its own change file: every row an old image (SPEC §Change capture)
            t = read_partition_table(storage, rm.partition, schema, hidden=True)
            got += [tuple(r.values()) + ("delete",) for r in t.to_pylist()]
        want = []
        for uid, (k, v, rv) in old.items():
            rid = self.row_ids[uid]
            if uid not in new:
                want.append((uid, k, v, rid, rv, "delete"))
            elif new[uid][2] is None and new[uid][:2] != (k, v):
                want.append((uid, k, v, rid, rv, "update_preimage"))
                want.append((uid, *new[uid][:2], rid, None, "update_postimage"))
        # Pairs stay adjacent (checked per file above); compare as multisets.
        assert sorted(got, key=repr) == sorted(want, key=repr), f"version {version}:\n got={got}\nwant={want}"

    def set_capture(self, on: bool) -> None:
        """Switch ``ctfile.changeCapture``: a metadata-only commit."""
        self.consistent = False
        r = self.table.set_properties({"ctfile.changeCapture": "before_after" if on else "none"})
        assert r.committed and r.version == len(self.versions)
        self.capture = on
        self.versions.append(dict(self.rows))
        self.consistent = True

    # ------------------------------------------------------------ rules

    @initialize(mode=st.sampled_from(["off", "on", "switched"]))
    def choose_capture(self, mode):
        self.capture_mode = mode
        if mode == "on":
            self.set_capture(True)

    @precondition(lambda self: self.capture_mode == "switched")
    @rule()
    def switch_capture(self):
        self.set_capture(not self.capture)

    def single(self, stmt) -> None:
        """Run one statement on its own (one version, or none if nothing changes)."""
        self.consistent = False
        work = dict(self.rows)
        counts, arg = self.apply(stmt, work)
        result = self.run_alone(stmt, arg)
        got = (result.num_inserted_rows, result.num_deleted_rows, result.num_updated_rows)
        want = tuple(counts.get(key, 0) for key in ("inserted", "deleted", "updated"))
        assert got == want, (stmt, result, counts)
        self.finish(work, result, type(stmt).__name__)

    @initialize(rows=st.lists(st.tuples(K_VALUES, V_VALUES), min_size=3, max_size=12))
    def seed(self, rows):
        self.single(Insert(rows))

    @rule(stmt=INSERTS)
    def insert(self, stmt):
        self.single(stmt)

    @rule(pred=PREDICATES)
    def delete(self, pred):
        self.single(Delete(pred))

    @rule(pred=st.one_of(st.none(), PREDICATES), set_=SETS)
    def update(self, pred, set_):
        self.single(Update(pred, set_))

    @rule(merge=MERGES)
    def merge(self, merge):
        self.single(merge)

    @rule(stmt=REPLACES)
    def truncate_or_overwrite(self, stmt):
        self.single(stmt)

    @rule(pick=st.integers(0, 50))
    def noop_update(self, pick):
        """Set a row's columns to the values it already has: nothing commits."""
        self.consistent = False
        if self.rows:
            uid = sorted(self.rows)[pick % len(self.rows)]
            k, v, _ = self.rows[uid]
        else:
            uid, k, v = -1, 0, "a"
        result = self.table.update(pc.field("uid") == uid, {"k": k, "v": v})
        assert result.num_updated_rows == 0
        self.finish(dict(self.rows), result, "no-op update")

    @rule(stmts=st.lists(STATEMENTS, min_size=1, max_size=4))
    def transaction(self, stmts):
        self.consistent = False
        work = dict(self.rows)
        totals = {"inserted": 0, "deleted": 0, "updated": 0}
        with self.table.transaction() as tx:
            for stmt in stmts:
                counts, arg = self.apply(stmt, work)
                got = self.run_in_tx(tx, stmt, arg)
                for key, n in got.items():
                    assert n == counts.get(key, 0), (stmt, got, counts)
                for key in totals:
                    totals[key] += counts.get(key, 0)
        assert tx.result is not None
        r = tx.result
        assert (r.num_inserted_rows, r.num_deleted_rows, r.num_updated_rows) == tuple(totals.values()), (r, totals)
        self.finish(work, tx.result, f"transaction of {len(stmts)}")

    # ------------------------------------------------------------ invariants

    @invariant()
    def latest_matches_model(self):
        self.consistent = False
        self.check_version(self.table, len(self.versions) - 1)
        self.consistent = True

    def check_version(self, table: ctfile.Table, version: int) -> None:
        model = self.versions[version]
        snap = table.snapshot(version)
        assert snap.version == version
        t = snap.to_arrow(include_hidden=True)
        uids = t.column("uid").to_pylist()
        ks = t.column("k").to_pylist()
        vs = t.column("v").to_pylist()
        rids = t.column(ctfile.ROW_ID_COLUMN).to_pylist()
        rvs = t.column(ctfile.ROW_VERSION_COLUMN).to_pylist()
        got = sorted(zip(uids, ks, vs, rvs), key=repr)
        want = sorted(((u, k, v, rv) for u, (k, v, rv) in model.items()), key=repr)
        assert got == want, f"version {version}: snapshot != model\n got={got}\nwant={want}"
        # The ordinary (non-hidden) read agrees.
        plain = snap.to_arrow()
        assert sorted(zip(*(plain.column(c).to_pylist() for c in ("uid", "k", "v"))), key=repr) == sorted(
            ((u, k, v) for u, k, v, _ in got), key=repr
        )
        assert None not in rids and None not in rvs
        assert len(set(rids)) == len(rids), f"version {version}: duplicate row ids {rids}"
        for uid, rid in zip(uids, rids):
            first = self.row_ids.setdefault(uid, rid)
            assert first == rid, f"uid {uid}: row id {rid} at version {version}, {first} elsewhere"
            owner = self.id_owner.setdefault(rid, uid)
            assert owner == uid, f"row id {rid} is uid {uid} at version {version} and uid {owner} elsewhere"
        # The log lists exactly the committed versions, densely.
        if version == len(self.versions) - 1:
            assert not table.storage.exists(commit_path(version + 1))
            assert sum(p.num_records for p in snap.partitions) == len(model)
            for p in snap.partitions:
                assert p.num_records > 0, f"empty partition {p.path} at version {version}"
                assert p.first_row_id >= 0 and p.default_row_version <= version


DmlModel.TestCase.settings = settings(
    max_examples=35,
    stateful_step_count=15,
    deadline=None,
    report_multiple_bugs=False,
    # No explain phase: it re-runs the failing history many times (slow here).
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestDmlModel = DmlModel.TestCase

