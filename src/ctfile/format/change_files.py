"""The layout of change files (SPEC §Change capture). Pure: no I/O.

A change file holds, for one commit, the old image of every row the commit
deleted or updated out of a partition it rewrote, and the new image of every
row it updated: the table columns, the materialized ``_ct_row_id``, the
``_ct_row_version`` of the image (null in a new image: the committing
version) and ``_ct_change_type``. An ``update_preimage`` row is immediately
followed by its ``update_postimage``.

Examples
--------
>>> import pyarrow as pa
>>> from ctfile.format.schema import schema_from_arrow
>>> schema = schema_from_arrow(pa.schema([("id", pa.int64())]))
>>> change_file_schema(schema).names
['id', '_ct_row_id', '_ct_row_version', '_ct_change_type']
>>> t = pa.table({"id": [1, 1, 2], "_ct_row_id": [0, 0, 1], "_ct_row_version": [1, None, 1],
...               "_ct_change_type": ["update_preimage", "update_postimage", "delete"]})
>>> check_change_rows(t, uri="/t", path="c.parquet", version=3).tolist()
[1, 2, 0]
>>> check_change_rows(t.slice(1), uri="/t", path="c.parquet", version=3)
Traceback (most recent call last):
...
ctfile.format.errors.CorruptDataFileError: change file c.parquet of /t (version 3): row 0 is an update_postimage that does not follow its update_preimage (SPEC §Change capture)
"""

from __future__ import annotations

import enum

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctfile.format.actions import AddPartition, ChangeFile, Partition, RemovePartition  # noqa: F401 (Partition: the doctests)
from ctfile.format.errors import CorruptDataFileError
from ctfile.format.schema import (
    PARQUET_FIELD_ID_KEY,
    ROW_ID_COLUMN,
    ROW_ID_FIELD_ID,
    ROW_VERSION_COLUMN,
    ROW_VERSION_FIELD_ID,
    Schema,
)

CHANGE_TYPE_COLUMN = "_ct_change_type"
CHANGE_TYPE_FIELD_ID = 2147483538


class ChangeType(str, enum.Enum):
    """The ``_ct_change_type`` of a change-file row (Delta's names)."""

    DELETE = "delete"
    UPDATE_PREIMAGE = "update_preimage"
    UPDATE_POSTIMAGE = "update_postimage"


#: The dictionary of ``_ct_change_type``, in the order of the codes
#: :func:`change_type_codes` returns.
CHANGE_TYPES = tuple(t.value for t in ChangeType)


def change_file_schema(schema: Schema, *, field_ids: bool = True) -> pa.Schema:
    """The Arrow schema of a change file of a table with ``schema``."""

    def meta(fid: int):
        return {PARQUET_FIELD_ID_KEY: str(fid).encode()} if field_ids else None

    return pa.schema(
        list(schema.to_arrow(field_ids=field_ids))
        + [
            pa.field(ROW_ID_COLUMN, pa.int64(), nullable=False, metadata=meta(ROW_ID_FIELD_ID)),
            pa.field(ROW_VERSION_COLUMN, pa.int64(), nullable=True, metadata=meta(ROW_VERSION_FIELD_ID)),
            pa.field(CHANGE_TYPE_COLUMN, pa.string(), nullable=False, metadata=meta(CHANGE_TYPE_FIELD_ID)),
        ]
    )


def change_type_codes(column: pa.ChunkedArray | pa.Array, *, uri: str, path: str, version: int) -> np.ndarray:
    """``_ct_change_type`` as int8 codes (indices into :data:`CHANGE_TYPES`).

    Raises
    ------
    CorruptDataFileError
        A null or a value outside the three change types.
    """
    codes = pc.index_in(column, value_set=pa.array(CHANGE_TYPES))
    if codes.null_count:
        bad = pc.filter(column, pc.is_null(codes))[0].as_py()
        raise _corrupt(
            uri, path, version, f"{CHANGE_TYPE_COLUMN} must be one of {', '.join(CHANGE_TYPES)}, found {bad!r}"
        )
    return np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int8)


def check_change_rows(table: pa.Table, *, uri: str, path: str, version: int) -> np.ndarray:
    """Check a change file's rows against SPEC §Change capture and return
    their change-type codes: a known change type, a non-null row id, and each
    ``update_preimage`` immediately followed by an ``update_postimage`` of the
    same row id.

    Raises
    ------
    CorruptDataFileError
        Naming the table, the file, the version and the first row that breaks a rule.
    """
    codes = change_type_codes(table.column(CHANGE_TYPE_COLUMN), uri=uri, path=path, version=version)
    rid = table.column(ROW_ID_COLUMN)
    if rid.null_count:
        raise _corrupt(
            uri, path, version, f"{ROW_ID_COLUMN} must not be null (SPEC §Change capture)"
        )
    pre, post = _code(ChangeType.UPDATE_PREIMAGE), _code(ChangeType.UPDATE_POSTIMAGE)
    is_pre, is_post = codes == pre, codes == post
    # A post must sit right after a pre, and a pre right before a post.
    after_pre = np.zeros(len(codes), dtype=bool)
    after_pre[1:] = is_pre[:-1]
    bad = np.flatnonzero(is_post != after_pre)
    if len(bad):
        k = int(bad[0])
        what = "an update_postimage that does not follow its update_preimage" if is_post[k] else (
            "not the update_postimage its preceding update_preimage needs"
        )
        raise _corrupt(
            uri, path, version, f"row {k} is {what} (SPEC §Change capture)"
        )
    if is_pre[-1:].any():
        raise _corrupt(
            uri, path, version, "its last row is an update_preimage without its update_postimage "
            "(SPEC §Change capture)"
        )
    ids = np.asarray(rid.to_numpy(), dtype=np.int64)
    pre_idx = np.flatnonzero(is_pre)
    if len(pre_idx) and not np.array_equal(ids[pre_idx], ids[pre_idx + 1]):
        k = int(pre_idx[np.flatnonzero(ids[pre_idx] != ids[pre_idx + 1])[0]])
        raise _corrupt(
            uri, path, version, f"the update_postimage at row {k + 1} has row id {ids[k + 1]}, "
            f"its update_preimage {ids[k]} (SPEC §Change capture)"
        )
    return codes


def has_removes(actions) -> bool:
    """Whether a commit with ``actions`` removes a partition as a data change:
    only such a commit has anything to capture (SPEC §Change capture). One
    that removes nothing, such as an INSERT, is captured without a change
    file: its change rows are the rows of the partitions it added, which a
    change scan reads anyway.

    >>> has_removes([]), has_removes([ChangeFile("_ct_changes/c.parquet", 1, 1, 0)])
    (False, False)
    """
    return any(isinstance(a, RemovePartition) and a.data_change for a in actions)


def re_adds(actions) -> bool:
    """Whether a commit with ``actions`` re-adds a partition: a RESTORE
    (SPEC §Restore), which is never captured."""
    return any(isinstance(a, AddPartition) and a.partition.is_restored for a in actions)


def is_captured(actions) -> bool:
    """Whether a data-changing commit with ``actions`` is *captured* (SPEC
    §Change capture): it names a change file, or every data-changing remove
    it holds has ``deletesAllRows`` (a commit that removes nothing, such as
    an INSERT, included); never when it re-adds a partition (a RESTORE,
    SPEC §Restore).

    Examples
    --------
    >>> is_captured([]), is_captured([ChangeFile("_ct_changes/c.parquet", 1, 1, 0)])
    (True, True)
    >>> is_captured([AddPartition(Partition("data/a.parquet", 1, 1, 0, 5, 0, restored_row_version=2))])
    False
    """
    if re_adds(actions):
        return False
    if any(isinstance(a, ChangeFile) for a in actions):
        return True
    return all(a.deletes_all_rows for a in actions if isinstance(a, RemovePartition) and a.data_change)


def _corrupt(uri: str, path: str, version: int, detail: str) -> CorruptDataFileError:
    return CorruptDataFileError(f"change file {path} of {uri} (version {version}): {detail}", uri=uri, path=path, version=version)


def _code(t: ChangeType) -> int:
    return CHANGE_TYPES.index(t.value)


DELETE_CODE = _code(ChangeType.DELETE)
PREIMAGE_CODE = _code(ChangeType.UPDATE_PREIMAGE)
POSTIMAGE_CODE = _code(ChangeType.UPDATE_POSTIMAGE)
