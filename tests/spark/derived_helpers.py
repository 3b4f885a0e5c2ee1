"""Helpers of the derived-table tests: two small sources, random histories
of Python DML on them, and the oracle (the query run by Spark on the
sources at a refresh's recorded frontier)."""

from __future__ import annotations

import decimal
import math
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import ctfile
from ctfile.spark import CtfileTable

A_SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("v", pa.decimal128(10, 2)), ("s", pa.string())])
B_SCHEMA = pa.schema([("k", pa.int32()), ("w", pa.int64())])

#: One query per incremental rule (and one with none), all over ``a`` and ``b``.
QUERIES = {
    "filter": "SELECT id, k, v * 2 AS v2, upper(s) AS s FROM a WHERE k IS NULL OR k > 1",
    "join": "SELECT a.id, a.k, b.w FROM a JOIN b ON a.k = b.k",
    "aggregate": ("SELECT k, count(*) AS n, sum(v) AS sv, avg(v) AS av, count(v) AS nv FROM a GROUP BY k"),
    "minmax": "SELECT k, min(s) AS mn, max(id) AS mx, count(DISTINCT s) AS ds FROM a GROUP BY k",
    "distinct": "SELECT DISTINCT k, s FROM a",
    "union": "SELECT k FROM a WHERE id % 2 = 0 UNION ALL SELECT k FROM b",
    "join_aggregate": "SELECT b.w, sum(a.v) AS sv, count(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY b.w",
    "window": "SELECT id, row_number() OVER (ORDER BY id) AS rn FROM a",
}


def a_rows(ids: list[int], seed: int) -> pa.Table:
    """Rows of ``a`` for ``ids``, with repeated keys, nulls and decimals."""
    ks = [None if (i + seed) % 7 == 0 else (i * 3 + seed) % 4 for i in ids]
    vs = [None if (i + seed) % 5 == 0 else decimal.Decimal(f"{(i * 37 + seed) % 1000}.{(i + seed) % 100:02d}") for i in ids]
    ss = [None if (i + seed) % 6 == 0 else "xyz"[(i + seed) % 3] for i in ids]
    return pa.table({"id": ids, "k": ks, "v": vs, "s": ss}, schema=A_SCHEMA)


def make_sources(root, *, capture: bool = False, storage_options: dict | None = None) -> tuple[ctfile.Table, ctfile.Table]:
    """Sources ``a`` (20 rows) and ``b`` (5 rows) under ``root`` (a path or URI)."""
    props = {"ctfile.changeCapture": "before_after"} if capture else None
    root = str(root).rstrip("/")
    a = ctfile.create_table(f"{root}/a", A_SCHEMA, partition_rows=8, properties=props, storage_options=storage_options)
    b = ctfile.create_table(f"{root}/b", B_SCHEMA, partition_rows=4, properties=props, storage_options=storage_options)
    a.insert(a_rows(list(range(20)), 0))
    b.insert(pa.table({"k": [0, 1, 1, 2, None], "w": [10, 11, 12, 20, 99]}, schema=B_SCHEMA))
    return a, b


def apply_op(a: ctfile.Table, b: ctfile.Table, op: tuple) -> None:
    """One step of a random history (see ``OPS`` in test_derived.py)."""
    kind, x, y = op
    if kind == "insert":
        start = a.snapshot().num_records + 1000 * (x + 1)
        a.insert(a_rows(list(range(start, start + y + 1)), x))
    elif kind == "update":
        a.update(pc.equal(pc.bit_wise_and(pc.field("id"), pa.scalar(3, pa.int64())), x % 4),
                 {"s": pa.scalar("xyz"[y % 3]), "k": pa.scalar(y % 4, pa.int32())})
    elif kind == "delete":
        a.delete(pc.equal(pc.field("k"), x % 4))
    elif kind == "merge":
        a.merge(a_rows([x, x + 1, 5000 + y], y + 1), "id")
    elif kind == "b_insert":
        b.insert(pa.table({"k": [x % 4, None], "w": [100 + y, 200 + y]}, schema=B_SCHEMA))
    elif kind == "b_delete":
        b.delete(pc.equal(pc.field("k"), x % 4))
    elif kind == "compact":
        a.compact()
    else:  # pragma: no cover
        raise AssertionError(kind)


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 6)
    if isinstance(v, decimal.Decimal):
        return v.normalize()
    return v


def multiset(rows: list[dict] | pa.Table, columns: list[str]) -> Counter:
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    return Counter(tuple(_norm(r[c]) for c in columns) for r in rows)


def expected_rows(spark, query: str, bindings: dict[str, ctfile.Table], frontier) -> list[dict]:
    """``query`` run by Spark on each source (``bindings``: name -> table)
    at the version ``frontier`` recorded for it."""
    versions = {v.name: v.version for v in frontier}
    for name, table in bindings.items():
        if name in versions:
            CtfileTable(spark, table).to_df(version=versions[name]).createOrReplaceTempView(name)
    return [r.asDict() for r in spark.sql(query).collect()]


def equals_query(spark, t: Any, sources: dict[str, ctfile.Table]) -> None:
    """The derived table ``t``'s visible rows equal its query at its
    recorded frontier (delayed view semantics)."""
    table = t.table.refresh()
    cols = table.schema.names
    want = expected_rows(spark, table.derived.query, sources, table.derived.frontier)
    assert multiset(table.to_arrow(), cols) == multiset(want, cols)
