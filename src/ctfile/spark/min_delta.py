"""Minimum-delta (``default``) change scans through Spark's own Parquet
reader (``CtfileTable.changes_df(information="default")``).

A ``default`` scan of ``a..b`` (SPEC §Change scans, modes) compares the
*new side*, the rows of the partitions the interval net added, with the
*old side*, those of the partitions it net removed (the plan's net sets,
:attr:`ctfile.ChangeScan.plan`, read from the log alone). Both sides are
read with their materialized row ids and row versions
(:mod:`ctfile.spark.lineage`) in the schema of ``b``, and:

- a new-side row and an old-side row with the same row id and the same row
  version are one row, unchanged (lineage identity, SPEC §Row lineage), and
  are dropped. Without a RESTORE in the interval those are exactly the new
  side's rows with a row version below ``a`` (their ids, *U*, cancel the
  old side's rows, found by counting row ids, two narrow columns, before
  any wide row moves); across a RESTORE the two sides are matched on both values;
- the remaining rows are joined by row id (full outer join): a row id on
  both sides is an update pair, output DELETE (old values) and INSERT (new
  values) with ``METADATA$ISUPDATE`` true unless every column is equal
  (``<=>``, null equals null, NaN equals NaN, as ctfile compares, SPEC
  §Copy-on-write), then neither; a row id on one side only is a lone
  INSERT or DELETE.

An interval whose every data-changing commit is captured (SPEC §Change
capture) is read by the data source, from its change files and fresh rows:
what it changed, not what its DML rewrote.

An interval that only added partitions is its new side as INSERTs, one that
only removed them its old side as DELETEs: no join. The result is the data
source's (``spark.read.format("ctfile").option("changes", "default")``),
whatever the interval holds: change files give the same result as
partitions (SPEC §Change scans, "Using change files"), and removed
partitions stay on storage as long as the interval's entries do (SPEC
§Vacuum). Where Spark's reader cannot read the files exactly as ctfile
does (:func:`ctfile.spark.lineage.lineage_files`: a rename, drop or decimal
widening in the files' past, storage Spark's Hadoop cannot open), or cannot
compare images as ctfile does (a map, or a float inside a nested type, whose
NaN Spark and ctfile compare differently), the scan is the data source
itself, logged at INFO. The row order is not the data source's (a
DataFrame has none). Files are not checked against their checksums.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Sequence

import ctfile
from ctfile.spark.changes import ACTION, ISUPDATE, ROW_ID, append_only_df
from ctfile.spark.lineage import RID, RV, lineage_df, lineage_files, table_seed
from ctfile.spark.native import datasource_df
from ctfile.spark.xxh3 import with_xxh3_64
from ctfile.spark_datasource.types import spark_schema

log = logging.getLogger("ctfile.spark")

_HERE = "_ct_here"  # a side's marker column: non-null where the side has the row id
_SEEN = "_ct_seen"  # how many times a row id is seen among the old ids and the copies' ids


def default_df(spark: Any, table: ctfile.Table, cs: ctfile.ChangeSet):
    """The ``default`` change scan ``cs`` of ``table`` (module docstring)."""
    plan = cs.plan
    if plan.reads_fresh_rows:  # SPEC §Append-only tables: the fresh rows the interval's commits inserted
        return append_only_df(spark, table, cs)
    if not (plan.added or plan.removed):
        return spark.createDataFrame([], spark_schema(cs.schema))
    if _reads_change_files(plan):
        log.info("ctfile: reading the default changes of %s, versions %d..%d, from its change files through "
                 "spark.read.format('ctfile')", table.uri, cs.start_version, cs.end_version)
        return datasource_df(spark, table, changes="default", startingVersion=cs.start_version,
                             endingVersion=cs.end_version)
    end = table.snapshot(cs.end_version)
    files, why_not = _native_files(spark, table, end, plan)
    if files is None:
        log.info("ctfile: reading the default changes of %s, versions %d..%d, through spark.read.format('ctfile'): %s",
                 table.uri, cs.start_version, cs.end_version, why_not)
        return datasource_df(spark, table, changes="default", startingVersion=cs.start_version,
                             endingVersion=cs.end_version)
    data = spark_schema(end.schema)
    delta = _Delta(spark, data, cs.start_version, table_seed(table))
    new = delta.side(plan.added, files[0])
    old = delta.side(plan.removed, files[1])
    if old is None:
        return delta.lone(new, "INSERT")
    if new is None:
        return delta.lone(old, "DELETE")
    if any(c.restores for c in plan.commits):
        return delta.pairs(*_matched_on_versions(new, old))
    return delta.pairs(*_copies_cancelled(new, old, cs.start_version, broadcast=_few_deletes(plan)))


def _reads_change_files(plan) -> bool:
    """Whether every data-changing commit of the interval is captured (plan
    shape CAPTURED, SPEC §Change scans, "Using change files"): its change
    is then in change files and fresh rows, which the data source reads
    without the partitions the DML rewrote, where the partition comparison
    of this module would read every one of them twice (an UPDATE of 1% of
    the rows, scattered, rewrites them all)."""
    return plan.shape is ctfile.PlanShape.CAPTURED


def _native_files(spark: Any, table: ctfile.Table, end: ctfile.Snapshot, plan) -> tuple[Any, str]:
    """The URIs of the net added and of the net removed partitions, when
    Spark reads and compares them as ctfile does; else None and why not."""
    unfit = _incomparable_columns(spark_schema(end.schema))
    if unfit:
        return None, (f"columns {', '.join(unfit)} hold a map or a nested float, which Spark compares otherwise "
                      "than ctfile does")
    sides = []
    for parts in (plan.added, plan.removed):
        files, why_not = lineage_files(spark, table, end, parts) if parts else ([], "")
        if files is None:
            return None, why_not
        sides.append(files)
    return sides, ""


def _incomparable_columns(schema: Any) -> list[str]:
    """The columns whose values Spark's ``<=>`` cannot compare as ctfile's
    ``is_distinct`` does: a map anywhere (Spark cannot compare maps), a
    float or double inside a nested type (ctfile compares nested values as
    Python values, where NaN differs from NaN)."""
    from pyspark.sql.types import ArrayType, DoubleType, FloatType, MapType, StructType

    def unfit(t, nested: bool) -> bool:
        if isinstance(t, MapType):
            return True
        if isinstance(t, (FloatType, DoubleType)):
            return nested
        if isinstance(t, ArrayType):
            return unfit(t.elementType, True)
        if isinstance(t, StructType):
            return any(unfit(f.dataType, True) for f in t.fields)
        return False

    return [f.name for f in schema.fields if unfit(f.dataType, False)]


#: At most this many candidate DELETEs (row ids, 8 bytes each) are broadcast
#: to the old side's scan, which then moves no wide row.
BROADCAST_DELETES = 4_000_000


def _few_deletes(plan) -> bool:
    """Whether the interval's candidate DELETEs (old-side rows minus the new
    side's unchanged copies) are at most :data:`BROADCAST_DELETES`, counted
    from the log: a copy is a row with a stored row version, so the copies
    of an added partition are its rows less the null count of
    ``_ct_row_version`` in its statistics (SPEC §Statistics); without them,
    no."""
    copies = 0
    for p in plan.added:
        nulls = p.stats.null_count.get(ctfile.ROW_VERSION_FIELD_ID) if p.stats is not None else None
        if nulls is None:
            return False
        copies += p.num_records - nulls
    return sum(p.num_records for p in plan.removed) - copies <= BROADCAST_DELETES


def _copies_cancelled(new, old, a: int, *, broadcast: bool):
    """The candidate INSERTs and DELETEs of an interval from ``a`` holding
    no RESTORE: new-side rows written since ``a`` (row version >= ``a``),
    old-side rows whose id is not among the new side's unchanged copies
    (*U*). *U* is cancelled on row ids alone, so only the candidates'
    wide rows take part in the join that follows; ``broadcast``: the
    candidate ids are few enough to broadcast to the old side's scan."""
    from pyspark.sql import functions as F

    # Every copy's id is an old-side id too, so the candidate DELETEs are the
    # ids seen once in the old ids plus the copies' ids: an aggregation of
    # two narrow columns (no sort), where an anti-join sorted both sides.
    copies = new.where(new[RV] < a).select(RID, F.lit(1).alias(_SEEN))
    ids = old.select(RID, F.lit(1).alias(_SEEN)).unionByName(copies)
    gone = ids.groupBy(RID).agg(F.sum(_SEEN).alias(_SEEN)).where(F.col(_SEEN) == 1).select(RID)
    # Few candidates (``broadcast``): the old side is filtered where it is
    # read; a shuffle would move every wide old row before Spark learns that.
    return new.where(new[RV] >= a), old.join(F.broadcast(gone) if broadcast else gone, RID, "left_semi")


def _matched_on_versions(new, old):
    """The candidate INSERTs and DELETEs of an interval holding a RESTORE:
    the rows of each side that no row of the other matches on row id and
    row version (SPEC §Change scans, ``default``)."""
    keys = [RID, RV]
    return new.join(old.select(*keys), keys, "left_anti"), old.join(new.select(*keys), keys, "left_anti")


class _Delta:
    """Builds the output rows of one scan: data columns ``data`` (a Spark
    schema) of the end version, the interval's first version ``a``, the
    table's row-id ``seed``."""

    def __init__(self, spark: Any, data: Any, a: int, seed: int):
        self.spark, self.data, self.a, self.seed = spark, data, a, seed

    def side(self, parts: Sequence, files: Sequence[str]):
        """The rows of ``parts`` with materialized row ids and versions (None
        when there is no partition)."""
        return lineage_df(self.spark, self.data, parts, files, versions=True) if parts else None

    def lone(self, rows, action: str):
        """``rows`` as lone changes (``METADATA$ISUPDATE`` false)."""
        from pyspark.sql import functions as F

        rows = with_xxh3_64(rows, RID, ROW_ID, self.seed)
        return rows.select(*self._data_columns(lambda c, i: F.col(f"`{c}`")), F.lit(action).alias(ACTION),
                           F.lit(False).alias(ISUPDATE), F.col(f"`{ROW_ID}`"))

    def pairs(self, new, old):
        """The candidate INSERTs ``new`` and DELETEs ``old`` joined by row
        id: update pairs (equal ones dropped) and lone rows."""
        from pyspark.sql import functions as F

        joined = self._tagged(new, "n").join(self._tagged(old, "o"), RID, "full_outer")
        has_new, has_old = F.col(f"n{_HERE}").isNotNull(), F.col(f"o{_HERE}").isNotNull()
        kept = joined.where(~(has_new & has_old & self._equal_images()))
        kept = with_xxh3_64(kept, RID, ROW_ID, self.seed)
        images = F.array(F.when(has_old, self._image("o", "DELETE", has_new)),
                         F.when(has_new, self._image("n", "INSERT", has_old)))
        return kept.select(F.inline(F.filter(images, lambda x: x.isNotNull())))

    def _data_columns(self, column) -> list:
        return [column(c, i).alias(c) for i, c in enumerate(self.data.names)]

    def _tagged(self, rows, prefix: str):
        """``rows`` with its data columns renamed ``<prefix><i>`` (the two
        sides of the join apart), the row id, and the side's marker."""
        from pyspark.sql import functions as F

        return rows.select(*[F.col(f"`{c}`").alias(f"{prefix}{i}") for i, c in enumerate(self.data.names)],
                           F.col(RID), F.lit(True).alias(f"{prefix}{_HERE}"))

    def _equal_images(self):
        """Whether the two images are equal in every column (null equals null)."""
        from pyspark.sql import functions as F

        same = [F.col(f"n{i}").eqNullSafe(F.col(f"o{i}")) for i in range(len(self.data.names))]
        return functools.reduce(lambda x, y: x & y, same, F.lit(True))

    def _image(self, prefix: str, action: str, is_update):
        """One output row of the side ``prefix`` as a struct of the output columns."""
        from pyspark.sql import functions as F

        return F.struct(*self._data_columns(lambda c, i: F.col(f"{prefix}{i}")), F.lit(action).alias(ACTION),
                        is_update.alias(ISUPDATE), F.col(f"`{ROW_ID}`").alias(ROW_ID))
