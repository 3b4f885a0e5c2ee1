"""The ``pipelines`` side of ``benchmarks/bench_derived.py`` without a JVM:
the pipeline project it writes is one ``pyspark.pipelines``' own spec loader
reads (name, storage, database, libraries) with the benchmark's query as the
materialized view; the run's phases come from its events; its figure is
reported against the recomputation, and a side that could not run says why
in the markdown and in RESULTS.md's figures. The side itself (a Connect
server and a pipeline run) is measured by the benchmark, not here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml")  # pyspark.pipelines.cli reads the spec with PyYAML

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _pipelines  # noqa: E402
import bench_derived  # noqa: E402
from report.derived import derived_figures  # noqa: E402


def test_project_is_a_pipeline_spec_with_the_query_as_materialized_view(tmp_path):
    from pyspark.pipelines.cli import load_pipeline_spec

    sql = bench_derived.QUERIES["join"]
    sources = {"silver": str(tmp_path / "silver"), "dim": str(tmp_path / "dim")}
    spec_path = _pipelines.write_project(tmp_path / "p", "join_f1", sql, sources)
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
    assert _pipelines._phases(events) == pytest.approx({"flow_ms": 525.0, "after_flow_ms": 1500.0})
    assert _pipelines._phases(events[:1]) == {"flow_ms": None, "after_flow_ms": None}


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
