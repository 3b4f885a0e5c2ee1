"""The ``ctfile`` PySpark Python DataSource (needs ``ctfile[spark]``)."""

from ctfile.spark_datasource.source import CtfileDataSource

__all__ = ["CtfileDataSource"]
