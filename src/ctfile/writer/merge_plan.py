"""A MERGE statement checked against a table, for any engine (SPEC
§Copy-on-write, MERGE).

:func:`plan_statement` checks a :class:`~ctfile.writer.merge_statement.MergeStatement`
against the table's schema and the source's, before anything is read or
written, and returns the one :class:`MergePlan` every engine executes: the
key pairs (both columns exist, the types compare), each clause's columns
(``UPDATE SET *`` and ``INSERT *`` expanded to the source columns they copy,
:class:`SourceColumn`), the columns the statement's updates set (the values
a distributed rewrite carries, :class:`ctfile.RewriteJob`), the non-nullable
columns an insert must give, the types of the copied columns, and the schema
change of a statement with schema evolution (as a merging write makes it,
:mod:`ctfile.writer.schema_merge`). What needs the engine (the columns an
expression names, its type) is checked by the engine:
:mod:`ctfile.writer.merge_scope` for pyarrow expressions.

Examples
--------
>>> from ctfile.format.schema import schema_from_arrow
>>> from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeClause, MergeStatement
>>> table = schema_from_arrow(pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())]))
>>> stmt = MergeStatement(keys=(("id", "id"),), clauses=(
...     MergeClause(MatchKind.MATCHED, MergeAction.UPDATE_ALL),
...     MergeClause(MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL)))
>>> plan = plan_statement(table, 3, stmt, pa.schema([("id", pa.int32()), ("v", pa.string()), ("op", pa.string())]))
>>> plan.update_columns, [dict(c.values) for c in plan.clauses]
(('v',), [{'v': SourceColumn(name='v')}, {'id': SourceColumn(name='id'), 'v': SourceColumn(name='v')}])
>>> plan.source_schema.field("id").type   # a key in the table's type
DataType(int64)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa

from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import Schema
from ctfile.writer.input import Conformer, check_column_names
from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeClause, MergeStatement
from ctfile.writer.schema_merge import SchemaMerge, plan_schema_merge


@dataclass(frozen=True)
class SourceColumn:
    """The value of the source column ``name`` (what ``UPDATE SET *`` and
    ``INSERT *`` assign)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class PlannedClause:
    """A clause of the statement with its ``values``: (table column,
    expression, literal or :class:`SourceColumn`) pairs, in table order for
    ``*`` and as written otherwise, target aliases removed."""

    clause: MergeClause
    values: tuple[tuple[str, Any], ...] = ()

    @property
    def kind(self) -> MatchKind:
        return self.clause.kind

    @property
    def action(self) -> MergeAction:
        return self.clause.action

    @property
    def condition(self) -> Any:
        return self.clause.condition

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.values)


@dataclass(frozen=True)
class MergePlan:
    """A MERGE statement checked against a table (see the module docstring).

    ``schema``: the table schema the statement writes (the schema read, or
    the one schema evolution makes, ``evolution``); ``source_schema``: the
    source's columns, its key columns and the columns the statement copies
    by name in the table's types (what an engine hands over); ``clauses``:
    one :class:`PlannedClause` per clause, in statement order.
    """

    statement: MergeStatement
    schema: Schema
    source_schema: pa.Schema
    clauses: tuple[PlannedClause, ...]
    evolution: SchemaMerge | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The table's key columns."""
        return self.statement.target_keys

    @property
    def source_keys(self) -> tuple[str, ...]:
        return self.statement.source_keys

    def clauses_of(self, kind: MatchKind) -> tuple[PlannedClause, ...]:
        return tuple(c for c in self.clauses if c.kind is kind)

    @property
    def update_columns(self) -> tuple[str, ...]:
        """Every column some ``UPDATE`` of the statement sets, in table
        order: the values an updated row carries."""
        used = {name for c in self.clauses if c.action.updates for name in c.columns}
        return tuple(n for n in self.schema.names if n in used)

    @property
    def copied_columns(self) -> tuple[str, ...]:
        """The source columns some ``*`` action copies, in source order."""
        used = {v.name for c in self.clauses for _, v in c.values if isinstance(v, SourceColumn)}
        return tuple(n for n in self.source_schema.names if n in used)

    @property
    def rewrites_matched(self) -> bool:
        """Whether a matched row may change: a ``MATCHED`` clause deletes,
        or sets some column."""
        return any(c.action is MergeAction.DELETE or c.values for c in self.clauses_of(MatchKind.MATCHED))

    @property
    def inserts_unmatched(self) -> bool:
        return self.statement.has(MatchKind.NOT_MATCHED)

    @property
    def reads_unmatched_target(self) -> bool:
        """:attr:`MergeStatement.reads_unmatched_target` of the statement."""
        return self.statement.reads_unmatched_target


#: The name kept for :class:`MergePlan` where ``ctfile.RewriteJob`` calls it
#: its ``merge``: one checked plan of the statement serves every engine.
MergeSpec = MergePlan


def plan_statement(
    schema: Schema, last_field_id: int, statement: MergeStatement, source_schema: pa.Schema, *,
    value_types: Mapping[str, pa.DataType] | None = None,
) -> MergePlan:
    """Check ``statement`` against the table (``schema``, and
    ``last_field_id``: its ``metadata.lastFieldId``) and the source's
    ``source_schema``. ``value_types`` gives, for a statement with schema
    evolution, the type of each value assigned to a column the table lacks
    (the engine's analysis of the expression).

    Raises
    ------
    SchemaMismatchError
        A key column missing from either side or of a type the other's
        cannot take, an assigned column the table lacks (without schema
        evolution), a copied column of a type that does not fit, an insert
        leaving out a non-nullable column, duplicate or hidden source columns.
    InvalidArgumentError
        Schema evolution of an assigned column whose type is unknown.
    """
    check_column_names(source_schema, what="merge source")
    _check_keys(schema, statement, source_schema)
    evolution = _evolution(schema, last_field_id, statement, source_schema, value_types or {})
    written = schema if evolution is None else evolution.schema
    clauses = tuple(_plan_clause(written, statement, c, source_schema) for c in statement.clauses)
    plan = MergePlan(statement, written, source_schema, clauses, evolution)
    copied = plan.copied_columns
    Conformer(written, what="merge source", columns=copied).check_schema(
        pa.schema([source_schema.field(n) for n in copied])
    )
    return MergePlan(statement, written, _in_table_types(written, statement, source_schema, copied), clauses, evolution)


def _check_keys(schema: Schema, statement: MergeStatement, source: pa.Schema) -> None:
    """Each key pair names a table column and a source column whose type the
    table's converts to (a key is compared in the table's type)."""
    for target, src in statement.keys:
        if target not in schema.names:
            raise SchemaMismatchError(f"merge key {target!r} is not a table column ({schema.names})")
        if src not in source.names:
            raise SchemaMismatchError(
                f"merge key {src!r} is missing from the source (source columns: {source.names})"
            )
    fields = [pa.field(t, source.field(s).type) for t, s in statement.keys]
    Conformer(schema, what="merge source keys", columns=statement.target_keys).check_schema(pa.schema(fields))


def target_column(name: str, names: list[str], alias: str) -> str | None:
    """The table column an assignment's ``name`` sets: the column of that
    name, else, for ``alias.column``, that column; None when neither.

    >>> target_column("t.v", ["id", "v"], "t"), target_column("v", ["id", "v"], "t"), target_column("s.v", ["v"], "t")
    ('v', 'v', None)
    """
    if name in names:
        return name
    prefix = alias + "."
    if name.startswith(prefix) and name[len(prefix):] in names:
        return name[len(prefix):]
    return None


def assigned_new_columns(schema: Schema, statement: MergeStatement) -> list[tuple[MergeClause, str, Any]]:
    """(clause, column, value) of each assignment to a column the table
    lacks, the column without the target alias: what schema evolution adds.

    >>> from ctfile.format.schema import schema_from_arrow
    >>> stmt = MergeStatement(keys=(("id", "id"),), clauses=(MergeClause(
    ...     MatchKind.MATCHED, MergeAction.UPDATE, assignments=(("t.channel", "web"), ("id", 1))),))
    >>> [(name, value) for _, name, value in assigned_new_columns(schema_from_arrow(pa.schema([("id", pa.int8())])), stmt)]
    [('channel', 'web')]
    """
    out = []
    prefix = statement.target_alias + "."
    for c in statement.clauses:
        for name, value in c.assignments:
            if target_column(name, schema.names, statement.target_alias) is None:
                out.append((c, name[len(prefix):] if name.startswith(prefix) else name, value))
    return out


def _new_columns(schema: Schema, statement: MergeStatement, source: pa.Schema,
                 value_types: Mapping[str, pa.DataType]) -> list[pa.Field]:
    """The columns a statement with schema evolution writes: every column
    a ``*`` action copies (to add or widen it) and each assigned column the
    table lacks, with its value's type."""
    fields: dict[str, pa.Field] = {}
    copies = {c.action for c in statement.clauses if c.action.copies_source}
    keys = set(statement.target_keys)
    for f in source:
        if MergeAction.INSERT_ALL in copies or (MergeAction.UPDATE_ALL in copies and f.name not in keys):
            fields[f.name] = pa.field(f.name, f.type)
    for clause, name, _ in assigned_new_columns(schema, statement):
        if name not in value_types:
            raise InvalidArgumentError(
                f"{clause} assigns {name!r}, which the table lacks, and the type of its value is unknown "
                f"(an engine gives it as value_types)"
            )
        fields.setdefault(name, pa.field(name, value_types[name]))
    return list(fields.values())


def _evolution(schema: Schema, last_field_id: int, statement: MergeStatement, source: pa.Schema,
               value_types: Mapping[str, pa.DataType]) -> SchemaMerge | None:
    """The schema change of a statement with schema evolution (None: none,
    or nothing to change)."""
    if not statement.schema_evolution:
        return None
    incoming = _new_columns(schema, statement, source, value_types)
    change = plan_schema_merge(schema, last_field_id, pa.schema(incoming))
    return change if change.steps else None


def _plan_clause(schema: Schema, statement: MergeStatement, clause: MergeClause, source: pa.Schema) -> PlannedClause:
    """The clause's values against the table ``schema`` it writes."""
    names = schema.names
    if clause.action.copies_source:
        values = _copied(names, statement, clause.action, source)
    else:
        values = tuple(_assignment(names, statement, clause, name, v) for name, v in clause.assignments)
    if clause.action.inserts:
        _check_inserts_every_required_column(schema, clause, {n for n, _ in values})
    return PlannedClause(clause, values)


def _copied(names: list[str], statement: MergeStatement, action: MergeAction,
            source: pa.Schema) -> tuple[tuple[str, SourceColumn], ...]:
    """The values of ``UPDATE SET *`` (every source column the table has but
    its keys) or ``INSERT *`` (every source column the table has), in table
    order."""
    keys = set(statement.target_keys) if action is MergeAction.UPDATE_ALL else set()
    return tuple((n, SourceColumn(n)) for n in names if n in source.names and n not in keys)


def _assignment(names: list[str], statement: MergeStatement, clause: MergeClause, name: str, value: Any):
    column = target_column(name, names, statement.target_alias)
    if column is None:
        raise SchemaMismatchError(
            f"{clause} sets unknown column {name!r}; table columns are {names}"
            + ("" if statement.schema_evolution else " (with schema evolution, a MERGE adds it)")
        )
    return column, value


def _check_inserts_every_required_column(schema: Schema, clause: MergeClause, given: set[str]) -> None:
    missing = [f"column {f.name!r} ({f.type}, not null) is missing" for f in schema.fields
               if not f.nullable and f.name not in given]
    if missing:
        raise SchemaMismatchError(f"{clause}: {'; '.join(missing)} (an inserted row would hold null there)")


def _in_table_types(schema: Schema, statement: MergeStatement, source: pa.Schema, copied: tuple[str, ...]) -> pa.Schema:
    """``source`` with its key columns and ``copied`` columns in the types
    of their table columns."""
    arrow = schema.to_arrow(field_ids=False)
    key_of = {s: t for t, s in statement.keys}
    fields = []
    for f in source:
        if f.name in copied:
            f = arrow.field(f.name)
        elif f.name in key_of:
            f = pa.field(f.name, arrow.field(key_of[f.name]).type)
        fields.append(f)
    return pa.schema(fields)
