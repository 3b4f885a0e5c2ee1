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

from ctfile.format.actions import Partition, PartitionStats
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


def check_file(storage: Storage, p: Partition, field_types: dict[int, str], *, removed: bool) -> FileResult:
    res = FileResult()
    v = p.default_row_version

    def bad(check: str, message: str) -> None:
        res.problems.append(VerifyProblem(check, message, v, p.path))

    try:
        data = storage.read_bytes(p.path)
    except FileNotFoundError:
        if removed:
            res.warnings.append(VerifyProblem(
                "missing_file", "the file of a partition removed before the latest version is gone "
                "(vacuumed?): older versions that hold it can no longer be read", v, p.path,
            ))
        else:
            bad("missing_file", "the data file is missing")
        return res
    except OSError as e:
        bad("unreadable", f"the data file cannot be read: {e}")
        return res
    res.size = len(data)
    for kind, message in damage(p, data):  # the check every read makes
        bad(kind.value, message)
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        n = pf.metadata.num_rows
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError ... on a bad footer
        bad("unreadable", f"not a readable Parquet file: {short_error(e)}")
        return res
    res.rows = n
    if n != p.num_records:
        bad("row_count", f"the file holds {n} rows, the log records numRecords {p.num_records}")
        return res
    try:
        table = pf.read(use_threads=False)
    except Exception as e:
        bad("unreadable", f"the Parquet data cannot be decoded: {short_error(e)}")
        return res
    by_id: dict[int, str] = {}
    for f in table.schema:
        if f.metadata and PARQUET_FIELD_ID_KEY in f.metadata:
            by_id[int(f.metadata[PARQUET_FIELD_ID_KEY])] = f.name
    if not by_id:  # a file without field ids: hidden columns by name only
        by_id = {fid: name for fid, name in ((ROW_ID_FIELD_ID, ROW_ID_COLUMN), (ROW_VERSION_FIELD_ID, ROW_VERSION_COLUMN)) if name in table.column_names}
    if p.stats is not None:
        for msg in stats_mismatches(p.stats, table, by_id, field_types):
            bad("stats", msg)
    # Row lineage: materialized hidden values.
    rid_name, rv_name = by_id.get(ROW_ID_FIELD_ID), by_id.get(ROW_VERSION_FIELD_ID)
    rid = table.column(rid_name).combine_chunks() if rid_name else pa.nulls(n, pa.int64())
    rv = table.column(rv_name).combine_chunks() if rv_name else pa.nulls(n, pa.int64())
    try:
        rid = rid.cast(pa.int64())
        rv = rv.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        bad("row_lineage", f"hidden columns are not int64: {short_error(e)}")
        return res
    rid, rv = materialize_hidden(p, rid, rv)
    ids = rid.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    versions = rv.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    res.row_ids = ids
    if n:
        limit = p.first_row_id + p.num_records
        if ids.min() < 0 or ids.max() >= limit:
            bad("row_lineage", f"row ids range over [{ids.min()}, {ids.max()}], outside [0, {limit}) "
                f"(firstRowId + numRecords bounds every id a partition can hold)")
        if versions.max() > p.default_row_version or versions.min() < 0:
            bad("row_lineage", f"row versions range over [{versions.min()}, {versions.max()}], "
                f"beyond the partition's defaultRowVersion {p.default_row_version}")
    return res


def short_error(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def stats_mismatches(stats: PartitionStats, table: pa.Table, by_id: dict[int, str], field_types: dict[int, str]) -> list[str]:
    """Messages for each statistic the data contradicts."""
    out: list[str] = []
    n = table.num_rows
    ids = set(stats.min_values) | set(stats.max_values) | set(stats.null_count) | set(stats.nan_count)
    for fid in sorted(ids):
        typ = field_types.get(fid)
        if typ is None:
            continue  # SPEC §Statistics: ignore ids not in the schema
        name = by_id.get(fid)
        label = {ROW_ID_FIELD_ID: ROW_ID_COLUMN, ROW_VERSION_FIELD_ID: ROW_VERSION_COLUMN}.get(fid, f"field {fid}")
        if name is not None:
            label = f"{label} ({name})" if not label.startswith("_ct_") else label
        col = table.column(name) if name is not None else pa.chunked_array([pa.nulls(n)])
        nulls = col.null_count
        if fid in stats.null_count and stats.null_count[fid] != nulls:
            out.append(f"{label}: nullCount is {stats.null_count[fid]}, the data holds {nulls} nulls")
        values = col
        if typ in ("float", "double") and name is not None:
            isnan = pc.fill_null(pc.is_nan(col), False)
            nans = int(pc.sum(isnan).as_py() or 0)
            if fid in stats.nan_count and stats.nan_count[fid] != nans:
                out.append(f"{label}: nanCount is {stats.nan_count[fid]}, the data holds {nans} NaNs")
            values = col.filter(pc.invert(isnan))
        if (fid in stats.min_values) != (fid in stats.max_values):
            out.append(f"{label}: has a {'minimum' if fid in stats.min_values else 'maximum'} but not the other bound")
            continue
        if fid not in stats.min_values or not has_bounds(typ) or name is None:
            continue
        if values.null_count == len(values):
            continue  # no value to bound
        try:
            lo = decode_bound(typ, stats.min_values[fid])
            hi = decode_bound(typ, stats.max_values[fid])
        except (ValueError, TypeError, ArithmeticError) as e:
            out.append(f"{label}: bound does not decode as {typ}: {e}")
            continue
        mm = pc.min_max(values)
        amin, amax = mm["min"].as_py(), mm["max"].as_py()
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
