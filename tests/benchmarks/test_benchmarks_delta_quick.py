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

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_delta.py"
SIDES = ROOT / "benchmarks" / "delta" / "sides.py"
HISTORY = ROOT / "benchmarks" / "delta" / "history.py"
RUNNER = ROOT / "benchmarks" / "run.py"

pytest.importorskip("deltalake")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"_t_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts' helpers import as benchmarks/ does
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
    bench = _module(SIDES)
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
    bench = _module(HISTORY)
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


def _files_bytes(paths) -> int:
    return sum(p.stat().st_size for p in paths)


def test_capture_status_counts_what_the_entry_names(tmp_path):
    """The change data of a ctfile commit is read from its log entry: an
    INSERT is captured with no change file; a DELETE of some rows of a
    partition on a capture-off table is not captured; on a capture-on table
    the entry's change files, whatever this build writes, are the files under
    ``_ct_changes/`` and their bytes are the files' sizes on disk."""
    import ctfile

    sides = _module(SIDES)
    data = pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array([f"r{i}" for i in range(100)])})
    for capture in (False, True):
        uri = tmp_path / f"t-{capture}"
        t = ctfile.create_table(uri, data.schema, properties=sides.CAPTURE_PROPERTIES if capture else None)
        ins = sides.capture_status(t, t.insert(data).version)
        assert ins["captured"] and ins["change_files"] == ins["change_bytes"] == ins["removes"] == 0
        st = sides.capture_status(t, t.delete(pa.compute.field("k") < 10).version)
        assert st["removes"] == 1 and st["removes_whole"] == 0
        on_disk = sorted((uri / "_ct_changes").glob("*")) if (uri / "_ct_changes").exists() else []
        assert st["change_files"] == len(on_disk) and st["change_bytes"] == _files_bytes(on_disk)
        assert st["captured"] == (st["change_files"] > 0)
        if not capture:
            assert not st["captured"] and st["change_files"] == 0


def test_delta_cdc_counts_change_data_files(tmp_path):
    """delta-rs's ``_change_data`` bytes of a commit are the sizes its entry's
    ``cdc`` actions record, which are the files' sizes on disk."""
    from deltalake import DeltaTable, write_deltalake

    sides = _module(SIDES)
    uri = tmp_path / "d"
    write_deltalake(str(uri), pa.table({"k": pa.array(range(100), pa.int64())}), configuration=sides.CDF_CONFIG)
    t = DeltaTable(str(uri))
    assert sides.delta_cdc(uri, t.version()) == {"version": t.version(), "cdc_files": 0, "cdc_bytes": 0}
    t.update(updates={"k": "k + 1000"}, predicate="k < 10")
    st = sides.delta_cdc(uri, t.version())
    files = sorted((uri / "_change_data").rglob("*.parquet"))
    assert st["cdc_files"] == len(files) > 0 and st["cdc_bytes"] == _files_bytes(files)


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
    assert "Copy-on-write floor" in r.stdout and "Floor of a scan" in r.stdout and "### (6) change capture on" in r.stdout
    res = json.loads(out.read_text())
    assert {"meta", "history", "dml", "append", "mindelta", "scans", "hidden", "all_pass"} <= set(res)
    assert res["meta"]["mode"] == "quick" and res["meta"]["sf"] == 0.01 and res["meta"]["runs"] >= 5

    h = res["history"]
    assert h["rows"] > 50_000
    assert [s["op"] for s in h["steps"]] == ["INSERT", "RF1", "RF2", "RF1", "RF2", "UPDATE", "MERGE", "COMPACT"]
    upd = h["steps"][5]
    assert upd["ct"]["updated"] == upd["cc"]["updated"] == upd["dl"]["updated"] > 0.008 * h["rows"]  # ~1% of the rows
    merge = h["steps"][6]
    assert merge["ct"]["inserted"] == merge["cc"]["inserted"] == merge["dl"]["inserted"] == h["merge_inserts"] > 0
    assert merge["ct"]["updated"] == merge["cc"]["updated"] == merge["dl"]["updated"] == h["merge_updates"] > 0
    for s in h["steps"][1:]:
        # What each statement's entry names; the capture-on table's DML is
        # captured exactly when it names change files or removes whole partitions.
        cap = s["cc_capture"]
        assert cap["captured"] == (cap["change_files"] > 0 or cap["removes_whole"] == cap["removes"])
        assert (cap["change_bytes"] > 0) == (cap["change_files"] > 0)
        assert s["dl_cdc"]["cdc_bytes"] >= 0
    for s in h["steps"][5:7]:  # delta-rs's UPDATE and MERGE with CDF on write _change_data
        assert s["dl_cdc"]["cdc_files"] > 0 and s["dl_cdc"]["cdc_bytes"] > 0

    d = res["dml"]
    assert set(d) == {"UPDATE", "DELETE", "MERGE", "RF1", "COMPACT", "e2e_total"}
    for op in ("UPDATE", "DELETE", "MERGE"):
        e = d[op]
        for key in ("ctfile_s", "delta_s", "ratio", "ctfile_e2e_s", "delta_e2e_s", "e2e_ratio"):
            assert _pos(e[key]), (op, key, e[key])
        assert len(e["runs_s"]["ctfile"]) == len(e["runs_s"]["delta"]) == res["meta"]["runs"]
        for key in ("inserted", "updated", "deleted", "scan_rows"):
            assert e["rows"]["ct"][key] == e["rows"]["cc"][key] == e["rows"]["dl"][key], (op, key, e["rows"])
        # Capture on, in the same rounds: time vs capture off, bytes vs delta-rs, end to end.
        c = e["capture"]
        for key in ("ctfile_s", "vs_off", "e2e_s", "e2e_vs_delta", "scan_s", "e2e_vs_floor"):
            assert _pos(c[key]), (op, key, c[key])
        assert len(e["runs_s"]["ctfile_capture"]) == res["meta"]["runs"]
        assert isinstance(c["pass_vs_off"], bool) and c["delta_cdc_bytes"] > 0
        if c["captured"]:
            assert c["bytes_vs_delta"] == pytest.approx(c["change_bytes"] / c["delta_cdc_bytes"])
            assert isinstance(c["pass_bytes"], bool)
        else:  # no change file written: no bytes figure, the scan fell back
            assert c["change_bytes"] == 0 and c["bytes_vs_delta"] is None and c["pass_bytes"] is None
        assert c["e2e_pass"] is None if op != "UPDATE" else isinstance(c["e2e_pass"], bool)
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
    mc = m["capture"]
    assert mc["rows"] == m["ctfile_rows"] and _pos(mc["ms"]) and isinstance(mc["pass"], bool)
    assert mc["interval_commits"] == 6 and 2 <= mc["interval_captured"] <= 6  # the two RF1s always are
    sc = res["scans"]
    assert set(sc) == {"UPDATE", "DELETE", "MERGE"}
    for op, e in sc.items():
        assert e["rows"]["ctfile"] == e["rows"]["ctfile_capture"] == e["rows"]["delta"] == d[op]["rows"]["ct"]["scan_rows"]
        assert _pos(e["capture"]["ms"]) and isinstance(e["capture"]["pass"], bool)
        assert e["capture"]["captured"] == d[op]["capture"]["captured"]
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
    for figure in ("change scan of the UPDATE commit, capture on", "minimum-delta change scan over RF1..MERGE, capture on",
                   "DELETE time, capture on", "change-file bytes of the MERGE", "UPDATE + the change scan consuming it, capture on",
                   "MERGE + the change scan consuming it, capture on"):
        assert f"| {figure}" in report, figure
    assert "### (6) change capture on" in report
    assert "## ctfile vs delta-rs" in report  # bench_delta's own tables
