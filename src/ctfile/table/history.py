"""Commit times and history: :class:`HistoryEntry`, :func:`read_history`
(``Table.history``), the schema's history (:class:`SchemaVersion`,
:func:`read_schema_history` for ``Table.schema_history``;
:class:`IntroducedVersions`, :func:`read_introduced_versions` for
``Table.introduced_versions``) and :func:`timestamp_to_ms`, which turns a
user's time into the milliseconds commit timestamps are kept in (SPEC
§Commit timestamps)."""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional

from ctfile.format.actions import Action, AddPartition, ChangeFile, CommitInfo, Metadata, Partition, RemovePartition
from ctfile.format.change_files import has_removes, is_captured
from ctfile.format.derived import RefreshInfo
from ctfile.format.errors import CorruptLogError, InvalidArgumentError, VersionNotFoundError
from ctfile.format.log_values import utc_datetime
from ctfile.format.properties import IsolationLevel
from ctfile.format.schema import Schema
from ctfile.format.schema_evolution import SchemaChange, diff_schemas, field_paths
from ctfile.format.validators import require_int, require_positive_int
from ctfile.log.manifest import LogListing, ManifestLog
from ctfile.log.replay import TableHead

# The schema history reads entries newest first in batches of this many: on
# an object store a batch is fetched concurrently, and a walk stopped by
# ``limit`` reads at most one batch more than it needs.
_BATCH = 64


@dataclass(frozen=True)
class HistoryEntry:
    """One version of the table as ``Table.history()`` lists it.

    ``timestamp_ms`` is the commit timestamp as the log holds it
    (milliseconds since the epoch, SPEC §Commit timestamps) and
    ``timestamp`` the same as a UTC datetime, or None for a timestamp
    Python's datetime cannot hold (after year 9999: a clock far off, or an
    entry written by hand)."""

    version: int
    timestamp: dt.datetime | None
    timestamp_ms: int
    operation: str
    operation_parameters: dict
    operation_metrics: dict
    data_change: bool
    read_version: int | None
    #: The level the commit was checked at (``WriteSerializable``,
    #: ``Serializable``; ``SnapshotIsolation`` for revision 1 entries).
    isolation_level: str = IsolationLevel.SNAPSHOT.value
    #: True if the commit only added rows and read nothing (SPEC §Conflict detection).
    is_blind_append: bool = False
    #: SPEC §Change capture: whether a change scan can compute this commit's
    #: change without reading the partitions it removed (its change files,
    #: ``deletesAllRows`` removes); None for a commit that changes no data
    #: or removes no partition (an append needs no capture: its change rows
    #: are the rows of the partitions it added). And the change files it
    #: names, with their bytes.
    captured: bool | None = None
    change_files: int = 0
    change_bytes: int = 0
    #: SPEC §Schema evolution: whether the commit's ``metadata`` changed the
    #: schema (a ``SCHEMA CHANGE``, a Spark ``mergeSchema`` write, the
    #: creation), and how (:func:`~ctfile.format.schema_evolution.diff_schemas`
    #: of the schemas before and after). None: the entry sets the schema but
    #: the schema before it is no longer known (the oldest entry of a
    #: vacuumed history).
    schema_changed: bool | None = False
    schema_changes: tuple[SchemaChange, ...] = ()
    #: The commit's ``add`` and ``remove`` actions (SPEC §add, §remove): how
    #: many partitions, rows and bytes it made live and how many it retired,
    #: whatever ``operation_metrics`` say (metrics are informative, writers
    #: may leave them out). The live rows after a version are those before
    #: it plus ``rows_added`` minus ``rows_removed``; bytes alike.
    partitions_added: int = 0
    partitions_removed: int = 0
    rows_added: int = 0
    rows_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    #: SPEC §Derived tables: what a refresh commit of a derived table did
    #: (its ``commitInfo.refresh``: action, reason, frontier, rows in and
    #: out); None for every other commit.
    refresh: RefreshInfo | None = None


@dataclass(frozen=True)
class SchemaVersion:
    """A version whose commit changed the table's schema, as
    ``Table.schema_history()`` lists it.

    ``changes`` is what changed from the schema before (for version 0, the
    creation, every field as added). ``complete`` is False for the last item
    of a history whose older versions were vacuumed: it is the oldest version
    still available, whatever its commit did, ``schema`` is the schema there
    and the changes that led to it are no longer known (``changes`` empty).

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("name", pa.string())]))
    >>> with t.update_schema() as u:
    ...     _ = u.rename_column("name", "full_name").add_column("email", pa.string())
    >>> [(s.version, s.operation, [str(c) for c in s.changes]) for s in t.schema_history()]
    [(1, 'SCHEMA CHANGE', ['rename name (full_name)', 'add email (string)']), (0, 'CREATE TABLE', ['add id (long)', 'add name (string)'])]
    >>> dict(t.introduced_versions()), t.introduced_versions(version=0).oldest_version
    ({1: 0, 2: 0, 3: 1}, 0)
    """

    version: int
    #: The commit time (None where a datetime cannot hold it, as in
    #: :class:`HistoryEntry`), and as the log holds it.
    timestamp: dt.datetime | None
    timestamp_ms: int
    #: The commit's operation; None for an oldest version whose entry is
    #: gone (only its checkpoint is left).
    operation: str | None
    schema: Schema
    changes: tuple[SchemaChange, ...]
    complete: bool = True


def _check_limit(limit: Any) -> None:
    if limit is not None:
        require_positive_int(limit, "limit")


def read_history(log: ManifestLog, latest: int, *, limit: int | None) -> list[HistoryEntry]:
    """Committed versions up to ``latest``, newest first (at most ``limit``),
    with the schema changes of those whose ``metadata`` changed the schema."""
    _check_limit(limit)
    oldest = log.oldest_version()
    first = oldest if limit is None else max(oldest, latest - limit + 1)
    out, table_actions = [], []
    for v in range(latest, first - 1, -1):
        actions = log.read_entry(v)
        table_actions.append((v, [a for a in actions if isinstance(a, (CommitInfo, Metadata))]))
        out.append(_history_entry(v, actions))
    schema_versions = {s.version: s for s in _schema_versions(log, table_actions, oldest=oldest, latest=latest)}
    return [_with_schema_change(h, schema_versions.get(h.version)) for h in out]


def _history_entry(version: int, actions: list[Action]) -> HistoryEntry:
    """The :class:`HistoryEntry` of the entry of ``version`` (its ``actions``),
    without its schema changes (:func:`_with_schema_change` adds them)."""
    ci = _commit_info(actions)
    changes = [a for a in actions if isinstance(a, ChangeFile)]
    added = [a.partition for a in actions if isinstance(a, AddPartition)]
    removed = [a.partition for a in actions if isinstance(a, RemovePartition)]
    return HistoryEntry(
        version=version,
        timestamp=utc_datetime(ci.timestamp),
        timestamp_ms=ci.timestamp,
        operation=ci.operation,
        operation_parameters=dict(ci.operation_parameters),
        operation_metrics=dict(ci.operation_metrics),
        data_change=ci.data_change,
        read_version=ci.read_version,
        isolation_level=ci.isolation_level,
        is_blind_append=bool(ci.is_blind_append),
        captured=_captured(ci, actions),
        change_files=len(changes),
        change_bytes=sum(c.size_bytes for c in changes),
        partitions_added=len(added),
        partitions_removed=len(removed),
        rows_added=_rows(added),
        rows_removed=_rows(removed),
        bytes_added=_bytes(added),
        bytes_removed=_bytes(removed),
        refresh=ci.refresh,
    )


def _commit_info(actions: Iterable[Action]) -> CommitInfo:
    return next(a for a in actions if isinstance(a, CommitInfo))


def _captured(ci: CommitInfo, actions: list[Action]) -> bool | None:
    """:attr:`HistoryEntry.captured`: None unless the commit changes data and removes a partition."""
    return is_captured(actions) if ci.data_change and has_removes(actions) else None


def _rows(partitions: list[Partition]) -> int:
    return sum(p.num_records for p in partitions)


def _bytes(partitions: list[Partition]) -> int:
    return sum(p.size_bytes for p in partitions)


def _with_schema_change(h: HistoryEntry, sv: SchemaVersion | None) -> HistoryEntry:
    if sv is None:
        return h
    return dataclasses.replace(h, schema_changed=True if sv.complete else None, schema_changes=sv.changes)


# ---------------------------------------------------------------- schema history


def read_schema_history(log: ManifestLog, latest: int, *, limit: int | None = None) -> list[SchemaVersion]:
    """The versions up to ``latest`` whose commit changed the schema, newest
    first (at most ``limit``), from the table-level actions of the entries
    (never a partition). Where older history is gone the last item is the
    oldest version the history can start from (:func:`_history_start`),
    with ``complete`` False."""
    _check_limit(limit)
    listing = log.list()
    start = _history_start(listing, latest)
    lowest = start + 1 if start else 0
    out = _schema_versions(log, _newest_first(log, latest, lowest), oldest=start, latest=latest, limit=limit)
    if start and (limit is None or len(out) < limit):
        head = log.load_head(start, latest=latest)
        operation = log.commit_info(start).operation if start in listing.commits else None
        out.append(_schema_version(start, head.timestamp, operation, head.metadata.schema, (), complete=False))
    return out


def _history_start(listing: LogListing, latest: int) -> int:
    """0 when the log holds every entry up to ``latest``; else the oldest
    checkpoint from which the entries up to ``latest`` are all there (after
    a vacuum, the oldest version retained). Entries older than a gap are
    of no use: the schema after the gap is known from the checkpoint."""
    have = set(listing.commits)
    first = latest
    while first - 1 in have:
        first -= 1
    if first == 0:
        return 0
    return min((c for c in listing.checkpoints if first - 1 <= c <= latest), default=first)


def _newest_first(log: ManifestLog, latest: int, lowest: int) -> Iterator[tuple[int, list[Action]]]:
    """``(version, table-level actions)`` from ``latest`` down to ``lowest``."""
    hi = latest
    while hi >= lowest:
        lo = max(lowest, hi - _BATCH + 1)
        batch = log.read_table_actions_between(lo, hi, keep=False)
        yield from zip(range(hi, lo - 1, -1), reversed(batch))
        hi = lo - 1


def _schema_version(
    version: int, timestamp_ms: int, operation: str | None, schema: Schema, changes: Iterable[SchemaChange],
    *, complete: bool = True,
) -> SchemaVersion:
    return SchemaVersion(
        version=version, timestamp=utc_datetime(timestamp_ms), timestamp_ms=timestamp_ms, operation=operation,
        schema=schema, changes=tuple(changes), complete=complete,
    )


def _schema_versions(
    log: ManifestLog, entries: Iterable[tuple[int, list[Action]]], *, oldest: int, latest: int,
    limit: int | None = None,
) -> list[SchemaVersion]:
    """The schema changes among ``entries`` (newest first; at least their
    ``metadata`` and ``commitInfo`` actions), at most ``limit``.

    A ``metadata`` action changes the schema when its schema differs from
    the one before: that of the next older ``metadata`` action among
    ``entries``; for the oldest one, the schema of the version before it
    (read from the log only then), none for version 0 (the creation adds
    every field), unknown for the oldest version available when it is not 0.
    """
    out: list[SchemaVersion] = []
    pending: _SchemaSet | None = None  # the oldest metadata seen, not yet compared
    for v, actions in entries:
        md = next((a for a in actions if isinstance(a, Metadata)), None)
        if md is None:
            continue
        if pending is not None and pending.schema != md.schema:
            out.append(pending.changed_from(md.schema))
            if len(out) == limit:
                return out
        pending = _SchemaSet(v, _commit_info(actions), md.schema)
    if pending is not None:
        out.extend(_oldest_schema_change(log, pending, oldest=oldest, latest=latest))
    return out


@dataclass(frozen=True)
class _SchemaSet:
    """A ``metadata`` action met by the walk of :func:`_schema_versions`:
    the version, the commit and the schema it set."""

    version: int
    commit: CommitInfo
    schema: Schema

    def changed_from(self, before: Schema | None) -> SchemaVersion:
        """This version as a change from ``before`` (None: not known any more, ``complete`` False)."""
        changes = () if before is None else diff_schemas(before, self.schema)
        return _schema_version(self.version, self.commit.timestamp, self.commit.operation, self.schema, changes,
                               complete=before is not None)


def _oldest_schema_change(log: ManifestLog, first: _SchemaSet, *, oldest: int, latest: int) -> list[SchemaVersion]:
    """The change (none or one) of ``first``, the oldest ``metadata`` of the
    walk: from the schema of the version before it, read from the log; from
    nothing for version 0; unknown for the oldest version available when
    it is not 0 (the version before it is gone)."""
    if first.version == oldest and first.version > 0:
        return [first.changed_from(None)]
    before = Schema(()) if first.version == 0 else log.load_head(first.version - 1, latest=latest).metadata.schema
    return [first.changed_from(before)] if before != first.schema else []


class IntroducedVersions(Mapping[int, Optional[int]]):
    """Per field id of the schema of :attr:`version` (nested ids too), the
    version that introduced it: the first version whose schema has it; None
    for an id that the oldest version available (:attr:`oldest_version`, 0
    unless older history was vacuumed) already had. A read-only mapping."""

    def __init__(self, versions: dict[int, int | None], *, version: int, oldest_version: int):
        self._versions = dict(versions)
        self.version = version
        self.oldest_version = oldest_version

    def __getitem__(self, field_id: int) -> int | None:
        return self._versions[field_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)

    def __repr__(self) -> str:
        return f"IntroducedVersions({self._versions!r}, version={self.version}, oldest_version={self.oldest_version})"


def read_introduced_versions(log: ManifestLog, current: TableHead, version: int | None = None) -> IntroducedVersions:
    """:meth:`ctfile.Table.introduced_versions` of ``version`` (default: that
    of ``current``, the latest).

    SPEC §Schema evolution assigns ids in increasing order and the highest
    id assigned (``lastFieldId``) never decreases, so the version that
    introduced id X is the first whose ``Metadata.assigned_field_ids``
    reaches X. The ids the creation assigned need entry 0 alone. Later ones
    are found by :func:`_search_introductions`: a listing of the log (for
    its checkpoints; on S3 one request per 1,000 files), a binary search
    over the checkpoints' footers, then one scan of the table-level actions
    of the entries between two checkpoints per bracket: not the whole log.
    """
    head = _head_at(log, current, version)
    ids = list(field_paths(head.metadata.schema))
    created = _created_field_ids(log)
    later = [fid for fid in ids if fid > created]
    found, oldest = _search_introductions(log, head, later, latest=current.version) if later else ({}, 0)
    return IntroducedVersions({fid: found.get(fid, 0) for fid in ids}, version=head.version, oldest_version=oldest)


def _head_at(log: ManifestLog, current: TableHead, version: Any) -> TableHead:
    """The table-level state of ``version`` (None: ``current``, the latest)."""
    if version is not None:
        require_int(version, "version")
    if version is None or version == current.version:
        return current
    return log.load_head(version, latest=current.version)


def _creation_metadata(log: ManifestLog) -> Metadata:
    """The ``metadata`` of entry 0 (:class:`VersionNotFoundError` once vacuumed)."""
    return next(a for a in log.read_table_actions(0, keep=False) if isinstance(a, Metadata))


def _created_field_ids(log: ManifestLog) -> int:
    """The highest field id the creation assigned; 0 once entry 0 is
    vacuumed (then every id is searched for)."""
    try:
        return _creation_metadata(log).assigned_field_ids
    except VersionNotFoundError:
        return 0


def _search_introductions(
    log: ManifestLog, head: TableHead, field_ids: list[int], *, latest: int
) -> tuple[dict[int, int | None], int]:
    """The version that introduced each of ``field_ids`` (ids of the schema
    of ``head``), and the oldest version the search could see
    (:func:`_history_start`; None for an id it already had)."""
    listing = log.list()
    start = _history_start(listing, head.version)
    known = {head.version: head.metadata}

    def assigned(v: int) -> int:
        if v not in known:
            known[v] = _metadata_at(log, v, listing, latest=latest)
        return known[v].assigned_field_ids

    # The versions whose metadata is cheap to read, ascending: the start, the checkpoints, the version asked.
    marks = sorted({start, head.version, *(c for c in listing.checkpoints if start < c < head.version)})
    scans: dict[int, list[tuple[int, int]]] = {}  # bracket end -> (version, assigned) of its metadata actions

    def introduced(fid: int) -> int | None:
        if fid <= assigned(start):
            return None if start else 0
        i = bisect.bisect_left(marks, fid, lo=1, key=assigned)  # the first mark that has fid
        lo, hi = marks[i - 1], marks[i]
        if hi not in scans:
            entries = zip(range(lo + 1, hi + 1), log.read_table_actions_between(lo + 1, hi, keep=False))
            scans[hi] = [(v, a.assigned_field_ids) for v, actions in entries for a in actions if isinstance(a, Metadata)]
        for v, ids in scans[hi]:
            if ids >= fid:
                return v
        raise CorruptLogError(
            f"{log.storage.uri}: field id {fid} is assigned at version {hi} but by no entry of versions {lo + 1}..{hi}"
        )

    return {fid: introduced(fid) for fid in field_ids}, start


def _metadata_at(log: ManifestLog, version: int, listing: LogListing, *, latest: int) -> Metadata:
    """The metadata of ``version``: from entry 0 for the creation, from the
    checkpoint's footer when there is one that reads, else by
    :meth:`ManifestLog.load_head`."""
    if version == 0:
        return _creation_metadata(log)
    if version in listing.checkpoints:
        try:
            return log.read_checkpoint_head(version).metadata
        except (FileNotFoundError, CorruptLogError):
            pass  # SPEC §Checkpoints: a bad checkpoint is skipped; load_head finds another way
    return log.load_head(version, latest=latest).metadata


def timestamp_to_ms(ts: Any, *, what: str = "timestamp") -> int:
    """Accept a datetime (naive = UTC), an ISO-8601 string, or a pandas Timestamp."""
    if isinstance(ts, str):
        try:
            ts = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError as e:
            raise InvalidArgumentError(f"{what} {ts!r} is not an ISO-8601 timestamp") from e
    if isinstance(ts, dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.timezone.utc)
        return int(ts.timestamp() * 1000)
    if isinstance(ts, dt.date):
        return int(dt.datetime(ts.year, ts.month, ts.day, tzinfo=dt.timezone.utc).timestamp() * 1000)
    raise InvalidArgumentError(f"{what} must be a datetime or ISO-8601 string, found {type(ts).__name__}")
