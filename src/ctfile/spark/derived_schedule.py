"""Keeping derived tables within their target lags (SPEC §Derived tables,
target lag), after the scheduler of Snowflake's Dynamic Tables (section 5.2 of
the paper in ``shared/reference``): :func:`ctfile.spark.derived.run` and
``ctfile derived run``.

Each *cycle* reads the logs, never a row: a table's *lag* is how long its
rows have missed a change of a source (the commit time of the oldest
source commit that changed rows after its frontier, or since which a
derived source of the set lags, whichever is earlier; zero when no source
changed). A table with a duration lag is *due* when waiting one more check
(``poll`` seconds) would let its lag pass the target before a refresh
finishes, its refresh taking as long as the slowest of its recent
refreshes (``commitInfo.refresh.durationMs``) plus those of the stale
tables of the set it reads, which are refreshed first. A ``downstream``
table has no lag of its own: it is refreshed when a table reading it is,
and is held to the smallest lag of its readers. The due tables and their
stale upstreams are refreshed in dependency order at one frontier
(:func:`ctfile.spark.derived_order.refresh_each`, as ``refresh_all``), so a
diamond stays consistent; the others are left alone, without a Spark job.

>>> from ctfile.spark import derived                                # doctest: +SKIP
>>> report = derived.run(spark, ["s3://lake/silver", "s3://lake/gold"], once=True)   # doctest: +SKIP
>>> [(r.uri, r.action, r.behind) for r in report.refreshes()]       # doctest: +SKIP

Two schedulers may keep one table: the log's conflict rules let one
refresh commit per frontier (SPEC §Derived tables, isolation), and the
other finds it done (outcome ``CURRENT``, a ``NO_DATA`` refresh that
commits nothing), so no work is counted twice.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import signal
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import ctfile
from ctfile.spark.derived_order import dependency_order, refresh_each
from ctfile.spark.derived_sources import changes_rows

#: The logger of the scheduler's progress: each cycle (DEBUG), each refresh
#: (INFO), a refresh that fell behind or failed (WARNING).
LOG = logging.getLogger("ctfile.derived")

_RECENT_REFRESHES = 5  # the refreshes whose durations estimate the next one's
_HISTORY_SCAN = 50  # log entries read back to find them
_KEPT_CYCLES = 100  # cycles a long run keeps for its report
_POLL_BOUNDS = (1.0, 60.0)


class Outcome(str, enum.Enum):
    """What the scheduler's refresh of a table came to."""

    #: A refresh committed (``INCREMENTAL``, ``FULL`` or ``REINITIALIZE``).
    REFRESHED = "refreshed"
    #: Nothing to commit (``NO_DATA``): another refresh, such as another
    #: scheduler's, recorded this frontier first.
    CURRENT = "current"
    #: The refresh raised (the error is the reason); the next cycle tries again.
    FAILED = "failed"


@dataclass(frozen=True)
class TableStatus:
    """One table as a cycle found it in the logs.

    ``target_s`` is its target lag in seconds (for a ``downstream`` table,
    the smallest of the tables of the set reading it; None: none),
    ``pending_since`` the clock time since which it misses a change (None:
    current), ``lag_s`` the clock time since then, ``estimate_s`` how long
    its refresh and those of its stale upstreams take together,
    ``start_by`` when that refresh must start to end within the target
    (None: nothing pending or no target), ``due`` whether this cycle
    refreshes it and ``reason`` why (or why not).
    """

    uri: str
    table_id: str
    target_lag: str | None
    target_s: float | None
    pending_since: float | None
    lag_s: float
    estimate_s: float
    start_by: float | None
    due: bool
    reason: str


@dataclass(frozen=True)
class ScheduledRefresh:
    """One refresh the scheduler ran: its ``outcome``, the refresh's
    ``action`` and ``reason`` (the error for ``FAILED``), ``why`` the
    scheduler ran it, when it ``started`` (clock seconds) and its
    ``duration_s``; ``lag_s`` the table's lag when it finished (how long
    its rows had missed a change; None for ``CURRENT``, whose lag is that of
    the refresh that did the work), ``behind`` whether that passed
    ``target_s``, and the ``version`` committed."""

    uri: str
    outcome: Outcome
    action: ctfile.RefreshAction | None
    why: str
    reason: str
    started: float
    duration_s: float
    lag_s: float | None
    target_s: float | None
    behind: bool
    version: int | None

    def __str__(self) -> str:
        what = self.action.value if self.action is not None else self.outcome.value
        late = f", BEHIND: lag {_fmt(self.lag_s)} > target {_fmt(self.target_s)}" if self.behind else ""
        return f"{self.uri}: {what} in {self.duration_s:.2f}s ({self.reason}){late}"


@dataclass(frozen=True)
class Cycle:
    """One cycle: the tables' ``statuses``, the ``refreshes`` it ran, when
    the next cycle should run (``next_check``, clock seconds) and whether
    it ``stopped`` before its last refresh."""

    started: float
    statuses: tuple[TableStatus, ...]
    refreshes: tuple[ScheduledRefresh, ...]
    next_check: float
    stopped: bool


@dataclass(frozen=True)
class RunReport:
    """What :func:`ctfile.spark.derived.run` did: the number of ``cycles``, refreshes per
    :class:`Outcome` (``outcomes``, by value) and ``behind``, whether a
    stop request ended it (``stopped``), and the last cycles (at most
    100, oldest first)."""

    cycles: int
    outcomes: Mapping[str, int]
    behind: int
    stopped: bool
    last: tuple[Cycle, ...]

    def refreshes(self) -> list[ScheduledRefresh]:
        """The refreshes of the kept cycles, in order."""
        return [r for c in self.last for r in c.refreshes]


def _fmt(seconds: float | None) -> str:
    """Seconds for people: ``4.2s`` under a minute, else ``1d2h3m4s``.

    >>> _fmt(4.23), _fmt(3725), _fmt(None)
    ('4.2s', '1h2m5s', 'none')
    """
    if seconds is None:
        return "none"
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f}s"
    d, rest = divmod(round(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if n)


def required_lag(uri: str, definition: ctfile.DerivedDefinition | None) -> ctfile.format.TargetLagSpec:
    """The target lag of the table at ``uri`` (``definition``: its
    ``metadata.derived``), which a scheduler needs: it keeps only derived
    tables with a lag, as Snowflake requires one of every dynamic table.
    Reads no row and needs no Spark (``ctfile derived run`` checks its
    tables before it starts a session).

    Raises
    ------
    DerivedTableError
        The table is not derived.
    InvalidArgumentError
        No target lag, or one that is not a duration or ``downstream``.
    """
    if definition is None:
        raise ctfile.DerivedTableError(
            f"{uri}: expected a derived table (metadata.derived, protocol feature derivedTables) to schedule; "
            f"found a table that is not derived"
        )
    lag = definition.lag
    if lag is None:
        raise ctfile.InvalidArgumentError(
            f"{uri}: expected a target lag (a duration such as '5 minutes', or 'downstream') to schedule it; "
            f"found none: set one with DerivedTable.alter(target_lag=...)"
        )
    return lag


@dataclass(frozen=True)
class _Facts:
    """What one cycle read from the logs, per table id (:meth:`Scheduler.plan`)."""

    targets: Mapping[str, float | None]
    pending: Mapping[str, float | None]
    stale: Mapping[str, Any]
    chain: Mapping[str, float]
    start_by: Mapping[str, float | None]


class Scheduler:
    """The tables :func:`ctfile.spark.derived.run` keeps current, and its
    cycles (see the module). ``tables`` are
    :class:`ctfile.spark.derived.DerivedTable` objects (their sources are
    opened with each one's storage options), each with a target lag;
    ``poll`` the seconds between two reads of the logs (default: a quarter
    of the smallest target lag, from 1 to 60 s); ``clock`` the current time
    in seconds since the epoch, as commit timestamps are.

    Raises
    ------
    InvalidArgumentError
        No table, a table without a target lag or with one that is not a
        duration or ``downstream``, or tables that read each other in a
        cycle.
    """

    def __init__(self, tables: Iterable[Any], *, poll: float | None = None, clock: Callable[[], float] = time.time):
        self.tables = dependency_order(tables)
        if not self.tables:
            raise ctfile.InvalidArgumentError("tables: expected at least one derived table; found none")
        self.clock = clock
        self._by_id = {t.table.table_id: t for t in self.tables}
        self._upstream = {tid: self._upstream_ids(t) for tid, t in self._by_id.items()}
        lags = [required_lag(t.uri, t.definition).seconds for t in self.tables]
        self.poll = float(poll) if poll is not None else _default_poll([s for s in lags if s is not None])
        if not self.poll > 0:
            raise ctfile.InvalidArgumentError(f"poll: expected seconds > 0; found {poll!r:.80}")
        self._estimates: dict[str, tuple[int, float]] = {}  # table id -> (version read, estimate)
        self._sources: dict[str, ctfile.Table] = {}  # uri -> the source, refreshed each cycle

    # ------------------------------------------------------------ planning

    def plan(self) -> tuple[TableStatus, ...]:
        """Each table's status now, from the logs alone (no Spark job), in
        dependency order."""
        now = self.clock()
        for t in self.tables:
            t.table.refresh()
        f = self._facts()
        own_due = [tid for tid in self._by_id if self._due_by_own_lag(tid, f.start_by[tid], now)]
        pulled_by = {u: tid for tid in own_due for u in f.stale[tid]}
        return tuple(self._status(t, f, now, own_due, pulled_by) for t in self.tables)

    def _facts(self) -> "_Facts":
        """Per table id: its target, since when it misses a change, its stale
        upstreams, its refresh chain's estimated duration and start-by time."""
        targets = self._targets()
        pending: dict[str, float | None] = {}
        for t in self.tables:
            pending[t.table.table_id] = self._pending_since(t, pending)
        stale = {tid: self._stale_upstreams(tid, pending) for tid in self._by_id}
        estimate = {tid: self._estimate(t) for tid, t in self._by_id.items()}
        chain = {tid: estimate[tid] + sum(estimate[u] for u in stale[tid]) for tid in self._by_id}
        start_by = {tid: _start_by(pending[tid], targets[tid], chain[tid]) for tid in self._by_id}
        return _Facts(targets, pending, stale, chain, start_by)

    def _status(self, t: Any, f: "_Facts", now: float, own_due: list[str],
                pulled_by: Mapping[str, str]) -> TableStatus:
        tid = t.table.table_id
        pending, target, chain, start_by = f.pending[tid], f.targets[tid], f.chain[tid], f.start_by[tid]
        reason = self._reason(tid, now, pending, target, chain, start_by, tid in own_due, pulled_by.get(tid))
        lag = 0.0 if pending is None else now - pending
        return TableStatus(t.uri, tid, t.definition.target_lag, target, pending, lag, chain, start_by,
                           tid in own_due or tid in pulled_by, reason)

    def _due_by_own_lag(self, tid: str, start_by: float | None, now: float) -> bool:
        """Whether a table with a lag of its own must start now (waiting one
        more poll would pass its start-by time)."""
        has_own_lag = self._own_lag(tid) is not None
        return has_own_lag and start_by is not None and now + self.poll >= start_by

    def _own_lag(self, tid: str) -> float | None:
        """The table's own duration lag (None: downstream, or none any more)."""
        lag = self._by_id[tid].definition.lag
        return None if lag is None else lag.seconds

    def _targets(self) -> dict[str, float | None]:
        """Each table's target: its own lag, or for a downstream table the
        smallest target of the tables of the set reading it (readers first)."""
        targets: dict[str, float | None] = {}
        readers: dict[str, list[str]] = {tid: [] for tid in self._by_id}
        for tid, ups in self._upstream.items():
            for u in ups:
                readers[u].append(tid)
        for t in reversed(self.tables):
            tid = t.table.table_id
            own = self._own_lag(tid)
            theirs = [targets[r] for r in readers[tid] if targets[r] is not None]
            targets[tid] = own if own is not None else min(theirs, default=None)
        return targets

    def _pending_since(self, t: Any, pending: Mapping[str, float | None]) -> float | None:
        """Since when the table's rows miss a source change (None: current);
        the creation time before the first refresh (SPEC §Derived tables,
        target lag)."""
        d = t.definition
        if not d.frontier:
            return t.table.metadata.created_time / 1000
        since = [self._first_missed(b, d.frontier_of(b.name), d.data_timestamp, t.storage_options)
                 for b in d.sources]
        since += [pending.get(b.table_id) for b in d.sources]
        return min((s for s in since if s is not None), default=None)

    def _upstream_ids(self, t: Any) -> list[str]:
        """The ids of the tables of the set that ``t`` reads."""
        return [b.table_id for b in t.definition.sources if b.table_id in self._by_id]

    def _first_missed(self, binding: ctfile.SourceBinding, frontier: ctfile.SourceVersion | None,
                      data_timestamp: int | None, storage_options: Mapping) -> float | None:
        """The commit time of the source's oldest commit after ``frontier``
        that changed rows (None: none); the table's data timestamp when the
        entries are gone (vacuumed: the refresh reinitializes)."""
        source = self._source(binding.uri, storage_options)
        after = source.version - (frontier.version if frontier is not None else -1)
        if after <= 0:
            return None
        entries = _entries_after(source, frontier, after)
        if len(entries) < after and data_timestamp is not None:
            return data_timestamp / 1000
        changed = [e.timestamp_ms for e in entries if changes_rows(e)]
        return min(changed) / 1000 if changed else None

    def _source(self, uri: str, storage_options: Mapping) -> ctfile.Table:
        table = self._sources.get(uri)
        if table is None:
            table = self._sources[uri] = ctfile.open_table(uri, storage_options=storage_options)
        else:
            table.refresh()
        return table

    def _stale_upstreams(self, tid: str, pending: Mapping[str, float | None]) -> list[str]:
        """The tables of the set ``tid`` reads, directly or not, that miss a
        change, in no particular order (a current table's upstreams are
        current: a stale one would make it stale)."""
        seen: list[str] = []
        todo = list(self._upstream[tid])
        while todo:
            u = todo.pop()
            if u not in seen and pending[u] is not None:
                seen.append(u)
                todo.extend(self._upstream[u])
        return seen

    def _estimate(self, t: Any) -> float:
        """How long a refresh of ``t`` takes: the longest of its last five
        refreshes that did work, as the log recorded them (0 if none);
        read again only when the table's version moved."""
        tid, version = t.table.table_id, t.table.version
        cached = self._estimates.get(tid)
        if cached is not None and cached[0] == version:
            return cached[1]
        durations: list[float] = []
        for e in t.table.history(limit=_HISTORY_SCAN):
            r = e.refresh
            if r is not None and r.duration_ms is not None and r.action is not ctfile.RefreshAction.NO_DATA:
                durations.append(r.duration_ms / 1000)
                if len(durations) == _RECENT_REFRESHES:
                    break
        self._estimates[tid] = (version, max(durations, default=0.0))
        return self._estimates[tid][1]

    def _reason(self, tid: str, now: float, pending: float | None, target: float | None, chain: float,
                start_by: float | None, own_due: bool, pulled_by: str | None) -> str:
        if pending is None:
            return "current: no source changed rows since its frontier"
        lag = f"lag {_fmt(now - pending)}"
        if own_due:
            return (f"{lag} + refresh estimate {_fmt(chain)} would pass the target {_fmt(target)} before the "
                    f"next check in {_fmt(self.poll)}")
        if pulled_by is not None:
            return f"read by {self._by_id[pulled_by].uri}, which is due ({lag})"
        if self._own_lag(tid) is None:
            return f"downstream: waits for a table reading it to be due ({lag})"
        assert start_by is not None
        return f"{lag} of target {_fmt(target)}: due in {_fmt(start_by - self.poll - now)}"

    # ------------------------------------------------------------ running

    def cycle(self, *, stop: threading.Event | None = None) -> Cycle:
        """Plan, then refresh the due tables in dependency order, checking
        ``stop`` before each refresh (a refresh under way finishes)."""
        started = self.clock()
        statuses = self.plan()
        due = {s.table_id: s for s in statuses if s.due}
        LOG.debug("cycle: %d tables, %d due: %s", len(statuses), len(due), "; ".join(
            f"{s.uri}: {s.reason}" for s in statuses))
        refreshes: list[ScheduledRefresh] = []
        stopped = False
        if due:
            for t, step in refresh_each([self._by_id[tid] for tid in due]):
                if stop is not None and stop.is_set():
                    stopped = True
                    LOG.info("stopping before refreshing %s (%d of %d refreshed)", t.uri, len(refreshes), len(due))
                    break
                refreshes.append(self._refresh(step, due[t.table.table_id]))
        return Cycle(started, statuses, tuple(refreshes), self._next_check(statuses), stopped)

    def _refresh(self, step: Callable[[], Any], status: TableStatus) -> ScheduledRefresh:
        """Run one refresh step and report it; a failure is reported, not
        raised, so that the other tables are kept (the next cycle retries)."""
        started = self.clock()
        LOG.info("refreshing %s: %s", status.uri, status.reason)
        try:
            result = step()
        except Exception as e:  # noqa: BLE001 - one table's failure must not stop the others
            LOG.warning("refresh of %s failed: %s", status.uri, e, exc_info=not isinstance(e, ctfile.CtfileError))
            return self._report(status, started, Outcome.FAILED, None, f"{type(e).__name__}: {e}", None)
        outcome = Outcome.REFRESHED if result.version is not None else Outcome.CURRENT
        return self._report(status, started, outcome, result.action, result.reason, result.version)

    def _report(self, status: TableStatus, started: float, outcome: Outcome, action: ctfile.RefreshAction | None,
                reason: str, version: int | None) -> ScheduledRefresh:
        finished = self.clock()
        lag = None if outcome is Outcome.CURRENT or status.pending_since is None else finished - status.pending_since
        behind = lag is not None and status.target_s is not None and lag > status.target_s
        r = ScheduledRefresh(status.uri, outcome, action, status.reason, reason, started, finished - started, lag,
                             status.target_s, behind, version)
        LOG.info("%s", r)
        if behind:
            LOG.warning("%s fell behind: its lag reached %s, past its target %s", status.uri, _fmt(lag),
                        _fmt(status.target_s))
        return r

    def _next_check(self, statuses: Sequence[TableStatus]) -> float:
        """When to plan again: after one ``poll``, or earlier when a table
        with a lag of its own, not refreshed now, becomes due (a downstream
        table is due only with a reader, which is due no later)."""
        now = self.clock()
        soon = [s.start_by - self.poll for s in statuses
                if s.start_by is not None and not s.due and self._own_lag(s.table_id) is not None]
        return max(now, min([now + self.poll, *soon]))

    def run(self, *, once: bool = False, stop: threading.Event, sleep: Callable[[float], Any] | None = None) -> RunReport:
        """Cycle until ``stop`` is set (or once); between cycles, wait with
        ``sleep(seconds)`` (default: ``stop.wait``, which a stop ends)."""
        kept: deque[Cycle] = deque(maxlen=_KEPT_CYCLES)
        outcomes: Counter[str] = Counter()
        cycles = behind = 0
        while not stop.is_set():
            c = self._cycle_or_none(once=once, stop=stop)
            if c is None:  # the logs could not be read: try again after a poll
                (stop.wait if sleep is None else sleep)(self.poll)
                continue
            cycles, behind = cycles + 1, behind + sum(r.behind for r in c.refreshes)
            outcomes.update(r.outcome.value for r in c.refreshes)
            kept.append(c)
            if once or c.stopped:
                break
            wait = max(0.0, c.next_check - self.clock())
            LOG.debug("next check in %s", _fmt(wait))
            (stop.wait if sleep is None else sleep)(wait)
        return RunReport(cycles, dict(outcomes), behind, stop.is_set(), tuple(kept))

    def _cycle_or_none(self, *, once: bool, stop: threading.Event) -> Cycle | None:
        """A cycle; None, with a warning, when a log could not be read (a
        source gone, the store down), which a long run outlives and
        ``once`` raises."""
        try:
            return self.cycle(stop=stop)
        except (ctfile.CtfileError, OSError) as e:
            if once:
                raise
            LOG.warning("cycle failed, next try in %s: %s", _fmt(self.poll), e)
            return None


def _start_by(pending: float | None, target: float | None, chain: float) -> float | None:
    """When a refresh taking ``chain`` seconds must start for the lag to
    stay within ``target`` (Snowflake's p + w + d < t)."""
    return None if pending is None or target is None else pending + target - chain


def _default_poll(lags: Sequence[float]) -> float:
    """A quarter of the smallest target lag, from 1 to 60 seconds."""
    low, high = _POLL_BOUNDS
    return min(max(min(lags, default=4 * high) / 4, low), high)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, *, enabled: bool = True) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM set ``stop`` (the scheduler
    finishes the refresh under way and returns); a second one raises
    KeyboardInterrupt. Installed only in the main thread (where Python
    delivers signals), and the previous handlers are restored after."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        LOG.warning("%s: stopping after the refresh under way", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _entries_after(source: ctfile.Table, frontier: ctfile.SourceVersion | None, count: int) -> list:
    """The history entries of ``source`` after ``frontier`` (all without
    one), at most ``count``, newest first: fewer when vacuumed away."""
    floor = frontier.version if frontier is not None else -1
    return [e for e in source.history(limit=count) if e.version > floor]
