"""The value objects of the derived-table compiler (contract C3 of issue 29,
SPEC §Derived tables): the Spark temp views a refresh reads
(:class:`ViewNames`, :class:`SourceViews`), what the compiler returns for
one refresh (:class:`RefreshSql`, its :class:`MergeClause` list), what its
delta reads (:class:`DeltaKind`) and why a plan is not incremental
(:class:`Blocker`).

Examples
--------
>>> views = SourceViews({"silver": ViewNames(new="v_new", old="v_old", delta="v_delta")})
>>> views["silver"].delta, list(views)
('v_delta', ['silver'])
>>> c = MergeClause(ClauseKind.MATCHED_DELETE, condition="s._ct_dt_op = 'delete'")
>>> str(c)
"WHEN MATCHED AND s._ct_dt_op = 'delete' THEN DELETE"
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from ctfile import InvalidArgumentError

#: The prefix of every derivation (hidden) column and of the compiler's own
#: working columns; user output names may not start with it.
RESERVED_PREFIX = "_ct_"
KEY_COLUMN = "_ct_dt_key"
ROWS_COLUMN = "_ct_dt_rows"
#: The MERGE source's control column (not a table column): 'upsert' or 'delete'.
OP_COLUMN = "_ct_dt_op"


class NonIncrementalPlanError(InvalidArgumentError):
    """``delta()`` was asked of a plan that has blockers (full refresh only)."""


@dataclass(frozen=True)
class ViewNames:
    """The Spark temp views of one source for one refresh: ``new``/``old``
    (the source at the new/old frontier with its columns plus
    ``METADATA$ROW_ID``) and ``delta`` (the minimum-delta change scan
    old+1..new with ``METADATA$ACTION``/``METADATA$ISUPDATE``/
    ``METADATA$ROW_ID``)."""

    new: str
    old: str
    delta: str

    def __post_init__(self) -> None:
        for name in ("new", "old", "delta"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"ViewNames.{name} must be a non-empty view name, found {value!r}")


class SourceViews(Mapping[str, ViewNames]):
    """Source name -> :class:`ViewNames`, as the executor registered them.
    A read-only mapping; a missing source is an
    :class:`~ctfile.InvalidArgumentError` naming the known ones.

    ``target``: a view of the derived table itself as the refresh found it
    (its output and derivation columns, at the old frontier), or None when
    the executor offers none. A rule that recomputes part of the result
    reads that part's old rows from it rather than from the sources' old
    state (the Dynamic Tables paper, section 5.5.1)."""

    def __init__(self, views: Mapping[str, ViewNames], *, target: str | None = None) -> None:
        if not isinstance(views, Mapping):
            raise InvalidArgumentError(f"SourceViews takes a mapping of source name to ViewNames, found {type(views).__name__}")
        bad = {k: type(v).__name__ for k, v in views.items() if not isinstance(v, ViewNames)}
        if bad:
            raise InvalidArgumentError(f"SourceViews values must be ViewNames, found {bad}")
        if target is not None and (not isinstance(target, str) or not target):
            raise InvalidArgumentError(f"SourceViews target must be a non-empty view name or None, found {target!r}")
        self._views = dict(views)
        self._target = target

    @property
    def target(self) -> str | None:
        """The derived table's view (see the class docstring), or None."""
        return self._target

    def __getitem__(self, name: str) -> ViewNames:
        if name not in self._views:
            raise InvalidArgumentError(f"no views for source {name!r}; views were given for {sorted(self._views)}")
        return self._views[name]

    def __contains__(self, name: object) -> bool:
        return name in self._views

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __repr__(self) -> str:
        return f"SourceViews({self._views!r}, target={self.target!r})"


class DeltaKind(enum.Enum):
    """What a plan's delta reads besides the change scan, the cost of an
    incremental refresh that does not grow with the change (SPEC §Derived
    tables, incremental rules; ``refresh_mode="auto"`` weighs it,
    :mod:`ctfile.spark.derived_cost`)."""

    #: Row-level plans and linear aggregates: the change rows, joined with
    #: the other sources' states through the plan's inner joins.
    CHANGE = "change"
    #: Aggregates that recompute the groups the change touches: the new
    #: state of every source, restricted to those groups after the scan
    #: (with HAVING, the groups held too: from the derived table when offered).
    GROUPS = "groups"
    #: Outer, semi and anti joins: the new and the old states of every
    #: source, restricted to the join keys the change touches after the scan.
    JOIN_KEYS = "join keys"
    #: Windows: the new state of every source (restricted to the partitions
    #: the change touches after the scan), those partitions' rows windowed,
    #: and their old rows read from the derived table.
    PARTITIONS = "partitions"
    #: A deduplication over an interval that only appended: the appended rows
    #: ranked with the derived table's rows of their partitions; no source state.
    APPENDED_TOP_ROWS = "appended top rows"


class ClauseKind(enum.Enum):
    """The MergeBuilder call a :class:`MergeClause` makes."""

    MATCHED_UPDATE = "when_matched_update"
    MATCHED_DELETE = "when_matched_delete"
    NOT_MATCHED_INSERT = "when_not_matched_insert"
    NOT_MATCHED_BY_SOURCE_DELETE = "when_not_matched_by_source_delete"


_CLAUSE_TEXT = {
    ClauseKind.MATCHED_UPDATE: ("WHEN MATCHED", "UPDATE SET"),
    ClauseKind.MATCHED_DELETE: ("WHEN MATCHED", "DELETE"),
    ClauseKind.NOT_MATCHED_INSERT: ("WHEN NOT MATCHED", "INSERT"),
    ClauseKind.NOT_MATCHED_BY_SOURCE_DELETE: ("WHEN NOT MATCHED BY SOURCE", "DELETE"),
}


@dataclass(frozen=True)
class MergeClause:
    """One clause of the refresh MERGE ``ON t._ct_dt_key = s._ct_dt_key``.

    ``condition`` is Spark SQL over ``t.`` (the derived table) and ``s.``
    (the MERGE source), or None; ``assignments`` are ``(table column, Spark
    SQL expression)`` pairs: the SET list of an update, the VALUES of an
    insert (every table column, visible and derivation)."""

    kind: ClauseKind
    condition: str | None = None
    assignments: tuple[tuple[str, str], ...] = ()

    def apply(self, builder: Any) -> Any:
        """Add this clause to a ``ctfile.spark`` MergeBuilder (Spark SQL
        strings); returns the new builder."""
        method = getattr(builder, self.kind.value)
        if self.kind in (ClauseKind.MATCHED_UPDATE, ClauseKind.NOT_MATCHED_INSERT):
            key = "set" if self.kind is ClauseKind.MATCHED_UPDATE else "values"
            return method(**{key: dict(self.assignments)}, condition=self.condition)
        return method(condition=self.condition)

    def __str__(self) -> str:
        when, action = _CLAUSE_TEXT[self.kind]
        cond = f" AND {self.condition}" if self.condition else ""
        values = ", ".join(f"{k} = {v}" for k, v in self.assignments)
        return f"{when}{cond} THEN {action}" + (f" {values}" if values else "")


@dataclass(frozen=True)
class RefreshSql:
    """One refresh: ``source_sql`` is one Spark SQL query over the views whose
    rows are the MERGE source (output columns, then derivation columns, then
    ``control_columns``; at most one row per ``_ct_dt_key``); ``clauses``
    merge it into the derived table (aliases ``t`` and ``s``).

    ``control_columns`` (``_ct_dt_op``: 'upsert' or 'delete') are not table
    columns: the clause conditions read them, so the executor must keep them
    in the source (cast the other columns to the table's types)."""

    source_sql: str
    clauses: tuple[MergeClause, ...]
    control_columns: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return "\n".join([self.source_sql, *map(str, self.clauses)])


@dataclass(frozen=True)
class Blocker:
    """Why an operator has no incremental rule (the plan refreshes in full)."""

    operator: str
    reason: str

    def __str__(self) -> str:
        return f"{self.operator}: {self.reason}"
