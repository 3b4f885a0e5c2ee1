"""``benchmarks/bench_cold.py --quick`` runs end to end and writes its JSON.

Checks the exit code and the structure of the results (never timings: they
depend on the machine), and that ``benchmarks/run.py`` renders the figures.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_cold.py"


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/bench_cold.py not present")
def test_bench_cold_quick(tmp_path):
    out = tmp_path / "cold.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "## Cold change scans" in r.stdout
    res = json.loads(out.read_text())
    assert set(res) == {"meta", "scan", "snapshot"}
    m = res["meta"]
    assert m["mode"] == "quick" and m["partitions"] == 1000 and m["small_partitions"] == 10 and m["runs"] >= 5
    for key in ("scan", "snapshot"):
        assert set(res[key]) == {"log", "checkpoint"}
        for x in res[key].values():
            assert x["ratio"] == x["large_ms"] / x["small_ms"] and x["cpu_ratio"] > 0
            assert all(len(v) == m["runs"] for v in x["runs_ms"].values())
    assert all(isinstance(x["pass"], bool) for x in res["scan"].values())

    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    figs = {f["id"]: f for f in run.figures({"cold": res})}
    assert set(figs) == {"cold_log", "cold_checkpoint"}
    assert all(f["goal"] == "<= 1.2x" and f["source"] == "cold" for f in figs.values())
