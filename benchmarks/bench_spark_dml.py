"""Spark DML benchmark (issue 15): MERGE of a 0.5% upsert batch into TPC-H
lineitem through ``ctfile.spark`` on local[2], side by side with the
Python ``Table.merge`` and a native floor, in one run; and a selective
UPDATE (the 0.5% of rows with the lowest ``l_orderkey``), the same three
ways, which shows statistics pruning of a Spark condition.

The batch holds 0.5% as many rows as the table, keyed on
(``l_orderkey``, ``l_linenumber``): half of them existing keys with a new
``l_quantity`` and ``l_comment``, half new keys. Each run MERGEs it into a
fresh copy of the same table (the copy is not timed):

* ``spark``: ``CtfileTable.merge(batch_df, keys)``: candidates read on the
  executors, joined, touched partitions rewritten per task, one commit;
* ``python``: ``Table.merge(batch, keys)`` in the driver process (the batch
  as an Arrow table: the cost of ``toArrow()`` is not counted);
* ``floor``: what Spark itself needs for the same work on plain Parquet, the
  way Delta Lake plans a MERGE: find the touched files (``spark.read.parquet``
  of the key columns with ``_metadata.file_path``, joined with the batch),
  read them whole, left-join the batch, write the rewritten rows and the
  inserted rows as Parquet. No log, no hidden columns, no statistics.

The UPDATE sides: ``CtfileTable.update("l_orderkey <= K", ...)``,
``Table.update(pc.field("l_orderkey") <= K, ...)``, and a floor that finds
the touched files with Spark's filter (Parquet row-group pushdown) and
rewrites them whole.

And a snapshot sync (issue 27): a MERGE whose source is the keys of a full
snapshot of the table from which 0.5% of the keys are gone, with one
clause, ``WHEN NOT MATCHED BY SOURCE THEN DELETE``: the statement reads the
whole table (every row is a candidate), the three ways:
``CtfileTable.merge_builder(keys_df, on=keys).when_not_matched_by_source_delete()``,
``Table.merge_builder`` of the same keys as an Arrow table, and a floor
that finds the files holding a key the snapshot lacks (an anti-join of
the table's keys with the snapshot's) and rewrites them with the rows
whose key the snapshot has (a semi-join). The snapshot is read from a
Parquet file by both Spark sides.

Wall and process-tree CPU times; sides alternate; the figure is the ratio of
medians. Usage::

    .venv/bin/python benchmarks/bench_spark_dml.py [--quick] [--runs N] [--scale SF]

Writes ``benchmarks/results/spark_dml.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import ctfile  # noqa: E402
from bench_spark import cpu_between, lineitem, spark_session, tree_cpu  # noqa: E402

KEYS = ["l_orderkey", "l_linenumber"]
GOAL_VS_FLOOR = 2.0  # ctfile.spark MERGE (and UPDATE) at most this many times the native floor
UPDATE_COMMENT = "updated"


def build_table(scale: str, partition_rows: int, work_dir: Path, data_dir: Path) -> Path:
    path = work_dir / "spark_dml" / f"lineitem-sf{scale}-p{partition_rows}"
    if (path / "_ct_log").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    data = lineitem(scale, data_dir)
    t = ctfile.create_table(str(path), data.schema, properties={"ctfile.partitionRows": str(partition_rows)})
    t.insert(data)
    return path


def upsert_batch(table: ctfile.Table, fraction: float, seed: int = 15) -> pa.Table:
    """``fraction`` of the table's rows: half existing keys with new values,
    half new keys (order keys past the largest)."""
    rng = np.random.default_rng(seed)
    data = table.to_arrow()
    n = max(2, int(data.num_rows * fraction))
    existing = data.take(pa.array(np.sort(rng.choice(data.num_rows, n // 2, replace=False))))
    fresh = data.take(pa.array(rng.choice(data.num_rows, n - n // 2, replace=False)))
    top = pc.max(data.column("l_orderkey")).as_py()
    i = fresh.schema.get_field_index("l_orderkey")
    new_keys = pa.array(np.arange(top + 1, top + 1 + fresh.num_rows), data.schema.field("l_orderkey").type)
    fresh = fresh.set_column(i, fresh.schema.field(i), new_keys)
    batch = pa.concat_tables([existing, fresh])
    qty = batch.column("l_quantity")
    iq, ic = batch.schema.get_field_index("l_quantity"), batch.schema.get_field_index("l_comment")
    batch = batch.set_column(iq, batch.schema.field(iq), pc.add(qty, pa.scalar(1, qty.type)).cast(qty.type))
    comment = pa.array(["upserted"] * batch.num_rows, batch.schema.field(ic).type)
    return batch.set_column(ic, batch.schema.field(ic), comment)


def floor_merge(spark, files: list[str], batch_df, out_dir: str) -> None:
    """The native floor: touched files found by a join on the keys, read
    whole, left-joined with the batch, written back; inserts written too."""
    from pyspark.sql import functions as F

    keys = spark.read.parquet(*files).select(*KEYS, F.col("_metadata.file_path").alias("_file"))
    touched = [r[0] for r in keys.join(batch_df.select(*KEYS), KEYS, "left_semi").select("_file").distinct().collect()]
    cols = batch_df.columns
    if touched:
        target = spark.read.parquet(*touched)
        src = batch_df.select(*[F.col(c).alias(f"_s_{c}") if c not in KEYS else F.col(c) for c in cols])
        joined = target.join(src, KEYS, "left")
        rewritten = joined.select(*[F.col(c) if c in KEYS else F.coalesce(F.col(f"_s_{c}"), F.col(c)).alias(c)
                                    for c in target.columns])
        rewritten.write.mode("overwrite").parquet(f"{out_dir}/rewritten")
    all_keys = spark.read.parquet(*files).select(*KEYS)
    batch_df.join(all_keys, KEYS, "left_anti").write.mode("overwrite").parquet(f"{out_dir}/inserted")


def update_bound(table: ctfile.Table, fraction: float) -> int:
    """The ``l_orderkey`` at or below which ``fraction`` of the rows lie:
    a selective UPDATE whose rows sit in the first partition(s) of a table
    inserted in key order, the case statistics pruning exists for."""
    keys = table.to_arrow(columns=["l_orderkey"]).column("l_orderkey")
    return int(pc.quantile(keys, q=fraction, interpolation="lower")[0].as_py())


def floor_update(spark, files: list[str], bound: int, out_dir: str) -> None:
    """The native floor of the UPDATE: the touched files found by Spark's
    filter (pushed into Parquet's row-group statistics), read whole, the
    condition's rows given the new comment, written back."""
    from pyspark.sql import functions as F

    cond = F.col("l_orderkey") <= bound
    found = spark.read.parquet(*files).where(cond).select(F.col("_metadata.file_path").alias("_file")).distinct()
    touched = [r[0] for r in found.collect()]
    if touched:
        target = spark.read.parquet(*touched)
        new = F.when(cond, F.lit(UPDATE_COMMENT)).otherwise(F.col("l_comment")).alias("l_comment")
        target.select(*[new if c == "l_comment" else F.col(c) for c in target.columns]).write.mode("overwrite").parquet(out_dir)


def sync_keys(table: ctfile.Table, fraction: float, seed: int = 16) -> pa.Table:
    """The keys of the table less ``fraction`` of them, chosen at random:
    the keys of a full snapshot from which those rows are gone."""
    keys = table.to_arrow(columns=KEYS)
    rng = np.random.default_rng(seed)
    keep = np.ones(keys.num_rows, dtype=bool)
    keep[rng.choice(keys.num_rows, max(1, int(keys.num_rows * fraction)), replace=False)] = False
    return keys.filter(pa.array(keep))


def floor_sync(spark, files: list[str], keys_df, out_dir: str) -> None:
    """The native floor of the snapshot sync: the files holding a key the
    snapshot lacks (an anti-join), rewritten with the rows whose key it has."""
    from pyspark.sql import functions as F

    target = spark.read.parquet(*files).select(*KEYS, F.col("_metadata.file_path").alias("_file"))
    touched = [r[0] for r in target.join(keys_df, KEYS, "left_anti").select("_file").distinct().collect()]
    if touched:
        spark.read.parquet(*touched).join(keys_df, KEYS, "left_semi").write.mode("overwrite").parquet(out_dir)


def _timed(fn) -> tuple[float, float]:
    c0 = tree_cpu()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, cpu_between(c0, tree_cpu())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", default=None, help="TPC-H scale factor (default 1; 0.01 with --quick)")
    ap.add_argument("--fraction", type=float, default=0.005)
    ap.add_argument("--partition-rows", type=int, default=1 << 20)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark_dml.json")
    ap.add_argument("--work-dir", type=Path, default=HERE / "work")
    ap.add_argument("--data-dir", type=Path, default=HERE / "data")
    args = ap.parse_args()
    scale = args.scale or ("0.01" if args.quick else "1")
    runs = 1 if args.quick else args.runs
    base = build_table(scale, 20000 if args.quick else args.partition_rows, args.work_dir, args.data_dir)
    table = ctfile.open_table(str(base))
    batch = upsert_batch(table, args.fraction)
    files = [str(base / p.path) for p in table.snapshot().partitions]
    load_start = os.getloadavg()
    spark = spark_session()
    from pyspark.sql import functions as F

    from ctfile.spark import CtfileTable

    batch_df = spark.createDataFrame(batch).persist()
    batch_df.count()
    scratch = Path(tempfile.mkdtemp(prefix="ct-bench-sparkdml-"))
    bound = update_bound(table, args.fraction)
    keys = sync_keys(table, args.fraction)
    pq.write_table(keys, scratch / "sync_keys.parquet")
    keys_df = spark.read.parquet(str(scratch / "sync_keys.parquet"))
    results: dict[str, list] = {
        "spark": [], "python": [], "floor": [], "spark_update": [], "python_update": [], "floor_update": [],
        "spark_sync": [], "python_sync": [], "floor_sync": [],
    }
    counts = {}

    def fresh_copy() -> str:
        dst = scratch / "t"
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(base, dst)
        return str(dst)

    def side(name: str) -> tuple[float, float]:
        if name.startswith("floor"):
            out = scratch / name
            shutil.rmtree(out, ignore_errors=True)
            if name == "floor":
                return _timed(lambda: floor_merge(spark, files, batch_df, str(out)))
            if name == "floor_sync":
                return _timed(lambda: floor_sync(spark, files, keys_df, str(out)))
            return _timed(lambda: floor_update(spark, files, bound, str(out)))
        uri = fresh_copy()
        if name.startswith("spark"):
            handle = CtfileTable.for_path(spark, uri)
            if name == "spark":
                return _timed(lambda: counts.__setitem__(name, handle.merge(batch_df, KEYS)))
            if name == "spark_sync":
                sync = handle.merge_builder(keys_df, on=KEYS).when_not_matched_by_source_delete()
                return _timed(lambda: counts.__setitem__(name, sync.execute()))
            run = lambda: handle.update(f"l_orderkey <= {bound}", {"l_comment": F.lit(UPDATE_COMMENT)})  # noqa: E731
            return _timed(lambda: counts.__setitem__(name, run()))
        t = ctfile.open_table(uri)
        if name == "python":
            return _timed(lambda: counts.__setitem__(name, t.merge(batch, KEYS)))
        if name == "python_sync":
            sync = t.merge_builder(keys, on=KEYS).when_not_matched_by_source_delete()
            return _timed(lambda: counts.__setitem__(name, sync.execute()))
        run = lambda: t.update(pc.field("l_orderkey") <= bound, {"l_comment": UPDATE_COMMENT})  # noqa: E731
        return _timed(lambda: counts.__setitem__(name, run()))

    if not args.quick:  # a smoke run skips the warm-up (JVM, Python workers, page cache)
        for name in results:
            side(name)
    for _ in range(runs):
        for name in results:
            results[name].append(side(name))
    shutil.rmtree(scratch, ignore_errors=True)
    med = {k: statistics.median(w for w, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in results.items()}
    sp, py = counts["spark"], counts["python"]
    same = (sp.num_inserted_rows, sp.num_updated_rows) == (py.num_inserted_rows, py.num_updated_rows)
    su, pu = counts["spark_update"], counts["python_update"]
    update_ratio = med["spark_update"] / med["floor_update"]
    ss, ps = counts["spark_sync"], counts["python_sync"]
    sync_ratio = med["spark_sync"] / med["floor_sync"]
    report = {
        "meta": {"scale": scale, "rows": table.snapshot().num_records, "batch_rows": batch.num_rows,
                 "partitions": len(files), "runs": runs, "load_start": load_start, "load_end": os.getloadavg()},
        "times_s": {k: [w for w, _ in v] for k, v in results.items()},
        "cpu_s": {k: [c for _, c in v] for k, v in results.items()},
        "median_s": med, "median_cpu_s": cpu,
        "ratio_vs_floor": med["spark"] / med["floor"], "ratio_vs_python": med["spark"] / med["python"],
        "goal_vs_floor": GOAL_VS_FLOOR, "pass": med["spark"] / med["floor"] <= GOAL_VS_FLOOR,
        "counts": {"inserted": sp.num_inserted_rows, "updated": sp.num_updated_rows,
                   "removed_partitions": sp.num_removed_partitions, "same_as_python": same},
        "update": {
            "condition": f"l_orderkey <= {bound}", "updated": su.num_updated_rows,
            "removed_partitions": su.num_removed_partitions,
            "same_as_python": (su.num_updated_rows, su.num_removed_partitions)
            == (pu.num_updated_rows, pu.num_removed_partitions),
            "ratio_vs_floor": update_ratio, "ratio_vs_python": med["spark_update"] / med["python_update"],
            "pass": update_ratio <= GOAL_VS_FLOOR,
        },
        "sync": {
            "snapshot_rows": keys.num_rows, "deleted": ss.num_deleted_rows,
            "removed_partitions": ss.num_removed_partitions,
            "same_as_python": (ss.num_deleted_rows, ss.num_removed_partitions)
            == (ps.num_deleted_rows, ps.num_removed_partitions),
            "ratio_vs_floor": sync_ratio, "ratio_vs_python": med["spark_sync"] / med["python_sync"],
            "pass": sync_ratio <= GOAL_VS_FLOOR,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("median_s", "median_cpu_s", "ratio_vs_floor", "ratio_vs_python", "counts", "update", "sync")},
                     indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
