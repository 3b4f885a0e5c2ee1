"""TableLocation: the picklable source every job carries (uri + storage
options), opening one storage handle per location and process, and never
printing option values (they may be credentials)."""

from __future__ import annotations

import pathlib
import pickle

import pyarrow as pa
import pytest

import ctfile
from ctfile.format.errors import InvalidArgumentError
from ctfile.log.location import TableLocation
from ctfile.log.storage import open_storage

SECRET_OPTIONS = {"key": "AKIAEXAMPLE", "secret": "very-secret-value", "client_kwargs": {"region_name": "eu-1"}}


def test_equal_hashable_and_picklable():
    a = TableLocation("s3://b/t", SECRET_OPTIONS)
    b = TableLocation("s3://b/t", dict(SECRET_OPTIONS))
    assert a == b and hash(a) == hash(b)
    assert a != TableLocation("s3://b/t", {"key": "other"})
    assert a != TableLocation("s3://b/u", SECRET_OPTIONS)
    back = pickle.loads(pickle.dumps(a))
    assert back == a and back.storage_options == SECRET_OPTIONS


def test_options_are_copied_and_empty_options_are_none(tmp_path):
    options = {"key": "k"}
    loc = TableLocation("s3://b/t", options)
    options["key"] = "changed"
    assert loc.storage_options == {"key": "k"}
    assert TableLocation(str(tmp_path), {}).storage_options is None
    assert TableLocation(str(tmp_path), {}) == TableLocation(str(tmp_path))


def test_path_uri_becomes_a_string(tmp_path):
    assert TableLocation(pathlib.Path(tmp_path)).uri == str(tmp_path)


@pytest.mark.parametrize("uri", ["", None, 3, b"/tmp/t"])
def test_bad_uri_is_a_typed_error(uri):
    with pytest.raises(InvalidArgumentError, match="uri must be a non-empty string or path"):
        TableLocation(uri)


@pytest.mark.parametrize("options", [["key"], "key=value", 1])
def test_bad_options_are_a_typed_error(options):
    with pytest.raises(InvalidArgumentError, match=f"storage_options must be a mapping or None, found {type(options).__name__}"):
        TableLocation("s3://b/t", options)


def test_repr_names_option_keys_not_values():
    text = repr(TableLocation("s3://b/t", SECRET_OPTIONS))
    assert text == "TableLocation('s3://b/t', storage_options=<client_kwargs, key, secret>)"
    assert repr(TableLocation("/data/t")) == "TableLocation('/data/t')"


def test_open_keeps_one_storage_per_location(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first = TableLocation(str(a)).open()
    assert TableLocation(str(a)).open() is first
    assert TableLocation(str(b)).open() is not first
    assert first.uri == open_storage(str(a)).uri


def test_of_storage_round_trips(tmp_path):
    storage = open_storage(str(tmp_path))
    loc = TableLocation.of(storage)
    assert loc == TableLocation(storage.uri) and loc.open().uri == storage.uri


def test_local_path_with_options_fails_when_opened(tmp_path):
    loc = TableLocation(str(tmp_path), {"key": "k"})
    with pytest.raises(InvalidArgumentError, match="only meaningful for object-store URIs"):
        loc.open()


def test_jobs_carry_a_location_and_their_repr_hides_secrets(tmp_path):
    job = ctfile.WriteJob.for_new_table("s3://bucket/t", pa.schema([("id", pa.int64())]), storage_options=SECRET_OPTIONS)
    assert job.location == TableLocation("s3://bucket/t", SECRET_OPTIONS)
    assert "very-secret-value" not in repr(job) and "AKIAEXAMPLE" not in repr(job)
    t = ctfile.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.insert(pa.table({"id": [1, 2]}))
    (task,) = t.snapshot().scan_tasks()
    change_task = t.changes(start_version=1, end_version=1).tasks()[0]
    assert task.location == change_task.location == TableLocation.of(t.storage)
    assert pickle.loads(pickle.dumps(task)).to_batches().__next__().num_rows == 2
