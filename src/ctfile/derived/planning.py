"""The operator plan of a derived table's query (SPEC §Derived tables,
"Incremental rules"): a validated sqlglot tree is cut into *blocks* (one
``SELECT ... FROM s [JOIN ...] [WHERE ...] [GROUP BY ...]`` each; a
``UNION ALL`` has one block per branch), and every construct with no
incremental rule becomes a :class:`~ctfile.derived.Blocker`.

Examples
--------
>>> from ctfile.derived.parsing import parse_statement
>>> tree = parse_statement("SELECT k, sum(v) AS s FROM a GROUP BY k", sources=("a",))
>>> planned = plan_tree(tree, sources=("a",), columns=None)
>>> planned.blockers, planned.root.kind.value, [a and a.kind.value for a in planned.blocks[0].aggregates]
((), 'aggregate', [None, 'sum'])
>>> plan_tree(parse_statement("SELECT k FROM a ORDER BY k", sources=("a",)), sources=("a",), columns=None).blockers
(Blocker(operator='ORDER BY', reason='a derived table is an unordered set of rows: ordering has no incremental rule'),)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Sequence

from sqlglot import exp

from ctfile import InvalidArgumentError
from ctfile.derived import outer_joins
from ctfile.derived.model import Blocker
from ctfile.derived.outer_joins import JoinKeys, JoinKind
from ctfile.derived.parsing import expand_stars, first_select, output_names, source_tables
from ctfile.derived import windows


class OperatorKind(enum.Enum):
    SCAN = "scan"
    PROJECT = "project"
    FILTER = "filter"
    INNER_JOIN = "inner join"
    #: The joins of a keyed block (outer_joins): the join keys a change touches are recomputed.
    KEYED_INNER_JOIN = "inner join by key"
    LEFT_JOIN = "left outer join"
    RIGHT_JOIN = "right outer join"
    FULL_JOIN = "full outer join"
    SEMI_JOIN = "left semi join"
    ANTI_JOIN = "left anti join"
    #: ``x NOT IN (SELECT y ...)`` (outer_joins.NotIn): an anti join with its subquery's null-aware state.
    NULL_AWARE_ANTI_JOIN = "null-aware anti join (NOT IN)"
    HAVING = "having"
    UNION_ALL = "union all"
    AGGREGATE = "aggregate"
    DISTINCT = "distinct"
    WINDOW = "window"
    QUERY = "query"  # a query with blockers, planned as a whole


class AggKind(enum.Enum):
    COUNT_STAR = "count(*)"
    COUNT = "count"
    COUNT_DISTINCT = "count(DISTINCT)"
    SUM = "sum"
    AVG = "avg"
    MIN = "min"
    MAX = "max"


#: Aggregates whose new value follows from the stored one and the signed delta.
LINEAR_AGGREGATES = frozenset({AggKind.COUNT_STAR, AggKind.COUNT, AggKind.SUM, AggKind.AVG})

#: Spark functions whose value differs between evaluations over the same rows.
NONDETERMINISTIC = frozenset({
    "rand", "random", "randn", "uuid", "shuffle", "monotonically_increasing_id", "spark_partition_id",
    "input_file_name", "input_file_block_start", "input_file_block_length", "randstr", "uniform",
})
_NONDETERMINISTIC_CLASSES = tuple(getattr(exp, n) for n in ("Rand", "Randn", "Uuid", "Shuffle") if hasattr(exp, n))
#: Functions sqlglot does not type but that the compiler binds (render.bind_time).
TIME_FUNCTIONS = frozenset({"now", "current_timestamp", "current_date", "localtimestamp"})


@dataclass(frozen=True)
class Operator:
    """One node of the operator plan, for :meth:`CompiledQuery.explain`."""

    kind: OperatorKind
    detail: str
    inputs: tuple["Operator", ...] = ()


@dataclass(frozen=True, eq=False)
class AggCall:
    """One aggregate output: its kind and its argument (None for count(*))."""

    kind: AggKind
    arg: exp.Expression | None


@dataclass(frozen=True, eq=False)
class Block:
    """One SELECT block: ``select`` has its stars expanded and every item
    named; ``occurrences`` are ``(source, alias)`` of its FROM/JOIN items in
    order; ``keys`` the GROUP BY expressions (None: no aggregation);
    ``item_keys[i]`` the key index output ``i`` is (None: an aggregate,
    ``aggregates[i]``); ``window`` its window functions (derived.windows)."""

    select: exp.Select
    occurrences: tuple[tuple[str, str], ...]
    keys: tuple[exp.Expression, ...] | None
    item_keys: tuple[int | None, ...]
    aggregates: tuple[AggCall | None, ...]
    #: The join key of a block with outer, semi or anti joins (outer_joins); None otherwise.
    join_keys: JoinKeys | None = None
    window: windows.WindowSpec | None = None

    @property
    def is_aggregate(self) -> bool:
        return self.keys is not None

    @property
    def having(self) -> exp.Expression | None:
        """The HAVING condition of an aggregate block (None: none)."""
        having = self.select.args.get("having")
        return having.this if having is not None else None


@dataclass(frozen=True, eq=False)
class PlannedQuery:
    tree: exp.Expression
    outputs: tuple[str, ...]
    sources: tuple[str, ...]
    blocks: tuple[Block, ...]
    root: Operator
    blockers: tuple[Blocker, ...]


def plan_tree(tree: exp.Expression, *, sources: Sequence[str],
              columns: Mapping[str, Sequence[str]] | None) -> PlannedQuery:
    """Plan a validated tree (:func:`~ctfile.derived.parsing.parse_statement`)."""
    written, tree = tree, windows.normalised(tree, sources=sources, columns=columns)
    outputs = output_names(tree, sources=sources, columns=columns)
    blockers: list[Blocker] = []
    selects = _branches(tree, blockers)
    blocks, ops = [], []
    for select in selects:
        block, op = _plan_select(select, outputs, sources=sources, columns=columns, blockers=blockers)
        blocks.append(block)
        ops.append(op)
    if len(blocks) > 1 and any(b.is_aggregate for b in blocks):
        blockers.append(Blocker("UNION ALL", "a branch aggregates: only UNION ALL of row-level branches is planned"))
    if len(blocks) > 1 and any(b.window is not None for b in blocks):
        blockers.append(Blocker("UNION ALL", "a branch has window functions: only UNION ALL of row-level branches is planned"))
    root = ops[0] if len(ops) == 1 else Operator(OperatorKind.UNION_ALL, f"{len(ops)} branches", tuple(ops))
    used = _sources_in_order(tree, sources)
    if blockers:
        root = Operator(OperatorKind.QUERY, "full recomputation", (root,))
    return PlannedQuery(written, outputs, used, tuple(blocks), root, tuple(dict.fromkeys(blockers)))


def _sources_in_order(tree: exp.Expression, sources: Sequence[str]) -> tuple[str, ...]:
    lowered = {s.lower(): s for s in sources}
    # dfs is depth-first in argument order: the textual order of FROM and JOIN items.
    tables = [n for n in tree.dfs() if isinstance(n, exp.Table) and n.name.lower() in lowered]
    return tuple(dict.fromkeys(lowered[t.name.lower()] for t in tables))


def _branches(tree: exp.Expression, blockers: list[Blocker]) -> list[exp.Select]:
    """The SELECT branches of a UNION ALL tree (one for a plain SELECT);
    other set operations and query-level clauses become blockers."""
    if tree.args.get("with_") is not None:
        blockers.append(Blocker("WITH", "common table expressions are not planned (inline them)"))
    if isinstance(tree, exp.Subquery):
        return _branches(tree.this, blockers)
    if isinstance(tree, exp.Select):
        return [tree]
    _modifier_blockers(tree, blockers)
    if isinstance(tree, exp.Union) and not tree.args.get("distinct"):
        return _branches(tree.this, blockers) + _branches(tree.expression, blockers)
    name = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(type(tree), tree.key.upper())
    blockers.append(Blocker(name, "only UNION ALL has an incremental rule (set operations with duplicate elimination do not)"))
    return [first_select(tree)]


def _modifier_blockers(node: exp.Expression, blockers: list[Blocker]) -> None:
    if node.args.get("order") is not None:
        blockers.append(Blocker("ORDER BY", "a derived table is an unordered set of rows: ordering has no incremental rule"))
    if node.args.get("limit") is not None or node.args.get("offset") is not None:
        blockers.append(Blocker("LIMIT", "which rows a LIMIT keeps depends on all rows: no incremental rule"))


def _plan_select(select: exp.Select, outputs: tuple[str, ...], *, sources, columns,
                 blockers: list[Blocker]) -> tuple[Block, Operator]:
    windowed = windows.has_windows(select)
    _modifier_blockers(select, blockers)
    select = outer_joins.rewrite_subqueries(select, blockers)
    _clause_blockers(select, blockers, windowed=windowed)
    _expression_blockers(select, blockers, windowed=windowed)
    occurrences = _occurrences(select, sources, blockers)
    join_keys = outer_joins.join_keys(select, occurrences, blockers)
    select = _named(expand_stars(select, sources=sources, columns=columns), outputs)
    select = _group_aliases_resolved(select, _input_columns(occurrences, columns))
    if windowed:
        select, window, found = windows.plan_windows(select, _input_columns(occurrences, columns))
        blockers.extend(found)
        if join_keys is not None:
            blockers.append(Blocker("window function", "windows over outer, semi or anti joins are not planned"))
        none = (None,) * len(outputs)
        block = Block(select, occurrences, None, none, none, join_keys, window)
    else:
        keys, item_keys, aggregates = _aggregation(select, blockers)
        block = Block(select, occurrences, keys, item_keys, aggregates, join_keys)
    return block, _operators(block)


def _clause_blockers(select: exp.Select, blockers: list[Blocker], *, windowed: bool = False) -> None:
    for name, label in (("qualify", "QUALIFY"), ("laterals", "LATERAL VIEW")):
        if select.args.get(name) and not (windowed and name == "qualify"):  # derived.windows plans QUALIFY
            blockers.append(Blocker(label, "not planned: no incremental rule"))
    if _groups_by_sets(select.args.get("group")):
        blockers.append(Blocker("GROUP BY ROLLUP/CUBE/GROUPING SETS", "only plain GROUP BY lists are planned"))
    for join in select.args.get("joins") or ():
        _join_blockers(join, blockers)
    if any(node is not select for node in select.find_all(exp.Select, exp.Subquery)):
        blockers.append(Blocker("subquery", "subqueries are not planned (only one SELECT block per UNION ALL branch)"))


def _groups_by_sets(group: exp.Group | None) -> bool:
    """Whether a GROUP BY holds ROLLUP, CUBE or GROUPING SETS (as its own
    arguments or as items, as sqlglot parses either)."""
    if group is None:
        return False
    return (any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets", "totals"))
            or any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions))


def _join_blockers(join: exp.Join, blockers: list[Blocker]) -> None:
    """Joins that are no equi-join; an outer, semi or anti join's ON is
    checked with its block's other joins (outer_joins.join_keys)."""
    kind = outer_joins.join_kind(join)
    if kind is None:
        side, name = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        label = " ".join(p for p in (join.args.get("method") or "", side, name) if p).upper() + " JOIN"
        blockers.append(Blocker(label, "only equi-joins have an incremental rule"))
    elif join.args.get("using"):
        blockers.append(Blocker("JOIN USING", "write the join with ON (USING merges columns: not planned)"))
    elif join.args.get("on") is None:
        label = "JOIN without ON" if kind is JoinKind.INNER else f"{kind.value.upper()} JOIN without ON"
        blockers.append(Blocker(label, "a cross product: only equi-joins have an incremental rule"))
    elif kind is JoinKind.INNER and not any(
            isinstance(n, (exp.EQ, exp.NullSafeEQ)) for n in join.args["on"].find_all(exp.EQ, exp.NullSafeEQ)):
        blockers.append(Blocker("INNER JOIN", f"ON {join.args['on'].sql(dialect='spark')} has no equality: not an equi-join"))


def _expression_blockers(select: exp.Select, blockers: list[Blocker], *, windowed: bool = False) -> None:
    for node in select.walk():
        if isinstance(node, exp.Window) and not windowed:  # derived.windows plans them
            blockers.append(Blocker("window function", f"{node.sql(dialect='spark')}: no incremental rule"))
        elif isinstance(node, _NONDETERMINISTIC_CLASSES) or _anonymous_name(node) in NONDETERMINISTIC:
            blockers.append(Blocker(f"{_function_name(node)}()", "non-deterministic: a delta would not equal a recomputation"))
        elif isinstance(node, exp.Anonymous) and _anonymous_name(node) not in TIME_FUNCTIONS:
            blockers.append(Blocker(f"{_function_name(node)}()", "unknown function or UDF: it cannot be shown deterministic"))


def _anonymous_name(node: exp.Expression) -> str | None:
    return str(node.this).lower() if isinstance(node, exp.Anonymous) else None


def _function_name(node: exp.Expression) -> str:
    return _anonymous_name(node) or node.sql_name().lower()


def _occurrences(select: exp.Select, sources: Sequence[str], blockers: list[Blocker]) -> tuple[tuple[str, str], ...]:
    lowered = {s.lower(): s for s in sources}
    found: list[tuple[str, str]] = []
    for table in source_tables(select):
        if not isinstance(table, exp.Table) or table.name.lower() not in lowered:
            blockers.append(Blocker("FROM", f"{table.sql(dialect='spark')} is not a source table (a subquery, CTE or function)"))
            continue
        if table.args.get("sample") is not None:
            blockers.append(Blocker("TABLESAMPLE", "non-deterministic: a delta would not equal a recomputation"))
        found.append((lowered[table.name.lower()], table.alias_or_name))
    aliases = [a.lower() for _, a in found]
    duplicated = sorted({a for a in aliases if aliases.count(a) > 1})
    if duplicated:
        raise InvalidArgumentError(f"each table occurrence needs its own alias; {duplicated} name more than one occurrence")
    if not found and not select.args.get("from_"):
        blockers.append(Blocker("SELECT without FROM", "reads no source: nothing to maintain incrementally"))
    return tuple(found)


def _named(select: exp.Select, outputs: tuple[str, ...]) -> exp.Select:
    """``select`` with every item aliased to the query's output name at its
    position (UNION ALL branches take the first branch's names)."""
    if len(select.expressions) != len(outputs):
        raise InvalidArgumentError(
            f"every UNION ALL branch must have {len(outputs)} columns ({list(outputs)}), found {len(select.expressions)}")
    copy = select.copy()
    items = []
    for item, name in zip(copy.expressions, outputs):
        items.append(exp.alias_(item.unalias(), name, quoted=True))
    copy.set("expressions", items)
    return copy


def _aggregation(select: exp.Select, blockers: list[Blocker]):
    """``(keys, item_keys, aggregates)`` of a block (keys None: no
    aggregation); shapes it cannot plan become blockers."""
    items = [e.unalias() for e in select.expressions]
    group = select.args.get("group")
    has_aggregates = any(e.find(exp.AggFunc) for e in items)
    _having_blockers(select, has_aggregates, blockers)
    if select.args.get("distinct") is not None:
        if group is not None or has_aggregates or select.args["distinct"].args.get("on"):
            blockers.append(Blocker("DISTINCT", "DISTINCT together with GROUP BY, aggregates or ON is not planned"))
        return tuple(items), tuple(range(len(items))), (None,) * len(items)
    if group is None and not has_aggregates:
        return None, (None,) * len(items), (None,) * len(items)
    keys = tuple(_group_keys(group, items)) if group is not None else ()
    key_text = [k.sql(dialect="spark") for k in keys]
    planned = [_output_of(item, name, key_text, blockers) for item, name in zip(items, (e.alias for e in select.expressions))]
    return keys, tuple(k for k, _ in planned), tuple(a for _, a in planned)


def _output_of(item: exp.Expression, name: str, key_text: list[str],
               blockers: list[Blocker]) -> tuple[int | None, AggCall | None]:
    """One output of an aggregate block: ``(the GROUP BY key it is, None)``
    or ``(None, its aggregate call)``; neither is a blocker."""
    agg = _aggregate_call(item, blockers)
    text = item.sql(dialect="spark")
    position = key_text.index(text) if text in key_text else None
    if agg is None and position is None:
        blockers.append(Blocker("aggregate", f"output {name!r} ({text}) is neither a GROUP BY "
                                             "expression nor a supported aggregate call"))
    return (None if agg is not None else position), agg


def _having_blockers(select: exp.Select, has_aggregates: bool, blockers: list[Blocker]) -> None:
    """HAVING is planned on an aggregate (its affected groups recomputed),
    not on DISTINCT or a block without aggregation."""
    if select.args.get("having") is None:
        return
    if select.args.get("distinct") is not None or (select.args.get("group") is None and not has_aggregates):
        blockers.append(Blocker("HAVING", "HAVING is planned on an aggregate (GROUP BY or aggregate calls) without DISTINCT"))


def _input_columns(occurrences: Sequence[tuple[str, str]], columns: Mapping[str, Sequence[str]] | None) -> set[str] | None:
    """The lower-cased column names a block's sources have (None: unknown,
    when ``columns`` does not list every source the block reads)."""
    if columns is None or any(source not in columns for source, _ in occurrences):
        return None
    return {c.lower() for source, _ in occurrences for c in columns[source]}


def _group_aliases_resolved(select: exp.Select, inputs: set[str] | None) -> exp.Select:
    """``select`` with each GROUP BY name that is no source column but an
    output's alias replaced by that output's expression, as Spark resolves
    it (``spark.sql.groupByAliases``: a source column wins); unchanged when
    the source columns are unknown (the alias then stays a blocker)."""
    group = select.args.get("group")
    if group is None or inputs is None:
        return select
    aliased = {e.alias.lower(): e.unalias() for e in select.expressions if isinstance(e, exp.Alias)}

    def is_alias(key: exp.Expression) -> bool:
        unqualified = isinstance(key, exp.Column) and not key.table
        return unqualified and key.name.lower() not in inputs and key.name.lower() in aliased

    if not any(is_alias(k) for k in group.expressions):
        return select
    copy = select.copy()
    keys = [aliased[k.name.lower()].copy() if is_alias(k) else k for k in group.expressions]
    copy.set("group", exp.Group(expressions=keys))
    return copy


def _group_keys(group: exp.Group, items: list[exp.Expression]) -> list[exp.Expression]:
    """The GROUP BY expressions, ordinals (``GROUP BY 1``) replaced by the
    select item they name."""
    keys = []
    for key in group.expressions:
        if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.this) <= len(items):
            keys.append(items[int(key.this) - 1])
        else:
            keys.append(key)
    return keys


_AGGREGATES = {exp.Sum: AggKind.SUM, exp.Avg: AggKind.AVG, exp.Min: AggKind.MIN, exp.Max: AggKind.MAX}


def _aggregate_call(item: exp.Expression, blockers: list[Blocker]) -> AggCall | None:
    """The :class:`AggCall` ``item`` is (None when it is not an aggregate)."""
    if not item.find(exp.AggFunc):
        return None
    text = item.sql(dialect="spark")
    if not isinstance(item, (exp.Count, *_AGGREGATES)) or any(n.find(exp.AggFunc) for n in item.iter_expressions()):
        blockers.append(Blocker("aggregate", f"{text}: only count, sum, avg, min, max and count(DISTINCT x) "
                                             "called directly (not inside an expression) are planned"))
        return None
    arg = item.this
    if isinstance(item, exp.Count):
        if isinstance(arg, exp.Star) or arg is None:
            return AggCall(AggKind.COUNT_STAR, None)
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                blockers.append(Blocker("aggregate", f"{text}: count(DISTINCT) of one expression only"))
                return None
            return AggCall(AggKind.COUNT_DISTINCT, arg.expressions[0])
        return AggCall(AggKind.COUNT, arg)
    if isinstance(arg, exp.Distinct) or len(list(item.iter_expressions())) != 1:
        blockers.append(Blocker("aggregate", f"{text}: DISTINCT or extra arguments are not planned"))
        return None
    return AggCall(_AGGREGATES[type(item)], arg)


_JOIN_OPERATORS = {
    JoinKind.INNER: OperatorKind.KEYED_INNER_JOIN, JoinKind.LEFT: OperatorKind.LEFT_JOIN,
    JoinKind.RIGHT: OperatorKind.RIGHT_JOIN, JoinKind.FULL: OperatorKind.FULL_JOIN,
    JoinKind.SEMI: OperatorKind.SEMI_JOIN, JoinKind.ANTI: OperatorKind.ANTI_JOIN,
    JoinKind.NULL_AWARE_ANTI: OperatorKind.NULL_AWARE_ANTI_JOIN,
}


def _join_operator(block: Block, scans: tuple[Operator, ...]) -> Operator:
    """The inputs of a block: a scan, the n-way inner join, or (a keyed
    block) one operator per join, left-deep."""
    if len(scans) == 1:
        return scans[0]
    keys = block.join_keys
    if keys is None:
        return Operator(OperatorKind.INNER_JOIN, f"{len(scans)} inputs", scans)
    op = scans[0]
    for kind, on, scan in zip(keys.kinds[1:], keys.conditions, scans[1:]):
        op = Operator(_JOIN_OPERATORS[kind], f"ON {on}", (op, scan))
    return op


def _operators(block: Block) -> Operator:
    scans = tuple(Operator(OperatorKind.SCAN, f"{src} AS {alias}") for src, alias in block.occurrences)
    op = _join_operator(block, scans)
    where = block.select.args.get("where")
    if where is not None:
        op = Operator(OperatorKind.FILTER, where.this.sql(dialect="spark"), (op,))
    if block.window is not None:
        op = Operator(OperatorKind.WINDOW, block.window.describe(block.select), (op,))
    names = ", ".join(e.alias for e in block.select.expressions)
    if block.select.args.get("distinct") is not None:
        return Operator(OperatorKind.DISTINCT, names, (op,))
    if block.is_aggregate:
        keys = ", ".join(k.sql(dialect="spark") for k in block.keys) or "(no GROUP BY: one group)"
        op = Operator(OperatorKind.AGGREGATE, f"GROUP BY {keys}: {names}", (op,))
        having = block.having
        return op if having is None else Operator(OperatorKind.HAVING, having.sql(dialect="spark"), (op,))
    return Operator(OperatorKind.PROJECT, names, (op,))
