"""ctfile.format.codec: NDJSON encode/decode of log actions and entry validation."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from ctfile.format.actions import (
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
from ctfile.format.codec import (
    action_to_json,
    decode_actions,
    encode_actions,
)
from ctfile.format.entries import encode_entry, validate_commit_entry
from ctfile.format.errors import CorruptLogError, InvalidArgumentError
from ctfile.format.schema import MAX_FIELD_ID, ArrayType, Field, MapType, Schema, StructType

WHERE = "mem://t/_ct_log/00000000000000000007.json"

SCHEMA = Schema(
    (
        Field(1, "id", "long", False),
        Field(2, "name", "string", True, {"comment": "ünïcode"}),
        Field(3, "tags", ArrayType(4, "string", True)),
        Field(5, "attrs", MapType(6, "string", 7, "decimal(10,2)", False)),
        Field(8, "point", StructType((Field(9, "x", "double"), Field(10, "y", "double")))),
    )
)

STATS = PartitionStats(
    num_records=10,
    min_values={1: 0, 2: "a", 9: -1.5},
    max_values={1: 9, 2: "zz", 9: 2.25},
    null_count={1: 0, 2: 3, 2147483540: 10},
    nan_count={9: 1},
)

PART = Partition(
    path="data/part-abc-00001.parquet",
    size_bytes=1234,
    num_records=10,
    first_row_id=100,
    default_row_version=7,
    modification_time=1_700_000_000_000,
    checksum="0123456789abcdef0123456789abcdef",
    stats=STATS,
)

ALL_ACTIONS = [
    CommitInfo(
        timestamp=1_700_000_000_123,
        operation="MERGE",
        operation_parameters={"on": ["id"], "whenMatched": "update", "nested": {"a": None}},
        read_version=6,
        data_change=True,
        operation_metrics={"numInsertedRows": 3},
        engine_info="ctfile-python",
        txn_id="deadbeef",
        isolation_level="SnapshotIsolation",
    ),
    Protocol(2, 3, ("rowLineage",), ("rowLineage", "appTransactions")),
    Metadata(
        table_id="t-1",
        schema=SCHEMA,
        created_time=1_600_000_000_000,
        properties={"ctfile.checkpointInterval": "5", "owner": "me"},
        name="orders",
        description="the orders",
    ),
    AddPartition(PART, data_change=True),
    AddPartition(Partition("data/p2.parquet", 1, 0, 0, 7, 5), data_change=False),
    RemovePartition(PART, deletion_timestamp=1_700_000_000_999, data_change=False),
    RemovePartition(PART, deletion_timestamp=1_700_000_000_999, data_change=True, deletes_all_rows=True),
    ChangeFile("_ct_changes/change-abc-00002.parquet", 2180, 10, 1_700_000_000_500, "ab" * 16, STATS),
    ChangeFile("_ct_changes/c.parquet", 0, 1, 5),
    SetTransaction(app_id="stream-1", version=42, last_updated=1_700_000_000_000),
    CheckpointHeader(version=7, timestamp=1_700_000_000_123, next_row_id=110, num_partitions=1),
]


def _line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _entry(*objs) -> bytes:
    return b"".join(_line(o) for o in objs)


def _add_body(**override):
    body = action_to_json(AddPartition(PART))["add"]
    body.update(override)
    return body


COMMIT = {"commitInfo": {"timestamp": 1, "operation": "WRITE"}}


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("action", ALL_ACTIONS, ids=lambda a: type(a).__name__)
def test_round_trip_each_action(action):
    data = encode_actions([action])
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert decode_actions(data, where=WHERE) == [action]


def test_round_trip_entry_keeps_order():
    data = encode_actions(ALL_ACTIONS)
    assert decode_actions(data, where=WHERE) == ALL_ACTIONS
    # One action per line, each an object with exactly one key.
    keys = [next(iter(json.loads(line))) for line in data.decode().splitlines()]
    assert keys == ["commitInfo", "protocol", "metadata", "add", "add", "remove", "remove", "change", "change", "txn", "checkpoint"]


def test_minimal_commit_info_defaults():
    (ci,) = decode_actions(_entry(COMMIT), where=WHERE)
    assert ci == CommitInfo(timestamp=1, operation="WRITE")
    assert ci.read_version is None and ci.data_change is True


def test_stats_keys_are_field_ids():
    body = action_to_json(AddPartition(PART))["add"]["stats"]
    assert body["minValues"] == {"1": 0, "2": "a", "9": -1.5}
    assert body["nullCount"]["2147483540"] == 10


# ---------------------------------------------------------------- decode errors


def _assert_where(err: CorruptLogError, line: int) -> None:
    msg = str(err)
    assert WHERE in msg, msg
    assert re.search(rf"\bline {line}\b", msg), msg


def test_invalid_json_names_file_and_line():
    data = _entry(COMMIT) + b'{"add": {"path": \n'
    with pytest.raises(CorruptLogError, match="invalid JSON") as ei:
        decode_actions(data, where=WHERE)
    _assert_where(ei.value, 2)


def test_invalid_utf8():
    with pytest.raises(CorruptLogError, match="UTF-8") as ei:
        decode_actions(b'{"commitInfo": "\xff"}\n', where=WHERE)
    assert WHERE in str(ei.value)


@pytest.mark.parametrize(
    "data",
    [
        _entry(COMMIT).rstrip(b"\n"),  # complete JSON, missing the final newline
        _entry(COMMIT) + b'{"add": {"pa',  # cut mid-line
    ],
)
def test_truncated_entry(data):
    with pytest.raises(CorruptLogError, match="truncated") as ei:
        decode_actions(data, where=WHERE)
    msg = str(ei.value)
    assert WHERE in msg and "line" in msg


@pytest.mark.parametrize(
    "field", ["path", "sizeBytes", "numRecords", "firstRowId", "defaultRowVersion", "modificationTime", "dataChange"]
)
def test_missing_required_add_field(field):
    body = _add_body()
    del body[field]
    with pytest.raises(CorruptLogError, match=f"required field '{field}' is missing") as ei:
        decode_actions(_entry(COMMIT, {"add": body}), where=WHERE)
    _assert_where(ei.value, 2)


@pytest.mark.parametrize(
    "line, match",
    [
        ({"commitInfo": {"operation": "WRITE"}}, "'timestamp' is missing"),
        ({"protocol": {"minReaderVersion": 1}}, "'minWriterVersion' is missing"),
        ({"txn": {"appId": "a", "version": 1}}, "'lastUpdated' is missing"),
        ({"metadata": {"tableId": "t", "createdTime": 1}}, "'schema' is missing"),
        ({"remove": {k: v for k, v in _add_body().items()}}, "'deletionTimestamp' is missing"),
        ({"checkpoint": {"version": 1, "timestamp": 1, "nextRowId": 0}}, "'numPartitions' is missing"),
    ],
)
def test_missing_required_fields_other_actions(line, match):
    with pytest.raises(CorruptLogError, match=match) as ei:
        decode_actions(_entry(COMMIT, line), where=WHERE)
    _assert_where(ei.value, 2)


@pytest.mark.parametrize(
    "override, match",
    [
        ({"numRecords": "10"}, "'numRecords' should be int"),
        ({"numRecords": True}, "'numRecords' should be int"),
        ({"numRecords": 10.0}, "'numRecords' should be int"),
        ({"sizeBytes": [1]}, "'sizeBytes' should be int"),
        ({"path": 5}, "'path' should be str"),
        ({"dataChange": "yes"}, "'dataChange' should be bool"),
        ({"checksum": 12}, "'checksum' should be str"),
        ({"firstRowId": -1}, "'firstRowId' must be >= 0"),
        ({"stats": {"numRecords": 11}}, "stats.numRecords 11 != numRecords 10"),
        ({"stats": {"numRecords": 10, "nullCount": {"1": -2}}}, "must be a long >= 0"),
        ({"stats": {"numRecords": 10, "nullCount": {"x": 1}}}, "keys must be field ids"),
        ({"stats": [1]}, "stats must be an object"),
    ],
)
def test_wrong_field_type(override, match):
    with pytest.raises(CorruptLogError, match=match) as ei:
        decode_actions(_entry(COMMIT, {"add": _add_body(**override)}), where=WHERE)
    _assert_where(ei.value, 2)


def test_wrong_type_in_commit_info_and_metadata():
    with pytest.raises(CorruptLogError, match="'timestamp' should be int") as ei:
        decode_actions(_entry({"commitInfo": {"timestamp": "now", "operation": "X"}}), where=WHERE)
    _assert_where(ei.value, 1)
    md = action_to_json(ALL_ACTIONS[2])
    md["metadata"]["properties"] = {"a": 1}
    with pytest.raises(CorruptLogError, match="properties must map strings to strings") as ei:
        decode_actions(_entry(COMMIT, md), where=WHERE)
    _assert_where(ei.value, 2)
    proto = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 1, "readerFeatures": [1]}}
    with pytest.raises(CorruptLogError, match="feature names must be strings"):
        decode_actions(_entry(COMMIT, proto), where=WHERE)


@pytest.mark.parametrize(
    "line",
    [
        {"add": "not an object"},
        {"commitInfo": [1, 2]},
        {"add": {}, "remove": {}},  # two keys on one line
        [1, 2],
        "just a string",
    ],
)
def test_malformed_lines(line):
    with pytest.raises(CorruptLogError) as ei:
        decode_actions(_entry(COMMIT, line), where=WHERE)
    _assert_where(ei.value, 2)


@pytest.mark.parametrize("path", ["../x", "/abs", "s3://b/k", "a//b", "a\\b", "./x", "data/../../x", "data/", "", "C:x"])
@pytest.mark.parametrize("kind", ["add", "remove"])
def test_unsafe_paths_rejected(path, kind):
    body = _add_body(path=path)
    if kind == "remove":
        body["deletionTimestamp"] = 5
    with pytest.raises(CorruptLogError) as ei:
        decode_actions(_entry(COMMIT, {kind: body}), where=WHERE)
    _assert_where(ei.value, 2)


def test_safe_nested_path_accepted():
    (_, add) = decode_actions(_entry(COMMIT, {"add": _add_body(path="data/sub/p.parquet")}), where=WHERE)
    assert add.path == "data/sub/p.parquet"


def test_unknown_action_keys_and_fields_ignored():
    body = _add_body(futureField={"x": 1}, anotherOne=[1, 2])
    body["stats"]["futureStat"] = {"1": 5}
    ci = dict(COMMIT["commitInfo"], somethingNew=True)
    data = _entry(
        {"commitInfo": ci},
        {"futureAction": {"a": 1}},
        {"domainMetadata": 5},  # unknown action with a non-object body
        {"add": body},
    )
    actions = decode_actions(data, where=WHERE)
    assert [type(a) for a in actions] == [CommitInfo, AddPartition]
    assert actions[1].partition == PART


def test_blank_lines_ignored():
    assert len(decode_actions(_entry(COMMIT) + b"\n", where=WHERE)) == 1
    assert decode_actions(b"", where=WHERE) == []


# ---------------------------------------------------------------- validate_commit_entry


def _add(version: int) -> AddPartition:
    return AddPartition(Partition("data/p.parquet", 1, 1, 0, version, 0))


def test_validate_returns_commit_info():
    ci = CommitInfo(1, "INSERT")
    assert validate_commit_entry([ci, _add(3)], version=3, where=WHERE) is ci


@pytest.mark.parametrize(
    "actions, version, match",
    [
        ([], 3, "exactly one commitInfo, found 0"),
        ([_add(3)], 3, "exactly one commitInfo, found 0"),
        ([CommitInfo(1, "A"), CommitInfo(2, "B")], 3, "exactly one commitInfo, found 2"),
        ([CommitInfo(1, "CREATE TABLE"), Protocol()], 0, "protocol and metadata"),
        ([CommitInfo(1, "CREATE TABLE"), ALL_ACTIONS[2]], 0, "protocol and metadata"),
        ([CommitInfo(1, "INSERT"), _add(2)], 3, "defaultRowVersion 2, expected the entry's version 3"),
    ],
)
def test_validate_commit_entry_rules(actions, version, match):
    with pytest.raises(CorruptLogError, match=match) as ei:
        validate_commit_entry(actions, version=version, where=WHERE)
    assert WHERE in str(ei.value)


def test_validate_version_zero_ok():
    ci = CommitInfo(1, "CREATE TABLE")
    assert validate_commit_entry([ci, Protocol(), ALL_ACTIONS[2]], version=0, where=WHERE) is ci


# ---------------------------------------------------------------- longs (SPEC §Conventions)


def _int_paths(obj, prefix=()):
    """The path to every integer (not boolean) inside a JSON value."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _int_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _int_paths(v, prefix + (i,))
    elif type(obj) is int:
        yield prefix


def _set(obj, path, value):
    obj = json.loads(json.dumps(obj))
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return obj


LONG_FIELDS = [
    (action, path)
    for action in ALL_ACTIONS
    for path in _int_paths(action_to_json(action))
]


def test_every_integer_of_every_action_is_range_checked():
    """The enumeration covers what the brief of defect 8 names: every long
    field of every action (add on the fast path, remove on the checked one),
    stats counts and bounds, schema field ids, metrics, the checkpoint header."""
    kinds = {path[0] for _, path in LONG_FIELDS}
    assert kinds == {"commitInfo", "protocol", "metadata", "add", "remove", "change", "txn", "checkpoint"}
    leaves = {path[-1] for _, path in LONG_FIELDS}
    assert {"firstRowId", "numRecords", "nextRowId", "id", "elementId", "keyId", "numInsertedRows", "1", "2147483540"} <= leaves


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
@pytest.mark.parametrize("action, path", LONG_FIELDS, ids=lambda x: "/".join(map(str, x)) if isinstance(x, tuple) else None)
def test_integer_beyond_a_long_is_corrupt(action, path, value):
    line = _set(action_to_json(action), path, value)
    with pytest.raises(CorruptLogError, match="fit a long|a long >= 0|must be >= 0|is not a field id") as ei:
        decode_actions(_entry(COMMIT, line), where=WHERE)
    _assert_where(ei.value, 2)


def _coupled(path) -> bool:
    """add/remove numRecords and firstRowId bound each other (their sum) and
    stats.numRecords must equal numRecords: tested on their own below."""
    if path[0] == "change":  # stats.numRecords must equal numRecords
        return path[1:] == ("numRecords",) or path[1:3] == ("stats", "numRecords")
    return path[0] in ("add", "remove") and (path[1] in ("numRecords", "firstRowId") or path[1:3] == ("stats", "numRecords"))


@pytest.mark.parametrize(
    "action, path", [(a, p) for a, p in LONG_FIELDS if not _coupled(p)],
    ids=lambda x: "/".join(map(str, x)) if isinstance(x, tuple) else None,
)
def test_longs_at_the_limit_are_accepted(action, path):
    limit = MAX_FIELD_ID if _is_field_id(path) else 2**63 - 1  # field ids are Parquet's 32-bit field_id
    (_, decoded) = decode_actions(_entry(COMMIT, _set(action_to_json(action), path, limit)), where=WHERE)
    assert _set(action_to_json(decoded), path, 0) == _set(action_to_json(action), path, 0)


def _is_field_id(path) -> bool:
    return path[0] == "metadata" and path[-1] in ("id", "elementId", "keyId", "valueId")


@pytest.mark.parametrize("kind", ["add", "remove"])
@pytest.mark.parametrize("first, n", [(2**63 - 1, 1), (2**62, 2**62), (2**63 - 10, 11)])
def test_first_row_id_plus_num_records_must_fit_a_long(kind, first, n):
    body = _add_body(firstRowId=first, numRecords=n, stats=None)
    if kind == "remove":
        body["deletionTimestamp"] = 5
    with pytest.raises(CorruptLogError, match=f"firstRowId {first} \\+ numRecords {n} .* does not fit a long") as ei:
        decode_actions(_entry(COMMIT, {kind: body}), where=WHERE)
    _assert_where(ei.value, 2)
    ok = _add_body(firstRowId=first - n, numRecords=n, stats=None)  # the last id is 2**63 - 2: fine
    assert decode_actions(_entry(COMMIT, {"add": ok}), where=WHERE)[1].partition.first_row_id == first - n


@pytest.mark.parametrize("bound", [math.inf, -math.inf, math.nan, 2**63, -(2**63) - 1])
@pytest.mark.parametrize("key", ["minValues", "maxValues"])
def test_non_finite_or_out_of_range_bound_is_corrupt(key, bound):
    stats = {"numRecords": 10, key: {"1": bound}}
    with pytest.raises(CorruptLogError, match=f"{key}: bound for field 1 is"):
        decode_actions(_entry(COMMIT, {"add": _add_body(stats=stats)}), where=WHERE)


# ---------------------------------------------------------------- change capture (SPEC §change, §remove)


def test_deletes_all_rows_is_written_only_when_true():
    plain = action_to_json(RemovePartition(PART, deletion_timestamp=1, data_change=True))["remove"]
    marked = action_to_json(RemovePartition(PART, deletion_timestamp=1, data_change=True, deletes_all_rows=True))
    assert "deletesAllRows" not in plain
    assert marked["remove"]["deletesAllRows"] is True
    assert decode_actions(_line(marked), where=WHERE)[0].deletes_all_rows is True
    with pytest.raises(CorruptLogError, match="deletesAllRows"):
        decode_actions(_line({"remove": {**plain, "deletesAllRows": "yes"}}), where=WHERE)


def _change_body(**override):
    body = action_to_json(ChangeFile("_ct_changes/c.parquet", 10, 2, 5, "ab" * 16, None))["change"]
    body.update(override)
    return body


@pytest.mark.parametrize("path", ["data/c.parquet", "c.parquet", "_ct_changesx/c.parquet", "_ct_log/c.parquet"])
def test_a_change_outside_the_changes_directory_is_corrupt(path):
    with pytest.raises(CorruptLogError, match=r"change file must be under _ct_changes/"):
        decode_actions(_line({"change": _change_body(path=path)}), where=WHERE)


@pytest.mark.parametrize("field, value, match", [
    ("numRecords", 0, "numRecords of change file .* must be >= 1"),
    ("sizeBytes", -1, "sizeBytes"),
    ("path", "../x.parquet", "path"),
])
def test_malformed_change_fields_are_corrupt(field, value, match):
    with pytest.raises(CorruptLogError, match=match):
        decode_actions(_line({"change": _change_body(**{field: value})}), where=WHERE)


@pytest.mark.parametrize("field", ["path", "sizeBytes", "numRecords", "modificationTime"])
def test_missing_required_change_field(field):
    body = _change_body()
    del body[field]
    with pytest.raises(CorruptLogError, match=field):
        decode_actions(_line({"change": body}), where=WHERE)


def test_an_add_under_the_changes_directory_is_corrupt():
    info = CommitInfo(timestamp=1, operation="WRITE", operation_parameters={}, read_version=6, data_change=True)
    add = AddPartition(Partition("_ct_changes/p.parquet", 1, 1, 0, 7, 5), data_change=True)
    with pytest.raises(CorruptLogError, match="names a change file"):
        validate_commit_entry([info, add], version=7, where=WHERE)
    change = ChangeFile("_ct_changes/p.parquet", 1, 1, 5)
    with pytest.raises(CorruptLogError, match="more than one add/remove/change"):
        validate_commit_entry(
            [info, AddPartition(Partition("data/p.parquet", 1, 1, 0, 7, 5)), change, change], version=7, where=WHERE
        )


# ---------------------------------------------------------------- writing what readers read (issue 26)


def _attr(key) -> str:
    return re.sub(r"([A-Z])", r"_\1", key).lower()


def _replace_at(obj, path, value):
    """``obj`` (an action, a dataclass inside one, a dict or a tuple) with the
    value at the JSON ``path`` of its :func:`action_to_json` replaced."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(obj, dict):
        k = int(key) if obj and isinstance(next(iter(obj)), int) else key
        return {**obj, k: _replace_at(obj[k], rest, value)}
    if isinstance(obj, tuple):
        return obj[:key] + (_replace_at(obj[key], rest, value),) + obj[key + 1:]
    if isinstance(obj, (AddPartition, RemovePartition)) and not hasattr(obj, _attr(key)):
        return dataclasses.replace(obj, partition=_replace_at(obj.partition, path, value))
    return dataclasses.replace(obj, **{_attr(key): _replace_at(getattr(obj, _attr(key)), rest, value)})


def _refused(fn) -> bool:
    try:
        fn()
    except (CorruptLogError, InvalidArgumentError):
        return True
    return False


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30, -1, True, 2**63 - 1])
@pytest.mark.parametrize("action, path", LONG_FIELDS, ids=lambda x: "/".join(map(str, x)) if isinstance(x, tuple) else None)
def test_the_codec_refuses_to_write_exactly_what_it_refuses_to_read(action, path, value):
    """SPEC §Conventions, writer requirements: a writer MUST NOT write a
    value its readers refuse. For every integer of every action, at and
    beyond the long range, negative, a bool: encoding the action raises
    InvalidArgumentError exactly when decoding its JSON raises
    CorruptLogError (same check, same code), naming the field."""
    bad = _replace_at(action, path[1:], value)
    assert action_to_json(bad) == _set(action_to_json(action), path, value)  # the helper built the action meant
    reader_refuses = _refused(lambda: decode_actions(_entry(COMMIT, action_to_json(bad)), where=WHERE))
    with_writer = _refused(lambda: encode_actions([bad]))
    assert with_writer == reader_refuses
    if with_writer:
        with pytest.raises(InvalidArgumentError, match=re.escape(path[0])):
            encode_actions([bad])


@pytest.mark.parametrize("parameters, match", [
    ({"a": float("nan")}, "finite"),
    ({"a": [1, float("inf")]}, "finite"),
    ({"a": 2**63}, r"commitInfo\['operationParameters'\]\['a'\] must be an int"),
    ({"a": {1, 2}}, "must be a JSON value"),
    ({1: "a"}, "str keys"),
    ({"a": object()}, "must be a JSON value"),
])
def test_free_form_values_readers_could_not_read_are_not_written(parameters, match):
    info = CommitInfo(1, "WRITE", operation_parameters=parameters)
    with pytest.raises(InvalidArgumentError, match=match):
        encode_entry([info])


def test_nesting_beyond_the_limit_is_not_written_and_reads_as_corrupt_beyond_the_parser():
    from ctfile.format.log_values import MAX_JSON_DEPTH

    deep: object = "x"
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep]
    ok = encode_entry([CommitInfo(1, "WRITE", operation_parameters={"a": [[[["x"]]]]})])
    assert decode_actions(ok, where=WHERE)[0].operation_parameters == {"a": [[[["x"]]]]}
    with pytest.raises(InvalidArgumentError, match=f"nests deeper than {MAX_JSON_DEPTH}"):
        encode_entry([CommitInfo(1, "WRITE", operation_parameters={"a": deep})])
    line = '{"commitInfo":{"timestamp":1,"operation":"W","operationParameters":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}}\n"
    with pytest.raises(CorruptLogError, match="nested too deeply"):
        decode_actions(line.encode(), where=WHERE)
