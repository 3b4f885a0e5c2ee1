"""Snapshot reads through Spark's own Parquet reader (``CtfileTable.to_df``).

ctfile's micro-partitions are plain Parquet files, so once the driver has
resolved a snapshot (log replay, through the public ``ctfile`` API) Spark's
vectorised Parquet reader can read its files directly: column pruning,
filter pushdown into row groups and ``count()`` from the footers then come
from Spark itself, with no Python worker in the scan. The DataFrame is
``spark.read.schema(<table schema>).parquet(<file URIs>)``: the table's
columns in the table's order and types, never the hidden columns
(SPEC §Hidden columns).

That reader matches columns by name, which is right for every file written
since the last rename or drop of a column (and widens integers and ``float``
to ``double`` itself, but not decimals exactly enough:
:meth:`ctfile.Snapshot.misread_by_name`, SPEC §Schema evolution). Spark's
own ``spark.sql.parquet.fieldId.read.enabled`` would match by field id, but
it is read from the session when each query is planned, not fixed with the
DataFrame, so a DataFrame built with it on reads by name again, wrongly,
once anyone turns it off; ctfile does not rely on it. Where the native read
cannot be right, :func:`snapshot_df` returns the universal path instead,
``spark.read.format("ctfile")`` pinned at the same version, and logs why at
INFO:

- a table whose files would be misread by name;
- storage Spark's Hadoop cannot open: a URL scheme without a Hadoop
  ``FileSystem`` on Spark's classpath (``s3://`` is read as ``s3a://``, which
  needs ``hadoop-aws``), a session without a JVM to ask (Spark Connect), or
  a table opened with fsspec storage options (an endpoint, credentials),
  which Hadoop's configuration does not receive.

Spark opens the files itself, so this path cannot check them against their
``add`` actions (SPEC §Micro-partition files, reader requirements): a
damaged file reads as whatever it decodes to, a missing one fails with
Spark's own error. ``spark.read.format("ctfile")`` checks every file.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlsplit

import ctfile
from ctfile.spark.session import is_classic
from ctfile.spark_datasource.types import spark_schema

log = logging.getLogger("ctfile.spark")

# fsspec scheme -> the Hadoop scheme of the same storage. Any other scheme is
# asked of Hadoop as it is (gs, abfs, hdfs ...).
_HADOOP_SCHEMES = {"s3": "s3a", "s3a": "s3a"}
_LOCAL_SCHEMES = {"", "file", "local"}
# (application id, scheme) -> whether Spark's Hadoop has a FileSystem for it.
_HAS_FILESYSTEM: dict[tuple[str, str], bool] = {}


@dataclass(frozen=True)
class Location:
    """Where Spark's Hadoop reads a table: the root URI it opens, or None
    and why not."""

    root: str | None
    why_not: str = ""

    def file(self, path: str) -> str:
        """The URI of a data file (``path`` relative to the table root, or an
        absolute URL)."""
        if "://" in path:
            return _to_hadoop_url(path)
        assert self.root is not None
        return f"{self.root.rstrip('/')}/{path}"


def _to_hadoop_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"


def _has_filesystem(spark: Any, scheme: str) -> bool | None:
    """Whether Spark's Hadoop has a ``FileSystem`` for ``scheme`` (asked once
    per application through the JVM of a classic session); None on Spark
    Connect, whose public API cannot ask it without reading a path."""
    if not is_classic(spark):
        return None
    jvm, jsc = spark._jvm, spark._jsc
    key = (spark.sparkContext.applicationId, scheme)
    if key not in _HAS_FILESYSTEM:
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, jsc.hadoopConfiguration())
            _HAS_FILESYSTEM[key] = True
        except Exception:  # py4j wraps ClassNotFound / UnsupportedFileSystemException
            _HAS_FILESYSTEM[key] = False
    return _HAS_FILESYSTEM[key]


def hadoop_location(spark: Any, table: ctfile.Table) -> Location:
    """Where Spark's Hadoop reads ``table``, if it can.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
    >>> hadoop_location(None, t).root.startswith("file:///")
    True
    """
    uri = table.uri
    scheme = urlsplit(uri).scheme if "://" in uri else ""
    if scheme in _LOCAL_SCHEMES:
        local = uri.split("://", 1)[1] if scheme else uri
        return Location(Path(os.path.abspath(local)).as_uri())
    if table.storage.storage_options:
        return Location(None, f"the table was opened with storage options ({', '.join(sorted(table.storage.storage_options))}), "
                              "which Spark's Hadoop configuration does not receive")
    hadoop = _HADOOP_SCHEMES.get(scheme, scheme)
    has = _has_filesystem(spark, hadoop)
    if has is None:
        return Location(None, f"a Spark Connect session has no JVM to ask whether Spark's Hadoop can open {hadoop}://")
    if not has:
        return Location(None, f"Spark's Hadoop has no FileSystem for {hadoop}:// on its classpath"
                              + (" (hadoop-aws provides s3a)" if hadoop == "s3a" else ""))
    return Location(_to_hadoop_url(uri))


def datasource_df(spark: Any, table: ctfile.Table, **options: Any):
    """``spark.read.format("ctfile")`` with ``options`` (as strings) and the
    table's storage options."""
    reader = spark.read.format("ctfile")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    if table.storage.storage_options:
        reader = reader.option("storageOptions", json.dumps(table.storage.storage_options))
    return reader.load(table.uri)


def native_files(spark: Any, table: ctfile.Table, snapshot: ctfile.Snapshot,
                 partitions: Sequence | None = None) -> tuple[list[str] | None, str]:
    """The Hadoop URIs of ``partitions`` (default: the snapshot's) when
    Spark's Parquet reader reads them into ``snapshot``'s schema exactly as
    ctfile does; else None and why not."""
    parts = snapshot.partitions if partitions is None else list(partitions)
    where = hadoop_location(spark, table)
    if where.root is None:
        return None, where.why_not
    misread = snapshot.misread_by_name(parts, widening=True)
    if misread:
        return None, (f"{len(misread)} files (first: {misread[0]}) were written before a column was renamed or dropped, "
                      "or a decimal column widened, and Spark's Parquet reader matches columns by name")
    return [where.file(p.path) for p in parts], ""


def snapshot_df(spark: Any, table: ctfile.Table, snapshot: ctfile.Snapshot):
    """The DataFrame of ``snapshot``: Spark's Parquet reader over its files,
    or ``spark.read.format("ctfile")`` at its version where that reader
    would not be exact (module docstring). With row ids:
    :func:`ctfile.spark.lineage.snapshot_with_row_ids`."""
    schema = spark_schema(snapshot.schema)
    if not snapshot.partitions:
        return spark.createDataFrame([], schema)
    files, why_not = native_files(spark, table, snapshot)
    if files is None:
        log.info("ctfile: reading %s at version %d through spark.read.format('ctfile'): %s",
                 table.uri, snapshot.version, why_not)
        return datasource_df(spark, table, versionAsOf=snapshot.version)
    return spark.read.schema(schema).parquet(*files)


def snapshot_with_hidden_df(spark: Any, table: ctfile.Table, snapshot: ctfile.Snapshot):
    """The rows of ``snapshot`` with the table's hidden schema columns (a
    derived table's derivation columns, SPEC §Derived tables) through
    Spark's Parquet reader; None where that reader would not read the
    files exactly (:func:`native_files`: the data source has no such read)."""
    schema = spark_schema(snapshot.table_schema.to_arrow(include_hidden=True, field_ids=False))
    if not snapshot.partitions:
        return spark.createDataFrame([], schema)
    files, _ = native_files(spark, table, snapshot)
    return spark.read.schema(schema).parquet(*files) if files is not None else None
