"""Choosing a derived table's refresh (SPEC §Derived tables, refresh actions;
the Dynamic Tables paper, section 3.3): ``NO_DATA``, ``INCREMENTAL``, ``FULL`` or
``REINITIALIZE``, with the reason recorded in the commit. Decided from the
logs of the derived table and of its sources alone
(:mod:`ctfile.spark.derived_sources`), so a refresh with nothing to do
starts no Spark job.

The rules, first match wins:

1. never refreshed: ``FULL`` (the first contents);
2. the definition was replaced, or was compiled by older plan rules:
   ``REINITIALIZE``;
3. a source URI now holds another table: ``REINITIALIZE``;
4. no source committed a data change since the frontier: ``NO_DATA``;
5. a source's schema changed, or the history the delta needs is gone
   (vacuumed, or expired past ``ctfile.maxRetentionExtension``):
   ``REINITIALIZE``;
6. ``refresh_mode="full"``, or a query with an operator that has no
   incremental rule: ``FULL``;
7. ``refresh_mode="auto"`` and the full refresh is estimated to cost less
   than the incremental one (:mod:`ctfile.spark.derived_cost`, from the
   logs): ``FULL``, written as an overwrite (Snowflake's FULL);
8. otherwise ``INCREMENTAL``.

Every other ``FULL`` recomputes the query and MERGEs it in, so unchanged
rows keep their row ids and the table's own change scan stays minimal;
``auto``'s is chosen for its cost, and a MERGE of every row is what costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import ctfile
from ctfile.spark.derived_cost import RefreshCost
from ctfile.spark.derived_sources import SourceState, describe


@dataclass(frozen=True)
class RefreshDecision:
    """The action a refresh takes and why (recorded in ``commitInfo.refresh``)."""

    action: ctfile.RefreshAction
    reason: str
    #: A ``FULL`` written as an overwrite (every row replaced, new row ids)
    #: rather than MERGEd in: ``auto``'s choice by cost.
    overwrite: bool = False

    @property
    def commits(self) -> bool:
        """Whether the action writes a version (``NO_DATA`` does not)."""
        return self.action is not ctfile.RefreshAction.NO_DATA

    @property
    def incremental(self) -> bool:
        return self.action is ctfile.RefreshAction.INCREMENTAL


Rule = Callable[["RefreshContext"], "RefreshDecision | None"]


@dataclass(frozen=True)
class RefreshContext:
    """What the rules look at: the definition, whether it was replaced, the
    compiled plan's blockers and rule version, and the sources."""

    definition: ctfile.DerivedDefinition
    sources: Sequence[SourceState]
    blockers: Sequence[object]
    plan_version: int
    definition_replaced: bool = False
    #: The estimates ``auto`` chooses by, computed when its rule is reached
    #: (after the rules that find the history gone); None: not ``auto``.
    cost: Callable[[], RefreshCost | None] | None = None

    def moved(self) -> list[SourceState]:
        return [s for s in self.sources if s.moved]


def _never_refreshed(c: RefreshContext) -> RefreshDecision | None:
    if not c.definition.frontier:
        return RefreshDecision(ctfile.RefreshAction.FULL, f"first refresh, at {describe(c.sources)}")
    return None


def _definition_changed(c: RefreshContext) -> RefreshDecision | None:
    if c.definition_replaced:
        return RefreshDecision(ctfile.RefreshAction.REINITIALIZE, "the definition was replaced")
    if c.definition.plan_version != c.plan_version:
        return RefreshDecision(
            ctfile.RefreshAction.REINITIALIZE,
            f"the definition was compiled by plan rules {c.definition.plan_version}, these are {c.plan_version}",
        )
    return None


def _source_recreated(c: RefreshContext) -> RefreshDecision | None:
    for s in c.sources:
        if s.recreated:
            return RefreshDecision(
                ctfile.RefreshAction.REINITIALIZE,
                f"source {s.name} ({s.binding.uri}) is another table now: table id {s.table.table_id}, "
                f"bound to {s.binding.table_id}",
            )
    return None


def _no_data(c: RefreshContext) -> RefreshDecision | None:
    if not any(s.data_changed() for s in c.moved()):
        return RefreshDecision(ctfile.RefreshAction.NO_DATA, f"no source changed data since {_frontier(c)}")
    return None


def _schema_or_history(c: RefreshContext) -> RefreshDecision | None:
    for s in c.moved():
        if s.schema_changed():
            return RefreshDecision(
                ctfile.RefreshAction.REINITIALIZE,
                f"source {s.name} changed its schema after version {s.previous.version}",
            )
        lost = s.history_lost()
        if lost is not None:
            return RefreshDecision(ctfile.RefreshAction.REINITIALIZE, f"source {s.name}: its history is gone: {lost}")
    return None


def _full_by_definition(c: RefreshContext) -> RefreshDecision | None:
    if c.definition.refresh_mode is ctfile.RefreshMode.FULL:
        return RefreshDecision(ctfile.RefreshAction.FULL, "refresh mode full")
    if c.blockers:
        return RefreshDecision(ctfile.RefreshAction.FULL, "not incremental: " + "; ".join(map(str, c.blockers)))
    return None


def _auto_estimate(c: RefreshContext) -> RefreshDecision | None:
    if c.definition.refresh_mode is not ctfile.RefreshMode.AUTO or c.cost is None:
        return None
    cost = c.cost()
    if cost is None or not cost.prefers_full:
        return None
    sizes = ", ".join(_size(s) for s in c.moved())
    return RefreshDecision(ctfile.RefreshAction.FULL, f"auto: {sizes}; {cost}: overwrite", overwrite=True)


RULES: tuple[Rule, ...] = (
    _never_refreshed, _definition_changed, _source_recreated, _no_data, _schema_or_history,
    _full_by_definition, _auto_estimate,
)


def decide(context: RefreshContext) -> RefreshDecision:
    """The first rule of the module's list that applies, else ``INCREMENTAL``."""
    for rule in RULES:
        decision = rule(context)
        if decision is not None:
            return decision
    sizes = ", ".join(_size(s) for s in context.moved())
    return RefreshDecision(ctfile.RefreshAction.INCREMENTAL, f"changes since {_frontier(context)}: {sizes}")


def _size(s: SourceState) -> str:
    e = s.estimate
    kind = "appended" if e.appended_only else "changed"
    return f"{s.name} {kind} {e.changed_rows:,} rows ({e.fraction:.1%})"


def _frontier(c: RefreshContext) -> str:
    return ", ".join(f"{v.name}@{v.version}" for v in c.definition.frontier)
