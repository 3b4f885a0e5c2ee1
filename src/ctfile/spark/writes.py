"""A DataFrame written into an existing ctfile table as one version, with
its :class:`ctfile.CommitResult` (SQL's ``INSERT``, README "SQL").

The write is the data source's (``df.write.format("ctfile")``): a
:class:`ctfile.WriteJob` planned on the driver, whose tasks write
micro-partitions on the executors and return their descriptions, committed
by the driver as one version. Here the driver is this process, so the
commit's result comes back (the data source's commit runs in a Python
worker Spark starts, out of reach); the tasks run as ``mapInArrow``, on a
classic session and on Spark Connect alike.

The DataFrame's columns take the table's types as SQL's INSERT gives them
(Spark's ``DataFrame.to``: numeric to numeric, a timestamp of the other
kind in the session time zone, ``NULL`` to any type; not a string to a
number), so that ``VALUES (1, 2.5)`` fits a ``bigint`` and a ``double``
column. Nullability is left to ctfile's own check of the values written.

A task that meets bad data (a null for a non-nullable column) returns the
error instead of failing alone; the driver then deletes every task's files
and raises it. A job Spark itself fails leaves the files of its finished
tasks unreferenced, as any failed write does ("Upserts from Spark").
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any, Callable, Iterator

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql.types import StructField, StructType

import ctfile
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

_RESULT_SCHEMA = "kind string, payload binary"


def write_dataframe(spark: Any, table: ctfile.Table, df: Any, *, mode: str) -> ctfile.CommitResult:
    """Write ``df`` into ``table`` (``mode`` ``"append"`` or
    ``"overwrite"``) as one version.

    Raises
    ------
    SchemaMismatchError
        A column the table lacks or a type that does not fit (before any
        task runs), a null for a non-nullable column (nothing is left
        written).
    """
    df = _as_table_types(df, table.schema)
    job = table.write_job(mode=mode, schema=spark_arrow_schema(df.schema))
    files, errors = [], []
    for kind, payload in df.mapInArrow(_task_fn(job), _RESULT_SCHEMA).collect():
        value = pickle.loads(payload)
        if kind == "files":
            files.extend(value)
        else:
            errors.append(value)
    if errors:
        job.abort(files)
        raise errors[0]
    return job.commit(files)


def _as_table_types(df: Any, schema: pa.Schema) -> Any:
    """``df`` with the table's types (module docstring); as it is when it has
    a column the table lacks (the write job names it)."""
    if any(c not in schema.names for c in df.columns):
        return df
    fields = spark_schema(pa.schema([schema.field(c) for c in df.columns])).fields
    try:
        out = df.to(StructType([StructField(f.name, f.dataType, True) for f in fields]))
        out.schema  # noqa: B018 -- analysis now, on Spark Connect too
        return out
    except AnalysisException as e:
        raise ctfile.SchemaMismatchError(
            f"the written columns {df.schema.simpleString()} do not fit the table's "
            f"{StructType(fields).simpleString()}: {e}"
        ) from None


def _task_fn(job: ctfile.WriteJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: write a task's rows, return the files
    (or the ctfile error) as one row."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(batches, None)
        if first is None:
            return
        try:
            kind, value = "files", job.write(pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches)))
        except ctfile.CtfileError as e:
            kind, value = "error", e
        yield pa.RecordBatch.from_pydict({"kind": [kind], "payload": [pickle.dumps(value)]})

    return run
