"""Derived tables benchmark (issue 29): a refresh of a derived table after
0.1%, 1% and 10% of its source's rows changed, incremental against full
recomputation of the same query, side by side in one run on local[2].

The source ``silver`` holds ``--rows`` events (id, country of 50, event type
of 5, amount) in 1 Mi-row partitions, with change capture on
(``ctfile.changeCapture = before_after``: the setting for tables whose
changes are consumed), and a dimension ``dim`` maps each country to a
region. Four queries, each a derived table (``pipeline`` two):

* ``aggregate``: revenue and count per country and event type;
* ``join``: every event with its region (a two-way inner join);
* ``dedup``: the top event by amount of each block of 10 ids (``QUALIFY
  ROW_NUMBER() OVER (PARTITION BY id DIV 10 ...) = 1``), with its block's
  row count; a refresh recomputes the blocks the change touched;
* ``pipeline`` (issue 30): three stages, the source as bronze, a
  deduplicated silver derived table and a gold one over it and the
  dimension, refreshed together (``_pipeline_stage``).

A change of fraction ``f`` updates the amount of ``f/2`` of the rows, chosen
at random, and inserts ``f/2`` new rows, in one commit each. Each run
refreshes a fresh copy of the derived table made before the change (the
copy is not timed), the sides alternating:

* ``incremental``: ``refresh()`` of the table created with
  ``refresh_mode="incremental"``;
* ``full``: ``refresh(full=True)`` of the same table: the query recomputed
  and MERGEd in (unchanged rows keep their ids);
* ``auto``: ``refresh()`` of the table created with ``refresh_mode="auto"``
  (it chooses from the log);
* ``recompute``: the plain Spark recomputation a user runs without derived
  tables: the query over ``CtfileTable.to_df()`` written as Parquet with
  ``mode("overwrite")``; the anchor of the goals;
* ``floor``: Spark running the query over the changed rows alone, held in
  memory (no change scan, stored state, MERGE or commit): what any refresh
  that computes its delta as a Spark job pays at least; for the window
  (``dedup``), over the source's rows of the partitions the changed rows
  fall in (the whole source scanned and filtered): what any refresh that
  recomputes the touched partitions pays at least;
* ``rewrite``: Spark reading the derived table's rows (``to_df()``) and
  writing them back as Parquet: the copy-on-write floor of a refresh whose
  changed rows lie in every partition of the derived table (the join's
  rows are keyed by source row ids, and the change picks them at random);
* ``pipelines`` (off by default, ``--sides ...,pipelines``): the outside
  anchor, the query as a materialized view of a Spark Declarative Pipeline
  (``pyspark.pipelines``), which open-source Spark refreshes by recomputing
  it in full; for ``pipeline``, one project with a materialized view per
  derived table (silver, and gold over it). The views read each source at
  its current version from its live Parquet files (``ctfile.open_table(uri).snapshot()``'s partitions, as
  ``CtfileTable.to_df()`` reads natively; not the ctfile data source). It
  needs a Spark Connect server, started in this benchmark's own driver
  (``SparkConnectPlugin`` on 127.0.0.1, so the same JVM and ``local[2]``
  executors as ``recompute``), and a client process per pipeline run; the
  views are created by an untimed run before the change, and the time is
  that of an update run after it, from ``start_run`` to the end of its event
  stream (registration of the definitions reported apart). Each run checks
  the views afterwards (the pipeline's gold view row for row against Spark
  running its two queries). Details in ``_pipelines.py``. If the server
  cannot start or a run fails, the side reports why and the benchmark goes
  on. Reported against ``recompute``, no goal.

What is timed
-------------
Each side's work after the change, as a scheduled refresh in a long-lived
process sees it: at each fraction, every side of every query first does one
untimed refresh of the same kind (same query, same side) on a scratch copy
(for ``pipelines``, an update run of the same views), then the ``--runs``
timed ones. The first refresh of a process pays one-off costs (classes
loaded, code generated, a first plan of each statement) that a scheduled
refresh pays once, not per run (issue 29: the aggregate's first Spark-path
refresh of a process took several times the next ones). That untimed
refresh's time is kept as the cold figure (``cold_ms`` in the JSON,
reported beside the warmed-up medians).

Goals (issue 29): aggregate incremental <= 0.1x the recomputation at 1%,
join <= 0.25x at 1%, ``auto`` within 1.1x of the faster of incremental and
recompute at every fraction, and a ``NO_DATA`` refresh under 0.5 s.

Usage::

    .venv/bin/python benchmarks/bench_derived.py [--quick] [--rows N] [--runs N] [--sides incremental,auto,pipelines]

Writes ``benchmarks/results/derived.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import ctfile  # noqa: E402
from _pipeline_stage import Chain, sdp_views  # noqa: E402
from _pipelines import PHASES  # noqa: E402
from _timing import quiesce, save_and_print  # noqa: E402

QUERIES = {
    "aggregate": "SELECT country, event_type, sum(amount) AS revenue, count(*) AS n FROM silver "
                 "GROUP BY country, event_type",
    "join": "SELECT s.id, s.amount, d.region FROM silver s JOIN dim d ON s.country = d.country",
    "dedup": "SELECT id, country, amount, count(*) OVER (PARTITION BY id DIV 10) AS n FROM silver "
             "QUALIFY ROW_NUMBER() OVER (PARTITION BY id DIV 10 ORDER BY amount DESC, id) = 1",
}
#: The window queries' partition expressions: their floor recomputes the
#: partitions the change touches (``Step._floor``).
PARTITION_FLOORS = {"dedup": "id DIV 10"}
#: What the pipelines side checks its view holds: the source's row count.
CHECKS = {"aggregate": "sum(n)", "join": "count(*)", "dedup": "sum(n)"}
GOALS = {("aggregate", 0.01): 0.1, ("join", 0.01): 0.25, ("dedup", 0.01): 0.2, ("pipeline", 0.01): 0.15}
#: The three-stage pipeline (bronze -> dedup silver -> LEFT JOIN gold, ``_pipeline_stage``), measured as a query.
PIPELINE = "pipeline"
AUTO_GOAL = 1.1
NO_DATA_GOAL_S = 0.5
FRACTIONS = (0.001, 0.01, 0.1)
SIDES = ("incremental", "full", "auto", "recompute", "floor", "rewrite")
#: Sides measured only when named in ``--sides`` (they need more setup).
EXTRA_SIDES = ("pipelines",)
#: The anchor and the floors, measured whatever ``--sides`` asks for.
ALWAYS = ("recompute", "floor", "rewrite")
LABELS = {"pipelines": "Spark Declarative Pipelines full refresh"}
COUNTRIES = [f"c{i:02d}" for i in range(50)]
EVENTS = ["view", "click", "cart", "buy", "refund"]


def events(ids: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "country": pa.array(np.array(COUNTRIES)[rng.integers(0, len(COUNTRIES), len(ids))]),
        "event_type": pa.array(np.array(EVENTS)[rng.integers(0, len(EVENTS), len(ids))]),
        "amount": pa.array(rng.integers(1, 1000, len(ids)), pa.int64()),
    })


def build(root: Path, rows: int) -> tuple[str, str]:
    """The source and the dimension at version 1 (built once per size)."""
    silver, dim = root / "silver", root / "dim"
    if (silver / "_ct_log").exists() and (dim / "_ct_log").exists():
        return str(silver), str(dim)
    shutil.rmtree(root, ignore_errors=True)
    t = ctfile.create_table(str(silver), events(np.arange(1), 0).schema, partition_rows=1 << 20,
                            properties={"ctfile.changeCapture": "before_after"})
    t.insert(events(np.arange(rows), 1))
    d = ctfile.create_table(str(dim), pa.schema([("country", pa.string()), ("region", pa.string())]))
    d.insert(pa.table({"country": COUNTRIES, "region": [f"r{i % 7}" for i in range(len(COUNTRIES))]}))
    return str(silver), str(dim)


def change(silver: ctfile.Table, fraction: float, seed: int) -> int:
    """Update ``fraction/2`` of the rows at random and insert as many new
    ones; the rows changed."""
    rng = np.random.default_rng(seed)
    n = silver.snapshot().num_records
    k = max(1, int(n * fraction / 2))
    ids = pa.array(np.sort(rng.choice(n, k, replace=False)), pa.int64())
    silver.update(pc.is_in(pc.field("id"), value_set=ids), {"amount": pc.add(pc.field("amount"), 1)})
    silver.insert(events(np.arange(10**12 + seed * 10**7, 10**12 + seed * 10**7 + k), seed))
    return 2 * k


def spark_session(extra: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("bench_derived")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "6g"))
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed(fn) -> float:
    quiesce()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(a: argparse.Namespace) -> dict:
    from ctfile.spark import derived

    base = a.work_dir / "derived" / f"rows-{a.rows}"
    spark, anchor = pipelines_session(a, base)
    out: dict = {"ms": {}, "cold_ms": {}, "actions": {}, "changed_rows": {}}
    load0 = list(os.getloadavg())
    for fi, fraction in enumerate(FRACTIONS if not a.quick else (0.01,)):
        root = base / f"f{fraction}"
        shutil.rmtree(root, ignore_errors=True)
        src_uri, dim_uri = build(base / "src", a.rows)
        shutil.copytree(Path(src_uri), root / "silver")
        shutil.copytree(Path(dim_uri), root / "dim")
        step = Step(spark, a, anchor, root, fraction, fi, out)
        step.prepare()
        out["changed_rows"][str(fraction)] = step.change()
        timed_rounds(step.side, a, out, fraction)
        if fi == 0:
            t = derived.open(spark, str(step.pristine["aggregate", "incremental"]))
            t.refresh()
            out["no_data_ms"] = 1000 * statistics.median([timed(t.refresh) for _ in range(5)])
        if step.anchored:
            drop_views(spark, step.views())
        shutil.rmtree(root, ignore_errors=True)
    spark.stop()
    if anchor is not None:
        out["pipelines"] = {"why_not": anchor.why_not, "runs": anchor.details}
    out["meta"] = {
        "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "rows": a.rows, "runs": a.runs, "loadavg_start": load0, "loadavg_end": list(os.getloadavg()),
        "command": "benchmarks/bench_derived.py" + (" --quick" if a.quick else f" --rows {a.rows} --runs {a.runs}")
                   + ("" if a.sides == SIDES else f" --sides {','.join(a.sides)}"),
    }
    return out


def timed_rounds(side, a: argparse.Namespace, out: dict, fraction: float) -> None:
    """Each query's sides at one fraction: one untimed warm-up refresh of
    each (its time kept in ``out["cold_ms"]``), then ``a.runs`` timed
    rounds, the sides alternating; their medians in ``out["ms"]``.
    ``side(q, name, warm_up=...)`` returns seconds, or None when the side
    did not run (the pipelines side, ``anchor.why_not``)."""
    kinds = [(q, s) for q in (*QUERIES, PIPELINE) for s in a.sides]
    cold = {(q, s): side(q, s, warm_up=True) for q, s in kinds}
    out["cold_ms"].update({f"{q}/{fraction}/{s}": 1000 * secs for (q, s), secs in cold.items() if secs is not None})
    runs: dict[tuple[str, str], list[float]] = {k: [] for k in kinds}
    for _ in range(a.runs):
        for q, s in kinds:
            secs = side(q, s)
            if secs is not None:
                runs[q, s].append(secs)
    for (q, s), v in runs.items():
        if v:
            out["ms"][f"{q}/{fraction}/{s}"] = 1000 * statistics.median(v)


def view_check(q: str, view: str, rows: int) -> dict:
    """The pipelines side's check of query ``q``'s view: its ``CHECKS``
    figure must be the source's row count."""
    return {"check": f"SELECT {CHECKS[q]} FROM default.{view}", "expect": [[rows]]}


class Step:
    """One fraction of the benchmark under ``root`` (its copies of the
    source ``silver`` and of ``dim``): the derived tables and pipelines
    made before the change (:meth:`prepare`), the change
    (:meth:`change`) and each side's refresh after it (:meth:`side`)."""

    def __init__(self, spark, a: argparse.Namespace, anchor, root: Path, fraction: float, fi: int, out: dict):
        self.spark, self.a, self.anchor, self.root, self.fraction, self.fi = spark, a, anchor, root, fraction, fi
        self.out = out
        self.srcs = {"silver": str(root / "silver"), "dim": str(root / "dim")}
        self.anchored = "pipelines" in a.sides
        self.pristine: dict[tuple[str, str], Path | None] = {}
        self.chain = Chain(spark, root, self.srcs["silver"], self.srcs["dim"], timed)
        self.checks: dict[str, dict] = {}

    def view(self, q: str) -> str:
        """The pipelines side's (gold) materialized view of query ``q``."""
        return f"{q}_f{self.fi}"

    def views(self) -> list[str]:
        """Every materialized view of this fraction's pipelines."""
        return [self.view(q) for q in QUERIES] + list(sdp_views(self.view(PIPELINE)))

    def prepare(self) -> None:
        """The derived tables (a pristine copy each), the chain and, with
        the pipelines side, each query's pipeline run once (untimed)."""
        from ctfile.spark import derived

        for q, sql in QUERIES.items():
            bound = {n: u for n, u in self.srcs.items() if f" {n}" in sql}
            for mode in ("incremental", "auto"):
                uri = self.root / f"{q}-{mode}-pristine"
                derived.create(self.spark, str(uri), sql, sources=bound, refresh_mode=mode)
                self.pristine[q, mode] = uri
            if self.anchored:
                self.pristine[q, "pipelines"] = self.anchor.create(
                    self.root / "pipelines" / q, self.view(q), {self.view(q): sql}, bound,
                    **view_check(q, self.view(q), self.a.rows))
        self.chain.create()
        if self.anchored:
            name = self.view(PIPELINE)
            self.pristine[PIPELINE, "pipelines"] = self.anchor.create(
                self.root / "pipelines" / PIPELINE, name, sdp_views(name), self.chain.sdp_sources(),
                **self._gold_check())

    def _gold_check(self) -> dict:
        check, expect = self.chain.gold_check(self.view(PIPELINE))
        return {"check": check, "expect": expect}

    def change(self) -> int:
        """The change of the source (:func:`change`); the rows changed.
        Keeps the changed rows (the floor's input) and the pipelines' checks."""
        silver = ctfile.open_table(self.srcs["silver"])
        n = change(silver, self.fraction, seed=self.fi + 2)
        self.changed = silver.changes(start_version=2, information="default").to_arrow().drop_columns(
            ["METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"])
        if self.anchored:
            rows = silver.snapshot().num_records
            self.checks = {q: view_check(q, self.view(q), rows) for q in QUERIES}
            self.checks[PIPELINE] = self._gold_check()
        return n

    def side(self, q: str, name: str, warm_up: bool = False) -> float | None:
        """Seconds of side ``name`` of query ``q`` (None: not measured)."""
        if name == "pipelines":
            quiesce()
            return self.anchor.refresh(f"{q}/{self.fraction}", self.pristine[q, "pipelines"], **self.checks[q],
                                       warm_up=warm_up)
        if q == PIPELINE:
            return self.chain.side(name, self.out["actions"], f"{q}/{self.fraction}/{name}")
        if name == "floor":
            return self._floor(q)
        if name == "rewrite":
            return self._rewrite(q)
        if name == "recompute":
            return self._recompute(q)
        return self._refresh(q, name)

    def _floor(self, q: str) -> float:
        """Spark running the query over the changed rows alone, already in
        memory (no change scan, no state, no MERGE, no commit): what any
        refresh that runs the delta as a Spark job pays at least. A window
        query (:data:`PARTITION_FLOORS`) runs over the source's rows of the
        partitions the changed rows fall in instead (a scan of the whole
        source, filtered): what any refresh that recomputes the touched
        partitions pays at least."""
        from ctfile.spark import CtfileTable

        CtfileTable.for_path(self.spark, self.srcs["dim"]).to_df().createOrReplaceTempView("dim")
        part = PARTITION_FLOORS.get(q)

        def views() -> None:
            changed = self.spark.createDataFrame(self.changed)
            if part is None:
                changed.createOrReplaceTempView("silver")
                return
            changed.createOrReplaceTempView("_changed")
            CtfileTable.for_path(self.spark, self.srcs["silver"]).to_df().createOrReplaceTempView("_silver_all")
            self.spark.sql(f"SELECT * FROM _silver_all WHERE {part} IN (SELECT {part} FROM _changed)") \
                .createOrReplaceTempView("silver")

        return timed(lambda: (views(), self.spark.sql(QUERIES[q]).write.format("noop").mode("overwrite").save()))

    def _rewrite(self, q: str) -> float:
        """The copy-on-write floor of a refresh that touches every partition."""
        from ctfile.spark import CtfileTable

        target = self.root / f"{q}-rewrite"
        shutil.rmtree(target, ignore_errors=True)
        rows = CtfileTable.for_path(self.spark, str(self.pristine[q, "incremental"])).to_df()
        return timed(lambda: rows.write.mode("overwrite").parquet(str(target)))

    def _recompute(self, q: str) -> float:
        from ctfile.spark import CtfileTable

        target = self.root / f"{q}-recompute"
        shutil.rmtree(target, ignore_errors=True)
        for n, u in self.srcs.items():
            CtfileTable.for_path(self.spark, u).to_df().createOrReplaceTempView(n)
        return timed(lambda: self.spark.sql(QUERIES[q]).write.mode("overwrite").parquet(str(target)))

    def _refresh(self, q: str, name: str) -> float:
        """A refresh (``incremental``, ``full`` or ``auto``) of a fresh copy
        of the derived table made before the change."""
        from ctfile.spark import derived

        mode = "auto" if name == "auto" else "incremental"
        work = self.root / f"{q}-{mode}-run"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(self.pristine[q, mode], work)
        t = derived.open(self.spark, str(work))
        box = {}
        secs = timed(lambda: box.setdefault("r", t.refresh(full=(name == "full"))))
        self.out["actions"][f"{q}/{self.fraction}/{name}"] = f"{box['r'].action.value}: {box['r'].reason}"
        return secs


def pipelines_session(a: argparse.Namespace, base: Path):
    """The Spark session, with a Connect server in its driver when the
    ``pipelines`` side is asked for; that side's :class:`_pipelines.Anchor`
    (None when not asked for). A server that cannot start turns the side off
    with its reason; the other sides go on without it."""
    if "pipelines" not in a.sides:
        return spark_session(), None
    from _pipelines import Anchor, serving

    anchor = Anchor(base / "pipelines")
    shutil.rmtree(anchor.warehouse, ignore_errors=True)
    try:
        spark = spark_session(anchor.conf())
    except Exception as e:  # e.g. no spark-connect jar: the side says why, the rest runs
        anchor.fail(f"the Spark session with a Connect server did not start: {str(e)[:400]}")
        return spark_session(), anchor
    why = serving(anchor.port)
    if why:
        anchor.fail(why)
    return spark, anchor


def drop_views(spark, names: list[str]) -> None:
    """Drop the pipelines' views of one fraction (their files go with them)."""
    for name in names:
        try:
            spark.sql(f"DROP TABLE IF EXISTS spark_catalog.default.{name}")
        except Exception as e:  # a view left behind costs disk only
            print(f"could not drop {name}: {e}", file=sys.stderr)


def ratios(r: dict) -> list[dict]:
    """The figures: each side against the recomputation, with its goal."""
    figs = []
    for key, ms in sorted(r["ms"].items()):
        q, fraction, side = key.split("/")
        if side in ALWAYS:
            continue
        anchor = r["ms"][f"{q}/{fraction}/recompute"]
        goal = GOALS.get((q, float(fraction))) if side == "incremental" else None
        if side == "auto":
            best = min(r["ms"].get(f"{q}/{fraction}/incremental", anchor), anchor)
            figs.append({"what": f"{q} auto at {float(fraction):.1%}", "ratio": ms / best, "goal": AUTO_GOAL,
                         "cold_ms": r.get("cold_ms", {}).get(key),
                         "vs": "the faster of incremental and recompute", "ms": ms, "anchor_ms": best})
            continue
        figs.append({"what": f"{q} {LABELS.get(side, side)} at {float(fraction):.1%}", "ratio": ms / anchor,
                     "goal": goal, "cold_ms": r.get("cold_ms", {}).get(key),
                     "vs": "Spark recomputation to Parquet", "ms": ms, "anchor_ms": anchor,
                     "floor_ms": r["ms"].get(f"{q}/{fraction}/floor") if side == "incremental" else None,
                     "rewrite_ms": r["ms"].get(f"{q}/{fraction}/rewrite") if side == "incremental" else None})
    return figs


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = [
        f"## Derived tables: refresh vs recomputation ({m['mode']}, {m['date']})", "",
        f"A source of {m['rows']:,} rows (change capture on); medians of {m['runs']} runs per side, alternated; "
        f"load average {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end; `{m['command']}`."
        + (" Each side is timed after one untimed refresh of the same kind (warmed up); that first refresh's time is "
           "the cold column." if "cold_ms" in r else ""), "",
        "| refresh | ms | cold ms | compared with | its ms | ratio | goal | floor ms (ratio) | rewrite floor ms (ratio) |",
        "|---|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for f in ratios(r):
        verdict = "reported" if f["goal"] is None else ("ok" if f["ratio"] <= f["goal"] else "**MISS**")
        goal = "" if f["goal"] is None else f"<= {f['goal']}x: "
        floor, rewrite = (f"{f[k]:.0f} ({f[k] / f['anchor_ms']:.2f})" if f.get(k) else "" for k in ("floor_ms", "rewrite_ms"))
        lines.append(f"| {f['what']} | {f['ms']:.0f} | {_ms(f['cold_ms'])} | {f['vs']} | {f['anchor_ms']:.0f} | {f['ratio']:.2f} | "
                     f"{goal}{verdict} | {floor} | {rewrite} |")
    nd = r.get("no_data_ms")
    if nd is not None:
        lines.append(f"| NO_DATA refresh | {nd:.0f} | | | | | < {NO_DATA_GOAL_S * 1000:.0f} ms: "
                     f"{'ok' if nd < NO_DATA_GOAL_S * 1000 else '**MISS**'} |")
    lines += pipelines_lines(r.get("pipelines"))
    lines += ["", "Actions chosen:", ""] + [f"- {k}: {v}" for k, v in sorted(r["actions"].items())]
    return "\n".join(lines)


def _ms(ms: float | None) -> str:
    """Milliseconds in a table cell; empty when not measured."""
    return "" if ms is None else f"{ms:.0f}"


def pipelines_lines(p: dict | None) -> list[str]:
    """What the pipelines side measured beyond its time, or why it did not run."""
    if p is None:
        return []
    lines = ["", "Spark Declarative Pipelines (the outside anchor: materialized views recomputed in full on each "
             "update; timed from `start_run` to the end of the run's events, in this driver's Connect server). "
             "The run's control loop polls its flows every `spark.sql.pipelines.execution.streamstate."
             "pollingInterval` (1 s, Spark's default, kept) and sleeps once more before it ends, so a run "
             "ends 1-2 s after its last flow (and a flow that waits for another starts at a poll after it):", ""]
    if p["why_not"]:
        lines.append(f"- not measured (or not every run): {p['why_not']}")
    return lines + [_run_line(key, d) for key, d in sorted(p["runs"].items())]


def _run_line(key: str, d: dict) -> str:
    """One pipeline's timed runs (medians): the run, its flows, the rest."""
    med = {k: statistics.median(v) for k, v in d.items() if k in PHASES and v and None not in v}
    flows = {f: statistics.median(v) for f, v in d.get("flows_ms", {}).items()}
    what = "the flow (RUNNING to COMPLETED)" if len(flows) < 2 else (
        "the flows (first RUNNING to last COMPLETED; each: "
        + ", ".join(f"{f} {ms:.0f} ms" for f, ms in flows.items()) + ")")
    inside = (f", of which {what} {med['flow_ms']:.0f} ms and from the last flow's end to the run's "
              f"{med['after_flow_ms']:.0f} ms") if "after_flow_ms" in med and "flow_ms" in med else ""
    return f"- {key}: run {med['run_ms']:.0f} ms{inside}; registering the definitions before it {med['register_ms']:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=HERE / "results" / "derived.json")
    p.add_argument("--work-dir", type=Path, default=HERE / "work")
    p.add_argument("--no-print", action="store_true")
    p.add_argument("--sides", type=lambda v: tuple(v.split(",")), default=SIDES,
                   help=f"comma-separated subset of {','.join(SIDES + EXTRA_SIDES)} (recompute, floor and rewrite are "
                        "always measured; pipelines only when named)")
    a = p.parse_args(argv)
    if a.quick:
        a.rows, a.runs = 20_000, 1
    unknown = set(a.sides) - set(SIDES + EXTRA_SIDES)
    if unknown:
        p.error(f"--sides: unknown {sorted(unknown)}; choose from {', '.join(SIDES + EXTRA_SIDES)}")
    a.sides = tuple(s for s in SIDES + EXTRA_SIDES if s in a.sides or s in ALWAYS)
    return save_and_print(a.out, measure(a), markdown, quiet=a.no_print)


if __name__ == "__main__":
    sys.exit(main())
