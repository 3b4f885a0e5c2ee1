#!/usr/bin/env python
"""Spark reads through ``CtfileTable.to_df()`` vs ``spark.read.parquet`` (issue 15).

One ctfile snapshot of TPC-H lineitem (the table of ``bench_spark.py``), read
in one ``local[2]`` session, the sides alternated (``_timing.interleaved``:
one warm-up each, then the order rotated every round), medians of the runs:

- **scan**: every row of every column through Spark's ``noop`` sink, for
  ``spark.read.parquet`` over the snapshot's files, ``CtfileTable.to_df()``
  (opening the table, resolving the snapshot and planning are inside the
  timed region, as ``spark.read.parquet`` plans its file listing inside its
  own) and, for reference, ``spark.read.format("ctfile")``. Goal: ``to_df``
  <= 1.1x Parquet.
- **count**: ``count()`` of the same three. Goal: ``to_df`` <= 1.5x Parquet.

CPU is that of the whole process tree (the JVM and its Python workers), from
``/proc`` (``bench_spark.tree_cpu``).

- **first action**: the latency of the first Spark action of a fresh Python
  process (session start, then ``count()`` of the table), one child process
  per side and run, sides alternated: Parquet, ``spark.read.format("ctfile")``
  and ``to_df()``. Reported against Parquet's; the session start is reported
  apart.

Usage::

    .venv/bin/python benchmarks/bench_spark_native.py            # SF 1 (6 M rows), about 6 minutes on 2 cores
    .venv/bin/python benchmarks/bench_spark_native.py --quick    # SF 0.01, about 2 minutes

Writes ``benchmarks/results/spark_native.json`` (``--out``) and prints a
markdown table. The table is cached under ``benchmarks/work/spark/``
(``--work-dir``), lineitem under ``benchmarks/data/`` (``--data-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

SCAN_GOAL, COUNT_GOAL = 1.1, 1.5
SIDES = ("parquet", "to_df", "ctfile")


def session():
    from bench_spark import spark_session

    return spark_session()


def frame(spark, side: str, uri: str, files: list[str]):
    if side == "parquet":
        return spark.read.parquet(*files)
    if side == "to_df":
        from ctfile.spark import CtfileTable

        return CtfileTable.for_path(spark, uri).to_df()
    return spark.read.format("ctfile").load(uri)


def first_action_child(side: str, uri: str, files: list[str]) -> None:
    """In a fresh process: session start, then the first action; prints JSON."""
    t0 = time.perf_counter()
    spark = session()
    t1 = time.perf_counter()
    n = frame(spark, side, uri, files).count()
    t2 = time.perf_counter()
    n2 = frame(spark, side, uri, files).count()
    t3 = time.perf_counter()
    spark.stop()
    print(json.dumps({"side": side, "rows": n, "rows_again": n2, "session_s": t1 - t0,
                      "first_action_s": t2 - t1, "second_action_s": t3 - t2}))


def first_actions(uri: str, files_arg: str, runs: int) -> dict:
    """One child per side and run, sides alternated (rotated every run)."""
    out: dict[str, list[dict]] = {s: [] for s in SIDES}
    for i in range(runs):
        for side in SIDES[i % 3:] + SIDES[: i % 3]:
            p = subprocess.run([sys.executable, __file__, "--first-action", side, "--uri", uri, "--files", files_arg],
                               capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"first-action child {side} failed: {p.stderr[-2000:]}")
            out[side].append(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def timed_sides(spark, uri: str, files: list[str], runs: int, action) -> tuple[dict, dict]:
    from bench_spark import cpu_between, tree_cpu
    from _timing import interleaved

    cpu: dict[str, list[float]] = {s: [] for s in SIDES}

    def make(side):
        def fn():
            c0 = tree_cpu()
            action(frame(spark, side, uri, files))
            cpu[side].append(cpu_between(c0, tree_cpu()))
        return fn

    wall, _ = interleaved({s: make(s) for s in SIDES}, runs)
    return wall, {s: c[1:] for s, c in cpu.items()}  # the first is the warm-up


def summarize(wall: dict, cpu: dict, goal: float) -> dict:
    med = {s: statistics.median(v) for s, v in wall.items()}
    cmed = {s: statistics.median(v) for s, v in cpu.items()}
    return {
        "s": med, "cpu_s": cmed, "runs_s": {s: [round(x, 3) for x in v] for s, v in wall.items()},
        "ratio": med["to_df"] / med["parquet"], "cpu_ratio": cmed["to_df"] / max(1e-9, cmed["parquet"]),
        "ctfile_ratio": med["ctfile"] / med["parquet"], "goal": goal, "pass": med["to_df"] / med["parquet"] <= goal,
    }


def measure(args) -> dict:
    import ctfile
    from bench_spark import build_table

    scale = args.scale or ("0.01" if args.quick else "1")
    runs = 2 if args.quick else args.runs
    uri = build_table(scale, 20000 if args.quick else args.partition_rows, args.work_dir, args.data_dir)
    snap = ctfile.open_table(uri).snapshot()
    files = [Path(uri, p.path).resolve().as_uri() for p in snap.partitions]
    load_start = os.getloadavg()
    spark = session()
    rows = {s: frame(spark, s, uri, files).count() for s in SIDES}
    assert set(rows.values()) == {snap.num_records}, rows
    assert frame(spark, "to_df", uri, files).inputFiles(), "to_df fell back to the data source"
    scan = summarize(*timed_sides(spark, uri, files, runs, lambda df: df.write.format("noop").mode("overwrite").save()),
                     SCAN_GOAL)
    count = summarize(*timed_sides(spark, uri, files, runs, lambda df: df.count()), COUNT_GOAL)
    plan = frame(spark, "to_df", uri, files).groupBy().count()._jdf.queryExecution().executedPlan().toString()
    version = spark.version
    spark.stop()
    first = first_actions(uri, ",".join(files), args.first_runs if not args.quick else 1)
    fmed = {s: {k: statistics.median(r[k] for r in v) for k in ("session_s", "first_action_s", "second_action_s")}
            for s, v in first.items()}
    for s, v in first.items():
        assert all(r["rows"] == snap.num_records for r in v), (s, v)
    return {
        "meta": {"mode": "quick" if args.quick else "full", "date": time.strftime("%Y-%m-%d"), "pyspark": version,
                 "scale_factor": scale, "rows": snap.num_records, "partitions": len(files), "runs": runs,
                 "first_runs": len(first["parquet"]), "cpus": os.cpu_count(),
                 "loadavg_start": [round(x, 2) for x in load_start],
                 "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "scan": scan,
        "count": dict(count, footers_only="ReadSchema: struct<>" in plan),
        "first_action": {"median": fmed, "runs": first,
                         "ratio": {s: fmed[s]["first_action_s"] / fmed["parquet"]["first_action_s"] for s in SIDES}},
    }


def markdown(r: dict) -> str:
    m, sc, co, fa = r["meta"], r["scan"], r["count"], r["first_action"]

    def row(name, x, goal):
        s, c = x["s"], x["cpu_s"]
        return (f"| {name} | {s['parquet']:.2f} (CPU {c['parquet']:.2f}) | {s['to_df']:.2f} (CPU {c['to_df']:.2f}) | "
                f"{x['ratio']:.2f}x ({x['cpu_ratio']:.2f}x) | <= {goal}x: {'ok' if x['pass'] else '**MISS**'} | "
                f"{s['ctfile']:.2f} ({x['ctfile_ratio']:.2f}x) |")

    fm = fa["median"]
    lines = [
        f"## Spark reads through `CtfileTable.to_df()` ({m['mode']}, {m['date']}, SF {m['scale_factor']}, pyspark {m['pyspark']})", "",
        f"lineitem, {m['rows']:,} rows in {m['partitions']} partitions, one `local[2]` session, sides alternated, medians of "
        f"{m['runs']} runs (seconds; CPU of the JVM and its Python workers); load average {m['loadavg_start'][0]:.1f} at "
        f"start, {m['loadavg_end'][0]:.1f} at end.", "",
        "| read | spark.read.parquet s | to_df() s | ratio (CPU ratio) | goal | spark.read.format('ctfile') s (ratio) |",
        "|---|---:|---:|---:|---|---:|",
        row("full scan (`noop` sink)", sc, sc["goal"]),
        row("`count()`" + (" (footers only: `ReadSchema: struct<>`)" if co.get("footers_only") else ""), co, co["goal"]),
        "",
        f"First action of a fresh Python process (`count()` after the session starts), one process per side and run, "
        f"medians of {m['first_runs']}:", "",
        "| side | session start s | first action s | ratio to Parquet | second action s |",
        "|---|---:|---:|---:|---:|",
    ]
    for s, label in (("parquet", "spark.read.parquet"), ("ctfile", "spark.read.format('ctfile')"), ("to_df", "CtfileTable.to_df()")):
        lines.append(f"| {label} | {fm[s]['session_s']:.1f} | {fm[s]['first_action_s']:.2f} | {fa['ratio'][s]:.2f}x | "
                     f"{fm[s]['second_action_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="SF 0.01, 2 runs, one first-action run per side")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--first-runs", type=int, default=3, help="fresh processes per side for the first action")
    ap.add_argument("--partition-rows", type=int, default=1 << 20)
    ap.add_argument("--scale", default=None, help="TPC-H scale factor (default 1; 0.01 with --quick)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark_native.json", help="result JSON")
    ap.add_argument("--work-dir", type=Path, default=HERE / "work", help="cached ctfile table (under spark/)")
    ap.add_argument("--data-dir", type=Path, default=HERE / "data", help="cached TPC-H lineitem")
    ap.add_argument("--first-action", choices=SIDES, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.first_action:
        first_action_child(args.first_action, args.uri, args.files.split(","))
        return 0
    from _timing import save_and_print

    return save_and_print(args.out, measure(args), markdown, quiet=False)


if __name__ == "__main__":
    sys.exit(main())
