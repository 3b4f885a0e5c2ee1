"""``CompiledQuery.explain()`` (SPEC §Derived tables): one row per operator
of the plan, whether it has an incremental rule, and the rule or the reason
it has none.

Examples
--------
>>> from ctfile.derived import compile_query
>>> print(compile_query("SELECT k, count(*) AS n FROM s WHERE v > 0 GROUP BY k", sources=("s",)).explain())
incremental: yes
aggregate GROUP BY k: k, n  [incremental] count/sum/avg: the signed delta is combined with the stored state in the MERGE; groups reaching 0 rows are deleted
  filter v > 0  [incremental] applied to each delta term (a predicate over one row image)
    scan s AS s  [incremental] new/old states at the frontiers and the minimum-delta change scan

A source whose table is append-only (``ctfile.appendOnly``, SPEC §Append-only
tables) makes ``min``/``max`` combine with the stored value and its change
scan read only appended rows:

>>> q = compile_query("SELECT k, max(v) AS m FROM s GROUP BY k", sources=("s",))
>>> print(q.explain(append_only=("s",)))
incremental: yes
append-only sources: s (ctfile.appendOnly)
aggregate GROUP BY k: k, m  [incremental] min/max: combined with the stored value (least/greatest): every source is append-only (ctfile.appendOnly), no group is recomputed
  scan s AS s  [incremental] new state at the frontier and the append-only change scan (the fresh rows of the appended partitions): s is append-only (ctfile.appendOnly)

So does ``count(DISTINCT)``, by counting only the appended values new to
their group:

>>> q = compile_query("SELECT k, count(DISTINCT v) AS n FROM s GROUP BY k", sources=("s",))
>>> rule = q.explain(append_only=("s",)).rows[0].rule
>>> rule[:44], rule.endswith("no group is recomputed")
('count(DISTINCT): the stored count plus, per ', True)

An outer, semi or anti join and a HAVING have a row each:

>>> q = compile_query("SELECT a.k, count(*) AS n FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.k HAVING n > 1",
...                   sources=("a", "b"))
>>> [(r.operator, r.detail) for r in q.explain().rows[:3]]
[('having', 'n > 1'), ('aggregate', 'GROUP BY a.k: k, n'), ('left outer join', 'ON a.k = b.k')]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ctfile.derived.model import Blocker
from ctfile.derived.planning import AggKind, Block, Operator, OperatorKind
from ctfile.derived.windows import RULE as WINDOW_RULE

_RULES = {
    OperatorKind.SCAN: "new/old states at the frontiers and the minimum-delta change scan",
    OperatorKind.PROJECT: "projection of each delta term; key: the source rows' METADATA$ROW_ID joined with ':'",
    OperatorKind.FILTER: "applied to each delta term (a predicate over one row image)",
    OperatorKind.INNER_JOIN: "telescoping: sum over i of new(X1..Xi-1) JOIN delta(Xi) JOIN old(Xi+1..Xn)",
    OperatorKind.UNION_ALL: "the branches' deltas; key prefixed by the branch index",
    OperatorKind.DISTINCT: "GROUP BY all output columns with a row count; a group reaching 0 rows is deleted",
    OperatorKind.HAVING: ("the affected groups are recomputed from the new state with the HAVING applied: a group "
                          "leaving it is deleted, one entering it inserted (the table's groups: the old state with "
                          "the HAVING)"),
    OperatorKind.WINDOW: WINDOW_RULE,
}
_KEYED = ("the join keys touched by the delta are recomputed from the new state: -old rows, +new rows "
          "of those keys; key: ")
_NULL_SLOT = "the row ids, an empty slot for a null-extended side"
_RULES.update({
    OperatorKind.KEYED_INNER_JOIN: _KEYED + "the row ids",
    OperatorKind.LEFT_JOIN: _KEYED + _NULL_SLOT,
    OperatorKind.RIGHT_JOIN: _KEYED + _NULL_SLOT,
    OperatorKind.FULL_JOIN: _KEYED + _NULL_SLOT,
    OperatorKind.SEMI_JOIN: _KEYED + "the left side's row ids",
    OperatorKind.ANTI_JOIN: _KEYED + "the left side's row ids",
    OperatorKind.NULL_AWARE_ANTI_JOIN: (
        _KEYED + "the left side's row ids; a row is kept when the subquery is empty, else when x is not NULL, "
        "not in it and it holds no NULL, so every key is recomputed when the subquery's state (empty, "
        "holding a NULL, neither) differs between the old and the new state"),
})


@dataclass(frozen=True)
class ExplainRow:
    """One operator: its depth in the tree, name, detail, and its rule (or
    the reason it has none)."""

    depth: int
    operator: str
    detail: str
    incremental: bool
    rule: str

    def as_json(self) -> dict[str, Any]:
        return {"depth": self.depth, "operator": self.operator, "detail": self.detail,
                "incremental": self.incremental, "rule": self.rule}


@dataclass(frozen=True)
class Explanation:
    """The rows of :meth:`CompiledQuery.explain`, with the blockers."""

    incremental: bool
    rows: tuple[ExplainRow, ...]
    blockers: tuple[Blocker, ...]
    #: The sources whose tables are append-only (SPEC §Append-only tables).
    append_only: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"incremental: {'yes' if self.incremental else 'no (full refresh only)'}"]
        if self.append_only:
            lines.append(f"append-only sources: {', '.join(self.append_only)} ({_PROPERTY})")
        for row in self.rows:
            flag = "incremental" if row.incremental else "full"
            lines.append(f"{'  ' * row.depth}{row.operator} {row.detail}  [{flag}] {row.rule}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {"incremental": self.incremental, "appendOnlySources": list(self.append_only),
                "operators": [r.as_json() for r in self.rows],
                "blockers": [{"operator": b.operator, "reason": b.reason} for b in self.blockers]}

    def to_json(self) -> str:
        return json.dumps(self.as_json(), indent=2)


_PROPERTY = "ctfile.appendOnly"


def _all_append_only(block: Block | None, append_only: frozenset[str]) -> bool:
    """Whether every source ``block`` reads is append-only."""
    return block is not None and all(src in append_only for src, _ in block.occurrences)


def _aggregate_rule(block: Block | None, append_only: frozenset[str] = frozenset()) -> str:
    kinds = {a.kind for a in block.aggregates if a is not None} if block else set()
    if block is not None and block.having is not None:
        return "the affected groups (keys in the delta) are recomputed from the new state (a HAVING reads whole groups)"
    parts = []
    if kinds & {AggKind.COUNT_STAR, AggKind.COUNT, AggKind.SUM, AggKind.AVG} or not kinds:
        parts.append("count/sum/avg: the signed delta is combined with the stored state in the MERGE; "
                     "groups reaching 0 rows are deleted")
    if kinds & {AggKind.MIN, AggKind.MAX}:
        parts.append(_min_max_rule(block, append_only))
    if AggKind.COUNT_DISTINCT in kinds:
        parts.append(_count_distinct_rule(block, append_only))
    return "; ".join(parts)


_DISTINCT_COMBINED = ("count(DISTINCT): the stored count plus, per group, the appended values its old rows lack "
                      "(an anti join of the appended (group, value) pairs against the old state, restricted to "
                      "those pairs)")


def _count_distinct_rule(block: Block, append_only: frozenset[str]) -> str:
    """count(DISTINCT)'s rule (aggregates.linear_delta_sql): combined over
    appends, unless an outer, semi or anti join can remove rows on append."""
    if block.join_keys is not None:
        return ("count(DISTINCT): the affected groups are recomputed from the new state (an append to an outer "
                "join's side can remove a null-extended row)")
    if _all_append_only(block, append_only):
        return f"{_DISTINCT_COMBINED}: every source is append-only ({_PROPERTY}), no group is recomputed"
    return (f"{_DISTINCT_COMBINED} when every source only appended, else the affected groups are recomputed "
            f"from the new state")


def _min_max_rule(block: Block, append_only: frozenset[str]) -> str:
    if block.join_keys is not None:
        return ("min/max: the affected groups are recomputed from the new state (an append to an outer "
                "join's side can remove a null-extended row)")
    if _all_append_only(block, append_only):
        return (f"min/max: combined with the stored value (least/greatest): every source is append-only "
                f"({_PROPERTY}), no group is recomputed")
    return ("min/max: combined with the stored value (least/greatest) when every source only appended, "
            "else the affected groups are recomputed from the new state")


def _scan_rule(op: Operator, append_only: frozenset[str]) -> str:
    """The rule of a scan: the append-only change scan for an append-only
    source (SPEC §Append-only tables), else the minimum delta."""
    source = op.detail.split(" AS ")[0]  # the detail is "source AS alias" (planning)
    if source in append_only:
        return (f"new state at the frontier and the append-only change scan (the fresh rows of the appended "
                f"partitions): {source} is append-only ({_PROPERTY})")
    return _RULES[OperatorKind.SCAN]


def _window_rule(block: Block | None, append_only: frozenset[str]) -> str:
    """The window rule, and for a deduplication (one ROW_NUMBER, QUALIFY
    keeping row 1) over one source how appends are refreshed."""
    is_dedup = block is not None and block.window.top_order is not None and len(block.occurrences) == 1
    if not is_dedup:
        return _RULES[OperatorKind.WINDOW]
    compared = ("a deduplication: the appended rows' first row of each partition is compared with the row "
                "the table holds (no partition recomputed)")
    if _all_append_only(block, append_only):
        return f"{compared}: every source is append-only ({_PROPERTY})"
    return f"{compared} when the source only appended, else {_RULES[OperatorKind.WINDOW]}"


def _rule(op: Operator, blocks: tuple[Block, ...], aggregates, append_only: frozenset[str]) -> str:
    if op.kind is OperatorKind.AGGREGATE:
        return _aggregate_rule(next(aggregates, None), append_only)
    if op.kind is OperatorKind.SCAN:
        return _scan_rule(op, append_only)
    if op.kind is OperatorKind.WINDOW:
        return _window_rule(next((b for b in blocks if b.window is not None), None), append_only)
    return _RULES[op.kind]


def explain(
    root: Operator, blocks: tuple[Block, ...], blockers: tuple[Blocker, ...], *, append_only: Any = (),
) -> Explanation:
    """The explanation of a planned query; ``append_only``: the names of its
    sources whose tables are append-only (SPEC §Append-only tables)."""
    declared = frozenset(append_only)
    rows: list[ExplainRow] = []
    aggregates = iter(b for b in blocks if b.is_aggregate and b.select.args.get("distinct") is None)

    def visit(op: Operator, depth: int) -> None:
        if op.kind is OperatorKind.QUERY:
            rows.append(ExplainRow(depth, op.kind.value, op.detail, False, f"blocked by {len(blockers)} operator(s)"))
            rows.extend(ExplainRow(depth + 1, b.operator, "", False, b.reason) for b in blockers)
            return
        rule = _rule(op, blocks, aggregates, declared)
        rows.append(ExplainRow(depth, op.kind.value, op.detail, True, rule))
        for child in op.inputs:
            visit(child, depth + 1)

    visit(root, 0)
    return Explanation(not blockers, tuple(rows), blockers, tuple(sorted(declared)))
