"""Smoke test of ``benchmarks/bench_objectstore.py``: a reduced ``--quick`` run
ends to end in a subprocess (against the session's SeaweedFS; run alone, the
script starts its own) and writes a well-formed result file. Timings are not asserted; request counts are, since
they do not depend on the machine."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_objectstore.py"


def _pos(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def test_bench_objectstore_quick(tmp_path, seaweedfs_s3):
    out = tmp_path / "objectstore.json"
    endpoint = {"endpoint_url": seaweedfs_s3.endpoint_url, "key": seaweedfs_s3.key,
                "secret": seaweedfs_s3.secret, "bucket": seaweedfs_s3.bucket}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--versions", "200", "--commits", "10", "--open-runs", "2",
         "--out", str(out), "--work-dir", str(tmp_path / "work"), "--s3-endpoint", json.dumps(endpoint)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(out.read_text())
    assert r["meta"]["mode"] == "quick" and r["meta"]["versions"] == 200
    for key in ("commit_local", "commit_s3"):
        assert r[key]["commits"] == 10 and _pos(r[key]["commits_per_s"]) and _pos(r[key]["ms_per_commit"])
    assert isinstance(r["commit_local"]["meets_goal"], bool)
    # A small commit on S3: read the hint, list the log, put the data file, put the entry.
    assert r["commit_s3"]["requests_per_commit"].get("PUT") == 2.0
    assert r["commit_s3"]["requests_per_commit_total"] <= 5
    o = r["open"]
    assert o["versions"] == 200 and o["uploaded_objects"] > 200
    assert _pos(o["with_hint"]["median_s"]) and len(o["with_hint"]["runs_s"]) == 2
    # Latest 199: the hint, a few probes, the checkpoint of 100 and 99 entries; no listing.
    assert "LIST" not in o["with_hint"]["requests"] and o["with_hint"]["requests"]["GET"] >= 99
    # Without the hint the log is listed.
    assert o["without_hint"]["requests"].get("LIST", 0) >= 1
    # At a checkpointed version (200): a handful of requests.
    assert o["at_checkpoint"]["version"] == 200
    assert o["at_checkpoint"]["requests_total"] <= 15 and "LIST" not in o["at_checkpoint"]["requests"]
