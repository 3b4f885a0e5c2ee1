"""Row lineage through Spark's own Parquet reader (SPEC §Hidden columns,
§Row lineage).

A row's materialized row id is its stored ``_ct_row_id``, or, where that is
null (or the file has no such column), its partition's ``firstRowId`` plus
``pos(r)``, the row's 0-based position in its file counted before any
filter; its row version likewise the stored ``_ct_row_version`` or the
partition's inherited row version (``restoredRowVersion`` of a re-add, else
``defaultRowVersion``). Spark's Parquet reader gives everything that needs:

- the hidden columns, read by name with the table's columns (a file without
  them reads them as null, as the SPEC says an absent hidden column reads);
- ``_metadata.row_index``: the row's position in its file, counted before
  any filter, which is ``pos(r)``;
- the partition lineage, ``firstRowId`` and the inherited row version of
  each file, looked up by Spark's ``_metadata.file_name`` in a literal map
  (no join: a join would cost a broadcast job per read), which is why the
  file names of one read must be distinct (:func:`lineage_files`).

``METADATA$ROW_ID`` is XXH3-64 of the row id seeded by the table id, in Spark
SQL expressions (:func:`ctfile.spark.xxh3.with_xxh3_64`), so no Python
worker runs in the scan.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import xxhash

import ctfile
from ctfile.spark.native import datasource_df, native_files
from ctfile.spark.xxh3 import with_xxh3_64

log = logging.getLogger("ctfile.spark")
#: The materialized row id and row version columns a lineage read adds.
RID, RV = "_ct_rid", "_ct_rv"
ROW_ID = "METADATA$ROW_ID"


def table_seed(table: ctfile.Table) -> int:
    """The seed of the table's ``METADATA$ROW_ID`` values: XXH3-64 of its
    UTF-8 table id (SPEC §Change scans)."""
    return xxhash.xxh3_64_intdigest(table.table_id.encode("utf-8"))


def file_name(path: str) -> str:
    """The last component of a partition path: Spark's ``_metadata.file_name``.

    >>> file_name("data/part-1.parquet")
    'part-1.parquet'
    """
    return path.rsplit("/", 1)[-1]


def lineage_files(spark: Any, table: ctfile.Table, snapshot: ctfile.Snapshot,
                  parts: Sequence) -> tuple[list[str] | None, str]:
    """The Hadoop URIs of ``parts`` when Spark's Parquet reader reads them
    into ``snapshot``'s schema exactly (:func:`ctfile.spark.native.native_files`)
    and their file names, which join them to their lineage, are distinct;
    else None and why not."""
    names = [file_name(p.path) for p in parts]
    if len(set(names)) != len(names):
        return None, "two of the files to read share a file name, by which Spark's reader names a row's file"
    return native_files(spark, table, snapshot, parts)


def lineage_df(spark: Any, schema: Any, parts: Sequence, files: Sequence[str], *, versions: bool = False,
               fresh_only: bool = False):
    """The rows of the files ``files`` (of the partitions ``parts``, in the
    same order) in the Spark schema ``schema``, then :data:`RID` (and
    :data:`RV` with ``versions``): materialized row ids and versions.
    ``fresh_only``: only the rows whose stored row id is null (the fresh
    rows of SPEC §Hidden columns), a filter Spark pushes into the scan."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    row_id, row_version = ctfile.ROW_ID_COLUMN, ctfile.ROW_VERSION_COLUMN
    hidden = [StructField(row_id, LongType(), True)] + ([StructField(row_version, LongType(), True)] if versions else [])
    read = StructType(list(schema.fields) + hidden)
    raw = spark.read.schema(read).parquet(*files)
    if fresh_only:
        raw = raw.where(F.col(row_id).isNull())
    meta = raw.metadataColumn("_metadata")  # Spark's file metadata, even with a data column named _metadata
    name = meta.getField("file_name")
    data = [F.col(f"`{c}`") for c in schema.names]
    pos = meta.getField("row_index")
    out = [*data, F.coalesce(F.col(row_id), _by_file(parts, name, lambda p: p.first_row_id) + pos).alias(RID)]
    if versions:
        out.append(F.coalesce(F.col(row_version), _by_file(parts, name, lambda p: p.inherited_row_version)).alias(RV))
    return raw.select(*out)


def _by_file(parts: Sequence, name, value):
    """The bigint ``value(p)`` of the partition whose file is named ``name``
    (a column): a lookup in a literal map, which Spark folds into one
    constant, so the rows need no join (and the query no broadcast job)."""
    from pyspark.sql import functions as F

    from sqlglot import exp

    pairs = [x for p in parts for x in (exp.Literal.string(file_name(p.path)), exp.Literal.number(value(p)))]
    literal = exp.Anonymous(this="map", expressions=pairs).sql(dialect="spark")
    return F.element_at(F.expr(literal), name).cast("bigint")  # one call into the JVM, however many files


def with_row_id_string(df, seed: int, *, column: str = RID):
    """``df`` with :data:`ROW_ID` (``METADATA$ROW_ID``) computed from the row
    id ``column``, which is dropped."""
    return with_xxh3_64(df, column, ROW_ID, seed).drop(column)


def snapshot_with_row_ids(spark: Any, table: ctfile.Table, snapshot: ctfile.Snapshot):
    """The snapshot's rows with ``METADATA$ROW_ID`` last
    (``CtfileTable.to_df(row_ids=True)``): Spark's Parquet reader over its
    files, or ``spark.read.format("ctfile")`` with ``rowIds`` at its version
    where that reader would not be exact (:func:`lineage_files`), logged at
    INFO."""
    import pyarrow as pa

    from ctfile.spark_datasource.types import spark_schema

    if not snapshot.partitions:
        return spark.createDataFrame([], spark_schema(snapshot.schema.append(pa.field(ROW_ID, pa.string(), nullable=False))))
    files, why_not = lineage_files(spark, table, snapshot, snapshot.partitions)
    if files is None:
        log.info("ctfile: reading %s at version %d through spark.read.format('ctfile'): %s",
                 table.uri, snapshot.version, why_not)
        return datasource_df(spark, table, versionAsOf=snapshot.version, rowIds="true")
    rows = lineage_df(spark, spark_schema(snapshot.schema), snapshot.partitions, files)
    return with_row_id_string(rows, table_seed(table))
