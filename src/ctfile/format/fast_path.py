"""The fast path of decoding (SPEC §Log entries): well-formed ``add``
lines and statistics objects decoded without the checked decoder's
per-field calls.

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

import json
import re
from typing import Any

from ctfile.format.actions import AddPartition, Partition, PartitionStats
from ctfile.format.errors import CorruptLogError
from ctfile.format.paths import validate_relative_path
from ctfile.format.schema import LONG_MAX, LONG_MIN

_SCAN_ONCE = json.JSONDecoder().scan_once  # what json.loads runs, minus its Python wrapper
_ID_KEYS: dict[tuple, tuple] = {}  # key strings of a field-id map -> their int values
_ID_KEYS_MAX = 4096
# One segment under data/ with no leading dot, no ':', '\\' or NUL: what writers produce.
_PLAIN_DATA_PATH = re.compile(r"data/[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def loads_line(line: str) -> Any:
    """``json.loads(line)``; a line that is exactly one JSON value skips the wrapper."""
    try:
        obj, end = _SCAN_ONCE(line, 0)
        if end == len(line):
            return obj
    except Exception:  # StopIteration, JSONDecodeError ...: json.loads reports it
        pass
    return json.loads(line)


def _fast_id_map(obj: Any) -> dict | None:
    """``_id_map`` of a well-formed object (int() of each key, cached); None otherwise."""
    if obj is None:
        return {}
    if type(obj) is not dict:
        return None
    keys = tuple(obj)
    ids = _ID_KEYS.get(keys)
    if ids is None:
        try:
            ids = tuple(int(k) for k in keys)
        except ValueError:
            return None
        if len(_ID_KEYS) >= _ID_KEYS_MAX:
            _ID_KEYS.clear()
        _ID_KEYS[keys] = ids
    return dict(zip(ids, obj.values()))


def _fast_counts(obj: Any) -> dict | None:
    m = _fast_id_map(obj)
    if m:
        vals = m.values()
        if not set(map(type, vals)) <= {int} or min(vals) < 0 or max(vals) > LONG_MAX:
            return None
    return m


def _fast_bounds(obj: Any) -> dict | None:
    """``_fast_id_map`` of bounds that pass ``_plain_bound`` (inlined: this
    runs for every bound of every add a reader decodes)."""
    m = _fast_id_map(obj)
    if m:
        for v in m.values():
            t = type(v)
            if t is int:
                if not LONG_MIN <= v <= LONG_MAX:
                    return None
            elif t is float and v - v != 0.0:  # inf - inf and nan - nan are nan
                return None
    return m


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
    if (
        type(path) is not str or type(size) is not int or type(n) is not int
        or type(first) is not int or type(drv) is not int or type(mtime) is not int
        or (checksum is not None and type(checksum) is not str)
        or size < 0 or n < 0 or first < 0 or drv < 0
        # SPEC §Conventions: longs; firstRowId + numRecords too (it bounds both)
        or first + n > LONG_MAX or size > LONG_MAX or drv > LONG_MAX or not LONG_MIN <= mtime <= LONG_MAX
    ):
        return None
    if _PLAIN_DATA_PATH.fullmatch(path) is None:  # such a path passes validate_relative_path
        try:
            validate_relative_path(path, where="")
        except CorruptLogError:
            return None
    stats = None
    if st is not None:
        stats = fast_stats(st, n)
        if stats is None:
            return None
    return Partition(path, size, n, first, drv, mtime, checksum, stats)


def fast_stats(st: Any, n: int) -> PartitionStats | None:
    """``stats_from_json`` of a well-formed stats object of a partition of ``n``
    rows; None to take the checked path."""
    if type(st) is not dict:
        return None
    sn = st.get("numRecords")
    if type(sn) is not int or sn != n:
        return None
    mins = _fast_bounds(st.get("minValues"))
    maxs = _fast_bounds(st.get("maxValues"))
    nulls = _fast_counts(st.get("nullCount"))
    nans = _fast_counts(st.get("nanCount"))
    if mins is None or maxs is None or nulls is None or nans is None:
        return None
    return PartitionStats(sn, mins, maxs, nulls, nans)
