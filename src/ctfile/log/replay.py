"""Log replay: the table state at a version (SPEC §Log replay).

A :class:`TableState` is what a reader needs to serve a snapshot: protocol,
metadata, the live partitions, the row-id counter and the commit timestamp.
A :class:`TableHead` is its table-level part, all that a change scan or the
table's schema needs.

:func:`fold_entry` is the one statement of the replay rules: it folds one
log entry into a state, strictly (a broken rule raises
:class:`~ctfile.format.errors.CorruptLogError`, as readers and writers need)
or collecting every broken rule as a :class:`ReplayProblem` (what ``ctfile
verify`` reports). :func:`roll_forward` folds a run of entries strictly,
copying the state's maps once; it is the roll-forward of ``Table.refresh``,
of a transaction that lost a race and of :class:`~ctfile.log.manifest.ManifestLog`.
:func:`roll_forward_head` does the same for a :class:`TableHead`, with the
same rules, and never sees a partition. :func:`apply_entry` is the
one-entry form of :func:`roll_forward`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable

from ctfile.format.actions import (
    FEATURE_ENTRY_CHECKSUMS,
    SUPPORTED_READER_FEATURES,
    SUPPORTED_WRITER_FEATURES,
    READER_VERSION,
    WRITER_VERSION,
    Action,
    AddPartition,
    CommitInfo,
    Metadata,
    Partition,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.entries import duplicate_paths, repeated_actions
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


class ReplayMode(Enum):
    """What a fold does with an entry that breaks a rule (SPEC §Log replay)."""

    #: Raise :class:`~ctfile.format.errors.CorruptLogError` naming the first
    #: broken rule, as every reader does.
    STRICT = "strict"
    #: Record each broken rule as a :class:`ReplayProblem` and go on, as
    #: ``ctfile verify`` does; it also checks the rules readers leave to the
    #: decoding of an entry (SPEC §Log entries) and row lineage.
    COLLECT = "collect"


@dataclass(frozen=True)
class ReplayProblem:
    """A rule an entry breaks, as ``ctfile verify`` reports it."""

    check: str  #: the verify check: ``log`` (SPEC §Log entries), ``replay`` or ``row_lineage``
    message: str
    path: str | None = None  #: the partition concerned; None: the entry
    warning: bool = False  #: a warning rather than a problem


@dataclass
class Folded:
    """One entry folded into a state: the new state (None when the entry
    could not be applied: no protocol or metadata by version 0, collecting)
    and, collecting, the partitions it added, the paths it removed and the
    rules it broke (strict folds leave them empty: their callers want the
    state alone)."""

    state: TableState | None
    added: list[Partition] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    problems: list[ReplayProblem] = field(default_factory=list)


def fold_entry(
    state: TableState | None, version: int, actions: list[Action], *, where: str,
    mode: ReplayMode = ReplayMode.STRICT, owned: bool = False,
) -> Folded:
    """Fold the log entry of ``version`` into ``state`` (None before version
    0): the one statement of the rules of SPEC §Log replay, which
    :func:`roll_forward` applies for readers and writers (strict) and
    ``ctfile verify`` for its report (collecting).

    Strict, ``actions`` are an entry that passed
    :func:`~ctfile.format.entries.validate_commit_entry` (as every entry
    :meth:`ManifestLog.read_entry <ctfile.log.manifest.ManifestLog.read_entry>`
    returns does) or that a writer built; the rules of SPEC §Log entries
    are not checked again. ``owned``: the maps of ``state`` may be updated
    in place (no one holds that state any more).

    Raises
    ------
    CorruptLogError
        Strict, naming ``where`` and the first broken rule.
    UnsupportedFeatureError
        In both modes, for a protocol this ctfile cannot read.

    Examples
    --------
    >>> from ctfile.format.schema import Field, Schema
    >>> md = Metadata("A", Schema((Field(1, "id", "long", False),)), 0)
    >>> s0 = fold_entry(None, 0, [CommitInfo(5, "CREATE"), Protocol(), md], where="v0").state
    >>> found = fold_entry(s0, 1, [CommitInfo(5, "WRITE")], where="v1", mode=ReplayMode.COLLECT)
    >>> [(p.check, p.message) for p in found.problems if not p.warning]
    [('replay', "commit timestamp 5 is not after version 0's 5")]
    >>> fold_entry(s0, 1, [CommitInfo(5, "WRITE")], where="v1")
    Traceback (most recent call last):
    ...
    ctfile.format.errors.CorruptLogError: v1: commit timestamp 5 is not after version 0's 5 (SPEC §Commit timestamps)
    """
    fold = _Fold(version, where, mode)
    state = _fold_state(state, _EntryActions(actions), fold, owned=owned)
    return Folded(state, fold.added, fold.removed, fold.problems)


def apply_entry(
    state: TableState | None, version: int, actions: list[Action], *, where: str
) -> TableState:
    """Fold the log entry of ``version`` into ``state`` (None before version 0),
    strictly (:func:`fold_entry`): the result does not depend on the order of
    ``actions``; ``nextRowId`` is the maximum over the adds (SPEC §Log replay).
    """
    return _strict_state(state, version, actions, where=where, owned=False)


def roll_forward(
    start: TableState | None, entries: Iterable[tuple[int, list[Action]]], *, where: Callable[[int], str]
) -> TableState | None:
    """The table state after folding ``entries`` (``(version, actions)``
    pairs, in version order) into ``start``, strictly: the one roll-forward
    of :meth:`Table.refresh <ctfile.table.table.Table.refresh>`, the
    transactions and :class:`~ctfile.log.manifest.ManifestLog`. The
    partition map is copied once rather than once per entry (replaying 99
    entries onto 10,000 live partitions would otherwise copy 990,000 items);
    ``start`` is never changed. ``where(version)`` names each entry in
    error messages."""
    state, owned = start, False  # the maps of `start` may be shared; those of states built here are not
    for version, actions in entries:
        state = _strict_state(state, version, actions, where=where(version), owned=owned)
        owned = True
    return state


def roll_forward_head(
    start: TableHead | None, entries: Iterable[tuple[int, list[Action]]], *, where: Callable[[int], str]
) -> TableHead | None:
    """:func:`roll_forward` of the table-level state alone: the same rules
    on the protocol (checked, as a reader must), the metadata, ``txn`` and
    the commit timestamp. Partition actions among the actions are ignored,
    so they may be left undecoded
    (:func:`~ctfile.format.entries.decode_table_actions`)."""
    head, txns = start, None
    for version, actions in entries:
        if txns is None:
            txns = {} if head is None else dict(head.app_transactions)
        head = _fold_head(head, _EntryActions(actions), _Fold(version, where(version), ReplayMode.STRICT), txns)
    return head


def _strict_state(
    state: TableState | None, version: int, actions: list[Action], *, where: str, owned: bool
) -> TableState:
    folded = _fold_state(state, _EntryActions(actions), _Fold(version, where, ReplayMode.STRICT), owned=owned)
    assert folded is not None  # strict: an entry that cannot be applied raised
    return folded


def _fold_state(state: TableState | None, entry: _EntryActions, fold: _Fold, *, owned: bool) -> TableState | None:
    """:func:`fold_entry`, the partitions added and removed and the problems
    found (collecting) left in ``fold``."""
    if state is None:
        partitions, txns, next_row_id = {}, {}, 0
    elif owned:
        partitions, txns, next_row_id = state.partitions, state.app_transactions, state.next_row_id
    else:
        partitions, txns = dict(state.partitions), dict(state.app_transactions)
        next_row_id = state.next_row_id
    head = _fold_head(None if state is None else state.head, entry, fold, txns)
    if head is None:
        return None
    next_row_id = _fold_partitions(partitions, next_row_id, entry, fold)
    return TableState(fold.version, head.timestamp, head.protocol, head.metadata, partitions, next_row_id, txns)


class _Fold:
    """The fold of one entry: its version, how to name it, and what a
    broken rule does (:class:`ReplayMode`)."""

    __slots__ = ("version", "where", "collecting", "problems", "added", "removed")

    def __init__(self, version: int, where: str, mode: ReplayMode):
        self.version = version
        self.where = where
        self.collecting = mode is ReplayMode.COLLECT
        self.problems: list[ReplayProblem] = []
        #: What the entry added and removed, kept when collecting (strict
        #: callers want the state alone).
        self.added: list[Partition] = []
        self.removed: list[str] = []

    def broken(self, error: str, check: str, message: str, path: str | None = None) -> None:
        """A broken rule: raised as ``error`` (strict), recorded as the verify
        ``check``'s ``message`` (collecting)."""
        if not self.collecting:
            raise CorruptLogError(f"{self.where}: {error}")
        self.problems.append(ReplayProblem(check, message, path))

    def found(self, check: str, message: str, path: str | None = None, *, warning: bool = False) -> None:
        """A broken rule only collecting checks (strict callers pass entries
        already held to it, or no reader enforces it)."""
        self.problems.append(ReplayProblem(check, message, path, warning))


class _EntryActions:
    """The actions of an entry by kind, sorted in one pass. Of a repeated
    protocol or metadata (SPEC §Log entries, rule 7, which strict callers
    have checked) the first counts; of ``txn`` the last per ``appId``."""

    __slots__ = ("actions", "infos", "protocol", "metadata", "txns", "adds", "removes")

    def __init__(self, actions: list[Action]):
        self.actions = actions
        self.infos: list[CommitInfo] = []
        self.protocol: Protocol | None = None
        self.metadata: Metadata | None = None
        self.txns: list[SetTransaction] = []
        self.adds: list[Partition] = []
        self.removes: list[str] = []
        for a in actions:  # partition actions first: an entry may hold thousands
            kind = type(a)
            if kind is AddPartition:
                self.adds.append(a.partition)  # type: ignore[union-attr]
            elif kind is RemovePartition:
                self.removes.append(a.path)  # type: ignore[union-attr]
            else:
                self._table_action(a, kind)

    def _table_action(self, a: Action, kind: type) -> None:
        if kind is CommitInfo:
            self.infos.append(a)  # type: ignore[arg-type]
        elif kind is SetTransaction:
            self.txns.append(a)  # type: ignore[arg-type]
        elif kind is Protocol and self.protocol is None:
            self.protocol = a  # type: ignore[assignment]
        elif kind is Metadata and self.metadata is None:
            self.metadata = a  # type: ignore[assignment]


def _fold_head(
    head: TableHead | None, entry: _EntryActions, fold: _Fold, txns: dict[str, SetTransaction]
) -> TableHead | None:
    """The table-level rules of SPEC §Log replay (2, 3, 6, 7) on ``entry``
    applied to ``head``, ``txn`` actions recorded into ``txns``; None
    (collecting) when there is no protocol or metadata to apply it to."""
    _check_sequence(head, fold)
    _check_commit_info(entry, fold)
    replaced = _protocol_and_metadata(head, entry, fold)
    if replaced is None:
        return None
    protocol, metadata = replaced
    if fold.collecting:
        _check_entry_checksums(entry, protocol, fold)
    timestamp = _timestamp(head, entry)
    _check_timestamp(head, timestamp, fold)
    for t in entry.txns:
        txns[t.app_id] = t
    return TableHead(fold.version, timestamp, protocol, metadata, txns)


def _protocol_and_metadata(
    head: TableHead | None, entry: _EntryActions, fold: _Fold
) -> tuple[Protocol, Metadata] | None:
    """The protocol and metadata after ``entry`` (SPEC §Log replay, rules 2
    and 3); None (collecting) when version 0 does not set both."""
    protocol = entry.protocol or (head.protocol if head else None)
    metadata = entry.metadata or (head.metadata if head else None)
    if protocol is None or metadata is None:
        fold.broken(
            f"no protocol/metadata by version {fold.version}", "log",
            "version 0 must contain protocol and metadata actions",
        )
        return None
    _check_table_id(head, entry.metadata, fold)
    if entry.protocol is not None:
        check_reader_protocol(entry.protocol, where=fold.where)  # raises in both modes: nothing can be read
    return protocol, metadata


def _check_sequence(head: TableHead | None, fold: _Fold) -> None:
    """Entries are folded in version order, from version 0 or a checkpoint."""
    if head is None and fold.version != 0:
        raise CorruptLogError(f"{fold.where}: replay must start at version 0 or a checkpoint")
    if head is not None and fold.version != head.version + 1:
        raise CorruptLogError(f"{fold.where}: expected version {head.version + 1}, found {fold.version}")


def _check_commit_info(entry: _EntryActions, fold: _Fold) -> None:
    """SPEC §Log entries, rule 1: exactly one ``commitInfo``."""
    found = len(entry.infos)
    if found != 1:
        expected = f"expected exactly one commitInfo, found {found}"
        fold.broken("entry has no commitInfo" if found == 0 else expected, "log", expected)


def _check_table_id(head: TableHead | None, metadata: Metadata | None, fold: _Fold) -> None:
    """SPEC §Log replay, rule 3: a metadata action keeps the table's id."""
    if head is None or metadata is None or metadata.table_id == head.metadata.table_id:
        return
    old, new = head.metadata.table_id, metadata.table_id
    fold.broken(
        f"the metadata changes the table id from {old} to {new}; "
        f"a table's id is fixed at creation (SPEC §Log replay, rule 3)",
        "replay", f"the metadata changes the table id from {old} to {new} (SPEC §Log replay, rule 3)",
    )


def _check_timestamp(head: TableHead | None, timestamp: int, fold: _Fold) -> None:
    """SPEC §Log replay, rule 7 (§Commit timestamps): commit timestamps increase."""
    if head is not None and timestamp <= head.timestamp:
        text = f"commit timestamp {timestamp} is not after version {head.version}'s {head.timestamp}"
        fold.broken(f"{text} (SPEC §Commit timestamps)", "replay", text)


def _timestamp(head: TableHead | None, entry: _EntryActions) -> int:
    """The entry's commit timestamp; without a ``commitInfo`` (reported,
    collecting) one after the previous so that replay can go on."""
    if entry.infos:
        return entry.infos[0].timestamp
    return head.timestamp + 1 if head else 0


def _check_entry_checksums(entry: _EntryActions, protocol: Protocol, fold: _Fold) -> None:
    """SPEC §Log entries: under ``entryChecksums`` a ``commitInfo`` records
    what lets a reader check the entry for damage."""
    if len(entry.infos) != 1 or FEATURE_ENTRY_CHECKSUMS not in protocol.writer_features:
        return
    info = entry.infos[0]
    if info.num_actions is None and info.actions_checksum is None:
        fold.found(
            "log", f"the commitInfo records no numActions/actionsChecksum although the table's protocol "
            f"lists {FEATURE_ENTRY_CHECKSUMS}: the entry cannot be checked for damage", warning=True,
        )


def _fold_partitions(partitions: dict[str, Partition], next_row_id: int, entry: _EntryActions, fold: _Fold) -> int:
    """SPEC §Log replay, rules 4 and 5 on ``partitions`` (updated in place),
    the removes first (the same state as file order, since no path is named
    twice). Returns ``nextRowId``, the maximum over the adds whatever their
    order."""
    if fold.collecting:
        _check_entry_rules(entry, fold)
        fold.added = entry.adds
    for path in entry.removes:
        if partitions.pop(path, None) is None:
            fold.broken(f"remove of {path}, which is not live", "replay", "remove of a partition that is not live", path)
        elif fold.collecting:
            fold.removed.append(path)
    counter = next_row_id  # ids below it are taken
    for p in entry.adds:
        if fold.collecting:
            counter = _check_lineage(p, counter, next_row_id, fold)
        if p.path in partitions:
            fold.broken(f"add of {p.path}, which is already live", "replay", "add of a partition that is already live", p.path)
        partitions[p.path] = p
        next_row_id = max(next_row_id, p.first_row_id + p.num_records)
    return next_row_id


def _check_entry_rules(entry: _EntryActions, fold: _Fold) -> None:
    """SPEC §Log entries, rules 4 and 7, whatever the order of the actions
    (strict callers pass entries :func:`~ctfile.format.entries.validate_commit_entry`
    checked)."""
    for dup in duplicate_paths(entry.actions):
        fold.found("log", "the path is named by more than one add/remove of the entry", dup)
    for what in repeated_actions(entry.actions):
        fold.found("log", f"the entry holds more than one {what}")


def _check_lineage(p: Partition, counter: int, next_row_id: int, fold: _Fold) -> int:
    """The lineage an ``add`` gives its partition (SPEC §Row lineage,
    §Restore), against ``counter``, the ids already taken before it, and
    ``next_row_id``, the counter before the entry; returns the new counter."""
    if p.default_row_version != fold.version:
        fold.found("log", f"add has defaultRowVersion {p.default_row_version}, expected {fold.version}", p.path)
    end = p.first_row_id + p.num_records
    if p.is_restored:  # SPEC §Restore: a re-add keeps the ids it had, all assigned before
        if end > next_row_id:
            fold.found(
                "row_lineage", f"re-add has row ids up to {end - 1}, but only ids "
                f"below {next_row_id} were ever assigned (SPEC §Restore)", p.path,
            )
        return counter
    if p.first_row_id < counter and p.num_records:
        fold.found(
            "row_lineage", f"add has firstRowId {p.first_row_id}, but ids below {counter} are already "
            "assigned (SPEC §Row lineage: firstRowId comes from the table's row-id counter)", p.path,
        )
    return max(counter, end)
