"""Spark batch writes to a table with clustering keys (SPEC §Clustering,
**Writes**): each task sorts its rows by the keys and cuts its files at
``ctfile.partitionRows``, moving a cut by at most a quarter to a change of
the first key; the table reads back the same rows; ``compact()`` then leaves
no two partitions overlapping (SPEC §Clustering definition).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow.parquet as pq

import ctfile
from ctfile.format.actions import AddPartition
from ctfile.reader.clustering import key_ranges, overlaps
from spark_helpers import read, sorted_rows

TARGET = 40
TASKS = 3
ROWS = 600  # 200 a task: five files each


def _order(v):
    return (1,) if v is None else (0, v)  # nulls last


def test_spark_write_sorts_and_cuts_each_task_then_compact_unlaps(spark, tmp_path):
    p = str(tmp_path / "t")
    frame = spark.range(0, ROWS, numPartitions=TASKS).selectExpr(
        "id",
        # A scattered first key with runs of equal values, some nulls.
        "case when id % 17 = 0 then null else cast((id * 7919) % 53 as bigint) end as k",
        "concat('v', cast(id as string)) as v",
    )
    frame.limit(0).write.format("ctfile").mode("append").save(p)  # creates the table (no rows)
    t = ctfile.open_table(p)
    t.set_properties({"ctfile.clusterBy": "k,id", "ctfile.partitionRows": str(TARGET)})
    v0 = t.version
    frame.write.format("ctfile").mode("append").save(p)
    t.refresh()
    assert t.version == v0 + 1

    # The files of the write, by task (data/part-<task>-<seq>.parquet), in order.
    by_task: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for a in t.log.read_entry(t.version):
        if isinstance(a, AddPartition):
            task, seq = a.partition.path.rsplit("/", 1)[1][len("part-"):-len(".parquet")].rsplit("-", 1)
            by_task[task].append((int(seq), a.partition.path))
    assert len(by_task) == TASKS
    for task, files in by_task.items():
        rows = []
        sizes = []
        for _, path in sorted(files):
            part = pq.read_table(f"{p}/{path}", columns=["k", "id"]).to_pylist()
            sizes.append(len(part))
            rows += [(_order(r["k"]), r["id"]) for r in part]
        assert rows == sorted(rows), f"task {task}: files not in clustering order"
        assert all(TARGET <= n <= TARGET + TARGET // 4 for n in sizes[:-1]), sizes
        assert 0 < sizes[-1] <= TARGET + TARGET // 4, sizes
        assert sum(sizes) == ROWS // TASKS

    want = sorted_rows(frame)
    assert sorted_rows(read(spark, p)) == want

    # Tasks' files overlap each other until a COMPACT reclusters them.
    def overlapping() -> int:
        snap = t.snapshot()
        ranged, _ = key_ranges(snap.partitions, snap.table_schema, "k")
        return sum(overlaps(a, b) for i, a in enumerate(ranged) for b in ranged[i + 1:])

    assert overlapping() > 0
    r = t.compact()
    assert r.committed and r.operation == "COMPACT"
    assert overlapping() == 0
    assert t.clustering_info().average_overlaps == 0.0  # ranges may only touch (depth 2 at a shared bound)
    assert sorted_rows(read(spark, p)) == want
    assert t.changes(start_version=r.version, end_version=r.version).to_arrow().num_rows == 0
