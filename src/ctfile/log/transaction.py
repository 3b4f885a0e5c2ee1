"""Transactions and the commit protocol (SPEC §Commit protocol).

A :class:`Transaction` reads one table state, collects the partitions its
statements write and remove and what they read, and commits them as one new
version with optimistic concurrency:

1. the data files are written first, under unique names;
2. the entry for ``read version + 1`` is put-if-absent;
3. on a lost race the winning entries are read and checked against this
   transaction's :class:`~ctfile.log.conflicts.ReadSet` at the table's
   isolation level (SPEC §Conflict detection); a real conflict raises
   :class:`CommitConflictError` naming both versions and the rule, a winner
   that already committed this transaction's application batch makes it a
   replay that commits nothing, and otherwise the transaction is rebased
   (new version, new ``firstRowId`` values, later timestamp) and retried.

Because fresh rows store null row ids and null row versions (SPEC §Hidden
columns), a rebase never rewrites a data file: only the log entry changes.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

from ctfile.format.actions import (
    Action,
    FEATURE_CHANGE_CAPTURE,
    AddPartition,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.derived import RefreshInfo
from ctfile.format.entries import encode_entry
from ctfile.format.errors import (
    CommitConflictError,
    ConflictKind,
    CtfileError,
    InvalidArgumentError,
    StorageError,
)
from ctfile.format.log_values import check_json_value, require_long
from ctfile.format.paths import change_file_path, commit_path, data_file_path
from ctfile.format.append_only import FEATURE_APPEND_ONLY, check_not_derived, refuse_row_removal
from ctfile.format.properties import ChangeCapture, TableProperties
from ctfile.format.schema import LONG_MAX
from ctfile.log.commit_options import require_app_id, require_app_version
from ctfile.log.conflicts import ReadPredicate, ReadSet, find_conflict, replays_app_transaction
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState, apply_entry, check_writer_protocol, roll_forward
from ctfile.log.staged import PENDING, CommitResult, StagedFile, now_ms
from ctfile.log.storage_errors import OutcomeUnknownError

__all__ = ["PENDING", "CommitResult", "StagedFile", "Transaction", "now_ms", "retry_delay"]

log = logging.getLogger("ctfile")

ENGINE_INFO = "ctfile-python"
MAX_COMMIT_ATTEMPTS = 200
#: Puts of one version whose outcome is unknown before the commit gives up.
MAX_UNKNOWN_OUTCOMES = 5
#: SPEC §Checkpoints: a version whose entry holds this many add and remove
#: actions is checkpointed whatever ctfile.checkpointInterval says (unless 0).
LARGE_ENTRY_ACTIONS = 1000
# SPEC §Commit protocol: between attempts a writer sleeps a "full jitter"
# delay, uniform in [0, min(cap, base * 2**attempts)). Exponential so that
# many writers contending for one table spread out instead of retrying in
# lock step; capped so that a writer that lost a few races is not parked
# for seconds on a table that has gone quiet.
RETRY_BASE_S = 0.002
RETRY_CAP_S = 0.25


def retry_delay(attempts: int) -> float:
    """The random delay before commit attempt ``attempts + 1``."""
    return random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** min(attempts, 30)))


@dataclass
class _Metrics:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    copied: int = 0


def operation_parameters(parameters: Any) -> dict[str, Any]:
    """A copy of ``parameters`` (None: empty), the ``operationParameters``
    of a commit, refused now if its ``commitInfo`` could not hold it
    (SPEC §commitInfo, §Conventions): a mapping with str keys of JSON
    values (no set, object, NaN or Infinity; integers that fit a ``long``;
    nesting within :data:`~ctfile.format.log_values.MAX_JSON_DEPTH`).

    Raises
    ------
    InvalidArgumentError
        Naming the bad item, what was expected and what was found, before
        any statement of the transaction runs.
    """
    if parameters is None:
        return {}
    if not isinstance(parameters, Mapping):
        raise InvalidArgumentError(f"parameters must be a mapping of str to JSON values, found {parameters!r:.80}")
    out = dict(parameters)
    check_json_value(out, "parameters", depth=_PARAMETERS_DEPTH)
    return out


#: The level of ``operationParameters`` in its log line: the line's object,
#: the ``commitInfo`` body, the parameters.
_PARAMETERS_DEPTH = 3


class Transaction:
    """Collects the actions of one or more statements and commits them as one version.

    Use as a context manager: leaving the block commits, an exception aborts
    (the files the transaction wrote are deleted, nothing is committed)::

        with table.transaction() as tx:
            tx.insert(batch)
            tx.delete(pc.field("id") < 10)
    """

    def __init__(
        self,
        log: ManifestLog,
        base: TableState,
        *,
        operation: str,
        parameters: dict[str, Any] | None = None,
        data_change: bool = True,
    ):
        check_writer_protocol(base.protocol, where=log.storage.uri)
        if base.timestamp >= LONG_MAX:
            raise InvalidArgumentError(
                f"version {base.version} of {log.storage.uri} was committed at {base.timestamp}, the largest long: "
                f"there is no later commit timestamp (SPEC §Commit timestamps), so the table takes no more commits"
            )
        if not isinstance(operation, str):
            raise InvalidArgumentError(f"operation must be a str, found {operation!r}")
        self.log = log
        self.storage = log.storage
        self.base = base
        self.txn_id = uuid.uuid4().hex
        self.operation = operation
        self.parameters: dict[str, Any] = operation_parameters(parameters)
        self.data_change = data_change
        self.metrics = _Metrics()
        self._staged: dict[str, StagedFile] = {}
        self._removed: dict[str, Partition] = {}
        #: SPEC §Restore: partitions of an earlier version made live again,
        #: with their lineage (their files are not this transaction's).
        self._restored: dict[str, Partition] = {}
        #: Counters that replace the four row counters of ``operationMetrics``
        #: (a RESTORE's, SPEC §Restore); None: the DML counters.
        self.row_metrics: dict[str, int] | None = None
        #: SPEC §Change capture: the change files staged, and the removed
        #: partitions whose every row the transaction deletes.
        self._changes: dict[str, StagedFile] = {}
        self._deletes_all_rows: set[str] = set()
        self._reads = ReadSet()
        self._metadata: Metadata | None = None
        self._features: dict[str, bool] = {}  # feature -> also a reader feature
        self._app_txn: SetTransaction | None = None
        self._markers: list[SetTransaction] = []
        self._replay = False
        #: SPEC §Derived tables: set on a refresh commit (commitInfo.refresh).
        self.refresh: RefreshInfo | None = None
        #: SPEC §Conflict detection: the level is the read version's.
        props = TableProperties.from_mapping(base.metadata.properties)
        self.isolation_level = props.isolation_level
        #: SPEC §Change capture: whether the commits of this transaction are
        #: captured is decided by the metadata of the version it read.
        self.captures_changes = props.change_capture is ChangeCapture.BEFORE_AFTER
        self._file_seq = 0
        self._done = False
        self._maybe_committed = False
        self.result: CommitResult | None = None
        # Called with the new TableState after a successful commit (the Table
        # uses it to advance its cached state without re-reading the log).
        self.on_commit = None
        #: The table's state at the version this transaction committed.
        self.committed_state: TableState | None = None

    # ------------------------------------------------------------ state seen by statements

    @property
    def metadata(self) -> Metadata:
        return self._metadata or self.base.metadata

    @property
    def schema(self):
        return self.metadata.schema

    def live_partitions(self) -> list[Partition]:
        """The partitions a statement in this transaction sees: the base
        state's minus those removed, plus those staged (with PENDING lineage)."""
        out = [p for path, p in self.base.partitions.items() if path not in self._removed]
        out.extend(f.as_pending_partition() for f in self._staged.values())
        out.extend(self._restored.values())
        return out

    def next_file_path(self) -> str:
        self._file_seq += 1
        return data_file_path(self.txn_id, self._file_seq)

    def next_change_path(self) -> str:
        """A fresh change-file path (the sequence is shared with data files,
        so every file of the transaction has its own number)."""
        self._file_seq += 1
        return change_file_path(self.txn_id, self._file_seq)

    # ------------------------------------------------------------ recording

    def _check_open(self) -> None:
        if self._done:
            raise InvalidArgumentError("this transaction has already been committed or aborted")

    def stage(self, files: list[StagedFile]) -> None:
        self._check_open()
        for f in files:
            self._staged[f.path] = f

    def mark_read(self, partition: Partition) -> None:
        """A statement opened ``partition`` to look for rows (SPEC §Conflict
        detection: its read set). Partitions this transaction wrote itself
        are not part of the table a concurrent commit could change."""
        if partition.first_row_id != PENDING:
            self._reads.partitions.add(partition.path)

    @property
    def read_partitions(self) -> frozenset[str]:
        """Paths of the committed partitions the statements so far opened,
        or removed by a metadata-only delete (:meth:`mark_read`)."""
        return frozenset(self._reads.partitions)

    def mark_reads_whole_table(self) -> None:
        """For truncate/overwrite: a concurrent data-changing commit conflicts."""
        self._reads.whole_table = True

    def record_read_predicate(self, predicate: ReadPredicate) -> None:
        """A statement selected rows with ``predicate``: a concurrent commit
        that adds a row it selects conflicts (SPEC §Conflict detection, rule 4)."""
        self._reads.predicates.append(predicate)

    @property
    def is_blind_append(self) -> bool:
        """True if the transaction only adds rows and reads nothing."""
        return (
            self._reads.is_empty() and not self._removed and not self._restored and self._metadata is None
            and not self._adds_features() and self.refresh is None
        )

    def _adds_features(self) -> bool:
        """True if the commit adds a feature the protocol read lacks (SPEC §Streams: ``CREATE STREAM``)."""
        p = self.base.protocol
        return any(f not in p.writer_features or (r and f not in p.reader_features) for f, r in self._features.items())

    def remove(self, partition: Partition, *, deletes_all_rows: bool = False) -> None:
        """Remove a live partition. ``deletes_all_rows``: the statement deletes
        every row of it and keeps none elsewhere (recorded only when the
        transaction captures changes, SPEC §Change capture)."""
        self._check_open()
        if partition.path in self._staged:
            # Written and dropped within this transaction: never visible.
            del self._staged[partition.path]
            self.storage.delete([partition.path])
        else:
            self._removed[partition.path] = self.base.partitions[partition.path]
            if deletes_all_rows and self.captures_changes:
                self._deletes_all_rows.add(partition.path)

    def re_add(self, partition: Partition) -> None:
        """Make ``partition``, live at an earlier version and not now, live
        again with the lineage it had there (SPEC §Restore): the commit's
        ``add`` keeps its ``firstRowId``, takes the commit's version as
        ``defaultRowVersion`` and records the row version its rows inherited
        as ``restoredRowVersion``. Its file is not this transaction's: an
        abort leaves it."""
        self._check_open()
        if partition.path in self.base.partitions or partition.path in self._staged:
            raise InvalidArgumentError(f"cannot re-add {partition.path}: it is live in {self.storage.uri}")
        self._restored[partition.path] = replace(partition, restored_row_version=partition.inherited_row_version)

    def stage_changes(self, files: list[StagedFile]) -> None:
        """Stage change files (SPEC §Change capture), named by the commit in
        the order staged."""
        self._check_open()
        if files and not self.captures_changes:
            raise InvalidArgumentError(
                f"{self.operation} on {self.storage.uri} staged change files, but the version it read "
                "has ctfile.changeCapture none"
            )
        for f in files:
            self._changes[f.path] = f

    def replace_changes(self, files: list[StagedFile]) -> None:
        """Replace every staged change file with ``files`` (the old ones are
        deleted): a transaction whose statements changed the same rows
        consolidates their change rows before it commits."""
        self._check_open()
        old = [p for p in self._changes if p not in {f.path for f in files}]
        self._changes = {}
        self.stage_changes(files)
        self.storage.delete(old)

    def staged_changes(self) -> list[StagedFile]:
        return list(self._changes.values())

    def set_metadata(self, metadata: Metadata) -> None:
        """Commit ``metadata``. Setting ``ctfile.changeCapture`` to
        ``before_after`` adds the ``changeCapture`` writer feature to the
        protocol in the same commit (SPEC §Protocol), setting
        ``ctfile.appendOnly`` to ``true`` the ``appendOnly`` one (refused on
        a derived table, SPEC §Append-only tables); they are never removed."""
        self._check_open()
        props = TableProperties.from_mapping(metadata.properties)
        if props.append_only:  # SPEC §Append-only tables: the writer feature, never on a derived table
            check_not_derived(metadata)
            self._features[FEATURE_APPEND_ONLY] = False
        self._metadata = metadata
        if props.change_capture is ChangeCapture.BEFORE_AFTER:
            self._features[FEATURE_CHANGE_CAPTURE] = False

    def require_feature(self, feature: str, *, reader: bool) -> None:
        """Add ``feature`` to the table's protocol in this commit (a reader
        feature is also a writer feature); features are never removed
        (SPEC §Protocol)."""
        self._check_open()
        self._features[feature] = self._features.get(feature, False) or reader

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Commit batch ``version`` of application ``app_id`` exactly once (SPEC §txn).

        If the table state this transaction read already holds ``app_id`` at
        ``version`` or later, the transaction is a replay (:attr:`is_replay`):
        it commits nothing. A concurrent commit of the same batch is
        recognised at commit time the same way.
        """
        self._check_open()
        require_app_id(app_id)
        require_app_version(version)  # SPEC §txn: a long the log holds
        self._app_txn = SetTransaction(app_id, version, 0)
        done = self.base.app_transactions.get(app_id)
        self._replay = done is not None and done.version >= version

    def add_app_marker(self, app_id: str, version: int) -> None:
        """Also record ``txn(app_id, version)``, without the replay check of
        :meth:`set_app_transaction` (a stream fence's, SPEC §Streams)."""
        self._check_open()
        if not isinstance(app_id, str) or not app_id or (self._app_txn and self._app_txn.app_id == app_id):
            raise InvalidArgumentError(f"a marker needs its own non-empty app_id, found {app_id!r}")
        require_long(version, "version", minimum=0)
        self._markers.append(SetTransaction(app_id, version, 0))

    @property
    def may_have_committed(self) -> bool:
        """True if a put of this transaction's entry had an unknown outcome
        or was interrupted: the entry may exist even though commit raised."""
        return self._maybe_committed

    @property
    def is_replay(self) -> bool:
        """True if the application batch set by :meth:`set_app_transaction` is
        already committed: statements are skipped and nothing is committed."""
        return self._replay

    def add_metrics(self, *, inserted=0, updated=0, deleted=0, copied=0) -> None:
        self.metrics.inserted += inserted
        self.metrics.updated += updated
        self.metrics.deleted += deleted
        self.metrics.copied += copied

    # ------------------------------------------------------------ commit

    @property
    def has_statements(self) -> bool:
        """True once a statement staged or removed a partition or a change file."""
        return bool(self._staged or self._removed or self._changes or self._restored)

    @property
    def is_empty(self) -> bool:
        return not (
            self._staged or self._removed or self._metadata or self._app_txn or self._changes or self._restored
            or self._adds_features()
        )

    def _actions(self, version: int, state: TableState, timestamp: int) -> list[Action]:
        actions: list[Action] = [
            CommitInfo(
                timestamp=timestamp,
                operation=self.operation,
                operation_parameters=self.parameters,
                read_version=self.base.version,
                data_change=self.data_change,
                operation_metrics=self._metrics_dict(),
                engine_info=ENGINE_INFO,
                txn_id=self.txn_id,
                isolation_level=self.isolation_level.value,
                is_blind_append=self.is_blind_append,
                refresh=self.refresh,
            )
        ]
        protocol = self._protocol(state)
        if protocol != state.protocol:
            actions.append(protocol)
        if self._metadata is not None:
            actions.append(self._metadata)
        if self._app_txn is not None:
            actions.append(SetTransaction(self._app_txn.app_id, self._app_txn.version, timestamp))
        actions.extend(SetTransaction(m.app_id, m.version, timestamp) for m in self._markers)
        actions.extend(self._partition_actions(version, state, timestamp))
        return actions

    def _protocol(self, state: TableState) -> Protocol:
        """The protocol of ``state`` with the features this transaction
        needs: against the state committed on (a winner may have added a feature)."""
        protocol = state.protocol
        for feature, reader in self._features.items():
            protocol = protocol.with_reader_feature(feature) if reader else protocol.with_writer_feature(feature)
        return protocol

    def _partition_actions(self, version: int, state: TableState, timestamp: int) -> list[Action]:
        """The removes, adds and change files of the commit of ``version`` on ``state``."""
        actions: list[Action] = []
        for p in self._removed.values():
            actions.append(RemovePartition(
                p, deletion_timestamp=timestamp, data_change=self.data_change,
                deletes_all_rows=p.path in self._deletes_all_rows,
            ))
        # SPEC §Row lineage: firstRowId from the table's counter, in commit order.
        next_row_id = state.next_row_id
        for f in self._staged.values():
            part = Partition(
                f.path, f.size_bytes, f.num_records, next_row_id, version,
                f.modification_time, f.checksum, f.stats,
            )
            next_row_id += f.num_records
            actions.append(AddPartition(part, data_change=self.data_change))
        # SPEC §Restore: a re-add keeps its firstRowId and takes no range.
        actions.extend(
            AddPartition(replace(p, default_row_version=version), data_change=self.data_change)
            for p in self._restored.values()
        )
        actions.extend(f.as_change_file() for f in self._changes.values())
        return actions

    def _metrics_dict(self) -> dict[str, int]:
        rows = self.row_metrics if self.row_metrics is not None else {
            "numInsertedRows": self.metrics.inserted,
            "numUpdatedRows": self.metrics.updated,
            "numDeletedRows": self.metrics.deleted,
            "numCopiedRows": self.metrics.copied,
        }
        return {
            **rows,
            "numAddedPartitions": len(self._staged) + len(self._restored),
            "numRemovedPartitions": len(self._removed),
        }

    def _check_winner(self, winner_version: int, winner: list[Action]) -> None:
        """SPEC §Conflict detection: raise if a concurrent commit invalidates this one."""
        found = find_conflict(
            self._reads, self._removed, winner, level=self.isolation_level,
            storage=self.storage, schema=self.base.metadata.schema,
        )
        if found is not None:
            raise CommitConflictError(
                f"commit conflict on {self.storage.uri}: this {self.operation} read version "
                f"{self.base.version}, but concurrent version {winner_version} {found.reason}; "
                f"re-run the statement against the new version",
                read_version=self.base.version,
                winning_version=winner_version,
                kind=found.kind,
            )

    def commit(self) -> CommitResult:
        """Commit as one new version; see the module docstring for the protocol."""
        self._check_open()
        if self._replay:
            return self._replayed(self.base.version, attempts=0)
        if self.is_empty:
            self._done = True
            self.result = self._result(self.base.version, committed=False, attempts=0)
            return self.result
        try:
            self._check_append_only()
            return self._commit_loop()
        except BaseException:
            self.abort()
            raise

    def _check_append_only(self) -> None:
        """SPEC §Append-only tables: a commit under ``ctfile.appendOnly`` (in
        the version read or in the metadata it commits) holds no data-changing
        remove, no re-add and no change file; the statements refused this
        before writing, this is the check of the commit itself."""
        if self.data_change and (self._removed or self._restored or self._changes):
            committed = self._metadata.properties if self._metadata is not None else None
            refuse_row_removal(self.base.metadata.properties, self.operation, self.storage.uri, committed=committed)

    def _commit_loop(self) -> CommitResult:
        """Steps 4-7 of SPEC §Commit protocol. How a put fails decides what
        the data files may become: a lost race rebases (:meth:`_rebase`); an
        unknown outcome (an :class:`OSError`) keeps them and retries the same
        version; a definite refusal (a :class:`StorageError` that is not an
        :class:`OSError`) aborts; anything else raised during the put (an
        interrupt while the request may still complete) keeps them too."""
        state = self.base
        attempts = 0
        io_errors = 0
        while True:
            attempts += 1
            version = state.version + 1
            timestamp = max(now_ms(), state.timestamp + 1)  # SPEC §Commit timestamps
            actions = self._actions(version, state, timestamp)
            # Encoded before the put: an entry readers would refuse raises
            # here (InvalidArgumentError), nothing was put, the files go.
            entry = encode_entry(actions)
            try:
                self.storage.put_if_absent(commit_path(version), entry)
            except FileExistsError:
                state, done = self._rebase(state, version, attempts)
                if done is not None:
                    return done
                time.sleep(retry_delay(attempts))
                continue
            except OSError as e:
                # Outcome unknown: the entry may have landed. From here on the
                # staged files must survive an abort (SPEC §Commit protocol,
                # step 7); retrying finds our txnId if it landed.
                self._maybe_committed = True
                io_errors += 1
                if io_errors > MAX_UNKNOWN_OUTCOMES:
                    raise self._unknown_outcome(version, io_errors, e) from e
                log.warning("commit put of version %d failed (%s); retrying", version, e)
                time.sleep(min(2.0, 0.05 * 2**io_errors))
                continue  # the same version: if ours landed, the put now loses to it
            except StorageError:
                raise  # a definite refusal: nothing was written
            except BaseException:
                self._maybe_committed = True  # interrupted: the put may still land
                raise
            new_state = apply_entry(state, version, actions, where=commit_path(version))
            return self._finish(new_state, attempts)

    def _rebase(self, state: TableState, version: int, attempts: int) -> tuple[TableState, CommitResult | None]:
        """After losing the race for ``version``: the state to retry from, or
        the final result. Every winner is read first, so that our own entry
        (an earlier put that landed though it reported failure) or our
        application batch committed by another writer is recognised before
        any winner's conflict is (SPEC §Commit protocol, step 6)."""
        latest = self.log.latest_version()
        winners = list(zip(range(version, latest + 1), self.log.read_entries(version, latest)))
        for n, (v, entry) in enumerate(winners):
            info = next(a for a in entry if isinstance(a, CommitInfo))
            if info.txn_id == self.txn_id:
                state = roll_forward(state, winners[: n + 1], where=commit_path)
                return state, self._finish(state, attempts)
            if replays_app_transaction(self._app_txn, entry):
                return state, self._replayed(v, attempts=attempts)
        state = roll_forward(state, self._checked_winners(winners), where=commit_path)
        if attempts >= MAX_COMMIT_ATTEMPTS:
            raise CommitConflictError(
                f"gave up committing {self.operation} to {self.storage.uri} after "
                f"{attempts} attempts under contention (last seen version {state.version})",
                read_version=self.base.version,
                winning_version=state.version,
                kind=ConflictKind.CONTENTION,
            )
        return state, None

    def _checked_winners(self, winners: list[tuple[int, list[Action]]]) -> Iterator[tuple[int, list[Action]]]:
        """``winners``, each checked for a conflict (:meth:`_check_winner`)
        just before it is rolled forward over."""
        for v, entry in winners:
            self._check_winner(v, entry)
            yield v, entry

    def _unknown_outcome(self, version: int, tries: int, cause: OSError) -> OutcomeUnknownError:
        return OutcomeUnknownError(
            f"commit of {self.operation} to {self.storage.uri} gave up: {tries} puts of version {version} "
            f"failed with an unknown outcome (last: {cause}); the entry may have landed, so its data files "
            f"were kept: open the table again to see whether a version holds txnId {self.txn_id}",
            uri=self.storage.uri, path=commit_path(version),
        )

    def _finish(self, new_state: TableState, attempts: int) -> CommitResult:
        self._done = True
        self.committed_state = new_state
        if self.on_commit is not None:
            self.on_commit(new_state)
        interval = TableProperties.from_mapping(new_state.metadata.properties).checkpoint_interval
        large = len(self._removed) + len(self._staged) + len(self._restored) >= LARGE_ENTRY_ACTIONS
        if interval and (new_state.version % interval == 0 or large):
            try:
                self.log.write_checkpoint(new_state)
            except (OSError, CtfileError) as e:  # advisory: the commit already stands
                log.warning("checkpoint of version %d failed: %s", new_state.version, e)
        self.result = self._result(new_state.version, committed=True, attempts=attempts)
        return self.result

    def _replayed(self, version: int, *, attempts: int) -> CommitResult:
        """Commit nothing: version ``version`` holds this application batch already."""
        self.abort()
        self.result = CommitResult(
            version=version, committed=False, operation=self.operation, attempts=attempts,
            app_transaction_replayed=True,
        )
        return self.result

    def _result(self, version: int, *, committed: bool, attempts: int) -> CommitResult:
        return CommitResult(
            version=version,
            committed=committed,
            operation=self.operation,
            num_inserted_rows=self.metrics.inserted,
            num_updated_rows=self.metrics.updated,
            num_deleted_rows=self.metrics.deleted,
            num_copied_rows=self.metrics.copied,
            num_added_partitions=len(self._staged) + len(self._restored) if committed else 0,
            num_removed_partitions=len(self._removed) if committed else 0,
            attempts=attempts,
        )

    def abort(self) -> None:
        """Delete the files this transaction wrote; nothing was committed."""
        if self._done:
            return
        self._done = True
        paths = list(self._staged) + list(self._changes)
        self._staged.clear()
        self._changes.clear()
        if paths and not self._maybe_committed:
            try:
                self.storage.delete(paths)
            except (OSError, StorageError) as e:  # orphans are harmless; vacuum removes them
                log.warning("could not delete %d staged files: %s", len(paths), e)

    def staged_data_paths(self) -> list[str]:
        """The data files staged (the partitions the commit adds)."""
        return list(self._staged)

    def staged_paths(self) -> list[str]:
        """The data and change files staged, to be named by the commit."""
        return list(self._staged) + list(self._changes)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
            return
        if not self._done:
            self.commit()
