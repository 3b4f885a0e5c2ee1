"""Checking and evaluating ``pyarrow.compute.Expression`` predicates.

pyarrow does not expose an expression's tree, so two facts are learnt by
binding: whether an expression is valid for a schema (an unknown column or a
type error is reported as :class:`SchemaMismatchError` before anything is
read), and which top-level columns it references (bind against the schema
without one column: if that fails, the column is referenced). Binding an
expression against an empty table costs tens of microseconds.

``pyarrow.dataset`` is imported where it is used, here and in the reader:
importing it imports pandas (through ``pyarrow.pandas_compat``), which
every process importing ctfile would otherwise pay for, each Python worker
of a Spark read included (``benchmarks/bench_spark_native.py``, first
action).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.format.schema import Schema


def _dataset(data):
    import pyarrow.dataset as ds

    return ds.dataset(data)


def _bind(expr: pc.Expression, schema: pa.Schema) -> None:
    _dataset(schema.empty_table()).to_table(filter=expr)


def check_predicate(expr: object, schema: pa.Schema, *, what: str = "where") -> pc.Expression:
    """Validate a boolean predicate against ``schema``; returns it."""
    if not isinstance(expr, pc.Expression):
        raise InvalidArgumentError(
            f"{what} must be a pyarrow.compute.Expression such as pc.field('id') == 1; "
            f"found {type(expr).__name__}"
        )
    try:
        _bind(expr, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(
            f"{what} {expr} does not fit the table schema ({', '.join(schema.names)}): {e}"
        ) from e
    return expr


def check_value_expression(expr: pc.Expression, schema: pa.Schema, *, what: str) -> None:
    value_type(expr, schema, what=what)


def value_type(expr: pc.Expression, schema: pa.Schema, *, what: str) -> pa.DataType:
    """The type of ``expr``'s values over rows of ``schema``.

    >>> value_type(pc.field("n") + pc.field("m"), pa.schema([("n", pa.int32()), ("m", pa.int64())]), what="set")
    DataType(int64)
    """
    try:
        return _bind_value(expr, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(f"{what} {expr} does not fit the table schema: {e}") from e


def referenced_columns(expr: pc.Expression, schema: pa.Schema, *, value: bool = False) -> list[str]:
    """Top-level columns of ``schema`` that ``expr`` refers to: a predicate,
    or with ``value`` any expression (bound as a projection).

    >>> referenced_columns(pc.field("a") + 1, pa.schema([("a", pa.int8()), ("b", pa.int8())]), value=True)
    ['a']
    """
    bind = _bind_value if value else _bind
    refs = []
    for i, name in enumerate(schema.names):
        try:
            bind(expr, schema.remove(i))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            refs.append(name)
    return refs


def _bind_value(expr: pc.Expression, schema: pa.Schema) -> pa.DataType:
    return _dataset(schema.empty_table()).to_table(columns={"v": expr}).schema.field("v").type


@dataclass(frozen=True)
class ColumnAliases:
    """The names an expression uses for table columns: (name, table
    column) pairs, a column under any number of names (a MERGE's
    ``NOT MATCHED BY SOURCE`` condition names column ``x`` as ``x`` or
    ``t.x``). :meth:`schema` is a table schema with each column under its
    names (same field ids: pruning by statistics works by id, and so
    prunes by an aliased expression), :meth:`table` the rows under them.

    Examples
    --------
    >>> aliases = ColumnAliases((("x", "x"), ("t.x", "x")))
    >>> t = aliases.table(pa.table({"x": [1, 2], "y": ["a", "b"]}))
    >>> t.column_names, evaluate_mask(t, pc.field("t.x") > 1).to_pylist()
    (['x', 't.x'], [False, True])
    """

    pairs: tuple[tuple[str, str], ...]

    def schema(self, schema: Schema) -> Schema:
        """``schema``'s columns under their names (those it lacks left out)."""
        have = set(schema.names)
        return Schema(tuple(replace(schema.field(col), name=name) for name, col in self.pairs if col in have))

    def table(self, rows: pa.Table) -> pa.Table:
        """``rows`` (table columns, some or all) under the names of their columns."""
        pairs = [(name, col) for name, col in self.pairs if col in rows.column_names]
        return pa.Table.from_arrays([rows.column(col) for _, col in pairs], names=[n for n, _ in pairs])

    def columns(self, names: list[str]) -> list[str]:
        """The table columns ``names`` name, without repeats."""
        wanted = set(names)
        return list(dict.fromkeys(col for name, col in self.pairs if name in wanted))


# Errors pyarrow raises when an expression that binds fails on the data
# (checked arithmetic overflow, a division by zero, an invalid cast).
_EVALUATION_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def evaluate_mask(table: pa.Table, expr: pc.Expression, *, what: str = "predicate") -> pa.Array:
    """Boolean mask of rows where ``expr`` is true (null counts as false, as in SQL).

    Raises
    ------
    InvalidArgumentError
        ``expr`` fails on these rows (e.g. ``multiply_checked`` overflows);
        the message names ``what`` and the expression.
    """
    if table.num_rows == 0:
        return pa.array([], pa.bool_())
    try:
        res = _dataset(table).to_table(columns={"m": expr}, use_threads=False).column("m")
    except _EVALUATION_ERRORS as e:
        raise InvalidArgumentError(f"{what} {expr} cannot be evaluated on the table's rows: {e}") from e
    return pc.fill_null(res.combine_chunks(), False)


def evaluate_values(table: pa.Table, exprs: dict[str, pc.Expression], *, what: str = "expressions") -> pa.Table:
    """Project ``exprs`` over ``table`` (row order preserved).

    Raises
    ------
    InvalidArgumentError
        An expression fails on these rows (a ``*_checked`` overflow, say; the
        unchecked arithmetic functions wrap around silently instead, as Arrow
        defines them).

    Examples
    --------
    >>> t = pa.table({"n": pa.array([100], pa.int8())})
    >>> evaluate_values(t, {"n": pc.multiply_checked(pc.field("n"), pc.scalar(pa.scalar(2, pa.int8())))})
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: expressions {'n': <pyarrow.compute.Expression multiply_checked(n, 2)>} cannot be computed for 1 rows: overflow
    """
    try:
        return _dataset(table).to_table(columns=exprs, use_threads=False)
    except _EVALUATION_ERRORS as e:
        raise InvalidArgumentError(f"{what} {exprs} cannot be computed for {table.num_rows} rows: {e}") from e


def is_distinct(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """SQL ``a IS DISTINCT FROM b`` per row, as a bool numpy array: two nulls
    are equal, and so are two floating-point NaNs (as in Spark SQL and
    Snowflake); nested values compare element by element. SPEC §Copy-on-write:
    the rule by which an UPDATE changes a row, which change scans apply
    to update pairs too."""
    try:
        ne = pc.not_equal(a, b)
    except pa.ArrowNotImplementedError:  # nested types: compare as Python values
        return np.array([x != y for x, y in zip(a.to_pylist(), b.to_pylist())], dtype=bool)
    if a.null_count or b.null_count:
        ne = pc.fill_null(ne, pc.xor(pc.is_null(a), pc.is_null(b)))
    if pa.types.is_floating(a.type):
        ne = pc.and_(ne, pc.invert(pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False)))
    return np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
