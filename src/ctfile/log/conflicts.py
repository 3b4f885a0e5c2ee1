"""What a transaction read, and whether a concurrent commit invalidates it
(SPEC §Conflict detection).

A :class:`ReadSet` is everything the statements of one transaction looked at:
the partitions they opened, the row predicates they selected rows with, and
whether they replace the whole table. :func:`find_conflict` checks one
*winner* (an entry committed after the transaction's read version) against
it and the partitions the transaction removes, rule by rule, and returns the
first :class:`Conflict`, or None when the transaction may be rebased on top
of the winner. :func:`replays_app_transaction` recognises a winner that
already committed the transaction's application batch (SPEC §txn).

Predicates are opaque here: this layer knows only the :class:`ReadPredicate`
protocol (describe yourself; may this partition hold a row you select?).
The writer layer implements it for a DML ``where`` and for a MERGE's keys,
with statistics pruning of all the winner's added partitions first and a
read of the predicate's columns of the survivors second
(``ctfile.writer.conflicts``).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Collection, Sequence

from ctfile.format.actions import (
    Action,
    AddPartition,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.errors import ConflictKind
from ctfile.format.properties import IsolationLevel
from ctfile.format.schema import Schema
from ctfile.log.storage import Storage


class ReadPredicate(typing.Protocol):
    """A statement's row selection, as conflict detection needs it."""

    def describe(self) -> str:
        """A short text for conflict messages (``"rows where (id == 1)"``)."""

    def first_match(self, storage: Storage, schema: Schema, partitions: Sequence[Partition]) -> Partition | None:
        """A partition of ``partitions`` that may hold a row this predicate
        selects, or None if none does.

        None only if every partition certainly holds none (SPEC §Conflict
        detection, rule 4: a conflict may be reported that cannot be ruled
        out, none may be missed)."""


@dataclass
class ReadSet:
    """What the statements of a transaction read (SPEC §Conflict detection).

    ``partitions``: paths of the partitions opened to look for matching rows,
    removed by a metadata-only delete, or rewritten by a compaction.
    ``predicates``: the row predicates of the statements that select rows.
    ``whole_table``: a statement replaces every row (TRUNCATE, OVERWRITE).
    """

    partitions: set[str] = field(default_factory=set)
    predicates: list[ReadPredicate] = field(default_factory=list)
    whole_table: bool = False

    def is_empty(self) -> bool:
        return not (self.partitions or self.predicates or self.whole_table)


@dataclass(frozen=True)
class Conflict:
    """The rule a winner broke, and why, in words for the error message."""

    kind: ConflictKind
    reason: str


def _commit_info(entry: Sequence[Action]) -> CommitInfo | None:
    return next((a for a in entry if isinstance(a, CommitInfo)), None)


def replays_app_transaction(app_txn: SetTransaction | None, entry: Sequence[Action]) -> bool:
    """True if ``entry`` committed ``app_txn``'s application at the same or a
    later batch: the transaction is then a replay and commits nothing."""
    if app_txn is None:
        return False
    return any(
        isinstance(a, SetTransaction) and a.app_id == app_txn.app_id and a.version >= app_txn.version
        for a in entry
    )


def find_conflict(
    reads: ReadSet,
    removed: Collection[str],
    entry: Sequence[Action],
    *,
    level: IsolationLevel,
    storage: Storage,
    schema: Schema,
) -> Conflict | None:
    """The first rule of SPEC §Conflict detection that the winner ``entry``
    breaks for a transaction with these ``reads`` and ``removed`` paths, or
    None if the transaction can be rebased on top of it.

    The cheap rules (1-3, the log alone) are checked before rule 4, which may
    read the winner's added partitions.
    """
    found = _metadata_conflict(entry)
    if found is not None:
        return found
    found, added = _partition_conflict(reads, removed, entry)
    if found is not None or not (added and reads.predicates):
        return found
    if _ordered_after(entry, level):
        return None  # ordered after this transaction (SPEC §Conflict detection)
    return _predicate_conflict(reads, added, storage=storage, schema=schema)


def _metadata_conflict(entry: Sequence[Action]) -> Conflict | None:
    """Rule 1: the winner changed the metadata or the protocol."""
    if any(isinstance(a, (Metadata, Protocol)) for a in entry):
        return Conflict(ConflictKind.METADATA, "changed the table's schema, properties or protocol")
    return None


def _partition_conflict(
    reads: ReadSet, removed: Collection[str], entry: Sequence[Action]
) -> tuple[Conflict | None, list[Partition]]:
    """Rules 2 and 3, in the winner's action order: the first of its
    removes and adds that conflicts, and the partitions it added with a
    data change (rule 4 reads them)."""
    added: list[Partition] = []
    for a in entry:
        if isinstance(a, RemovePartition):
            found = _remove_conflict(a, reads, removed)
        elif isinstance(a, AddPartition) and a.data_change:
            found = _add_conflict(a, reads)
            added.append(a.partition)
        else:
            continue
        if found is not None:
            return found, added
    return None, added


def _remove_conflict(a: RemovePartition, reads: ReadSet, removed: Collection[str]) -> Conflict | None:
    """Rule 2: the winner removed a partition this transaction removes, or changed the rows of one it read."""
    if a.path in removed:
        return Conflict(ConflictKind.REMOVED_READ, f"removed partition {a.path}, which this transaction removes")
    if a.data_change and a.path in reads.partitions:
        return Conflict(ConflictKind.REMOVED_READ, f"changed the rows of partition {a.path}, which this transaction read")
    return None


def _add_conflict(a: AddPartition, reads: ReadSet) -> Conflict | None:
    """Rule 3: the winner added rows to a table this transaction replaces whole."""
    if reads.whole_table:
        return Conflict(ConflictKind.WHOLE_TABLE, f"added rows ({a.path}) to the table this transaction replaces")
    return None


def _ordered_after(entry: Sequence[Action], level: IsolationLevel) -> bool:
    """Under WriteSerializable a blind append is ordered after this transaction: no rule 4."""
    if level is not IsolationLevel.WRITE_SERIALIZABLE:
        return False
    info = _commit_info(entry)
    return info is not None and info.is_blind_append is True


def _predicate_conflict(reads: ReadSet, added: list[Partition], *, storage: Storage, schema: Schema) -> Conflict | None:
    """Rule 4: the first added partition with rows a predicate this transaction read selects."""
    for pred in reads.predicates:
        p = pred.first_match(storage, schema, added)
        if p is not None:
            return Conflict(
                ConflictKind.READ_PREDICATE,
                f"added partition {p.path} with rows this transaction selects ({pred.describe()})",
            )
    return None
