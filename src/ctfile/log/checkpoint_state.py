"""The state a checkpoint holds (SPEC §Checkpoints): rebuilt from its
actions, checked to be this table's, and written back as actions. The
state itself, and the replay of the entries after a checkpoint, are
:mod:`ctfile.log.replay`'s.
"""

from __future__ import annotations

from typing import Iterable, TypeVar

from ctfile.format.actions import (
    Action,
    AddPartition,
    CheckpointHeader,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    SetTransaction,
)
from ctfile.format.errors import CorruptLogError
from ctfile.log.replay import TableHead, TableState, check_reader_protocol

_A = TypeVar("_A")


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
    header, protocol, metadata = (_first(actions, kind) for kind in (CheckpointHeader, Protocol, Metadata))
    if header is None or protocol is None or metadata is None:
        raise CorruptLogError(f"{where}: checkpoint lacks its checkpoint/protocol/metadata actions")
    check_reader_protocol(protocol, where=where)
    txns = {a.app_id: a for a in actions if isinstance(a, SetTransaction)}
    return header, TableHead(header.version, header.timestamp, protocol, metadata, txns)


def _first(actions: list[Action], kind: type[_A]) -> _A | None:
    """The first of ``actions`` of type ``kind``, or None."""
    return next((a for a in actions if isinstance(a, kind)), None)


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
