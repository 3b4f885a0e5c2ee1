"""Commit timestamps anywhere in the long range are read and shown
(issue 26, item 4b).

SPEC §Commit timestamps: a commit timestamp is a ``long`` of milliseconds;
readers accept any. Python's datetime holds years 1 to 9999 only, so where
it cannot hold one the API gives None for the datetime beside the exact
milliseconds (``timestamp_ms``), and the tool prints the milliseconds;
nothing crashes, and ``verify`` has nothing to report."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.format.actions import CommitInfo
from ctfile.format.entries import encode_entry
from ctfile.format.paths import commit_path
from ctfile.format.schema import LONG_MAX
from ctfile.tools.cli import app

runner = CliRunner()


@pytest.fixture
def table(new_table, make_rows) -> ctfile.Table:
    t = new_table()
    t.insert(make_rows(2))
    return t


def _commit_at(t: ctfile.Table, timestamp: int) -> ctfile.Table:
    """Version 2, a commit with only a commitInfo, at ``timestamp`` (as a
    writer with a clock far off would write it)."""
    t.storage.put_if_absent(commit_path(2), encode_entry([CommitInfo(timestamp, "WRITE", read_version=1)]))
    return ctfile.open_table(t.uri)


@pytest.mark.parametrize("timestamp", [LONG_MAX, 253402300800000])  # the largest long; 10000-01-01
def test_history_and_snapshots_render_a_timestamp_beyond_datetime(table, timestamp):
    t = _commit_at(table, timestamp)
    (newest, *_older) = t.history()
    assert (newest.version, newest.timestamp, newest.timestamp_ms) == (2, None, timestamp)
    assert _older[0].timestamp == dt.datetime.fromtimestamp(_older[0].timestamp_ms / 1000, tz=dt.timezone.utc)
    snap = t.snapshot()
    assert (snap.timestamp, snap.timestamp_ms) == (None, timestamp)
    assert t.snapshot(1).timestamp is not None
    assert [s.timestamp_ms for s in t.schema_history()] == [t.history()[-1].timestamp_ms]
    assert ctfile.verify_table(t.uri).healthy


def test_the_last_datetime_is_still_a_datetime(table):
    last = 253402300799999  # 9999-12-31T23:59:59.999Z
    t = _commit_at(table, last)
    assert t.history()[0].timestamp == dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("command", [["history"], ["show"], ["schema"], ["history", "--json"], ["show", "--json"],
                                     ["changes", "--information", "audit"], ["verify"]])
def test_the_tool_prints_a_timestamp_beyond_datetime(table, command):
    t = _commit_at(table, LONG_MAX)
    r = runner.invoke(app, [command[0], t.uri, *command[1:]])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    if command[0] in ("history", "show") and "--json" not in command:
        assert "9223372036854775807 ms after the epoch" in r.stdout


def test_the_tool_writes_the_milliseconds_in_json(table):
    t = _commit_at(table, LONG_MAX)
    rows = json.loads(runner.invoke(app, ["history", t.uri, "--json"]).stdout)["versions"]
    assert rows[0]["timestamp"] == LONG_MAX and isinstance(rows[1]["timestamp"], str)


def test_time_travel_errors_name_an_extreme_timestamp(table):
    t = _commit_at(table, LONG_MAX)
    with pytest.raises(ctfile.VersionNotFoundError, match="before the first available commit"):
        t.snapshot(timestamp=dt.datetime(1970, 1, 1))
    assert t.snapshot(timestamp=dt.datetime(9999, 12, 31)).version == 1


def test_stream_info_with_a_pending_commit_beyond_datetime(table):
    s = table.create_stream("s")
    table.storage.put_if_absent(commit_path(3), encode_entry([CommitInfo(LONG_MAX - 5, "WRITE", read_version=2)]))
    t = ctfile.open_table(table.uri)
    info = t.stream("s").info()
    assert (info.lag_versions, info.oldest_pending, info.stale_after) == (1, None, None)
    assert s.offset == 2
    assert runner.invoke(app, ["streams", t.uri]).exit_code == 0


def test_the_tool_refuses_a_vacuum_window_longer_than_a_timedelta(table, file_tree):
    before = file_tree(table.uri)
    for option in (["--retain", "99999999999999d"], ["--grace-period", "1e300d"], ["--retain", "9" * 400 + "s"]):
        r = runner.invoke(app, ["vacuum", table.uri, *option])
        assert r.exit_code == 2, (r.stdout, r.stderr)
        err = r.stderr.strip()
        assert "\n" not in err and "Traceback" not in err and err.startswith("ctfile: error: ")
    assert "too long" in runner.invoke(app, ["vacuum", table.uri, "--retain", "99999999999999d"]).stderr
    assert file_tree(table.uri) == before
    assert runner.invoke(app, ["vacuum", table.uri, "--retain", "999999999d", "--dry-run"]).exit_code == 0
