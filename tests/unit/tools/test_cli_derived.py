"""``ctfile derived show`` and the derived-table parts of ``history``,
``show`` and ``schema`` (SPEC §Derived tables): the definition, the sources
with their binding, frontier and lag (versions and time), the last refreshes
with action, reason, rows in/out and duration; history marks refresh commits;
no command shows the derivation columns."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app
from ctfile.tools.cmd_derived import DerivedReport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "table"))
from derived_support import full_refresh, make_pair  # noqa: E402

runner = CliRunner()


def ok(*args) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


@pytest.fixture
def pair(tmp_path):
    """The source at version 3 (two inserts after the frontier); the derived
    table refreshed twice, the second time with a duration."""
    source, derived = make_pair(tmp_path)
    full_refresh(derived, source, data_timestamp=1000)
    source.insert(pa.table({"id": [5], "v": ["e"]}))
    full_refresh(derived, source, data_timestamp=2000, duration_ms=1500)
    source.insert(pa.table({"id": [6], "v": ["f"]}))
    source.insert(pa.table({"id": [7], "v": ["g"]}))
    return source, derived


def test_derived_show_json(pair):
    source, derived = pair
    doc = json.loads(ok("derived", "show", derived.uri, "--json"))
    assert list(doc) == [f.name for f in dataclasses.fields(DerivedReport)]
    assert (doc["query"], doc["refresh_mode"], doc["target_lag"], doc["hidden_columns"]) == (
        "SELECT id, v FROM src", "incremental", "5 minutes", ["_ct_dt_key", "_ct_dt_rows"])
    (src,) = doc["sources"]
    history = {h.version: h.timestamp_ms for h in source.history()}
    assert src == {
        "name": "src", "table_id": source.table_id, "uri": source.uri, "frontier_version": 2,
        "schema_id": ctfile.schema_id(source.schema_at(2)), "latest_version": 4, "lag_versions": 2,
        "lag_s": (history[4] - history[2]) / 1000, "status": "ok", "problem": None,
    }
    assert [(r["version"], r["action"], r["rows_in"], r["rows_out"], r["duration_ms"]) for r in doc["refreshes"]] == [
        (2, "FULL", 5, 5, 1500), (1, "FULL", 4, 4, None)]
    assert doc["data_timestamp"] == "1970-01-01T00:00:02Z"
    assert len(json.loads(ok("derived", "show", derived.uri, "--json", "-n", "1"))["refreshes"]) == 1


def test_derived_show_text(pair):
    _, derived = pair
    text = ok("derived", "show", derived.uri)
    for needle in ("query: SELECT id, v FROM src", "refresh mode incremental, target lag 5 minutes",
                   "2 versions", "FULL", "test FULL", "1s500ms"):
        assert needle in text, (needle, text)


def test_derived_show_of_a_moved_or_missing_source(pair, tmp_path):
    source, derived = pair
    shutil.rmtree(source.uri)
    (src,) = json.loads(ok("derived", "show", derived.uri, "--json"))["sources"]
    assert src["status"] == "unreachable" and src["latest_version"] is None and "no ctfile table" in src["problem"]
    ctfile.create_table(source.uri, pa.schema([("id", pa.int64())]))  # another table at the same URI
    (src,) = json.loads(ok("derived", "show", derived.uri, "--json"))["sources"]
    assert src["status"] == "other table" and source.table_id in src["problem"]
    assert "other table" in ok("derived", "show", derived.uri)


def test_derived_show_of_a_table_that_is_not_derived(pair):
    source, _ = pair
    r = runner.invoke(app, ["derived", "show", source.uri])
    assert r.exit_code == 1 and "is not a derived table" in r.stderr and "derivedTables" in r.stderr


def test_derived_show_before_the_first_refresh(tmp_path):
    _, derived = make_pair(tmp_path)
    doc = json.loads(ok("derived", "show", derived.uri, "--json"))
    assert doc["refreshes"] == [] and doc["data_timestamp"] is None
    assert doc["sources"][0]["frontier_version"] is None and doc["sources"][0]["lag_versions"] is None
    assert "never refreshed" in ok("derived", "show", derived.uri)


def test_history_marks_refresh_commits(pair):
    _, derived = pair
    doc = json.loads(ok("history", derived.uri, "--json"))
    refresh = doc["versions"][0]["refresh"]
    assert (refresh["action"], refresh["rows_in"], refresh["duration_ms"], refresh["frontier"]) == ("FULL", 5, 1500, {"src": 2})
    assert "refresh" not in doc["versions"][-1]  # CREATE TABLE: no refresh key
    assert "REFRESH FULL" in ok("history", derived.uri)


def test_show_and_schema_leave_the_derivation_columns_out(pair):
    _, derived = pair
    show = json.loads(ok("show", derived.uri, "--json"))
    assert [f["name"] for f in show["schema"]] == ["id", "v"]
    schema = json.loads(ok("schema", derived.uri, "--json"))
    assert [f["name"] for f in schema["fields"]] == ["id", "v"]
    assert [c["path"] for c in schema["history"][-1]["changes"]] == ["id", "v"]
    assert "_ct_dt" not in ok("schema", derived.uri) and "_ct_dt" not in ok("history", derived.uri)
    rows = [json.loads(line) for line in ok("changes", derived.uri, "--start", "1", "--json").splitlines()]
    assert rows and not any("_ct_dt_key" in json.dumps(r) for r in rows)
    assert "_ct_dt_key" not in ok("changes", derived.uri, "--start", "1")
