"""Running one refresh of a derived table on Spark (SPEC §Derived tables).

A refresh that writes (``INCREMENTAL``, ``FULL``, ``REINITIALIZE``) does, in
order:

1. register each source as Spark temp views: ``new`` (the source at the
   version the refresh reads, with ``METADATA$ROW_ID``), and for an
   incremental refresh ``old`` (at the frontier's version) and ``delta``
   (the minimum-delta change scan between the two), all through
   :class:`ctfile.spark.CtfileTable`'s reads, and for an incremental
   refresh the derived table itself as it was read (``target``, with its
   derivation columns), where a rule reads the old rows of what it
   recomputes;
2. build the MERGE source from the compiled plan's SQL
   (:mod:`ctfile.derived`), cast to the derived table's column types, and
   compute it once (a small one collected into the driver, a larger one
   persisted: :func:`checked_source`);
3. check the invariants of the Dynamic Tables paper, section 6.1 before anything is
   written: at most one source row per derivation key (``_ct_dt_key``), and
   no delete of a row the table does not hold; a violation is a
   :class:`RefreshInvariantError` and commits nothing;
4. apply it as ONE MERGE on ``_ct_dt_key`` inside a refresh transaction
   (``CtfileTable.transaction(refresh=)``), which records the new frontier
   and the refresh info in the same log entry as the rows;
5. move each source's retention stream to the new frontier.

A process killed before step 4's commit leaves the table as it was (its
files are never referenced, and the next vacuum deletes them); killed after
it, the table holds the new contents and frontier, and the streams of step
5 only hold more history than needed until the next refresh moves them.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

import ctfile
import ctfile.derived as compiler
from ctfile.spark.derived_plan import RefreshDecision
from ctfile.spark.derived_sources import SourceState, stream_name
from ctfile.spark.local import LocalLimits, local_frame, note_rows, note_unique
from ctfile.spark.native import snapshot_with_hidden_df
from ctfile.spark.table import CtfileTable

KEY_COLUMN = "_ct_dt_key"
_ACTION, _ISUPDATE, _ROW_ID = "METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"


class RefreshInvariantError(ctfile.CtfileError):
    """A refresh computed a change that would make the table wrong (two rows
    for one derivation key, or a delete of a row the table does not hold):
    nothing was committed. A bug in a delta rule; a ``FULL`` refresh
    (``refresh(mode="full")``) rebuilds the contents."""


@dataclass
class SourceViews:
    """The temp views of one refresh: named first (the compiler writes its
    SQL over the names), registered only for the names the SQL reads
    (:meth:`register_used`: an aggregate's delta reads no snapshot, a
    full refresh no change scan), dropped by :meth:`drop`."""

    spark: Any
    sources: Sequence[SourceState]
    incremental: bool
    #: The derived table, read at its ``version`` (the one whose definition
    #: and frontier the refresh started from): the ``target`` view.
    target: ctfile.Table | None = None
    prefix: str = field(default_factory=lambda: "ctfile_dt_" + uuid.uuid4().hex[:12])
    registered: list[str] = field(default_factory=list)

    def name(self, source: str, kind: str) -> str:
        return f"{self.prefix}_{source}_{kind}"

    def names(self) -> Any:
        """The :class:`ctfile.derived.SourceViews` the compiler renders with
        (a non-incremental refresh reads every source at ``new`` only)."""
        def kinds(s: str) -> dict:
            new = self.name(s, "new")
            if not self.incremental:
                return {"new": new, "old": new, "delta": new}
            return {"new": new, "old": self.name(s, "old"), "delta": self.name(s, "delta")}

        views = {s.name: compiler.ViewNames(**kinds(s.name)) for s in self.sources}
        return compiler.SourceViews(views, target=self._target_name if self._target_df is not None else None)

    @property
    def _target_name(self) -> str:
        return f"{self.prefix}__target"

    @functools.cached_property
    def _target_df(self) -> Any:
        """The derived table's rows with derivation columns, or None (not
        incremental, or Spark's reader would not read its files exactly)."""
        if not self.incremental or self.target is None:
            return None
        return snapshot_with_hidden_df(self.spark, self.target, self.target.snapshot(self.target.version))

    def register_used(self, sql: str) -> None:
        """Register each view ``sql`` names (step 1)."""
        for s in self.sources:
            for kind in ("new", "old", "delta"):
                name = self.name(s.name, kind)
                if name in sql and name not in self.registered:
                    _view_df(self.spark, s, kind).createOrReplaceTempView(name)
                    self.registered.append(name)
        if self._target_name in sql and self._target_name not in self.registered:
            self._target_df.createOrReplaceTempView(self._target_name)
            self.registered.append(self._target_name)

    def drop(self) -> None:
        for name in self.registered:
            self.spark.catalog.dropTempView(name)
        self.registered.clear()


def _view_df(spark: Any, s: SourceState, kind: str) -> Any:
    """Source ``s`` at the new frontier, at the old one, or its minimum-delta
    change scan between them (C2 of issue 29: ``CtfileTable`` reads)."""
    ct = CtfileTable(spark, s.table)
    if kind == "new":
        return ct.to_df(version=s.version, row_ids=True)
    if kind == "old":
        return ct.to_df(version=s.previous.version, row_ids=True)
    if s.moved:
        return ct.changes_df(s.previous.version + 1, s.version, information="default")
    return _empty_delta(ct.to_df(version=s.version, row_ids=True))


def _empty_delta(new: Any) -> Any:
    """A delta with no rows in the delta views' columns, for a source that
    did not move (the delta query still names its view)."""
    from pyspark.sql import functions as F

    cols = [c for c in new.columns if c != _ROW_ID]
    return new.where(F.lit(False)).select(
        *cols, F.lit("INSERT").alias(_ACTION), F.lit(False).alias(_ISUPDATE), F.col(_ROW_ID),
    )


def typed_source(spark: Any, sql: str, target: ctfile.Table) -> Any:
    """The MERGE source of ``sql``, every column cast to the derived table's
    type (the delta's sums and averages come out of Spark in wider types
    than the full query's; the table keeps the full query's)."""
    from pyspark.sql import functions as F

    from ctfile.spark_datasource.types import spark_schema

    df = spark.sql(sql)
    schema = spark_schema(target.schema_at().to_arrow(include_hidden=False, field_ids=False))
    types = {f.name: f.dataType for f in schema.fields}
    return df.select(*[F.col(c).cast(types[c]).alias(c) if c in types else F.col(c) for c in df.columns])


@dataclass(frozen=True)
class SourceCounts:
    """What the MERGE source holds: its rows, and the deletes it asks for
    when every one of them must find a row (a row-level delta: None
    otherwise, where deletes also come from conditions on the table)."""

    rows: int
    deletes: int | None


def asks_keyed_deletes(rs: Any) -> bool:
    """Whether every delete of ``rs`` is a source row marked ``delete`` that
    must match a row of the table (a row-level delta), so the MERGE's delete
    count must equal the source's deletes (invariant 2)."""
    full = any(c.kind is compiler.ClauseKind.NOT_MATCHED_BY_SOURCE_DELETE for c in rs.clauses)
    return compiler.OP_COLUMN in rs.control_columns and not full


def checked_source(spark: Any, source: Any, rs: Any, *, expected_rows: int = 0) -> tuple[Any, SourceCounts]:
    """The MERGE source, computed once, and its counts, checking invariant 1
    of the paper (section 6.1): at most one row per derivation key.

    A source of at most ``spark.ctfile.local.sourceRows`` rows (the driver
    path's limit, :class:`ctfile.spark.local.LocalLimits`) is collected by
    one Spark job, checked in the driver and handed back as a local relation,
    which a MERGE in the driver reads without a job; a larger one is
    persisted and checked by one Spark job. The caller unpersists the
    returned DataFrame. A source expected to hold more rows than that
    limit (``expected_rows``, a full result's estimate: the table's rows)
    skips the collect, which would compute it for nothing.

    Raises
    ------
    RefreshInvariantError
        When two rows share a key (nothing is committed).
    """
    source = source.persist()
    limit = LocalLimits.of(spark).source_rows
    rows = source.limit(limit + 1).toArrow() if limit and expected_rows <= limit else None
    if rows is None or rows.num_rows > limit:
        counts = count_checked(source, rs)
        note_rows(source, counts.rows)  # the MERGE goes to the executors without collecting it again
        note_unique(source, [KEY_COLUMN])  # invariant 1 checked: the MERGE need not check its keys again
        return source, counts
    source.unpersist()
    return local_checked(spark, rows, rs, schema=source.schema)


def local_checked(spark: Any, rows: Any, rs: Any, *, schema: Any = None,
                  keep_rows: bool = False) -> tuple[Any, SourceCounts]:
    """The MERGE source ``rows`` (Arrow, in the driver) as a DataFrame over
    a local relation (of Spark ``schema``, else ``rows``' own types), or as
    they are with ``keep_rows`` (:func:`merge_into` takes both), and its
    counts, checking invariant 1 of the paper (section 6.1).

    Raises
    ------
    RefreshInvariantError
        When two rows share a key (nothing is committed).
    """
    from ctfile.spark_datasource.types import spark_schema

    deletes = None
    if asks_keyed_deletes(rs):
        deletes = pc.sum(pc.equal(rows[compiler.OP_COLUMN], "delete")).as_py() or 0
    counts = _checked(rows.num_rows, pc.count_distinct(rows[KEY_COLUMN]).as_py(), deletes)
    if keep_rows:
        return rows, counts
    frame = local_frame(spark, rows, schema or spark_schema(rows.schema))
    note_unique(frame, [KEY_COLUMN])
    return frame, counts


def count_checked(source: Any, rs: Any) -> SourceCounts:
    """The MERGE source's counts, checking invariant 1 of the paper (section 6.1)
    in one Spark job: at most one row per derivation key.

    Raises
    ------
    RefreshInvariantError
        When two rows share a key (nothing is committed).
    """
    from pyspark.sql import functions as F

    aggs = [F.count(F.lit(1)).alias("n"), F.count_distinct(KEY_COLUMN).alias("keys")]
    keyed = asks_keyed_deletes(rs)
    if keyed:
        aggs.append(F.count(F.when(F.col(compiler.OP_COLUMN) == "delete", 1)).alias("deletes"))
    row = source.agg(*aggs).first()
    return _checked(row["n"], row["keys"], row["deletes"] if keyed else None)


def _checked(rows: int, keys: int, deletes: int | None) -> SourceCounts:
    if rows != keys:
        raise RefreshInvariantError(
            f"refresh computed {rows} rows for {keys} derivation keys, expected at most one row per key; "
            f"nothing was committed"
        )
    return SourceCounts(rows=rows, deletes=deletes)


def check_deletes_found(counts: dict, expected: SourceCounts) -> None:
    """Invariant 2 (paper, section 6.1): every delete the delta asked for removed a
    row of the table (the MERGE's delete count equals the delta's deletes).

    Raises
    ------
    RefreshInvariantError
        When the MERGE deleted another number of rows (raised inside the
        refresh transaction: nothing is committed).
    """
    if expected.deletes is not None and counts.get("deleted", 0) != expected.deletes:
        raise RefreshInvariantError(
            f"refresh asked to delete {expected.deletes} rows by derivation key, the table held "
            f"{counts.get('deleted', 0)} of them; nothing was committed"
        )


def merge_into(tx: Any, source: Any, rs: Any, column_types: Mapping[str, str]) -> dict:
    """Apply the compiled MERGE (``rs``: :class:`ctfile.derived.RefreshSql`)
    of ``source`` (a DataFrame, or Arrow rows the driver computed) as one
    statement of the refresh transaction ``tx``; each computed SET or VALUES
    expression cast to its column's Spark type (:func:`typed_clause`)."""
    if isinstance(source, pa.Table):  # computed in the driver (ctfile.spark.derived_driver)
        builder = tx.merge_rows_builder(source, KEY_COLUMN, source_alias="s", target_alias="t")
    else:
        builder = tx.merge_builder(source, KEY_COLUMN, source_alias="s", target_alias="t")
    for clause in rs.clauses:
        builder = typed_clause(clause, column_types).apply(builder)
    return builder.execute()


_SOURCE_COLUMN = re.compile(r"s\.(`[^`]+`|\w+)")


def typed_clause(clause: Any, column_types: Mapping[str, str]) -> Any:
    """``clause`` with each assignment that computes a value wrapped in
    ``CAST(... AS <the column's type>)``, as Spark's own aggregate casts its
    result (an ``avg`` of decimals rounds half up to the result's scale);
    a plain ``s.<column>`` (already of the column's type,
    :func:`typed_source`) is left as it is, so small MERGEs still run in the
    driver (:mod:`ctfile.spark.local`).

    >>> from ctfile.derived import ClauseKind, MergeClause
    >>> c = MergeClause(ClauseKind.MATCHED_UPDATE, None, (("n", "t.n + s.n"), ("k", "s.`k`")))
    >>> typed_clause(c, {"n": "bigint", "k": "int"}).assignments
    (('n', 'CAST((t.n + s.n) AS bigint)'), ('k', 's.`k`'))
    """
    def typed(column: str, expr: str) -> str:
        if _SOURCE_COLUMN.fullmatch(expr.strip()) or column not in column_types:
            return expr
        return f"CAST(({expr}) AS {column_types[column]})"

    return replace(clause, assignments=tuple((c, typed(c, e)) for c, e in clause.assignments))


def table_schema(target: ctfile.Table) -> Any:
    """The derived table's columns as Arrow (its derivation columns
    included, row lineage not): the types a MERGE source is cast to."""
    return target.schema_at().to_arrow(include_hidden=False, field_ids=False)


def column_types(target: ctfile.Table) -> dict[str, str]:
    """Column name -> Spark SQL type of the derived table (all columns)."""
    from ctfile.spark_datasource.types import spark_schema

    schema = spark_schema(target.schema_at().to_arrow(include_hidden=False, field_ids=False))
    return {f.name: f.dataType.simpleString() for f in schema.fields}


def hold_history(sources: Sequence[SourceState], derived_table_id: str, *, at_frontier: bool = False) -> None:
    """Step 5: each source's stream ``__derived_<id>`` at the new frontier
    (``at_frontier``: at the recorded one, for a refresh that committed
    nothing), so that vacuum keeps the history the next refresh reads (SPEC
    §Streams); created at the first refresh. A stream gone stale is dropped
    and created again: the refresh that found it stale was a
    ``REINITIALIZE``. Moving a stream commits nothing to the source."""
    name = stream_name(derived_table_id)
    for s in sources:
        version = s.previous.version if at_frontier and s.previous is not None else s.version
        if at_frontier and (s.previous is None or s.recreated):
            continue
        try:
            s.table.stream(name).advance(version)
        except ctfile.StreamNotFoundError:
            _create_stream(s, name, version)
        except ctfile.StaleStreamError:
            s.table.drop_stream(name)
            _create_stream(s, name, version)


def _create_stream(s: SourceState, name: str, version: int) -> None:
    """A stream whose offset is ``version`` (its first pending version is
    the next one)."""
    if version < s.table.version:
        s.table.create_stream(name, start_version=version + 1)
    else:
        s.table.create_stream(name)


def refresh_info(decision: RefreshDecision, sources: Sequence[SourceState], *, data_timestamp_ms: int,
                 rows_in: int, rows_out: int) -> ctfile.RefreshInfo:
    """The ``commitInfo.refresh`` of a refresh that writes."""
    return ctfile.RefreshInfo(
        action=decision.action, reason=decision.reason, frontier=tuple(s.frontier_entry() for s in sources),
        data_timestamp=data_timestamp_ms, rows_in=rows_in, rows_out=rows_out,
    )
