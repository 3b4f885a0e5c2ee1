"""Snapshot reads: hidden columns, streaming, datasets, argument errors, time travel."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import ctfile
from ctfile.format.errors import InvalidArgumentError, SchemaMismatchError, VersionNotFoundError

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "conformance" / "golden"


def _rows(n, start=0):
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "x": [i * 10 for i in ids], "s": [f"s{i}" for i in ids]})


@pytest.fixture(scope="module")
def lineage_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage") / "t"
    t = ctfile.create_table(
        root, pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64()), ("s", pa.string())])
    )
    t.insert(_rows(10))
    t.insert(_rows(10, start=10))
    t.update(pc.field("id").isin([3, 4]), {"x": -1})
    t.delete(pc.field("id") == 5)
    assert t.version == 4
    return root


@pytest.fixture
def lineage(lineage_template, tmp_path):
    """v1: insert ids 0..9 (one partition); v2: insert 10..19; v3: update ids 3, 4;
    v4: delete id 5. A private copy per test."""
    root = tmp_path / "lineage"
    shutil.copytree(lineage_template, root)
    return ctfile.open_table(root)


def test_include_hidden_materializes_lineage(lineage):
    snap = lineage.snapshot()
    got = snap.to_arrow(include_hidden=True).sort_by("id")
    assert got.column_names == ["id", "x", "s", "_ct_row_id", "_ct_row_version"]
    assert got.schema.field("_ct_row_id").type == pa.int64()
    rows = {r["id"]: (r["_ct_row_id"], r["_ct_row_version"]) for r in got.to_pylist()}
    # Row ids are stable: first insert got 0..9, second 10..19.
    assert {i: rid for i, (rid, _) in rows.items()} == {i: i for i in range(20) if i != 5}
    assert rows[3][1] == rows[4][1] == 3  # updated at version 3
    assert all(rows[i][1] == 1 for i in (0, 1, 2, 6, 7, 8, 9))  # copied twice, kept
    assert all(rows[i][1] == 2 for i in range(10, 20))
    assert got.column("_ct_row_id").null_count == got.column("_ct_row_version").null_count == 0


def test_include_hidden_with_columns_and_filter(lineage):
    snap = lineage.snapshot()
    got = snap.to_arrow(columns=["s"], filter=pc.field("x") < 0, include_hidden=True).sort_by("s")
    assert got.column_names == ["s", "_ct_row_id", "_ct_row_version"]
    assert got.to_pylist() == [
        {"s": "s3", "_ct_row_id": 3, "_ct_row_version": 3},
        {"s": "s4", "_ct_row_id": 4, "_ct_row_version": 3},
    ]
    empty = snap.to_arrow(filter=pc.field("id") > 999, include_hidden=True)
    assert empty.num_rows == 0 and empty.column_names[-2:] == ["_ct_row_id", "_ct_row_version"]


def test_hidden_values_of_old_versions(lineage):
    v1 = lineage.snapshot(1).to_arrow(include_hidden=True).sort_by("id")
    assert v1.column("_ct_row_id").to_pylist() == list(range(10))
    assert set(v1.column("_ct_row_version").to_pylist()) == {1}


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("flt", [None, pc.field("id") >= 7])
def test_to_batches_equals_to_arrow(new_table, make_rows, hidden, flt):
    t = new_table(partition_rows=50)
    t.insert(make_rows(230))
    snap = t.snapshot()
    batches = list(snap.to_batches(batch_rows=16, include_hidden=hidden, filter=flt))
    assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
    assert max(b.num_rows for b in batches) <= 16
    streamed = pa.Table.from_batches(batches).sort_by("id")
    assert streamed.equals(snap.to_arrow(include_hidden=hidden, filter=flt).sort_by("id"))


def test_to_batches_is_lazy(new_table, make_rows):
    t = new_table(partition_rows=10)
    t.insert(make_rows(100))
    it = t.snapshot().to_batches(batch_rows=5)
    first = next(iter(it))
    assert first.num_rows <= 5


def test_to_batches_empty(new_table):
    t = new_table()
    assert list(t.snapshot().to_batches()) == []
    assert list(t.snapshot().to_batches(include_hidden=True)) == []
    assert t.snapshot().to_arrow().schema.equals(t.schema)


def test_to_dataset_equals_snapshot(lineage):
    snap = lineage.snapshot()
    dataset = snap.to_dataset()
    assert isinstance(dataset, ds.Dataset)
    assert dataset.schema.equals(snap.schema)
    assert dataset.to_table().sort_by("id").equals(snap.to_arrow().sort_by("id"))
    assert len(list(dataset.get_fragments())) == len(snap.partitions)
    for frag in dataset.get_fragments():
        assert not frag.partition_expression.equals(pc.scalar(True))
    flt = (pc.field("id") > 12) | (pc.field("x") < 0)
    assert dataset.to_table(filter=flt).sort_by("id").equals(snap.to_arrow(filter=flt).sort_by("id"))


def test_columns_projection(lineage):
    got = lineage.snapshot().to_arrow(columns=["s", "id"])
    assert got.column_names == ["s", "id"]


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        ({"columns": ["nope"]}, InvalidArgumentError, r"unknown columns \['nope'\]"),
        ({"columns": ["_ct_row_id"]}, InvalidArgumentError, "include_hidden"),
        ({"columns": "id"}, InvalidArgumentError, "list of column names"),
        ({"filter": pc.field("nope") == 1}, SchemaMismatchError, "does not fit the table schema"),
        ({"filter": pc.field("s") + 1 > 2}, SchemaMismatchError, "does not fit"),
        ({"filter": "id > 1"}, InvalidArgumentError, "pyarrow.compute.Expression"),
    ],
)
@pytest.mark.parametrize("method", ["to_arrow", "to_batches", "hidden"])
def test_read_argument_errors(lineage, kwargs, err, match, method):
    snap = lineage.snapshot()
    with pytest.raises(err, match=match):
        if method == "to_arrow":
            snap.to_arrow(**kwargs)
        elif method == "to_batches":
            list(snap.to_batches(**kwargs))
        else:
            snap.to_arrow(include_hidden=True, **kwargs)


def test_time_travel(lineage):
    assert lineage.snapshot(0).num_records == 0
    assert lineage.snapshot(2).to_arrow().num_rows == 20
    assert lineage.snapshot(4).to_arrow().num_rows == 19
    assert lineage.snapshot(version=3).version == 3
    ts2 = lineage.log.commit_info(2).timestamp
    by_ts = lineage.snapshot(timestamp=dt.datetime.fromtimestamp(ts2 / 1000, tz=dt.timezone.utc))
    assert by_ts.version == 2
    assert by_ts.timestamp == dt.datetime.fromtimestamp(ts2 / 1000, tz=dt.timezone.utc)
    iso = dt.datetime.fromtimestamp(ts2 / 1000, tz=dt.timezone.utc).isoformat()
    assert lineage.snapshot(timestamp=iso).version == 2
    with pytest.raises(VersionNotFoundError, match="after the latest version available"):
        lineage.snapshot(timestamp=dt.datetime(2999, 1, 1))  # SPEC §Log replay


@pytest.mark.parametrize("version", [-1, 5, 999])
def test_snapshot_bad_version(lineage, version):
    with pytest.raises(VersionNotFoundError):
        lineage.snapshot(version)


def test_snapshot_timestamp_before_first_commit(lineage):
    with pytest.raises(VersionNotFoundError, match="before the first available commit"):
        lineage.snapshot(timestamp=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))


def test_snapshot_version_and_timestamp(lineage):
    with pytest.raises(InvalidArgumentError, match="not both"):
        lineage.snapshot(1, timestamp=dt.datetime(2999, 1, 1))


@pytest.mark.parametrize("bad", ["2", 1.0])
def test_snapshot_version_type(lineage, bad):
    with pytest.raises(InvalidArgumentError):
        lineage.snapshot(bad)


def test_snapshot_bad_timestamp(lineage):
    with pytest.raises(InvalidArgumentError):
        lineage.snapshot(timestamp="yesterday")
    with pytest.raises(InvalidArgumentError):
        lineage.snapshot(timestamp=12345)


def test_snapshot_is_immutable_view(lineage, make_rows):
    snap = lineage.snapshot()
    before = snap.to_arrow().sort_by("id")
    lineage.insert(make_rows(3, start=500))
    lineage.truncate()
    assert snap.to_arrow().sort_by("id").equals(before)  # old files are never deleted by DML
    assert lineage.snapshot().num_records == 0


def test_missing_data_file_is_typed(lineage):
    snap = lineage.snapshot()
    p = snap.partitions[0]
    lineage.storage.delete([p.path])
    for read in (snap.to_arrow, lambda: snap.to_arrow(include_hidden=True), lambda: list(snap.to_batches())):
        with pytest.raises(ctfile.MissingDataFileError, match=f"{p.path} of table .* is missing") as e:
            read()
        assert (e.value.path, e.value.version, e.value.uri) == (p.path, p.default_row_version, lineage.uri)


def test_repr_and_properties(lineage):
    snap = lineage.snapshot()
    assert "version=4" in repr(snap) and "rows=19" in repr(snap)
    assert snap.num_records == 19
    assert snap.schema.names == ["id", "x", "s"]
    assert snap.table_schema.field("x").id == 2
    assert snap.protocol.min_reader_version == 1
    assert snap.to_pandas().shape == (19, 3)


def test_misread_by_name_names_the_files_written_before_a_rename(tmp_path):
    """people-evolved: the two partitions written before version 8 (rename
    name -> full_name, drop email) misread by name; the one written after
    does not; a version before the rename has none."""
    root = tmp_path / "pe"
    shutil.copytree(GOLDEN_DIR / "people-evolved", root)
    t = ctfile.open_table(str(root))
    snap = t.snapshot()
    old = sorted(p.path for p in snap.partitions if p.default_row_version < 8)
    assert len(old) == 2 and len(snap.partitions) == 3
    assert sorted(snap.misread_by_name()) == old
    assert snap.misread_by_name([p for p in snap.partitions if p.path not in old]) == []
    assert t.snapshot(7).misread_by_name() == []
