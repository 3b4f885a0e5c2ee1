"""CommitOptions (issue 28, typed options): one object for what a caller
says about a commit, validated in one place, taken as ``commit=`` by every
call that commits; ``app_id=``/``app_version=`` stay a shorthand for it."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.schema import LONG_MAX
from ctfile.log.commit_options import NO_COMMIT_OPTIONS, CommitOptions, commit_options

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def table(tmp_path):
    t = ctfile.create_table(str(tmp_path / "t"), SCHEMA)
    t.insert(pa.table({"id": [1, 2]}, schema=SCHEMA))
    return t


def _rows(*ids):
    return pa.table({"id": list(ids)}, schema=SCHEMA)


# ---------------------------------------------------------------- the object


def test_exported_from_ctfile_and_frozen():
    assert ctfile.CommitOptions is CommitOptions and "CommitOptions" in ctfile.__all__
    o = CommitOptions(app_id="job", app_version=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.app_version = 4  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(o)) == o  # travels to a driver with a job
    assert o.records_app_transaction and not o.is_empty
    assert CommitOptions().is_empty and CommitOptions() == NO_COMMIT_OPTIONS


@pytest.mark.parametrize("kwargs, match", [
    ({"app_id": "job"}, r"give both app_id and app_version, or neither; found 'job', None"),
    ({"app_version": 1}, r"give both app_id and app_version, or neither; found None, 1"),
    ({"app_id": "", "app_version": 1}, "app_id must be a non-empty string, found ''"),
    ({"app_id": 5, "app_version": 1}, "app_id must be a non-empty string, found 5"),
    ({"app_id": "job", "app_version": -1}, r"app_version must be an int in 0\.\.9223372036854775807, found -1"),
    ({"app_id": "job", "app_version": 2**63}, r"app_version must be an int in 0\.\.9223372036854775807"),
    ({"app_id": "job", "app_version": True}, "app_version must be an int .* found True"),
    ({"app_id": "job", "app_version": 1.0}, "app_version must be an int .* found 1.0"),
])
def test_bad_options_are_refused_naming_expected_and_found(kwargs, match):
    with pytest.raises(ctfile.InvalidArgumentError, match=match):
        CommitOptions(**kwargs)


def test_the_largest_long_is_a_batch_number():
    assert CommitOptions(app_id="job", app_version=LONG_MAX).app_version == LONG_MAX


def test_the_shorthand_becomes_the_object_in_one_helper():
    assert commit_options() is NO_COMMIT_OPTIONS
    assert commit_options(app_id="a", app_version=1) == CommitOptions(app_id="a", app_version=1)
    given = CommitOptions(app_id="a", app_version=1)
    assert commit_options(given) is given
    with pytest.raises(ctfile.InvalidArgumentError, match="not both; found commit=CommitOptions"):
        commit_options(given, app_id="a")
    with pytest.raises(ctfile.InvalidArgumentError, match="commit must be a ctfile.CommitOptions or None, found dict"):
        commit_options({"app_id": "a", "app_version": 1})
    with pytest.raises(ctfile.InvalidArgumentError, match="give both"):
        commit_options(app_version=1)


def test_require_empty_names_the_options_found():
    NO_COMMIT_OPTIONS.require_empty("never raised")
    with pytest.raises(ctfile.InvalidArgumentError, match=r"here; found CommitOptions\(app_id='a', app_version=1\)"):
        CommitOptions(app_id="a", app_version=1).require_empty("here")


# ---------------------------------------------------------------- taken by every call that commits


def _calls(t: ctfile.Table, commit: CommitOptions):
    return {
        "insert": lambda: t.insert(_rows(9), commit=commit),
        "delete": lambda: t.delete(pc.field("id") == 1, commit=commit),
        "update": lambda: t.update(pc.field("id") == 2, {"id": 20}, commit=commit),
        "merge": lambda: t.merge(_rows(2, 3), "id", commit=commit),
        "truncate": lambda: t.truncate(commit=commit),
        "overwrite": lambda: t.overwrite(_rows(5), commit=commit),
        "run_statement": lambda: t.run_statement("X", lambda tx: tx.insert(_rows(4)), commit=commit),
        "merge_builder": lambda: t.merge_builder(_rows(2), "id").when_matched_delete().execute(commit=commit),
    }


@pytest.mark.parametrize("call", sorted(_calls(None, NO_COMMIT_OPTIONS)))  # type: ignore[arg-type]
def test_every_statement_records_its_options_and_a_replay_commits_nothing(table, call):
    commit = CommitOptions(app_id="job", app_version=7)
    first = _calls(table, commit)[call]()
    assert first.committed and table.app_version("job") == 7
    again = _calls(table, commit)[call]()
    assert (again.committed, again.app_transaction_replayed) == (False, True)
    assert table.version == first.version


@pytest.mark.parametrize("call", sorted(_calls(None, NO_COMMIT_OPTIONS)))  # type: ignore[arg-type]
def test_options_and_their_shorthand_together_are_refused_before_anything_is_written(table, call):
    version = table.version
    t = ctfile.open_table(table.uri)
    both = {
        "insert": lambda: t.insert(_rows(9), commit=CommitOptions(), app_id="job", app_version=1),
        "delete": lambda: t.delete(pc.field("id") == 1, commit=CommitOptions(), app_id="job", app_version=1),
        "update": lambda: t.update(pc.field("id") == 2, {"id": 20}, commit=CommitOptions(), app_id="j", app_version=1),
        "merge": lambda: t.merge(_rows(2, 3), "id", commit=CommitOptions(), app_id="job", app_version=1),
        "truncate": lambda: t.truncate(commit=CommitOptions(), app_id="job", app_version=1),
        "overwrite": lambda: t.overwrite(_rows(5), commit=CommitOptions(), app_id="job", app_version=1),
        "run_statement": lambda: t.run_statement("X", lambda tx: None, commit=CommitOptions(), app_id="j",
                                                 app_version=1),
        "merge_builder": lambda: t.merge_builder(_rows(2), "id").when_matched_delete().execute(
            commit=CommitOptions(), app_id="job", app_version=1),
    }
    assert set(both) == set(_calls(t, NO_COMMIT_OPTIONS))
    with pytest.raises(ctfile.InvalidArgumentError, match="not both"):
        both[call]()
    assert ctfile.open_table(table.uri).version == version


def test_a_transaction_takes_options_and_its_statements_refuse_them(table):
    commit = CommitOptions(app_id="loader", app_version=1)
    with table.transaction(commit=commit) as tx:
        tx.insert(_rows(3))
        with pytest.raises(ctfile.InvalidArgumentError, match="commits with it"):
            tx.merge_builder(_rows(3), on="id").when_matched_delete().execute(commit=commit)
        # Empty options ask nothing of the commit: accepted.
        assert tx.merge_builder(_rows(1), on="id").when_matched_delete().execute(commit=CommitOptions()) == {
            "inserted": 0, "updated": 0, "deleted": 1}
    assert table.app_version("loader") == 1
    with table.transaction(commit=commit) as tx:
        assert tx.is_replay


def test_a_transaction_consuming_a_stream_refuses_options(table):
    table.create_stream("s")
    with pytest.raises(ctfile.InvalidArgumentError, match="records the stream's own app_id"):
        table.transaction(consuming=table.stream("s"), commit=CommitOptions(app_id="x", app_version=1))


def test_a_write_job_commits_with_options(table):
    job = table.write_job()
    files = job.write(_rows(8))
    r = job.commit(files, commit=CommitOptions(app_id="sink", app_version=0))
    assert r.committed and table.app_version("sink") == 0
    job2 = table.write_job()
    again = job2.commit(job2.write(_rows(8)), app_id="sink", app_version=0)  # the shorthand, a replay
    assert again.app_transaction_replayed and table.to_arrow().num_rows == 3
    with pytest.raises(ctfile.InvalidArgumentError, match="commit must be a ctfile.CommitOptions"):
        job2.commit([], commit="sink")
