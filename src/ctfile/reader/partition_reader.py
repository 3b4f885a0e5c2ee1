"""Reading one micro-partition (SPEC §Hidden columns, reader requirements).

Columns are matched to the table schema by field id (SPEC §Schema), so a
partition written before a column was added reads that column as nulls.
With ``hidden=True`` the two hidden columns are returned *materialized*:
a null ``_ct_row_id`` becomes ``firstRowId + position`` and a null
``_ct_row_version`` becomes ``defaultRowVersion`` (``restoredRowVersion`` in a
partition a RESTORE re-added, SPEC §Restore). A partition staged by the
current transaction has no lineage yet (``PENDING``); its nulls are kept so
they inherit from the partition that will be committed.

Every function takes the read's :class:`~ctfile.reader.integrity.DataFiles`
(or a :class:`~ctfile.log.storage.Storage`, read through a new one): files are
verified against their ``add`` action the first time the read opens them, and
every failure is a typed error (:mod:`ctfile.reader.integrity`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctfile.format.actions import Partition
from ctfile.format.errors import CorruptDataFileError, CorruptLogError
from ctfile.format.schema import (
    HIDDEN_COLUMNS,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_COLUMN,
    ROW_VERSION_FIELD_ID,
    Schema,
)
from ctfile.log.storage import Storage
from ctfile.log.transaction import PENDING
from ctfile.reader.integrity import DataFiles
from ctfile.reader.projection import Projection


def file_columns(pf: pq.ParquetFile, schema: Schema, columns: Sequence[str]) -> dict[str, str | None]:
    """Map each wanted table column to the file's column name (None: absent),
    by field id (SPEC §Schema evolution, projection)."""
    return Projection(pf.schema_arrow, schema, columns).sources


def materialize_hidden(
    p: Partition, row_id: pa.Array, row_version: pa.Array, offset: int = 0
) -> tuple[pa.Array, pa.Array]:
    """Fill inherited (null) hidden values; ``offset`` is the first row's position."""
    if p.first_row_id == PENDING:
        return row_id, row_version
    if row_id.null_count:
        n = len(row_id)
        pos = pa.array(np.arange(p.first_row_id + offset, p.first_row_id + offset + n, dtype=np.int64))
        row_id = pos if row_id.null_count == n else pc.coalesce(row_id, pos)
    if row_version.null_count:
        row_version = pc.fill_null(row_version, pa.scalar(p.inherited_row_version, pa.int64()))
    return row_id, row_version


def read_partition(
    files: DataFiles | Storage,
    p: Partition,
    schema: Schema,
    *,
    columns: Sequence[str] | None = None,
    hidden: bool = False,
    batch_rows: int | None = None,
    use_threads: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield the partition's rows as batches with the table's column names.

    ``columns`` defaults to all table columns; ``hidden`` appends the
    materialized hidden columns. Row order is file order. ``use_threads``
    lets pyarrow decode columns on its own threads.
    """
    wanted = list(schema.names if columns is None else columns)
    out_schema = _partition_schema(schema, wanted, hidden=hidden)
    files = DataFiles.of(files)
    with files.open(p) as src:
        pf = files.parquet(src, p)
        if p.num_records == 0:
            return
        projection = Projection(pf.schema_arrow, schema, wanted)
        file_names = pf.schema_arrow.names
        read_cols = list(projection.read_columns)
        if hidden:
            read_cols += _hidden_in(file_names)
        offset = 0
        iterator = pf.iter_batches(batch_size=batch_rows or 65536, columns=read_cols, use_threads=use_threads)
        for batch in iterator:
            n = batch.num_rows
            arrays = [projection.column(name, batch, n) for name in wanted]
            if hidden:
                arrays += _hidden_arrays(p, batch, file_names, offset)
            offset += n
            yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def _partition_schema(schema: Schema, columns: Sequence[str], *, hidden: bool) -> pa.Schema:
    """The schema :func:`read_partition` yields: ``columns`` of the table,
    then the hidden columns with ``hidden``."""
    target = schema.to_arrow(field_ids=False)
    fields = [target.field(c) for c in columns]
    if hidden:
        fields += [pa.field(ROW_ID_COLUMN, pa.int64()), pa.field(ROW_VERSION_COLUMN, pa.int64())]
    return pa.schema(fields)


def _hidden_in(names: Sequence[str]) -> list[str]:
    """The hidden columns a file with columns ``names`` stores."""
    return [h for h in HIDDEN_COLUMNS if h in names]


def _hidden_arrays(p: Partition, batch: pa.RecordBatch, file_names: Sequence[str], offset: int) -> list[pa.Array]:
    """The materialized hidden columns of ``batch`` of ``p``'s file (whose
    first row is at position ``offset``); a column the file lacks is all
    inherited."""
    n = batch.num_rows
    rid = batch.column(ROW_ID_COLUMN) if ROW_ID_COLUMN in file_names else pa.nulls(n, pa.int64())
    rv = batch.column(ROW_VERSION_COLUMN) if ROW_VERSION_COLUMN in file_names else pa.nulls(n, pa.int64())
    return list(materialize_hidden(p, rid, rv, offset))


def read_partition_table(files: DataFiles | Storage, p: Partition, schema: Schema, **kw) -> pa.Table:
    """:func:`read_partition` into one Table."""
    columns = kw.get("columns")
    batches = list(read_partition(files, p, schema, **kw))
    if batches:
        return pa.Table.from_batches(batches)
    wanted = schema.names if columns is None else columns
    return _partition_schema(schema, wanted, hidden=kw.get("hidden", False)).empty_table()


def hidden_values_only_inherited(p: Partition) -> bool:
    """True when stats show both hidden columns are null in every row (a plain
    insert), so the hidden values follow from the log alone: no read needed."""
    s = p.stats
    return (
        s is not None
        and s.null_count.get(ROW_ID_FIELD_ID) == p.num_records
        and s.null_count.get(ROW_VERSION_FIELD_ID) == p.num_records
    )


def read_hidden(files: DataFiles | Storage, p: Partition) -> tuple[np.ndarray, np.ndarray]:
    """Materialized ``(row_id, row_version)`` of every row, as int64 numpy arrays.

    Reads only the two hidden columns, and nothing at all for a plain-insert
    partition (SPEC §Hidden columns: absent or all-null means inherited).
    """
    n = p.num_records
    if hidden_values_only_inherited(p):
        return (
            np.arange(p.first_row_id, p.first_row_id + n, dtype=np.int64),
            np.full(n, p.inherited_row_version, dtype=np.int64),
        )
    files = DataFiles.of(files)
    with files.open(p) as src:
        pf = files.parquet(src, p)
        names = pf.schema_arrow.names
        cols = _hidden_in(names)
        t = pf.read(columns=cols, use_threads=True) if cols else None
    if t is not None and t.num_rows != n:
        raise files.error(CorruptDataFileError, p, f"decodes to {t.num_rows} rows, its add action records numRecords {n}")
    rid = _materialized(t, ROW_ID_COLUMN, n, p.first_row_id, positional=True)
    rv = _materialized(t, ROW_VERSION_COLUMN, n, p.inherited_row_version, positional=False)
    return rid, rv


def _materialized(t: pa.Table | None, name: str, n: int, inherit: int, *, positional: bool) -> np.ndarray:
    """One hidden column as int64 numpy, nulls replaced by the inherited value
    (``inherit + position`` when ``positional``). Converted chunk by chunk
    straight into one array: no concatenation of Arrow chunks, no kernel."""
    col = t.column(name) if t is not None and name in t.column_names else None
    if col is None or col.null_count == n:
        return np.arange(inherit, inherit + n, dtype=np.int64) if positional else np.full(n, inherit, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    k = 0
    for chunk in col.chunks:
        _fill_chunk(out, k, chunk, inherit, positional=positional)
        k += len(chunk)
    return out


def _fill_chunk(out: np.ndarray, k: int, chunk: pa.Array, inherit: int, *, positional: bool) -> None:
    """Write ``chunk`` (the rows from position ``k``) into ``out``, nulls
    replaced as :func:`_materialized` says."""
    m = len(chunk)
    if chunk.null_count == 0:
        out[k:k + m] = chunk.to_numpy()
    elif chunk.null_count == m:
        out[k:k + m] = np.arange(inherit + k, inherit + k + m) if positional else inherit
    else:
        out[k:k + m] = pc.fill_null(chunk, 0).to_numpy()
        nulls = np.flatnonzero(pc.is_null(chunk).to_numpy(zero_copy_only=False))
        out[k + nulls] = inherit + k + nulls if positional else inherit


_ROWS_BATCH = 65536
# A string column chunk is decoded as a dictionary (and only the rows kept are
# turned into strings) when its dictionary is small in two senses:
# - its dictionary page is at most this big. The writer falls back to plain
#   pages only past its dictionary size limit (1 MiB by default), so a small
#   page means the chunk is dictionary-encoded throughout; after a fallback,
#   dictionary reads are slower than plain ones;
# - its values cost fewer stored bytes per row than a plain page's 4-byte
#   length prefix alone, so the dictionary is small relative to the rows and
#   the indices-then-take path does less work than decoding strings.
_SMALL_DICTIONARY_PAGE = 64 << 10
_DICT_BYTES_PER_ROW = 4


def small_dictionary_columns(pf: pq.ParquetFile, groups: Sequence[int], columns: Sequence[str]) -> list[str]:
    """The ``columns`` worth reading as dictionaries in row groups ``groups``:
    top-level string or binary leaves with a small dictionary (see above) in
    every one of those row groups."""
    md = pf.metadata
    leaf = {md.schema.column(i).path: i for i in range(md.num_columns)}
    out = []
    for name in columns:
        i = leaf.get(name)
        if _top_level_strings(pf, name, i) and all(_small_dictionary(md.row_group(int(g)), i) for g in groups):
            out.append(name)
    return out


def _top_level_strings(pf: pq.ParquetFile, name: str, leaf: int | None) -> bool:
    """Whether file column ``name`` (leaf column ``leaf``, None when it is
    not a leaf) is a top-level string or binary column."""
    if leaf is None or pf.metadata.schema.column(leaf).physical_type != "BYTE_ARRAY":
        return False
    arrow = pf.schema_arrow
    if arrow.get_field_index(name) < 0:
        return False
    t = arrow.field(name).type
    return pa.types.is_string(t) or pa.types.is_binary(t)


def _small_dictionary(rg: pq.RowGroupMetaData, leaf: int) -> bool:
    """Whether leaf column ``leaf``'s chunk in row group ``rg`` has a small
    dictionary (see above)."""
    c = rg.column(leaf)
    d = c.dictionary_page_offset
    return (
        c.has_dictionary_page and d is not None
        and 0 < c.data_page_offset - d <= _SMALL_DICTIONARY_PAGE
        and c.total_uncompressed_size < _DICT_BYTES_PER_ROW * max(1, rg.num_rows)
    )


def _row_groups_of(md: pq.FileMetaData, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row groups holding ``positions`` (ascending), and each position's
    index within the concatenation of those row groups."""
    if md.num_row_groups == 1:
        return np.zeros(1, np.int64), positions
    starts = np.cumsum([0] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
    group_of = np.searchsorted(starts, positions, side="right") - 1
    groups = np.unique(group_of)
    base = np.cumsum([0] + [md.row_group(int(g)).num_rows for g in groups])
    return groups, base[np.searchsorted(groups, group_of)] + (positions - starts[group_of])


def iter_rows(
    files: DataFiles | Storage,
    p: Partition,
    schema: Schema,
    positions: np.ndarray,
    *,
    columns: Sequence[str] | None = None,
    batch_rows: int = _ROWS_BATCH,
    use_threads: bool = True,
) -> Iterator[tuple[int, pa.Table]]:
    """Stream the rows at sorted, distinct ``positions`` (table columns only).

    Yields ``(k, table)``: ``table`` holds the rows at ``positions[k:k +
    table.num_rows]``, in order; together the tables cover every position
    once. Only the row groups holding a position are read, each file batch of
    ``batch_rows`` rows is decoded once and only its selected rows are kept,
    and decoding stops after the last position. String columns with a small
    dictionary are decoded as dictionary indices and only the selected rows
    are turned into strings.
    """
    wanted = list(schema.names if columns is None else columns)
    out_schema = _partition_schema(schema, wanted, hidden=False)
    positions = _integers(positions)
    if len(positions) == 0:
        return
    files = DataFiles.of(files)
    with files.open(p) as src:
        pf = files.parquet(src, p)
        md = pf.metadata
        if _outside(positions, md.num_rows):
            raise CorruptLogError(f"partition {p.path}: positions beyond the file's {md.num_rows} rows")
        projection = Projection(pf.schema_arrow, schema, wanted)
        read_cols = projection.read_columns
        if not read_cols:  # every wanted column is absent from the file: all nulls
            yield 0, _projected(projection, out_schema, len(positions), None)
            return
        groups, local = _row_groups_of(md, positions)
        dictionary = small_dictionary_columns(pf, groups, read_cols)
        if dictionary:  # the footer is parsed once: the reopened file reuses it
            pf = files.parquet(src, p, metadata=md, read_dictionary=dictionary)
        batches = pf.iter_batches(
            batch_size=batch_rows, row_groups=groups.tolist(), columns=read_cols, use_threads=use_threads
        )
        done = 0
        for k, sel in _selected(batches, local):
            yield k, _projected(projection, out_schema, sel.num_rows, sel)
            done = k + sel.num_rows
        if done != len(positions):
            raise files.error(CorruptDataFileError, p, f"decodes to fewer rows than its footer's {md.num_rows}")


def _outside(positions: np.ndarray, rows: int) -> bool:
    """Whether sorted ``positions`` reach outside a file of ``rows`` rows."""
    return positions[0] < 0 or positions[-1] >= rows


def _projected(projection: Projection, out_schema: pa.Schema, n: int, batch: pa.RecordBatch | None) -> pa.Table:
    """The columns of ``out_schema`` of the ``n`` rows of ``batch`` (None:
    nothing was read), projected."""
    return pa.Table.from_arrays([projection.column(name, batch, n) for name in out_schema.names], schema=out_schema)


def _integers(positions: np.ndarray) -> np.ndarray:
    """``positions`` as a numpy array of integers (int64 unless they are already integers)."""
    positions = np.asarray(positions)
    return positions if positions.dtype.kind in "iu" else positions.astype(np.int64)


def _selected(batches: Iterator[pa.RecordBatch], local: np.ndarray) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows at ``local`` (ascending indices into the concatenation of
    ``batches``), batch by batch: ``(k, rows)`` where ``rows`` are those at
    ``local[k:k + rows.num_rows]``. Stops pulling batches after the last."""
    k = offset = 0
    for batch in batches:
        n = batch.num_rows
        hi = int(np.searchsorted(local, offset + n))
        if hi > k:
            # All rows of the batch selected: the batch itself.
            yield k, (batch if hi - k == n else batch.take(pa.array(local[k:hi] - offset)))
            k = hi
        offset += n
        if k == len(local):
            break  # past the last selected row: do not decode the rest


def read_rows(
    files: DataFiles | Storage,
    p: Partition,
    schema: Schema,
    positions: np.ndarray,
    *,
    columns: Sequence[str] | None = None,
    use_threads: bool = True,
) -> pa.Table:
    """The rows at sorted ``positions`` (table columns only), reading only the
    row groups that hold them (see :func:`iter_rows`)."""
    wanted = list(schema.names if columns is None else columns)
    out_schema = _partition_schema(schema, wanted, hidden=False)
    tables = [t for _, t in iter_rows(files, p, schema, positions, columns=wanted, use_threads=use_threads)]
    return pa.concat_tables(tables) if tables else out_schema.empty_table()


def _leaf_schema_key(col) -> tuple:
    return (
        col.physical_type, str(col.logical_type), str(col.converted_type), col.length,
        col.precision, col.scale, col.max_definition_level, col.max_repetition_level,
    )


def same_columns(files: DataFiles | Storage, a: Partition, b: Partition, schema: Schema) -> set[str]:
    """Table columns whose stored values are identical, row by row, in the
    files of ``a`` and ``b``.

    A column qualifies when both files store it as one primitive leaf of the
    same Parquet and Arrow type, the files have the same row groups, and every
    column chunk is byte-identical (same codec, same compressed bytes): then
    every row holds the same value in both files. Columns absent from both
    files (all null) qualify too. Copy-on-write rewrites a partition with the
    same writer, so the columns a statement did not set come out identical;
    a change scan then decodes them from one file only. Anything else
    (nested columns, a different layout) is simply not reported.
    """
    files = DataFiles.of(files)
    with files.open(a) as ra:
        fa = files.parquet(ra, a)
        with files.open(b) as rb:
            fb = files.parquet(rb, b)
            return _same_columns(
                fa, fb, files.chunk_reader(ra, a), files.chunk_reader(rb, b), ra.size(), rb.size(), schema
            )


def _same_columns(fa: pq.ParquetFile, fb: pq.ParquetFile, read_a, read_b, size_a: int, size_b: int, schema: Schema) -> set[str]:
    """:func:`same_columns` over two open files; ``read_a(offset, n)`` reads
    bytes of the first file (``size_a`` bytes long), ``read_b`` of the second."""
    if not _same_row_groups(fa.metadata, fb.metadata):
        return set()
    names = list(schema.names)
    a = _Side.of(fa, read_a, size_a, schema, names)
    b = _Side.of(fb, read_b, size_b, schema, names)
    return {name for name in names if _same_column(a, b, name)}


def _same_row_groups(ma: pq.FileMetaData, mb: pq.FileMetaData) -> bool:
    """Whether two files have as many row groups, of the same row counts."""
    return ma.num_row_groups == mb.num_row_groups and all(
        ma.row_group(g).num_rows == mb.row_group(g).num_rows for g in range(ma.num_row_groups)
    )


@dataclass(frozen=True)
class _Side:
    """One file of a :func:`same_columns` comparison: its footer, the file
    column of each table column, the index of each leaf column by path, and
    how to read its bytes (``read(offset, n)``; ``size`` bytes long)."""

    md: pq.FileMetaData
    arrow: pa.Schema
    columns: dict[str, str | None]
    leaf: dict[str, int]
    read: Callable[[int, int], Any]
    size: int

    @classmethod
    def of(cls, pf: pq.ParquetFile, read: Callable[[int, int], Any], size: int, schema: Schema, names: list[str]) -> "_Side":
        md = pf.metadata
        leaf = {md.schema.column(i).path: i for i in range(md.num_columns)}
        return cls(md, pf.schema_arrow, file_columns(pf, schema, names), leaf, read, size)

    def holds(self, offset: int, n: int) -> bool:
        """Whether bytes ``offset .. offset + n`` lie inside the file, after its magic number."""
        return 0 < offset and offset + n <= self.size


def _same_column(a: _Side, b: _Side, name: str) -> bool:
    """Whether table column ``name`` stores the same values in both files
    (see :func:`same_columns`)."""
    ca, cb = a.columns[name], b.columns[name]
    if ca is None and cb is None:
        return True  # absent from both: all nulls
    if ca is None or cb is None or ca not in a.leaf or cb not in b.leaf:
        return False
    ia, ib = a.leaf[ca], b.leaf[cb]
    if not _same_leaf_type(a, b, ca, cb, ia, ib):
        return False
    return all(_same_chunk(a, b, a.md.row_group(g).column(ia), b.md.row_group(g).column(ib)) for g in range(a.md.num_row_groups))


def _same_leaf_type(a: _Side, b: _Side, ca: str, cb: str, ia: int, ib: int) -> bool:
    """Whether file columns ``ca`` (leaf ``ia``) and ``cb`` (leaf ``ib``) have the same Arrow and Parquet types."""
    return a.arrow.field(ca).type.equals(b.arrow.field(cb).type) and (
        _leaf_schema_key(a.md.schema.column(ia)) == _leaf_schema_key(b.md.schema.column(ib))
    )


def _same_chunk(a: _Side, b: _Side, xa, xb) -> bool:
    """Whether column chunk ``xa`` of ``a`` and ``xb`` of ``b`` are byte-identical."""
    if not _same_chunk_layout(xa, xb):
        return False
    n = xa.total_compressed_size
    oa, ob = _chunk_start(xa), _chunk_start(xb)
    return a.holds(oa, n) and b.holds(ob, n) and a.read(oa, n).equals(b.read(ob, n))


def _same_chunk_layout(xa, xb) -> bool:
    """Whether two column chunks' metadata agree on codec, size, value count and encodings."""
    return (
        xa.compression == xb.compression and xa.total_compressed_size == xb.total_compressed_size
        and xa.num_values == xb.num_values and xa.encodings == xb.encodings
    )


def _chunk_start(x) -> int:
    """The offset of a column chunk's first page (its dictionary page, if any)."""
    return x.dictionary_page_offset if x.has_dictionary_page else x.data_page_offset
