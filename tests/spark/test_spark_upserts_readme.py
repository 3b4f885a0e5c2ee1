"""The examples of docs/spark.md's "Upserts from Spark" section run on the
suite's local session (its ``py`` blocks, table paths redirected to a tmp
dir) and do what the text says. test_spark_clusters.py runs them on a
standalone cluster and on Spark Connect."""

from __future__ import annotations

from readme_examples import check_upsert_examples


def test_readme_upsert_examples_run(spark, tmp_path):
    check_upsert_examples(spark, tmp_path)
