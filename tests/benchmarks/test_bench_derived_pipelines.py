"""The ``pipelines`` side of ``benchmarks/bench_derived.py`` without a JVM:
the pipeline project it writes is one ``pyspark.pipelines``' own spec loader
reads (name, storage, database, libraries) with the benchmark's query as the
materialized view, or for the three-stage pipeline two views (silver, and
gold over it and the dimension); the run's phases come from its events; its
check compares rows as a multiset; its figure is reported against the
recomputation, and a side that could not run says why in the markdown and
in RESULTS.md's figures. The warm-up: every side is timed only after one
untimed refresh of its kind, whose time is kept apart as the cold figure.
The side itself (a Connect server and a pipeline run) is measured end to
end by the slow test at the bottom (the benchmark in quick mode)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml")  # pyspark.pipelines.cli reads the spec with PyYAML

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _pipeline_stage  # noqa: E402
import _pipelines  # noqa: E402
import bench_derived  # noqa: E402
from report.derived import derived_figures  # noqa: E402


def test_project_is_a_pipeline_spec_with_the_query_as_materialized_view(tmp_path):
    from pyspark.pipelines.cli import load_pipeline_spec

    sql = bench_derived.QUERIES["join"]
    sources = {"silver": str(tmp_path / "silver"), "dim": str(tmp_path / "dim")}
    spec_path = _pipelines.write_project(tmp_path / "p", "join_f1", {"join_f1": sql}, sources)
    spec = load_pipeline_spec(spec_path)
    assert (spec.name, spec.database) == ("join_f1", "default")
    assert spec.storage == (tmp_path / "p" / "storage").resolve().as_uri()
    assert [lib.include for lib in spec.libraries] == ["transformations/**/*"]
    view = (tmp_path / "p" / "transformations" / "join_f1.sql").read_text()
    assert view == f"CREATE MATERIALIZED VIEW join_f1 AS\n{sql}\n"
    code = (tmp_path / "p" / "transformations" / "sources.py").read_text()
    compile(code, "sources.py", "exec")
    assert f"SOURCES = {sources!r}" in code


def test_phases_from_a_runs_events():
    events = [("2026-11-28T03:28:02.100000", "Flow spark_catalog.default.a is QUEUED."),
              ("2026-11-28T03:28:02.101000", "Flow spark_catalog.default.a is RUNNING."),
              ("2026-11-28T03:28:02.626000", "Flow spark_catalog.default.a has COMPLETED."),
              ("2026-11-28T03:28:04.126000", "Run is COMPLETED.")]
    got = _pipelines._phases(events)
    assert got["flows_ms"] == pytest.approx({"a": 525.0})
    assert {k: got[k] for k in ("flow_ms", "after_flow_ms")} == pytest.approx({"flow_ms": 525.0, "after_flow_ms": 1500.0})
    assert _pipelines._phases(events[:1]) == {"flow_ms": None, "after_flow_ms": None, "flows_ms": {}}


def _result(**pipelines) -> dict:
    ms = {"aggregate/0.01/recompute": 1000.0, "aggregate/0.01/floor": 300.0, "aggregate/0.01/pipelines": 2500.0}
    meta = {"mode": "full", "date": "d", "rows": 2_000_000, "runs": 1, "loadavg_start": [1.0], "loadavg_end": [1.0],
            "command": "c"}
    return {"ms": ms, "actions": {}, "changed_rows": {}, "meta": meta, "pipelines": pipelines}


def test_pipelines_figure_is_reported_against_recompute():
    runs = {"aggregate/0.01": {"run_ms": [2500.0], "register_ms": [600.0], "flow_ms": [900.0],
                               "after_flow_ms": [1200.0]}}
    r = _result(why_not="", runs=runs)
    [f] = [f for f in derived_figures(r) if "pipelines" in f["id"]]
    assert (f["id"], f["value"], f["goal"], f["pass"]) == ("derived_aggregate_pipelines_0.01", "2.50x", "reported",
                                                            None)
    assert "the flow itself 0.90 s" in f["measured"]
    md = bench_derived.markdown(r)
    assert "| aggregate Spark Declarative Pipelines full refresh at 1.0% | 2500 |" in md
    assert "aggregate/0.01: run 2500 ms, of which the flow (RUNNING to COMPLETED) 900 ms" in md


def test_a_side_that_could_not_run_says_why():
    r = _result(why_not="no Spark Connect server on 127.0.0.1:1 (refused)", runs={})
    del r["ms"]["aggregate/0.01/pipelines"]
    figs = {f["id"]: f for f in derived_figures(r)}
    assert "derived_aggregate_pipelines_0.01" not in figs
    assert figs["derived_pipelines_not_run"]["measured"] == "no Spark Connect server on 127.0.0.1:1 (refused)"
    assert "- not measured (or not every run): no Spark Connect server on 127.0.0.1:1 (refused)" in \
        bench_derived.markdown(r)


def test_no_server_is_said_without_waiting_for_a_client():
    port = _pipelines.free_port()  # closed again: nothing listens on it
    assert _pipelines.serving(port, timeout=0).startswith(f"no Spark Connect server on 127.0.0.1:{port}")


def test_the_three_stage_pipeline_is_one_project_with_two_materialized_views(tmp_path):
    import sqlglot
    from pyspark.pipelines.cli import load_pipeline_spec

    views = _pipeline_stage.sdp_views("pipeline_f2")
    sources = {"bronze": str(tmp_path / "bronze"), "dim": str(tmp_path / "dim")}
    spec = load_pipeline_spec(_pipelines.write_project(tmp_path / "p", "pipeline_f2", views, sources))
    assert spec.name == "pipeline_f2"
    files = sorted(f.name for f in (tmp_path / "p" / "transformations").iterdir())
    assert files == ["pipeline_f2.sql", "pipeline_f2_silver.sql", "sources.py"]
    silver = (tmp_path / "p" / "transformations" / "pipeline_f2_silver.sql").read_text()
    assert silver == f"CREATE MATERIALIZED VIEW pipeline_f2_silver AS\n{_pipeline_stage.SILVER}\n"
    gold = sqlglot.parse_one(views["pipeline_f2"], dialect="spark")
    # Gold reads the silver view as s and the dimension's temporary view as d,
    # and is otherwise the derived table's query.
    tables = {(t.name, t.alias) for t in gold.find_all(sqlglot.exp.Table)}
    assert tables == {("pipeline_f2_silver", "s"), ("dim", "d")}
    for t in gold.find_all(sqlglot.exp.Table):
        t.set("this", sqlglot.exp.to_identifier(t.alias))
        t.set("alias", None)
    assert gold.sql(dialect="spark") == sqlglot.parse_one(_pipeline_stage.GOLD, dialect="spark").sql(dialect="spark")
    assert f"SOURCES = {sources!r}" in (tmp_path / "p" / "transformations" / "sources.py").read_text()


def test_phases_of_a_run_of_two_dependent_flows():
    events = [("2026-12-07T21:38:51.123387", "Flow spark_catalog.default.p_silver is QUEUED."),
              ("2026-12-07T21:38:51.136817", "Flow spark_catalog.default.p is QUEUED."),
              ("2026-12-07T21:38:51.150000", "Flow spark_catalog.default.p_silver is RUNNING."),
              ("2026-12-07T21:38:52.400000", "Flow spark_catalog.default.p_silver has COMPLETED."),
              ("2026-12-07T21:38:53.200000", "Flow spark_catalog.default.p is RUNNING."),
              ("2026-12-07T21:38:54.700000", "Flow spark_catalog.default.p has COMPLETED."),
              ("2026-12-07T21:38:56.400000", "Run is COMPLETED.")]
    got = _pipelines._phases(events)
    assert got["flow_ms"] == pytest.approx(3550.0) and got["after_flow_ms"] == pytest.approx(1700.0)
    assert list(got["flows_ms"]) == ["p_silver", "p"]  # in the order they ran
    assert got["flows_ms"] == pytest.approx({"p_silver": 1250.0, "p": 1500.0})
    # A flow that never completed leaves no figure rather than a wrong one.
    assert _pipelines._phases(events[:4] + events[-1:])["flow_ms"] is None


def test_the_check_compares_rows_as_a_multiset():
    gold = [["r0", "buy", 3, 120], ["r1", "view", 5, 40], [None, "cart", 1, 7]]
    assert _pipelines.same_rows(list(reversed(gold)), gold)
    assert _pipelines.same_rows(json.loads(json.dumps(gold)), gold)
    assert not _pipelines.same_rows(gold[:2], gold)  # a missing row
    assert not _pipelines.same_rows(gold + gold[:1], gold)  # a duplicated row
    assert not _pipelines.same_rows([["r0", "buy", 3, 121]] + gold[1:], gold)  # a wrong sum
    assert not _pipelines.same_rows([[2000]], [[2001]])


def test_a_failed_childs_reason_names_its_exception():
    out = ("Traceback (most recent call last):\n  File \"x\", line 1\n"
           "pyspark.errors.exceptions.connect.AnalysisException: [UNRESOLVED_COLUMN] `n` cannot be resolved.\n"
           "== SQL ==\nSELECT sum(n) FROM default.dedup_f0\n       ^^^\n")
    why = _pipelines._why(out)
    assert why.startswith("pyspark.errors.exceptions.connect.AnalysisException: [UNRESOLVED_COLUMN]")
    assert why.endswith("SELECT sum(n) FROM default.dedup_f0 ^^^")
    assert _pipelines._why("AssertionError: boom\n") == "AssertionError: boom"


def test_every_side_is_timed_after_one_untimed_refresh_of_its_kind():
    calls, seconds = [], iter(range(1, 100))

    def side(q, s, warm_up=False):
        calls.append((q, s, warm_up))
        return None if s == "pipelines" else float(next(seconds))

    class A:
        sides, runs = ("incremental", "recompute", "pipelines"), 2

    out = {"ms": {}, "cold_ms": {}}
    bench_derived.timed_rounds(side, A, out, 0.01)
    kinds = [(q, s) for q in (*bench_derived.QUERIES, bench_derived.PIPELINE) for s in A.sides]
    assert calls[:len(kinds)] == [(q, s, True) for q, s in kinds]
    assert calls[len(kinds):] == [(q, s, False) for q, s in kinds] * 2
    timed = [(q, s) for q, s in kinds if s != "pipelines"]
    # The warm-ups took the first seconds handed out: the cold figures, never in a median.
    assert out["cold_ms"] == {f"{q}/0.01/{s}": 1000.0 * (i + 1) for i, (q, s) in enumerate(timed)}
    n = len(timed)
    assert out["ms"] == {f"{q}/0.01/{s}": 1000.0 * ((n + i + 1) + (2 * n + i + 1)) / 2 for i, (q, s) in enumerate(timed)}


def test_the_pipelines_figure_of_the_three_stage_pipeline_and_the_cold_figures():
    r = _result(why_not="", runs={"pipeline/0.01": {
        "run_ms": [5600.0], "register_ms": [1200.0], "flow_ms": [3600.0], "after_flow_ms": [1600.0],
        "flows_ms": {"pipeline_f0_silver": [1300.0], "pipeline_f0": [1500.0]}}})
    r["ms"] = {"pipeline/0.01/recompute": 1600.0, "pipeline/0.01/incremental": 4000.0,
               "pipeline/0.01/pipelines": 5600.0}
    r["cold_ms"] = {"pipeline/0.01/incremental": 9000.0, "pipeline/0.01/recompute": 2500.0}
    figs = {f["id"]: f for f in derived_figures(r)}
    f = figs["derived_pipeline_pipelines_0.01"]
    assert f["value"] == "3.50x" and "two materialized views" in f["figure"]
    assert "the flows themselves 3.60 s" in f["measured"] and "cold" not in f["measured"]
    assert "first (cold) refresh 9.00 s" in figs["derived_pipeline_incremental_0.01"]["measured"]
    md = bench_derived.markdown(r)
    assert "timed after one untimed refresh of the same kind" in md
    assert "timed after one untimed refresh" not in bench_derived.markdown(_result(why_not="", runs={}))
    assert "| pipeline incremental at 1.0% | 4000 | 9000 |" in md
    assert "| pipeline Spark Declarative Pipelines full refresh at 1.0% | 5600 |  |" in md
    assert ("pipeline/0.01: run 5600 ms, of which the flows (first RUNNING to last COMPLETED; each: "
            "pipeline_f0_silver 1300 ms, pipeline_f0 1500 ms) 3600 ms") in md


@pytest.mark.slow
@pytest.mark.long  # a whole quick benchmark with its own JVM and Connect server: about 100 s
def test_quick_benchmark_runs_the_pipelines_anchor_end_to_end(tmp_path):
    """The benchmark in quick mode with the pipelines side: every query's
    anchor runs (its views checked by the child: the three-stage pipeline's
    gold view row for row), each warmed up first. Skipped where no Connect
    server can start here."""
    out = tmp_path / "derived.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_derived.py"), "--quick", "--sides", "incremental,pipelines",
         "--out", str(out), "--work-dir", str(tmp_path / "work"), "--no-print"],
        capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    why = r["pipelines"]["why_not"]
    if "did not start" in why or "no Spark Connect server" in why:
        pytest.skip(f"no Spark Connect server here: {why}")
    assert why == ""
    queries = (*bench_derived.QUERIES, bench_derived.PIPELINE)
    assert {k for k in r["ms"] if k.endswith("/pipelines")} == {f"{q}/0.01/pipelines" for q in queries}
    assert set(r["cold_ms"]) == set(r["ms"])
    chain = r["pipelines"]["runs"]["pipeline/0.01"]
    assert list(chain["flows_ms"]) == ["pipeline_f0_silver", "pipeline_f0"]
    assert all(v[0] is not None and v[0] > 0 for k, v in chain.items() if k.endswith("_ms") and k != "flows_ms")
