"""The ``ctfile`` PySpark Python DataSource."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ctfile.spark_datasource.batch import (
    CtfilePruningReader,
    CtfileReader,
    CtfileWriter,
    pruning_enabled,
    reader_schema,
)
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
        opts = parse_read_options(self.options)
        # Only a pruning reader implements pushFilters: PySpark rejects a reader
        # that does while spark.sql.python.filterPushdown.enabled is false.
        cls = CtfilePruningReader if pruning_enabled(opts) else CtfileReader
        return cls(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> CtfileWriter:
        return CtfileWriter(self.options, schema, overwrite)

    def streamReader(self, schema: StructType) -> CtfileStreamReader:
        return CtfileStreamReader(parse_read_options(self.options, streaming=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> CtfileStreamWriter:
        return CtfileStreamWriter(self.options, schema, overwrite)
