"""The public API: create_table, open_table, Table."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile import (
    CtfileError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def test_create_and_open(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, name="orders", description="d",
                            properties={"owner": "me"})
    assert t.version == 0
    assert t.schema.equals(SCHEMA)
    assert (tmp_path / "t" / "_ct_log" / "00000000000000000000.json").is_file()
    t2 = ctfile.open_table(str(tmp_path / "t"))
    assert t2.version == 0 and t2.schema.equals(SCHEMA)
    assert t2.properties == {"owner": "me"}
    md = t2.snapshot().metadata
    assert (md.name, md.description) == ("orders", "d")
    assert t2.uri == str(tmp_path / "t")
    assert "version=0" in repr(t2)


def test_create_on_existing_table(tmp_path):
    ctfile.create_table(tmp_path / "t", SCHEMA)
    before = (tmp_path / "t" / "_ct_log" / "00000000000000000000.json").read_bytes()
    with pytest.raises(TableExistsError):
        ctfile.create_table(tmp_path / "t", pa.schema([("other", pa.int32())]))
    assert (tmp_path / "t" / "_ct_log" / "00000000000000000000.json").read_bytes() == before


@pytest.mark.parametrize("setup", ["missing", "empty", "empty-log", "other-files"])
def test_open_table_not_found(tmp_path, setup):
    root = tmp_path / "t"
    if setup != "missing":
        root.mkdir()
    if setup == "empty-log":
        (root / "_ct_log").mkdir()
    if setup == "other-files":
        (root / "_ct_log").mkdir()
        (root / "_ct_log" / "notes.txt").write_text("hi")
        (root / "data").mkdir()
    with pytest.raises(TableNotFoundError):
        ctfile.open_table(root)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"uri": 123}, "uri must be"),
        ({"uri": ""}, "uri must be"),
        ({"uri": None}, "uri must be"),
        ({"schema": {"id": "long"}}, "schema must be a pyarrow.Schema"),
        ({"schema": pa.schema([("id", pa.int64())]).empty_table()}, "schema must be a pyarrow.Schema"),
        ({"partition_rows": 0}, "partition_rows"),
        ({"partition_rows": -5}, "partition_rows"),
        ({"partition_rows": 1.5}, "partition_rows"),
        ({"partition_rows": True}, "partition_rows"),
        ({"properties": {"a": 1}}, "properties"),
        ({"properties": {"a": None}}, "properties"),
        ({"properties": {1: "a"}}, "properties"),
        ({"compression": "zip"}, "compression"),
        ({"storage_options": "anon"}, "storage_options"),
    ],
)
def test_create_table_bad_arguments(tmp_path, kwargs, match):
    root = tmp_path / "t"
    args = {"uri": root, "schema": SCHEMA, **kwargs}
    uri = args.pop("uri")
    schema = args.pop("schema")
    with pytest.raises(InvalidArgumentError, match=match):
        ctfile.create_table(uri, schema, **args)
    assert not root.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "schema",
    [
        pa.schema([("_ct_row_id", pa.int64())]),
        pa.schema([("METADATA$ACTION", pa.string())]),
        pa.schema([("a", pa.int64()), ("a", pa.int64())]),
        pa.schema([("u", pa.uint64())]),
        pa.schema([]),
    ],
)
def test_create_table_bad_schema(tmp_path, schema):
    with pytest.raises(SchemaMismatchError):
        ctfile.create_table(tmp_path / "t", schema)
    assert list(tmp_path.iterdir()) == []


def test_errors_are_ctfile_errors():
    assert issubclass(InvalidArgumentError, ValueError)
    for e in (InvalidArgumentError, TableExistsError, TableNotFoundError, SchemaMismatchError,
              ctfile.VersionNotFoundError, ctfile.StaleIntervalError, ctfile.CorruptLogError,
              ctfile.UnsupportedFeatureError, ctfile.CommitConflictError):
        assert issubclass(e, CtfileError)
    assert issubclass(ctfile.StaleIntervalError, ctfile.VersionNotFoundError)


def _t(tmp_path) -> ctfile.Table:
    return ctfile.create_table(tmp_path / "t", SCHEMA)


def test_history_newest_first(tmp_path):
    t = _t(tmp_path)
    t.insert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    t.update(pc.field("id") == 2, {"v": "B"})
    t.delete(pc.field("id") == 3)
    t.merge(pa.table({"id": [1, 9], "v": ["A", "i"]}), "id")
    t.set_properties({"k": "v"})
    t.truncate()
    t.overwrite(pa.table({"id": [7], "v": ["x"]}))
    h = t.history()
    assert [e.version for e in h] == list(range(7, -1, -1))
    assert [e.operation for e in h] == [
        "OVERWRITE", "TRUNCATE", "SET TBLPROPERTIES", "MERGE", "DELETE", "UPDATE", "INSERT", "CREATE TABLE",
    ]
    by_op = {e.operation: e for e in h}
    assert by_op["INSERT"].operation_metrics["numInsertedRows"] == 3
    assert by_op["INSERT"].operation_metrics["numAddedPartitions"] == 1
    assert by_op["UPDATE"].operation_metrics["numUpdatedRows"] == 1
    assert by_op["UPDATE"].operation_parameters["set"] == {"v": "B"}
    assert by_op["DELETE"].operation_metrics["numDeletedRows"] == 1
    assert by_op["MERGE"].operation_metrics["numInsertedRows"] == 1
    assert by_op["MERGE"].operation_metrics["numUpdatedRows"] == 1
    assert by_op["TRUNCATE"].operation_metrics["numDeletedRows"] == 3
    assert by_op["OVERWRITE"].operation_metrics["numInsertedRows"] == 1
    assert by_op["SET TBLPROPERTIES"].operation_parameters == {"properties": {"k": "v"}}
    assert by_op["CREATE TABLE"].data_change is False and by_op["CREATE TABLE"].read_version is None
    assert by_op["DELETE"].read_version == 2
    assert "id" in by_op["DELETE"].operation_parameters["predicate"]
    ts = [e.timestamp for e in h]
    assert all(isinstance(x, dt.datetime) and x.tzinfo is not None for x in ts)
    assert ts == sorted(ts, reverse=True) and len(set(ts)) == len(ts)
    assert [e.version for e in t.history(limit=3)] == [7, 6, 5]
    assert [e.version for e in t.history(limit=100)] == list(range(7, -1, -1))
    for bad in (0, -1, "2", True):
        with pytest.raises(InvalidArgumentError):
            t.history(limit=bad)


def test_history_sees_other_writers(tmp_path):
    t = _t(tmp_path)
    other = ctfile.open_table(t.uri)
    other.insert(pa.table({"id": [1], "v": ["a"]}))
    assert t.history()[0].version == 1  # history refreshes
    assert t.version == 1


def test_set_properties(tmp_path):
    t = _t(tmp_path)
    t.insert(pa.table({"id": [1], "v": ["a"]}))
    r = t.set_properties({"owner": "me", "ctfile.checkpointInterval": "3"})
    assert (r.version, r.committed, r.operation) == (2, True, "SET TBLPROPERTIES")
    t.set_properties({"owner": "you"})
    reopened = ctfile.open_table(t.uri)
    assert reopened.properties == {"owner": "you", "ctfile.checkpointInterval": "3"}
    assert reopened.to_arrow().num_rows == 1
    assert reopened.snapshot(2).metadata.properties["owner"] == "me"
    assert reopened.schema.equals(SCHEMA)
    # The new checkpoint interval takes effect (version 3 is a multiple of 3).
    assert (tmp_path / "t" / "_ct_log" / "00000000000000000003.checkpoint.parquet").is_file()
    for bad in ({"a": 1}, {1: "a"}, "a=b", None):
        with pytest.raises(InvalidArgumentError):
            t.set_properties(bad)
    assert ctfile.open_table(t.uri).version == 3


def test_table_caches_state_until_refresh(tmp_path):
    t = _t(tmp_path)
    assert t.version == 0
    other = ctfile.open_table(t.uri)
    other.insert(pa.table({"id": [1], "v": ["a"]}))
    assert t.version == 0  # cached
    assert t.refresh().version == 1
    assert t.snapshot().num_records == 1  # snapshot() refreshes
    # A write from a stale Table object rebases onto the newer version.
    stale = ctfile.open_table(t.uri)
    other.insert(pa.table({"id": [2], "v": ["b"]}))
    r = stale.insert(pa.table({"id": [3], "v": ["c"]}))
    assert r.version == 3
    assert sorted(stale.to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_table_to_arrow_shorthand(tmp_path):
    t = _t(tmp_path)
    t.insert(pa.table({"id": [2, 1], "v": ["b", "a"]}))
    assert t.to_arrow(filter=pc.field("id") == 1).to_pylist() == [{"id": 1, "v": "a"}]


def test_pathlike_and_file_uri(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(pa.table({"id": [1], "v": ["a"]}))
    assert ctfile.open_table(f"file://{tmp_path / 't'}").to_arrow().num_rows == 1


def test_memory_filesystem_table(make_rows):
    import uuid

    import fsspec

    uri = f"memory://ctfile-unit-{uuid.uuid4().hex}"
    try:
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())])
        t = ctfile.create_table(uri, schema, partition_rows=4)
        t.insert(make_rows(10))
        t.delete(pc.field("id") == 3)
        t.update(pc.field("id") == 4, {"x": -4})
        t2 = ctfile.open_table(uri)
        got = t2.to_arrow().sort_by("id")
        assert got.column("id").to_pylist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]
        assert got.column("x").to_pylist()[3] == -4
        assert t2.snapshot(1).to_arrow().num_rows == 10
        with pytest.raises(TableExistsError):
            ctfile.create_table(uri, schema)
    finally:
        fs = fsspec.filesystem("memory")
        root = uri[len("memory://"):]
        if fs.exists(root):
            fs.rm(root, recursive=True)


# ---------------------------------------------------------------- checkpoint()


def test_checkpoint_now(tmp_path):
    """Table.checkpoint() writes the latest version's checkpoint and moves the
    hint; a reader then needs only it and the entries after it."""
    import pyarrow.parquet as pq

    from ctfile.format.paths import checkpoint_path, commit_path

    root = tmp_path / "t"
    t = ctfile.create_table(root, SCHEMA)
    for i in range(4):
        t.insert(pa.table({"id": [i, 10 + i], "v": [f"v{i}", None]}, schema=SCHEMA))
    t.update(pc.field("id") == 1, {"v": "one"})
    assert t.log.list().checkpoints == []  # the default interval (100) is far away
    expected = t.snapshot().to_arrow(include_hidden=True).sort_by("id")

    info = t.checkpoint()
    assert (info.version, info.path, info.num_partitions) == (5, checkpoint_path(5), 4)
    assert info.size_bytes == (root / info.path).stat().st_size
    assert pq.read_table(root / info.path).num_rows == 4
    assert t.log.read_hint() == 5 and t.log.list().checkpoints == [5]
    # Only the checkpoint can rebuild version 5 now (as after a vacuum).
    for v in range(5):
        (root / commit_path(v)).unlink()
    t2 = ctfile.open_table(root)
    assert t2.version == 5
    assert t2.snapshot().to_arrow(include_hidden=True).sort_by("id").equals(expected)
    t2.insert(pa.table({"id": [99], "v": ["x"]}, schema=SCHEMA))
    assert t2.to_arrow().num_rows == 9 and t2.history()[-1].version == 5


def test_checkpoint_of_an_older_version_and_again(tmp_path):
    root = tmp_path / "t"
    t = ctfile.create_table(root, SCHEMA)
    for i in range(3):
        t.insert(pa.table({"id": [i], "v": ["a"]}, schema=SCHEMA))
    older = t.checkpoint(version=2)
    assert (older.version, older.num_partitions) == (2, 2)
    assert t.log.read_hint() == 2
    assert t.checkpoint().version == 3 and t.log.read_hint() == 3
    # Checkpointing an older version again neither fails nor moves the hint back.
    before = (root / older.path).read_bytes()
    assert t.checkpoint(version=2).size_bytes == len(before)
    assert t.log.read_hint() == 3
    assert t.log.read_checkpoint(2) == t.log.load_state(2)
    assert t.checkpoint(version=0).num_partitions == 0


def test_checkpoint_errors(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA))
    for bad in ("1", 1.0, True):
        with pytest.raises(InvalidArgumentError, match="version must be an int"):
            t.checkpoint(version=bad)
    with pytest.raises(ctfile.VersionNotFoundError, match="version 7"):
        t.checkpoint(version=7)
    with pytest.raises(TypeError):
        t.checkpoint(1)  # keyword-only
    assert t.log.list().checkpoints == []


def test_checkpoint_sees_other_writers(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    other = ctfile.open_table(tmp_path / "t")
    other.insert(pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA))
    assert t.checkpoint().version == 1


# ---------------------------------------------------------------- time travel by timestamp


def test_snapshot_timestamp_after_the_latest_commit_is_refused(tmp_path):
    # SPEC §Log replay: what a timestamp after the latest commit resolves to
    # is not settled (the next commit may still fall before it), so it is an
    # error, as in Delta Lake; the latest commit's own time reads it.
    ms = dt.timedelta(milliseconds=1)
    t = _t(tmp_path)
    created = t.history()[0].timestamp
    assert t.snapshot(timestamp=created).version == 0  # a table with one version
    with pytest.raises(ctfile.VersionNotFoundError, match="version 0, committed at"):
        t.snapshot(timestamp=created + ms)
    t.insert(pa.table({"id": [1], "v": ["a"]}))
    t.insert(pa.table({"id": [2], "v": ["b"]}))
    latest = t.history()[0].timestamp
    assert t.snapshot(timestamp=latest).version == 2
    assert t.snapshot(timestamp=latest.isoformat()).version == 2
    for later in (latest + ms, dt.datetime(2999, 1, 1)):
        with pytest.raises(ctfile.VersionNotFoundError) as ei:
            t.snapshot(timestamp=later)
        msg = str(ei.value)
        asked = later if later.tzinfo else later.replace(tzinfo=dt.timezone.utc)
        assert f"timestamp {asked.isoformat(timespec='milliseconds')} is after the latest version available" in msg
        assert f"version 2, committed at {latest.isoformat(timespec='milliseconds')}" in msg
        assert t.uri in msg
    # Once a later commit exists, the same timestamp resolves, and for good.
    t.insert(pa.table({"id": [3], "v": ["c"]}))
    commits = {e.version: e.timestamp for e in t.history()}
    expected = max(v for v, ts in commits.items() if ts <= latest + ms)
    assert t.snapshot(timestamp=latest + ms).version == expected
    # Change scans keep their rule (SPEC §Change scans): an end after the
    # latest commit selects up to the latest, a start after it is empty.
    cs = t.changes(start_version=1, end_timestamp=dt.datetime(2999, 1, 1))
    assert (cs.start_version, cs.end_version) == (1, 3)
    cs = t.changes(start_timestamp=dt.datetime(2999, 1, 1))
    assert (cs.start_version, cs.end_version) == (4, 3) and cs.to_arrow().num_rows == 0


def test_write_job_for_a_new_table_validates_properties(tmp_path):
    with pytest.raises(InvalidArgumentError, match="table property ctfile.partitionRows must be a positive integer, found 'big'"):
        ctfile.WriteJob.for_new_table(str(tmp_path / "t"), SCHEMA, properties={"ctfile.partitionRows": "big"})
    assert not (tmp_path / "t").exists()
    job = ctfile.WriteJob.for_new_table(str(tmp_path / "t"), SCHEMA, properties={"ctfile.partitionRows": "1", "owner": "me"})
    job.commit(job.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA)))
    t = ctfile.open_table(tmp_path / "t")
    assert t.properties == {"ctfile.partitionRows": "1", "owner": "me"}
    assert [p.num_records for p in t.snapshot().partitions] == [1, 1]


def test_a_table_object_held_across_a_vacuum_refreshes_from_the_retained_history(tmp_path):
    """A vacuum (by another process) expired entries this object had not
    read: refresh starts again from the retained checkpoint instead of
    failing on the first missing entry."""
    import pyarrow as pa

    from ctfile.log.vacuum import vacuum

    uri = str(tmp_path / "t")
    held = ctfile.create_table(uri, pa.schema([("id", pa.int64())]))
    other = ctfile.open_table(uri)
    for i in range(3):
        other.insert(pa.table({"id": [i]}))
    vacuum(other.log, retain=0, grace_period=0, now_ms=other.log.commit_info(other.version).timestamp + 1)
    assert other.log.oldest_version() == 3
    assert held.refresh().version == 3 and sorted(held.to_arrow().column("id").to_pylist()) == [0, 1, 2]
