"""Property test of COMPACT on a table with clustering keys (SPEC §Clustering,
**COMPACT**): the layout guarantees, checked from the files and statistics.

Hypothesis draws a clustered table (keys ``id``; ``region,id`` with three
regions, a low-cardinality first key; ``s``, a string with nulls, empty and
over-long values; ``f,id``, a double with nulls, NaN and -0.0; and ``dup``,
many equal keys), a small ``ctfile.partitionRows``, batches of rows inserted
one commit each (their ranges overlap), an optional DELETE and UPDATE of the
first key, and how large a group may be before it is rewritten in key ranges
(``MEMORY_PARTITIONS``, a size threshold, set to 1 or 2 to take the
large-group path; patched in ``ctfile.writer.recluster``, which reads it at each rewrite). After ``compact()``:

* rows, row ids and row versions are unchanged (as a multiset), the commit
  is ``dataChange`` false and every change scan across it is empty;
* no two live partitions overlap by the definition of SPEC §Clustering
  (``overlaps`` of ``key_ranges``), except partitions of groups that
  ``max_rows`` left out, untouched;
* every live partition's rows are in the clustering order (ascending, NaN
  after numbers, nulls last), checked with a comparator of this file;
* every partition the compaction wrote holds at most ``partitionRows`` plus
  the quarter a cut may move;
* a second ``compact()`` (after one without ``max_rows``) rewrites nothing.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ctfile
import ctfile.writer.recluster as recluster
from ctfile.format.actions import CommitInfo
from ctfile.reader.clustering import key_ranges, overlaps
from ctfile.reader.partition_reader import read_partition_table
from ctfile.writer.recluster import choose_groups, plan_groups

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("region", pa.string()),
        pa.field("s", pa.string()),
        pa.field("f", pa.float64()),
        pa.field("dup", pa.int64()),
        pa.field("tag", pa.int64(), nullable=False),  # unique per inserted row
    ]
)
LONG = "z" * 40  # over the 32-character statistics prefix: a rounded-up maximum (SPEC §Statistics)
KEYS = ["id", "region,id", "s", "f,id", "dup"]

ROWS = st.fixed_dictionaries(
    {
        "id": st.one_of(st.none(), st.integers(0, 200)),
        "region": st.sampled_from(["eu", "us", "ap"]),
        "s": st.sampled_from([None, "", "a", "b", "m", "y", "y", "b", LONG]),
        "f": st.sampled_from([None, math.nan, -0.0, 0.0, 1.5, -3.0, 7.25]),
        "dup": st.integers(0, 2),
    }
)


def norm(x):
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else x + 0.0
    return x


def order_key(v):
    """SPEC §Clustering: ascending, NaN after every number, null after everything."""
    if v is None:
        return (2,)
    if isinstance(v, float) and math.isnan(v):
        return (1,)
    return (0, v)


def rows_of(t: ctfile.Table) -> Counter:
    snap = t.snapshot().to_arrow(include_hidden=True)
    names = [f.name for f in SCHEMA] + [ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN]
    return Counter(tuple(map(norm, r)) for r in zip(*(snap.column(c).to_pylist() for c in names)))


def check_sorted(t: ctfile.Table, keys: tuple[str, ...]) -> None:
    snap = t.snapshot()
    for p in snap.partitions:
        part = read_partition_table(t.storage, p, snap.table_schema, columns=list(keys))
        ks = [tuple(order_key(v) for v in row) for row in zip(*(part.column(k).to_pylist() for k in keys))]
        assert ks == sorted(ks), (p.path, keys, part.to_pylist())


def overlapping_pairs(t: ctfile.Table, key: str) -> list[tuple[str, str]]:
    snap = t.snapshot()
    ranged, _ = key_ranges(snap.partitions, snap.table_schema, key)
    return [(a.partition.path, b.partition.path) for i, a in enumerate(ranged) for b in ranged[i + 1:]
            if overlaps(a, b)]


def check_compaction(t: ctfile.Table, before_version: int, before_rows: Counter, r: ctfile.CommitResult,
                     target: int) -> None:
    """The invariants of any COMPACT commit ``r`` (or none)."""
    assert rows_of(t) == before_rows
    if not r.committed:
        assert t.version == before_version
        return
    assert r.version == before_version + 1 and r.operation == "COMPACT"
    info = next(a for a in t.log.read_entry(r.version) if isinstance(a, CommitInfo))
    assert info.data_change is False
    for information in ("default", "append_only", "audit"):
        for changelog in (None, "op"):
            cs = t.changes(start_version=r.version, end_version=r.version, information=information, changelog=changelog)
            assert cs.to_arrow().num_rows == 0, (information, changelog)
    assert t.changes(start_version=before_version, end_version=r.version).to_arrow().num_rows == \
        t.changes(start_version=before_version, end_version=before_version).to_arrow().num_rows
    added = {p.path for p in t.snapshot().partitions} - {p.path for p in t.snapshot(before_version).partitions}
    for p in t.snapshot().partitions:
        if p.path in added:
            assert 0 < p.num_records <= target + target // 4, (p.path, p.num_records, target)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    keys=st.sampled_from(KEYS),
    target=st.integers(3, 8),
    batches=st.lists(st.lists(ROWS, min_size=1, max_size=25), min_size=2, max_size=7),
    dml=st.booleans(),
    memory=st.sampled_from([None, 1, 2]),
    max_rows=st.one_of(st.none(), st.integers(1, 60)),
)
def test_compact_layout(keys, target, batches, dml, memory, max_rows):
    event(f"keys {keys}, memory {memory}")
    with pytest.MonkeyPatch.context() as mp:
        if memory is not None:
            mp.setattr(recluster, "MEMORY_PARTITIONS", memory)  # read by rewrite_group at each call
        t = ctfile.create_table(tempfile.mkdtemp(prefix="ctfile-layout-"), SCHEMA,
                                properties={"ctfile.clusterBy": keys, "ctfile.partitionRows": str(target)})
        tag = 0
        for b in batches:
            cols = {c: [r[c] for r in b] for c in ("id", "region", "s", "f", "dup")}
            t.insert(pa.table({**cols, "tag": list(range(tag, tag + len(b)))}, schema=SCHEMA))
            tag += len(b)
        if dml:
            t.delete(pc.field("tag").isin(range(0, tag, 5)))
            t.update(pc.field("tag").isin(range(0, tag, 3)), {"id": pc.field("tag"), "s": "c", "f": 2.5})
        order = tuple(keys.split(","))
        first = order[0]
        check_sorted(t, order)

        snap = t.snapshot()
        groups = plan_groups(snap.partitions, snap.table_schema, first, target)
        chosen = choose_groups(groups, max_rows)
        left_out = {p.path for g in groups if g not in chosen for p in g.partitions}
        before, v0 = rows_of(t), t.version
        r = t.compact(max_rows=max_rows)
        check_compaction(t, v0, before, r, target)
        assert r.num_removed_partitions == sum(len(g.partitions) for g in chosen)
        event("rewrote" if r.committed else "nothing to do")
        check_sorted(t, order)
        for a, b in overlapping_pairs(t, first):
            assert a in left_out and b in left_out, (a, b, "overlap outside the groups max_rows left out")

        if max_rows is not None:  # then the whole of it
            v1 = t.version
            r = t.compact()
            check_compaction(t, v1, before, r, target)
            check_sorted(t, order)
        assert overlapping_pairs(t, first) == []
        # Convergence without churn. One pass does not always finish: a
        # group's rewritten tail can be small next to a small partition the
        # group did not take (it was neither overlapping nor next to a small
        # member), and the next pass merges the two. So every further pass
        # must strictly lower the partition count (progress, never the same
        # rewrite again), and the passes end.
        for extra in range(len(t.snapshot().partitions) + 1):
            count, v2 = len(t.snapshot().partitions), t.version
            again = t.compact()
            check_compaction(t, v2, before, again, target)
            if not again.committed:
                assert t.version == v2
                break
            assert len(t.snapshot().partitions) < count, ("churn", again, t.snapshot().partitions)
            assert overlapping_pairs(t, first) == []
        else:
            raise AssertionError("compact() never converged")
        event(f"extra passes to converge: {extra}")
