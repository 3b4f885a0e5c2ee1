"""DELETE and UPDATE prune micro-partitions by statistics before reading
(SPEC §Copy-on-write, writer requirements; issue 16, item 2).

A table of four micro-partitions with disjoint, known ranges in every column
(ids 0-9, 10-19, 20-29, 30-39, inserted sorted with ``partitionRows`` 10);
for each predicate shape the API accepts, the partitions a statement reads
(the transaction's read set: opened, or removed by a metadata-only delete)
are exactly those expected. The statements run in a transaction that is
aborted, so every case sees the same table.
"""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.reader.pruning import column_bounds

UTC = dt.timezone.utc
SCHEMA = pa.schema(
    [
        pa.field("i", pa.int64(), nullable=False),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("dec", pa.decimal128(10, 2)),
        ("b", pa.bool_()),
    ]
)
ALL = {0, 1, 2, 3}
f = pc.field


def _rows() -> pa.Table:
    ids = range(40)
    # Partition 1 holds a NaN in f, partition 2 a null.
    fs = [float("nan") if i == 15 else None if i == 25 else float(i) for i in ids]
    return pa.table(
        {
            "i": list(ids),
            "f": fs,
            "s": [f"k{i:03d}" for i in ids],
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids],
            "ts": [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i) for i in ids],
            "dec": [decimal.Decimal(i) / 4 for i in ids],
            "b": [i >= 20 for i in ids],
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> ctfile.Table:
    t = ctfile.create_table(tmp_path_factory.mktemp("prune") / "t", SCHEMA, properties={"ctfile.partitionRows": "10"})
    t.insert(_rows())
    assert len(t.snapshot().partitions) == 4
    return t


def _index(t: ctfile.Table) -> dict[str, int]:
    """Partition path -> its number (ids 10n..10n+9)."""
    schema = t.snapshot().metadata.schema
    fid = schema.field("i").id
    return {p.path: column_bounds(p, "i", fid, "long")[0] // 10 for p in t.snapshot().partitions}


def reads(t: ctfile.Table, statement) -> set[int]:
    """The partitions ``statement(tx)`` reads; the transaction is aborted."""
    tx = t.transaction()
    try:
        statement(tx)
        return {_index(t)[p] for p in tx.read_partitions}
    finally:
        tx.abort()


def _ts(hours: int) -> pa.Scalar:
    return pa.scalar(dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=hours), SCHEMA.field("ts").type)


CASES = {
    "eq": (f("i") == 5, {0}),
    "ne": (f("i") != 5, ALL),
    "lt": (f("i") < 10, {0}),
    "le": (f("i") <= 10, {0, 1}),
    "gt": (f("i") > 29, {3}),
    "ge": (f("i") >= 30, {3}),
    "between": ((f("i") >= 12) & (f("i") <= 15), {1}),
    "or": ((f("i") == 1) | (f("i") == 35), {0, 3}),
    "not": (~(f("i") < 30), {3}),
    "is_in": (f("i").isin([1, 35]), {0, 3}),
    "is_in_strings": (f("s").isin(["k001", "k031"]), {0, 3}),
    # Partition 1 holds a NaN, which pyarrow cannot describe in a guarantee
    # but as "not null": any comparison or is_in on f keeps it.
    "is_in_with_null": (f("f").isin(pa.array([1.0, None])), {0, 1, 2}),
    "is_null": (f("f").is_null(), {2}),
    "is_valid": (f("f").is_valid(), ALL),
    "float_lt_skips_nulls": (f("f") < 5.0, {0, 1}),
    "float_ge_with_nan": (f("f") >= 15.0, {1, 2, 3}),
    "column_on_right": (pc.scalar(35) < f("i"), {3}),
    "cast": (f("i").cast(pa.float64()) > 35.0, {3}),
    "string_eq": (f("s") == "k031", {3}),
    "date": (f("d") >= dt.date(2024, 2, 5), {3}),
    "timestamp": (f("ts") >= _ts(36), {3}),
    "decimal": (f("dec") > pa.scalar(decimal.Decimal("8.50"), SCHEMA.field("dec").type), {3}),
    "bool_eq": (f("b") == True, {2, 3}),  # noqa: E712 -- an Expression, not a Python comparison
    # A bare boolean column and its negation prune once a partition's one
    # value is guaranteed as an equality (pyarrow folds the expression).
    "bool_field": (f("b"), {2, 3}),
    "bool_not": (~f("b"), {0, 1}),
    "true": (pc.scalar(True), ALL),
    "null": (pc.scalar(None).cast(pa.bool_()), set()),
    "false": (pc.scalar(False), set()),
    "nested": (((f("i") < 5) | (f("i") > 35)) & ~(f("s") == "k001"), {0, 3}),
    "nested_and_or": (((f("i") < 15) & f("b")) | f("f").is_null(), {2}),
    # Limits (documented in reader/pruning.py): pyarrow does not bound an
    # arithmetic expression or a string function by a column's range, nor
    # rule out NaN from a NaN count, and its expression tree is not exposed
    # to do so here. These read every partition holding the column's values.
    "arithmetic": (f("i") + 1 > 36, ALL),
    "starts_with": (pc.starts_with(f("s"), "k03"), ALL),
    "is_nan": (pc.is_nan(f("f")), ALL),
    # pyarrow unwraps a numeric cast (above) but not a date -> timestamp one.
    "cast_date": (f("d").cast(pa.timestamp("s")) >= pa.scalar(dt.datetime(2024, 2, 5), pa.timestamp("s")), ALL),
}


@pytest.mark.parametrize("name", CASES)
def test_delete_reads_only_partitions_that_can_match(table, name):
    where, expected = CASES[name]
    assert reads(table, lambda tx: tx.delete(where)) == expected


@pytest.mark.parametrize("name", CASES)
def test_update_reads_only_partitions_that_can_match(table, name):
    where, expected = CASES[name]
    assert reads(table, lambda tx: tx.update(where, {"s": "u"})) == expected


def test_update_without_where_reads_every_partition(table):
    assert reads(table, lambda tx: tx.update(None, {"s": "u"})) == ALL


def test_folding_error_over_one_valued_column_is_the_rows_error(new_table, file_tree):
    """Pruning folds ``x / 0`` over a column with one value and fails; it
    retries with ranges, and the statement fails as evaluating its rows
    does, changing nothing."""
    t = new_table()
    t.insert(pa.table({"id": [1, 2], "x": [7, 7], "s": ["a", "b"]}))
    before = file_tree(t.storage.root)
    with pytest.raises(ctfile.InvalidArgumentError, match="divide by zero"):
        t.delete(f("x") / 0 > 1)
    with pytest.raises(ctfile.InvalidArgumentError, match="divide by zero"):
        t.update(f("x") / 0 > 1, {"s": "u"})
    assert file_tree(t.storage.root) == before
