"""Log replay: the table state at a version (SPEC §Log replay).

A :class:`TableState` is what a reader needs to serve a snapshot: protocol,
metadata, the live partitions, the row-id counter and the commit timestamp.
:func:`apply_entry` folds one log entry into a state; it is pure.
A :class:`TableHead` is its table-level part, all that a change scan or the
table's schema needs: :func:`apply_table_actions` folds the table-level
actions of an entry into one, with the same rules, and never sees a partition.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ctfile.format.actions import (
    SUPPORTED_READER_FEATURES,
    SUPPORTED_WRITER_FEATURES,
    READER_VERSION,
    WRITER_VERSION,
    Action,
    AddPartition,
    CheckpointHeader,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.errors import CorruptLogError, UnsupportedFeatureError


@dataclass(frozen=True)
class TableState:
    version: int
    timestamp: int
    protocol: Protocol
    metadata: Metadata
    partitions: dict[str, Partition] = field(hash=False)
    next_row_id: int
    app_transactions: dict[str, SetTransaction] = field(default_factory=dict, hash=False)

    @property
    def num_records(self) -> int:
        return sum(p.num_records for p in self.partitions.values())

    @property
    def head(self) -> "TableHead":
        return TableHead(self.version, self.timestamp, self.protocol, self.metadata, self.app_transactions)


@dataclass(frozen=True)
class TableHead:
    """The table-level state of a version: what :class:`TableState` holds
    but the live partitions and ``nextRowId``, which only ``add`` actions
    change. Found from a checkpoint's key-value metadata and the entries'
    table-level actions, without decoding a partition."""

    version: int
    timestamp: int
    protocol: Protocol
    metadata: Metadata
    app_transactions: dict[str, SetTransaction] = field(default_factory=dict, hash=False)


def check_reader_protocol(protocol: Protocol, *, where: str) -> None:
    """SPEC §Protocol: a reader MUST refuse a table it cannot read correctly."""
    if protocol.min_reader_version > READER_VERSION:
        raise UnsupportedFeatureError(
            f"{where}: table needs reader version {protocol.min_reader_version}; "
            f"this ctfile reads up to version {READER_VERSION}. Upgrade ctfile."
        )
    unknown = sorted(set(protocol.reader_features) - SUPPORTED_READER_FEATURES)
    if unknown:
        raise UnsupportedFeatureError(
            f"{where}: table needs reader features {unknown} that this ctfile does not "
            f"support (supported: {sorted(SUPPORTED_READER_FEATURES)})"
        )


def check_writer_protocol(protocol: Protocol, *, where: str) -> None:
    if protocol.min_writer_version > WRITER_VERSION:
        raise UnsupportedFeatureError(
            f"{where}: table needs writer version {protocol.min_writer_version}; "
            f"this ctfile writes up to version {WRITER_VERSION}"
        )
    unknown = sorted(set(protocol.writer_features) - SUPPORTED_WRITER_FEATURES)
    if unknown:
        raise UnsupportedFeatureError(
            f"{where}: table needs writer features {unknown} that this ctfile does not "
            f"support (supported: {sorted(SUPPORTED_WRITER_FEATURES)})"
        )


def apply_entry(
    state: TableState | None, version: int, actions: list[Action], *, where: str
) -> TableState:
    """Fold the log entry of ``version`` into ``state`` (None before version 0).

    ``actions`` are an entry that passed
    :func:`~ctfile.format.entries.validate_commit_entry` (as every entry
    :meth:`ManifestLog.read_entry <ctfile.log.manifest.ManifestLog.read_entry>`
    returns does) or that a writer built: no path twice, at most one
    protocol, metadata and txn per application. Then the result does not
    depend on their order: ``nextRowId`` is the maximum over the adds
    (SPEC §Log replay).
    """
    return _apply(state, version, actions, where=where, owned=False)


def apply_entries(
    state: TableState | None, first_version: int, entries: Iterable[list[Action]],
    *, where: Callable[[int], str],
) -> TableState | None:
    """Fold consecutive entries ``first_version, first_version + 1, ...`` into
    ``state``: the result of :func:`apply_entry` one entry at a time, but the
    partition map is copied once rather than once per entry (replaying 99
    entries onto 10,000 live partitions would otherwise copy 990,000 items).
    ``where(version)`` names each entry for error messages."""
    owned = False  # the maps of `state` may be shared; those of states built here are not
    for version, actions in zip(itertools.count(first_version), entries):
        state = _apply(state, version, actions, where=where(version), owned=owned)
        owned = True
    return state


def _apply(
    state: TableState | None, version: int, actions: list[Action], *, where: str, owned: bool
) -> TableState:
    """``apply_entry``; ``owned``: the maps of ``state`` may be updated in place."""
    if state is None:
        partitions, txns = {}, {}
    elif owned:
        partitions, txns = state.partitions, state.app_transactions
    else:
        partitions, txns = dict(state.partitions), dict(state.app_transactions)
    head = _apply_head(None if state is None else state.head, version, actions, where=where, txns=txns)
    next_row_id = state.next_row_id if state else 0
    for a in actions:
        if isinstance(a, AddPartition):
            p = a.partition
            if p.path in partitions:
                raise CorruptLogError(f"{where}: add of {p.path}, which is already live")
            partitions[p.path] = p
            next_row_id = max(next_row_id, p.first_row_id + p.num_records)
        elif isinstance(a, RemovePartition):
            if partitions.pop(a.path, None) is None:
                raise CorruptLogError(f"{where}: remove of {a.path}, which is not live")
    return TableState(version, head.timestamp, head.protocol, head.metadata, partitions, next_row_id, txns)


def apply_table_actions(head: TableHead | None, version: int, actions: list[Action], *, where: str) -> TableHead:
    """Fold the table-level actions of the entry of ``version`` into ``head``
    (None before version 0): the rules of SPEC §Log replay on the protocol
    (checked, as a reader must), the metadata, ``txn`` and the commit
    timestamp. Partition actions among ``actions`` are ignored, so they may
    be left undecoded (:func:`~ctfile.format.entries.decode_table_actions`)."""
    txns = {} if head is None else dict(head.app_transactions)
    return _apply_head(head, version, actions, where=where, txns=txns)


def _apply_head(
    head: TableHead | None, version: int, actions: list[Action], *, where: str, txns: dict[str, SetTransaction]
) -> TableHead:
    """``apply_table_actions``, recording ``txn`` actions into ``txns``."""
    if head is None and version != 0:
        raise CorruptLogError(f"{where}: replay must start at version 0 or a checkpoint")
    if head is not None and version != head.version + 1:
        raise CorruptLogError(f"{where}: expected version {head.version + 1}, found {version}")
    protocol = head.protocol if head else None
    metadata = head.metadata if head else None
    timestamp = None
    for a in actions:
        if isinstance(a, CommitInfo):
            timestamp = a.timestamp
        elif isinstance(a, Metadata):
            if metadata is not None and a.table_id != metadata.table_id:
                raise CorruptLogError(
                    f"{where}: the metadata changes the table id from {metadata.table_id} to {a.table_id}; "
                    f"a table's id is fixed at creation (SPEC §Log replay, rule 3)"
                )
            metadata = a
        elif isinstance(a, Protocol):
            protocol = a
            check_reader_protocol(a, where=where)
        elif isinstance(a, SetTransaction):
            txns[a.app_id] = a
    if protocol is None or metadata is None:
        raise CorruptLogError(f"{where}: no protocol/metadata by version {version}")
    if timestamp is None:
        raise CorruptLogError(f"{where}: entry has no commitInfo")
    if head is not None and timestamp <= head.timestamp:
        raise CorruptLogError(
            f"{where}: commit timestamp {timestamp} is not after version "
            f"{head.version}'s {head.timestamp} (SPEC §Commit timestamps)"
        )
    return TableHead(version, timestamp, protocol, metadata, txns)


def state_from_checkpoint(
    actions: list[Action], *, where: str, partitions: Iterable[Partition] = ()
) -> TableState:
    """Rebuild the state a checkpoint holds (SPEC §Checkpoints): its table-level
    ``actions`` and its live ``partitions`` (``add`` actions among ``actions``
    count too)."""
    header, head = _checkpoint_head(actions, where=where)
    live = {a.path: a.partition for a in actions if isinstance(a, AddPartition)}
    count = len(live)
    for p in partitions:
        live[p.path] = p
        count += 1
    if count != header.num_partitions:
        raise CorruptLogError(
            f"{where}: checkpoint says {header.num_partitions} partitions, holds {count}"
        )
    if len(live) != count:
        raise CorruptLogError(f"{where}: checkpoint lists {count - len(live)} partition paths more than once")
    return TableState(
        header.version, header.timestamp, head.protocol, head.metadata, live, header.next_row_id, head.app_transactions
    )


def head_from_checkpoint(actions: list[Action], *, where: str) -> TableHead:
    """The table-level state a checkpoint's table-level ``actions`` hold,
    its protocol checked (the partitions it lists are not read)."""
    return _checkpoint_head(actions, where=where)[1]


def _checkpoint_head(actions: list[Action], *, where: str) -> tuple[CheckpointHeader, TableHead]:
    header = next((a for a in actions if isinstance(a, CheckpointHeader)), None)
    protocol = next((a for a in actions if isinstance(a, Protocol)), None)
    metadata = next((a for a in actions if isinstance(a, Metadata)), None)
    if header is None or protocol is None or metadata is None:
        raise CorruptLogError(f"{where}: checkpoint lacks its checkpoint/protocol/metadata actions")
    check_reader_protocol(protocol, where=where)
    txns = {a.app_id: a for a in actions if isinstance(a, SetTransaction)}
    return header, TableHead(header.version, header.timestamp, protocol, metadata, txns)


def check_checkpoint_identity(
    head: TableHead, *, table_id: str | None, entry: list[Action] | None, where: str
) -> None:
    """Reject the checkpoint whose table-level state is ``head`` if it is not
    this table's (SPEC §Checkpoints, identity): ``table_id`` is the table's
    id from the entry of version 0 (rule 1; None when that entry is gone),
    ``entry`` the table-level actions of the entry of the checkpoint's own
    version (rule 2; None when not read or gone). With neither, the
    checkpoint is the oldest state there is and defines the table (rule 3).

    >>> from ctfile.format.schema import Field, Schema
    >>> md = Metadata("A", Schema((Field(1, "id", "long", False),)), 0)
    >>> head = TableHead(4, 1000, Protocol(), md)
    >>> check_checkpoint_identity(head, table_id="A", entry=None, where="cp")
    >>> check_checkpoint_identity(head, table_id="B", entry=None, where="cp")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.CorruptLogError: cp: the checkpoint is a state of table A, not of this table (B, the tableId of version 0): a copy from another table (SPEC §Checkpoints, identity)
    >>> check_checkpoint_identity(head, table_id=None, entry=[CommitInfo(999, "WRITE")], where="cp")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.CorruptLogError: cp: the checkpoint's commit timestamp 1000 is not that of the entry of version 4 (999): it is not this table's state of that version (SPEC §Checkpoints, identity)
    """
    found = head.metadata.table_id
    if table_id is not None:
        if found != table_id:
            raise CorruptLogError(
                f"{where}: the checkpoint is a state of table {found}, not of this table ({table_id}, the tableId "
                f"of version 0): a copy from another table (SPEC §Checkpoints, identity)"
            )
        return
    for a in entry or ():
        if isinstance(a, CommitInfo) and a.timestamp != head.timestamp:
            raise CorruptLogError(
                f"{where}: the checkpoint's commit timestamp {head.timestamp} is not that of the entry of version "
                f"{head.version} ({a.timestamp}): it is not this table's state of that version "
                f"(SPEC §Checkpoints, identity)"
            )
        if isinstance(a, Metadata) and a.table_id != found:
            raise CorruptLogError(
                f"{where}: the checkpoint is a state of table {found}, not of this table ({a.table_id}, the "
                f"tableId of the entry of version {head.version}) (SPEC §Checkpoints, identity)"
            )


def checkpoint_table_actions(state: TableState) -> list[Action]:
    """The table-level actions of the checkpoint of ``state``: header, protocol,
    metadata and one ``txn`` per application (SPEC §Checkpoints)."""
    out: list[Action] = [
        CheckpointHeader(state.version, state.timestamp, state.next_row_id, len(state.partitions)),
        state.protocol,
        state.metadata,
    ]
    out.extend(state.app_transactions.values())
    return out


def checkpoint_actions(state: TableState) -> list[Action]:
    """The state as one action list: the table-level actions, then an ``add``
    (``dataChange`` false) per live partition."""
    out = checkpoint_table_actions(state)
    out.extend(AddPartition(p, data_change=False) for p in state.partitions.values())
    return out
