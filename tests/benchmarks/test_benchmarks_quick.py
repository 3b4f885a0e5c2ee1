"""Smoke test of the core benchmark script: ``bench_core.py --quick`` runs end to
end in a subprocess and writes a well-formed result file. Timings are not
asserted (they depend on the machine); only the shape of the output is."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_core.py"


def _is_pos(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_bench_core_quick_writes_valid_json(tmp_path):
    out = tmp_path / "core.json"
    proc = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--quick",
            "--out", str(out),
            "--work-dir", str(tmp_path / "work"),  # fresh (B) tables: exercises the build path
            "--runs", "2", "--open-runs", "3",
        ],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(A) insert" in proc.stdout and "(B) open_table" in proc.stdout

    result = json.loads(out.read_text())
    assert {"meta", "insert", "insert_1cpu", "open", "scan", "targets", "all_pass"} <= set(result)
    assert result["meta"]["mode"] == "quick"
    assert result["meta"]["sf"] == 0.01
    assert isinstance(result["all_pass"], bool)

    assert set(result["insert"]) == {"zstd", "snappy"}
    for codec, r in result["insert"].items():
        assert r["codec"] == codec
        assert r["rows"] > 50_000  # lineitem SF 0.01 has ~60k rows
        for key in ("ctfile_s", "pyarrow_s", "time_ratio", "ctfile_bytes", "pyarrow_bytes", "bytes_ratio"):
            assert _is_pos(r[key]), (codec, key, r[key])
        assert len(r["ctfile_runs_s"]) == len(r["pyarrow_runs_s"]) == 2
        assert r["ctfile_files"] >= 1
        assert isinstance(r["pass_time"], bool) and isinstance(r["pass_bytes"], bool)
        # The same data with the same codec: sizes must be close whatever the speed.
        assert 0.9 < r["bytes_ratio"] < 1.1

    assert set(result["open"]) == {"B1_appends", "B2_updates"}
    for shape, r in result["open"].items():
        assert (r["versions_small"], r["versions_large"]) == (30, 300)
        for key in ("small_ms", "large_ms"):
            assert _is_pos(r[key]), (shape, key)
        assert r["diff_ms"] == pytest.approx(r["large_ms"] - r["small_ms"])
        assert r["small_table"]["version"] == 29 and r["large_table"]["version"] == 299
        assert isinstance(r["pass"], bool)
    # B1 grows one partition per version; B2 keeps a constant partition count.
    assert result["open"]["B1_appends"]["large_table"]["partitions"] == 299
    assert result["open"]["B2_updates"]["large_table"]["partitions"] == result["open"]["B2_updates"]["small_table"]["partitions"]
    # (C): snapshot scans with and without the read-time damage check.
    sc = result["scan"]
    assert set(sc["goal_reads"]) <= set(sc["reads"]) and len(sc["reads"]) == 3
    for r in sc["reads"].values():
        assert r["runs"] == 2 and {"checked", "unchecked", "check alone"} <= set(r["ms"]) and isinstance(r["pass"], bool)
        assert all(_is_pos(v) for v in r["ms"].values())
    assert "dataset" in sc["reads"]["to_arrow()"]["ms"]
