#!/usr/bin/env python
"""Layout for upserts (issue 16): clustered vs unclustered tables, side by side.

One table of ``--rows`` rows (default 10,000,000): an int64 ``id`` and four
realistic columns (a string, a double, a date, a timestamp), inserted from
the same shuffled input twice, both with ``ctfile.partitionRows`` =
``--partition-rows`` (default 250,000, so 10M rows are 40 partitions: a 1%
batch drawn from the most recent 5% of ids then falls in 2-3 partitions of
a sorted layout, small against 40, while the default 1 Mi rows would put
the whole recent window in one or two of only 10 partitions and measure the
partition size more than the layout):

- ``clustered``: ``ctfile.clusterBy = id`` (the insert sorts by id);
- ``unclustered``: no keys, rows in the shuffled order.

(1) **Upsert workload**: ``--batches`` (20) MERGE batches of 1% of the rows,
keys from the most recent 5% of ids; ``NEW_SHARE`` (10%) of each batch are
new ids above the current maximum (inserts), the rest existing ids (updates,
every column set). Each batch runs on each table, the order rotated; per
MERGE: partitions rewritten (``CommitResult.num_removed_partitions``), the
*minimum*: the distinct partitions of a perfectly clustered layout of the
live ids the MERGE read (sorted, cut every partitionRows rows) that hold one
of its existing keys (new keys need no partition rewritten), the MERGE time
and the time of its version's change scan
(``Table.changes(start_version=v, end_version=v).to_arrow()``, minimum delta;
both tables alternated with ``_timing.interleaved``). Goals: rewritten <=
2x the minimum on every clustered MERGE; median MERGE and change-scan time
>= 5x faster clustered.

(2) **Random keys** (the worst case): the same batches, keys uniform over
every live id, on fresh copies of both tables: clustered / unclustered MERGE
time <= ``RANDOM_FLOOR`` (1.1: every partition is rewritten either way; what
clustering may add is the sort of each rewritten partition).

(3) **Insert**: clustered vs unclustered insert of the shuffled rows into a
new table (``interleaved``, ``--insert-runs``): goal <= 1.3x. In the same
rounds, the floor: sorting the rows by id alone (NumPy's stable sort of the
key, as ctfile sorts one numeric key, + Arrow's ``take``); (unclustered +
sort) / unclustered is what a clustered insert that sorts before it writes
cannot beat.

(4) **Auto compaction**: the upsert workload also runs on a copy of the
clustered table with ``ctfile.autoCompact = true``; live partitions after the
last MERGE vs ``ceil(live rows / partitionRows)``: goal <= 1.2x; the
clustered table without it is reported too.

(5) **Multi-column keys** (``--multi-rows``, default 2,000,000; 40
partitions): ``a`` (1,000 regions) and ``b`` (a unique id), clustered
lexicographically (``ctfile.clusterBy = a,b``, what ctfile implements) vs a
Z-order made here only: dense ranks per column, scaled to 16 bits each (as
Delta's range ids, so neither column's cardinality dominates), bits
interleaved with numpy, rows inserted in z order into an unclustered table.
Partitions read (``Snapshot.scan_tasks`` pruning) and ``to_arrow(filter=)``
time for ``a = x`` and ``b = y``; ``--multi-merges`` MERGEs keyed on (a, b)
of the rows in a box of 5% of a's range x 5% of b's (partitions read:
``Transaction.read_partitions``).

(6) **Depth under random-key upserts with automatic compaction**
(``--recluster-rows``, default 1,000,000, quick 4,000; ``--recluster-batches``,
default 60, quick 30; issue 26): a table clustered by id with
``ctfile.autoCompact`` on, ids 0, 8, 16, ... so that new ids fall between
them, ``ctfile.partitionRows`` = rows / 40; MERGE batches of 1% of the rows,
half existing ids and half new ids, both drawn uniformly over the whole key
range (keys scattered as hashed or random ids are), so that every batch's
inserts make a partition spanning every other. Three copies differ only in
``ctfile.autoCompactMaxDepth``: 2, 3 (the default) and one no table reaches
(only small partitions are compacted: the behaviour before the depth
bound). Per MERGE: average and maximum clustering depth after it, the rows
its automatic compaction rewrote, the rows the MERGE itself wrote (updated,
inserted and copied) and the statement's time with the compaction. Goal: the
maximum depth never exceeds the bound; the rows compaction rewrites are
reported against those the MERGEs wrote.

Usage::

    .venv/bin/python benchmarks/bench_clustering.py                 # 10M rows, 20 batches (long: see RESULTS.md)
    .venv/bin/python benchmarks/bench_clustering.py --quick         # 4,000 rows, 3 batches, seconds
    .venv/bin/python benchmarks/bench_clustering.py --rows 2000000  # a smaller full run
    .venv/bin/python benchmarks/bench_clustering.py --profile random  # pyinstrument of one clustered random-key MERGE

Results go to ``benchmarks/results/clustering.json`` (``--out``) and a
markdown summary is printed. Tables are built under ``--work-dir``
(``benchmarks/work/clustering/``, gitignored) and removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
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
from _timing import interleaved, quiesce, save_and_print

HERE = Path(__file__).resolve().parent
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "clustering.json"
NEW_SHARE = 0.10  # share of each MERGE batch that is new ids (inserts)
BATCH_SHARE, RECENT_SHARE = 0.01, 0.05
GOALS = {"rewrite_x_min": 2.0, "speedup": 5.0, "random_floor": 1.1, "insert": 1.3, "auto_compaction": 1.2}
#: (6): the ``ctfile.autoCompactMaxDepth`` of each copy; "unbounded" is a bound no table reaches.
RECLUSTER_DEPTHS = {"depth_2": 2, "depth_3": 3, "unbounded": 1 << 40}
RECLUSTER_SPACING = 8  # (6): ids 0, 8, 16, ...: room for new ids inside every partition's range
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("amount", pa.float64()),
    ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
])
MULTI_SCHEMA = pa.schema([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.int64(), nullable=False),
                          ("v", pa.float64())])
REGIONS, MULTI_PARTITIONS, Z_BITS, BOX = 1000, 40, 16, 0.05


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="4,000 rows, 3 batches, partitions of 100 rows")
    p.add_argument("--rows", type=int, default=None, help="rows of the upsert table (default 10,000,000; quick 4,000)")
    p.add_argument("--partition-rows", type=int, default=None, help="ctfile.partitionRows (default rows / 40)")
    p.add_argument("--batches", type=int, default=None, help="upsert MERGE batches (default 20; quick 3)")
    p.add_argument("--random-batches", type=int, default=None, help="random-key MERGE batches (default --batches)")
    p.add_argument("--insert-runs", type=int, default=None, help="timed inserts of each kind (default 3; quick 1)")
    p.add_argument("--scan-runs", type=int, default=1, help="timed change scans of each MERGE (after one warm-up)")
    p.add_argument("--multi-rows", type=int, default=None, help="rows of the (a, b) tables (default 2,000,000; quick 4,000)")
    p.add_argument("--multi-merges", type=int, default=3, help="MERGEs keyed on (a, b)")
    p.add_argument("--recluster-rows", type=int, default=None, help="rows of (6) (default 1,000,000; quick 4,000)")
    p.add_argument("--recluster-batches", type=int, default=None, help="MERGEs of (6) (default 60; quick 30)")
    p.add_argument("--only", default="insert,upsert,random,multi,recluster", help="comma-separated parts")
    p.add_argument("--profile", choices=("insert", "upsert", "random"),
                   help="pyinstrument of the clustered insert or of one clustered MERGE instead of the run")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    a = p.parse_args(argv)
    a.rows = a.rows or (4_000 if a.quick else 10_000_000)
    a.partition_rows = a.partition_rows or max(1, a.rows // 40)
    a.batches = a.batches or (3 if a.quick else 20)
    a.random_batches = a.random_batches or a.batches
    a.insert_runs = a.insert_runs or (1 if a.quick else 3)
    a.multi_rows = a.multi_rows or (4_000 if a.quick else 2_000_000)
    a.recluster_rows = a.recluster_rows or (4_000 if a.quick else 1_000_000)
    a.recluster_batches = a.recluster_batches or (30 if a.quick else 60)
    a.only = set(a.only.split(","))
    return a


# ---------------------------------------------------------------- data


def rows_for(ids: np.ndarray, seed: int) -> pa.Table:
    """Rows for ``ids``: the values depend on ``seed`` (a MERGE sets new ones)."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    ids_arr = pa.array(ids, pa.int64())
    name = pc.binary_join_element_wise("customer-", pc.cast(pc.bit_wise_and(ids_arr, 0xFFFF), pa.string()), "")
    ts = (1_700_000_000_000_000 + rng.integers(0, 86_400_000_000 * 365, n)).astype("datetime64[us]")
    return pa.table({
        "id": ids_arr, "name": name, "amount": rng.random(n) * 1000,
        "day": pa.array(rng.integers(19_000, 20_000, n, dtype=np.int32), pa.int32()).cast(pa.date32()),
        "ts": pa.array(ts, pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC")),
    }, schema=SCHEMA)


def batches(n: int, count: int, *, recent: bool, seed: int) -> list[np.ndarray]:
    """``count`` MERGE key batches of ``BATCH_SHARE * n`` ids, ``NEW_SHARE`` of
    them new (above the maximum so far), the rest existing ids from the most
    recent ``RECENT_SHARE * n`` (``recent``) or from all live ids."""
    rng = np.random.default_rng(seed)
    size = max(2, int(n * BATCH_SHARE))
    new = max(1, round(size * NEW_SHARE))
    top, out = n, []  # live ids are 0 .. top-1: a MERGE never deletes
    for _ in range(count):
        low = max(0, top - int(n * RECENT_SHARE)) if recent else 0
        old = low + rng.choice(top - low, size - new, replace=False)
        out.append(np.sort(np.concatenate([old, np.arange(top, top + new)])))
        top += new
    return out


def minimum_partitions(live: np.ndarray, keys: np.ndarray, partition_rows: int) -> int:
    """Distinct partitions of a perfectly clustered layout of ``live`` (sorted
    ids cut every ``partition_rows``) that hold one of ``keys``."""
    pos = np.searchsorted(live, keys)
    found = pos < len(live)
    found[found] = live[pos[found]] == keys[found]
    return len(np.unique(pos[found] // partition_rows))


# ---------------------------------------------------------------- tables


def new_table(path: Path, *, partition_rows: int, cluster_by: str | None, schema=SCHEMA):
    shutil.rmtree(path, ignore_errors=True)
    props = {"ctfile.partitionRows": str(partition_rows)}
    if cluster_by:
        props["ctfile.clusterBy"] = cluster_by
    return ctfile.create_table(path, schema, properties=props)


def copy_table(src: Path, dst: Path, properties: dict | None = None):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    t = ctfile.open_table(dst)
    if properties:
        t.set_properties(properties)
    return t


def measure_insert(a: argparse.Namespace, work: Path) -> tuple[dict, dict[str, Path]]:
    """(3): clustered vs unclustered insert of the same shuffled rows, each
    into a new table; the last tables are kept as the workload's base. The
    floor, in the same rounds: sorting the rows by id the fastest way at
    hand (NumPy's stable radix sort of the key, Arrow's ``take`` of the
    rows), the work a clustered insert of rows in memory adds and cannot
    skip."""
    data = rows_for(np.random.default_rng(a.seed).permutation(a.rows), a.seed)
    last: dict[str, Path] = {}

    def insert(kind: str, cluster_by: str | None):
        def fn():
            path = work / f"insert-{kind}"
            new_table(path, partition_rows=a.partition_rows, cluster_by=cluster_by).insert(data)
            last[kind] = path
        return fn

    def sort():
        data.take(np.argsort(data.column("id").to_numpy(), kind="stable"))

    wall, cpu = interleaved({"clustered": insert("clustered", "id"), "unclustered": insert("unclustered", None),
                             "sort": sort}, a.insert_runs, before_round=quiesce)
    out = _ratio(wall, cpu, "clustered", "unclustered")
    out["goal"], out["pass"] = GOALS["insert"], out["ratio"] <= GOALS["insert"]
    out["floor_ratio"] = (out["ms"]["unclustered"] + out["ms"]["sort"]) / out["ms"]["unclustered"]
    return out, last


def _ratio(wall: dict, cpu: dict, num: str, den: str) -> dict:
    ms = {k: 1000 * median(v) for k, v in wall.items()}
    cpu_ms = {k: 1000 * median(v) for k, v in cpu.items()}
    return {"ms": ms, "cpu_ms": cpu_ms, "ratio": ms[num] / ms[den], "cpu_ratio": cpu_ms[num] / cpu_ms[den]}


# ---------------------------------------------------------------- MERGE workloads


def timed_merge(t, source: pa.Table) -> dict:
    quiesce()
    c0, t0 = time.process_time(), time.perf_counter()
    r = t.merge(source, "id")
    ms, cpu_ms = 1000 * (time.perf_counter() - t0), 1000 * (time.process_time() - c0)
    auto = r.auto_compaction
    return {"version": r.version, "ms": ms, "cpu_ms": cpu_ms, "rewritten": r.num_removed_partitions,
            "added": r.num_added_partitions, "updated": r.num_updated_rows, "inserted": r.num_inserted_rows,
            "auto_compacted": auto.num_removed_partitions if auto else 0}


def scan_times(tables: dict, versions: dict, runs: int) -> dict[str, float]:
    """Change scan of each table's MERGE version, alternated; median ms."""
    fns = {k: (lambda t=tables[k], v=versions[k]: t.changes(start_version=v, end_version=v).to_arrow())
           for k in versions}
    wall, _ = interleaved(fns, runs)
    return {k: 1000 * median(v) for k, v in wall.items()}


def run_workload(tables: dict, key_batches: list[np.ndarray], a: argparse.Namespace, *, scanned: tuple) -> list[dict]:
    """Each batch on each table (order rotated); per batch the minimum, and
    per table the MERGE figures and the change-scan time (``scanned``)."""
    live = np.arange(a.rows, dtype=np.int64)
    names, out = list(tables), []
    for i, keys in enumerate(key_batches):
        source = rows_for(keys, a.seed + 1 + i)
        rec = {"keys": len(keys), "minimum": minimum_partitions(live, keys, a.partition_rows), "tables": {}}
        for name in names[i % len(names):] + names[: i % len(names)]:
            rec["tables"][name] = timed_merge(tables[name], source)
        scans = scan_times({k: tables[k] for k in scanned},
                           {k: rec["tables"][k]["version"] for k in scanned}, a.scan_runs)
        for k, ms in scans.items():
            rec["tables"][k]["scan_ms"] = ms
        live = np.union1d(live, keys)
        out.append(rec)
        _progress(f"batch {i + 1}/{len(key_batches)}: " + ", ".join(
            f"{k} {x['rewritten']} rewritten {x['ms']:.0f} ms" for k, x in rec["tables"].items()))
    return out


def _progress(msg: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def summarize(recs: list[dict], *, fast: str = "clustered", slow: str = "unclustered") -> dict:
    med = lambda name, key: median(r["tables"][name][key] for r in recs)  # noqa: E731
    names = list(recs[0]["tables"])
    out = {
        "rewritten": {n: [r["tables"][n]["rewritten"] for r in recs] for n in names},
        "minimum": [r["minimum"] for r in recs],
        "merge_ms": {n: med(n, "ms") for n in names}, "merge_cpu_ms": {n: med(n, "cpu_ms") for n in names},
        "scan_ms": {n: med(n, "scan_ms") for n in (fast, slow)},
    }
    out["rewrite_x_min"] = {n: [w / m for w, m in zip(out["rewritten"][n], out["minimum"])] for n in names}
    out["merge_speedup"] = out["merge_ms"][slow] / out["merge_ms"][fast]
    out["merge_cpu_speedup"] = out["merge_cpu_ms"][slow] / out["merge_cpu_ms"][fast]
    out["scan_speedup"] = out["scan_ms"][slow] / out["scan_ms"][fast]
    return out


def measure_upsert(a: argparse.Namespace, work: Path, base: dict[str, Path]) -> dict:
    """(1) and (4): the recent-key workload on clustered, unclustered and
    clustered + autoCompact copies."""
    tables = {
        "clustered": copy_table(base["clustered"], work / "upsert-clustered"),
        "unclustered": copy_table(base["unclustered"], work / "upsert-unclustered"),
        "clustered_auto": copy_table(base["clustered"], work / "upsert-auto", {"ctfile.autoCompact": "true"}),
    }
    recs = run_workload(tables, batches(a.rows, a.batches, recent=True, seed=a.seed), a,
                        scanned=("clustered", "unclustered"))
    s = summarize(recs)
    s["pass"] = {
        "rewrite_x_min": max(s["rewrite_x_min"]["clustered"]) <= GOALS["rewrite_x_min"],
        "merge_speedup": s["merge_speedup"] >= GOALS["speedup"],
        "scan_speedup": s["scan_speedup"] >= GOALS["speedup"],
    }
    live_rows = tables["clustered"].snapshot().num_records
    full = math.ceil(live_rows / a.partition_rows)
    parts = {n: len(t.snapshot().partitions) for n, t in tables.items()}
    comp = {"live_rows": live_rows, "fully_compacted": full, "partitions": parts,
            "ratio": {n: p / full for n, p in parts.items()},
            "depth": {n: _depth(t) for n, t in tables.items() if n != "unclustered"}}
    comp["pass"] = comp["ratio"]["clustered_auto"] <= GOALS["auto_compaction"]
    return {"batches": recs, "summary": s, "compaction": comp}


def _depth(t) -> float | None:
    return t.clustering_info(keys="id").average_depth


def measure_random(a: argparse.Namespace, work: Path, base: dict[str, Path]) -> dict:
    """(2): keys uniform over every live id, on fresh copies."""
    tables = {k: copy_table(base[k], work / f"random-{k}") for k in ("clustered", "unclustered")}
    recs = run_workload(tables, batches(a.rows, a.random_batches, recent=False, seed=a.seed + 1000), a,
                        scanned=("clustered", "unclustered"))
    s = summarize(recs)
    s["ratio"] = s["merge_ms"]["clustered"] / s["merge_ms"]["unclustered"]
    s["cpu_ratio"] = s["merge_cpu_ms"]["clustered"] / s["merge_cpu_ms"]["unclustered"]
    s["pass"] = s["ratio"] <= GOALS["random_floor"]
    return {"batches": recs, "summary": s}


# ---------------------------------------------------------------- (6) depth under random-key upserts


def recluster_batches(a: argparse.Namespace) -> list[np.ndarray]:
    """(6): per MERGE, half existing ids and half new ones, uniform over the
    whole key range (new ids are never multiples of the spacing, so never
    existing ones); each batch is unique and disjoint from the new ids of
    the batches before it."""
    rng = np.random.default_rng(a.seed + 6000)
    n, top = a.recluster_rows, a.recluster_rows * RECLUSTER_SPACING
    half = max(1, int(n * BATCH_SHARE) // 2)
    live, out = np.arange(0, top, RECLUSTER_SPACING, dtype=np.int64), []
    for _ in range(a.recluster_batches):
        new = np.setdiff1d(rng.integers(0, top, 2 * half), live)
        new = new[new % RECLUSTER_SPACING != 0][:half]
        keys = np.union1d(rng.choice(live, half, replace=False), new)
        live = np.union1d(live, new)
        out.append(keys)
    return out


def measure_recluster(a: argparse.Namespace, work: Path) -> dict:
    """(6): the same random-key MERGEs on copies that differ only in
    ``ctfile.autoCompactMaxDepth``; depth after each, rows rewritten by the
    MERGE and by its automatic compaction, and the statement's time."""
    n = a.recluster_rows
    partition_rows = max(1, n // 40)
    start = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "loadavg_start": list(os.getloadavg())}
    ids = np.random.default_rng(a.seed + 6001).permutation(np.arange(0, n * RECLUSTER_SPACING, RECLUSTER_SPACING))
    base = new_table(work / "recluster-base", partition_rows=partition_rows, cluster_by="id")
    base.insert(rows_for(ids, a.seed))
    base.set_properties({"ctfile.autoCompact": "true"})
    tables = {k: copy_table(Path(base.uri), work / f"recluster-{k}", {"ctfile.autoCompactMaxDepth": str(d)})
              for k, d in RECLUSTER_DEPTHS.items()}
    recs = []
    for i, keys in enumerate(recluster_batches(a)):
        source, rec = rows_for(keys, a.seed + 7 + i), {"keys": len(keys)}
        for name in list(tables)[i % len(tables):] + list(tables)[: i % len(tables)]:
            t = tables[name]
            quiesce()  # the copies alternate first, as _timing.interleaved does
            t0 = time.perf_counter()
            r = t.merge(source, "id")
            ms = 1000 * (time.perf_counter() - t0)
            info, auto = t.clustering_info(), r.auto_compaction
            rec[name] = {"ms": ms, "average_depth": info.average_depth, "max_depth": info.max_depth,
                         "partitions": info.partitions,
                         "merge_rows": r.num_updated_rows + r.num_inserted_rows + r.num_copied_rows,
                         "auto_rows": auto.num_copied_rows if auto is not None and auto.committed else 0}
        recs.append(rec)
        _progress(f"recluster batch {i + 1}/{a.recluster_batches}: " + ", ".join(
            f"{k} depth {x['max_depth']} auto {x['auto_rows']}" for k, x in rec.items() if k != "keys"))
    summary = {}
    for name, bound in RECLUSTER_DEPTHS.items():
        col = [r[name] for r in recs]
        merge_rows, auto_rows = sum(x["merge_rows"] for x in col), sum(x["auto_rows"] for x in col)
        summary[name] = {
            "bound": bound, "worst_max_depth": max(x["max_depth"] for x in col),
            "final_average_depth": col[-1]["average_depth"], "merge_rows": merge_rows, "auto_rows": auto_rows,
            "auto_per_merge_rows": auto_rows / merge_rows, "median_ms": median(x["ms"] for x in col),
            "total_s": sum(x["ms"] for x in col) / 1000,
        }
        summary[name]["pass"] = summary[name]["worst_max_depth"] <= bound
    return {"rows": n, "partition_rows": partition_rows, **start, "loadavg_end": list(os.getloadavg()),
            "batches": recs, "summary": summary}


# ---------------------------------------------------------------- (5) multi-column keys


def z_values(table: pa.Table, columns: tuple[str, ...]) -> np.ndarray:
    """Z-order value of each row: per column the dense rank, scaled to
    ``Z_BITS`` bits, then the bits interleaved (column 0 the highest)."""
    scaled = []
    for c in columns:
        r = pc.rank(table.column(c), sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.uint64) - 1
        scaled.append((r << np.uint64(Z_BITS)) // np.uint64(int(r.max()) + 1))
    z = np.zeros(table.num_rows, dtype=np.uint64)
    k = len(columns)
    for bit in range(Z_BITS):
        for j, r in enumerate(scaled):
            z |= ((r >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * k + (k - 1 - j))
    return z


def multi_tables(a: argparse.Namespace, work: Path) -> tuple[dict, pa.Table]:
    """The lexicographic (``clusterBy = a,b``) and the Z-ordered table of the same rows."""
    rng = np.random.default_rng(a.seed + 5)
    n = a.multi_rows
    data = pa.table({"a": pa.array(rng.integers(0, REGIONS, n, dtype=np.int32)),
                     "b": pa.array(rng.permutation(n).astype(np.int64)), "v": rng.random(n)}, schema=MULTI_SCHEMA)
    rows = max(1, n // MULTI_PARTITIONS)
    lex = new_table(work / "multi-lex", partition_rows=rows, cluster_by="a,b", schema=MULTI_SCHEMA)
    lex.insert(data)
    z = new_table(work / "multi-z", partition_rows=rows, cluster_by=None, schema=MULTI_SCHEMA)
    z.insert(data.take(np.argsort(z_values(data, ("a", "b")), kind="stable")))
    return {"lexicographic": lex, "zorder": z}, data


def predicate_reads(tables: dict, pred: pc.Expression, runs: int) -> dict:
    snaps = {k: t.snapshot() for k, t in tables.items()}
    read = {k: len({task.partition.path for task in s.scan_tasks(filter=pred)}) for k, s in snaps.items()}
    rows = {k: s.to_arrow(filter=pred).num_rows for k, s in snaps.items()}
    assert len(set(rows.values())) == 1, rows
    wall, _ = interleaved({k: (lambda s=s: s.to_arrow(filter=pred)) for k, s in snaps.items()}, runs)
    return {"partitions_read": read, "rows": rows["lexicographic"], "ms": {k: 1000 * median(v) for k, v in wall.items()}}


def box_merge(t, source: pa.Table) -> dict:
    quiesce()
    t0 = time.perf_counter()
    tx = t.transaction(operation="MERGE", parameters={"on": ["a", "b"]})
    try:
        tx.merge(source, ["a", "b"])
        read = len(tx.read_partitions)
        r = tx.commit()
    except BaseException:
        tx.abort()
        raise
    return {"ms": 1000 * (time.perf_counter() - t0), "read": read, "rewritten": r.num_removed_partitions,
            "updated": r.num_updated_rows}


def measure_multi(a: argparse.Namespace, work: Path) -> dict:
    """(5): predicates on a alone, b alone, and MERGEs keyed on (a, b)."""
    tables, data = multi_tables(a, work)
    rng = np.random.default_rng(a.seed + 6)
    n, runs = a.multi_rows, 3 if a.quick else 7
    out = {"rows": n, "partitions": {k: len(t.snapshot().partitions) for k, t in tables.items()},
           "a": predicate_reads(tables, pc.field("a") == int(rng.integers(REGIONS)), runs),
           "b": predicate_reads(tables, pc.field("b") == int(rng.integers(n)), runs), "merges": []}
    for i in range(a.multi_merges):
        a0, b0 = int(rng.integers(0, int(REGIONS * (1 - BOX)))), int(rng.integers(0, int(n * (1 - BOX))))
        box = data.filter((pc.field("a") >= a0) & (pc.field("a") < a0 + int(REGIONS * BOX))
                          & (pc.field("b") >= b0) & (pc.field("b") < b0 + int(n * BOX)))
        source = box.set_column(2, "v", pa.array(rng.random(box.num_rows)))
        names = list(tables)[i % 2:] + list(tables)[: i % 2]
        out["merges"].append({"keys": box.num_rows, **{k: box_merge(tables[k], source) for k in names}})
    return out


# ---------------------------------------------------------------- report


def _ok(flag: bool) -> str:
    return "ok" if flag else "**MISS**"


def _md_merges(title: str, w: dict) -> list[str]:
    s = w["summary"]
    names = list(s["merge_ms"])
    lines = [f"### {title}", "", "| MERGE | minimum | " + " | ".join(f"{n} rewritten" for n in names)
             + " | " + " | ".join(f"{n} ms" for n in names) + " | clustered scan ms | unclustered scan ms |",
             "|---:|---:|" + "---:|" * (2 * len(names) + 2)]
    for i, r in enumerate(w["batches"], 1):
        t = r["tables"]
        lines.append(f"| {i} | {r['minimum']} | " + " | ".join(str(t[n]["rewritten"]) for n in names) + " | "
                     + " | ".join(f"{t[n]['ms']:.0f}" for n in names)
                     + f" | {t['clustered']['scan_ms']:.0f} | {t['unclustered']['scan_ms']:.0f} |")
    lines.append("| median |" + " |" * (len(names) + 1) + " " + " | ".join(f"{s['merge_ms'][n]:.0f}" for n in names)
                 + f" | {s['scan_ms']['clustered']:.0f} | {s['scan_ms']['unclustered']:.0f} |")
    return lines + [""]


def _md_goals(r: dict) -> list[str]:
    g, ins = r["meta"]["goals"], r["insert"]
    lines = ["| figure | goal | measured | status |", "|---|---|---|---|",
             f"| clustered insert / unclustered insert | <= {g['insert']}x | {ins['ratio']:.2f}x "
             f"({ins['ms']['clustered']:.0f} vs {ins['ms']['unclustered']:.0f} ms; CPU {ins['cpu_ratio']:.2f}x; "
             f"sorting alone {ins['ms']['sort']:.0f} ms: floor {ins['floor_ratio']:.2f}x) "
             f"| {_ok(ins['pass'])} |"]
    if "upsert" in r:
        s, c = r["upsert"]["summary"], r["upsert"]["compaction"]
        x = s["rewrite_x_min"]["clustered"]
        lines += [
            f"| upsert: clustered rewritten / minimum, every MERGE | <= {g['rewrite_x_min']}x | max {max(x):.2f}x, "
            f"median {median(x):.2f}x (with autoCompact: max {max(s['rewrite_x_min']['clustered_auto']):.2f}x) "
            f"| {_ok(s['pass']['rewrite_x_min'])} |",
            f"| upsert: MERGE unclustered / clustered (median) | >= {g['speedup']}x | {s['merge_speedup']:.1f}x "
            f"({s['merge_ms']['unclustered']:.0f} vs {s['merge_ms']['clustered']:.0f} ms; CPU "
            f"{s['merge_cpu_speedup']:.1f}x) | {_ok(s['pass']['merge_speedup'])} |",
            f"| upsert: change scan unclustered / clustered (median) | >= {g['speedup']}x | {s['scan_speedup']:.1f}x "
            f"({s['scan_ms']['unclustered']:.0f} vs {s['scan_ms']['clustered']:.0f} ms) "
            f"| {_ok(s['pass']['scan_speedup'])} |",
            f"| auto compaction: live partitions / fully compacted | <= {g['auto_compaction']}x | "
            f"{c['ratio']['clustered_auto']:.2f}x ({c['partitions']['clustered_auto']} vs {c['fully_compacted']}; "
            f"without autoCompact {c['partitions']['clustered']} = {c['ratio']['clustered']:.2f}x) | {_ok(c['pass'])} |",
        ]
    if "random" in r:
        s = r["random"]["summary"]
        lines.append(f"| random keys: MERGE clustered / unclustered (median) | <= {g['random_floor']}x | "
                     f"{s['ratio']:.2f}x ({s['merge_ms']['clustered']:.0f} vs {s['merge_ms']['unclustered']:.0f} ms; "
                     f"CPU {s['cpu_ratio']:.2f}x) | {_ok(s['pass'])} |")
    if "recluster" in r:
        s = r["recluster"]["summary"]
        for name in ("depth_2", "depth_3"):
            x, u = s[name], s["unbounded"]
            lines.append(
                f"| random-key upserts with autoCompact: max depth after every MERGE (autoCompactMaxDepth "
                f"{x['bound']}) | <= {x['bound']} | {x['worst_max_depth']} (final average {x['final_average_depth']:.2f}; "
                f"unbounded {u['worst_max_depth']}, final average {u['final_average_depth']:.2f}); compaction rewrote "
                f"{x['auto_per_merge_rows']:.2f}x the rows the MERGEs wrote (unbounded {u['auto_per_merge_rows']:.2f}x) "
                f"| {_ok(x['pass'])} |")
    return lines + [""]


def _md_recluster(w: dict) -> list[str]:
    names = list(RECLUSTER_DEPTHS)
    lines = [f"### (6) depth under random-key upserts with autoCompact ({w['rows']:,} rows, partitionRows "
             f"{w['partition_rows']:,}; autoCompactMaxDepth 2, 3 and unbounded)", "",
             f"Measured {w['date']}, load average {w['loadavg_start'][0]:.1f} at start, {w['loadavg_end'][0]:.1f} at "
             "end. Each MERGE: half existing ids, half new ids, both uniform over the key range; the copies "
             "alternate first. Compacted rows: what the MERGE's automatic compaction rewrote.", "",
             "| MERGE | keys | " + " | ".join(f"{n} avg / max depth" for n in names) + " | "
             + " | ".join(f"{n} compacted rows" for n in names) + " | " + " | ".join(f"{n} ms" for n in names) + " |",
             "|---:|---:|" + "---:|" * (3 * len(names))]
    for i, r in enumerate(w["batches"], 1):
        lines.append(f"| {i} | {r['keys']} | "
                     + " | ".join(f"{r[n]['average_depth']:.2f} / {r[n]['max_depth']}" for n in names) + " | "
                     + " | ".join(f"{r[n]['auto_rows']:,}" for n in names) + " | "
                     + " | ".join(f"{r[n]['ms']:.0f}" for n in names) + " |")
    s = w["summary"]
    lines += ["", "| copy | worst max depth | final average depth | rows the MERGEs wrote | rows compaction rewrote "
              "| ratio | median MERGE ms | all MERGEs s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        x = s[n]
        lines.append(f"| {n} | {x['worst_max_depth']} | {x['final_average_depth']:.2f} | {x['merge_rows']:,} | "
                     f"{x['auto_rows']:,} | {x['auto_per_merge_rows']:.2f} | {x['median_ms']:.0f} | {x['total_s']:.1f} |")
    return lines + [""]


def _md_multi(m: dict) -> list[str]:
    lines = [f"### (5) multi-column keys: lexicographic vs Z-order ({m['rows']:,} rows, "
             f"{m['partitions']['lexicographic']} / {m['partitions']['zorder']} partitions)", "",
             "| statement | lexicographic partitions read (rewritten) | Z-order partitions read (rewritten) "
             "| lexicographic ms | Z-order ms |", "|---|---:|---:|---:|---:|"]
    for k in ("a", "b"):
        x = m[k]
        lines.append(f"| `{k} = const` ({x['rows']:,} rows) | {x['partitions_read']['lexicographic']} | "
                     f"{x['partitions_read']['zorder']} | {x['ms']['lexicographic']:.1f} | {x['ms']['zorder']:.1f} |")
    for i, x in enumerate(m["merges"], 1):
        lx, z = x["lexicographic"], x["zorder"]
        lines.append(f"| MERGE on (a, b) #{i} ({x['keys']:,} keys in a 5% x 5% box) | {lx['read']} ({lx['rewritten']}) | "
                     f"{z['read']} ({z['rewritten']}) | "
                     f"{lx['ms']:.0f} | {z['ms']:.0f} |")
    lex, z = ({f: sum(x[k][f] for x in m["merges"]) for f in ("read", "rewritten")} for k in ("lexicographic", "zorder"))
    lines += ["", f"Partitions read: `a = const` {m['a']['partitions_read']['lexicographic']} lexicographic vs "
              f"{m['a']['partitions_read']['zorder']} Z-order; `b = const` {m['b']['partitions_read']['lexicographic']} "
              f"vs {m['b']['partitions_read']['zorder']}; the {len(m['merges'])} MERGEs on (a, b) read {lex['read']} vs "
              f"{z['read']} and rewrote {lex['rewritten']} vs {z['rewritten']} in all."]
    return lines + [""]


def command(m: dict, multi: dict | None) -> str:
    """The command line that reproduces a run (every option is in ``meta``)."""
    opts = (f"--rows {m['rows']} --partition-rows {m['partition_rows']} --batches {m['batches']} "
            f"--random-batches {m['random_batches']} --insert-runs {m['insert_runs']} --scan-runs {m['scan_runs']}")
    if m.get("recluster_rows"):
        opts += f" --recluster-rows {m['recluster_rows']} --recluster-batches {m['recluster_batches']}"
    if multi:
        opts += f" --multi-rows {multi['rows']} --multi-merges {len(multi['merges'])}"
    return f"PYTHONPATH=$PWD/src .venv/bin/python benchmarks/bench_clustering.py {opts}"


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = [f"## Clustering: layout for upserts ({m['mode']}, {m['date']})", "",
             f"{m['rows']:,} rows, ctfile.partitionRows = {m['partition_rows']:,}; MERGE batches of "
             f"{m['batch_keys']:,} keys ({m['new_share']:.0%} new ids); load average {m['loadavg_start'][0]:.1f} at "
             f"start, {m['loadavg_end'][0]:.1f} at end. Command: `{command(m, r.get('multi'))}`.", ""]
    lines += _md_goals(r)
    if "upsert" in r:
        lines += _md_merges(f"(1) upsert, keys from the most recent {m['recent_share']:.0%} of ids", r["upsert"])
    if "random" in r:
        lines += _md_merges("(2) random keys over all ids", r["random"])
    if "multi" in r:
        lines += _md_multi(r["multi"])
    if "recluster" in r:
        lines += _md_recluster(r["recluster"])
    return "\n".join(lines)


# ---------------------------------------------------------------- running


def profile(a: argparse.Namespace, work: Path) -> None:
    """pyinstrument of the clustered insert, or of one clustered MERGE of
    the chosen workload (on the calling thread; pyarrow's pool is not sampled)."""
    from pyinstrument import Profiler

    t = new_table(work / "profile", partition_rows=a.partition_rows, cluster_by="id")
    data = rows_for(np.random.default_rng(a.seed).permutation(a.rows), a.seed)
    prof = Profiler(interval=0.001)
    if a.profile == "insert":
        with prof:
            t.insert(data)
    else:
        t.insert(data)
        keys = batches(a.rows, 1, recent=a.profile == "upsert", seed=a.seed)[0]
        with prof:
            t.merge(rows_for(keys, a.seed + 1), "id")
    print(prof.output_text(unicode=False, color=False))


def measure(a: argparse.Namespace, work: Path) -> dict:
    out: dict = {"meta": {
        "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "rows": a.rows, "partition_rows": a.partition_rows, "batches": a.batches, "random_batches": a.random_batches,
        "batch_keys": max(2, int(a.rows * BATCH_SHARE)), "new_share": NEW_SHARE, "recent_share": RECENT_SHARE,
        "insert_runs": a.insert_runs, "scan_runs": a.scan_runs, "goals": GOALS, "ctfile": ctfile.__file__,
        "recluster_rows": a.recluster_rows, "recluster_batches": a.recluster_batches,
        "loadavg_start": list(os.getloadavg()), "seconds": {},
    }}
    t0 = time.perf_counter()
    out["insert"], base = measure_insert(a, work)
    out["meta"]["seconds"]["insert"] = time.perf_counter() - t0
    for part, fn in (("upsert", measure_upsert), ("random", measure_random)):
        if part in a.only:
            t0 = time.perf_counter()
            _progress(f"{part} ...")
            out[part] = fn(a, work, base)
            out["meta"]["seconds"][part] = time.perf_counter() - t0
    if "multi" in a.only:
        t0 = time.perf_counter()
        out["multi"] = measure_multi(a, work)
        out["meta"]["seconds"]["multi"] = time.perf_counter() - t0
    if "recluster" in a.only:
        t0 = time.perf_counter()
        _progress("recluster ...")
        out["recluster"] = measure_recluster(a, work)
        out["meta"]["seconds"]["recluster"] = time.perf_counter() - t0
    out["meta"]["loadavg_end"] = list(os.getloadavg())
    return out


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    work = a.work_dir / "clustering"
    work.mkdir(parents=True, exist_ok=True)
    try:
        if a.profile:
            profile(a, work)
            return 0
        res = measure(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return save_and_print(a.out, res, markdown, quiet=a.no_print)


if __name__ == "__main__":
    sys.exit(main())
