"""Clustering in the ``ctfile`` command (SPEC §Clustering): ``show`` reports it
as Snowflake's ``SYSTEM$CLUSTERING_INFORMATION`` names it, ``compact``
reports it before and after; checked against ``Table.clustering_info`` on
real tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r


def run_json(*args) -> dict:
    return json.loads(ok(*args, "--json").stdout)


def assert_one_line_error(r, code: int, *needles: str) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)


SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("blob", pa.binary())])


def _rows(ids: list) -> pa.Table:
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "blob": [b"x"] * len(ids)}, schema=SCHEMA)


def _overlapping(root: Path, *, properties: dict | None = None) -> ctfile.Table:
    """Five inserts whose id ranges overlap, one constant partition and one
    whose ids are all null (no key range)."""
    t = ctfile.create_table(root, SCHEMA, properties={"ctfile.partitionRows": "4", **(properties or {})})
    for i in range(5):
        t.insert(_rows([i, i + 10, i + 20, i + 30]))
    t.insert(_rows([7, 7]))
    t.insert(_rows([None, None]))
    return t


@pytest.fixture
def clustered(tmp_path) -> ctfile.Table:
    return _overlapping(tmp_path / "clustered", properties={"ctfile.clusterBy": "id"})


@pytest.fixture
def unclustered(tmp_path) -> ctfile.Table:
    return _overlapping(tmp_path / "unclustered")


def _expected(info: ctfile.ClusteringInfo, *, by_table_keys: bool) -> dict:
    """The JSON ``show`` should print for ``info`` (the histogram apart)."""
    return {
        "cluster_by_keys": list(info.keys),
        "cluster_by_table_keys": by_table_keys,
        "key_range_column": info.keys[0],
        "total_partition_count": info.partitions,
        "total_constant_partition_count": info.constant,
        "total_unranged_partition_count": info.unranged,
        "average_overlaps": info.average_overlaps,
        "average_depth": info.average_depth,
        "max_depth": info.max_depth,
    }


def _check(doc: dict, info: ctfile.ClusteringInfo, *, by_table_keys: bool) -> None:
    histogram = doc.pop("partition_depth_histogram")
    assert doc == _expected(info, by_table_keys=by_table_keys)
    # Snowflake's buckets: one per depth 0..16, five digits.
    assert [k for k in histogram][:17] == [f"{d:05d}" for d in range(17)]
    assert {int(k): n for k, n in histogram.items() if n} == info.depth_histogram
    assert sum(histogram.values()) == info.partitions - info.unranged


# ---------------------------------------------------------------- show


def test_show_json_reports_the_clustering_of_the_keys(clustered):
    doc = run_json("show", clustered.uri)
    info = clustered.clustering_info()
    assert (info.partitions, info.unranged, info.constant) == (7, 1, 1) and info.max_depth == 6
    assert doc["cluster_keys"] == ["id"] and doc["auto_compact"] is False
    _check(doc["clustering"], info, by_table_keys=True)
    v1 = run_json("show", clustered.uri, "--version", "1")["clustering"]
    _check(v1, clustered.clustering_info(version=1), by_table_keys=True)
    assert v1["average_depth"] == 1.0 and v1["total_partition_count"] == 1


def test_show_text_has_the_figures(clustered):
    info = clustered.clustering_info()
    text = ok("show", clustered.uri).stdout
    assert "automatic compaction: off" in text
    assert (
        f"clustering by id (ctfile.clusterBy): average depth {info.average_depth:.2f}, max depth {info.max_depth}, "
        f"7 partitions (1 without a key range of id, 1 constant), average overlaps {info.average_overlaps:.2f}"
    ) in text
    by_depth = ", ".join(f"{n} at depth {d}" for d, n in info.depth_histogram.items())
    assert f"partitions by depth: {by_depth}" in text


def test_show_without_keys_says_so(unclustered):
    doc = run_json("show", unclustered.uri)
    assert doc["clustering"] is None and doc["cluster_keys"] == [] and doc["auto_compact"] is False
    assert "clustering: none (no ctfile.clusterBy" in ok("show", unclustered.uri).stdout


def test_show_cluster_by_other_columns(unclustered, clustered):
    _check(run_json("show", unclustered.uri, "--cluster-by", "id")["clustering"],
           unclustered.clustering_info(keys=["id"]), by_table_keys=False)
    two = run_json("show", unclustered.uri, "--cluster-by", "name, id")["clustering"]
    assert two["cluster_by_keys"] == ["name", "id"] and two["key_range_column"] == "name"
    _check(two, unclustered.clustering_info(keys=["name", "id"]), by_table_keys=False)
    # On a clustered table, by another column than its keys.
    _check(run_json("show", clustered.uri, "--cluster-by", "name")["clustering"],
           clustered.clustering_info(keys=["name"]), by_table_keys=False)
    assert "clustering by name (--cluster-by)" in ok("show", clustered.uri, "--cluster-by", "name").stdout


def test_show_cluster_by_errors(unclustered):
    for args, needles in (
        (("--cluster-by", "nope"), ("'nope'", "has no column")),
        (("--cluster-by", "blob"), ("'blob'", "binary")),
        (("--cluster-by", "id,,name"), ("''",)),
        (("--cluster-by", "id", "--plot", "x.png"), ("--cluster-by", "--plot")),
    ):
        assert_one_line_error(run("show", unclustered.uri, *args), 1, *needles)
        assert_one_line_error(run("show", unclustered.uri, *args, "--json"), 1, *needles)


def test_show_auto_compact(tmp_path):
    t = ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.autoCompact": "true"})
    assert run_json("show", t.uri)["auto_compact"] is True
    assert "automatic compaction: on" in ok("show", t.uri).stdout


def test_show_histogram_doubles_above_depth_16(tmp_path):
    """20 partitions over one range: each has depth 20, in Snowflake's bucket 32."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA, properties={"ctfile.clusterBy": "id"})
    for _ in range(20):
        t.insert(_rows([0, 1]))
    doc = run_json("show", t.uri)["clustering"]
    assert t.clustering_info().depth_histogram == {20: 20}
    assert doc["partition_depth_histogram"]["00032"] == 20 and "00064" not in doc["partition_depth_histogram"]
    assert sum(doc["partition_depth_histogram"].values()) == 20


# ---------------------------------------------------------------- compact


def test_compact_reports_the_clustering_before_and_after(clustered):
    doc = run_json("compact", clustered.uri)
    clustered.refresh()
    v = doc["version"]
    assert doc["committed"] and clustered.history(limit=1)[0].operation == "COMPACT"
    before, after = clustered.clustering_info(version=v - 1), clustered.clustering_info(version=v)
    _check(doc["clustering_before"], before, by_table_keys=True)
    _check(doc["clustering_after"], after, by_table_keys=True)
    assert before.max_depth == 6 and after.max_depth == 1 and after.average_depth == 1.0
    # Nothing left to do: before and after are the same version's.
    again = run_json("compact", clustered.uri)
    assert not again["committed"] and again["clustering_before"] == again["clustering_after"]
    _check(again["clustering_after"], after, by_table_keys=True)


def test_compact_text_has_the_depths(clustered):
    before = clustered.clustering_info()
    text = ok("compact", clustered.uri).stdout
    clustered.refresh()
    after = clustered.clustering_info()
    assert (
        f"clustering by id (ctfile.clusterBy): average depth {before.average_depth:.2f} -> 1.00, "
        f"max depth {before.max_depth} -> 1, partitions {before.partitions} -> {after.partitions}"
    ) in text
    text = ok("compact", clustered.uri).stdout
    assert "nothing to compact" in text and f"average depth 1.00, max depth 1, {after.partitions} partitions" in text


def test_compact_max_rows_bounds_the_rewrite(tmp_path):
    """--max-rows is Table.compact(max_rows=): deepest group first while it
    fits, the same commit as the API's on a twin table."""

    def two_groups(root: Path) -> ctfile.Table:
        t = ctfile.create_table(root, SCHEMA, properties={"ctfile.clusterBy": "id", "ctfile.partitionRows": "4"})
        for ids in ([0, 2, 4, 6], [1, 3, 5, 7], [100, 102, 104, 106], [101, 103, 105, 107], [100, 103, 104, 107]):
            t.insert(_rows(ids))  # ids 0..7 at depth 2 (8 rows), 100..107 at depth 3 (12 rows)
        return t

    cli, api = two_groups(tmp_path / "cli"), two_groups(tmp_path / "api")
    doc = run_json("compact", cli.uri, "--max-rows", "12")
    r = api.compact(max_rows=12)
    assert doc["max_rows"] == 12 and doc["committed"] and r.committed
    assert (doc["partitions_removed"], doc["partitions_added"], doc["rows_copied"]) == (
        r.num_removed_partitions, r.num_added_partitions, r.num_copied_rows) == (3, 3, 12)
    assert doc["clustering_before"]["max_depth"] == 3 and doc["clustering_after"]["max_depth"] == 2
    cli.refresh()
    assert cli.history(limit=1)[0].operation_parameters.get("maxRows") == 12
    assert_one_line_error(run("compact", cli.uri, "--max-rows", "0"), 2, "--max-rows")
    tiny = run("compact", cli.uri, "--max-rows", "1")
    assert tiny.exit_code == 0 and "nothing to compact" in tiny.stdout and "of at most 1 rows" in tiny.stdout


def test_compact_without_keys_reports_no_clustering(unclustered):
    doc = run_json("compact", unclustered.uri, "--target-rows", "100")
    assert doc["committed"] and doc["partitions_removed"] == 7 and doc["clustering_before"] is None and doc["clustering_after"] is None
    text = ok("compact", unclustered.uri).stdout
    assert "nothing to compact" in text and "clustering" not in text
