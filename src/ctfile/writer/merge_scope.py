"""The columns a MERGE's pyarrow expressions may name (SPEC §Copy-on-write,
MERGE): the Python engine's side of checking a statement.

An expression names a column of a side by that side's alias
(``pc.field("t.total")``, ``pc.field("s.amount")``), or by its name alone
when only one side the clause sees has a column of that name, as SQL
resolves names. :class:`MergeScopes` builds, for the sides a clause sees
(:attr:`MatchKind.sees <ctfile.writer.merge_statement.MatchKind.sees>`), the
schema its expressions are checked against and the rows they are evaluated
on, each column under every name it may be called by. An expression that
names a column its clause does not see is refused, saying why: the other
side's column, a side the clause does not see, or a name both sides have.

Examples
--------
>>> from ctfile.writer.merge_statement import Side
>>> scopes = MergeScopes(pa.schema([("id", pa.int64()), ("total", pa.int64())]),
...                      pa.schema([("id", pa.int64()), ("amount", pa.int64())]), "t", "s")
>>> list(scopes.names((Side.TARGET, Side.SOURCE)))
['t.id', 't.total', 'total', 's.id', 's.amount', 'amount']
>>> scopes.check_value(pc.field("total") + pc.field("s.amount"), (Side.TARGET, Side.SOURCE), what="set")
DataType(int64)
>>> scopes.check_condition(pc.field("id") > 1, (Side.TARGET, Side.SOURCE), what="condition")
Traceback (most recent call last):
...
ctfile.format.errors.SchemaMismatchError: condition (id > 1) names 'id', which both sides have: write t.id or s.id
>>> scopes.check_condition(pc.field("t.total") > 1, (Side.SOURCE,), what="WHEN NOT MATCHED condition")
Traceback (most recent call last):
...
ctfile.format.errors.SchemaMismatchError: WHEN NOT MATCHED condition (t.total > 1) names 't.total', a column of the target, which it does not see (it sees the source)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.reader.expressions import ColumnAliases, check_predicate, referenced_columns, value_type
from ctfile.writer.merge_statement import Side

Sides = tuple[Side, ...]
_BOTH: Sides = (Side.TARGET, Side.SOURCE)


@dataclass(frozen=True)
class MergeScopes:
    """The names of a MERGE's columns: ``target`` (the table's columns,
    no hidden ones) and ``source`` schemas, and their aliases."""

    target: pa.Schema
    source: pa.Schema
    target_alias: str
    source_alias: str
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def _side(self, side: Side) -> tuple[pa.Schema, str]:
        return (self.target, self.target_alias) if side is Side.TARGET else (self.source, self.source_alias)

    def _meanings(self, sides: Sides) -> dict[str, list[tuple[Side, str]]]:
        """Every name of ``sides`` with the (side, column) pairs it may mean."""
        out: dict[str, list[tuple[Side, str]]] = {}
        for side in sides:
            schema, alias = self._side(side)
            for col in schema.names:
                out.setdefault(f"{alias}.{col}", []).append((side, col))
                out.setdefault(col, []).append((side, col))
        return out

    def names(self, sides: Sides) -> dict[str, tuple[Side, str]]:
        """name -> (side, column) for the names that mean one column of
        ``sides`` (a name meaning two is left out: it is ambiguous)."""
        key = ("names", sides)
        if key not in self._cache:
            self._cache[key] = {n: m[0] for n, m in self._meanings(sides).items() if len(m) == 1}
        return self._cache[key]

    def schema(self, sides: Sides) -> pa.Schema:
        """The schema expressions of a clause seeing ``sides`` bind against."""
        key = ("schema", sides)
        if key not in self._cache:
            fields = [self._side(side)[0].field(col).with_name(n) for n, (side, col) in self.names(sides).items()]
            self._cache[key] = pa.schema(fields)
        return self._cache[key]

    def table(self, sides: Sides, target: pa.Table | None = None, source: pa.Table | None = None) -> pa.Table:
        """The rows expressions of ``sides`` are evaluated on: ``target``
        and ``source`` (aligned row by row where both are given) under the
        names of :meth:`names`."""
        names = self.names(sides)
        columns = [(target if side is Side.TARGET else source).column(col) for side, col in names.values()]
        return pa.Table.from_arrays(columns, schema=self.schema(sides))

    def target_aliases(self) -> ColumnAliases:
        """The names a clause seeing only the table row uses for its columns
        (to prune and to detect conflicts with, SPEC §Conflict detection)."""
        return ColumnAliases(tuple((n, col) for n, (_, col) in self.names((Side.TARGET,)).items()))

    # ------------------------------------------------------------ checks

    def check_condition(self, expr: Any, sides: Sides, *, what: str) -> pc.Expression:
        """``expr``, checked as a boolean condition over ``sides``."""
        if not isinstance(expr, pc.Expression):
            raise InvalidArgumentError(
                f"{what} must be a pyarrow.compute.Expression such as pc.field('s.ts') > pc.field('t.ts'); "
                f"found {type(expr).__name__}"
            )
        try:
            return check_predicate(expr, self.schema(sides), what=what)
        except SchemaMismatchError:
            self._explain(expr, sides, what)
            raise

    def check_value(self, expr: pc.Expression, sides: Sides, *, what: str) -> pa.DataType:
        """The type of the value ``expr`` computes over ``sides``."""
        try:
            return value_type(expr, self.schema(sides), what=what)
        except SchemaMismatchError:
            self._explain(expr, sides, what)
            raise

    def _explain(self, expr: pc.Expression, sides: Sides, what: str) -> None:
        """Raise the reason ``expr`` does not bind over ``sides`` when it is
        a name it may not use (it would bind over every name); return
        otherwise (an unknown column, a type error)."""
        meanings = self._meanings(_BOTH)
        universe = pa.schema([self._side(m[0][0])[0].field(m[0][1]).with_name(n) for n, m in meanings.items()])
        try:
            value_type(expr, universe, what=what)
        except SchemaMismatchError:
            return
        visible = self.names(sides)
        for name in referenced_columns(expr, universe, value=True):
            if name not in visible:
                raise SchemaMismatchError(f"{what} {expr} names {name!r}, {self._why(name, sides, meanings)}")

    def _why(self, name: str, sides: Sides, meanings: dict[str, list[tuple[Side, str]]]) -> str:
        """Why ``name`` is not a name of ``sides``."""
        mine = [m for m in meanings[name] if m[0] in sides]
        if len(mine) > 1:
            spelled = " or ".join(f"{self._side(side)[1]}.{col}" for side, col in mine)
            return f"which both sides have: write {spelled}"
        side = meanings[name][0][0]
        sees = " and the ".join(s.value for s in sides)
        return f"a column of the {side.value}, which it does not see (it sees the {sees})"
