"""Validation of a derived table's query text (SPEC §Derived tables): one
Spark SQL SELECT (sqlglot, Spark dialect) reading only the given sources,
with unique output names that do not start with ``_ct_``.

Every failure is an :class:`~ctfile.InvalidArgumentError` naming what was
expected and what was found.

Examples
--------
>>> tree = parse_statement("SELECT a FROM s", sources=("s",))
>>> output_names(tree, sources=("s",), columns=None)
('a',)
>>> parse_statement("SELECT a FROM s JOIN x ON s.a = x.a", sources=("s",))
Traceback (most recent call last):
...
ctfile.format.errors.InvalidArgumentError: the query reads table 'x', which is not a source; the sources are ['s']
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ctfile import InvalidArgumentError
from ctfile.derived.model import RESERVED_PREFIX

#: The statement types that are a query (a SELECT or a set operation of them).
_QUERY_TYPES = (exp.Select, exp.SetOperation, exp.Subquery)


def check_sources(sources: Sequence[str]) -> tuple[str, ...]:
    """The source names as a tuple, checked: non-empty, strings, unique."""
    if isinstance(sources, str) or not isinstance(sources, Sequence) or not sources:
        raise InvalidArgumentError(f"sources must be a non-empty sequence of source names, found {sources!r}")
    bad = [s for s in sources if not isinstance(s, str) or not s]
    if bad:
        raise InvalidArgumentError(f"source names must be non-empty strings, found {bad!r}")
    lowered = [s.lower() for s in sources]
    if len(set(lowered)) != len(lowered):
        raise InvalidArgumentError(f"source names must be unique (case-insensitively), found {list(sources)!r}")
    return tuple(sources)


def parse_statement(query: str, *, sources: Sequence[str]) -> exp.Expression:
    """The one SELECT statement of ``query``, its tables checked against
    ``sources`` (names defined by the query's own WITH are allowed)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError(f"the query must be non-empty Spark SQL text, found {query!r}")
    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except SqlglotError as e:
        raise InvalidArgumentError(f"the query is not valid Spark SQL: {e}") from None
    if len(statements) != 1:
        raise InvalidArgumentError(f"the query must be one SELECT statement, found {len(statements)} statements")
    tree = statements[0]
    if not isinstance(tree, _QUERY_TYPES):
        raise InvalidArgumentError(f"the query must be a SELECT statement, found {tree.key.upper()}")
    _check_tables(tree, sources)
    return tree


def cte_names(tree: exp.Expression) -> set[str]:
    """The lower-cased names the query defines with WITH."""
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _check_tables(tree: exp.Expression, sources: Sequence[str]) -> None:
    known = {s.lower() for s in sources}
    local = cte_names(tree)
    for table in tree.find_all(exp.Table):
        if not table.name:
            continue  # a table-valued function: planned (and blocked) elsewhere
        qualified = ".".join(p.name for p in table.parts)
        if table.args.get("db") is not None or table.args.get("catalog") is not None:
            raise InvalidArgumentError(
                f"the query reads table {qualified!r}, which is not a source; the sources are {sorted(sources)}")
        if table.name.lower() not in known | local:
            raise InvalidArgumentError(
                f"the query reads table {table.name!r}, which is not a source; the sources are {sorted(sources)}")
        if table.args.get("version") is not None:
            raise InvalidArgumentError(
                f"the query reads {table.sql(dialect='spark')!r}: a derived table reads its sources at the refresh "
                "frontier, so time travel (VERSION/TIMESTAMP AS OF) is not allowed")


def first_select(tree: exp.Expression) -> exp.Select:
    """The SELECT that names the output columns (the leftmost branch)."""
    node = tree
    while not isinstance(node, exp.Select):
        node = node.this if isinstance(node, (exp.SetOperation, exp.Subquery)) else node.unnest()
        if node is None:
            raise InvalidArgumentError("the query has no SELECT list")
    return node


def source_tables(select: exp.Select) -> list[exp.Expression]:
    """The FROM item and the JOIN items of ``select``, in order."""
    items = []
    if select.args.get("from_") is not None:
        items.append(select.args["from_"].this)
    items.extend(j.this for j in select.args.get("joins") or ())
    return items


def star_columns(select: exp.Select, item: exp.Expression, *, sources: Sequence[str],
                 columns: Mapping[str, Sequence[str]] | None) -> list[exp.Column]:
    """The columns a ``*`` or ``alias.*`` select item stands for, qualified
    by each source occurrence's alias; needs ``columns`` (the compiler has no
    schemas)."""
    text = item.sql(dialect="spark")
    if columns is None:
        raise InvalidArgumentError(
            f"the query selects {text}: pass columns={{source: [column names]}} to compile_query so it can be expanded")
    wanted = item.table.lower() if isinstance(item, exp.Column) else None
    found: list[exp.Column] = []
    for table in _result_tables(select):
        if not isinstance(table, exp.Table) or not table.name:
            raise InvalidArgumentError(f"the query selects {text} over a subquery or function: list the columns")
        alias = table.alias_or_name
        if wanted is not None and alias.lower() != wanted:
            continue
        source = _source_name(table.name, sources)
        if source is None or source not in columns:
            raise InvalidArgumentError(
                f"the query selects {text} but columns has no entry for {table.name!r}; it has {sorted(columns or {})}")
        found.extend(exp.column(c, table=alias, quoted=True) for c in columns[source])
    if not found:
        raise InvalidArgumentError(f"the query selects {text}, which matches no source occurrence")
    return found


def _result_tables(select: exp.Select) -> list[exp.Expression]:
    """The FROM and JOIN items whose columns are in the join's result: a
    LEFT SEMI or LEFT ANTI JOIN's table only decides which rows stay."""
    hidden = {id(j.this) for j in select.args.get("joins") or ()
              if (j.args.get("kind") or "").upper() in ("SEMI", "ANTI")}
    return [t for t in source_tables(select) if id(t) not in hidden]


def _source_name(name: str, sources: Sequence[str]) -> str | None:
    return next((s for s in sources if s.lower() == name.lower()), None)


def expand_stars(select: exp.Select, *, sources: Sequence[str],
                 columns: Mapping[str, Sequence[str]] | None) -> exp.Select:
    """A copy of ``select`` whose ``*`` items are replaced by the columns
    they stand for (unchanged when it has none)."""
    if not any(_is_star(e) for e in select.expressions):
        return select
    copy = select.copy()
    expanded: list[exp.Expression] = []
    for item in copy.expressions:
        expanded.extend(star_columns(copy, item, sources=sources, columns=columns) if _is_star(item) else [item])
    copy.set("expressions", expanded)
    return copy


def _is_star(item: exp.Expression) -> bool:
    return isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))


def item_name(item: exp.Expression, position: int) -> str:
    """The output name of one select item: its alias or its column name; an
    unnamed computed item is an error (Spark's generated names are not a
    stable contract)."""
    if isinstance(item, exp.Alias):
        return item.alias
    if isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
        return item.name
    raise InvalidArgumentError(
        f"output column {position + 1} ({item.sql(dialect='spark')}) has no name: give it one with AS <name>")


def output_names(tree: exp.Expression, *, sources: Sequence[str],
                 columns: Mapping[str, Sequence[str]] | None) -> tuple[str, ...]:
    """The query's output column names, checked: unique (case-insensitively,
    as Spark resolves them) and not starting with ``_ct_``."""
    select = expand_stars(first_select(tree), sources=sources, columns=columns)
    names = tuple(item_name(item, i) for i, item in enumerate(select.expressions))
    if not names:
        raise InvalidArgumentError(f"the query must select at least one column, found {tree.sql(dialect='spark')!r}")
    seen: dict[str, str] = {}
    for name in names:
        if name.lower().startswith(RESERVED_PREFIX):
            raise InvalidArgumentError(
                f"output column {name!r} starts with {RESERVED_PREFIX!r}, which is reserved for derivation columns")
        if name.lower() in seen:
            raise InvalidArgumentError(f"output column names must be unique; {name!r} appears twice in {list(names)}")
        seen[name.lower()] = name
    return names
