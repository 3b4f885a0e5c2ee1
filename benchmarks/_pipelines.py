"""The ``pipelines`` side of ``bench_derived.py``: the same query as a
materialized view of a Spark Declarative Pipeline (``pyspark.pipelines``),
the outside anchor of issue 29.

Open-source Spark refreshes a materialized view by recomputing it in full
(TRUNCATE and append into a catalog table, in ``spark.sql.sources.default``
format, Parquet here) on every pipeline run; incremental refresh of a
materialized view exists only in Databricks. This side measures that refresh
as a user waits for it.

How it runs
-----------
* The Connect server is the benchmark's own driver: its classic session is
  built with ``spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin``
  (:func:`connect_conf`), so the pipeline runs in the same JVM, on the same
  ``local[2]`` executors and with the same memory as the ``recompute`` side;
  its materialized views are tables of that session's in-memory catalog,
  stored under ``--work-dir``.
* A pipeline client cannot share a process with a classic SparkSession
  (PySpark builds Connect or classic Columns by the process's mode), so each
  pipeline run is a child process (``python _pipelines.py PROJECT URL``) that
  does what ``spark-pipelines run`` does (``pyspark.pipelines.cli.run``) on a
  Connect session to ``sc://127.0.0.1:PORT``: load the spec,
  ``create_dataflow_graph``, ``register_definitions`` and ``start_run``, and
  reads the run's events to its end.
* The project (:func:`write_project`) is what a user writes: a
  ``spark-pipeline.yml`` (name, storage, database, a libraries glob), a
  Python file with one ``@dp.temporary_view`` per source and one SQL file
  ``CREATE MATERIALIZED VIEW <name> AS <its query>`` per materialized view:
  one (the benchmark's query) for ``aggregate``, ``join`` and ``dedup``;
  two for the three-stage ``pipeline`` (``_pipeline_stage.sdp_views``: the
  deduplicated silver over bronze, and gold over the silver view and the
  dimension), which the run refreshes in dependency order.
* A source view reads the ctfile table at its current version as
  ``CtfileTable.to_df()`` does natively: ``ctfile.open_table(uri).snapshot()``
  gives the live Parquet files (its partitions), read by Spark's Parquet
  reader in the table's schema. The snapshot is resolved when the
  definitions are registered, just before the run starts. (The ctfile Python
  data source is not used: on Connect it would read through Python workers,
  a slower path than the one ``recompute`` reads.)

What is timed
-------------
From ``start_run`` to the end of the run's event stream (the run completed):
what a user waits for once the pipeline is registered. Untimed: the child's
start (Python imports, the Connect session), creating the graph and
registering the definitions (reported apart as ``register_ms``: it includes
resolving the snapshots), and checking the result afterwards. The
materialized views are created by one run before the change (untimed), so a
timed run is a refresh after the change, as a scheduled pipeline update is.
As every side of the benchmark, the first update after the change is an
untimed warm-up (:meth:`Anchor.refresh` with ``warm_up``: its time is the
benchmark's cold figure, its details are not kept), so the server has
planned and run these views once in this process; open-source Spark
recomputes the views on every update, whether their sources changed or
not, so the warm-up and the timed runs do the same work.
Of the run, the flows (from the first flow's RUNNING event to the last
one's COMPLETED: the recomputations and their writes, and between two
dependent flows the wait for the next one to start) are reported as
``flow_ms``, each flow apart as ``flows_ms``, and the rest after them as
``after_flow_ms``: the run's control loop (``TriggeredGraphExecution``)
notices a finished flow at its next poll, every
``spark.sql.pipelines.execution.streamstate.pollingInterval`` (1 s by
default, kept: it is what a user waits for), and sleeps once more before
the run ends, so a run ends 1-2 s after its last flow.
The child then runs a check query over the views and fails unless its rows
are the expected ones (as a multiset): the source's row count for the
one-view queries (``sum(n)`` of the aggregate and the dedup, ``count(*)``
of the join), and for the three-stage pipeline every row of the gold view,
against Spark's classic session running the two queries over the ctfile
tables (``_pipeline_stage.Chain.expected_gold``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

RESULT = "PIPELINE-RESULT "
#: The figures of each timed run (milliseconds; :func:`child`, :func:`_phases`).
PHASES = ("run_ms", "register_ms", "flow_ms", "after_flow_ms")
#: A flow's events: ``Flow <name> is RUNNING.``, ``Flow <name> has COMPLETED.``
FLOW_EVENT = re.compile(r"^Flow (?P<flow>\S+) (?:is|has) (?P<state>[A-Z_]+)\.?$")
SPEC = """name: {name}
storage: {storage}
database: default
libraries:
  - glob:
      include: transformations/**
"""
SOURCES_PY = '''"""The pipeline's sources: each ctfile table at its current version,
read from its live Parquet files as ``CtfileTable.to_df()`` reads them."""
from pathlib import Path

import ctfile
from ctfile.spark_datasource.types import spark_schema
from pyspark import pipelines as dp

SOURCES = {sources!r}


def ctfile_snapshot(uri):
    table = ctfile.open_table(uri)
    snap = table.snapshot()
    if snap.misread_by_name(snap.partitions, widening=True):
        raise ValueError(f"{{uri}}: files Spark's Parquet reader would misread by name")
    root = Path(uri).resolve().as_uri()
    files = [f"{{root}}/{{p.path}}" for p in snap.partitions]
    return spark.read.schema(spark_schema(snap.schema)).parquet(*files)


def source_view(name, uri):
    def read():
        return ctfile_snapshot(uri)
    dp.temporary_view(name=name)(read)


for _name, _uri in SOURCES.items():
    source_view(_name, _uri)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect_conf(port: int, warehouse: Path) -> dict[str, str]:
    """Spark conf starting a Connect server in the benchmark's own driver."""
    return {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.warehouse.dir": str(warehouse),
    }


def serving(port: int, timeout: float = 30.0) -> str:
    """Empty if the Connect server accepts connections on ``port``, else why not."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return ""
        except OSError as e:
            if time.monotonic() > deadline:
                return f"no Spark Connect server on 127.0.0.1:{port} ({e})"
            time.sleep(0.5)


def write_project(project: Path, name: str, views: dict[str, str], sources: dict[str, str]) -> Path:
    """A pipeline project ``name`` with one materialized view per entry of
    ``views`` (view name -> its SQL) over ``sources`` (temporary view name
    -> ctfile table URI); its spec."""
    (project / "transformations").mkdir(parents=True, exist_ok=True)
    (project / "storage").mkdir(exist_ok=True)
    spec = project / "spark-pipeline.yml"
    spec.write_text(SPEC.format(name=name, storage=(project / "storage").resolve().as_uri()))
    (project / "transformations" / "sources.py").write_text(SOURCES_PY.format(sources=sources))
    for view, sql in views.items():
        (project / "transformations" / f"{view}.sql").write_text(f"CREATE MATERIALIZED VIEW {view} AS\n{sql}\n")
    return spec


def same_rows(got: list, expect: list) -> bool:
    """Whether two lists of rows (lists of JSON values) hold the same rows,
    in any order."""
    def key(rows: list) -> list[str]:
        return sorted(json.dumps(list(r), default=str) for r in rows)
    return key(got) == key(expect)


def run(spec: Path, port: int, *, check: str, expect: list, timeout: float = 900) -> dict:
    """Run the pipeline of ``spec`` once in a child process against the
    Connect server on ``port``; its figures (see :func:`child`). ``check``
    is a SQL query over the views whose rows must be ``expect`` (a list of
    rows, each a list of JSON values), in any order.

    The server is asked first: a Connect client retries a server that does
    not answer for many minutes before it fails."""
    why = serving(port, timeout=5)
    if why:
        raise RuntimeError(why)
    env = dict(os.environ)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    args = [sys.executable, str(Path(__file__).resolve()), str(spec), f"sc://127.0.0.1:{port}", check,
            json.dumps(expect, default=str)]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in p.stdout.splitlines() if line.startswith(RESULT)]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"pipeline run failed (exit {p.returncode}): {_why(p.stderr or p.stdout)}")
    return json.loads(lines[-1][len(RESULT):])


def _why(output: str) -> str:
    """A failed child's reason: its last exception line (an analysis error's
    message comes before the SQL context it points at) and the last two
    lines of its output."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Exception|Error)\b", line)]
    return " ".join(([raised[-1]] if raised and raised[-1] not in lines[-2:] else []) + lines[-2:])


class Anchor:
    """The ``pipelines`` side in one benchmark run: the Connect server's
    port, the views' warehouse, why the side cannot run (empty while it
    can) and each timed run's details (register and flow times, events)."""

    def __init__(self, work: Path):
        self.port = free_port()
        self.warehouse = work / "warehouse"
        self.why_not = ""
        self.details: dict[str, dict] = {}

    def conf(self) -> dict[str, str]:
        return connect_conf(self.port, self.warehouse)

    def fail(self, why: str) -> None:
        self.why_not = self.why_not or why
        print(f"pipelines side off: {why}", file=sys.stderr)

    def create(self, project: Path, name: str, views: dict[str, str], sources: dict[str, str], *, check: str,
               expect: list) -> Path | None:
        """Write the project (:func:`write_project`) and run it once
        (untimed): the views at the sources' current versions; its spec, or
        None if the side is off."""
        if self.why_not:
            return None
        try:
            spec = write_project(project, name, views, sources)
            run(spec, self.port, check=check, expect=expect)
            return spec
        except Exception as e:  # the anchor reports why and the benchmark goes on
            self.fail(f"{name}: {str(e).strip()[:600]}")
            return None

    def refresh(self, key: str, spec: Path | None, *, check: str, expect: list,
                warm_up: bool = False) -> float | None:
        """One update run of ``spec``'s pipeline: seconds from ``start_run``
        to its end, or None if the side is off. A ``warm_up`` run's details
        are not kept (the benchmark keeps its time as the cold figure)."""
        if self.why_not or spec is None:
            return None
        try:
            r = run(spec, self.port, check=check, expect=expect)
        except Exception as e:
            self.fail(f"{key}: {str(e).strip()[:600]}")
            return None
        if not warm_up:
            self._keep(key, r)
        return r["run_ms"] / 1000

    def _keep(self, key: str, r: dict) -> None:
        d = self.details.setdefault(key, {k: [] for k in PHASES} | {"flows_ms": {}})
        for k in PHASES:
            d[k].append(r[k])
        for flow, ms in r["flows_ms"].items():
            d["flows_ms"].setdefault(flow, []).append(ms)
        d["events"] = r["events"]


def _flows(events: list[tuple[str, str]]) -> tuple[dict[str, tuple], set[str]]:
    """Each flow that ran to completion: its short name -> (RUNNING,
    COMPLETED) times; and the names of all flows in the events."""
    from datetime import datetime

    at: dict[tuple[str, str], datetime] = {}
    for t, m in events:
        hit = FLOW_EVENT.match(m)
        if hit:
            at[hit["flow"].rsplit(".", 1)[-1], hit["state"]] = datetime.fromisoformat(t)
    flows = {f for f, _ in at}
    done = {f: (at[f, "RUNNING"], at[f, "COMPLETED"]) for f in flows if (f, "RUNNING") in at and (f, "COMPLETED") in at}
    return done, flows


def _phases(events: list[tuple[str, str]]) -> dict:
    """Server times of a run's flows: ``flows_ms``, each flow's RUNNING to
    COMPLETED (its recomputation and write), by the view's short name;
    ``flow_ms`` from the first RUNNING to the last COMPLETED (for a chain,
    with the waits between dependent flows); ``after_flow_ms`` from there
    to the run's COMPLETED event. None where an event is missing; flows
    in the order they ran."""
    from datetime import datetime

    done, flows = _flows(events)
    if not done or len(done) < len(flows):
        return {"flow_ms": None, "after_flow_ms": None, "flows_ms": {}}
    end = [datetime.fromisoformat(t) for t, m in events if m.startswith("Run is COMPLETED")]
    first, last = min(r for r, _ in done.values()), max(c for _, c in done.values())
    return {"flow_ms": 1000 * (last - first).total_seconds(),
            "after_flow_ms": 1000 * (end[0] - last).total_seconds() if end else None,
            "flows_ms": {f: 1000 * (c - r).total_seconds() for f, (r, c) in sorted(done.items(), key=lambda x: x[1])}}


def child(spec_path: Path, url: str, check: str, expect: list) -> dict:
    """One pipeline run, as ``spark-pipelines run`` does it
    (``pyspark.pipelines.cli.run``), timed from ``start_run`` to the end of
    its event stream; then ``check``'s rows must be ``expect``."""
    from pyspark.pipelines.cli import load_pipeline_spec, register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run
    from pyspark.sql import SparkSession

    spec = load_pipeline_spec(spec_path)
    spark = SparkSession.builder.remote(url).config("spark.sql.connect.serverStacktrace.enabled", "false").getOrCreate()
    try:
        r0 = time.perf_counter()
        graph = create_dataflow_graph(spark, default_catalog=spec.catalog, default_database=spec.database,
                                      sql_conf=spec.configuration)
        register_definitions(spec_path, SparkConnectGraphElementRegistry(spark, graph), spec, spark, graph)
        register_ms = 1000 * (time.perf_counter() - r0)
        os.sync()  # as bench_derived's quiesce(): earlier writes are not billed to the run
        events = []
        t0 = time.perf_counter()
        for result in start_run(spark, graph, full_refresh=[], full_refresh_all=False, refresh=[], dry=False,
                                storage=spec.storage):
            if "pipeline_event_result" in result:
                e = result["pipeline_event_result"].event
                events.append((e.timestamp.ToDatetime().isoformat(), e.message))
        run_ms = 1000 * (time.perf_counter() - t0)
        failed = [m for _, m in events if "FAILED" in m.upper()]
        if failed:  # said before the check query, which would fail on a missing view without saying why
            raise AssertionError(f"the pipeline run reported a failure: {failed[:3]}")
        got = json.loads(json.dumps([list(row) for row in spark.sql(check).collect()], default=str))
    finally:
        spark.stop()
    if not same_rows(got, expect):
        raise AssertionError(f"the pipeline {spec.name}: {check} gave {str(got)[:300]}, expected {str(expect)[:300]}")
    return {"run_ms": run_ms, "register_ms": register_ms, **_phases(events), "events": events,
            "check": f"{check}: {len(got)} rows as expected"}


if __name__ == "__main__":
    out = child(Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    print(RESULT + json.dumps(out), flush=True)
