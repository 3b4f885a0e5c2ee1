"""Per-partition statistics and their JSON form (SPEC §Statistics).

:class:`PartitionStats` is the ``stats`` of an ``add``, ``remove`` or
``change`` action, and of a checkpoint row (as JSON text, SPEC
§Checkpoints). This module holds the object and both of its decoders: the
checked one (:func:`stats_from_json`), which raises
:class:`~ctfile.format.errors.CorruptLogError` naming the field, and the fast
path (:func:`fast_stats`) that :mod:`ctfile.format.fast_path` uses for the
statistics of well-formed lines. It sits below :mod:`ctfile.format.actions`,
whose :class:`~ctfile.format.actions.Partition` decodes its deferred
statistics with :func:`stats_from_text`, and below the codec, which writes
and reads them inside action lines.

Examples
--------
>>> s = PartitionStats(2, {1: 1}, {1: 2}, {1: 0})
>>> stats_to_text(s)
'{"numRecords":2,"minValues":{"1":1},"maxValues":{"1":2},"nullCount":{"1":0}}'
>>> stats_from_text(stats_to_text(s), "cp", num_records=2, path="data/a.parquet") == s
True
>>> fast_stats({"numRecords": 2, "nullCount": {"1": -1}}, 2) is None  # the checked path says why
True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ctfile.format.errors import CorruptLogError
from ctfile.format.log_values import get_field, loads_line, nested_too_deeply, nonneg
from ctfile.format.schema import LONG_MAX, LONG_MIN

_ID_KEYS: dict[tuple, tuple] = {}  # key strings of a field-id map -> their int values
_ID_KEYS_MAX = 4096


@dataclass(frozen=True)
class PartitionStats:
    """Per-partition statistics keyed by field id (SPEC §Statistics).

    ``min_values`` / ``max_values`` hold JSON-encoded values (see
    :mod:`ctfile.format.stats`); a field absent from them has no usable bound.
    Hidden columns appear under their reserved ids with *stored* values, i.e.
    before null inheritance. ``nan_count`` is kept for float columns because
    min/max exclude NaN.
    """

    num_records: int
    min_values: dict[int, Any] = field(default_factory=dict, hash=False)
    max_values: dict[int, Any] = field(default_factory=dict, hash=False)
    null_count: dict[int, int] = field(default_factory=dict, hash=False)
    nan_count: dict[int, int] = field(default_factory=dict, hash=False)


# ---------------------------------------------------------------- the JSON form, checked


def stats_to_json(s: PartitionStats) -> dict:
    out: dict[str, Any] = {"numRecords": s.num_records}
    if s.min_values:
        out["minValues"] = {str(k): v for k, v in s.min_values.items()}
    if s.max_values:
        out["maxValues"] = {str(k): v for k, v in s.max_values.items()}
    if s.null_count:
        out["nullCount"] = {str(k): v for k, v in s.null_count.items()}
    if s.nan_count:
        out["nanCount"] = {str(k): v for k, v in s.nan_count.items()}
    return out


def _id_map(obj: Any, where: str) -> dict[int, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise CorruptLogError(f"{where}: expected an object keyed by field id, found {obj!r}")
    try:
        return {int(k): v for k, v in obj.items()}
    except ValueError as e:
        raise CorruptLogError(f"{where}: keys must be field ids, found {list(obj)}") from e


def stats_from_json(obj: Any, where: str) -> PartitionStats:
    if not isinstance(obj, dict):
        raise CorruptLogError(f"{where}: stats must be an object, found {obj!r}")
    maps = _checked_maps(obj, where)
    return PartitionStats(
        num_records=nonneg(get_field(obj, "numRecords", int, where), "numRecords", where),
        min_values=maps["minValues"],
        max_values=maps["maxValues"],
        null_count=maps["nullCount"],
        nan_count=maps["nanCount"],
    )


def _checked_maps(obj: dict, where: str) -> dict[str, dict[int, Any]]:
    """The four maps of a stats object keyed by field id: the counts
    ``long``s >= 0, the bounds plain (:func:`_plain_bound`). One loop per
    map, no call per value: change files' statistics always take this path."""
    maps = {}
    for key in ("nullCount", "nanCount"):
        maps[key] = _id_map(obj.get(key), f"{where}.{key}")
        for k, v in maps[key].items():
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= LONG_MAX:
                raise CorruptLogError(f"{where}.{key}: count for field {k} must be a long >= 0, found {v!r}")
    for key in ("minValues", "maxValues"):
        maps[key] = _id_map(obj.get(key), f"{where}.{key}")
        for k, v in maps[key].items():
            if not _plain_bound(v):
                raise CorruptLogError(
                    f"{where}.{key}: bound for field {k} is {v!r}; an integer bound must fit a long "
                    "and a number must be finite (SPEC §Statistics)"
                )
    return maps


def _plain_bound(v: Any) -> bool:
    """False for a bound no column type allows whatever its type: an integer
    beyond a ``long`` or a non-finite number (Python's json reads ``NaN``,
    ``Infinity`` and ``1e400``). Whether a bound fits its column's type is
    :func:`ctfile.format.stats.decode_bound`'s business."""
    t = type(v)
    if t is int:
        return LONG_MIN <= v <= LONG_MAX
    if t is float:
        return math.isfinite(v)
    return True


def stats_to_text(s: PartitionStats) -> str:
    """The stats object as compact JSON text, exactly as inside an ``add`` line."""
    return json.dumps(stats_to_json(s), separators=(",", ":"), ensure_ascii=False)


def stats_from_text(text: str, where: str, *, num_records: int, path: str) -> PartitionStats:
    """Decode the JSON text of a stats object (a checkpoint's ``stats`` column),
    checking it against the partition's ``numRecords`` as ``add`` does.

    Raises
    ------
    CorruptLogError
        Invalid JSON, an invalid stats object, or a numRecords mismatch.
    """
    w = f"{where} stats of {path}"
    try:
        obj = loads_line(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise CorruptLogError(f"{w}: invalid JSON ({e})") from e
    except RecursionError:
        raise nested_too_deeply(w) from None
    stats = fast_stats(obj, num_records)
    if stats is None:
        stats = stats_from_json(obj, w)
        if stats.num_records != num_records:
            raise CorruptLogError(f"{w}: stats.numRecords {stats.num_records} != numRecords {num_records}")
    return stats


# ---------------------------------------------------------------- the fast path


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
