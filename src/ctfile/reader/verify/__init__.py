"""Checking a table's integrity offline: ``fsck`` for ctfile (``ctfile verify``).

:func:`verify_table` reads the whole log and the data files a snapshot needs,
and reports every inconsistency it finds instead of stopping at the first:

* **log** -- every entry parses (UTF-8, final newline, one JSON object with one
  action per line, required fields) and follows the entry rules of SPEC §Log
  entries (one ``commitInfo``, protocol and metadata in version 0,
  ``defaultRowVersion`` equal to the version, ``firstRowId`` assigned from the
  row-id counter, no path twice in an entry);
* **dense** -- no version is missing between the oldest retained entry and the
  latest, and the history has a starting point (version 0 or a checkpoint);
* **path** -- no ``add``/``remove`` path escapes the table root (such a path is
  never opened);
* **replay** -- no ``add`` of a live path, no ``remove`` of a path that is not
  live, strictly increasing commit timestamps;
* **checkpoint** -- every readable checkpoint equals the state replay of the
  log yields for its version;
* **missing_file**, **size**, **checksum**, **unreadable**, **row_count** --
  every data file of the checked snapshots exists, has the recorded
  ``sizeBytes`` and XXH3-128 ``checksum``, is valid Parquet and holds
  ``numRecords`` rows;
* **stats** -- the recorded statistics are true of the data: exact null and
  NaN counts, bounds that really bound the values;
* **row_lineage** -- materialized row ids lie below ``firstRowId +
  numRecords`` and row versions at or below ``defaultRowVersion``;
* **duplicate_row_id** -- row ids are unique within every checked snapshot;
* **change_rows**, **capture** -- the change files every retained entry
  names exist, have the recorded size, checksum, row count and statistics,
  hold rows that follow SPEC §Change capture in the numbers the commit's
  metrics give, and a commit made while capture was on is captured
  (:mod:`~ctfile.reader.verify.change_checks`);
* **symlink** -- no symbolic link under ``_ct_log/``, ``data/`` or ``_ct_changes/`` (nor on the
  way to a checked data file) leads out of the table root (SPEC §Table
  layout, confinement); such a link is never followed, and the files behind
  it are not checked.

The files under ``data/`` and ``_ct_changes/`` that the retained history does not reference
(:func:`ctfile.log.vacuum.retained_files`, the set vacuum keeps) are listed in
``report.unreferenced_files``: they are not problems.

By default the data checks cover the latest snapshot; ``all_versions=True``
checks every version that can be reconstructed (files of partitions removed
before the latest version that no longer exist are then reported as warnings,
since vacuum deletes them on purpose). The log checks always cover every
retained entry. Nothing is written.

Modules: :mod:`~ctfile.reader.verify.report` (the report model),
:mod:`~ctfile.reader.verify.entries` (parsing one entry: **log**, **path**),
:mod:`~ctfile.reader.verify.log_checks` (**dense**, **replay**,
**checkpoint**), :mod:`~ctfile.reader.verify.file_checks` (one data file:
**missing_file** ... **row_lineage**) and :mod:`~ctfile.reader.verify.verifier`
(:func:`verify_table`, **duplicate_row_id**).

Examples
--------
>>> import ctfile, pyarrow as pa, tempfile
>>> t = ctfile.create_table(tempfile.mkdtemp(), pa.schema([("id", pa.int64())]))
>>> _ = t.insert(pa.table({"id": [1, 2, 3]}))
>>> report = ctfile.verify_table(t.uri)
>>> report.healthy, report.latest_version, report.files_checked, report.problems
(True, 1, 1, [])
"""

from ctfile.reader.verify.report import CHECKS, ProgressFn, VerifyProblem, VerifyReport
from ctfile.reader.verify.verifier import verify_table

__all__ = ["CHECKS", "ProgressFn", "VerifyProblem", "VerifyReport", "verify_table"]
