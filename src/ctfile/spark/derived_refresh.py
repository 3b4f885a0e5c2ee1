"""Running one refresh of a derived table on Spark (SPEC §Derived tables).

A refresh that writes (``INCREMENTAL``, ``FULL``, ``REINITIALIZE``) does, in
order:

1. register each source as Spark temp views: ``new`` (the source at the
   version the refresh reads, with ``METADATA$ROW_ID``), and for an
   incremental refresh ``old`` (at the frontier's version) and ``delta``
   (the minimum-delta change scan between the two), all through
   :class:`ctfile.spark.CtfileTable`'s reads;
2. build the MERGE source from the compiled plan's SQL
   (:mod:`ctfile.derived`), cast to the derived table's column types;
3. check the invariants of the Dynamic Tables paper §6.1 before anything is
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

import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import ctfile
import ctfile.derived as compiler
from ctfile.spark.derived_plan import RefreshDecision
from ctfile.spark.derived_sources import SourceState, stream_name
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
    """The temp views registered for one refresh, dropped by :meth:`drop`."""

    spark: Any
    prefix: str = field(default_factory=lambda: "ctfile_dt_" + uuid.uuid4().hex[:12])
    names: list[str] = field(default_factory=list)

    def register(self, df: Any, source: str, kind: str) -> str:
        name = f"{self.prefix}_{source}_{kind}"
        df.createOrReplaceTempView(name)
        self.names.append(name)
        return name

    def drop(self) -> None:
        for name in self.names:
            self.spark.catalog.dropTempView(name)
        self.names.clear()


def _empty_delta(new: Any) -> Any:
    """A delta with no rows in the delta views' columns, for a source that
    did not move (the delta query still names its view)."""
    from pyspark.sql import functions as F

    cols = [c for c in new.columns if c != _ROW_ID]
    return new.where(F.lit(False)).select(
        *cols, F.lit("INSERT").alias(_ACTION), F.lit(False).alias(_ISUPDATE), F.col(_ROW_ID),
    )


def register_sources(spark: Any, views: SourceViews, sources: Sequence[SourceState], *, incremental: bool):
    """The :class:`ctfile.derived.SourceViews` of ``sources`` (step 1)."""
    out = {}
    for s in sources:
        ct = CtfileTable(spark, s.table)
        new = ct.to_df(version=s.version, row_ids=True)
        names = {"new": views.register(new, s.name, "new")}
        if incremental:
            old = ct.to_df(version=s.previous.version, row_ids=True)
            delta = ct.changes_df(s.previous.version + 1, s.version, information="default") if s.moved else _empty_delta(new)
            names["old"] = views.register(old, s.name, "old")
            names["delta"] = views.register(delta, s.name, "delta")
        else:
            names["old"] = names["delta"] = names["new"]
        out[s.name] = compiler.ViewNames(**names)
    return compiler.SourceViews(out)


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


def check_one_row_per_key(source: Any) -> None:
    """Invariant 1 (paper §6.1): the MERGE source has at most one row per
    derivation key.

    Raises
    ------
    RefreshInvariantError
        Naming one key that has two rows.
    """
    dup = source.groupBy(KEY_COLUMN).count().where("count > 1").limit(1).collect()
    if dup:
        raise RefreshInvariantError(
            f"refresh computed {dup[0]['count']} rows for derivation key {dup[0][KEY_COLUMN]!r}, expected at most 1; "
            f"nothing was committed"
        )


def check_deletes_found(counts: dict, expected_deletes: int | None) -> None:
    """Invariant 2 (paper §6.1): every delete the delta asked for removed a
    row of the table (the MERGE's delete count equals the delta's deletes).

    Raises
    ------
    RefreshInvariantError
        When the MERGE deleted fewer rows than the delta deletes.
    """
    if expected_deletes is not None and counts.get("deleted", 0) != expected_deletes:
        raise RefreshInvariantError(
            f"refresh asked to delete {expected_deletes} rows, the table held {counts.get('deleted', 0)} of them; "
            f"nothing was committed"
        )


def merge_into(tx: Any, source: Any, rs: Any) -> dict:
    """Apply the compiled MERGE (``rs``: :class:`ctfile.derived.RefreshSql`)
    as one statement of the refresh transaction ``tx``."""
    builder = tx.merge_builder(source, KEY_COLUMN, source_alias="s", target_alias="t")
    for clause in rs.clauses:
        builder = clause.apply(builder)
    return builder.execute()


def hold_history(sources: Sequence[SourceState], derived_table_id: str) -> None:
    """Step 5: each source's stream ``__derived_<id>`` at the new frontier,
    so that vacuum keeps the history the next refresh reads (SPEC §Streams);
    created at the first refresh. A stream gone stale is dropped and created
    again: the refresh that found it stale was a ``REINITIALIZE``."""
    name = stream_name(derived_table_id)
    for s in sources:
        try:
            stream = s.table.stream(name)
            stream.advance(s.version)
        except ctfile.StreamNotFoundError:
            _create_stream(s, name)
        except ctfile.StaleStreamError:
            s.table.drop_stream(name)
            _create_stream(s, name)


def _create_stream(s: SourceState, name: str) -> None:
    """A stream whose offset is ``s.version`` (its first pending version
    is the next one)."""
    if s.version < s.table.version:
        s.table.create_stream(name, start_version=s.version + 1)
    else:
        s.table.create_stream(name)


def refresh_info(decision: RefreshDecision, sources: Sequence[SourceState], *, data_timestamp_ms: int,
                 rows_in: int, rows_out: int) -> ctfile.RefreshInfo:
    """The ``commitInfo.refresh`` of a refresh that writes."""
    return ctfile.RefreshInfo(
        action=decision.action, reason=decision.reason, frontier=tuple(s.frontier_entry() for s in sources),
        data_timestamp=data_timestamp_ms, rows_in=rows_in, rows_out=rows_out,
    )
