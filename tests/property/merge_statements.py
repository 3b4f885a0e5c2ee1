"""Random MERGE statements, and a model of what they do (SPEC
§Copy-on-write, MERGE), for the property tests of every MERGE front end.

A generated statement is plain data (:class:`Statement`): ordered
:class:`Clause` objects whose conditions and values are small expression
trees (:class:`Col`, :class:`Lit`, :class:`Cmp`, :class:`Add`,
:class:`IsNull`, :class:`Logic`, :class:`Not`). Each tree renders
itself as a pyarrow expression (``to_arrow``, for ``Table.merge_builder``)
and as Spark SQL text (``to_sql``, for ``ctfile.spark`` and ``MERGE INTO``),
and evaluates itself on a row pair with SQL's three-valued logic
(``eval``). :func:`run_model` applies a statement to lists of dicts, in
plain Python, as the SPEC's text says: the first clause of its kind whose
condition is true applies; a table row matched twice where one pair falls
to an UPDATE is an error (:class:`MultipleMatch`).

Tables: the target has ``k`` (the key), ``a`` (long) and ``b`` (string);
the source ``k``, ``a``, ``c`` (long) and ``op`` (string). Keys repeat and
are null on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import strategies as st

from ctfile import MatchKind, MergeAction

TARGET_SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("b", pa.string())])
SOURCE_SCHEMA = pa.schema([("k", pa.int64()), ("a", pa.int64()), ("c", pa.int64()), ("op", pa.string())])
COLUMNS = {"t": {"k": "int", "a": "int", "b": "str"}, "s": {"k": "int", "a": "int", "c": "int", "op": "str"}}
SIDES = {MatchKind.MATCHED: ("t", "s"), MatchKind.NOT_MATCHED: ("s",), MatchKind.NOT_MATCHED_BY_SOURCE: ("t",)}
STRINGS = ["x", "y", "d"]
INTS = st.integers(-2, 3)

# ---------------------------------------------------------------- expressions


def _sql_literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


@dataclass(frozen=True)
class Col:
    side: str  # "t" or "s"
    name: str
    qualified: bool = True

    def to_arrow(self) -> pc.Expression:
        return pc.field(self.to_sql())

    def to_sql(self) -> str:
        return f"{self.side}.{self.name}" if self.qualified else self.name

    def eval(self, t: dict | None, s: dict | None) -> Any:
        return (t if self.side == "t" else s)[self.name]


@dataclass(frozen=True)
class Lit:
    value: Any
    raw: bool = False  # as a SET/VALUES value: a Python value, not an Expression

    def to_arrow(self) -> pc.Expression:
        return pc.scalar(self.value)

    def to_value(self) -> Any:
        return self.value if self.raw else self.to_arrow()

    def to_sql(self) -> str:
        return _sql_literal(self.value)

    def eval(self, t, s) -> Any:
        return self.value


_OPS = {
    "==": ("=", lambda x, y: x == y), "!=": ("<>", lambda x, y: x != y), "<": ("<", lambda x, y: x < y),
    "<=": ("<=", lambda x, y: x <= y), ">": (">", lambda x, y: x > y), ">=": (">=", lambda x, y: x >= y),
}


@dataclass(frozen=True)
class Cmp:
    op: str
    left: Any
    right: Any

    def to_arrow(self) -> pc.Expression:
        a, b = self.left.to_arrow(), self.right.to_arrow()
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]

    def to_sql(self) -> str:
        return f"({self.left.to_sql()} {_OPS[self.op][0]} {self.right.to_sql()})"

    def eval(self, t, s) -> bool | None:
        a, b = self.left.eval(t, s), self.right.eval(t, s)
        return None if a is None or b is None else _OPS[self.op][1](a, b)


@dataclass(frozen=True)
class Add:
    left: Any
    right: Any

    def to_arrow(self) -> pc.Expression:
        return self.left.to_arrow() + self.right.to_arrow()

    def to_value(self) -> Any:
        return self.to_arrow()

    def to_sql(self) -> str:
        return f"({self.left.to_sql()} + {self.right.to_sql()})"

    def eval(self, t, s) -> Any:
        a, b = self.left.eval(t, s), self.right.eval(t, s)
        return None if a is None or b is None else a + b


@dataclass(frozen=True)
class IsNull:
    arg: Any

    def to_arrow(self) -> pc.Expression:
        return self.arg.to_arrow().is_null()

    def to_sql(self) -> str:
        return f"({self.arg.to_sql()} IS NULL)"

    def eval(self, t, s) -> bool:
        return self.arg.eval(t, s) is None


@dataclass(frozen=True)
class Logic:
    """``left AND right`` or ``left OR right`` (Kleene logic, as SQL's)."""

    op: str  # "AND" or "OR"
    left: Any
    right: Any

    def to_arrow(self) -> pc.Expression:
        a, b = self.left.to_arrow(), self.right.to_arrow()
        return a & b if self.op == "AND" else a | b

    def to_sql(self) -> str:
        return f"({self.left.to_sql()} {self.op} {self.right.to_sql()})"

    def eval(self, t, s) -> bool | None:
        a, b = self.left.eval(t, s), self.right.eval(t, s)
        decisive = self.op == "OR"  # the value that decides alone: True for OR, False for AND
        if a is decisive or b is decisive:
            return decisive
        return None if a is None or b is None else not decisive


@dataclass(frozen=True)
class Not:
    arg: Any

    def to_arrow(self) -> pc.Expression:
        return ~self.arg.to_arrow()

    def to_sql(self) -> str:
        return f"(NOT {self.arg.to_sql()})"

    def eval(self, t, s) -> bool | None:
        v = self.arg.eval(t, s)
        return None if v is None else not v


def refs(sides: tuple[str, ...], typ: str) -> list[Col]:
    """The column references of type ``typ`` a clause seeing ``sides`` may
    write: qualified always, unqualified where only one side has the name."""
    out = []
    for side in sides:
        for name, t in COLUMNS[side].items():
            if t != typ:
                continue
            out.append(Col(side, name))
            if sum(name in COLUMNS[o] for o in sides) == 1:
                out.append(Col(side, name, qualified=False))
    return out


@st.composite
def comparisons(draw, sides: tuple[str, ...]):
    typ = draw(st.sampled_from(["int", "int", "str"]))
    cols = refs(sides, typ)
    if not cols:
        typ, cols = "int", refs(sides, "int")
    left = draw(st.sampled_from(cols))
    lit = Lit(draw(INTS) if typ == "int" else draw(st.sampled_from(STRINGS)))
    right = draw(st.one_of(st.just(lit), st.sampled_from(cols)))
    if draw(st.booleans()) and typ == "int":
        left = Add(left, Lit(draw(INTS)))
    return draw(st.one_of(st.builds(Cmp, st.sampled_from(sorted(_OPS)), st.just(left), st.just(right)),
                          st.just(IsNull(left))))


def conditions(sides: tuple[str, ...]):
    return st.recursive(
        comparisons(sides),
        lambda inner: st.one_of(st.builds(Logic, st.sampled_from(["AND", "OR"]), inner, inner), st.builds(Not, inner)),
        max_leaves=3,
    )


@st.composite
def values(draw, sides: tuple[str, ...], typ: str):
    """A SET or VALUES value of type ``typ`` over ``sides``."""
    cols = refs(sides, typ)
    lit = st.builds(Lit, (INTS if typ == "int" else st.sampled_from(STRINGS)) | st.none(), st.booleans())
    options = [lit, st.sampled_from(cols)] if cols else [lit]
    if typ == "int" and cols:
        options.append(st.builds(Add, st.sampled_from(cols), st.sampled_from(cols) | st.builds(Lit, INTS)))
    return draw(st.one_of(*options))


# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Clause:
    kind: MatchKind
    action: MergeAction
    condition: Any = None
    assignments: tuple = ()  # ((target column, value node), ...)

    def to_sql(self) -> str:
        kind = {MatchKind.MATCHED: "WHEN MATCHED", MatchKind.NOT_MATCHED: "WHEN NOT MATCHED",
                MatchKind.NOT_MATCHED_BY_SOURCE: "WHEN NOT MATCHED BY SOURCE"}[self.kind]
        cond = "" if self.condition is None else f" AND {self.condition.to_sql()}"
        if self.action is MergeAction.UPDATE:
            action = "UPDATE SET " + ", ".join(f"{c} = {v.to_sql()}" for c, v in self.assignments)
        elif self.action is MergeAction.INSERT:
            cols = ", ".join(c for c, _ in self.assignments)
            action = f"INSERT ({cols}) VALUES ({', '.join(v.to_sql() for _, v in self.assignments)})"
        else:
            action = {MergeAction.UPDATE_ALL: "UPDATE SET *", MergeAction.INSERT_ALL: "INSERT *",
                      MergeAction.DELETE: "DELETE"}[self.action]
        return f"{kind}{cond} THEN {action}"


@dataclass(frozen=True)
class Statement:
    clauses: tuple[Clause, ...]
    on_condition: Any = None
    keys: tuple[str, ...] = ("k",)

    def builder(self, table, source):
        """``table.merge_builder`` of ``source`` with this statement."""
        on_condition = None if self.on_condition is None else self.on_condition.to_arrow()
        return self.build(table.merge_builder(source, on=list(self.keys), on_condition=on_condition))

    def build(self, builder):
        """``builder`` (``Table.merge_builder(...)``) with the clauses added."""
        for c in self.clauses:
            cond = None if c.condition is None else c.condition.to_arrow()
            assigned = {col: v.to_value() if hasattr(v, "to_value") else v.to_arrow() for col, v in c.assignments}
            if c.kind is MatchKind.MATCHED:
                builder = {MergeAction.UPDATE: lambda: builder.when_matched_update(assigned, condition=cond),
                           MergeAction.UPDATE_ALL: lambda: builder.when_matched_update_all(condition=cond),
                           MergeAction.DELETE: lambda: builder.when_matched_delete(condition=cond)}[c.action]()
            elif c.kind is MatchKind.NOT_MATCHED:
                builder = {MergeAction.INSERT: lambda: builder.when_not_matched_insert(assigned, condition=cond),
                           MergeAction.INSERT_ALL: lambda: builder.when_not_matched_insert_all(condition=cond)}[c.action]()
            else:
                builder = {MergeAction.UPDATE: lambda: builder.when_not_matched_by_source_update(assigned, condition=cond),
                           MergeAction.DELETE: lambda: builder.when_not_matched_by_source_delete(condition=cond)}[c.action]()
        return builder

    def on_sql(self) -> str:
        on = " AND ".join(f"t.{k} = s.{k}" for k in self.keys)
        return on if self.on_condition is None else f"{on} AND {self.on_condition.to_sql()}"

    def to_sql(self, target: str, source: str) -> str:
        """``MERGE INTO target t USING source s ON ... WHEN ...`` (Spark SQL)."""
        return " ".join([f"MERGE INTO {target} t USING {source} s ON {self.on_sql()}"] + [c.to_sql() for c in self.clauses])


@st.composite
def clauses_of(draw, kind: MatchKind):
    """Zero to two clauses of ``kind``; only the last may be unconditional."""
    sides = SIDES[kind]
    n = draw(st.integers(0, 2))
    out = []
    for i in range(n):
        action = draw(st.sampled_from(kind.actions))
        last = i == n - 1
        cond = draw(conditions(sides) | st.none()) if last else draw(conditions(sides))
        assignments = ()
        if action.assigns:
            cols = draw(st.lists(st.sampled_from(["k", "a", "b"]), min_size=1, max_size=3, unique=True))
            assignments = tuple((c, draw(values(sides, COLUMNS["t"][c]))) for c in cols)
        out.append(Clause(kind, action, cond, assignments))
    return out


@st.composite
def statements(draw):
    per_kind = {k: draw(clauses_of(k)) for k in MatchKind}
    if not any(per_kind.values()):
        per_kind[MatchKind.MATCHED] = [Clause(MatchKind.MATCHED, MergeAction.UPDATE_ALL)]
    # Interleave the kinds in a random order, each kind's clauses in order.
    order = draw(st.permutations([k for k, cs in per_kind.items() for _ in cs]))
    taken = {k: iter(cs) for k, cs in per_kind.items()}
    on = draw(st.none() | st.none() | conditions(("t", "s")))
    return Statement(tuple(next(taken[k]) for k in order), on)


TARGET_ROWS = st.lists(st.fixed_dictionaries({
    "k": st.none() | st.integers(0, 4), "a": st.none() | INTS, "b": st.none() | st.sampled_from(STRINGS),
}), max_size=9)
SOURCE_ROWS = st.lists(st.fixed_dictionaries({
    "k": st.none() | st.integers(0, 5), "a": st.none() | INTS, "c": st.none() | INTS,
    "op": st.none() | st.sampled_from(STRINGS),
}), max_size=6)


# ---------------------------------------------------------------- the model


@dataclass
class MultipleMatch(Exception):
    key: Any
    count: int


@dataclass
class Outcome:
    """What the statement does: per target row (by index) its new values
    (None: deleted) and whether they changed; the inserted rows."""

    rows: list[dict | None]
    changed: list[bool]
    inserted: list[dict] = field(default_factory=list)

    @property
    def counts(self) -> tuple[int, int, int]:
        """(inserted, updated, deleted)."""
        deleted = sum(r is None for r in self.rows)
        return len(self.inserted), sum(self.changed) - deleted, deleted


def _holds(cond, t, s) -> bool:
    return cond is None or cond.eval(t, s) is True


def _first(clauses, t, s) -> Clause | None:
    return next((c for c in clauses if _holds(c.condition, t, s)), None)


def _assign(clause: Clause, t: dict | None, s: dict | None, base: dict, keys) -> dict:
    new = dict(base)
    if clause.action is MergeAction.UPDATE_ALL:
        new.update({c: s[c] for c in base if c in s and c not in keys})
    elif clause.action is MergeAction.INSERT_ALL:
        new.update({c: s[c] for c in base if c in s})
    else:
        new.update({c: v.eval(t, s) for c, v in clause.assignments})
    return new


def _matches(stmt: Statement, t: dict, s: dict) -> bool:
    keyed = all(t[k] is not None and s[k] is not None and t[k] == s[k] for k in stmt.keys)
    return keyed and _holds(stmt.on_condition, t, s)


def run_model(stmt: Statement, target: list[dict], source: list[dict]) -> Outcome:
    """``stmt`` applied to ``target`` with ``source``, per SPEC
    §Copy-on-write, MERGE; raises :class:`MultipleMatch`."""
    of = {k: [c for c in stmt.clauses if c.kind is k] for k in MatchKind}
    pairs = {i: [j for j, s in enumerate(source) if _matches(stmt, t, s)] for i, t in enumerate(target)}
    rows, changed = [], []
    for i, t in enumerate(target):
        if pairs[i]:
            applied = [(_first(of[MatchKind.MATCHED], t, source[j]), j) for j in pairs[i]]
            if len(applied) > 1 and any(c is not None and c.action.updates for c, _ in applied):
                raise MultipleMatch({k: t[k] for k in stmt.keys}, len(applied))
            new = _pair_result(applied, t, source, stmt.keys)
        else:
            c = _first(of[MatchKind.NOT_MATCHED_BY_SOURCE], t, None)
            new = t if c is None else None if c.action is MergeAction.DELETE else _assign(c, t, None, t, stmt.keys)
        rows.append(new)
        changed.append(new is None or new != t)
    matched_sources = {j for js in pairs.values() for j in js}
    inserted = []
    empty = {name: None for name in TARGET_SCHEMA.names}
    for j, s in enumerate(source):
        c = None if j in matched_sources else _first(of[MatchKind.NOT_MATCHED], None, s)
        if c is not None:
            inserted.append(_assign(c, None, s, empty, stmt.keys))
    return Outcome(rows, changed, inserted)


def _pair_result(applied: list, t: dict, source: list[dict], keys) -> dict | None:
    """A matched row's new values (None: deleted)."""
    if any(c is not None and c.action is MergeAction.DELETE for c, _ in applied):
        return None
    clause, j = applied[0]
    return t if clause is None else _assign(clause, t, source[j], t, keys)


def table_of(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)
