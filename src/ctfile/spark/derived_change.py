"""Changing a derived table's definition (SPEC §Derived tables, changing a
definition), after Snowflake's ``ALTER DYNAMIC TABLE ... SET`` and
``CREATE OR REPLACE DYNAMIC TABLE``:

- an *alter* (:func:`altered`, committed by
  :meth:`ctfile.spark.derived.DerivedTable.alter`) changes the refresh mode
  or the target lag in a metadata-only ``ALTER DERIVED`` commit: no row is
  written, the frontier stays, and the next refresh runs in the new mode;
- a *replace* (:func:`write_replacement`, called by
  :func:`ctfile.spark.derived.replace`) commits the new definition, the
  schema it implies and the new query's rows at a new frontier as ONE
  ``REINITIALIZE`` refresh, so no version holds the new definition with the
  old rows. The old rows are removed and the new ones written: every row
  gets a new row id.

>>> d = ctfile.DerivedDefinition("SELECT id FROM src", (ctfile.SourceBinding("src", "t-1", "/src"),), "auto",
...                              "5 minutes", 1, ("_ct_dt_key",))
>>> altered(d, refresh_mode="full", target_lag=None).refresh_mode, altered(d, target_lag=UNSET).target_lag
(<RefreshMode.FULL: 'full'>, None)
"""

from __future__ import annotations

import enum
import time
from typing import Any, Mapping, Sequence

import ctfile
import ctfile.derived as compiler
from ctfile.spark import derived_refresh as run
from ctfile.spark.derived_plan import RefreshDecision
from ctfile.spark.derived_sources import SourceState, describe, stream_name
from ctfile.spark.table import CtfileTable

#: The reason a replace's ``REINITIALIZE`` records (followed by the frontier).
REPLACED_REASON = "the definition was replaced"


class TargetLag(enum.Enum):
    """Values of ``DerivedTable.alter(target_lag=)`` that are not a lag."""

    #: Remove the target lag (SQL's ``UNSET``); ``None`` leaves it as it is.
    UNSET = "UNSET"


#: ``DerivedTable.alter(target_lag=UNSET)`` removes the target lag.
UNSET = TargetLag.UNSET


def altered(definition: ctfile.DerivedDefinition, *, refresh_mode: Any = None,
            target_lag: Any = None) -> ctfile.DerivedDefinition:
    """``definition`` with the mode and lag an alter asks for: None keeps
    either as it is, :data:`UNSET` removes the lag.

    Raises
    ------
    InvalidArgumentError
        An unknown mode, or a lag that is not a non-empty string, None or
        :data:`UNSET`.
    """
    mode = definition.refresh_mode if refresh_mode is None else ctfile.RefreshMode.parse(refresh_mode)
    if target_lag is None:
        lag = definition.target_lag
    else:
        lag = None if target_lag is UNSET else target_lag
    return definition.altered(refresh_mode=mode, target_lag=lag)


def needs_incremental_check(before: ctfile.DerivedDefinition, after: ctfile.DerivedDefinition) -> bool:
    """Whether an alter turns ``incremental`` on, so the query must be
    compiled to check that every operator has an incremental rule (a table
    already ``incremental`` was checked when it became so)."""
    incremental = ctfile.RefreshMode.INCREMENTAL
    return after.refresh_mode is incremental and before.refresh_mode is not incremental


def commit_alter(table: ctfile.Table, definition: ctfile.DerivedDefinition) -> ctfile.CommitResult:
    """The ``ALTER DERIVED`` commit recording ``definition``'s mode and lag
    on ``table`` (nothing committed when they are the table's already).

    Raises
    ------
    CommitConflictError
        A concurrent commit holding a ``metadata`` action (a refresh, another
        alter) won (SPEC §Conflict detection, rule 1).
    """
    with table.transaction() as tx:
        tx.alter_derived(refresh_mode=definition.refresh_mode, target_lag=definition.target_lag)
    assert tx.result is not None
    return tx.result


def replaced_decision(sources: Sequence[SourceState]) -> RefreshDecision:
    """The action and reason a replace records."""
    return RefreshDecision(ctfile.RefreshAction.REINITIALIZE, f"{REPLACED_REASON}; recomputed at {describe(sources)}")


def write_replacement(
    spark: Any, table: ctfile.Table, definition: ctfile.DerivedDefinition, schema: Any, plan: Any,
    sources: Sequence[SourceState], *, decision: RefreshDecision | None = None,
) -> ctfile.CommitResult:
    """Commit ``definition`` (with the Arrow ``schema`` of its output and
    derivation columns) and the rows of its compiled ``plan`` over
    ``sources`` as one ``REINITIALIZE`` refresh of ``table``: the schema
    replaced, every old row removed, the new rows written; then move the
    retention streams to the new sources. The refresh records ``decision``
    (default: a replace's, :func:`replaced_decision`).

    Raises
    ------
    RefreshInvariantError
        The query produced two rows for one derivation key (nothing committed).
    DerivedTableError
        ``table`` is no longer derived (nothing committed).
    CommitConflictError
        A concurrent commit won (nothing committed).
    """
    return write_all_rows(spark, table, plan, sources, decision=decision or replaced_decision(sources),
                          definition=definition, schema=schema)


def write_all_rows(
    spark: Any, table: ctfile.Table, plan: Any, sources: Sequence[SourceState], *, decision: RefreshDecision,
    definition: ctfile.DerivedDefinition | None = None, schema: Any = None,
) -> ctfile.CommitResult:
    """Commit the rows of the compiled ``plan`` over ``sources`` as one
    refresh of ``table`` that removes every old row: a ``REINITIALIZE``
    with a new ``definition`` and ``schema`` (:func:`write_replacement`),
    or ``auto``'s ``FULL`` by cost, an overwrite, with neither; then move
    the retention streams to the sources. Raises as
    :func:`write_replacement` does."""
    started = time.monotonic()
    ts = int(time.time() * 1000)
    views = run.SourceViews(spark, sources, False)
    rows = None
    try:
        sql = plan.full(views.names(), data_timestamp_ms=ts)
        views.register_used(sql.source_sql)
        # A new schema is the query's own; the table's keeps the types it was created with.
        query = spark.sql(sql.source_sql) if schema is not None else run.typed_source(spark, sql.source_sql, table)
        rows, expected = run.checked_source(spark, query, sql,  # computed once, invariant 1
                                            expected_rows=table.snapshot().num_records)
        rows_in = sum(s.table.snapshot(s.version).num_records for s in sources)
        info = run.refresh_info(decision, sources, data_timestamp_ms=ts, rows_in=rows_in, rows_out=expected.rows)
        with CtfileTable(spark, table).transaction(refresh=info, refresh_definition=definition) as tx:
            if schema is not None:
                tx.tx.replace_schema(schema)
            deleted = tx.tx.truncate()
            inserted = tx.insert(rows.drop(*sql.control_columns))["inserted"]
            tx.tx.update_refresh(rows_out=deleted + inserted, duration_ms=int(1000 * (time.monotonic() - started)))
    finally:
        if rows is not None:
            rows.unpersist()
        views.drop()
    run.hold_history(sources, table.table_id)
    assert tx.result is not None
    return tx.result


def recompiled(definition: ctfile.DerivedDefinition, plan: Any) -> ctfile.DerivedDefinition:
    """``definition`` as these plan rules compile it (SPEC §Derived tables,
    ``planVersion``): the same query, sources, mode and lag, with
    :data:`ctfile.derived.PLAN_VERSION` and ``plan``'s derivation columns
    (the lag as written: an older table's is kept even in another form)."""
    return ctfile.DerivedDefinition(
        query=definition.query, sources=definition.sources, refresh_mode=definition.refresh_mode,
        target_lag=definition.target_lag, plan_version=compiler.PLAN_VERSION,
        hidden_columns=tuple(name for name, _ in plan.hidden_columns),
    )


def compiled_by_other_rules(definition: ctfile.DerivedDefinition) -> bool:
    """Whether the table's derivation columns were made by plan rules other
    than these: its next refresh recompiles it (:func:`recompiled`)."""
    return definition.plan_version != compiler.PLAN_VERSION


def release_history(old: ctfile.DerivedDefinition, new: ctfile.DerivedDefinition, derived_table_id: str, *,
                    storage_options: Mapping | None) -> list[str]:
    """Drop the retention stream the table kept on each source that ``old``
    bound and ``new`` does not (by table id), so that a replaced definition
    no longer holds those tables' history; a source or stream already gone
    is skipped. Returns the URIs released."""
    kept = {b.table_id for b in new.sources}
    released = []
    for b in old.sources:
        if b.table_id in kept:
            continue
        try:
            source = ctfile.open_table(b.uri, storage_options=storage_options)
            if source.table_id == b.table_id:
                source.drop_stream(stream_name(derived_table_id))
                released.append(b.uri)
        except (ctfile.TableNotFoundError, ctfile.StreamNotFoundError):
            continue
    return released


def check_acyclic(table: ctfile.Table, bindings: Sequence[ctfile.SourceBinding], *,
                  storage_options: Mapping | None) -> None:
    """Refuse a new definition of ``table`` that reads ``table`` itself,
    directly or through the derived tables it reads (a refresh would read
    its own output: no frontier could hold).

    Raises
    ------
    InvalidArgumentError
        Naming the path from the new definition back to ``table``.
    """
    pending = [(b, (b.name,)) for b in bindings]
    seen: set[str] = set()
    while pending:
        b, path = pending.pop()
        if b.table_id == table.table_id:
            raise ctfile.InvalidArgumentError(
                f"sources: expected tables other than {table.uri} and not derived from it; found "
                f"{' -> '.join(path)} reading it, a cycle"
            )
        if b.table_id in seen:
            continue
        seen.add(b.table_id)
        upstream = ctfile.open_table(b.uri, storage_options=storage_options).derived
        pending.extend((u, (*path, u.name)) for u in (upstream.sources if upstream is not None else ()))
