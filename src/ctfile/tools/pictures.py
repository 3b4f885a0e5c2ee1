"""What ``ctfile history --plot`` and ``ctfile show --plot`` draw, computed
apart from the drawing (:mod:`~ctfile.tools._plot_render` draws it): plain
frozen dataclasses of series, gathered from the public ``ctfile`` API only.

:class:`HistorySeries` is a table's history per version: live rows and
bytes after each version, partitions added and removed, rows inserted,
updated and deleted, and the kind of each commit. :class:`LayoutSeries` is
the micro-partitions of one version laid out by a column's min/max
statistics, with the version that wrote each and the clustering depth
(:func:`ctfile.clustering_depth`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import ctfile


class PlotFormat(enum.Enum):
    """The kinds of file ``--plot`` writes, by the file name's extension."""

    PNG = ".png"
    SVG = ".svg"
    HTML = ".html"

    @classmethod
    def of(cls, path: str) -> "PlotFormat":
        """The format of ``path`` (extension case ignored).

        >>> PlotFormat.of("out/history.SVG"), PlotFormat.of("h.html")
        (<PlotFormat.SVG: '.svg'>, <PlotFormat.HTML: '.html'>)
        >>> PlotFormat.of("h.pdf")
        Traceback (most recent call last):
          ...
        ValueError: expected a file name ending in .png, .svg or .html, found 'h.pdf'
        """
        lower = path.lower()
        for f in cls:
            if lower.endswith(f.value):
                return f
        raise ValueError(f"expected a file name ending in .png, .svg or .html, found {path!r}")


class CommitKind(enum.Enum):
    """What a commit did to the table, from its log entry.

    ``CREATE``: version 0, which sets the first schema. ``DATA``: it added
    or removed partitions with ``dataChange`` true (an insert, update,
    delete, merge, overwrite). ``COMPACTION``: it added or removed
    partitions with ``dataChange`` false (the rows stay the same, the files
    change). ``METADATA``: it touched no partition (a schema change, new
    properties). A schema change is marked on its own
    (:attr:`HistorySeries.schema_changed`), as a write may change the schema
    too (Spark's ``mergeSchema``). Vacuum writes no log entry (SPEC §Vacuum):
    it shows only as history that starts after version 0
    (:attr:`HistorySeries.expired_before`).
    """

    CREATE = "create"
    DATA = "data change"
    COMPACTION = "compaction"
    METADATA = "metadata only"

    @classmethod
    def of(cls, h: ctfile.HistoryEntry) -> "CommitKind":
        if h.version == 0:
            return cls.CREATE
        if h.partitions_added or h.partitions_removed:
            return cls.DATA if h.data_change else cls.COMPACTION
        return cls.METADATA


@dataclass(frozen=True)
class HistorySeries:
    """A table's history, one item per version in ascending order.

    ``live_rows[i]`` / ``live_bytes[i]`` are the rows and bytes of the live
    partitions after ``versions[i]``; the rows columns are the commit's
    operation metrics (0 where it recorded none); partitions added and
    removed are its ``add`` and ``remove`` actions. ``expired_before`` is the
    oldest version listed when the history before it was expired by a
    vacuum (None if the history starts at version 0 or was cut by a limit).
    """

    uri: str
    versions: tuple[int, ...]
    operations: tuple[str, ...]
    kinds: tuple[CommitKind, ...]
    schema_changed: tuple[bool, ...]
    live_rows: tuple[int, ...]
    live_bytes: tuple[int, ...]
    partitions_added: tuple[int, ...]
    partitions_removed: tuple[int, ...]
    rows_inserted: tuple[int, ...]
    rows_updated: tuple[int, ...]
    rows_deleted: tuple[int, ...]
    expired_before: int | None


def gather_history(table: ctfile.Table, uri: str, *, limit: int | None = None) -> HistorySeries:
    """The :class:`HistorySeries` of ``table`` (the newest ``limit`` versions).

    Reads the log entries (``Table.history``) and one snapshot, that of the
    newest version listed: the live rows and bytes of older versions follow
    backwards from it, each version's being the next one's minus what the
    next commit added plus what it removed. No snapshot per version.
    """
    entries = table.history(limit=limit)  # newest first
    snap = table.snapshot(entries[0].version)
    live_rows, live_bytes = _live_backwards(entries, snap.num_records, sum(p.size_bytes for p in snap.partitions))
    entries.reverse()
    cut_by_limit = limit is not None and len(entries) == limit
    return HistorySeries(
        uri=uri,
        versions=_each(entries, "version"),
        operations=_each(entries, "operation"),
        kinds=tuple(map(CommitKind.of, entries)),
        schema_changed=tuple(map(_changes_schema, entries)),
        live_rows=tuple(reversed(live_rows)),
        live_bytes=tuple(reversed(live_bytes)),
        partitions_added=_each(entries, "partitions_added"),
        partitions_removed=_each(entries, "partitions_removed"),
        rows_inserted=_metric(entries, "numInsertedRows"),
        rows_updated=_metric(entries, "numUpdatedRows"),
        rows_deleted=_metric(entries, "numDeletedRows"),
        expired_before=None if cut_by_limit else _expired_before(entries[0].version),
    )


def _live_backwards(entries: list, rows: int, size: int) -> tuple[list[int], list[int]]:
    """The live rows and bytes at each of ``entries`` (newest first), from
    ``rows`` and ``size`` at the newest: each version's are the next one's
    minus what the next commit added plus what it removed."""
    live_rows, live_bytes = [], []
    for h in entries:
        live_rows.append(rows)
        live_bytes.append(size)
        rows += h.rows_removed - h.rows_added
        size += h.bytes_removed - h.bytes_added
    return live_rows, live_bytes


def _each(entries: list, attribute: str) -> tuple:
    """The ``attribute`` of each history entry, in order."""
    return tuple(getattr(h, attribute) for h in entries)


def _metric(entries: list, name: str) -> tuple[int, ...]:
    """The operation metric ``name`` of each entry (0 where absent)."""
    return tuple(int(h.operation_metrics.get(name) or 0) for h in entries)


def _changes_schema(h: Any) -> bool:
    """Whether the commit changed the schema: the creation sets the schema
    rather than changing it; None (set, the schema before was vacuumed) is
    not known to be a change either."""
    return bool(h.schema_changed) and h.version > 0


def _expired_before(oldest: int) -> int | None:
    """The version before which the log was vacuumed, given the oldest
    listed (a full listing, not one cut by a limit); None from version 0."""
    return oldest if oldest > 0 else None


# ---------------------------------------------------------------- layout


@dataclass(frozen=True)
class PartitionBar:
    """One micro-partition with bounds for the column: its ``[low, high]``
    (decoded statistics) and the version that wrote it (``defaultRowVersion``
    of its ``add``, SPEC §Row lineage)."""

    path: str
    low: Any
    high: Any
    version: int
    num_records: int


@dataclass(frozen=True)
class LayoutSeries:
    """The partitions of one version by ``column``: ``bars`` sorted by low
    then high bound; ``unbounded`` the paths of the partitions without
    bounds for the column (no statistics, all nulls, a truncated string
    maximum), counted but not drawn; ``depth`` the :func:`ctfile.clustering_depth`
    of the bars (None without bars)."""

    uri: str
    version: int
    column: str
    bars: tuple[PartitionBar, ...]
    unbounded: tuple[str, ...]
    depth: float | None


def default_column(snap: ctfile.Snapshot) -> str:
    """The first column of ``snap``'s schema with a bound in some partition."""
    names = snap.table_schema.names
    for name in names:
        if any(b is not None for b in snap.column_bounds(name)):
            return name
    raise ctfile.InvalidArgumentError(
        f"version {snap.version} has no partition with min/max statistics for any of the columns {names}"
    )


def gather_layout(snap: ctfile.Snapshot, uri: str, *, column: str | None = None) -> LayoutSeries:
    """The :class:`LayoutSeries` of ``snap`` by ``column`` (default: the first
    column with min/max statistics), from the partitions' statistics alone."""
    column = column or default_column(snap)
    bars, unbounded = [], []
    for p, b in zip(snap.partitions, snap.column_bounds(column)):
        if b is None:
            unbounded.append(p.path)
        else:
            bars.append(PartitionBar(p.path, b[0], b[1], p.default_row_version, p.num_records))
    bars.sort(key=lambda b: (b.low, b.high))
    return LayoutSeries(
        uri=uri,
        version=snap.version,
        column=column,
        bars=tuple(bars),
        unbounded=tuple(unbounded),
        depth=ctfile.clustering_depth([(b.low, b.high) for b in bars]),
    )
