"""The ``ctfile`` PySpark Python DataSource."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ctfile.spark_datasource.batch import CtfileReader, CtfileWriter, reader_schema
from ctfile.spark_datasource.options import parse_read_options
from ctfile.spark_datasource.stream import CtfileStreamReader, CtfileStreamWriter


class CtfileDataSource(DataSource):
    """``spark.read.format("ctfile")``: snapshots, time travel, change scans,
    writes, a streaming change source and an exactly-once streaming sink.

    Registered automatically through the ``pyspark_ctfile`` module when ctfile
    is installed on the driver and executors; ``spark.dataSource.register(
    CtfileDataSource)`` also works.
    """

    @classmethod
    def name(cls) -> str:
        return "ctfile"

    def schema(self) -> StructType:
        return reader_schema(self.options)

    def reader(self, schema: StructType) -> CtfileReader:
        return CtfileReader(parse_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> CtfileWriter:
        return CtfileWriter(self.options, schema, overwrite)

    def streamReader(self, schema: StructType) -> CtfileStreamReader:
        return CtfileStreamReader(parse_read_options(self.options, streaming=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> CtfileStreamWriter:
        return CtfileStreamWriter(self.options, schema, overwrite)
