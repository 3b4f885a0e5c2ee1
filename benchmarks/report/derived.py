"""The figures of issue 29 (derived tables) from ``results/derived.json``
(``bench_derived.py``): each refresh against the Spark recomputation of the
same query, ``auto`` against the faster of the two, the ``NO_DATA``
refresh's latency, and the outside anchor: the same query as a Spark
Declarative Pipelines materialized view, refreshed (in full) by a pipeline
update, when it was measured (``--sides ...,pipelines``)."""

from __future__ import annotations

import statistics

from report.figures import fig

GOALS = {("aggregate", "0.01"): 0.1, ("join", "0.01"): 0.25, ("dedup", "0.01"): 0.2, ("pipeline", "0.01"): 0.15}
AUTO_GOAL = 1.1
NO_DATA_GOAL_MS = 500
#: What limits the misses (said once in RESULTS.md, :data:`report.text.FINDINGS`).
MISS_NOTE = (
    "A refresh costs what its sources changed (issue 29). The aggregate's refresh over one source is computed in "
    "the driver when its change scan reads at most `spark.ctfile.local.changeRows` rows: ctfile's reader reads the "
    "change files, pyarrow computes each group's signed change (`ctfile.spark.derived_driver`, only where its values "
    "are Spark's) and the MERGE of a few hundred groups runs in the driver over those Arrow rows, with no Spark job "
    "and no DataFrame; at 10,000,000 rows and 1% changed it went from 1.08 s (1.06x, one Spark job over the changed "
    "rows) to 0.10 s, 0.13-0.15x of a Spark recomputation of 0.6-0.8 s over two runs, and to 0.06x at 0.1%. The "
    "0.1x goal at 1% is missed by about 30 ms of ctfile's own work: reading the 150,000 change rows (about 30 ms), "
    "planning the MERGE twice (about 12 ms each) and the commit; left open. At 10% the change (1,000,000 rows) is "
    "above the driver's limit and is computed by Spark (1.4-1.8x); `auto` keeps it INCREMENTAL below its 20% "
    "threshold, within 1.1x in one run and 1.21x in the other, and its 1.13x at 0.1% is 7 ms of noise between two "
    "runs of the same action. Choosing by estimated cost (the driver's limit, the rewrite floor) is left open. The "
    "join's refresh is bound by copy-on-write: its rows are keyed by source row ids and the change updates source "
    "rows chosen at random, so every refresh rewrites every partition of the 10,000,000-row derived table. The "
    "rewrite floor, Spark reading the derived table's rows and writing them back as Parquet in the same run, is "
    "0.78x of the recomputation at 1%: no copy-on-write refresh can meet the 0.25x goal, which would need "
    "merge-on-read deletes (deletion vectors), against ctfile's copy-on-write design. The join's incremental "
    "refresh itself is 4.8x, 6x its rewrite floor: the executor MERGE reads the table through Python and joins it "
    "with the change (this round made it join once and skip a key check a refresh has already made, halving a FULL "
    "refresh at 2,000,000 rows, 41 s to 26 s; the incremental one did not move). `auto` inherits the join's miss. "
    "The outside anchor, Spark Declarative Pipelines (`pyspark.pipelines`, which recomputes a materialized view in "
    "full on every update), costs 1.5-3.3x the plain recomputation here, most of it the run's fixed cost (its "
    "control loop polls its flows every second)."
)


def _side(r: dict, q: str, fraction: str, side: str) -> float:
    return r["ms"][f"{q}/{fraction}/{side}"]


def _pipelines_figure(r: dict, q: str, fraction: str, anchor: float) -> list[dict]:
    """The outside anchor at one fraction, if measured: a pipeline update
    (``start_run`` to the run's end) recomputing the materialized view."""
    ms = r["ms"].get(f"{q}/{fraction}/pipelines")
    if ms is None:
        return []
    d = (r.get("pipelines") or {}).get("runs", {}).get(f"{q}/{fraction}", {})
    flow = [f for f in d.get("flow_ms", []) if f is not None]
    inside = f"; the flow itself {statistics.median(flow) / 1000:.2f} s" if flow else ""
    return [fig(f"derived_{q}_pipelines_{fraction}",
                f"Spark Declarative Pipelines full refresh of the {q} materialized view after {float(fraction):.1%} "
                f"of {r['meta']['rows']:,} rows changed (the outside anchor)",
                "Spark recomputing the query to Parquet", "reported", f"{ms / anchor:.2f}x",
                f"{ms / 1000:.2f} s vs {anchor / 1000:.2f} s ({r['meta']['runs']} runs{inside})", None, "derived")]


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
                           f"{ms / 1000:.2f} s vs {anchor / 1000:.2f} s ({m['runs']} runs{below})",
                           None if goal is None else ms / anchor <= goal, "derived"))
        out += _pipelines_figure(r, q, fraction, anchor)
        if f"{q}/{fraction}/auto" not in r["ms"]:
            continue
        auto, best = _side(r, q, fraction, "auto"), min(r["ms"].get(f"{q}/{fraction}/incremental", anchor), anchor)
        out.append(fig(f"derived_{q}_auto_{fraction}", f"auto refresh of the {q} derived table after {pct} changed",
                       "the faster of the incremental refresh and the recomputation", f"<= {AUTO_GOAL}x",
                       f"{auto / best:.2f}x", f"{auto / 1000:.2f} s vs {best / 1000:.2f} s", auto / best <= AUTO_GOAL,
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
