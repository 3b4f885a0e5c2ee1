"""The public Python API's :class:`Table`: state, reads (snapshots, change
scans, history) and writes (DML statements, transactions), and
:func:`open_table`. Maintenance, streams and MERGE are helper objects over
the table's public surface (:class:`~ctfile.table.maintenance.TableMaintenance`,
:class:`~ctfile.table.streams.TableStreams`,
:class:`~ctfile.table.merges.TableMerges`) that the table's methods of
those names delegate to; a transaction consuming a stream is its
:class:`~ctfile.table.consumption.Consumption`'s. ``create_table`` is in
:mod:`ctfile.table.create`."""

from __future__ import annotations

import datetime as dt
import os
from functools import partial
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.change_modes import ChangeMode, Changelog
from ctfile.format.actions import Metadata, Protocol
from ctfile.format.derived import DerivedDefinition, RefreshInfo, visible_schema
from ctfile.format.errors import InvalidArgumentError, TableNotFoundError, VersionNotFoundError
from ctfile.format.paths import commit_path
from ctfile.format.schema import Schema
from ctfile.log.commit_options import NO_COMMIT_OPTIONS, CommitOptions, commit_options, require_app_id
from ctfile.log.manifest import CheckpointInfo, ManifestLog
from ctfile.log.replay import TableHead, TableState, roll_forward, roll_forward_head
from ctfile.log.storage import Storage, open_storage
from ctfile.log.storage_errors import missing_table_reason
from ctfile.log.transaction import CommitResult, operation_parameters
from ctfile.log.vacuum import VacuumResult
from ctfile.reader.change_interval import resolve_interval
from ctfile.reader.change_plan import plan_changes
from ctfile.reader.change_scan import ChangeSet
from ctfile.reader.change_spec import ChangeScan
from ctfile.reader.clustering import ClusteringInfo
from ctfile.reader.expressions import check_predicate
from ctfile.reader.snapshot import Snapshot
from ctfile.table.consumption import StreamPin
from ctfile.table.maintenance import TableMaintenance, UpdateSchema, check_version
from ctfile.table.merges import TableMerges
from ctfile.table.stream_jobs import consuming_job
from ctfile.table.streams import Stream, StreamInfo, TableStreams, check_consuming
from ctfile.table.history import (
    HistoryEntry, IntroducedVersions, SchemaVersion, read_history, read_introduced_versions, read_schema_history,
    timestamp_to_ms,
)
from ctfile.writer.compaction import check_compaction_options
from ctfile.writer.derived import refuse_outside_refresh
from ctfile.writer.distributed import SchemaMode, WriteJob, plan_write
from ctfile.writer.input import is_reusable
from ctfile.writer.statement import run_statement
from ctfile.writer.merge_builder import MergeBuilder
from ctfile.writer.transaction import WriteTransaction


def storage_at(uri: Any, storage_options: Mapping[str, Any] | None) -> Storage:
    """The storage of the table at ``uri``, the arguments checked."""
    if not isinstance(uri, (str, os.PathLike)) or not os.fspath(uri):
        raise InvalidArgumentError(f"uri must be a non-empty path or URL string, found {uri!r}")
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(f"storage_options must be a mapping, found {type(storage_options).__name__}")
    return open_storage(os.fspath(uri), dict(storage_options) if storage_options else None)


def open_table(uri: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None) -> "Table":
    """Open an existing table at its latest version.

    Raises
    ------
    TableNotFoundError
        If ``uri`` holds no ctfile table (it names a regular file standing
        where the table directory should be).
    StorageError
        If the storage refuses access (credentials, endpoint, permissions,
        a symbolic link out of the table root).
    """
    storage = storage_at(uri, storage_options)
    table = Table(storage)
    try:
        table.refresh()
    except TableNotFoundError as e:
        if storage.blocking_file() is None:
            raise
        raise TableNotFoundError(f"no ctfile table at {storage.uri}: {missing_table_reason(storage)}") from e
    return table


class Table:
    """A ctfile table. Reads go through :meth:`snapshot` and :meth:`changes`;
    every DML method commits one version and returns a
    :class:`~ctfile.log.transaction.CommitResult`."""

    def __init__(self, storage: Storage):
        self._storage = storage
        self._log = ManifestLog(storage)
        # The table-level state of the latest version seen, and its full
        # state once something needed the partitions (then of the same version).
        self._head: TableHead | None = None
        self._state: TableState | None = None

    def __repr__(self) -> str:
        v = self._head.version if self._head else "?"
        return f"Table({self._storage.uri!r}, version={v})"

    # ------------------------------------------------------------ state

    @property
    def uri(self) -> str:
        return self._storage.uri

    @property
    def table_id(self) -> str:
        """The table's ``tableId`` (SPEC §metadata), fixed at creation."""
        return self._current_head().metadata.table_id

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def log(self) -> ManifestLog:
        return self._log

    def refresh(self) -> "Table":
        """Find the latest version (the table otherwise caches its last known state).

        Only its table-level state is read (protocol, checked; schema;
        properties): the live partitions are read when a snapshot, a write or
        a checkpoint first needs them, so a change scan from a newly opened
        table reads the log entries of its interval, not the whole table.
        """
        known = None if self._head is None else self._head.version
        latest = self._log.latest_version(known=known)
        if latest == known:
            return self
        try:
            self._roll_forward(latest)
        except VersionNotFoundError:
            # A vacuum expired entries this object had not read yet: start
            # again from the retained history (its checkpoint).
            self._state, self._head = None, self._log.load_head(latest=latest)
        return self

    def _roll_forward(self, latest: int) -> None:
        if self._state is not None and latest > self._state.version:
            # Roll forward from the cached state instead of a full replay.
            versions = range(self._state.version + 1, latest + 1)
            state = roll_forward(self._state, ((v, self._log.read_entry(v)) for v in versions), where=commit_path)
            self._state, self._head = state, state.head
        elif self._head is not None and latest > self._head.version:
            versions = range(self._head.version + 1, latest + 1)
            head = roll_forward_head(self._head, ((v, self._log.read_table_actions(v)) for v in versions), where=commit_path)
            self._state, self._head = None, head
        else:
            self._state, self._head = None, self._log.load_head(latest=latest)

    def _current_head(self) -> TableHead:
        if self._head is None:
            self.refresh()
        assert self._head is not None
        return self._head

    def _current(self) -> TableState:
        """The full state of the version :meth:`_current_head` names, built now if not yet."""
        head = self._current_head()
        if self._state is None:
            self._state = self._log.load_state(head.version, latest=head.version)
        return self._state

    @property
    def version(self) -> int:
        """The latest version this object has seen (call :meth:`refresh` to update)."""
        return self._current_head().version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of ordinary reads (a derived table's derivation columns left out, SPEC §Derived tables)."""
        return self._current_head().metadata.visible_schema.to_arrow(field_ids=False)

    @property
    def derived(self) -> DerivedDefinition | None:
        """The definition and frontier of a derived table at the latest
        version this object has seen (SPEC §Derived tables); None if the
        table is not derived."""
        return self._current_head().metadata.derived

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._current_head().metadata.properties)

    @property
    def metadata(self) -> Metadata:
        """The ``metaData`` of the latest version this object has seen (SPEC §metadata)."""
        return self._current_head().metadata

    @property
    def protocol(self) -> Protocol:
        """The ``protocol`` of the latest version this object has seen (SPEC §protocol)."""
        return self._current_head().protocol

    def schema_at(self, version: int | None = None) -> Schema:
        """The schema of ``version`` (default: latest) with its field ids
        (:class:`ctfile.format.Schema`), from the table-level state alone;
        :class:`VersionNotFoundError` for a version the log does not hold.

        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.update_schema().add_column("email", pa.string()).commit()
        >>> [(f.id, f.name) for f in t.schema_at(0).fields], [(f.id, f.name) for f in t.schema_at().fields]
        ([(1, 'id')], [(1, 'id'), (2, 'email')])
        """
        check_version(version)
        head = self.refresh()._current_head()
        if version is None or version == head.version:
            return head.metadata.schema
        return self._log.load_head(version, latest=head.version).metadata.schema

    # ------------------------------------------------------------ reads

    def snapshot(self, version: int | None = None, *, timestamp: Any = None) -> Snapshot:
        """The table as of ``version`` or ``timestamp`` (default: latest).

        A timestamp resolves to the last version committed at or before it;
        one after the latest commit is refused, as in Delta Lake (SPEC §Log replay).

        Raises
        ------
        VersionNotFoundError
            For a version beyond the latest or before the retained history, or
            a timestamp before the first commit or after the latest one.
        """
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("give version or timestamp, not both")
        check_version(version)
        self.refresh()
        latest = self._current_head().version
        if timestamp is not None:
            version = self._log.version_at_timestamp(timestamp_to_ms(timestamp), latest=latest, past_latest=False)
        if version is None or version == latest:
            return Snapshot(self._storage, self._current())
        if version < 0 or version > latest:
            raise VersionNotFoundError(
                f"version {version} does not exist in {self.uri}; the latest version is {latest}"
            )
        return Snapshot(self._storage, self._log.load_state(version, latest=latest))

    def changes(
        self,
        *,
        start_version: int | None = None,
        end_version: int | None = None,
        start_timestamp: Any = None,
        end_timestamp: Any = None,
        information: str = "default",
        initial_rows: bool = False,
        changelog: str | None = None,
        filter: pc.Expression | None = None,
        read_schema: Schema | None = None,
    ) -> ChangeSet:
        """What changed in versions ``start_version..end_version`` (both included).

        The result describes the difference between the snapshot at
        ``start_version - 1`` and the one at ``end_version`` (default: latest;
        ``start_version`` defaults to 0, the whole history). Timestamps select
        the commits whose commit time lies in ``[start_timestamp, end_timestamp]``.

        Parameters
        ----------
        information : {"default", "append_only", "audit"}
            ``default``: the minimum delta (Snowflake's DEFAULT): one row per
            inserted or deleted row, an update as a DELETE + INSERT pair with
            ``METADATA$ISUPDATE`` true and the same ``METADATA$ROW_ID``.
            ``append_only``: rows inserted in the interval with the values they
            were inserted with. ``audit``: every commit's own minimum delta in
            commit order, with ``METADATA$COMMIT_VERSION`` / ``_TIMESTAMP``.
            A :class:`~ctfile.ChangeMode` member works too.
        initial_rows : bool
            Start from the empty table: the rows of the snapshot at
            ``start_version - 1`` come first as INSERTs (for ``default`` the
            result is the snapshot at ``end_version`` as INSERTs).
        changelog : {None, "op"}
            ``"op"`` renders a two-event changelog with a uint8 ``op`` column
            (0 append, 1 retract, 2 correct-from, 3 correct-to) instead of
            ``METADATA$ACTION`` / ``METADATA$ISUPDATE``
            (:class:`~ctfile.Changelog`).
        filter : pyarrow.compute.Expression, optional
            A predicate on data columns; prunes partitions by statistics.
        read_schema : ctfile.format.Schema, optional
            Project the rows by field id into this schema of the table (from
            :meth:`schema_at`) instead of that of ``end_version``, as a stream
            whose schema was fixed when it started does (SPEC §Change scans).

        Raises
        ------
        InvalidArgumentError
            Reversed interval, unknown mode, or both a version and a timestamp.
        VersionNotFoundError
            A version beyond the latest, or a timestamp before the first commit.
        StaleIntervalError
            Retention removed log entries the interval needs.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("v", pa.string())]))
        >>> _ = t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
        >>> _ = t.update(pc.field("id") == 1, {"v": "A"})
        >>> cs = t.changes(start_version=2)
        >>> cs.plan_shape.value, cs.to_arrow().select(["id", "v", "METADATA$ACTION"]).to_pylist()
        ('MINIMIZE', [{'id': 1, 'v': 'a', 'METADATA$ACTION': 'DELETE'}, {'id': 1, 'v': 'A', 'METADATA$ACTION': 'INSERT'}])
        """
        mode = ChangeMode.parse(information)
        changelog = Changelog.parse(changelog)
        if not isinstance(initial_rows, bool):
            raise InvalidArgumentError(f"initial_rows must be a bool, found {initial_rows!r}")
        if read_schema is not None and not isinstance(read_schema, Schema):
            raise InvalidArgumentError(f"read_schema must be a ctfile.format.Schema, found {type(read_schema).__name__}")
        self.refresh()
        state = self._current_head()  # the partitions at the latest version are not needed
        a, b = resolve_interval(
            self._log,
            state.version,
            start_version=start_version,
            end_version=end_version,
            start_timestamp_ms=None if start_timestamp is None else timestamp_to_ms(start_timestamp, what="start_timestamp"),
            end_timestamp_ms=None if end_timestamp is None else timestamp_to_ms(end_timestamp, what="end_timestamp"),
        )
        if read_schema is None:  # SPEC §Change scans, schema changes: the output has the schema of version b
            end = state if b == state.version else self._log.load_head(max(b, 0), latest=state.version)
            read_schema = end.metadata.schema
        read_schema = visible_schema(read_schema, state.metadata.derived)  # SPEC §Derived tables: hidden
        if filter is not None:
            check_predicate(filter, read_schema.to_arrow(field_ids=False), what="filter")
        scan = ChangeScan(a, b, mode=mode, changelog=changelog, row_filter=filter, initial_rows=initial_rows)
        plan = plan_changes(self._log, scan, latest=state.version)
        return ChangeSet(self._storage, read_schema, state.metadata.table_id, scan, plan)

    def to_arrow(self, **kwargs) -> pa.Table:
        """Shorthand for ``snapshot().to_arrow(**kwargs)``."""
        return self.snapshot().to_arrow(**kwargs)

    def history(self, *, limit: int | None = None) -> list[HistoryEntry]:
        """Committed versions, newest first, with their commit info."""
        self.refresh()
        return read_history(self._log, self._current_head().version, limit=limit)

    def schema_history(self, *, limit: int | None = None) -> list[SchemaVersion]:
        """The versions whose commit changed the schema, newest first, each
        with its schema and changes (:class:`~ctfile.table.history.SchemaVersion`;
        the last says whether older history was vacuumed). Reads the log
        entries (newest first, until ``limit``), never a partition."""
        self.refresh()
        return read_schema_history(self._log, self._current_head().version, limit=limit)

    def introduced_versions(self, *, version: int | None = None) -> IntroducedVersions:
        """Per field id of the schema of ``version`` (default: latest; nested
        ids too), the version that introduced it (None: before the oldest
        version available). Reads checkpoint footers and a few entries
        (:func:`~ctfile.table.history.read_introduced_versions`)."""
        self.refresh()
        return read_introduced_versions(self._log, self._current_head(), version)

    # ------------------------------------------------------------ writes

    def transaction(
        self,
        *,
        operation: str = "TRANSACTION",
        parameters: Mapping[str, Any] | None = None,
        commit: CommitOptions | None = None,
        app_id: str | None = None,
        app_version: int | None = None,
        consuming: Stream | None = None,
        refresh: RefreshInfo | None = None,
        refresh_definition: DerivedDefinition | None = None,
    ) -> WriteTransaction:
        """A transaction whose statements commit together as one version.

        With ``consuming`` (a :class:`~ctfile.table.streams.Stream`, of this
        table or another), the stream's pending changes are pinned when the
        transaction begins (``consuming.pending()`` returns them throughout)
        and the commit consumes them exactly once: the stream's offset moves
        to the pinned version together with this commit, a process killed
        at any step neither loses nor repeats them, and of two transactions
        consuming the same changes one commits and the other raises
        :class:`~ctfile.CommitConflictError` (SPEC §Streams).

        With ``commit`` (:class:`~ctfile.CommitOptions`: ``app_id`` and
        ``app_version``, a job name and its batch number, a streaming query
        id and batch id ...) the commit records them, and a batch the table
        already holds (``app_version`` at or below :meth:`app_version` of
        ``app_id``) is a replay: its statements do nothing and nothing is
        committed (``result.app_transaction_replayed``), so a batch re-run
        after a crash is applied exactly once (SPEC §txn). The keywords
        ``app_id=``/``app_version=`` are a shorthand for ``commit=``; so
        they are for every method that commits.
        A conflict with a concurrent commit raises
        :class:`~ctfile.CommitConflictError` (SPEC §Conflict detection).

        With ``refresh`` (a :class:`~ctfile.RefreshInfo`) the transaction is a
        refresh of a derived table, the only way to change its rows: its
        commit (operation ``REFRESH``) records the frontier in the table's
        metadata and ``refresh`` in ``commitInfo.refresh``;
        ``refresh_definition`` replaces the definition in the same commit.
        A refresh whose frontier is already recorded commits nothing; of two
        concurrent refreshes one commits and the other raises
        :class:`~ctfile.CommitConflictError` (SPEC §Derived tables).

        Examples
        --------
        >>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> with t.transaction() as tx:
        ...     _ = tx.insert(pa.table({"id": [1, 2, 3]}))
        ...     _ = tx.delete(pc.field("id") == 2)
        >>> t.version, t.snapshot().to_arrow().column("id").to_pylist()
        (1, [1, 3])
        """
        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        parameters = operation_parameters(parameters)  # refused now, not at commit
        if refresh is None and refresh_definition is not None:
            raise InvalidArgumentError("refresh_definition replaces a derived table's definition in a refresh: give refresh too")
        if consuming is not None:
            stream = check_consuming(consuming)
            commit.require_empty("a transaction consuming a stream records the stream's own app_id; drop app_id")
            tx = stream.consumption(self).transaction(partial(self._begin, operation), parameters)
        else:
            tx = self._begin(operation, parameters)
            commit.apply_to(tx)
        if refresh is not None:
            try:
                tx.begin_refresh(refresh, definition=refresh_definition)
            except BaseException:
                tx.abort()
                raise
        return tx

    def _begin(
        self, operation: str, parameters: Mapping[str, Any], cls: type[WriteTransaction] = WriteTransaction,
    ) -> WriteTransaction:
        """A transaction of class ``cls`` on the latest version, whose commit this object's state follows."""
        self.refresh()
        tx = cls(self._log, self._current(), operation=operation, parameters=parameters)
        tx.on_commit = self._on_commit
        return tx

    def app_version(self, app_id: str) -> int | None:
        """The last batch of application ``app_id`` committed to the table, or
        None (SPEC §txn). A job that finds its next batch at or below it can
        skip the batch before doing any work.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1]}), app_id="nightly", app_version=20261123)
        >>> t.app_version("nightly"), t.app_version("hourly")
        (20261123, None)
        """
        require_app_id(app_id)
        done = self.refresh()._current_head().app_transactions.get(app_id)
        return None if done is None else done.version

    def _on_commit(self, state: TableState) -> None:
        if self._head is None or state.version > self._head.version:
            self._state, self._head = state, state.head

    def _run(self, operation: str, parameters: dict, fn, commit: CommitOptions, *, rerun: bool = True) -> CommitResult:
        """One statement, re-run at the latest version after a conflict
        (:func:`~ctfile.writer.statement.run_statement`) unless its input can
        be read only once (``rerun`` False)."""
        begin = lambda: self.transaction(operation=operation, parameters=parameters, commit=commit)  # noqa: E731
        return run_statement(begin, fn, max_runs=None if rerun else 1)

    def run_statement(
        self, operation: str, body, *, parameters: Mapping[str, Any] | None = None,
        commit: CommitOptions | None = None, app_id: str | None = None, app_version: int | None = None,
        max_runs: int | None = None,
    ) -> CommitResult:
        """Run ``body(tx)`` as one statement of its own transaction and
        commit it, re-running both at the latest version after a conflict
        (at most ``max_runs`` times, default 20), as :meth:`delete`,
        :meth:`update` and :meth:`merge` do. For an engine that runs a
        statement itself (``ctfile.spark`` plans a :class:`ctfile.RewriteJob`
        in ``tx``).

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> t.run_statement("INSERT", lambda tx: tx.insert(pa.table({"id": [1]}))).num_inserted_rows
        1
        """
        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        parameters = operation_parameters(parameters)
        begin = lambda: self.transaction(operation=operation, parameters=parameters, commit=commit)  # noqa: E731
        return run_statement(begin, body, max_runs=max_runs)

    def insert(
        self, data: Any, *, commit: CommitOptions | None = None, app_id: str | None = None,
        app_version: int | None = None,
    ) -> CommitResult:
        """Append rows (a pyarrow Table/RecordBatch/RecordBatchReader or pandas DataFrame).

        A RecordBatchReader is consumed in a stream; memory stays bounded by a
        few micro-partitions. ``commit`` (or its shorthand ``app_id``/``app_version``):
        see :meth:`transaction`.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> r = t.insert(pa.table({"id": [1, 2]}))
        >>> r.version, r.num_inserted_rows
        (1, 2)
        """
        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        return self._run("INSERT", {}, lambda tx: tx.insert(data), commit, rerun=is_reusable(data))

    def delete(
        self, where: pc.Expression, *, commit: CommitOptions | None = None, app_id: str | None = None,
        app_version: int | None = None,
    ) -> CommitResult:
        """Delete the rows where ``where`` is true.

        Re-run at the latest version if a concurrent commit changed or added
        rows it selects (SPEC §Conflict detection); so are :meth:`update`,
        :meth:`merge`, :meth:`truncate`, :meth:`overwrite` and :meth:`compact`.
        """
        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        return self._run("DELETE", {"predicate": str(where)}, lambda tx: tx.delete(where), commit)

    def update(
        self, where: pc.Expression | None, set: Mapping[str, Any], *,
        commit: CommitOptions | None = None, app_id: str | None = None, app_version: int | None = None,
    ) -> CommitResult:
        """Set columns (``set``: column -> scalar or Expression) where ``where`` is true.

        As in SQL, the ``set`` expressions are computed only for the rows
        where ``where`` holds, so one that would fail on an excluded row (a
        division by zero, say) does not fail the statement. Arrow's plain
        arithmetic wraps around on integer overflow; use the ``*_checked``
        functions (``pc.add_checked`` ...) to have an overflow raise
        :class:`~ctfile.InvalidArgumentError` instead.
        """
        params = {"predicate": str(where), "set": {k: str(v) for k, v in dict(set).items()} if isinstance(set, Mapping) else str(set)}
        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        return self._run("UPDATE", params, lambda tx: tx.update(where, set), commit)

    def truncate(
        self, *, commit: CommitOptions | None = None, app_id: str | None = None, app_version: int | None = None,
    ) -> CommitResult:
        """Remove every row (a metadata-only commit)."""
        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        return self._run("TRUNCATE", {}, lambda tx: tx.truncate(), commit)

    def overwrite(
        self, data: Any, *, commit: CommitOptions | None = None, app_id: str | None = None,
        app_version: int | None = None,
    ) -> CommitResult:
        """Replace the table's rows with ``data`` in one version."""

        def fn(tx: WriteTransaction) -> None:
            tx.truncate()
            tx.insert(data)

        commit = commit_options(commit, app_id=app_id, app_version=app_version)
        return self._run("OVERWRITE", {}, fn, commit, rerun=is_reusable(data))

    def clustering_info(
        self, *, version: int | None = None, keys: Sequence[str] | str | None = None
    ) -> ClusteringInfo | None:
        """How clustered ``version`` (default: the latest) is by ``keys``
        (default: ``ctfile.clusterBy``): partitions, overlaps and clustering
        depth from statistics alone (SPEC §Clustering); None when no keys
        are given and the table has none. See
        :meth:`ctfile.Snapshot.clustering_info`."""
        return self.snapshot(version).clustering_info(keys=keys)

    def compact(self, *, target_rows: int | None = None, max_rows: int | None = None) -> CommitResult:
        """Merge small partitions, and with clustering keys (``ctfile.clusterBy``)
        recluster the partitions whose key ranges overlap, deepest first (a
        ``dataChange: false`` commit; SPEC §Clustering).

        ``target_rows`` (default ``ctfile.partitionRows``) sizes the new
        partitions; ``max_rows`` bounds the rows rewritten (default: no
        bound). Rows keep their row ids and row versions, so change scans
        over an interval holding only compactions are EMPTY and read nothing.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]),
        ...                         properties={"ctfile.clusterBy": "id", "ctfile.partitionRows": "4"})
        >>> _ = t.insert(pa.table({"id": [5, 1, 7, 3]}))
        >>> _ = t.insert(pa.table({"id": [2, 8, 4, 6]}))  # its range overlaps the first partition's
        >>> t.clustering_info().max_depth
        2
        >>> t.compact().num_removed_partitions, t.clustering_info().max_depth
        (2, 1)
        >>> t.to_arrow().column("id").to_pylist()
        [1, 2, 3, 4, 5, 6, 7, 8]
        """
        check_compaction_options(target_rows, max_rows)
        params = {"targetRows": target_rows, "maxRows": max_rows}
        return self._run("COMPACT", params, lambda tx: tx.compact(target_rows=target_rows, max_rows=max_rows),
                         NO_COMMIT_OPTIONS)

    def write_job(self, *, mode: str = "append", schema: pa.Schema | None = None,
                  schema_mode: SchemaMode | str | None = None, consuming: Stream | None = None,
                  pin: StreamPin | None = None) -> WriteJob:
        """Plan a write whose files other processes produce (see :class:`ctfile.WriteJob`).

        ``schema``, the schema of the data to be written, is checked now,
        before any file exists: a mismatch raises :class:`SchemaMismatchError`
        naming the columns. With ``schema_mode`` (:class:`~ctfile.SchemaMode`:
        ``"merge"``, ``"overwrite"``) the write changes the schema instead,
        in the version of its rows.

        With ``consuming`` (a :class:`~ctfile.Stream`) the job's commit
        consumes ``pin`` (from ``consuming.pin()`` or ``pin_from_token``;
        default: pinned now) exactly once, as ``transaction(consuming=)``
        does; committing a pin already consumed into this table commits
        nothing (a replay), one consumed otherwise raises
        :class:`~ctfile.CommitConflictError`
        (:mod:`ctfile.table.stream_jobs`).
        """
        if pin is not None and consuming is None:
            raise InvalidArgumentError("pin is the pin of the stream a job consumes: give consuming too")
        self.refresh()
        refuse_outside_refresh(self._current_head().metadata, "WRITE", self.uri)  # SPEC §Derived tables
        job = plan_write(self._current(), self._storage, schema, mode=mode, schema_mode=schema_mode)
        return job if consuming is None else consuming_job(job, consuming, pin, open_table=open_table)

    # ------------------------------------------------------------ maintenance (TableMaintenance)

    def vacuum(self, *, retain: dt.timedelta | float | None = None, grace_period: dt.timedelta | float | None = None,
               dry_run: bool = False) -> VacuumResult:
        """Expire history older than ``max(retain, grace_period)`` and delete
        files no retained version needs (:meth:`TableMaintenance.vacuum
        <ctfile.table.maintenance.TableMaintenance.vacuum>`)."""
        return TableMaintenance(self).vacuum(retain=retain, grace_period=grace_period, dry_run=dry_run)

    def checkpoint(self, *, version: int | None = None) -> CheckpointInfo:
        """Write the checkpoint of the latest version (or of ``version``) now
        (:meth:`TableMaintenance.checkpoint <ctfile.table.maintenance.TableMaintenance.checkpoint>`)."""
        return TableMaintenance(self).checkpoint(version=version)

    def update_schema(self) -> UpdateSchema:
        """Change the schema, one version per ``with`` block
        (:meth:`TableMaintenance.update_schema <ctfile.table.maintenance.TableMaintenance.update_schema>`)."""
        return TableMaintenance(self).update_schema()

    def set_properties(self, properties: Mapping[str, str]) -> CommitResult:
        """Set table properties, a metadata-only commit
        (:meth:`TableMaintenance.set_properties <ctfile.table.maintenance.TableMaintenance.set_properties>`)."""
        return TableMaintenance(self).set_properties(properties)

    def restore(self, *, version: int | None = None, timestamp: Any = None) -> CommitResult:
        """Make the table equal to its snapshot at ``version`` or ``timestamp``
        in one commit (:meth:`TableMaintenance.restore <ctfile.table.maintenance.TableMaintenance.restore>`)."""
        return TableMaintenance(self).restore(version=version, timestamp=timestamp)

    # ------------------------------------------------------------ streams (TableStreams)

    def create_stream(self, name: str, *, information: str = "default", start_version: int | None = None,
                      initial_rows: bool = False) -> Stream:
        """Create stream ``name`` on this table and return it
        (:meth:`TableStreams.create_stream <ctfile.table.streams.TableStreams.create_stream>`)."""
        return TableStreams(self, open_table=open_table).create_stream(
            name, information=information, start_version=start_version, initial_rows=initial_rows,
        )

    def stream(self, name: str) -> Stream:
        """The stream ``name`` (:meth:`TableStreams.stream <ctfile.table.streams.TableStreams.stream>`)."""
        return TableStreams(self, open_table=open_table).stream(name)

    def streams(self, *, retain: Any = None, grace_period: Any = None) -> list[StreamInfo]:
        """Every stream of the table with its offset, lag and staleness
        (:meth:`TableStreams.streams <ctfile.table.streams.TableStreams.streams>`)."""
        return TableStreams(self, open_table=open_table).streams(retain=retain, grace_period=grace_period)

    def drop_stream(self, name: str) -> None:
        """Drop stream ``name`` (:meth:`TableStreams.drop_stream <ctfile.table.streams.TableStreams.drop_stream>`)."""
        TableStreams(self, open_table=open_table).drop_stream(name)

    # ------------------------------------------------------------ MERGE (TableMerges)

    def merge(self, source: Any, on: str | Sequence[str], *, when_matched: str | None = "update",
              when_not_matched: str | None = "insert", commit: CommitOptions | None = None,
              app_id: str | None = None, app_version: int | None = None) -> CommitResult:
        """Upsert ``source`` on the key columns ``on``
        (:meth:`TableMerges.merge <ctfile.table.merges.TableMerges.merge>`)."""
        return TableMerges(self).merge(source, on, when_matched=when_matched, when_not_matched=when_not_matched,
                                       commit=commit, app_id=app_id, app_version=app_version)

    def merge_builder(self, source: Any, on: Any, *, on_condition: pc.Expression | None = None,
                      source_alias: str = "s", target_alias: str = "t") -> MergeBuilder:
        """A MERGE of ``source`` into this table, ON the key columns ``on``
        (:meth:`TableMerges.merge_builder <ctfile.table.merges.TableMerges.merge_builder>`)."""
        return TableMerges(self).merge_builder(source, on, on_condition=on_condition, source_alias=source_alias,
                                               target_alias=target_alias)
