"""The writer's side of derived tables (SPEC §Derived tables).

A derived table's rows change only in a *refresh* transaction: one commit
that holds the rows, the ``metadata`` with the new frontier (and, for a
``REINITIALIZE``, the new definition) and ``commitInfo.refresh``. Every other
write that would change its rows or schema is refused here, before anything
is written, with :class:`~ctfile.format.errors.DerivedTableError` naming the
``derivedTables`` feature; maintenance that keeps the rows (compaction,
recluster, vacuum, properties) is not.

Examples
--------
>>> from ctfile.format.derived import DerivedDefinition, SourceBinding, SourceVersion, RefreshInfo
>>> d = DerivedDefinition("SELECT id FROM src", (SourceBinding("src", "t-1", "/src"),), "full", None, 1,
...                       ("_ct_dt_key",))
>>> r = RefreshInfo("FULL", "first", (SourceVersion("src", "t-1", 4, 9),), 1000, 3, 3)
>>> refreshed_definition(d, r, None).frontier[0].version
4
>>> is_recorded(refreshed_definition(d, r, None), r)
True
"""

from __future__ import annotations

from dataclasses import replace

from ctfile.format.actions import Metadata
from ctfile.format.derived import (
    FEATURE_DERIVED_TABLES,
    DerivedDefinition,
    RefreshInfo,
    check_derived_schema,
    same_frontier,
)
from ctfile.format.errors import DerivedTableError, InvalidArgumentError

__all__ = ["altered_metadata", "check_refresh", "is_recorded", "refresh_metadata", "refreshed_definition",
           "refuse_outside_refresh"]


def refuse_outside_refresh(metadata: Metadata, what: str, uri: str) -> None:
    """DerivedTableError if ``metadata`` is a derived table's: ``what`` (a
    statement that changes rows or the schema) may run only in a refresh."""
    if metadata.derived is not None:
        raise DerivedTableError(
            f"{what} on {uri}: it is a derived table (protocol feature {FEATURE_DERIVED_TABLES}), whose rows "
            f"change only in a refresh transaction (transaction(refresh=RefreshInfo(...))); found {what} outside "
            f"one, nothing was written (SPEC §Derived tables)"
        )


def check_refresh(metadata: Metadata, refresh: object, definition: object, uri: str) -> None:
    """Refuse a refresh of a table that is not derived, or a ``refresh`` that
    is not a :class:`RefreshInfo`, or a ``definition`` that is not a
    :class:`DerivedDefinition`, or a frontier that does not name exactly the
    sources of the definition the commit records."""
    if metadata.derived is None:
        raise DerivedTableError(
            f"a refresh of {uri}: expected a derived table (protocol feature {FEATURE_DERIVED_TABLES}, "
            f"metadata.derived); found a table that is not derived, nothing was written (SPEC §Derived tables)"
        )
    _check_types(refresh, definition)
    _check_bound(refresh, definition if definition is not None else metadata.derived)


def _check_types(refresh: object, definition: object) -> None:
    if not isinstance(refresh, RefreshInfo):
        raise InvalidArgumentError(f"refresh: expected a ctfile.RefreshInfo; found {type(refresh).__name__}")
    if definition is not None and not isinstance(definition, DerivedDefinition):
        raise InvalidArgumentError(
            f"refresh_definition: expected a ctfile.DerivedDefinition or None; found {type(definition).__name__}"
        )


def _check_bound(refresh: RefreshInfo, target: DerivedDefinition) -> None:
    """The frontier names each source of ``target`` once, with its bound table id."""
    names = sorted(v.name for v in refresh.frontier)
    if names != sorted(target.source_names):
        raise InvalidArgumentError(
            f"refresh.frontier: expected one item per source {sorted(target.source_names)}; found {names}"
        )
    for v in refresh.frontier:
        bound = target.source(v.name).table_id
        if v.table_id != bound:
            raise InvalidArgumentError(f"refresh.frontier[{v.name}].tableId: expected {bound!r}; found {v.table_id!r}")


def refreshed_definition(
    current: DerivedDefinition, refresh: RefreshInfo, definition: DerivedDefinition | None,
) -> DerivedDefinition:
    """The ``derived`` a refresh commit records: ``definition`` (or the
    current one) at the refresh's frontier and data timestamp."""
    target = definition if definition is not None else current
    return target.with_frontier(tuple(refresh.frontier), refresh.data_timestamp)


def is_recorded(current: DerivedDefinition, refresh: RefreshInfo) -> bool:
    """Whether ``refresh`` would record what ``current`` already holds (same
    frontier, same data timestamp): such a refresh commits nothing."""
    return same_frontier(current.frontier, refresh.frontier) and current.data_timestamp == refresh.data_timestamp


def refresh_metadata(
    metadata: Metadata, refresh: RefreshInfo, definition: DerivedDefinition | None, uri: str,
) -> Metadata:
    """``metadata`` (the transaction's, schema changes included) with the
    derived definition the refresh commit records; DerivedTableError if the
    schema no longer holds the definition's derivation columns."""
    assert metadata.derived is not None  # check_refresh ran first
    new = refreshed_definition(metadata.derived, refresh, definition)
    try:
        check_derived_schema(new, metadata.schema)
    except InvalidArgumentError as e:
        raise DerivedTableError(f"a refresh of {uri} would commit a schema its definition does not fit: {e}") from None
    return replace(metadata, derived=new)


def altered_metadata(metadata: Metadata, refresh_mode: object, target_lag: object, uri: str) -> Metadata | None:
    """``metadata`` with ``derived.refreshMode`` and ``derived.targetLag``
    set, all else kept: what an alter commit records (SPEC §Derived tables,
    changing a definition); None when neither changes (the commit then
    commits nothing).

    Raises
    ------
    DerivedTableError
        The table is not derived.
    InvalidArgumentError
        An unknown mode, or a lag that is neither None nor a non-empty string.

    Examples
    --------
    >>> from ctfile.format.actions import Metadata
    >>> from ctfile.format.derived import SourceBinding
    >>> from ctfile.format.schema import schema_from_arrow
    >>> import pyarrow as pa
    >>> d = DerivedDefinition("SELECT id FROM src", (SourceBinding("src", "t-1", "/src"),), "auto", None, 1,
    ...                       ("_ct_dt_key",))
    >>> schema = schema_from_arrow(pa.schema([("id", pa.int64()), ("_ct_dt_key", pa.string())]),
    ...                            derived_columns=("_ct_dt_key",))
    >>> md = Metadata("t-2", schema, 0, derived=d)
    >>> altered_metadata(md, "full", "1 hour", "/t").derived.refresh_mode.value
    'full'
    >>> altered_metadata(md, "auto", None, "/t") is None
    True
    """
    if metadata.derived is None:
        raise DerivedTableError(
            f"ALTER DERIVED of {uri}: expected a derived table (protocol feature {FEATURE_DERIVED_TABLES}, "
            f"metadata.derived); found a table that is not derived, nothing was written (SPEC §Derived tables)"
        )
    new = metadata.derived.altered(refresh_mode=refresh_mode, target_lag=target_lag)
    return None if new == metadata.derived else replace(metadata, derived=new)
