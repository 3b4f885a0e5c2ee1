#!/usr/bin/env python
"""Snapshot reads across schema changes (issue 14): reading a table after a
column was added costs at most 1.1x reading it before.

One table of ``--partitions`` partitions (default 1,000) of ``--rows`` rows
each (default 2,000; 7 columns), all inserted by version 1; version 2 adds a
column (``update_schema().add_column``), version 3 renames one
(``rename_column``). No file is rewritten by either (SPEC §Schema
evolution), so the three snapshots read the same files:

- ``before``: ``snapshot(1)``, the schema the files were written with;
- ``added``: ``snapshot(2)``, one more column, null in every file. Each file
  still matches the read schema by name, so the read takes the same path as
  ``before`` (pyarrow's dataset scanner over the verified file), the new
  column filled with nulls. Goal: <= 1.1x ``before``.
- ``renamed``: ``snapshot(3)``, a column renamed. A file matched by name
  would read that column as nulls, so every file is read through its
  projection by field id (``reader/projection.py``: ``ParquetFile.read`` of
  the verified bytes, columns found by id), a different path; reported
  against the same goal.

Each is timed with ``Snapshot.to_arrow()`` and with ``to_batches()`` (every
batch consumed), the three alternated in one process (``_timing.interleaved``:
a warm-up of each, then the order rotated every round; files warm in the
page cache). The snapshot objects are made before timing: what is measured
is the read, not the replay of the log. Before timing, the three reads are
checked to return the same rows, each in its own schema.

Usage::

    .venv/bin/python benchmarks/bench_schema.py            # 1,000 partitions x 2,000 rows (table built once, ~30 s), ~3 minutes
    .venv/bin/python benchmarks/bench_schema.py --quick    # 50 partitions x 200 rows, seconds
    .venv/bin/python benchmarks/bench_schema.py --profile renamed   # pyinstrument of to_batches() instead of timing

Results go to ``benchmarks/results/schema.json`` (``--out``) and a markdown
table is printed. The table is cached under ``benchmarks/work/schema/``
(gitignored) and rebuilt when its build parameters change.
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

import numpy as np
import pyarrow as pa

import ctfile
from _timing import interleaved, save_and_print

HERE = Path(__file__).resolve().parent
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "schema.json"
BUILD_FORMAT = 1  # bump when the way the table is built changes: a cached table is rebuilt
GOAL = 1.1
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("price", pa.float64()), ("qty", pa.int32()),
    ("flag", pa.string()), ("day", pa.date32()), ("comment", pa.string()),
])
ADDED, RENAMED_FROM, RENAMED_TO = "email", "comment", "note"
VERSIONS = {"before": 1, "added": 2, "renamed": 3}
READS = ("to_arrow", "to_batches")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="50 partitions x 200 rows, 5 runs")
    p.add_argument("--partitions", type=int, default=None, help="partitions (default 1000; quick 50)")
    p.add_argument("--rows", type=int, default=None, help="rows per partition (default 2000; quick 200)")
    p.add_argument("--runs", type=int, default=None, help="timed runs of each read (default 21; quick 5; at least 5)")
    p.add_argument("--profile", choices=sorted(VERSIONS), help="profile to_batches() of this snapshot (pyinstrument) instead of timing")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached table")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    a = p.parse_args(argv)
    a.partitions = a.partitions or (50 if a.quick else 1000)
    a.rows = a.rows or (200 if a.quick else 2000)
    a.runs = max(5, a.runs or (5 if a.quick else 21))
    return a


# ---------------------------------------------------------------- the table


def _data(n: int) -> pa.Table:
    rng = np.random.default_rng(14)
    return pa.table({
        "id": np.arange(n, dtype=np.int64),
        "k": rng.integers(0, 1000, n, dtype=np.int32),
        "price": rng.random(n) * 1000,
        "qty": rng.integers(1, 50, n, dtype=np.int32),
        "flag": pa.array(np.array(["A", "N", "R"])[rng.integers(0, 3, n)]),
        "day": pa.array(rng.integers(8000, 11000, n, dtype=np.int32), pa.int32()).cast(pa.date32()),
        "comment": pa.array([f"comment {i % 9973}" for i in range(n)]),
    }, schema=SCHEMA)


def build(root: Path, partitions: int, rows: int, *, rebuild: bool) -> str:
    """The table at ``root``: version 1 inserts ``partitions`` x ``rows`` rows,
    version 2 adds a column, version 3 renames one."""
    marker = root / "complete.json"
    spec = {"build_format": BUILD_FORMAT, "partitions": partitions, "rows": rows}
    table = root / "table"
    if not rebuild and marker.exists() and json.loads(marker.read_text()) == spec:
        return str(table)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t = ctfile.create_table(table, SCHEMA, partition_rows=rows)
    t.insert(_data(partitions * rows))
    with t.update_schema() as u:
        u.add_column(ADDED, pa.string())
    with t.update_schema() as u:
        u.rename_column(RENAMED_FROM, RENAMED_TO)
    assert t.version == 3 and len(t.snapshot().partitions) == partitions
    marker.write_text(json.dumps(spec))
    return str(table)


def check_reads(snaps: dict) -> int:
    """The three snapshots hold the same rows in their own schemas (not timed)."""
    before = snaps["before"].to_arrow().sort_by("id")
    added = snaps["added"].to_arrow().sort_by("id")
    renamed = snaps["renamed"].to_arrow().sort_by("id")
    assert added.column(ADDED).null_count == added.num_rows
    assert added.drop_columns([ADDED]).equals(before)
    assert renamed.column_names == [*(RENAMED_TO if n == RENAMED_FROM else n for n in before.column_names), ADDED]
    assert renamed.column(RENAMED_TO).equals(before.column(RENAMED_FROM))
    for name, snap in snaps.items():
        assert sum(b.num_rows for b in snap.to_batches()) == before.num_rows, name
    return before.num_rows


# ---------------------------------------------------------------- measuring


def read_arrow(snap) -> int:
    return snap.to_arrow().num_rows


def read_batches(snap) -> int:
    return sum(b.num_rows for b in snap.to_batches())


def _stats(wall: dict, cpu: dict, base: str) -> dict:
    ms = {k: 1000 * median(v) for k, v in wall.items()}
    cpu_ms = {k: 1000 * median(v) for k, v in cpu.items()}
    return {
        "ms": ms, "cpu_ms": cpu_ms,
        "ratio": {k: ms[k] / ms[base] for k in ms}, "cpu_ratio": {k: cpu_ms[k] / cpu_ms[base] for k in cpu_ms},
        "runs_ms": {k: [1000 * x for x in v] for k, v in wall.items()},
    }


def measure(a: argparse.Namespace) -> dict:
    uri = build(a.work_dir / "schema" / f"t-{a.partitions}x{a.rows}", a.partitions, a.rows, rebuild=a.rebuild)
    t = ctfile.open_table(uri)
    snaps = {name: t.snapshot(v) for name, v in VERSIONS.items()}
    rows = check_reads(snaps)
    parts = snaps["before"].partitions
    out: dict = {"meta": {
        "mode": "quick" if a.quick else "full", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "partitions": len(parts), "rows": rows, "bytes": sum(p.size_bytes for p in parts), "runs": a.runs,
        "goal": GOAL, "ctfile": ctfile.__file__, "loadavg_start": list(os.getloadavg()),
    }, "reads": {}}
    for read, fn in (("to_arrow", read_arrow), ("to_batches", read_batches)):
        wall, cpu = interleaved({name: (lambda s=s: fn(s)) for name, s in snaps.items()}, a.runs)
        r = _stats(wall, cpu, "before")
        r["pass"] = {k: r["ratio"][k] <= GOAL for k in ("added", "renamed")}
        out["reads"][read] = r
    out["meta"]["loadavg_end"] = list(os.getloadavg())
    return out


def profile(a: argparse.Namespace) -> None:
    """pyinstrument over ``to_batches()`` of one snapshot: it decodes on the
    calling thread (``to_arrow()`` decodes on a pool, which pyinstrument
    does not sample)."""
    from pyinstrument import Profiler

    uri = build(a.work_dir / "schema" / f"t-{a.partitions}x{a.rows}", a.partitions, a.rows, rebuild=a.rebuild)
    snap = ctfile.open_table(uri).snapshot(VERSIONS[a.profile])
    read_batches(snap)  # warm
    prof = Profiler(interval=0.0005)
    with prof:
        for _ in range(3):
            read_batches(snap)
    print(prof.output_text(unicode=False, color=False))


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = [
        f"## Snapshot reads across schema changes ({m['mode']}, {m['date']})", "",
        f"One table, {m['partitions']:,} partitions, {m['rows']:,} rows, {m['bytes'] / 2**20:,.1f} MiB, all written by "
        "version 1; version 2 adds a column, version 3 renames one; no file rewritten. The three snapshots read the "
        f"same files, alternated in one process, medians of {m['runs']} runs; load average "
        f"{m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end.", "",
        "| read | before ms | after add_column ms | ratio (CPU ratio) | after rename_column ms | ratio (CPU ratio) | goal |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for read, x in r["reads"].items():
        ms, ratio, cpu = x["ms"], x["ratio"], x["cpu_ratio"]
        verdict = ", ".join(f"{k} " + ("ok" if ok else "**MISS**") for k, ok in x["pass"].items())
        lines.append(f"| `{read}()` | {ms['before']:.1f} | {ms['added']:.1f} | {ratio['added']:.2f} ({cpu['added']:.2f}) | "
                     f"{ms['renamed']:.1f} | {ratio['renamed']:.2f} ({cpu['renamed']:.2f}) | <= {m['goal']}x: {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    if a.profile:
        profile(a)
        return 0
    res = measure(a)
    return save_and_print(a.out, res, markdown, quiet=a.no_print)


if __name__ == "__main__":
    sys.exit(main())
