"""Planning a change scan from the log entries of its interval (SPEC §Change scans).

A change scan over versions ``a..b`` (both inclusive) describes the
difference between the snapshots at ``a - 1`` and ``b``. Because a ``remove``
action carries the whole partition descriptor, the plan needs only the log
entries ``a..b``: never a snapshot of ``a - 1``, never a data file.

From those entries the planner derives

* the **net added** partitions: added in the interval, still live at ``b``;
* the **net removed** partitions: live at ``a - 1``, removed in the interval;
* the **appended** partitions: every partition a data-changing commit added in
  the interval but a re-added one (the only ones an append-only scan reads:
  a RESTORE inserts no row, SPEC §Restore).

Partitions added and later removed inside the interval are in neither net
set, so the default mode never reads them. A ``dataChange: false`` commit
(compaction) whose inputs are all net removed and whose outputs are all net
added rewrote rows without changing them: both sides are dropped unread.

A :class:`ChangePlan` (built by :func:`plan_changes` from a
:class:`~ctfile.reader.change_spec.ChangeScan`) is what the scan reads:
the :class:`InitialRows` snapshot, if the scan asks for initial rows, then a
sequence of segments in version order. Each segment covers versions of the
interval and says how their rows are found: a :class:`PartitionDelta` (the
net sets of its versions, or of one commit for ``audit`` and
``append_only``), or a :class:`~ctfile.reader.captured.CapturedCommit`
(one captured commit, read from its change files, its inserted rows and its
``deletesAllRows`` partitions; SPEC §Change scans, "Using change files").

Captured segments are planned only for ``default`` and ``audit`` scans whose
interval has a commit with a ``change`` action (plan shapes CAPTURED and
MIXED); any other interval keeps the partition-based plan, since a commit
without change files reads the same partitions either way.

A segment whose versions hold a RESTORE that re-added a partition (SPEC
§Restore) matches the rows of its two sides by row id and row version
(:attr:`PartitionDelta.match_versions`): its re-added rows keep older row
versions, so a row version below the segment's start no longer marks an
unchanged copy (SPEC §Change scans, ``default``).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Sequence

from ctfile.format.actions import AddPartition, ChangeFile, CommitInfo, Partition, RemovePartition
from ctfile.format.change_modes import ChangeMode
from ctfile.format.schema import ROW_VERSION_FIELD_ID
from ctfile.log.manifest import ManifestLog
from ctfile.log.replay import TableState
from ctfile.reader.captured import CapturedCommit, captured_commit
from ctfile.reader.change_interval import read_interval, resolve_interval  # noqa: F401 (resolve_interval: its old home)
from ctfile.reader.change_spec import ChangeScan


class PlanShape(str, enum.Enum):
    """How a change scan is computed (Snowflake's plan shapes, section 3.2.3)."""

    EMPTY = "EMPTY"
    ADDED_ONLY = "ADDED_ONLY"
    REMOVED_ONLY = "REMOVED_ONLY"
    MINIMIZE = "MINIMIZE"
    INITIAL_ROWS = "INITIAL_ROWS"
    CAPTURED = "CAPTURED"  # every data-changing commit captured: change files, fresh rows, deletesAllRows
    MIXED = "MIXED"  # some captured: the runs of the others from partitions

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CommitChanges:
    """The data-changing adds and removes of one commit, and what it is made
    of when it is captured (SPEC §Change capture)."""

    version: int
    timestamp: int
    added: tuple[Partition, ...]
    removed: tuple[Partition, ...]
    captured: CapturedCommit | None = None

    @property
    def change_files(self) -> tuple[ChangeFile, ...]:
        return self.captured.change_files if self.captured is not None else ()

    @property
    def restores(self) -> bool:
        """Whether the commit re-added a partition (a RESTORE, SPEC §Restore)."""
        return any(p.is_restored for p in self.added)

    @property
    def inserted(self) -> tuple[Partition, ...]:
        """The partitions whose fresh rows the commit inserted: its adds but
        the re-added ones."""
        return tuple(p for p in self.added if not p.is_restored)


@dataclass(frozen=True)
class PartitionDelta:
    """A segment of a plan: the changes of versions ``start_version..end_version``
    computed from partitions the log added and removed there (SPEC §Change scans).

    ``default`` reads the minimum delta of ``added`` against ``removed`` (the
    net sets of its versions), ``audit`` the same for one commit (then
    ``timestamp`` is that commit's), ``append_only`` the rows ``added``
    partitions inserted (``removed`` is empty). ``match_versions``: the
    versions hold a re-add, so the minimum delta tells unchanged rows by
    row id and row version, not by a row version below ``start_version``.
    """

    start_version: int
    end_version: int
    added: tuple[Partition, ...] = ()
    removed: tuple[Partition, ...] = ()
    timestamp: int | None = None
    match_versions: bool = False

    @classmethod
    def of_commit(cls, c: CommitChanges) -> "PartitionDelta":
        """The segment of commit ``c`` alone."""
        return cls(c.version, c.version, c.added, c.removed, c.timestamp, match_versions=c.restores)

    @classmethod
    def appended_by(cls, c: CommitChanges) -> "PartitionDelta":
        """The ``append_only`` segment of commit ``c``: its partitions whose
        fresh rows it inserted."""
        return cls(c.version, c.version, c.inserted, (), c.timestamp)

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return self.added + self.removed

    @property
    def num_records(self) -> int:
        """Rows a scan of this segment reads at most (its partitions' rows)."""
        return sum(p.num_records for p in self.partitions)


    def merged(self, other: "PartitionDelta") -> "PartitionDelta":
        """This segment's partitions and ``other``'s (two parts of one segment)."""
        return dataclasses.replace(self, added=self.added + other.added, removed=self.removed + other.removed)


# The kinds of segment a plan holds, in version order.
Segment = PartitionDelta | CapturedCommit


@dataclass(frozen=True)
class InitialRows:
    """The snapshot whose rows a scan with initial rows puts first, as INSERTs."""

    version: int
    timestamp: int
    partitions: tuple[Partition, ...]

    @classmethod
    def of_state(cls, state: TableState) -> "InitialRows":
        return cls(state.version, state.timestamp, tuple(state.partitions.values()))


@dataclass(frozen=True)
class ChangePlan:
    """What a change scan reads: the ``initial`` rows (if any), then its
    ``segments`` in order. Built by :func:`plan_changes` from the log alone.

    ``added``, ``removed`` and ``commits`` summarise the interval whatever the
    mode (what ``ctfile diff`` shows): its net added and net removed
    partitions and its data-changing commits. A scan with initial rows in
    ``default`` mode reads no interval, and its summary is empty.
    """

    shape: PlanShape
    segments: tuple[Segment, ...] = ()
    initial: InitialRows | None = None
    added: tuple[Partition, ...] = ()
    removed: tuple[Partition, ...] = ()
    commits: tuple[CommitChanges, ...] = field(default=())
    #: SPEC §Append-only tables: a ``default`` scan of an append-only
    #: interval, read as an ``append_only`` scan (one segment per commit
    #: that added partitions, of their fresh rows).
    fresh_rows: bool = False

    @property
    def reads_fresh_rows(self) -> bool:
        """Whether the scan reads only the fresh rows of the partitions its
        segments added (an ``append_only`` scan's reading, also that of a
        ``default`` scan of an append-only interval)."""
        return self.fresh_rows

    @property
    def appended(self) -> tuple[Partition, ...]:
        """Every partition a data-changing commit of the interval added, but
        the re-added ones: the partitions whose fresh rows an ``append_only``
        scan reads."""
        return tuple(p for c in self.commits for p in c.inserted)

    @property
    def consolidates(self) -> bool:
        """Whether a ``default`` scan of this plan consolidates the events of
        its segments (SPEC §Change scans, "Using change files") rather than
        reading one partition-based minimum delta."""
        return self.shape in (PlanShape.CAPTURED, PlanShape.MIXED)

    def partitions_to_read(self) -> list[Partition]:
        """The partitions the scan reads, each once (for ``ctfile diff`` and
        tests): never one that a captured commit rewrote."""
        seen: dict[str, Partition] = {}
        for p in self.initial.partitions if self.initial is not None else ():
            seen.setdefault(p.path, p)
        for s in self.segments:
            for p in s.partitions:
                seen.setdefault(p.path, p)
        return list(seen.values())

    def change_files_to_read(self) -> list[ChangeFile]:
        """The change files the scan reads (of its captured segments)."""
        return [f for s in self.segments if isinstance(s, CapturedCommit) for f in s.change_files]

    @property
    def rows_to_read(self) -> int:
        """Rows the scan reads at most, from the log alone: its initial
        snapshot's, each partition segment's partitions', each captured
        commit's change files', fresh rows' and ``deletesAllRows``
        partitions' (a partition whose statistics do not count its fresh
        rows counted whole). An engine chooses by it where to run the scan."""
        initial = sum(p.num_records for p in self.initial.partitions) if self.initial is not None else 0
        return initial + sum(s.num_records for s in self.segments)

    @property
    def bytes_to_read(self) -> int:
        """Bytes of the partitions and change files the scan reads."""
        return sum(p.size_bytes for p in self.partitions_to_read()) + sum(
            f.size_bytes for f in self.change_files_to_read()
        )

    def restricted(self, segments: Sequence[Segment], initial: InitialRows | None) -> "ChangePlan":
        """This plan reduced to ``segments`` and ``initial`` (a part of it, for
        one task). The summary keeps what those segments read: the net sets'
        partitions they read, and of each commit the partitions read by the
        segments covering that commit's version (and its captured part)."""
        read = _paths_read(segments)
        commits = []
        for c in self.commits:
            part = _commit_part(c, segments)
            if part.added or part.removed or part.change_files:
                commits.append(part)
        shape = self.shape if segments or self.shape is PlanShape.INITIAL_ROWS else PlanShape.EMPTY
        return ChangePlan(
            shape, tuple(segments), initial, _keep(self.added, read), _keep(self.removed, read), tuple(commits),
            fresh_rows=self.fresh_rows,
        )


def _paths_read(segments: Sequence[Segment]) -> set[str]:
    """The paths of the partitions ``segments`` read."""
    return {p.path for s in segments for p in s.partitions}


def _keep(parts: tuple[Partition, ...], paths: set[str]) -> tuple[Partition, ...]:
    """The partitions of ``parts`` at ``paths``, in order."""
    return tuple(p for p in parts if p.path in paths)


def _covering(segments: Sequence[Segment], version: int) -> list[Segment]:
    """The segments whose versions include ``version``."""
    return [s for s in segments if s.start_version <= version <= s.end_version]


def _commit_part(c: CommitChanges, segments: Sequence[Segment]) -> CommitChanges:
    """What ``segments`` (a part of a plan) read of commit ``c``: the
    partitions read by the segments covering its version, and its captured
    part (of a captured commit read from partitions here: the partitions
    this part reads of what makes it captured)."""
    covering = _covering(segments, c.version)
    paths = _paths_read(covering)
    captured = next((s for s in covering if isinstance(s, CapturedCommit)), None)
    if captured is None and c.captured is not None:
        captured = dataclasses.replace(
            c.captured, change_files=(), inserted=_keep(c.captured.inserted, paths),
            deleted=_keep(c.captured.deleted, paths),
        )
    return CommitChanges(c.version, c.timestamp, _keep(c.added, paths), _keep(c.removed, paths), captured)


def may_hold_rows_written_since(p: Partition, a: int) -> bool:
    """Whether partition ``p`` may hold a row whose row version is >= ``a``,
    judged from its ``_ct_row_version`` statistics alone (SPEC §Statistics:
    hidden columns carry stored-value stats; a null inherits
    ``defaultRowVersion``)."""
    s = p.stats
    if s is None:
        return True
    nulls = s.null_count.get(ROW_VERSION_FIELD_ID)
    if nulls is None:
        return True
    if nulls > 0 and p.inherited_row_version >= a:
        return True
    hi = s.max_values.get(ROW_VERSION_FIELD_ID)
    if nulls < p.num_records and (hi is None or hi >= a):
        return True
    return False


def plan_changes(log: ManifestLog, scan: ChangeScan, *, latest: int, use_change_files: bool = True) -> ChangePlan:
    """The plan of ``scan`` from the log entries of its interval (and, with
    initial rows, the snapshot at ``scan.initial_version``).

    ``use_change_files=False`` plans from partitions alone, as if no commit
    were captured (the result is the same, SPEC §Change capture; tests and
    benchmarks compare the two).

    With initial rows in ``default`` mode the snapshot at the end of the
    interval as INSERTs is the whole result: the interval's entries are not
    read (so retention that removed them does not matter).
    """
    initial = None
    if scan.initial_version is not None:
        initial = InitialRows.of_state(log.load_state(scan.initial_version, latest=latest))
    if scan.initial_rows and scan.mode is ChangeMode.DEFAULT:
        return ChangePlan(PlanShape.INITIAL_ROWS, initial=initial)
    a, b = scan.start_version, scan.end_version
    entries = list(zip(range(a, b + 1), read_interval(log, a, b)))
    added, removed, commits = net_changes(entries)
    if not use_change_files:
        commits = tuple(dataclasses.replace(c, captured=None) for c in commits)
    if scan.mode is ChangeMode.DEFAULT and is_append_only_interval(commits):
        # SPEC §Append-only tables: the interval's change is the fresh rows its commits inserted.
        return ChangePlan(_shape(ChangeMode.APPEND_ONLY, a, added, removed, commits),
                          _segments(ChangeMode.APPEND_ONLY, a, b, added, removed, commits), initial, added, removed,
                          commits, fresh_rows=True)
    shape = _shape(scan.mode, a, added, removed, commits)
    if shape is PlanShape.EMPTY:
        segments: tuple[Segment, ...] = ()
    elif shape in (PlanShape.CAPTURED, PlanShape.MIXED):
        segments = _captured_segments(scan.mode, entries, commits)
    else:
        segments = _segments(scan.mode, a, b, added, removed, commits)
    return ChangePlan(shape, segments, initial, added, removed, commits, fresh_rows=scan.mode is ChangeMode.APPEND_ONLY)


def is_append_only_interval(commits: Sequence[CommitChanges]) -> bool:
    """Whether the data-changing ``commits`` of an interval make it an
    append-only interval (SPEC §Append-only tables): some commit, and none
    that removed a partition, re-added one or wrote change files. Decided
    from the commits, whatever ``ctfile.appendOnly`` says: a table that
    set it has such intervals from the commit after the one that set it.

    >>> p = Partition("data/a.parquet", 10, 2, 0, 1, 0, None, None)
    >>> is_append_only_interval([CommitChanges(1, 0, (p,), ())]), is_append_only_interval([CommitChanges(1, 0, (p,), (p,))])
    (True, False)
    >>> is_append_only_interval([])
    False
    """
    return bool(commits) and all(
        not c.removed and not c.restores and not c.change_files for c in commits
    )


def interval_changes(
    log: ManifestLog, a: int, b: int
) -> tuple[tuple[Partition, ...], tuple[Partition, ...], tuple[CommitChanges, ...]]:
    """The net added partitions, net removed partitions and data-changing
    commits of versions ``a..b`` (see the module docstring); all empty when
    no commit of the interval changed data."""
    return net_changes(list(zip(range(a, b + 1), read_interval(log, a, b))))


def net_changes(
    entries: Sequence[tuple[int, list]],
) -> tuple[tuple[Partition, ...], tuple[Partition, ...], tuple[CommitChanges, ...]]:
    """:func:`interval_changes` of the ``(version, actions)`` entries of
    consecutive versions."""
    net = _NetSets()
    commits: list[CommitChanges] = []
    compactions: list[_Compaction] = []
    for v, entry in entries:
        adds, rems = _partition_actions(entry)
        net.apply(adds, rems)
        commit = _data_commit(v, entry, adds, rems)
        if commit is not None:
            commits.append(commit)
        compaction = _Compaction.of(adds, rems)
        if compaction.moves_files:
            compactions.append(compaction)
    if not commits:
        return (), (), ()
    for compaction in compactions:
        net.drop_if_unchanged(compaction)
    return _holding_rows(net.added), _holding_rows(net.removed), tuple(commits)


def _partition_actions(entry: list) -> tuple[list[AddPartition], list[RemovePartition]]:
    """The ``add`` and the ``remove`` actions of ``entry``, each in log order."""
    return [x for x in entry if isinstance(x, AddPartition)], [x for x in entry if isinstance(x, RemovePartition)]


def _data_commit(
    v: int, entry: list, adds: Sequence[AddPartition], rems: Sequence[RemovePartition],
) -> CommitChanges | None:
    """The data change of version ``v`` (its ``entry``, whose partition
    actions are ``adds`` and ``rems``), or None if it changed no data."""
    info = next(x for x in entry if isinstance(x, CommitInfo))
    data_adds, data_rems = _data_changing(adds), _data_changing(rems)
    if not (data_adds or data_rems):
        return None
    return CommitChanges(v, info.timestamp, data_adds, data_rems, captured_commit(v, info.timestamp, entry))


def _data_changing(actions: Sequence[AddPartition | RemovePartition]) -> tuple[Partition, ...]:
    """The partitions of the ``dataChange: true`` actions among ``actions``."""
    return tuple(x.partition for x in actions if x.data_change)


def _holding_rows(parts: dict[str, Partition]) -> tuple[Partition, ...]:
    """The partitions of ``parts`` that hold rows (an empty one changes nothing)."""
    return tuple(p for p in parts.values() if p.num_records)


@dataclass(frozen=True)
class _Compaction:
    """The paths one commit removed and added with ``dataChange: false``."""

    removed: tuple[str, ...]
    added: tuple[str, ...]

    @classmethod
    def of(cls, adds: Sequence[AddPartition], rems: Sequence[RemovePartition]) -> "_Compaction":
        return cls(tuple(x.path for x in rems if not x.data_change), tuple(x.path for x in adds if not x.data_change))

    @property
    def moves_files(self) -> bool:
        return bool(self.removed or self.added)


@dataclass
class _NetSets:
    """The net added and net removed partitions, by path, of the entries
    applied so far (in version order)."""

    added: dict[str, Partition] = field(default_factory=dict)
    removed: dict[str, Partition] = field(default_factory=dict)

    def apply(self, adds: Sequence[AddPartition], rems: Sequence[RemovePartition]) -> None:
        """Apply one entry's removes, then its adds."""
        for r in rems:
            if r.path in self.added:
                del self.added[r.path]  # added and removed inside the interval: never read
            else:
                self.removed[r.path] = r.partition
        for ad in adds:
            self.added[ad.path] = ad.partition

    def drop_if_unchanged(self, c: _Compaction) -> None:
        """Drop both sides of compaction ``c`` if its inputs are all net
        removed and its outputs all net added: it rewrote rows without
        changing them (see the module docstring)."""
        if not (self.removed.keys() >= set(c.removed) and self.added.keys() >= set(c.added)):
            return
        for path in c.removed:
            del self.removed[path]
        for path in c.added:
            del self.added[path]


def _shape(
    mode: ChangeMode, a: int, added: tuple[Partition, ...], removed: tuple[Partition, ...],
    commits: tuple[CommitChanges, ...],
) -> PlanShape:
    """The plan shape of a scan in ``mode`` of the interval from ``a`` with
    these net sets and data-changing commits (SPEC §Change scans, plan shapes)."""
    if not commits:
        return PlanShape.EMPTY
    if mode is ChangeMode.APPEND_ONLY:
        return PlanShape.ADDED_ONLY if _inserts_rows(commits) else PlanShape.EMPTY
    if _has_change_files(commits):
        # SPEC §Change scans, plan shapes: only an interval with a change
        # action reads change files; any other keeps the shapes below.
        return PlanShape.CAPTURED if _all_captured(commits) else PlanShape.MIXED
    if mode is ChangeMode.AUDIT:
        return _audit_shape(commits)
    return _net_shape(a, added, removed, commits)


def _inserts_rows(commits: tuple[CommitChanges, ...]) -> bool:
    """Whether a commit added a partition that is not a re-add (what an
    ``append_only`` scan reads)."""
    return any(c.inserted for c in commits)


def _has_change_files(commits: tuple[CommitChanges, ...]) -> bool:
    return any(c.change_files for c in commits)


def _all_captured(commits: tuple[CommitChanges, ...]) -> bool:
    return all(c.captured is not None for c in commits)


def _audit_shape(commits: tuple[CommitChanges, ...]) -> PlanShape:
    """The shape of an ``audit`` scan read from partitions: per-commit
    deltas, so partitions added and removed inside the interval still count
    (the net sets may cancel out to nothing)."""
    any_add = any(c.added for c in commits)
    any_rem = any(c.removed for c in commits)
    if any_add and any_rem:
        return PlanShape.MINIMIZE
    return PlanShape.ADDED_ONLY if any_add else PlanShape.REMOVED_ONLY


def _net_shape(
    a: int, added: tuple[Partition, ...], removed: tuple[Partition, ...], commits: tuple[CommitChanges, ...],
) -> PlanShape:
    """The shape of a ``default`` scan read from the net sets of the interval from ``a``."""
    if added and removed:
        return PlanShape.MINIMIZE if _may_insert(a, added, commits) else PlanShape.REMOVED_ONLY
    if added:
        return PlanShape.ADDED_ONLY
    return PlanShape.REMOVED_ONLY if removed else PlanShape.EMPTY


def _may_insert(a: int, added: tuple[Partition, ...], commits: tuple[CommitChanges, ...]) -> bool:
    """Whether the net added partitions of the interval from ``a`` may yield
    an INSERT. A net-added partition whose rows were all copied unchanged
    (e.g. the rewrite of a partial DELETE) yields none: if every added
    partition is such a copy, only deletes come out (REMOVED_ONLY); the
    copies' hidden row ids are still read to cancel surviving rows. Not
    across a re-add, whose rows keep older row versions."""
    return any(c.restores for c in commits) or any(may_hold_rows_written_since(p, a) for p in added)


def _segments(
    mode: ChangeMode, a: int, b: int, added: tuple[Partition, ...], removed: tuple[Partition, ...],
    commits: tuple[CommitChanges, ...],
) -> tuple[Segment, ...]:
    """What a scan in ``mode`` reads of the interval: the net delta of
    ``a..b`` (``default``), or one segment per commit (``audit``; the
    commits that added partitions for ``append_only``)."""
    if mode is ChangeMode.DEFAULT:
        return (PartitionDelta(a, b, added, removed, match_versions=any(c.restores for c in commits)),)
    if mode is ChangeMode.AUDIT:
        return tuple(PartitionDelta.of_commit(c) for c in commits)
    return tuple(PartitionDelta.appended_by(c) for c in commits if c.inserted)


def _captured_segments(
    mode: ChangeMode, entries: Sequence[tuple[int, list]], commits: tuple[CommitChanges, ...]
) -> tuple[Segment, ...]:
    """The segments of a CAPTURED or MIXED plan (SPEC §Change scans, "Using
    change files"): each captured data-changing commit alone; for
    ``default`` each maximal run of consecutive data-changing commits that
    are not captured is one :class:`PartitionDelta` of the run's net sets
    (its versions' entries, compactions among them included), for
    ``audit`` each such commit is its own."""
    if mode is ChangeMode.AUDIT:
        return tuple(c.captured if c.captured is not None else PartitionDelta.of_commit(c) for c in commits)
    first = entries[0][0] if entries else 0
    segments: list[Segment] = []
    run: list[CommitChanges] = []

    def flush() -> None:
        if run:
            lo, hi = run[0].version, run[-1].version
            added, removed, _ = net_changes(entries[lo - first:hi - first + 1])
            if added or removed:
                segments.append(PartitionDelta(lo, hi, added, removed, match_versions=any(c.restores for c in run)))
            run.clear()

    for c in commits:
        if c.captured is None:
            run.append(c)
        else:
            flush()
            segments.append(c.captured)
    flush()
    return tuple(segments)
