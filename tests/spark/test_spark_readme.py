"""The PySpark examples of the documentation run on the suite's local
session: the README tour's, and docs/spark.md's "Using ctfile from PySpark"
(``py`` blocks, table paths redirected to a tmp dir; the object-store
example is not run, the "Streams from Spark" one runs in
``test_spark_streams.py``). test_spark_clusters.py runs the latter on a
standalone cluster and on Spark Connect."""

from __future__ import annotations

from readme_examples import check_pyspark_examples, check_tour_examples


def test_readme_tour_spark_examples_run(spark, tmp_path):
    check_tour_examples(spark, tmp_path)


def test_readme_pyspark_examples_run(spark, tmp_path):
    check_pyspark_examples(spark, tmp_path)
