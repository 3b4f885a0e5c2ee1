"""Smoke test of ``benchmarks/bench_spark_dml.py --quick``: it runs end to end
in its own process and writes a well-formed result that ``benchmarks/run.py``
renders. Timings are not asserted, only the shape of the output and that the
Spark MERGE and UPDATE did what the Python ones did."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_spark_dml.py"


@pytest.mark.long  # a Spark session of its own: minutes of the suite; run with -m long
def test_bench_spark_dml_quick(tmp_path):
    out = tmp_path / "spark_dml.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    m = r["meta"]
    assert m["scale"] == "0.01" and m["rows"] > 50_000 and m["batch_rows"] == int(m["rows"] * 0.005)
    sides = {"spark", "python", "floor", "spark_update", "python_update", "floor_update",
             "spark_sync", "python_sync", "floor_sync"}
    assert set(r["median_s"]) == sides and all(v > 0 for v in r["median_s"].values())
    c = r["counts"]
    assert c["same_as_python"] and c["inserted"] == m["batch_rows"] - m["batch_rows"] // 2
    assert c["updated"] == m["batch_rows"] // 2 and isinstance(r["pass"], bool)
    u = r["update"]
    assert u["same_as_python"] and 0 < u["updated"] < m["rows"] // 100 and isinstance(u["pass"], bool)
    assert 0 < u["removed_partitions"] < m["partitions"]  # the rows sit in the first partition(s)
    y = r["sync"]
    assert y["same_as_python"] and y["deleted"] == m["rows"] - y["snapshot_rows"] == int(m["rows"] * 0.005)
    assert isinstance(y["pass"], bool)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "spark_dml.json").write_text(out.read_text())
    text = run.render(tmp_path / "results")
    assert "ctfile.spark on local[2]" in text and "native floor" in text and "UPDATE where l_orderkey <=" in text
    assert "WHEN NOT MATCHED BY SOURCE THEN DELETE" in text
