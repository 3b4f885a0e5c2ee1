"""What ctfile.spark asks of a SparkSession, on a classic session (a JVM in
this process, reachable through py4j) and on Spark Connect (none: every
question is a public DataFrame or ``spark.conf`` call answered by the
server).

- :func:`is_classic`: whether the JVM is there, for the optimisations that
  use it (Spark's own condition translation, its analysis of the columns an
  expression uses, its size of a persisted DataFrame);
- :func:`default_parallelism`: the cores Spark schedules tasks on, measured
  the same way on both (one small job per application);
- :func:`fits_broadcast`: whether a MERGE source is within
  ``spark.sql.autoBroadcastJoinThreshold``: Spark's own size of the
  persisted source on a classic session, an estimate from its row count and
  Spark's default size of each type on Connect.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

_PARALLELISM: dict[str, int] = {}  # spark.app.id -> measured default parallelism
_PROBE_ROWS = 1 << 16
_BYTES = re.compile(r"\s*(-?\d+)\s*([kmgtp]?i?b?)?\s*", re.I)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def is_classic(spark: Any) -> bool:
    """Whether ``spark`` is a classic session, with a JVM in this process
    (a Spark Connect session, also the one ``foreachBatch`` hands over on
    Connect, is not)."""
    return isinstance(spark, SparkSession)


def default_parallelism(spark: Any) -> int:
    """The number of tasks Spark gives a leaf scan without a partition count:
    ``spark.sql.leafNodeDefaultParallelism``, or the cores of the
    application's executors (``SparkContext.defaultParallelism``, which a
    Connect client cannot read). Measured by one small job, the partitions of
    ``spark.range`` counted with ``spark_partition_id``, once per application
    (``spark.app.id``: every session of it, ``foreachBatch``'s included,
    shares the measure; an application that gains or loses executors later
    keeps its first one)."""
    app = spark.conf.get("spark.app.id", None)
    if app in _PARALLELISM:
        return _PARALLELISM[app]
    from pyspark.sql import functions as F

    ids = spark.range(0, _PROBE_ROWS).select(F.spark_partition_id().alias("p"))
    n = max(1, (ids.agg(F.max("p")).first()[0] or 0) + 1)
    if app is not None:
        _PARALLELISM[app] = n
    return n


def byte_string(text: str) -> int:
    """Spark's size setting (``10485760b``, ``10MB``, ``-1``) in bytes.

    Examples
    --------
    >>> byte_string("10485760b"), byte_string("10MB"), byte_string("-1")
    (10485760, 10485760, -1)
    """
    m = _BYTES.fullmatch(text)
    if m is None:
        raise ValueError(f"not a Spark size: {text!r}")
    unit = (m.group(2) or "").lower().rstrip("b").rstrip("i")
    return int(m.group(1)) * _UNITS[unit]


def default_size(t: T.DataType) -> int:
    """Spark's default size of a value of ``t`` (``DataType.defaultSize``),
    what its planner assumes for a column it has no statistics of.

    Examples
    --------
    >>> default_size(T.StructType([T.StructField("id", T.LongType()), T.StructField("s", T.StringType())]))
    28
    """
    if isinstance(t, T.StructType):
        return sum(default_size(f.dataType) for f in t.fields)
    if isinstance(t, T.ArrayType):
        return default_size(t.elementType)
    if isinstance(t, T.MapType):
        return default_size(t.keyType) + default_size(t.valueType)
    if isinstance(t, T.DecimalType):
        return 8 if t.precision <= 18 else 16
    if isinstance(t, (T.CharType, T.VarcharType)):
        return t.length
    return _SIZES.get(type(t), 8)


_SIZES = {
    T.BooleanType: 1, T.ByteType: 1, T.ShortType: 2, T.IntegerType: 4, T.LongType: 8, T.FloatType: 4,
    T.DoubleType: 8, T.StringType: 20, T.BinaryType: 100, T.DateType: 4, T.TimestampType: 8,
    T.TimestampNTZType: 8, T.NullType: 1, T.CalendarIntervalType: 16, T.DayTimeIntervalType: 8,
    T.YearMonthIntervalType: 4, T.VariantType: 2048,
}


def fits_broadcast(spark: Any, source: DataFrame, rows: int) -> bool:
    """Whether the persisted, counted ``source`` of ``rows`` rows is within
    ``spark.sql.autoBroadcastJoinThreshold`` (negative: never).

    A classic session asks Spark the size of the persisted data (what its
    planner uses); on Connect the size is estimated as Spark estimates a
    relation without statistics: 8 bytes a row plus each column's
    :func:`default_size` (a string counts 20 bytes, so long strings are
    underestimated and a source of them may be broadcast above the
    threshold)."""
    threshold = byte_string(spark.conf.get("spark.sql.autoBroadcastJoinThreshold"))
    if threshold < 0:
        return False
    if is_classic(spark):
        size = int(source._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())  # py4j: a Python int
    else:
        size = rows * (8 + default_size(source.schema))
    return size <= threshold
