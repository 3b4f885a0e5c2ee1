#!/usr/bin/env python
"""A conditional upsert-with-delete batch as one MERGE (issue 27).

A pipeline's batch holds, per key, the latest event: rows to delete
(``op = 'delete'``), rows to upsert if newer than the stored row, and new
rows. Before issue 27 it took two statements, each a copy-on-write pass
over the partitions holding the batch's keys; one MERGE of ordered clauses
does it in one pass:

- ``merge``: ``Table.merge_builder(batch, on="id")``
  ``.when_matched_delete(condition=s.op == 'delete')``
  ``.when_matched_update_all(condition=s.ts > t.ts)``
  ``.when_not_matched_insert_all(condition=s.op != 'delete')``;
- ``two_statements``: what it replaces, ``Table.merge(deletes, on="id",
  when_matched="delete", when_not_matched=None)`` then ``Table.merge(upserts,
  on="id")`` (every update of the batch is newer, so both give the same
  table; checked before timing). Goal: ``merge`` <= 0.6x;
- ``upsert``: today's ``Table.merge`` of the same batch's rows (an
  unconditional upsert, no deletes): what a MERGE of conditions costs over
  the plain one. Goal: ``merge`` <= 1.1x.

The table (``--rows`` rows, default 4 Mi, ``ctfile.partitionRows`` default
1 Mi) is built once and cached; each timed run starts from a fresh copy of
it (data files hard-linked, untimed), opened and its state read untimed.
The batch (``--batch`` rows, default 0.5% of the table) touches every
partition: a quarter deletes, half updates, a quarter new keys. The three
are alternated in one process, the order rotated every round, medians of
``--runs`` runs with process CPU time as a cross-check.

With ``--spark`` (issue 27, a fixed cost in proportion to the work): a
``--batch`` of 100 rows (same shape) MERGEd into ``--rows`` 1,000,000 rows
(partitions of 131,072) through ``ctfile.spark`` on a warm local[2]
session (the source DataFrame made once; each run on a fresh copy):

- ``spark``: ``CtfileTable.merge_builder`` with the same clauses as Spark
  SQL text, which runs in the driver (``ctfile.spark.local``), against
  ``python``: the Python builder's MERGE of the same batch. Goal <= 1.3x;
- ``spark_upsert``: ``CtfileTable.merge(df, on="id")`` against ``upsert``
  (``Table.merge`` of the same rows). Goal <= 1.3x;
- ``spark_executors``: ``spark`` with the driver path and the spread path
  off (``spark.ctfile.local.sourceRows = 0``, ``spreadRows = 0``): Spark's
  join on the executors, what the driver path saves, reported;
- ``spark_spread``: ``spark`` with the driver path off, so that the
  Python engine runs spread over the executors
  (:func:`ctfile.spark.local.run_spread`), reported.

Results go to ``benchmarks/results/merge_spark.json``.

Usage::

    .venv/bin/python benchmarks/bench_merge.py            # 4 Mi rows, 20,971-row batch, 9 runs (a few minutes)
    .venv/bin/python benchmarks/bench_merge.py --quick    # 200,000 rows, seconds
    .venv/bin/python benchmarks/bench_merge.py --profile  # pyinstrument of the one MERGE instead of timing
    .venv/bin/python benchmarks/bench_merge.py --spark    # 100 rows into 1,000,000 through ctfile.spark

Results go to ``benchmarks/results/merge.json`` (``--out``) and a markdown
table is printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import ctfile
from _timing import quiesce, save_and_print

HERE = Path(__file__).resolve().parent
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "merge.json"
SPARK_OUT = HERE / "results" / "merge_spark.json"
BUILD_FORMAT = 1
GOALS = {"two_statements": 0.6, "upsert": 1.1}
SPARK_GOALS = {"python": 1.3, "upsert": 1.3}  # spark / python, spark_upsert / upsert
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("ts", pa.int64()), ("name", pa.string()),
    ("amount", pa.float64()), ("category", pa.string()), ("day", pa.date32()),
])


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="200,000 rows in partitions of 50,000, 5 runs")
    p.add_argument("--rows", type=int, default=None, help="table rows (default 4 Mi; quick 200,000)")
    p.add_argument("--partition-rows", type=int, default=None, help="ctfile.partitionRows (default 1 Mi; quick 50,000)")
    p.add_argument("--batch", type=int, default=None, help="batch rows (default 0.5%% of the table)")
    p.add_argument("--runs", type=int, default=None, help="timed runs of each (default 9, --spark 21; quick 5; at least 5)")
    p.add_argument("--profile", action="store_true", help="profile the one MERGE (pyinstrument) instead of timing")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=None, help="results file (default results/merge.json; --spark: merge_spark.json)")
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    p.add_argument("--spark", action="store_true", help="the small MERGE through ctfile.spark (module docstring)")
    a = p.parse_args(argv)
    a.out = a.out or (SPARK_OUT if a.spark else DEFAULT_OUT)
    if a.spark:
        a.rows = a.rows or (200_000 if a.quick else 1_000_000)
        a.partition_rows = a.partition_rows or (50_000 if a.quick else 1 << 17)
        a.batch = a.batch or 100
    a.rows = a.rows or (200_000 if a.quick else 4 << 20)
    a.partition_rows = a.partition_rows or (50_000 if a.quick else 1 << 20)
    a.batch = a.batch or max(8, a.rows // 200)
    # A Spark run takes a few hundred ms and varies by tens of ms: more runs.
    full_runs = 21 if a.spark else 9
    a.runs = max(5, a.runs or (5 if a.quick else full_runs))
    return a


# ---------------------------------------------------------------- data


def _events(ids: np.ndarray, ts: np.ndarray, rng) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": ids, "ts": ts, "name": pa.array([f"name {i % 9973}" for i in ids]),
        "amount": rng.random(n) * 100, "category": pa.array(np.array(["a", "b", "c", "d"])[rng.integers(0, 4, n)]),
        "day": pa.array(rng.integers(19000, 20000, n, dtype=np.int32), pa.int32()).cast(pa.date32()),
    }, schema=SCHEMA)


def build(root: Path, a: argparse.Namespace) -> Path:
    """The pristine table (cached): ids 0..rows-1 at ts 1, in id order."""
    marker, table = root / "complete.json", root / "table"
    spec = {"build_format": BUILD_FORMAT, "rows": a.rows, "partition_rows": a.partition_rows}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return table
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t = ctfile.create_table(table, SCHEMA, partition_rows=a.partition_rows)
    t.insert(_events(np.arange(a.rows, dtype=np.int64), np.ones(a.rows, dtype=np.int64), np.random.default_rng(27)))
    marker.write_text(json.dumps(spec))
    return table


def batch(a: argparse.Namespace) -> pa.Table:
    """A quarter deletes, half newer updates (random existing keys), a
    quarter new keys; with an ``op`` column."""
    rng = np.random.default_rng(2027)
    existing = rng.choice(a.rows, size=a.batch - a.batch // 4, replace=False).astype(np.int64)
    fresh = np.arange(a.rows, a.rows + a.batch // 4, dtype=np.int64)
    ids = np.concatenate([existing, fresh])
    rows = _events(ids, np.full(len(ids), 2, dtype=np.int64), rng)
    ops = np.where(np.arange(len(ids)) < a.batch // 4, "delete", "upsert")
    return rows.append_column("op", pa.array(ops))


# ---------------------------------------------------------------- the statements


def one_merge(t: ctfile.Table, b: pa.Table) -> None:
    (t.merge_builder(b, on="id")
     .when_matched_delete(condition=pc.field("s.op") == "delete")
     .when_matched_update_all(condition=pc.field("s.ts") > pc.field("t.ts"))
     .when_not_matched_insert_all(condition=pc.field("s.op") != "delete")
     .execute())


def two_statements(t: ctfile.Table, b: pa.Table) -> None:
    deletes = b.filter(pc.field("op") == "delete").select(["id"])
    t.merge(deletes, on="id", when_matched="delete", when_not_matched=None)
    t.merge(b.filter(pc.field("op") != "delete").drop_columns(["op"]), on="id")


def upsert(t: ctfile.Table, b: pa.Table) -> None:
    t.merge(b.drop_columns(["op"]), on="id")


VARIANTS = {"merge": one_merge, "two_statements": two_statements, "upsert": upsert}


def _fresh(pristine: Path, work: Path) -> ctfile.Table:
    """A copy of the pristine table (data files hard-linked: they are never
    written again), opened with its state read."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work, copy_function=os.link)
    t = ctfile.open_table(work)
    t.snapshot()
    return t


def _check(pristine: Path, work: Path, b: pa.Table) -> None:
    """One MERGE and the two statements leave the same rows."""
    got = []
    for fn in (one_merge, two_statements):
        t = _fresh(pristine, work)
        fn(t, b)
        got.append(t.to_arrow().sort_by("id"))
    assert got[0].equals(got[1]), "the MERGE and the two statements differ"


def _alternated(variants: dict, runs: int, pristine: Path, work: Path) -> tuple[dict, dict]:
    """Wall and CPU seconds of ``runs`` timed rounds of each variant (a
    function of a fresh copy of the table), after a warm-up round; each
    round starts at the next variant, so none always runs first."""
    wall: dict[str, list[float]] = {n: [] for n in variants}
    cpu: dict[str, list[float]] = {n: [] for n in variants}
    names = list(variants)
    for i in range(runs + 1):
        for name in names[i % len(names):] + names[: i % len(names)]:
            t = _fresh(pristine, work)
            quiesce()
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            variants[name](t)
            w, c = time.perf_counter() - t0, time.process_time() - c0
            if i:
                wall[name].append(w)
                cpu[name].append(c)
    return wall, cpu


def measure(a: argparse.Namespace) -> dict:
    root = a.work_dir / "merge" / f"t-{a.rows}x{a.partition_rows}"
    pristine, work, b = build(root, a), root / "run", batch(a)
    _check(pristine, work, b)
    load0 = list(os.getloadavg())
    wall, cpu = _alternated({n: (lambda t, f=f: f(t, b)) for n, f in VARIANTS.items()}, a.runs, pristine, work)
    shutil.rmtree(work, ignore_errors=True)
    ms = {n: 1000 * median(v) for n, v in wall.items()}
    cpu_ms = {n: 1000 * median(v) for n, v in cpu.items()}
    ratio = {n: ms["merge"] / ms[n] for n in GOALS}
    return {
        "meta": {
            "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "rows": a.rows, "partition_rows": a.partition_rows, "batch": b.num_rows, "runs": a.runs, "goals": GOALS,
            "loadavg_start": load0, "loadavg_end": list(os.getloadavg()),
        },
        "ms": ms, "cpu_ms": cpu_ms, "ratio": ratio,
        "cpu_ratio": {n: cpu_ms["merge"] / cpu_ms[n] for n in GOALS},
        "pass": {n: ratio[n] <= GOALS[n] for n in GOALS},
        "runs_ms": {n: [1000 * x for x in v] for n, v in wall.items()},
    }


# ---------------------------------------------------------------- --spark


def _spark_variants(spark, b: pa.Table) -> dict:
    """The Spark statements and their Python counterparts; the source
    DataFrames are made once (a pipeline has its batch as a DataFrame)."""
    from ctfile.spark import CtfileTable

    df = spark.createDataFrame(b)
    plain = spark.createDataFrame(b.drop_columns(["op"]))
    df.count(), plain.count()

    def spark_merge(t: ctfile.Table) -> None:
        (CtfileTable(spark, t).merge_builder(df, on="id")
         .when_matched_delete(condition="s.op = 'delete'")
         .when_matched_update_all(condition="s.ts > t.ts")
         .when_not_matched_insert_all(condition="s.op != 'delete'")
         .execute())

    def spark_executors(t: ctfile.Table) -> None:
        spark.conf.set("spark.ctfile.local.sourceRows", "0")
        spark.conf.set("spark.ctfile.local.spreadRows", "0")
        try:
            spark_merge(t)
        finally:
            spark.conf.unset("spark.ctfile.local.sourceRows")
            spark.conf.unset("spark.ctfile.local.spreadRows")

    def spark_spread(t: ctfile.Table) -> None:
        spark.conf.set("spark.ctfile.local.sourceRows", "0")
        try:
            spark_merge(t)
        finally:
            spark.conf.unset("spark.ctfile.local.sourceRows")

    return {
        "spark": spark_merge, "python": lambda t: one_merge(t, b),
        "spark_upsert": lambda t: CtfileTable(spark, t).merge(plain, on="id"), "upsert": lambda t: upsert(t, b),
        "spark_executors": spark_executors, "spark_spread": spark_spread,
    }


def _spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench_merge")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure_spark(a: argparse.Namespace) -> dict:
    root = a.work_dir / "merge" / f"t-{a.rows}x{a.partition_rows}"
    pristine, work, b = build(root, a), root / "run", batch(a)
    spark = _spark_session()
    variants = _spark_variants(spark, b)
    got = {}
    for name in ("spark", "python", "spark_executors", "spark_spread"):  # the same rows, checked before timing
        t = _fresh(pristine, work)
        variants[name](t)
        got[name] = t.to_arrow().sort_by("id")
    assert all(got[n].equals(got["python"]) for n in ("spark", "spark_executors", "spark_spread"))
    load0 = list(os.getloadavg())
    wall, cpu = _alternated(variants, a.runs, pristine, work)
    shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    ms = {n: 1000 * median(v) for n, v in wall.items()}
    ratio = {"python": ms["spark"] / ms["python"], "upsert": ms["spark_upsert"] / ms["upsert"]}
    return {
        "meta": {
            "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "rows": a.rows, "partition_rows": a.partition_rows, "batch": b.num_rows, "runs": a.runs,
            "goals": SPARK_GOALS, "loadavg_start": load0, "loadavg_end": list(os.getloadavg()),
            "command": "benchmarks/bench_merge.py --spark" + (" --quick" if a.quick else ""),
        },
        "ms": ms, "cpu_ms": {n: 1000 * median(v) for n, v in cpu.items()}, "ratio": ratio,
        "pass": {n: ratio[n] <= SPARK_GOALS[n] for n in SPARK_GOALS},
        "runs_ms": {n: [1000 * x for x in v] for n, v in wall.items()},
    }


def markdown_spark(r: dict) -> str:
    m, ms = r["meta"], r["ms"]
    lines = [
        f"## A small MERGE through ctfile.spark ({m['mode']}, {m['date']})", "",
        f"{m['batch']:,} rows MERGEd into {m['rows']:,} (partitions of {m['partition_rows']:,}) on a warm local[2] "
        f"session; medians of {m['runs']} runs; `{m['command']}`.", "",
        "| Spark ms | compared with | its ms | ratio | goal |", "|---:|---|---:|---:|---|",
        f"| {ms['spark']:.0f} (builder, driver path) | Python builder, same statement | {ms['python']:.0f} | "
        f"{r['ratio']['python']:.2f} | <= 1.3x: {'ok' if r['pass']['python'] else '**MISS**'} |",
        f"| {ms['spark_upsert']:.0f} (CtfileTable.merge) | Table.merge | {ms['upsert']:.0f} | "
        f"{r['ratio']['upsert']:.2f} | <= 1.3x: {'ok' if r['pass']['upsert'] else '**MISS**'} |",
        f"| {ms['spark_executors']:.0f} (builder, executors) | Python builder | {ms['python']:.0f} | "
        f"{ms['spark_executors'] / ms['python']:.2f} | reported |",
    ]
    if "spark_spread" in ms:
        lines.append(f"| {ms['spark_spread']:.0f} (builder, spread over the executors) | Python builder | "
                     f"{ms['python']:.0f} | {ms['spark_spread'] / ms['python']:.2f} | reported |")
    return "\n".join(lines)


def profile(a: argparse.Namespace) -> None:
    from pyinstrument import Profiler

    root = a.work_dir / "merge" / f"t-{a.rows}x{a.partition_rows}"
    pristine, work, b = build(root, a), root / "run", batch(a)
    t = _fresh(pristine, work)
    prof = Profiler(interval=0.001)
    with prof:
        one_merge(t, b)
    shutil.rmtree(work, ignore_errors=True)
    print(prof.output_text(unicode=False, color=False))


def markdown(r: dict) -> str:
    if "spark_executors" in r["ms"]:  # results of --spark
        return markdown_spark(r)
    m, ms = r["meta"], r["ms"]
    lines = [
        f"## One conditional upsert-with-delete MERGE ({m['mode']}, {m['date']})", "",
        f"A table of {m['rows']:,} rows (partitions of {m['partition_rows']:,}); a batch of {m['batch']:,} rows "
        "(a quarter deletes, half newer updates, a quarter new keys) touching every partition; each run on a fresh "
        f"copy; medians of {m['runs']} runs alternated in one process; load average {m['loadavg_start'][0]:.1f} at "
        f"start, {m['loadavg_end'][0]:.1f} at end.", "",
        "| MERGE ms | compared with | its ms | ratio (CPU ratio) | goal |",
        "|---:|---|---:|---:|---|",
    ]
    what = {"two_statements": "the two statements it replaces (keyed delete, then upsert)",
            "upsert": "`Table.merge` of the same batch (plain upsert)"}
    for n, goal in m["goals"].items():
        verdict = "ok" if r["pass"][n] else "**MISS**"
        lines.append(f"| {ms['merge']:.0f} | {what[n]} | {ms[n]:.0f} | {r['ratio'][n]:.2f} ({r['cpu_ratio'][n]:.2f}) | "
                     f"<= {goal}x: {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    if a.profile:
        profile(a)
        return 0
    if a.spark:
        return save_and_print(a.out, measure_spark(a), markdown_spark, quiet=a.no_print)
    return save_and_print(a.out, measure(a), markdown, quiet=a.no_print)


if __name__ == "__main__":
    sys.exit(main())
