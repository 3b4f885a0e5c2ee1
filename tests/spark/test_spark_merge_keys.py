"""One key equality in both engines (SPEC §Copy-on-write, MERGE, key
equality): the same MERGE statements, over float32 and float64 keys, single
and composite, with sources holding ±0.0, NaN, nulls, ±inf, the largest and
smallest finite values and subnormals, run by ``Table.merge`` on one twin
and by ``ctfile.spark.CtfileTable.merge`` on the other, give the same
tables, counts and commits, and refuse the same duplicate keys. The Python
side alone (payload NaNs, pruning, conflicts) is in
tests/unit/writer/test_merge_keys.py.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from dml_helpers import commit_info, counts, row_ids, table_state, twins
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.spark import CtfileTable


def _edges(typ: pa.DataType) -> list:
    """The edge values of ``typ`` as Python floats it holds exactly, and null."""
    info = np.finfo(np.float32 if typ == pa.float32() else np.float64)
    tiny = float(info.smallest_subnormal)
    return [0.0, -0.0, math.nan, math.inf, -math.inf, float(info.max), float(info.min),
            float(info.smallest_normal), tiny, -tiny, 1.0, None]


def _key(v):
    """A float as the key it is (SPEC key equality): None for null (no key)."""
    if v is None:
        return None
    return "nan" if v != v else v + 0.0  # -0.0 + 0.0 is 0.0


def _canon(v):
    """A value compared bit for bit, NaN equal to NaN: tells -0.0 from 0.0."""
    if isinstance(v, float):
        return "nan" if v != v else (math.copysign(1.0, v), v)
    return v


def _state(t: ctfile.Table, old: set[int]) -> tuple[list, list]:
    existing, fresh = table_state(t, old)
    canon = [sorted((tuple((k, _canon(v)) for k, v in row) for row in rows), key=repr) for rows in (existing, fresh)]
    return canon[0], canon[1]


SPARK_TYPE = {pa.float32(): "float", pa.float64(): "double"}


def _schema(typ: pa.DataType, composite: bool) -> pa.Schema:
    return pa.schema([("k", typ)] + ([("j", pa.int64())] if composite else []) + [("v", pa.int64())])


def _rows(keys: list, composite: bool, first_v: int, *, every_j: bool = False) -> list[tuple]:
    """One row per key; with ``composite``, key (k, j) with j cycling 1, 2
    (or, ``every_j``, two rows per key, j = 1 and 2: a table in which each
    composite source key finds its k)."""
    if composite and every_j:
        return [(k, j, first_v + 2 * i + j - 1) for i, k in enumerate(keys) for j in (1, 2)]
    return [((k, 1 + i % 2) if composite else (k,)) + (first_v + i,) for i, k in enumerate(keys)]


def _arrow(schema: pa.Schema, rows: list[tuple]) -> pa.Table:
    return pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)], schema=schema)


def run_both(spark, root: Path, typ: pa.DataType, composite: bool, table_keys: list, source_keys: list,
             *, partition_rows: int = 3) -> ctfile.CommitResult | type:
    """The MERGE of ``source_keys`` into a table of ``table_keys`` through
    both engines: the same outcome, an InvalidArgumentError included (which
    is returned; else the commit result)."""
    schema = _schema(typ, composite)
    data = _arrow(schema, _rows(table_keys, composite, 0, every_j=True))
    st_, pt = twins(root, schema, data, partition_rows=partition_rows)
    old, versions = row_ids(pt), (st_.version, pt.version)
    rows = _rows(source_keys, composite, 100)
    ddl = f"k {SPARK_TYPE[typ]}" + (", j long" if composite else "") + ", v long"
    source = spark.createDataFrame(rows, ddl).repartition(2)
    on = ["k", "j"] if composite else "k"
    outcomes = []
    for run in (lambda: CtfileTable.for_path(spark, st_.uri).merge(source, on),
                lambda: pt.merge(_arrow(schema, rows), on)):
        try:
            outcomes.append(run())
        except ctfile.InvalidArgumentError as e:
            outcomes.append(type(e))
    r1, r2 = outcomes
    if r1 is ctfile.InvalidArgumentError or r2 is ctfile.InvalidArgumentError:
        assert r1 == r2, (table_keys, source_keys, r1, r2)
        assert (st_.refresh().version, pt.refresh().version) == versions  # nothing committed
        return r1
    assert counts(r1) == counts(r2), (table_keys, source_keys)
    assert _state(st_, old) == _state(pt, old), (table_keys, source_keys)
    if r1.committed:
        assert commit_info(st_, r1.version) == commit_info(pt, r2.version)
    return r1


def _has_duplicate_key(keys: list, composite: bool) -> bool:
    seen = [(_key(k), 1 + i % 2) if composite else _key(k) for i, k in enumerate(keys) if k is not None]
    return len(seen) != len(set(seen))


@pytest.mark.parametrize("composite", [False, True], ids=["single", "composite"])
@pytest.mark.parametrize("typ", [pa.float32(), pa.float64()], ids=str)
def test_edge_keys_merge_alike(spark, tmp_path, typ, composite):
    """Every edge value in the table (0.0 and -0.0 both: one source key
    matches two rows), and a source of each edge key but 0.0 (-0.0 stands
    for it), plus a key no row has: 11 rows updated (-0.0 twice), the null
    and 2.0 inserted."""
    edges = _edges(typ)
    table_keys = edges
    source_keys = [k for k in edges if not (k == 0.0 and math.copysign(1.0, k) > 0)] + [2.0]
    assert not _has_duplicate_key(source_keys, composite)
    r = run_both(spark, tmp_path, typ, composite, table_keys, source_keys)
    assert (r.num_updated_rows, r.num_inserted_rows) == (11, 2)


@pytest.mark.parametrize(
    "source_keys", [[0.0, -0.0], [math.nan, math.nan], [None, None], [-0.0, 1.0, 0.0]],
    ids=["zeros", "nans", "nulls", "zeros-apart"],
)
def test_duplicate_keys_are_refused_alike(spark, tmp_path, source_keys):
    """0.0 and -0.0, or two NaNs, are one key: both engines refuse the
    MERGE; two nulls are no key: both insert them."""
    r = run_both(spark, tmp_path, pa.float64(), False, [0.0, 5.0], source_keys)
    if source_keys == [None, None]:
        assert r.num_inserted_rows == 2
    else:
        assert r is ctfile.InvalidArgumentError


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
@given(data=st.data())
def test_random_edge_key_sets_merge_alike(spark, data):
    """Random small key sets drawn from the edge values (duplicates by key
    equality included: then both engines refuse)."""
    typ = data.draw(st.sampled_from([pa.float32(), pa.float64()]), label="type")
    composite = data.draw(st.booleans(), label="composite")
    values = st.sampled_from(_edges(typ))
    table_keys = data.draw(st.lists(values, min_size=0, max_size=6), label="table")
    source_keys = data.draw(st.lists(values, min_size=1, max_size=5), label="source")
    with tempfile.TemporaryDirectory() as d:
        run_both(spark, Path(d), typ, composite, table_keys, source_keys, partition_rows=2)
