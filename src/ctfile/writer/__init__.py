"""Writing tables: micro-partition writing and copy-on-write DML."""

from ctfile.writer.partition_writer import PartitionWriter
from ctfile.writer.transaction import WriteTransaction

__all__ = ["PartitionWriter", "WriteTransaction"]
