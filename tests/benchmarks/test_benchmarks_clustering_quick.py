"""``benchmarks/bench_clustering.py --quick`` runs end to end and writes its JSON.

Checks the exit code, the structure of the results and what must hold at
any scale (never timings: they depend on the machine): a clustered MERGE
of recent keys rewrites fewer partitions than the unclustered one of the
same keys, automatic compaction leaves no more partitions than none, both
tables take the same inserts and updates, the minimum is that of a sorted
layout, the two multi-column layouts update the same rows, and with
``ctfile.autoCompactMaxDepth`` 2 or 3 the maximum clustering depth never
exceeds it after a random-key MERGE.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_clustering.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/bench_clustering.py not present")


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("_bench_clustering", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check_workload(w: dict, names: set[str], batches: int) -> None:
    assert len(w["batches"]) == batches
    for r in w["batches"]:
        assert set(r["tables"]) == names and r["minimum"] >= 1
        t = r["tables"]
        for x in t.values():
            assert x["updated"] + x["inserted"] == r["keys"] and x["rewritten"] >= 1 and x["ms"] > 0
        assert t["clustered"]["scan_ms"] > 0 and t["unclustered"]["scan_ms"] > 0
    s = w["summary"]
    assert s["minimum"] == [r["minimum"] for r in w["batches"]]
    assert s["merge_speedup"] == s["merge_ms"]["unclustered"] / s["merge_ms"]["clustered"]


def test_bench_clustering_quick(tmp_path):
    out = tmp_path / "clustering.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work-dir", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "## Clustering: layout for upserts" in r.stdout
    res = json.loads(out.read_text())
    assert set(res) == {"meta", "insert", "upsert", "random", "multi", "recluster"}
    m = res["meta"]
    assert m["mode"] == "quick" and m["rows"] == 4000 and m["batches"] == 3
    ins = res["insert"]
    assert ins["pass"] == (ins["ratio"] <= m["goals"]["insert"]) and set(ins["ms"]) == {"clustered", "unclustered", "sort"}
    assert ins["floor_ratio"] == (ins["ms"]["unclustered"] + ins["ms"]["sort"]) / ins["ms"]["unclustered"] > 1

    _check_workload(res["upsert"], {"clustered", "unclustered", "clustered_auto"}, 3)
    _check_workload(res["random"], {"clustered", "unclustered"}, 3)
    for r in res["upsert"]["batches"]:  # recent keys: clustering rewrites fewer partitions than no layout
        t = r["tables"]
        assert t["clustered"]["rewritten"] < t["unclustered"]["rewritten"]
        assert t["clustered"]["inserted"] == t["unclustered"]["inserted"] == round(m["batch_keys"] * m["new_share"])
    c = res["upsert"]["compaction"]
    new_ids = sum(round(m["batch_keys"] * m["new_share"]) for _ in range(3))
    assert c["live_rows"] == m["rows"] + new_ids
    assert c["fully_compacted"] == math.ceil(c["live_rows"] / m["partition_rows"])
    assert c["partitions"]["clustered_auto"] <= c["partitions"]["clustered"]
    assert c["pass"] == (c["ratio"]["clustered_auto"] <= m["goals"]["auto_compaction"])

    mu = res["multi"]
    assert mu["partitions"]["lexicographic"] >= 2 and mu["partitions"]["zorder"] >= 2
    for k in ("a", "b"):
        assert 1 <= min(mu[k]["partitions_read"].values()) and max(mu[k]["partitions_read"].values()) <= 40
    assert mu["a"]["partitions_read"]["lexicographic"] <= mu["a"]["partitions_read"]["zorder"]
    for x in mu["merges"]:  # both layouts hold the same rows: the same keys update the same rows
        assert x["lexicographic"]["updated"] == x["zorder"]["updated"] == x["keys"]

    rc = res["recluster"]  # (6): the depth bound holds after every MERGE; the copies hold the same rows
    assert len(rc["batches"]) == m["recluster_batches"] == 30 and rc["rows"] == m["recluster_rows"] == 4000
    for name, x in rc["summary"].items():
        assert x["pass"] == (x["worst_max_depth"] <= x["bound"])
        assert x["worst_max_depth"] == max(r[name]["max_depth"] for r in rc["batches"])
        assert x["auto_rows"] == sum(r[name]["auto_rows"] for r in rc["batches"])
    assert rc["summary"]["depth_2"]["pass"] and rc["summary"]["depth_3"]["pass"]
    for r in rc["batches"]:
        assert r["depth_2"]["max_depth"] <= 2 and r["depth_3"]["max_depth"] <= 3


def test_minimum_partitions_and_z_values():
    mod = _module()
    live = np.arange(0, 20, 2)  # 10 ids, partitions of 3: [0 2 4] [6 8 10] [12 14 16] [18]
    assert mod.minimum_partitions(live, np.array([0, 4, 5, 18, 40]), 3) == 2  # 5 and 40 are not live
    assert mod.minimum_partitions(live, np.array([6, 12, 16]), 3) == 2
    import pyarrow as pa

    t = pa.table({"a": [0, 0, 1, 1], "b": [0, 1, 0, 1]})
    z = mod.z_values(t, ("a", "b"))
    assert list(np.argsort(z)) == [0, 1, 2, 3] and len(set(z.tolist())) == 4
    t = pa.table({"a": [1, 0, 1, 0], "b": [10, 10, 20, 20]})  # the 2 x 2 grid in Z order: (0,10) (0,20) (1,10) (1,20)
    assert list(np.argsort(mod.z_values(t, ("a", "b")))) == [1, 3, 0, 2]
