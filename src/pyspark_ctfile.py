"""PySpark's entry point for ``format("ctfile")`` (its data source lookup
imports every installed ``pyspark_*`` module and registers its
``DefaultSource``).

PySpark runs that lookup in a fresh Python process in every session that
reads or writes a non-built-in format, so this module imports no ctfile:
``DefaultSource`` only names the source and hands each call to
:class:`ctfile.spark_datasource.CtfileDataSource`, imported when Spark
first uses the source (``tests/unit/spark_datasource/test_worker_imports.py``).
"""

from pyspark.sql.datasource import DataSource


class DefaultSource(DataSource):
    """``format("ctfile")``: :class:`ctfile.spark_datasource.CtfileDataSource`."""

    @classmethod
    def name(cls) -> str:
        return "ctfile"

    def _source(self):
        from ctfile.spark_datasource import CtfileDataSource

        return CtfileDataSource(self.options)

    def schema(self):
        return self._source().schema()

    def reader(self, schema):
        return self._source().reader(schema)

    def writer(self, schema, overwrite):
        return self._source().writer(schema, overwrite)

    def streamReader(self, schema):
        return self._source().streamReader(schema)

    def streamWriter(self, schema, overwrite):
        return self._source().streamWriter(schema, overwrite)
