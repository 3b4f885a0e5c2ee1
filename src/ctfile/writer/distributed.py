"""Writes whose files are produced in many processes and committed once.

A :class:`WriteJob` is planned on a driver (``Table.write_job`` or
:meth:`WriteJob.for_new_table`), shipped to workers (it is a picklable frozen
dataclass), used there to write micro-partitions with :meth:`WriteJob.write`,
and committed on the driver with :meth:`WriteJob.commit`: one version holds
every file of the job. This is how the Spark data source writes, and it is
public so other engines can do the same.

Schema checks happen when the job is planned, before any file is written.
A job may also change the schema (:class:`SchemaMode`): ``MERGE`` adds the
incoming columns the table lacks and widens the types it can
(:mod:`ctfile.writer.schema_merge`; Spark's ``mergeSchema``), ``OVERWRITE``
replaces the schema with the incoming one (Spark's ``overwriteSchema``, with
mode ``overwrite``). The files are written with the new schema's ids, and the
commit makes the schema change first in the same version as the rows (SPEC
§Schema evolution).

``commit`` with an ``app_id`` records a ``txn`` action (SPEC §txn), and skips
a batch that application already committed, which gives a streaming sink
exactly-once output across restarts.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import pyarrow as pa

from ctfile.format.actions import Metadata
from ctfile.format.append_only import refuse_row_removal
from ctfile.format.errors import AppendOnlyError, InvalidArgumentError, SchemaMismatchError, TableExistsError
from ctfile.format.paths import data_file_path
from ctfile.format.properties import TableProperties, validate_properties
from ctfile.writer.clustering import ClusterOrder
from ctfile.format.schema import Schema, schema_from_arrow
from ctfile.format.schema_evolution import diff_schemas, replacement_schema
from ctfile.log.commit_options import NO_COMMIT_OPTIONS, CommitOptions, commit_options
from ctfile.log.manifest import ManifestLog
from ctfile.log.creation import create_table_log
from ctfile.log.location import TableLocation
from ctfile.log.transaction import CommitResult, StagedFile, now_ms
from ctfile.writer.input import Conformer, to_reader
from ctfile.writer.partition_writer import PartitionWriter
from ctfile.writer.schema_merge import SchemaMerge, plan_schema_merge
from ctfile.writer.transaction import WriteTransaction

MODES = ("append", "overwrite")


class SchemaMode(str, enum.Enum):
    """How a write changes the table's schema to fit its data (default: it
    does not, and a mismatch fails).

    ``MERGE``: add the data's columns the table lacks and widen the types
    SPEC §Schema evolution allows, in the version that writes the rows.
    ``OVERWRITE``: replace the schema by the data's (with mode
    ``overwrite`` only: the rows written before are removed).

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int32())]))
    >>> data = pa.table({"id": pa.array([1], pa.int64()), "email": ["a@b"]})
    >>> job = t.write_job(schema=data.schema, schema_mode="merge")
    >>> job.commit(job.write(data)).version, t.refresh().schema.names, str(t.schema.field("id").type)
    (1, ['id', 'email'], 'int64')
    >>> SchemaMode.parse("merge") is SchemaMode.MERGE, SchemaMode.parse(None)
    (True, None)
    >>> SchemaMode.parse("append")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.InvalidArgumentError: schema_mode must be one of merge, overwrite (or None), found 'append'
    """

    MERGE = "merge"
    OVERWRITE = "overwrite"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any, *, what: str = "schema_mode") -> "SchemaMode | None":
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError(
                f"{what} must be one of {', '.join(m.value for m in cls)} (or None), found {value!r}"
            ) from None


@dataclass(frozen=True)
class SchemaUpdate:
    """The schema change a job commits with its rows: the table schema it
    was planned from (``read``), and the merge steps or the replacing Arrow
    schema that turn it into the job's schema."""

    mode: SchemaMode
    read: Schema
    merge: SchemaMerge | None = None
    replacement: pa.Schema | None = None

    def apply(self, tx: WriteTransaction) -> None:
        if self.mode is SchemaMode.MERGE:
            tx.evolve_schema(self.merge.apply)
        else:
            tx.replace_schema(self.replacement)


@dataclass(frozen=True)
class WriteJob:
    """A planned write: where, with which schema, against which version.

    ``read_version`` is None when the table did not exist at planning time;
    :meth:`commit` then creates it (version 0) before committing the files.
    ``schema`` is the schema the files are written with; ``schema_update``,
    when set, the change that makes it the table's at commit.
    """

    location: TableLocation
    schema: Schema
    properties: dict
    read_version: int | None
    mode: str
    job_id: str
    schema_update: SchemaUpdate | None = None

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
        table_schema = schema_from_arrow(schema)
        props = validate_properties(properties or {}, schema=table_schema)
        return cls(TableLocation(uri, storage_options), table_schema, props, None, mode, uuid.uuid4().hex)

    # ------------------------------------------------------------ workers

    def write(self, data: Any) -> list[StagedFile]:
        """Write ``data`` (batches, a Table, a reader...) as micro-partitions.

        Returns the staged files, to be sent to the driver for :meth:`commit`.
        Nothing is visible until then.
        """
        storage = self.location.open()
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
        # A task's rows are a stream: clustered in windows (SPEC §Clustering).
        cluster = ClusterOrder.of(self.properties, self.schema)
        return writer.write(conformer.conform_stream(reader), with_hidden=False, cluster=cluster)

    # ------------------------------------------------------------ driver

    def commit(
        self,
        files: Sequence[StagedFile],
        *,
        commit: CommitOptions | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
        against_latest: bool = False,
    ) -> CommitResult:
        """Commit every file of the job as one version.

        With ``commit`` (:class:`~ctfile.CommitOptions`, or its shorthand
        ``app_id``/``app_version``: e.g. a streaming query id and batch id)
        the commit records them, and commits nothing
        (``committed=False``, ``app_transaction_replayed=True``, the files
        deleted) if the table already holds a commit of that application at
        that version or later: a replayed batch is not written twice.
        """
        options = commit_options(commit, app_id=app_id, app_version=app_version)
        return self.transaction(files, commit=options, against_latest=against_latest).commit()

    def transaction(
        self,
        files: Sequence[StagedFile],
        *,
        commit: CommitOptions = NO_COMMIT_OPTIONS,
        against_latest: bool = False,
        parameters: dict[str, Any] | None = None,
        cls: type[WriteTransaction] = WriteTransaction,
    ) -> WriteTransaction:
        """The transaction :meth:`commit` commits: every file of the job
        staged (and the schema change, the truncation of ``overwrite``), for
        a caller that commits it together with something else (a
        transaction class ``cls`` that consumes a stream when it commits,
        :meth:`ctfile.Table.write_job` with ``consuming``). ``parameters``
        are added to the commit's.

        Raises
        ------
        SchemaMismatchError
            The table's schema changed since the job was planned; the files
            are deleted.
        """
        storage = self.location.open()
        log = ManifestLog(storage)
        if self.read_version is None:
            self._create_table(storage)
        latest = log.latest_version()
        planned = self.read_version if self.read_version is not None and not against_latest else latest
        base = log.load_state(planned, latest=latest)
        tx = cls(log, base, operation="WRITE", parameters=self._parameters(parameters))
        # Before staging: a batch already committed is a replay (SPEC §txn),
        # whose files are discarded; a concurrent commit of the same batch
        # is recognised when the commit rebases.
        commit.apply_to(tx)
        self._stage(tx, files)
        return tx

    def _create_table(self, storage: Any) -> None:
        """Create the table a job planned on a missing table writes (its
        first version), unless another writer created it first: the job
        commits against that one (its schema is checked when staging)."""
        md = Metadata(str(uuid.uuid4()), self.schema, now_ms(), dict(self.properties))
        try:
            create_table_log(storage, md)
        except TableExistsError:
            pass  # created concurrently: commit against it (schemas are checked below)

    def _parameters(self, extra: dict[str, Any] | None) -> dict[str, Any]:
        """The commit's ``operationParameters``: the job's, then ``extra``."""
        params = {"mode": self.mode, "jobId": self.job_id, **(extra or {})}
        if self.schema_update is not None:
            params["schemaMode"] = self.schema_update.mode.value
        return params

    def _stage(self, tx: WriteTransaction, files: Sequence[StagedFile]) -> None:
        """Stage the job in ``tx``: its schema change first (unless ``tx``
        is a replay, whose statements do nothing), the truncation of an
        ``overwrite``, then the files.

        Raises
        ------
        SchemaMismatchError
            The table's schema changed since the job was planned; ``tx`` is
            aborted and the files are deleted.
        AppendOnlyError
            An ``overwrite`` of a table made append-only since the job was
            planned; ``tx`` is aborted and the files are deleted.
        """
        if not tx.is_replay:
            try:
                self._update_schema(tx)
            except SchemaMismatchError:
                tx.abort()
                self.abort(files)
                raise
        if self.mode == "overwrite":
            try:
                tx.check_keeps_rows("OVERWRITE")
            except AppendOnlyError:  # SPEC §Append-only tables: set since the job was planned
                tx.abort()
                self.abort(files)
                raise
            tx.truncate()
        tx.stage(list(files))
        if not tx.is_replay:
            tx.add_metrics(inserted=sum(f.num_records for f in files))

    def _update_schema(self, tx: WriteTransaction) -> None:
        """Make the job's schema the one ``tx`` commits, or raise.

        A table already in the job's schema needs nothing (a streaming sink's
        later batches, after its first one merged). A table still in the
        schema the job was planned from gets the job's change first in the
        transaction (SPEC §Schema evolution, merging write); the ids it
        assigns must be those the files were written with. Any other schema
        changed concurrently: the files do not fit it."""
        found = tx.metadata.schema
        if found == self.schema:
            return
        update = self.schema_update
        planned_from = self.schema if update is None else update.read
        if update is not None and found == update.read:
            update.apply(tx)
            if tx.metadata.schema == self.schema:
                return
        changes = "; ".join(str(c) for c in diff_schemas(planned_from, found)) or "new field ids were assigned"
        raise SchemaMismatchError(
            f"the schema of {self.location.uri} changed since this write was planned (at version {self.read_version}): "
            f"{changes}; the files were written for {self.schema.names}; plan the write again"
        )

    def abort(self, files: Iterable[StagedFile]) -> None:
        """Delete the files of a job that will not be committed."""
        self.location.open().delete([f.path for f in files])


def _schema_change(
    md: Metadata, schema: pa.Schema | None, schema_mode: SchemaMode, mode: str,
) -> tuple[Schema, SchemaUpdate | None]:
    """The schema a write with ``schema_mode`` writes its files in, and the
    change its commit makes (None: the table's schema already; the job is
    an ordinary write)."""
    if schema is None:
        raise InvalidArgumentError(f"schema_mode {schema_mode} needs the schema of the data to be written")
    if schema_mode is SchemaMode.OVERWRITE and mode != "overwrite":
        raise InvalidArgumentError(
            f"schema_mode overwrite replaces the schema and so every row: it needs mode 'overwrite', found {mode!r}"
        )
    if schema_mode is SchemaMode.MERGE:
        merge = plan_schema_merge(md.schema, md.assigned_field_ids, schema)
        target, update = merge.schema, SchemaUpdate(schema_mode, md.schema, merge=merge)
    else:
        target, _ = replacement_schema(md.schema, md.assigned_field_ids, schema)
        update = SchemaUpdate(schema_mode, md.schema, replacement=schema)
    return target, None if target == md.schema else update


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, found {mode!r}")


def plan_write(
    table_state, storage, schema: pa.Schema | None, *, mode: str, schema_mode: SchemaMode | str | None = None,
) -> WriteJob:
    """A job against an existing table at ``table_state``; checks ``schema``
    (the incoming data's) before anything is written, and with
    ``schema_mode`` plans the schema change the commit makes (see
    :class:`SchemaMode`).

    Raises
    ------
    SchemaMismatchError
        The data does not fit the table's schema (or, with ``MERGE``, the
        merged schema), naming the columns; nothing is written.
    InvalidArgumentError
        An unknown mode, ``OVERWRITE`` without mode ``overwrite``, or a
        schema mode without ``schema``.
    """
    _check_mode(mode)
    schema_mode = SchemaMode.parse(schema_mode)
    if schema is not None and not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"schema must be a pyarrow.Schema, found {type(schema).__name__}")
    md = table_state.metadata
    if mode == "overwrite":  # SPEC §Append-only tables: an overwrite removes every row
        refuse_row_removal(md.properties, "OVERWRITE", storage.uri)
    update = None
    target = md.schema
    if schema_mode is not None:
        target, update = _schema_change(md, schema, schema_mode, mode)
    if schema is not None:
        Conformer(target, what="written data").check_schema(schema)
    return WriteJob(
        TableLocation.of(storage), target, dict(md.properties), table_state.version, mode,
        uuid.uuid4().hex, update,
    )
