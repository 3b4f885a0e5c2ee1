"""Snapshots: the table as of one version (SPEC §Log replay, reader requirements).

Reads go through :class:`~ctfile.reader.integrity.DataFiles`, so every data
file is verified against its ``add`` action before its rows are returned
(SPEC §Micro-partition files, reader requirements). Ordinary reads scan each
verified file with pyarrow's dataset scanner (columns matched by name,
row groups skipped by their footer statistics, the filter applied), several
partitions at a time; a file that matching by name would misread (written
before a rename, drop or widening, SPEC §Schema evolution) is read through
its projection by field id instead, from the same verified source.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctfile.format.actions import FEATURE_SCHEMA_EVOLUTION, Metadata, Partition, Protocol
from ctfile.format.properties import TableProperties, check_cluster_keys, cluster_keys
from ctfile.format.errors import InvalidArgumentError, UnsupportedFeatureError
from ctfile.format.log_values import require_long, utc_datetime
from ctfile.format.derived import DerivedDefinition
from ctfile.format.schema import HIDDEN_COLUMNS, Schema
from ctfile.log.replay import TableState
from ctfile.log.storage import Storage
from ctfile.reader.clustering import ClusteringInfo, clustering_info
from ctfile.reader.expressions import check_predicate, referenced_columns
from ctfile.reader.integrity import DataFiles
from ctfile.reader.partition_reader import read_partition, read_partition_table
from ctfile.reader.projection import Projection
from ctfile.reader.pruning import column_bounds, partition_guarantees, prune
from ctfile.reader.row_ids import table_seed
from ctfile.reader.scan_task import ScanTask, plan_scan_tasks

if TYPE_CHECKING:
    import pyarrow.dataset as ds

# Partitions read at once by to_arrow(); to_batches() fetches and verifies
# this many files ahead of the one it decodes.
READ_WORKERS = 4
FETCH_AHEAD = 1


class _Projected:
    """An open data file read into the snapshot's schema by field id
    (:class:`~ctfile.reader.projection.Projection`): the columns ``schema``
    names, no hidden ones."""

    def __init__(self, pf: pq.ParquetFile, projection: Projection, schema: pa.Schema):
        self._pf, self._projection, self._schema = pf, projection, schema

    def _assemble(self, data: pa.RecordBatch | pa.Table) -> list:
        return [self._projection.column(n, data, data.num_rows) for n in self._schema.names]

    def table(self) -> pa.Table:
        data = self._pf.read(columns=self._projection.read_columns)
        return pa.Table.from_arrays(self._assemble(data), schema=self._schema)

    def batches(self, batch_rows: int | None) -> Iterator[pa.RecordBatch]:
        for b in self._pf.iter_batches(batch_size=batch_rows or 65536, columns=self._projection.read_columns):
            yield pa.RecordBatch.from_arrays(self._assemble(b), schema=self._schema)


#: The largest ``batch_rows``: pyarrow takes a batch size as a 32-bit int.
MAX_BATCH_ROWS = 2**31 - 1


def _check_flag(value: Any, what: str) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be a bool, found {value!r:.80}")


class Snapshot:
    """A read-only view of a table at one version.

    Obtain one with :meth:`ctfile.Table.snapshot`. Reads never see hidden
    columns unless ``include_hidden=True``.
    """

    def __init__(self, storage: Storage, state: TableState):
        self._storage = storage
        self._state = state

    def __repr__(self) -> str:
        return (
            f"Snapshot(uri={self._storage.uri!r}, version={self.version}, "
            f"partitions={len(self._state.partitions)}, rows={self.num_records})"
        )

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def timestamp(self) -> dt.datetime | None:
        """Commit time of this version (UTC); None for a commit timestamp a
        datetime cannot hold (after year 9999, see :attr:`timestamp_ms`)."""
        return utc_datetime(self._state.timestamp)

    @property
    def timestamp_ms(self) -> int:
        """Commit time of this version as the log holds it: milliseconds
        since the epoch (SPEC §Commit timestamps)."""
        return self._state.timestamp

    @property
    def table_schema(self) -> Schema:
        """The schema with field ids (:class:`ctfile.format.Schema`)."""
        return self._state.metadata.schema

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of ordinary reads (no hidden columns: neither row
        lineage nor a derived table's derivation columns, SPEC §Derived tables)."""
        return self._state.metadata.visible_schema.to_arrow(field_ids=False)

    @property
    def derived(self) -> DerivedDefinition | None:
        """The derived table's definition and frontier at this version (SPEC
        §Derived tables); None if the table is not derived."""
        return self._state.metadata.derived

    def _read_names(self, include_hidden: bool) -> list[str]:
        """The columns a read returns by default: the visible ones, or with
        ``include_hidden`` every schema column (derivation columns too)."""
        return self.table_schema.names if include_hidden else self._state.metadata.visible_schema.names

    @property
    def metadata(self) -> Metadata:
        return self._state.metadata

    @property
    def protocol(self) -> Protocol:
        return self._state.protocol

    @property
    def change_capture(self) -> str:
        """``ctfile.changeCapture`` of this version, as the writers of the next
        commit apply it: ``none`` or ``before_after`` (SPEC §Change capture)."""
        return TableProperties.from_mapping(self.metadata.properties).change_capture.value

    @property
    def partitions(self) -> list[Partition]:
        return list(self._state.partitions.values())

    @property
    def num_records(self) -> int:
        return self._state.num_records

    @property
    def cluster_keys(self) -> tuple[str, ...]:
        """The clustering keys of this version (``ctfile.clusterBy``; empty
        without them; SPEC §Clustering)."""
        return cluster_keys(self.metadata.properties, self.table_schema)

    @property
    def auto_compact(self) -> bool:
        """``ctfile.autoCompact`` of this version, as the writers of the next
        commit apply it (SPEC §Clustering; False when unset or malformed).

        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]),
        ...                         properties={"ctfile.autoCompact": "true"})
        >>> t.snapshot().auto_compact
        True
        """
        return TableProperties.from_mapping(self.metadata.properties).auto_compact

    @property
    def append_only(self) -> bool:
        """``ctfile.appendOnly`` of this version: whether the next commit
        may only insert rows (SPEC §Append-only tables; False when unset or
        malformed).

        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]),
        ...                         properties={"ctfile.appendOnly": "true"})
        >>> t.snapshot().append_only, t.snapshot(0).protocol.writer_features[-1]
        (True, 'appendOnly')
        """
        return TableProperties.from_mapping(self.metadata.properties).append_only

    def clustering_info(self, *, keys: Sequence[str] | None = None) -> "ClusteringInfo | None":
        """How clustered this version is by ``keys`` (default: its clustering
        keys), from statistics alone (:class:`~ctfile.reader.clustering.ClusteringInfo`,
        after Snowflake's ``SYSTEM$CLUSTERING_INFORMATION``); None when no
        keys are given and the table has none.

        Raises
        ------
        InvalidArgumentError
            ``keys`` names no column, or a column of a type without bounds.
        """
        if keys is None:
            keys = self.cluster_keys
            if not keys:
                return None
        if not isinstance(keys, (str, list, tuple)) or not all(isinstance(k, str) for k in keys):
            raise InvalidArgumentError(f"keys must be a column name or a list of them, found {keys!r:.80}")
        keys = tuple([keys] if isinstance(keys, str) else keys)
        if not keys:
            raise InvalidArgumentError("keys must name one or more columns, found none")
        check_cluster_keys(self.table_schema, keys, what="clustering keys asked for")
        return clustering_info(self.partitions, self.table_schema, keys)

    def column_bounds(self, column: str) -> list[tuple[Any, Any] | None]:
        """Per partition of :attr:`partitions` (same order), the ``(min, max)``
        of ``column`` from its statistics, decoded to Python values (int,
        float, str, date, datetime, Decimal ...; SPEC §Statistics); None for a
        partition without a usable bound (no statistics, a string maximum
        left out after truncation, a column of a type without bounds).

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [3, 1]}))
        >>> _ = t.insert(pa.table({"id": [7, 9, 8]}))
        >>> t.snapshot().column_bounds("id")
        [(1, 3), (7, 9)]

        Raises
        ------
        SchemaMismatchError
            ``column`` is not a column of this version's schema.
        CorruptLogError
            A bound does not decode as a value of the column's type.
        """
        f = self.table_schema.field(column)
        return [column_bounds(p, column, f.id, f.type) for p in self._state.partitions.values()]

    @property
    def state(self) -> TableState:
        return self._state

    # ------------------------------------------------------------ reads

    def _columns(self, columns: Sequence[str] | None, include_hidden: bool = False) -> list[str]:
        names = self._read_names(include_hidden)
        if columns is None:
            return names
        if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns):
            raise InvalidArgumentError(f"columns must be a list of column names, found {columns!r}")
        unknown = [c for c in columns if c not in names]
        if unknown:
            hidden = set(HIDDEN_COLUMNS) | set(self.table_schema.names)
            hint = " (hidden columns are read with include_hidden=True)" if set(unknown) & hidden else ""
            raise InvalidArgumentError(f"unknown columns {unknown}; table columns are {names}{hint}")
        return list(columns)

    def _plan(self, filter: pc.Expression | None, include_hidden: bool = False) -> list[Partition]:
        if filter is not None:
            arrow = self.table_schema.to_arrow(field_ids=False) if include_hidden else self.schema
            check_predicate(filter, arrow, what="filter")
        return prune(self.partitions, self.table_schema, filter)

    def _needed(self, cols: list[str], filter: pc.Expression | None) -> list[str]:
        """``cols`` and the columns ``filter`` reads."""
        if filter is None:
            return cols
        return list(dict.fromkeys(cols + referenced_columns(filter, self.schema)))

    def _open(self, files: DataFiles, p: Partition, src, need: list[str]) -> tuple[ds.ParquetFileFragment | None, _Projected | None]:
        """How to read the verified file ``src`` of ``p``: a dataset fragment
        over it when matching its columns by name gives the values of the
        read schema; else (a column renamed, dropped or widened since the
        file was written: SPEC §Schema evolution) the file with its
        projection by field id, read from the same source (no second open,
        footer or projection)."""
        pf = files.parquet(src, p)  # checks the row count
        projection = Projection(pf.schema_arrow, self.table_schema, need)
        if projection.by_name:
            import pyarrow.dataset as ds  # imports pandas: only where used (reader/expressions.py)

            return ds.ParquetFileFormat().make_fragment(src), None
        arrow = self.schema
        return None, _Projected(pf, projection, pa.schema([arrow.field(c) for c in need]))

    def _read_one(self, files: DataFiles, p: Partition, cols: list[str], filter, need: list[str]) -> pa.Table:
        """The rows of ``p`` (``cols``, matching ``filter``, which reads the
        columns ``need``), through pyarrow's dataset scanner over the
        verified file when it matches by name."""
        with files.open(p) as src:
            fragment, projected = self._open(files, p, src, need)
            if fragment is not None:
                return fragment.to_table(schema=self.schema, columns=cols, filter=filter)
            t = projected.table()
        return (t if filter is None else t.filter(filter)).select(cols)

    def to_arrow(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        include_hidden: bool = False,
    ) -> pa.Table:
        """Read the snapshot (or the rows matching ``filter``) into one Table.

        Examples
        --------
        >>> import ctfile, pyarrow as pa, pyarrow.compute as pc, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [1, 2, 3]}))
        >>> t.snapshot().to_arrow(filter=pc.field("id") > 1).column("id").to_pylist()
        [2, 3]
        """
        _check_flag(include_hidden, "include_hidden")
        cols = self._columns(columns, include_hidden)
        parts = self._plan(filter, include_hidden)
        files = DataFiles(self._storage)
        if not parts:
            return self._empty_hidden(cols) if include_hidden else self.schema.empty_table().select(cols)
        if include_hidden:
            read = lambda p: self._read_hidden(files, p, cols, filter)  # noqa: E731
        else:
            need = self._needed(cols, filter)  # once per read: it binds the filter once per column
            read = lambda p: self._read_one(files, p, cols, filter, need)  # noqa: E731
        with ThreadPoolExecutor(max_workers=READ_WORKERS) as pool:
            tables = list(pool.map(read, parts))
        return pa.concat_tables(tables)

    def _empty_hidden(self, cols: list[str]) -> pa.Table:
        arrow = self.table_schema.to_arrow(field_ids=False)
        fields = [arrow.field(c) for c in cols]
        fields += [pa.field(h, pa.int64()) for h in HIDDEN_COLUMNS]
        return pa.schema(fields).empty_table()

    def _read_hidden(self, files: DataFiles, p: Partition, cols: list[str], filter: pc.Expression | None) -> pa.Table:
        # Hidden values depend on row position, so filter after materializing;
        # read the filter's columns too and drop them afterwards.
        need = cols if filter is None else list(dict.fromkeys(cols + self.table_schema.names))
        t = read_partition_table(files, p, self.table_schema, columns=need, hidden=True)
        if filter is not None:
            t = t.filter(filter)
        return t.select(cols + list(HIDDEN_COLUMNS))

    def to_batches(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        include_hidden: bool = False,
        batch_rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the snapshot as RecordBatches, partition by partition.

        Memory stays bounded: a few batches, and the bytes of the partition
        being decoded and of the next one, fetched and verified meanwhile.
        ``batch_rows``: at most this many rows per batch (pyarrow's batch
        size, a 32-bit int).
        """
        if batch_rows is not None:
            require_long(batch_rows, "batch_rows", minimum=1, maximum=MAX_BATCH_ROWS)
        _check_flag(include_hidden, "include_hidden")
        cols = self._columns(columns, include_hidden)
        parts = self._plan(filter, include_hidden)
        if not include_hidden:
            kw = {"batch_size": batch_rows} if batch_rows else {}
            return self._batches(parts, cols, filter, kw)
        return self._hidden_batches(parts, cols, filter, batch_rows)

    def _batches(self, parts: list[Partition], cols: list[str], filter, kw: dict) -> Iterator[pa.RecordBatch]:
        files = DataFiles(self._storage)
        need = self._needed(cols, filter)
        fetched = _fetched_ahead(files, parts)
        with contextlib.closing(fetched):  # abandoned or failed: release what was fetched ahead
            for p, source in fetched:
                with files.open(p, fetched=source) as src:
                    fragment, projected = self._open(files, p, src, need)
                    if fragment is not None:
                        yield from fragment.to_batches(schema=self.schema, columns=cols, filter=filter, **kw)
                        continue
                    for b in projected.batches(kw.get("batch_size")):
                        b = _filtered(b, filter)
                        if b is not None:
                            yield b.select(cols)

    def _hidden_batches(self, parts, cols, filter, batch_rows) -> Iterator[pa.RecordBatch]:
        need = cols if filter is None else list(dict.fromkeys(cols + self.table_schema.names))
        out_cols = cols + list(HIDDEN_COLUMNS)
        files = DataFiles(self._storage)
        for p in parts:
            for b in read_partition(files, p, self.table_schema, columns=need, hidden=True, batch_rows=batch_rows):
                b = _filtered(b, filter)
                if b is not None:
                    yield b.select(out_cols)

    def scan_tasks(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        max_rows_per_task: int | None = None,
        row_ids: bool = False,
    ) -> list[ScanTask]:
        """Plan this snapshot's scan as picklable tasks for parallel engines.

        Partitions are pruned by their statistics; a partition with more
        rows than ``max_rows_per_task`` is split into row-group ranges.
        ``row_ids=True``: each task's batches end with ``METADATA$ROW_ID``,
        the value change scans give the row (SPEC §Change scans; what
        ``spark.read.format("ctfile").option("rowIds", "true")`` reads).

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
        >>> _ = t.insert(pa.table({"id": [7]}))
        >>> [task] = t.snapshot().scan_tasks(row_ids=True)
        >>> b = next(task.to_batches())
        >>> b.schema.names, b.column(1).equals(t.changes().to_arrow().column("METADATA$ROW_ID").combine_chunks())
        (['id', 'METADATA$ROW_ID'], True)
        """
        if max_rows_per_task is not None:
            require_long(max_rows_per_task, "max_rows_per_task", minimum=1)
        _check_flag(row_ids, "row_ids")
        cols = self._columns(columns)
        if filter is not None:
            check_predicate(filter, self.schema, what="filter")
        rg_rows = TableProperties.from_mapping(self.metadata.properties).row_group_rows
        return plan_scan_tasks(
            self._storage, self.table_schema, self.partitions, columns=cols, filter=filter,
            row_group_rows=rg_rows, max_rows_per_task=max_rows_per_task,
            row_id_seed=table_seed(self.metadata.table_id) if row_ids else None,
        )

    def to_pandas(self, **kwargs):
        """``to_arrow(**kwargs).to_pandas()``."""
        return self.to_arrow(**kwargs).to_pandas()

    def to_dataset(self) -> ds.FileSystemDataset:
        """A ``pyarrow.dataset.Dataset`` over this snapshot's partitions.

        Each fragment carries the partition's statistics as its guarantee
        (``partition_expression``) where they are exact for every row, so
        engines that read Arrow datasets (DuckDB, Polars, pandas) prune with
        them. Hidden columns are not part of the dataset.

        The dataset names the files; the engine reading it opens them itself,
        so ctfile cannot check them against their ``add`` actions: a damaged
        file is read as whatever it decodes to, and a missing one fails with
        that engine's own error. Use :meth:`to_arrow` or :meth:`to_batches`
        (which verify every file, SPEC §Micro-partition files) where that
        matters, or check the table with ``ctfile verify`` first.
        """
        import pyarrow.dataset as ds  # imports pandas: only where used (reader/expressions.py)

        parts = self.partitions
        self._check_by_name(parts)
        guarantees = []
        for p in parts:
            g = pc.scalar(True)
            for f in self.table_schema.fields:
                if not isinstance(f.type, str):
                    continue
                alts = partition_guarantees(p, self.table_schema, [f.name])
                if len(alts) == 1:  # exact for every row: no nulls/NaNs mixed in
                    g = alts[0] if g.equals(pc.scalar(True)) else g & alts[0]
            guarantees.append(g)
        return ds.FileSystemDataset.from_paths(
            [self._storage.arrow_path(p.path) for p in parts],
            schema=self.schema,
            format=ds.ParquetFileFormat(),
            filesystem=self._storage.arrow_filesystem,
            partitions=guarantees,
        )

    def misread_by_name(self, partitions: Sequence[Partition] | None = None, *, widening: bool = False) -> list[str]:
        """The paths of the partitions (default: all of this snapshot's) that
        an engine matching Parquet columns by name, into this snapshot's
        :attr:`schema`, would misread: files written before a column was
        renamed, dropped or widened (SPEC §Schema evolution). Empty when every
        such read gives the values of a read by field id. With
        ``widening=True`` the engine is one that widens integers and
        ``float`` to ``double`` as it reads (Spark's Parquet reader), so
        files whose columns were only so widened are read right.

        Only a table whose protocol lists ``schemaEvolution`` can hold such a
        file (SPEC §Schema evolution, protocol); its footers are read to find
        out. ``partitions`` may be those of another version (the added
        partitions of a change interval ending here).

        Examples
        --------
        >>> import ctfile, pyarrow as pa, tempfile
        >>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64()), ("v", pa.string())]))
        >>> _ = t.insert(pa.table({"id": [1], "v": ["a"]}))
        >>> t.snapshot().misread_by_name()
        []
        >>> _ = t.update_schema().rename_column("v", "w").commit()
        >>> [p.startswith("data/") for p in t.snapshot().misread_by_name()]
        [True]
        """
        if partitions is not None and not _is_partition_list(partitions):
            raise InvalidArgumentError(f"partitions must be a list of Partition (or None), found {partitions!r:.80}")
        parts = self.partitions if partitions is None else list(partitions)
        if FEATURE_SCHEMA_EVOLUTION not in self.protocol.reader_features or not parts:
            return []
        with ThreadPoolExecutor(max_workers=READ_WORKERS) as pool:
            misread = pool.map(functools.partial(self._misread_by_name, widening=widening), parts)
            return [p.path for p, m in zip(parts, misread) if m]

    def _misread_by_name(self, p: Partition, *, widening: bool) -> bool:
        """Whether an engine matching columns by name (see
        :meth:`misread_by_name`) would misread ``p``'s file (its footer is read)."""
        file_schema = pq.read_schema(self._storage.arrow_path(p.path), filesystem=self._storage.arrow_filesystem)
        projection = Projection(file_schema, self.table_schema, self.table_schema.names)
        return not (projection.by_name_widening if widening else projection.by_name)

    def _check_by_name(self, parts: list[Partition]) -> None:
        """Raise if an engine matching columns by name would misread a file
        (:meth:`misread_by_name`)."""
        bad = self.misread_by_name(parts)
        if bad:
            raise UnsupportedFeatureError(
                f"{len(bad)} partitions (first: {bad[0]}) were written before a column of the current schema was "
                f"renamed, dropped or widened, and an engine that matches columns by name would misread them; "
                f"read with to_arrow() or to_batches(), which match columns by field id"
            )


def _is_partition_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(p, Partition) for p in value)


def _filtered(b: pa.RecordBatch, filter: pc.Expression | None) -> pa.RecordBatch | None:
    """The rows of ``b`` that satisfy ``filter`` (all without one); None
    when none does."""
    if filter is None:
        return b
    t = pa.Table.from_batches([b]).filter(filter).combine_chunks()
    return t.to_batches()[0] if t.num_rows else None


def _fetched_ahead(files: DataFiles, parts: list[Partition]) -> Iterator[tuple[Partition, Any]]:
    """Each of ``parts`` with its fetched file (:meth:`DataFiles.fetch
    <ctfile.reader.integrity.DataFiles.fetch>`), the next :data:`FETCH_AHEAD`
    fetched on a thread meanwhile. Closing the iterator early releases
    what was fetched ahead."""
    with ThreadPoolExecutor(max_workers=FETCH_AHEAD) as pool:
        ahead = [pool.submit(files.fetch, p) for p in parts[:FETCH_AHEAD]]
        try:
            for i, p in enumerate(parts):
                source = ahead.pop(0).result()
                if i + FETCH_AHEAD < len(parts):
                    ahead.append(pool.submit(files.fetch, parts[i + FETCH_AHEAD]))
                yield p, source
        finally:  # abandoned or failed: release what was fetched ahead
            for f in ahead:
                if not f.cancel() and f.exception() is None:
                    f.result().close()
