"""The figures of issue 29 (derived tables) from ``results/derived.json``
(``bench_derived.py``): each refresh against the Spark recomputation of the
same query, ``auto`` against the faster of the two, the ``NO_DATA``
refresh's latency, and the outside anchor: the same query as a Spark
Declarative Pipelines materialized view, refreshed (in full) by a pipeline
update, when it was measured (``--sides ...,pipelines``)."""

from __future__ import annotations

import statistics

from report.figures import fig

GOALS = {("aggregate", "0.01"): 0.1, ("join", "0.01"): 0.25}
AUTO_GOAL = 1.1
NO_DATA_GOAL_MS = 500
#: What limits the misses (said once in RESULTS.md, :data:`report.text.FINDINGS`).
MISS_NOTE = (
    "A refresh now costs what its sources changed (issue 29, second round; at 2,000,000 rows and 1% changed the "
    "aggregate's refresh went from 11.5 s to 0.6 s, the join's from 12.4 s to 4.6 s): with change capture on, the "
    "change scan reads the source's change files, not every partition the UPDATE rewrote; a scan of at most "
    "`spark.ctfile.local.changeRows` rows is read in the driver by ctfile's reader and handed to Spark as a local "
    "DataFrame; and an aggregate's MERGE of a few hundred groups runs in the driver (searched CASE, least/greatest "
    "and exact casts now translate, `ctfile.spark.arrow_sql`). What is left of the aggregate's refresh is one Spark "
    "job over the changed rows plus the MERGE and the commit. The floor column is that job alone, Spark running the "
    "query over the changed rows already in memory: 0.18x of the recomputation at 0.1% and 0.53x at 1% on "
    "10,000,000 rows, because Spark recomputes the aggregate from Parquet in about 1 s here and a Spark job over "
    "150,000 in-memory rows costs half of that. So no refresh that computes its delta as a Spark job meets 0.1x "
    "at 1% on this machine; it would need small deltas computed without Spark (the Python engine, as small MERGEs "
    "are), left open. The join's refresh is bound by copy-on-write: its rows are keyed by source row ids, the "
    "change updates source rows chosen at random, so the MERGE rewrites every partition of the 10,000,000-row "
    "derived table, as the source's own UPDATE did, where the recomputation writes its result once (its floor is "
    "0.16x at 1%); only merge-on-read deletes (deletion vectors) would avoid the rewrite, against ctfile's "
    "copy-on-write design. `auto` refreshes in full only above 20% of a source's rows changed, and a FULL refresh "
    "MERGEs the recomputed result to keep row ids (minimal change scans of the derived table), which costs more "
    "than the plain recomputation the goal compares with; so `auto` stays INCREMENTAL at these fractions: within "
    "1.1x for the aggregate, inheriting the join's miss. Calibrating `auto` by measured cost is left open. "
    "`auto` and `incremental` take the same action on the same interval; their figures differ by run order and "
    "load (one run each per round, alternated)."
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
