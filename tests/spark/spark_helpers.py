"""Helpers of the Spark suite (imported by its tests and by subprocess children)."""

from __future__ import annotations

import contextlib
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

import ctfile

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

PEOPLE_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def spark_env() -> dict[str, str]:
    """Environment for a process that runs PySpark with this interpreter."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def build_session(app_name: str = "ctfile-tests"):
    """A local[2] session configured like the suite's (also used by subprocesses)."""
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # The suite's jobs are tiny: C2 compilation of Spark's hot paths costs
        # more CPU than it ever saves here (about 2 s of start-up each session).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        # The suite's statements and change scans are small: run them on the
        # executors, the path the tests are about; the driver path
        # (ctfile.spark.local) and the spread MERGE (ctfile.spark.local.run_spread)
        # are turned on by the tests of them.
        .config("spark.ctfile.local.sourceRows", "0")
        .config("spark.ctfile.local.spreadRows", "0")
        .config("spark.ctfile.local.changeRows", "0")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextlib.contextmanager
def spark_conf(spark, key: str, value: str):
    """Set a session conf for the duration of the block, then restore it."""
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def read(spark, path, **options):
    """``spark.read.format("ctfile")`` with options, loaded from ``path``."""
    r = spark.read.format("ctfile")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(str(path))


def sorted_rows(df_or_rows, columns=None) -> list[tuple]:
    """Rows as sorted tuples (None sorts first), optionally only ``columns``."""
    rows = df_or_rows.collect() if hasattr(df_or_rows, "collect") else df_or_rows
    out = []
    for r in rows:
        d = r.asDict() if hasattr(r, "asDict") else dict(r)
        out.append(tuple(d[c] for c in (columns or list(d))))
    return sorted(out, key=lambda t: tuple((v is not None, v) for v in t))


class Collector:
    """A foreachBatch sink that records (batch id, rows) in the driver, and
    each batch's column names in :attr:`columns_seen`."""

    def __init__(self, columns=("id", "METADATA$ACTION", "METADATA$ISUPDATE")):
        self.columns = list(columns)
        self.batches: list[tuple[int, list[tuple]]] = []
        self.columns_seen: list[list[str]] = []
        self.fail_batch: int | None = None

    def __call__(self, df, batch_id):
        rows = sorted_rows(df, self.columns)
        if batch_id == self.fail_batch:
            self.fail_batch = None
            raise RuntimeError(f"injected failure in batch {batch_id}")
        self.batches.append((batch_id, rows))
        self.columns_seen.append(df.columns)

    @property
    def rows(self) -> list[tuple]:
        return sorted(r for _, rs in self.batches for r in rs)


def make_people(root) -> ctfile.Table:
    """The worked example of the core issue.

    v0 create; v1 insert (1,Jeff),(2,Donny); v2 insert (3,Walter),(4,Maud),(5,Uli);
    v3 update id 1 -> Jeffrey; v4 update id 4 -> Maude; v5 delete ids 2, 5.
    """
    t = ctfile.create_table(str(root), PEOPLE_SCHEMA)
    t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}, schema=PEOPLE_SCHEMA))
    t.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}, schema=PEOPLE_SCHEMA))
    t.update(pc.field("id") == 1, {"name": "Jeffrey"})
    t.update(pc.field("id") == 4, {"name": "Maude"})
    t.delete(pc.field("id").isin([2, 5]))
    assert t.version == 5
    return t


def id_x_table(root, n: int, *, partition_rows: int = 1, start: int = 0, **kwargs) -> ctfile.Table:
    """A table (id long not null, x long) holding ids start..start+n-1 with x = id,
    ``partition_rows`` rows per micro-partition."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64())])
    t = ctfile.create_table(str(root), schema, partition_rows=partition_rows, **kwargs)
    if n:
        ids = list(range(start, start + n))
        t.insert(pa.table({"id": ids, "x": ids}, schema=schema))
    return t


def ranged_table(root, n: int = 800, per: int = 100) -> ctfile.Table:
    """A table (id long, v string) of ids 0..n-1 with v = "v<id>", inserted
    ``per`` rows at a time: partition k holds ids k*per..(k+1)*per-1."""
    t = ctfile.create_table(str(root), pa.schema([("id", pa.int64()), ("v", pa.string())]),
                            properties={"ctfile.partitionRows": str(per)})
    for lo in range(0, n, per):
        t.insert(pa.table({"id": pa.array(range(lo, lo + per), pa.int64()), "v": [f"v{k}" for k in range(lo, lo + per)]}))
    return t


def by_first_id(t: ctfile.Table) -> list:
    """The live partitions of a :func:`ranged_table`, in id order."""
    return sorted(t.snapshot().partitions, key=lambda p: p.stats.min_values[1] if p.stats else 0)


@contextlib.contextmanager
def spoiled(t: ctfile.Table, partitions):
    """The files of ``partitions`` (of the local table ``t``) are garbage
    within the block: a statement that opens one fails."""
    saved = {}
    for p in partitions:
        path = os.path.join(t.uri, p.path)
        with open(path, "rb") as f:
            saved[path] = f.read()
        with open(path, "wb") as f:
            f.write(b"not parquet")
    try:
        yield
    finally:
        for path, data in saved.items():
            with open(path, "wb") as f:
                f.write(data)
