"""Batch reads and writes: ``spark.read.format("ctfile")`` and ``df.write.format("ctfile")``.

Reads yield Arrow record batches whose schema is exactly the Spark schema's
Arrow form. A snapshot scan is planned into one Spark partition per
micro-partition (or per row-group range of a large one, ``maxRowsPerTask``).
A change scan is planned on the driver with its interval fixed, so every task
sees the same versions even while writers commit, and split into independent
tasks (:meth:`ctfile.reader.change_scan.ChangeSet.tasks`): one per appended
partition for ``append_only``, one per group of partitions sharing row ids for
``default`` and per commit and group for ``audit``, one per partition of the
initial snapshot for ``initialRows``; small ones are packed together up to
``maxRowsPerTask`` rows (default about 1 Mi). A read of a stream
(``stream``) is the change scan of its pending changes, pinned on the driver
when the read is planned (or given by ``streamPin``); a write with
``consumeStream`` commits through a job that consumes that pin exactly once
(``ctfile.Table.write_job(consuming=...)``).

Filter pushdown and the PySpark plan-reuse bug
----------------------------------------------
With ``spark.sql.python.filterPushdown.enabled``, PySpark plans a Python
data source read once per DataFrame: the partitions and the pickled read
function of the *first* query are cached on the DataFrame's relation and
reused by every later query on it, whether or not that query has the filter,
and whether or not the source reported the filter as supported. In 4.3.0
``df.filter("x > 5").count()`` followed by ``df.count()`` returned 4 rows of
10 for a source that pruned with the pushed filter; for the second query no
Python planning code runs at all, only ``read()`` on the executors, which
cannot tell which query it serves.

So a filter-dependent plan is never safe to build on an affected version.
ctfile keeps pruning decisions out of the cached plan: by default
(``pushdownPruning=auto``) it prunes only on PySpark versions in
:data:`REUSE_SAFE_PYSPARK` (none verified yet), and elsewhere plans with a
:class:`CtfileReader`, which does not implement ``pushFilters`` at all (PySpark
refuses a reader that does while ``spark.sql.python.filterPushdown.enabled``
is false, its default). ``pushdownPruning=true`` opts in to statistics
pruning (:class:`CtfilePruningReader`, needs the conf) for a DataFrame that
will not be reused for another query; the option is part of the DataFrame, so
the choice travels with it. Either way every filter is handed back to Spark,
which evaluates all of them.
``tests/spark/test_spark_read.py`` runs the exact reuse sequence with
pushdown on and off.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Iterator

import pyspark

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

import ctfile
from ctfile.spark_datasource.filters import to_expression
from ctfile.spark_datasource.options import ReadOptions, WriteOptions, parse_read_options, parse_write_options
from ctfile.spark_datasource.types import conform_batch, spark_arrow_schema, spark_schema


#: The column a snapshot read with ``rowIds`` adds (SPEC §Change scans).
ROW_ID_COLUMN = "METADATA$ROW_ID"
# PySpark versions verified not to reuse a planned read across queries of one
# DataFrame (see the module docstring). Verified affected: 4.1.4 and 4.3.0.
REUSE_SAFE_PYSPARK: frozenset[str] = frozenset()
# Rows per Arrow batch handed to the JVM. Small batches pipeline better with
# the JVM consuming them: at SF 1 on local[2] 32k rows took the least CPU on
# both sides (16k: +0.3 s worker CPU, 64k: +0.5 s JVM CPU; 128k was 10-30%
# slower at SF 0.1); benchmarks/bench_spark.py, alternating runs.
SPARK_BATCH_ROWS = 32768


def pruning_enabled(opts: ReadOptions) -> bool:
    if opts.pushdown_pruning == "auto":
        return pyspark.__version__ in REUSE_SAFE_PYSPARK
    return opts.pushdown_pruning == "true"


def open_for(opts: ReadOptions | WriteOptions) -> ctfile.Table:
    return ctfile.open_table(opts.path, storage_options=opts.storage_options)


def change_set(table: ctfile.Table, opts: ReadOptions, filter: pc.Expression | None = None):
    """The batch change scan the options describe, its interval fixed now:
    with ``stream``, the stream's pending changes, pinned now or by
    ``streamPin`` (SPEC §Streams; reading does not consume)."""
    if opts.stream is not None:
        stream = table.stream(opts.stream)
        pin = stream.pin() if opts.stream_pin is None else stream.pin_from_token(opts.stream_pin)
        return stream.pending(pin=pin, changelog=opts.changelog, filter=filter)
    return table.changes(
        start_version=opts.starting_version,
        end_version=opts.ending_version,
        start_timestamp=opts.starting_timestamp,
        end_timestamp=opts.ending_timestamp,
        information=opts.changes,
        initial_rows=opts.initial_rows,
        changelog=opts.changelog,
        filter=filter,
    )


_GC_FROZEN = False


def read_task(task, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Run a planned task (snapshot or change scan) in this Python worker.

    Decoding runs on this thread only (``use_threads=False``): Spark already
    runs one task per core, and pyarrow's thread pool inside every worker
    oversubscribes them (SF 1 lineitem on local[2]: 3.5-3.7 s of worker CPU
    against 3.9-6.0 s with threads, more the busier the machine).

    A reused PySpark worker runs a full ``gc.collect()`` after every task,
    which walks every object of the modules it has imported (pyspark,
    pandas, pyarrow, ctfile): about 50 ms a task, 9% of the worker's CPU in a
    lineitem scan. The first task in such a worker (``SPARK_REUSE_WORKER``
    set, as PySpark's daemon does) therefore moves the objects that exist by
    then (modules, classes: nothing the task allocates later) to the
    collector's permanent generation (``gc.freeze()``, made for long-lived
    forked workers), so later collections skip them.
    """
    global _GC_FROZEN
    if not _GC_FROZEN and os.environ.get("SPARK_REUSE_WORKER"):
        gc.freeze()
        _GC_FROZEN = True
    for b in task.to_batches(batch_rows=SPARK_BATCH_ROWS, use_threads=False):
        yield conform_batch(b, arrow_schema)


class CtfileReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType):
        self.options = options
        self.spark_schema = schema
        self.arrow_schema = spark_arrow_schema(schema)
        self.expressions: list[pc.Expression] = []

    def _filter(self) -> pc.Expression | None:
        if not self.expressions:
            return None
        out = self.expressions[0]
        for e in self.expressions[1:]:
            out = out & e
        return out

    def _check_schema(self, arrow: pa.Schema, version: int) -> None:
        """Refuse to read a version whose columns are not the DataFrame's.

        Spark fixed the DataFrame's schema when it was defined; a read of the
        latest version planned after a schema change (a rename, drop,
        widening or move) would otherwise hand Spark columns it matches by
        position. Columns added since are left out of a snapshot read, as
        Delta does; a change scan's rows hold every column, so any
        difference is refused.
        """
        now = spark_schema(arrow)
        wanted = self.spark_schema.fields
        if self.options.row_ids:  # the last column, METADATA$ROW_ID, is the read's own
            wanted = wanted[:-1]
        same = _same_columns if self.options.is_change_scan else _has_columns
        if not same(now.fields, wanted):
            raise ctfile.SchemaMismatchError(
                f"{self.options.path}: the schema of version {version} "
                f"({', '.join(f'{f.name} {f.dataType.simpleString()}' for f in now.fields)}) no longer matches "
                f"the DataFrame's ({', '.join(f'{f.name} {f.dataType.simpleString()}' for f in wanted)}), which "
                f"was defined before a schema change (SPEC §Schema evolution); define the DataFrame again"
            )

    def partitions(self):
        table = open_for(self.options)
        if self.options.is_change_scan:
            cs = change_set(table, self.options, self._filter())
            self._check_schema(cs.schema, cs.end_version)
            tasks = cs.tasks(max_rows_per_task=self.options.max_rows_per_task)
            return [InputPartition(t) for t in tasks] or [InputPartition(None)]
        if self.options.timestamp_as_of is not None:
            snap = table.snapshot(timestamp=self.options.timestamp_as_of)
        else:
            snap = table.snapshot(self.options.version_as_of)
        self._check_schema(snap.schema, snap.version)
        columns = self.spark_schema.fieldNames()
        tasks = snap.scan_tasks(
            columns=columns[:-1] if self.options.row_ids else columns,
            filter=self._filter(),
            max_rows_per_task=self.options.max_rows_per_task,
            row_ids=self.options.row_ids,
        )
        return [InputPartition(t) for t in tasks] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return iter(())
        return read_task(partition.value, self.arrow_schema)


class CtfilePruningReader(CtfileReader):
    """A :class:`CtfileReader` that prunes micro-partitions with pushed-down
    filters; used only where pruning is enabled (see the module docstring).

    A separate class because PySpark refuses a reader that implements
    ``pushFilters`` when ``spark.sql.python.filterPushdown.enabled`` is false
    (the default): ``DATA_SOURCE_PUSHDOWN_DISABLED``.
    """

    def pushFilters(self, filters):
        # Every filter goes back to Spark (Spark evaluates all of them); the
        # ones pyarrow can express also prune partitions by statistics.
        columns = set(self.spark_schema.fieldNames()) - ({ROW_ID_COLUMN} if self.options.row_ids else set())
        for f in filters:
            expr = to_expression(f, columns)
            if expr is not None:
                self.expressions.append(expr)
            yield f


@dataclass
class FilesMessage(WriterCommitMessage):
    files: list


def _same_columns(now: list, wanted: list) -> bool:
    """Whether the fields ``now`` are ``wanted``'s names and types, in order."""
    return [(f.name, f.dataType) for f in now] == [(f.name, f.dataType) for f in wanted]


def _has_columns(now: list, wanted: list) -> bool:
    """Whether the fields ``now`` include each of ``wanted`` by name, of its type."""
    by_name = {f.name: f for f in now}
    return all(f.name in by_name and by_name[f.name].dataType == f.dataType for f in wanted)


def _check_properties_kept(table: ctfile.Table, properties: dict) -> None:
    """An existing table keeps its properties: refuse a write whose options
    set one to another value."""
    current = table.properties
    for key, value in properties.items():
        if not _same_property(key, current.get(key), value):
            found = repr(current[key]) if key in current else "unset"
            raise ctfile.InvalidArgumentError(
                f"the write sets table property {key} to {value!r}, but {table.uri} exists with {key} "
                f"{found}; a write sets table properties only when it creates the table: drop the option, "
                f"or change the property with ctfile.open_table(...).set_properties(...)"
            )


def plan_write_job(opts: WriteOptions, schema: StructType, *, overwrite: bool) -> ctfile.WriteJob:
    """The job of a batch or streaming write, planned on the driver.

    A table that does not exist yet is created by the job's first commit, with
    the table properties the options set. An existing table keeps its
    properties (the writers use them): an option that asks for a value the
    table does not have fails here, like a schema mismatch, before any task
    writes a file, rather than being ignored. ``mergeSchema`` and
    ``overwriteSchema`` plan the schema change the job commits with its rows
    (:class:`ctfile.SchemaMode`); a table created by the job takes the
    DataFrame's schema either way.
    """
    arrow = spark_arrow_schema(schema)
    mode = "overwrite" if overwrite else "append"
    if opts.schema_mode is ctfile.SchemaMode.OVERWRITE and not overwrite:
        raise ctfile.InvalidArgumentError(
            "option overwriteSchema replaces the schema and so every row: use it with mode('overwrite') "
            "(outputMode('complete') for a stream); to add columns or widen types in an append, use mergeSchema"
        )
    try:
        table = open_for(opts)
    except ctfile.TableNotFoundError:
        if opts.consume is not None:
            raise ctfile.TableNotFoundError(
                f"option consumeStream commits into an existing table, and {opts.path} does not exist: create it "
                f"first (ctfile.create_table, or a write without consumeStream)"
            ) from None
        return ctfile.WriteJob.for_new_table(
            opts.path, arrow, mode=mode, storage_options=opts.storage_options, properties=opts.properties,
        )
    _check_properties_kept(table, opts.properties)
    stream, pin = _consumed_pin(opts)
    try:
        return table.write_job(mode=mode, schema=arrow, schema_mode=opts.schema_mode, consuming=stream, pin=pin)
    except ctfile.SchemaMismatchError as e:
        raise ctfile.SchemaMismatchError(f"{e}; {_SCHEMA_HINTS[opts.schema_mode]}") from None


def _consumed_pin(opts: WriteOptions):
    """The stream and pin a write consumes (``consumeStream``), checked on
    the driver before any task writes a file; the stream's table is opened
    with the write's storage options."""
    if opts.consume is None:
        return None, None
    source = ctfile.open_table(opts.consume.table, storage_options=opts.storage_options)
    stream = source.stream(opts.consume.stream)
    return stream, stream.pin_from_token(opts.consume.pin)


_SCHEMA_HINTS = {
    None: "set option mergeSchema to true to add the DataFrame's new columns and widen types, or "
    "overwriteSchema (with mode('overwrite')) to replace the schema",
    ctfile.SchemaMode.MERGE: "mergeSchema adds columns and widens types (byte -> short -> int -> long, "
    "float -> double, decimal precision up); any other change of type needs overwriteSchema with mode('overwrite')",
    ctfile.SchemaMode.OVERWRITE: "overwriteSchema replaces the schema by the DataFrame's",
}


def _same_property(key: str, stored: str | None, wanted: str) -> bool:
    """Whether a table's stored value of property ``key`` means ``wanted``,
    compared as the properties table parses them (``"WriteSerializable"``
    is one level however the option spells it after validation)."""
    if stored is None:
        return False
    parse = ctfile.TABLE_PROPERTIES[key].parse
    try:
        return parse(stored) == parse(wanted)
    except ValueError:  # a malformed stored value means the default, never what is asked for
        return False


class CtfileWriter(DataSourceArrowWriter):
    """Executors write micro-partitions; the driver commits them as one version."""

    def __init__(self, options, schema: StructType, overwrite: bool):
        self.job = plan_write_job(parse_write_options(options), schema, overwrite=overwrite)

    def write(self, iterator) -> FilesMessage:
        first = next(iterator, None)
        if first is None:
            return FilesMessage([])
        reader = pa.RecordBatchReader.from_batches(first.schema, _chain(first, iterator))
        return FilesMessage(self.job.write(reader))

    def commit(self, messages) -> None:
        files = [f for m in messages if m is not None for f in m.files]
        self.job.commit(files)

    def abort(self, messages) -> None:
        self.job.abort([f for m in messages if m is not None for f in m.files])


def _chain(first, rest):
    yield first
    yield from rest


def reader_schema(options) -> StructType:
    """The Spark schema of a read with these options (snapshot or change
    scan). A stream's is that of the latest version now (SPEC §Change scans,
    streams), its data columns nullable with ``allowSchemaChanges``; a
    snapshot read with ``rowIds`` ends with ``METADATA$ROW_ID``."""
    opts = parse_read_options(options, streaming=None)  # serves read and readStream
    table = open_for(opts)
    if opts.is_change_scan:
        arrow = change_set(table, opts).schema
    elif opts.timestamp_as_of is not None:
        arrow = table.snapshot(timestamp=opts.timestamp_as_of).schema
    else:
        arrow = table.snapshot(opts.version_as_of).schema
    if opts.row_ids:
        arrow = arrow.append(pa.field(ROW_ID_COLUMN, pa.string(), nullable=False))
    return spark_schema(arrow, nullable=set(table.schema.names) if opts.allow_schema_changes else set())
