"""``CtfileTable.to_df``: snapshots read by Spark's own Parquet reader equal
ctfile's own reads, and fall back to ``spark.read.format("ctfile")`` where
that reader would misread or cannot open the storage."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.spark import CtfileTable
from ctfile.spark.native import hadoop_location
from spark_helpers import id_x_table, make_people

GOLDEN = Path(__file__).resolve().parents[1] / "conformance" / "golden"


def multiset(rows) -> Counter:
    """Rows (Spark Rows or pyarrow dicts) as a multiset of tuples."""
    return Counter(tuple(r.asDict().values()) if hasattr(r, "asDict") else tuple(r.values()) for r in rows)


def same_as_ctfile(df, arrow: pa.Table) -> None:
    assert df.columns == arrow.column_names
    assert multiset(df.collect()) == multiset(arrow.to_pylist())


def is_native(df) -> bool:
    """Spark's file source names its files; the Python data source has none."""
    return bool(df.inputFiles())


def test_plain_table_is_read_natively(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 50, partition_rows=7)
    df = CtfileTable.for_path(spark, str(tmp_path / "t")).to_df()
    assert is_native(df) and len(df.inputFiles()) == len(t.snapshot().partitions) == 8
    same_as_ctfile(df, t.to_arrow())
    assert [f.dataType.simpleString() for f in df.schema] == ["bigint", "bigint"]


def test_dml_history_and_time_travel(spark, tmp_path):
    """people: updates and deletes leave files with materialized hidden
    columns; every version reads as ctfile reads it, by version and by
    timestamp, and the hidden columns never show."""
    t = make_people(tmp_path / "people")
    ct = CtfileTable.for_path(spark, t.uri)
    for v in range(t.version + 1):
        df = ct.to_df(version=v)
        same_as_ctfile(df, t.snapshot(v).to_arrow())
        assert df.columns == ["id", "name"]
    history = {h.version: h.timestamp for h in t.history()}
    for v in (2, 4):
        same_as_ctfile(ct.to_df(timestamp=history[v]), t.snapshot(v).to_arrow())
    assert is_native(ct.to_df())
    with pytest.raises(ctfile.VersionNotFoundError):
        ct.to_df(version=t.version + 1)
    with pytest.raises(ctfile.InvalidArgumentError):
        ct.to_df(version=1, timestamp=history[1])


def test_snapshot_is_pinned_when_to_df_returns(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 5)
    df = CtfileTable.for_path(spark, t.uri).to_df()
    t.insert(pa.table({"id": [100], "x": [100]}))
    assert df.count() == 5


def test_empty_snapshot_has_the_table_schema(spark, tmp_path):
    t = make_people(tmp_path / "people")
    df = CtfileTable.for_path(spark, t.uri).to_df(version=0)
    assert df.columns == ["id", "name"] and df.count() == 0
    assert [f.dataType.simpleString() for f in df.schema] == ["bigint", "string"]
    t.delete(pc.field("id") > 0)
    assert CtfileTable.for_path(spark, t.uri).to_df().collect() == []


def test_filters_pruning_and_count_come_from_spark(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 100, partition_rows=10)
    df = CtfileTable.for_path(spark, t.uri).to_df()
    q = df.filter("x >= 42 AND x < 57").select("x")
    assert sorted(r.x for r in q.collect()) == t.to_arrow(columns=["x"], filter=(pc.field("x") >= 42) & (pc.field("x") < 57)).column("x").to_pylist()
    plan = q._jdf.queryExecution().executedPlan().toString()
    assert "PushedFilters: [IsNotNull(x), GreaterThanOrEqual(x,42), LessThan(x,57)]" in plan
    assert "ReadSchema: struct<x:bigint>" in plan
    assert df.count() == 100
    count_plan = df.groupBy().count()._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<>" in count_plan  # row counts from the footers, no column read


def test_schema_evolved_table_reads_by_field_id(spark, tmp_path, caplog):
    """people-evolved renamed name -> full_name and dropped then re-added
    email at version 8-11: by name, Spark would read full_name as nulls and
    Walter's dropped email as the new column's value. to_df falls back for
    the latest version and is native before the rename."""
    root = tmp_path / "pe"
    shutil.copytree(GOLDEN / "people-evolved", root)
    t = ctfile.open_table(str(root))
    ct = CtfileTable.for_path(spark, str(root))
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = ct.to_df()
    same_as_ctfile(df, t.to_arrow())
    assert not is_native(df)
    assert "renamed or dropped" in caplog.text and "spark.read.format('ctfile')" in caplog.text
    before = ct.to_df(version=7)
    assert is_native(before)
    same_as_ctfile(before, t.snapshot(7).to_arrow())


def test_added_column_is_native_and_widened_column_is_right(spark, tmp_path):
    """An added column reads as nulls from older files by name too; a
    widened integer or float column is widened by Spark's reader itself:
    both stay native, also with a pushed-down literal the narrow file type
    cannot hold."""
    schema = pa.schema([("id", pa.int32()), ("v", pa.int32()), ("b", pa.int8()), ("f", pa.float32())])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"id": [1, 2], "v": [10, 2**31 - 1], "b": [-128, 127], "f": [1.1, float("inf")]}, schema=schema))
    t.update_schema().add_column("w", pa.string()).commit()
    t.insert(pa.table({"id": [3], "v": [30], "b": [0], "f": [2.5], "w": ["c"]}))
    ct = CtfileTable.for_path(spark, t.uri)
    df = ct.to_df()
    assert is_native(df)
    same_as_ctfile(df, t.to_arrow())
    with t.update_schema() as u:
        u.widen_column("v", pa.int64())
        u.widen_column("b", pa.int16())
        u.widen_column("f", pa.float64())
    t.insert(pa.table({"id": [4], "v": [2**40], "b": [-2**15], "f": [1.1], "w": ["d"]}))
    df = ct.to_df()
    assert is_native(df)
    assert [f.dataType.simpleString() for f in df.schema] == ["int", "bigint", "smallint", "double", "string"]
    same_as_ctfile(df, t.to_arrow())
    for cond, ids in [("v > 3000000000", [4]), ("v >= 2147483647", [2, 4]), ("b < -200", [4]), ("f > 1.1", [1, 2, 3]),
                      ("f = 1.1", [4]), ("f IN (1.100000023841858D)", [1])]:
        assert sorted(r.id for r in df.where(cond).select("id").collect()) == ids, cond
    changes = ct.changes_df(1, t.version)  # append-only changes across the widening: native too
    assert is_native(changes)
    assert multiset(changes.collect()) == multiset(datasource_changes(spark, t.uri, 1, t.version).collect())


def test_widened_decimal_falls_back(spark, tmp_path, caplog):
    """Spark's reader widens decimal values but fails on a pushed-down
    literal wider than the file's precision: such files go through the data
    source."""
    from decimal import Decimal

    schema = pa.schema([("id", pa.int64()), ("x", pa.decimal128(5, 2))])
    t = ctfile.create_table(str(tmp_path / "t"), schema)
    t.insert(pa.table({"id": [1, 2], "x": [Decimal("1.25"), Decimal("-999.99")]}, schema=schema))
    t.update_schema().widen_column("x", pa.decimal128(10, 2)).commit()
    ct = CtfileTable.for_path(spark, t.uri)
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = ct.to_df()
    assert not is_native(df) and "a decimal column widened" in caplog.text
    assert [r.id for r in df.where("x < 100000.00").orderBy("id").collect()] == [1, 2]


def test_table_with_storage_options_falls_back(spark, moto_s3, caplog):
    """A table on an S3 server reached through fsspec storage options:
    Spark's Hadoop does not get them, so the rows come from the data
    source at the pinned version."""
    uri, opts = moto_s3.new_uri(), moto_s3.storage_options()
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = ctfile.create_table(uri, schema, storage_options=opts)
    t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    t.insert(pa.table({"id": [3], "v": ["c"]}, schema=schema))
    ct = CtfileTable.for_path(spark, uri, storage_options=opts)
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = ct.to_df(version=1)
    assert "storage options" in caplog.text
    assert not is_native(df)
    same_as_ctfile(df, t.snapshot(1).to_arrow())


def test_scheme_without_hadoop_filesystem_is_not_native(spark, moto_s3, monkeypatch, tmp_path):
    """An s3:// table opened from the environment alone (no storage options)
    reads as s3a://, which this Spark has no FileSystem for (no hadoop-aws)."""
    for k, v in {**moto_s3.env(), "AWS_ENDPOINT_URL": moto_s3.endpoint_url}.items():
        monkeypatch.setenv(k, v)
    uri = moto_s3.new_uri()
    t = ctfile.create_table(uri, pa.schema([("id", pa.int64())]))
    where = hadoop_location(spark, t)
    assert where.root is None and "no FileSystem for s3a://" in where.why_not
    assert hadoop_location(spark, id_x_table(tmp_path / "t", 0)).root == (tmp_path / "t").as_uri()


def test_timestamp_resolves_on_the_driver(spark, tmp_path):
    t = id_x_table(tmp_path / "t", 3)
    ts = t.history()[0].timestamp
    assert isinstance(ts, dt.datetime)
    same_as_ctfile(CtfileTable.for_path(spark, t.uri).to_df(timestamp=ts), t.snapshot(timestamp=ts).to_arrow())


# ---------------------------------------------------------------- append-only change scans


def history_table(root) -> ctfile.Table:
    """Inserts over several partitions, UPDATE, MERGE with inserts (fresh and
    copied rows in one rewritten file), DELETE, a compaction (no data change),
    an added column (read by name), a partition added then removed in one
    interval. Versions 0..9."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64())])
    t = ctfile.create_table(str(root), schema, partition_rows=4)
    t.insert(pa.table({"id": list(range(10)), "x": list(range(10))}, schema=schema))  # v1
    t.insert(pa.table({"id": list(range(10, 15)), "x": list(range(10, 15))}, schema=schema))  # v2
    t.update(pc.field("id") == 3, {"x": 300})  # v3
    src = pa.table({"id": [2, 40, 41], "x": [200, 40, 41]}, schema=schema)
    t.merge(src, on="id", when_matched="update", when_not_matched="insert")  # v4
    t.delete(pc.field("id").isin([1, 40]))  # v5
    t.compact()  # v6
    t.update_schema().add_column("y", pa.string()).commit()  # v7
    t.insert(pa.table({"id": [50, 51], "x": [50, 51], "y": ["a", "b"]}))  # v8
    t.delete(pc.field("id") == 51)  # v9
    assert t.version == 9
    return t


def datasource_changes(spark, uri, a, b):
    return (spark.read.format("ctfile").option("changes", "append_only")
            .option("startingVersion", a).option("endingVersion", b).load(uri))


def test_append_only_changes_equal_the_data_source(spark, tmp_path):
    """Every interval of a DML history: the same rows, columns and
    METADATA$ROW_ID as spark.read.format('ctfile'), read natively."""
    t = history_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    seen_rows = 0
    for a, b in [(0, 9), (1, 1), (2, 5), (3, 4), (4, 4), (5, 7), (6, 6), (7, 9), (8, 8), (9, 9), (0, 3)]:
        df = ct.changes_df(a, b)
        ref = datasource_changes(spark, t.uri, a, b)
        assert df.columns == ref.columns, (a, b)
        got, want = multiset(df.collect()), multiset(ref.collect())
        assert got == want, (a, b)
        seen_rows += sum(want.values())
        if want:
            assert is_native(df), (a, b)
    assert seen_rows > 20
    # A filter on a data column is pushed into the scan; positions are still those of the file.
    q = ct.changes_df(0, 9).filter("x >= 10")
    assert multiset(q.collect()) == multiset(datasource_changes(spark, t.uri, 0, 9).filter("x >= 10").collect())
    assert "GreaterThanOrEqual(x,10)" in q._jdf.queryExecution().executedPlan().toString()


def test_append_only_changes_fall_back_across_a_rename(spark, tmp_path, caplog):
    t = history_table(tmp_path / "t")
    t.update_schema().rename_column("x", "x2").commit()  # v10: older files misread by name
    t.insert(pa.table({"id": [60], "x2": [60], "y": ["c"]}))  # v11
    ct = CtfileTable.for_path(spark, t.uri)
    with caplog.at_level(logging.INFO, logger="ctfile.spark"):
        df = ct.changes_df(1, 11)
    assert not is_native(df) and "renamed or dropped" in caplog.text
    assert multiset(df.collect()) == multiset(datasource_changes(spark, t.uri, 1, 11).collect())
    assert is_native(ct.changes_df(11, 11))


def test_append_only_changes_with_a_column_named_like_sparks_metadata(spark, tmp_path):
    """A data column ``_metadata`` does not hide Spark's file metadata (row
    positions) from the scan."""
    schema = pa.schema([("id", pa.int64()), ("_metadata", pa.string())])
    t = ctfile.create_table(str(tmp_path / "t"), schema, partition_rows=2)
    t.insert(pa.table({"id": [1, 2, 3], "_metadata": ["a", "b", "c"]}, schema=schema))
    t.update(pc.field("id") == 2, {"_metadata": "B"})
    t.insert(pa.table({"id": [4], "_metadata": ["d"]}, schema=schema))
    df = CtfileTable.for_path(spark, t.uri).changes_df(1, 3)
    assert is_native(df)
    assert multiset(df.collect()) == multiset(datasource_changes(spark, t.uri, 1, 3).collect())


def test_append_only_changes_empty_and_errors(spark, tmp_path):
    t = history_table(tmp_path / "t")
    ct = CtfileTable.for_path(spark, t.uri)
    for a, b in [(6, 6), (7, 7), (0, 0)]:  # compaction, schema change, creation: nothing appended
        df = ct.changes_df(a, b)
        assert df.collect() == [] and df.columns == datasource_changes(spark, t.uri, a, b).columns
    with pytest.raises(ctfile.InvalidArgumentError, match="append_only and default"):
        ct.changes_df(1, 2, information="audit")
    with pytest.raises(ctfile.InvalidArgumentError, match="information must be one of"):
        ct.changes_df(1, 2, information="net")
    with pytest.raises(ctfile.InvalidArgumentError):
        ct.changes_df(5, 2)
    with pytest.raises(ctfile.VersionNotFoundError):
        ct.changes_df(1, 99)


def test_row_id_hash_in_spark_equals_xxh3(spark):
    """METADATA$ROW_ID computed with Spark SQL expressions equals XXH3-64 of
    the xxhash package, over edge and random 64-bit values."""
    import random

    import xxhash

    from ctfile.spark.changes import with_xxh3_64

    rnd = random.Random(15)
    seed = xxhash.xxh3_64_intdigest(b"a table id")
    vals = [0, 1, 255, 65535, 2**31, 2**32 + 7, 2**62, 2**63 - 1, -1, -(2**63)]
    vals += [rnd.getrandbits(64) - 2**63 for _ in range(500)]
    df = with_xxh3_64(spark.createDataFrame([(v,) for v in vals], "v long"), "v", "h", seed)
    want = {v: format(xxhash.xxh3_64_intdigest(v.to_bytes(8, "little", signed=True), seed=seed), "016x") for v in vals}
    assert {r.v: r.h for r in df.collect()} == want
