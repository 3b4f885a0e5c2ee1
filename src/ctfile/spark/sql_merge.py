"""``MERGE INTO`` in the SQL text of :func:`ctfile.spark.sql` (docs/spark.md "SQL"),
planned from sqlglot's parse (Spark dialect) into the calls of
:meth:`ctfile.spark.CtfileTable.merge_builder`, so that SQL text and the
builder are one MERGE engine (MERGE_DESIGN, "Spark API")::

    MERGE [WITH SCHEMA EVOLUTION] INTO t [AS a] USING (query) [AS b] | name [AS b] ON cond
      WHEN MATCHED [AND cond] THEN UPDATE SET c = expr, ... | UPDATE SET * | DELETE
      WHEN NOT MATCHED [BY TARGET] [AND cond] THEN INSERT (c, ...) VALUES (expr, ...) | INSERT *
      WHEN NOT MATCHED BY SOURCE [AND cond] THEN UPDATE SET c = expr, ... | DELETE

* the target's alias is the builder's ``target_alias`` (none: the
  registered name, or ``t`` for ``ctfile.`<uri>```), the source's its
  ``source_alias`` (none: the source table's name, or ``s`` for a
  subquery); conditions, the ON condition and values go to the builder as
  the Spark SQL text they were written as, qualified by those aliases;
* the source is a DataFrame: the subquery, or the named table, run by
  ``spark.sql`` (a ctfile table read as :mod:`ctfile.spark.sql_reads` reads
  it, time travel included);
* a SET or an INSERT column list names target columns (a target
  qualifier is dropped);
* ``WITH SCHEMA EVOLUTION`` (Spark 4's syntax, which sqlglot does not
  parse: :func:`ctfile.spark.sql_api.plan_statement` removes it first) is
  the builder's ``with_schema_evolution()``.

Planning checks the statement without Spark; a part the builder has no
call for (``USING`` columns instead of ``ON``, an ``INSERT`` without a
column list, ...) raises :class:`ctfile.UnsupportedFeatureError` naming it.

Examples
--------
>>> import sqlglot
>>> from ctfile.spark.sql_reads import Names
>>> tree = sqlglot.parse_one(
...     "MERGE INTO ctfile.`/data/t` AS t USING updates AS s ON t.id = s.id "
...     "WHEN MATCHED AND s.op = 'delete' THEN DELETE "
...     "WHEN MATCHED THEN UPDATE SET t.total = t.total + s.amount "
...     "WHEN NOT MATCHED THEN INSERT * "
...     "WHEN NOT MATCHED BY SOURCE THEN DELETE", dialect="spark")
>>> plan = plan_merge(tree, Names({}.get).resolve(tree.this), Names({}.get))
>>> plan.on, plan.target_alias, plan.source_alias, plan.source.text
('t.id = s.id', 't', 's', 'SELECT * FROM updates')
>>> for c in plan.clauses: print(c.method, dict(c.arguments))
when_matched_delete {'condition': "s.op = 'delete'"}
when_matched_update {'set': {'total': 't.total + s.amount'}, 'condition': None}
when_not_matched_insert_all {'condition': None}
when_not_matched_by_source_delete {'condition': None}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

import ctfile
from ctfile import MatchKind, MergeAction
from ctfile.spark.sql_reads import CtfileRef, Names, QueryPlan, plan_query
from ctfile.spark.sql_statements import check_parts, column_name, refresh, sql_text

DEFAULT_TARGET_ALIAS = "t"
DEFAULT_SOURCE_ALIAS = "s"


@dataclass(frozen=True)
class BuilderCall:
    """One clause as a builder call: ``method`` with keyword ``arguments``
    (``set``/``values`` a mapping of column to Spark SQL text, ``condition``
    Spark SQL text or None)."""

    method: str
    arguments: tuple[tuple[str, Any], ...]

    def apply(self, builder: Any) -> Any:
        kwargs = dict(self.arguments)
        positional = [kwargs.pop(k) for k in ("set", "values") if k in kwargs]
        return getattr(builder, self.method)(*positional, **kwargs)


@dataclass(frozen=True)
class SqlMerge:
    """``MERGE INTO``: the builder's arguments and its clause calls, in order."""

    target: CtfileRef
    source: QueryPlan
    on: str
    target_alias: str
    source_alias: str
    clauses: tuple[BuilderCall, ...]
    schema_evolution: bool = False  # MERGE WITH SCHEMA EVOLUTION INTO


    def run(self, spark: Any) -> ctfile.CommitResult:
        builder = self.target.table(spark).merge_builder(
            self.source.dataframe(spark), on=self.on, source_alias=self.source_alias, target_alias=self.target_alias,
        )
        for clause in self.clauses:
            builder = clause.apply(builder)
        if self.schema_evolution:
            builder = builder.with_schema_evolution()
        result = builder.execute()
        refresh(spark, self.target)
        return result


def plan_merge(tree: exp.Merge, ref: CtfileRef, names: Names) -> SqlMerge:
    """The plan of ``tree``, a MERGE into the ctfile table ``ref``.

    Raises
    ------
    UnsupportedFeatureError
        A part the builder has no call for (module docstring).
    InvalidArgumentError
        An INSERT whose column list and values differ in length, a
        statement without WHEN clause.
    """
    check_parts(tree, {"this", "using", "on", "whens", "using_cond"}, "MERGE")
    if tree.args.get("using_cond") or tree.args.get("on") is None:
        raise ctfile.UnsupportedFeatureError("MERGE ... USING (columns) is not supported: write ON t.c = s.c")
    target = tree.this
    target_alias = target.alias or (ref.name or DEFAULT_TARGET_ALIAS)
    source, source_alias = _source(tree.args["using"], names)
    whens = tree.args.get("whens")
    if whens is None or not whens.expressions:
        raise ctfile.InvalidArgumentError(f"MERGE into {ref} needs at least one WHEN clause")
    target_names = {target_alias.lower(), target.name.lower()}
    clauses = tuple(_clause(w, target_names) for w in whens.expressions)
    return SqlMerge(ref, source, tree.args["on"].sql(dialect="spark"), target_alias, source_alias, clauses)


def _source(using: exp.Expression, names: Names) -> tuple[QueryPlan, str]:
    """The source's query and alias."""
    if isinstance(using, exp.Subquery):
        return plan_query(using.this.copy(), names), using.alias or DEFAULT_SOURCE_ALIAS
    if isinstance(using, exp.Table):
        alias = using.alias or using.name
        table = using.copy()
        table.set("alias", None)
        return plan_query(exp.select("*").from_(table), names), alias
    raise ctfile.UnsupportedFeatureError(f"MERGE USING {sql_text(using)}: the source is a table name or a (query)")


_KIND_SQL = {MatchKind.MATCHED: "WHEN MATCHED", MatchKind.NOT_MATCHED: "WHEN NOT MATCHED",
             MatchKind.NOT_MATCHED_BY_SOURCE: "WHEN NOT MATCHED BY SOURCE"}
_ACTION_SQL = {MergeAction.UPDATE: "UPDATE SET c = ...", MergeAction.UPDATE_ALL: "UPDATE SET *",
               MergeAction.DELETE: "DELETE", MergeAction.INSERT: "INSERT (c, ...) VALUES (...)",
               MergeAction.INSERT_ALL: "INSERT *"}


def _clause(when: exp.When, target_names: set[str]) -> BuilderCall:
    kind = _kind(when)
    then = when.args.get("then")
    action = _action(then)
    what = f"{_KIND_SQL[kind]} THEN {sql_text(then) if action is None or action.assigns else _ACTION_SQL[action]}"
    if action not in kind.actions:
        allowed = " | ".join(_ACTION_SQL[a] for a in kind.actions)
        raise ctfile.UnsupportedFeatureError(f"{what} is not supported: {_KIND_SQL[kind]} takes THEN {allowed}")
    arguments = [("condition", sql_text(when.args.get("condition")))]
    if action is MergeAction.UPDATE:
        arguments.insert(0, ("set", _assignments(then.expressions, target_names, what)))
    elif action is MergeAction.INSERT:
        arguments.insert(0, ("values", _values(then, target_names, what)))
    return BuilderCall(ctfile.MergeBuilder.method_for(kind, action), tuple(arguments))


def _kind(when: exp.When) -> MatchKind:
    if when.args.get("matched"):
        return MatchKind.MATCHED
    return MatchKind.NOT_MATCHED_BY_SOURCE if when.args.get("source") else MatchKind.NOT_MATCHED


def _action(then: exp.Expression | None) -> MergeAction | None:
    """The action of a clause's THEN (None: no action a builder has)."""
    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        return MergeAction.DELETE
    if isinstance(then, exp.Update):
        return MergeAction.UPDATE_ALL if _is_star(then.expressions) else MergeAction.UPDATE
    if isinstance(then, exp.Insert):
        return MergeAction.INSERT_ALL if isinstance(then.this, exp.Star) else MergeAction.INSERT
    return None


def _is_star(expressions: list) -> bool:
    return len(expressions) == 1 and isinstance(expressions[0], exp.Star)


def _assignments(expressions: list, target_names: set[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for eq in expressions:
        if not isinstance(eq, exp.EQ):
            raise ctfile.UnsupportedFeatureError(f"{what}: the assignment {sql_text(eq)} is not supported")
        name = column_name(eq.this, target_names, what)
        if name in out:
            raise ctfile.InvalidArgumentError(f"{what} sets the column {name} twice")
        out[name] = sql_text(eq.expression)
    return out


def _values(insert: exp.Insert, target_names: set[str], what: str) -> dict[str, str]:
    columns, values = insert.this, insert.args.get("expression")
    if not isinstance(columns, exp.Tuple) or not isinstance(values, exp.Tuple):
        raise ctfile.UnsupportedFeatureError(f"{what} is not supported: write INSERT (column, ...) VALUES (value, ...)")
    if len(columns.expressions) != len(values.expressions):
        raise ctfile.InvalidArgumentError(
            f"{what} lists {len(columns.expressions)} columns and {len(values.expressions)} values"
        )
    out: dict[str, str] = {}
    for col, value in zip(columns.expressions, values.expressions):
        name = column_name(col, target_names, what)
        if name in out:
            raise ctfile.InvalidArgumentError(f"{what} names the column {name} twice")
        out[name] = sql_text(value)
    return out
