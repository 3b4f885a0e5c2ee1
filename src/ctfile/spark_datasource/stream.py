"""Structured Streaming: a change source and an exactly-once sink.

Source offsets are ``{"version": v, "initial": bool}``: ``v`` is the last
table version whose changes were delivered, ``initial`` says the rows of
snapshot ``v`` are still to be delivered as INSERTs (``initialRows``). A
micro-batch from ``start`` to ``end`` delivers the changes of versions
``start.version + 1 .. end.version``, both included, so consecutive batches
cover every committed version exactly once and a restart from Spark's
checkpointed offsets neither skips nor repeats one. Admission control:
``maxVersionsPerTrigger`` (offered to Spark as its ``ReadMaxFiles`` limit,
counting versions) and ``Trigger.AvailableNow``.

Schema changes (SPEC §Change scans, streams). The source's schema is the
table's latest when the query starts (the *stream schema*, kept with its
field ids), and every micro-batch is read into it by field id
(``Table.changes(read_schema=...)``): changes committed before the start are
read as a batch change scan ending then reads them (a column added since is
null in older versions), and columns added after the start are not part of
the stream. Any other change committed after the start (a drop, rename,
widening, a column made nullable, any nested change) fails the micro-batch
that reaches it, when it is planned and before any row is returned, naming
the first version that made it; restarting the query reads on in the new
schema. With ``allowSchemaChanges`` the stream reads on in its own schema
instead: a dropped column is null in rows written after the drop (an old
image read from a file written before it keeps its value; every data column
of such a stream is nullable), a renamed one is read under its old name, a
widened one in its old type (a value that type cannot hold fails the
micro-batch with a ``SchemaMismatchError``). Only the schema at
each micro-batch's last version is compared with the stream schema: a rename
undone within one micro-batch's versions is not reported, and its rows read
correctly by field id; every other such change cannot be undone.

The sink commits each micro-batch as one version carrying a ``txn`` action
(application id, batch id). A batch that Spark replays after a failure is
recognised and skipped, so output is exactly once (the idea of Delta's
``txn`` action). With ``mergeSchema`` the job planned when the query starts
adds the DataFrame's new columns (and widens types) in the commit of the
first micro-batch; later batches find the table in that schema.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

import ctfile
from ctfile.spark_datasource.batch import FilesMessage, _chain, open_for, plan_write_job, read_task
from ctfile.spark_datasource.options import ReadOptions, parse_write_options
from ctfile.spark_datasource.types import spark_arrow_schema, spark_schema

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - PySpark 4.1
    ReadAllAvailable = ReadMaxFiles = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


def breaking_changes(stream_schema, schema) -> list[ctfile.SchemaChange]:
    """The changes from ``stream_schema`` to ``schema`` (a later version's)
    that a stream reading in ``stream_schema`` cannot follow: all but added
    and moved top-level columns (SPEC §Change scans, streams). A column made
    nullable is one of them: the stream's Spark column is not nullable."""
    return [
        c for c in ctfile.diff_schemas(stream_schema, schema)
        if c.needs_feature or c.kind is ctfile.SchemaChangeKind.MAKE_NULLABLE
    ]


class CtfileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, schema: StructType):
        self.options = options
        self.arrow_schema = spark_arrow_schema(schema)
        self._target: int | None = None  # Trigger.AvailableNow bound
        self._last: dict | None = None  # for PySpark 4.1's latestOffset()
        table = self._table()
        #: The stream schema (see the module docstring) and its version.
        self.schema_version = table.version
        self.stream_schema = table.schema_at(self.schema_version)
        self._check_defined_schema(schema)

    def _check_defined_schema(self, schema: StructType) -> None:
        """The DataFrame's schema was read when it was defined: refuse to
        start if the table's schema has changed since."""
        data = self.stream_schema.to_arrow(field_ids=False)
        nullable = set(data.names) if self.options.allow_schema_changes else set()
        expected = spark_schema(data, nullable=nullable).fields
        if schema.fields[: len(expected)] != expected:
            raise ctfile.SchemaMismatchError(
                f"the streaming DataFrame over {self.options.path} was defined with the columns "
                f"{StructType(schema.fields[: len(expected)]).simpleString()}, but its schema at version "
                f"{self.schema_version}, when the query starts, is {StructType(expected).simpleString()}: the "
                f"table's schema changed in between; define the DataFrame again (spark.readStream...load())"
            )

    def _table(self) -> ctfile.Table:
        return open_for(self.options)

    def initialOffset(self) -> dict:
        table = self._table()
        if self.options.starting_version is not None:
            position = self.options.starting_version - 1
        elif self.options.starting_timestamp is not None:
            position = table.changes(start_timestamp=self.options.starting_timestamp).start_version - 1
        else:
            position = table.version  # only changes committed from now on
        return {"version": position, "initial": self.options.initial_rows}

    def getDefaultReadLimit(self):
        if self.options.max_versions_per_trigger and ReadMaxFiles is not None:
            return ReadMaxFiles(self.options.max_versions_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._table().version

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        if start is None:  # PySpark 4.1 calls latestOffset() without arguments
            start = self._last or self.initialOffset()
        latest = self._table().version
        if self._target is not None:
            latest = min(latest, self._target)
        cap = self._versions_cap(limit)
        end = latest if cap is None else min(latest, start["version"] + cap)
        end = max(end, start["version"])
        if end == start["version"] and not start.get("initial"):
            return start  # nothing new
        self._last = {"version": end, "initial": False}
        return self._last

    def _versions_cap(self, limit: Any) -> int | None:
        """At most how many versions the next micro-batch reads: Spark's
        ``ReadMaxFiles`` admission limit, else ``maxVersionsPerTrigger``
        (without a limit), else no cap (None)."""
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            return limit.max_files
        if limit is None and self.options.max_versions_per_trigger:
            return self.options.max_versions_per_trigger
        return None

    def partitions(self, start: dict, end: dict):
        first = start["version"] + 1
        initial = bool(start.get("initial"))
        if end["version"] < first:
            if not initial:
                return []
            # Only the initial rows are due (no version after start yet), and a
            # change scan has no empty interval: deliver version start itself on
            # top of the snapshot before it. That ends in the same table state:
            # for ``default`` it is exactly the rows of snapshot start as
            # INSERTs; ``append_only``/``audit`` show version start's own changes.
            first = start["version"]
        table = self._table()
        self._check_schema_changes(table, first, end["version"])
        cs = table.changes(
            start_version=first, end_version=end["version"], information=self.options.changes,
            initial_rows=initial, changelog=self.options.changelog, read_schema=self.stream_schema,
        )
        # Independent tasks, like a batch change scan: a micro-batch with
        # many versions or partitions uses every executor.
        return [InputPartition(t) for t in cs.tasks(max_rows_per_task=self.options.max_rows_per_task)]

    def _check_schema_changes(self, table: ctfile.Table, first: int, last: int) -> None:
        """Refuse versions ``first..last`` if the schema of ``last`` has a
        change the stream cannot follow (see the module docstring), naming
        the first version after the stream started that has it."""
        after = max(first, self.schema_version + 1)
        if self.options.allow_schema_changes or after > last or not breaking_changes(self.stream_schema, table.schema_at(last)):
            return
        for v in range(after, last + 1):  # only when failing: one schema per version
            changes = breaking_changes(self.stream_schema, table.schema_at(v))
            if changes:
                break
        raise ctfile.SchemaMismatchError(
            f"the schema of {self.options.path} changed at version {v} ({'; '.join(map(str, changes))}), "
            f"which this stream cannot follow: it reads in the schema of version {self.schema_version}, the "
            f"latest when the query started, and a drop, rename, widening, column made nullable or nested change "
            f"would change what its columns mean. Restart the query to read on in the new schema, or set option "
            f"allowSchemaChanges to true to read on in the query's schema by field id"
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not self.options.allow_schema_changes:
            return read_task(partition.value, self.arrow_schema)
        return self._read_across_changes(partition.value)

    def _read_across_changes(self, task) -> Iterator[pa.RecordBatch]:
        """With ``allowSchemaChanges``: a column widened after the query
        started is read in its old type, which may not hold a value."""
        try:
            yield from read_task(task, self.arrow_schema)
        except ctfile.SchemaMismatchError as e:
            raise ctfile.SchemaMismatchError(
                f"reading versions {task.scan.start_version}..{task.scan.end_version} of {self.options.path} in "
                f"the stream's schema (version {self.schema_version}) failed: {e}. With allowSchemaChanges a "
                f"column widened since the query started is read in its type then; restart the query to read "
                f"in the new schema"
            ) from e

    def commit(self, end: dict) -> None:
        pass  # nothing to release: offsets are versions in the table's own log


class CtfileStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema: StructType, overwrite: bool):
        opts = parse_write_options(options)
        if opts.consume is not None:
            raise ctfile.InvalidArgumentError(
                "option consumeStream consumes a stream in a batch write (df.write, in foreachBatch); the streaming "
                "sink records its own txn per micro-batch"
            )
        if not opts.txn_app_id:
            raise ctfile.InvalidArgumentError(
                "writeStream.format('ctfile') needs option txnAppId (or checkpointLocation) so that "
                "replayed micro-batches are committed exactly once"
            )
        self.app_id = opts.txn_app_id
        self.job = plan_write_job(opts, schema, overwrite=overwrite)

    def write(self, iterator) -> FilesMessage:
        first = next(iterator, None)
        if first is None:
            return FilesMessage([])
        return FilesMessage(self.job.write(pa.RecordBatchReader.from_batches(first.schema, _chain(first, iterator))))

    def commit(self, messages, batchId: int) -> None:
        files = [f for m in messages if m is not None for f in m.files]
        batch = ctfile.CommitOptions(app_id=self.app_id, app_version=batchId)
        self.job.commit(files, commit=batch, against_latest=True)

    def abort(self, messages, batchId: int) -> None:
        self.job.abort([f for m in messages if m is not None for f in m.files])
