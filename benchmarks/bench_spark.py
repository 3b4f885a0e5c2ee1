"""Spark read benchmark: ``spark.read.format("ctfile")`` vs ``spark.read.parquet``.

Both read the same Parquet files (the micro-partitions of one ctfile
snapshot of TPC-H lineitem) in one local[2] session and materialise every
row through Spark's ``noop`` sink, alternating runs; the figure is the ratio of
medians. Usage::

    .venv/bin/python benchmarks/bench_spark.py [--quick] [--runs N]

Writes ``benchmarks/results/spark.json``.
"""

from __future__ import annotations

import argparse
import json
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

import ctfile  # noqa: E402


def lineitem(scale: str):
    from bench_core import load_lineitem  # the core benchmark owns the data cache

    return load_lineitem(HERE / "data", float(scale))


def build_table(scale: str, partition_rows: int) -> str:
    path = HERE / "work" / "spark" / f"lineitem-sf{scale}-p{partition_rows}"
    if (path / "_ct_log").exists():
        return str(path)
    shutil.rmtree(path, ignore_errors=True)
    data = lineitem(scale)
    t = ctfile.create_table(path, data.schema, partition_rows=partition_rows)
    t.insert(data)
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--partition-rows", type=int, default=1 << 20)
    ap.add_argument("--scale", default=None, help="TPC-H scale factor (default 1; 0.01 with --quick)")
    args = ap.parse_args()
    scale = args.scale or ("0.01" if args.quick else "1")
    runs = 2 if args.quick else args.runs
    uri = build_table(scale, args.partition_rows if not args.quick else 20000)
    snap = ctfile.open_table(uri).snapshot()
    files = [os.path.join(uri, p.path) for p in snap.partitions]

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def run_parquet() -> float:
        t0 = time.perf_counter()
        spark.read.parquet(*files).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    def run_ctfile() -> float:
        t0 = time.perf_counter()
        spark.read.format("ctfile").load(uri).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    run_parquet(), run_ctfile()  # warm-up: JVM, Python workers, page cache
    pq_times, ct_times = [], []
    for _ in range(runs):
        pq_times.append(run_parquet())
        ct_times.append(run_ctfile())
    result = {
        "machine": {"cpus": os.cpu_count(), "pyspark": spark.version},
        "date": time.strftime("%Y-%m-%d"),
        "scale_factor": scale,
        "rows": snap.num_records,
        "partitions": len(files),
        "runs": runs,
        "spark_read_parquet_s": statistics.median(pq_times),
        "ctfile_s": statistics.median(ct_times),
    }
    result["ratio"] = result["ctfile_s"] / result["spark_read_parquet_s"]
    spark.stop()
    out = HERE / "results" / "spark.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| figure | spark.read.parquet | ctfile | ratio | goal |")
    print("|---|---|---|---|---|")
    print(
        f"| snapshot scan, {result['rows']:,} rows, {len(files)} partitions, local[2] | "
        f"{result['spark_read_parquet_s']:.2f} s | {result['ctfile_s']:.2f} s | "
        f"{result['ratio']:.2f}x | <= 1.5x |"
    )


if __name__ == "__main__":
    main()
