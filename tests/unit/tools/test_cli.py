"""The ``ctfile`` command through typer's CliRunner, on real tables."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.format.entries import encode_entry_objects
from ctfile.log.streams import StreamStore
from ctfile.tools import _output
from ctfile.tools._duration import parse_duration
from ctfile.tools.cli import app, parse_storage_options

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def ok(*args: str):
    r = run(*args)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r


def run_json(*args: str):
    return json.loads(ok(*args, "--json").stdout)


def assert_one_line_error(r, code: int, *needles: str) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("ctfile: error: ") or err.startswith("{"), err
    for n in needles:
        assert n in err, (n, err)


# ---------------------------------------------------------------- fixtures


def _people(root: Path) -> ctfile.Table:
    """The demo's history: v1 insert 1,2; v2 insert 3,4,5; v3/v4 updates; v5 delete 2,5."""
    t = ctfile.create_table(root, pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())]))
    t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}))
    t.insert(pa.table({"id": [3, 4, 5], "name": ["Walter", "Maud", "Uli"]}))
    t.update(pc.field("id") == 1, {"name": "Jeffrey"})
    t.update(pc.field("id") == 4, {"name": "Maude"})
    t.delete(pc.field("id").isin([2, 5]))
    return t


@pytest.fixture(scope="module")
def people(tmp_path_factory) -> ctfile.Table:
    """Read-only: commands that write use their own table."""
    return _people(tmp_path_factory.mktemp("cli") / "people")


@pytest.fixture
def fresh_people(tmp_path) -> ctfile.Table:
    return _people(tmp_path / "people")


def _log_file(t: ctfile.Table, v: int) -> Path:
    return Path(t.uri) / "_ct_log" / f"{v:020d}.json"


def _edit_entry(t: ctfile.Table, v: int, fn) -> None:
    """Rewrite an entry's JSON lines as a writer would have (self-check included)."""
    p = _log_file(t, v)
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    for obj in lines:
        fn(obj)
    p.write_bytes(encode_entry_objects(lines))


def _added_path(t: ctfile.Table, v: int) -> str:
    for line in _log_file(t, v).read_text().splitlines():
        if "add" in json.loads(line):
            return json.loads(line)["add"]["path"]
    raise AssertionError(v)


# ---------------------------------------------------------------- history


def test_history_table(people):
    out = ok("history", people.uri).stdout
    for op in ("CREATE TABLE", "INSERT", "UPDATE", "DELETE"):
        assert op in out
    assert '"set":{"name":"Jeffrey"}' in out


def test_history_json(people):
    doc = run_json("history", people.uri)
    versions = doc["versions"]
    assert [v["version"] for v in versions] == [5, 4, 3, 2, 1, 0]
    v5, v3, v2, v0 = versions[0], versions[2], versions[3], versions[5]
    assert v5["operation"] == "DELETE" and v5["rows_deleted"] == 2 and v5["data_change"] is True
    assert v3["rows_updated"] == 1 and v3["partitions_added"] == 1 and v3["partitions_removed"] == 1
    assert v3["parameters"] == {"predicate": "(id == 1)", "set": {"name": "Jeffrey"}}
    assert v2["rows_inserted"] == 3 and v2["partitions_removed"] == 0
    assert v0["operation"] == "CREATE TABLE" and v0["data_change"] is False
    assert v5["timestamp"].endswith("Z") and v5["read_version"] == 4
    # The live table's change, from the log's add and remove actions.
    live = [people.snapshot(v["version"]).to_arrow().num_rows for v in reversed(versions)]
    assert [v["rows_added"] - v["rows_removed"] for v in reversed(versions)][1:] == [b - a for a, b in zip(live, live[1:])]
    assert v3["rows_added"] == 2 and v3["rows_removed"] == 2 and v3["bytes_added"] > 0 and v3["bytes_removed"] > 0


def test_history_limit(people):
    assert [v["version"] for v in run_json("history", people.uri, "--limit", "2")["versions"]] == [5, 4]
    assert [v["version"] for v in run_json("history", people.uri, "-n", "1")["versions"]] == [5]
    assert_one_line_error(run("history", people.uri, "--limit", "0"), 2, "--limit")
    assert_one_line_error(run("history", people.uri, "--limit", "x"), 2, "--limit")


def test_missing_table_is_a_one_line_error(tmp_path):
    missing = str(tmp_path / "nope")
    for args in (["history", missing], ["show", missing], ["diff", missing, "1", "2"], ["changes", missing],
                 ["compact", missing], ["vacuum", missing], ["checkpoint", missing]):
        assert_one_line_error(run(*args), 1, "no ctfile table")
    r = run("history", tmp_path / "nope", "--json")
    assert r.exit_code == 1
    assert json.loads(r.stderr) == {
        "error": f"no ctfile table at {tmp_path / 'nope'}: _ct_log/ holds no version file",
        "type": "TableNotFoundError",
    }


def test_bad_options_are_one_line_errors(people):
    assert_one_line_error(run("history", people.uri, "--bogus"), 2, "No such option: --bogus")
    assert_one_line_error(run("show"), 2, "Missing argument")
    assert_one_line_error(run("nosuchcommand"), 2, "No such command")
    assert_one_line_error(run("changes", people.uri, "--format", "xml"), 2, "--format")
    assert_one_line_error(run("changes", people.uri, "--information", "full"), 2, "--information")


def test_no_arguments_prints_help_and_version():
    r = run()
    assert r.exit_code == 2 and "history" in r.stdout and "verify" in r.stdout
    assert ok("--version").stdout.strip() == f"ctfile {ctfile.__version__}"
    assert "--storage-option" in ok("changes", "--help").stdout


# ---------------------------------------------------------------- storage options


def test_parse_storage_options():
    assert parse_storage_options(None) is None
    assert parse_storage_options([]) is None
    assert parse_storage_options(
        ["endpoint_url=http://h:9000/x?a=b", "anon=true", "use_ssl=False", "client_kwargs.region_name=eu-west-1", "key="]
    ) == {
        "endpoint_url": "http://h:9000/x?a=b", "anon": True, "use_ssl": False,
        "client_kwargs": {"region_name": "eu-west-1"}, "key": "",
    }
    import typer

    for bad in (["novalue"], ["=x"], ["a..b=1"], ["a=1", "a.b=2"]):
        with pytest.raises(typer.BadParameter):
            parse_storage_options(bad)


def test_storage_option_values_in_json():
    """JSON objects, arrays, numbers, booleans and null are parsed; anything
    else, and a JSON string, is passed as a string."""
    assert parse_storage_options([
        'client_kwargs={"region_name": "us-east-1"}', "config_kwargs.retries={\"max_attempts\": 1}",
        "max_concurrency=4", "timeout=2.5", "anon=false", "token=null", "tags=[1, \"a\"]",
        'secret="123"', "key=0123", "endpoint_url=http://h:1/{x}", "profile=NaN", "name={not json",
    ]) == {
        "client_kwargs": {"region_name": "us-east-1"}, "config_kwargs": {"retries": {"max_attempts": 1}},
        "max_concurrency": 4, "timeout": 2.5, "anon": False, "token": None, "tags": [1, "a"],
        "secret": "123", "key": "0123", "endpoint_url": "http://h:1/{x}", "profile": "NaN", "name": "{not json",
    }
    # A JSON object and dotted keys for the same option merge, in order.
    assert parse_storage_options(
        ["client_kwargs.verify=false", 'client_kwargs={"region_name": "x"}', "client_kwargs.region_name=y"]
    ) == {"client_kwargs": {"verify": False, "region_name": "y"}}
    assert "JSON" in ok("history", "--help").stdout


def test_storage_option_errors(people):
    assert_one_line_error(run("history", people.uri, "--storage-option", "novalue"), 2, "KEY=VALUE")
    # Options for a local path are refused by ctfile itself.
    assert_one_line_error(run("history", people.uri, "--storage-option", "anon=true"), 1, "object-store")


# ---------------------------------------------------------------- show


def test_show_json(people):
    doc = run_json("show", people.uri)
    assert doc["version"] == 5 and doc["num_records"] == 3 and doc["num_partitions"] == 2
    assert doc["schema"] == [
        {"id": 1, "name": "id", "type": "long", "nullable": False, "comment": None, "introduced_in": 0},
        {"id": 2, "name": "name", "type": "string", "nullable": True, "comment": None, "introduced_in": 0},
    ]
    assert doc["protocol"]["min_reader_version"] >= 1 and "rowLineage" in doc["protocol"]["reader_features"]
    assert sum(p["num_records"] for p in doc["partitions"]) == 3
    assert doc["size_bytes"] == sum(p["size_bytes"] for p in doc["partitions"])
    p = min(doc["partitions"], key=lambda p: p["first_row_id"])
    assert p["stats"]["id"]["field_id"] == 1 and "min" in p["stats"]["id"] and "null_count" in p["stats"]["name"]
    assert p["stats"]["_ct_row_id"]["field_id"] == 2147483540
    h = doc["hidden_columns"]
    assert h["next_row_id"] == people.snapshot().state.next_row_id
    # Version 5's delete copied the three surviving rows: ids and versions stored.
    assert (h["rows_fresh"], h["rows_updated"], h["rows_copied"]) == (0, 0, 3)
    assert (h["min_row_version"], h["max_row_version"]) == (2, 4)


def test_show_version_and_timestamp(people):
    v1 = run_json("show", people.uri, "--version", "1")
    assert v1["version"] == 1 and v1["num_records"] == 2
    assert v1["hidden_columns"]["rows_fresh"] == 2 and v1["hidden_columns"]["partitions_all_inherited"] == 1
    ts = people.snapshot(2).timestamp.isoformat()
    assert run_json("show", people.uri, "--timestamp", ts)["version"] == 2
    assert run_json("show", people.uri, "-v", "0")["num_partitions"] == 0


def test_show_errors(people):
    assert_one_line_error(run("show", people.uri, "--version", "99"), 1, "version 99 does not exist")
    assert_one_line_error(run("show", people.uri, "--version", "-1"), 1, "does not exist")
    assert_one_line_error(run("show", people.uri, "-v", "1", "-t", "2020-01-01"), 1, "not both")
    assert_one_line_error(run("show", people.uri, "--timestamp", "yesterday"), 1, "ISO-8601")
    assert_one_line_error(run("show", people.uri, "--timestamp", "2000-01-01"), 1, "before the first")


def test_show_human(people):
    out = ok("show", people.uri).stdout
    for needle in ("version 5", "schema", "long", "field id", "hidden columns", "2147483540", "partitions", "Jeffrey"):
        assert needle in out, needle


def test_show_caps_the_partition_list(tmp_path):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]), partition_rows=1)
    t.insert(pa.table({"id": list(range(53))}))
    out = ok("show", t.uri).stdout
    assert "3 more partitions" in out
    full = ok("show", t.uri, "--all-partitions").stdout
    assert "more partitions" not in full and full.count("data/part-") == 53
    assert len(run_json("show", t.uri)["partitions"]) == 53


def test_show_nested_schema_field_ids(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int32())),
                        ("st", pa.struct([("a", pa.int32())]))])
    t = ctfile.create_table(tmp_path / "t", schema)
    rows = {r["name"]: r for r in run_json("show", t.uri)["schema"]}
    assert rows["tags"]["type"] == "array<string>" and "tags.element" in rows
    assert rows["m"]["type"] == "map<string, integer>" and {"m.key", "m.value"} <= set(rows)
    assert rows["st"]["type"] == "struct<a: integer>" and "st.a" in rows
    ids = [r["id"] for r in rows.values()]
    assert len(set(ids)) == len(ids)


# ---------------------------------------------------------------- diff


def test_diff_json(people):
    doc = run_json("diff", people.uri, "2", "5")
    cs = people.changes(start_version=2, end_version=5)
    assert doc["plan_shape"] == "MINIMIZE" == str(cs.plan_shape)
    assert sorted(p["path"] for p in doc["partitions_added"]) == sorted(p.path for p in cs.plan.added)
    assert sorted(p["path"] for p in doc["partitions_removed"]) == sorted(p.path for p in cs.plan.removed)
    assert doc["bytes_to_read"] == cs.plan.bytes_to_read == sum(
        p["size_bytes"] for p in doc["partitions_added"] + doc["partitions_removed"]
    )
    assert [c["version"] for c in doc["commits"]] == [2, 3, 4, 5]
    assert (doc["rows_added"], doc["rows_removed"]) == (3, 2)


def test_diff_shapes_and_modes(people):
    assert run_json("diff", people.uri, "1", "2")["plan_shape"] == "ADDED_ONLY"
    assert run_json("diff", people.uri, "3", "2")["plan_shape"] == "EMPTY"  # a caught-up interval
    ao = run_json("diff", people.uri, "2", "5", "--information", "append_only")
    assert ao["plan_shape"] == "ADDED_ONLY" and ao["information"] == "append_only"
    assert len(ao["partitions_to_read"]) == 5  # every partition a data change added in 2..5
    assert run_json("diff", people.uri, "0", "0")["bytes_to_read"] == 0


def test_diff_reads_no_data_file(fresh_people):
    """Planning needs only the log: it works with every data file gone."""
    before = run_json("diff", fresh_people.uri, "2", "5")
    for f in (Path(fresh_people.uri) / "data").iterdir():
        f.unlink()
    assert run_json("diff", fresh_people.uri, "2", "5") == before
    out = ok("diff", fresh_people.uri, "2", "5").stdout
    assert "MINIMIZE" in out and str(before["bytes_to_read"]) in out


def test_diff_errors(people):
    assert_one_line_error(run("diff", people.uri, "5", "2"), 1, "reversed interval")
    assert_one_line_error(run("diff", people.uri, "1", "9"), 1, "beyond the latest version")
    assert_one_line_error(run("diff", people.uri, "1"), 2, "Missing argument")


# ---------------------------------------------------------------- changes


def _expected(people, **kw) -> list[dict]:
    return people.changes(**kw).to_arrow().to_pylist()


def test_changes_table_format(people):
    out = ok("changes", people.uri, "--start", "2", "--end", "5").stdout
    assert "MINIMIZE" in out and "5 rows" in out
    for needle in ("Jeffrey", "Donny", "DELETE", "INSERT", "METADATA$ROW_ID"):
        assert needle in out
    assert "0 rows" in ok("changes", people.uri, "-s", "5", "-e", "4").stdout


def test_changes_json_lines(people):
    rows = [json.loads(x) for x in ok("changes", people.uri, "--start", "2", "--end", "5", "--json").stdout.splitlines()]
    assert rows == _expected(people, start_version=2, end_version=5)
    same = [json.loads(x) for x in ok("changes", people.uri, "-s", "2", "-e", "5", "--format", "json").stdout.splitlines()]
    assert same == rows


def test_changes_information_modes(people):
    audit = [json.loads(x) for x in ok("changes", people.uri, "-s", "2", "-i", "audit", "-f", "json").stdout.splitlines()]
    assert [r["METADATA$COMMIT_VERSION"] for r in audit] == [2, 2, 2, 3, 3, 4, 4, 5, 5]
    assert all(r["METADATA$COMMIT_TIMESTAMP"].endswith("Z") for r in audit)
    ao = [json.loads(x) for x in ok("changes", people.uri, "-s", "2", "-i", "append_only", "-f", "json").stdout.splitlines()]
    assert sorted(r["id"] for r in ao) == [3, 4, 5]


def test_changes_csv(people, tmp_path):
    text = ok("changes", people.uri, "-s", "2", "-e", "5", "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    exp = _expected(people, start_version=2, end_version=5)
    assert [int(r["id"]) for r in rows] == [r["id"] for r in exp]
    assert [r["METADATA$ACTION"] for r in rows] == [r["METADATA$ACTION"] for r in exp]
    out = tmp_path / "c.csv"
    r = ok("changes", people.uri, "-s", "2", "-e", "5", "-f", "csv", "--output", out)
    assert "wrote 5 change rows" in r.stdout
    assert out.read_text() == text


def test_changes_parquet_export(people, tmp_path):
    out = tmp_path / "changes.parquet"
    r = run("changes", people.uri, "--start", "2", "--format", "parquet", "--output", out, "--json")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["rows"] == 5 and summary["format"] == "parquet" and summary["plan_shape"] == "MINIMIZE"
    got = pq.read_table(out)
    exp = people.changes(start_version=2).to_arrow()
    assert got.schema.names == exp.schema.names and got.to_pylist() == exp.to_pylist()


def test_changes_json_export_to_file(people, tmp_path):
    out = tmp_path / "c.jsonl"
    ok("changes", people.uri, "-s", "1", "-f", "json", "-o", out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == _expected(people, start_version=1)


def test_changes_limit(people, tmp_path):
    rows = ok("changes", people.uri, "-s", "2", "-f", "json", "--limit", "2").stdout.splitlines()
    assert len(rows) == 2
    assert ok("changes", people.uri, "-s", "2", "-f", "json", "-n", "0").stdout == ""
    out = ok("changes", people.uri, "-s", "2", "--limit", "3").stdout
    assert "3+ rows" in out and "more rows not shown" in out
    out_file = tmp_path / "l.parquet"
    ok("changes", people.uri, "-s", "2", "-f", "parquet", "-o", out_file, "-n", "4")
    assert pq.read_table(out_file).num_rows == 4


def test_changes_default_table_cap(tmp_path):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]))
    t.insert(pa.table({"id": list(range(150))}))
    out = ok("changes", t.uri).stdout
    assert "100+ rows" in out and "use --limit N" in out
    assert len(ok("changes", t.uri, "-f", "json").stdout.splitlines()) == 150


def test_changes_timestamps(people):
    ts2 = people.snapshot(2).timestamp.isoformat()
    ts3 = people.snapshot(3).timestamp.isoformat()
    rows = [json.loads(x) for x in ok("changes", people.uri, "--start-timestamp", ts2, "--end-timestamp", ts3, "--json").stdout.splitlines()]
    assert rows == _expected(people, start_version=2, end_version=3)


def test_changes_errors(people, tmp_path):
    assert_one_line_error(run("changes", people.uri, "-f", "parquet"), 1, "--output")
    assert_one_line_error(run("changes", people.uri, "-o", tmp_path / "x.txt"), 1, "--format")
    assert_one_line_error(run("changes", people.uri, "--json", "-f", "table"), 1, "contradict")
    assert_one_line_error(run("changes", people.uri, "--json", "-f", "csv"), 1, "--output")
    assert_one_line_error(run("changes", people.uri, "-s", "9"), 1, "beyond the latest")
    assert_one_line_error(run("changes", people.uri, "-s", "4", "-e", "2"), 1, "reversed")
    assert_one_line_error(run("changes", people.uri, "-s", "1", "--start-timestamp", "2020-01-01"), 1, "not both")
    assert_one_line_error(run("changes", people.uri, "-n", "-1"), 2, "--limit")


def test_changes_csv_refuses_nested_columns(tmp_path):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string()))]))
    t.insert(pa.table({"id": [1], "tags": [["a", "b"]]}))
    assert_one_line_error(run("changes", t.uri, "-f", "csv"), 1, "nested")
    (row,) = [json.loads(x) for x in ok("changes", t.uri, "--json").stdout.splitlines()]
    assert row["tags"] == ["a", "b"]


def test_changes_json_values_are_valid_json(tmp_path):
    import datetime as dt
    import decimal

    schema = pa.schema([("f", pa.float64()), ("d", pa.decimal128(5, 2)), ("b", pa.binary()), ("day", pa.date32())])
    t = ctfile.create_table(tmp_path / "t", schema)
    t.insert(pa.table({"f": [float("nan")], "d": [decimal.Decimal("1.50")], "b": [b"\x00\x01"], "day": [dt.date(2024, 2, 29)]}, schema=schema))
    line = ok("changes", t.uri, "--json").stdout.strip()
    row = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert (row["f"], row["d"], row["b"], row["day"]) == ("NaN", "1.50", "AAE=", "2024-02-29")


# ---------------------------------------------------------------- verify


def test_verify_healthy(people):
    r = ok("verify", people.uri)
    assert "healthy" in r.stdout and "6 log entries" in r.stdout
    doc = run_json("verify", people.uri)
    assert doc["healthy"] is True and doc["problems"] == [] and doc["latest_version"] == 5
    every = run_json("verify", people.uri, "--all-versions")
    assert every["snapshots_checked"] == [0, 1, 2, 3, 4, 5] and every["all_versions"] is True


def _verify_problems(t, *extra) -> tuple[str, list[dict]]:
    r = run("verify", t.uri, *extra)
    assert r.exit_code == 1, (r.stdout, r.stderr)
    doc = run("verify", t.uri, "--json", *extra)
    assert doc.exit_code == 1
    return r.stdout, json.loads(doc.stdout)["problems"]


def test_verify_missing_partition_file(fresh_people):
    path = _added_path(fresh_people, 5)
    os.remove(Path(fresh_people.uri) / path)
    out, problems = _verify_problems(fresh_people)
    assert [(p["check"], p["version"], p["path"]) for p in problems] == [("missing_file", 5, path)]
    assert f"missing_file: version 5, {path}" in out and "1 problems found" in out


def test_verify_truncated_file(fresh_people):
    path = _added_path(fresh_people, 5)
    f = Path(fresh_people.uri) / path
    f.write_bytes(f.read_bytes()[:100])
    out, problems = _verify_problems(fresh_people)
    assert {"size", "checksum", "unreadable"} <= {p["check"] for p in problems}
    assert all(p["path"] == path and p["version"] == 5 for p in problems)
    assert f"size: version 5, {path}" in out


def test_verify_flipped_bytes(fresh_people):
    path = _added_path(fresh_people, 5)
    f = Path(fresh_people.uri) / path
    data = bytearray(f.read_bytes())
    data[len(data) // 3] ^= 0x10
    f.write_bytes(bytes(data))
    out, problems = _verify_problems(fresh_people)
    assert ("checksum", 5, path) in [(p["check"], p["version"], p["path"]) for p in problems]
    assert "checksum mismatch" in out


def test_verify_edited_row_count(fresh_people):
    def bump(obj):
        if "add" in obj:
            obj["add"]["numRecords"] += 5
            obj["add"]["stats"]["numRecords"] += 5

    _edit_entry(fresh_people, 5, bump)
    out, problems = _verify_problems(fresh_people)
    assert "row_count" in {p["check"] for p in problems}
    assert all(p["version"] == 5 for p in problems if p["check"] == "row_count")
    assert "the log records numRecords" in out


def _first_row_id_beyond_int64(obj) -> None:
    if "add" in obj:
        obj["add"]["firstRowId"] = 2**63


def test_verify_first_row_id_beyond_int64(fresh_people):
    """Issue 12, defect 8, its reproduction: firstRowId = 2**63 in an add line
    passed decoding, and verify died with OverflowError (exit 2). Written as
    a writer would have (self-check included), so the range check is what
    catches it."""
    _edit_entry(fresh_people, 5, _first_row_id_beyond_int64)
    out, problems = _verify_problems(fresh_people)
    assert [(p["check"], p["version"]) for p in problems][:1] == [("log", 5)]
    assert f"'firstRowId' is {2**63}, which does not fit a long" in problems[0]["message"]
    assert "does not fit a long" in out
    with pytest.raises(ctfile.CorruptLogError, match="does not fit a long"):
        ctfile.open_table(fresh_people.uri).snapshot().to_arrow(include_hidden=True)


def test_verify_first_row_id_edited_in_place(fresh_people):
    """The same edit made in place, as in the issue: the entry no longer
    matches its commitInfo's checksum either."""
    p = _log_file(fresh_people, 5)
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    for obj in lines:
        _first_row_id_beyond_int64(obj)
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out, problems = _verify_problems(fresh_people)
    assert {p["check"] for p in problems} == {"log"}
    assert "(actionsChecksum): damaged or edited" in out


def test_verify_update_entry_torn_at_a_line_boundary(fresh_people):
    """Issue 12, defect 3: the trailing add line of an UPDATE's entry lost."""
    p = _log_file(fresh_people, 4)
    lines = p.read_bytes().split(b"\n")[:-1]
    p.write_bytes(b"".join(x + b"\n" for x in lines[:-1]))
    out, problems = _verify_problems(fresh_people)
    assert [(p["check"], p["version"]) for p in problems][:1] == [("log", 4)]
    assert "torn or edited" in problems[0]["message"]


def test_verify_edited_row_count_contradicting_stats(fresh_people):
    _edit_entry(fresh_people, 2, lambda o: o["add"].update(numRecords=4) if "add" in o else None)
    out, problems = _verify_problems(fresh_people)
    assert [(p["check"], p["version"]) for p in problems][:1] == [("log", 2)]
    assert "numRecords" in problems[0]["message"]


def test_verify_dotdot_path(fresh_people):
    _edit_entry(fresh_people, 1, lambda o: o["add"].update(path="data/../../outside.parquet") if "add" in o else None)
    out, problems = _verify_problems(fresh_people)
    assert ("path", 1, "data/../../outside.parquet") in [(p["check"], p["version"], p["path"]) for p in problems]
    assert "escapes the table root" in out


def test_verify_stats_not_matching(fresh_people):
    _edit_entry(fresh_people, 2, lambda o: o["add"]["stats"]["minValues"].update({"1": 4}) if "add" in o else None)
    out, problems = _verify_problems(fresh_people, "--all-versions")  # version 2's file is no longer live
    assert [(p["check"], p["version"]) for p in problems] == [("stats", 2)]
    assert "minValues is 4, the data holds 3" in out


def test_verify_duplicate_row_ids(fresh_people):
    _edit_entry(fresh_people, 2, lambda o: o["add"].update(firstRowId=0) if "add" in o else None)
    out, problems = _verify_problems(fresh_people, "--all-versions")
    assert "duplicate_row_id" in {p["check"] for p in problems}
    assert "row ids appear more than once" in out


def test_verify_non_dense_log(fresh_people):
    os.remove(_log_file(fresh_people, 3))
    out, problems = _verify_problems(fresh_people)
    assert problems[0]["check"] == "dense" and problems[0]["version"] == 3
    assert "version 3 is missing from the log" in out


def test_verify_could_not_run(tmp_path, people):
    r = run("verify", tmp_path / "nothing")
    assert_one_line_error(r, 2, "no ctfile table")
    assert_one_line_error(run("verify", people.uri, "--storage-option", "x=1"), 2, "object-store")
    assert_one_line_error(run("verify", people.uri, "--bogus"), 2, "No such option")


def test_verify_shows_progress_when_stdout_is_a_terminal(people, monkeypatch):
    monkeypatch.setattr(_output, "stdout_is_terminal", lambda: True)
    seen = []
    real = _output.progress_bar

    def spy(description, *, enabled=None):
        seen.append(enabled if enabled is not None else _output.stdout_is_terminal())
        return real(description, enabled=enabled)

    monkeypatch.setattr(_output, "progress_bar", spy)
    r = run("verify", people.uri)
    assert r.exit_code == 0 and "healthy" in r.stdout and seen == [True]
    monkeypatch.undo()
    with _output.progress_bar("x") as update:  # CliRunner's stdout is no terminal
        assert update is None
    with _output.progress_bar("x", enabled=True) as update:
        update("files", 1, 2)
        update("rows", 5, 0)


# ---------------------------------------------------------------- compact / vacuum


def test_compact(tmp_path):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64()), ("v", pa.string())]))
    for i in range(4):
        t.insert(pa.table({"id": [2 * i, 2 * i + 1], "v": ["a", "b"]}))
    t.update(pc.field("id") == 0, {"v": "z"})
    before = t.snapshot().to_arrow(include_hidden=True).sort_by("id")
    doc = run_json("compact", t.uri)
    assert doc["committed"] and doc["version"] == 6 and doc["partitions_removed"] == 4 and doc["partitions_added"] == 1
    assert doc["rows_copied"] == 8
    t.refresh()
    assert t.snapshot().to_arrow(include_hidden=True).sort_by("id").equals(before)  # ids and versions kept
    (h,) = run_json("history", t.uri, "-n", "1")["versions"]
    assert h["operation"] == "COMPACT" and h["data_change"] is False
    assert run_json("diff", t.uri, "6", "6")["plan_shape"] == "EMPTY"
    assert ok("changes", t.uri, "-s", "6", "-f", "json").stdout == ""
    assert "nothing to compact" in ok("compact", t.uri).stdout
    assert ok("verify", t.uri, "--all-versions").exit_code == 0


def test_compact_target_rows(tmp_path):
    t = ctfile.create_table(tmp_path / "t", pa.schema([("id", pa.int64())]))
    for i in range(6):
        t.insert(pa.table({"id": [i]}))
    out = ok("compact", t.uri, "--target-rows", "4").stdout  # partitions under half the target are small
    assert "compacted 6 partitions into 2" in out
    assert_one_line_error(run("compact", t.uri, "--target-rows", "0"), 2, "--target-rows")


def test_parse_duration():
    import datetime as dt

    assert parse_duration("7d") == dt.timedelta(days=7)
    assert parse_duration("1w2d3h4m5s") == dt.timedelta(days=9, hours=3, minutes=4, seconds=5)
    assert parse_duration("0s") == dt.timedelta(0)
    assert parse_duration("1.5h") == dt.timedelta(minutes=90)
    assert parse_duration("250ms") == dt.timedelta(milliseconds=250)
    for bad in ("", "7", "7x", "d7", "1d 2", "-1d"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_vacuum_says_when_the_grace_period_keeps_more_history(fresh_people):
    """--retain 0s alone keeps the default 24 h grace period of history: the
    result says so (text and JSON), and --help explains it."""
    doc = run_json("vacuum", fresh_people.uri, "--retain", "0s", "--dry-run")
    assert doc["oldest_version"] == 0 and doc["deleted_log_files"] == []
    assert (doc["retain_s"], doc["grace_period_s"], doc["effective_retain_s"]) == (0, 86400, 86400)
    (note,) = doc["notes"]
    assert "--retain 0s is shorter than the grace period 1d" in note and "kept for 1d" in note
    assert doc["history_cutoff"].endswith("Z")
    text = ok("vacuum", fresh_people.uri, "--retain", "0s").stdout
    assert "note: --retain 0s is shorter than the grace period 1d" in text
    assert "versions 0..5 remain readable" in text
    both = run_json("vacuum", fresh_people.uri, "--retain", "0s", "--grace-period", "0s", "--dry-run")
    assert both["notes"] == [] and both["effective_retain_s"] == 0 and both["oldest_version"] == 5
    assert run_json("vacuum", fresh_people.uri, "--dry-run")["notes"] == []  # 7d >= 24h
    help_text = " ".join(ok("vacuum", "--help").stdout.split())
    assert "--retain 0s" in help_text and "keeps 24h" in help_text


def test_vacuum(fresh_people):
    root = Path(fresh_people.uri)
    assert_one_line_error(run("vacuum", fresh_people.uri, "--retain", "soon"), 2, "--retain")
    assert_one_line_error(run("vacuum", fresh_people.uri, "--grace-period", "5"), 2, "--grace-period")
    # Defaults (7 days, 24 hours): a young table loses nothing.
    doc = run_json("vacuum", fresh_people.uri)
    assert doc["deleted_data_files"] == [] and doc["deleted_log_files"] == [] and doc["oldest_version"] == 0

    files_before = sorted(p.name for p in (root / "data").iterdir())
    dry = run_json("vacuum", fresh_people.uri, "--retain", "0s", "--grace-period", "0s", "--dry-run")
    assert dry["dry_run"] is True and dry["oldest_version"] == 5 and dry["deleted_data_files"]
    assert dry["deleted_log_files"] == [f"_ct_log/{v:020d}.json" for v in range(5)]
    assert sorted(p.name for p in (root / "data").iterdir()) == files_before  # nothing deleted
    assert "would delete" in ok("vacuum", fresh_people.uri, "-r", "0s", "--grace-period", "0s", "--dry-run").stdout

    out = ok("vacuum", fresh_people.uri, "--retain", "0s", "--grace-period", "0s").stdout
    assert f"deleted {len(dry['deleted_data_files'])} data files" in out and "versions 5..5 remain readable" in out
    assert not any((root / f).exists() for f in dry["deleted_data_files"] + dry["deleted_log_files"])
    assert [v["version"] for v in run_json("history", fresh_people.uri)["versions"]] == [5]
    # What is left verifies clean, every remaining version included.
    assert run_json("verify", fresh_people.uri, "--all-versions")["healthy"] is True
    assert_one_line_error(run("show", fresh_people.uri, "--version", "2"), 1, "version 2")


# ---------------------------------------------------------------- streams

STREAM_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _state_files(t: ctfile.Table) -> list[str]:
    root = Path(t.uri) / "_ct_streams"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))


@pytest.fixture
def streamed(tmp_path) -> ctfile.Table:
    """A table for the stream commands: v0 create, v1 insert ids 1, 2."""
    t = ctfile.create_table(tmp_path / "t", STREAM_SCHEMA)
    t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=STREAM_SCHEMA))
    return t


def test_streams_create_list_drop(streamed):
    assert "no streams on" in ok("streams", streamed.uri).stdout
    assert run_json("streams", streamed.uri)["streams"] == []

    doc = run_json("streams", streamed.uri, "--create", "to_silver")
    assert doc["created"] == "to_silver"
    [s] = doc["streams"]
    assert (s["name"], s["mode"], s["offset"], s["lag_versions"], s["stale"], s["claim"]) == (
        "to_silver", "default", 2, 0, False, None)  # v2: the CREATE STREAM commit
    assert s["stale_after"] is None and s["age_s"] is None

    text = ok("streams", streamed.uri, "--create", "backfill", "-i", "audit", "--start-version", "1",
              "--initial-rows").stdout
    assert "created stream backfill" in text and "audit" in text and "stale after" in text
    backfill = streamed.stream("backfill")
    assert (backfill.information, backfill.offset, backfill.state().initial_rows) == ("audit", 0, True)
    streamed.insert(pa.table({"id": [3], "v": ["c"]}, schema=STREAM_SCHEMA))
    rows = {s["name"]: s for s in run_json("streams", streamed.uri)["streams"]}
    assert (rows["to_silver"]["lag_versions"], rows["to_silver"]["lag_rows"]) == (1, 1)
    assert rows["backfill"]["lag_versions"] == 3 and rows["backfill"]["stale_after"].endswith("Z")
    assert rows["to_silver"]["oldest_pending"] == _output.fmt_time(streamed.history(limit=1)[0].timestamp)

    doc = run_json("streams", streamed.uri, "--drop", "to_silver")
    assert doc["dropped"] == "to_silver" and [s["name"] for s in doc["streams"]] == ["backfill"]
    assert "dropped stream backfill" in ok("streams", streamed.uri, "--drop", "backfill").stdout
    assert run_json("streams", streamed.uri)["streams"] == []


def test_streams_errors_are_one_line_and_change_nothing(streamed):
    ok("streams", streamed.uri, "--create", "s")
    files, version = _state_files(streamed), streamed.refresh().version
    assert_one_line_error(run("streams", streamed.uri, "--create", "s"), 1, "'s' already exists")
    assert_one_line_error(run("streams", streamed.uri, "--drop", "nope"), 1, "no stream 'nope'")
    assert_one_line_error(run("streams", streamed.uri, "--create", "bad name"), 1, "a stream name is", "'bad name'")
    assert_one_line_error(run("streams", streamed.uri, "--create", "x", "--start-version", "9"), 1,
                          "start_version", "found 9")
    assert_one_line_error(run("streams", streamed.uri, "--create", "x", "-i", "everything"), 2, "--information")
    assert_one_line_error(run("streams", streamed.uri, "--initial-rows"), 2, "go with --create")
    assert_one_line_error(run("streams", streamed.uri, "--create", "a", "--drop", "s"), 2, "not both")
    r = run("streams", streamed.uri, "--drop", "nope", "--json")
    assert r.exit_code == 1 and json.loads(r.stderr)["type"] == "StreamNotFoundError"
    assert_one_line_error(run("streams", str(Path(streamed.uri).parent / "missing")), 1)
    assert _state_files(streamed) == files and streamed.refresh().version == version


def test_streams_show_a_consumption_in_progress(streamed, tmp_path):
    target = ctfile.create_table(tmp_path / "target", STREAM_SCHEMA)
    streamed.create_stream("s")
    streamed.insert(pa.table({"id": [3], "v": ["c"]}, schema=STREAM_SCHEMA))
    store = StreamStore(streamed.storage)
    state = store.current("s")
    # A consumer that wrote its claim (SPEC §Streams, step 2) and is still running.
    store.write_next(state.claimed(end=streamed.version, target_uri=target.uri, target_table_id=target.table_id,
                                   now_ms=int(time.time() * 1000)))
    [s] = run_json("streams", streamed.uri)["streams"]
    assert s["claim"]["end"] == streamed.version and s["claim"]["target_uri"] == target.uri
    text = ok("streams", streamed.uri).stdout
    assert f"versions {state.offset + 1}..{streamed.version} into" in text


def test_vacuum_names_the_streams_holding_history_and_those_it_makes_stale(streamed):
    streamed.set_properties({"ctfile.maxRetentionExtension": "1h"})
    s = streamed.create_stream("lagging")
    streamed.insert(pa.table({"id": [3], "v": ["c"]}, schema=STREAM_SCHEMA))
    streamed.insert(pa.table({"id": [4], "v": ["d"]}, schema=STREAM_SCHEMA))
    args = ("vacuum", streamed.uri, "--retain", "0s", "--grace-period", "0s")

    dry = run_json(*args, "--dry-run")
    [h] = dry["holding_streams"]
    assert (h["name"], h["offset"], h["needs_version"]) == ("lagging", s.offset, s.offset + 1)
    assert dry["stale_streams"] == [] and dry["oldest_version"] == s.offset + 1
    text = ok(*args, "--dry-run").stdout
    assert f"stream lagging (offset {s.offset}) holds history from version {s.offset + 1}" in text

    # Without an extension the vacuum no longer holds: it names the stream it
    # would make stale, and a dry run changes nothing.
    streamed.set_properties({"ctfile.maxRetentionExtension": "0s"})
    time.sleep(0.05)  # the vacuum's clock strictly after every commit
    files = _state_files(streamed)
    dry = run_json(*args, "--dry-run")
    assert [h["name"] for h in dry["stale_streams"]] == ["lagging"] and dry["holding_streams"] == []
    assert "stream lagging (offset 3) would be made stale" in ok(*args, "--dry-run").stdout
    assert _state_files(streamed) == files and not streamed.stream("lagging").state().is_stale

    text = ok(*args).stdout
    assert "stream lagging (offset 3) made stale" in text
    [row] = run_json("streams", streamed.uri)["streams"]
    assert row["stale"] and row["stale_since"].endswith("Z") and row["stale_after"] is None
    assert "STALE since" in ok("streams", streamed.uri).stdout
    with pytest.raises(ctfile.StaleStreamError):
        s.pending()


# ---------------------------------------------------------------- checkpoint


def test_checkpoint(fresh_people):
    root = Path(fresh_people.uri)
    doc = run_json("checkpoint", fresh_people.uri)
    assert doc == {
        "uri": fresh_people.uri, "version": 5, "path": "_ct_log/00000000000000000005.checkpoint.parquet",
        "num_partitions": 2, "size_bytes": (root / doc["path"]).stat().st_size,
    }
    assert json.loads((root / "_ct_log" / "_last_checkpoint").read_text()) == {"version": 5, "numPartitions": 2}
    assert pq.read_table(root / doc["path"]).column("path").to_pylist() == [
        p.path for p in ctfile.open_table(fresh_people.uri).snapshot().partitions]
    out = ok("checkpoint", fresh_people.uri, "--version", "2").stdout
    assert "wrote the checkpoint of version 2: 2 live partitions" in out
    assert "_ct_log/00000000000000000002.checkpoint.parquet" in out
    assert json.loads((root / "_ct_log" / "_last_checkpoint").read_text())["version"] == 5  # not moved back
    # The table reads the same from the checkpoints alone (entries before 5 gone), and verifies clean.
    for v in range(5):
        (root / "_ct_log" / f"{v:020d}.json").unlink()
    shown = run_json("show", fresh_people.uri)
    assert (shown["version"], shown["num_records"], shown["hidden_columns"]["next_row_id"]) == (5, 3, 13)
    assert run_json("verify", fresh_people.uri)["healthy"] is True


def test_checkpoint_errors(fresh_people):
    assert_one_line_error(run("checkpoint", fresh_people.uri, "--version", "9"), 1, "version 9")
    assert_one_line_error(run("checkpoint", fresh_people.uri, "--version", "-1"), 2, "--version")
    r = run("checkpoint", fresh_people.uri, "--version", "9", "--json")
    assert r.exit_code == 1 and json.loads(r.stderr)["type"] == "VersionNotFoundError"
    assert not list((Path(fresh_people.uri) / "_ct_log").glob("*.checkpoint.parquet"))


# ---------------------------------------------------------------- change capture (SPEC §Change capture)


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> ctfile.Table:
    """v1 insert 1..4 (partitionRows 2), v2 update id 1, v3 set capture on,
    v4 update id 3, v5 delete ids 1, 2 (a whole partition)."""
    t = ctfile.create_table(
        tmp_path_factory.mktemp("cli") / "captured",
        pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())]), partition_rows=2,
    )
    t.insert(pa.table({"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"]}))
    t.update(pc.field("id") == 1, {"name": "A"})
    t.set_properties({"ctfile.changeCapture": "before_after"})
    t.update(pc.field("id") == 3, {"name": "C"})
    t.delete(pc.field("id") <= 2)
    return t


def test_history_shows_which_commits_are_captured(captured):
    versions = {v["version"]: v for v in run_json("history", captured.uri)["versions"]}
    # v1 is an insert: nothing to capture (null); v0 and v3 change no data.
    assert [versions[v]["captured"] for v in range(6)] == [None, None, False, None, True, True]
    (change,) = [a for a in captured.log.read_entry(4) if type(a).__name__ == "ChangeFile"]
    assert (versions[4]["change_files"], versions[4]["change_bytes"]) == (1, change.size_bytes)
    assert versions[5]["change_files"] == 0 and versions[2]["change_files"] == 0
    h = {e.version: e for e in captured.history()}
    assert (h[4].captured, h[4].change_files, h[4].change_bytes) == (True, 1, change.size_bytes)
    text = ok("history", captured.uri).stdout
    assert "captured" in text and "1 files" in text


def test_history_does_not_mark_appends_as_captured(tmp_path):
    """Issue 26: an append was marked captured (``yes``; true in JSON) on a
    table with change capture off, as if it had been recorded: it removes
    no partition, so it has nothing to capture (its change rows are the
    rows it added) and shows ``not needed`` (null), like the inserts of a
    capture-on table; a DELETE there shows whether it was captured."""
    for capture in ("none", "before_after"):
        t = ctfile.create_table(
            tmp_path / capture, pa.schema([pa.field("id", pa.int64(), nullable=False)]), partition_rows=2,
            properties={"ctfile.changeCapture": capture},
        )
        t.insert(pa.table({"id": [1, 2, 3]}))  # v1: an append
        t.delete(pc.field("id") == 1)  # v2: rewrites the partition holding 1
        h = {e.version: e for e in t.history()}
        assert (h[1].captured, h[1].data_change, h[2].captured) == (None, True, capture == "before_after")
        doc = {v["version"]: v for v in run_json("history", t.uri)["versions"]}
        assert (doc[1]["captured"], doc[2]["captured"]) == (None, capture == "before_after")
        lines = ok("history", t.uri).stdout.replace("┃", "│").splitlines()
        table = [[c.strip() for c in line.split("│")[1:-1]] for line in lines]
        column = next(row for row in table if "captured" in row).index("captured")
        cell = {int(row[0]): row[column] for row in table if row and row[0].isdigit()}
        assert cell[1] == "not needed"
        assert cell[2].startswith("yes, 1 files") if capture == "before_after" else cell[2] == "no"
        commits = run_json("diff", t.uri, "1", "2")["commits"]
        assert [(c["version"], c["captured"]) for c in commits] == [(1, None), (2, capture == "before_after")]


def test_show_shows_the_change_capture_mode(captured):
    assert run_json("show", captured.uri)["change_capture"] == "before_after"
    assert run_json("show", captured.uri, "--version", "2")["change_capture"] == "none"
    assert "change capture: before_after" in ok("show", captured.uri).stdout
    assert "changeCapture" in run_json("show", captured.uri)["protocol"]["writer_features"]


def test_vacuum_reports_change_files(tmp_path):
    t = ctfile.create_table(
        tmp_path / "t", pa.schema([pa.field("id", pa.int64(), nullable=False)]),
        properties={"ctfile.changeCapture": "before_after"},
    )
    t.insert(pa.table({"id": [1, 2]}))
    t.delete(pc.field("id") == 1)
    t.insert(pa.table({"id": [3]}))
    doc = run_json("vacuum", t.uri, "--retain", "0s", "--grace-period", "0s")
    assert len(doc["deleted_change_files"]) == 1 and doc["change_bytes_freed"] > 0
    assert doc["bytes_freed"] > doc["change_bytes_freed"]


def test_diff_shows_captured_commits(new_table, make_rows):
    """With capture switched on mid-history, diff marks the captured commits,
    lists the change files a scan reads, and counts their bytes instead of
    the partitions the captured UPDATE rewrote."""
    t = new_table(partition_rows=10)
    t.insert(make_rows(30))  # v1
    t.update(pc.field("id") == 1, {"s": "a"})  # v2: not captured
    t.set_properties({"ctfile.changeCapture": "before_after"})  # v3
    t.update(pc.field("id").isin([2, 22]), {"s": "b"})  # v4: captured, one change file
    doc = run_json("diff", t.uri, "2", "4")
    assert doc["plan_shape"] == "MIXED"
    assert [(c["version"], c["captured"], c["change_files"]) for c in doc["commits"]] == [(2, False, 0), (4, True, 1)]
    change = [a for a in t.log.read_entry(4) if type(a).__name__ == "ChangeFile"]
    assert doc["change_files_to_read"] == [change[0].path]
    assert doc["commits"][1]["change_bytes"] == change[0].size_bytes
    # v4 rewrote a partition of v1 (not read: its change file has the old images)
    # and v2's rewrite of row 1 (read: the net added of the run v2).
    rewritten = {a.path: a.partition.default_row_version for a in t.log.read_entry(4) if type(a).__name__ == "RemovePartition"}
    assert sorted(rewritten.values()) == [1, 2]
    assert [v for p, v in rewritten.items() if p in doc["partitions_to_read"]] == [2]
    cs = t.changes(start_version=2, end_version=4)
    assert doc["bytes_to_read"] == cs.plan.bytes_to_read
    text = ok("diff", t.uri, "4", "4").stdout
    assert "CAPTURED" in text and "1 change files" in text and "captured" in text
