"""Spark SQL text for the compiler's plans (SPEC §Derived tables): a block
with its source tables replaced by the refresh's temp views, the time
functions bound to the refresh's data timestamp, and the small pieces every
rule shares (quoting, the null-safe "values differ" test, the clause lists).

Examples
--------
>>> quote("order")
'`order`'
>>> differ(["a", "b"])
'NOT (t.`a` <=> s.`a` AND t.`b` <=> s.`b`)'
>>> import sqlglot
>>> bind_time(sqlglot.parse_one("SELECT now() AS n, current_date() AS d", read="spark"), 86400000).sql(dialect="spark")
'SELECT TIMESTAMP_MILLIS(86400000) AS n, TO_DATE(TIMESTAMP_MILLIS(86400000)) AS d'
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import sqlglot
from sqlglot import exp

from ctfile import InvalidArgumentError
from ctfile.derived.model import KEY_COLUMN, OP_COLUMN, ClauseKind, MergeClause

ROW_ID = "METADATA$ROW_ID"
ACTION = "METADATA$ACTION"
#: The ``meta`` key of a JOIN item that carries a WHERE conjunct over its
#: own table: an object whose ``condition(view)`` is that conjunct (Spark
#: SQL) reading the view the join reads (``outer_joins.NotIn``: NOT IN's
#: null-aware state of its subquery).
JOIN_FILTER = "ctfile_join_filter"


def quote(name: str) -> str:
    """``name`` as a Spark identifier (backquoted)."""
    return "`" + name.replace("`", "``") + "`"


def check_timestamp(data_timestamp_ms: int) -> int:
    if isinstance(data_timestamp_ms, bool) or not isinstance(data_timestamp_ms, int) or data_timestamp_ms < 0:
        raise InvalidArgumentError(f"data_timestamp_ms must be a non-negative int (ms since the epoch), found {data_timestamp_ms!r}")
    return data_timestamp_ms


def _time_literal(node: exp.Expression, ms: int) -> exp.Expression | None:
    stamp = exp.Anonymous(this="TIMESTAMP_MILLIS", expressions=[exp.Literal.number(ms)])
    name = node.this.lower() if isinstance(node, exp.Anonymous) and isinstance(node.this, str) else None
    if isinstance(node, exp.Column) and not node.table and node.name.lower() in ("current_timestamp", "current_date"):
        name = node.name.lower()
    if isinstance(node, (exp.CurrentTimestamp, exp.Localtimestamp)) or name in ("now", "current_timestamp", "localtimestamp"):
        return stamp
    if isinstance(node, exp.CurrentDate) or name == "current_date":
        # to_date in the session time zone, as current_date() itself is.
        return exp.Anonymous(this="TO_DATE", expressions=[stamp])
    return None


def bind_time(node: exp.Expression, ms: int) -> exp.Expression:
    """A copy of ``node`` whose ``current_timestamp()``/``now()``/
    ``current_date()`` read the refresh's data timestamp (an instant, so the
    session time zone matters only where it does for the functions)."""
    return node.copy().transform(lambda n: _time_literal(n, ms) or n)


def swapped(select: exp.Select, views: Sequence[str]) -> exp.Select:
    """A copy of ``select`` whose FROM/JOIN source tables (in order) read
    ``views`` instead, each keeping its alias (its name when it had none),
    with the WHERE conjunct of each join that carries one (:data:`JOIN_FILTER`)
    over its join's view."""
    copy = select.copy()
    joins = list(copy.args.get("joins") or ())
    tables = [copy.args["from_"].this] + [j.this for j in joins]
    for table, view in zip(tables, views, strict=True):
        alias = table.alias_or_name
        table.set("this", exp.to_identifier(view, quoted=True))
        table.set("db", None)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return with_join_filters(copy, {i: view for i, view in enumerate(views[1:])})


def with_join_filters(select: exp.Select, views: dict[int, str]) -> exp.Select:
    """``select`` with the WHERE conjunct of each join ``i`` that carries
    one (:data:`JOIN_FILTER`), reading ``views[i]``; unchanged without."""
    joins = select.args.get("joins") or ()
    extra = [j.meta[JOIN_FILTER].condition(views[i]) for i, j in enumerate(joins) if JOIN_FILTER in j.meta]
    return select.where(*extra, dialect="spark") if extra else select


def block_sql(select: exp.Select, views: Sequence[str], items: Iterable[str], *, ms: int,
              aggregate: bool = False) -> str:
    """``SELECT <items> FROM <views as aliases> [JOIN ...] [WHERE ...]`` of
    a block, with its GROUP BY, HAVING and DISTINCT only when ``aggregate``."""
    copy = swapped(select, views)
    copy.set("expressions", [sqlglot.parse_one(i, read="spark") for i in items])
    if not aggregate:
        copy.set("group", None)
        copy.set("distinct", None)
        copy.set("having", None)
    return bind_time(copy, ms).sql(dialect="spark")


def expression_sql(node: exp.Expression, ms: int) -> str:
    return bind_time(node, ms).sql(dialect="spark")


def column(alias: str, name: str) -> str:
    return f"{quote(alias)}.{quote(name)}"


def differ(columns: Iterable[str]) -> str:
    """True when any column of t and s differs, null-safely (NULL equals
    NULL; -0.0 equals 0.0, as ``<=>`` compares)."""
    return "NOT (" + " AND ".join(f"t.{quote(c)} <=> s.{quote(c)}" for c in columns) + ")"


def op_is(op: str) -> str:
    return f"s.{quote(OP_COLUMN)} = '{op}'"


def upsert_clauses(columns: Sequence[str], *, by_source_delete: bool) -> tuple[MergeClause, ...]:
    """The clauses of a source that carries whole rows (``columns``: every
    table column but the key) with an op column; ``by_source_delete``: a full
    refresh, with no op column, deletes the table rows it does not produce.
    An update happens only when a value differs, so an unchanged row keeps
    its row id and makes no change row."""
    values = tuple((c, f"s.{quote(c)}") for c in columns)
    inserted = ((KEY_COLUMN, f"s.{quote(KEY_COLUMN)}"),) + values
    if by_source_delete:
        return (
            MergeClause(ClauseKind.MATCHED_UPDATE, differ(columns), values),
            MergeClause(ClauseKind.NOT_MATCHED_INSERT, None, inserted),
            MergeClause(ClauseKind.NOT_MATCHED_BY_SOURCE_DELETE),
        )
    return (
        MergeClause(ClauseKind.MATCHED_DELETE, op_is("delete")),
        MergeClause(ClauseKind.MATCHED_UPDATE, f"{op_is('upsert')} AND {differ(columns)}", values),
        MergeClause(ClauseKind.NOT_MATCHED_INSERT, op_is("upsert"), inserted),
    )


def union_all(parts: Iterable[str]) -> str:
    return "\nUNION ALL\n".join(f"({p})" for p in parts)


def telescoped(occurrences: Sequence[tuple[str, str]], view_of: Callable[[str, str], str], term: int) -> list[str]:
    """The views of term ``term`` of the join delta (SPEC §Derived tables,
    "Joins"): occurrences before it at the new state, it as its delta, the
    ones after it at the old state: Δ(X1⋈…⋈Xn) = Σi X1'…X(i-1)' ⋈ ΔXi ⋈ X(i+1)…Xn."""
    return [view_of(source, "new" if i < term else "delta" if i == term else "old")
            for i, (source, _) in enumerate(occurrences)]
