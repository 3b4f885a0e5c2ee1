"""The rows of a change scan (SPEC §Change scans, output columns).

Every mode of a change scan produces :class:`Chunk` objects, table columns
plus per-row action, update flag and hidden row id; :func:`format_chunk`
turns them into the output schema of :func:`change_schema` (the
``METADATA$`` columns or the changelog ``op`` column, and the audit
columns). :func:`filter_chunk` applies a scan's ``filter`` to rows that are
not halves of update pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.change_modes import Changelog
from ctfile.reader.expressions import evaluate_mask
from ctfile.reader.row_ids import row_id_strings

ACTION_COLUMN = "METADATA$ACTION"
ISUPDATE_COLUMN = "METADATA$ISUPDATE"
ROW_ID_OUT_COLUMN = "METADATA$ROW_ID"
COMMIT_VERSION_COLUMN = "METADATA$COMMIT_VERSION"
COMMIT_TIMESTAMP_COLUMN = "METADATA$COMMIT_TIMESTAMP"
OP_COLUMN = "op"
# ODF RFC-015 / Flink RowKind codes.
OP_APPEND, OP_RETRACT, OP_CORRECT_FROM, OP_CORRECT_TO = 0, 1, 2, 3


def change_schema(data_schema: pa.Schema, *, audit: bool, changelog: Changelog | None) -> pa.Schema:
    """The Arrow schema of a change scan's output: ``data_schema``, the
    action columns of ``changelog``, the row id, and with ``audit`` the commit
    version and timestamp."""
    fields = list(data_schema)
    if changelog is Changelog.OP:
        fields.append(pa.field(OP_COLUMN, pa.uint8(), nullable=False))
    else:
        fields.append(pa.field(ACTION_COLUMN, pa.string(), nullable=False))
        fields.append(pa.field(ISUPDATE_COLUMN, pa.bool_(), nullable=False))
    fields.append(pa.field(ROW_ID_OUT_COLUMN, pa.string(), nullable=False))
    if audit:
        fields.append(pa.field(COMMIT_VERSION_COLUMN, pa.int64(), nullable=False))
        fields.append(pa.field(COMMIT_TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False))
    return pa.schema(fields)


@dataclass
class Chunk:
    """Change rows before formatting."""

    data: pa.Table  # table columns only
    insert: np.ndarray  # bool per row
    update: np.ndarray  # bool per row
    row_id: np.ndarray  # int64 hidden row ids
    version: int | None = None  # audit: the commit
    timestamp_ms: int | None = None  # audit: its timestamp


def const(n: int, value: bool) -> np.ndarray:
    return np.full(n, value, dtype=bool)


def filter_mask(data: pa.Table, expr: pc.Expression | None) -> np.ndarray | None:
    """Rows of ``data`` that pass ``expr`` (None: no filter)."""
    if expr is None:
        return None
    return np.asarray(evaluate_mask(data, expr).to_numpy(zero_copy_only=False), dtype=bool)


def filter_chunk(
    data: pa.Table, ids: np.ndarray, insert: bool, expr: pc.Expression | None, *, version=None, timestamp_ms=None
) -> Chunk | None:
    """Lone INSERTs (``insert``) or DELETEs: the rows of ``data`` that pass
    ``expr``, or None when none does."""
    keep = filter_mask(data, expr)
    if keep is not None:
        data, ids = data.filter(pa.array(keep)), ids[keep]
    if data.num_rows == 0:
        return None
    n = data.num_rows
    return Chunk(data, const(n, insert), const(n, False), ids, version, timestamp_ms)


def format_chunk(
    c: Chunk, schema: pa.Schema, *, changelog: Changelog | None, audit: bool, seed: int, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """``c`` in the output ``schema`` (:func:`change_schema`), in batches of
    at most ``batch_rows``; ``seed`` is the table's row-id hash seed."""
    n = c.data.num_rows
    cols = list(c.data.columns)
    if changelog is Changelog.OP:
        op = np.where(c.insert, np.where(c.update, OP_CORRECT_TO, OP_APPEND), np.where(c.update, OP_CORRECT_FROM, OP_RETRACT))
        cols.append(pa.array(op.astype(np.uint8), pa.uint8()))
    else:
        cols.append(action_column(c.insert))
        cols.append(pa.array(c.update, pa.bool_()))
    cols.append(row_id_strings(c.row_id, seed))
    if audit:
        cols.append(pa.array(np.full(n, c.version, dtype=np.int64)))
        micros = pa.array(np.full(n, c.timestamp_ms * 1000, dtype=np.int64))
        cols.append(micros.cast(pa.timestamp("us", tz="UTC")))
    table = pa.Table.from_arrays(cols, schema=schema)
    # No combine_chunks(): to_batches() aligns the data columns' chunks
    # with the single-chunk metadata columns by zero-copy slicing, so a
    # partition read in several batches is not copied again.
    yield from table.to_batches(max_chunksize=batch_rows)


def action_column(insert: np.ndarray) -> pa.Array:
    """``METADATA$ACTION``: 'INSERT' where ``insert`` holds, else 'DELETE'.

    A chunk is usually all one action (a partition's inserts or deletes):
    then the string buffer is built directly, without a per-row kernel.
    """
    n = len(insert)
    if n and (insert.all() or not insert.any()):
        word = b"INSERT" if insert[0] else b"DELETE"
        offsets = np.arange(0, len(word) * (n + 1), len(word), dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(word * n)])
    return pc.if_else(pa.array(insert), "INSERT", "DELETE")
