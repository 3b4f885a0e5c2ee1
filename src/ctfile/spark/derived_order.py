"""The order and the frontier of a refresh of several derived tables at
once (:func:`ctfile.spark.derived.refresh_all`, and the scheduler,
:mod:`ctfile.spark.derived_schedule`): each table after the tables of the
set it reads, every source outside the set read at ONE version, so two
paths from one source (a diamond) agree (SPEC §Derived tables, delayed view
semantics); and, for one table, the versions its upstream derived sources
recorded for the tables they read (:func:`upstream_pins`).

The tables are :class:`ctfile.spark.derived.DerivedTable` objects (this
module needs their ``table``, ``definition``, ``storage_options`` and
``refresh(pins=)``, so it does not import their module).

>>> dependency_ids({})
[]
"""

from __future__ import annotations

import functools
import graphlib
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import ctfile
from ctfile.spark.derived_sources import changes_rows


def refresh_each(tables: Iterable[Any]) -> Iterator[tuple[Any, Callable[[], Any]]]:
    """``refresh_all`` one table at a time, for a caller that times, logs or
    stops between refreshes: yields each table in dependency order with the
    step that refreshes it at the set's frontier and records the version it
    left for the tables after it (a step returns the table's
    ``RefreshResult``). A step not taken leaves its table out: those after
    read it at its latest version. The order and the outside sources'
    versions are fixed when the first pair is asked for.

    Raises
    ------
    InvalidArgumentError
        The set's definitions read each other in a cycle.
    """
    by_id = {t.table.table_id: t for t in tables}
    order = dependency_ids(by_id)
    pins = base_pins(by_id.values())

    def step(t: Any) -> Any:
        result = t.refresh(pins=pins)
        pins[t.table.table_id] = t.table.refresh().version
        return result

    for table_id in order:
        yield by_id[table_id], functools.partial(step, by_id[table_id])


def dependency_order(tables: Iterable[Any]) -> list[Any]:
    """``tables`` in the order :func:`refresh_each` refreshes them: each after
    the tables of the set it reads (one per table id).

    Raises
    ------
    InvalidArgumentError
        The set's definitions read each other in a cycle.
    """
    by_id = {t.table.table_id: t for t in tables}
    return [by_id[table_id] for table_id in dependency_ids(by_id)]


def dependency_ids(by_id: Mapping[str, Any]) -> list[str]:
    """The table ids of ``by_id`` (table id -> table), each after those of
    the tables it reads.

    Raises
    ------
    InvalidArgumentError
        The definitions read each other in a cycle.
    """
    graph = {tid: {b.table_id for b in t.definition.sources if b.table_id in by_id} for tid, t in by_id.items()}
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        raise ctfile.InvalidArgumentError(f"derived tables read each other in a cycle: {e.args[1]}") from None


def base_pins(tables: Iterable[Any]) -> dict[str, int]:
    """The latest version of every source outside the set, read once."""
    tables = list(tables)
    inside = {t.table.table_id for t in tables}
    pins: dict[str, int] = {}
    for t in tables:
        for b in t.definition.sources:
            if b.table_id not in inside and b.table_id not in pins:
                pins[b.table_id] = ctfile.open_table(b.uri, storage_options=t.storage_options).version
    return pins


def upstream_pins(definition: ctfile.DerivedDefinition, *, storage_options: Mapping | None) -> dict[str, int]:
    """Delayed view semantics across derived tables: a source that an
    upstream derived source also reads is read at the version the
    upstream's frontier recorded, so the two agree. Two upstreams that
    recorded versions of one table between which no commit changed rows
    (a stream's creation, a compaction) agree: the later one is read.

    Raises
    ------
    InvalidArgumentError
        Two upstream sources recorded versions of one table with a change
        between them: refresh them together (:func:`ctfile.spark.derived.refresh_all`).
    """
    return bindings_pins(definition.sources, storage_options)


def bindings_pins(bindings: Sequence[ctfile.SourceBinding], storage_options: Mapping | None) -> dict[str, int]:
    """:func:`upstream_pins` of the sources ``bindings``."""
    recorded: dict[str, list[tuple[int, str, str]]] = {}
    for b in bindings:
        upstream = ctfile.open_table(b.uri, storage_options=storage_options).derived
        for v in upstream.frontier if upstream is not None else ():
            recorded.setdefault(v.table_id, []).append((v.version, b.name, upstream.source(v.name).uri))
    return {table_id: _agreed_version(table_id, seen, storage_options) for table_id, seen in recorded.items()}


def _agreed_version(table_id: str, seen: list[tuple[int, str, str]], storage_options: Mapping | None) -> int:
    """The version of table ``table_id`` that every upstream's record agrees with."""
    (low, low_name, uri), (high, high_name, _) = min(seen), max(seen)
    if low == high:
        return high
    table = ctfile.open_table(uri, storage_options=storage_options)
    between = [e for e in table.history(limit=table.version - low) if low < e.version <= high]
    if not any(changes_rows(e) for e in between):
        return high
    raise ctfile.InvalidArgumentError(
        f"sources {low_name} and {high_name} read table {table_id} at versions {low} and {high}, with changes "
        f"between them; refresh them together with ctfile.spark.derived.refresh_all"
    )
