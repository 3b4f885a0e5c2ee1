"""Commit times and history: :class:`HistoryEntry`, :func:`read_history`
(``Table.history``) and :func:`timestamp_to_ms`, which turns a user's time
into the milliseconds commit timestamps are kept in (SPEC §Commit timestamps)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ctfile.format.actions import ChangeFile, CommitInfo
from ctfile.format.change_files import is_captured
from ctfile.format.errors import InvalidArgumentError
from ctfile.format.properties import IsolationLevel
from ctfile.log.manifest import ManifestLog


@dataclass(frozen=True)
class HistoryEntry:
    """One version of the table as ``Table.history()`` lists it."""

    version: int
    timestamp: dt.datetime
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
    #: change without reading the partitions it removed (None for a commit
    #: that changes no data); and the change files it names, with their bytes.
    captured: bool | None = None
    change_files: int = 0
    change_bytes: int = 0


def read_history(log: ManifestLog, latest: int, *, limit: int | None) -> list[HistoryEntry]:
    """Committed versions up to ``latest``, newest first (at most ``limit``)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgumentError(f"limit must be a positive int, found {limit!r}")
    oldest = log.oldest_version()
    first = oldest if limit is None else max(oldest, latest - limit + 1)
    out = []
    for v in range(latest, first - 1, -1):
        actions = log.read_entry(v)
        ci = next(a for a in actions if isinstance(a, CommitInfo))
        changes = [a for a in actions if isinstance(a, ChangeFile)]
        out.append(
            HistoryEntry(
                version=v,
                timestamp=dt.datetime.fromtimestamp(ci.timestamp / 1000, tz=dt.timezone.utc),
                operation=ci.operation,
                operation_parameters=dict(ci.operation_parameters),
                operation_metrics=dict(ci.operation_metrics),
                data_change=ci.data_change,
                read_version=ci.read_version,
                isolation_level=ci.isolation_level,
                is_blind_append=bool(ci.is_blind_append),
                captured=is_captured(actions) if ci.data_change else None,
                change_files=len(changes),
                change_bytes=sum(c.size_bytes for c in changes),
            )
        )
    return out


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
