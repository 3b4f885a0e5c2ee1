"""Writes whose files are produced in many processes and committed once.

A :class:`WriteJob` is planned on a driver (``Table.write_job`` or
:meth:`WriteJob.for_new_table`), shipped to workers (it is a picklable frozen
dataclass), used there to write micro-partitions with :meth:`WriteJob.write`,
and committed on the driver with :meth:`WriteJob.commit`: one version holds
every file of the job. This is how the Spark data source writes, and it is
public so other engines can do the same.

Schema checks happen when the job is planned, before any file is written.
``commit`` with an ``app_id`` records a ``txn`` action (SPEC §txn), and skips
a batch that application already committed, which gives a streaming sink
exactly-once output across restarts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import pyarrow as pa

from ctfile.format.actions import Metadata
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError, TableExistsError
from ctfile.format.paths import data_file_path
from ctfile.format.properties import TableProperties, validate_properties
from ctfile.format.schema import Schema, schema_from_arrow
from ctfile.log.manifest import ManifestLog
from ctfile.log.creation import create_table_log
from ctfile.log.transaction import CommitResult, StagedFile, now_ms
from ctfile.reader.scan_task import storage_for
from ctfile.writer.input import Conformer, to_reader
from ctfile.writer.partition_writer import PartitionWriter
from ctfile.writer.transaction import WriteTransaction

MODES = ("append", "overwrite")


@dataclass(frozen=True)
class WriteJob:
    """A planned write: where, with which schema, against which version.

    ``read_version`` is None when the table did not exist at planning time;
    :meth:`commit` then creates it (version 0) before committing the files.
    """

    uri: str
    storage_options: dict | None
    schema: Schema
    properties: dict
    read_version: int | None
    mode: str
    job_id: str

    @classmethod
    def for_new_table(
        cls,
        uri: str,
        schema: pa.Schema,
        *,
        mode: str = "append",
        storage_options: dict | None = None,
        properties: dict | None = None,
    ) -> "WriteJob":
        """A job that creates the table from ``schema`` when it commits;
        ``properties`` are validated now (SPEC §Table properties)."""
        _check_mode(mode)
        props = validate_properties(properties or {})
        return cls(uri, storage_options, schema_from_arrow(schema), props, None, mode, uuid.uuid4().hex)

    # ------------------------------------------------------------ workers

    def write(self, data: Any) -> list[StagedFile]:
        """Write ``data`` (batches, a Table, a reader...) as micro-partitions.

        Returns the staged files, to be sent to the driver for :meth:`commit`.
        Nothing is visible until then.
        """
        storage = storage_for(self.uri, self.storage_options)
        reader = to_reader(data)
        conformer = Conformer(self.schema)
        task_id = uuid.uuid4().hex
        seq = [0]

        def next_path() -> str:
            seq[0] += 1
            return data_file_path(task_id, seq[0])

        writer = PartitionWriter.for_properties(
            storage, self.schema, next_path, TableProperties.from_mapping(self.properties)
        )
        return writer.write(conformer.conform_stream(reader), with_hidden=False)

    # ------------------------------------------------------------ driver

    def commit(
        self,
        files: Sequence[StagedFile],
        *,
        app_id: str | None = None,
        app_version: int | None = None,
        against_latest: bool = False,
    ) -> CommitResult:
        """Commit every file of the job as one version.

        With ``app_id``/``app_version`` (e.g. a streaming query id and batch id)
        the commit records them, and commits nothing
        (``committed=False``, ``app_transaction_replayed=True``, the files
        deleted) if the table already holds a commit of that application at
        that version or later: a replayed batch is not written twice.
        """
        if (app_id is None) != (app_version is None):
            raise InvalidArgumentError("give both app_id and app_version, or neither")
        storage = storage_for(self.uri, self.storage_options)
        log = ManifestLog(storage)
        if self.read_version is None:
            md = Metadata(str(uuid.uuid4()), self.schema, now_ms(), dict(self.properties))
            try:
                create_table_log(storage, md)
            except TableExistsError:
                pass  # created concurrently: commit against it (schemas are checked below)
        latest = log.latest_version()
        planned = self.read_version if self.read_version is not None and not against_latest else latest
        base = log.load_state(planned, latest=latest)
        if base.metadata.schema != self.schema:
            self.abort(files)
            raise SchemaMismatchError(
                f"the schema of {self.uri} changed since this write was planned; "
                f"expected {self.schema.names}, found {base.metadata.schema.names}"
            )
        tx = WriteTransaction(log, base, operation="WRITE", parameters={"mode": self.mode, "jobId": self.job_id})
        if app_id is not None:
            # Before staging: a batch already committed is a replay (SPEC §txn),
            # whose files are discarded; a concurrent commit of the same batch
            # is recognised when the commit rebases.
            tx.set_app_transaction(app_id, app_version)
        if self.mode == "overwrite":
            tx.truncate()
        tx.stage(list(files))
        if not tx.is_replay:
            tx.add_metrics(inserted=sum(f.num_records for f in files))
        return tx.commit()

    def abort(self, files: Iterable[StagedFile]) -> None:
        """Delete the files of a job that will not be committed."""
        storage_for(self.uri, self.storage_options).delete([f.path for f in files])


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, found {mode!r}")


def plan_write(table_state, storage, schema: pa.Schema | None, *, mode: str) -> WriteJob:
    """A job against an existing table at ``table_state``; checks ``schema``
    (the incoming data's) before anything is written."""
    _check_mode(mode)
    if schema is not None:
        Conformer(table_state.metadata.schema, what="written data").check_schema(schema)
    return WriteJob(
        storage.uri, storage.storage_options, table_state.metadata.schema,
        dict(table_state.metadata.properties), table_state.version, mode, uuid.uuid4().hex,
    )
