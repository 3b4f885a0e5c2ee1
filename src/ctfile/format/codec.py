"""JSON codec for log actions (SPEC §Log entries).

A log entry is newline-delimited JSON: one action per line, each line an
object with exactly one key naming the action (``commitInfo``, ``protocol``,
``metadata``, ``add``, ``remove``, ``change``, ``txn``; checkpoints add
``checkpoint``). Readers ignore unknown action keys and unknown fields (forward compatibility);
missing or mistyped required fields, and integers that do not fit a ``long``
(SPEC §Conventions), raise :class:`CorruptLogError` naming the entry and the
field. Whole commit entries, self-checking, are written and read by
:mod:`ctfile.format.entries`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable

from ctfile.format.actions import (
    Action,
    AddPartition,
    ChangeFile,
    CheckpointHeader,
    CommitInfo,
    Metadata,
    Partition,
    PartitionStats,
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.errors import CorruptLogError
from ctfile.format.paths import CHANGES_DIR, is_change_file_path, validate_relative_path
from ctfile.format.properties import IsolationLevel
from ctfile.format.schema import LONG_MAX, LONG_MIN, check_long, schema_from_json, schema_to_json

_MISSING = object()


def get_field(obj: dict, key: str, typ, where: str, default: Any = _MISSING) -> Any:
    """Field ``key`` of the JSON object ``obj``, of type ``typ`` (an ``int``
    a ``long``), or ``default`` when absent; :class:`CorruptLogError` naming
    ``where`` and the field otherwise."""
    if key not in obj or obj[key] is None:
        if default is not _MISSING:
            return default
        raise CorruptLogError(f"{where}: required field {key!r} is missing")
    val = obj[key]
    ok = isinstance(val, typ) and not (isinstance(val, bool) and typ in (int, (int, float)))
    if not ok:
        name = getattr(typ, "__name__", str(typ))
        raise CorruptLogError(f"{where}: field {key!r} should be {name}, found {val!r}")
    if typ is int:
        check_long(val, key, where)
    return val


def _nonneg(val: int, key: str, where: str) -> int:
    if val < 0:
        raise CorruptLogError(f"{where}: field {key!r} must be >= 0, found {val}")
    return val


# ---------------------------------------------------------------- stats


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
    return PartitionStats(
        num_records=_nonneg(get_field(obj, "numRecords", int, where), "numRecords", where),
        min_values=maps["minValues"],
        max_values=maps["maxValues"],
        null_count=maps["nullCount"],
        nan_count=maps["nanCount"],
    )


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


# ---------------------------------------------------------------- partitions


def _partition_to_json(p: Partition) -> dict:
    out: dict[str, Any] = {
        "path": p.path,
        "sizeBytes": p.size_bytes,
        "numRecords": p.num_records,
        "firstRowId": p.first_row_id,
        "defaultRowVersion": p.default_row_version,
        "modificationTime": p.modification_time,
    }
    out = _with_checksum_and_stats(out, p.checksum, p.stats)
    if p.restored_row_version is not None:  # SPEC §Restore: a re-add
        out["restoredRowVersion"] = p.restored_row_version
    return out


def _with_checksum_and_stats(out: dict[str, Any], checksum: str | None, stats: PartitionStats | None) -> dict:
    """``out`` with the optional ``checksum`` and ``stats`` of a file's action."""
    if checksum is not None:
        out["checksum"] = checksum
    if stats is not None:
        out["stats"] = stats_to_json(stats)
    return out


def _partition_from_json(obj: dict, where: str) -> Partition:
    path = validate_relative_path(get_field(obj, "path", str, where), where=where)
    stats = stats_from_json(obj["stats"], f"{where}.stats") if obj.get("stats") is not None else None
    num_records = _nonneg(get_field(obj, "numRecords", int, where), "numRecords", where)
    if stats is not None and stats.num_records != num_records:
        raise CorruptLogError(
            f"{where}: stats.numRecords {stats.num_records} != numRecords {num_records} for {path}"
        )
    first_row_id = _nonneg(get_field(obj, "firstRowId", int, where), "firstRowId", where)
    if first_row_id + num_records > LONG_MAX:  # SPEC §Log entries, rule 3: row ids are int64
        raise CorruptLogError(
            f"{where}: firstRowId {first_row_id} + numRecords {num_records} of {path} does not fit a long "
            "(row ids are signed 64-bit integers)"
        )
    default_row_version = _nonneg(get_field(obj, "defaultRowVersion", int, where), "defaultRowVersion", where)
    restored = _optional_nonneg(obj, "restoredRowVersion", where)
    if restored is not None and restored >= default_row_version:  # SPEC §add: an earlier version's
        raise CorruptLogError(
            f"{where}: restoredRowVersion {restored} of {path} is not below its defaultRowVersion {default_row_version}"
        )
    return Partition(
        path=path,
        size_bytes=_nonneg(get_field(obj, "sizeBytes", int, where), "sizeBytes", where),
        num_records=num_records,
        first_row_id=first_row_id,
        default_row_version=default_row_version,
        modification_time=get_field(obj, "modificationTime", int, where),
        checksum=get_field(obj, "checksum", str, where, default=None),
        stats=stats,
        restored_row_version=restored,
    )


def _optional_nonneg(obj: dict, key: str, where: str) -> int | None:
    """Optional ``long`` field ``key``, ``>= 0`` when present."""
    val = get_field(obj, key, int, where, default=None)
    return None if val is None else _nonneg(val, key, where)


def _change_file_to_json(c: ChangeFile) -> dict:
    out: dict[str, Any] = {
        "path": c.path,
        "sizeBytes": c.size_bytes,
        "numRecords": c.num_records,
        "modificationTime": c.modification_time,
    }
    return _with_checksum_and_stats(out, c.checksum, c.stats)


def _change_file_from_json(obj: dict, where: str) -> ChangeFile:
    """SPEC §change: a change file under ``_ct_changes/`` with at least one row."""
    path = validate_relative_path(get_field(obj, "path", str, where), where=where)
    if not is_change_file_path(path):
        raise CorruptLogError(f"{where}: a change file must be under {CHANGES_DIR}/, found path {path!r}")
    num_records = get_field(obj, "numRecords", int, where)
    if num_records < 1:
        raise CorruptLogError(f"{where}: numRecords of change file {path} must be >= 1, found {num_records}")
    stats = stats_from_json(obj["stats"], f"{where}.stats") if obj.get("stats") is not None else None
    if stats is not None and stats.num_records != num_records:
        raise CorruptLogError(f"{where}: stats.numRecords {stats.num_records} != numRecords {num_records} for {path}")
    return ChangeFile(
        path=path,
        size_bytes=_nonneg(get_field(obj, "sizeBytes", int, where), "sizeBytes", where),
        num_records=num_records,
        modification_time=get_field(obj, "modificationTime", int, where),
        checksum=get_field(obj, "checksum", str, where, default=None),
        stats=stats,
    )


# ---------------------------------------------------------------- actions


def action_to_json(a: Action) -> dict:
    """The one-key JSON object for an action.

    One branch per action kind, in the order of SPEC §Log entries: long,
    but each branch is the field table of its section, read side by side
    with :func:`action_from_json`."""
    if isinstance(a, CommitInfo):
        body: dict[str, Any] = {
            "timestamp": a.timestamp,
            "operation": a.operation,
            "operationParameters": dict(a.operation_parameters),
            "dataChange": a.data_change,
            "isolationLevel": a.isolation_level,
        }
        if a.read_version is not None:
            body["readVersion"] = a.read_version
        if a.operation_metrics:
            body["operationMetrics"] = dict(a.operation_metrics)
        if a.engine_info is not None:
            body["engineInfo"] = a.engine_info
        if a.txn_id is not None:
            body["txnId"] = a.txn_id
        if a.is_blind_append is not None:
            body["isBlindAppend"] = a.is_blind_append
        if a.num_actions is not None:
            body["numActions"] = a.num_actions
        if a.actions_checksum is not None:
            body["actionsChecksum"] = a.actions_checksum
        return {"commitInfo": body}
    if isinstance(a, Protocol):
        return {
            "protocol": {
                "minReaderVersion": a.min_reader_version,
                "minWriterVersion": a.min_writer_version,
                "readerFeatures": list(a.reader_features),
                "writerFeatures": list(a.writer_features),
            }
        }
    if isinstance(a, Metadata):
        body = {
            "tableId": a.table_id,
            "schema": schema_to_json(a.schema),
            "createdTime": a.created_time,
            "properties": dict(a.properties),
        }
        # SPEC §Schema evolution: lastFieldId is written when ids above the schema's were retired.
        last_id = a.assigned_field_ids if a.assigned_field_ids > a.schema.max_field_id() else None
        for key, value in (("name", a.name), ("description", a.description), ("lastFieldId", last_id)):
            if value is not None:
                body[key] = value
        return {"metadata": body}
    if isinstance(a, AddPartition):
        body = _partition_to_json(a.partition)
        body["dataChange"] = a.data_change
        return {"add": body}
    if isinstance(a, RemovePartition):
        body = _partition_to_json(a.partition)
        body["deletionTimestamp"] = a.deletion_timestamp
        body["dataChange"] = a.data_change
        if a.deletes_all_rows:
            body["deletesAllRows"] = True
        return {"remove": body}
    if isinstance(a, ChangeFile):
        return {"change": _change_file_to_json(a)}
    if isinstance(a, SetTransaction):
        return {"txn": {"appId": a.app_id, "version": a.version, "lastUpdated": a.last_updated}}
    if isinstance(a, CheckpointHeader):
        return {
            "checkpoint": {
                "version": a.version,
                "timestamp": a.timestamp,
                "nextRowId": a.next_row_id,
                "numPartitions": a.num_partitions,
            }
        }
    raise TypeError(f"not a ctfile action: {a!r}")


def _commit_info_from_json(body: dict, w: str) -> CommitInfo:
    """The ``commitInfo`` action (SPEC §commitInfo), its counters and
    self-check fields validated (SPEC §Log entries, rule 8)."""
    params = get_field(body, "operationParameters", dict, w, default={})
    metrics = get_field(body, "operationMetrics", dict, w, default={})
    for name in metrics:  # string -> long counters (a null one is absent)
        get_field(metrics, name, int, f"{w}.operationMetrics", default=None)
    num_actions = get_field(body, "numActions", int, w, default=None)
    if num_actions is not None and num_actions < 1:
        raise CorruptLogError(f"{w}: numActions must be >= 1 (the commitInfo counts), found {num_actions}")
    checksum = get_field(body, "actionsChecksum", str, w, default=None)
    if checksum is not None and _HEX128.fullmatch(checksum) is None:
        raise CorruptLogError(f"{w}: actionsChecksum must be 32 lower-case hex digits, found {checksum!r:.80}")
    return CommitInfo(
        timestamp=get_field(body, "timestamp", int, w),
        operation=get_field(body, "operation", str, w),
        operation_parameters=params,
        read_version=get_field(body, "readVersion", int, w, default=None),
        data_change=get_field(body, "dataChange", bool, w, default=True),
        operation_metrics=metrics,
        engine_info=get_field(body, "engineInfo", str, w, default=None),
        txn_id=get_field(body, "txnId", str, w, default=None),
        isolation_level=get_field(body, "isolationLevel", str, w, default=IsolationLevel.SNAPSHOT.value),
        is_blind_append=get_field(body, "isBlindAppend", bool, w, default=None),
        num_actions=num_actions,
        actions_checksum=checksum,
    )


def action_from_json(obj: Any, where: str) -> Action | None:
    """Decode one action; ``None`` for an unknown action key (ignored by readers).

    One branch per action kind (the mirror of :func:`action_to_json`); the
    larger bodies have their own functions."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise CorruptLogError(f"{where}: each line must be an object with exactly one action key, found {obj!r:.200}")
    (key, body), = obj.items()
    w = f"{where} {key}"
    if not isinstance(body, dict) and key in _KNOWN:
        raise CorruptLogError(f"{w}: action body must be an object, found {body!r:.200}")
    if key == "commitInfo":
        return _commit_info_from_json(body, w)
    if key == "protocol":
        rf = get_field(body, "readerFeatures", list, w, default=[])
        wf = get_field(body, "writerFeatures", list, w, default=[])
        if not all(isinstance(x, str) for x in rf + wf):
            raise CorruptLogError(f"{w}: feature names must be strings, found {rf + wf}")
        return Protocol(
            min_reader_version=get_field(body, "minReaderVersion", int, w),
            min_writer_version=get_field(body, "minWriterVersion", int, w),
            reader_features=tuple(rf),
            writer_features=tuple(wf),
        )
    if key == "metadata":
        props = get_field(body, "properties", dict, w, default={})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
            raise CorruptLogError(f"{w}: properties must map strings to strings, found {props!r}")
        return Metadata(
            table_id=get_field(body, "tableId", str, w),
            schema=schema_from_json(get_field(body, "schema", dict, w), f"{w}.schema"),
            created_time=get_field(body, "createdTime", int, w),
            properties=props,
            name=get_field(body, "name", str, w, default=None),
            description=get_field(body, "description", str, w, default=None),
            last_field_id=get_field(body, "lastFieldId", int, w, default=None),
        )
    if key == "add":
        return AddPartition(_partition_from_json(body, w), get_field(body, "dataChange", bool, w))
    if key == "remove":
        return RemovePartition(
            _partition_from_json(body, w),
            deletion_timestamp=get_field(body, "deletionTimestamp", int, w),
            data_change=get_field(body, "dataChange", bool, w),
            deletes_all_rows=get_field(body, "deletesAllRows", bool, w, default=False),
        )
    if key == "change":
        return _change_file_from_json(body, w)
    if key == "txn":
        return SetTransaction(
            app_id=get_field(body, "appId", str, w),
            version=get_field(body, "version", int, w),
            last_updated=get_field(body, "lastUpdated", int, w),
        )
    if key == "checkpoint":
        return CheckpointHeader(
            version=get_field(body, "version", int, w),
            timestamp=get_field(body, "timestamp", int, w),
            next_row_id=get_field(body, "nextRowId", int, w),
            num_partitions=get_field(body, "numPartitions", int, w),
        )
    return None


_KNOWN = {"commitInfo", "protocol", "metadata", "add", "remove", "change", "txn", "checkpoint"}
_HEX128 = re.compile(r"[0-9a-f]{32}")


# ---------------------------------------------------------------- fast path
#
# A checkpoint holds one ``add`` line per live partition (10,000 lines of
# ~1 KB for a table of 10,000 partitions), so decoding them is most of the
# cost of opening a big table. The fast path accepts only well-formed lines,
# which it turns into the very objects the checked path builds; on anything
# unusual it returns None and the line takes the checked path, which then
# produces its usual result or error.

_SCAN_ONCE = json.JSONDecoder().scan_once  # what json.loads runs, minus its Python wrapper
_ID_KEYS: dict[tuple, tuple] = {}  # key strings of a field-id map -> their int values
_ID_KEYS_MAX = 4096
# One segment under data/ with no leading dot, no ':', '\\' or NUL: what writers produce.
_PLAIN_DATA_PATH = re.compile(r"data/[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def _loads_line(line: str) -> Any:
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


def _fast_add(body: dict) -> AddPartition | None:
    """``action_from_json`` of a well-formed ``add`` body; None to take the checked path."""
    g = body.get
    path, size, n = g("path"), g("sizeBytes"), g("numRecords")
    first, drv, mtime = g("firstRowId"), g("defaultRowVersion"), g("modificationTime")
    checksum, dc, st = g("checksum"), g("dataChange"), g("stats")
    if g("restoredRowVersion") is not None:
        return None  # a re-add (SPEC §Restore): rare, checked path
    if (
        type(path) is not str or type(size) is not int or type(n) is not int
        or type(first) is not int or type(drv) is not int or type(mtime) is not int
        or type(dc) is not bool or (checksum is not None and type(checksum) is not str)
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
        stats = _fast_stats(st, n)
        if stats is None:
            return None
    return AddPartition(Partition(path, size, n, first, drv, mtime, checksum, stats), dc)


def _fast_stats(st: Any, n: int) -> PartitionStats | None:
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
        obj = _loads_line(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise CorruptLogError(f"{w}: invalid JSON ({e})") from e
    stats = _fast_stats(obj, num_records)
    if stats is None:
        stats = stats_from_json(obj, w)
        if stats.num_records != num_records:
            raise CorruptLogError(f"{w}: stats.numRecords {stats.num_records} != numRecords {num_records}")
    return stats


def encode_line(obj: dict) -> str:
    """One action object as a log line, without its ``"\n"``: compact JSON,
    non-ASCII characters unescaped (SPEC §Log entries)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def encode_actions(actions: Iterable[Action]) -> bytes:
    """NDJSON bytes of actions, one line each: a checkpoint's key-value body.
    A commit entry is written by :func:`ctfile.format.entries.encode_entry`,
    which makes it self-checking."""
    return "".join(encode_line(action_to_json(a)) + "\n" for a in actions).encode("utf-8")


def parse_lines(data: bytes, *, where: str, first_lineno: int = 1) -> list[tuple[int, Any]]:
    """The JSON value of each non-blank line of NDJSON bytes, with its 1-based
    line number (lines are split at ``"\n"`` only; ``first_lineno`` is the
    number of the first, for bytes cut from a larger file).

    Raises
    ------
    CorruptLogError
        On invalid UTF-8 or JSON, or a last line without its newline.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptLogError(f"{where}: not valid UTF-8 ({e})") from e
    if text and not text.endswith("\n"):
        # SPEC §Log entries: every line ends with "\n"; a missing final newline
        # means the entry was cut short.
        raise CorruptLogError(f"{where}: truncated entry (last line has no terminating newline)")
    out = []
    # Split on "\n" only: str.splitlines() also breaks at U+2028, U+0085...,
    # which json.dumps(ensure_ascii=False) leaves raw inside strings.
    for lineno, line in enumerate(text.split("\n"), start=first_lineno):
        if not line.strip():
            continue
        try:
            out.append((lineno, _loads_line(line)))
        except json.JSONDecodeError as e:
            raise CorruptLogError(f"{where} line {lineno}: invalid JSON ({e.msg})") from e
    return out


def decode_lines(lines: Iterable[tuple[int, Any]], *, where: str) -> list[Action]:
    """The actions of :func:`parse_lines`' output; unknown action kinds are skipped."""
    out: list[Action] = []
    for lineno, obj in lines:
        act = None
        if type(obj) is dict and len(obj) == 1:
            body = obj.get("add")
            if type(body) is dict:
                act = _fast_add(body)  # None: not the common case, take the checked path
        if act is None:
            act = action_from_json(obj, f"{where} line {lineno}")
        if act is not None:
            out.append(act)
    return out


def decode_actions(data: bytes, *, where: str) -> list[Action]:
    """Decode NDJSON bytes. ``where`` names the file for error messages.

    Checks each action, not the rules of a whole entry (for those, see
    :func:`ctfile.format.entries.decode_entry`).

    Raises
    ------
    CorruptLogError
        On invalid UTF-8 or JSON (including a truncated last line), or a bad action.
    """
    return decode_lines(parse_lines(data, where=where), where=where)
