"""Checks of change files (SPEC §Change capture): **missing_file**,
**size**, **checksum**, **unreadable**, **row_count**, **stats** as for data
files, and

* **change_rows** -- the rows follow the layout's rules (a known change
  type, a row id, each ``update_preimage`` followed by its
  ``update_postimage``), and their counts agree with the commit's
  ``operationMetrics``: the ``delete`` and ``update_preimage`` rows number
  the rows deleted and updated less those of the partitions removed with
  ``deletesAllRows``, the ``update_postimage`` rows the rows updated;
* **capture** -- a data-changing commit made on a version whose
  ``ctfile.changeCapture`` is ``before_after`` is captured.

The counts are exact for the commits of ctfile's single statements. A
transaction of several statements consolidates its change rows (a row
updated twice has one pair, a row changed back or inserted by the
transaction none), so for any other operation they are upper bounds.

:class:`ChangeCommit` is what log replay records per commit;
:func:`check_change_commit` runs on a worker thread and returns its findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ctfile.format.actions import ChangeFile, CommitInfo, RemovePartition
from ctfile.format.change_files import (
    DELETE_CODE,
    POSTIMAGE_CODE,
    PREIMAGE_CODE,
    change_file_schema,
    check_change_rows,
    is_captured,
    re_adds,
)
from ctfile.format.errors import CorruptDataFileError
from ctfile.format.properties import ChangeCapture, TableProperties
from ctfile.format.schema import PARQUET_FIELD_ID_KEY, Schema
from ctfile.log.storage import Storage
from ctfile.reader.expressions import is_distinct
from ctfile.reader.verify.file_checks import FileCheck, FileResult, read_file, short_error, stats_mismatches
from ctfile.reader.verify.report import VerifyProblem

#: Operations whose commit is one ctfile statement: its change rows match its
#: metrics exactly (OVERWRITE's truncate and insert touch disjoint rows).
SINGLE_STATEMENTS = frozenset({"DELETE", "UPDATE", "MERGE", "TRUNCATE", "OVERWRITE", "WRITE", "INSERT"})


@dataclass
class ChangeCommit:
    """The change capture of one commit, as replay saw it."""

    version: int
    schema: Schema
    files: list[ChangeFile]
    operation: str
    metrics: dict
    whole_rows: int  # rows of the partitions removed with deletesAllRows
    must_capture: bool  # the version read has ctfile.changeCapture = before_after
    captured: bool

    @classmethod
    def of(cls, version: int, actions: list, schema: Schema, read_properties: dict) -> "ChangeCommit | None":
        """The record of an entry, or None for one with nothing to check."""
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        files = [a for a in actions if isinstance(a, ChangeFile)]
        must = _must_capture(version, actions, info, read_properties)
        if not files and not must:
            return None
        operation, metrics = (info.operation, dict(info.operation_metrics or {})) if info else ("", {})
        return cls(version, schema, files, operation, metrics, _whole_rows(actions), must, is_captured(actions))


def _must_capture(version: int, actions: list, info: CommitInfo | None, read_properties: dict) -> bool:
    """Whether the commit had to be captured: a data-changing commit after
    version 0 on a version whose ``ctfile.changeCapture`` is
    ``before_after``. SPEC §Change capture: a RESTORE that re-adds a
    partition is the one data-changing commit that is never captured."""
    capture = TableProperties.from_mapping(read_properties).change_capture is ChangeCapture.BEFORE_AFTER
    data_change = info is not None and info.data_change
    return capture and data_change and version > 0 and not re_adds(actions)


def _whole_rows(actions: list) -> int:
    """The rows of the partitions the commit removed with ``deletesAllRows``."""
    return sum(a.partition.num_records for a in actions if isinstance(a, RemovePartition) and a.deletes_all_rows)


@dataclass
class ChangeResult:
    results: list[tuple[ChangeFile, FileResult]] = field(default_factory=list)
    problems: list[VerifyProblem] = field(default_factory=list)


def check_change_commit(storage: Storage, c: ChangeCommit, field_types: dict[int, str]) -> ChangeResult:
    """Every check of the module docstring for the change files of one commit."""
    out = ChangeResult()
    if c.must_capture and not c.captured:
        out.problems.append(VerifyProblem(
            "capture", "the commit changes rows of a table whose ctfile.changeCapture is before_after at the "
            "version it read, but it names no change file and not every remove has deletesAllRows "
            "(SPEC §Change capture, writer requirements)", c.version, None,
        ))
    counts = np.zeros(3, dtype=np.int64)
    complete = True
    for f in c.files:
        res, codes = _check_one(storage, c, f, field_types)
        out.results.append((f, res))
        if codes is None:
            complete = False
        else:
            counts += np.bincount(codes, minlength=3)[:3]
    if complete and c.files:
        out.problems.extend(_metric_problems(c, counts))
    return out


def _check_one(
    storage: Storage, c: ChangeCommit, f: ChangeFile, field_types: dict[int, str]
) -> tuple[FileResult, np.ndarray | None]:
    """The checks of change file ``f``, stopped at the first stage that
    fails: read, decoding, row count, layout; then its statistics and its
    rows. Its change codes, or None when its rows could not be checked."""
    check = FileCheck(c.version, f.path)
    data = read_file(storage, f, check, kind="change")
    table = None if data is None else _decode(data, f, check)
    if table is None or not _has_layout(table, c.schema, check):
        return check.result, None
    if f.stats is not None:
        by_id = {fid: name for fid, name in zip(_field_ids(table.schema), table.column_names) if fid is not None}
        for msg in stats_mismatches(f.stats, table, by_id, field_types):
            check.bad("stats", msg)
    return check.result, _change_codes(table, storage, c, f, check)


def _decode(data: bytes, f: ChangeFile, check: FileCheck) -> pa.Table | None:
    """The rows of the change file ``data``; None (reported) when it cannot
    be decoded or holds other than ``numRecords`` rows."""
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError ... on a bad file
        check.bad("unreadable", f"not a readable Parquet file: {short_error(e)}")
        return None
    check.result.rows = table.num_rows
    if table.num_rows != f.num_records:
        check.bad("row_count", f"the file holds {table.num_rows} rows, the log records numRecords {f.num_records}")
        return None
    return table


def _field_ids(schema: pa.Schema) -> list[int | None]:
    """The Parquet field id of each column of ``schema`` (None: none)."""
    return [int(fl.metadata[PARQUET_FIELD_ID_KEY]) if fl.metadata and PARQUET_FIELD_ID_KEY in fl.metadata else None
            for fl in schema]


def _has_layout(table: pa.Table, schema: Schema, check: FileCheck) -> bool:
    """Whether the file's columns are the change file layout of the
    commit's ``schema`` (SPEC §Change capture), by field id; reported if not."""
    got_ids = _field_ids(table.schema)
    want_ids = _field_ids(change_file_schema(schema))
    if got_ids != want_ids:
        check.bad("change_rows", f"the columns have field ids {got_ids}, the layout of the commit's schema {want_ids} "
                  "(SPEC §Change capture)")
    return got_ids == want_ids


def _change_codes(table: pa.Table, storage: Storage, c: ChangeCommit, f: ChangeFile, check: FileCheck) -> np.ndarray | None:
    """The change code of each row, the rows checked against the layout's
    rules (None, reported, if they break one) and for no-op update pairs."""
    try:
        codes = check_change_rows(table, uri=storage.uri, path=f.path, version=c.version)
    except CorruptDataFileError as e:
        check.bad("change_rows", str(e))
        return None
    equal = _equal_pairs(table, codes, c.schema.names)
    if len(equal):
        check.bad("change_rows", f"{len(equal)} update pair(s) with equal images, the first at row {int(equal[0])}: a "
                  "no-op update writes no change row, and readers output a commit's pairs as they stand (SPEC §Change capture)")
    return codes


def _equal_pairs(table: pa.Table, codes: np.ndarray, columns: list[str]) -> np.ndarray:
    """Rows of the update preimages whose postimage equals them in every
    column of ``columns`` (null equals null)."""
    pre = np.flatnonzero(codes == PREIMAGE_CODE)
    if not len(pre):
        return pre
    old, new = table.take(pa.array(pre)), table.take(pa.array(pre + 1))
    differs = np.zeros(len(pre), dtype=bool)
    for name in columns:
        differs |= is_distinct(old.column(name), new.column(name))
    return pre[~differs]


def _metric_problems(c: ChangeCommit, counts: np.ndarray) -> list[VerifyProblem]:
    deleted, updated = int(c.metrics.get("numDeletedRows", 0)), int(c.metrics.get("numUpdatedRows", 0))
    olds = int(counts[DELETE_CODE] + counts[PREIMAGE_CODE])
    news = int(counts[POSTIMAGE_CODE])
    expect_old = deleted + updated - c.whole_rows
    exact = c.operation in SINGLE_STATEMENTS
    found = []
    if (olds != expect_old) if exact else (olds > expect_old):
        found.append(f"its change files hold {olds} old images (delete and update_preimage rows), but "
                     f"operationMetrics record {deleted} deleted and {updated} updated rows, {c.whole_rows} of them "
                     f"in partitions removed with deletesAllRows: {'' if exact else 'at most '}{expect_old} expected")
    if (news != updated) if exact else (news > updated):
        found.append(f"its change files hold {news} update_postimage rows, but operationMetrics record "
                     f"{updated} updated rows")
    return [VerifyProblem("change_rows", m + " (SPEC §Change capture)", c.version, None) for m in found]
