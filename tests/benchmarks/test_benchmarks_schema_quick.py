"""``benchmarks/bench_schema.py --quick`` runs end to end and writes its JSON.

Checks the exit code, the structure of the results and the figures
``benchmarks/run.py`` renders from them (never timings: they depend on the
machine). The benchmark itself checks, before timing, that the three
snapshots return the same rows in their own schemas.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_schema.py"


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work-dir", str(tmp_path / "work"), *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/bench_schema.py not present")
def test_bench_schema_quick(tmp_path):
    out = tmp_path / "schema.json"
    r = run(tmp_path, "--out", str(out))
    assert "## Snapshot reads across schema changes" in r.stdout
    res = json.loads(out.read_text())
    assert set(res) == {"meta", "reads"}
    m = res["meta"]
    assert m["mode"] == "quick" and m["partitions"] == 50 and m["rows"] == 50 * 200 and m["runs"] >= 5
    assert set(res["reads"]) == {"to_arrow", "to_batches"}
    for x in res["reads"].values():
        assert set(x["ms"]) == {"before", "added", "renamed"}
        for k in ("added", "renamed"):
            assert x["ratio"][k] == x["ms"][k] / x["ms"]["before"] and x["cpu_ratio"][k] > 0
            assert x["pass"][k] == (x["ratio"][k] <= m["goal"])
        assert all(len(v) == m["runs"] for v in x["runs_ms"].values())

    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    figs = {f["id"]: f for f in run_py.figures({"schema": res})}
    assert set(figs) == {f"schema_{read}_{k}" for read in ("to_arrow", "to_batches") for k in ("added", "renamed")}
    assert all(f["goal"] == "<= 1.1x" and f["source"] == "schema" for f in figs.values())
    # The cached table is reused; --profile prints a pyinstrument profile instead of timing.
    prof = run(tmp_path, "--profile", "renamed", "--out", str(tmp_path / "unused.json"))
    assert "read_batches" in prof.stdout and not (tmp_path / "unused.json").exists()
