"""Smoke test of ``benchmarks/bench_spark_native.py --quick``: it runs end to
end in its own processes and writes a well-formed result that
``benchmarks/run.py`` renders. Timings are not asserted, only the shape of
the output, that every side counted every row, that ``to_df()`` read
natively and that its ``count()`` read only footers."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_spark_native.py"


def _pos(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.mark.long  # a Spark session of its own: minutes of the suite; run with -m long
def test_bench_spark_native_quick(tmp_path):
    out = tmp_path / "spark_native.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "## Spark reads through `CtfileTable.to_df()`" in proc.stdout
    r = json.loads(out.read_text())
    m = r["meta"]
    assert m["mode"] == "quick" and m["scale_factor"] == "0.01" and m["rows"] > 50_000 and m["partitions"] >= 3
    for key in ("scan", "count"):
        x = r[key]
        assert set(x["s"]) == {"parquet", "to_df", "ctfile"} and all(len(v) == m["runs"] for v in x["runs_s"].values())
        assert all(_pos(v) for v in list(x["s"].values()) + [x["ratio"], x["ctfile_ratio"]])
        assert isinstance(x["pass"], bool)
    assert r["count"]["footers_only"] is True
    fa = r["first_action"]
    assert set(fa["runs"]) == {"parquet", "to_df", "ctfile"}
    assert all(run["rows"] == m["rows"] for runs in fa["runs"].values() for run in runs)
    assert all(_pos(fa["median"][s]["first_action_s"]) for s in fa["runs"])
    # benchmarks/run.py renders its figures and its table from the JSON alone.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "spark_native.json").write_text(out.read_text())
    text = run.render(tmp_path / "results")
    assert "to_df() full scan through Spark" in text and "first Spark action of a fresh process" in text
    assert "## Spark reads through `CtfileTable.to_df()`" in text


@pytest.mark.long  # a Spark session of its own: minutes of the suite; run with -m long
def test_bench_spark_changes_quick(tmp_path):
    """``--changes`` (issue 29): changes_df(information='default') and the
    data source agree on every interval (the script checks it), changes_df
    read natively, and run.py renders the figures."""
    out = tmp_path / "spark_changes.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--changes", "--quick", "--out", str(out), "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert set(r["changes"]) == {"small", "insert", "large"}
    for x in r["changes"].values():
        assert x["change_rows"] > 0 and set(x["s"]) == {"changes_df", "ctfile", "floor"} and _pos(x["ratio"])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_bench_run_changes", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "spark_changes.json").write_text(out.read_text())
    text = run.render(tmp_path / "results")
    assert "changes_df(information='default') of versions 2..2" in text
    assert "## Minimum-delta change scans through Spark" in text
