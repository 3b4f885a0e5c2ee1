"""Table maintenance and metadata changes: vacuum, checkpoints, table
properties, schema changes and RESTORE (:class:`TableMaintenance`, the
helper behind those methods of :class:`ctfile.Table`), and the ``table.update_schema()`` builder
(:class:`UpdateSchema`, SPEC §Schema evolution).

The builder follows PyIceberg's ``with table.update_schema() as u:``. Each
call is checked at once against the schema as changed so far (a typed
:class:`~ctfile.format.errors.SchemaMismatchError` names the field and why),
and the block commits one ``SCHEMA CHANGE`` version when it exits without an
exception; an exception commits nothing. At commit the recorded calls are
applied again to the schema the transaction reads, so a concurrent change is
either composed with (re-run after a conflict, like a statement) or reported
by the same error.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pyarrow as pa

from ctfile.format import properties as table_properties
from ctfile.format.actions import Metadata
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.schema_evolution import Path, SchemaChange, SchemaEditor
from ctfile.format.validators import require_int
from ctfile.log.manifest import CheckpointInfo
from ctfile.log.replay import check_writer_protocol
from ctfile.log.transaction import CommitResult
from ctfile.table.history import timestamp_to_ms
from ctfile.writer.transaction import WriteTransaction

if TYPE_CHECKING:
    from ctfile.log.vacuum import VacuumResult
    from ctfile.table.table import Table

OPERATION = "SCHEMA CHANGE"


def check_version(version: Any) -> None:
    """Refuse a version that is not an int (None passes)."""
    if version is not None:
        require_int(version, "version")


class UpdateSchema:
    """A schema change being built; see :meth:`ctfile.Table.update_schema`.

    Every method returns the builder, so calls chain. :attr:`changes` lists
    what the block changes so far; :attr:`result` is the commit's result
    after the block (None when it changed nothing).

    A *path* names a field from the top level, its names joined by ``.``
    (``"address.zip"``, ``"tags.element"``, ``"attrs.value"``); a name
    holding a ``.`` or a backtick is quoted in backticks, a backtick in it
    doubled, as in Spark SQL (``"`a.b`"`` is the column named ``a.b``,
    ``"s.`x.y`"`` the field ``x.y`` of struct ``s``): the paths
    :func:`ctfile.field_paths` and ``ctfile schema`` print. A tuple of
    names, unquoted, works too. ``new_name`` and ``after`` are names, not
    paths (a sibling's name, never quoted).

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int32()), ("name", pa.string())]))
    >>> with t.update_schema() as u:
    ...     u.add_column("email", pa.string(), doc="primary contact").rename_column("name", "full_name")
    ...     u.widen_column("id", pa.int64())
    <...>
    >>> t.schema.names, str(t.schema.field("id").type), u.result.version
    (['id', 'full_name', 'email'], 'int64', 1)
    """

    def __init__(self, metadata: Metadata, run: Callable[[dict, Callable], CommitResult]):
        """``metadata``: the table's, as read; ``run(parameters, fn)`` commits
        ``fn(transaction)`` as one ``SCHEMA CHANGE`` statement."""
        self._base = metadata
        self._run = run
        md = metadata
        self._preview = SchemaEditor(md.schema, md.assigned_field_ids)
        self._calls: list[Callable[[SchemaEditor], None]] = []
        self.result: CommitResult | None = None

    def _record(self, method: str, *args: Any, **kwargs: Any) -> "UpdateSchema":
        getattr(self._preview, method)(*args, **kwargs)  # raises before anything is recorded
        self._calls.append(lambda editor: getattr(editor, method)(*args, **kwargs))
        return self

    def add_column(
        self, path: Path, type: pa.DataType, *, doc: str | None = None, after: str | None = None, first: bool = False
    ) -> "UpdateSchema":
        """Add a nullable column or nested field (new ids, also for the fields
        inside ``type``); at the end, after sibling ``after``, or ``first``."""
        return self._record("add_column", path, type, doc=doc, after=after, first=first)

    def drop_column(self, path: Path) -> "UpdateSchema":
        """Drop a column or nested field; its values never reappear, even
        under a name added again."""
        return self._record("drop_column", path)

    def rename_column(self, path: Path, new_name: str) -> "UpdateSchema":
        """Rename a column or nested field (``"address.zip"``)."""
        return self._record("rename_column", path, new_name)

    def widen_column(self, path: Path, type: pa.DataType) -> "UpdateSchema":
        """Widen a column, nested field, list element (``"tags.element"``) or
        map value: integers to wider integers, float to double, decimal
        precision up with the same scale."""
        return self._record("widen_column", path, type)

    def make_nullable(self, path: Path) -> "UpdateSchema":
        """Let a non-nullable column (or nested field, element, value) hold nulls."""
        return self._record("make_nullable", path)

    def move_column(self, path: Path, *, after: str | None = None, first: bool = False) -> "UpdateSchema":
        """Move a column or nested field ``first`` or ``after`` a sibling."""
        return self._record("move_column", path, after=after, first=first)

    @property
    def changes(self) -> list[SchemaChange]:
        return list(self._preview.changes)

    def commit(self) -> CommitResult | None:
        """Commit the changes as one version (None if there are none)."""
        if self.result is not None:
            return self.result
        if self._preview.schema == self._base.schema:
            return None

        def edit(editor: SchemaEditor) -> None:
            for call in self._calls:
                call(editor)

        def fn(tx) -> None:
            tx.evolve_schema(edit)
            tx.data_change = False  # SPEC §Schema evolution: not a data change

        params = {"changes": [c.to_json() for c in self._preview.changes]}
        self.result = self._run(params, fn)
        return self.result

    def __enter__(self) -> "UpdateSchema":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()


class TableMaintenance:
    """The maintenance and metadata operations of ``table``, behind those
    methods of :class:`ctfile.Table`: a helper over the table's public
    surface (each change is one statement of
    :meth:`~ctfile.Table.run_statement`, re-run after a conflict unless
    said otherwise)."""

    def __init__(self, table: "Table"):
        self.table = table

    def vacuum(
        self,
        *,
        retain: dt.timedelta | float | None = None,
        grace_period: dt.timedelta | float | None = None,
        dry_run: bool = False,
    ) -> "VacuumResult":
        """Expire history older than ``max(retain, grace_period)`` and delete files no retained version needs.

        Versions committed within ``retain`` (default 7 days) stay readable:
        snapshots, time travel and change scans starting there keep working;
        older ones raise ``VersionNotFoundError`` / ``StaleIntervalError``.
        History is expired only beyond the grace period too (a transaction
        younger than it may still commit on an old version), so a ``retain``
        shorter than ``grace_period`` keeps ``grace_period`` of history:
        ``retain=0`` alone keeps 24 hours; pass ``grace_period`` as well to go
        lower. The result reports the effective window
        (``effective_retain_s``, ``history_cutoff_ms``, ``retain_extended``).
        A checkpoint is written for the oldest retained version, older log
        entries and checkpoints are deleted, then the data files that only
        expired versions used, and unreferenced files (left by failed or
        crashed writers) older than ``grace_period`` (default 24 hours; a
        younger file may belong to a transaction that has not committed yet).
        With ``dry_run`` nothing changes and the result lists what would be
        deleted. The history a live stream has not consumed yet is kept up to
        the table property ``ctfile.maxRetentionExtension`` longer (the
        result's ``holding_streams``); a stream behind that is made stale
        first (``stale_streams``, SPEC §Streams). Returns a
        :class:`ctfile.log.vacuum.VacuumResult` (SPEC §Vacuum).

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1]}))
        >>> _ = t.overwrite(pa.table({"id": [2]}))  # version 2 removes the file of version 1
        >>> _ = t.insert(pa.table({"id": [3]}))
        >>> r = t.vacuum(retain=0, grace_period=0)
        >>> r.oldest_version, len(r.deleted_data_files), t.to_arrow().column("id").to_pylist()
        (3, 1, [2, 3])
        >>> r = t.vacuum(retain=0)  # the default grace period (24 h) keeps the history
        >>> r.retain_extended, r.effective_retain_s / 3600
        (True, 24.0)
        """
        from ctfile.log.vacuum import vacuum

        self.table.refresh()
        return vacuum(self.table.log, retain=retain, grace_period=grace_period, dry_run=dry_run)

    def checkpoint(self, *, version: int | None = None) -> CheckpointInfo:
        """Write the checkpoint of the latest version now (SPEC §Checkpoints).

        A checkpoint holds the whole state of one version (live partitions
        with their statistics, schema, protocol), so that opening the table
        reads it plus the log entries committed after it, instead of every
        entry since version 0. Writers already write one after every version
        that is a multiple of the table property ``ctfile.checkpointInterval``
        (default 100); call this after a large batch of commits, or to replace
        a checkpoint that is missing or unreadable. An existing checkpoint of
        the same version is overwritten (with the same content), and the
        checkpoint hint ``_ct_log/_last_checkpoint`` moves forward to it.

        Parameters
        ----------
        version : int, optional
            Checkpoint this committed version instead of the latest.

        Returns
        -------
        ctfile.log.manifest.CheckpointInfo
            The ``version`` checkpointed, the file's ``path`` relative to the
            table root, ``num_partitions`` (live partitions) and ``size_bytes``.

        Raises
        ------
        VersionNotFoundError
            ``version`` is beyond the latest or can no longer be reconstructed.
        UnsupportedFeatureError
            The table needs writer features this ctfile does not implement.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1, 2]}))
        >>> _ = t.insert(pa.table({"id": [3]}))
        >>> info = t.checkpoint()
        >>> info.version, info.path, info.num_partitions
        (2, '_ct_log/00000000000000000002.checkpoint.parquet', 2)
        >>> t.log.read_hint(), ctfile.open_table(t.uri).to_arrow().num_rows
        (2, 3)
        """
        check_version(version)
        log = self.table.log
        latest = self.table.refresh().version
        if version is None or version == latest:
            state = self.table.snapshot().state  # the state the table holds, not read again
        else:
            state = log.load_state(version, latest=latest)
        check_writer_protocol(state.protocol, where=self.table.uri)
        return log.write_checkpoint(state)

    def update_schema(self) -> UpdateSchema:
        """Change the schema, one version per block (SPEC §Schema evolution).

        ``with table.update_schema() as u:`` then ``u.add_column``,
        ``drop_column``, ``rename_column``, ``widen_column``,
        ``make_nullable``, ``move_column`` (:class:`~ctfile.table.schema_update.UpdateSchema`).
        No data file is rewritten: readers project old partitions by field id.

        Raises
        ------
        SchemaMismatchError
            At the call that asks for a change not allowed (naming the field
            and the reason); the block then commits nothing.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1]}))
        >>> with t.update_schema() as u:
        ...     _ = u.add_column("email", pa.string())
        >>> t.to_arrow().to_pylist()
        [{'id': 1, 'email': None}]
        """
        def run(parameters: dict, fn: Callable) -> CommitResult:
            return self.table.run_statement(OPERATION, fn, parameters=parameters)

        return UpdateSchema(self.table.refresh().metadata, run)

    def set_properties(self, properties: Mapping[str, str]) -> CommitResult:
        """Set table properties (a metadata-only commit).

        ``ctfile.`` keys are checked against the table of known properties
        (SPEC §Table properties) before anything is written; other keys are
        the user's and are kept as given.

        Raises
        ------
        InvalidArgumentError
            An unknown ``ctfile.`` key, or a value its property does not accept.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> t.set_properties({"ctfile.partitionRows": "500", "owner": "data-eng"}).version
        1
        >>> t.set_properties({"ctfile.partitionRows": "big"})
        Traceback (most recent call last):
        ...
        ctfile.format.errors.InvalidArgumentError: table property ctfile.partitionRows must be a positive integer, found 'big'
        """
        properties = table_properties.validate_properties(properties)

        def fn(tx: WriteTransaction) -> None:
            tx.data_change = False  # no row changes: change scans skip this commit
            md = tx.metadata
            table_properties.validate_properties(properties, schema=md.schema)  # clustering keys exist
            tx.set_metadata(replace(md, properties={**md.properties, **properties}))

        return self.table.run_statement("SET TBLPROPERTIES", fn, parameters={"properties": dict(properties)})

    def restore(self, *, version: int | None = None, timestamp: Any = None) -> CommitResult:
        """Make the table equal to its snapshot at ``version`` or ``timestamp``
        (exactly one) in one commit (operation ``RESTORE``, SPEC §Restore),
        as Delta Lake's ``RESTORE TABLE ... TO VERSION AS OF``.

        The partitions of that version that are not live are re-added, the
        same files: every row comes back with its values, its row id and
        its row version (a row the versions since changed or deleted comes
        back as it was), and the partitions it does not hold are removed.
        No data file is written. The schema and properties are set back too
        (the schema by field id: a column added since is dropped, a renamed
        one takes its old name, a widened one keeps its wide type); the
        last batch of each application (``app_id``) and every stream stay
        as they are. A change scan of the commit is exactly the difference
        between the version before it and the restored one; ``append_only``
        shows nothing for it (it inserts no new row). When the table already
        is that version, nothing is committed (``result.committed`` False).

        A timestamp resolves to the last version committed at or before it,
        as :meth:`snapshot` does. A concurrent commit that changes rows or
        metadata makes the RESTORE raise
        :class:`~ctfile.CommitConflictError`: it is not re-run, since
        re-run it would undo that commit too.

        Raises
        ------
        InvalidArgumentError
            Both or neither of ``version`` and ``timestamp``, or a bad value.
        VersionNotFoundError
            A version beyond the latest, or one a vacuum expired.
        SchemaMismatchError
            The version's schema holds a column dropped since (its values
            never come back).
        MissingDataFileError
            A file to re-add is gone (deleted by hand); nothing is written.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1, 2, 3]}))
        >>> _ = t.delete(pc.field("id") >= 2)
        >>> r = t.restore(version=1)
        >>> r.operation, r.version, t.to_arrow().column("id").to_pylist()
        ('RESTORE', 3, [1, 2, 3])
        >>> t.changes(start_version=3).to_arrow().select(["id", "METADATA$ACTION"]).to_pylist()
        [{'id': 2, 'METADATA$ACTION': 'INSERT'}, {'id': 3, 'METADATA$ACTION': 'INSERT'}]
        >>> t.restore(version=1).committed  # it already is version 1
        False
        """
        if (version is None) == (timestamp is None):
            raise InvalidArgumentError(
                f"restore takes a version or a timestamp, exactly one; found version={version!r}, timestamp={timestamp!r}"
            )
        check_version(version)
        params: dict[str, Any] = {}
        if timestamp is not None:
            ms = timestamp_to_ms(timestamp)
            latest = self.table.refresh().version
            version = self.table.log.version_at_timestamp(ms, latest=latest, past_latest=False)
            params["timestamp"] = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")
        params["version"] = version
        # Not re-run: re-run after a conflict, it would undo that commit too.
        return self.table.run_statement("RESTORE", lambda tx: tx.restore(version), parameters=params, max_runs=1)
