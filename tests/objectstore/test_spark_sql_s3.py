"""``ctfile.spark.sql`` on ``s3://`` tables (moto's S3 server): storage
options reach every part of a statement (the registered name's view, the
writes' tasks, the MERGE's executors, ``ctfile.`<uri>``` with
``sql(storage_options=)``) with no credentials in the environment."""

from __future__ import annotations

import pyarrow as pa
import pytest

import ctfile

pytest.importorskip("pyspark")

import ctfile.spark  # noqa: E402


def test_sql_statements_on_s3(spark, moto_s3, no_aws_env):
    opts = moto_s3.storage_options()
    schema = pa.schema([("id", pa.int64()), ("total", pa.int64())])
    t = ctfile.create_table(moto_s3.new_uri("sql"), schema, storage_options=opts, partition_rows=2)
    ctfile.spark.register(spark, "s3_accounts", t.uri, storage_options=opts)
    ctfile.spark.sql(spark, "INSERT INTO s3_accounts VALUES (1, 10), (2, 20), (3, 30)")
    r = ctfile.spark.sql(spark, """
        MERGE INTO s3_accounts AS t USING (SELECT * FROM VALUES (1L, 5L), (4L, 40L) AS v(id, amount)) AS s
        ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET total = t.total + s.amount
        WHEN NOT MATCHED THEN INSERT (id, total) VALUES (s.id, s.amount)
        WHEN NOT MATCHED BY SOURCE AND t.id = 3 THEN DELETE""")
    assert (r.version, r.num_updated_rows, r.num_inserted_rows, r.num_deleted_rows) == (2, 1, 1, 1)
    ctfile.spark.sql(spark, f"UPDATE ctfile.`{t.uri}` SET total = 0 WHERE id = 2", storage_options=opts)
    assert sorted(tuple(x) for x in spark.sql("SELECT * FROM s3_accounts").collect()) == [(1, 15), (2, 0), (4, 40)]
    old = ctfile.spark.sql(spark, "SELECT count(*) FROM s3_accounts VERSION AS OF 1").first()[0]
    assert old == 3
    assert ctfile.spark.sql(spark, "RESTORE TABLE s3_accounts TO VERSION AS OF 1").version == 4
    assert sorted(r["total"] for r in t.refresh().to_arrow().to_pylist()) == [10, 20, 30]
