"""Append-only change scans through Spark's own Parquet reader
(``CtfileTable.changes_df``).

An ``append_only`` scan of ``a..b`` (SPEC §Change scans, modes) is the rows
with a null stored ``_ct_row_id`` in the partitions that data-changing
commits of the interval added, with the values they were inserted with, in
the schema of ``b``. Every such row is *fresh*: its row id is inherited,
``firstRowId + pos(r)`` of its partition (SPEC §Hidden columns), so the
whole scan is expressible with Spark's Parquet reader:

- the files of :attr:`ctfile.reader.change_plan.ChangePlan.appended`, read
  with the schema of ``b`` plus ``_ct_row_id`` (a file without the hidden
  columns reads it as null, as the SPEC says);
- ``_ct_row_id IS NULL`` (pushed down into the row groups);
- the row id: the file's ``firstRowId`` (a broadcast join on Spark's
  ``_metadata.file_name``) plus ``_metadata.row_index``, the row's position
  in its file counted before any filter, which is ``pos(r)``;
- ``METADATA$ROW_ID``: XXH3-64 of the row id seeded with the table's seed,
  computed in Spark SQL expressions (:func:`xxh3_64_column`) so that no
  Python worker runs; ``METADATA$ACTION`` ``INSERT``, ``METADATA$ISUPDATE``
  false.

The files must read by name into the schema of ``b``
(:meth:`ctfile.Snapshot.misread_by_name`) and the storage must be one
Spark's Hadoop opens; otherwise, as for snapshots
(:mod:`ctfile.spark.native`), the scan is ``spark.read.format("ctfile")``
with the same interval. Files are not checked against their checksums.
"""

from __future__ import annotations

import logging
from typing import Any

import ctfile
from ctfile.spark.native import datasource_df
from ctfile.spark_datasource.types import spark_schema

log = logging.getLogger("ctfile.spark")

ACTION = "METADATA$ACTION"
ISUPDATE = "METADATA$ISUPDATE"
ROW_ID = "METADATA$ROW_ID"

_M64 = (1 << 64) - 1
# XXH3's default secret, bytes 8..15 and 16..23 read little-endian, and its
# rrmxmx multiplier (as in ctfile.reader.row_ids, which checks them against
# the xxhash package).
_SECRET_8, _SECRET_16 = 0x1CAD21F72C81017C, 0xDB979083E96DD4DE
_PRIME_MX2 = 0x9FB21C651E98DF25


def _signed(u: int) -> int:
    """An unsigned 64-bit value as the Spark ``bigint`` with the same bits."""
    u &= _M64
    return u - (1 << 64) if u >= 1 << 63 else u


def _rotl(c, n: int):
    from pyspark.sql import functions as F

    return F.shiftleft(c, n).bitwiseOR(F.shiftrightunsigned(c, 64 - n))


def _mul_const(c, k: int):
    """``c * k`` modulo 2**64 for a bigint column ``c``, without overflow:
    Spark's ANSI mode fails a bigint product that overflows, so the product
    is summed from 16-bit limbs (each partial sum stays below 2**36)."""
    from pyspark.sql import functions as F

    a = [F.shiftrightunsigned(c, 16 * i).bitwiseAND(0xFFFF) for i in range(4)]
    b = [(k >> (16 * i)) & 0xFFFF for i in range(4)]
    out, carry = None, F.lit(0).cast("bigint")
    for j in range(4):
        s = carry
        for i in range(j + 1):
            if b[j - i]:
                s = s + a[i] * F.lit(b[j - i]).cast("bigint")
        limb = F.shiftleft(s.bitwiseAND(0xFFFF), 16 * j)
        out = limb if out is None else out.bitwiseOR(limb)
        carry = F.shiftright(s, 16)
    return out


def xxh3_64_steps(seed: int) -> list:
    """XXH3-64 of a bigint's 8 little-endian bytes (XXH3's 4-to-8-byte path)
    as a list of functions, each from the column of the previous step to the
    next; :func:`with_xxh3_64` applies them as separate projections so that
    each intermediate value is computed once."""
    from pyspark.sql import functions as F

    s32 = seed & 0xFFFFFFFF
    s = seed ^ (int.from_bytes(s32.to_bytes(4, "little"), "big") << 32)
    bitflip = _signed((_SECRET_8 ^ _SECRET_16) - s)
    return [
        # input64 = readLE32(last 4) + (readLE32(first 4) << 32): v rotated by 32; keyed = input64 ^ bitflip
        lambda v: _rotl(v, 32).bitwiseXOR(F.lit(bitflip)),
        lambda h: h.bitwiseXOR(_rotl(h, 49)).bitwiseXOR(_rotl(h, 24)),
        lambda h: _mul_const(h, _PRIME_MX2),
        lambda h: h.bitwiseXOR(F.shiftrightunsigned(h, 35) + F.lit(8)),  # + len
        lambda h: _mul_const(h, _PRIME_MX2),
        lambda h: h.bitwiseXOR(F.shiftrightunsigned(h, 28)),
    ]


def with_xxh3_64(df, column: str, out: str, seed: int):
    """``df`` with ``out``: the 16 lower-case hex digits of XXH3-64 of the
    bigint ``column`` with ``seed`` (``METADATA$ROW_ID``, SPEC §Change scans).
    Each step is its own column, so Spark keeps each a projection of its own
    (it does not inline a non-trivial expression used several times)."""
    from pyspark.sql import functions as F

    tmp = f"{out}__h"
    df = df.withColumn(tmp, F.col(column))
    for step in xxh3_64_steps(seed):
        df = df.withColumn(tmp, step(F.col(tmp)))
    return df.withColumn(out, F.lpad(F.lower(F.hex(F.col(tmp))), 16, "0")).drop(tmp)


def append_only_df(spark: Any, table: ctfile.Table, start_version: int | None, end_version: int | None):
    """The ``append_only`` change scan of ``start_version..end_version``
    (module docstring)."""
    from pyspark.sql import functions as F

    from ctfile.spark.lineage import RID, lineage_df, lineage_files, table_seed

    cs = table.changes(start_version=start_version, end_version=end_version, information="append_only")
    end = table.snapshot(cs.end_version)
    data = spark_schema(end.schema)
    parts = list(cs.plan.appended)
    if not parts:
        return spark.createDataFrame([], spark_schema(cs.schema))
    files, why_not = lineage_files(spark, table, end, parts)
    if files is None:
        log.info("ctfile: reading the append_only changes of %s, versions %d..%d, through spark.read.format('ctfile'): %s",
                 table.uri, cs.start_version, cs.end_version, why_not)
        return datasource_df(spark, table, changes="append_only", startingVersion=cs.start_version,
                             endingVersion=cs.end_version)
    rows = with_xxh3_64(lineage_df(spark, data, parts, files, fresh_only=True), RID, ROW_ID, table_seed(table))
    return rows.select(
        *[F.col(f"`{c}`") for c in data.names],
        F.lit("INSERT").alias(ACTION), F.lit(False).alias(ISUPDATE), F.col(f"`{ROW_ID}`"),
    )
