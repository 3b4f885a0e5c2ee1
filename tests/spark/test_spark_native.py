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
    assert "renamed, dropped or widened" in caplog.text and "spark.read.format('ctfile')" in caplog.text
    before = ct.to_df(version=7)
    assert is_native(before)
    same_as_ctfile(before, t.snapshot(7).to_arrow())


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
