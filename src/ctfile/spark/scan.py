"""Reading a statement's candidate partitions on the executors, with each
row's file and position.

A distributed DELETE, UPDATE or MERGE (SPEC §Copy-on-write, distributed
statements) finds its rows with Spark: :func:`candidate_rows` is a
DataFrame of the candidate partitions' rows, the columns the statement
needs plus :data:`FILE_COLUMN` (the partition's path in the table) and
``ctfile.POSITION_COLUMN`` (the row's position in its file). Each Spark task
reads one partition with ctfile's own reader (:class:`ctfile.ScanTask`):
any fsspec storage, files verified against their ``add`` actions, columns
matched by field id across schema changes. Nothing is read on the driver.

:class:`SparkRowsPredicate` is the statement's read predicate for conflict
detection (SPEC §Conflict detection, rule 4): it asks Spark whether a
winner's partitions hold a row the statement would have selected, with the
same DataFrame code that found the statement's own rows.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

import ctfile
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

log = logging.getLogger("ctfile")

#: The column of :func:`candidate_rows` naming each row's partition.
FILE_COLUMN = "_ct_file"


def _read_tasks(tasks: Sequence[ctfile.ScanTask], out: pa.Schema) -> Callable:
    """The ``mapInArrow`` function reading the tasks whose indices it is given."""

    def read(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                task = tasks[i]
                for rows in task.to_batches(positions=True, use_threads=False):
                    arrays = list(rows.columns) + [pa.array([task.partition.path] * rows.num_rows, pa.string())]
                    yield pa.RecordBatch.from_arrays(
                        [a if a.type.equals(f.type) else a.cast(f.type) for a, f in zip(arrays, out)], schema=out
                    )

    return read


def candidate_rows(
    spark: SparkSession, job: ctfile.RewriteJob, columns: Sequence[str], *,
    partitions: Sequence[Any] | None = None, schema: Any = None,
) -> DataFrame:
    """The rows of ``job``'s candidates (or of ``partitions``, read with
    ``schema``: a winner's, for conflict detection): ``columns``, then
    :data:`FILE_COLUMN` and ``ctfile.POSITION_COLUMN``. One Spark task per
    partition."""
    parts = list(job.candidates if partitions is None else partitions)
    table_schema = job.schema if schema is None else schema
    tasks = [ctfile.ScanTask(job.location, table_schema, p, tuple(columns)) for p in parts]
    arrow = table_schema.to_arrow(field_ids=False)
    fields = spark_schema(pa.schema([arrow.field(c) for c in columns])).fields
    out_spark = StructType(
        list(fields)
        + [StructField(ctfile.POSITION_COLUMN, LongType(), False), StructField(FILE_COLUMN, StringType(), False)]
    )
    out = spark_arrow_schema(out_spark)
    ids = spark.range(0, len(tasks), 1, numPartitions=max(1, len(tasks)))
    return ids.mapInArrow(_read_tasks(tasks, out), out_spark)


class SparkRowsPredicate:
    """A read predicate evaluated by Spark: ``select(rows)`` turns the rows of
    some partitions (a :func:`candidate_rows` DataFrame) into the rows the
    statement selects; a winner conflicts when that is not empty.

    A failure to evaluate it on the winner's rows (an ANSI cast error, say)
    is a conflict that cannot be ruled out: the statement's re-run meets the
    error on its own read.
    """

    def __init__(
        self, spark: SparkSession, job: ctfile.RewriteJob, columns: Sequence[str],
        select: Callable[[DataFrame], DataFrame], description: str,
    ):
        self._spark = spark
        self._job = job
        self._columns = list(columns)
        self._select = select
        self._description = description

    def describe(self) -> str:
        return self._description

    def first_match(self, storage: Any, schema: Any, partitions: Sequence[Any]) -> Any:
        parts = [p for p in partitions if p.num_records]
        if not parts:
            return None
        if not set(self._columns) <= set(schema.names):
            return parts[0]  # the winner's schema lacks a column the statement uses
        rows = candidate_rows(self._spark, self._job, self._columns, partitions=parts, schema=schema)
        try:
            found = self._select(rows).select(FILE_COLUMN).limit(1).collect()
        except Exception as e:  # noqa: BLE001 -- any failure is a conflict that cannot be ruled out
            log.info("conflict check of %s failed on a winner's rows (%s): reported as a conflict", self._description, e)
            return parts[0]
        if not found:
            return None
        path = found[0][0]
        return next(p for p in parts if p.path == path)
