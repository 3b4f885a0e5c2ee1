"""The MERGE builder of the Python API (SPEC §Copy-on-write, MERGE), with
delta-rs's method names: ``Table.merge_builder(source, on)`` and
``WriteTransaction.merge_builder(source, on)`` start one, each
``when_...`` method returns a new builder with one more clause, in order,
and :meth:`MergeBuilder.execute` runs the statement.

Conditions are pyarrow expressions; a SET or VALUES value is an expression
or a Python value (a literal). Columns are named ``pc.field("s.x")`` (the
source's ``x``) and ``pc.field("t.x")`` (the table's), or by the name alone
when only one side the clause sees has it; a SET key is a table column
(``"t.x"`` is accepted). Each clause is checked when it is added, the
statement against the table when it executes, before anything is written.

Examples
--------
>>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("total", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1, 2], "total": [10, 20]}))
>>> r = (t.merge_builder(pa.table({"id": [2, 3], "amount": [5, 7]}), on="id")
...       .when_matched_update(set={"total": pc.field("t.total") + pc.field("s.amount")})
...       .when_not_matched_insert(values={"id": pc.field("s.id"), "total": pc.field("amount")})
...       .execute())
>>> (r.version, r.num_updated_rows, r.num_inserted_rows), sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
((2, 1, 1), [{'id': 1, 'total': 10}, {'id': 2, 'total': 25}, {'id': 3, 'total': 7}])
>>> t.merge_builder(pa.table({"id": [1]}), on="id").when_not_matched_insert_all().when_matched_delete(condition="s.id = 1")
Traceback (most recent call last):
...
ctfile.format.errors.InvalidArgumentError: the condition of when_matched_delete must be a pyarrow.compute.Expression such as pc.field('s.ts') > pc.field('t.ts'), or None; found str
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import pyarrow.compute as pc

from ctfile.format.errors import InvalidArgumentError
from ctfile.log.commit_options import CommitOptions, commit_options
from ctfile.writer.merge_statement import (
    MatchKind, MergeAction, MergeClause, MergeStatement, check_aliases, check_reachable, key_pairs, merge_text,
)

#: Runs a statement: ``runner(statement, commit)`` (``commit``: the
#: :class:`~ctfile.CommitOptions` given to ``execute``).
Runner = Callable[[MergeStatement, CommitOptions], Any]


def _condition(value: Any, *, what: str) -> pc.Expression | None:
    if value is not None and not isinstance(value, pc.Expression):
        raise InvalidArgumentError(
            f"{what} must be a pyarrow.compute.Expression such as pc.field('s.ts') > pc.field('t.ts'), or None; "
            f"found {type(value).__name__}"
        )
    return value


def _value(value: Any, *, what: str) -> Any:
    return value  # an Expression or a Python value (a literal): checked against the table when planned


@dataclass(frozen=True)
class MergeExpressions:
    """How a builder checks an engine's expressions as clauses are added:
    ``condition(value, what=...)`` returns the condition (None: always) or
    raises :class:`~ctfile.InvalidArgumentError`; ``value(value, what=...)``
    a SET or VALUES value. ``kind`` names what the engine takes, for
    messages."""

    kind: str
    condition: Callable[..., Any]
    value: Callable[..., Any]


#: The Python engine's: pyarrow expressions, Python values as literals.
ARROW_EXPRESSIONS = MergeExpressions("pyarrow.compute.Expression", _condition, _value)


def _assignments(value: Any, expressions: MergeExpressions, *, what: str) -> tuple[tuple[str, Any], ...]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgumentError(
            f"{what} must be a non-empty mapping of table column to {expressions.kind} or value, found {value!r}"
        )
    return tuple((name, expressions.value(v, what=f"{what}[{name!r}]")) for name, v in value.items())


#: The builder method adding each (kind, action) clause.
_METHODS = {
    (MatchKind.MATCHED, MergeAction.UPDATE): "when_matched_update",
    (MatchKind.MATCHED, MergeAction.UPDATE_ALL): "when_matched_update_all",
    (MatchKind.MATCHED, MergeAction.DELETE): "when_matched_delete",
    (MatchKind.NOT_MATCHED, MergeAction.INSERT): "when_not_matched_insert",
    (MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL): "when_not_matched_insert_all",
    (MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.UPDATE): "when_not_matched_by_source_update",
    (MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE): "when_not_matched_by_source_delete",
}


@dataclass(frozen=True)
class MergeBuilder:
    """A MERGE being written (see the module docstring). Immutable: each
    method returns a new builder."""

    runner: Runner
    keys: tuple[tuple[str, str], ...]
    on_condition: pc.Expression | None = None
    source_alias: str = "s"
    target_alias: str = "t"
    clauses: tuple[MergeClause, ...] = ()
    schema_evolution: bool = False
    expressions: MergeExpressions = ARROW_EXPRESSIONS
    #: A statement of an open transaction, which commits with it (with the
    #: options given to ``transaction()``): ``execute`` refuses options.
    in_transaction: bool = False

    @classmethod
    def start(cls, runner: Runner, on: Any, *, on_condition: Any = None, source_alias: str = "s",
              target_alias: str = "t", expressions: MergeExpressions = ARROW_EXPRESSIONS,
              in_transaction: bool = False) -> "MergeBuilder":
        """A builder with no clause yet; ``on``: a key column, a sequence
        of them, or a mapping of table column to source column;
        ``expressions``: the engine's (default: pyarrow);
        ``in_transaction``: the statement is the next of an open
        transaction (its runner gets no commit options)."""
        keys = key_pairs(on)
        check_aliases(source_alias, target_alias)
        condition = expressions.condition(on_condition, what="on_condition")
        return cls(runner, keys, condition, source_alias, target_alias, expressions=expressions,
                   in_transaction=in_transaction)

    def _adding(self, kind: MatchKind, action: MergeAction, condition: Any, assignments=(), *, method: str):
        condition = self.expressions.condition(condition, what=f"the condition of {method}")
        clause = MergeClause(kind, action, condition, assignments)
        check_reachable(self.clauses + (clause,))
        return replace(self, clauses=self.clauses + (clause,))

    def when_matched_update(self, set: Mapping[str, Any], *, condition: Any = None) -> "MergeBuilder":
        """``WHEN MATCHED [AND condition] THEN UPDATE SET column = value, ...``
        (values over both rows, as they were before the statement)."""
        values = _assignments(set, self.expressions, what="set of when_matched_update")
        return self._adding(MatchKind.MATCHED, MergeAction.UPDATE, condition, values, method="when_matched_update")

    def when_matched_update_all(self, *, condition: Any = None) -> "MergeBuilder":
        """``WHEN MATCHED [AND condition] THEN UPDATE SET *``: every table
        column the source has, except the keys."""
        return self._adding(MatchKind.MATCHED, MergeAction.UPDATE_ALL, condition, method="when_matched_update_all")

    def when_matched_delete(self, *, condition: Any = None) -> "MergeBuilder":
        """``WHEN MATCHED [AND condition] THEN DELETE``."""
        return self._adding(MatchKind.MATCHED, MergeAction.DELETE, condition, method="when_matched_delete")

    def when_not_matched_insert(self, values: Mapping[str, Any], *, condition: Any = None) -> "MergeBuilder":
        """``WHEN NOT MATCHED [AND condition] THEN INSERT (column, ...)
        VALUES (value, ...)`` (values over the source row; columns not
        given are null)."""
        given = _assignments(values, self.expressions, what="values of when_not_matched_insert")
        return self._adding(MatchKind.NOT_MATCHED, MergeAction.INSERT, condition, given,
                            method="when_not_matched_insert")

    def when_not_matched_insert_all(self, *, condition: Any = None) -> "MergeBuilder":
        """``WHEN NOT MATCHED [AND condition] THEN INSERT *``: the source's
        columns by name."""
        return self._adding(MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL, condition,
                            method="when_not_matched_insert_all")

    def when_not_matched_by_source_update(self, set: Mapping[str, Any], *, condition: Any = None) -> "MergeBuilder":
        """``WHEN NOT MATCHED BY SOURCE [AND condition] THEN UPDATE SET
        ...`` (conditions and values over the table row)."""
        values = _assignments(set, self.expressions, what="set of when_not_matched_by_source_update")
        return self._adding(MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.UPDATE, condition, values,
                            method="when_not_matched_by_source_update")

    def when_not_matched_by_source_delete(self, *, condition: Any = None) -> "MergeBuilder":
        """``WHEN NOT MATCHED BY SOURCE [AND condition] THEN DELETE``."""
        return self._adding(MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE, condition,
                            method="when_not_matched_by_source_delete")

    def with_schema_evolution(self) -> "MergeBuilder":
        """Add the columns the statement writes that the table lacks, in
        its version (Delta Lake's ``withSchemaEvolution()``)."""
        return replace(self, schema_evolution=True)

    @staticmethod
    def method_for(kind: MatchKind, action: MergeAction) -> str:
        """The name of the method that adds a clause of ``kind`` and
        ``action`` (for engines that build a statement from parsed text).

        >>> MergeBuilder.method_for(MatchKind.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE)
        'when_not_matched_by_source_delete'
        """
        return _METHODS[(kind, action)]

    @property
    def statement(self) -> MergeStatement:
        """The statement built so far (at least one clause)."""
        return MergeStatement(self.keys, self.clauses, self.on_condition, self.source_alias, self.target_alias,
                              self.schema_evolution)

    def execute(
        self, *, commit: CommitOptions | None = None, app_id: str | None = None, app_version: int | None = None,
    ) -> Any:
        """Run the statement: from a table, as one version (a
        :class:`~ctfile.CommitResult`; re-run at the latest version after a
        conflict, ``commit`` or its shorthand ``app_id``/``app_version`` as
        for any statement); in a transaction, as its next statement (the
        ``inserted``/``updated``/``deleted`` counts; the transaction's
        commit options are given to ``transaction()``)."""
        options = commit_options(commit, app_id=app_id, app_version=app_version)
        if self.in_transaction:
            options.require_empty("a statement of a transaction commits with it: give app_id and app_version to "
                                  "transaction() (or commit=)")
        return self.runner(self.statement, options)

    def __str__(self) -> str:
        """The statement built so far as text (a builder may have no clause yet)."""
        return merge_text(self.keys, self.on_condition, self.clauses, source_alias=self.source_alias,
                          target_alias=self.target_alias)
