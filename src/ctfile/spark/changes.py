"""Append-only change scans through Spark's own Parquet reader
(``CtfileTable.changes_df``).

An ``append_only`` scan of ``a..b`` (SPEC §Change scans, modes) is the rows
with a null stored ``_ct_row_id`` in the partitions that data-changing
commits of the interval added, with the values they were inserted with, in
the schema of ``b``. Every such row is *fresh*: its row id is inherited,
``firstRowId + pos(r)`` of its partition (SPEC §Hidden columns), so the
whole scan is expressible with Spark's Parquet reader:

- the files of :attr:`ctfile.reader.change_plan.ChangePlan.appended`, read
  with the schema of ``b`` plus ``_ct_row_id`` (a file without the hidden
  columns reads it as null, as the SPEC says);
- ``_ct_row_id IS NULL`` (pushed down into the row groups);
- the row id: the file's ``firstRowId`` (a broadcast join on Spark's
  ``_metadata.file_name``) plus ``_metadata.row_index``, the row's position
  in its file counted before any filter, which is ``pos(r)``;
- ``METADATA$ROW_ID``: XXH3-64 of the row id seeded with the table's seed,
  computed in Spark SQL expressions (:func:`ctfile.spark.xxh3.with_xxh3_64`)
  so that no Python worker runs; ``METADATA$ACTION`` ``INSERT``, ``METADATA$ISUPDATE``
  false.

The files must read by name into the schema of ``b``
(:meth:`ctfile.Snapshot.misread_by_name`) and the storage must be one
Spark's Hadoop opens; otherwise, as for snapshots
(:mod:`ctfile.spark.native`), the scan is ``spark.read.format("ctfile")``
with the same interval. Files are not checked against their checksums.
"""

from __future__ import annotations

import logging
from typing import Any

import ctfile
from ctfile.spark.lineage import RID, lineage_df, lineage_files, table_seed
from ctfile.spark.native import datasource_df
from ctfile.spark.xxh3 import with_xxh3_64
from ctfile.spark_datasource.types import spark_schema

log = logging.getLogger("ctfile.spark")

ACTION = "METADATA$ACTION"
ISUPDATE = "METADATA$ISUPDATE"
ROW_ID = "METADATA$ROW_ID"


def append_only_df(spark: Any, table: ctfile.Table, cs: ctfile.ChangeSet):
    """The ``append_only`` change scan ``cs`` of ``table`` (module docstring)."""
    from pyspark.sql import functions as F

    end = table.snapshot(cs.end_version)
    data = spark_schema(end.schema)
    parts = list(cs.plan.appended)
    if not parts:
        return spark.createDataFrame([], spark_schema(cs.schema))
    files, why_not = lineage_files(spark, table, end, parts)
    if files is None:
        log.info("ctfile: reading the append_only changes of %s, versions %d..%d, through spark.read.format('ctfile'): %s",
                 table.uri, cs.start_version, cs.end_version, why_not)
        return datasource_df(spark, table, changes="append_only", startingVersion=cs.start_version,
                             endingVersion=cs.end_version)
    rows = with_xxh3_64(lineage_df(spark, data, parts, files, fresh_only=True), RID, ROW_ID, table_seed(table))
    return rows.select(
        *[F.col(f"`{c}`") for c in data.names],
        F.lit("INSERT").alias(ACTION), F.lit(False).alias(ISUPDATE), F.col(f"`{ROW_ID}`"),
    )
