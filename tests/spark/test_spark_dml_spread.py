"""A distributed MERGE spreads its work over Spark tasks, and the driver
never holds the table (issue 15's proof of distribution).

The table is written in several partitions; the MERGE touches most of them.
Spark's status tracker shows the rewrite stage ran more than one task, and
the driver's Arrow memory (a fresh pool counting every allocation the
driver's Python makes during the statement) peaks far below the table's
size: the rows were read and written in the Python workers. Spark's record
of the physical plans shows that only the source was broadcast (a
broadcast is collected on the driver's JVM first), never the candidates.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import ctfile
from ctfile.spark import CtfileTable
from spark_helpers import spark_conf  # noqa: E402

ROWS = 400_000
PARTITION_ROWS = 50_000


@pytest.fixture
def big_table(tmp_path):
    t = ctfile.create_table(
        str(tmp_path / "t"),
        pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("s", pa.string())]),
        properties={"ctfile.partitionRows": str(PARTITION_ROWS)},
    )
    ids = np.arange(ROWS, dtype=np.int64)
    t.insert(pa.table({"id": ids, "v": ids * 3, "s": pa.array([f"row-{i:08d}" for i in ids])}))
    return t


def _stage_tasks(spark, group: str) -> list[tuple[str, int]]:
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            s = tracker.getStageInfo(stage)
            if s is not None:
                out.append((s.name, s.numTasks))
    return out


def _next_execution(spark) -> int:
    """The id the next SQL execution will have at least (the status store
    keeps the last ``spark.sql.ui.retainedExecutions``, so its count is not
    an id once a session ran more)."""
    it = spark._jsparkSession.sharedState().statusStore().executionsList().iterator()
    last = -1
    while it.hasNext():
        last = max(last, it.next().executionId())
    return last + 1


def _broadcast_inputs(spark, first_execution: int) -> list[str]:
    """The operators under each BroadcastExchange of the SQL executions
    from ``first_execution`` on (Spark's own record of the physical plans):
    a broadcast is collected on the driver first."""
    store = spark._jsparkSession.sharedState().statusStore()
    it = store.executionsList().iterator()
    out = []
    while it.hasNext():
        e = it.next()
        if e.executionId() < first_execution:
            continue
        tree = e.physicalPlanDescription().split("\n\n")[0].splitlines()
        out += [tree[i + 1].strip() for i, line in enumerate(tree[:-1]) if "BroadcastExchange" in line]
    return out


def test_merge_runs_in_many_tasks_and_driver_holds_no_table(spark, big_table):
    n_parts = len(big_table.snapshot().partitions)
    assert n_parts == ROWS // PARTITION_ROWS
    # Every 97th id, across every partition, plus new ids.
    keys = np.concatenate([np.arange(0, ROWS, 97), np.arange(ROWS, ROWS + 500)]).astype(np.int64)
    source = spark.createDataFrame(pa.table({"id": keys, "v": -keys - 1}).to_pandas())
    table_bytes = sum(p.size_bytes for p in big_table.snapshot().partitions)
    raw_bytes = big_table.to_arrow().nbytes
    sc = spark.sparkContext
    pool = pa.system_memory_pool()
    old_pool = pa.default_memory_pool()
    before = pool.max_memory()
    pa.set_memory_pool(pool)
    first_execution = _next_execution(spark)
    sc.setJobGroup("ct-merge-spread", "distributed MERGE")
    try:
        result = CtfileTable.for_path(spark, big_table.uri).merge(source, "id")
    finally:
        pa.set_memory_pool(old_pool)
        sc.setLocalProperty("spark.jobGroup.id", None)
    peak = pool.max_memory() - before
    assert result.num_updated_rows == len(range(0, ROWS, 97)) and result.num_inserted_rows == 500
    assert result.num_removed_partitions == n_parts  # every partition held a key
    stages = _stage_tasks(spark, "ct-merge-spread")
    assert stages, "the MERGE ran no Spark job in its group"
    assert max(n for _, n in stages) > 1, stages
    # The driver allocated far less Arrow memory than the table holds (raw
    # or encoded); reading even one partition would take about 1/8 of it.
    assert peak < raw_bytes / 20 and peak < table_bytes, (peak, raw_bytes, table_bytes)
    # Nor did its JVM: the source was broadcast, never the candidate rows
    # (read by MapInArrow), which Spark would collect on the driver to do so.
    broadcast = _broadcast_inputs(spark, first_execution)
    assert broadcast and not any("MapInArrow" in b for b in broadcast), broadcast
    got = big_table.refresh().to_arrow()
    assert got.num_rows == ROWS + 500
    v = dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist()))
    assert v[97] == -98 and v[98] == 98 * 3 and v[ROWS + 1] == -(ROWS + 2)


def test_a_spread_merge_runs_in_many_tasks_and_driver_holds_only_the_source(spark, big_table, caplog):
    """The Python engine spread over the executors (ctfile.spark.local.run_spread):
    the driver holds the source, each task rewrites candidates of its own,
    and nothing is broadcast or joined by Spark."""
    keys = np.concatenate([np.arange(0, ROWS, 97), np.arange(ROWS, ROWS + 500)]).astype(np.int64)
    source = spark.createDataFrame(pa.table({"id": keys, "v": -keys - 1}).to_pandas())
    raw_bytes = big_table.to_arrow().nbytes
    pool, old_pool = pa.system_memory_pool(), pa.default_memory_pool()
    before = pool.max_memory()
    pa.set_memory_pool(pool)
    first_execution = _next_execution(spark)
    spark.sparkContext.setJobGroup("ct-merge-spread-engine", "spread MERGE")
    try:
        with spark_conf(spark, "spark.ctfile.local.spreadRows", "100000"), caplog.at_level("INFO", "ctfile.spark"):
            result = (CtfileTable.for_path(spark, big_table.uri).merge_builder(source, on="id")
                      .when_matched_update(set={"v": "s.v"}).when_not_matched_insert_all().execute())
    finally:
        pa.set_memory_pool(old_pool)
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    peak = pool.max_memory() - before
    assert any("spread over 8 candidate partitions" in r.getMessage() for r in caplog.records)
    assert result.num_updated_rows == len(range(0, ROWS, 97)) and result.num_inserted_rows == 500
    stages = _stage_tasks(spark, "ct-merge-spread-engine")
    assert max(n for _, n in stages) > 1, stages
    # Less than one partition's rows: the driver held the source and the
    # inserted rows, never a candidate.
    assert peak < raw_bytes / (ROWS // PARTITION_ROWS), (peak, raw_bytes)
    assert not _broadcast_inputs(spark, first_execution)
    got = big_table.refresh().to_arrow()
    v = dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist()))
    assert got.num_rows == ROWS + 500 and v[97] == -98 and v[98] == 98 * 3 and v[ROWS + 1] == -(ROWS + 2)
