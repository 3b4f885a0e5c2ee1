#!/usr/bin/env python
"""Cold change scans (issue 13, item 4): a change scan from a fresh ``open_table``
costs the interval, not the table.

(1) Cold one-commit change scan:
    ``ctfile.open_table(uri).changes(start_version=2, end_version=2, information="append_only").to_arrow()``
    on a table whose version 1 added ``--partitions`` one-row partitions (default
    10,000) vs the same on a table whose version 1 added 10; version 2 adds one
    row to both, and that is the commit scanned (goal: <= 1.2x). Two shapes:
    ``checkpoint`` (the table as ctfile writes it by default: a version whose
    entry holds 1,000 or more adds and removes is checkpointed, SPEC
    §Checkpoints, so version 1 has a checkpoint) and ``log`` (checkpoints off,
    ``ctfile.checkpointInterval = 0``: the 10,000 adds stay in the entry of
    version 1, which every open must read).
(2) Cold open + snapshot, for reference (no goal): ``ctfile.open_table(uri).snapshot()``
    on the same tables; this one needs every live partition.

Each figure is the ratio of the medians of ``--runs`` runs of the large and the
small table, run in alternation in one process after a warm-up of each (files
warm in the page cache: the cost measured is ctfile's, not the disk's). Every
run opens the table anew: no log entry or state is cached between runs.

Usage::

    .venv/bin/python benchmarks/bench_cold.py            # 10,000 vs 10 partitions (builds ~2 min once)
    .venv/bin/python benchmarks/bench_cold.py --quick    # 1,000 vs 10, well under a minute

Results go to ``benchmarks/results/cold.json`` (``--out``) and a markdown table
is printed. Tables are cached under ``benchmarks/work/cold/`` (gitignored) and
rebuilt when their build parameters change.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
from pathlib import Path
from statistics import median

import pyarrow as pa

import ctfile
from ctfile.log.transaction import LARGE_ENTRY_ACTIONS
from _timing import interleaved, save_and_print

HERE = Path(__file__).resolve().parent
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "cold.json"
BUILD_FORMAT = 2  # bump when the way tables are built changes: cached tables are rebuilt
GOAL = 1.2
SHAPES = ("log", "checkpoint")
SCANNED_VERSION = 2


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1,000 vs 10 partitions, 7 runs")
    p.add_argument("--partitions", type=int, default=None, help="live partitions of the large table (default 10000; quick 1000)")
    p.add_argument("--small-partitions", type=int, default=10, help="live partitions of the small table (default 10)")
    p.add_argument("--runs", type=int, default=None, help="timed runs of each measurement (default 31; quick 7)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached tables")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    a = p.parse_args(argv)
    a.partitions = a.partitions or (1000 if a.quick else 10_000)
    a.runs = max(5, a.runs or (7 if a.quick else 31))
    return a


# ---------------------------------------------------------------- tables


def build(root: Path, partitions: int, shape: str, *, rebuild: bool) -> str:
    """A table at ``root`` whose version 1 adds ``partitions`` one-row partitions
    and version 2 one more; with ``shape`` "log", checkpoints off (otherwise
    version 1 is checkpointed as a large entry, which the build checks)."""
    marker = root / "complete.json"
    spec = {"build_format": BUILD_FORMAT, "partitions": partitions, "shape": shape}
    table = root / "table"
    if not rebuild and marker.exists() and json.loads(marker.read_text()) == spec:
        return str(table)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    props = {"ctfile.partitionRows": "1"}
    if shape == "log":
        props["ctfile.checkpointInterval"] = "0"
    t = ctfile.create_table(table, schema, properties=props)
    t.insert(pa.table({"id": list(range(partitions)), "v": [f"row {i}" for i in range(partitions)]}, schema=schema))
    has_checkpoint = (table / "_ct_log" / f"{1:020d}.checkpoint.parquet").exists()
    if has_checkpoint != (shape == "checkpoint" and partitions >= LARGE_ENTRY_ACTIONS):
        raise SystemExit(f"unexpected checkpoint state after version 1 ({shape}, {partitions} partitions)")
    t.insert(pa.table({"id": [partitions], "v": ["the scanned row"]}, schema=schema))
    assert t.version == SCANNED_VERSION and len(t.snapshot().partitions) == partitions + 1
    marker.write_text(json.dumps(spec))
    return str(table)


def cold_scan(uri: str) -> pa.Table:
    return ctfile.open_table(uri).changes(
        start_version=SCANNED_VERSION, end_version=SCANNED_VERSION, information="append_only"
    ).to_arrow()


def cold_snapshot(uri: str) -> int:
    return ctfile.open_table(uri).snapshot().num_records


# ---------------------------------------------------------------- measuring


def _pair(fn, large: str, small: str, runs: int) -> dict:
    wall, cpu = interleaved({"large": lambda: fn(large), "small": lambda: fn(small)}, runs)
    ms = {k: 1000 * median(v) for k, v in wall.items()}
    return {
        "large_ms": ms["large"], "small_ms": ms["small"], "ratio": ms["large"] / ms["small"],
        "cpu_ratio": median(cpu["large"]) / median(cpu["small"]),
        "runs_ms": {k: [1000 * x for x in v] for k, v in wall.items()},
    }


def measure(a: argparse.Namespace) -> dict:
    out: dict = {"meta": {
        "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "partitions": a.partitions, "small_partitions": a.small_partitions, "runs": a.runs, "goal": GOAL,
        "ctfile": ctfile.__file__, "loadavg_start": list(os.getloadavg()),
    }, "scan": {}, "snapshot": {}}
    work = a.work_dir / "cold"
    for shape in SHAPES:
        large = build(work / f"{shape}-{a.partitions}", a.partitions, shape, rebuild=a.rebuild)
        small = build(work / f"{shape}-{a.small_partitions}", a.small_partitions, shape, rebuild=a.rebuild)
        rows = {len(cold_scan(u)) for u in (large, small)}
        assert rows == {1}, rows  # the one row of version 2, in both tables
        scan = _pair(cold_scan, large, small, a.runs)
        scan["pass"] = scan["ratio"] <= GOAL
        out["scan"][shape] = scan
        out["snapshot"][shape] = _pair(cold_snapshot, large, small, a.runs)
    out["meta"]["loadavg_end"] = list(os.getloadavg())
    return out


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = [
        f"## Cold change scans ({m['mode']}, {m['date']})", "",
        f"A fresh `open_table` each run; a table whose version 1 added {m['partitions']:,} one-row partitions vs one "
        f"whose version 1 added {m['small_partitions']}; version 2 adds one row to each. Medians of {m['runs']} "
        f"alternated runs; load average {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end.", "",
        "| measured | shape | large ms | small ms | ratio | CPU ratio | goal |", "|---|---|---:|---:|---:|---:|---|",
    ]
    for what, key in (("one-commit append-only change scan", "scan"), ("open + snapshot (reference)", "snapshot")):
        for shape, x in r[key].items():
            goal = (f"<= {m['goal']}x " + ("ok" if x["pass"] else "**MISS**")) if "pass" in x else "none"
            lines.append(f"| {what} | {shape} | {x['large_ms']:.2f} | {x['small_ms']:.2f} | {x['ratio']:.2f}x | "
                         f"{x['cpu_ratio']:.2f}x | {goal} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    res = measure(a)
    return save_and_print(a.out, res, markdown, quiet=a.no_print)


if __name__ == "__main__":
    sys.exit(main())
