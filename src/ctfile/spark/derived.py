"""Derived tables: a ctfile table defined by a Spark SQL query over other
ctfile tables, kept current by refreshes that apply only what changed
(SPEC §Derived tables; Snowflake's Dynamic Tables, whose delayed view
semantics it keeps: the contents always equal the query run on the sources
at the versions the last refresh recorded, its *frontier*).

>>> from ctfile.spark import derived                     # doctest: +SKIP
>>> gold = derived.create(spark, "s3://lake/gold/revenue",
...     "SELECT country, sum(amount) AS revenue, count(*) AS n FROM silver GROUP BY country",
...     sources={"silver": "s3://lake/silver/events"}, refresh_mode="auto")   # doctest: +SKIP
>>> gold.refresh().action                                 # doctest: +SKIP
<RefreshAction.NO_DATA: 'NO_DATA'>
>>> gold.alter(refresh_mode="full", target_lag="1 hour")  # doctest: +SKIP
>>> derived.run(spark, [gold], once=True)                 # doctest: +SKIP
>>> gold = derived.replace(spark, "s3://lake/gold/revenue",
...     "SELECT country, max(amount) AS top FROM silver GROUP BY country",
...     sources={"silver": "s3://lake/silver/events"})      # doctest: +SKIP

A definition changes in two ways (SPEC §Derived tables, changing a
definition; :mod:`ctfile.spark.derived_change`): :meth:`DerivedTable.alter`
sets the mode or the lag without touching a row, and :func:`replace`
commits a new query with its rows in one ``REINITIALIZE`` refresh.

:func:`run` keeps a set of derived tables within their target lags
(:mod:`ctfile.spark.derived_schedule`), refreshing them in dependency order
as :func:`refresh_all` does (:mod:`ctfile.spark.derived_order`).

The query is compiled by :mod:`ctfile.derived` (sqlglot's Spark dialect)
into an operator plan; each refresh is chosen from the logs alone
(:mod:`ctfile.spark.derived_plan`) and run on Spark's executors
(:mod:`ctfile.spark.derived_refresh`) as SQL text and one MERGE, so it
works on Spark Connect as on a classic session.
"""

from __future__ import annotations

import functools

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow as pa

import ctfile
import ctfile.derived as compiler
from ctfile.spark import derived_change as change
from ctfile.spark import derived_refresh as steps
from ctfile.spark.derived_order import dependency_ids as _dependency_order  # noqa: F401 - tests check its cycle error
from ctfile.spark.derived_order import bindings_pins, refresh_each, upstream_pins
from ctfile.spark.derived_cost import RefreshCost, refresh_cost
from ctfile.spark.derived_plan import RefreshContext, RefreshDecision, decide
from ctfile.spark.derived_driver import linear_delta_in_driver
from ctfile.spark.derived_schedule import (  # noqa: F401 - the scheduler's names, served from here
    Cycle,
    Outcome,
    RunReport,
    ScheduledRefresh,
    Scheduler,
    TableStatus,
    required_lag,
    stop_on_signals,
)
from ctfile.spark.derived_sources import SourceState, append_only_names, bind_sources, open_sources
from ctfile.spark.table import CtfileTable

_MAX_ATTEMPTS = 3

#: ``DerivedTable.alter(target_lag=UNSET)`` removes the target lag (:class:`TargetLag`).
UNSET = change.UNSET
TargetLag = change.TargetLag


class IncrementalRequiredError(ctfile.InvalidArgumentError):
    """``refresh_mode="incremental"`` for a query with an operator that has
    no incremental rule (named in the message)."""


@dataclass(frozen=True)
class RefreshResult:
    """What one refresh did: its ``action`` and ``reason``, the ``frontier``
    the table's contents now equal the query at, ``rows_in`` (source rows
    changed in the interval by the log's commit metrics, or the rows read by
    a full refresh), ``rows_out`` (rows of the consolidated change merged
    into the table), the ``version`` it committed (None for ``NO_DATA``) and
    its wall-clock ``duration`` in seconds."""

    action: ctfile.RefreshAction
    reason: str
    frontier: tuple[ctfile.SourceVersion, ...]
    rows_in: int
    rows_out: int
    version: int | None
    duration: float

    def __str__(self) -> str:
        at = ", ".join(f"{v.name}@{v.version}" for v in self.frontier)
        return f"{self.action.value} at {at} in {self.duration:.2f}s: {self.reason}"


class DerivedTable:
    """A derived table on one Spark session (:func:`create`, :func:`open`).

    ``table`` is the :class:`ctfile.Table` (reads, change scans and streams
    work on it as on any table, never showing the derivation columns);
    ``definition`` its :class:`ctfile.DerivedDefinition` as last loaded.
    """

    def __init__(self, spark: Any, table: ctfile.Table, *, storage_options: Mapping | None = None):
        if table.derived is None:
            raise ctfile.InvalidArgumentError(f"{table.uri} is not a derived table (its metadata has no definition)")
        self.spark, self.table, self._options = spark, table, dict(storage_options or {})

    def __repr__(self) -> str:
        return f"DerivedTable({self.uri!r}, version={self.table.version})"

    @property
    def uri(self) -> str:
        return self.table.uri

    @property
    def storage_options(self) -> dict:
        return dict(self._options)

    @property
    def definition(self) -> ctfile.DerivedDefinition:
        return self.table.derived

    def to_df(self, **kwargs: Any) -> Any:
        """:meth:`ctfile.spark.CtfileTable.to_df` of the table."""
        return CtfileTable(self.spark, self.table).to_df(**kwargs)

    def explain(self) -> Any:
        """Per operator of the compiled query: incremental or not, and why
        (:class:`ctfile.derived.Explanation`), naming the append-only
        sources and the rules they make cheaper (SPEC §Append-only tables)."""
        sources = self._sources()
        return self._plan(sources).explain(append_only=append_only_names(sources))

    def refresh(self, *, full: bool = False, pins: Mapping[str, int] | None = None) -> RefreshResult:
        """Bring the table to its sources' latest versions (or ``pins``:
        table id -> version), choosing the action as
        :mod:`ctfile.spark.derived_plan` says; ``full=True`` forces a
        ``FULL`` refresh (not for a table that has nothing to do).

        A concurrent refresh that commits first makes this one re-read the
        table: it returns ``NO_DATA`` when the winner reached the same
        frontier, and refreshes from the winner's frontier otherwise.

        Raises
        ------
        RefreshInvariantError
            The computed change would break the table; nothing committed.
        CommitConflictError
            Lost to concurrent refreshes three times in a row.
        """
        started = time.monotonic()
        for attempt in range(_MAX_ATTEMPTS):
            self.table = ctfile.open_table(self.uri, storage_options=self._options)
            sources = self._sources(pins)
            plan = self._plan(sources)
            decision = self._decide(plan, sources, full=full)
            if not decision.commits:
                steps.hold_history(sources, self.table.table_id, at_frontier=True)
                return _result(decision, sources, started, version=None)
            try:
                if change.compiled_by_other_rules(self.definition):
                    return self._recompile(plan, sources, decision, started)
                if decision.overwrite:
                    return self._overwrite(plan, sources, decision, started)
                return self._write(plan, sources, decision, started)
            except ctfile.CommitConflictError:
                if attempt == _MAX_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def alter(self, *, refresh_mode: str | ctfile.RefreshMode | None = None,
              target_lag: str | TargetLag | None = None) -> ctfile.CommitResult:
        """Change how the table is refreshed, not what it holds (Snowflake's
        ``ALTER DYNAMIC TABLE ... SET REFRESH_MODE / TARGET_LAG``): one
        metadata-only ``ALTER DERIVED`` commit (SPEC §Derived tables,
        changing a definition) that writes no row and keeps the frontier;
        the next refresh runs in the new mode. ``None`` leaves a field as
        it is; ``target_lag=UNSET`` removes the lag. Nothing is committed
        when neither changes (``result.committed`` False).

        A concurrent refresh conflicts with it (the first to commit wins);
        the alter then re-reads the table and checks again, up to three
        times.

        Raises
        ------
        InvalidArgumentError
            An unknown mode, or a lag that is not a non-empty string.
        IncrementalRequiredError
            ``refresh_mode="incremental"`` and an operator without an
            incremental rule (named); nothing is committed.
        CommitConflictError
            Lost to concurrent commits three times in a row.
        """
        for attempt in range(_MAX_ATTEMPTS):
            self.table = ctfile.open_table(self.uri, storage_options=self._options)
            new = change.altered(self.definition, refresh_mode=refresh_mode, target_lag=target_lag)
            if change.needs_incremental_check(self.definition, new):  # compiled over the sources' latest columns
                _require_incremental(compile_definition(new.query, open_sources(new.sources,
                                                                                storage_options=self._options)))
            try:
                result = change.commit_alter(self.table, new)
                self.table.refresh()
                return result
            except ctfile.CommitConflictError:
                if attempt == _MAX_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------ internals

    def _sources(self, pins: Mapping[str, int] | None = None) -> list[SourceState]:
        d = self.definition
        pins = pins if pins is not None else upstream_pins(d, storage_options=self._options)
        return open_sources(d.sources, d.frontier, storage_options=self._options, pins=pins)

    def _plan(self, sources: Sequence[SourceState]) -> Any:
        return compile_definition(self.definition.query, sources)

    def _decide(self, plan: Any, sources: list[SourceState], *, full: bool) -> RefreshDecision:
        decision = decide(RefreshContext(self.definition, sources, plan.blockers, compiler.PLAN_VERSION,
                                         cost=lambda: self._cost(plan, sources)))
        if full and decision.action is ctfile.RefreshAction.INCREMENTAL:
            return RefreshDecision(ctfile.RefreshAction.FULL, "full refresh asked for")
        return decision

    def _cost(self, plan: Any, sources: list[SourceState]) -> RefreshCost | None:
        """``auto``'s estimates, when it has a choice to make: an
        incremental plan, refreshed before, and a source with changed rows."""
        has_choice = plan.incremental and self.definition.frontier and any(s.data_changed() for s in sources)
        if self.definition.refresh_mode is not ctfile.RefreshMode.AUTO or not has_choice:
            return None
        return refresh_cost(self.spark, plan, sources, self.table)

    def _recompile(self, plan: Any, sources: list[SourceState], decision: RefreshDecision,
                   started: float) -> RefreshResult:
        """The ``REINITIALIZE`` of a table whose derivation columns older plan
        rules made (SPEC §Derived tables, ``planVersion``): its query,
        compiled by these rules, and its rows in one replace commit, so
        that the next refresh runs by these rules."""
        definition = change.recompiled(self.definition, plan)
        schema = _output_schema(self.spark, plan, sources)
        result = change.write_replacement(self.spark, self.table, definition, schema, plan, sources,
                                          decision=decision)
        return self._committed(decision, sources, started, result)

    def _overwrite(self, plan: Any, sources: list[SourceState], decision: RefreshDecision,
                   started: float) -> RefreshResult:
        """``auto``'s ``FULL`` by cost: the query's rows replace every row
        in one refresh commit (no MERGE reads the stored rows)."""
        result = change.write_all_rows(self.spark, self.table, plan, sources, decision=decision)
        return self._committed(decision, sources, started, result)

    def _committed(self, decision: RefreshDecision, sources: list[SourceState], started: float,
                   result: ctfile.CommitResult) -> RefreshResult:
        """The result of a refresh that committed ``result``, its row counts
        as its commit recorded them."""
        info = self.table.log.commit_info(result.version).refresh
        return _result(decision, sources, started, version=result.version, rows_in=info.rows_in,
                       rows_out=info.rows_out)

    def _source(self, plan: Any, refresh_sql: Any, views: Any, decision: RefreshDecision, ts: int) -> Any:
        """The MERGE source of ``refresh_sql`` and its counts: a small
        linear aggregate delta computed in the driver
        (:mod:`ctfile.spark.derived_driver`), else by Spark over the views."""
        if decision.incremental:
            parts = plan.linear_aggregate(data_timestamp_ms=ts, appended_only=_appended_only(views.sources))
            local = linear_delta_in_driver(self.spark, parts, views.sources, steps.table_schema(self.table))
            if local is not None:
                return steps.local_checked(self.spark, local, refresh_sql, keep_rows=True)
        views.register_used(refresh_sql.source_sql)
        typed = steps.typed_source(self.spark, refresh_sql.source_sql, self.table)
        return steps.checked_source(self.spark, typed, refresh_sql)

    def _write(self, plan: Any, sources: list[SourceState], decision: RefreshDecision, started: float) -> RefreshResult:
        ts = int(time.time() * 1000)
        views = steps.SourceViews(self.spark, sources, decision.incremental, target=self.table)
        source = None
        try:
            refresh_sql = _refresh_sql(plan, views.names(), sources, decision, ts)
            source, expected = self._source(plan, refresh_sql, views, decision, ts)
            info = steps.refresh_info(decision, sources, data_timestamp_ms=ts, rows_in=_rows_in(sources, decision),
                                    rows_out=expected.rows)
            with CtfileTable(self.spark, self.table).transaction(refresh=info) as tx:
                counts = steps.merge_into(tx, source, refresh_sql, steps.column_types(self.table))
                steps.check_deletes_found(counts, expected)
                tx.tx.update_refresh(rows_out=sum(counts.values()),
                                     duration_ms=int(1000 * (time.monotonic() - started)))
            version = tx.result.version if tx.result is not None and tx.result.committed else None
        finally:
            if source is not None and not isinstance(source, pa.Table):
                source.unpersist()
            views.drop()
        steps.hold_history(sources, self.table.table_id)
        return _result(decision, sources, started, version=version, rows_in=info.rows_in, rows_out=sum(counts.values()))


def _refresh_sql(plan: Any, views: Any, sources: Sequence[SourceState], decision: RefreshDecision, ts: int) -> Any:
    if decision.incremental:
        return plan.delta(views, data_timestamp_ms=ts, appended_only=_appended_only(sources))
    return plan.full(views, data_timestamp_ms=ts)


def _appended_only(sources: Sequence[SourceState]) -> dict[str, bool]:
    return {s.name: s.estimate.appended_only for s in sources}


def _rows_in(sources: Sequence[SourceState], decision: RefreshDecision) -> int:
    if decision.incremental:
        return sum(s.estimate.changed_rows for s in sources if s.moved)
    return sum(s.table.snapshot(s.version).num_records for s in sources)


def _result(decision: RefreshDecision, sources: Sequence[SourceState], started: float, *, version: int | None,
            rows_in: int = 0, rows_out: int = 0) -> RefreshResult:
    return RefreshResult(
        action=decision.action, reason=decision.reason, frontier=tuple(s.frontier_entry() for s in sources),
        rows_in=rows_in, rows_out=rows_out, version=version, duration=time.monotonic() - started,
    )


def compile_definition(query: str, sources: Sequence[SourceState]) -> Any:
    """The compiled plan of ``query`` over ``sources`` (their visible
    columns at the versions read, for ``SELECT *``)."""
    columns = tuple((s.name, tuple(s.table.snapshot(s.version).schema.names)) for s in sources)
    return _compiled(query, columns)


@functools.lru_cache(maxsize=64)
def _compiled(query: str, columns: tuple[tuple[str, tuple[str, ...]], ...]) -> Any:
    """:func:`compile_definition`, remembered: a scheduler refreshes the
    same definitions over the same schemas again and again, and a compiled
    plan is immutable."""
    return compiler.compile_query(query, sources=tuple(n for n, _ in columns), columns=dict(columns))


def create(
    spark: Any, uri: str, query: str, *, sources: Mapping[str, str], refresh_mode: str = "auto",
    target_lag: str | None = None, storage_options: Mapping | None = None,
    properties: Mapping[str, str] | None = None, initialize: bool = True,
) -> DerivedTable:
    """Create the derived table ``uri`` defined by ``query`` (Spark SQL over
    the names of ``sources``, each bound to the ctfile table at its URI)
    and, unless ``initialize=False``, fill it with a first ``FULL``
    refresh.

    Parameters
    ----------
    refresh_mode : {"auto", "incremental", "full"}
        ``incremental`` refuses a query that has an operator without an
        incremental rule; ``auto`` refreshes such a query in full, and any
        other incrementally unless the log shows a large change.
    target_lag : str, optional
        How far behind its sources the table may fall (``"5 minutes"``),
        recorded for schedulers and ``ctfile derived show``.

    Raises
    ------
    InvalidArgumentError
        Not one SELECT over the source names, an unknown mode, a bad lag.
    IncrementalRequiredError
        ``refresh_mode="incremental"`` and an operator without a rule.
    TableExistsError, TableNotFoundError
        ``uri`` holds a table; a source URI does not.
    """
    mode = ctfile.RefreshMode.parse(refresh_mode)
    bindings = bind_sources(sources, storage_options=storage_options)
    states = open_sources(bindings, storage_options=storage_options)
    new = _prepare(spark, query, bindings, mode, target_lag, states)
    table = ctfile.create_table(uri, new.schema, derived=new.definition, properties=properties,
                                storage_options=storage_options)
    out = DerivedTable(spark, table, storage_options=storage_options)
    if initialize:
        out.refresh()
    return out


@dataclass(frozen=True)
class _Prepared:
    """A checked new definition: the definition (empty frontier), the Arrow
    schema it implies (output and derivation columns) and its compiled plan."""

    definition: ctfile.DerivedDefinition
    schema: Any
    plan: Any


def _prepare(spark: Any, query: str, bindings: tuple[ctfile.SourceBinding, ...], mode: ctfile.RefreshMode,
             target_lag: str | None, states: Sequence[SourceState]) -> _Prepared:
    """Compile ``query`` over ``states`` and check it as :func:`create` and
    :func:`replace` do (the lag is checked first: it needs no compile)."""
    if target_lag is not None and (not isinstance(target_lag, str) or not target_lag):
        raise ctfile.InvalidArgumentError(f"target_lag: expected a non-empty string or None; found {target_lag!r:.80}")
    ctfile.format.check_target_lag(target_lag)  # SPEC §Derived tables, target lag: a duration or downstream
    plan = compile_definition(query, states)
    if mode is ctfile.RefreshMode.INCREMENTAL:
        _require_incremental(plan)
    definition = ctfile.DerivedDefinition(
        query=query, sources=bindings, refresh_mode=mode, target_lag=target_lag,
        plan_version=compiler.PLAN_VERSION, hidden_columns=tuple(n for n, _ in plan.hidden_columns),
    )
    return _Prepared(definition, _output_schema(spark, plan, states), plan)


def _require_incremental(plan: Any) -> None:
    """IncrementalRequiredError naming the operators of ``plan`` that have no incremental rule."""
    if not plan.incremental:
        raise IncrementalRequiredError(
            "refresh_mode='incremental' needs every operator to have an incremental rule, found: "
            + "; ".join(map(str, plan.blockers))
        )


def replace(
    spark: Any, uri: str, query: str, *, sources: Mapping[str, str], refresh_mode: str = "auto",
    target_lag: str | None = None, storage_options: Mapping | None = None,
) -> DerivedTable:
    """Replace the definition of the derived table at ``uri`` (Delta Lake's
    ``DeltaTable.replace``, Snowflake's and Databricks' ``CREATE OR
    REPLACE``, for a table that must exist): a new ``query``, ``sources``,
    mode and lag, checked as :func:`create` checks them, committed with the
    new query's rows as ONE ``REINITIALIZE`` refresh (SPEC §Derived tables,
    changing a definition), so readers never see the new definition with
    the old rows. The schema becomes the new query's (a column of the same
    name and type keeps its field id); every row is written anew, with a
    new row id, so a change scan across the replace deletes every old row
    and inserts every new one. The table id, properties and history stay;
    the table stops holding the history of a source it no longer reads.

    Raises
    ------
    TableNotFoundError
        No table at ``uri`` (use :func:`create`).
    DerivedTableError
        ``uri`` holds a table that is not derived.
    InvalidArgumentError, IncrementalRequiredError
        As :func:`create`; or a source that is the table itself, or is
        derived from it.
    CommitConflictError
        Lost to concurrent commits three times in a row.

    Nothing is written when it raises.
    """
    mode = ctfile.RefreshMode.parse(refresh_mode)
    table = _derived_table_at(uri, storage_options)
    bindings = bind_sources(sources, storage_options=storage_options)
    change.check_acyclic(table, bindings, storage_options=storage_options)
    for attempt in range(_MAX_ATTEMPTS):
        states = open_sources(bindings, storage_options=storage_options,
                              pins=bindings_pins(bindings, storage_options))
        new = _prepare(spark, query, bindings, mode, target_lag, states)
        old = table.derived
        try:
            change.write_replacement(spark, table, new.definition, new.schema, new.plan, states)
        except ctfile.CommitConflictError:
            if attempt == _MAX_ATTEMPTS - 1:
                raise
            table = _derived_table_at(uri, storage_options)
            continue
        change.release_history(old, new.definition, table.table_id, storage_options=storage_options)
        return DerivedTable(spark, table.refresh(), storage_options=storage_options)
    raise AssertionError("unreachable")  # pragma: no cover


def _derived_table_at(uri: str, storage_options: Mapping | None) -> ctfile.Table:
    """The table at ``uri``, which must be derived (DerivedTableError otherwise)."""
    table = ctfile.open_table(uri, storage_options=storage_options)
    if table.derived is None:
        raise ctfile.DerivedTableError(
            f"replace {uri}: expected a derived table (protocol feature derivedTables, metadata.derived); found "
            f"a table that is not derived, nothing was written; create a derived table at another URI"
        )
    return table


def _output_schema(spark: Any, plan: Any, sources: Sequence[SourceState]) -> Any:
    """The derived table's Arrow schema: the full query's output columns and
    derivation columns as Spark analyses them (no job runs); every column
    nullable but the derivation key."""
    import pyarrow as pa

    from ctfile.spark_datasource.types import spark_arrow_schema

    views = steps.SourceViews(spark, sources, False)
    try:
        sql = plan.full(views.names(), data_timestamp_ms=int(time.time() * 1000))
        views.register_used(sql.source_sql)
        df = spark.sql(sql.source_sql).drop(*sql.control_columns)
        arrow = spark_arrow_schema(df.schema)  # timestamps in UTC, as the data source serves them
    finally:
        views.drop()
    return pa.schema([f.with_nullable(f.name != steps.KEY_COLUMN) for f in arrow])


def open(spark: Any, uri: str, *, storage_options: Mapping | None = None) -> DerivedTable:  # noqa: A001
    """The derived table at ``uri``.

    Raises
    ------
    TableNotFoundError
        No table at ``uri``.
    InvalidArgumentError
        A table that is not derived.
    """
    return DerivedTable(spark, ctfile.open_table(uri, storage_options=storage_options),
                        storage_options=storage_options)


def refresh_all(spark: Any, tables: Iterable[DerivedTable]) -> list[RefreshResult]:
    """Refresh ``tables`` in dependency order at ONE frontier: every source
    that is not in the set is read at the version it had when the call
    began, and a table reads an upstream of the set at the version that
    upstream's refresh left, so two paths from one source (a diamond) agree.

    Raises
    ------
    InvalidArgumentError
        The set's definitions read each other in a cycle.
    """
    return [step() for _, step in refresh_each(tables)]


def run(spark: Any, tables: Iterable[DerivedTable | str], *, once: bool = False, poll: float | None = None,
        storage_options: Mapping | None = None, stop: threading.Event | None = None,
        clock: Callable[[], float] = time.time, sleep: Callable[[float], Any] | None = None,
        handle_signals: bool = True) -> RunReport:
    """Keep the derived ``tables`` (DerivedTable objects, or URIs opened on
    ``spark`` with ``storage_options``) within their target lags until
    stopped (:mod:`ctfile.spark.derived_schedule`): refresh each, in
    dependency order, when waiting one more ``poll`` would let its lag pass
    its target; a ``downstream`` table only when a table reading it is.
    ``once=True`` refreshes what is due now and returns (for cron).

    Parameters
    ----------
    poll : float, optional
        Seconds between two reads of the logs (default: a quarter of the
        smallest target lag, from 1 to 60).
    stop : threading.Event, optional
        Set it (from another thread) to stop after the refresh under way.
    clock, sleep : callable, optional
        The current time (seconds since the epoch) and how to wait, for
        tests; ``sleep`` replaces ``stop.wait`` between cycles.
    handle_signals : bool
        In the main thread, SIGINT and SIGTERM set ``stop`` while it runs
        (a second one raises KeyboardInterrupt); the previous handlers are
        restored.

    Returns
    -------
    RunReport
        The cycles, the refreshes by outcome, those that fell behind.

    Raises
    ------
    InvalidArgumentError
        No table, a table without a target lag or with one that is not a
        duration or ``downstream``, tables that read each other in a cycle.
    DerivedTableError
        A URI that holds a table that is not derived.
    CtfileError, OSError
        With ``once``, a log that could not be read (a source gone, the
        store down); a long run logs a warning and tries again after a
        poll. A refresh that fails is reported (outcome ``FAILED``, a
        warning logged), not raised.
    """
    opened = [_opened(spark, t, storage_options) for t in tables]
    scheduler = Scheduler(opened, poll=poll, clock=clock)
    stop = stop if stop is not None else threading.Event()
    with stop_on_signals(stop, enabled=handle_signals):
        return scheduler.run(once=once, stop=stop, sleep=sleep)


def _opened(spark: Any, t: Any, storage_options: Mapping | None) -> DerivedTable:
    if isinstance(t, DerivedTable):
        return t
    if not isinstance(t, str):
        raise ctfile.InvalidArgumentError(f"tables: expected DerivedTable objects or URIs; found {t!r:.80}")
    table = ctfile.open_table(t, storage_options=storage_options)
    required_lag(t, table.derived)  # DerivedTableError for a table that is not derived
    return DerivedTable(spark, table, storage_options=storage_options)


