"""Checks of one data file against its log descriptor: **missing_file**,
**size**, **checksum**, **unreadable**, **row_count**, **stats** (the
recorded statistics against the data) and **row_lineage** (the materialized
hidden columns against ``firstRowId``/``numRecords``/``defaultRowVersion``).

:func:`check_file` runs on a worker thread and only returns its findings
(:class:`FileResult`); the caller adds them to the report in a stable order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ctfile.format.actions import ChangeFile, Partition, PartitionStats
from ctfile.format.schema import (
    PARQUET_FIELD_ID_KEY,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_COLUMN,
    ROW_VERSION_FIELD_ID,
    Schema,
)
from ctfile.format.stats import decode_bound, has_bounds
from ctfile.log.storage import Storage
from ctfile.reader.integrity import damage
from ctfile.reader.partition_reader import materialize_hidden
from ctfile.reader.verify.report import VerifyProblem


@dataclass
class FileResult:
    problems: list[VerifyProblem] = field(default_factory=list)
    warnings: list[VerifyProblem] = field(default_factory=list)
    row_ids: np.ndarray | None = None
    size: int = 0
    rows: int = 0


def types_by_field_id(schemas: Iterable[Schema]) -> dict[int, str]:
    """Field id -> type name of every top-level primitive column any version
    had, in the latest of ``schemas`` (in version order) that has it: a
    column is only ever widened (SPEC §Schema evolution), and the wide type
    holds every bound written before."""
    out: dict[int, str] = {}
    for s in schemas:
        for f in s.fields:
            if isinstance(f.type, str):
                out[f.id] = f.type
    out[ROW_ID_FIELD_ID] = "long"
    out[ROW_VERSION_FIELD_ID] = "long"
    return out


class FileCheck:
    """The checks of one file (a data or change file): its findings go to
    ``result``, each at the commit ``version`` and the file's ``path``."""

    def __init__(self, version: int, path: str):
        self.version = version
        self.path = path
        self.result = FileResult()

    def bad(self, check: str, message: str) -> None:
        self.result.problems.append(VerifyProblem(check, message, self.version, self.path))

    def warn(self, check: str, message: str) -> None:
        self.result.warnings.append(VerifyProblem(check, message, self.version, self.path))


def check_file(storage: Storage, p: Partition, field_types: dict[int, str], *, removed: bool) -> FileResult:
    """The checks of the file of ``p`` (see the module), stopped at the
    first stage that fails: read, Parquet footer, row count, decoding; then
    the statistics and the row lineage of the decoded rows. A file gone
    with its partition removed before the latest version is a warning:
    only older versions need it."""
    check = FileCheck(p.default_row_version, p.path)
    gone = _GONE_AFTER_REMOVE if removed else None
    data = read_file(storage, p, check, kind="data", gone_warning=gone)
    table = None if data is None else _decode(data, p, check)
    if table is None:
        return check.result
    by_id = _parquet_field_names(table)
    if p.stats is not None:
        for msg in stats_mismatches(p.stats, table, by_id, field_types):
            check.bad("stats", msg)
    _check_row_lineage(p, table, by_id, check)
    return check.result


_GONE_AFTER_REMOVE = (
    "the file of a partition removed before the latest version is gone "
    "(vacuumed?): older versions that hold it can no longer be read"
)


def read_file(
    storage: Storage, item: Partition | ChangeFile, check: FileCheck, *, kind: str, gone_warning: str | None = None
) -> bytes | None:
    """The bytes of the ``kind`` (data, change) file of ``item``, checked as
    every read checks them; None (reported) when they cannot be read. A
    missing file is a problem, or the warning ``gone_warning`` if given."""
    try:
        data = storage.read_bytes(item.path)
    except FileNotFoundError:
        if gone_warning is not None:
            check.warn("missing_file", gone_warning)
        else:
            check.bad("missing_file", f"the {kind} file is missing")
        return None
    except OSError as e:
        check.bad("unreadable", f"the {kind} file cannot be read: {e}")
        return None
    check.result.size = len(data)
    for found, message in damage(item, data):  # the check every read makes
        check.bad(found.value, message)
    return data


def _decode(data: bytes, p: Partition, check: FileCheck) -> pa.Table | None:
    """The rows of the Parquet file ``data``; None (reported) when its
    footer or data cannot be read or it holds other than ``numRecords`` rows."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        n = pf.metadata.num_rows
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError ... on a bad footer
        check.bad("unreadable", f"not a readable Parquet file: {short_error(e)}")
        return None
    check.result.rows = n
    if n != p.num_records:
        check.bad("row_count", f"the file holds {n} rows, the log records numRecords {p.num_records}")
        return None
    try:
        return pf.read(use_threads=False)
    except Exception as e:
        check.bad("unreadable", f"the Parquet data cannot be decoded: {short_error(e)}")
        return None


def _parquet_field_names(table: pa.Table) -> dict[int, str]:
    """Field id -> column name of ``table``'s columns; for a file written
    without field ids, the hidden columns found by name."""
    by_id = {
        int(f.metadata[PARQUET_FIELD_ID_KEY]): f.name
        for f in table.schema if f.metadata and PARQUET_FIELD_ID_KEY in f.metadata
    }
    if by_id:
        return by_id
    hidden = ((ROW_ID_FIELD_ID, ROW_ID_COLUMN), (ROW_VERSION_FIELD_ID, ROW_VERSION_COLUMN))
    return {fid: name for fid, name in hidden if name in table.column_names}


def _check_row_lineage(p: Partition, table: pa.Table, by_id: dict[int, str], check: FileCheck) -> None:
    """SPEC §Row lineage: the materialized hidden values of ``p``'s rows
    lie within what ``firstRowId``, ``numRecords`` and ``defaultRowVersion``
    allow; the row ids are kept for the uniqueness check."""
    n = table.num_rows
    rid = _hidden_column(table, by_id.get(ROW_ID_FIELD_ID))
    rv = _hidden_column(table, by_id.get(ROW_VERSION_FIELD_ID))
    try:
        rid, rv = rid.cast(pa.int64()), rv.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        check.bad("row_lineage", f"hidden columns are not int64: {short_error(e)}")
        return
    rid, rv = materialize_hidden(p, rid, rv)
    ids = rid.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    versions = rv.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    check.result.row_ids = ids
    if not n:
        return
    limit = p.first_row_id + p.num_records
    if ids.min() < 0 or ids.max() >= limit:
        check.bad("row_lineage", f"row ids range over [{ids.min()}, {ids.max()}], outside [0, {limit}) "
                  f"(firstRowId + numRecords bounds every id a partition can hold)")
    if versions.max() > p.default_row_version or versions.min() < 0:
        check.bad("row_lineage", f"row versions range over [{versions.min()}, {versions.max()}], "
                  f"beyond the partition's defaultRowVersion {p.default_row_version}")


def _hidden_column(table: pa.Table, name: str | None) -> pa.Array:
    """The stored hidden column ``name``, or all nulls (every value inherited) when not stored."""
    return table.column(name).combine_chunks() if name else pa.nulls(table.num_rows, pa.int64())


def short_error(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


_HIDDEN_LABELS = {ROW_ID_FIELD_ID: ROW_ID_COLUMN, ROW_VERSION_FIELD_ID: ROW_VERSION_COLUMN}
_FLOATING = ("float", "double")


def stats_mismatches(stats: PartitionStats, table: pa.Table, by_id: dict[int, str], field_types: dict[int, str]) -> list[str]:
    """Messages for each statistic the data contradicts. Ids not in any
    schema are ignored (SPEC §Statistics)."""
    ids = set(stats.min_values) | set(stats.max_values) | set(stats.null_count) | set(stats.nan_count)
    out: list[str] = []
    for fid in sorted(ids):
        typ = field_types.get(fid)
        if typ is not None:
            out.extend(_field_mismatches(stats, fid, typ, table, by_id.get(fid)))
    return out


def _label(fid: int, name: str | None) -> str:
    """How a message names the column of ``fid`` (stored as ``name``)."""
    label = _HIDDEN_LABELS.get(fid, f"field {fid}")
    if name is not None and not label.startswith("_ct_"):
        return f"{label} ({name})"
    return label


def _field_mismatches(stats: PartitionStats, fid: int, typ: str, table: pa.Table, name: str | None) -> list[str]:
    """The statistics of column ``fid`` (of type ``typ``, stored as
    ``name``, or not stored: all nulls) the data contradicts."""
    label = _label(fid, name)
    col = table.column(name) if name is not None else pa.chunked_array([pa.nulls(table.num_rows)])
    out = []
    nulls = col.null_count
    if fid in stats.null_count and stats.null_count[fid] != nulls:
        out.append(f"{label}: nullCount is {stats.null_count[fid]}, the data holds {nulls} nulls")
    values = col
    if typ in _FLOATING and name is not None:
        values = _without_nans(col, stats.nan_count.get(fid), label, out)
    if (fid in stats.min_values) != (fid in stats.max_values):
        out.append(f"{label}: has a {'minimum' if fid in stats.min_values else 'maximum'} but not the other bound")
    elif _bounds_apply(stats, fid, typ, name, values):
        out.extend(_bound_mismatches(stats, fid, typ, values, label))
    return out


def _without_nans(col: pa.ChunkedArray, recorded: int | None, label: str, out: list[str]) -> pa.ChunkedArray:
    """``col`` without its NaNs (bounds ignore them), their count checked
    against ``recorded`` (the ``nanCount``, if any) into ``out``."""
    isnan = pc.fill_null(pc.is_nan(col), False)
    nans = int(pc.sum(isnan).as_py() or 0)
    if recorded is not None and recorded != nans:
        out.append(f"{label}: nanCount is {recorded}, the data holds {nans} NaNs")
    return col.filter(pc.invert(isnan))


def _bounds_apply(stats: PartitionStats, fid: int, typ: str, name: str | None, values: pa.ChunkedArray) -> bool:
    """Whether the recorded bounds of ``fid`` can be checked: recorded, of a
    type with bounds, stored, and some value to bound."""
    recorded = fid in stats.min_values and has_bounds(typ) and name is not None
    return recorded and values.null_count != len(values)


def _bound_mismatches(stats: PartitionStats, fid: int, typ: str, values: pa.ChunkedArray, label: str) -> list[str]:
    """The recorded ``minValues``/``maxValues`` of ``fid`` against ``values``."""
    try:
        lo = decode_bound(typ, stats.min_values[fid])
        hi = decode_bound(typ, stats.max_values[fid])
    except (ValueError, TypeError, ArithmeticError) as e:
        return [f"{label}: bound does not decode as {typ}: {e}"]
    mm = pc.min_max(values)
    amin, amax = mm["min"].as_py(), mm["max"].as_py()
    out = []
    try:
        if amin is not None and lo > amin:
            out.append(f"{label}: minValues is {stats.min_values[fid]!r}, the data holds {_fmt(amin)}")
        if amax is not None and hi < amax:
            out.append(f"{label}: maxValues is {stats.max_values[fid]!r}, the data holds {_fmt(amax)}")
    except TypeError as e:
        out.append(f"{label}: bounds cannot be compared with the data ({e})")
    return out


def _fmt(x: Any) -> str:
    if hasattr(x, "isoformat"):
        return x.isoformat()
    return repr(x)
