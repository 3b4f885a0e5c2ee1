"""Structured Streaming: the ctfile change source (offsets are versions) and
the exactly-once ctfile sink (a txn action per micro-batch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.types import LongType, StructField, StructType

import ctfile
from ctfile.spark_datasource.stream import CtfileStreamWriter
from spark_helpers import Collector, id_x_table, read, sorted_rows, spark_env

ACTION, ISUPDATE = "METADATA$ACTION", "METADATA$ISUPDATE"
CHILD = Path(__file__).resolve().parent / "_stream_child.py"
ID_X = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64())])


def insert(t: ctfile.Table, ids, x=0) -> int:
    return t.insert(pa.table({"id": list(ids), "x": [x] * len(ids)}, schema=ID_X)).version


def run_source(spark, path, collector, checkpoint, **options):
    """One availableNow run of a ctfile change stream into ``collector``."""
    r = spark.readStream.format("ctfile")
    for k, v in {"changes": "default", **options}.items():
        r = r.option(k, v)
    q = (
        r.load(str(path)).writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    try:
        q.awaitTermination(300)
        assert not q.isActive, "the availableNow run did not finish"
    finally:
        q.stop()


def txn_versions(root, app_id=None) -> list[int]:
    """Batch ids recorded by txn actions in the log, in commit order."""
    out = []
    for f in sorted((Path(root) / "_ct_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action and (app_id is None or action["txn"]["appId"] == app_id):
                out.append(action["txn"]["version"])
    return out


# ---------------------------------------------------------------- source


def test_source_delivers_new_commits_on_each_run(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 3)  # v1: ids 0-2 (before the stream starts)
    c = Collector()
    ck = tmp_path / "ck"
    run_source(spark, t.uri, c, ck)  # no startingVersion: changes committed from now on
    assert c.rows == []
    t.update(pc.field("id") == 1, {"x": 100})  # v2
    insert(t, [3])  # v3
    t.delete(pc.field("id") == 0)  # v4
    run_source(spark, t.uri, c, ck)
    # One micro-batch: the minimum delta of versions 2-4.
    assert c.batches[-1][1] == c.rows == [
        (0, "DELETE", False), (1, "DELETE", True), (1, "INSERT", True), (3, "INSERT", False)
    ]


def test_source_never_skips_a_version(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 0)
    for v in range(1, 6):
        assert insert(t, [10 * v, 10 * v + 1]) == v
    c = Collector(columns=("id",))
    ck = tmp_path / "ck"
    run_source(spark, t.uri, c, ck, startingVersion=1, maxVersionsPerTrigger=2)
    # versions 1-2, 3-4, 5: three micro-batches, every row exactly once
    assert [rows for _, rows in c.batches] == [
        [(10,), (11,), (20,), (21,)],
        [(30,), (31,), (40,), (41,)],
        [(50,), (51,)],
    ]
    assert [b for b, _ in c.batches] == [0, 1, 2]
    # Commits between runs: the next run continues at version 6.
    insert(t, [60])
    insert(t, [70])
    run_source(spark, t.uri, c, ck, startingVersion=1, maxVersionsPerTrigger=2)
    assert c.batches[3:] == [(3, [(60,), (70,)])]
    assert c.rows == sorted((i,) for v in range(1, 6) for i in (10 * v, 10 * v + 1)) + [(60,), (70,)]


def test_source_restart_after_a_failed_batch_has_no_loss_or_duplicates(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 0)
    for v in range(1, 4):
        insert(t, [v])
    c = Collector(columns=("id",))
    c.fail_batch = 1  # batch 1 is planned (its offsets logged) and then fails
    ck = tmp_path / "ck"
    with pytest.raises(Exception, match="injected failure in batch 1"):
        run_source(spark, t.uri, c, ck, startingVersion=1, maxVersionsPerTrigger=1)
    assert c.batches == [(0, [(1,)])]
    insert(t, [4, 5])  # committed while the query is down
    run_source(spark, t.uri, c, ck, startingVersion=1, maxVersionsPerTrigger=2)
    # Batch 1 is re-run from its logged offsets (version 2 only), then the rest follows.
    assert c.batches == [(0, [(1,)]), (1, [(2,)]), (2, [(3,), (4,), (5,)])]


def test_source_initial_rows_then_changes(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 3)  # v1
    t.update(pc.field("id") == 2, {"x": 20})  # v2
    c = Collector(columns=("id", "x", ACTION, ISUPDATE))
    ck = tmp_path / "ck"
    run_source(spark, t.uri, c, ck, initialRows="true")
    assert c.rows == [(0, 0, "INSERT", False), (1, 1, "INSERT", False), (2, 20, "INSERT", False)]
    t.update(pc.field("id") == 0, {"x": 5})  # v3
    run_source(spark, t.uri, c, ck, initialRows="true")
    assert c.batches[-1][1] == [(0, 0, "DELETE", True), (0, 5, "INSERT", True)]
    assert len(c.batches) == 2


def test_source_starting_version_and_modes(spark, people, tmp_path):
    c = Collector(columns=("id", "name", ACTION, ISUPDATE))
    run_source(spark, people.uri, c, tmp_path / "ck1", startingVersion=3)
    batch = read(spark, people.uri, changes="default", startingVersion=3)
    assert c.rows == sorted_rows(batch, ["id", "name", ACTION, ISUPDATE])
    assert c.rows == [
        (1, "Jeff", "DELETE", True), (1, "Jeffrey", "INSERT", True), (2, "Donny", "DELETE", False),
        (4, "Maud", "DELETE", True), (4, "Maude", "INSERT", True), (5, "Uli", "DELETE", False),
    ]
    audit = Collector(columns=("id", ACTION, "METADATA$COMMIT_VERSION"))
    run_source(spark, people.uri, audit, tmp_path / "ck2", changes="audit", startingVersion=2, maxVersionsPerTrigger=3)
    assert [b for b, _ in audit.batches] == [0, 1]  # versions 2-4, then 5
    assert {v for _, rows in audit.batches[:1] for _, _, v in rows} == {2, 3, 4}
    assert audit.batches[1][1] == [(2, "DELETE", 5), (5, "DELETE", 5)]
    assert len(audit.rows) == 9


def test_source_over_a_captured_table(spark, tmp_path):
    # Micro-batches over DML commits with change capture on read change
    # files (CAPTURED plans) and equal the Python change scans.
    t = id_x_table(tmp_path / "t", 8, partition_rows=2, properties={"ctfile.changeCapture": "before_after"})  # v1
    cols = ("id", "x", ACTION, ISUPDATE)
    c = Collector(columns=cols)
    ck = tmp_path / "ck"
    run_source(spark, t.uri, c, ck)  # from now on
    t.update(pc.field("id").isin([1, 6]), {"x": 100})  # v2
    t.delete(pc.field("id") == 3)  # v3
    insert(t, [20, 21])  # v4
    assert str(t.changes(start_version=2).plan_shape) == "CAPTURED"
    run_source(spark, t.uri, c, ck)
    assert c.batches[-1][1] == sorted_rows(t.changes(start_version=2).to_arrow().to_pylist(), list(cols)) == [
        (1, 1, "DELETE", True), (1, 100, "INSERT", True), (3, 3, "DELETE", False),
        (6, 6, "DELETE", True), (6, 100, "INSERT", True), (20, 0, "INSERT", False), (21, 0, "INSERT", False),
    ]
    audit = Collector(columns=("id", "x", ACTION, "METADATA$COMMIT_VERSION"))
    run_source(spark, t.uri, audit, tmp_path / "ck2", changes="audit", startingVersion=2, maxVersionsPerTrigger=1)
    assert [b for b, _ in audit.batches] == [0, 1, 2]
    expected = t.changes(start_version=2, information="audit").to_arrow().to_pylist()
    assert audit.rows == sorted_rows(expected, list(audit.columns))


# ---------------------------------------------------------------- sink


def stream_into_ctfile(spark, source, target, checkpoint, **options):
    opts = {"changes": "append_only", "startingVersion": "1", **options}
    r = spark.readStream.format("ctfile")
    for k, v in opts.items():
        r = r.option(k, v)
    q = (
        r.load(str(source)).select("id", "x").writeStream.format("ctfile")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(str(target))
    )
    try:
        q.awaitTermination(300)
        assert not q.isActive
    finally:
        q.stop()


def snapshot_rows(path) -> list[tuple]:
    return sorted(tuple(r.values()) for r in ctfile.open_table(str(path)).snapshot().to_arrow().to_pylist())


def test_sink_target_equals_source(spark, tmp_path):
    src = id_x_table(tmp_path / "src", 0, partition_rows=2)
    for v in range(1, 5):
        insert(src, range(10 * v, 10 * v + 3), x=v)
    tgt, ck = tmp_path / "tgt", tmp_path / "ck"
    stream_into_ctfile(spark, src.uri, tgt, ck, maxVersionsPerTrigger=2)
    assert snapshot_rows(tgt) == snapshot_rows(src.uri)
    t = ctfile.open_table(str(tgt))
    assert t.version == 2  # v0 create, one version per micro-batch (2 batches)
    assert t.schema == ID_X
    assert txn_versions(tgt, str(ck)) == [0, 1]
    # More source commits, another run: the target follows, still exactly once.
    insert(src, [99], x=9)
    stream_into_ctfile(spark, src.uri, tgt, ck, maxVersionsPerTrigger=2)
    assert snapshot_rows(tgt) == snapshot_rows(src.uri)
    assert txn_versions(tgt, str(ck)) == [0, 1, 2]
    assert sorted_rows(read(spark, tgt)) == snapshot_rows(src.uri)


def test_sink_creates_the_table_with_partition_rows_and_spark_drops_partition_by(spark, tmp_path):
    # The sink used to ignore partitionRows when it created the table.
    # partitionBy on writeStream never reaches a Python data source (PySpark
    # 4.3 drops it, no option carries it): the output is laid out as usual.
    src = id_x_table(tmp_path / "src", 5, partition_rows=5)
    tgt, ck = tmp_path / "tgt", tmp_path / "ck"
    q = (
        spark.readStream.format("ctfile").option("changes", "append_only").option("startingVersion", "1")
        .load(src.uri).select("id", "x")
        .writeStream.format("ctfile").partitionBy("x").option("partitionRows", "2")
        .option("checkpointLocation", str(ck)).trigger(availableNow=True).start(str(tgt))
    )
    try:
        q.awaitTermination(300)
        assert not q.isActive and q.exception() is None
    finally:
        q.stop()
    t = ctfile.open_table(str(tgt))
    assert t.properties == {"ctfile.partitionRows": "2"}
    assert sorted(p.num_records for p in t.snapshot().partitions) == [1, 2, 2]
    assert snapshot_rows(tgt) == snapshot_rows(src.uri)
    assert sorted(os.listdir(tgt)) == ["_ct_log", "data"]  # no x=... directories


def test_sink_commit_of_a_replayed_batch_is_a_no_op(tmp_path):
    tgt = str(tmp_path / "tgt")
    schema = StructType([StructField("id", LongType(), False), StructField("x", LongType(), True)])
    batch = pa.record_batch({"id": [1, 2], "x": [10, 20]}, schema=ID_X)
    w = CtfileStreamWriter({"path": tgt, "checkpointlocation": "/ck/query-a"}, schema, False)

    w.commit([w.write(iter([batch]))], 0)
    t = ctfile.open_table(tgt)
    assert t.version == 1 and t.snapshot().to_arrow().num_rows == 2
    files = set(os.listdir(Path(tgt) / "data"))

    # Spark replays batch 0 after a crash: new files are written, the commit
    # is skipped and those files are deleted.
    w.commit([w.write(iter([batch]))], 0)
    assert t.refresh().version == 1
    assert t.snapshot().to_arrow().num_rows == 2
    assert set(os.listdir(Path(tgt) / "data")) == files

    w.commit([w.write(iter([batch]))], 1)  # the next batch commits
    assert t.refresh().version == 2 and t.snapshot().to_arrow().num_rows == 4
    assert txn_versions(tgt, "/ck/query-a") == [0, 1]

    # Another query (another checkpoint) has its own batch ids.
    other = CtfileStreamWriter({"path": tgt, "checkpointlocation": "/ck/query-b"}, schema, False)
    other.commit([other.write(iter([batch]))], 0)
    assert t.refresh().version == 3 and t.snapshot().to_arrow().num_rows == 6


def test_sink_needs_a_checkpoint_or_app_id(tmp_path):
    schema = StructType([StructField("id", LongType(), False)])
    with pytest.raises(ctfile.InvalidArgumentError, match="txnAppId"):
        CtfileStreamWriter({"path": str(tmp_path / "t")}, schema, False)


@pytest.mark.slow
def test_sink_exactly_once_across_a_kill(spark, tmp_path):
    """SIGKILL a streaming query (driver, JVM and workers) after a committed
    batch, restart it from its checkpoint: the target equals the source.

    The killed query runs in a child process with its own SparkSession; the
    restart runs the same query in this test's session (a new query that
    knows only the checkpoint and the tables on disk, like a restarted
    driver), which spares a second JVM start-up."""
    from _stream_child import start_query

    src = id_x_table(tmp_path / "src", 0)
    versions = 6
    for v in range(1, versions + 1):
        insert(src, range(10 * v, 10 * v + 3), x=v)
    tgt, ck = tmp_path / "tgt", tmp_path / "ck"
    log1 = tmp_path / "run1.log"

    proc = subprocess.Popen(
        [sys.executable, str(CHILD), src.uri, str(tgt), str(ck)],
        env=spark_env(), stdout=open(log1, "w"), stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the JVM and workers die with it
    )
    try:
        deadline = time.monotonic() + 400
        # Wait until the first micro-batch is committed in the target (v0 create, v1 batch 0).
        while not (tgt / "_ct_log" / f"{1:020d}.json").exists():
            assert proc.poll() is None, f"child exited early:\n{log1.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no batch committed in time:\n{log1.read_text()[-3000:]}"
            time.sleep(0.002)
        assert proc.poll() is None
        # Usually this lands after the target commit of a batch and before Spark
        # records the batch in its checkpoint (commits/<id>): the restarted query
        # then replays that batch, and the sink must recognise it.
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = txn_versions(tgt, str(ck))
    assert 1 <= len(done) < versions, "the kill must land mid-stream"
    replayed = not (ck / "commits" / str(done[-1])).exists()
    print(f"killed after {len(done)} committed batch(es); batch {done[-1]} replayed on restart: {replayed}")

    q = start_query(spark, src.uri, str(tgt), str(ck))
    try:
        q.awaitTermination(600)
        assert not q.isActive, "the restarted query did not finish"
        assert q.exception() is None
    finally:
        q.stop()
    assert snapshot_rows(tgt) == snapshot_rows(src.uri)  # no loss, no duplicates
    assert txn_versions(tgt, str(ck)) == list(range(versions))  # each batch committed once
