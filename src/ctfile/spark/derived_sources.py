"""The sources of a derived table at one refresh, read from their logs alone
(SPEC §Derived tables): which versions the refresh reads, whether they
changed since the recorded frontier, how much, and whether their history is
still there. Nothing here starts a Spark job, so a refresh that finds no
change (``NO_DATA``) costs only log reads.

Each source is one :class:`SourceState`: its binding (name, table id, URI),
the table opened at the version the refresh reads, and the version the
frontier recorded for it. The change estimate comes from the commit
metrics of the interval (``numInsertedRows``, ``numUpdatedRows``,
``numDeletedRows`` of every data-changing commit, SPEC §commitInfo): it counts
rows as the commits changed them, which is at least the minimum delta and
never reads a partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, Sequence

import ctfile

#: Prefix of the named stream a derived table keeps on each source to hold
#: the history its next refresh reads (SPEC §Streams, retention).
STREAM_PREFIX = "__derived_"

_CHANGE_METRICS = ("numInsertedRows", "numUpdatedRows", "numDeletedRows")
_REMOVING_METRICS = ("numUpdatedRows", "numDeletedRows")


def stream_name(derived_table_id: str) -> str:
    """The name of the stream a derived table keeps on each of its sources.

    >>> stream_name("0123456789abcdef0123456789abcdef")
    '__derived_0123456789abcdef0123456789abcdef'
    """
    return STREAM_PREFIX + derived_table_id


@dataclass(frozen=True)
class IntervalEstimate:
    """What the log says of a source's interval: rows changed by its
    data-changing commits, whether every one of them only inserted
    (``appended_only``: the cheaper rules for ``min``/``max`` apply), and
    the source's row count at the interval's end."""

    changed_rows: int
    appended_only: bool
    rows_at_end: int
    #: Of ``changed_rows``, the rows updated or deleted (0 when it only appended).
    removed_rows: int = 0

    @property
    def fraction(self) -> float:
        """Changed rows against the source's size (1.0 for an empty source)."""
        return self.changed_rows / self.rows_at_end if self.rows_at_end else 1.0


@dataclass(frozen=True)
class SourceState:
    """One source of a refresh: ``binding`` from the definition, ``table``
    opened at ``version`` (the version this refresh reads), ``previous`` the
    frontier's entry for it (None before the first refresh)."""

    binding: ctfile.SourceBinding
    table: ctfile.Table
    version: int
    previous: ctfile.SourceVersion | None

    @property
    def name(self) -> str:
        return self.binding.name

    @property
    def recreated(self) -> bool:
        """The URI now holds another table than the one the definition bound."""
        return self.table.table_id != self.binding.table_id

    @property
    def moved(self) -> bool:
        """Whether the source has versions past the frontier's."""
        return self.previous is None or self.version != self.previous.version

    def frontier_entry(self) -> ctfile.SourceVersion:
        """This source's entry in the frontier the refresh records."""
        return ctfile.SourceVersion(
            name=self.name, table_id=self.table.table_id, version=self.version,
            schema_id=schema_id(self.table, self.version),
        )

    @cached_property
    def history(self) -> list[ctfile.HistoryEntry]:
        """The commits after the frontier's version up to ``version``, newest
        first (empty when the source did not move); read once per refresh."""
        if not self.moved or self.previous is None:
            return []
        entries = self.table.history(limit=max(0, self.table.version - self.previous.version))
        return [e for e in entries if self.previous.version < e.version <= self.version]

    def data_changed(self) -> bool:
        """Whether a commit of the interval changed rows (a stream's
        creation, a property change or a compaction does not)."""
        return any(changes_rows(e) for e in self.history)

    def schema_changed(self) -> bool:
        """Whether the schema at ``version`` differs from the frontier's."""
        return self.previous is not None and self.previous.schema_id != schema_id(self.table, self.version)

    def history_lost(self) -> str | None:
        """Why the interval's changes can no longer be read, or None."""
        if self.previous is None or not self.moved:
            return None
        try:
            self.table.changes(start_version=self.previous.version + 1, end_version=self.version)
            self.table.snapshot(self.previous.version)
        except (ctfile.StaleIntervalError, ctfile.VersionNotFoundError) as e:
            return str(e)
        return None

    @cached_property
    def append_only(self) -> bool:
        """Whether the source table is append-only (``ctfile.appendOnly``)
        at the version this refresh reads (SPEC §Append-only tables)."""
        return self.table.snapshot(self.version).append_only

    @cached_property
    def appended_since_frontier(self) -> bool:
        """Whether every commit after the frontier is one an append-only
        table takes (SPEC §Append-only tables): true when the table was
        append-only at the frontier's version and still is (every commit in
        between was under the property: the commit that turns it off is
        under it, and the property is on again at the end only through
        another commit, which the plan of the interval then judges)."""
        if self.previous is None or not self.moved:
            return False
        if self.table.snapshot(self.previous.version).append_only and self.append_only:
            return self._interval_plan_appends()
        return False

    def _interval_plan_appends(self) -> bool:
        """Whether the change plan of the interval is the append-only one
        (planned from its log entries alone, SPEC §Append-only tables)."""
        cs = self.table.changes(start_version=self.previous.version + 1, end_version=self.version)
        return cs.plan.reads_fresh_rows or not cs.plan.commits

    @cached_property
    def estimate(self) -> IntervalEstimate:
        """The interval's size from its commit metrics (no partition read);
        computed once per refresh (the rules, the reason and the refresh
        info all ask for it). A source append-only through the interval
        only appended, whatever its commits' metrics say."""
        entries = [e for e in self.history if changes_rows(e)]
        changed = sum(_metric(e, k) for e in entries for k in _CHANGE_METRICS)
        appended = all(_only_inserts(e) for e in entries) or self.appended_since_frontier
        rows = self.table.snapshot(self.version).num_records
        removed = 0 if appended else sum(_metric(e, k) for e in entries for k in _REMOVING_METRICS)
        return IntervalEstimate(changed_rows=changed, appended_only=appended, rows_at_end=rows, removed_rows=removed)


def changes_rows(entry: ctfile.HistoryEntry) -> bool:
    """Whether a commit changed rows: it is marked as a data change and, where
    its metrics say so, added or removed a partition (SPEC §commitInfo; an
    entry without metrics is taken at its word)."""
    if not entry.data_change:
        return False
    metrics = entry.operation_metrics
    if "numAddedPartitions" not in metrics and "numRemovedPartitions" not in metrics:
        return True
    return _metric(entry, "numAddedPartitions") + _metric(entry, "numRemovedPartitions") > 0


def _metric(entry: ctfile.HistoryEntry, key: str) -> int:
    value = entry.operation_metrics.get(key, 0)
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else 0


def _only_inserts(entry: ctfile.HistoryEntry) -> bool:
    """A commit that only inserted rows: its metrics say so, and it is not a
    RESTORE (whose metrics do not count the rows it brings back or drops)."""
    known = all(k in entry.operation_metrics for k in _REMOVING_METRICS)
    return known and entry.operation != "RESTORE" and all(_metric(entry, k) == 0 for k in _REMOVING_METRICS)


def schema_id(table: ctfile.Table, version: int) -> int:
    """The ``schemaId`` of the source's schema at ``version`` (SPEC §Derived
    tables, frontier item: :func:`ctfile.schema_id`)."""
    return ctfile.schema_id(table.schema_at(version))


def open_sources(
    bindings: Sequence[ctfile.SourceBinding], frontier: Sequence[ctfile.SourceVersion] = (), *,
    storage_options: Mapping | None, pins: Mapping[str, int] | None = None,
) -> list[SourceState]:
    """Open every source at its latest version, or at the version ``pins``
    gives for its table id (a refresh of a set at one frontier,
    :func:`ctfile.spark.derived.refresh_all`); never below the version
    ``frontier`` recorded for it (a pin taken before a concurrent refresh
    moved the table on must not move it back).

    Raises
    ------
    TableNotFoundError
        A source URI holds no table.
    VersionNotFoundError
        A pin beyond a source's latest version.
    """
    previous = {v.name: v for v in frontier}
    out = []
    for b in bindings:
        table = ctfile.open_table(b.uri, storage_options=storage_options)
        version = (pins or {}).get(table.table_id, table.version)
        if version > table.version:
            raise ctfile.VersionNotFoundError(
                f"source {b.name} ({b.uri}) is pinned at version {version}, its latest is {table.version}"
            )
        before = previous.get(b.name)
        if before is not None and before.table_id == table.table_id:
            version = max(version, before.version)
        out.append(SourceState(binding=b, table=table, version=version, previous=before))
    return out


def bind_sources(sources: Mapping[str, str], *, storage_options: Mapping | None) -> tuple[ctfile.SourceBinding, ...]:
    """The bindings of a new definition: each name to the table now at its URI.

    Raises
    ------
    InvalidArgumentError
        No source, or a name that is not a SQL identifier
        (:class:`ctfile.SourceBinding` checks it).
    TableNotFoundError
        A URI holds no table.
    """
    if not isinstance(sources, Mapping) or not sources:
        raise ctfile.InvalidArgumentError(
            f"sources must be a non-empty mapping of name to table URI, found {sources!r}"
        )
    out = []
    for name, uri in sources.items():
        table = ctfile.open_table(str(uri), storage_options=storage_options)
        out.append(ctfile.SourceBinding(name=name, table_id=table.table_id, uri=str(uri)))
    return tuple(out)


def append_only_names(sources: Sequence[SourceState]) -> tuple[str, ...]:
    """The names of the sources whose tables are append-only at the version
    read (SPEC §Append-only tables), for ``explain()``."""
    return tuple(s.name for s in sources if s.append_only)


def describe(sources: Sequence[SourceState]) -> str:
    """``name@version`` of each source, for reasons and logs."""
    return ", ".join(f"{s.name}@{s.version}" for s in sources)
