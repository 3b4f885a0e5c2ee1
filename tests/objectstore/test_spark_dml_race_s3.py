"""``ctfile.spark`` on ``s3://`` tables on SeaweedFS.

A DELETE racing a Python UPDATE: the commits go through S3's conditional
writes, and the conflict is found by the DELETE's read predicate alone (the
UPDATE rewrote a partition that statistics pruning kept the DELETE from
reading). The same race on local disk:
``tests/spark/test_spark_dml_concurrency.py``. And ``to_df`` of an S3 table
with storage options.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

import ctfile

pytest.importorskip("pyspark")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))

from dml_helpers import SCHEMA, check_pruned_delete_race, people_data, racing_update_condition  # noqa: E402

from ctfile.spark import CtfileTable  # noqa: E402


def test_update_of_a_pruned_partition_re_runs_a_delete_on_s3(spark, seaweedfs_s3, no_aws_env, tmp_path, caplog):
    opts = seaweedfs_s3.storage_options()
    uri = seaweedfs_s3.new_uri("race")
    st = ctfile.create_table(uri, SCHEMA, partition_rows=3, storage_options=opts)
    pt = ctfile.create_table(str(tmp_path / "python"), SCHEMA, partition_rows=3)
    data = people_data()
    for t in (st, pt):  # the layout of dml_helpers.twins: two commits, 3 rows per partition
        t.insert(data.slice(0, 6))
        t.insert(data.slice(6))
    start = st.version
    cond = racing_update_condition(uri, tmp_path / "committed", opts)
    with caplog.at_level("INFO", logger="ctfile"):
        r1 = CtfileTable.for_path(spark, uri, storage_options=opts).delete(cond)
    check_pruned_delete_race(ctfile.open_table(uri, storage_options=opts), pt, r1, start, caplog.messages)
    report = ctfile.verify_table(uri, storage_options=opts)
    assert report.healthy and report.unreferenced_files == [], report.problems


def test_to_df_of_an_s3_table_falls_back_to_the_data_source(spark, seaweedfs_s3, no_aws_env, caplog):
    """With storage options (which Hadoop's s3a cannot take per read),
    ``to_df`` reads through ``spark.read.format("ctfile")`` at the same
    version, says so in the log, and returns the snapshot's rows."""
    opts = seaweedfs_s3.storage_options()
    uri = seaweedfs_s3.new_uri("native")
    t = ctfile.create_table(uri, SCHEMA, partition_rows=3, storage_options=opts)
    t.insert(people_data())
    t.delete(pc.field("id") > 10)
    with caplog.at_level("INFO", logger="ctfile"):
        df = CtfileTable.for_path(spark, uri, storage_options=opts).to_df(version=1)
    assert not df.inputFiles() and any("spark.read.format('ctfile')" in m for m in caplog.messages), caplog.messages
    assert sorted(r.id for r in df.collect()) == list(range(1, 13))
