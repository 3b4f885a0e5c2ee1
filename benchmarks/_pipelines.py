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
  Python file with one ``@dp.temporary_view`` per source and a SQL file
  ``CREATE MATERIALIZED VIEW <name> AS <the benchmark's query>``.
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
materialized view is created by one run before the change (untimed), so the
timed run is a refresh after the change, as a scheduled pipeline update is
(open-source Spark recomputes the view on every update, whether its sources
changed or not, so with ``--runs`` above 1 the later runs do the same work).
Of the run, the flow itself (its RUNNING to COMPLETED events: the
recomputation and its write) is reported as ``flow_ms``, and the rest after
it as ``after_flow_ms``: the run's control loop
(``TriggeredGraphExecution``) notices a finished flow at its next poll,
every ``spark.sql.pipelines.execution.streamstate.pollingInterval`` (1 s by
default, kept: it is what a user waits for), and sleeps once more before
the run ends, so a one-flow run ends 1-2 s after its flow.
The child then checks that the view holds the source's current rows
(``sum(n)`` of the aggregate, ``count(*)`` of the join, against the source's
row count) and fails otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

RESULT = "PIPELINE-RESULT "
#: The figures of each timed run (milliseconds; :func:`child`, :func:`_phases`).
PHASES = ("run_ms", "register_ms", "flow_ms", "after_flow_ms")
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


def write_project(project: Path, name: str, sql: str, sources: dict[str, str]) -> Path:
    """A pipeline project with one materialized view ``name`` defined by
    ``sql`` over ``sources`` (view name -> ctfile table URI); its spec."""
    (project / "transformations").mkdir(parents=True, exist_ok=True)
    (project / "storage").mkdir(exist_ok=True)
    spec = project / "spark-pipeline.yml"
    spec.write_text(SPEC.format(name=name, storage=(project / "storage").resolve().as_uri()))
    (project / "transformations" / "sources.py").write_text(SOURCES_PY.format(sources=sources))
    (project / "transformations" / f"{name}.sql").write_text(f"CREATE MATERIALIZED VIEW {name} AS\n{sql}\n")
    return spec


def run(spec: Path, port: int, *, check: str, expect: int, timeout: float = 900) -> dict:
    """Run the pipeline of ``spec`` once in a child process against the
    Connect server on ``port``; its figures (see :func:`child`). ``check``
    is a SQL expression over the view whose value must be ``expect``.

    The server is asked first: a Connect client retries a server that does
    not answer for many minutes before it fails."""
    why = serving(port, timeout=5)
    if why:
        raise RuntimeError(why)
    env = dict(os.environ)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    args = [sys.executable, str(Path(__file__).resolve()), str(spec), f"sc://127.0.0.1:{port}", check, str(expect)]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in p.stdout.splitlines() if line.startswith(RESULT)]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-2:]  # the exception and its message
        raise RuntimeError(f"pipeline run failed (exit {p.returncode}): " + " ".join(s.strip() for s in tail))
    return json.loads(lines[-1][len(RESULT):])


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

    def create(self, project: Path, name: str, sql: str, sources: dict[str, str], *, check: str,
               expect: int) -> Path | None:
        """Write the project and run it once (untimed): the view at the
        sources' current versions; its spec, or None if the side is off."""
        if self.why_not:
            return None
        try:
            spec = write_project(project, name, sql, sources)
            run(spec, self.port, check=check, expect=expect)
            return spec
        except Exception as e:  # the anchor reports why and the benchmark goes on
            self.fail(f"{name}: {str(e).strip()[:600]}")
            return None

    def refresh(self, key: str, spec: Path | None, *, check: str, expect: int) -> float | None:
        """One timed update run of ``spec``'s pipeline: seconds from
        ``start_run`` to its end, or None if the side is off."""
        if self.why_not or spec is None:
            return None
        try:
            r = run(spec, self.port, check=check, expect=expect)
        except Exception as e:
            self.fail(f"{key}: {str(e).strip()[:600]}")
            return None
        self.details.setdefault(key, {k: [] for k in PHASES})
        for k in PHASES:
            self.details[key][k].append(r[k])
        self.details[key]["events"] = r["events"]
        return r["run_ms"] / 1000


def _phases(events: list[tuple[str, str]]) -> dict[str, float | None]:
    """Server times of a one-flow run: ``flow_ms`` from the flow's RUNNING
    event to its COMPLETED one (the recomputation and its write), and
    ``after_flow_ms`` from there to the run's COMPLETED event."""
    from datetime import datetime

    at = {m.rsplit(" ", 1)[-1].rstrip("."): datetime.fromisoformat(t) for t, m in events if m.startswith("Flow ")}
    end = [datetime.fromisoformat(t) for t, m in events if m.startswith("Run is COMPLETED")]
    if "RUNNING" not in at or "COMPLETED" not in at:
        return {"flow_ms": None, "after_flow_ms": None}
    return {"flow_ms": 1000 * (at["COMPLETED"] - at["RUNNING"]).total_seconds(),
            "after_flow_ms": 1000 * (end[0] - at["COMPLETED"]).total_seconds() if end else None}


def child(spec_path: Path, url: str, check: str, expect: int) -> dict:
    """One pipeline run, as ``spark-pipelines run`` does it
    (``pyspark.pipelines.cli.run``), timed from ``start_run`` to the end of
    its event stream."""
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
        got = spark.sql(f"SELECT {check} FROM {spec.database}.{spec.name}").collect()[0][0]
    finally:
        spark.stop()
    if got != expect:
        raise AssertionError(f"the materialized view {spec.name} has {check} = {got}, expected {expect}")
    failed = [m for _, m in events if "FAILED" in m.upper()]
    if failed:
        raise AssertionError(f"the pipeline run reported a failure: {failed[:3]}")
    return {"run_ms": run_ms, "register_ms": register_ms, **_phases(events), "events": events,
            "check": f"{check} = {got}"}


if __name__ == "__main__":
    out = child(Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))
    print(RESULT + json.dumps(out), flush=True)
