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

``--changes`` (issue 29) measures instead ``CtfileTable.changes_df(a, b,
information="default")``, the minimum-delta change scan through Spark's own
Parquet reader, against ``spark.read.format("ctfile").option("changes",
"default")`` over the same intervals, sides alternated in one session: a
small interval (one UPDATE of 0.1% of the rows), an insert-only one (1% new
rows), and a large one (that UPDATE, a DELETE of 1%, an UPDATE of 10% and
the insert). Each run plans and reads the scan into Spark's ``noop`` sink;
a third side, the floor, is ``spark.read.parquet`` alone over the files the
scan reads (the net added and net removed partitions, every column), which
any scan through Spark's reader decodes (it cannot skip rows inside a page);
before timing, both sides' rows are checked equal (count and the sum of an
``xxhash64`` of every column). Writes ``spark_changes.json``::

    .venv/bin/python benchmarks/bench_spark_native.py --changes --rows 1000000 --out benchmarks/results/spark_changes.json

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


# ---------------------------------------------------------------- issue 29: changes_df(information="default")

CHANGES_GOAL = 1.0
CHANGE_SIDES = ("changes_df", "ctfile")


def build_change_table(rows: int, partition_rows: int, work_dir: Path, data_dir: Path, *,
                       scale: str = "1") -> tuple[str, dict]:
    """A table of the first ``rows`` rows of lineitem (SF ``scale``) and its history:
    v1 insert, v2 UPDATE of 0.1% (l_orderkey % 1000 = 7), v3 DELETE of 1%
    (% 100 = 3), v4 UPDATE of 10% (% 10 = 5), v5 insert of 1% new rows.
    Cached under ``work_dir/spark_changes``; returns its URI and intervals."""
    import shutil

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import ctfile
    from bench_spark import lineitem

    path = work_dir / "spark_changes" / f"lineitem-sf{scale}-{rows}-p{partition_rows}"
    intervals = {"small": (2, 2), "insert": (5, 5), "large": (2, 5)}
    if (path / "_ct_log").exists() and ctfile.open_table(str(path)).version == 5:
        return str(path), intervals
    shutil.rmtree(path, ignore_errors=True)
    data = lineitem(scale, data_dir).slice(0, rows)
    keys = np.unique(data.column("l_orderkey").to_numpy())

    def where(mod: int, rest: int):
        return pc.field("l_orderkey").isin(pa.array(keys[keys % mod == rest]))

    t = ctfile.create_table(str(path), data.schema, partition_rows=partition_rows)
    t.insert(data)  # v1
    t.update(where(1000, 7), {"l_comment": pc.binary_join_element_wise(pc.field("l_comment"), "!", "")})  # v2
    t.delete(where(100, 3))  # v3
    t.update(where(10, 5), {"l_comment": pc.binary_join_element_wise(pc.field("l_comment"), "+", "")})  # v4
    new = data.slice(0, rows // 100)
    shift = int(keys.max()) + 1
    new = new.set_column(new.schema.get_field_index("l_orderkey"), "l_orderkey",
                         pc.add(new.column("l_orderkey"), shift))
    t.insert(new)  # v5
    assert t.version == 5
    return str(path), intervals


def change_frame(spark, side: str, uri: str, a: int, b: int):
    if side == "floor":  # Spark's Parquet reader alone over the files the scan reads, every column
        import ctfile

        t = ctfile.open_table(uri)
        plan = t.changes(start_version=a, end_version=b).plan
        files = [Path(uri, p.path).resolve().as_uri() for p in plan.added + plan.removed]
        return spark.read.parquet(*files).select(*t.snapshot(b).schema.names)
    if side == "changes_df":
        from ctfile.spark import CtfileTable

        return CtfileTable.for_path(spark, uri).changes_df(a, b, information="default")
    return (spark.read.format("ctfile").option("changes", "default").option("startingVersion", a)
            .option("endingVersion", b).load(uri))


def _read_in_driver(spark, uri: str, a: int, b: int) -> bool:
    """Whether ``changes_df`` reads the interval in the driver (it reads at
    most ``spark.ctfile.local.changeRows`` rows, :mod:`ctfile.spark.local`)."""
    import ctfile
    from ctfile.spark.local import LocalLimits

    plan = ctfile.open_table(uri).changes(start_version=a, end_version=b).plan
    return plan.rows_to_read <= LocalLimits.of(spark).change_rows


def fingerprint(df) -> tuple[int, int]:
    """Rows and the sum of an xxhash64 of every column: equal for equal multisets."""
    from pyspark.sql import functions as F

    r = df.select(F.count(F.lit(1)).alias("n"), F.sum(F.xxhash64(*[F.col(f"`{c}`") for c in df.columns])
                                                     .cast("decimal(38,0)")).alias("h")).collect()[0]
    return r.n, int(r.h or 0)


def measure_changes(args) -> dict:
    from bench_spark import cpu_between, tree_cpu
    from _timing import interleaved

    rows = 20000 if args.quick else args.rows
    runs = 2 if args.quick else args.runs
    uri, intervals = build_change_table(rows, 8192 if args.quick else args.change_partition_rows, args.work_dir,
                                        args.data_dir, scale="0.01" if args.quick else "1")
    load_start = os.getloadavg()
    spark = session()
    out = {}
    for name, (a, b) in intervals.items():
        prints = {s: fingerprint(change_frame(spark, s, uri, a, b)) for s in CHANGE_SIDES}
        assert prints["changes_df"] == prints["ctfile"], (name, prints)
        in_driver = _read_in_driver(spark, uri, a, b)
        assert in_driver or change_frame(spark, "changes_df", uri, a, b).inputFiles(), f"changes_df fell back on {name}"
        cpu: dict[str, list[float]] = {s: [] for s in CHANGE_SIDES + ("floor",)}

        def make(side, a=a, b=b):
            def fn():
                c0 = tree_cpu()
                change_frame(spark, side, uri, a, b).write.format("noop").mode("overwrite").save()
                cpu[side].append(cpu_between(c0, tree_cpu()))
            return fn

        wall, _ = interleaved({s: make(s) for s in CHANGE_SIDES + ("floor",)}, runs)
        med = {s: statistics.median(v) for s, v in wall.items()}
        cmed = {s: statistics.median(v[1:]) for s, v in cpu.items()}
        ratio = med["changes_df"] / med["ctfile"]
        out[name] = {"interval": [a, b], "change_rows": prints["ctfile"][0], "s": med, "cpu_s": cmed,
                     "runs_s": {s: [round(x, 3) for x in v] for s, v in wall.items()}, "ratio": ratio,
                     "cpu_ratio": cmed["changes_df"] / max(1e-9, cmed["ctfile"]), "goal": CHANGES_GOAL,
                     "floor_ratio": med["floor"] / med["ctfile"], "path": "driver" if in_driver else "executors",
                     "pass": ratio <= CHANGES_GOAL}
    version = spark.version
    spark.stop()
    import ctfile

    t = ctfile.open_table(uri)
    return {
        "meta": {"mode": "quick" if args.quick else "full", "date": time.strftime("%Y-%m-%d"), "pyspark": version,
                 "rows": t.snapshot(1).num_records, "partitions": len(t.snapshot(1).partitions), "runs": runs,
                 "cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in load_start],
                 "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "changes": out,
    }


def changes_markdown(r: dict) -> str:
    m = r["meta"]
    what = {"small": "UPDATE of 0.1% of the rows", "insert": "insert of 1% new rows",
            "large": "UPDATE 0.1%, DELETE 1%, UPDATE 10%, insert 1%"}
    lines = [
        f"## Minimum-delta change scans through Spark: `changes_df(information=\"default\")` ({m['mode']}, {m['date']}, "
        f"pyspark {m['pyspark']})", "",
        f"lineitem, {m['rows']:,} rows in {m['partitions']} partitions at version 1, one `local[2]` session, sides "
        f"alternated, medians of {m['runs']} runs (seconds, planning included; CPU of the JVM and its Python workers); "
        f"load average {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end.", "",
        "| interval | change rows | spark.read.format('ctfile') s | changes_df() s | ratio (CPU ratio) | goal | floor: Spark reading the files alone s (ratio) |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for name, x in r["changes"].items():
        a, b = x["interval"]
        path = f", read in the {x['path']}" if "path" in x else ""
        lines.append(f"| {name}: versions {a}..{b} ({what.get(name, name)}{path}) | {x['change_rows']:,} | "
                     f"{x['s']['ctfile']:.2f} (CPU {x['cpu_s']['ctfile']:.2f}) | "
                     f"{x['s']['changes_df']:.2f} (CPU {x['cpu_s']['changes_df']:.2f}) | {x['ratio']:.2f}x "
                     f"({x['cpu_ratio']:.2f}x) | <= {x['goal']}x: {'ok' if x['pass'] else '**MISS**'} | "
                     f"{x['s'].get('floor', float('nan')):.2f} ({x.get('floor_ratio', float('nan')):.2f}x) |")
    return "\n".join(lines)


def markdown(r: dict) -> str:
    if "changes" in r:
        return changes_markdown(r)
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
    ap.add_argument("--changes", action="store_true",
                    help="issue 29: changes_df(information='default') vs the data source (see above)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="--changes: rows of lineitem SF 1 in the table")
    ap.add_argument("--change-partition-rows", type=int, default=131072, help="--changes: rows per partition")
    ap.add_argument("--first-action", choices=SIDES, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.first_action:
        first_action_child(args.first_action, args.uri, args.files.split(","))
        return 0
    from _timing import save_and_print

    if args.changes:
        out = args.out if args.out != HERE / "results" / "spark_native.json" else HERE / "results" / "spark_changes.json"
        return save_and_print(out, measure_changes(args), markdown, quiet=False)
    return save_and_print(args.out, measure(args), markdown, quiet=False)


if __name__ == "__main__":
    sys.exit(main())
