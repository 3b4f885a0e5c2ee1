"""docs/spark.md's streaming bronze -> silver upsert ("Upserts from Spark") end
to end on ``s3://`` tables on SeaweedFS, with local Spark.

Bronze receives events in several commits, including new values for keys
already in silver; a ``foreachBatch`` query (one micro-batch per bronze
version) MERGEs each batch's latest row per key into silver with
``ctfile.spark`` on the executors, exactly once (``app_id`` + batch id).
The workers' environment holds no credentials: the storage options reach
the executors with the stream's options and the MERGE's job.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import ctfile

pytest.importorskip("pyspark")

from pyspark.sql import Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from ctfile.spark import CtfileTable  # noqa: E402

EVENTS = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("seq", pa.int64())])
APP_ID = "bronze-to-silver"


def upserter(silver_uri: str, opts: dict, results: list):
    """docs/spark.md's ``foreachBatch`` function, on an object store; records each CommitResult."""
    newest_first = Window.partitionBy("id").orderBy(F.col("seq").desc())

    def upsert_to_silver(batch_df, batch_id):
        latest = (
            batch_df.select("id", "name", "seq")
            .withColumn("n", F.row_number().over(newest_first))
            .where("n = 1")
            .drop("n")
        )
        silver = CtfileTable.for_path(batch_df.sparkSession, silver_uri, storage_options=opts)
        results.append((batch_id, silver.merge(latest, on="id", app_id=APP_ID, app_version=batch_id)))

    return upsert_to_silver


def run_query(spark, bronze_uri: str, opts: dict, checkpoint: str, fn) -> None:
    query = (
        spark.readStream.format("ctfile")
        .option("storageOptions", json.dumps(opts))
        .option("changes", "append_only")
        .option("startingVersion", 1)  # version 0 created the table
        .option("maxVersionsPerTrigger", 1)  # one micro-batch per bronze version
        .load(bronze_uri)
        .writeStream.foreachBatch(fn)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def latest_per_key(t: ctfile.Table) -> list[tuple]:
    """The expected silver: each key's bronze row with the highest seq."""
    best: dict = {}
    for r in t.to_arrow().to_pylist():
        if r["id"] not in best or r["seq"] > best[r["id"]]["seq"]:
            best[r["id"]] = r
    return sorted(tuple(r.values()) for r in best.values())


def rows(t: ctfile.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in t.refresh().to_arrow().to_pylist())


def events(ids, seq0: int, tag: str) -> pa.Table:
    seqs = range(seq0, seq0 + len(ids))
    return pa.table({"id": ids, "name": [f"{tag}{i}" for i in ids], "seq": seqs}, schema=EVENTS)


def test_streaming_upsert_bronze_to_silver_on_s3(spark, seaweedfs_s3, no_aws_env, tmp_path):
    opts = seaweedfs_s3.storage_options()
    bronze_uri, silver_uri = seaweedfs_s3.new_uri("bronze"), seaweedfs_s3.new_uri("silver")
    bronze = ctfile.create_table(bronze_uri, EVENTS, partition_rows=4, storage_options=opts)
    silver = ctfile.create_table(silver_uri, EVENTS, partition_rows=4, storage_options=opts)
    checkpoint = str(tmp_path / "checkpoint")
    results: list = []
    fn = upserter(silver_uri, opts, results)

    # Run 1: three bronze versions, one micro-batch each; the third repeats keys
    # of the first two, one of them twice in the batch (the latest seq wins).
    bronze.insert(events(list(range(1, 11)), 0, "a"))
    bronze.insert(events([11, 12, 3], 100, "b"))
    bronze.insert(events([1, 5, 1, 13], 200, "c"))
    run_query(spark, bronze_uri, opts, checkpoint, fn)
    assert [b for b, _ in results] == [0, 1, 2]
    assert rows(silver) == latest_per_key(bronze)
    assert [r.num_updated_rows for _, r in results] == [0, 1, 2]
    assert [r.num_inserted_rows for _, r in results] == [10, 2, 1]

    # Run 2, resumed from the checkpoint: updates to many partitions, new keys.
    bronze.insert(events([2, 4, 6, 8, 10, 12], 300, "d"))
    bronze.insert(events([20, 21, 9], 400, "e"))
    run_query(spark, bronze_uri, opts, checkpoint, fn)
    assert [b for b, _ in results] == [0, 1, 2, 3, 4]
    assert all(r.committed and not r.app_transaction_replayed for _, r in results)
    assert rows(silver) == latest_per_key(bronze)
    assert silver.app_version(APP_ID) == 4
    assert [h.operation for h in silver.history(limit=5)] == ["MERGE"] * 5

    # A replayed micro-batch (Spark re-running batch 3 after a crash, with
    # whatever rows it reads then) commits nothing and writes nothing.
    version, before = silver.version, {i.path for i in silver.storage.list_dir("data")}
    replay = spark.createDataFrame([(2, "replayed", 999), (99, "replayed", 999)], "id long, name string, seq long")
    fn(replay, 3)
    _, again = results[-1]
    assert (again.committed, again.app_transaction_replayed) == (False, True)
    assert silver.refresh().version == version
    assert {i.path for i in silver.storage.list_dir("data")} == before
    assert rows(silver) == latest_per_key(bronze)

    report = ctfile.verify_table(silver_uri, storage_options=opts)
    assert report.healthy, report.problems
    assert report.unreferenced_files == []
