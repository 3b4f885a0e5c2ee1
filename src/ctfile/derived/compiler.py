"""The derived-table query compiler (contract C3 of issue 29, SPEC §Derived
tables): :func:`compile_query` parses a Spark SQL query with sqlglot into an
operator plan and compiles it twice, to the full query (:meth:`CompiledQuery.full`)
and to its delta (:meth:`CompiledQuery.delta`), each a :class:`RefreshSql`:
one Spark SQL MERGE source over the refresh's temp views and the clauses
that merge it ``ON t._ct_dt_key = s._ct_dt_key``.

Examples
--------
>>> from ctfile.derived import compile_query, SourceViews, ViewNames
>>> plan = compile_query("SELECT country, sum(amount) AS revenue FROM silver GROUP BY country", sources=("silver", "dim"))
>>> plan.sources, plan.output_columns, plan.incremental
(('silver',), ('country', 'revenue'), True)
>>> plan.hidden_columns
(('_ct_dt_key', 'string'), ('_ct_dt_rows', 'bigint'), ('_ct_dt_cnt_1', 'bigint'))
>>> views = SourceViews({"silver": ViewNames(new="s1", old="s0", delta="ds")})
>>> [c.kind.value for c in plan.delta(views, data_timestamp_ms=0, appended_only={"silver": False}).clauses]
['when_matched_delete', 'when_matched_update', 'when_not_matched_insert']
>>> compile_query("SELECT k, rand() AS r FROM silver", sources=("silver",)).blockers
(Blocker(operator='rand()', reason='non-deterministic: a delta would not equal a recomputation'),)
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sqlglot import exp

from ctfile import InvalidArgumentError
from ctfile.derived import aggregates, rows, windows
from ctfile.derived.explain import Explanation, explain
from ctfile.derived.model import KEY_COLUMN, Blocker, DeltaKind, NonIncrementalPlanError, RefreshSql, SourceViews
from ctfile.derived.parsing import check_sources, cte_names, parse_statement
from ctfile.derived.planning import Operator, PlannedQuery, plan_tree
from ctfile.derived.render import bind_time, check_timestamp, quote, upsert_clauses


def compile_query(query: str, *, sources: Sequence[str],
                  columns: Mapping[str, Sequence[str]] | None = None) -> "CompiledQuery":
    """Compile ``query`` (Spark SQL, one SELECT over ``sources``).

    ``columns`` (source name -> its column names) is needed only to expand
    ``SELECT *``: the compiler has no schemas. Raises
    :class:`~ctfile.InvalidArgumentError` for text that is not one SELECT
    over the sources, unknown tables, output names that repeat or start
    with ``_ct_``, unnamed computed outputs, and ``*`` without ``columns``.
    A query without an incremental rule compiles (``incremental`` False,
    ``blockers`` say why) and has only :meth:`CompiledQuery.full`.
    """
    names = check_sources(sources)
    if columns is not None and not isinstance(columns, Mapping):
        raise InvalidArgumentError(f"columns must be a mapping of source name to column names, found {type(columns).__name__}")
    tree = parse_statement(query, sources=names)
    return CompiledQuery(query, plan_tree(tree, sources=names, columns=columns), columns)


class CompiledQuery:
    """A compiled derived-table query (see :func:`compile_query`)."""

    def __init__(self, query: str, planned: PlannedQuery, columns: Mapping[str, Sequence[str]] | None) -> None:
        self._query = query
        self._planned = planned
        self._columns = dict(columns) if columns is not None else None

    @property
    def query(self) -> str:
        return self._query

    @property
    def sources(self) -> tuple[str, ...]:
        """The source names the query reads, in first-use order."""
        return self._planned.sources

    @property
    def output_columns(self) -> tuple[str, ...]:
        return self._planned.outputs

    @property
    def operators(self) -> Operator:
        """The root of the operator plan (a ``query`` node over the planned
        operators when the plan has blockers)."""
        return self._planned.root

    @property
    def blockers(self) -> tuple[Blocker, ...]:
        return self._planned.blockers

    @property
    def incremental(self) -> bool:
        return not self._planned.blockers

    @property
    def _aggregate(self):
        blocks = self._planned.blocks
        return blocks[0] if self.incremental and blocks[0].is_aggregate else None

    @property
    def keyed_by_group(self) -> bool:
        """Whether an incremental plan keys its rows by group (GROUP BY,
        DISTINCT): every change of a source row lands on its group's row.
        Otherwise a row is keyed by its source rows' ids, and only updates
        and deletes of those rows land on it.

        >>> compile_query("SELECT DISTINCT k FROM s", sources=("s",)).keyed_by_group
        True
        """
        return self._aggregate is not None

    @property
    def _window(self):
        blocks = self._planned.blocks
        return blocks[0] if self.incremental and blocks[0].window is not None else None

    @property
    def hidden_columns(self) -> tuple[tuple[str, str | None], ...]:
        """``(name, Spark SQL type)`` of the derivation columns, ``_ct_dt_key``
        first. The avg sum state's type is that of ``sum(arg)``, which
        depends on the source schemas: None here (the full query's schema,
        ``spark.sql(plan.full(...).source_sql).schema``, has it)."""
        if self._window is not None:
            return windows.hidden_columns(self._window.window)
        block = self._aggregate
        return aggregates.hidden_columns(block) if block is not None else rows.HIDDEN

    def explain(self, *, append_only: Any = ()) -> Explanation:
        """Per operator, its rule or why it has none; ``append_only``: the
        sources whose tables are append-only (SPEC §Append-only tables),
        whose cheaper rules it names."""
        if not isinstance(append_only, (tuple, list, set, frozenset)) or any(
                s not in self.sources for s in append_only):
            raise InvalidArgumentError(
                f"append_only must name sources among {list(self.sources)}, found {append_only!r}")
        return explain(self._planned.root, self._planned.blocks, self._planned.blockers, append_only=append_only)

    def _check_views(self, views: SourceViews) -> None:
        if not isinstance(views, SourceViews):
            raise InvalidArgumentError(f"views must be a ctfile.derived.SourceViews, found {type(views).__name__}")
        missing = [s for s in self.sources if s not in views]
        if missing:
            raise InvalidArgumentError(f"views has no entry for the sources {missing}; it has {sorted(views)}")

    def full(self, views: SourceViews, *, data_timestamp_ms: int) -> RefreshSql:
        """The whole result at the ``new`` views, with the derivation
        columns; its clauses update a row only when a value differs, insert
        new keys and delete (NOT MATCHED BY SOURCE) keys no longer produced,
        so a full refresh over unchanged sources changes nothing."""
        self._check_views(views)
        ms = check_timestamp(data_timestamp_ms)
        outputs = self.output_columns
        if not self.incremental:
            return self._generic_full(views, ms)
        if self._aggregate is not None:
            return aggregates.full_sql(self._aggregate, views, outputs, ms=ms)
        if self._window is not None:
            window = self._window
            return windows.full_sql(window.select, window.window, window.occurrences, views, outputs, ms=ms)
        return rows.full_sql(self._planned.blocks, views, outputs, ms=ms)

    def delta(self, views: SourceViews, *, data_timestamp_ms: int, appended_only: Mapping[str, bool]) -> RefreshSql:
        """The change of the result between the ``old`` and ``new`` views,
        from the ``delta`` views; ``appended_only[source]`` is True when the
        interval only inserted rows into that source (min/max then combine
        with the stored value instead of recomputing the affected groups).
        Raises :class:`NonIncrementalPlanError` for a plan with blockers."""
        self._check_incremental(appended_only, hint="; use full()")
        self._check_views(views)
        ms = check_timestamp(data_timestamp_ms)
        block, outputs = self._aggregate, self.output_columns
        if self._window is not None:
            return self._window_delta(views, outputs, appended_only, ms=ms)
        if block is None:
            return rows.delta_sql(self._planned.blocks, views, outputs, ms=ms)
        if aggregates.recompute_needed(block, {s: bool(appended_only[s]) for s in self.sources}):
            return aggregates.recompute_delta_sql(block, views, outputs, ms=ms)
        return aggregates.linear_delta_sql(block, views, outputs, ms=ms)

    def _window_delta(self, views: SourceViews, outputs: tuple[str, ...], appended_only: Mapping[str, bool], *,
                      ms: int) -> RefreshSql:
        """A window block's delta: a deduplication over one source that
        only appended, with the table offered, compares the appended rows
        with the stored ones; any other recomputes the affected partitions."""
        block = self._window
        if self._appended_top_rows(appended_only, target=views.target is not None):
            return windows.appended_top_rows_sql(block.select, block.window, block.occurrences[0], views, outputs,
                                                 ms=ms)
        return windows.delta_sql(block.select, block.window, block.occurrences, views, outputs, ms=ms)

    def _appended_top_rows(self, appended_only: Mapping[str, bool], *, target: bool) -> bool:
        """Whether the window block's delta is a deduplication's over appends
        (``windows.appended_top_rows_sql``): one source that only appended,
        and the derived table offered to read its held rows from."""
        block = self._window
        appended = len(block.occurrences) == 1 and bool(appended_only[block.occurrences[0][0]])
        return block.window.top_order is not None and appended and target

    def _check_incremental(self, appended_only: Any, *, hint: str = "") -> None:
        """Raise :class:`NonIncrementalPlanError` for a plan with blockers,
        :class:`InvalidArgumentError` for an ``appended_only`` that does not
        map every source."""
        if not self.incremental:
            raise NonIncrementalPlanError(
                f"the query has no incremental plan (blocked by {', '.join(map(str, self.blockers))}){hint}")
        if not isinstance(appended_only, Mapping) or any(s not in appended_only for s in self.sources):
            raise InvalidArgumentError(
                f"appended_only must map every source {list(self.sources)} to a bool, found {appended_only!r}")

    def delta_kind(self, *, appended_only: Mapping[str, bool], target: bool = True) -> DeltaKind:
        """What :meth:`delta` reads besides the change (:class:`DeltaKind`),
        for the same ``appended_only``; ``target``: whether the executor
        offers the derived table as ``SourceViews.target`` (ctfile's Spark
        refresh does). Raises :class:`NonIncrementalPlanError` for a plan
        with blockers.

        >>> plan = compile_query("SELECT id FROM s QUALIFY ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) = 1",
        ...                      sources=("s",))
        >>> plan.delta_kind(appended_only={"s": False}).value, plan.delta_kind(appended_only={"s": True}).value
        ('partitions', 'appended top rows')
        >>> compile_query("SELECT k, max(v) AS m FROM s GROUP BY k", sources=("s",)).delta_kind(
        ...     appended_only={"s": False}).value
        'groups'
        """
        self._check_incremental(appended_only)
        if self._window is not None:
            top = self._appended_top_rows(appended_only, target=bool(target))
            return DeltaKind.APPENDED_TOP_ROWS if top else DeltaKind.PARTITIONS
        if any(b.join_keys is not None for b in self._planned.blocks):
            return DeltaKind.JOIN_KEYS
        block = self._aggregate
        if block is not None and aggregates.recompute_needed(block, {s: bool(appended_only[s]) for s in self.sources}):
            return DeltaKind.GROUPS
        return DeltaKind.CHANGE

    def linear_aggregate(self, *, data_timestamp_ms: int,
                         appended_only: Mapping[str, bool]) -> aggregates.LinearAggregate | None:
        """The delta of :meth:`delta` as parts, for an engine other than
        Spark, when it is a linear aggregate (count, sum, avg; min and max
        over appended rows) over one source occurrence; else None.

        >>> plan = compile_query("SELECT k, sum(v) AS s FROM src WHERE v > 0 GROUP BY k", sources=("src",))
        >>> parts = plan.linear_aggregate(data_timestamp_ms=0, appended_only={"src": False})
        >>> parts.where, parts.keys, parts.columns
        ('v > 0', ('k',), ('k', 's', '_ct_dt_key', '_ct_dt_rows', '_ct_dt_cnt_1'))
        """
        block = self._aggregate
        if block is None or aggregates.recompute_needed(block, {s: bool(appended_only[s]) for s in self.sources}):
            return None
        return aggregates.linear_parts(block, self.output_columns, ms=check_timestamp(data_timestamp_ms))

    def _generic_full(self, views: SourceViews, ms: int) -> RefreshSql:
        """A query without an incremental rule, run whole; its key is the
        row's values (to_json) plus its ordinal among equal rows, so a row
        whose values change is a delete and an insert, and output columns
        Spark cannot partition or order by (maps) make the SQL fail."""
        tree = _swap_sources(self._planned.tree, views, self.sources, self._columns)
        cols = [f"q.{quote(c)}" for c in self.output_columns]
        fields = ", ".join(f"'c{i}', {c}" for i, c in enumerate(cols))
        listed = ", ".join(cols)
        key = (f"CONCAT(TO_JSON(NAMED_STRUCT({fields})), '#', "
               f"CAST(ROW_NUMBER() OVER (PARTITION BY {listed} ORDER BY {listed}) AS STRING))")
        sql = f"SELECT {listed}, {key} AS {quote(KEY_COLUMN)} FROM ({bind_time(tree, ms).sql(dialect='spark')}) AS q"
        return RefreshSql(sql, upsert_clauses(self.output_columns, by_source_delete=True))

    def __repr__(self) -> str:
        return f"CompiledQuery({self._query!r}, incremental={self.incremental})"


def _has_star(tree: exp.Expression) -> bool:
    return any(isinstance(n, exp.Star) and not isinstance(n.parent, exp.Count) for n in tree.walk())


def _swap_sources(tree: exp.Expression, views: SourceViews, sources: Sequence[str],
                  columns: Mapping[str, Sequence[str]] | None) -> exp.Expression:
    """A copy of ``tree`` reading each source's ``new`` view. With a ``*``
    in the query a source becomes ``(SELECT <its columns> FROM view)`` so
    the view's ``METADATA$ROW_ID`` cannot leak into the result."""
    local = cte_names(tree)
    star = _has_star(tree)
    if star and columns is None:
        raise InvalidArgumentError("the query selects *: pass columns={source: [column names]} to compile_query")

    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Table) or node.name.lower() in local:
            return node
        source = next((s for s in sources if s.lower() == node.name.lower()), None)
        if source is None:
            return node
        alias = exp.TableAlias(this=exp.to_identifier(node.alias_or_name))
        if not star:
            return exp.Table(this=exp.to_identifier(views[source].new, quoted=True), alias=alias)
        listed = ", ".join(quote(c) for c in columns[source])
        return exp.Subquery(this=exp.maybe_parse(f"SELECT {listed} FROM {quote(views[source].new)}", dialect="spark"),
                            alias=alias)

    return tree.copy().transform(swap)
