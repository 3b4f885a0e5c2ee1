"""``benchmarks/bench_changes.py --quick`` runs end to end and writes its JSON.

Checks the exit code, the structure of the results and the row counts the
benchmark itself asserts on (never timings: they depend on the machine).
Tables are built in a temporary directory; the generated lineitem data is
shared with the benchmark's cache under ``benchmarks/data/`` (gitignored).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_changes.py"


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/bench_changes.py not present")
def test_bench_changes_quick(tmp_path):
    out = tmp_path / "changes.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "| large |" in r.stdout and "### (3)" in r.stdout  # the markdown summary was printed
    res = json.loads(out.read_text())
    assert set(res) == {"meta", "append", "minimize", "stream", "check"}
    assert res["meta"]["mode"] == "quick" and res["meta"]["runs"] >= 5

    a = res["append"]
    for key in ("ctfile_large_ms", "ctfile_small_ms", "pyarrow_ms", "ratio_vs_pyarrow", "ratio_vs_small_table",
                "pass_vs_pyarrow", "pass_vs_small_table", "runs_ms", "partition_rows", "file_bytes"):
        assert key in a, key
    assert a["plan_shape"] == "ADDED_ONLY"
    assert a["large_table"]["partitions"] == 100 and a["small_table"]["partitions"] == 10
    assert a["runs"] >= 5 and all(len(v) == a["runs"] for v in a["runs_ms"].values())

    m = res["minimize"]
    assert set(m["by_k"]) == {"1", "10", "100"}
    rows = m["partition_rows"]
    for k, r_k in m["by_k"].items():
        k = int(k)
        for key in ("minimize_ms", "added_only_ms", "pyarrow_ms", "ratio_minimize_vs_added_only",
                    "ratio_minimize_vs_pyarrow", "pass", "runs_ms"):
            assert key in r_k, key
        assert r_k["plan_shapes"] == {"minimize": "MINIMIZE", "added_only": "ADDED_ONLY"}
        # Every updated row is one DELETE + INSERT pair; the append emits every row.
        assert r_k["minimize_output_rows"] == 2 * r_k["updated_rows"] > 0
        assert r_k["updated_rows"] <= k * rows * 0.02
        assert r_k["added_only_output_rows"] == r_k["pyarrow_rows"] == k * rows

    c = res["check"]  # (4): change scans with and without the read-time damage check
    assert c["k"] == 10 and set(c["reads"]) == {"MINIMIZE, k = 10", "ADDED_ONLY, k = 10"}
    for r_c in c["reads"].values():
        assert r_c["runs"] >= 5 and {"checked", "unchecked", "check alone"} == set(r_c["ms"]) and isinstance(r_c["pass"], bool)
        assert r_c["files"] == (20 if r_c is c["reads"]["MINIMIZE, k = 10"] else 10) and 0 < r_c["check_share"]
        assert r_c["ratio"] == r_c["ms"]["checked"] / r_c["ms"]["unchecked"]

    s = res["stream"]
    assert set(s) == {"full_update", "append_history"}
    for r_s in s.values():
        for key in ("rows", "change_set_bytes", "peak_rss_bytes", "pass", "plan_shape"):
            assert key in r_s, key
        assert r_s["rows"] > 0 and r_s["change_set_bytes"] > 0 and r_s["peak_rss_bytes"] > 0
    assert s["full_update"]["plan_shape"] == "MINIMIZE"
    assert s["full_update"]["rows"] == 2 * s["full_update"]["table_rows"]  # every row an update pair
    assert s["append_history"]["rows"] == 100 * a["partition_rows"]
