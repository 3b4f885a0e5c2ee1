"""The figures of issue 29 (derived tables) from ``results/derived.json``
(``bench_derived.py``): each refresh against the Spark recomputation of the
same query, ``auto`` against the faster of the two, and the ``NO_DATA``
refresh's latency."""

from __future__ import annotations

from report.figures import fig

GOALS = {("aggregate", "0.01"): 0.1, ("join", "0.01"): 0.25}
AUTO_GOAL = 1.1
NO_DATA_GOAL_MS = 500
#: What limits the misses (said once in RESULTS.md, :data:`report.text.FINDINGS`).
MISS_NOTE = (
    "What an incremental refresh pays here, profiled at 2,000,000 rows (a 1% change: 14.4 s): the MERGE source, "
    "whose computation includes the source's change scan, 8.2 s (the change scan alone 5.0 s through "
    "`changes_df`, 9.3 s through the data source), and the MERGE 5.2 s. The change updates rows chosen at random, so "
    "copy-on-write rewrites every partition, and even with change capture on the scan decodes every added "
    "partition to find the new images of the updated rows, while Spark recomputes the whole aggregate from "
    "2,000,000 rows in 0.6 s. The aggregate MERGE runs on the executors: its SET expressions (CASE, decimal "
    "arithmetic) do not translate to the driver path of small MERGEs (`ctfile.spark.local`), so it pays several "
    "Spark jobs for a change of a few hundred groups. `auto` estimates the change from the commit metrics "
    "(20% threshold) and so chose INCREMENTAL at every size here: it inherits the miss. Left open (issue 29): "
    "compute the new aggregate rows in Spark against the table's stored state so the MERGE assigns plain values "
    "and runs in the driver; read only the changed rows of rewritten partitions (by row version); calibrate "
    "`auto` by measured cost, not a row fraction; and measure at the issue's 10,000,000 rows with a quiet machine "
    "(this run shared the 2 cores with other work, load 5-10)."
)


def _side(r: dict, q: str, fraction: str, side: str) -> float:
    return r["ms"][f"{q}/{fraction}/{side}"]


def derived_figures(r: dict) -> list[dict]:
    """One figure per query, fraction and refresh side, and the NO_DATA one."""
    m, out = r["meta"], []
    keys = sorted({tuple(k.split("/")[:2]) for k in r["ms"]}, key=lambda k: (k[0], float(k[1])))
    for q, fraction in keys:
        anchor = _side(r, q, fraction, "recompute")
        pct = f"{float(fraction):.1%}"
        for side in ("incremental", "full"):
            ms = _side(r, q, fraction, side)
            goal = GOALS.get((q, fraction)) if side == "incremental" else None
            out.append(fig(f"derived_{q}_{side}_{fraction}",
                           f"{side} refresh of the {q} derived table after {pct} of {m['rows']:,} rows changed",
                           "Spark recomputing the query to Parquet", f"<= {goal}x" if goal else "reported",
                           f"{ms / anchor:.2f}x", f"{ms / 1000:.2f} s vs {anchor / 1000:.2f} s ({m['runs']} runs)",
                           None if goal is None else ms / anchor <= goal, "derived"))
        auto, best = _side(r, q, fraction, "auto"), min(_side(r, q, fraction, "incremental"), anchor)
        out.append(fig(f"derived_{q}_auto_{fraction}", f"auto refresh of the {q} derived table after {pct} changed",
                       "the faster of the incremental refresh and the recomputation", f"<= {AUTO_GOAL}x",
                       f"{auto / best:.2f}x", f"{auto / 1000:.2f} s vs {best / 1000:.2f} s", auto / best <= AUTO_GOAL,
                       "derived"))
    nd = r.get("no_data_ms")
    if nd is not None:
        out.append(fig("derived_no_data", "NO_DATA refresh (no source changed)", "an absolute bound",
                       f"< {NO_DATA_GOAL_MS} ms", f"{nd:.0f} ms", f"{nd:.1f} ms, median of 5, no Spark job",
                       nd < NO_DATA_GOAL_MS, "derived"))
    return out
