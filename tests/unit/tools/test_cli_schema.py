"""``ctfile schema`` and the schema information of ``ctfile show`` and
``ctfile history`` (SPEC §Schema evolution), on real tables."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app

runner = CliRunner()


def ok(*args) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


def run_json(*args) -> dict:
    return json.loads(ok(*args, "--json"))


def one_line_error(*args) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 1, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def table(tmp_path_factory, evolved_table) -> ctfile.Table:
    """The unit suite's evolved table (v0..v6), then v7: a write that adds a
    list column in its own commit, as Spark's mergeSchema does."""
    t = evolved_table(tmp_path_factory.mktemp("cli-schema") / "t")
    with t.transaction(operation="WRITE") as tx:
        tx.evolve_schema(lambda e: e.add_column("tags", pa.list_(pa.string())))
        tx.insert(pa.table({"id": [5], "tags": [["a"]]}))
    return t


EXPECTED_FIELDS = [
    {"id": 1, "name": "id", "type": "long", "nullable": False, "comment": None, "introduced_in": 0},
    {"id": 2, "name": "full_name", "type": "string", "nullable": True, "comment": None, "introduced_in": 0},
    {"id": 4, "name": "address", "type": "struct<city: string, zip: string>", "nullable": True, "comment": None,
     "introduced_in": 0},
    {"id": 5, "name": "address.city", "type": "string", "nullable": True, "comment": None, "introduced_in": 0},
    {"id": 7, "name": "address.zip", "type": "string", "nullable": True, "comment": None, "introduced_in": 5},
    {"id": 6, "name": "email", "type": "string", "nullable": True, "comment": "primary contact", "introduced_in": 2},
    {"id": 8, "name": "legacy", "type": "long", "nullable": True, "comment": None, "introduced_in": 6},
    {"id": 9, "name": "tags", "type": "array<string>", "nullable": True, "comment": None, "introduced_in": 7},
    {"id": 10, "name": "tags.element", "type": "string", "nullable": True, "comment": None, "introduced_in": 7},
]


def test_schema_json(table):
    doc = run_json("schema", table.uri)
    assert (doc["version"], doc["latest_version"], doc["oldest_version"]) == (7, 7, 0)
    assert doc["fields"] == EXPECTED_FIELDS
    h = doc["history"]
    assert [(s["version"], s["operation"], s["complete"]) for s in h] == [
        (7, "WRITE", True), (6, "SCHEMA CHANGE", True), (5, "SCHEMA CHANGE", True), (3, "SCHEMA CHANGE", True),
        (2, "SCHEMA CHANGE", True), (0, "CREATE TABLE", True),
    ]
    by_version = {s["version"]: s["changes"] for s in h}
    assert by_version[3] == [{"change": "drop", "path": "legacy"}, {"change": "rename", "path": "name", "detail": "full_name"}]
    assert by_version[5] == [{"change": "widen", "path": "id", "detail": "integer -> long"},
                             {"change": "add", "path": "address.zip", "detail": "string"}]
    assert by_version[6] == [{"change": "add", "path": "legacy", "detail": "long"}]
    assert [c["path"] for c in by_version[0]] == ["id", "name", "legacy", "address"]
    assert h[0]["timestamp"].endswith("Z")


def test_schema_of_an_older_version(table):
    doc = run_json("schema", table.uri, "--version", "3")
    assert (doc["version"], doc["latest_version"]) == (3, 7)
    assert [(f["name"], f["type"], f["introduced_in"]) for f in doc["fields"]] == [
        ("id", "integer", 0), ("full_name", "string", 0), ("address", "struct<city: string>", 0),
        ("address.city", "string", 0), ("email", "string", 2),
    ]
    assert [s["version"] for s in doc["history"]] == [3, 2, 0]
    assert [f["name"] for f in run_json("schema", table.uri, "-v", "4")["fields"]] == [
        "id", "full_name", "address", "address.city", "email",
    ]  # v4 (a property) kept the schema of v3
    assert "version 99 does not exist" in one_line_error("schema", table.uri, "--version", "99")
    assert "does not exist" in one_line_error("schema", table.uri, "--version", "-1")


def test_schema_text(table):
    out = ok("schema", table.uri)
    for needle in (
        "schema of", "at version 7", "introduced", "primary contact", "schema history",
        "rename name -> full_name", "widen id (integer -> long)", "add address.zip (string)", "drop legacy",
        "add tags (array)",
    ):
        assert needle in out, needle
    lines = out.splitlines()
    zip_row = next(x for x in lines if " zip " in x)
    assert "│   zip" in zip_row and "v5" in zip_row  # nested: indented under address
    assert "(latest 7)" in ok("schema", table.uri, "--version", "2")


def test_schema_after_vacuum(tmp_path, evolved_table):
    t = evolved_table(tmp_path / "t")
    t.insert(pa.table({"id": [2]}))  # v7, the oldest version once vacuumed
    # Quick commits take timestamps a few ms ahead of the clock (SPEC §Commit
    # timestamps): vacuum only once the clock has passed v7's, or its base is v6.
    while time.time() * 1000 <= t.log.commit_info(7).timestamp:
        time.sleep(0.005)
    t.vacuum(retain=0, grace_period=0)
    with t.update_schema() as u:
        u.add_column("phone", pa.string())  # v8
    doc = run_json("schema", t.uri)
    assert doc["oldest_version"] == 7
    assert {f["name"]: f["introduced_in"] for f in doc["fields"]} == {
        "id": None, "full_name": None, "address": None, "address.city": None, "address.zip": None, "email": None,
        "legacy": None, "phone": 8,
    }
    assert [(s["version"], s["complete"], s["changes"]) for s in doc["history"]] == [
        (8, True, [{"change": "add", "path": "phone", "detail": "string"}]), (7, False, []),
    ]
    out = ok("schema", t.uri)
    assert "before v7" in out and "were vacuumed" in out
    assert "can no longer be reconstructed" in one_line_error("schema", t.uri, "--version", "6")
    show = run_json("show", t.uri)
    assert show["oldest_version"] == 7 and {f["name"]: f["introduced_in"] for f in show["schema"]}["phone"] == 8
    assert "before v7" in ok("show", t.uri)


def test_schema_of_a_version_older_than_the_schema_history(tmp_path, evolved_table):
    """Entries 0, 1, 3 and 4 gone but a checkpoint of version 2 left, with
    its own entry (which vouches for it, SPEC §Checkpoints, identity): version
    2 can be read, but the schema history starts at the checkpoint of 5."""
    t = evolved_table(tmp_path / "t")
    t.checkpoint(version=2)
    t.checkpoint(version=5)
    for v in (0, 1, 3, 4):
        (tmp_path / "t" / "_ct_log" / f"{v:020d}.json").unlink()
    assert "older than its schema history, which starts at version 5" in one_line_error("schema", t.uri, "-v", "2")
    doc = run_json("schema", t.uri)
    assert doc["oldest_version"] == 5 and [s["version"] for s in doc["history"]] == [6, 5]


def test_show_prints_ids_and_introducing_versions(table):
    doc = run_json("show", table.uri)
    assert doc["schema"] == EXPECTED_FIELDS and doc["oldest_version"] == 0
    assert [f["introduced_in"] for f in run_json("show", table.uri, "--version", "2")["schema"]] == [0, 0, 0, 0, 0, 2]
    out = ok("show", table.uri)
    assert "introduced" in out
    element = next(x for x in out.splitlines() if " element " in x)
    assert "│   element" in element and "v7" in element


def test_history_marks_schema_changes(table):
    versions = {v["version"]: v for v in run_json("history", table.uri)["versions"]}
    assert {v: (r["schema_changed"], [c["path"] for c in r["schema_changes"]]) for v, r in versions.items()} == {
        7: (True, ["tags"]), 6: (True, ["legacy"]), 5: (True, ["id", "address.zip"]), 4: (False, []),
        3: (True, ["legacy", "name"]), 2: (True, ["email"]), 1: (False, []),
        0: (True, ["id", "name", "legacy", "address"]),
    }
    assert versions[7]["operation"] == "WRITE" and versions[7]["data_change"] is True
    # Text: the last column ("schema") of each version's first line.
    cells = [[c.strip() for c in x.split("│")[1:-1]] for x in ok("history", table.uri).splitlines() if x.startswith("│")]
    schema_cell = {int(c[0]): c[-1] for c in cells if c[0].isdigit()}
    assert (schema_cell[7], schema_cell[6], schema_cell[4], schema_cell[1]) == ("add tags (array)", "add legacy (long)", "", "")
    assert schema_cell[3].startswith("drop legacy, rename name ->")


def test_history_summary_is_capped(tmp_path):
    """A commit's schema cell shows the first changes and how many more;
    ``--json`` lists them all."""
    t = ctfile.create_table(tmp_path / "t", pa.schema([(f"c{i}", pa.int64()) for i in range(7)]))
    (created,) = run_json("history", t.uri)["versions"]
    assert len(created["schema_changes"]) == 7
    r = runner.invoke(app, ["history", t.uri], env={"COLUMNS": "400"})  # one line per version
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "add c0 (long), add c1 (long), add c2 (long), add c3 (long), ... 3 more" in out and "add c4" not in out


def test_schema_on_s3(moto_s3):
    uri = moto_s3.new_uri("cli-schema")
    so = moto_s3.storage_options()
    t = ctfile.create_table(uri, pa.schema([("id", pa.int64()), ("name", pa.string())]), storage_options=so)
    t.insert(pa.table({"id": [1], "name": ["a"]}))
    with t.update_schema() as u:
        u.rename_column("name", "full_name").add_column("email", pa.string())
    opts = ["--storage-option", f"endpoint_url={so['endpoint_url']}", "--storage-option", f"key={so['key']}",
            "--storage-option", f"secret={so['secret']}",
            "--storage-option", f"client_kwargs.region_name={so['client_kwargs']['region_name']}"]
    doc = run_json("schema", uri, *opts)
    assert [(f["id"], f["name"], f["introduced_in"]) for f in doc["fields"]] == [(1, "id", 0), (2, "full_name", 0), (3, "email", 2)]
    assert [s["version"] for s in doc["history"]] == [2, 0]
    assert doc["history"][0]["changes"] == [{"change": "rename", "path": "name", "detail": "full_name"},
                                            {"change": "add", "path": "email", "detail": "string"}]


def test_history_when_the_oldest_version_retained_set_the_schema(tmp_path, settle_clock):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]))
    with t.update_schema() as u:
        u.add_column("email", pa.string())  # v1, the oldest version once vacuumed
    settle_clock(t)
    t.vacuum(retain=0, grace_period=0)
    (v1,) = run_json("history", t.uri)["versions"]
    assert (v1["version"], v1["schema_changed"], v1["schema_changes"]) == (1, None, [])
    r = runner.invoke(app, ["history", t.uri], env={"COLUMNS": "400"})
    assert r.exit_code == 0 and "set (the schema before was vacuumed)" in r.stdout, r.stdout + r.stderr
