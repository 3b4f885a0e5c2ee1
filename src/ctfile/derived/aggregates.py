"""Aggregate rules (SPEC §Derived tables, "Incremental rules"): GROUP BY
with count(*), count(x), sum, avg, min, max and count(DISTINCT x), and
DISTINCT (a GROUP BY of all output columns).

A group's derivation key ``_ct_dt_key`` is ``to_json(named_struct('k0',
g0, ...))`` of its GROUP BY values (``'{}'`` for a query without GROUP BY,
whose one row always exists). to_json leaves NULL fields out, so NULL and
every value stay distinct. Edge cases, honestly: a double -0.0 and 0.0 are
one group to Spark but two keys here (``"-0.0"``/``"0.0"``), and NaN keys
are written ``"NaN"``; a group whose key spelling changes only that way is
recomputed as a delete plus an insert.

State: ``_ct_dt_rows`` (the group's row count; the group is deleted when
it reaches 0), ``_ct_dt_cnt_<i>`` (non-null count of output ``i``'s
argument: a sum of only NULLs stays NULL) and, for avg, ``_ct_dt_sum_<i>``.

Two delta modes:

* **linear** (count/sum/avg, and min/max and count(DISTINCT) when every
  source only appended): the source row of a group carries the signed delta
  (rows, counts, sums; min/max of the appended rows; for count(DISTINCT),
  the number of appended values the group's old rows lack, found by an
  anti join of the appended (group, value) pairs against the old state
  restricted to those pairs) and the MERGE SET combines it with the stored
  values (``t.x + s.x``, ``least``/``greatest``);
* **recompute** (HAVING, or min/max and count(DISTINCT) after a delete or
  update): the affected groups (keys in the delta, either sign) are
  recomputed from the ``new`` views; an affected group gone from the new
  result is deleted when it existed before (its signed row delta is
  negative; with HAVING, the old views' recomputation has it).

Over a block with outer, semi or anti joins the signed delta of the
block's rows is its affected join keys' new rows (+1) and old rows (-1)
(:mod:`ctfile.derived.outer_joins`), and min/max and count(DISTINCT) are
always recomputed.

Types: the full query's expressions are the ones Spark types (sum(x),
avg(x)); signed sums keep sum's type (``-x``, not ``-1 * x``). Merged
``t.x + s.x`` values widen by one decimal digit and the executor casts
them to the table's type; avg of a decimal is ``(t.sum + s.sum) /
(t.cnt + s.cnt)``, which can differ from Spark's avg in the last decimal
place when the division's intermediate scale is rounded (rare); float and
double sums differ from a recomputation by rounding (incremental sums of
floating point are not exact anywhere).

Examples
--------
>>> from ctfile.derived import compile_query
>>> [c for c, _ in compile_query("SELECT k, avg(v) AS a FROM s GROUP BY k", sources=("s",)).hidden_columns]
['_ct_dt_key', '_ct_dt_rows', '_ct_dt_sum_1', '_ct_dt_cnt_1']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sqlglot import exp

from ctfile.derived import outer_joins
from ctfile.derived.model import KEY_COLUMN, OP_COLUMN, ROWS_COLUMN, ClauseKind, MergeClause, RefreshSql, SourceViews
from ctfile.derived.planning import AggKind, Block, AggCall
from ctfile.derived.render import (
    ACTION, block_sql, column, expression_sql, quote, telescoped, union_all, upsert_clauses,
)

_SIGN = "`_ct_sign`"


def _sum(i: int) -> str:
    return f"_ct_dt_sum_{i}"


def _cnt(i: int) -> str:
    return f"_ct_dt_cnt_{i}"


def hidden_columns(block: Block) -> tuple[tuple[str, str | None], ...]:
    """``(name, Spark type)`` of the derivation columns; the avg sum state
    has the type of ``sum(arg)`` (None here: it depends on the source's
    types; take it from the full query's schema)."""
    found: list[tuple[str, str | None]] = [(KEY_COLUMN, "string"), (ROWS_COLUMN, "bigint")]
    for i, agg in enumerate(block.aggregates):
        if agg is not None and agg.kind is AggKind.AVG:
            found.append((_sum(i), None))
        if agg is not None and agg.kind in (AggKind.SUM, AggKind.AVG):
            found.append((_cnt(i), "bigint"))
    return tuple(found)


def state_names(block: Block) -> list[str]:
    return [name for name, _ in hidden_columns(block)[1:]]


def only_appended(block: Block, appended_only: Mapping[str, bool]) -> bool:
    """Whether every source of ``block`` only appended and it has no outer,
    semi or anti join (whose appends can remove a null-extended row): its
    new rows are then its old rows plus the delta's."""
    return all(appended_only[source] for source, _ in block.occurrences) and block.join_keys is None


def recompute_needed(block: Block, appended_only: Mapping[str, bool]) -> bool:
    """HAVING always; min/max and count(DISTINCT) unless the block
    :func:`only_appended` (they then combine with the stored value).

    >>> from ctfile.derived import compile_query
    >>> block = compile_query("SELECT k, count(DISTINCT v) AS n FROM s GROUP BY k", sources=("s",))._aggregate
    >>> recompute_needed(block, {"s": True}), recompute_needed(block, {"s": False})
    (False, True)
    """
    kinds = {a.kind for a in block.aggregates if a is not None}
    combined_only_over_appends = kinds & {AggKind.MIN, AggKind.MAX, AggKind.COUNT_DISTINCT}
    return block.having is not None or (bool(combined_only_over_appends) and not only_appended(block, appended_only))


def _grouped(block: Block) -> exp.Select:
    """The block as a GROUP BY of its keys (DISTINCT rewritten; ordinals
    resolved), ready for extra items."""
    copy = block.select.copy()
    copy.set("distinct", None)
    copy.set("group", exp.Group(expressions=[k.copy() for k in block.keys]) if block.keys else None)
    return copy


def _key_of(keys: list[str]) -> str:
    if not keys:
        return "'{}'"
    fields = ", ".join(f"'k{j}', {k}" for j, k in enumerate(keys))
    return f"TO_JSON(NAMED_STRUCT({fields}))"


def _full_items(block: Block) -> list[str]:
    items = [item.sql(dialect="spark") for item in block.select.expressions]
    items.append(f"{_key_of([k.sql(dialect='spark') for k in block.keys])} AS {quote(KEY_COLUMN)}")
    items.append(f"COUNT(*) AS {quote(ROWS_COLUMN)}")
    for i, agg in enumerate(block.aggregates):
        arg = agg.arg.sql(dialect="spark") if agg is not None and agg.arg is not None else None
        if agg is not None and agg.kind is AggKind.AVG:
            items.append(f"SUM({arg}) AS {quote(_sum(i))}")
        if agg is not None and agg.kind in (AggKind.SUM, AggKind.AVG):
            items.append(f"COUNT({arg}) AS {quote(_cnt(i))}")
    return items


def full_sql(block: Block, views: SourceViews, outputs: tuple[str, ...], *, ms: int) -> RefreshSql:
    new = [views[source].new for source, _ in block.occurrences]
    sql = block_sql(_grouped(block), new, _full_items(block), ms=ms, aggregate=True)
    return RefreshSql(sql, upsert_clauses([*outputs, *state_names(block)], by_source_delete=True))


def _signed_terms(block: Block, views: SourceViews, items: list[str], *, ms: int) -> str:
    """The signed delta rows of the block's input (before grouping), one
    telescoping term per occurrence, with ``items`` and ``_ct_sign`` (a
    block with outer, semi or anti joins: its affected join keys' new rows
    and old rows, :func:`ctfile.derived.outer_joins.signed_terms`)."""
    if block.join_keys is not None:
        return outer_joins.signed_terms(block, views, items, _SIGN, ms=ms)

    def view_of(source: str, state: str) -> str:
        return getattr(views[source], state)

    terms = []
    for i, (_, alias) in enumerate(block.occurrences):
        sign = f"CASE WHEN {column(alias, ACTION)} = 'INSERT' THEN 1 ELSE -1 END AS {_SIGN}"
        terms.append(block_sql(block.select, telescoped(block.occurrences, view_of, i), [*items, sign], ms=ms))
    return union_all(terms)


def _nonnull_delta(i: int) -> str:
    return f"SUM(CASE WHEN `_ct_a{i}` IS NOT NULL THEN {_SIGN} ELSE 0 END)"


def _linear_items(block: Block, outputs: tuple[str, ...]) -> list[str]:
    """The delta source's columns: per group, the signed changes."""
    items = []
    for i, (name, key, agg) in enumerate(zip(outputs, block.item_keys, block.aggregates)):
        if not _is_distinct(agg):  # its value is counted apart (_distinct_ctes)
            items.append(f"{_linear_value(i, key, agg)} AS {quote(name)}")
    items.append(f"{_key_of([f'`_ct_g{j}`' for j in range(len(block.keys))])} AS {quote(KEY_COLUMN)}")
    items.append(f"SUM({_SIGN}) AS {quote(ROWS_COLUMN)}")
    for i, agg in enumerate(block.aggregates):
        signed = f"SUM(CASE WHEN {_SIGN} = 1 THEN `_ct_a{i}` ELSE -`_ct_a{i}` END)"
        if agg is not None and agg.kind is AggKind.AVG:
            items.append(f"{signed} AS {quote(_sum(i))}")
        if agg is not None and agg.kind in (AggKind.SUM, AggKind.AVG):
            items.append(f"{_nonnull_delta(i)} AS {quote(_cnt(i))}")
    return items


def _linear_value(i: int, key: int | None, agg: AggCall | None) -> str:
    a = f"`_ct_a{i}`"
    if agg is None:
        return f"`_ct_g{key}`"
    return {
        AggKind.COUNT_STAR: f"SUM({_SIGN})",
        AggKind.COUNT: _nonnull_delta(i),
        AggKind.SUM: f"SUM(CASE WHEN {_SIGN} = 1 THEN {a} ELSE -{a} END)",
        AggKind.AVG: f"CASE WHEN {_nonnull_delta(i)} = 0 THEN NULL ELSE "
                     f"SUM(CASE WHEN {_SIGN} = 1 THEN {a} ELSE -{a} END) / {_nonnull_delta(i)} END",
        AggKind.MIN: f"MIN({a})",  # linear only when every source appended: all signs +1
        AggKind.MAX: f"MAX({a})",
    }[agg.kind]


def _input_items(block: Block) -> list[str]:
    items = [f"{k.sql(dialect='spark')} AS `_ct_g{j}`" for j, k in enumerate(block.keys)]
    items += [f"{a.arg.sql(dialect='spark')} AS `_ct_a{i}`" for i, a in enumerate(block.aggregates)
              if a is not None and a.arg is not None]
    return items


def linear_delta_sql(block: Block, views: SourceViews, outputs: tuple[str, ...], *, ms: int) -> RefreshSql:
    """The signed change of each group the delta touches, combined with the
    stored state by the clauses; a count(DISTINCT) output (the block
    :func:`only_appended`) is the number of its group's appended values the
    old state lacks (:func:`_distinct_ctes`)."""
    group = ", ".join(f"`_ct_g{j}`" for j in range(len(block.keys)))
    linear = (f"SELECT {', '.join(_linear_items(block, outputs))} FROM `_ct_d`"
              # Without GROUP BY an empty delta still aggregates to one row: drop it.
              + (f" GROUP BY {group}" if group else " HAVING COUNT(*) > 0"))
    signed = f"`_ct_d` AS ({_signed_terms(block, views, _input_items(block), ms=ms)})"
    if not any(_is_distinct(agg) for agg in block.aggregates):
        return RefreshSql(f"WITH {signed}\n{linear}", _linear_clauses(block, outputs))
    return RefreshSql(_with_distinct_counts(block, views, outputs, signed, linear, ms=ms),
                      _linear_clauses(block, outputs))


def _is_distinct(agg: AggCall | None) -> bool:
    return agg is not None and agg.kind is AggKind.COUNT_DISTINCT


def _with_distinct_counts(block: Block, views: SourceViews, outputs: tuple[str, ...], signed: str, linear: str, *,
                          ms: int) -> str:
    """The linear delta ``linear`` (over the CTE ``signed``) with each
    count(DISTINCT) output the number of its group's new values (0 when
    the group gained none; a group new to the table inserts it)."""
    distinct = [i for i, agg in enumerate(block.aggregates) if _is_distinct(agg)]
    counted = [cte for i in distinct for cte in _distinct_ctes(block, views, i, ms=ms)]
    ctes = [signed, *counted, f"`_ct_l` AS ({linear})"]
    items = [f"COALESCE(`_ct_n{i}`.`_ct_new`, 0) AS {quote(name)}" if i in distinct else f"l.{quote(name)}"
             for i, name in enumerate(outputs)]
    items += [f"l.{quote(c)}" for c in (KEY_COLUMN, *state_names(block))]
    joins = "".join(f" LEFT JOIN `_ct_n{i}` ON `_ct_n{i}`.`_ct_k` = l.{quote(KEY_COLUMN)}" for i in distinct)
    return "WITH " + ",\n".join(ctes) + f"\nSELECT {', '.join(items)} FROM `_ct_l` AS l{joins}"


def _distinct_ctes(block: Block, views: SourceViews, i: int, *, ms: int) -> list[str]:
    """count(DISTINCT) output ``i`` over appends: ``_ct_p<i>``, the appended
    (group key, value) pairs (values not NULL; the delta's rows through the
    block's joins and WHERE, ``_ct_d``); ``_ct_m<i>``, those of them the
    old state holds (the block over every occurrence's old view, semi
    joined to the pairs: no group is read whole, and the small side of each
    join is the pairs); ``_ct_n<i>``, per group, the appended values the
    old state lacks (the anti join): the count's increase. Keys compare as
    the table's ``_ct_dt_key`` spelling (NULL keys included); values by
    ``=``, as count(DISTINCT) tells them apart."""
    arg = block.aggregates[i].arg.sql(dialect="spark")
    old_items = [f"{_key_of([k.sql(dialect='spark') for k in block.keys])} AS `_ct_k`", f"{arg} AS `_ct_v`"]
    old = block_sql(block.select, [views[s].old for s, _ in block.occurrences], old_items, ms=ms)
    p, m = f"`_ct_p{i}`", f"`_ct_m{i}`"

    def on(a: str, b: str) -> str:
        return f"{a}.`_ct_k` = {b}.`_ct_k` AND {a}.`_ct_v` = {b}.`_ct_v`"

    return [
        f"{p} AS (SELECT DISTINCT {_key_of([f'`_ct_g{j}`' for j in range(len(block.keys))])} AS `_ct_k`, "
        f"`_ct_a{i}` AS `_ct_v` FROM `_ct_d` WHERE `_ct_a{i}` IS NOT NULL)",
        f"{m} AS (SELECT DISTINCT o.`_ct_k`, o.`_ct_v` FROM ({old}) AS o LEFT SEMI JOIN {p} AS p ON {on('o', 'p')})",
        f"`_ct_n{i}` AS (SELECT p.`_ct_k`, COUNT(*) AS `_ct_new` FROM {p} AS p "
        f"LEFT ANTI JOIN {m} AS m ON {on('p', 'm')} GROUP BY p.`_ct_k`)",
    ]


def _t(c: str) -> str:
    return f"t.{quote(c)}"


def _s(c: str) -> str:
    return f"s.{quote(c)}"


def _plus(c: str) -> str:
    return f"({_t(c)} + {_s(c)})"


def _null_unless(count: str, value: str) -> str:
    return f"CASE WHEN {count} = 0 THEN NULL ELSE {value} END"


def _merged(block: Block, outputs: tuple[str, ...]) -> dict[str, str]:
    """Each non-key column's new value from the stored (t.) and delta (s.)."""
    merged = {ROWS_COLUMN: _plus(ROWS_COLUMN)}
    for i, (name, agg) in enumerate(zip(outputs, block.aggregates)):
        if agg is not None:
            merged.update(_merged_aggregate(i, name, agg.kind))
    return merged


def _merged_aggregate(i: int, name: str, kind: AggKind) -> dict[str, str]:
    if kind in (AggKind.COUNT_STAR, AggKind.COUNT, AggKind.COUNT_DISTINCT):  # the delta counts only new values
        return {name: _plus(name)}
    if kind in (AggKind.MIN, AggKind.MAX):
        return {name: f"{'LEAST' if kind is AggKind.MIN else 'GREATEST'}({_t(name)}, {_s(name)})"}
    count = _plus(_cnt(i))
    stored = name if kind is AggKind.SUM else _sum(i)
    total = f"COALESCE({_t(stored)}, 0) + COALESCE({_s(stored)}, 0)"
    if kind is AggKind.SUM:
        return {name: _null_unless(count, total), _cnt(i): count}
    return {_sum(i): _null_unless(count, total), _cnt(i): count, name: _null_unless(count, f"({total}) / {count}")}


def _inserted(block: Block, outputs: tuple[str, ...]) -> dict[str, str]:
    values = {c: _s(c) for c in [KEY_COLUMN, *outputs, *state_names(block)]}
    for i, (name, agg) in enumerate(zip(outputs, block.aggregates)):
        if agg is not None and agg.kind is AggKind.SUM:
            values[name] = _null_unless(_s(_cnt(i)), _s(name))
        if agg is not None and agg.kind is AggKind.AVG:
            values[_sum(i)] = _null_unless(_s(_cnt(i)), _s(_sum(i)))
    return values


def _linear_clauses(block: Block, outputs: tuple[str, ...]) -> tuple[MergeClause, ...]:
    merged = _merged(block, outputs)
    changed = "NOT (" + " AND ".join(f"{v} <=> {_t(c)}" for c, v in merged.items()) + ")"
    clauses = []
    if block.keys:  # a query without GROUP BY always has its one row
        clauses.append(MergeClause(ClauseKind.MATCHED_DELETE, f"{_plus(ROWS_COLUMN)} = 0"))
    clauses.append(MergeClause(ClauseKind.MATCHED_UPDATE, changed, tuple(merged.items())))
    insert_when = f"{_s(ROWS_COLUMN)} > 0" if block.keys else None
    clauses.append(MergeClause(ClauseKind.NOT_MATCHED_INSERT, insert_when, tuple(_inserted(block, outputs).items())))
    return tuple(clauses)


def _old_groups(views: SourceViews, at) -> str:
    """The affected groups the table holds (HAVING applied): its own rows
    of the affected keys when the executor offers it (``views.target``),
    else the old views' recomputation, ``at('old')``."""
    if views.target is None:
        return at("old")
    key = quote(KEY_COLUMN)
    return f"SELECT {key} FROM {quote(views.target)} WHERE {key} IN (SELECT {key} FROM `_ct_a`)"


def recompute_delta_sql(block: Block, views: SourceViews, outputs: tuple[str, ...], *, ms: int) -> RefreshSql:
    """Recompute the groups the delta touches from the new views. An
    affected group gone from the new result is deleted when it is in the
    table: without HAVING, when its signed row delta is negative (it had
    rows); with HAVING, when the table holds it (its own rows, or the old
    views' recomputation with HAVING applied), so a group leaving the
    HAVING is deleted and one entering it inserted."""
    key, op = quote(KEY_COLUMN), quote(OP_COLUMN)
    keys = [k.sql(dialect="spark") for k in block.keys]
    signed = _signed_terms(block, views, [f"{_key_of(keys)} AS {key}"], ms=ms)
    grouped = _grouped(block)
    if block.keys:
        grouped = grouped.where(f"{_key_of(keys)} IN (SELECT {key} FROM `_ct_a`)", dialect="spark")

    def at(state: str) -> str:
        return block_sql(grouped, [getattr(views[s], state) for s, _ in block.occurrences], _full_items(block),
                         ms=ms, aggregate=True)

    columns = [*outputs, KEY_COLUMN, *state_names(block)]
    nulls = ", ".join(f"a.{key}" if c == KEY_COLUMN else f"NULL AS {quote(c)}" for c in columns)
    ctes = [f"`_ct_d` AS ({signed})", f"`_ct_a` AS (SELECT {key}, SUM({_SIGN}) AS `_ct_net` FROM `_ct_d` GROUP BY {key})",
            f"`_ct_f` AS ({at('new')})"]
    sql = f"SELECT f.*, 'upsert' AS {op} FROM `_ct_f` AS f"
    if block.having is not None:
        ctes.append(f"`_ct_o` AS ({_old_groups(views, at)})")
        sql += (f"\nUNION ALL\nSELECT {nulls}, 'delete' AS {op} FROM `_ct_o` AS a "
                f"LEFT ANTI JOIN `_ct_f` AS f ON a.{key} = f.{key}")
    elif block.keys:
        sql += (f"\nUNION ALL\nSELECT {nulls}, 'delete' AS {op} FROM `_ct_a` AS a "
                f"LEFT ANTI JOIN `_ct_f` AS f ON a.{key} = f.{key} WHERE a.`_ct_net` < 0")
    sql = "WITH " + ",\n".join(ctes) + "\n" + sql
    return RefreshSql(sql, upsert_clauses([*outputs, *state_names(block)], by_source_delete=False), (OP_COLUMN,))


# ------------------------------------------------ the linear delta, as parts


@dataclass(frozen=True)
class LinearOutput:
    """One output of a :class:`LinearAggregate`: GROUP BY key number
    ``key``, or aggregate ``kind`` of ``arg`` (Spark SQL; None for
    count(*))."""

    name: str
    key: int | None
    kind: AggKind | None
    arg: str | None


@dataclass(frozen=True)
class LinearAggregate:
    """The linear delta of an aggregate over ONE source occurrence, as the
    Spark SQL fragments :func:`linear_delta_sql` is built from, for an
    engine that computes it without Spark (:mod:`ctfile.spark.derived_driver`).

    ``columns`` are the MERGE source's columns in order (the outputs,
    ``_ct_dt_key``, ``_ct_dt_rows``, then each aggregate's state), each the
    same value :func:`linear_delta_sql` computes; the MERGE clauses are
    :func:`linear_delta_sql`'s. ``where`` and the expressions have the
    refresh's data timestamp bound."""

    source: str
    alias: str
    where: str | None
    keys: tuple[str, ...]
    outputs: tuple[LinearOutput, ...]
    columns: tuple[str, ...]


#: SELECT parts a single-source linear delta cannot hold (a HAVING is
#: recomputed already; listed so a new planner rule cannot slip through).
_NOT_LINEAR_PARTS = ("joins", "having", "qualify", "laterals", "windows", "with", "order", "limit")


def linear_parts(block: Block, outputs: tuple[str, ...], *, ms: int) -> LinearAggregate | None:
    """``block``'s linear delta as a :class:`LinearAggregate`, or None when
    it reads more than one source occurrence, has another part, or a
    count(DISTINCT) (whose delta reads the old state)."""
    if len(block.occurrences) != 1 or any(block.select.args.get(part) for part in _NOT_LINEAR_PARTS):
        return None
    if any(_is_distinct(agg) for agg in block.aggregates):
        return None
    source, alias = block.occurrences[0]
    where = block.select.args.get("where")
    columns = (*outputs, KEY_COLUMN, *state_names(block))
    return LinearAggregate(
        source=source, alias=alias, where=expression_sql(where.this, ms) if where is not None else None,
        keys=tuple(expression_sql(k, ms) for k in block.keys), outputs=_linear_outputs(block, outputs, ms),
        columns=columns,
    )


def _linear_outputs(block: Block, outputs: tuple[str, ...], ms: int) -> tuple[LinearOutput, ...]:
    found = []
    for name, key, agg in zip(outputs, block.item_keys, block.aggregates):
        if agg is None:
            found.append(LinearOutput(name, key, None, None))
        else:
            found.append(LinearOutput(name, None, agg.kind, expression_sql(agg.arg, ms) if agg.arg is not None else None))
    return tuple(found)
