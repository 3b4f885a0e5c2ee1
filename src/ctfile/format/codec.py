"""JSON codec for log actions (SPEC §Log entries).

A log entry is newline-delimited JSON: one action per line, each line an
object with exactly one key naming the action (``commitInfo``, ``protocol``,
``metadata``, ``add``, ``remove``, ``change``, ``txn``; checkpoints add
``checkpoint``). Readers ignore unknown action keys and unknown fields (forward compatibility);
missing or mistyped required fields, and integers that do not fit a ``long``
(SPEC §Conventions), raise :class:`CorruptLogError` naming the entry and the
field. Every action written is first checked as a reader checks it
(:func:`writable_action_json`): what a reader would refuse is never
written. Whole commit entries, self-checking, are written and read by
:mod:`ctfile.format.entries`.
"""

from __future__ import annotations

import json
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
    Protocol,
    RemovePartition,
    SetTransaction,
)
from ctfile.format.derived import (
    check_derived_schema,
    derived_from_json,
    derived_to_json,
    refresh_from_json,
    refresh_to_json,
)
from ctfile.format.errors import CorruptLogError, InvalidArgumentError
from ctfile.format.fast_path import fast_add, fast_partition
from ctfile.format.log_values import check_json_value, get_field, loads_line, nested_too_deeply, nonneg
from ctfile.format.partition_stats import (  # noqa: F401 (stats_from_text, stats_to_text: callers import them from the codec)
    PartitionStats,
    stats_from_json,
    stats_from_text,
    stats_to_json,
    stats_to_text,
)
from ctfile.format.paths import CHANGES_DIR, is_change_file_path, validate_relative_path
from ctfile.format.properties import IsolationLevel
from ctfile.format.schema import LONG_MAX, LONG_MIN, schema_from_json, schema_to_json

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
    num_records = nonneg(get_field(obj, "numRecords", int, where), "numRecords", where)
    if stats is not None and stats.num_records != num_records:
        raise CorruptLogError(
            f"{where}: stats.numRecords {stats.num_records} != numRecords {num_records} for {path}"
        )
    first_row_id = nonneg(get_field(obj, "firstRowId", int, where), "firstRowId", where)
    if first_row_id + num_records > LONG_MAX:  # SPEC §Log entries, rule 3: row ids are int64
        raise CorruptLogError(
            f"{where}: firstRowId {first_row_id} + numRecords {num_records} of {path} does not fit a long "
            "(row ids are signed 64-bit integers)"
        )
    default_row_version = nonneg(get_field(obj, "defaultRowVersion", int, where), "defaultRowVersion", where)
    restored = _optionalnonneg(obj, "restoredRowVersion", where)
    if restored is not None and restored >= default_row_version:  # SPEC §add: an earlier version's
        raise CorruptLogError(
            f"{where}: restoredRowVersion {restored} of {path} is not below its defaultRowVersion {default_row_version}"
        )
    return Partition(
        path=path,
        size_bytes=nonneg(get_field(obj, "sizeBytes", int, where), "sizeBytes", where),
        num_records=num_records,
        first_row_id=first_row_id,
        default_row_version=default_row_version,
        modification_time=get_field(obj, "modificationTime", int, where),
        checksum=get_field(obj, "checksum", str, where, default=None),
        stats=stats,
        restored_row_version=restored,
    )


def _optionalnonneg(obj: dict, key: str, where: str) -> int | None:
    """Optional ``long`` field ``key``, ``>= 0`` when present."""
    val = get_field(obj, key, int, where, default=None)
    return None if val is None else nonneg(val, key, where)


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
        size_bytes=nonneg(get_field(obj, "sizeBytes", int, where), "sizeBytes", where),
        num_records=num_records,
        modification_time=get_field(obj, "modificationTime", int, where),
        checksum=get_field(obj, "checksum", str, where, default=None),
        stats=stats,
    )


# ---------------------------------------------------------------- actions


def action_to_json(a: Action) -> dict:
    """The one-key JSON object for an action.

    One encoder per action kind (:data:`_TO_JSON`), in the order of SPEC
    §Log entries: each is the field table of its section, read side by
    side with its decoder (:data:`_FROM_JSON`)."""
    to_json = _TO_JSON.get(type(a)) or _encoder_of_subclass(a)
    return to_json(a)


def _encoder_of_subclass(a: Any) -> Any:
    """The encoder of the action kind ``a`` is an instance of; TypeError if none."""
    for kind, to_json in _TO_JSON.items():
        if isinstance(a, kind):
            return to_json
    raise TypeError(f"not a ctfile action: {a!r}")


def _commit_info_to_json(a: CommitInfo) -> dict:
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
    if a.refresh is not None:  # SPEC §Derived tables: a refresh commit
        body["refresh"] = refresh_to_json(a.refresh)
    _put_present(body, (("engineInfo", a.engine_info), ("txnId", a.txn_id), ("isBlindAppend", a.is_blind_append),
                        ("numActions", a.num_actions), ("actionsChecksum", a.actions_checksum)))
    return {"commitInfo": body}


def _put_present(body: dict[str, Any], fields: Iterable[tuple[str, Any]]) -> None:
    """Put each optional field of ``fields`` that is not None into ``body``, in order."""
    for key, value in fields:
        if value is not None:
            body[key] = value


def _protocol_to_json(a: Protocol) -> dict:
    return {
        "protocol": {
            "minReaderVersion": a.min_reader_version,
            "minWriterVersion": a.min_writer_version,
            "readerFeatures": list(a.reader_features),
            "writerFeatures": list(a.writer_features),
        }
    }


def _metadata_to_json(a: Metadata) -> dict:
    body = {
        "tableId": a.table_id,
        "schema": schema_to_json(a.schema),
        "createdTime": a.created_time,
        "properties": dict(a.properties),
    }
    # SPEC §Schema evolution: lastFieldId is written when ids above the schema's were retired.
    last_id = a.assigned_field_ids if a.assigned_field_ids > a.schema.max_field_id() else None
    _put_present(body, (("name", a.name), ("description", a.description), ("lastFieldId", last_id)))
    if a.derived is not None:  # SPEC §Derived tables
        body["derived"] = derived_to_json(a.derived)
    return {"metadata": body}


def _add_to_json(a: AddPartition) -> dict:
    body = _partition_to_json(a.partition)
    body["dataChange"] = a.data_change
    return {"add": body}


def _remove_to_json(a: RemovePartition) -> dict:
    body = _partition_to_json(a.partition)
    body["deletionTimestamp"] = a.deletion_timestamp
    body["dataChange"] = a.data_change
    if a.deletes_all_rows:
        body["deletesAllRows"] = True
    return {"remove": body}


def _change_to_json(a: ChangeFile) -> dict:
    return {"change": _change_file_to_json(a)}


def _txn_to_json(a: SetTransaction) -> dict:
    return {"txn": {"appId": a.app_id, "version": a.version, "lastUpdated": a.last_updated}}


def _checkpoint_to_json(a: CheckpointHeader) -> dict:
    return {
        "checkpoint": {
            "version": a.version,
            "timestamp": a.timestamp,
            "nextRowId": a.next_row_id,
            "numPartitions": a.num_partitions,
        }
    }


#: Each action kind -> its encoder, in the order of SPEC §Log entries.
_TO_JSON: dict[type, Any] = {
    CommitInfo: _commit_info_to_json,
    Protocol: _protocol_to_json,
    Metadata: _metadata_to_json,
    AddPartition: _add_to_json,
    RemovePartition: _remove_to_json,
    ChangeFile: _change_to_json,
    SetTransaction: _txn_to_json,
    CheckpointHeader: _checkpoint_to_json,
}


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
        refresh=None if body.get("refresh") is None else refresh_from_json(body["refresh"], where=f"{w}.refresh"),
    )


def action_from_json(obj: Any, where: str) -> Action | None:
    """Decode one action; ``None`` for an unknown action key (ignored by readers).

    One decoder per action kind (:data:`_FROM_JSON`, the mirror of
    :data:`_TO_JSON`)."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise CorruptLogError(f"{where}: each line must be an object with exactly one action key, found {obj!r:.200}")
    (key, body), = obj.items()
    from_json = _FROM_JSON.get(key)
    if from_json is None:
        return None
    w = f"{where} {key}"
    if not isinstance(body, dict):
        raise CorruptLogError(f"{w}: action body must be an object, found {body!r:.200}")
    return from_json(body, w)


def _protocol_from_json(body: dict, w: str) -> Protocol:
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


def _metadata_from_json(body: dict, w: str) -> Metadata:
    props = get_field(body, "properties", dict, w, default={})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise CorruptLogError(f"{w}: properties must map strings to strings, found {props!r}")
    try:
        schema = schema_from_json(get_field(body, "schema", dict, w), f"{w}.schema")
    except RecursionError:
        raise nested_too_deeply(f"{w}.schema") from None
    derived = None if body.get("derived") is None else derived_from_json(body["derived"], where=f"{w}.derived")
    try:  # SPEC §Derived tables: _ct_dt_ columns exactly as hiddenColumns lists them
        check_derived_schema(derived, schema)
    except InvalidArgumentError as e:
        raise CorruptLogError(f"{w}: {e}") from None
    return Metadata(
        table_id=get_field(body, "tableId", str, w),
        schema=schema,
        created_time=get_field(body, "createdTime", int, w),
        properties=props,
        name=get_field(body, "name", str, w, default=None),
        description=get_field(body, "description", str, w, default=None),
        last_field_id=get_field(body, "lastFieldId", int, w, default=None),
        derived=derived,
    )


def _add_from_json(body: dict, w: str) -> AddPartition:
    return AddPartition(_partition_from_json(body, w), get_field(body, "dataChange", bool, w))


def _remove_from_json(body: dict, w: str) -> RemovePartition:
    return RemovePartition(
        _partition_from_json(body, w),
        deletion_timestamp=get_field(body, "deletionTimestamp", int, w),
        data_change=get_field(body, "dataChange", bool, w),
        deletes_all_rows=get_field(body, "deletesAllRows", bool, w, default=False),
    )


def _txn_from_json(body: dict, w: str) -> SetTransaction:
    return SetTransaction(
        app_id=get_field(body, "appId", str, w),
        version=get_field(body, "version", int, w),
        last_updated=get_field(body, "lastUpdated", int, w),
    )


def _checkpoint_from_json(body: dict, w: str) -> CheckpointHeader:
    return CheckpointHeader(
        version=get_field(body, "version", int, w),
        timestamp=get_field(body, "timestamp", int, w),
        next_row_id=get_field(body, "nextRowId", int, w),
        num_partitions=get_field(body, "numPartitions", int, w),
    )


#: Each action key -> its decoder (SPEC §Log entries); readers ignore other keys.
_FROM_JSON: dict[str, Any] = {
    "commitInfo": _commit_info_from_json,
    "protocol": _protocol_from_json,
    "metadata": _metadata_from_json,
    "add": _add_from_json,
    "remove": _remove_from_json,
    "change": _change_file_from_json,
    "txn": _txn_from_json,
    "checkpoint": _checkpoint_from_json,
}
_HEX128 = re.compile(r"[0-9a-f]{32}")


# ---------------------------------------------------------------- writing what readers read
#
# SPEC §Conventions, writer requirements: a writer MUST NOT write a value
# its readers refuse. Every action ctfile writes goes through
# ``writable_action_json``, which checks the JSON object as a reader checks
# it, with the reader's own code: the fast path for the add and remove lines
# (most of an entry), the checked decoder for the others. The values no
# decoder types field by field (a commit's operationParameters, a field's
# metadata) are checked by ``check_json_value``.

_FREE_FORM = ("commitInfo", "metadata")


def writable_action_json(a: Action) -> dict:
    """:func:`action_to_json` of ``a``, if readers accept it as written.

    Raises
    ------
    InvalidArgumentError
        ``a`` holds what a reader would refuse (a ``long`` out of range, a
        negative count, an unsafe path, a free-form value that is not plain
        JSON ...): the message names the action and the field, what readers
        expect and what was found. Nothing is written.

    Examples
    --------
    >>> writable_action_json(SetTransaction("nightly", 7, 1000))
    {'txn': {'appId': 'nightly', 'version': 7, 'lastUpdated': 1000}}
    >>> writable_action_json(SetTransaction("nightly", 2**63, 1000))
    Traceback (most recent call last):
      ...
    ctfile.format.errors.InvalidArgumentError: the action to write txn: field 'version' is 9223372036854775808, which does not fit a long (a signed 64-bit integer); readers refuse it, so it is not written (SPEC §Conventions)
    """
    obj = action_to_json(a)
    (key, body), = obj.items()
    if key in _FREE_FORM:
        check_json_value(body, key, depth=2)
    if not _read_by_fast_path(key, body):
        try:
            action_from_json(obj, "the action to write")
        except CorruptLogError as e:
            raise InvalidArgumentError(f"{e}; readers refuse it, so it is not written (SPEC §Conventions)") from None
    return obj


def _read_by_fast_path(key: str, body: dict) -> bool:
    """True if readers' fast path accepts this ``add`` or ``remove`` body
    (see :func:`~ctfile.format.fast_path.fast_add`); False means: check it on the checked path."""
    if key == "add":
        return fast_add(body) is not None
    if key == "remove":
        ts, dc = body.get("deletionTimestamp"), body.get("dataChange")
        return (
            type(ts) is int and LONG_MIN <= ts <= LONG_MAX and type(dc) is bool
            and type(body.get("deletesAllRows", False)) is bool and fast_partition(body) is not None
        )
    return False


def encode_line(obj: dict) -> str:
    """One action object as a log line, without its ``"\n"``: compact JSON,
    non-ASCII characters unescaped (SPEC §Log entries)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def encode_actions(actions: Iterable[Action]) -> bytes:
    """NDJSON bytes of actions, one line each: a checkpoint's key-value body.
    A commit entry is written by :func:`ctfile.format.entries.encode_entry`,
    which makes it self-checking.

    Raises
    ------
    InvalidArgumentError
        An action holds a value readers refuse (:func:`writable_action_json`).
    """
    return "".join(encode_line(writable_action_json(a)) + "\n" for a in actions).encode("utf-8")


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
            out.append((lineno, loads_line(line)))
        except json.JSONDecodeError as e:
            raise CorruptLogError(f"{where} line {lineno}: invalid JSON ({e.msg})") from e
        except RecursionError:
            raise nested_too_deeply(f"{where} line {lineno}") from None
    return out


def decode_lines(lines: Iterable[tuple[int, Any]], *, where: str) -> list[Action]:
    """The actions of :func:`parse_lines`' output; unknown action kinds are skipped."""
    out: list[Action] = []
    for lineno, obj in lines:
        act = None
        if type(obj) is dict and len(obj) == 1:
            body = obj.get("add")
            if type(body) is dict:
                act = fast_add(body)  # None: not the common case, take the checked path
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
