"""``ctfile changes -o FILE``: the format told from the name and compressed
exports (``.jsonl.zst``, ``.jsonl.gz``, ``.csv.gz``) through fsspec, on a copy
of the golden ``people`` table."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app

GOLDEN = Path(__file__).resolve().parents[2] / "conformance" / "golden" / "people"
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def ok(*args):
    r = run(*args)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r


@pytest.fixture
def people(tmp_path) -> str:
    dst = tmp_path / "people"
    shutil.copytree(GOLDEN, dst)
    return str(dst)


DECOMPRESS = {"zstd": lambda b: zstandard.ZstdDecompressor().stream_reader(b).read(), "gzip": gzip.decompress}


@pytest.mark.parametrize(("name", "plain", "compression"), [
    ("c.jsonl.zst", "c.jsonl", "zstd"),
    ("c.jsonl.gz", "c.jsonl", "gzip"),
    ("c.csv.gz", "c.csv", "gzip"),
])
def test_compressed_export_round_trip(people, tmp_path, name, plain, compression):
    ok("changes", people, "-s", "1", "-o", tmp_path / plain)
    r = ok("changes", people, "-s", "1", "-o", tmp_path / name, "--json")
    summary = json.loads(r.stdout)
    assert summary["compression"] == compression
    assert summary["format"] == ("csv" if ".csv" in name else "json")
    raw = (tmp_path / name).read_bytes()
    expected = (tmp_path / plain).read_bytes()
    assert raw != expected and len(expected) > 0
    assert DECOMPRESS[compression](raw) == expected
    assert summary["rows"] == len(expected.decode().splitlines()) - (1 if ".csv" in name else 0)


def test_format_told_from_name_matches_explicit_format(people, tmp_path):
    ok("changes", people, "-s", "1", "-o", tmp_path / "named.csv")
    ok("changes", people, "-s", "1", "-f", "csv", "-o", tmp_path / "explicit.txt")
    assert (tmp_path / "named.csv").read_bytes() == (tmp_path / "explicit.txt").read_bytes()
    ok("changes", people, "-s", "1", "-o", tmp_path / "named.parquet")
    exp = ctfile.open_table(people).changes(start_version=1).to_arrow()
    assert pq.read_table(tmp_path / "named.parquet").to_pylist() == exp.to_pylist()


def test_explicit_format_with_compression_suffix(people, tmp_path):
    ok("changes", people, "-s", "1", "-f", "csv", "-o", tmp_path / "c.csv")
    ok("changes", people, "-s", "1", "-f", "csv", "-o", tmp_path / "rows.out.gz")
    assert gzip.decompress((tmp_path / "rows.out.gz").read_bytes()) == (tmp_path / "c.csv").read_bytes()


def test_json_flag_alone_still_writes_json_lines(people, tmp_path):
    """--json without --format wrote JSON lines to any name before formats were told from names."""
    ok("changes", people, "-s", "1", "-o", tmp_path / "rows.txt", "--json")
    ok("changes", people, "-s", "1", "-o", tmp_path / "rows.jsonl")
    assert (tmp_path / "rows.txt").read_bytes() == (tmp_path / "rows.jsonl").read_bytes()


@pytest.mark.parametrize(("args", "needles"), [
    (("-o", "c.parquet.gz"), ("Parquet cannot be compressed", "c.parquet.gz")),
    (("-f", "parquet", "-o", "c.parquet.zst"), ("Parquet cannot be compressed", "zstd")),
    (("-o", "c.jsonl.lz4"), ("cannot tell the format", "'.lz4'", ".zst", "--format")),
    (("-o", "c.gz"), ("cannot tell the format", "(none)")),
    (("-f", "csv", "-o", "c.jsonl.gz"), ("--format csv", "says json")),
])
def test_export_name_errors_write_nothing(people, tmp_path, args, needles):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = tuple(out_dir / a if a.startswith("c.") else a for a in args)
    r = run("changes", people, "-s", "1", *args)
    assert r.exit_code == 1, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert err.startswith("ctfile: error: ") and "\n" not in err, err
    for n in needles:
        assert n in err, (n, err)
    assert list(out_dir.iterdir()) == []
