"""The fast path of decoding (SPEC §Log entries): well-formed ``add``
lines decoded without the checked decoder's per-field calls (their
statistics by :func:`ctfile.format.partition_stats.fast_stats`).

A checkpoint holds one ``add`` line per live partition (10,000 lines of
~1 KB for a table of 10,000 partitions), so decoding them is most of the
cost of opening a big table. The fast path accepts only well-formed lines,
which it turns into the very objects the checked path
(:func:`ctfile.format.codec.action_from_json`) builds; on anything unusual
it returns None and the line takes the checked path, which then produces
its usual result or error. The writer uses it too, to check the lines it
is about to write as readers will (:func:`ctfile.format.codec.writable_action_json`).
"""

from __future__ import annotations

import re
from typing import Any

from ctfile.format.actions import AddPartition, Partition
from ctfile.format.errors import CorruptLogError
from ctfile.format.partition_stats import fast_stats
from ctfile.format.paths import validate_relative_path
from ctfile.format.schema import LONG_MAX, LONG_MIN

# One segment under data/ with no leading dot, no ':', '\\' or NUL: what writers produce.
_PLAIN_DATA_PATH = re.compile(r"data/[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def fast_add(body: dict) -> AddPartition | None:
    """``action_from_json`` of a well-formed ``add`` body; None to take the checked path."""
    dc = body.get("dataChange")
    if type(dc) is not bool or body.get("restoredRowVersion") is not None:
        return None  # a re-add (SPEC §Restore) is rare: the checked path
    p = fast_partition(body)
    return None if p is None else AddPartition(p, dc)


def fast_partition(body: dict) -> Partition | None:
    """The partition of a well-formed ``add`` or ``remove`` body; None to take the checked path."""
    g = body.get
    path, size, n = g("path"), g("sizeBytes"), g("numRecords")
    first, drv, mtime = g("firstRowId"), g("defaultRowVersion"), g("modificationTime")
    checksum, st = g("checksum"), g("stats")
    if not _plain_fields(path, size, n, first, drv, mtime, checksum):
        return None
    if _PLAIN_DATA_PATH.fullmatch(path) is None and not _is_safe_path(path):
        return None
    stats = None
    if st is not None:
        stats = fast_stats(st, n)
        if stats is None:
            return None
    return Partition(path, size, n, first, drv, mtime, checksum, stats)


def _plain_fields(path: Any, size: Any, n: Any, first: Any, drv: Any, mtime: Any, checksum: Any) -> bool:
    """Whether the fields of a partition are as writers write them: a
    string path, a string checksum or none, and ints (not bools) that are
    longs (SPEC §Conventions): the size and the default row version >= 0,
    the row ids ``first .. first + n`` (n >= 0) within a long, the time a long.
    One expression: this runs for every ``add`` a reader decodes."""
    return (
        type(path) is str and type(size) is type(n) is type(first) is type(drv) is type(mtime) is int
        and (checksum is None or type(checksum) is str)
        and 0 <= size <= LONG_MAX and 0 <= first <= first + n <= LONG_MAX
        and 0 <= drv <= LONG_MAX and LONG_MIN <= mtime <= LONG_MAX
    )


def _is_safe_path(path: str) -> bool:
    """Whether ``path``, not one of the plain paths writers produce, passes
    :func:`~ctfile.format.paths.validate_relative_path`."""
    try:
        validate_relative_path(path, where="")
    except CorruptLogError:
        return False
    return True
