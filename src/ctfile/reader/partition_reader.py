"""Reading one micro-partition (SPEC §Hidden columns, reader requirements).

Columns are matched to the table schema by field id (SPEC §Schema), so a
partition written before a column was added reads that column as nulls.
With ``hidden=True`` the two hidden columns are returned *materialized*:
a null ``_ct_row_id`` becomes ``firstRowId + position`` and a null
``_ct_row_version`` becomes ``defaultRowVersion``. A partition staged by the
current transaction has no lineage yet (``PENDING``); its nulls are kept so
they inherit from the partition that will be committed.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctfile.format.actions import Partition
from ctfile.format.errors import CorruptLogError
from ctfile.format.schema import (
    HIDDEN_COLUMNS,
    PARQUET_FIELD_ID_KEY,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_COLUMN,
    ROW_VERSION_FIELD_ID,
    Schema,
)
from ctfile.log.storage import Storage
from ctfile.log.transaction import PENDING


def _file_columns(pf: pq.ParquetFile, schema: Schema, columns: Sequence[str]) -> dict[str, str | None]:
    """Map each wanted table column to the file's column name (None: absent)."""
    arrow = pf.schema_arrow
    by_id: dict[int, str] = {}
    for f in arrow:
        if f.metadata and PARQUET_FIELD_ID_KEY in f.metadata:
            by_id[int(f.metadata[PARQUET_FIELD_ID_KEY])] = f.name
    out: dict[str, str | None] = {}
    for name in columns:
        fid = schema.field(name).id
        if by_id:
            out[name] = by_id.get(fid)
        else:  # files without field ids (foreign writers): match by name
            out[name] = name if name in arrow.names else None
    return out


def open_parquet(storage: Storage, p: Partition) -> pq.ParquetFile:
    try:
        f = storage.arrow_filesystem.open_input_file(storage.arrow_path(p.path))
        return pq.ParquetFile(f)
    except FileNotFoundError as e:
        raise CorruptLogError(
            f"partition {p.path} referenced by the log of {storage.uri} is missing: {e}"
        ) from e
    except (OSError, pa.ArrowInvalid) as e:
        if "not found" in str(e).lower() or "no such file" in str(e).lower():
            raise CorruptLogError(f"partition {p.path} of {storage.uri} is missing: {e}") from e
        raise CorruptLogError(f"partition {p.path} of {storage.uri} is unreadable: {e}") from e


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
        row_version = pc.fill_null(row_version, pa.scalar(p.default_row_version, pa.int64()))
    return row_id, row_version


def read_partition(
    storage: Storage,
    p: Partition,
    schema: Schema,
    *,
    columns: Sequence[str] | None = None,
    hidden: bool = False,
    batch_rows: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the partition's rows as batches with the table's column names.

    ``columns`` defaults to all table columns; ``hidden`` appends the
    materialized hidden columns. Row order is file order.
    """
    wanted = list(schema.names if columns is None else columns)
    target = schema.to_arrow(field_ids=False)
    out_fields = [target.field(c) for c in wanted]
    if hidden:
        out_fields += [pa.field(ROW_ID_COLUMN, pa.int64()), pa.field(ROW_VERSION_COLUMN, pa.int64())]
    out_schema = pa.schema(out_fields)
    pf = open_parquet(storage, p)
    if pf.metadata.num_rows != p.num_records:
        raise CorruptLogError(
            f"partition {p.path}: the log records {p.num_records} rows, the file holds "
            f"{pf.metadata.num_rows}"
        )
    mapping = _file_columns(pf, schema, wanted)
    file_names = pf.schema_arrow.names
    read_cols = [c for c in mapping.values() if c is not None]
    if hidden:
        read_cols += [h for h in HIDDEN_COLUMNS if h in file_names]
    offset = 0
    if p.num_records == 0:
        return
    iterator = pf.iter_batches(batch_size=batch_rows or 65536, columns=read_cols, use_threads=True)
    for batch in iterator:
        n = batch.num_rows
        arrays = []
        for name in wanted:
            src = mapping[name]
            if src is None:
                arrays.append(pa.nulls(n, target.field(name).type))
            else:
                col = batch.column(src)
                want = target.field(name).type
                arrays.append(col if col.type.equals(want) else col.cast(want))
        if hidden:
            rid = batch.column(ROW_ID_COLUMN) if ROW_ID_COLUMN in file_names else pa.nulls(n, pa.int64())
            rv = batch.column(ROW_VERSION_COLUMN) if ROW_VERSION_COLUMN in file_names else pa.nulls(n, pa.int64())
            rid, rv = materialize_hidden(p, rid, rv, offset)
            arrays += [rid, rv]
        offset += n
        yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def read_partition_table(storage: Storage, p: Partition, schema: Schema, **kw) -> pa.Table:
    columns = kw.get("columns")
    hidden = kw.get("hidden", False)
    batches = list(read_partition(storage, p, schema, **kw))
    if batches:
        return pa.Table.from_batches(batches)
    target = schema.to_arrow(field_ids=False)
    fields = [target.field(c) for c in (schema.names if columns is None else columns)]
    if hidden:
        fields += [pa.field(ROW_ID_COLUMN, pa.int64()), pa.field(ROW_VERSION_COLUMN, pa.int64())]
    return pa.schema(fields).empty_table()


def hidden_values_only_inherited(p: Partition) -> bool:
    """True when stats show both hidden columns are null in every row (a plain
    insert), so the hidden values follow from the log alone: no read needed."""
    s = p.stats
    return (
        s is not None
        and s.null_count.get(ROW_ID_FIELD_ID) == p.num_records
        and s.null_count.get(ROW_VERSION_FIELD_ID) == p.num_records
    )


def read_hidden(storage: Storage, p: Partition) -> tuple[np.ndarray, np.ndarray]:
    """Materialized ``(row_id, row_version)`` of every row, as int64 numpy arrays.

    Reads only the two hidden columns, and nothing at all for a plain-insert
    partition (SPEC §Hidden columns: absent or all-null means inherited).
    """
    n = p.num_records
    if hidden_values_only_inherited(p):
        return (
            np.arange(p.first_row_id, p.first_row_id + n, dtype=np.int64),
            np.full(n, p.default_row_version, dtype=np.int64),
        )
    pf = open_parquet(storage, p)
    names = pf.schema_arrow.names
    cols = [h for h in HIDDEN_COLUMNS if h in names]
    t = pf.read(columns=cols, use_threads=True) if cols else None
    rid = t.column(ROW_ID_COLUMN).combine_chunks() if t is not None and ROW_ID_COLUMN in cols else pa.nulls(n, pa.int64())
    rv = t.column(ROW_VERSION_COLUMN).combine_chunks() if t is not None and ROW_VERSION_COLUMN in cols else pa.nulls(n, pa.int64())
    if len(rid) != n:
        raise CorruptLogError(f"partition {p.path}: the log records {n} rows, the file holds {len(rid)}")
    rid, rv = materialize_hidden(p, rid, rv)
    return rid.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), rv.to_numpy(
        zero_copy_only=False
    ).astype(np.int64, copy=False)


def read_rows(
    storage: Storage, p: Partition, schema: Schema, positions: np.ndarray, *, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows at sorted ``positions`` (table columns only), reading only the
    row groups that hold them."""
    wanted = list(schema.names if columns is None else columns)
    target = schema.to_arrow(field_ids=False)
    out_schema = pa.schema([target.field(c) for c in wanted])
    if len(positions) == 0:
        return out_schema.empty_table()
    pf = open_parquet(storage, p)
    md = pf.metadata
    mapping = _file_columns(pf, schema, wanted)
    read_cols = [c for c in mapping.values() if c is not None]
    starts = np.cumsum([0] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
    groups = np.unique(np.searchsorted(starts, positions, side="right") - 1)
    if len(groups) == md.num_row_groups:
        t = pf.read(columns=read_cols, use_threads=True)
        local = positions
    else:
        t = pf.read_row_groups(groups.tolist(), columns=read_cols, use_threads=True)
        # Position of each selected row inside the concatenated row groups.
        base = np.cumsum([0] + [md.row_group(int(g)).num_rows for g in groups])
        gi = np.searchsorted(groups, np.searchsorted(starts, positions, side="right") - 1)
        local = base[gi] + (positions - starts[groups[gi]])
    t = t.take(pa.array(local, pa.int64()))
    arrays = []
    for name in wanted:
        src = mapping[name]
        want = target.field(name).type
        if src is None:
            arrays.append(pa.nulls(t.num_rows, want))
        else:
            col = t.column(src)
            arrays.append(col if col.type.equals(want) else col.cast(want))
    return pa.Table.from_arrays(arrays, schema=out_schema)
