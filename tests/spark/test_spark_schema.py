"""Schema evolution through Spark (SPEC §Schema evolution, §Change scans):
``mergeSchema`` and ``overwriteSchema`` on batch writes, the streaming
source across schema changes (``allowSchemaChanges``), the sink with
``mergeSchema``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import ctfile
from spark_helpers import Collector, id_x_table, read, sorted_rows

ACTION, ISUPDATE = "METADATA$ACTION", "METADATA$ISUPDATE"
BASE = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.int32()), ("name", pa.string())])


def data_files(root) -> set[str]:
    d = Path(root) / "data"
    return {p.name for p in d.iterdir()} if d.exists() else set()


def base_table(root) -> ctfile.Table:
    t = ctfile.create_table(str(root), BASE)
    t.insert(pa.table({"id": [1, 2], "n": pa.array([10, 20], pa.int32()), "name": ["a", "b"]}, schema=BASE))
    return t


def save(df, path, mode="append", **options):
    w = df.write.format("ctfile").mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    w.save(str(path))


def refused(t: ctfile.Table, df, **options) -> str:
    """The message of a write of ``df`` into ``t`` that must fail and leave
    ``t`` untouched (same version, schema and data files)."""
    before = (t.refresh().version, t.schema, data_files(t.uri))
    with pytest.raises(Exception) as ei:
        save(df, t.uri, **options)
    assert (t.refresh().version, t.schema, data_files(t.uri)) == before
    return str(ei.value)


# ---------------------------------------------------------------- batch reads


def test_a_dataframe_defined_before_a_schema_change_refuses_to_read_after_it(spark, tmp_path):
    """Spark fixes a DataFrame's schema when it is defined; a read planned
    after a rename must not hand it columns matched by position."""
    t = base_table(tmp_path / "t")
    snap = spark.read.format("ctfile").load(t.uri)
    changes = spark.read.format("ctfile").option("changes", "default").option("startingVersion", 1).load(t.uri)
    with t.update_schema() as u:
        u.add_column("email", pa.string())
    assert sorted(r["name"] for r in snap.collect()) == ["a", "b"]  # added columns are left out
    with pytest.raises(Exception, match="define the DataFrame again"):
        changes.collect()  # a change scan's rows hold every column
    before_rename = spark.read.format("ctfile").load(t.uri)
    with t.update_schema() as u:
        u.rename_column("name", "full_name").move_column("email", first=True)
    with pytest.raises(Exception, match="define the DataFrame again"):
        before_rename.collect()
    fresh = spark.read.format("ctfile").load(t.uri)
    assert sorted(r["full_name"] for r in fresh.collect()) == ["a", "b"]


# ---------------------------------------------------------------- batch writes


def test_merge_schema_adds_and_widens_in_the_version_of_the_rows(spark, tmp_path):
    t = base_table(tmp_path / "t")
    # n bigint widens n int; email is new; name is missing (written as nulls).
    df = spark.createDataFrame([(3, 2**40, "c@x")], "id bigint, n bigint, email string")
    save(df, t.uri, mergeSchema="true")
    t.refresh()
    assert t.version == 2  # one version: the schema change first, then the rows
    assert t.schema == pa.schema([
        pa.field("id", pa.int64(), nullable=False), ("n", pa.int64()), ("name", pa.string()), ("email", pa.string())
    ])
    assert [(f.id, f.name) for f in t.schema_at().fields] == [(1, "id"), (2, "n"), (3, "name"), (4, "email")]
    h = t.history(limit=1)[0]
    assert (h.operation, h.operation_parameters["schemaMode"], h.operation_metrics["numInsertedRows"]) == ("WRITE", "merge", 1)
    # Old partitions read by field id: the new column is null there.
    assert sorted_rows(read(spark, t.uri)) == [(1, 10, "a", None), (2, 20, "b", None), (3, 2**40, None, "c@x")]


def test_a_mismatched_write_without_an_option_fails_naming_the_columns(spark, tmp_path):
    t = base_table(tmp_path / "t")
    df = spark.createDataFrame([(3, 30, "c", "c@x")], "id bigint, n int, name string, email string")
    text = refused(t, df)
    assert "SchemaMismatchError" in text and "columns ['email'] are not in the table" in text
    assert "set option mergeSchema to true" in text


def test_merge_schema_refuses_an_incompatible_type_before_writing(spark, tmp_path):
    t = base_table(tmp_path / "t")
    # name double cannot be cast into the table's string, nor widened; the
    # new column email would be added, but nothing is written at all.
    df = spark.createDataFrame([(3, 30, 1.5, "c@x")], "id bigint, n int, name double, email string")
    text = refused(t, df, mergeSchema="true")
    assert "SchemaMismatchError" in text and "column 'name' has type double, expected string" in text
    assert "mergeSchema adds columns and widens types" in text
    assert t.schema == BASE


def test_overwrite_schema_replaces_schema_and_rows_and_its_change_scan(spark, tmp_path):
    t = base_table(tmp_path / "t")
    df = spark.createDataFrame([(7, 0.5), (8, 1.5)], "id bigint, score double")
    text = refused(t, df, overwriteSchema="true")  # not in an append
    assert "InvalidArgumentError" in text and "use it with mode('overwrite')" in text
    save(df, t.uri, mode="overwrite", overwriteSchema="true")
    t.refresh()
    assert t.version == 2
    assert t.schema.names == ["id", "score"]
    assert [(f.id, f.name) for f in t.schema_at().fields] == [(1, "id"), (4, "score")]  # id kept, score new
    assert t.snapshot(1).schema == BASE  # time travel reads the old schema
    # SPEC §Change scans: every old row deleted, every new one inserted, in the new schema.
    ch = read(spark, t.uri, changes="default", startingVersion=2, endingVersion=2)
    assert ch.columns[:2] == ["id", "score"]
    assert sorted_rows(ch, ["id", "score", ACTION, ISUPDATE]) == [
        (1, None, "DELETE", False), (2, None, "DELETE", False), (7, 0.5, "INSERT", False), (8, 1.5, "INSERT", False)
    ]


# ---------------------------------------------------------------- the streaming source


def start_stream(spark, path, collector, checkpoint, **options):
    r = spark.readStream.format("ctfile")
    for k, v in {"changes": "default", **options}.items():
        r = r.option(k, v)
    return r.load(str(path)).writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint)).start()


def test_stream_continues_across_added_columns(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 2)  # v1: ids 0, 1
    with t.update_schema() as u:  # v2
        u.add_column("c", pa.string())
    t.insert(pa.table({"id": [2], "x": [2], "c": ["z"]}))  # v3
    c = Collector(["id", "c", ACTION])
    # One version per micro-batch: the batch of version 1 ends before the
    # column existed, and is read in the stream's schema (c null).
    q = start_stream(spark, t.uri, c, tmp_path / "ck", startingVersion="1", maxVersionsPerTrigger="1")
    try:
        q.processAllAvailable()
        assert c.rows == [(0, None, "INSERT"), (1, None, "INSERT"), (2, "z", "INSERT")]
        # A column added while the query runs is not part of its schema.
        with t.update_schema() as u:  # v4
            u.add_column("d", pa.string())
        t.insert(pa.table({"id": [3], "x": [3], "c": ["w"], "d": ["q"]}))  # v5
        q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()
    assert c.rows[-1] == (3, "w", "INSERT")
    assert {tuple(cols[:3]) for cols in c.columns_seen} == {("id", "x", "c")}
    assert not any("d" in cols for cols in c.columns_seen)


def test_stream_fails_on_a_rename_naming_the_version_unless_allowed(spark, tmp_path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int32()), ("y", pa.string())])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"id": [1], "x": pa.array([1], pa.int32()), "y": ["a"]}, schema=schema))  # v1
    strict = Collector(["id", "x", ACTION])
    allowed = Collector(["id", "x", "y", ACTION])
    q1 = start_stream(spark, t.uri, strict, tmp_path / "ck1")
    q2 = start_stream(spark, t.uri, allowed, tmp_path / "ck2", allowSchemaChanges="true")
    try:
        q1.processAllAvailable()
        q2.processAllAvailable()
        t.insert(pa.table({"id": [2], "x": pa.array([2], pa.int32()), "y": ["b"]}, schema=schema))  # v2
        with t.update_schema() as u:  # v3
            u.rename_column("x", "x2").widen_column("x2", pa.int64()).drop_column("y")
        t.insert(pa.table({"id": [3], "x2": [30]}))  # v4
        with pytest.raises(Exception) as ei:
            q1.processAllAvailable()
        q2.processAllAvailable()
        assert q2.exception() is None
    finally:
        q1.stop()
        q2.stop()
    text = str(ei.value)
    assert "SchemaMismatchError" in text
    assert "changed at version 3 (drop y; rename x (x2); widen x2 (integer -> long))" in text
    assert "allowSchemaChanges" in text
    # Nothing of versions 3-4. The strict query's trigger polls, so it may
    # have run a batch of version 2 alone (in version 1's schema: correct)
    # before version 3 was committed; a batch reaching version 3 returns nothing.
    assert strict.rows in ([], [(2, 2, "INSERT")])
    # Read on in the query's schema by field id: x2 under its old name x, y
    # null in the row written after the drop.
    assert allowed.rows == [(2, 2, "b", "INSERT"), (3, 30, None, "INSERT")]


def test_sink_with_merge_schema_adds_the_columns_of_the_stream(spark, tmp_path):
    src = id_x_table(tmp_path / "src", 0)
    for v in (1, 2):
        src.insert(pa.table({"id": [v], "x": [10 * v]}, schema=src.schema))
    tgt = ctfile.create_table(str(tmp_path / "tgt"), pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    tgt.insert(pa.table({"id": [0]}, schema=tgt.schema))  # v1
    q = (
        spark.readStream.format("ctfile").option("changes", "append_only").option("startingVersion", "1")
        .option("maxVersionsPerTrigger", "1").load(src.uri).select("id", "x")
        .writeStream.format("ctfile").option("mergeSchema", "true")
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start(tgt.uri)
    )
    try:
        q.awaitTermination(300)
        assert not q.isActive and q.exception() is None
    finally:
        q.stop()
    tgt.refresh()
    assert tgt.version == 3  # one version per micro-batch; the first also added x
    assert tgt.schema.names == ["id", "x"]
    # The first batch's commit changed the schema; the second found it changed.
    assert tgt.history(limit=2)[1].operation_parameters["schemaMode"] == "merge"
    entries = [(Path(tgt.uri) / "_ct_log" / f"{v:020d}.json").read_text() for v in (2, 3)]
    assert ['"metadata"' in e for e in entries] == [True, False]
    assert sorted(tuple(r.values()) for r in tgt.to_arrow().to_pylist()) == [(0, None), (1, 10), (2, 20)]
