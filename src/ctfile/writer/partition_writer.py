"""Writing micro-partitions (SPEC §Micro-partition files).

A stream of batches is cut into files of ``target_rows`` rows. Each file is
encoded into memory, checksummed (xxh3-128 of its bytes), stored under a
unique name and described by a :class:`StagedFile` whose statistics come from
the Parquet footer the encoder just produced, so no second pass over the data
is needed (float columns add a NaN count, which Parquet lacks).

Encoding runs on a small thread pool (pyarrow releases the GIL) while the
caller's thread gathers the next partition, so a bulk insert uses the cores a
plain ``pq.write_table`` leaves idle; at most ``workers + 1`` partitions are in
memory at once, whatever the input size.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from ctfile.format.actions import PartitionStats
from ctfile.format.properties import TableProperties
from ctfile.format.schema import (
    PARQUET_FIELD_ID_KEY,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_FIELD_ID,
    Schema,
    hidden_arrow_fields,
)
from ctfile.format.stats import encode_bound
from ctfile.log.storage import Storage
from ctfile.log.transaction import StagedFile, now_ms
from ctfile.writer.clustering import SORT_WINDOW_BYTES, ClusterOrder

_DEFAULTS = TableProperties()


class PartitionWriter:
    """Writes conformed batches as micro-partitions of one transaction."""

    def __init__(
        self,
        storage: Storage,
        schema: Schema,
        next_path: Callable[[], str],
        *,
        target_rows: int = _DEFAULTS.partition_rows,
        row_group_rows: int = _DEFAULTS.row_group_rows,
        compression: str = _DEFAULTS.compression,
        workers: int | None = None,
    ):
        self.storage = storage
        self.schema = schema
        self.next_path = next_path
        self.target_rows = target_rows
        self.row_group_rows = row_group_rows
        self.compression = compression
        self.workers = workers or min(4, os.cpu_count() or 1)
        self._file_schema_plain = schema.to_arrow(field_ids=True)
        self._file_schema_hidden = schema.to_arrow(include_hidden=True, field_ids=True)
        self._stat_columns = stat_columns(schema)
        self._stat_columns.update(
            {af.name: (int(af.metadata[PARQUET_FIELD_ID_KEY]), "long") for af in hidden_arrow_fields()}
        )
        self._hidden_options: dict | None = None

    @classmethod
    def for_properties(
        cls,
        storage: Storage,
        schema: Schema,
        next_path: Callable[[], str],
        props: TableProperties,
        *,
        workers: int | None = None,
        target_rows: int | None = None,
    ) -> "PartitionWriter":
        """A writer that follows the table's properties (file and row group
        size, codec); ``target_rows`` overrides the file size (compaction)."""
        target = target_rows or props.partition_rows
        return cls(
            storage, schema, next_path,
            target_rows=target,
            row_group_rows=min(target, props.row_group_rows),
            compression=props.compression,
            workers=workers,
        )

    def _encoding_options(self, file_schema: pa.Schema) -> dict:
        """Parquet writer options: those of :func:`row_id_encoding` for a file
        with hidden columns, the defaults otherwise."""
        if file_schema is not self._file_schema_hidden:
            return {}
        if self._hidden_options is None:
            self._hidden_options = row_id_encoding(file_schema)
        return self._hidden_options

    def write(
        self, batches: Iterable[pa.RecordBatch], *, with_hidden: bool, cluster: ClusterOrder | None = None,
        window_bytes: int | None = SORT_WINDOW_BYTES,
    ) -> list[StagedFile]:
        """Write all batches; returns the staged files in input order.

        ``with_hidden``: batches carry the two hidden columns last (copy-on-write
        output). Without it the file has no hidden columns, which readers
        treat as all null (SPEC §Hidden columns): a plain insert pays nothing.
        With ``cluster`` the rows are sorted into its order in windows of
        ``window_bytes`` (None: all at once) and cut at key boundaries
        (:meth:`~ctfile.writer.clustering.ClusterOrder.chunks`).
        """
        if cluster is None:
            chunks = _chunks(batches, self.target_rows)
        else:
            chunks = cluster.chunks(batches, self.target_rows, window_bytes=window_bytes)
        return self.write_chunks(chunks, with_hidden=with_hidden)

    def write_chunks(self, chunks: Iterable[list[pa.RecordBatch]], *, with_hidden: bool) -> list[StagedFile]:
        """Write each chunk (a list of batches) as one partition; returns the
        staged files in input order."""
        file_schema = self._file_schema_hidden if with_hidden else self._file_schema_plain
        chunks = iter(chunks)
        first = next(chunks, None)
        if first is None:
            return []
        second = next(chunks, None)
        if second is None:
            # One file (the common small insert): write it on this thread.
            # Starting a pool costs a thread start per statement, which on a
            # loaded machine was ~4 ms of a 13 ms commit.
            return [self._write_one(first, file_schema, self.next_path())]
        return self._write_pooled(itertools.chain((first, second), chunks), file_schema)

    def _write_pooled(self, chunks: Iterable[list[pa.RecordBatch]], file_schema: pa.Schema) -> list[StagedFile]:
        """Write each chunk as a file on the pool, in order; on any failure
        no file of the statement is left behind (best effort)."""
        futures: list[Future] = []
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            try:
                for chunk in chunks:
                    path = self.next_path()
                    futures.append(pool.submit(self._write_one, chunk, file_schema, path))
                    del chunk
                    _wait_for_a_free_worker(futures, self.workers)
                return [f.result() for f in futures]
            except BaseException:
                self._delete_written(futures)
                raise

    def _delete_written(self, futures: list[Future]) -> None:
        """Delete the files the writes of ``futures`` made, after cancelling
        those not started and waiting for those running (a file finished
        after the delete would be left behind)."""
        for f in futures:
            f.cancel()
        wait(futures)
        self.storage.delete([f.result().path for f in futures if _succeeded(f)])

    def _write_one(self, batches: list[pa.RecordBatch], file_schema: pa.Schema, path: str) -> StagedFile:
        if batches:
            # Same columns; attach the schema with field ids without a copy.
            table = pa.Table.from_arrays(pa.Table.from_batches(batches).columns, schema=file_schema)
        else:
            table = file_schema.empty_table()
        staged = write_parquet_file(
            self.storage, path, table, compression=self.compression, row_group_rows=self.row_group_rows,
            options=self._encoding_options(file_schema), stat_columns=self._stat_columns,
        )
        nulls = staged.stats.null_count  # built for this file just now
        if ROW_ID_FIELD_ID not in nulls:
            # No hidden columns in the file: every hidden value is null
            # (inherited), which change scans use to find fresh rows.
            nulls[ROW_ID_FIELD_ID] = nulls[ROW_VERSION_FIELD_ID] = table.num_rows
        return staged


def stat_columns(schema: Schema) -> dict[str, tuple[int, str]]:
    """Parquet column path -> (field id, ctfile type) of the top-level
    primitive columns of ``schema``: those that get statistics (SPEC §Statistics)."""
    return {f.name: (f.id, f.type) for f in schema.fields if isinstance(f.type, str)}


def row_id_encoding(file_schema: pa.Schema) -> dict:
    """Parquet writer options of a file with a ``_ct_row_id`` column.

    ``_ct_row_id`` of copy-on-write output (and of change files) is an
    ascending run of ids with few gaps: DELTA_BINARY_PACKED stores it in a
    few bits per row where the default (dictionary, falling back to PLAIN +
    zstd) takes ~3 bytes per row, ~10% of a lineitem file. Every other column
    keeps dictionary encoding; ``use_dictionary`` takes Parquet leaf paths,
    read from the footer of an empty file with this schema.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(file_schema.empty_table(), sink)
    md = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    leaves = [md.schema.column(i).path for i in range(md.num_columns)]
    return {
        "use_dictionary": [c for c in leaves if c != ROW_ID_COLUMN],
        "column_encoding": {ROW_ID_COLUMN: "DELTA_BINARY_PACKED"},
    }


def write_parquet_file(
    storage: Storage,
    path: str,
    table: pa.Table,
    *,
    compression: str,
    row_group_rows: int,
    options: dict,
    stat_columns: dict[str, tuple[int, str]],
) -> StagedFile:
    """Encode ``table`` (whose schema carries the field ids) as one Parquet
    file in memory, checksum it (XXH3-128 of the bytes), store it at ``path``
    and describe it, with statistics of the ``stat_columns`` read from the
    footer just written (SPEC §Micro-partition files, §Statistics)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, compression=compression, write_statistics=True, **options) as w:
        w.write_table(table, row_group_size=row_group_rows)
    buf = sink.getvalue()
    data = memoryview(buf)
    checksum = xxhash.xxh3_128_hexdigest(data)
    storage.put(path, data)
    stats = _footer_stats(buf, table, stat_columns)
    return StagedFile(path, buf.size, table.num_rows, checksum, stats, now_ms())


def _wait_for_a_free_worker(futures: list[Future], workers: int) -> None:
    """Bound memory: once every worker is busy and one more file is queued,
    wait for the oldest before reading more input."""
    pending = [f for f in futures if not f.done()]
    if len(pending) > workers:
        pending[0].result()


def _succeeded(f: Future) -> bool:
    """Whether the write of ``f`` finished and returned its file."""
    return f.done() and not f.cancelled() and f.exception() is None


def _footer_stats(buf: pa.Buffer, table: pa.Table, columns: dict[str, tuple[int, str]]) -> PartitionStats:
    """The partition's statistics (SPEC §Statistics) from the footer of the
    Parquet file in ``buf``, for the top-level leaf columns of ``columns``
    (path -> (field id, stats type)); NaN counts from ``table`` itself."""
    md = pq.ParquetFile(pa.BufferReader(buf)).metadata
    mins: dict[int, object] = {}
    maxs: dict[int, object] = {}
    nulls: dict[int, int] = {}
    nans: dict[int, int] = {}
    for ci in range(md.num_columns):
        path = md.schema.column(ci).path
        meta = columns.get(path)
        if meta is None:
            continue  # nested leaf: no stats (SPEC §Statistics)
        fid, typ = meta
        lo, hi, null_count = _column_footer_stats(md, ci)
        if null_count is not None:
            nulls[fid] = null_count
        enc_lo = encode_bound(typ, lo, is_max=False)
        enc_hi = encode_bound(typ, hi, is_max=True)
        if enc_lo is not None and enc_hi is not None:
            mins[fid], maxs[fid] = enc_lo, enc_hi
        if typ in ("float", "double"):
            nans[fid] = _nan_count(table.column(path))
    return PartitionStats(md.num_rows, mins, maxs, nulls, nans)


def _column_footer_stats(md: pq.FileMetaData, ci: int) -> tuple[Any, Any, int | None]:
    """Column ``ci``'s minimum, maximum (None: unknown) and null count (None:
    some row group does not record it) over every row group of ``md``."""
    lo = hi = None
    null_count: int | None = 0
    for rg in range(md.num_row_groups):
        s = md.row_group(rg).column(ci).statistics
        null_count = None if null_count is None or not _counts_nulls(s) else null_count + s.null_count
        lo, hi = _widened(lo, hi, s)
    return lo, hi, null_count


def _widened(lo: Any, hi: Any, s: pq.Statistics | None) -> tuple[Any, Any]:
    """The bounds ``lo``..``hi`` (None: none yet) widened to a row group's
    minimum and maximum, when its statistics ``s`` record them."""
    if s is None or not s.has_min_max:
        return lo, hi
    return (s.min if lo is None or s.min < lo else lo), (s.max if hi is None or s.max > hi else hi)


def _counts_nulls(s: pq.Statistics | None) -> bool:
    """Whether a row group's statistics ``s`` record its null count."""
    return s is not None and s.has_null_count


def _nan_count(col: pa.ChunkedArray) -> int:
    """The NaN values of a float column."""
    return int(pc.sum(pc.is_nan(col)).as_py() or 0) if len(col) else 0


def _chunks(batches: Iterable[pa.RecordBatch], target_rows: int) -> Iterable[list[pa.RecordBatch]]:
    """Group batches into lists of exactly ``target_rows`` rows (the last may be short)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for b in batches:
        while b.num_rows:
            take = min(b.num_rows, target_rows - count)
            pending.append(b.slice(0, take) if take < b.num_rows else b)
            count += take
            b = b.slice(take)
            if count == target_rows:
                yield pending
                pending, count = [], 0
    if pending:
        yield pending

