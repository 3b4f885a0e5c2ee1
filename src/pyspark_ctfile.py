from ctfile.spark_datasource import CtfileDataSource as DefaultSource  # noqa: F401
