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

The sink commits each micro-batch as one version carrying a ``txn`` action
(application id, batch id). A batch that Spark replays after a failure is
recognised and skipped, so output is exactly once (the idea of Delta's
``txn`` action).
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

import ctfile
from ctfile.spark_datasource.batch import FilesMessage, _chain, open_for, plan_write_job, read_task
from ctfile.spark_datasource.options import ReadOptions, parse_write_options
from ctfile.spark_datasource.types import spark_arrow_schema

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - PySpark 4.1
    ReadAllAvailable = ReadMaxFiles = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class CtfileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, schema: StructType):
        self.options = options
        self.arrow_schema = spark_arrow_schema(schema)
        self._target: int | None = None  # Trigger.AvailableNow bound
        self._last: dict | None = None  # for PySpark 4.1's latestOffset()

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
        cap = None
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            cap = limit.max_files
        elif limit is None and self.options.max_versions_per_trigger:
            cap = self.options.max_versions_per_trigger
        end = latest if cap is None else min(latest, start["version"] + cap)
        end = max(end, start["version"])
        if end == start["version"] and not start.get("initial"):
            return start  # nothing new
        self._last = {"version": end, "initial": False}
        return self._last

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
        cs = self._table().changes(
            start_version=first, end_version=end["version"], information=self.options.changes,
            initial_rows=initial, changelog=self.options.changelog,
        )
        # Independent tasks, like a batch change scan: a micro-batch with
        # many versions or partitions uses every executor.
        return [InputPartition(t) for t in cs.tasks(max_rows_per_task=self.options.max_rows_per_task)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition.value, self.arrow_schema)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: offsets are versions in the table's own log


class CtfileStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema: StructType, overwrite: bool):
        opts = parse_write_options(options)
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
        self.job.commit(files, app_id=self.app_id, app_version=batchId, against_latest=True)

    def abort(self, messages, batchId: int) -> None:
        self.job.abort([f for m in messages if m is not None for f in m.files])
