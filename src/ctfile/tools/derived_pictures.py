"""What ``ctfile derived show --plot`` draws, computed apart from the drawing
(:func:`ctfile.tools._plot_render.derived_figure` draws it), from the public
``ctfile`` API only: the derived table's refresh commits (SPEC §Derived
tables: ``commitInfo.refresh`` records the action, the frontier, the data
timestamp and the duration) and the commit times of its sources' logs.

**Lag behind a source** at time *t* (Snowflake's lag, per source): how long
the oldest data change of the source that the table does not hold yet has
been waiting, ``t - commit time`` of the first data-changing commit of the
source after the version the table's frontier holds (committed by *t*), or 0
when the table holds every data change committed by *t*. It grows at one
second per second from that commit on and drops at each refresh that moves
the frontier past it: a saw-tooth, computed at each source commit, at each
refresh (just before and just after it) and at the end of the series, and
exact between those points (a straight line). Commits that change no data
(a compaction, a property) do not make the table stale.

A refresh that finds nothing to do (``NO_DATA``) commits nothing, so the log
holds only ``INCREMENTAL``, ``FULL`` and ``REINITIALIZE`` refreshes; the
figure's legend still lists the four actions.

Examples
--------
>>> lag_at(10_000, frontier_version=3, commits=((3, 1_000), (4, 4_000), (5, 6_000)))
6.0
>>> lag_at(3_500, frontier_version=3, commits=((3, 1_000), (4, 4_000)))
0.0
>>> d = ctfile.DerivedDefinition("SELECT 1 AS x FROM s", (ctfile.SourceBinding("s", "t-1", "/s"),), "auto",
...                              "90 seconds", 1, ("_ct_dt_key",))
>>> target_lag_seconds(d), target_lag_seconds(d.altered(refresh_mode="auto", target_lag="downstream"))
(90.0, None)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import ctfile

#: The actions a refresh records, in the order the legend lists them.
ACTIONS = tuple(a.value for a in ctfile.RefreshAction)

def target_lag_seconds(definition: ctfile.DerivedDefinition) -> float | None:
    """The definition's target lag in seconds (SPEC §Derived tables, target
    lag); None for no lag, ``downstream``, or the free text a table written
    before the grammar may hold."""
    try:
        lag = definition.lag
    except ctfile.InvalidArgumentError:
        return None
    return None if lag is None else lag.seconds


def lag_at(t_ms: int, *, frontier_version: int, commits: Sequence[tuple[int, int]]) -> float:
    """Seconds the table is behind a source at ``t_ms`` when its frontier
    holds ``frontier_version``: ``commits`` are the source's data-changing
    commits as ``(version, commit time ms)`` in version order (see the module
    docstring)."""
    for version, ts in commits:
        if version > frontier_version and ts <= t_ms:
            return (t_ms - ts) / 1000
    return 0.0


@dataclass(frozen=True)
class RefreshPoint:
    """One refresh commit: its version, commit time, action, duration (None:
    not recorded) and the data timestamp it brought the table to."""

    version: int
    time_ms: int
    action: str
    duration_ms: int | None
    data_timestamp_ms: int


@dataclass(frozen=True)
class SourceLag:
    """The lag behind one source: ``lags_s[i]`` seconds at ``times_ms[i]``
    (two points at a refresh's time: before and after it); ``problem`` says
    why there is no series (the source cannot be opened, or its URI now
    holds another table)."""

    name: str
    times_ms: tuple[int, ...]
    lags_s: tuple[float, ...]
    problem: str | None = None


@dataclass(frozen=True)
class DerivedSeries:
    """What the figure of a derived table shows, up to ``until_ms``."""

    uri: str
    target_lag: str | None
    target_lag_s: float | None
    refreshes: tuple[RefreshPoint, ...]
    sources: tuple[SourceLag, ...]
    until_ms: int

    @property
    def max_lag_s(self) -> float:
        """The largest lag behind any source (0 without refreshes)."""
        return max((lag for s in self.sources for lag in s.lags_s), default=0.0)


def gather_derived(
    table: ctfile.Table, uri: str, *, storage_options: dict | None = None, until_ms: int | None = None,
) -> DerivedSeries:
    """The :class:`DerivedSeries` of the derived ``table`` up to ``until_ms``
    (default: now); each source opened read-only with ``storage_options``.

    Raises
    ------
    DerivedTableError
        ``table`` is not derived.
    """
    d = table.derived
    if d is None:
        raise ctfile.DerivedTableError(
            f"{uri} is not a derived table: expected metadata.derived (protocol feature derivedTables); "
            f"found a table without it"
        )
    refreshes = [h for h in reversed(table.history()) if h.refresh is not None]
    until = int(time.time() * 1000) if until_ms is None else until_ms
    points = tuple(RefreshPoint(h.version, h.timestamp_ms, h.refresh.action.value, h.refresh.duration_ms,
                                h.refresh.data_timestamp) for h in refreshes)
    sources = tuple(_source_lag(b, refreshes, until, storage_options) for b in d.sources)
    return DerivedSeries(uri, d.target_lag, target_lag_seconds(d), points, sources, until)


def _source_lag(binding: ctfile.SourceBinding, refreshes: list[ctfile.HistoryEntry], until: int,
                storage_options: dict | None) -> SourceLag:
    """The lag series behind the source of ``binding`` over ``refreshes``
    (oldest first), ending at ``until``."""
    frontiers = [_frontier_version(h.refresh, binding.name) for h in refreshes]
    known = [v for v in frontiers if v is not None]
    if not known:
        return SourceLag(binding.name, (), ())
    try:
        source = ctfile.open_table(binding.uri, storage_options=storage_options)
    except ctfile.CtfileError as e:
        return SourceLag(binding.name, (), (), problem=str(e))
    if source.table_id != binding.table_id:
        return SourceLag(binding.name, (), (), problem=f"the table at {binding.uri} is not {binding.table_id}")
    commits = _data_commits(source, min(known))
    return _saw_tooth(binding.name, refreshes, frontiers, commits, until)


def _frontier_version(refresh: ctfile.RefreshInfo, name: str) -> int | None:
    return next((v.version for v in refresh.frontier if v.name == name), None)


def _data_commits(source: ctfile.Table, after: int) -> tuple[tuple[int, int], ...]:
    """``(version, commit time ms)`` of the source's data-changing commits
    after version ``after``, in version order (read from its log)."""
    entries = source.history(limit=max(1, source.version - after))
    return tuple(sorted((h.version, h.timestamp_ms) for h in entries if h.version > after and h.data_change))


def _saw_tooth(name: str, refreshes: list[ctfile.HistoryEntry], frontiers: list[int | None],
               commits: tuple[tuple[int, int], ...], until: int) -> SourceLag:
    """The points of the lag series (see the module docstring)."""
    events: list[tuple[int, int, int]] = []  # (time, order, index): order 0 a commit, 1 a refresh
    events += [(ts, 0, -1) for _, ts in commits]
    events += [(h.timestamp_ms, 1, i) for i, h in enumerate(refreshes)]
    times: list[int] = []
    lags: list[float] = []

    def point(t: int, frontier: int) -> None:
        times.append(t)
        lags.append(lag_at(t, frontier_version=frontier, commits=commits))

    current: int | None = None
    for t, order, i in sorted(events):
        if t > until:
            break
        if order == 1 and current is not None:
            point(t, current)  # just before the refresh
        if order == 1 and frontiers[i] is not None:
            current = frontiers[i]
        if current is not None:
            point(t, current)
    if current is not None:
        point(until, current)
    return SourceLag(name, tuple(times), tuple(lags))
