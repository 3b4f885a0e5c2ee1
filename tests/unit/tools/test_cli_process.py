"""The installed ``ctfile`` executable as a subprocess, and the command on s3:// URLs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app


def _ctfile_command() -> list[str]:
    """The console script next to this interpreter (installed by ``./dev``);
    ``python -m ctfile.tools`` when the package is not installed as a script."""
    script = Path(sys.executable).parent / "ctfile"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "ctfile.tools"]


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        _ctfile_command() + [str(a) for a in args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def _table(root: Path) -> ctfile.Table:
    t = ctfile.create_table(root, pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())]))
    t.insert(pa.table({"id": [1, 2], "name": ["Jeff", "Donny"]}))
    t.insert(pa.table({"id": [3], "name": ["Walter"]}))
    t.update(pc.field("id") == 1, {"name": "Jeffrey"})
    return t


def test_installed_executable(tmp_path):
    t = _table(tmp_path / "t")
    r = _run("history", t.uri, "--json")
    assert r.returncode == 0, r.stderr
    assert [v["version"] for v in json.loads(r.stdout)["versions"]] == [3, 2, 1, 0]

    part = t.snapshot().partitions[0].path
    (Path(t.uri) / part).unlink()
    r = _run("verify", t.uri)
    assert r.returncode == 1 and part in r.stdout and "missing_file" in r.stdout
    assert r.stderr == ""  # no progress bar when stdout is a pipe

    r = _run("verify", tmp_path / "missing")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and "no ctfile table" in r.stderr


def test_python_dash_m(monkeypatch, capsys):
    """``python -m ctfile.tools`` (run in-process: a subprocess costs seconds)."""
    import runpy

    monkeypatch.setattr(sys, "argv", ["ctfile", "--version"])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("ctfile.tools", run_name="__main__", alter_sys=False)
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"ctfile {ctfile.__version__}"


# ---------------------------------------------------------------- s3://


@pytest.fixture(scope="module")
def s3(request):
    """(endpoint_url, key, secret, bucket) of an S3 server on 127.0.0.1: the
    suite's moto fixture when there is one, else a moto server of our own."""
    try:
        ep = request.getfixturevalue("moto_s3")
        return ep.endpoint_url, ep.key, ep.secret, ep.bucket
    except pytest.FixtureLookupError:
        pass
    moto_server = pytest.importorskip("moto.server")
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    request.addfinalizer(server.stop)
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=url, aws_access_key_id="k", aws_secret_access_key="s",
                 region_name="us-east-1").create_bucket(Bucket="ctfile-cli")
    return url, "k", "s", "ctfile-cli"


def test_commands_on_s3(s3, tmp_path):
    url, key, secret, bucket = s3
    so = {"endpoint_url": url, "key": key, "secret": secret, "client_kwargs": {"region_name": "us-east-1"}}
    uri = f"s3://{bucket}/cli-{os.urandom(6).hex()}"
    t = ctfile.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]), storage_options=so)
    t.insert(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    t.insert(pa.table({"id": [3], "v": ["c"]}))
    t.delete(pc.field("id") == 2)
    opts = ["--storage-option", f"endpoint_url={url}", "--storage-option", f"key={key}",
            "--storage-option", f"secret={secret}", "--storage-option", "client_kwargs.region_name=us-east-1"]
    runner = CliRunner()

    def run(*args):
        return runner.invoke(app, [*map(str, args), *opts])

    r = run("history", uri, "--json")
    assert r.exit_code == 0, r.stderr
    assert [v["operation"] for v in json.loads(r.stdout)["versions"]] == ["DELETE", "INSERT", "INSERT", "CREATE TABLE"]
    assert json.loads(run("show", uri, "--json").stdout)["num_records"] == 2
    assert json.loads(run("diff", uri, "1", "3", "--json").stdout)["plan_shape"] == "ADDED_ONLY"
    rows = [json.loads(x) for x in run("changes", uri, "--start", "3", "--json").stdout.splitlines()]
    assert [(r["id"], r["METADATA$ACTION"]) for r in rows] == [(2, "DELETE")]

    r = run("compact", uri, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["committed"], r.stderr
    r = run("verify", uri, "--all-versions", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["healthy"] is True

    # A missing object is found as on a local disk.
    live = ctfile.open_table(uri, storage_options=so).snapshot().partitions[0].path
    import fsspec

    fs, root = fsspec.core.url_to_fs(uri, **so)
    fs.rm_file(f"{root}/{live}")
    r = run("verify", uri, "--json")
    assert r.exit_code == 1
    assert [(p["check"], p["path"]) for p in json.loads(r.stdout)["problems"]] == [("missing_file", live)]

    r = run("history", f"s3://{bucket}/no-such-table")
    assert r.exit_code == 1 and "no ctfile table" in r.stderr and r.stderr.count("\n") == 1


def test_json_storage_option_values_on_s3(s3):
    """``--storage-option client_kwargs={"region_name": ...}`` reaches s3fs as
    a dict (it used to arrive as a string and fail with AttributeError)."""
    url, key, secret, bucket = s3
    so = {"endpoint_url": url, "key": key, "secret": secret, "client_kwargs": {"region_name": "us-east-1"}}
    uri = f"s3://{bucket}/cli-json-{os.urandom(6).hex()}"
    ctfile.create_table(uri, pa.schema([("id", pa.int64())]), storage_options=so).insert(pa.table({"id": [1]}))
    r = CliRunner().invoke(app, [
        "show", uri, "--json", "--storage-option", f"endpoint_url={url}", "--storage-option", f"key={key}",
        "--storage-option", f"secret={secret}", "--storage-option", 'client_kwargs={"region_name": "us-east-1"}',
        "--storage-option", 'config_kwargs={"retries": {"max_attempts": 2}}',
    ])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["num_records"] == 1
