"""``benchmarks/bench_delta.py --quick`` runs end to end, and ``benchmarks/run.py``
renders its report from the JSON.

Timings are never asserted (they depend on the machine); the structure of the
results and the row counts are. The benchmark itself checks that ctfile and
delta-rs did the same work (rows inserted / updated / deleted per statement,
equal final tables, equal change-scan row counts, and that the consolidated
Delta change feed has as many net changes as ctfile's minimum delta), so a
divergence between the two histories fails this test. The consolidation of a
Delta change feed into net changes is also checked on a hand-made feed.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import math
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_delta.py"
RUNNER = ROOT / "benchmarks" / "run.py"

pytest.importorskip("deltalake")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"_t_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    return mod


def _pos(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _cdf(rows):
    """A Delta change feed: (l_orderkey, l_linenumber, l_comment, _change_type, _commit_version)."""
    k, n, c, t, v = zip(*rows)
    return pa.table({
        "l_orderkey": pa.array(k, pa.int64()), "l_linenumber": pa.array(n, pa.int32()),
        "l_comment": pa.array(c, pa.string_view()), "_change_type": pa.array(t, pa.string_view()),
        "_commit_version": pa.array(v, pa.uint64()),
        "_commit_timestamp": pa.array([dt.datetime(2026, 1, 1)] * len(k), pa.timestamp("ms")),
    })


def test_consolidate_cdf_nets_out_each_key():
    bench = _module(SCRIPT)
    cdf = _cdf([
        (1, 1, "new", "insert", 2),                 # inserted: INSERT
        (2, 1, "old", "delete", 3),                 # deleted: DELETE
        (3, 1, "b", "update_postimage", 4),         # updated twice: one pair a -> c
        (3, 1, "a", "update_preimage", 4),          # (pre-image listed after the post-image on purpose)
        (3, 1, "b", "update_preimage", 6),
        (3, 1, "c", "update_postimage", 6),
        (4, 1, "x", "insert", 2),                   # inserted then deleted: nothing
        (4, 1, "x", "delete", 5),
        (5, 2, "p", "update_preimage", 3),          # updated then back: nothing
        (5, 2, "q", "update_postimage", 3),
        (5, 2, "q", "update_preimage", 5),
        (5, 2, "p", "update_postimage", 5),
        (6, 1, "u", "update_preimage", 3),          # updated then deleted: DELETE of the original
        (6, 1, "v", "update_postimage", 3),
        (6, 1, "v", "delete", 6),
    ])
    out = bench.consolidate_cdf(cdf)
    got = sorted(zip(out.column("l_orderkey").to_pylist(), out.column("l_comment").to_pylist(),
                     out.column("_action").to_pylist(), out.column("_isupdate").to_pylist()))
    assert got == [
        (1, "new", "INSERT", False),
        (2, "old", "DELETE", False),
        (3, "a", "DELETE", True),
        (3, "c", "INSERT", True),
        (6, "u", "DELETE", False),
    ]


def test_clone_table_links_data_and_copies_logs(tmp_path):
    bench = _module(SCRIPT)
    src = tmp_path / "src"
    (src / "_ct_log").mkdir(parents=True)
    (src / "data").mkdir()
    (src / "_ct_log" / "0.json").write_text("log")
    (src / "data" / "a.parquet").write_text("data")
    bench.clone_table(src, tmp_path / "dst")
    dst = tmp_path / "dst"
    assert (dst / "_ct_log" / "0.json").read_text() == "log"
    assert (dst / "data" / "a.parquet").read_text() == "data"
    assert (dst / "data" / "a.parquet").stat().st_ino == (src / "data" / "a.parquet").stat().st_ino
    assert (dst / "_ct_log" / "0.json").stat().st_ino != (src / "_ct_log" / "0.json").stat().st_ino


@pytest.mark.slow
def test_bench_delta_quick_and_report(tmp_path):
    results = tmp_path / "results"
    out = results / "delta.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "### (1) DML" in r.stdout and "### (5) hidden-column bytes" in r.stdout
    assert "Copy-on-write floor" in r.stdout and "Floor of a scan" in r.stdout
    res = json.loads(out.read_text())
    assert {"meta", "history", "dml", "append", "mindelta", "hidden", "all_pass"} <= set(res)
    assert res["meta"]["mode"] == "quick" and res["meta"]["sf"] == 0.01 and res["meta"]["runs"] >= 5

    h = res["history"]
    assert h["rows"] > 50_000
    assert [s["op"] for s in h["steps"]] == ["INSERT", "RF1", "RF2", "RF1", "RF2", "UPDATE", "MERGE", "COMPACT"]
    upd = h["steps"][5]
    assert upd["ct"]["updated"] == upd["dl"]["updated"] > 0.008 * h["rows"]  # ~1% of the rows
    merge = h["steps"][6]
    assert merge["ct"]["inserted"] == merge["dl"]["inserted"] == h["merge_inserts"] > 0
    assert merge["ct"]["updated"] == merge["dl"]["updated"] == h["merge_updates"] > 0

    d = res["dml"]
    assert set(d) == {"UPDATE", "DELETE", "MERGE", "RF1", "COMPACT", "e2e_total"}
    for op in ("UPDATE", "DELETE", "MERGE"):
        e = d[op]
        for key in ("ctfile_s", "delta_s", "ratio", "ctfile_e2e_s", "delta_e2e_s", "e2e_ratio"):
            assert _pos(e[key]), (op, key, e[key])
        assert len(e["runs_s"]["ctfile"]) == len(e["runs_s"]["delta"]) == res["meta"]["runs"]
        for key in ("inserted", "updated", "deleted", "scan_rows"):
            assert e["rows"]["ct"][key] == e["rows"]["dl"][key], (op, key, e["rows"])
        assert isinstance(e["pass"], bool) and isinstance(e["e2e_pass"], bool)
        # The copy-on-write floor re-encoded the files the statement rewrote, in the same rounds.
        assert e["floor_files"] == e["rows"]["ct"]["files_removed"] > 0
        assert len(e["floor_runs_s"]) == res["meta"]["runs"] and _pos(e["floor_s"]) and _pos(e["floor_vs_delta_e2e"])
    assert d["UPDATE"]["rows"]["ct"]["scan_rows"] == 2 * d["UPDATE"]["rows"]["ct"]["updated"]  # update pairs
    assert d["DELETE"]["rows"]["ct"]["scan_rows"] == d["DELETE"]["rows"]["ct"]["deleted"] > 0
    assert d["COMPACT"]["pass"] is None and "e2e_ratio" not in d["COMPACT"]
    assert d["COMPACT"]["rows"]["ct"]["files_removed"] >= 2  # the small RF1 / MERGE partitions were merged

    a = res["append"]
    assert a["plan_shape"] == "ADDED_ONLY" and a["rows"] == h["rf1_rows"][-1]
    assert all(_pos(a[k]) for k in ("ctfile_ms", "pyarrow_ms", "delta_ms", "ratio_vs_pyarrow", "ratio_vs_delta"))
    m = res["mindelta"]
    assert m["ctfile_rows"] == m["delta_net_rows"] > 0 and m["delta_cdf_rows"] >= m["delta_net_rows"]
    assert m["removed_partitions"] > 0 and m["removed_rows"] > 0 and _pos(m["removed_decode_ms"])
    hb = res["hidden"]
    assert 0 < hb["UPDATE"]["hidden_bytes"] < hb["UPDATE"]["table_bytes"]
    assert hb["UPDATE"]["fraction"] == pytest.approx(hb["UPDATE"]["hidden_bytes"] / hb["UPDATE"]["table_bytes"])

    # The suite runner renders a report from this JSON alone.
    r = subprocess.run([sys.executable, str(RUNNER), "--report-only", "--results-dir", str(results)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = (results / "RESULTS.md").read_text()
    assert "## Misses" in report and "## Figures" in report
    assert "hidden-column bytes after the 1% UPDATE" in report and "minimum-delta change scan" in report
    assert "## ctfile vs delta-rs" in report  # bench_delta's own tables
