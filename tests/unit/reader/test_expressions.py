"""Predicate checking, column references and evaluation."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError
from ctfile.reader.expressions import (
    check_predicate,
    check_value_expression,
    evaluate_mask,
    evaluate_values,
    referenced_columns,
)

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])


@pytest.mark.parametrize(
    "expr, cols",
    [
        (pc.field("a") > 1, ["a"]),
        ((pc.field("a") > 1) & (pc.field("c") < 2), ["a", "c"]),
        (pc.field("b").is_null() | ~(pc.field("a") == 3), ["a", "b"]),
        (pc.scalar(True), []),
        (pc.field("c").is_nan(), ["c"]),
    ],
)
def test_referenced_columns(expr, cols):
    assert referenced_columns(expr, SCHEMA) == cols


def test_check_predicate():
    e = pc.field("a") > 1
    assert check_predicate(e, SCHEMA) is e
    with pytest.raises(SchemaMismatchError, match="zz"):
        check_predicate(pc.field("zz") > 1, SCHEMA)
    with pytest.raises(SchemaMismatchError):
        check_predicate(pc.field("b") + 1 > 1, SCHEMA)
    with pytest.raises(InvalidArgumentError, match="filter must be"):
        check_predicate("a > 1", SCHEMA, what="filter")


def test_check_value_expression():
    check_value_expression(pc.field("a") * 2, SCHEMA, what="set['a']")
    with pytest.raises(SchemaMismatchError, match=r"set\['a'\]"):
        check_value_expression(pc.field("nope") * 2, SCHEMA, what="set['a']")


def test_evaluate_mask_null_is_false():
    t = pa.table({"a": [1, None, 3], "b": ["x", "y", None], "c": [0.0, 1.0, 2.0]})
    assert evaluate_mask(t, pc.field("a") > 1).to_pylist() == [False, False, True]
    assert evaluate_mask(t.slice(0, 0), pc.field("a") > 1).to_pylist() == []


def test_evaluate_values_keeps_order():
    t = pa.table({"a": list(range(1000)), "b": ["x"] * 1000, "c": [0.5] * 1000})
    got = evaluate_values(t, {"d": pc.field("a") * 2})
    assert got.column("d").to_pylist() == [i * 2 for i in range(1000)]


def test_is_distinct_nulls_nans_and_nested():
    import numpy as np

    from ctfile.reader.expressions import is_distinct

    nan = float("nan")
    a = pa.chunked_array([[1.0, None, nan, None], [2.0]])
    b = pa.array([1.0, None, nan, 3.0, 2.5])
    assert is_distinct(a, b).tolist() == [False, False, False, True, True]
    assert is_distinct(pa.array([1, 2]), pa.array([1, 3])).dtype == np.bool_
    lists = pa.array([[1], None, [2, 3]])
    assert is_distinct(lists, pa.array([[1], None, [2, 4]])).tolist() == [False, False, True]
