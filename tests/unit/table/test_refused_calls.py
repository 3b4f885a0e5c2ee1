"""A call refused for a bad argument raises a typed error and changes
nothing on disk (issue 26, items 1, 4 and 6): no entry, no data file, no
stream state, no rewritten file -- and never a value in the log that its
own reader would refuse, which would make the table unreadable.

Each test compares the table directory before and after, byte for byte
(``file_tree``)."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ctfile
from ctfile.format.actions import AddPartition, CommitInfo, Partition
from ctfile.format.entries import encode_entry
from ctfile.format.paths import commit_path
from ctfile.format.schema import LONG_MAX


@pytest.fixture
def table(new_table, make_rows) -> ctfile.Table:
    t = new_table()
    t.insert(make_rows(3))
    return t


def _unchanged(table: ctfile.Table, file_tree, call, error=ctfile.InvalidArgumentError, match=None):
    """Run ``call``, expect ``error``, and the table byte-identical after it."""
    before = file_tree(table.uri)
    with pytest.raises(error, match=match) as ei:
        call()
    assert file_tree(table.uri) == before
    return ei.value


# ---------------------------------------------------------------- longs the reader refuses (item 1)


@pytest.mark.parametrize("app_version", [2**63, 10**30, -1, True, 1.0, "7"])
@pytest.mark.parametrize("statement", ["insert", "delete", "truncate", "transaction"])
def test_an_app_version_the_log_cannot_hold_is_refused_before_anything_is_written(
    table, file_tree, make_rows, app_version, statement,
):
    calls = {
        "insert": lambda: table.insert(make_rows(1, 10), app_id="job", app_version=app_version),
        "delete": lambda: table.delete(pc.field("id") == 1, app_id="job", app_version=app_version),
        "truncate": lambda: table.truncate(app_id="job", app_version=app_version),
        "transaction": lambda: table.transaction(app_id="job", app_version=app_version),
    }
    _unchanged(table, file_tree, calls[statement], match="app_version must be an int in 0..9223372036854775807")
    assert ctfile.open_table(table.uri).to_arrow().num_rows == 3  # still readable
    table.insert(make_rows(1, 10), app_id="job", app_version=LONG_MAX)  # the largest long is fine
    assert ctfile.open_table(table.uri).app_version("job") == LONG_MAX


def test_a_marker_version_beyond_a_long_is_refused(table):
    with table.transaction() as tx:
        with pytest.raises(ctfile.InvalidArgumentError, match="version must be an int in 0..9223372036854775807"):
            tx.add_app_marker("fence", 2**63)


def test_no_commit_after_a_commit_timestamp_at_the_top_of_the_long_range(table, file_tree, make_rows):
    """SPEC §Commit timestamps: each commit's timestamp exceeds the one
    before, so after a commit at the largest long no commit can be written
    (a writer that tried would write a timestamp no reader accepts)."""
    table.storage.put_if_absent(commit_path(2), encode_entry([CommitInfo(LONG_MAX, "WRITE", read_version=1)]))
    t = ctfile.open_table(table.uri)
    for call in (lambda: t.insert(make_rows(1, 10)), lambda: t.set_properties({"owner": "x"})):
        _unchanged(t, file_tree, call, match="no later commit timestamp")
    assert ctfile.open_table(table.uri).version == 2 and ctfile.verify_table(table.uri).healthy


# ---------------------------------------------------------------- parameters (item 4d)


@pytest.mark.parametrize("parameters, match", [
    ({"a": {1, 2}}, r"parameters\['a'\] must be a JSON value .*found set"),
    ({"a": object()}, r"parameters\['a'\] must be a JSON value"),
    ({"a": math.nan}, "finite"),
    ({"a": [math.inf]}, "finite"),
    ({1: "a"}, "str keys"),
    ({"a": 2**63}, r"parameters\['a'\] must be an int"),
    ({"a": [[[1]]], "b": {"c": None, "d": -0.0}}, None),  # plain JSON is fine
    ("not a mapping", "parameters must be a mapping"),
])
def test_parameters_json_cannot_hold_are_refused_when_the_transaction_is_created(table, file_tree, parameters, match):
    if match is None:
        table.transaction(parameters=parameters).abort()
        return
    _unchanged(table, file_tree, lambda: table.transaction(parameters=parameters), match=match)
    ran = []
    _unchanged(table, file_tree, lambda: table.run_statement("X", ran.append, parameters=parameters), match=match)
    assert ran == []  # refused before the statement ran


def test_parameters_nested_beyond_the_limit_are_refused(table, file_tree):
    from ctfile.format.log_values import MAX_JSON_DEPTH

    deep: object = 1
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep]
    _unchanged(table, file_tree, lambda: table.transaction(parameters={"a": deep}), match="nests deeper")


# ---------------------------------------------------------------- vacuum windows (item 4c)


@pytest.mark.parametrize("kwargs", [
    {"retain": math.inf}, {"grace_period": 1e300}, {"retain": 10**30}, {"grace_period": -1}, {"retain": math.nan},
    {"retain": dt.timedelta.max, "grace_period": math.inf}, {"retain": 86400000000001},
])
def test_a_vacuum_window_no_clock_can_subtract_is_refused(table, file_tree, kwargs):
    _unchanged(table, file_tree, lambda: table.vacuum(**kwargs), match="must be between 0 and 86400000000000 seconds")


def test_the_largest_window_is_accepted(table):
    r = table.vacuum(retain=dt.timedelta.max, grace_period=dt.timedelta(days=999_999_999), dry_run=True)
    assert r.oldest_version == 0 and r.deleted_files == ()


@pytest.mark.parametrize("kwargs", [{"retain": math.inf}, {"grace_period": 1e300}])
def test_stream_forecasts_refuse_the_same_windows(table, kwargs):
    s = table.create_stream("s")
    for call in (lambda: table.streams(**kwargs), lambda: s.info(**kwargs)):
        with pytest.raises(ctfile.InvalidArgumentError, match="must be between 0 and"):
            call()


# ---------------------------------------------------------------- validate before the first commit (item 6)


@pytest.mark.parametrize("start_version", [99, -1, 2**63, True, "1"])
def test_create_stream_refused_for_its_start_version_commits_nothing(table, file_tree, start_version):
    """The table's first stream commits CREATE STREAM (adding the writer
    feature ``streams``): a bad start_version must be refused before it."""
    e = _unchanged(table, file_tree, lambda: table.create_stream("s", start_version=start_version),
                   match="start_version must be an int in 0")
    assert "in 0..2," in str(e)  # the latest version + 1, before any commit
    t = ctfile.open_table(table.uri)
    assert t.version == 1 and "streams" not in t.log.load_head().protocol.writer_features


def test_create_stream_over_expired_history_commits_nothing(table, file_tree, make_rows):
    table.insert(make_rows(1, 10))
    table.vacuum(retain=0, grace_period=0)  # versions before 2 are gone
    _unchanged(table, file_tree, lambda: table.create_stream("s", start_version=1), error=ctfile.StaleIntervalError)


def test_create_stream_still_starts_after_its_own_commit(table, make_rows):
    s = table.create_stream("s")
    assert s.offset == table.version == 2  # the CREATE STREAM commit is not pending
    table.insert(make_rows(1, 10))
    assert s.pending().to_arrow().num_rows == 1
    s2 = table.create_stream("s2", start_version=0, initial_rows=True)
    assert s2.offset == -1 and s2.pending().to_arrow().num_rows == 4


@pytest.mark.parametrize("kwargs, match", [
    ({"name": 5}, "name must be a string"), ({"description": ["d"]}, "description must be a string"),
])
def test_create_table_refuses_a_name_or_description_that_is_not_a_string(tmp_path, kwargs, match):
    with pytest.raises(ctfile.InvalidArgumentError, match=match):
        ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]), **kwargs)
    assert not (tmp_path / "t" / "_ct_log").exists() or not any((tmp_path / "t" / "_ct_log").iterdir())


def test_a_commit_whose_row_ids_would_leave_the_long_range_is_refused_and_its_files_deleted(table, file_tree, make_rows):
    """SPEC §Log entries, rule 3: ``firstRowId + numRecords`` fits a long.
    A table whose row-id counter is at the top of the range (written by
    hand here) takes no more rows: the entry is refused when it is encoded,
    before its put, and the data files the statement wrote are deleted."""
    near_top = Partition("data/far.parquet", 10, 1, LONG_MAX - 1, 2, 0)
    table.storage.put_if_absent(commit_path(2), encode_entry([CommitInfo(1 << 42, "WRITE", read_version=1),
                                                              AddPartition(near_top)]))
    t = ctfile.open_table(table.uri)
    e = _unchanged(t, file_tree, lambda: t.insert(make_rows(2, 10)), match="does not fit a long")
    assert "firstRowId" in str(e)
    assert ctfile.open_table(table.uri).version == 2
