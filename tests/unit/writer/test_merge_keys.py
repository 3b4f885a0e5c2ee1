"""One key equality (SPEC §Copy-on-write, MERGE, key equality): ``-0.0``
matches ``0.0``, every NaN every NaN whatever its payload, a null nothing;
in the match itself, the one-row-per-key check, the pruning by statistics
and the conflict-detection predicate. A matched row keeps its stored value
where the source's is not distinct from it (the no-op rule). The same
statements through Spark are in tests/spark/test_spark_merge_keys.py.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.writer.conflicts import KeyPredicate

FLOATS = [pa.float32(), pa.float64()]


def _nan(payload: int, typ: pa.DataType) -> float:
    """A quiet NaN with ``payload`` in its low bits, as ``typ`` stores it."""
    if typ == pa.float32():
        return pa.array(np.array([0x7FC00000 | payload], dtype=np.uint32).view(np.float32))
    return pa.array(np.array([0x7FF8000000000000 | payload], dtype=np.uint64).view(np.float64))


def _bits(values) -> list:
    """Each float as (sign, value) or "nan": tells -0.0 from 0.0."""
    return [None if v is None else "nan" if v != v else (math.copysign(1.0, v), v) for v in values]


def _table(tmp_path, typ, keys, **props) -> ctfile.Table:
    schema = pa.schema([("k", typ), ("v", pa.int64())])
    t = ctfile.create_table(tmp_path / "t", schema, properties=props or None)
    t.insert(pa.table({"k": pa.array(keys, typ), "v": list(range(len(keys)))}, schema=schema))
    return t


@pytest.mark.parametrize("typ", FLOATS, ids=str)
@pytest.mark.parametrize(("stored", "given"), [(0.0, -0.0), (-0.0, 0.0)])
def test_signed_zeros_are_one_key(tmp_path, typ, stored, given):
    """A source key -0.0 updates the row of key 0.0 (and vice versa) instead
    of inserting a second one; the row keeps its stored key."""
    t = _table(tmp_path, typ, [stored, 1.0])
    r = t.merge(pa.table({"k": pa.array([given], typ), "v": [10]}), "k")
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 0)
    rows = t.to_arrow().sort_by("v").to_pylist()
    assert [r["v"] for r in rows] == [1, 10]
    assert _bits([r["k"] for r in rows]) == _bits([1.0, stored])
    # A keyed delete finds it too.
    r = t.merge(pa.table({"k": pa.array([given], typ)}), "k", when_matched="delete", when_not_matched=None)
    assert r.num_deleted_rows == 1


@pytest.mark.parametrize("typ", FLOATS, ids=str)
def test_nans_of_any_payload_are_one_key(tmp_path, typ):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("k", typ), ("v", pa.int64())]))
    t.insert(pa.table({"k": _nan(1, typ), "v": [1]}))
    r = t.merge(pa.table({"k": _nan(2, typ), "v": [2]}), "k")
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 0)
    assert t.to_arrow().column("v").to_pylist() == [2]


@pytest.mark.parametrize("typ", FLOATS, ids=str)
@pytest.mark.parametrize("keys", [[0.0, -0.0], [-0.0, -0.0], "nans"], ids=["zeros", "negative-zeros", "nans"])
def test_two_source_rows_of_one_key_are_refused(tmp_path, typ, keys):
    t = _table(tmp_path, typ, [5.0])
    if keys == "nans":
        keys = pa.concat_arrays([_nan(1, typ), _nan(2, typ)])
    with pytest.raises(ctfile.InvalidArgumentError, match="2 rows with the same key"):
        t.merge(pa.table({"k": pa.array(keys, typ), "v": [1, 2]}), "k")
    assert t.version == 1


def test_null_keys_are_no_key(tmp_path):
    """Source rows with a null key part match nothing, not even each other:
    two of them are not a duplicate key, and both are inserted."""
    schema = pa.schema([("k", pa.float64()), ("j", pa.string()), ("v", pa.int64())])
    t = ctfile.create_table(tmp_path / "t", schema)
    t.insert(pa.table({"k": [None, 1.0], "j": ["a", None], "v": [0, 1]}, schema=schema))
    source = pa.table({"k": [None, None, 1.0, 1.0], "j": ["a", "a", None, None], "v": [2, 3, 4, 5]}, schema=schema)
    r = t.merge(source, ["k", "j"])
    assert (r.num_updated_rows, r.num_inserted_rows) == (0, 4)
    assert t.to_arrow().num_rows == 6


@pytest.mark.parametrize("typ", FLOATS, ids=str)
def test_composite_keys_with_signed_zeros(tmp_path, typ):
    schema = pa.schema([("k", typ), ("j", pa.int64()), ("v", pa.int64())])
    t = ctfile.create_table(tmp_path / "t", schema)
    t.insert(pa.table({"k": pa.array([0.0, 0.0, -0.0], typ), "j": [1, 2, 3], "v": [0, 0, 0]}, schema=schema))
    source = pa.table({"k": pa.array([-0.0, 0.0, 0.0], typ), "j": [1, 3, 4], "v": [1, 3, 4]}, schema=schema)
    r = t.merge(source, ["k", "j"])
    assert (r.num_updated_rows, r.num_inserted_rows) == (2, 1)
    rows = t.to_arrow().sort_by("j").to_pylist()
    assert [(r["j"], r["v"]) for r in rows] == [(1, 1), (2, 0), (3, 3), (4, 4)]
    assert _bits([r["k"] for r in rows]) == _bits([0.0, 0.0, -0.0, 0.0])


@pytest.mark.parametrize("typ", FLOATS, ids=str)
def test_update_keeps_a_value_not_distinct_from_the_stored_one(tmp_path, typ):
    """SPEC §Copy-on-write, UPDATE: -0.0 over 0.0 is no change and leaves
    0.0 stored, even in a column another row of the partition changes."""
    schema = pa.schema([("id", pa.int64()), ("x", typ)])
    t = ctfile.create_table(tmp_path / "t", schema)
    t.insert(pa.table({"id": [1, 2], "x": pa.array([0.0, 5.0], typ)}, schema=schema))
    r = t.merge(pa.table({"id": [1, 2], "x": pa.array([-0.0, 6.0], typ)}, schema=schema), "id")
    assert r.num_updated_rows == 1
    rows = t.to_arrow(include_hidden=True).sort_by("id").to_pylist()
    assert _bits([r["x"] for r in rows]) == _bits([0.0, 6.0])
    assert rows[0][ctfile.ROW_VERSION_COLUMN] == 1  # unchanged row: its row version kept


@pytest.mark.parametrize("typ", FLOATS, ids=str)
@pytest.mark.parametrize(("stored", "given"), [(0.0, -0.0), (-0.0, 0.0)])
def test_pruning_and_conflict_predicate_find_the_other_zero(tmp_path, typ, stored, given):
    """The statistics of a partition holding only ``stored`` keep it a
    candidate for a source key ``given``, and the conflict-detection
    predicate finds the row in it (a concurrent insert of ``stored`` conflicts
    with a MERGE of ``given``)."""
    t = _table(tmp_path, typ, [stored, stored], **{"ctfile.partitionRows": "2"})
    t.insert(pa.table({"k": pa.array([7.0, 8.0], typ), "v": [0, 0]}))
    schema = t.schema_at()
    k = KeyPredicate.from_source(pa.table({"k": pa.array([given], typ)}), ["k"])
    parts = sorted(t.snapshot().partitions, key=lambda p: p.first_row_id)
    assert [k.may_hold_key(p, schema) for p in parts] == [True, False]
    assert k.first_match(t.storage, schema, parts) == parts[0]


def test_concurrent_insert_of_the_other_zero_conflicts(tmp_path):
    """A MERGE of key -0.0 whose transaction read the table before a
    concurrent MERGE inserted 0.0 conflicts (SPEC §Conflict detection, rule
    4: the winner added a row the loser's key predicate selects) and, run
    again, updates that row: the table ends with one row of key 0."""
    t = _table(tmp_path, pa.float64(), [5.0])
    other = ctfile.open_table(t.uri)
    with pytest.raises(ctfile.CommitConflictError):
        with t.transaction() as tx:
            tx.merge(pa.table({"k": [-0.0], "v": [10]}), "k", when_matched="update", when_not_matched="insert")
            other.merge(pa.table({"k": [0.0], "v": [1]}), "k")  # not a blind append: checked (rule 4)
    r = t.merge(pa.table({"k": [-0.0], "v": [10]}), "k")
    assert (r.num_updated_rows, r.num_inserted_rows) == (1, 0)
    assert sorted(t.to_arrow().column("v").to_pylist()) == [0, 10]


def test_update_where_equal_to_negative_zero_agrees(tmp_path):
    """``update(k == -0.0)`` (IEEE comparison) selects the rows a MERGE of
    -0.0 matches."""
    t = _table(tmp_path, pa.float64(), [0.0, -0.0, 1.0])
    assert t.update(pc.field("k") == -0.0, {"v": 9}).num_updated_rows == 2
    r = t.merge(pa.table({"k": [-0.0], "v": [8]}), "k")
    assert r.num_updated_rows == 2 and r.num_inserted_rows == 0
