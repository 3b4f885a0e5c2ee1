"""The rows another engine hands the writer for a MERGE, clause by clause
(SPEC §Copy-on-write, distributed statements).

An engine that evaluates a MERGE's conditions and values itself (Spark, in
``ctfile.spark``) names, per row, the clause that applies to it
(:data:`CLAUSE_COLUMN`: the clause's index in the statement) and gives each
value the clause assigns in a column of its own (:func:`value_column`), in
the engine's type. The writer, not the engine, then applies the statement's
plan to them, as the Python engine does (:mod:`ctfile.writer.merge_run`):

* :func:`row_deletes`: which rows a ``DELETE`` clause takes;
* :func:`updated_values`: per column some update of the statement sets, one
  value per row: the clause's value converted to the column's type (a value
  that does not fit is refused, as :func:`~ctfile.writer.input.cast_column`
  refuses it), the row's own value where its clause does not set the column;
* :func:`inserted_rows`: the rows the ``NOT MATCHED`` clauses insert, with
  the columns they do not set null.

So the engine never converts a value to the table's types: the conversion is
the writer's, the same in every engine.

Examples
--------
>>> from ctfile.format.schema import schema_from_arrow
>>> from ctfile.writer.merge_plan import plan_statement
>>> from ctfile.writer.merge_statement import MatchKind, MergeAction, MergeClause, MergeStatement
>>> table = schema_from_arrow(pa.schema([("id", pa.int64()), ("n", pa.int32())]))
>>> stmt = MergeStatement(keys=(("id", "id"),), clauses=(
...     MergeClause(MatchKind.MATCHED, MergeAction.DELETE, condition="s.n < 0"),
...     MergeClause(MatchKind.MATCHED, MergeAction.UPDATE, assignments=(("n", "t.n + s.n"),)),
...     MergeClause(MatchKind.NOT_MATCHED, MergeAction.INSERT_ALL)))
>>> plan = plan_statement(table, 2, stmt, pa.schema([("id", pa.int64()), ("n", pa.int64())]))
>>> rows = pa.table({CLAUSE_COLUMN: [0, 1], value_column(1, 0): [None, 25]})
>>> row_deletes(plan, rows).tolist()
[True, False]
>>> current = pa.table({"id": [1, 2], "n": pa.array([10, 20], pa.int32())})
>>> updated_values(plan, current, np.array([0, 1]), rows)["n"].to_pylist()   # a deleted row keeps its value
[10, 25]
>>> inserted_rows(plan, pa.table({CLAUSE_COLUMN: [2], value_column(2, 0): [3], value_column(2, 1): [30]})).to_pylist()
[{'id': 3, 'n': 30}]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from ctfile.format.errors import InvalidArgumentError
from ctfile.writer.input import cast_column
from ctfile.writer.merge_plan import MergePlan, PlannedClause
from ctfile.writer.merge_statement import MatchKind, MergeAction

#: The column naming, per row, the index (in statement order) of the clause
#: that applies to it.
CLAUSE_COLUMN = "_ct_clause"

_REWRITING = (MatchKind.MATCHED, MatchKind.NOT_MATCHED_BY_SOURCE)


def value_column(clause: int, index: int) -> str:
    """The column holding the ``index``-th value (in the clause's planned
    values: :attr:`~ctfile.writer.merge_plan.PlannedClause.values`) of the
    clause at ``clause`` in statement order.

    >>> value_column(2, 0)
    '_ct_value_2_0'
    """
    return f"_ct_value_{clause}_{index}"


def clause_numbers(plan: MergePlan, rows: pa.Table, kinds: Sequence[MatchKind]) -> np.ndarray:
    """The clause index of each row, checked: an index of a clause of one
    of ``kinds``."""
    column = rows.column(CLAUSE_COLUMN)
    if column.null_count:
        raise InvalidArgumentError(f"{CLAUSE_COLUMN} holds nulls; each row names the clause that applies to it")
    numbers = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
    allowed = [i for i, c in enumerate(plan.clauses) if c.kind in kinds]
    bad = sorted(set(numbers.tolist()) - set(allowed))
    if bad:
        raise InvalidArgumentError(
            f"{CLAUSE_COLUMN} must name clauses {allowed} (of {' or '.join(k.sql for k in kinds)}), found {bad}"
        )
    return numbers


def row_deletes(plan: MergePlan, rows: pa.Table) -> np.ndarray:
    """Per row of a rewrite, whether its clause deletes it."""
    numbers = clause_numbers(plan, rows, _REWRITING)
    deletes = np.array([c.action is MergeAction.DELETE for c in plan.clauses], dtype=bool)
    return deletes[numbers]


def _values(clause: PlannedClause, index: int, rows: pa.Table, arrow: pa.Schema) -> dict[str, pa.Array]:
    """The values ``clause`` (at ``index``) assigns to ``rows`` (all of its
    rows), each in its column's type."""
    out = {}
    for j, (name, _) in enumerate(clause.values):
        column = value_column(index, j)
        if column not in rows.column_names:
            raise InvalidArgumentError(f"the rows of {clause.clause} lack {column}, its value of {name!r}")
        values = rows.column(column).combine_chunks()
        out[name] = cast_column(values, name, arrow.field(name).type, what=str(clause.clause))
    return out


def scatter(base: pa.Array, pieces: Sequence[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """``base`` with ``base[at] = values`` for each (at, values) of ``pieces``.

    >>> scatter(pa.array([1, 2, 3]), [(np.array([2, 0]), pa.array([30, 10]))]).to_pylist()
    [10, 2, 30]
    """
    if not pieces:
        return base
    index = np.arange(len(base))
    offset = len(base)
    for at, values in pieces:
        index[at] = offset + np.arange(len(at))
        offset += len(at)
    return pa.concat_arrays([base] + [v for _, v in pieces]).take(pa.array(index))


def updated_values(plan: MergePlan, t: pa.Table, positions: np.ndarray, rows: pa.Table) -> dict[str, pa.Array]:
    """Per column of :attr:`MergePlan.update_columns`, one value per row of
    ``rows`` (of the rows of ``t`` at ``positions``, one row each): the
    value its clause sets, in the column's type, or the row's own."""
    arrow = plan.schema.to_arrow(field_ids=False)
    numbers = clause_numbers(plan, rows, _REWRITING)
    at = pa.array(positions)
    pieces: dict[str, list] = {c: [] for c in plan.update_columns}
    for i, clause in enumerate(plan.clauses):
        mine = np.flatnonzero(numbers == i)
        if not len(mine) or not clause.action.updates or not clause.values:
            continue
        for name, values in _values(clause, i, rows.take(pa.array(mine)), arrow).items():
            pieces[name].append((mine, values))
    return {c: scatter(t.column(c).take(at).combine_chunks(), pieces[c]) for c in plan.update_columns}


def inserted_rows(plan: MergePlan, rows: pa.Table) -> pa.Table:
    """The rows the ``NOT MATCHED`` clauses named in ``rows`` insert: each
    table column the clause sets, in the column's type; the others null."""
    arrow = plan.schema.to_arrow(field_ids=False)
    numbers = clause_numbers(plan, rows, (MatchKind.NOT_MATCHED,))
    pieces = []
    for i, clause in enumerate(plan.clauses):
        mine = np.flatnonzero(numbers == i)
        if not len(mine):
            continue
        values = _values(clause, i, rows.take(pa.array(mine)), arrow)
        pieces.append(pa.table([values.get(f.name, pa.nulls(len(mine), f.type)) for f in arrow],
                               schema=pa.schema([f.with_nullable(True) for f in arrow])))
    if not pieces:
        return pa.table([pa.array([], f.type) for f in arrow], schema=pa.schema([f.with_nullable(True) for f in arrow]))
    return pa.concat_tables(pieces)
