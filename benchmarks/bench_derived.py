"""Derived tables benchmark (issue 29): a refresh of a derived table after
0.1%, 1% and 10% of its source's rows changed, incremental against full
recomputation of the same query, side by side in one run on local[2].

The source ``silver`` holds ``--rows`` events (id, country of 50, event type
of 5, amount) in 1 Mi-row partitions, with change capture on
(``ctfile.changeCapture = before_after``: the setting for tables whose
changes are consumed), and a dimension ``dim`` maps each country to a
region. Three queries, each a derived table:

* ``aggregate``: revenue and count per country and event type;
* ``join``: every event with its region (a two-way inner join);
* ``dedup``: the top event by amount of each block of 10 ids (``QUALIFY
  ROW_NUMBER() OVER (PARTITION BY id DIV 10 ...) = 1``), with its block's
  row count; a refresh recomputes the blocks the change touched.

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
  that computes its delta as a Spark job pays at least;
* ``rewrite``: Spark reading the derived table's rows (``to_df()``) and
  writing them back as Parquet: the copy-on-write floor of a refresh whose
  changed rows lie in every partition of the derived table (the join's
  rows are keyed by source row ids, and the change picks them at random);
* ``pipelines`` (off by default, ``--sides ...,pipelines``): the outside
  anchor, the query as a materialized view of a Spark Declarative Pipeline
  (``pyspark.pipelines``), which open-source Spark refreshes by recomputing
  it in full. The view reads each source at its current version from its
  live Parquet files (``ctfile.open_table(uri).snapshot()``'s partitions, as
  ``CtfileTable.to_df()`` reads natively; not the ctfile data source). It
  needs a Spark Connect server, started in this benchmark's own driver
  (``SparkConnectPlugin`` on 127.0.0.1, so the same JVM and ``local[2]``
  executors as ``recompute``), and a client process per pipeline run; the
  view is created by an untimed run before the change, and the time is that
  of the update run after it, from ``start_run`` to the end of its event
  stream (registration of the definitions reported apart). Details in
  ``_pipelines.py``. If the server cannot start or a run fails, the side
  reports why and the benchmark goes on. Reported against ``recompute``,
  no goal.

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
from _pipeline_stage import Chain  # noqa: E402
from _timing import quiesce, save_and_print  # noqa: E402

QUERIES = {
    "aggregate": "SELECT country, event_type, sum(amount) AS revenue, count(*) AS n FROM silver "
                 "GROUP BY country, event_type",
    "join": "SELECT s.id, s.amount, d.region FROM silver s JOIN dim d ON s.country = d.country",
    "dedup": "SELECT id, country, amount, count(*) OVER (PARTITION BY id DIV 10) AS n FROM silver "
             "QUALIFY ROW_NUMBER() OVER (PARTITION BY id DIV 10 ORDER BY amount DESC, id) = 1",
}
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
    from ctfile.spark import CtfileTable, derived

    base = a.work_dir / "derived" / f"rows-{a.rows}"
    spark, anchor = pipelines_session(a, base)
    out: dict = {"ms": {}, "actions": {}, "changed_rows": {}}
    load0 = list(os.getloadavg())
    for fi, fraction in enumerate(FRACTIONS if not a.quick else (0.01,)):
        root = base / f"f{fraction}"
        shutil.rmtree(root, ignore_errors=True)
        src_uri, dim_uri = build(base / "src", a.rows)
        shutil.copytree(Path(src_uri), root / "silver")
        shutil.copytree(Path(dim_uri), root / "dim")
        srcs = {"silver": str(root / "silver"), "dim": str(root / "dim")}
        pristine = {}
        for q, sql in QUERIES.items():
            bound = {n: u for n, u in srcs.items() if f" {n}" in sql}
            for mode in ("incremental", "auto"):
                uri = root / f"{q}-{mode}-pristine"
                derived.create(spark, str(uri), sql, sources=bound, refresh_mode=mode)
                pristine[q, mode] = uri
            if "pipelines" in a.sides:
                pristine[q, "pipelines"] = anchor.create(root / "pipelines" / q, f"{q}_f{fi}", sql, bound,
                                                         check=CHECKS[q], expect=a.rows)
        chain = Chain(spark, root, srcs["silver"], srcs["dim"], timed)
        chain.create()
        silver = ctfile.open_table(srcs["silver"])
        out["changed_rows"][str(fraction)] = change(silver, fraction, seed=fi + 2)

        # The floor: Spark running the query over the changed rows alone,
        # already in memory (no change scan, no state, no MERGE, no commit):
        # what any refresh that runs the delta as a Spark job pays at least.
        changed = silver.changes(start_version=2, information="default").to_arrow().drop_columns(
            ["METADATA$ACTION", "METADATA$ISUPDATE", "METADATA$ROW_ID"])

        def side(q: str, name: str) -> float | None:
            if q == PIPELINE:
                return chain.side(name, out["actions"], f"{q}/{fraction}/{name}")
            mode = "auto" if name == "auto" else "incremental"
            if name == "pipelines":
                quiesce()
                return anchor.refresh(f"{q}/{fraction}", pristine[q, "pipelines"], check=CHECKS[q],
                                      expect=silver.snapshot().num_records)
            if name == "floor":
                CtfileTable.for_path(spark, srcs["dim"]).to_df().createOrReplaceTempView("dim")
                return timed(lambda: (spark.createDataFrame(changed).createOrReplaceTempView("silver"),
                                      spark.sql(QUERIES[q]).write.format("noop").mode("overwrite").save()))
            if name == "rewrite":  # the copy-on-write floor of a refresh that touches every partition
                target = root / f"{q}-rewrite"
                shutil.rmtree(target, ignore_errors=True)
                rows = CtfileTable.for_path(spark, str(pristine[q, "incremental"])).to_df()
                return timed(lambda: rows.write.mode("overwrite").parquet(str(target)))
            if name == "recompute":
                target = root / f"{q}-recompute"
                shutil.rmtree(target, ignore_errors=True)
                for n, u in srcs.items():
                    CtfileTable.for_path(spark, u).to_df().createOrReplaceTempView(n)
                return timed(lambda: spark.sql(QUERIES[q]).write.mode("overwrite").parquet(str(target)))
            work = root / f"{q}-{mode}-run"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine[q, mode], work)
            t = derived.open(spark, str(work))
            box = {}
            secs = timed(lambda: box.setdefault("r", t.refresh(full=(name == "full"))))
            out["actions"][f"{q}/{fraction}/{name}"] = f"{box['r'].action.value}: {box['r'].reason}"
            return secs

        runs = {(q, s): [] for q in (*QUERIES, PIPELINE) for s in a.sides}
        for _ in range(a.runs):
            for q in (*QUERIES, PIPELINE):
                for s in a.sides:
                    secs = side(q, s)
                    if secs is not None:  # None: the pipelines side could not run (anchor.why_not)
                        runs[q, s].append(secs)
        for (q, s), v in runs.items():
            if v:
                out["ms"][f"{q}/{fraction}/{s}"] = 1000 * statistics.median(v)
        if fi == 0:
            t = derived.open(spark, str(pristine["aggregate", "incremental"]))
            t.refresh()
            out["no_data_ms"] = 1000 * statistics.median([timed(t.refresh) for _ in range(5)])
        if "pipelines" in a.sides:
            drop_views(spark, [f"{q}_f{fi}" for q in QUERIES])
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
                         "vs": "the faster of incremental and recompute", "ms": ms, "anchor_ms": best})
            continue
        figs.append({"what": f"{q} {LABELS.get(side, side)} at {float(fraction):.1%}", "ratio": ms / anchor,
                     "goal": goal,
                     "vs": "Spark recomputation to Parquet", "ms": ms, "anchor_ms": anchor,
                     "floor_ms": r["ms"].get(f"{q}/{fraction}/floor") if side == "incremental" else None,
                     "rewrite_ms": r["ms"].get(f"{q}/{fraction}/rewrite") if side == "incremental" else None})
    return figs


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = [
        f"## Derived tables: refresh vs recomputation ({m['mode']}, {m['date']})", "",
        f"A source of {m['rows']:,} rows (change capture on); medians of {m['runs']} runs per side, alternated; "
        f"load average {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end; `{m['command']}`.", "",
        "| refresh | ms | compared with | its ms | ratio | goal | floor ms (ratio) | rewrite floor ms (ratio) |",
        "|---|---:|---|---:|---:|---|---:|---:|",
    ]
    for f in ratios(r):
        verdict = "reported" if f["goal"] is None else ("ok" if f["ratio"] <= f["goal"] else "**MISS**")
        goal = "" if f["goal"] is None else f"<= {f['goal']}x: "
        floor, rewrite = (f"{f[k]:.0f} ({f[k] / f['anchor_ms']:.2f})" if f.get(k) else "" for k in ("floor_ms", "rewrite_ms"))
        lines.append(f"| {f['what']} | {f['ms']:.0f} | {f['vs']} | {f['anchor_ms']:.0f} | {f['ratio']:.2f} | "
                     f"{goal}{verdict} | {floor} | {rewrite} |")
    nd = r.get("no_data_ms")
    if nd is not None:
        lines.append(f"| NO_DATA refresh | {nd:.0f} | | | | < {NO_DATA_GOAL_S * 1000:.0f} ms: "
                     f"{'ok' if nd < NO_DATA_GOAL_S * 1000 else '**MISS**'} |")
    lines += pipelines_lines(r.get("pipelines"))
    lines += ["", "Actions chosen:", ""] + [f"- {k}: {v}" for k, v in sorted(r["actions"].items())]
    return "\n".join(lines)


def pipelines_lines(p: dict | None) -> list[str]:
    """What the pipelines side measured beyond its time, or why it did not run."""
    if p is None:
        return []
    lines = ["", "Spark Declarative Pipelines (the outside anchor: a materialized view recomputed in full on each "
             "update; timed from `start_run` to the end of the run's events, in this driver's Connect server). "
             "The run's control loop polls its flows every `spark.sql.pipelines.execution.streamstate."
             "pollingInterval` (1 s, Spark's default, kept) and sleeps once more before it ends, so a one-flow run "
             "ends 1-2 s after its flow:", ""]
    if p["why_not"]:
        lines.append(f"- not measured (or not every run): {p['why_not']}")
    for key, d in sorted(p["runs"].items()):
        med = {k: statistics.median(v) for k, v in d.items() if k.endswith("_ms") and None not in v and v}
        lines.append(f"- {key}: run {med['run_ms']:.0f} ms" + (
            f", of which the flow (RUNNING to COMPLETED) {med['flow_ms']:.0f} ms and from the flow's end to the "
            f"run's {med['after_flow_ms']:.0f} ms" if "after_flow_ms" in med else "")
            + f"; registering the definitions before it {med['register_ms']:.0f} ms")
    return lines


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
