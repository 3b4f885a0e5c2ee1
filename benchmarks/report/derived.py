"""The figures of issue 29 (derived tables) from ``results/derived.json``
(``bench_derived.py``): each refresh against the Spark recomputation of the
same query, ``auto`` against the faster of the two, the ``NO_DATA``
refresh's latency, and the outside anchor: the same query as a Spark
Declarative Pipelines materialized view (the three-stage pipeline as two,
silver and gold), refreshed (in full) by a pipeline update, when it was
measured (``--sides ...,pipelines``). The figures are warmed-up refreshes;
each side's first (cold) refresh, untimed by the goals, is said beside
them when the results kept it (``cold_ms``)."""

from __future__ import annotations

import statistics

from report.figures import fig

GOALS = {("aggregate", "0.01"): 0.1, ("join", "0.01"): 0.25, ("dedup", "0.01"): 0.2, ("pipeline", "0.01"): 0.15}
AUTO_GOAL = 1.1
NO_DATA_GOAL_MS = 500
#: What limits the misses (said once in RESULTS.md, :data:`report.text.FINDINGS`).
MISS_NOTE = (
    "A refresh costs what its sources changed (issues 29 and 30). The aggregate's refresh over one source meets its "
    "goal: its change is read by ctfile's reader in the driver, pyarrow computes each group's signed change "
    "(`ctfile.spark.derived_driver`, only where its values are Spark's) and the MERGE of a few hundred groups is "
    "planned once and run in the driver, no Spark job: 0.07x at 1% of 10,000,000 rows (72 ms against 1.04 s) and "
    "0.04x at 0.1% (it was 0.15x last round: the MERGE was planned twice, each statement's Spark SQL parsed again, "
    "and an interval of an update and an insert consolidated although no row id is in both). At 10% the change "
    "(1,500,000 change rows) is above `spark.ctfile.local.changeRows` and Spark computes it. `auto` chooses by an "
    "estimated cost from the logs (`ctfile.spark.derived_cost`) and is within 1.1x for the aggregate at every "
    "fraction. The incremental side's 3.4 s against auto's 0.74 s for the same INCREMENTAL action at 10% was a "
    "warm-up the median of two runs averaged in: in a process of its own the first refresh of that table at 10% "
    "took 5.2 s and the next three 0.70-0.90 s, and the incremental side was the first Spark-path refresh of each "
    "round; each side is now timed after one untimed refresh of the same kind, its time reported as the cold "
    "figure. The join's refresh is bound by copy-on-write: its rows are keyed by source row ids and the change "
    "updates source rows chosen at random, so every refresh rewrites every partition of the 10,000,000-row derived "
    "table; the rewrite floor (Spark reading the derived table's rows and writing them back, same run) is 0.63x at "
    "1%, so no copy-on-write refresh meets 0.25x, which needs merge-on-read deletes (deletion vectors). `auto` "
    "cannot meet 1.1x for it either: a full refresh written by ctfile (computed, persisted, its keys checked "
    "unique, written by ctfile's writer from Spark) measured 8-9x the plain recomputation in a first run, where the "
    "model still picked it; the model now counts those rows (`FULL_ROW`) and keeps the join incremental, 2.9-6.7x. "
    "The deduplication window (issue 30) misses 0.2x at 1% (2.07x) although its rewrite floor is 0.07x: its "
    "refresh reads the touched partitions' rows from both states by scanning the whole source twice, with row ids "
    "computed for every row; restricting those reads to the touched partitions' files is the next step. The "
    "three-stage pipeline (bronze, deduplicated silver, LEFT JOIN gold) inherits it: 4.3x at 1% against Spark "
    "running the two queries in turn (goal 0.15x; its rewrite floor 0.15x). The outside anchor, Spark Declarative "
    "Pipelines (`pyspark.pipelines`, which recomputes a materialized view in full on every update), was not "
    "measured in this run (`--sides ...,pipelines`); last round it cost 1.5-3.3x the plain recomputation, most of "
    "it the run's fixed cost."
)


def _side(r: dict, q: str, fraction: str, side: str) -> float:
    return r["ms"][f"{q}/{fraction}/{side}"]


#: What the pipelines side's views are, by query (the one-view queries: ``the <query> materialized view``).
VIEWS = {"pipeline": "the three-stage pipeline's two materialized views (deduplicated silver, gold over it)"}


def _cold(r: dict, key: str) -> str:
    """The first (cold, untimed) refresh of a side, as text, if kept."""
    ms = r.get("cold_ms", {}).get(key)
    return "" if ms is None else f"; first (cold) refresh {ms / 1000:.2f} s"


def _pipelines_figure(r: dict, q: str, fraction: str, anchor: float) -> list[dict]:
    """The outside anchor at one fraction, if measured: a pipeline update
    (``start_run`` to the run's end) recomputing the materialized views."""
    key = f"{q}/{fraction}/pipelines"
    ms = r["ms"].get(key)
    if ms is None:
        return []
    d = (r.get("pipelines") or {}).get("runs", {}).get(f"{q}/{fraction}", {})
    flow = [f for f in d.get("flow_ms", []) if f is not None]
    what = "the flows themselves" if len(d.get("flows_ms", {})) > 1 else "the flow itself"
    inside = f"; {what} {statistics.median(flow) / 1000:.2f} s" if flow else ""
    return [fig(f"derived_{q}_pipelines_{fraction}",
                f"Spark Declarative Pipelines full refresh of {VIEWS.get(q, f'the {q} materialized view')} after "
                f"{float(fraction):.1%} of {r['meta']['rows']:,} rows changed (the outside anchor)",
                "Spark recomputing the query to Parquet", "reported", f"{ms / anchor:.2f}x",
                f"{ms / 1000:.2f} s vs {anchor / 1000:.2f} s ({r['meta']['runs']} runs{inside}{_cold(r, key)})", None,
                "derived")]


def _floors(r: dict, q: str, fraction: str, anchor: float) -> str:
    """The floors measured beside an incremental refresh, as text."""
    text = ""
    floor = r["ms"].get(f"{q}/{fraction}/floor")
    if floor:
        text += f"; floor: Spark running the query over the changed rows alone {floor / 1000:.2f} s = {floor / anchor:.2f}x"
    rewrite = r["ms"].get(f"{q}/{fraction}/rewrite")
    if rewrite:
        text += (f"; copy-on-write floor: Spark rewriting the derived table's rows {rewrite / 1000:.2f} s = "
                 f"{rewrite / anchor:.2f}x")
    return text


def derived_figures(r: dict) -> list[dict]:
    """One figure per query, fraction and refresh side, and the NO_DATA one."""
    m, out = r["meta"], []
    keys = sorted({tuple(k.split("/")[:2]) for k in r["ms"]}, key=lambda k: (k[0], float(k[1])))
    for q, fraction in keys:
        anchor = _side(r, q, fraction, "recompute")
        pct = f"{float(fraction):.1%}"
        for side in ("incremental", "full"):
            if f"{q}/{fraction}/{side}" not in r["ms"]:
                continue  # not measured in this run (bench_derived.py --sides)
            ms = _side(r, q, fraction, side)
            goal = GOALS.get((q, fraction)) if side == "incremental" else None
            below = _floors(r, q, fraction, anchor) if side == "incremental" else ""
            out.append(fig(f"derived_{q}_{side}_{fraction}",
                           f"{side} refresh of the {q} derived table after {pct} of {m['rows']:,} rows changed",
                           "Spark recomputing the query to Parquet", f"<= {goal}x" if goal else "reported",
                           f"{ms / anchor:.2f}x",
                           f"{ms / 1000:.2f} s vs {anchor / 1000:.2f} s ({m['runs']} runs{below}"
                           f"{_cold(r, f'{q}/{fraction}/{side}')})",
                           None if goal is None else ms / anchor <= goal, "derived"))
        out += _pipelines_figure(r, q, fraction, anchor)
        if f"{q}/{fraction}/auto" not in r["ms"]:
            continue
        auto, best = _side(r, q, fraction, "auto"), min(r["ms"].get(f"{q}/{fraction}/incremental", anchor), anchor)
        out.append(fig(f"derived_{q}_auto_{fraction}", f"auto refresh of the {q} derived table after {pct} changed",
                       "the faster of the incremental refresh and the recomputation", f"<= {AUTO_GOAL}x",
                       f"{auto / best:.2f}x",
                       f"{auto / 1000:.2f} s vs {best / 1000:.2f} s{_cold(r, f'{q}/{fraction}/auto')}",
                       auto / best <= AUTO_GOAL,
                       "derived"))
    why_not = (r.get("pipelines") or {}).get("why_not")
    if why_not:
        out.append(fig("derived_pipelines_not_run", "Spark Declarative Pipelines full refresh (the outside anchor)",
                       "Spark recomputing the query to Parquet", "reported", "not measured", why_not[:300], None,
                       "derived"))
    nd = r.get("no_data_ms")
    if nd is not None:
        out.append(fig("derived_no_data", "NO_DATA refresh (no source changed)", "an absolute bound",
                       f"< {NO_DATA_GOAL_MS} ms", f"{nd:.0f} ms", f"{nd:.1f} ms, median of 5, no Spark job",
                       nd < NO_DATA_GOAL_MS, "derived"))
    return out
