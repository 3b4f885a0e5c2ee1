"""Spark pushed-down filters as pyarrow expressions (for statistics pruning)."""

from __future__ import annotations

from typing import Any

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

_COMPARISONS = {
    EqualTo: lambda f, v: f == v,
    GreaterThan: lambda f, v: f > v,
    GreaterThanOrEqual: lambda f, v: f >= v,
    LessThan: lambda f, v: f < v,
    LessThanOrEqual: lambda f, v: f <= v,
}


def to_expression(flt: Filter, columns: set[str]) -> pc.Expression | None:
    """The pyarrow equivalent of ``flt``, or None if it cannot be expressed
    (nested column paths, unknown filter kinds, values pyarrow cannot type)."""
    if isinstance(flt, Not):
        inner = to_expression(flt.child, columns)
        return None if inner is None else ~inner
    attr = getattr(flt, "attribute", None)
    if not attr or len(attr) != 1 or attr[0] not in columns:
        return None
    field = pc.field(attr[0])
    value: Any = getattr(flt, "value", None)
    try:
        for kind, build in _COMPARISONS.items():
            if type(flt) is kind:
                return build(field, value) if value is not None else None
        if isinstance(flt, EqualNullSafe):
            return field.is_null() if value is None else (field == value)
        if isinstance(flt, In):
            values = [v for v in value if v is not None]
            return field.isin(values) if values else None
        if isinstance(flt, IsNull):
            return field.is_null()
        if isinstance(flt, IsNotNull):
            return field.is_valid()
        if isinstance(flt, StringStartsWith):
            return pc.starts_with(field, value)
        if isinstance(flt, StringEndsWith):
            return pc.ends_with(field, value)
        if isinstance(flt, StringContains):
            return pc.match_substring(field, value)
    except (TypeError, ValueError):
        return None
    return None
