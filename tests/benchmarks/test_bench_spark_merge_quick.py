"""Smoke test of ``benchmarks/bench_merge.py --spark --quick``: it runs end
to end in its own process (which checks, before timing, that the Spark
MERGE on either path leaves the rows the Python one does) and writes a
result that ``benchmarks/run.py`` renders. Timings are not asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_merge.py"


@pytest.mark.long  # a Spark session of its own: minutes of the suite; run with -m long
def test_bench_merge_spark_quick(tmp_path):
    out = tmp_path / "merge_spark.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--spark", "--quick", "--rows", "20000", "--partition-rows", "5000",
         "--out", str(out), "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["meta"]["batch"] == 100 and r["meta"]["rows"] == 20_000
    assert set(r["ms"]) == {"spark", "python", "spark_upsert", "upsert", "spark_executors", "spark_spread"}
    assert set(r["ratio"]) == set(r["pass"]) == {"python", "upsert"}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "merge_spark.json").write_text(out.read_text())
    text = run.render(tmp_path / "results")
    assert "Spark MERGE of 100 rows into 20,000" in text and "## A small MERGE through ctfile.spark" in text
