"""``benchmarks/bench_merge.py --quick`` runs end to end and writes its JSON.

Checks the exit code, the structure of the results and the figures
``benchmarks/run.py`` renders from them (never timings: they depend on the
machine). The benchmark itself checks, before timing, that the one MERGE
and the two statements it replaces leave the same rows.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_merge.py"


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--rows", "20000", "--partition-rows", "5000",
         "--work-dir", str(tmp_path / "work"), *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/bench_merge.py not present")
def test_bench_merge_quick(tmp_path):
    out = tmp_path / "merge.json"
    r = run(tmp_path, "--out", str(out))
    assert "## One conditional upsert-with-delete MERGE" in r.stdout
    res = json.loads(out.read_text())
    assert set(res) == {"meta", "ms", "cpu_ms", "ratio", "cpu_ratio", "pass", "runs_ms"}
    m = res["meta"]
    assert m["mode"] == "quick" and m["rows"] == 20000 and m["batch"] == 100 and m["runs"] >= 5
    assert set(res["ms"]) == {"merge", "two_statements", "upsert"} and set(m["goals"]) == {"two_statements", "upsert"}
    for n, goal in m["goals"].items():
        assert res["ratio"][n] == res["ms"]["merge"] / res["ms"][n] and res["cpu_ratio"][n] > 0
        assert res["pass"][n] == (res["ratio"][n] <= goal)
    assert all(len(v) == m["runs"] for v in res["runs_ms"].values())

    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    figs = {f["id"]: f for f in run_py.figures({"merge": res})}
    assert set(figs) == {"merge_vs_two_statements", "merge_vs_upsert"}
    assert figs["merge_vs_two_statements"]["goal"] == "<= 0.6x" and figs["merge_vs_upsert"]["goal"] == "<= 1.1x"
    assert "merge" in run_py.SCRIPTS
    # --profile prints a pyinstrument profile instead of timing.
    prof = run(tmp_path, "--profile", "--out", str(tmp_path / "unused.json"))
    assert "one_merge" in prof.stdout and not (tmp_path / "unused.json").exists()
