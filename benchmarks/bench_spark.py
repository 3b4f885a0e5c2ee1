"""Spark read benchmark: ``spark.read.format("ctfile")`` vs ``spark.read.parquet``.

Both read the same Parquet files (the micro-partitions of one ctfile
snapshot of TPC-H lineitem) in one local[2] session and materialise every
row through Spark's ``noop`` sink, alternating runs; the figure is the ratio of
medians. A third, informational side measures PySpark's own cost of a Python
data source: a source that yields one already-decoded Arrow batch over and
over (the same rows per partition, no Parquet decoding at all). Its time is
the floor any Python data source pays for the Arrow transfer to the JVM and
the JVM's Arrow-to-row conversion (two ``UnsafeProjection`` copies per row;
decimals through ``java.math.BigDecimal``).

CPU time is that of the whole process tree (the JVM, the Python workers), read
from ``/proc`` before and after each run; on a shared machine it is steadier
than wall time. Usage::

    .venv/bin/python benchmarks/bench_spark.py [--quick] [--runs N] [--no-floor]

Writes ``benchmarks/results/spark.json`` (``--out``). The table is cached under
``benchmarks/work/spark/`` (``--work-dir``), lineitem under
``benchmarks/data/`` (``--data-dir``, bench_core's cache).
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


def lineitem(scale: str, data_dir: Path):
    from bench_core import load_lineitem  # the core benchmark owns the data cache

    return load_lineitem(data_dir, float(scale))


def build_table(scale: str, partition_rows: int, work_dir: Path, data_dir: Path) -> str:
    path = work_dir / "spark" / f"lineitem-sf{scale}-p{partition_rows}"
    if (path / "_ct_log").exists():
        return str(path)
    shutil.rmtree(path, ignore_errors=True)
    data = lineitem(scale, data_dir)
    t = ctfile.create_table(path, data.schema, partition_rows=partition_rows)
    t.insert(data)
    return str(path)


def spark_session():
    """The benchmarks' local[2] session (4 GiB driver, no UI, errors only)."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ---------------------------------------------------------------- CPU of the process tree

_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of this process and all its descendants,
    by pid (Linux /proc; empty elsewhere)."""
    info: dict[int, tuple[int, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for d in names:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        info[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in info.items():
        children.setdefault(ppid, []).append(pid)
    out, stack = {}, [os.getpid()]
    while stack:
        p = stack.pop()
        if p in info:
            out[p] = info[p][1]
        stack.extend(children.get(p, []))
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    # Python workers are reused across tasks and queries, so their CPU shows
    # up as growth; a process that exited in between is not counted.
    return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())


# ---------------------------------------------------------------- the floor source


def floor_source_class():
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class ArrowFloor(DataSource):
        """Yields one cached, decoded batch of the table until each partition's
        row count is reached (``uri`` and ``rows`` options)."""

        @classmethod
        def name(cls):
            return "ctfile_bench_floor"

        def reader(self, schema):
            return ArrowFloorReader(self.options, schema)

    class ArrowFloorReader(DataSourceReader):
        def __init__(self, options, schema):
            self.uri = options["uri"]
            self.rows = int(options.get("rows", "32768"))
            self.spark_schema = schema

        def partitions(self):
            parts = ctfile.open_table(self.uri).snapshot().partitions
            return [InputPartition(p.num_records) for p in parts]

        def read(self, partition):
            import builtins

            from ctfile.spark_datasource.types import conform_batch, spark_arrow_schema

            cache = builtins.__dict__.setdefault("_ctfile_bench_floor", {})  # per Python worker
            batch = cache.get((self.uri, self.rows))
            if batch is None:
                task = ctfile.open_table(self.uri).snapshot().scan_tasks()[0]
                first = next(task.to_batches(batch_rows=self.rows, use_threads=False))
                batch = cache[(self.uri, self.rows)] = conform_batch(first, spark_arrow_schema(self.spark_schema))
            n = partition.value
            while n > 0:
                k = min(n, batch.num_rows)
                yield batch if k == batch.num_rows else batch.slice(0, k)
                n -= k

    return ArrowFloor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--partition-rows", type=int, default=1 << 20)
    ap.add_argument("--scale", default=None, help="TPC-H scale factor (default 1; 0.01 with --quick)")
    ap.add_argument("--no-floor", action="store_true", help="skip the informational floor side")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark.json", help="result JSON")
    ap.add_argument("--work-dir", type=Path, default=HERE / "work", help="cached ctfile table (under spark/)")
    ap.add_argument("--data-dir", type=Path, default=HERE / "data", help="cached TPC-H lineitem")
    args = ap.parse_args()
    scale = args.scale or ("0.01" if args.quick else "1")
    runs = 2 if args.quick else args.runs
    uri = build_table(scale, args.partition_rows if not args.quick else 20000, args.work_dir, args.data_dir)
    snap = ctfile.open_table(uri).snapshot()
    files = [os.path.join(uri, p.path) for p in snap.partitions]
    load_start = os.getloadavg()

    spark = spark_session()
    schema = spark.read.format("ctfile").load(uri).schema
    spark.dataSource.register(floor_source_class())

    def frame(side: str):
        if side == "parquet":
            return spark.read.parquet(*files)
        if side == "ctfile":
            return spark.read.format("ctfile").load(uri)
        return spark.read.format("ctfile_bench_floor").schema(schema).option("uri", uri).load()

    def run(side: str) -> tuple[float, float]:
        c0 = tree_cpu()
        t0 = time.perf_counter()
        frame(side).write.format("noop").mode("overwrite").save()
        wall = time.perf_counter() - t0
        return wall, cpu_between(c0, tree_cpu())

    sides = ["parquet", "ctfile"] + ([] if args.no_floor else ["floor"])
    for side in sides:
        run(side)  # warm-up: JVM, Python workers, page cache
    times: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
    for _ in range(runs):
        for side in sides:
            times[side].append(run(side))
    load_end = os.getloadavg()

    def med(side: str, i: int) -> float:
        return statistics.median(t[i] for t in times[side])

    result = {
        "machine": {"cpus": os.cpu_count(), "pyspark": spark.version},
        "date": time.strftime("%Y-%m-%d"),
        "scale_factor": scale,
        "rows": snap.num_records,
        "partitions": len(files),
        "runs": runs,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
        "spark_read_parquet_s": med("parquet", 0),
        "ctfile_s": med("ctfile", 0),
        "spark_read_parquet_cpu_s": med("parquet", 1),
        "ctfile_cpu_s": med("ctfile", 1),
        "runs_s": {s: [round(w, 3) for w, _ in times[s]] for s in sides},
        "runs_cpu_s": {s: [round(c, 3) for _, c in times[s]] for s in sides},
    }
    result["ratio"] = result["ctfile_s"] / result["spark_read_parquet_s"]
    result["cpu_ratio"] = result["ctfile_cpu_s"] / max(1e-9, result["spark_read_parquet_cpu_s"])
    if "floor" in sides:
        result["floor_s"] = med("floor", 0)
        result["floor_cpu_s"] = med("floor", 1)
        result["floor_ratio"] = result["floor_s"] / result["spark_read_parquet_s"]
        result["floor_cpu_ratio"] = result["floor_cpu_s"] / max(1e-9, result["spark_read_parquet_cpu_s"])
    spark.stop()
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} at start, "
          f"{load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f} at end, {os.cpu_count()} CPUs")
    print("| figure | spark.read.parquet | ctfile | ratio | CPU ratio | goal |")
    print("|---|---|---|---|---|---|")
    print(
        f"| snapshot scan, {result['rows']:,} rows, {len(files)} partitions, local[2] | "
        f"{result['spark_read_parquet_s']:.2f} s (CPU {result['spark_read_parquet_cpu_s']:.2f} s) | "
        f"{result['ctfile_s']:.2f} s (CPU {result['ctfile_cpu_s']:.2f} s) | "
        f"{result['ratio']:.2f}x | {result['cpu_ratio']:.2f}x | <= 1.5x |"
    )
    if "floor" in sides:
        print(
            f"| floor: a Python source yielding one cached Arrow batch (no decoding) | "
            f"{result['spark_read_parquet_s']:.2f} s | {result['floor_s']:.2f} s (CPU {result['floor_cpu_s']:.2f} s) | "
            f"{result['floor_ratio']:.2f}x | {result['floor_cpu_ratio']:.2f}x | informational |"
        )


if __name__ == "__main__":
    main()
