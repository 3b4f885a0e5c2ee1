"""Window functions refreshed by partition (SPEC §Derived tables,
"Incremental rules: windows"; the Dynamic Tables paper, section 5.5.1).

A *window block* is one SELECT over a source occurrence (or inner
equi-joins of several) whose select list or QUALIFY holds window functions
that all share one PARTITION BY: ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD,
first_value/last_value (over a ROWS frame) and count/sum/avg/min/max OVER
(PARTITION BY .. [ORDER BY ..] [ROWS|RANGE frame]). The filtering-subquery form ``SELECT ..
FROM (SELECT .., ROW_NUMBER() OVER (..) AS rn FROM src WHERE ..) AS t WHERE
rn = 1`` (or the same through a one-use WITH) is rewritten to that block,
with the outer WHERE as its QUALIFY (:func:`normalised`).

A result row is one input row, so its key is the row-level key (the source
rows' ``METADATA$ROW_ID`` joined with ``:``). A refresh recomputes only the
partitions the delta touches: their PARTITION BY values are taken from
every image of the join's delta terms (a row updated out of the WHERE still
marks its old partition through its DELETE image); the new rows of those
partitions (the block over ``new``, restricted null-safely to them) that
differ from their old image are upserted, and their old keys that are not
among the new keys are deleted.

Ties: where a function's value depends on the order of peers (ROW_NUMBER,
LAG, LEAD, ROWS frames) the window's ORDER BY is extended by each
occurrence's ``METADATA$ROW_ID``, in the full and the delta query alike,
so a refresh equals a recomputation; RANK, DENSE_RANK and RANGE frames
give peers one value and are left as written (first/last values need a
ROWS frame). The table thus holds the query with ties broken by row id.

Examples
--------
>>> import sqlglot
>>> select = sqlglot.parse_one("SELECT id FROM s QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) = 1", read="spark")
>>> tie_broken(select, (("s", "s"),)).args["qualify"].this.sql(dialect="spark")
'ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, `s`.`METADATA$ROW_ID`) = 1'
>>> tree = sqlglot.parse_one("SELECT id FROM (SELECT id, RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM s) AS t WHERE r <= 2", read="spark")
>>> block = normalised(tree, sources=("s",), columns=None)
>>> [e.sql(dialect="spark") for e in block.expressions], block.args["qualify"].this.sql(dialect="spark")
(['id AS id'], 'RANK() OVER (PARTITION BY k ORDER BY v) <= 2')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import sqlglot
from sqlglot import exp

from ctfile import InvalidArgumentError
from ctfile.derived.model import KEY_COLUMN, OP_COLUMN, Blocker, RefreshSql, SourceViews
from ctfile.derived.parsing import expand_stars, item_name
from ctfile.derived.render import ACTION, ROW_ID, block_sql, column, quote, telescoped, union_all, upsert_clauses

#: The rule ``explain()`` prints for the window operator.
RULE = ("partitions touched by the delta are recomputed from the new state (-old rows of those partitions, "
        "+new rows); ties broken by row id")

#: Functions whose value depends on the order of peers: their ORDER BY gets the row id.
_ORDER_DEPENDENT = (exp.RowNumber, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.First, exp.Last)
#: Functions whose peers share one value (ties are semantic).
_PEER_RANKS = (exp.Rank, exp.DenseRank)
_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
#: Functions that read one row of the frame: under a RANGE frame (the
#: default with ORDER BY) tied rows share a frame whose order Spark leaves
#: open, and a row id in the ORDER BY would split that frame.
_FRAME_ROW = (exp.FirstValue, exp.LastValue, exp.First, exp.Last)
_QUALIFY = "`_ct_q`"


@dataclass(frozen=True, eq=False)
class WindowSpec:
    """The windows of a block: their shared PARTITION BY expressions and
    the window calls (select items and QUALIFY), as written."""

    partition: tuple[exp.Expression, ...]
    calls: tuple[exp.Window, ...]
    #: A deduplication's ORDER BY (:func:`_top_order`), else None.
    top_order: tuple[exp.Ordered, ...] | None = None

    def describe(self, select: exp.Select) -> str:
        """The explain detail: partition, window calls, QUALIFY."""
        keys = ", ".join(p.sql(dialect="spark") for p in self.partition)
        qualify = select.args.get("qualify")
        calls = ", ".join(dict.fromkeys(c.sql(dialect="spark") for c in self.calls))
        return f"PARTITION BY {keys}: {calls}" + (f" QUALIFY {qualify.this.sql(dialect='spark')}" if qualify else "")


def has_windows(select: exp.Select) -> bool:
    """Whether ``select`` (this block, not its subqueries) holds a window
    function or a QUALIFY."""
    return select.args.get("qualify") is not None or any(
        isinstance(n, exp.Window) for item in select.expressions for n in item.walk())


def _is_rows_frame(window: exp.Window) -> bool:
    spec = window.args.get("spec")
    return spec is not None and str(spec.args.get("kind") or "").upper() == "ROWS"


def _is_order_dependent(window: exp.Window) -> bool:
    rows_frame = _is_rows_frame(window)
    return isinstance(window.this, _ORDER_DEPENDENT) or (isinstance(window.this, _AGGREGATES) and rows_frame)


def _tie_break(window: exp.Window, occurrences: Sequence[tuple[str, str]]) -> exp.Window:
    if not _is_order_dependent(window):
        return window
    ids = [exp.Ordered(this=sqlglot.parse_one(column(alias, ROW_ID), read="spark"), nulls_first=True) for _, alias in occurrences]
    order = window.args.get("order")
    copy = window.copy()
    copy.set("order", exp.Order(expressions=[*(order.expressions if order is not None else []), *ids]))
    return copy


def tie_broken(select: exp.Select, occurrences: Sequence[tuple[str, str]]) -> exp.Select:
    """A copy of ``select`` whose order-dependent windows order their ties
    by each occurrence's ``METADATA$ROW_ID`` (RANK, DENSE_RANK, RANGE frames
    and whole-partition aggregates unchanged)."""
    return select.copy().transform(lambda n: _tie_break(n, occurrences) if isinstance(n, exp.Window) else n)


def _call_blocker(window: exp.Window) -> Blocker | None:
    """Why one window call has no incremental rule, or None."""
    text = window.sql(dialect="spark")
    if not window.args.get("partition_by"):
        return Blocker("window without PARTITION BY", f"refreshed in full ({text}: one partition holds every row)")
    problem = _function_problem(window) or _frame_problem(window)
    if problem is None and window.args.get("alias") is not None:
        problem = "a named window (WINDOW clause) is not planned"
    return Blocker("window function", f"{text}: {problem}") if problem is not None else None


def _function_problem(window: exp.Window) -> str | None:
    """Why the call's function has no rule, or None."""
    func = window.this
    if not isinstance(func, (*_ORDER_DEPENDENT, *_PEER_RANKS, *_AGGREGATES)):
        return ("only ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD, first/last values and count/sum/avg/min/max "
                "have an incremental rule")
    if isinstance(func, _AGGREGATES) and isinstance(func.this, exp.Distinct):
        return "DISTINCT inside a window is not planned"
    return None


def _frame_problem(window: exp.Window) -> str | None:
    """Why the call's frame has no rule, or None."""
    spec = window.args.get("spec")
    if spec is not None and str(spec.args.get("kind") or "").upper() not in ("ROWS", "RANGE"):
        return "only ROWS and RANGE frames are planned"
    if isinstance(window.this, _FRAME_ROW) and not _is_rows_frame(window):
        return ("a first/last value over a RANGE frame (the default) picks among tied rows in no set order; "
                "write a ROWS frame")
    return None


def _misplaced(select: exp.Select) -> bool:
    """Whether a window sits outside the select items and QUALIFY."""
    allowed = {id(n) for item in select.expressions for n in item.walk()}
    qualify = select.args.get("qualify")
    allowed |= {id(n) for n in qualify.walk()} if qualify is not None else set()
    return any(isinstance(n, exp.Window) and id(n) not in allowed for n in select.walk())


def _block_shape_blockers(select: exp.Select) -> list[Blocker]:
    outside = [n for item in select.expressions for n in item.walk()
               if isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window)]
    found = []
    if select.args.get("group") is not None or select.args.get("distinct") is not None or outside:
        found.append(Blocker("window function", "windows over GROUP BY, DISTINCT or aggregates are not planned"))
    if select.args.get("windows") or _misplaced(select):
        found.append(Blocker("window function", "only windows in the select list and QUALIFY are planned "
                                                "(no WINDOW clause)"))
    return found


def plan_windows(select: exp.Select, inputs: set[str] | None) -> tuple[exp.Select, WindowSpec | None, list[Blocker]]:
    """``(select with QUALIFY's output aliases resolved, its WindowSpec,
    blockers)`` of a named block with windows (:func:`has_windows`)."""
    select = _qualify_aliases_resolved(select, inputs)
    calls = tuple(n for n in select.walk() if isinstance(n, exp.Window))
    blockers = _block_shape_blockers(select)
    blockers += [b for b in map(_call_blocker, calls) if b is not None]
    if not calls:
        blockers.append(Blocker("QUALIFY", "without a window function: not planned (write it as WHERE)"))
    blockers += _partition_blockers(calls)
    if blockers:
        return select, None, blockers
    return select, WindowSpec(tuple(calls[0].args["partition_by"]), calls, _top_order(select, calls)), []


def _keeps_first_row(condition: exp.Expression) -> bool:
    """Whether a QUALIFY condition is ``<window> = 1`` or ``<window> <= 1``."""
    compares = isinstance(condition, (exp.EQ, exp.LTE)) and isinstance(condition.this, exp.Window)
    return compares and condition.expression.sql(dialect="spark") == "1"


def _top_order(select: exp.Select, calls: Sequence[exp.Window]) -> tuple[exp.Ordered, ...] | None:
    """The ORDER BY of a *deduplication*: a block whose every window call is
    one ``ROW_NUMBER()`` (as written) and whose QUALIFY keeps its row 1, so
    each partition holds at most its first row; None for any other block."""
    qualify = select.args.get("qualify")
    one_call = len({c.sql(dialect="spark") for c in calls}) == 1 and isinstance(calls[0].this, exp.RowNumber)
    if not one_call or qualify is None or not _keeps_first_row(qualify.this):
        return None
    order = calls[0].args.get("order")
    return tuple(order.expressions) if order is not None else ()


def _partition_blockers(calls: Sequence[exp.Window]) -> list[Blocker]:
    """A blocker when the windows do not share one PARTITION BY (as a set
    of expressions: their order does not change the partitions)."""
    partitions = {tuple(sorted(p.sql(dialect="spark") for p in c.args.get("partition_by") or ())) for c in calls}
    if len(partitions) <= 1:
        return []
    listed = "; ".join(", ".join(p) or "(none)" for p in sorted(partitions))
    return [Blocker("window function", f"windows partition differently ({listed}): only windows sharing "
                                       "one PARTITION BY are planned")]


def _qualify_aliases_resolved(select: exp.Select, inputs: set[str] | None) -> exp.Select:
    """``select`` with each unqualified QUALIFY name that is an output alias
    and not a source column replaced by the output's expression (so the
    QUALIFY can be evaluated as a select item)."""
    qualify = select.args.get("qualify")
    if qualify is None:
        return select
    aliased = {e.alias.lower(): e.unalias() for e in select.expressions if isinstance(e, exp.Alias)}

    def resolve(node: exp.Expression) -> exp.Expression:
        is_alias = isinstance(node, exp.Column) and not node.table and node.name.lower() in aliased
        if is_alias and (inputs is None or node.name.lower() not in inputs):
            return aliased[node.name.lower()].copy()
        return node

    copy = select.copy()
    copy.set("qualify", exp.Qualify(this=qualify.this.copy().transform(resolve)))
    return copy


def normalised(tree: exp.Expression, *, sources: Sequence[str],
               columns: Mapping[str, Sequence[str]] | None) -> exp.Expression:
    """``tree`` with the filtering-subquery form of a window (an outer
    SELECT of the inner's columns and a WHERE over one FROM subquery, or one
    WITH query read once, whose SELECT has windows) rewritten to one block
    with the outer WHERE as QUALIFY; any other tree unchanged."""
    outer = _cte_inlined(tree)
    inner = _filtered_window_subquery(outer)
    if inner is None:
        return tree
    try:
        inner = expand_stars(inner, sources=sources, columns=columns)
        named = {item_name(e, i).lower(): e.unalias() for i, e in enumerate(inner.expressions)}
        alias = outer.args["from_"].this.alias_or_name.lower()
        items = [exp.alias_(_substituted(e.unalias(), named, alias), item_name(e, i))
                 for i, e in enumerate(_outer_items(outer, list(inner.expressions)))]
        where = outer.args.get("where")
        qualify = _substituted(where.this, named, alias) if where is not None else None
    except (InvalidArgumentError, KeyError):
        return tree  # planned (and refused or blocked) as written
    result = inner.copy()
    result.set("expressions", items)
    if qualify is not None:
        result.set("qualify", exp.Qualify(this=qualify))
    return result


def _outer_items(tree: exp.Select, inner_items: list[exp.Expression]) -> list[exp.Expression]:
    """The outer select items, ``*`` standing for the inner's items by name."""
    items: list[exp.Expression] = []
    for item in tree.expressions:
        star = isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))
        names = [exp.column(item_name(e, i), quoted=True) for i, e in enumerate(inner_items)]
        items.extend(names if star else [item])
    return items


def _substituted(node: exp.Expression, named: dict[str, exp.Expression], alias: str) -> exp.Expression:
    """``node`` with its columns (of the subquery) replaced by the inner
    expressions they name; KeyError for a column the inner does not have."""
    def swap(n: exp.Expression) -> exp.Expression:
        if not isinstance(n, exp.Column) or isinstance(n.this, exp.Star):
            return n
        if (n.table and n.table.lower() != alias) or n.name.lower() not in named:
            raise KeyError(n.sql(dialect="spark"))
        return named[n.name.lower()].copy()

    return node.copy().transform(swap)


_QUERY_CLAUSES = ("group", "having", "qualify", "order", "limit", "offset", "distinct", "joins", "laterals", "windows")


def _is_projection_and_filter(outer: exp.Select) -> bool:
    """Whether ``outer`` only projects and filters (WHERE) one FROM item."""
    if any(outer.args.get(k) for k in (*_QUERY_CLAUSES, "with_")):
        return False
    nodes = [n for e in outer.expressions for n in e.walk()]
    nodes += list(outer.args["where"].walk()) if outer.args.get("where") is not None else []
    return not any(isinstance(n, (exp.Window, exp.AggFunc, exp.Subquery, exp.Select)) for n in nodes)


def _is_window_block(inner: exp.Expression) -> bool:
    """Whether ``inner`` is one SELECT block with windows in its select list."""
    if not isinstance(inner, exp.Select):
        return False
    if any(inner.args.get(k) for k in ("group", "having", "qualify", "order", "limit", "offset", "with_")):
        return False
    return any(isinstance(n, exp.Window) for e in inner.expressions for n in e.walk())


def _filtered_window_subquery(tree: exp.Expression) -> exp.Select | None:
    """The inner SELECT of the filtering-subquery form, or None."""
    if not isinstance(tree, exp.Select) or tree.args.get("from_") is None or not _is_projection_and_filter(tree):
        return None
    source = tree.args["from_"].this
    if not isinstance(source, exp.Subquery) or not _is_window_block(source.this):
        return None
    return source.this


def _only_cte(tree: exp.Expression) -> exp.CTE | None:
    """The one non-recursive WITH query of a SELECT, or None."""
    with_ = tree.args.get("with_") if isinstance(tree, exp.Select) else None
    if with_ is None or len(with_.expressions) != 1 or with_.args.get("recursive"):
        return None
    return with_.expressions[0]


def _read_once_by_from(tree: exp.Select, name: str) -> bool:
    """Whether ``tree`` reads table ``name`` once, as its FROM item."""
    from_ = tree.args.get("from_")
    reads = [t for t in tree.find_all(exp.Table) if t.name.lower() == name]
    by_from = from_ is not None and isinstance(from_.this, exp.Table) and from_.this.name.lower() == name
    return by_from and len(reads) == 1


def _cte_inlined(tree: exp.Expression) -> exp.Expression:
    """A SELECT reading its only WITH query once, from its FROM (no join),
    with that query inlined as a FROM subquery; other trees unchanged."""
    cte = _only_cte(tree)
    if cte is None or not _read_once_by_from(tree, cte.alias_or_name.lower()):
        return tree
    copy = tree.copy()
    copy.set("with_", None)
    alias = exp.TableAlias(this=exp.to_identifier(tree.args["from_"].this.alias_or_name))
    copy.args["from_"].set("this", exp.Subquery(this=cte.this.copy(), alias=alias))
    return copy


def _key(occurrences: Sequence[tuple[str, str]]) -> str:
    """The row-level key (as rows.py derives it for one block)."""
    return f"CONCAT_WS(':', {', '.join(column(alias, ROW_ID) for _, alias in occurrences)}) AS {quote(KEY_COLUMN)}"


#: The derivation columns of a window plan after the key: each row's
#: PARTITION BY values, by which a refresh finds the rows an affected
#: partition held (SPEC §Derived tables, "Incremental rules: windows").
PARTITION_PREFIX = "_ct_dt_wp"


def partition_columns(spec: WindowSpec) -> tuple[str, ...]:
    """The derivation columns holding a row's PARTITION BY values.

    >>> import sqlglot
    >>> select, spec, _ = plan_windows(sqlglot.parse_one("SELECT id FROM s QUALIFY ROW_NUMBER() OVER (PARTITION BY k, j ORDER BY v) = 1", read="spark"), None)
    >>> partition_columns(spec)
    ('_ct_dt_wp0', '_ct_dt_wp1')
    """
    return tuple(f"{PARTITION_PREFIX}{i}" for i in range(len(spec.partition)))


#: A deduplication's derivation columns after its partition values: its
#: row's ORDER BY values, which an appended row is compared with.
ORDER_PREFIX = "_ct_dt_wo"


def order_columns(spec: WindowSpec) -> tuple[str, ...]:
    """The derivation columns holding a deduplication row's ORDER BY values
    (none for other window plans)."""
    return tuple(f"{ORDER_PREFIX}{i}" for i in range(len(spec.top_order or ())))


def stored_columns(spec: WindowSpec) -> tuple[str, ...]:
    """The derivation columns after the key: partition, then order values."""
    return (*partition_columns(spec), *order_columns(spec))


def hidden_columns(spec: WindowSpec) -> tuple[tuple[str, str | None], ...]:
    """``(name, Spark SQL type)`` of a window plan's derivation columns: the
    key, then the partition (and a deduplication's order) values, whose
    types are the expressions': None here, the full query's schema has them."""
    return ((KEY_COLUMN, "string"), *((c, None) for c in stored_columns(spec)))


def _windowed(select: exp.Select, spec: WindowSpec, occurrences, views: Sequence[str], outputs: tuple[str, ...], *,
              ms: int) -> str:
    """The block (tie-broken, QUALIFY applied) over ``views``: its outputs,
    key and partition values."""
    broken = tie_broken(select, occurrences)
    qualify = broken.args.get("qualify")
    broken.set("qualify", None)
    stored = stored_columns(spec)
    values = (*spec.partition, *(o.this for o in spec.top_order or ()))
    items = [e.sql(dialect="spark") for e in broken.expressions] + [_key(occurrences)]
    items += [f"{v.sql(dialect='spark')} AS {quote(c)}" for v, c in zip(values, stored)]
    if qualify is not None:
        items.append(f"({qualify.this.sql(dialect='spark')}) AS {_QUALIFY}")
    inner = block_sql(broken, views, items, ms=ms)
    names = ", ".join(quote(o) for o in (*outputs, KEY_COLUMN, *stored))
    return f"SELECT {names} FROM ({inner}) AS `_ct_w`" + (f" WHERE {_QUALIFY}" if qualify is not None else "")


def full_sql(select: exp.Select, spec: WindowSpec, occurrences, views: SourceViews, outputs: tuple[str, ...], *,
             ms: int) -> RefreshSql:
    """The whole result at the new state (ties broken by row id), keyed."""
    new = [views[source].new for source, _ in occurrences]
    return RefreshSql(_windowed(select, spec, occurrences, new, outputs, ms=ms),
                      upsert_clauses((*outputs, *stored_columns(spec)), by_source_delete=True))


def _partition_names(spec: WindowSpec) -> list[str]:
    return [f"`_ct_p{i}`" for i in range(len(spec.partition))]
def _affected(select: exp.Select, spec: WindowSpec, occurrences, views: SourceViews, *, ms: int) -> str:
    """The distinct PARTITION BY values of every image of the block's delta
    terms (before the window, with the block's WHERE: a DELETE image is the
    old row, so a row leaving the WHERE still marks its old partition)."""
    base = select.copy()
    base.set("qualify", None)
    items = [f"{p.sql(dialect='spark')} AS {n}" for p, n in zip(spec.partition, _partition_names(spec))]
    terms = [block_sql(base, telescoped(occurrences, lambda s, state: getattr(views[s], state), i), items, ms=ms)
             for i in range(len(occurrences))]
    return f"SELECT DISTINCT * FROM ({union_all(terms)}) AS `_ct_u`"


def _restricted(select: exp.Select, spec: WindowSpec) -> exp.Select:
    """``select`` keeping only the rows of the affected partitions (null-safe:
    a NULL partition value is a partition); whole partitions are kept, so the
    windows over them are unchanged."""
    match = " AND ".join(f"`_ct_p`.{n} <=> ({p.sql(dialect='spark')})"
                         for p, n in zip(spec.partition, _partition_names(spec)))
    exists = sqlglot.parse_one(f"EXISTS (SELECT 1 FROM `_ct_p` WHERE {match})", read="spark")
    return select.copy().where(exists, append=True, copy=False)


def _old_rows(select: exp.Select, spec: WindowSpec, occurrences, views: SourceViews, outputs: tuple[str, ...], *,
              ms: int) -> str:
    """The rows the affected partitions held at the old frontier: the
    derived table's own rows of those partitions (by their stored partition
    values) when the executor offers the table as ``views.target``, else
    the block recomputed over the sources' old state."""
    if views.target is None:
        old = [views[s].old for s, _ in occurrences]
        return _windowed(_restricted(select, spec), spec, occurrences, old, outputs, ms=ms)
    names = ", ".join(f"`_ct_t`.{quote(c)}" for c in (*outputs, KEY_COLUMN, *stored_columns(spec)))
    match = " AND ".join(f"`_ct_p`.{n} <=> `_ct_t`.{quote(c)}"
                         for n, c in zip(_partition_names(spec), partition_columns(spec)))
    return f"SELECT {names} FROM {quote(views.target)} AS `_ct_t` WHERE EXISTS (SELECT 1 FROM `_ct_p` WHERE {match})"


def delta_sql(select: exp.Select, spec: WindowSpec, occurrences, views: SourceViews, outputs: tuple[str, ...], *,
              ms: int) -> RefreshSql:
    """The affected partitions' new rows that differ from their old rows
    (or are new) as 'upsert', and their old keys no longer produced as
    'delete': one row per key, and a delete names a key the table holds.
    Most rows of a touched partition keep their values (a deduplication
    changes one row of it), so they are left out of the MERGE source."""
    new = [views[s].new for s, _ in occurrences]
    stored = (*outputs, *stored_columns(spec))
    key = quote(KEY_COLUMN)
    gone = f"n.{key} IS NULL"
    # One full outer join reads each side once: a key only in the old side
    # is a delete (its old image), any other a changed or new row.
    values = ", ".join(f"CASE WHEN {gone} THEN o.{quote(c)} ELSE n.{quote(c)} END AS {quote(c)}" for c in stored)
    same = " AND ".join(f"n.{quote(c)} <=> o.{quote(c)}" for c in stored)
    sql = (
        f"WITH `_ct_p` AS ({_affected(select, spec, occurrences, views, ms=ms)}),\n"
        f"`_ct_n` AS ({_windowed(_restricted(select, spec), spec, occurrences, new, outputs, ms=ms)}),\n"
        f"`_ct_o` AS ({_old_rows(select, spec, occurrences, views, outputs, ms=ms)})\n"
        f"SELECT {values}, COALESCE(n.{key}, o.{key}) AS {key}, "
        f"CASE WHEN {gone} THEN 'delete' ELSE 'upsert' END AS {quote(OP_COLUMN)}\n"
        f"FROM `_ct_n` AS n FULL OUTER JOIN `_ct_o` AS o ON n.{key} = o.{key}\n"
        f"WHERE {gone} OR o.{key} IS NULL OR NOT ({same})"
    )
    return RefreshSql(sql, upsert_clauses(stored, by_source_delete=False), (OP_COLUMN,))


def appended_top_rows_sql(select: exp.Select, spec: WindowSpec, occurrence: tuple[str, str], views: SourceViews,
                          outputs: tuple[str, ...], *, ms: int) -> RefreshSql:
    """The delta of a deduplication (``spec.top_order``) over one source
    over an interval that only appended, from the change and the derived
    table (``views.target``) alone: each partition's first appended row
    (the block over the INSERT images) and the row the table holds for that
    partition are ranked by the stored ORDER BY values, then the key (the
    row id: the tie-break of :func:`tie_broken`); a winning appended row is
    an 'upsert', a stored row it displaces a 'delete'. No partition is
    recomputed: appends can only displace a partition's first row."""
    source, alias = occurrence
    inserts = select.copy().where(f"{column(alias, ACTION)} = 'INSERT'", dialect="spark", copy=False)
    stored = (*outputs, *stored_columns(spec))
    columns = (*outputs, KEY_COLUMN, *stored_columns(spec))
    key, listed = quote(KEY_COLUMN), ", ".join(quote(c) for c in columns)
    held = ", ".join(f"`_ct_t`.{quote(c)}" for c in columns)
    match = " AND ".join(f"`_ct_c`.{quote(c)} <=> `_ct_t`.{quote(c)}" for c in partition_columns(spec))
    ranked = [o.copy() for o in spec.top_order]
    for o, c in zip(ranked, order_columns(spec)):
        o.set("this", exp.column(c, quoted=True))
    order = ", ".join([*(o.sql(dialect="spark") for o in ranked), f"{key} ASC NULLS FIRST"])
    partition = ", ".join(quote(c) for c in partition_columns(spec))
    sql = (
        f"WITH `_ct_c` AS ({_windowed(inserts, spec, (occurrence,), [views[source].delta], outputs, ms=ms)}),\n"
        f"`_ct_o` AS (SELECT {held} FROM {quote(views.target)} AS `_ct_t` WHERE EXISTS (SELECT 1 FROM `_ct_c` WHERE {match})),\n"
        f"`_ct_b` AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {order}) AS `_ct_r` FROM "
        f"(SELECT {listed}, TRUE AS `_ct_new` FROM `_ct_c` UNION ALL SELECT {listed}, FALSE FROM `_ct_o`) AS `_ct_u`)\n"
        f"SELECT {listed}, IF(`_ct_new`, 'upsert', 'delete') AS {quote(OP_COLUMN)} FROM `_ct_b`\n"
        f"WHERE `_ct_new` = (`_ct_r` = 1)"  # an appended row that ranks first, or a stored row that no longer does
    )
    return RefreshSql(sql, upsert_clauses(stored, by_source_delete=False), (OP_COLUMN,))
