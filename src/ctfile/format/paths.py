"""Names of the files in a table directory (SPEC §Table layout).

Pure string functions: no I/O.
"""

from __future__ import annotations

import re

from ctfile.format.errors import CorruptLogError

LOG_DIR = "_ct_log"
DATA_DIR = "data"
CHANGES_DIR = "_ct_changes"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
VERSION_DIGITS = 20

_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{version:0{VERSION_DIGITS}d}.json"


def checkpoint_path(version: int) -> str:
    return f"{LOG_DIR}/{version:0{VERSION_DIGITS}d}.checkpoint.parquet"


def parse_commit_name(name: str) -> int | None:
    """The version of a commit file name (basename), or None."""
    m = _COMMIT_RE.match(name)
    return int(m.group(1)) if m else None


def parse_checkpoint_name(name: str) -> int | None:
    m = _CHECKPOINT_RE.match(name)
    return int(m.group(1)) if m else None


def data_file_path(txn_id: str, seq: int) -> str:
    """SPEC §Micro-partition files: ``data/part-<txn id>-<seq>.parquet``.

    The transaction id groups the files one writer produced, so an operator
    can tell which (possibly failed) transaction left an unreferenced file.
    """
    return f"{DATA_DIR}/part-{txn_id}-{seq:05d}.parquet"


def change_file_path(txn_id: str, seq: int) -> str:
    """SPEC §Table layout: ``_ct_changes/change-<txn id>-<seq>.parquet``, a
    change file (SPEC §Change capture)."""
    return f"{CHANGES_DIR}/change-{txn_id}-{seq:05d}.parquet"


def is_change_file_path(path: str) -> bool:
    """Whether ``path`` (relative to the root) is under ``_ct_changes/``."""
    return path.startswith(CHANGES_DIR + "/")


def validate_relative_path(path: object, *, where: str) -> str:
    """Reject a manifest path that could escape the table root.

    A valid path is relative, uses ``/`` separators, has no empty, ``.`` or
    ``..`` segments, no URI scheme and no backslash.
    """
    if not isinstance(path, str) or not path:
        raise CorruptLogError(f"{where}: path must be a non-empty string, found {path!r}")
    bad = (
        path.startswith("/")
        or "\\" in path
        or _SCHEME_RE.match(path) is not None
        or any(seg in ("", ".", "..") for seg in path.split("/"))
        or "\x00" in path
    )
    if bad:
        raise CorruptLogError(
            f"{where}: path {path!r} escapes the table root; expected a relative path "
            f"such as 'data/part-<id>-00000.parquet' with no '..', no leading '/', no scheme"
        )
    return path
