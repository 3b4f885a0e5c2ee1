"""``ctfile streams`` and the streams in ``ctfile vacuum`` (SPEC §Streams),
through typer's CliRunner on real tables."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.log.streams import StreamStore
from ctfile.tools._output import fmt_time
from ctfile.tools.cli import app

runner = CliRunner()
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def ok(*args) -> str:
    r = run(*args)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


def run_json(*args) -> dict:
    return json.loads(ok(*args, "--json"))


def assert_one_line_error(r, code: int, *needles: str) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("ctfile: error: ") or err.startswith("{"), err
    for n in needles:
        assert n in err, (n, err)


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    return t


def _state_files(t: ctfile.Table) -> list[str]:
    return sorted(p.name for p in (Path(t.uri) / "_ct_streams").glob("*"))


def test_streams_create_list_drop(table):
    assert "no streams on" in ok("streams", table.uri)
    assert run_json("streams", table.uri)["streams"] == []

    doc = run_json("streams", table.uri, "--create", "to_silver")
    assert doc["created"] == "to_silver"
    [s] = doc["streams"]
    assert (s["name"], s["mode"], s["offset"], s["lag_versions"], s["stale"], s["claim"]) == (
        "to_silver", "default", 2, 0, False, None)  # v2: the CREATE STREAM commit
    assert s["stale_after"] is None and s["age_s"] is None

    text = ok("streams", table.uri, "--create", "backfill", "-i", "audit", "--start-version", "1", "--initial-rows")
    assert "created stream backfill" in text and "audit" in text and "stale after" in text
    backfill = table.stream("backfill")
    assert (backfill.information, backfill.offset, backfill.state().initial_rows) == ("audit", 0, True)
    table.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    rows = {s["name"]: s for s in run_json("streams", table.uri)["streams"]}
    assert (rows["to_silver"]["lag_versions"], rows["to_silver"]["lag_rows"]) == (1, 1)
    assert rows["backfill"]["lag_versions"] == 3 and rows["backfill"]["stale_after"].endswith("Z")
    assert rows["to_silver"]["oldest_pending"] == fmt_time(table.history(limit=1)[0].timestamp)

    doc = run_json("streams", table.uri, "--drop", "to_silver")
    assert doc["dropped"] == "to_silver" and [s["name"] for s in doc["streams"]] == ["backfill"]
    assert "dropped stream backfill" in ok("streams", table.uri, "--drop", "backfill")
    assert run_json("streams", table.uri)["streams"] == []


def test_streams_errors_are_one_line_and_change_nothing(table):
    ok("streams", table.uri, "--create", "s")
    files, version = _state_files(table), table.refresh().version
    assert_one_line_error(run("streams", table.uri, "--create", "s"), 1, "'s' already exists")
    assert_one_line_error(run("streams", table.uri, "--drop", "nope"), 1, "no stream 'nope'")
    assert_one_line_error(run("streams", table.uri, "--create", "bad name"), 1, "a stream name is", "'bad name'")
    assert_one_line_error(run("streams", table.uri, "--create", "x", "--start-version", "9"), 1,
                          "start_version", "found 9")
    assert_one_line_error(run("streams", table.uri, "--create", "x", "-i", "everything"), 2, "--information")
    assert_one_line_error(run("streams", table.uri, "--initial-rows"), 2, "go with --create")
    assert_one_line_error(run("streams", table.uri, "--create", "a", "--drop", "s"), 2, "not both")
    r = run("streams", table.uri, "--drop", "nope", "--json")
    assert r.exit_code == 1 and json.loads(r.stderr)["type"] == "StreamNotFoundError"
    assert_one_line_error(run("streams", str(Path(table.uri).parent / "missing")), 1)
    assert _state_files(table) == files and table.refresh().version == version


def test_streams_show_a_consumption_in_progress(table, tmp_path):
    target = ctfile.create_table(tmp_path / "target", SCHEMA)
    table.create_stream("s")
    table.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    store = StreamStore(table.storage)
    state = store.current("s")
    # A consumer that wrote its claim (SPEC §Streams, step 2) and is still running.
    store.write_next(state.claimed(end=table.version, target_uri=target.uri, target_table_id=target.table_id,
                                   now_ms=int(time.time() * 1000)))
    [s] = run_json("streams", table.uri)["streams"]
    assert s["claim"]["end"] == table.version and s["claim"]["target_uri"] == target.uri
    text = ok("streams", table.uri)
    assert f"versions {state.offset + 1}..{table.version} into" in text


def test_vacuum_names_the_streams_holding_history_and_those_it_makes_stale(table):
    table.set_properties({"ctfile.maxRetentionExtension": "1h"})
    s = table.create_stream("lagging")
    table.insert(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))
    table.insert(pa.table({"id": [4], "v": ["d"]}, schema=SCHEMA))
    args = ("vacuum", table.uri, "--retain", "0s", "--grace-period", "0s")

    dry = run_json(*args, "--dry-run")
    [h] = dry["holding_streams"]
    assert (h["name"], h["offset"], h["needs_version"]) == ("lagging", s.offset, s.offset + 1)
    assert dry["stale_streams"] == [] and dry["oldest_version"] == s.offset + 1
    text = ok(*args, "--dry-run")
    assert f"stream lagging (offset {s.offset}) holds history from version {s.offset + 1}" in text

    # Without an extension the vacuum no longer holds: it names the stream it
    # would make stale, and a dry run changes nothing.
    table.set_properties({"ctfile.maxRetentionExtension": "0s"})
    time.sleep(0.05)  # the vacuum's clock strictly after every commit
    files = _state_files(table)
    dry = run_json(*args, "--dry-run")
    assert [h["name"] for h in dry["stale_streams"]] == ["lagging"] and dry["holding_streams"] == []
    assert "stream lagging (offset 3) would be made stale" in ok(*args, "--dry-run")
    assert _state_files(table) == files and not table.stream("lagging").state().is_stale

    text = ok(*args)
    assert "stream lagging (offset 3) made stale" in text
    [row] = run_json("streams", table.uri)["streams"]
    assert row["stale"] and row["stale_since"].endswith("Z") and row["stale_after"] is None
    assert "STALE since" in ok("streams", table.uri)
    with pytest.raises(ctfile.StaleStreamError):
        s.pending()
