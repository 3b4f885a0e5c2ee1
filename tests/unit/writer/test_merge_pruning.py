"""MERGE reads only the micro-partitions whose statistics can hold one of
the source's keys (SPEC §Copy-on-write, MERGE; issue 16, item 2): the set
of key values, not their range, so sparse keys skip the partitions between
them. The observable is the transaction's read set (the partitions the
statement opened), in a transaction that is aborted.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import pyarrow as pa
import pytest

import ctfile
from ctfile.writer.conflicts import KeyPredicate

UTC = dt.timezone.utc


def _table(tmp_path, keys: pa.Array, *, extra: dict | None = None, rows: int = 10) -> ctfile.Table:
    cols = {"k": keys, "v": pa.array(range(len(keys)), pa.int64()), **(extra or {})}
    data = pa.table(cols)
    t = ctfile.create_table(tmp_path / "t", data.schema, properties={"ctfile.partitionRows": str(rows)})
    t.insert(data)
    return t


def _order(t: ctfile.Table) -> dict[str, int]:
    """Partition path -> its position in insertion order (first_row_id)."""
    parts = sorted(t.snapshot().partitions, key=lambda p: p.first_row_id)
    return {p.path: i for i, p in enumerate(parts)}


def merge_reads(t: ctfile.Table, source: pa.Table, on="k", **kw) -> tuple[set[int], dict]:
    """(partitions a MERGE of ``source`` reads, its counts); aborted."""
    tx = t.transaction()
    try:
        counts = tx.merge(source, on, **kw)
        return {_order(t)[p] for p in tx.read_partitions}, counts
    finally:
        tx.abort()


def test_sparse_keys_read_only_their_partitions(tmp_path):
    t = _table(tmp_path, pa.array(range(100), pa.int64()))
    assert len(t.snapshot().partitions) == 10
    src = pa.table({"k": [1, 95, 1_000_000], "v": [-1, -1, -1]})
    read, counts = merge_reads(t, src)
    # The range 1..1_000_000 overlaps every partition; the set only two.
    assert read == {0, 9}
    assert counts == {"inserted": 1, "updated": 2, "deleted": 0}


def _ts(n):
    return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=n)


# Forty sorted values per type (partitions of 10), and source keys that fall
# in partitions 0 and 3 only, or between values of partitions 1 and 2.
TYPES = {
    "long": (pa.array(range(0, 80, 2), pa.int64()), [3, 4, 70], {0, 3}),
    "int": (pa.array(range(0, 80, 2), pa.int32()), [4, 39, 70], {0, 3}),
    "double": (pa.array([x / 2 for x in range(40)], pa.float64()), [1.0, 2.25, 19.5], {0, 3}),
    "string": (pa.array([f"k{x:03d}" for x in range(40)]), ["k001", "k0095", "k039"], {0, 3}),
    "date": (
        pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=2 * x) for x in range(40)]),
        [dt.date(2024, 1, 3), dt.date(2024, 3, 10)], {0, 3},
    ),
    "timestamp_tz": (pa.array([_ts(2 * x) for x in range(40)], pa.timestamp("us", tz="UTC")), [_ts(2), _ts(39), _ts(78)], {0, 3}),
    "timestamp_ntz": (
        pa.array([_ts(2 * x).replace(tzinfo=None) for x in range(40)], pa.timestamp("us")),
        [_ts(2).replace(tzinfo=None), _ts(78).replace(tzinfo=None)], {0, 3},
    ),
    "decimal": (
        pa.array([decimal.Decimal(x) / 4 for x in range(40)], pa.decimal128(8, 2)),
        [decimal.Decimal("0.25"), decimal.Decimal("4.90"), decimal.Decimal("9.75")], {0, 3},
    ),
    "boolean": (pa.array([x >= 20 for x in range(40)]), [False], {0, 1}),
}


@pytest.mark.parametrize("name", TYPES)
def test_every_orderable_key_type_prunes_by_the_set(tmp_path, name):
    keys, source_keys, expected = TYPES[name]
    t = _table(tmp_path, keys)
    src = pa.table({"k": pa.array(source_keys, keys.type)})
    read, _ = merge_reads(t, src, when_matched="delete", when_not_matched=None)
    assert read == expected


def test_composite_keys_prune_column_by_column(tmp_path):
    ids = list(range(40))
    t = _table(tmp_path, pa.array([i // 10 for i in ids], pa.int64()), extra={"b": pa.array(ids, pa.int64())})
    both = pa.table({"k": [0, 3], "b": [5, 35]})
    assert merge_reads(t, both, on=["k", "b"], when_matched="delete", when_not_matched=None)[0] == {0, 3}
    # k = 0 lives in partition 0, b = 35 in partition 3: neither holds both.
    crossed = pa.table({"k": [0], "b": [35]})
    assert merge_reads(t, crossed, on=["k", "b"], when_matched="delete", when_not_matched=None)[0] == set()


def test_null_keys_match_nothing(tmp_path):
    # Partition 0 keys 0..9, partition 1 all null, partition 2 keys 20..29.
    keys = pa.array(list(range(10)) + [None] * 10 + list(range(20, 30)), pa.int64())
    t = _table(tmp_path, keys)
    read, counts = merge_reads(t, pa.table({"k": pa.array([None, 25], pa.int64()), "v": [-1, -1]}))
    assert read == {2}
    assert counts == {"inserted": 1, "updated": 1, "deleted": 0}
    assert merge_reads(t, pa.table({"k": pa.array([None], pa.int64())}))[0] == set()


def test_nan_key_reads_only_partitions_holding_nan(tmp_path):
    # Arrow's join, and so MERGE, matches a NaN key with a NaN key.
    keys = pa.array([float(x) for x in range(10)] + [float("nan")] + [float(x) for x in range(11, 30)])
    t = _table(tmp_path, keys)
    read, counts = merge_reads(t, pa.table({"k": [float("nan")], "v": [-1]}))
    assert read == {1}
    assert counts == {"inserted": 0, "updated": 1, "deleted": 0}


def test_first_match_does_not_open_partitions_the_key_set_excludes(tmp_path):
    """Conflict detection (SPEC §Conflict detection, rule 4) checks a
    winner's partitions with the same candidates: those that cannot hold a
    source key are never opened (their files are deleted here, so opening
    one would fail)."""
    t = _table(tmp_path, pa.array(range(100), pa.int64()))
    snap = t.snapshot()
    order = _order(t)
    for p in snap.partitions:
        if order[p.path] not in (0, 9):
            os.remove(os.path.join(t.storage.root, p.path))
    schema = snap.metadata.schema
    assert KeyPredicate.from_source(pa.table({"k": [1_000_000, 3]}), ["k"]).first_match(
        t.storage, schema, snap.partitions
    ).path == next(p for p, i in order.items() if i == 0)
    assert KeyPredicate.from_source(pa.table({"k": [-5, 1_000_000]}), ["k"]).first_match(
        t.storage, schema, snap.partitions
    ) is None
