"""``ctfile restore URI --version V | --timestamp T`` (SPEC §Restore), on real
tables, local and on the S3 server (moto) with ``--storage-option``."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app

runner = CliRunner()
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _people(uri: str, **kw) -> ctfile.Table:
    t = ctfile.create_table(uri, SCHEMA, **kw)
    t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}, schema=SCHEMA))
    t.update(pc.field("id") == 1, {"name": "Jeffrey"})
    t.delete(pc.field("id") == 2)
    return t


def _one_line_error(r, code: int, *needles: str) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith(("ctfile: error: ", "{")), err
    for n in needles:
        assert n in err, (n, err)


def test_restore_by_version_prints_what_it_did(tmp_path):
    t = _people(str(tmp_path / "t"))
    r = run("restore", t.uri, "--version", 1)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == "restored version 1 in version 4: re-added 1 partitions (2 rows), removed 1 (1 rows)"
    assert t.refresh().to_arrow().to_pylist() == [{"id": 1, "name": "Jeff"}, {"id": 2, "name": "Donny"}]
    r = run("restore", t.uri, "--version", 1)  # already so
    assert r.exit_code == 0 and "nothing committed (version 4)" in r.stdout


def test_restore_by_timestamp_as_json(tmp_path):
    t = _people(str(tmp_path / "t"))
    ts = t.history()[-2].timestamp.isoformat()  # version 1's commit time
    r = run("restore", t.uri, "--timestamp", ts, "--json")
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info == {
        "uri": t.uri, "committed": True, "version": 4, "restored_version": 1, "timestamp": info["timestamp"],
        "partitions_re_added": 1, "partitions_removed": 1, "rows_re_added": 2, "rows_removed": 1,
    }
    assert ctfile.open_table(t.uri).log.commit_info(4).operation_parameters == {"timestamp": info["timestamp"], "version": 1}


@pytest.mark.parametrize("args, needle", [
    ((), "exactly one"),
    (("--version", 1, "--timestamp", "2026-01-01"), "exactly one"),
    (("--version", -1), "greater than or equal to 0"),
    (("--timestamp", "yesterday"), "not an ISO-8601 timestamp"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    t = _people(str(tmp_path / "t"))
    _one_line_error(run("restore", t.uri, *args), 2, needle)
    assert t.refresh().version == 3


def test_errors_of_the_table_are_one_line_and_exit_1(tmp_path):
    t = _people(str(tmp_path / "t"))
    _one_line_error(run("restore", t.uri, "--version", 9), 1, "latest version is 3")
    r = run("restore", t.uri, "--version", 9, "--json")
    assert r.exit_code == 1 and json.loads(r.stderr)["type"] == "VersionNotFoundError"
    t.vacuum(retain=0, grace_period=0)
    _one_line_error(run("restore", t.uri, "--version", 1), 1, "version 1")
    _one_line_error(run("restore", str(tmp_path / "none"), "--version", 1), 1)
    assert t.refresh().version == 3


def test_restore_on_the_s3_server_with_storage_options(moto_s3):
    uri = moto_s3.new_uri("cli-restore")
    opts = moto_s3.storage_options()
    _people(uri, storage_options=opts)
    flags = [x for k, v in opts.items() if isinstance(v, str) for x in ("--storage-option", f"{k}={v}")]
    flags += [x for k, v in opts.items() if isinstance(v, dict) for x in ("--storage-option", f"{k}={json.dumps(v)}")]
    r = run("restore", uri, "--version", 1, "--json", *flags)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 4
    t = ctfile.open_table(uri, storage_options=opts)
    assert t.snapshot().to_arrow(include_hidden=True).to_pylist() == t.snapshot(1).to_arrow(include_hidden=True).to_pylist()
