"""What ctfile.spark asks of a session through public API only
(:mod:`ctfile.spark.session`), checked against what the JVM of the local
classic session says: the measured default parallelism, and the size
estimate the broadcast decision uses on Spark Connect."""

from __future__ import annotations

from ctfile.spark.session import default_parallelism, default_size, fits_broadcast
from spark_helpers import spark_conf


def test_default_parallelism_is_spark_s(spark):
    assert default_parallelism(spark) == spark.sparkContext.defaultParallelism


def test_size_estimate_is_spark_s_for_data_without_statistics(spark):
    """Spark sizes a local relation as the estimate does on Connect: 8
    bytes a row plus each type's default size."""
    row = ("1L, 'a', 1.5D, CAST(1.25 AS DECIMAL(10,2)), CAST(1.25 AS DECIMAL(30,2)), DATE'2020-01-01', "
           "TIMESTAMP'2020-01-01 00:00:00', true, X'01', array(1), map('k', 1L), named_struct('i', 1, 't', 's')")
    df = spark.sql(f"SELECT * FROM VALUES ({row}), ({row}), ({row}) AS t(l, s, d, x, y, dt, ts, b, bin, a, m, st)")
    spark_size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    assert spark_size == 3 * (8 + default_size(df.schema))


def test_broadcast_threshold_follows_the_setting(spark):
    df = spark.createDataFrame([(1,)], "id long").persist()
    try:
        df.count()
        assert fits_broadcast(spark, df, 1)
        with spark_conf(spark, "spark.sql.autoBroadcastJoinThreshold", "-1"):
            assert not fits_broadcast(spark, df, 1)
        with spark_conf(spark, "spark.sql.autoBroadcastJoinThreshold", "1b"):
            assert not fits_broadcast(spark, df, 1)
    finally:
        df.unpersist()
