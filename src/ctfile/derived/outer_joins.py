"""Outer, semi and anti joins (SPEC §Derived tables, "Incremental rules"):
``LEFT``/``RIGHT``/``FULL OUTER JOIN``, ``LEFT SEMI``/``LEFT ANTI JOIN``
and the ``EXISTS``/``NOT EXISTS``/``IN``/``NOT IN (subquery)`` conjuncts
of a WHERE that Spark plans as them, refreshed by recomputing the join keys
a change touches (the Dynamic Tables paper, section 5.5.1, derives outer joins
incrementally too; this rule trades its algebra for one recomputation).

A *keyed* block is one whose joins include an outer, semi or anti join and
all join on one key: every ON has a conjunct ``x.c = y.d`` between the
joined table and an earlier one, whose column is that earlier table's key
column. Then every row of the join comes from source rows whose keys are
all equal (a null-extended side has none; a source row with a NULL key
matches nothing and stands alone), so the rows of one key value depend
only on the source rows of that key value.

The delta: the *affected keys* are the distinct key values of every
occurrence's change rows (both images; NULL counts, null-safely). The
block over the ``new`` views, each input restricted to the affected keys
(``<=>``), gives the new rows of those keys; over the ``old`` views, the
old rows. The MERGE source: new rows not among the old ones ('upsert') and
old keys absent from the new ones ('delete'), one row per key; an old row
is a row of the table, so a delete always names an existing row.

``x NOT IN (SELECT y ...)`` is null-aware (:class:`NotIn`): an anti join
ON x = y plus a condition on the subquery's state (empty, holding a NULL,
neither), which is of the whole subquery, not of one key; so when that
state differs between the old and the new views, every key value of the
other occurrences' states is affected too.

The derivation key is the ``:``-joined row ids of the visible occurrences
with an empty slot for a null-extended side, so a fact's null-extended row
and its matched rows are different keys: a fact gaining its partner is a
delete and an insert in the table's change scan, as in Snowflake. A semi
or anti join's right side is not visible (its rows only decide).

Examples
--------
>>> import sqlglot
>>> select = sqlglot.parse_one("SELECT a.v FROM a LEFT JOIN b ON a.k = b.k AND b.w > 0", read="spark")
>>> keys = join_keys(select, (("a", "a"), ("b", "b")), [])
>>> [k.value for k in keys.kinds], keys.columns, keys.visible
(['from', 'left outer'], ('k', 'k'), (0, 1))
>>> rewritten = rewrite_subqueries(sqlglot.parse_one(
...     "SELECT a.v FROM a WHERE a.v > 0 AND EXISTS (SELECT 1 FROM b WHERE b.k = a.k)", read="spark"), [])
>>> rewritten.sql(dialect="spark")
'SELECT a.v FROM a LEFT SEMI JOIN b ON b.k = a.k WHERE a.v > 0'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import sqlglot
from sqlglot import exp

from ctfile.derived.model import KEY_COLUMN, OP_COLUMN, Blocker, SourceViews
from ctfile.derived.render import JOIN_FILTER, ROW_ID, bind_time, column, quote, with_join_filters

if TYPE_CHECKING:  # planning imports this module: no cycle at run time
    from ctfile.derived.planning import Block


class JoinKind(enum.Enum):
    """How an occurrence enters its block (FROM for the first one)."""

    FROM = "from"
    INNER = "inner"
    LEFT = "left outer"
    RIGHT = "right outer"
    FULL = "full outer"
    SEMI = "left semi"
    ANTI = "left anti"
    #: ``x NOT IN (SELECT y ...)``: an anti join ON x = y with the subquery's :class:`NotIn` state.
    NULL_AWARE_ANTI = "null-aware anti"


#: The kinds that make a block keyed (the rule of this module).
KEYED_KINDS = frozenset({JoinKind.LEFT, JoinKind.RIGHT, JoinKind.FULL, JoinKind.SEMI, JoinKind.ANTI,
                         JoinKind.NULL_AWARE_ANTI})
#: The kinds whose table only decides which rows stay (its columns are not in the result).
HIDDEN_KINDS = frozenset({JoinKind.SEMI, JoinKind.ANTI, JoinKind.NULL_AWARE_ANTI})
_SIDES = {"LEFT": JoinKind.LEFT, "RIGHT": JoinKind.RIGHT, "FULL": JoinKind.FULL}


def join_kind(join: exp.Join) -> JoinKind | None:
    """The kind of a JOIN item; None for CROSS and NATURAL joins (no rule)."""
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    if JOIN_FILTER in join.meta:  # only rewrite_subqueries sets it, on a NOT IN's anti join
        return JoinKind.NULL_AWARE_ANTI
    if kind == "CROSS" or join.args.get("method"):
        return None
    if kind in ("SEMI", "ANTI"):
        return JoinKind.SEMI if kind == "SEMI" else JoinKind.ANTI
    return _SIDES.get(side, JoinKind.INNER)


def is_hidden_join(join: exp.Join) -> bool:
    """Whether a JOIN item's columns are out of the result (semi, anti)."""
    return join_kind(join) in HIDDEN_KINDS


@dataclass(frozen=True)
class JoinKeys:
    """The join key of a keyed block: per occurrence (FROM/JOIN order) its
    :class:`JoinKind` and its key column's name; per join its ON text."""

    kinds: tuple[JoinKind, ...]
    columns: tuple[str, ...]
    conditions: tuple[str, ...]

    @property
    def visible(self) -> tuple[int, ...]:
        """The occurrences whose columns and row ids the join result has."""
        return tuple(i for i, k in enumerate(self.kinds) if k not in HIDDEN_KINDS)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


def _qualified(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and bool(node.table) and not isinstance(node.this, exp.Star)


def _key_pair(on: exp.Expression, aliases: list[str], columns: list[str | None], j: int) -> tuple[int, str, str] | None:
    """``(earlier occurrence, its column, occurrence j's column)`` of the
    first ON conjunct ``x.c = y.d`` that joins occurrence ``j`` to the key
    of an earlier one (any column of the FROM table when it has no key yet)."""
    for conjunct in _conjuncts(on):
        if not isinstance(conjunct, exp.EQ) or not (_qualified(conjunct.this) and _qualified(conjunct.expression)):
            continue
        for mine, other in ((conjunct.this, conjunct.expression), (conjunct.expression, conjunct.this)):
            here, there = mine.table.lower(), other.table.lower()
            if here != aliases[j] or there not in aliases[:j]:
                continue
            i = aliases.index(there)
            if columns[i] is None or columns[i].lower() == other.name.lower():
                return i, other.name, mine.name
    return None


def join_keys(select: exp.Select, occurrences: Sequence[tuple[str, str]], blockers: list[Blocker]) -> JoinKeys | None:
    """The :class:`JoinKeys` of a block with an outer, semi or anti join,
    None for other blocks; a block whose joins are not on one key gets a
    blocker (other join shapes are blocked by the planner already)."""
    joins = select.args.get("joins") or ()
    kinds = [JoinKind.FROM] + [join_kind(j) for j in joins]
    if not _keyed_block(kinds, occurrences):
        return None
    aliases = [alias.lower() for _, alias in occurrences]
    columns: list[str | None] = [None] * len(kinds)
    for j, join in enumerate(joins, start=1):
        on = join.args.get("on")
        pair = _key_pair(on, aliases, columns, j) if on is not None else None
        if pair is None:
            blockers.append(_not_on_one_key(kinds[j], on))
            return None
        i, earlier, mine = pair
        columns[i], columns[j] = earlier, mine
    on_text = tuple(j.args["on"].sql(dialect="spark") for j in joins)
    return JoinKeys(tuple(kinds), tuple(columns), on_text)


def _keyed_block(kinds: Sequence[JoinKind | None], occurrences: Sequence[tuple[str, str]]) -> bool:
    """Whether a block's joins (``kinds``, its FROM first) include an outer,
    semi or anti join, every one is a known kind, and each reads a source."""
    return any(k in KEYED_KINDS for k in kinds) and None not in kinds and len(kinds) == len(occurrences)


def _not_on_one_key(kind: JoinKind, on: exp.Expression | None) -> Blocker:
    return Blocker(
        f"{kind.value.upper()} JOIN",
        f"ON {on.sql(dialect='spark') if on is not None else '(none)'}: outer, semi and anti joins are "
        "refreshed by recomputing the join keys a change touches, so every join of the block must have "
        "an equality between its table's key column and the key column of an earlier table "
        "(a.k = b.k, b.k = c.k, ...), written with table-qualified columns")


# ----------------------------------------------- EXISTS / IN as semi joins


_SIMPLE_SUBQUERY_PARTS = ("joins", "group", "having", "qualify", "distinct", "order", "limit", "offset",
                          "laterals", "windows", "with_", "with")


def _subquery(node: exp.Expression) -> tuple[exp.Select, JoinKind, exp.Expression | None] | None:
    """``(subquery, SEMI or ANTI, the IN operand)`` of an EXISTS, NOT
    EXISTS or IN (subquery) conjunct; None for anything else."""
    negated = isinstance(node, exp.Not)
    inner = node.this if negated else node
    kind = JoinKind.ANTI if negated else JoinKind.SEMI
    if isinstance(inner, exp.Exists) and isinstance(inner.this, exp.Select):
        return inner.this, kind, None
    query = inner.args.get("query") if isinstance(inner, exp.In) else None
    if query is not None and isinstance(query.unnest(), exp.Select):
        return query.unnest(), kind, inner.this
    return None


def _label(kind: JoinKind, operand) -> str:
    if operand is not None:
        return "NOT IN (subquery)" if kind is JoinKind.ANTI else "IN (subquery)"
    return "NOT EXISTS" if kind is JoinKind.ANTI else "EXISTS"


def _is_simple(sub: exp.Select) -> bool:
    """One source table, a WHERE, no other clause nor nested subquery."""
    table = sub.args.get("from_").this if sub.args.get("from_") is not None else None
    nested = any(n is not sub for n in sub.find_all(exp.Select))
    return isinstance(table, exp.Table) and not nested and not any(sub.args.get(p) for p in _SIMPLE_SUBQUERY_PARTS)


def _subquery_blocker(sub: exp.Select, kind: JoinKind, operand, outer: set[str]) -> Blocker | None:
    """Why a subquery cannot become a semi or anti join (None: it can)."""
    label = _label(kind, operand)
    not_in = operand is not None and kind is JoinKind.ANTI
    if not_in and isinstance(operand, exp.Tuple):
        return Blocker(label, _MULTI_COLUMN)
    reason = _shape_problem(sub, operand, outer)
    if reason is None and not_in and _is_correlated(sub):
        reason = _CORRELATED
    return Blocker(label, reason) if reason is not None else None


def _shape_problem(sub: exp.Select, operand, outer: set[str]) -> str | None:
    """Why a subquery has no semi or anti join shape (None: it has)."""
    if not _is_simple(sub):
        return ("only a subquery over one source table with a WHERE (no join, GROUP BY, DISTINCT, "
                "LIMIT or nested subquery) is planned, as a semi or anti join")
    alias = sub.args["from_"].this.alias_or_name
    if alias.lower() in outer:
        return f"the subquery's table is named {alias!r} like an outer table: give it its own alias"
    if operand is not None and len(sub.expressions) != 1:
        return f"the subquery must select one column, found {len(sub.expressions)}"
    if _has_unqualified_columns(sub, operand):
        return "qualify every column of the subquery's WHERE (and IN's column) with its table alias"
    return None


_MULTI_COLUMN = ("multi-column NOT IN ((a, b) NOT IN (SELECT c, d ...)) is null-aware column by column: no "
                 "incremental rule; write NOT EXISTS (SELECT ... WHERE t.c = a AND t.d = b) where no column holds a NULL")
_CORRELATED = ("a correlated NOT IN (its subquery's WHERE names an outer table) is null-aware per outer row "
               "(whether the subquery is empty or holds a NULL differs by row): no incremental rule; "
               "write NOT EXISTS (SELECT ... WHERE inner.k = outer.k AND ...) where the column holds no NULL")


def _is_correlated(sub: exp.Select) -> bool:
    """Whether the subquery's WHERE names a table other than its own."""
    where, alias = sub.args.get("where"), sub.args["from_"].this.alias_or_name.lower()
    return where is not None and any(c.table.lower() != alias for c in where.find_all(exp.Column))


def _has_unqualified_columns(sub: exp.Select, operand: exp.Expression | None) -> bool:
    """Whether the subquery's WHERE (or IN's selected column) names a
    column without its table alias."""
    where = sub.args.get("where")
    looked_at = ([where.this] if where is not None else []) + ([sub.expressions[0]] if operand is not None else [])
    return any(not _qualified(c) for node in looked_at for c in node.find_all(exp.Column))


def _as_join(sub: exp.Select, kind: JoinKind, operand) -> exp.Join:
    """The semi or anti join a subquery becomes; a NOT IN's carries its
    :class:`NotIn` (``meta``), the filter its anti join needs."""
    where = sub.args.get("where")
    selected = sub.expressions[0].unalias() if operand is not None else None
    parts = [exp.EQ(this=operand.copy(), expression=selected.copy())] if operand is not None else []
    parts += [where.this.copy()] if where is not None else []
    on = exp.and_(*parts) if parts else None
    join = exp.Join(this=sub.args["from_"].this.copy(), side="LEFT", kind=kind.name, on=on)
    if operand is not None and kind is JoinKind.ANTI:
        join.meta[JOIN_FILTER] = NotIn(operand.sql(dialect="spark"), selected.sql(dialect="spark"),
                                       sub.args["from_"].this.alias_or_name,
                                       where.this.sql(dialect="spark") if where is not None else None)
    return join


@dataclass(frozen=True)
class NotIn:
    """``x NOT IN (SELECT y FROM t AS alias WHERE w)``, uncorrelated: Spark's
    null-aware anti join. With S the subquery's values, a row is kept when
    S is empty; else dropped when x is NULL, x is in S or S holds a NULL.
    Planned as the anti join ON x = y AND w (which drops x in S) and the
    WHERE conjunct :meth:`condition` over S's :meth:`state`.

    >>> n = NotIn("a.k", "c.k", "c", "c.w > 0")
    >>> n.condition("c_new")
    'CASE (SELECT CASE WHEN COUNT(*) = 0 THEN 0 WHEN COUNT(*) > COUNT(c.k) THEN 1 ELSE 2 END FROM `c_new` AS `c` WHERE c.w > 0) WHEN 0 THEN TRUE WHEN 2 THEN a.k IS NOT NULL ELSE FALSE END'
    """

    operand: str
    selected: str
    alias: str
    where: str | None

    def state(self, view: str) -> str:
        """S's null-aware state, read at ``view`` (a scalar subquery): 0
        when S is empty, 1 when it holds a NULL, else 2. Which rows the
        NOT IN keeps depends on S only through it and x's membership."""
        where = f" WHERE {self.where}" if self.where is not None else ""
        return (f"(SELECT CASE WHEN COUNT(*) = 0 THEN 0 WHEN COUNT(*) > COUNT({self.selected}) THEN 1 ELSE 2 END "
                f"FROM {quote(view)} AS {quote(self.alias)}{where})")

    def condition(self, view: str) -> str:
        """The WHERE conjunct that, with the anti join, is the NOT IN."""
        return f"CASE {self.state(view)} WHEN 0 THEN TRUE WHEN 2 THEN {self.operand} IS NOT NULL ELSE FALSE END"


def rewrite_subqueries(select: exp.Select, blockers: list[Blocker]) -> exp.Select:
    """``select`` with each top-level WHERE conjunct ``EXISTS (...)``,
    ``NOT EXISTS (...)``, ``x IN (SELECT y ...)`` or ``x NOT IN (SELECT y
    ...)`` replaced by a LEFT SEMI / LEFT ANTI JOIN of the subquery's table
    ON its WHERE (and ``x = y``), as Spark plans them (a NOT IN's anti join
    carries its null-aware part, :class:`NotIn`); unchanged when it has
    none. A subquery that cannot be rewritten stays (the planner blocks it)
    and gets a blocker naming why."""
    where = select.args.get("where")
    if where is None:
        return select
    kept, joins = _semi_joins(_conjuncts(where.this), {alias.lower() for alias in _aliases(select)}, blockers)
    if not joins:
        return select
    copy = select.copy()
    copy.set("joins", [j.copy() for j in copy.args.get("joins") or ()] + joins)
    copy.set("where", exp.Where(this=exp.and_(*[k.copy() for k in kept])) if kept else None)
    return copy


def _semi_joins(conjuncts: Sequence[exp.Expression], outer: set[str],
                blockers: list[Blocker]) -> tuple[list[exp.Expression], list[exp.Join]]:
    """The WHERE ``conjuncts`` kept, and the semi and anti joins the others
    become (``outer``: the aliases in use, each join's added)."""
    kept, joins = [], []
    for conjunct in conjuncts:
        found = _subquery(conjunct)
        blocker = _subquery_blocker(*found, outer) if found is not None else None
        if found is None or blocker is not None:
            blockers.extend([blocker] if blocker is not None else [])
            kept.append(conjunct)
            continue
        joins.append(_as_join(*found))
        outer.add(joins[-1].this.alias_or_name.lower())
    return kept, joins


def _aliases(select: exp.Select) -> list[str]:
    items = [select.args["from_"].this] if select.args.get("from_") is not None else []
    items += [j.this for j in select.args.get("joins") or ()]
    return [item.alias_or_name for item in items]


# ------------------------------------------------------------- rendering


def row_key(block: "Block", branch: int | None) -> str:
    """The derivation key of a keyed block's rows: the visible occurrences'
    row ids, an empty slot for a null-extended side."""
    visible = block.join_keys.visible
    parts = [f"'b{branch}'"] if branch is not None else []
    parts += [f"COALESCE({column(alias, ROW_ID)}, '')" for i, (_, alias) in enumerate(block.occurrences) if i in visible]
    return f"CONCAT_WS(':', {', '.join(parts)}) AS {quote(KEY_COLUMN)}"


def _affected_keys(block: "Block", views: SourceViews) -> str:
    """The key values of every occurrence's change rows (both images);
    when a NOT IN's subquery changes state (:meth:`NotIn.state`), every key
    value of the other occurrences' new and old states too."""
    parts = [f"SELECT {quote(col)} AS `_ct_jk` FROM {quote(views[source].delta)}"
             for (source, _), col in zip(block.occurrences, block.join_keys.columns)]
    not_ins = _not_ins(block)
    changed = " OR ".join(f"{n.state(views[block.occurrences[i][0]].new)} <> "
                          f"{n.state(views[block.occurrences[i][0]].old)}" for i, n in not_ins.items())
    if changed:
        parts += [f"SELECT {quote(col)} AS `_ct_jk` FROM {quote(getattr(views[source], state))} WHERE {changed}"
                  for i, ((source, _), col) in enumerate(zip(block.occurrences, block.join_keys.columns))
                  if i not in not_ins for state in ("new", "old")]
    return " UNION ALL ".join(parts)


def _not_ins(block: "Block") -> dict[int, NotIn]:
    """The :class:`NotIn` of each NOT IN's anti join, by occurrence."""
    joins = block.select.args.get("joins") or ()
    return {i: j.meta[JOIN_FILTER] for i, j in enumerate(joins, start=1) if JOIN_FILTER in j.meta}


def _restricted(view: str, key_column: str, affected: str) -> str:
    """``view``'s rows whose key is affected (null-safely: a NULL key is
    affected when a change row has a NULL key)."""
    return (f"SELECT `_ct_v`.* FROM {quote(view)} AS `_ct_v` LEFT SEMI JOIN ({affected}) AS `_ct_ks` "
            f"ON `_ct_v`.{quote(key_column)} <=> `_ct_ks`.`_ct_jk`")


def state_sql(block: "Block", views: SourceViews, state: str, items: Sequence[str], *, ms: int) -> str:
    """The block (without GROUP BY, DISTINCT and HAVING) over the ``state``
    ('new' or 'old') views restricted to the affected keys, selecting ``items``."""
    affected = _affected_keys(block, views)
    copy = block.select.copy()
    tables = [copy.args["from_"].this] + [j.this for j in copy.args.get("joins") or ()]
    for table, (source, _), key in zip(tables, block.occurrences, block.join_keys.columns, strict=True):
        sub = sqlglot.parse_one(_restricted(getattr(views[source], state), key, affected), read="spark")
        table.replace(exp.Subquery(this=sub, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))
    # A NOT IN's state is of its whole subquery: the unrestricted view.
    copy = with_join_filters(copy, {j: getattr(views[source], state) for j, (source, _) in enumerate(block.occurrences[1:])})
    copy.set("expressions", [sqlglot.parse_one(i, read="spark") for i in items])
    for part in ("group", "distinct", "having"):
        copy.set(part, None)
    return bind_time(copy, ms).sql(dialect="spark")


def delta_select(block: "Block", views: SourceViews, outputs: Sequence[str], branch: int | None, *, ms: int) -> str:
    """The MERGE source rows of a keyed block, from one full outer join of
    the affected keys' new rows (n) and old rows (o) on the derivation key:
    a new row that is not an old row unchanged is an 'upsert', an old key
    the new rows lack a 'delete'; columns: outputs, key, op."""
    items = [item.sql(dialect="spark") for item in block.select.expressions] + [row_key(block, branch)]
    new, old = (state_sql(block, views, s, items, ms=ms) for s in ("new", "old"))
    key, op = quote(KEY_COLUMN), quote(OP_COLUMN)
    same = " AND ".join(f"n.{quote(c)} <=> o.{quote(c)}" for c in outputs)
    values = ", ".join(f"n.{quote(c)}" for c in outputs)
    return (f"SELECT {values}, COALESCE(n.{key}, o.{key}) AS {key}, "
            f"CASE WHEN n.{key} IS NULL THEN 'delete' ELSE 'upsert' END AS {op} "
            f"FROM ({new}) AS n FULL OUTER JOIN ({old}) AS o ON n.{key} = o.{key} "
            f"WHERE n.{key} IS NULL OR o.{key} IS NULL OR NOT ({same})")


def signed_terms(block: "Block", views: SourceViews, items: Sequence[str], sign: str, *, ms: int) -> str:
    """The signed change of a keyed block's rows, for an aggregate over it:
    the new rows of the affected keys with ``+1``, the old ones with ``-1``
    (rows of unaffected keys are equal in both and left out)."""
    new = state_sql(block, views, "new", [*items, f"1 AS {sign}"], ms=ms)
    old = state_sql(block, views, "old", [*items, f"-1 AS {sign}"], ms=ms)
    return f"({new})\nUNION ALL\n({old})"
