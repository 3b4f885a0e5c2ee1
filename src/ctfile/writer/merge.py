"""MERGE in the Python engine: planning (SPEC §Copy-on-write, MERGE).

Planning is apart from execution (:mod:`ctfile.writer.merge_run`).
:func:`plan_merge` checks a :class:`~ctfile.writer.merge_statement.MergeStatement`
against the table and an in-memory source before anything is read or
written: the engine-agnostic checks of :func:`~ctfile.writer.merge_plan.plan_statement`
(keys, columns, inserts of non-nullable columns, schema evolution), then
each pyarrow expression over the sides its clause sees
(:class:`~ctfile.writer.merge_scope.MergeScopes`), and the type of each value
against its column. The source's key columns and the columns the statement
copies by name are converted to the table's types; its keys, in the form
keys compare in (:func:`~ctfile.writer.conflicts.comparable_keys`), are one
side of every match and the :class:`~ctfile.writer.conflicts.KeyPredicate`
of conflict detection.

The shorthand ``merge(source, on, when_matched=, when_not_matched=)`` is a
statement (:func:`shorthand_statement`) with the two checks it always made
(:func:`check_shorthand_source`, :func:`check_unique_keys`): every source
column is a table column, and the source holds one row per key; it runs as
:func:`ctfile.writer.merge_run.merge`.

Examples
--------
>>> import ctfile, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("v", pa.string())]))
>>> stmt = shorthand_statement("id", when_matched="update", when_not_matched="insert")
>>> [str(c) for c in stmt.clauses]
['WHEN MATCHED THEN UPDATE SET *', 'WHEN NOT MATCHED THEN INSERT *']
>>> with t.transaction() as tx:
...     m = plan_merge(tx, stmt, pa.table({"id": [1, 2], "v": ["a", None]}))
>>> m.plan.update_columns, m.match_keys.column_names
(('v',), ['id', '__ct_src'])
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.errors import InvalidArgumentError
from ctfile.format.schema import Schema
from ctfile.log.transaction import Transaction
from ctfile.writer.conflicts import KeyPredicate, comparable_keys
from ctfile.writer.dml import literal
from ctfile.writer.input import Conformer, cast_column, to_table
from ctfile.writer.merge_plan import MergePlan, PlannedClause, SourceColumn, assigned_new_columns, plan_statement
from ctfile.writer.merge_scope import MergeScopes
from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeClause, MergeStatement, key_pairs

SOURCE_ROW = "__ct_src"  # a source row's number, in the match keys


class WhenMatched(str, enum.Enum):
    """The shorthand's action for a table row whose key a source row has."""

    UPDATE = "update"
    DELETE = "delete"


class WhenNotMatched(str, enum.Enum):
    """The shorthand's action for a source row whose key no table row has."""

    INSERT = "insert"


def _enum(value: Any, cls: type[enum.Enum], what: str):
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in cls)
        raise InvalidArgumentError(f"{what} must be {allowed} or None, found {value!r}") from None


def shorthand_statement(on: Any, *, when_matched: Any, when_not_matched: Any) -> MergeStatement:
    """The statement ``merge(source, on, when_matched=, when_not_matched=)``
    stands for: ``WHEN MATCHED THEN UPDATE SET *`` or ``DELETE``, and ``WHEN
    NOT MATCHED THEN INSERT *`` (SPEC §Copy-on-write, MERGE, the shorthand)."""
    matched = _enum(when_matched, WhenMatched, "when_matched")
    not_matched = _enum(when_not_matched, WhenNotMatched, "when_not_matched")
    if matched is None and not_matched is None:
        raise InvalidArgumentError("merge needs when_matched or when_not_matched; both are None")
    keys = key_pairs(on)
    clauses = []
    if matched is not None:
        action = MergeAction.UPDATE_ALL if matched is WhenMatched.UPDATE else MergeAction.DELETE
        clauses.append(MergeClause(MatchKind.MATCHED, action))
    if not_matched is not None:
        clauses.append(MergeClause(MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL))
    return MergeStatement(keys, tuple(clauses))


def check_shorthand_source(schema: Schema, source: pa.Schema, statement: MergeStatement) -> None:
    """The shorthand's own check of the source's columns: each is a table
    column of a type that fits, and an inserting shorthand gives every
    non-nullable column (as its earlier revisions checked)."""
    given = [c for c in schema.names if c in source.names]
    columns = None if statement.has(MatchKind.NOT_MATCHED) else given
    Conformer(schema, what="merge source", columns=columns).check_schema(source)


def check_unique_keys(source_keys: pa.Table, keys: Sequence[str]) -> None:
    """The shorthand's one source row per key. ``source_keys``: the keys of
    the source rows with no null key part, as keys compare
    (:attr:`KeyPredicate.source_keys`): ``0.0`` and ``-0.0`` are one key, and
    a row with a null key part is no key (SPEC §Copy-on-write, MERGE, key
    equality)."""
    if not source_keys.num_rows:
        return
    counts = source_keys.group_by(list(keys)).aggregate([([], "count_all")]).column("count_all")
    worst = pc.max(counts).as_py()
    if worst and worst > 1:
        raise InvalidArgumentError(
            f"merge source has {worst} rows with the same key {list(keys)}; a MERGE needs at most one "
            f"source row per key (deduplicate the source first)"
        )


@dataclass(frozen=True)
class BoundClause:
    """A planned clause with its pyarrow expressions checked: ``condition``
    (None: always) and ``values`` (column -> expression, or
    :class:`SourceColumn` for a column copied by name), over the sides its
    kind sees."""

    planned: PlannedClause
    condition: pc.Expression | None
    values: dict[str, pc.Expression | SourceColumn]

    @property
    def kind(self) -> MatchKind:
        return self.planned.kind

    @property
    def action(self) -> MergeAction:
        return self.planned.action

    @property
    def clause(self) -> MergeClause:
        return self.planned.clause


@dataclass(frozen=True)
class ArrowMerge:
    """A MERGE planned for the Python engine (see the module docstring):
    the checked ``plan``, the ``source`` in memory (its key columns and the
    columns the statement copies in the table's types), ``match_keys`` (the
    source's keys as keys compare, under the table's key names, with each
    row's number in :data:`SOURCE_ROW`), the key ``predicate``, and the
    bound expressions."""

    plan: MergePlan
    scopes: MergeScopes
    source: pa.Table
    match_keys: pa.Table
    predicate: KeyPredicate
    on_condition: pc.Expression | None
    clauses: tuple[BoundClause, ...]

    def of(self, kind: MatchKind) -> tuple[BoundClause, ...]:
        """The bound clauses of ``kind``, in statement order."""
        return tuple(c for c in self.clauses if c.kind is kind)

    def has(self, kind: MatchKind) -> bool:
        return self.plan.statement.has(kind)

    @property
    def matches_source(self) -> bool:
        """:attr:`MergeStatement.matches_source` of the statement."""
        return self.plan.statement.matches_source

    @property
    def unmatched_target_condition(self) -> pc.Expression | None:
        """The table rows the ``NOT MATCHED BY SOURCE`` clauses may select:
        the disjunction of their conditions; None when one has none (every
        row) or there is no such clause."""
        clauses = self.of(MatchKind.NOT_MATCHED_BY_SOURCE)
        if not clauses or any(c.condition is None for c in clauses):
            return None
        out = clauses[0].condition
        for c in clauses[1:]:
            out = out | c.condition
        return out


def plan_merge(tx: Transaction, statement: MergeStatement, source: Any) -> ArrowMerge:
    """Check ``statement`` over ``source`` against the table ``tx``
    read; raises before anything is written.

    Raises
    ------
    InvalidArgumentError
        A condition that is not a pyarrow Expression.
    SchemaMismatchError
        See :func:`~ctfile.writer.merge_plan.plan_statement`; and an
        expression naming a column its clause does not see, or a value
        whose type does not fit its column.
    """
    src = to_table(source, what="merge source")
    md = tx.metadata
    evolving = MergeScopes(md.schema.to_arrow(field_ids=False), src.schema, statement.target_alias,
                           statement.source_alias)
    value_types = _new_column_types(evolving, md.schema, statement) if statement.schema_evolution else None
    plan = plan_statement(md.schema, md.assigned_field_ids, statement, src.schema, value_types=value_types)
    src = _in_table_types(plan, src)
    scopes = MergeScopes(plan.schema.to_arrow(field_ids=False), src.schema, statement.target_alias,
                         statement.source_alias)
    on_condition = None
    if statement.on_condition is not None:
        on_condition = scopes.check_condition(statement.on_condition, MatchKind.MATCHED.sees, what="ON condition")
    clauses = tuple(_bind(scopes, plan.schema, c) for c in plan.clauses)
    keys = src.select(list(plan.source_keys)).rename_columns(list(plan.keys))
    numbered = keys.append_column(SOURCE_ROW, pa.array(np.arange(src.num_rows, dtype=np.int64)))
    match_keys = comparable_keys(numbered, plan.keys)
    return ArrowMerge(plan, scopes, src, match_keys, KeyPredicate.from_source(keys, plan.keys), on_condition, clauses)


def _new_column_types(scopes: MergeScopes, schema: Schema, statement: MergeStatement) -> dict[str, pa.DataType]:
    """The type of each value a statement with schema evolution assigns to
    a column the table lacks (schema evolution adds it with that type)."""
    out = {}
    for clause, name, value in assigned_new_columns(schema, statement):
        if isinstance(value, pc.Expression):
            out[name] = scopes.check_value(value, clause.kind.sees, what=f"{clause.kind.sql} value of {name!r}")
        else:
            out[name] = (value if isinstance(value, pa.Scalar) else pa.scalar(value)).type
    return out


def _in_table_types(plan: MergePlan, source: pa.Table) -> pa.Table:
    """``source`` with its key columns cast to the types of the table's
    keys, and the columns the statement copies conformed to their table
    columns (a value that does not fit, or a null for a non-nullable
    column, is refused now)."""
    copied = plan.copied_columns
    conformer = Conformer(plan.schema, what="merge source", columns=copied)
    conformed = pa.Table.from_batches([conformer.conform(b) for b in source.select(list(copied)).to_batches()],
                                      schema=conformer.target) if copied else None
    for i, f in enumerate(plan.source_schema):
        if conformed is not None and f.name in copied:
            column = conformed.column(f.name)
        else:
            column = cast_column(source.column(i), f.name, f.type, what="merge source")
        source = source.set_column(i, f, column)
    return source


def _bind(scopes: MergeScopes, schema: Schema, planned: PlannedClause) -> BoundClause:
    """``planned``'s condition and values checked over the sides its kind sees."""
    kind, sees = planned.kind, planned.kind.sees
    condition = None
    if planned.condition is not None:
        condition = scopes.check_condition(planned.condition, sees, what=f"{kind.sql} condition")
    arrow = schema.to_arrow(field_ids=False)
    values: dict[str, pc.Expression | SourceColumn] = {}
    for name, value in planned.values:
        what = f"{kind.sql} THEN {planned.action.sql} value of {name!r}"
        if isinstance(value, SourceColumn):
            values[name] = value
        elif isinstance(value, pc.Expression):
            typ = scopes.check_value(value, sees, what=what)
            Conformer(schema, what=what, columns=[name]).check_schema(pa.schema([pa.field(name, typ)]))
            values[name] = value
        else:
            values[name] = literal(value, arrow.field(name), what=what)
    return BoundClause(planned, condition, values)
