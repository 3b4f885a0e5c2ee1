"""Spark pushed-down filters as pyarrow expressions (for statistics pruning)."""

from __future__ import annotations

import operator
from typing import Any, Callable

import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

def to_expression(flt: Filter, columns: set[str]) -> pc.Expression | None:
    """The pyarrow equivalent of ``flt``, or None if it cannot be expressed
    (nested column paths, unknown filter kinds, values pyarrow cannot type)."""
    if isinstance(flt, Not):
        inner = to_expression(flt.child, columns)
        return None if inner is None else ~inner
    build = _BUILDERS.get(type(flt))
    column = _column(flt, columns)
    if build is None or column is None:
        return None
    try:
        return build(pc.field(column), getattr(flt, "value", None))
    except (TypeError, ValueError):
        return None


def _column(flt: Filter, columns: set[str]) -> str | None:
    """The column ``flt`` tests, if it is one of ``columns`` (not a nested path)."""
    attr = getattr(flt, "attribute", None)
    if not attr or len(attr) != 1 or attr[0] not in columns:
        return None
    return attr[0]


def _comparing(op: Callable[[Any, Any], pc.Expression]) -> Callable[[pc.Expression, Any], pc.Expression | None]:
    """The builder of a comparison with ``op``: none against a null value
    (which no row matches in Spark: the filter cannot prune by statistics)."""
    def build(field: pc.Expression, value: Any) -> pc.Expression | None:
        return None if value is None else op(field, value)
    return build


def _equal_null_safe(field: pc.Expression, value: Any) -> pc.Expression:
    """``<=>``: a null value matches the nulls."""
    return field.is_null() if value is None else (field == value)


def _isin(field: pc.Expression, values: Any) -> pc.Expression | None:
    """``IN``: its null values match no row; none left, no expression."""
    values = [v for v in values if v is not None]
    return field.isin(values) if values else None


def _is_null(field: pc.Expression, value: Any) -> pc.Expression:
    return field.is_null()


def _is_valid(field: pc.Expression, value: Any) -> pc.Expression:
    return field.is_valid()


#: Each filter kind pyarrow can express -> its builder from the column's
#: field and the filter's value (None for the kinds without one).
_BUILDERS: dict[type, Callable[[pc.Expression, Any], pc.Expression | None]] = {
    EqualTo: _comparing(operator.eq),
    GreaterThan: _comparing(operator.gt),
    GreaterThanOrEqual: _comparing(operator.ge),
    LessThan: _comparing(operator.lt),
    LessThanOrEqual: _comparing(operator.le),
    EqualNullSafe: _equal_null_safe,
    In: _isin,
    IsNull: _is_null,
    IsNotNull: _is_valid,
    StringStartsWith: pc.starts_with,
    StringEndsWith: pc.ends_with,
    StringContains: pc.match_substring,
}
