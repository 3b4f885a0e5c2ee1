"""The PySpark examples of the README run on the suite's local session
(``py`` blocks of its PySpark section, table paths redirected to a tmp dir;
the object-store example is not run, the "Streams from Spark" one runs in
``test_spark_streams.py``). test_spark_clusters.py runs them on a standalone
cluster and on Spark Connect."""

from __future__ import annotations

from readme_examples import check_pyspark_examples


def test_readme_pyspark_examples_run(spark, tmp_path):
    check_pyspark_examples(spark, tmp_path)
