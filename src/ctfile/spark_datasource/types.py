"""Arrow <-> Spark type mapping for the data source.

ctfile's Arrow types map one to one onto Spark's, except the uint8 ``op``
column of a changelog rendering: Spark has no unsigned types, so it is served
as ``tinyint`` (ByteType) with the same values 0-3.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructField, StructType


def arrow_for_spark(schema: pa.Schema) -> pa.Schema:
    fields = []
    for f in schema:
        if pa.types.is_unsigned_integer(f.type):
            f = f.with_type(pa.int8() if f.type.bit_width == 8 else pa.int64())
        fields.append(f)
    return pa.schema(fields)


def spark_schema(schema: pa.Schema, *, nullable: frozenset[str] | set[str] = frozenset()) -> StructType:
    """The Spark schema of reads that yield ``schema``, the columns named in
    ``nullable`` made nullable (a stream with ``allowSchemaChanges`` reads a
    column dropped after it started as nulls)."""
    out = from_arrow_schema(arrow_for_spark(schema))
    return StructType([StructField(f.name, f.dataType, True, f.metadata) if f.name in nullable else f for f in out.fields])


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for ``schema`` (and the
    one of the batches it hands to a writer): timestamps in UTC."""
    try:  # PySpark >= 4.2 asserts a timezone for TimestampType
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # PySpark 4.1: no timezone parameter, always UTC
        return to_arrow_schema(schema)


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s field names, types and nullability."""
    if batch.schema.equals(target):
        return batch
    cols = []
    for i, f in enumerate(target):
        col = batch.column(i)
        cols.append(col if col.type.equals(f.type) else col.cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=target)
