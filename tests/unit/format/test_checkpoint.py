"""ctfile.format.checkpoint (checkpoint state <-> Arrow table) and the lazy
statistics of ctfile.format.actions.Partition (SPEC §Checkpoints)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctfile.format.actions import (
    AddPartition,
    CheckpointHeader,
    CommitInfo,
    DeferredStats,
    Metadata,
    Partition,
    PartitionStats,
    Protocol,
    RemovePartition,
    SetTransaction,
    partitions_from_columns,
    pending_stats_text,
)
from ctfile.format.checkpoint import (
    CHECKPOINT_SCHEMA,
    COLUMNS,
    METADATA_KEY,
    OPTIONAL_COLUMNS,
    checkpoint_from_arrow,
    checkpoint_to_arrow,
)
from ctfile.format.codec import decode_actions, encode_actions, stats_from_text, stats_to_text
from ctfile.format.errors import CorruptLogError
from ctfile.format.schema import ArrayType, Field, MapType, Schema, StructType

WHERE = "mem://t/_ct_log/00000000000000000009.checkpoint.parquet"

SCHEMA = Schema(
    (
        Field(1, "id", "long", False),
        Field(2, "name", "string", True, {"comment": "ünïcode"}),
        Field(3, "tags", ArrayType(4, "string", True)),
        Field(5, "attrs", MapType(6, "string", 7, "decimal(10,2)", False)),
        Field(8, "point", StructType((Field(9, "x", "double"), Field(10, "y", "double")))),
    )
)
METADATA = Metadata("t-1", SCHEMA, 1_600_000_000_000, {"ctfile.checkpointInterval": "3", "k": "v"}, "orders", "d")
STATS = PartitionStats(
    num_records=10,
    min_values={1: 0, 2: "a\u2028b", 9: -1.5},  # U+2028 is raw inside the JSON text
    max_values={1: 9, 2: "zz", 9: 2.25},
    null_count={1: 0, 2: 3, 2147483540: 10, 2147483539: 10},
    nan_count={9: 1},
)
PARTS = [
    Partition("data/part-a-00001.parquet", 1234, 10, 100, 7, 1_700_000_000_000, "0123456789abcdef" * 2, STATS),
    Partition("data/part-b-00001.parquet", 1, 0, 110, 8, 5),  # no checksum, no stats
    Partition("data/sub dir/ünï.parquet", 7, 3, 0, 2, 6, None, PartitionStats(3)),  # not a plain writer path
]
TXNS = [SetTransaction("stream-1", 42, 1_700_000_000_000), SetTransaction("stream-2", 0, 1)]


def _head(num_partitions: int = len(PARTS), version: int = 9, next_row_id: int = 110, txns=TXNS) -> list:
    return [CheckpointHeader(version, 1_700_000_000_123, next_row_id, num_partitions), Protocol(), METADATA, *txns]


def _table(parts=PARTS, **kw) -> pa.Table:
    return checkpoint_to_arrow(_head(len(parts), **kw), parts)


def _with_metadata_lines(t: pa.Table, fn) -> pa.Table:
    lines = [json.loads(x) for x in t.schema.metadata[METADATA_KEY.encode()].decode().splitlines()]
    lines = fn(lines)
    return t.replace_schema_metadata({METADATA_KEY: "".join(json.dumps(x) + "\n" for x in lines)})


def _set(t: pa.Table, name: str, values, typ=None) -> pa.Table:
    arr = pa.array(values, type=typ or t.schema.field(name).type)
    return t.set_column(t.schema.get_field_index(name), pa.field(name, arr.type), arr)


# ---------------------------------------------------------------- round trips


def test_round_trip_through_parquet():
    t = _table()
    # Without a re-added partition, the optional restoredRowVersion column is
    # left out: the file is what earlier revisions wrote.
    assert t.schema.remove_metadata() == pa.schema([f for f in CHECKPOINT_SCHEMA if f.name not in OPTIONAL_COLUMNS])
    assert t.schema.names == [c[0] for c in COLUMNS if c[0] not in OPTIONAL_COLUMNS]
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink, compression="zstd")
    back = pq.read_table(pa.BufferReader(sink.getvalue()))
    actions, parts = checkpoint_from_arrow(back, where=WHERE)
    assert actions == _head()
    assert parts == PARTS
    assert [hash(p) for p in parts] == [hash(p) for p in PARTS]
    assert [repr(p) for p in parts] == [repr(p) for p in PARTS]


def test_columns_hold_the_add_fields():
    rows = _table().to_pylist()
    assert rows[1] == {
        "path": "data/part-b-00001.parquet", "sizeBytes": 1, "numRecords": 0, "firstRowId": 110,
        "defaultRowVersion": 8, "modificationTime": 5, "checksum": None, "stats": None,
    }
    # The stats text is the compact JSON of the add line's stats object.
    add = json.loads(encode_actions([AddPartition(PARTS[0])]))["add"]
    assert rows[0]["stats"] == json.dumps(add["stats"], separators=(",", ":"), ensure_ascii=False)
    assert "\u2028" in rows[0]["stats"]
    assert json.loads(rows[2]["stats"]) == {"numRecords": 3}


def test_the_metadata_key_is_a_log_entry_body():
    raw = _table().schema.metadata[METADATA_KEY.encode()]
    assert raw.endswith(b"\n")
    assert decode_actions(raw, where="kv") == _head()
    assert [next(iter(json.loads(x))) for x in raw.decode().splitlines()] == [
        "checkpoint", "protocol", "metadata", "txn", "txn"]


def test_empty_checkpoint():
    actions, parts = checkpoint_from_arrow(_table([], txns=[]), where=WHERE)
    assert parts == [] and actions == _head(0, txns=[])


@pytest.mark.parametrize("bound", [math.inf, -math.inf, math.nan, 2**63])
def test_non_finite_or_out_of_range_bounds_fail_on_first_access(bound):
    """SPEC §Statistics: JSON has no NaN or infinity, and an integer bound is
    a long. (Python's json writes and reads NaN/Infinity; ctfile's writer
    never writes them, encode_bound drops them.)"""
    s = PartitionStats(2, {9: bound}, {9: 1.0}, {9: 0}, {9: 1})
    p = Partition("data/f.parquet", 1, 2, 0, 1, 0, None, s)
    (q,) = checkpoint_from_arrow(_table([p], next_row_id=2), where=WHERE)[1]
    with pytest.raises(CorruptLogError, match="bound for field 9 is .*must fit a long and a number must be finite"):
        q.stats  # noqa: B018


def test_writer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="header"):
        checkpoint_to_arrow([Protocol(), METADATA], [])
    with pytest.raises(ValueError, match="AddPartition"):
        checkpoint_to_arrow([*_head(1), AddPartition(PARTS[0])], [PARTS[0]])
    with pytest.raises(ValueError, match="says 5 partitions, 3 given"):
        checkpoint_to_arrow(_head(5), PARTS)


# ---------------------------------------------------------------- lazy statistics


def test_stats_stay_text_until_read():
    _, parts = checkpoint_from_arrow(_table(), where=WHERE)
    p = parts[0]
    assert pending_stats_text(p) == stats_to_text(STATS)
    assert pending_stats_text(parts[1]) is None and parts[1].stats is None
    s = p.stats
    assert s == STATS and pending_stats_text(p) is None
    assert p.stats is s  # decoded once, then kept
    assert p.fresh_rows == 10


def test_undecoded_stats_are_copied_verbatim():
    """A checkpoint written from partitions read from a checkpoint copies their
    statistics text (any valid formatting) without decoding it."""
    text = json.dumps({"numRecords": 10, "nullCount": {"1": 0}}, indent=1)
    t = _table()
    t = _set(t, "stats", [text, None, '{"numRecords": 3}'])
    _, parts = checkpoint_from_arrow(t, where=WHERE)
    again = checkpoint_to_arrow(_head(), parts)
    assert again.column("stats").to_pylist() == [text, None, '{"numRecords": 3}']
    assert all(pending_stats_text(p) is not None for p in (parts[0], parts[2]))
    # Once decoded, the writer encodes the objects instead.
    assert parts[0].stats == PartitionStats(10, null_count={1: 0})
    assert checkpoint_to_arrow(_head(), parts).column("stats")[0].as_py() == '{"numRecords":10,"nullCount":{"1":0}}'


def test_equality_decodes_both_sides():
    _, a = checkpoint_from_arrow(_table(), where=WHERE)
    _, b = checkpoint_from_arrow(_table(), where=WHERE)
    assert a == b == PARTS
    other = dataclasses.replace(PARTS[0], stats=PartitionStats(10))
    assert a[0] != other
    assert {a[0], PARTS[0]} == {PARTS[0]}


def test_deferred_partitions_pickle_and_copy():
    _, parts = checkpoint_from_arrow(_table(), where=WHERE)
    for clone in (pickle.loads(pickle.dumps(parts[0])), copy.deepcopy(parts[0]), copy.copy(parts[0])):
        assert pending_stats_text(clone) is not None
        assert clone == PARTS[0]


def test_deferred_stats_through_the_constructor_and_the_json_codec():
    p = Partition(PARTS[0].path, 1234, 10, 100, 7, 1_700_000_000_000, PARTS[0].checksum,
                  DeferredStats(stats_to_text(STATS), "cp"))
    assert pending_stats_text(p) is not None
    # An add or remove line of a deferred partition is the same as of the decoded one.
    assert encode_actions([AddPartition(p), RemovePartition(p, 1)]) == encode_actions(
        [AddPartition(PARTS[0]), RemovePartition(PARTS[0], 1)])
    assert decode_actions(encode_actions([AddPartition(p)]), where="e") == [AddPartition(PARTS[0])]
    with pytest.raises(TypeError, match="stats must be"):
        Partition("data/x", 1, 1, 0, 1, 0, None, {"numRecords": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.stats = None


@pytest.mark.parametrize(
    "text, match",
    [
        ("{broken", "invalid JSON"),
        ("[1, 2]", "stats must be an object"),
        ('{"numRecords": 11}', r"numRecords 11 != numRecords 10"),
        ('{"minValues": {}}', "'numRecords' is missing"),
        ('{"numRecords": 10, "nullCount": {"x": 1}}', "keys must be field ids"),
        ('{"numRecords": 10, "nullCount": {"1": -1}}', "must be a long >= 0"),
        ('{"numRecords": 10} trailing', "invalid JSON"),
    ],
)
def test_invalid_stats_text_fails_on_first_access(text, match):
    _, parts = checkpoint_from_arrow(_set(_table(), "stats", [text, None, None]), where=WHERE)
    with pytest.raises(CorruptLogError, match=match) as ei:
        parts[0].stats
    assert WHERE in str(ei.value) and PARTS[0].path in str(ei.value)
    with pytest.raises(CorruptLogError):  # and again: nothing half-decoded was kept
        parts[0] == PARTS[0]  # noqa: B015


def test_stats_from_text_matches_stats_from_json():
    text = stats_to_text(STATS)
    assert stats_from_text(text, "w", num_records=10, path="p") == STATS
    odd = '{"numRecords": 10, "minValues": {"1": 0}, "futureStat": {"1": 2}}'  # unknown keys ignored
    assert stats_from_text(odd, "w", num_records=10, path="p") == PartitionStats(10, {1: 0})


def test_partitions_from_columns_builds_ordinary_partitions():
    cols = [[p.path for p in PARTS], [p.size_bytes for p in PARTS], [p.num_records for p in PARTS],
            [p.first_row_id for p in PARTS], [p.default_row_version for p in PARTS],
            [p.modification_time for p in PARTS], [p.checksum for p in PARTS],
            [None if p.stats is None else stats_to_text(p.stats) for p in PARTS]]
    parts = partitions_from_columns(*cols, where=WHERE)
    assert parts == PARTS and all(type(p) is Partition for p in parts)
    assert dataclasses.replace(parts[0], size_bytes=1).stats == STATS


# ---------------------------------------------------------------- what the reader rejects


BAD_TABLES = {
    "no key": (lambda t: t.replace_schema_metadata(None), "no 'ctfile.checkpoint'"),
    "bad json": (lambda t: t.replace_schema_metadata({METADATA_KEY: "{x\n"}), "invalid JSON"),
    "no header": (lambda t: _with_metadata_lines(t, lambda ls: ls[1:]), "lacks the checkpoint header"),
    "add in metadata": (
        lambda t: _with_metadata_lines(t, lambda ls: ls + [json.loads(encode_actions([AddPartition(PARTS[0])]))]),
        "may hold only"),
    "commitInfo in metadata": (
        lambda t: _with_metadata_lines(t, lambda ls: ls + [json.loads(encode_actions([CommitInfo(1, "X")]))]),
        "may hold only"),
    "row count": (lambda t: t.slice(0, 2), "says 3 partitions, the file holds 2 rows"),
    "missing column": (lambda t: t.drop_columns(["defaultRowVersion"]), "expected one column 'defaultRowVersion', found 0"),
    "repeated column": (lambda t: t.append_column("path", t.column("path")), "expected one column 'path', found 2"),
    "wrong int type": (lambda t: _set(t, "numRecords", [10, 0, 3], pa.int32()), "'numRecords' should be int64"),
    "uint64": (lambda t: _set(t, "modificationTime", [1, 2, 3], pa.uint64()), "should be int64"),
    "string as binary": (lambda t: _set(t, "checksum", [b"x", None, None], pa.binary()), "'checksum' should be string"),
    "null path": (lambda t: _set(t, "path", [None, "data/b", "data/c"]), "'path' holds 1 nulls"),
    "null count": (lambda t: _set(t, "sizeBytes", [1, None, 3]), "'sizeBytes' holds 1 nulls"),
    "negative size": (lambda t: _set(t, "sizeBytes", [1, -1, 3]), "'sizeBytes' must be >= 0, found -1"),
    "negative first": (lambda t: _set(t, "firstRowId", [100, -5, 0]), "'firstRowId' must be >= 0"),
    "future version": (lambda t: _set(t, "defaultRowVersion", [7, 10, 2]), "defaultRowVersion 10 > the checkpoint's version 9"),
    "row ids beyond counter": (lambda t: _set(t, "firstRowId", [105, 110, 0]), "row ids up to 114, beyond nextRowId 110"),
    "overflow": (lambda t: _set(t, "firstRowId", [2**63 - 1, 110, 0]), "overflows"),
    "dotdot path": (lambda t: _set(t, "path", ["data/../../etc", "data/b", "data/c"]), "escapes the table root"),
    "absolute path": (lambda t: _set(t, "path", ["/etc/passwd", "data/b", "data/c"]), "escapes the table root"),
    "scheme path": (lambda t: _set(t, "path", ["s3://x/y", "data/b", "data/c"]), "escapes the table root"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_reader_rejects(case):
    fn, match = BAD_TABLES[case]
    with pytest.raises(CorruptLogError, match=match):
        checkpoint_from_arrow(fn(_table()), where=WHERE)


def test_reader_ignores_unknown_columns_actions_and_order():
    t = _table()
    t = t.append_column("futureColumn", pa.array([1, 2, 3]))
    t = _with_metadata_lines(t, lambda ls: ls + [{"futureAction": {"x": 1}}])
    t = t.select(list(reversed(t.schema.names))).replace_schema_metadata(t.schema.metadata)
    actions, parts = checkpoint_from_arrow(t, where=WHERE)
    assert actions == _head() and parts == PARTS


def test_reader_accepts_large_strings():
    t = _table()
    for name in ("path", "checksum", "stats"):
        t = _set(t, name, t.column(name).to_pylist(), pa.large_string())
    assert checkpoint_from_arrow(t, where=WHERE)[1] == PARTS


def test_writer_paths_take_the_vectorized_check():
    """Plain writer paths pass the regex; others go through validate_relative_path."""
    ok = ["data/part-x-00001.parquet", "data/a.b-c_d", "x/y/z.parquet", "data/.hidden"]
    t = _set(_table([PARTS[1]] * 4, next_row_id=110), "path", ok)
    assert [p.path for p in checkpoint_from_arrow(t, where=WHERE)[1]] == ok


# ---------------------------------------------------------------- re-added partitions (SPEC §Restore)


RESTORED = [*PARTS[:2], dataclasses.replace(PARTS[2], restored_row_version=1)]


def test_restored_row_version_round_trips_in_its_optional_column():
    t = _table(RESTORED)
    assert t.schema.remove_metadata() == CHECKPOINT_SCHEMA  # every column, restoredRowVersion last
    assert t.column("restoredRowVersion").to_pylist() == [None, None, 1]
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    _, parts = checkpoint_from_arrow(pq.read_table(pa.BufferReader(sink.getvalue())), where=WHERE)
    assert parts == RESTORED
    assert [p.inherited_row_version for p in parts] == [7, 8, 1]


@pytest.mark.parametrize("value, what", [(-1, "must be >= 0"), (2, "not below its defaultRowVersion")])
def test_bad_restored_row_versions_are_rejected(value, what):
    t = _set(_table(RESTORED), "restoredRowVersion", [None, None, value])
    with pytest.raises(CorruptLogError, match=what):
        checkpoint_from_arrow(t, where=WHERE)
