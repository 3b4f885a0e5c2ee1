"""Property test of the depth bound of automatic compaction (SPEC
§Clustering, automatic compaction; issue 26).

Hypothesis draws a table clustered by a unique ``id`` with
``ctfile.autoCompact`` on, a small ``ctfile.partitionRows``, a bound
``ctfile.autoCompactMaxDepth`` (1, 2, 3, or unset: the default 3), a first
insert of ids spaced by 8 (room for new ids inside every partition's range),
then a history of upserts: MERGEs of existing ids and new ones, the new ids
drawn uniformly over the whole key range (each batch then spans every
partition: the drift of issue 26) or inside a narrow window (late arrivals),
plain INSERTs of new ids, DELETEs and UPDATEs of existing ids. After every
commit (and its automatic compaction):

* no first-key value lies in the key ranges of more than the bound's
  partitions: ``clustering_info().max_depth`` (hence ``average_depth``) is at
  most the bound, the promise of SPEC §Clustering for first-key values that
  no two partitions share (ids are unique);
* the automatic compaction, when there is one, committed (a single writer
  never conflicts) and is ``dataChange`` false;
* the table holds exactly the model's rows.

A few examples by default; ``test_depth_bound_long`` (``slow``) runs many more
and longer histories.
"""

from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctfile

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
SPACING, TOP = 8, 8 * 600  # first-insert ids 0, 8, 16, ...; every id below TOP

OPS = st.tuples(
    st.sampled_from(["merge", "merge", "merge", "insert", "delete", "update"]),
    st.integers(0, 30),  # existing ids the statement touches
    st.integers(0, 30),  # new ids it inserts
    st.booleans(),  # new ids inside a narrow window instead of over the whole range
    st.integers(0, 2**32 - 1),  # seed of the ids drawn
)


def _rows(ids, value: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([value] * len(ids), pa.int64())}, schema=SCHEMA)


def _new_ids(rng: np.random.Generator, model: dict, count: int, narrow: bool) -> list[int]:
    lo = int(rng.integers(0, TOP - 64)) if narrow else 0
    hi = lo + 64 if narrow else TOP
    drawn = dict.fromkeys(rng.integers(lo, hi, 3 * count + 1).tolist())
    return [i for i in drawn if i not in model][:count]


def _apply(t: ctfile.Table, model: dict, op: tuple, step: int) -> ctfile.CommitResult | None:
    """Run one statement on the table and the model; None when it has nothing to do."""
    kind, n_old, n_new, narrow, seed = op
    rng = np.random.default_rng(seed)
    old = rng.choice(sorted(model), min(n_old, len(model)), replace=False).tolist() if model else []
    if kind == "merge":
        ids = sorted(set(old) | set(_new_ids(rng, model, n_new, narrow)))
        if not ids:
            return None
        r = t.merge(_rows(ids, step), on="id")
        model.update(dict.fromkeys(ids, step))
    elif kind == "insert":
        ids = _new_ids(rng, model, n_new, narrow)
        if not ids:
            return None
        r = t.insert(_rows(ids, step))
        model.update(dict.fromkeys(ids, step))
    elif kind == "delete":
        if not old:
            return None
        r = t.delete(pc.field("id").isin(old))
        for i in old:
            del model[i]
    else:
        if not old:
            return None
        r = t.update(pc.field("id").isin(old), {"v": pc.scalar(step)})
        model.update(dict.fromkeys(old, step))
    return r


def _check(t: ctfile.Table, model: dict, r: ctfile.CommitResult, bound: int, step: int) -> None:
    ac = r.auto_compaction
    if ac is not None:
        assert ac.committed and ac.operation == "COMPACT", (step, ac)
        assert t.log.commit_info(ac.version).data_change is False
    info = t.clustering_info()
    if info.average_depth is not None:
        assert info.max_depth <= bound and info.average_depth <= bound, (step, info)
    got = t.to_arrow()
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == model, step


def _run(partition_rows: int, max_depth: int | None, base: int, ops: list[tuple]) -> None:
    props = {"ctfile.clusterBy": "id", "ctfile.autoCompact": "true", "ctfile.partitionRows": str(partition_rows)}
    if max_depth is not None:
        props["ctfile.autoCompactMaxDepth"] = str(max_depth)
    bound = max_depth or ctfile.format.properties.DEFAULT_AUTO_COMPACT_MAX_DEPTH
    with tempfile.TemporaryDirectory() as root:
        t = ctfile.create_table(f"{root}/t", SCHEMA, properties=props)
        model: dict[int, int] = {}
        if base:
            ids = np.random.default_rng(base).permutation(np.arange(0, base * SPACING, SPACING)).tolist()
            r = t.insert(_rows(ids, 0))
            model.update(dict.fromkeys(ids, 0))
            _check(t, model, r, bound, 0)
        for step, op in enumerate(ops, 1):
            r = _apply(t, model, op, step)
            if r is not None:
                _check(t, model, r, bound, step)


TABLES = dict(
    partition_rows=st.sampled_from([4, 8, 16, 32]),
    max_depth=st.sampled_from([None, 1, 2, 3]),
    base=st.integers(0, 400),
)
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=6, **_SETTINGS)
@given(ops=st.lists(OPS, min_size=1, max_size=10), **TABLES)
def test_depth_bound(partition_rows, max_depth, base, ops):
    _run(partition_rows, max_depth, base, ops)


@pytest.mark.long
@settings(max_examples=30, **_SETTINGS)
@given(ops=st.lists(OPS, min_size=1, max_size=25), **TABLES)
def test_depth_bound_long(partition_rows, max_depth, base, ops):
    _run(partition_rows, max_depth, base, ops)
