"""Spark reads and writes an ``s3://`` table on SeaweedFS.

The storage options reach the Python workers (executor side) through the
data source options: ``storageOptions`` (a JSON object) or ``storage.<key>``
(one string option per key). The workers' environment holds no credentials,
so a read or write that works proves the options travelled.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile

pytest.importorskip("pyspark")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def test_spark_reads_and_writes_s3(spark, seaweedfs_s3, no_aws_env):
    ep = seaweedfs_s3
    opts = ep.storage_options()
    uri = ep.new_uri("spark")
    t = ctfile.create_table(uri, SCHEMA, partition_rows=2, storage_options=opts)
    t.insert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=SCHEMA))
    t.update(pc.field("id") == 2, {"name": "B"})

    # Read with storageOptions JSON: the snapshot and a change scan.
    reader = spark.read.format("ctfile").option("storageOptions", json.dumps(opts))
    assert _rows(reader.load(uri)) == [(1, "a"), (2, "B"), (3, "c")]
    changes = (spark.read.format("ctfile").option("storageOptions", json.dumps(opts))
               .option("changes", "default").option("startingVersion", "2").load(uri))
    assert _rows(changes.select("id", "name", "METADATA$ACTION")) == [(2, "B", "INSERT"), (2, "b", "DELETE")]
    # Append with storage.<key> options (string values) from 2 tasks: one version.
    df = spark.range(10, 13, numPartitions=2).selectExpr("id", "concat('n', cast(id as string)) as name")
    w = df.write.format("ctfile").mode("append")
    for k in ("key", "secret", "endpoint_url"):
        w = w.option(f"storage.{k}", opts[k])
    w.save(uri)
    t = ctfile.open_table(uri, storage_options=opts)
    assert t.version == 3 and t.history(limit=1)[0].operation == "WRITE"
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2, 3, 10, 11, 12]

    # No orphan: every data object is referenced.
    assert {i.path for i in t.storage.list_dir("data")} == {
        p.path for v in range(t.version + 1) for p in t.snapshot(v).partitions
    }


@pytest.mark.parametrize("in_driver", [True, False], ids=["driver", "executors"])
def test_changes_df_of_a_captured_s3_table(spark, seaweedfs_s3, no_aws_env, caplog, in_driver):
    """``CtfileTable.changes_df(information="default")`` of an ``s3://``
    table opened with storage options, change capture on: a small scan read
    in the driver by ctfile's reader (``spark.ctfile.local.changeRows``),
    else by the data source from the change files; the rows of the Python
    change scan either way."""
    from spark_helpers import spark_conf

    from ctfile.spark import CtfileTable

    opts = seaweedfs_s3.storage_options()
    uri = seaweedfs_s3.new_uri("changes-df")
    t = ctfile.create_table(uri, SCHEMA, partition_rows=2, storage_options=opts,
                            properties={"ctfile.changeCapture": "before_after"})
    t.insert(pa.table({"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"]}, schema=SCHEMA))
    t.update(pc.field("id") == 2, {"name": "B"})
    t.delete(pc.field("id") == 4)
    t.insert(pa.table({"id": [5], "name": ["e"]}, schema=SCHEMA))
    cs = t.changes(start_version=2, information="default")
    assert cs.plan_shape is ctfile.PlanShape.CAPTURED
    want = sorted(tuple(r.values()) for r in cs.to_arrow().to_pylist())
    limit = str(cs.plan.rows_to_read) if in_driver else "0"
    with spark_conf(spark, "spark.ctfile.local.changeRows", limit), caplog.at_level("INFO", logger="ctfile"):
        df = CtfileTable.for_path(spark, uri, storage_options=opts).changes_df(2, t.version, information="default")
    assert ("read in the driver" in caplog.text) is in_driver
    assert not df.inputFiles()  # neither path hands Spark the table's files
    assert _rows(df) == want
