"""``CtfileTable``: a ctfile table as a PySpark application sees it."""

from __future__ import annotations

from typing import Any

import ctfile


class CtfileTable:
    """A handle on the ctfile table at a URI, for one SparkSession.

    Examples
    --------
    >>> import ctfile, pyarrow as pa, tempfile
    >>> uri = tempfile.mkdtemp()
    >>> _ = ctfile.create_table(uri, pa.schema([("id", pa.int64())]))
    >>> CtfileTable.for_path(None, uri).table.version
    0
    """

    def __init__(self, spark: Any, table: ctfile.Table):
        self.spark = spark
        self.table = table

    @classmethod
    def for_path(cls, spark: Any, uri: str, *, storage_options: dict | None = None) -> "CtfileTable":
        """The table at ``uri`` (a local path or an fsspec URL such as
        ``s3://bucket/t``; ``storage_options`` as for :func:`ctfile.open_table`).

        Raises
        ------
        TableNotFoundError
            No ctfile table at ``uri``.
        """
        return cls(spark, ctfile.open_table(uri, storage_options=storage_options))

    @property
    def uri(self) -> str:
        return self.table.uri

    def __repr__(self) -> str:
        return f"CtfileTable({self.uri!r})"

    def to_df(self, *, version: int | None = None, timestamp: Any = None):
        """The snapshot at ``version`` or ``timestamp`` (default: latest) as a
        DataFrame over Spark's own Parquet reader: the table's columns (no
        hidden ones) in its order and types; column pruning, filter pushdown
        and ``count()`` from the footers come from Spark.

        The snapshot is resolved now, on the driver: later commits are not
        seen. Where Spark's reader would not read the files exactly as
        ctfile does (files written before a rename, drop or widening; storage
        Spark's Hadoop cannot open), this is ``spark.read.format("ctfile")``
        at the same version instead, logged at INFO
        (:mod:`ctfile.spark.native`). Spark opens the files itself, so they
        are not checked against their checksums as ctfile's own reads do.

        Raises
        ------
        VersionNotFoundError
            A version or timestamp the table does not have.
        InvalidArgumentError
            Both ``version`` and ``timestamp``.
        """
        from ctfile.spark.native import snapshot_df

        return snapshot_df(self.spark, self.table, self.table.snapshot(version, timestamp=timestamp))

    def changes_df(self, start_version: int | None = None, end_version: int | None = None, *,
                   information: str = "append_only"):
        """The change scan of ``start_version..end_version`` (both included;
        defaults: the whole history, the latest version) as a DataFrame
        over Spark's own Parquet reader, with the columns of
        ``spark.read.format("ctfile").option("changes", "append_only")``:
        the table's columns in the schema of ``end_version``, then
        ``METADATA$ACTION``, ``METADATA$ISUPDATE`` and ``METADATA$ROW_ID``.

        Only ``append_only`` is offered: its rows are the fresh rows of the
        partitions the interval added, independent of each other
        (:mod:`ctfile.spark.changes`); the other modes join partitions by
        row id and are read with ``spark.read.format("ctfile")``. Falls back
        to that data source as :meth:`to_df` does.

        Raises
        ------
        InvalidArgumentError
            A mode other than ``append_only``, or a reversed interval.
        VersionNotFoundError, StaleIntervalError
            As :meth:`ctfile.Table.changes`.
        """
        from ctfile.spark.changes import append_only_df

        if ctfile.ChangeMode.parse(information) is not ctfile.ChangeMode.APPEND_ONLY:
            raise ctfile.InvalidArgumentError(
                f"changes_df reads append_only change scans only, found information={information!r}; "
                f"read other modes with spark.read.format('ctfile').option('changes', ...)"
            )
        return append_only_df(self.spark, self.table, start_version, end_version)

