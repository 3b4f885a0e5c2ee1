"""Property test of RESTORE against a model (SPEC §Restore; §Change scans).

Hypothesis draws a history on a real table with tiny micro-partitions:
INSERT, UPDATE, DELETE and MERGE statements, compactions, added columns
(``update_schema().add_column``) and RESTOREs to a drawn earlier version,
in between and at the end. Change capture is off, on from the start, or
switched on at a drawn step. A small model keeps the rows of every version
(by ``uid``, a column the test assigns and never updates) and, per version,
the rows it inserted with the values it inserted them with.

Checked, through a freshly opened table:

* every snapshot equals the model's rows;
* a RESTORE of version V makes a snapshot equal to V's, user and hidden
  columns (row ids, row versions), or commits nothing when the table
  already is V; a V whose schema holds a column a later RESTORE dropped
  is refused with ``SchemaMismatchError`` and commits nothing;
* the change scan of every interval [a, b] that holds a RESTORE (and of
  every interval ending at the last version) equals the model's
  difference: ``default`` is the difference of the snapshots at a - 1 and
  b, by row id, old images projected by field id into the schema of b
  (a DELETE per row only before, an INSERT per row only after, an update
  pair per row whose values differ, nothing else); ``audit`` is that of
  each commit of the interval, tagged with it; ``append_only`` is the rows
  the model inserted in the interval, as inserted (a RESTORE inserts none).
  Every scan that reads change files equals the same scan planned from
  partitions (``change_checks.scan_rows``).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as _event
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st

import ctfile
from ctfile.reader.row_ids import row_id_strings, table_seed

from change_checks import ACTION, CVERSION, ISUPDATE, ROW_ID, check_pairs_adjacent, scan_rows, srt

BASE = pa.schema([pa.field("uid", pa.int64(), nullable=False), pa.field("k", pa.int64()), pa.field("v", pa.string())])
CAPTURE = {"ctfile.changeCapture": "before_after"}
K = st.one_of(st.none(), st.integers(-1, 3))
V = st.sampled_from([None, "a", "b", "c"])
ROWS = st.lists(st.tuples(K, V, V), min_size=1, max_size=5)  # k, v, and a value for the last added column
PRED = st.one_of(
    st.tuples(st.just("k<"), st.integers(-1, 4)),
    st.tuples(st.just("v=="), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("pick"), st.lists(st.integers(0, 30), min_size=1, max_size=3)),
)


@dataclass(frozen=True)
class Op:
    kind: str
    args: tuple = ()


OPS = st.one_of(
    st.builds(Op, st.just("insert"), st.tuples(ROWS)),
    st.builds(Op, st.just("delete"), st.tuples(PRED)),
    st.builds(Op, st.just("update"), st.tuples(PRED, st.sampled_from(["k", "v", "last"]), V)),
    st.builds(Op, st.just("merge"), st.tuples(st.lists(st.tuples(st.booleans(), st.integers(0, 30), K, V), min_size=1, max_size=4))),
    st.just(Op("add_column")),
    st.just(Op("compact")),
    st.builds(Op, st.just("restore"), st.tuples(st.floats(0, 0.999))),
)
HISTORIES = st.tuples(st.lists(OPS, min_size=3, max_size=8), st.floats(0, 0.999))
CAPTURES = st.one_of(st.just("off"), st.just("on"), st.integers(0, 6))


def event(text: str) -> None:
    """Hypothesis's ``event``, a no-op outside a hypothesis test."""
    try:
        _event(text)
    except InvalidArgument:
        pass


class History:
    """Runs the drawn operations on a real table and on the model."""

    def __init__(self, root: str, *, capture: bool):
        self.table = ctfile.create_table(root, BASE, partition_rows=2, properties=CAPTURE if capture else None)
        self.columns = ["uid", "k", "v"]
        self.live: dict[int, dict] = {}  # uid -> {column: value}
        self.at: dict[int, tuple[list[str], dict]] = {0: (list(self.columns), {})}  # version -> (columns, rows)
        self.inserted: dict[int, dict[int, dict]] = {0: {}}  # version -> {uid: values as inserted}
        self.restores: list[int] = []  # versions that are RESTOREs
        self.next_uid = 0

    # ------------------------------------------------------------ operations

    def _fresh(self, k, v, w) -> dict:
        row = {"uid": self.next_uid, "k": k, "v": v}
        self.next_uid += 1
        for c in self.columns[3:]:
            row[c] = w if c == self.columns[-1] else None
        return row

    def _selects(self, pred, row: dict) -> bool:
        kind, arg = pred
        if kind == "k<":
            return row["k"] is not None and row["k"] < arg
        if kind == "v==":
            return row["v"] == arg
        live = sorted(self.live)
        return bool(live) and row["uid"] in {live[i % len(live)] for i in arg}

    def _expr(self, pred) -> pc.Expression:
        kind, arg = pred
        if kind == "k<":
            return pc.field("k") < arg
        if kind == "v==":
            return pc.field("v") == arg
        live = sorted(self.live)
        return pc.field("uid").isin([live[i % len(live)] for i in arg] if live else [-1])

    def _arrow(self, rows: list[dict], columns: list[str]) -> pa.Table:
        schema = self.table.schema
        return pa.table({c: [r[c] for r in rows] for c in columns}, schema=pa.schema([schema.field(c) for c in columns]))

    def run(self, op: Op) -> None:
        t, work, new = self.table, {u: dict(r) for u, r in self.live.items()}, {}
        if op.kind == "insert":
            rows = [self._fresh(*r) for r in op.args[0]]
            new = {r["uid"]: dict(r) for r in rows}
            work.update({u: dict(r) for u, r in new.items()})
            result = t.insert(self._arrow(rows, self.columns))
        elif op.kind == "delete":
            pred = op.args[0]
            work = {u: r for u, r in work.items() if not self._selects(pred, r)}
            result = t.delete(self._expr(pred))
        elif op.kind == "update":
            pred, col, value = op.args
            col = self.columns[-1] if col == "last" else col
            value = (len(value) if value else None) if col == "k" else value
            for r in work.values():
                if self._selects(pred, r):
                    r[col] = value
            result = t.update(self._expr(pred), {col: pa.scalar(value, t.schema.field(col).type)})
        elif op.kind == "merge":
            live, source = sorted(work), {}
            for existing, i, k, v in op.args[0]:
                if existing and live:
                    source.setdefault(live[i % len(live)], (k, v))
                elif not existing:
                    source[self._fresh(k, v, None)["uid"]] = (k, v)
            for uid, (k, v) in source.items():
                if uid in work:
                    work[uid].update(k=k, v=v)
                else:
                    work[uid] = new[uid] = {"uid": uid, "k": k, "v": v, **{c: None for c in self.columns[3:]}}
            rows = [{"uid": u, "k": k, "v": v} for u, (k, v) in source.items()]
            result = t.merge(self._arrow(rows, ["uid", "k", "v"]), "uid")
        elif op.kind == "add_column":
            name = f"w{len(self.columns)}"
            with t.update_schema() as u:
                u.add_column(name, pa.string())
            result = u.result
            self.columns.append(name)
            for r in work.values():
                r[name] = None
        elif op.kind == "compact":
            result = t.compact(target_rows=8)
        else:
            return self.restore(op.args[0])
        self._record(result, work, new)

    def restore(self, frac: float) -> None:
        t = self.table
        target = int(frac * (t.version + 1))
        schema_now = {f.id for f in t.schema_at().fields}
        if {f.id for f in t.schema_at(target).fields} - schema_now:
            latest = t.version
            with pytest.raises(ctfile.SchemaMismatchError, match="dropped since"):
                t.restore(version=target)
            assert t.refresh().version == latest
            event("restore refused: a column dropped since")
            return
        before = self.table.version
        result = t.restore(version=target)
        columns, rows = self.at[target]
        self.columns = list(columns)
        if not result.committed:
            event("restore to the current state: nothing committed")
            assert result.version == before
        else:
            self.restores.append(result.version)
        assert hidden(t, result.version) == hidden(t, target), ("restored", target)
        self._record(result, {u: dict(r) for u, r in rows.items()}, {})

    def _record(self, result, work: dict, new: dict) -> None:
        if result is not None and result.committed:
            self.at[result.version] = (list(self.columns), {u: dict(r) for u, r in work.items()})
            self.inserted[result.version] = new
        self.live = work
        got = {r["uid"]: r for r in self.table.snapshot().to_arrow().to_pylist()}
        assert got == self.live, (result, got, self.live)


# ---------------------------------------------------------------- expected changes


def hidden(t: ctfile.Table, v: int) -> list[dict]:
    return t.snapshot(v).to_arrow(include_hidden=True).sort_by("uid").to_pylist()


class Snapshots:
    """Every version's rows keyed by ``METADATA$ROW_ID``, values keyed by field id."""

    def __init__(self, t: ctfile.Table):
        seed = table_seed(t.table_id)
        self.latest = t.version
        self.ids: dict[int, dict[str, int]] = {}  # version -> column name -> field id
        self.rows: dict[int, dict[str, dict[int, object]]] = {}
        self.rid_of_uid: dict[int, str] = {}
        for v in range(self.latest + 1):
            self.ids[v] = {f.name: f.id for f in t.schema_at(v).fields}
            s = t.snapshot(v).to_arrow(include_hidden=True)
            rids = row_id_strings(s.column(ctfile.ROW_ID_COLUMN).combine_chunks(), seed).to_pylist()
            self.rows[v] = {}
            for rid, r in zip(rids, s.drop_columns([ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN]).to_pylist()):
                self.rows[v][rid] = {self.ids[v][c]: x for c, x in r.items()}
                assert self.rid_of_uid.setdefault(r["uid"], rid) == rid, ("row id of uid", v, r)

    def project(self, values: dict, b: int) -> tuple:
        """``values`` (by field id) in the columns of version ``b``."""
        return tuple(values.get(fid) for fid in self.ids[b].values())

    def difference(self, a: int, b: int, *, tag: int | None = None) -> list[tuple]:
        """The minimum delta from version ``a - 1`` to ``b``, in the schema of ``b``."""
        return srt(self.delta(a - 1, b, b, tag=tag))

    def delta(self, x: int, y: int, b: int, *, tag: int | None = None) -> list[tuple]:
        """The rows that differ between versions ``x`` and ``y``, both
        projected into the schema of ``b``: a DELETE per row only at ``x``,
        an INSERT per row only at ``y``, an update pair per row whose
        projected values differ."""
        old, new = self.rows[x], self.rows[y]
        out = []
        for rid in old.keys() | new.keys():
            o = self.project(old[rid], b) if rid in old else None
            n = self.project(new[rid], b) if rid in new else None
            if o == n:
                continue
            pair = o is not None and n is not None
            if o is not None:
                out.append((rid, "DELETE", pair, o, tag))
            if n is not None:
                out.append((rid, "INSERT", pair, n, tag))
        return out


def as_rows(got: list[dict], snaps: Snapshots, b: int) -> list[tuple]:
    names = list(snaps.ids[b])
    return srt((r[ROW_ID], r[ACTION], r[ISUPDATE], tuple(r[c] for c in names), r.get(CVERSION)) for r in got)


def check_interval(h: History, t: ctfile.Table, snaps: Snapshots, a: int, b: int) -> None:
    ctx = (a, b, h.restores)
    got = scan_rows(t, ctx, start_version=a, end_version=b)
    assert as_rows(got, snaps, b) == snaps.difference(a, b), (ctx, "default")
    check_pairs_adjacent(got, ctx)
    audit = scan_rows(t, ctx, start_version=a, end_version=b, information="audit")
    want = srt(row for v in range(a, b + 1) for row in snaps.delta(v - 1, v, b, tag=v))
    assert as_rows(audit, snaps, b) == want, (ctx, "audit")
    ao = t.changes(start_version=a, end_version=b, information="append_only").to_arrow().to_pylist()
    names = list(snaps.ids[b])
    want_ao = srt(  # the values each row was inserted with, by field id, in the schema of b
        (snaps.rid_of_uid[u], snaps.project({snaps.ids[v][c]: x for c, x in row.items()}, b))
        for v in range(a, b + 1) for u, row in h.inserted.get(v, {}).items()
    )
    assert srt((r[ROW_ID], tuple(r[c] for c in names)) for r in ao) == want_ao, (ctx, "append_only")


def check_history(h: History) -> int:
    t = ctfile.open_table(h.table.uri)  # read through a fresh handle
    snaps = Snapshots(t)
    latest = t.version
    checked = 0
    for a in range(1, latest + 1):
        for b in range(a, latest + 1):
            if b == latest or any(a <= r <= b for r in h.restores):
                check_interval(h, t, snaps, a, b)
                checked += 1
    assert ctfile.verify_table(t.uri, all_versions=True).healthy
    return checked


def run_history(history, capture) -> History:
    ops, final = history
    with tempfile.TemporaryDirectory(prefix="ctfile-restore-") as root:
        h = History(root, capture=capture == "on")
        for i, op in enumerate(ops):
            if i == capture:
                h._record(h.table.set_properties(CAPTURE), {u: dict(r) for u, r in h.live.items()}, {})
            h.run(op)
        h.restore(final)
        event(f"restores committed: {len(h.restores)}")
        check_history(h)
        return h


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=8, **SETTINGS)
@given(history=HISTORIES, capture=CAPTURES)
def test_restore_matches_the_model(history, capture):
    run_history(history, capture)


@pytest.mark.long
@settings(max_examples=300, **SETTINGS)
@given(history=HISTORIES, capture=CAPTURES)
def test_restore_matches_the_model_long(history, capture):
    run_history(history, capture)


def test_a_restore_between_every_kind_of_statement():
    """One fixed history with every operation and a RESTORE after each, so
    that the default run covers them all whatever hypothesis draws."""
    ops = [
        Op("insert", ([(1, "a", None), (2, "b", None), (3, None, None)],)),
        Op("update", (("k<", 3), "v", "c")), Op("restore", (0.5,)),
        Op("add_column"), Op("insert", ([(0, "a", "x")],)), Op("delete", (("pick", [0, 2]),)),
        Op("merge", ([(True, 1, 2, "b"), (False, 0, 3, None)],)), Op("restore", (0.3,)),
        Op("compact"), Op("update", (("v==", "a"), "last", "y")), Op("restore", (0.85,)),
    ]
    h = run_history((ops, 0.6), capture="off")
    assert len(h.restores) >= 3
    assert Counter(op.kind for op in ops)["restore"] == 3
