"""The back end of condition translation: a predicate tree as a pyarrow
expression true wherever Spark's condition is true.

Both front ends (:func:`ctfile.spark.conditions.catalyst_tree`, Spark's own pushdown
translation through the JVM of a classic session; :mod:`ctfile.spark.sqltext`,
the condition's SQL text parsed with sqlglot on Spark Connect) produce the
same small tree, so the rules of what means the same in Spark and in pyarrow
(:mod:`ctfile.spark.conditions`) live here once:

* :class:`Pred` nodes named as Spark's V2 predicates (``=``, ``<>``, ``<``,
  ``<=``, ``>``, ``>=``, ``<=>``, ``IN``, ``IS_NULL``, ``IS_NOT_NULL``,
  ``AND``, ``OR``, ``NOT``, ``ALWAYS_TRUE``, ``ALWAYS_FALSE``);
* :class:`Ref`, a top-level column by its name in the table;
* :class:`Lit`, a literal of the type Spark compares it as (after its
  implicit casts), named as Spark names types (``long``, ``double``,
  ``decimal`` ...), with a Python value: ``bool``, ``int``, ``float``,
  ``str``, ``bytes``, ``datetime.date``, microseconds since the epoch for
  ``timestamp`` (UTC) and ``timestamp_ntz`` (local), ``decimal.Decimal``;
  None for SQL's NULL;
* None for anything else (a function of a column, a nested field ...),
  which makes the node holding it untranslatable.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>", "<=>": "<=>"}
_COMPARE = {
    "=": lambda f, v: f == v, "<>": lambda f, v: f != v, "<": lambda f, v: f < v,
    "<=": lambda f, v: f <= v, ">": lambda f, v: f > v, ">=": lambda f, v: f >= v,
}
COMPARISONS = frozenset(_COMPARE) | {"<=>"}
_FLOAT_SAFE = {"=", "<", "<="}  # false for NaN in both engines
_EPOCH = datetime.date(1970, 1, 1)


@dataclass(frozen=True)
class Ref:
    """A top-level column of the table."""

    name: str


@dataclass(frozen=True)
class Lit:
    """A literal: ``kind`` is Spark's name of its type, ``value`` a Python value (module docstring)."""

    kind: str
    value: Any


@dataclass(frozen=True)
class Pred:
    """A predicate named as Spark's V2 predicates; children are nodes, or None where untranslatable."""

    name: str
    children: tuple = ()


@dataclass(frozen=True)
class _Translated:
    """A pyarrow expression true wherever Spark's is true; ``faithful``: also
    false wherever Spark's is false (so its negation may be taken)."""

    expr: pc.Expression
    faithful: bool


def to_pyarrow(tree: Any, schema: pa.Schema) -> pc.Expression | None:
    """A pyarrow expression true for every row of a table with ``schema`` for
    which the predicate ``tree`` is true, or None when nothing translates.

    Examples
    --------
    >>> s = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    >>> to_pyarrow(Pred("AND", (Pred(">", (Ref("id"), Lit("integer", 5))), None)), s)
    <pyarrow.compute.Expression (id > 5)>
    >>> print(to_pyarrow(Pred(">", (Ref("f"), Lit("double", 1.5))), s))  # Spark's NaN is above 1.5
    None
    """
    out = _predicate(tree, schema)
    return None if out is None else out.expr


def _predicate(p: Any, schema: pa.Schema) -> _Translated | None:
    if not isinstance(p, Pred):
        return None
    if p.name in COMPARISONS:
        return _comparison(p.name, list(p.children), schema)
    handler = _HANDLERS.get(p.name)
    return None if handler is None else handler(p.name, list(p.children), schema)


def _connective(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    """AND keeps a side it can translate (weaker, so no longer faithful); OR needs both."""
    left, right = (_predicate(c, schema) for c in children)
    if left is None or right is None:
        return _one_side(name, left, right)
    combined = left.expr & right.expr if name == "AND" else left.expr | right.expr
    return _Translated(combined, left.faithful and right.faithful)


def _one_side(name: str, left: _Translated | None, right: _Translated | None) -> _Translated | None:
    """AND of the one side translated (weaker: not faithful); else none."""
    if name == "OR" or (left is None and right is None):
        return None
    return _Translated((left or right).expr, False)


def _negation(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    inner = _predicate(children[0], schema)
    return _Translated(~inner.expr, True) if inner is not None and inner.faithful else None


def _constant(name: str, children: list, schema: pa.Schema) -> _Translated:
    return _Translated(pc.scalar(name == "ALWAYS_TRUE"), True)


def _column(e: Any, schema: pa.Schema) -> pa.Field | None:
    return schema.field(e.name) if isinstance(e, Ref) and e.name in schema.names else None


def _null_test(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    child = children[0]
    if isinstance(child, Lit):  # Spark's expansion of <=> tests literals too
        return _Translated(pc.scalar((child.value is None) == (name == "IS_NULL")), True)
    col = _column(child, schema)
    if col is None:
        return None
    f = pc.field(col.name)
    return _Translated(f.is_null() if name == "IS_NULL" else f.is_valid(), True)


def _in(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    col = _column(children[0], schema)
    if col is None or not all(isinstance(c, Lit) for c in children[1:]):
        return None
    values = _in_values(children[1:], col)
    if not values:
        return None
    f = pc.field(col.name)
    if pa.types.is_floating(col.type):
        # Spark's IN finds -0.0 among 0.0 (it compares); Arrow's is_in hashes
        # and does not, so floats become a disjunction of equalities.
        expr = f == values[0]
        for v in values[1:]:
            expr = expr | (f == v)
        return _Translated(expr, True)
    return _Translated(f.isin(pa.array([v.as_py() for v in values], col.type)), True)


def _in_values(literals: list[Lit], col: pa.Field) -> list[pa.Scalar] | None:
    """The values of an IN list as scalars of ``col``'s type, its nulls left
    out (never true; Arrow's false where Spark's null keeps it faithful);
    None if one cannot be compared exactly (see :func:`_literal`) or is NaN."""
    values = []
    for c in literals:
        if c.value is None:
            continue
        v = _literal(c, col)
        if v is None or _is_nan(v, col):
            return None
        values.append(v)
    return values


def _is_nan(value: pa.Scalar, col: pa.Field) -> bool:
    """Whether ``value`` is a NaN of the float column ``col``."""
    return pa.types.is_floating(col.type) and math.isnan(value.as_py())


def _comparison(name: str, children: list, schema: pa.Schema) -> _Translated | None:
    left, right = children
    if isinstance(left, Lit) and not isinstance(right, Lit):
        left, right, name = right, left, _FLIP[name]
    col = _column(left, schema)
    if col is None or not isinstance(right, Lit) or right.value is None:
        return None
    value = _literal(right, col)
    if value is None or not _float_safe(name, value, col):
        return None
    f = pc.field(col.name)
    if name == "<=>":  # false, not null, for a null column value
        return _Translated((f == value) & f.is_valid(), True)
    return _Translated(_COMPARE[name](f, value), True)


def _float_safe(name: str, value: pa.Scalar, col: pa.Field) -> bool:
    """Whether comparing ``col`` with ``value`` by ``name`` means the same
    in Arrow as in Spark: any comparison of a column that is not a float;
    for a float, those of :data:`_FLOAT_SAFE` with a number (not NaN)."""
    return not pa.types.is_floating(col.type) or (name in _FLOAT_SAFE and not _is_nan(value, col))


_HANDLERS: dict[str, Callable] = {
    "AND": _connective, "OR": _connective, "NOT": _negation, "ALWAYS_TRUE": _constant, "ALWAYS_FALSE": _constant,
    "IS_NULL": _null_test, "IS_NOT_NULL": _null_test, "IN": _in,
}


def _literal(lit: Lit, col: pa.Field) -> pa.Scalar | None:
    """``lit`` as a pyarrow scalar of ``col``'s type, or None when the
    literal is of another type family than the column (Spark then compares
    differently than Arrow would) or does not fit it exactly (a float the
    column's width would round)."""
    family, build = _LITERALS.get(lit.kind, (None, None))
    if family is None or not family(col.type):
        return None
    try:
        value = build(lit.value)
        out = value.cast(col.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        return None
    if pa.types.is_floating(col.type) and not _same_float(out.as_py(), value.as_py()):
        return None
    return out


def _same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _is_instant(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is not None


def _is_local_timestamp(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is None


def _integer(v: Any) -> pa.Scalar:
    return pa.scalar(int(v), pa.int64())


def _floating(v: Any) -> pa.Scalar:
    return pa.scalar(float(v), pa.float64())


def _decimal(v: Any) -> pa.Scalar:
    if not isinstance(v, Decimal) or not v.is_finite():
        raise ValueError(f"not a finite decimal: {v!r}")
    return pa.scalar(v)


#: Spark type name -> (the Arrow column types it compares with as Arrow
#: does, the literal's Python value as a pyarrow scalar).
_LITERALS = {
    "boolean": (pa.types.is_boolean, lambda v: pa.scalar(bool(v))),
    "byte": (pa.types.is_signed_integer, _integer),
    "short": (pa.types.is_signed_integer, _integer),
    "integer": (pa.types.is_signed_integer, _integer),
    "long": (pa.types.is_signed_integer, _integer),
    "float": (pa.types.is_floating, _floating),
    "double": (pa.types.is_floating, _floating),
    "string": (_is_string, lambda v: pa.scalar(str(v), pa.string())),
    "binary": (_is_binary, lambda v: pa.scalar(bytes(v), pa.binary())),
    "date": (pa.types.is_date, lambda v: pa.scalar(v, pa.date32())),
    "timestamp": (_is_instant, lambda v: pa.scalar(int(v), pa.timestamp("us", tz="UTC"))),
    "timestamp_ntz": (_is_local_timestamp, lambda v: pa.scalar(int(v), pa.timestamp("us"))),
    "decimal": (pa.types.is_decimal, _decimal),
}


def epoch_date(days: int) -> datetime.date:
    """The date ``days`` after 1970-01-01 (Catalyst's value of a date)."""
    return _EPOCH + datetime.timedelta(days=int(days))
