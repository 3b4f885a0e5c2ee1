"""Smoke test of the Spark benchmark: ``bench_spark.py --quick`` runs end to
end in its own process (its own local[2] session) and writes a well-formed
result file, so the script cannot rot. Timings are not asserted; only the
shape of the output and that every side read every row."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_spark.py"


def _pos(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_bench_spark_quick_writes_valid_json(tmp_path):
    out = tmp_path / "spark.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--work-dir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| snapshot scan," in proc.stdout and "| floor:" in proc.stdout
    r = json.loads(out.read_text())
    assert r["scale_factor"] == "0.01" and r["rows"] > 50_000  # lineitem SF 0.01: ~60k rows
    assert r["partitions"] >= 3  # 20,000-row partitions in quick mode
    assert r["runs"] == 2
    for key in ("spark_read_parquet_s", "ctfile_s", "ratio", "cpu_ratio", "floor_s", "floor_ratio"):
        assert _pos(r[key]), (key, r[key])
    assert set(r["runs_s"]) == {"parquet", "ctfile", "floor"}
    assert all(len(v) == 2 for v in r["runs_s"].values())
    # The table was built in the given work dir, not the shared cache.
    assert any((tmp_path / "work" / "spark").iterdir())
