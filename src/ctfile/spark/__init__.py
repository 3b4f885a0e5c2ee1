"""ctfile for PySpark applications: a table handle whose DML runs on Spark's
executors and whose snapshot reads go through Spark's own Parquet reader,
and SQL text on ctfile tables (:func:`sql`, :func:`register`).

``spark.read.format("ctfile")`` (:mod:`ctfile.spark_datasource`) stays the
universal path (any fsspec URL, change scans, streaming); see docs/spark.md,
"Upserts from Spark" and "SQL".
"""

from ctfile.spark.sql_api import register, sql
from ctfile.spark.table import CtfileTable

__all__ = ["CtfileTable", "register", "sql"]
