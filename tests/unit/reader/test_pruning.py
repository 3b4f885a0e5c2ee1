"""Partition pruning by statistics: never wrong, and actually prunes.

Every filter is checked three ways against the same in-memory oracle
(``full.filter(f)`` on the whole table read without a filter): the
snapshot's ``to_arrow``, its ``to_batches``, and the pyarrow dataset from
``to_dataset`` (whose fragments carry statistic guarantees).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.reader.pruning import partition_guarantees, prune

UTC = dt.timezone.utc
D = decimal.Decimal

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),  # unique row key
        ("i", pa.int64()),
        ("i32", pa.int32()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("tsn", pa.timestamp("us")),
        ("d", pa.date32()),
        ("dec", pa.decimal128(10, 2)),
        ("b", pa.bool_()),
        ("n", pa.int64()),  # null in every row of the table
    ]
)

LONG = "x" * 40
MAXCP = chr(0x10FFFF) * 40


def _part(k0, i, i32, f, s, ts, tsn, d, dec, b):
    n = len(i)
    return pa.table(
        {
            "k": list(range(k0, k0 + n)), "i": i, "i32": i32, "f": f, "s": s, "ts": ts, "tsn": tsn,
            "d": d, "dec": dec, "b": b, "n": [None] * n,
        },
        schema=SCHEMA,
    )


def _ts(y, m=1, day=1, h=0):
    return dt.datetime(y, m, day, h, tzinfo=UTC)


def _tsn(y, m=1, day=1, h=0):
    return dt.datetime(y, m, day, h)


PARTS = [
    # P0: plain values, no nulls
    _part(0, list(range(10)), list(range(10)), [float(v) for v in range(10)],
          [f"a{v}" for v in range(10)], [_ts(2024, 1, 1, h) for h in range(10)],
          [_tsn(2024, 1, 1, h) for h in range(10)], [dt.date(2024, 1, 1 + v) for v in range(10)],
          [D(f"{v}.25") for v in range(10)], [True] * 10),
    # P1: nulls and NaN mixed with values; strings longer than 32 chars
    _part(10, [10, 11, None, 13, 14, None, 16, 17, 18, 19], list(range(10, 20)),
          [10.0, math.nan, 12.0, None, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0],
          [LONG + str(v) for v in range(10)], [_ts(2025, 3, 1 + v) for v in range(10)],
          [_tsn(2025, 3, 1 + v) for v in range(10)], [dt.date(2025, 3, 1 + v) for v in range(10)],
          [D(f"{100 + v}.00") for v in range(10)], [False] * 9 + [None]),
    # P2: everything null (f all NaN)
    _part(20, [None] * 10, [None] * 10, [math.nan] * 10, [None] * 10, [None] * 10, [None] * 10,
          [None] * 10, [None] * 10, [None] * 10),
    # P3: constant i (min == max), infinities, strings with no possible upper bound, negatives
    _part(30, [5] * 10, [5] * 10, [math.inf, -math.inf, 0.0, -0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
          [MAXCP] * 5 + [MAXCP + "z"] * 5, [_ts(1970)] * 10, [_tsn(1970)] * 10,
          [dt.date(1970, 1, 1)] * 10, [D("-5.50")] * 5 + [D("-0.01")] * 5, [True, False] * 5),
    # P4: NaNs and nulls only for f; years before 1000; 33-char strings
    _part(40, list(range(100, 110)), list(range(100, 110)), [math.nan, None] * 5,
          ["m" * 33] * 5 + ["m" * 32 + "n"] * 5, [_ts(500, 6, 1 + v) for v in range(10)],
          [_tsn(500, 6, 1 + v) for v in range(10)], [dt.date(500, 6, 1 + v) for v in range(10)],
          [D("99999999.99")] * 10, [None] * 10),
]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    t = ctfile.create_table(tmp_path_factory.mktemp("prune") / "t", SCHEMA)
    for p in PARTS:
        t.insert(p)
    assert len(t.snapshot().partitions) == len(PARTS)
    return t


@pytest.fixture(scope="module")
def full(table):
    return table.snapshot().to_arrow()


f = pc.field


def _lit(v, t):
    return pc.scalar(pa.scalar(v, t))


FILTERS = {
    # ints
    "i<5": f("i") < 5,
    "i==5": f("i") == 5,
    "i!=5": f("i") != 5,
    "i>=13": f("i") >= 13,
    "i>1000": f("i") > 1000,
    "i<=-1": f("i") <= -1,
    "i-isin": f("i").isin([3, 15, 105]),
    "i-is_null": f("i").is_null(),
    "i-is_valid": f("i").is_valid(),
    "not(i<5)": ~(f("i") < 5),
    "i-null-or-gt3": f("i").is_null() | (f("i") > 3),
    "i-and-f": (f("i") > 3) & (f("f") < 12.0),
    "i-between": (f("i") > 11) & (f("i") < 14),
    "i32>15": f("i32") > 15,
    "i32==5": f("i32") == _lit(5, pa.int32()),
    # floats
    "f>5": f("f") > 5.0,
    "f<0": f("f") < 0.0,
    "f==0": f("f") == 0.0,
    "f-is_nan": f("f").is_nan(),
    "not-f-is_nan": ~f("f").is_nan(),
    "f-is_null": f("f").is_null(),
    "f==inf": f("f") == math.inf,
    "not(f>1)": ~(f("f") > 1.0),
    "f-null-or-gt15": f("f").is_null() | (f("f") > 15.0),
    # strings
    "s==a3": f("s") == "a3",
    "s==long": f("s") == LONG + "3",
    "s>long": f("s") > LONG,
    "s<b": f("s") < "b",
    "s>=m33": f("s") >= "m" * 33,
    "s==maxcp": f("s") == MAXCP,
    "s>maxcp": f("s") > MAXCP,
    "s-isin": f("s").isin(["a1", LONG + "9", "m" * 32 + "n"]),
    "s-is_null": f("s").is_null(),
    # temporal, decimal, bool
    "ts>2024-06": f("ts") > _lit(_ts(2024, 6), pa.timestamp("us", tz="UTC")),
    "ts<1000AD": f("ts") < _lit(_ts(1000), pa.timestamp("us", tz="UTC")),
    "tsn<=2025-03-03": f("tsn") <= _lit(_tsn(2025, 3, 3), pa.timestamp("us")),
    "tsn==500-06-05": f("tsn") == _lit(_tsn(500, 6, 5), pa.timestamp("us")),
    "d==2024-01-03": f("d") == _lit(dt.date(2024, 1, 3), pa.date32()),
    "d<1900": f("d") < _lit(dt.date(1900, 1, 1), pa.date32()),
    "dec>100": f("dec") > _lit(D("100.00"), pa.decimal128(10, 2)),
    "dec<0": f("dec") < _lit(D("0.00"), pa.decimal128(10, 2)),
    "dec==-5.5": f("dec") == _lit(D("-5.50"), pa.decimal128(10, 2)),
    "b==true": f("b") == True,  # noqa: E712
    "not-b": ~f("b"),
    "b-is_null": f("b").is_null(),
    # the all-null column
    "n-is_null": f("n").is_null(),
    "n>3": f("n") > 3,
    "not(n>3)": ~(f("n") > 3),
    "n-null-or-i>100": f("n").is_null() & (f("i") > 100),
    # no column at all
    "true": pc.scalar(True),
    "false": pc.scalar(False),
}


def _sort(t: pa.Table) -> pa.Table:
    """Sorted by key, floats as text: Table.equals treats NaN != NaN."""
    t = t.sort_by("k")
    if "f" in t.column_names:
        t = t.set_column(t.column_names.index("f"), "f", pc.cast(t.column("f"), pa.string()))
    return t


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filtered_read_equals_in_memory_filter(table, full, name):
    flt = FILTERS[name]
    expected = _sort(full.filter(flt))
    snap = table.snapshot()
    got = _sort(snap.to_arrow(filter=flt))
    assert got.equals(expected), name
    batches = list(snap.to_batches(filter=flt, batch_rows=3))
    streamed = pa.Table.from_batches(batches, schema=snap.schema)
    assert _sort(streamed).equals(expected), name
    via_dataset = snap.to_dataset().to_table(filter=flt)
    assert _sort(via_dataset).equals(expected), name
    hidden = snap.to_arrow(filter=flt, include_hidden=True)
    assert _sort(hidden.select(SCHEMA.names)).equals(expected), name


def _kept(table, flt) -> list[int]:
    """Indices (into PARTS) of the partitions prune() keeps."""
    snap = table.snapshot()
    return sorted(p.first_row_id // 10 for p in prune(snap.partitions, snap.table_schema, flt))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("i<5", [0]),
        ("i==5", [0, 3]),
        ("i>1000", []),
        ("i<=-1", []),
        ("i>=13", [1, 4]),
        ("i-isin", [0, 1, 4]),
        ("i-is_null", [1, 2]),
        ("i-between", [1]),
        ("i32>15", [1, 4]),
        ("s==a3", [0, 3]),
        ("s<b", [0, 3]),  # P3's strings have no bounds: kept
        ("s-is_null", [2]),
        ("ts>2024-06", [1]),
        ("ts<1000AD", [4]),
        ("tsn==500-06-05", [4]),
        ("d==2024-01-03", [0]),
        ("dec<0", [3]),
        ("dec>100", [1, 4]),
        ("n>3", []),
        ("n-is_null", [0, 1, 2, 3, 4]),
        ("false", []),
        ("true", [0, 1, 2, 3, 4]),
    ],
)
def test_pruning_prunes(table, name, expected):
    assert _kept(table, FILTERS[name]) == expected


def test_first_row_ids_follow_insert_order(table):
    # _kept() maps partitions to PARTS indices through firstRowId.
    snap = table.snapshot()
    assert sorted(p.first_row_id for p in snap.partitions) == [0, 10, 20, 30, 40]


def test_to_dataset_fragments_carry_guarantees(table, full):
    snap = table.snapshot()
    dataset = snap.to_dataset()
    assert _sort(dataset.to_table()).equals(_sort(full))
    frags = {fr.path: fr for fr in dataset.get_fragments()}
    assert len(frags) == len(PARTS)
    by_row = {p.first_row_id: table.storage.arrow_path(p.path) for p in snap.partitions}
    g0 = str(frags[by_row[0]].partition_expression)
    assert "k" in g0 and "i" in g0 and "2024" in g0  # P0 has exact bounds for its columns
    g2 = str(frags[by_row[20]].partition_expression)
    assert "is_null" in g2  # P2: all-null columns
    # The dataset prunes with them on its own. P1 mixes nulls into `i`, so its
    # fragment carries no guarantee for `i` and is kept.
    assert {fr.path for fr in dataset.get_fragments(filter=f("i") < 5)} == {by_row[0], by_row[10]}
    assert {fr.path for fr in dataset.get_fragments(filter=f("k") >= 40)} == {by_row[40]}
    assert {fr.path for fr in dataset.get_fragments(filter=f("n").is_valid())} == set()


def test_guarantees_capped(table):
    snap = table.snapshot()
    p1 = next(p for p in snap.partitions if p.first_row_id == 10)
    gs = partition_guarantees(p1, snap.table_schema, ["i", "f", "b", "s", "ts", "dec"])
    assert 1 <= len(gs) <= 16


def test_partition_without_stats_is_kept(table):
    import dataclasses

    snap = table.snapshot()
    parts = [dataclasses.replace(p, stats=None) for p in snap.partitions]
    assert len(prune(parts, snap.table_schema, f("i") > 1000)) == len(parts)


@pytest.mark.parametrize(
    "column, bound",
    [
        ("i", "zero"),
        ("i", 2**70),  # beyond int64 (the log decoder rejects it; pruning must not overflow either)
        ("i32", 2**40),  # a long, but not an integer
        ("f", math.nan),  # JSON has no NaN; Python's json reads one
        ("f", math.inf),
        ("ts", 5),  # not an ISO string
        ("d", "2024-13-01"),
        ("dec", "abc"),
        ("dec", "1e100"),  # does not fit decimal(10,2)
    ],
)
def test_bad_statistics_are_corrupt(table, column, bound):
    """SPEC §Statistics: a bound that does not decode as a value of its
    column's type is a corrupt log (CorruptLogError), never a raw
    OverflowError/AttributeError/InvalidOperation, nor used."""
    import dataclasses

    snap = table.snapshot()
    p = snap.partitions[0]
    fid = snap.table_schema.field(column).id
    bad = dataclasses.replace(p, stats=dataclasses.replace(p.stats, min_values={**p.stats.min_values, fid: bound}))
    with pytest.raises(ctfile.CorruptLogError, match=f"bad statistics for column '{column}'"):
        prune([bad], snap.table_schema, f(column).is_valid())


NAN = float("nan")


@pytest.mark.parametrize("where", [
    ~(pc.field("f") < NAN), ~(pc.field("f") > NAN), ~(pc.field("f") == NAN), pc.field("f") != NAN,
    ~(pc.field("f") <= pc.scalar(pa.scalar(NAN, pa.float32()))), (pc.field("f") < NAN) | (pc.field("f") > 0),
], ids=str)
def test_a_nan_literal_never_prunes_a_partition_with_a_selected_row(tmp_path, where):
    """pyarrow folds ``f < nan`` to true over a range guarantee, so ``~(f <
    nan)``, true for every row, pruned every partition without a NaN: a
    DELETE of it deleted nothing (found by test_pruning_model)."""
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("f", pa.float64())]),
                            properties={"ctfile.partitionRows": "1"})
    t.insert(pa.table({"f": [-1.5, 2.0, NAN, None]}))
    s = t.snapshot()
    selected = s.to_arrow().filter(where).num_rows
    kept = prune(s.partitions, s.metadata.schema, where)
    assert sum(p.num_records for p in kept) >= selected
    assert t.delete(where).num_deleted_rows == selected
