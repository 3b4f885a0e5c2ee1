"""Property test of schema evolution against a model (SPEC §Schema evolution;
§Change scans, "Schema changes").

Hypothesis draws a history on a real table with tiny micro-partitions:
INSERT, UPDATE, DELETE and MERGE statements, compactions, and schema changes
through ``table.update_schema()`` (blocks of one to three changes: add a
top-level column or a field of a struct, possibly under a dropped name; drop;
rename, nested too; widen short -> integer -> long, float -> double, decimal
precision up; make nullable; move), sometimes a schema change and a statement
in one transaction (``WriteTransaction.evolve_schema``). Change capture
(``ctfile.changeCapture = before_after``) is off, on from the start, or
switched on at a drawn step. Now and then a block asks for a change that is
not allowed (a taken name, a narrowing, the only field of a struct, ...):
it must raise ``SchemaMismatchError`` and commit nothing, even after valid
calls in the same block.

The model is independent of ctfile's own schema code: per version it keeps
the schema (field ids, names, types, nullability, ``lastFieldId``, whether
the protocol needs ``schemaEvolution``) and the rows keyed by row id, with
values keyed by field id (a struct's value keyed by its fields' ids) and the
row version. New rows are bound to the row id the table gave them through a
``uid`` column (field id 1, never updated, never dropped, but renamed and
moved like any other). A schema change projects every row into the new
schema by field id: a new field is null, a dropped one gone, a widened one
keeps its value (the widenings are exact), a renamed one keeps it.

Checked, through a freshly opened table:

* every version's snapshot: the schema (ids, names, types, nullability,
  order), ``lastFieldId``, the protocol feature, the rows (ordinary,
  streamed, with a filter and a column subset, and with the materialized
  row ids and row versions);
* change scans over random intervals [a, b], in ``default``, ``changelog="op"``,
  ``audit`` and ``append_only``, and ``default`` / ``audit`` with a filter on a
  column of the end schema: the output is in the schema of version b, old
  images projected into it by field id, an update pair output only when its
  images differ in that schema; an interval of schema changes only is EMPTY;
  ``audit`` lists each data-changing commit's own change in the end schema;
  ``append_only`` the rows inserted in the interval as inserted, projected.
  Every scan that reads change files equals the same scan planned from
  partitions (``change_checks.scan_rows``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Union

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.format.actions import FEATURE_SCHEMA_EVOLUTION
from ctfile.format.schema import StructType
from ctfile.reader.change_plan import PlanShape

from change_checks import (
    ACTION,
    CTS,
    CVERSION,
    ISUPDATE,
    OP_CODES,
    ROW_ID,
    check_pairs_adjacent,
    filtered,
    row_id_string,
    scan_rows,
    srt,
)

CAPTURE = {"ctfile.changeCapture": "before_after"}


# ---------------------------------------------------------------- the model schema


@dataclass(frozen=True)
class MStruct:
    fields: tuple["MField", ...]


MType = Union[str, MStruct]  # a primitive type name of SPEC §Schema, or a struct


@dataclass(frozen=True)
class MField:
    id: int
    name: str
    type: MType
    nullable: bool = True


INITIAL = (
    MField(1, "uid", "long", False),
    MField(2, "n", "short", False),
    MField(3, "f", "float"),
    MField(4, "d", "decimal(5,2)"),
    MField(5, "s", "string"),
    MField(6, "st", MStruct((MField(7, "a", "integer"), MField(8, "b", "string")))),
)
_PRIMITIVES = {
    "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
    "string": pa.string(),
}
# SPEC §Schema evolution, widen (the types this test uses).
_WIDER = {"short": ("integer", "long"), "integer": ("long",), "float": ("double",)}
# The types of added fields; the struct's ids are placeholders, assigned on add.
ADD_TYPES = ("integer", "short", "float", "decimal(5,2)", "string", MStruct((MField(0, "x", "integer"), MField(0, "y", "string"))))
TOP_NAMES = ("a", "b", "c", "e", "k", "n", "f", "s", "st")
NESTED_NAMES = ("a", "b", "x", "y", "z")


def arrow_type(t: MType) -> pa.DataType:
    if isinstance(t, MStruct):
        return pa.struct([pa.field(f.name, arrow_type(f.type), f.nullable) for f in t.fields])
    if t.startswith("decimal("):
        p, s = t[len("decimal("):-1].split(",")
        return pa.decimal128(int(p), int(s))
    return _PRIMITIVES[t]


def arrow_schema(fields: tuple[MField, ...]) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.type), f.nullable) for f in fields])


def model_of(fields) -> tuple[MField, ...]:
    """A ctfile schema's fields (``Schema.fields``) as model fields."""
    return tuple(
        MField(f.id, f.name, MStruct(model_of(f.type.fields)) if isinstance(f.type, StructType) else f.type, f.nullable)
        for f in fields
    )


def wider(t: MType) -> tuple[str, ...]:
    if isinstance(t, str) and t.startswith("decimal("):
        p, s = t[len("decimal("):-1].split(",")
        return (f"decimal({int(p) + 2},{s})",)
    return _WIDER.get(t, ()) if isinstance(t, str) else ()


class Refused(Exception):
    """The model's verdict: SPEC §Schema evolution does not allow this change."""


@dataclass(frozen=True)
class Change:
    """One call of ``table.update_schema()``'s builder (or of a SchemaEditor)."""

    kind: str  # add | drop | rename | widen | make_nullable | move
    path: tuple[str, ...]
    arg: MType | None = None  # the new name (rename) or type (add, widen)
    after: str | None = None
    first: bool = False

    def call(self, builder) -> None:
        p = ".".join(self.path)
        if self.kind == "add":
            builder.add_column(p, arrow_type(self.arg), after=self.after, first=self.first)
        elif self.kind == "drop":
            builder.drop_column(p)
        elif self.kind == "rename":
            builder.rename_column(p, self.arg)
        elif self.kind == "widen":
            builder.widen_column(p, arrow_type(self.arg))
        elif self.kind == "make_nullable":
            builder.make_nullable(p)
        else:
            builder.move_column(p, after=self.after, first=self.first)


def _siblings(fields: tuple[MField, ...], parent: tuple[str, ...]) -> tuple[MField, ...]:
    for name in parent:
        f = next((f for f in fields if f.name == name), None)
        if f is None or not isinstance(f.type, MStruct):
            raise Refused(f"no struct {parent}")
        fields = f.type.fields
    return fields


def _with_siblings(fields: tuple[MField, ...], parent: tuple[str, ...], new: tuple[MField, ...]) -> tuple[MField, ...]:
    if not parent:
        return new
    return tuple(
        replace(f, type=MStruct(_with_siblings(f.type.fields, parent[1:], new))) if f.name == parent[0] else f
        for f in fields
    )


def _place(fields: tuple[MField, ...], moving: MField, after: str | None, first: bool) -> tuple[MField, ...]:
    if first:
        return (moving, *fields)
    if after is None:
        return (*fields, moving)
    i = next((i for i, f in enumerate(fields) if f.name == after), None)
    if i is None:
        raise Refused(f"no sibling {after}")
    return (*fields[: i + 1], moving, *fields[i + 1:])


def _with_ids(t: MType, last: int) -> tuple[MType, int]:
    """``t`` with new ids from ``last`` + 1, depth-first pre-order."""
    if not isinstance(t, MStruct):
        return t, last
    out = []
    for f in t.fields:
        last += 1
        typ, inner = _with_ids(f.type, last)
        out.append(MField(last, f.name, typ, f.nullable))
        last = inner
    return MStruct(tuple(out)), last


@dataclass(frozen=True)
class SchemaModel:
    fields: tuple[MField, ...] = INITIAL
    last_id: int = 8
    feature: bool = False  # the protocol lists schemaEvolution

    def apply(self, c: Change) -> "SchemaModel":
        """The schema after ``c``; :class:`Refused` when it is not allowed."""
        parent, name = c.path[:-1], c.path[-1]
        sibs = _siblings(self.fields, parent)
        cur = next((f for f in sibs if f.name == name), None)
        if (cur is None) != (c.kind == "add"):
            raise Refused(f"{c.kind} {c.path}: the field {'exists' if cur else 'does not exist'}")
        last = self.last_id
        if c.kind == "add":
            typ, last = _with_ids(c.arg, last + 1)
            new = _place(sibs, MField(self.last_id + 1, name, typ), c.after, c.first)
        elif c.kind == "drop":
            if len(sibs) == 1:  # the last top-level field, or the last field of a struct
                raise Refused(f"drop {c.path}: the last field of its struct")
            new = tuple(f for f in sibs if f.name != name)
        elif c.kind == "rename":
            if any(f.name == c.arg for f in sibs):
                raise Refused(f"rename {c.path}: {c.arg} is taken")
            new = tuple(replace(f, name=c.arg) if f is cur else f for f in sibs)
        elif c.kind == "widen":
            if c.arg not in wider(cur.type):
                raise Refused(f"widen {c.path}: {cur.type} -> {c.arg}")
            new = tuple(replace(f, type=c.arg) if f is cur else f for f in sibs)
        elif c.kind == "make_nullable":
            new = tuple(replace(f, nullable=True) if f is cur else f for f in sibs)
        else:
            new = _place(tuple(f for f in sibs if f is not cur), cur, c.after, c.first)
        # SPEC §Schema evolution, protocol: all but top-level adds, moves and nullability.
        needs = bool(parent) or c.kind not in ("add", "move", "make_nullable")
        return SchemaModel(_with_siblings(self.fields, parent, new), last, self.feature or needs)

    def top(self, fid: int) -> MField:
        return next(f for f in self.fields if f.id == fid)

    def primitives(self) -> list[MField]:
        return [f for f in self.fields if isinstance(f.type, str)]


# ---------------------------------------------------------------- values


def domain(t: str) -> tuple:
    """The values of primitive type ``t``; every one is exact in every wider type."""
    if t in ("short", "integer", "long"):
        return (-2, -1, 0, 1, 2, 3)
    if t in ("float", "double"):
        return (-1.5, 0.0, 0.5, 2.25)
    if t.startswith("decimal("):
        return (Decimal("1.25"), Decimal("-3.50"), Decimal("0.00"))
    return ("a", "b", "c")


def value_strategy(t: MType, nullable: bool) -> st.SearchStrategy:
    """Values of type ``t`` (a struct's as {field id: value})."""
    if isinstance(t, MStruct):
        base = st.fixed_dictionaries({f.id: value_strategy(f.type, f.nullable) for f in t.fields})
    else:
        base = st.sampled_from(domain(t))
    return st.one_of(st.none(), base) if nullable else base


def project(value, t: MType):
    """A stored value in type ``t`` by field id: a struct's missing fields are null."""
    if not isinstance(t, MStruct) or value is None:
        return value
    return {f.id: project(value.get(f.id), f.type) for f in t.fields}


def project_row(row: dict, fields: tuple[MField, ...]) -> dict:
    return {f.id: project(row.get(f.id), f.type) for f in fields}


def named(value, t: MType):
    """A value keyed by field id as pyarrow returns it (a struct as {name: value})."""
    if not isinstance(t, MStruct) or value is None:
        return value
    return {f.name: named(value[f.id], f.type) for f in t.fields}


def named_row(row: dict, fields: tuple[MField, ...]) -> dict:
    return {f.name: named(row[f.id], f.type) for f in fields}


def scalar(value, t: MType) -> pa.Scalar:
    return pa.scalar(named(value, t), arrow_type(t))


# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Pred:
    kind: str  # uids | isnull | eq
    arg: tuple = ()  # uids, or (field id,) / (field id, value)

    def expr(self, schema: SchemaModel) -> pc.Expression:
        if self.kind == "uids":
            return pc.field(schema.top(1).name).isin(list(self.arg))
        f = schema.top(self.arg[0])
        if self.kind == "isnull":
            return pc.field(f.name).is_null()
        return pc.field(f.name) == scalar(self.arg[1], f.type)

    def holds(self, row: dict) -> bool:
        """SQL semantics: a comparison with null is not true."""
        if self.kind == "uids":
            return row[1] in self.arg
        v = row.get(self.arg[0])
        return v is None if self.kind == "isnull" else v is not None and v == self.arg[1]


@dataclass(frozen=True)
class Insert:
    rows: tuple  # values by field id, uid included


@dataclass(frozen=True)
class Delete:
    pred: Pred


@dataclass(frozen=True)
class Update:
    pred: Pred
    sets: tuple  # (field id, value)


@dataclass(frozen=True)
class Merge:
    source: tuple  # rows by field id (uid included), one per uid
    columns: tuple  # the field ids the source has
    mode: tuple  # (when_matched, when_not_matched)


MERGE_MODES = [("update", "insert"), ("delete", None), (None, "insert"), ("update", None)]


def draw_pred(data, schema: SchemaModel, live: list[int]) -> Pred:
    kind = data.draw(st.sampled_from(["uids", "uids", "isnull", "eq"]))
    prims = schema.primitives()
    if kind == "uids" or not prims:
        picks = data.draw(st.lists(st.integers(0, 40), min_size=1, max_size=3))
        return Pred("uids", tuple(sorted({live[i % len(live)] for i in picks})) if live else (-1,))
    f = data.draw(st.sampled_from(prims))
    if kind == "isnull":
        return Pred("isnull", (f.id,))
    return Pred("eq", (f.id, data.draw(value_strategy(f.type, False))))


def draw_statement(data, schema: SchemaModel, live: list[int], fresh) -> object:
    kind = data.draw(st.sampled_from(["insert", "update", "update", "delete", "merge", "merge"]))
    if kind == "insert":
        n = data.draw(st.integers(1, 4))
        return Insert(tuple({**data.draw(row_strategy(schema)), 1: fresh()} for _ in range(n)))
    if kind == "delete":
        return Delete(draw_pred(data, schema, live))
    others = [f for f in schema.fields if f.id != 1]
    if kind == "update":
        cols = data.draw(st.lists(st.sampled_from(others), min_size=1, max_size=2, unique_by=lambda f: f.id))
        sets = tuple((f.id, data.draw(value_strategy(f.type, f.nullable))) for f in cols)
        return Update(draw_pred(data, schema, live), sets)
    mode = data.draw(st.sampled_from(MERGE_MODES))
    cols = {f.id for f in data.draw(st.lists(st.sampled_from(others), max_size=3, unique_by=lambda f: f.id))}
    if mode[1] == "insert":
        cols |= {f.id for f in others if not f.nullable}
    columns = tuple(f.id for f in schema.fields if f.id == 1 or f.id in cols)
    source: dict[int, dict] = {}
    for pick in data.draw(st.lists(st.one_of(st.none(), st.integers(0, 40)), min_size=1, max_size=4)):
        uid = fresh() if pick is None or not live else live[pick % len(live)]
        row = data.draw(row_strategy(schema))
        source.setdefault(uid, {fid: row[fid] for fid in columns if fid != 1} | {1: uid})
    return Merge(tuple(source.values()), columns, mode)


def row_strategy(schema: SchemaModel) -> st.SearchStrategy:
    return st.fixed_dictionaries({f.id: value_strategy(f.type, f.nullable) for f in schema.fields if f.id != 1})


# ---------------------------------------------------------------- schema changes


def draw_change(data, schema: SchemaModel, dropped: set[str]) -> Change:
    """A change to try: one in ten asks for something not allowed, the
    others are allowed (the model decides; the table must agree)."""
    if data.draw(st.integers(0, 9)) == 0:
        return draw_refused(data, schema)
    structs = [f for f in schema.fields if isinstance(f.type, MStruct)]
    kind = data.draw(st.sampled_from(["add", "drop", "rename", "widen", "make_nullable", "move", "nested", "nested"]))
    if kind == "nested" and structs:
        parent = data.draw(st.sampled_from(structs))
        return _change_in(data, data.draw(st.sampled_from(["add", "drop", "rename", "widen", "move"])),
                          (parent.name,), parent.type.fields)
    return _change_in(data, "add" if kind == "nested" else kind, (), schema.fields, dropped)


def _change_in(data, kind: str, parent: tuple[str, ...], sibs: tuple[MField, ...], dropped: set[str] = frozenset()) -> Change:
    """An allowed change of ``kind`` to a field among ``sibs`` (the fields of
    struct ``parent``, or the top level); an add when there is none."""
    names = NESTED_NAMES if parent else TOP_NAMES
    taken = {f.name for f in sibs}
    pool = {
        "drop": [f for f in sibs if f.id != 1] if len(sibs) > 1 else [],  # uid binds rows to row ids
        "rename": list(sibs), "move": list(sibs) if len(sibs) > 1 else [],
        "widen": [f for f in sibs if wider(f.type)], "make_nullable": [f for f in sibs if not f.nullable],
    }.get(kind, [])
    if not pool:
        free = [n for n in (*sorted(dropped), *names) if n not in taken] or [f"c{len(sibs)}"]
        where = data.draw(st.sampled_from([None, "first", *taken]))
        return Change("add", (*parent, data.draw(st.sampled_from(free))),
                      data.draw(st.sampled_from(ADD_TYPES if not parent else ADD_TYPES[:5])),
                      after=None if where == "first" else where, first=where == "first")
    f = data.draw(st.sampled_from(pool))
    path = (*parent, f.name)
    if kind == "rename":
        return Change("rename", path, data.draw(st.sampled_from([n for n in (*names, "r1", "r2") if n not in taken])))
    if kind == "widen":
        return Change("widen", path, data.draw(st.sampled_from(wider(f.type))))
    if kind == "move":
        where = data.draw(st.sampled_from(["first", *[s.name for s in sibs if s is not f]]))
        return Change("move", path, after=None if where == "first" else where, first=where == "first")
    return Change(kind, path)


def draw_refused(data, schema: SchemaModel) -> Change:
    """A change SPEC §Schema evolution does not allow (or one naming no field)."""
    f = data.draw(st.sampled_from(schema.fields))
    other = data.draw(st.sampled_from(schema.fields))
    structs = [x for x in schema.fields if isinstance(x.type, MStruct)]
    candidates = [
        Change("add", (other.name,), "string"),  # a taken name
        Change("widen", (f.name,), "short" if f.type != "short" else "string"),  # a narrowing or another kind
        Change("drop", ("no_such_column",)),
        Change("add", ("no_such_struct", "x"), "integer"),
    ]
    if other is not f:
        candidates.append(Change("rename", (f.name,), other.name))  # a taken sibling name
    for st_ in structs:
        if len(st_.type.fields) == 1:  # the only field of a struct
            candidates.append(Change("drop", (st_.name, st_.type.fields[0].name)))
    return data.draw(st.sampled_from(candidates))


# ---------------------------------------------------------------- the history


@dataclass
class Version:
    """The model of one committed version."""

    schema: SchemaModel
    rows: dict[int, dict]  # row id -> values by field id, in this version's schema
    row_version: dict[int, int]  # row id -> the version that last changed it
    data_change: bool = False
    inserted: dict[int, dict] = field(default_factory=dict)  # row id -> values this version inserted


class History:
    """Runs a drawn history on a real table and on the model."""

    def __init__(self, root: str, partition_rows: int, *, capture: bool):
        self.table = ctfile.create_table(
            root, arrow_schema(INITIAL), partition_rows=partition_rows, properties=CAPTURE if capture else None
        )
        assert model_of(self.table.snapshot().table_schema.fields) == INITIAL
        self.versions = [Version(SchemaModel(), {}, {})]
        self.row_of_uid: dict[int, int] = {}  # uid -> row id, as the table gave it
        self.next_uid = 0
        self.dropped: set[str] = set()  # top-level names dropped or renamed away (to add again)

    @property
    def head(self) -> Version:
        return self.versions[-1]

    def fresh(self) -> int:
        self.next_uid += 1
        return self.next_uid - 1

    def live_uids(self) -> list[int]:
        return sorted(r[1] for r in self.head.rows.values())

    # ------------------------------------------------------------ model semantics

    def apply(self, stmt, schema: SchemaModel, rows: dict) -> tuple[set, list]:
        """Apply ``stmt`` to ``rows`` ({key: values by id}: a row id, or ("new",
        uid) for a row inserted now); return the keys written (inserted, or
        changed) and the real statement's arguments."""
        by_uid = {r[1]: k for k, r in rows.items()}
        written: set = set()
        if isinstance(stmt, Insert):
            for r in stmt.rows:
                rows[("new", r[1])] = project_row(r, schema.fields)
                written.add(("new", r[1]))
            data = pa.Table.from_pylist([named_row(project_row(r, schema.fields), schema.fields) for r in stmt.rows],
                                        schema=arrow_schema(schema.fields))
            return written, [data]
        if isinstance(stmt, Delete):
            for k in [k for k, r in rows.items() if stmt.pred.holds(r)]:
                del rows[k]
            return written, [stmt.pred.expr(schema)]
        if isinstance(stmt, Update):
            for k, r in rows.items():
                if stmt.pred.holds(r):
                    new = {**r, **dict(stmt.sets)}
                    if new != r:
                        rows[k] = new
                        written.add(k)
            sets = {schema.top(fid).name: scalar(v, schema.top(fid).type) for fid, v in stmt.sets}
            return written, [stmt.pred.expr(schema), sets]
        matched, not_matched = stmt.mode
        for src in stmt.source:
            k = by_uid.get(src[1])
            if k is not None and matched == "delete":
                del rows[k]
            elif k is not None and matched == "update":
                new = {**rows[k], **src}
                if new != rows[k]:
                    rows[k] = new
                    written.add(k)
            elif k is None and not_matched == "insert":
                rows[("new", src[1])] = {f.id: src.get(f.id) for f in schema.fields}
                written.add(("new", src[1]))
        fields = [schema.top(fid) for fid in stmt.columns]
        src = pa.Table.from_pylist([{f.name: named(r[f.id], f.type) for f in fields} for r in stmt.source],
                                   schema=arrow_schema(tuple(fields)))
        return written, [src, schema.top(1).name, matched, not_matched]

    @staticmethod
    def run(target, stmt, args):
        """Run ``stmt`` on a Table or a transaction."""
        if isinstance(stmt, Insert):
            return target.insert(*args)
        if isinstance(stmt, Delete):
            return target.delete(*args)
        if isinstance(stmt, Update):
            return target.update(*args)
        src, on, m, nm = args
        return target.merge(src, on, when_matched=m, when_not_matched=nm)

    # ------------------------------------------------------------ steps

    def statement(self, stmt, changes: list[Change] = ()) -> None:
        """One statement, alone or (``changes``) after a schema change in its transaction."""
        schema = self.head.schema
        for c in changes:
            schema = schema.apply(c)
        if schema.fields == self.head.schema.fields:
            schema = self.head.schema
        rows = {k: project_row(r, schema.fields) for k, r in self.head.rows.items()}
        written, args = self.apply(stmt, schema, rows)
        if changes:
            with self.table.transaction() as tx:
                tx.evolve_schema(lambda editor: [c.call(editor) for c in changes])
                self.run(tx, stmt, args)
            result = tx.result
        else:
            result = self.run(self.table, stmt, args)
        expect = bool(written) or len(rows) < len(self.head.rows) or schema is not self.head.schema
        assert result.committed == expect, (stmt, changes, result)
        if expect:
            event(f"{type(stmt).__name__}{' after a schema change in its transaction' if changes else ''}")
            self.commit(result.version, schema, rows, written, data_change=True)

    def schema_change(self, changes: list[Change]) -> None:
        """One ``update_schema()`` block; refused as a whole if one change is."""
        schema, refused = self.head.schema, None
        for c in changes:
            try:
                schema = schema.apply(c)
            except Refused as e:
                refused = e
                break
        before = self.table.version
        if refused is not None:
            with pytest.raises(ctfile.SchemaMismatchError):
                with self.table.update_schema() as u:
                    for c in changes:
                        c.call(u)
            assert self.table.version == before and ctfile.open_table(self.table.uri).version == before
            event("schema change refused")
            return
        with self.table.update_schema() as u:
            for c in changes:
                c.call(u)
        if schema.fields == self.head.schema.fields:  # nothing changed: nothing committed
            assert u.result is None and self.table.version == before
            return
        assert u.result.committed and u.result.version == before + 1
        for c in changes:
            event(f"schema change: {c.kind}{' (nested)' if len(c.path) > 1 else ''}")
        rows = {k: project_row(r, schema.fields) for k, r in self.head.rows.items()}
        self.commit(u.result.version, schema, rows, set(), data_change=False)

    def metadata_only(self, result) -> None:
        """A commit that changes no row (change capture switched on, a compaction)."""
        if result.committed:
            self.commit(result.version, self.head.schema, dict(self.head.rows), set(), data_change=False)

    def commit(self, version: int, schema: SchemaModel, rows: dict, written: set, *, data_change: bool) -> None:
        """Record ``version``: bind new rows to their row ids, check the latest snapshot."""
        assert version == len(self.versions), (version, len(self.versions))
        self.dropped |= {f.name for f in self.head.schema.fields} - {f.name for f in schema.fields}
        snap = self.table.snapshot().to_arrow(include_hidden=True)
        uid = schema.top(1).name
        given = dict(zip(snap.column(uid).to_pylist(), snap.column(ctfile.ROW_ID_COLUMN).to_pylist()))
        for key in [k for k in rows if isinstance(k, tuple)]:
            rid = given[key[1]]
            assert rid not in self.row_of_uid.values() and key[1] not in self.row_of_uid, (key, rid)  # never reused
            self.row_of_uid[key[1]] = rid
        keyed = {k if isinstance(k, int) else self.row_of_uid[k[1]]: r for k, r in rows.items()}
        written = {k if isinstance(k, int) else self.row_of_uid[k[1]] for k in written}
        rv = {rid: version if rid in written else self.head.row_version[rid] for rid in keyed}
        inserted = {rid: keyed[rid] for rid in written if rid not in self.head.rows}
        self.versions.append(Version(schema, keyed, rv, data_change, inserted))
        check_rows(snap, self.head, version)


# ---------------------------------------------------------------- checks


def check_rows(t: pa.Table, model: Version, version: int) -> None:
    """A snapshot read with hidden columns equals the model's rows, row ids and row versions."""
    names = [f.name for f in model.schema.fields]
    got = {rid: (r, rv) for r, rid, rv in zip(
        t.select(names).to_pylist(), t.column(ctfile.ROW_ID_COLUMN).to_pylist(), t.column(ctfile.ROW_VERSION_COLUMN).to_pylist()
    )}
    want = {rid: (named_row(r, model.schema.fields), model.row_version[rid]) for rid, r in model.rows.items()}
    assert len(got) == t.num_rows, (version, "duplicate row ids")
    assert got == want, f"version {version}:\n got={got}\nwant={want}"


def check_snapshot(t: ctfile.Table, v: int, model: Version) -> None:
    snap = t.snapshot(v)
    s = model.schema
    assert model_of(snap.table_schema.fields) == s.fields, (v, snap.table_schema, s.fields)
    assert snap.metadata.assigned_field_ids == s.last_id, (v, snap.metadata.last_field_id, s.last_id)
    assert (FEATURE_SCHEMA_EVOLUTION in snap.protocol.reader_features) == s.feature, (v, snap.protocol)
    want_schema = arrow_schema(s.fields)
    assert snap.schema.equals(want_schema), (v, snap.schema, want_schema)
    check_rows(snap.to_arrow(include_hidden=True), model, v)
    want = srt(named_row(r, s.fields) for r in model.rows.values())
    plain = snap.to_arrow()
    assert plain.schema.equals(want_schema) and srt(plain.to_pylist()) == want, v
    streamed = [b for b in snap.to_batches(batch_rows=2)]
    assert all(b.schema.equals(want_schema) for b in streamed), v
    assert srt(r for b in streamed for r in b.to_pylist()) == want, v
    # A filter (statistics prune by field id) and a column subset, by the names of this version.
    f, last = s.primitives()[-1], s.fields[-1]
    pred = Pred("isnull", (f.id,)) if v % 2 else Pred("eq", (f.id, domain(f.type)[v % len(domain(f.type))]))
    kw = {"columns": [last.name], "filter": pred.expr(s)}
    want = srt({last.name: named(r[last.id], last.type)} for r in model.rows.values() if pred.holds(r))
    assert srt(snap.to_arrow(**kw).to_pylist()) == want, (v, kw)
    assert srt(r for b in snap.to_batches(**kw) for r in b.to_pylist()) == want, (v, kw)


def delta(before: dict, after: dict, fields, table_id: str) -> list[dict]:
    """The minimum delta from ``before`` to ``after`` (row id -> values by id,
    both in the schema ``fields``), as output rows: an update pair only where
    the images differ in that schema."""
    out = []
    for rid in sorted(before.keys() | after.keys()):
        old, new = before.get(rid), after.get(rid)
        if old == new:
            continue
        pair = old is not None and new is not None
        rid_s = row_id_string(table_id, rid)
        if old is not None:
            out.append({**named_row(old, fields), ACTION: "DELETE", ISUPDATE: pair, ROW_ID: rid_s})
        if new is not None:
            out.append({**named_row(new, fields), ACTION: "INSERT", ISUPDATE: pair, ROW_ID: rid_s})
    return out


def rows_key(rows: list[dict]) -> list:
    """``rows`` as a sorted list, whatever the order of rows and of columns."""
    return srt(tuple(sorted(r.items(), key=lambda kv: kv[0])) for r in rows)


def check_interval(t: ctfile.Table, h: History, a: int, b: int, flt: tuple, hist: dict) -> None:
    """Every mode of the change scan over [a, b] against the model."""
    ctx = (a, b)
    end = h.versions[b].schema.fields
    tid = t.snapshot().metadata.table_id
    proj = lambda v: {rid: project_row(r, end) for rid, r in h.versions[v].rows.items()}  # noqa: E731
    data_changing = [v for v in range(a, b + 1) if h.versions[v].data_change]
    want = delta(proj(a - 1), h.versions[b].rows, end, tid)
    cs = t.changes(start_version=a, end_version=b)
    assert [(x.name, x.type, x.nullable) for x in cs.schema][: len(end)] == [
        (x.name, x.type, x.nullable) for x in arrow_schema(end)], (ctx, cs.schema)
    if not data_changing:
        assert cs.plan_shape is PlanShape.EMPTY, (ctx, cs.plan_shape)
    default = scan_rows(t, ctx, start_version=a, end_version=b)
    check_pairs_adjacent(default, ctx)
    assert rows_key(default) == rows_key(want), f"{ctx} default:\n got={default}\nwant={want}"
    op = scan_rows(t, ctx, start_version=a, end_version=b, changelog="op")
    assert rows_key(op) == rows_key(
        [{**{k: x for k, x in r.items() if k not in (ACTION, ISUPDATE)}, "op": OP_CODES[r[ACTION], r[ISUPDATE]]} for r in want]
    ), (ctx, "changelog op")
    audit = scan_rows(t, ctx, start_version=a, end_version=b, information="audit")
    check_pairs_adjacent(audit, ctx)
    assert [r[CVERSION] for r in audit] == sorted(r[CVERSION] for r in audit), ctx
    want_audit = [{**r, CVERSION: v, CTS: hist[v]} for v in data_changing for r in delta(proj(v - 1), proj(v), end, tid)]
    assert rows_key(audit) == rows_key(want_audit), f"{ctx} audit:\n got={audit}\nwant={want_audit}"
    ao = t.changes(start_version=a, end_version=b, information="append_only").to_arrow().to_pylist()
    want_ao = [
        {**named_row(project_row(r, end), end), ACTION: "INSERT", ISUPDATE: False, ROW_ID: row_id_string(tid, rid)}
        for v in data_changing for rid, r in h.versions[v].inserted.items()
    ]
    assert rows_key(ao) == rows_key(want_ao), f"{ctx} append_only:\n got={ao}\nwant={want_ao}"
    prims = [f for f in end if isinstance(f.type, str)]
    f = prims[flt[0] % len(prims)]
    pred = Pred("isnull", (f.id,)) if flt[1] is None else Pred("eq", (f.id, domain(f.type)[flt[1] % len(domain(f.type))]))
    keep = lambda r: pred.holds({f.id: named(r[f.name], f.type)})  # noqa: E731
    for info, full in (("default", want), ("audit", want_audit)):
        got = scan_rows(t, ctx, start_version=a, end_version=b, information=info, filter=pred.expr(h.versions[b].schema))
        assert rows_key(got) == rows_key(filtered(full, keep)), (ctx, info, pred)


def check_history(h: History, intervals: list[tuple[int, int]], flt: tuple) -> None:
    t = ctfile.open_table(h.table.uri)  # read through a fresh handle
    assert t.version == len(h.versions) - 1
    for v, model in enumerate(h.versions):
        check_snapshot(t, v, model)
    hist = {e.version: e.timestamp for e in t.history()}
    latest = t.version
    for a, b in {(1, latest), *((min(x, y), max(x, y)) for x, y in intervals)}:
        if 1 <= a <= b <= latest:
            check_interval(t, h, a, b, flt, hist)


# ---------------------------------------------------------------- the test


def step(data, h: History) -> None:
    kind = data.draw(st.sampled_from(["dml", "dml", "dml", "schema", "schema", "tx", "compact"]))
    if kind == "compact":
        h.metadata_only(h.table.compact(target_rows=4))
        return
    changes = []
    if kind != "dml":
        schema = h.head.schema
        for _ in range(data.draw(st.integers(1, 3 if kind == "schema" else 1))):
            c = draw_change(data, schema, h.dropped)
            changes.append(c)
            try:
                schema = schema.apply(c)
            except Refused:
                break  # the block is refused at this call
    if kind == "schema":
        h.schema_change(changes)
        return
    try:
        schema = h.head.schema
        for c in changes:
            schema = schema.apply(c)
    except Refused:
        changes = []  # a refused change in a transaction: covered by the blocks
        schema = h.head.schema
    h.statement(draw_statement(data, schema, h.live_uids(), h.fresh), changes)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(), partition_rows=st.sampled_from([2, 3]), capture=st.sampled_from(["off", "on", "switched"]),
    n_steps=st.integers(4, 12),
)
def test_schema_changes_match_the_model(data, partition_rows, capture, n_steps):
    with tempfile.TemporaryDirectory(prefix="ctfile-schema-") as root:
        h = History(root, partition_rows, capture=capture == "on")
        switch_at = data.draw(st.integers(0, n_steps)) if capture == "switched" else None
        h.statement(Insert(tuple({**data.draw(row_strategy(h.head.schema)), 1: h.fresh()} for _ in range(4))))
        for i in range(n_steps):
            if i == switch_at:
                h.metadata_only(h.table.set_properties(CAPTURE))
            step(data, h)
        latest = len(h.versions) - 1
        intervals = data.draw(st.lists(st.tuples(st.integers(1, latest), st.integers(1, latest)), max_size=4))
        flt = (data.draw(st.integers(0, 10)), data.draw(st.one_of(st.none(), st.integers(0, 5))))
        check_history(h, intervals, flt)
