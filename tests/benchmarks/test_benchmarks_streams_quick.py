"""``benchmarks/bench_streams.py --quick`` runs end to end and writes its JSON.

Checks the exit code, the structure of the results, the requests the stream
adds on S3 (counted, not timed: three LISTs, one GET, two PUTs and two
DELETEs of the states no one needs any more) and the
figures ``benchmarks/run.py`` renders from them (never timings: they depend
on the machine). The benchmark itself checks, after timing, that both
targets hold the source's rows and that the stream's offset is the manual
consumer's last version.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_streams.py"


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work-dir", str(tmp_path / "work"), *args],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def _check_consumption(x: dict, runs: int) -> None:
    assert set(x["ms"]) == set(x["cpu_ms"]) == {"manual", "stream", "floor"}
    assert x["ratio"] == x["ms"]["stream"] / x["ms"]["manual"] and x["cpu_ratio"] > 0
    assert x["ratio_vs_anchor_plus_floor"] == x["ms"]["stream"] / (x["ms"]["manual"] + x["ms"]["floor"])
    assert all(len(v) == runs for v in x["runs_ms"].values())
    # one round before timing (the warm-up) and one per timed round, two versions each
    assert x["check"]["stream_state_sequence"] >= 2 * (runs + 1)
    assert x["check"]["stream_state_files"] == 3  # the writers delete the older ones (SPEC §Streams)


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/bench_streams.py not present")
def test_bench_streams_quick(tmp_path):
    out = tmp_path / "streams.json"
    r = run(tmp_path, "--out", str(out))
    assert "## Stream consumption" in r.stdout
    res = json.loads(out.read_text())
    assert set(res) == {"meta", "local", "s3", "many"}
    m = res["meta"]
    assert m["mode"] == "quick" and m["rows"] == 1000 and m["runs"] >= 5 and len(m["loadavg_end"]) == 3
    loc = res["local"]
    _check_consumption(loc, m["runs"])
    assert loc["pass"] == (loc["ratio"] <= m["goal"] == 1.25)
    assert loc["check"]["rows"] == 1000 + m["batch"] * (m["runs"] + 1)

    s3 = res["s3"]
    if "skipped" not in s3:
        _check_consumption(s3, m["s3_runs"])
        q = s3["requests"]
        assert {k: v for k, v in q["stream_minus_manual"].items() if v} == {"LIST": 3, "GET": 1, "PUT": 2, "DELETE": 2}
        assert q["per_consumption"]["floor"] == {"GET": 1, "LIST": 3, "PUT": 2, "DELETE": 2}
        assert s3["streams_call"]["streams"] == 2

    mn = res["many"]
    assert mn["streams"] == [1, 20]
    assert set(mn["ms"]) == {f"{k}_{n}" for k in ("streams", "vacuum", "current") for n in (1, 20)}

    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    assert "streams" in run_py.SCRIPTS
    figs = {f["id"]: f for f in run_py.figures({"streams": res})}
    want = {"streams_consume_local", "streams_streams_20", "streams_vacuum_20"} | (set() if "skipped" in s3 else {"streams_consume_s3"})
    assert set(figs) == want
    assert figs["streams_consume_local"]["goal"] == "<= 1.25x" and figs["streams_consume_local"]["pass"] == loc["pass"]
    assert all(f["source"] == "streams" and (f["pass"] is None) == (k != "streams_consume_local") for k, f in figs.items())
    # RESULTS.md renders the script's own tables (run.py imports it by path)
    assert run_py._module_markdown("bench_streams.py", res).startswith("## Stream consumption (quick")
    # --profile prints pyinstrument profiles of both consumers instead of timing
    prof = run(tmp_path, "--profile", "--out", str(tmp_path / "unused.json"))
    assert "==== manual" in prof.stdout and "==== stream" in prof.stdout and "Consumers.consume" in prof.stdout
    assert not (tmp_path / "unused.json").exists()
