"""Derived tables' query compiler (contract C3 of issue 29; SPEC §Derived
tables): :func:`compile_query` turns a Spark SQL query over named sources
into a :class:`CompiledQuery` whose ``full()`` and ``delta()`` give the
Spark SQL MERGE source and clauses of a refresh. Pure Python (sqlglot):
``ctfile.spark.derived`` registers the views and runs them."""

from ctfile.derived.compiler import CompiledQuery, compile_query
from ctfile.derived.version import PLAN_VERSION
from ctfile.derived.explain import Explanation, ExplainRow
from ctfile.derived.model import (
    KEY_COLUMN, OP_COLUMN, ROWS_COLUMN, Blocker, ClauseKind, DeltaKind, MergeClause, NonIncrementalPlanError, RefreshSql,
    SourceViews, ViewNames,
)
from ctfile.derived.aggregates import LinearAggregate, LinearOutput
from ctfile.derived.planning import AggKind, Operator, OperatorKind

__all__ = [
    "PLAN_VERSION",
    "compile_query",
    "CompiledQuery",
    "Explanation",
    "ExplainRow",
    "Blocker",
    "Operator",
    "OperatorKind",
    "AggKind",
    "LinearAggregate",
    "LinearOutput",
    "ClauseKind",
    "DeltaKind",
    "MergeClause",
    "NonIncrementalPlanError",
    "RefreshSql",
    "SourceViews",
    "ViewNames",
    "KEY_COLUMN",
    "ROWS_COLUMN",
    "OP_COLUMN",
]
