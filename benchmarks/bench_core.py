#!/usr/bin/env python
"""Core ctfile benchmarks (issue 2's performance targets).

(A) Bulk insert: ``Table.insert`` of TPC-H lineitem vs ``pyarrow.parquet.write_table``
    of the same in-memory table with the same codec (zstd, and snappy).
    Targets: time <= 1.05x, bytes <= 1.01x.
(B) Open: ``ctfile.open_table(uri).snapshot()`` on a table with many versions vs the
    same shape with few versions. Target: the difference is < 100 ms.
    B1: every version appends one row as a new partition (live partitions grow);
    B2: every version updates a few rows of a small table (constant partitions).
(C) Scan: ``Snapshot.to_arrow()`` / ``to_batches()`` of lineitem with the
    read-time damage check (every file read whole and its XXH3-128 compared
    with the log) vs the same read inside ``unchecked_reads()``. Goal: <= 1.03x
    for the full scans; a 2-column projection is informational (the check
    reads every byte of a file, the projection alone would not).

Usage::

    .venv/bin/python benchmarks/bench_core.py            # full: SF 1, 10,000 vs 100 versions
    .venv/bin/python benchmarks/bench_core.py --quick    # SF 0.01, 300 vs 30 versions (< 60 s)

Results go to ``benchmarks/results/core.json`` (``--out``) and a markdown table
is printed. Generated data is cached under ``benchmarks/data/`` and the
many-version tables under ``benchmarks/work/`` (both gitignored). See
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from _read_check import GOAL as READ_CHECK_GOAL
from _read_check import checked_vs_unchecked, markdown_rows
from _timing import quiesce

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data"
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "core.json"

# Bump when the way B tables are built changes: cached tables are rebuilt.
BUILD_FORMAT = 1


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny scale: SF 0.01, 300 vs 30 versions")
    p.add_argument("--sf", type=float, default=None, help="TPC-H scale factor for (A) (default 1; quick 0.01)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per writer and codec (default 5)")
    p.add_argument("--open-runs", type=int, default=None, help="timed opens per table (default 21; quick 9)")
    p.add_argument("--scan-runs", type=int, default=None,
                   help="timed runs of each read in (C) (default 11, enough to see 3%% on a busy machine; quick: --runs)")
    p.add_argument("--versions", type=int, default=None, help="versions of the large (B) tables (default 10000; quick 300)")
    p.add_argument("--base-versions", type=int, default=None, help="versions of the small (B) tables (default 100; quick 30)")
    p.add_argument("--only", choices=["insert", "open", "scan"], default=None, help="run one part only")
    p.add_argument("--codecs", default="zstd,snappy", help="comma-separated codecs for (A)")
    p.add_argument("--cpus", type=int, default=None,
                   help="pin this process to the first N CPUs (set before pyarrow starts its thread pools)")
    p.add_argument("--one-cpu-run", action=argparse.BooleanOptionalAction, default=None,
                   help="also run (A) pinned to one CPU in a subprocess (default: on in full mode)")
    p.add_argument("--rebuild", action="store_true", help="rebuild cached (B) tables")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    a = p.parse_args(argv)
    if a.sf is None:
        a.sf = 0.01 if a.quick else 1.0
    if a.versions is None:
        a.versions = 300 if a.quick else 10_000
    if a.base_versions is None:
        a.base_versions = 30 if a.quick else 100
    if a.open_runs is None:
        a.open_runs = 9 if a.quick else 21
    if a.scan_runs is None:
        a.scan_runs = a.runs if a.quick else 11
    if a.one_cpu_run is None:
        a.one_cpu_run = not a.quick and a.cpus is None and a.only in (None, "insert")
    if a.runs < 1 or a.open_runs < 1 or a.base_versions < 3 or a.versions <= a.base_versions:
        p.error("need runs >= 1, open-runs >= 1, base-versions >= 3 and versions > base-versions")
    return a


# ---------------------------------------------------------------- data


def _sf_name(sf: float) -> str:
    return f"sf{sf:g}"


def tpchgen_binary() -> str:
    cand = Path(sys.executable).parent / "tpchgen-cli"
    if cand.exists():
        return str(cand)
    found = shutil.which("tpchgen-cli")
    if not found:
        raise SystemExit("tpchgen-cli not found (pip install tpchgen-cli into the venv)")
    return found


def lineitem_path(data_dir: Path, sf: float) -> Path:
    """Generate (once) and return the lineitem Parquet file at scale ``sf``."""
    target = data_dir / _sf_name(sf) / "lineitem.parquet"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=target.parent))
    try:
        subprocess.run(
            [tpchgen_binary(), "parquet", "-s", f"{sf:g}", "--tables=lineitem", f"--output-dir={tmp}", "--quiet"],
            check=True,
        )
        os.replace(tmp / "lineitem.parquet", target)  # atomic: concurrent runs are safe
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_lineitem(data_dir: Path, sf: float):
    """lineitem as one in-memory pyarrow Table in the types a ctfile table stores.

    tpchgen writes ``string_view`` columns and Parquet field-id metadata; a
    ctfile ``string`` column is Arrow ``string``. Both writers get this same
    normalized table, so neither pays a cast inside the timed region.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(lineitem_path(data_dir, sf))
    fields = [
        pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type, nullable=f.nullable)
        for f in t.schema
    ]
    return t.cast(pa.schema(fields))


# ---------------------------------------------------------------- helpers


def _dir_bytes(path: Path) -> tuple[int, int]:
    files = [p for p in path.iterdir() if p.is_file()] if path.exists() else []
    return sum(p.stat().st_size for p in files), len(files)


def calibration_ms() -> float:
    """Best of 5 of ``sum(range(1_000_000))`` in ms: a machine-speed yardstick
    (~10-20 ms on an idle modern core), recorded so that figures taken on a
    busy or slow machine can be recognised as such."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        sum(range(1_000_000))
        best = min(best, time.perf_counter() - t0)
    return best * 1000


# ---------------------------------------------------------------- (A) insert


def bench_insert(table, codec: str, runs: int, scratch: Path) -> dict:
    import pyarrow.parquet as pq

    import ctfile

    scratch.mkdir(parents=True, exist_ok=True)

    def run_ctfile() -> tuple[float, float, int, int, int]:
        d = Path(tempfile.mkdtemp(prefix="ct-", dir=scratch))
        try:
            t = ctfile.create_table(d / "t", table.schema, compression=codec)
            quiesce()
            c0, t0 = time.process_time(), time.perf_counter()
            res = t.insert(table)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert res.committed and res.num_inserted_rows == table.num_rows
            data_bytes, nfiles = _dir_bytes(d / "t" / "data")
            log_bytes, _ = _dir_bytes(d / "t" / "_ct_log")
            return elapsed, cpu, data_bytes, nfiles, log_bytes
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def run_pq() -> tuple[float, float, int]:
        d = Path(tempfile.mkdtemp(prefix="pq-", dir=scratch))
        try:
            path = d / "lineitem.parquet"
            quiesce()
            c0, t0 = time.process_time(), time.perf_counter()
            pq.write_table(table, path, compression=codec)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            return elapsed, cpu, path.stat().st_size
        finally:
            shutil.rmtree(d, ignore_errors=True)

    run_ctfile()  # warm-up (imports, allocator, page cache)
    run_pq()
    ct_times, pq_times, ct_cpu, pq_cpu = [], [], [], []
    ct_bytes = pq_bytes = nfiles = log_bytes = 0
    for i in range(runs):
        # Alternate which writer goes first so drift is shared fairly.
        order = (run_ctfile, run_pq) if i % 2 == 0 else (run_pq, run_ctfile)
        for fn in order:
            if fn is run_ctfile:
                t, c, ct_bytes, nfiles, log_bytes = fn()
                ct_times.append(t)
                ct_cpu.append(c)
            else:
                t, c, pq_bytes = fn()
                pq_times.append(t)
                pq_cpu.append(c)
    ct_med, pq_med = median(ct_times), median(pq_times)
    return {
        "codec": codec,
        "rows": table.num_rows,
        "runs": runs,
        "ctfile_s": ct_med,
        "pyarrow_s": pq_med,
        "time_ratio": ct_med / pq_med,
        "ctfile_runs_s": ct_times,
        "pyarrow_runs_s": pq_times,
        # Process CPU time (all threads): less sensitive to other load than wall time.
        "ctfile_cpu_s": median(ct_cpu),
        "pyarrow_cpu_s": median(pq_cpu),
        "cpu_ratio": median(ct_cpu) / median(pq_cpu),
        "ctfile_bytes": ct_bytes,
        "pyarrow_bytes": pq_bytes,
        "bytes_ratio": ct_bytes / pq_bytes,
        "ctfile_files": nfiles,
        "ctfile_log_bytes": log_bytes,
        "pass_time": ct_med / pq_med <= 1.05,
        "pass_bytes": ct_bytes / pq_bytes <= 1.01,
    }


def run_insert_part(args: argparse.Namespace) -> dict:
    table = load_lineitem(args.data_dir, args.sf)
    scratch = args.work_dir / "insert-scratch"
    out = {}
    try:
        for codec in [c.strip() for c in args.codecs.split(",") if c.strip()]:
            out[codec] = bench_insert(table, codec, args.runs, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def run_insert_one_cpu(args: argparse.Namespace) -> dict | None:
    """(A) again in a child pinned to one CPU: ctfile's own overhead without its thread pool's edge."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one_cpu.json"
        cmd = [
            sys.executable, str(Path(__file__).resolve()), "--only", "insert", "--cpus", "1",
            "--sf", f"{args.sf:g}", "--runs", str(args.runs), "--codecs", args.codecs,
            "--data-dir", str(args.data_dir), "--work-dir", str(args.work_dir),
            "--out", str(out), "--no-print", "--no-one-cpu-run",
        ]
        r = subprocess.run(cmd)
        if r.returncode != 0:
            print(f"warning: one-CPU run failed with exit code {r.returncode}", file=sys.stderr)
            return None
        return json.loads(out.read_text())["insert"]


# ---------------------------------------------------------------- (B) open


def _build_appends(uri: Path, n_versions: int, rows) -> None:
    """B1: version 0 creates, versions 1..n-1 each append one row (one partition)."""
    import ctfile

    t = ctfile.create_table(uri, rows.schema)
    for v in range(1, n_versions):
        t.insert(rows.slice((v - 1) % rows.num_rows, 1))


def _build_updates(uri: Path, n_versions: int, rows) -> None:
    """B2: version 1 inserts 1,000 rows as 10 partitions of 100; versions
    2..n-1 each update the rows of one order (1-7 rows, one or two partitions)."""
    import pyarrow.compute as pc

    import ctfile

    base = rows.slice(0, 1000)
    t = ctfile.create_table(uri, base.schema, partition_rows=100)
    t.insert(base)
    keys = sorted(set(base.column("l_orderkey").to_pylist()))
    for v in range(2, n_versions):
        key = keys[v % len(keys)]
        r = t.update(pc.field("l_orderkey") == key, {"l_comment": f"update {v}"})
        assert r.committed and r.version == v, r


SHAPES = {
    "B1_appends": (_build_appends, "each version appends one 1-row partition (live partitions grow with versions)"),
    "B2_updates": (_build_updates, "each version updates one order's rows in a 1,000-row, 10-partition table"),
}


def ensure_table(work_dir: Path, shape: str, n_versions: int, rows, rebuild: bool) -> tuple[Path, float | None]:
    """The cached table of ``shape`` with versions 0..n_versions-1; built if needed.

    Returns (uri, build seconds or None when cached).
    """
    import ctfile

    root = work_dir / "open" / f"{shape}-{n_versions}"
    uri = root / "table"
    marker = root / "complete.json"
    params = {"shape": shape, "versions": n_versions, "build_format": BUILD_FORMAT}
    if not rebuild and marker.exists():
        try:
            ok = json.loads(marker.read_text()).get("params") == params
            if ok:
                _refresh_checkpoint(uri)
            ok = ok and ctfile.open_table(uri).version == n_versions - 1
        except Exception:
            ok = False
        if ok:
            return uri, None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    SHAPES[shape][0](uri, n_versions, rows)
    build_s = time.perf_counter() - t0
    marker.write_text(json.dumps({"params": params, "build_s": build_s}))
    return uri, build_s


def _refresh_checkpoint(uri: Path) -> None:
    """Give a cached table the newest checkpoint a fresh build would have.

    A table cached by an older ctfile holds checkpoints in a format this one
    does not read (``*.checkpoint.json.zst`` before the Parquet checkpoints):
    readers skip them and replay the whole log, which is not what (B)
    measures. Rebuilding takes ~15 minutes; instead the checkpoint of the
    newest multiple of the checkpoint interval is written again through the
    public API (one full replay, seconds), and stale files are removed.
    """
    import ctfile
    from ctfile.format.paths import LOG_DIR, checkpoint_path, parse_checkpoint_name

    for f in (uri / LOG_DIR).glob("*.checkpoint.*"):
        if parse_checkpoint_name(f.name) is None:
            f.unlink()  # an older checkpoint format
    t = ctfile.open_table(uri)
    interval = int(t.properties.get("ctfile.checkpointInterval", "100"))
    newest = (t.version // interval) * interval if interval > 0 else 0
    if newest > 0 and not (uri / checkpoint_path(newest)).exists():
        print(f"writing the checkpoint of version {newest} of {uri}", file=sys.stderr)
        t.checkpoint(version=newest)


def _describe(uri: Path) -> dict:
    import ctfile
    from ctfile.format.paths import checkpoint_path

    t = ctfile.open_table(uri)
    snap = t.snapshot()
    hint = t.log.read_hint()
    ckpt_bytes = None
    if hint is not None:
        ckpt_bytes = (uri / checkpoint_path(hint)).stat().st_size
    return {
        "version": snap.version,
        "partitions": len(snap.partitions),
        "rows": snap.num_records,
        "checkpoint_version": hint,
        "checkpoint_bytes": ckpt_bytes,
        "replayed_entries": snap.version - hint if hint is not None else snap.version + 1,
    }


def _time_open(uri: Path) -> float:
    import ctfile

    t0 = time.perf_counter()
    snap = ctfile.open_table(uri).snapshot()
    elapsed = time.perf_counter() - t0
    del snap
    return elapsed


def bench_open(args: argparse.Namespace) -> dict:
    rows = load_lineitem(args.data_dir, 0.01)
    out = {}
    for shape, (_, desc) in SHAPES.items():
        small, small_build = ensure_table(args.work_dir, shape, args.base_versions, rows, args.rebuild)
        large, large_build = ensure_table(args.work_dir, shape, args.versions, rows, args.rebuild)
        for uri in (small, large):  # warm-up: imports, page cache
            _time_open(uri)
        st, lt = [], []
        for i in range(args.open_runs):
            gc.collect()
            pair = [(small, st), (large, lt)] if i % 2 == 0 else [(large, lt), (small, st)]
            for uri, acc in pair:
                acc.append(_time_open(uri))
        s_ms, l_ms = median(st) * 1000, median(lt) * 1000
        out[shape] = {
            "description": desc,
            "versions_small": args.base_versions,
            "versions_large": args.versions,
            "small_ms": s_ms,
            "large_ms": l_ms,
            "diff_ms": l_ms - s_ms,
            "small_runs_ms": [x * 1000 for x in st],
            "large_runs_ms": [x * 1000 for x in lt],
            "small_table": _describe(small),
            "large_table": _describe(large),
            "build_s": {"small": small_build, "large": large_build},
            "pass": (l_ms - s_ms) < 100.0,
        }
    return out


# ---------------------------------------------------------------- (C) scan


def ensure_scan_table(args: argparse.Namespace) -> tuple[Path, float | None]:
    """lineitem at ``--sf`` inserted into a table with the default partition
    size (1 Mi rows: 6 partitions at SF 1), cached under ``work/scan/``."""
    import ctfile

    root = args.work_dir / "scan" / _sf_name(args.sf)
    uri, marker = root / "table", root / "complete.json"
    params = {"sf": args.sf, "build_format": BUILD_FORMAT}
    if not args.rebuild and marker.exists() and json.loads(marker.read_text()).get("params") == params:
        return uri, None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    table = load_lineitem(args.data_dir, args.sf)
    t0 = time.perf_counter()
    ctfile.create_table(uri, table.schema).insert(table)
    build_s = time.perf_counter() - t0
    marker.write_text(json.dumps({"params": params, "build_s": build_s}))
    return uri, build_s


def bench_scan(args: argparse.Namespace) -> dict:
    """(C): the snapshot scans with and without the read-time damage check."""
    import ctfile

    uri, build_s = ensure_scan_table(args)
    t = ctfile.open_table(uri)
    snap = t.snapshot()
    rows = snap.num_records
    narrow = ["l_orderkey", "l_quantity"]
    files = {"storage": t.storage, "partitions": snap.partitions}  # the check alone reads and hashes these

    def to_arrow(columns=None):
        def run():
            assert snap.to_arrow(columns=columns).num_rows == rows
        return run

    def to_batches():
        assert sum(b.num_rows for b in snap.to_batches()) == rows

    def dataset():  # how to_arrow read before the check: pyarrow's dataset over the file paths
        assert snap.to_dataset().to_table().num_rows == rows

    return {
        "description": (
            f"Snapshot reads of lineitem SF {args.sf:g} ({rows:,} rows, {len(snap.partitions)} partitions, "
            f"{sum(p.size_bytes for p in snap.partitions):,} bytes) with the read-time damage check vs inside "
            "unchecked_reads(); 'dataset' = pyarrow's dataset scanner over the same files (Snapshot.to_dataset(), "
            "how to_arrow read before the check)"
        ),
        "build_s": build_s,
        "reads": {
            "to_arrow()": checked_vs_unchecked(to_arrow(), args.scan_runs, others={"dataset": dataset}, **files),
            "to_batches()": checked_vs_unchecked(to_batches, args.scan_runs, **files),
            f"to_arrow(columns={narrow})": checked_vs_unchecked(to_arrow(narrow), args.scan_runs, **files),
        },
        "goal_reads": ["to_arrow()", "to_batches()"],
    }


# ---------------------------------------------------------------- report


def markdown(result: dict) -> str:
    lines = []
    meta = result["meta"]
    lines.append(f"## ctfile core benchmarks ({meta['mode']}, {meta['started']})")
    lines.append("")
    lines.append(f"`{meta['command']}` — {meta['cpu_count']} CPUs, Python {meta['python']}, pyarrow {meta['pyarrow']}")
    if meta.get("loadavg_start") is not None:
        lines.append(
            f"load average at start {meta['loadavg_start'][0]:.2f}, at end {meta['loadavg_end'][0]:.2f}; "
            f"calibration (sum(range(1e6)), best of 5) {meta['calibration_ms_start']:.1f} ms at start, "
            f"{meta['calibration_ms_end']:.1f} ms at end"
        )
    for key, title in (("insert", "all CPUs"), ("insert_1cpu", "pinned to 1 CPU, informational")):
        if not result.get(key):
            continue
        lines.append("")
        lines.append(f"### (A) insert of TPC-H lineitem SF {meta['sf']:g} ({title})")
        lines.append("")
        lines.append("| codec | rows | ctfile s | pq.write_table s | time ratio (<= 1.05) | CPU-time ratio | ctfile bytes | pq bytes | bytes ratio (<= 1.01) | files |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for codec, r in result[key].items():
            lines.append(
                f"| {codec} | {r['rows']:,} | {r['ctfile_s']:.3f} | {r['pyarrow_s']:.3f} | "
                f"{r['time_ratio']:.3f} {'ok' if r['pass_time'] else 'MISS'} | {r['cpu_ratio']:.3f} | {r['ctfile_bytes']:,} | "
                f"{r['pyarrow_bytes']:,} | {r['bytes_ratio']:.4f} {'ok' if r['pass_bytes'] else 'MISS'} | "
                f"{r['ctfile_files']} |"
            )
    if result.get("open"):
        lines.append("")
        lines.append("### (B) open_table + snapshot (warm cache, medians)")
        lines.append("")
        lines.append("| shape | versions | partitions | ms | versions | partitions | ms | diff ms (< 100) |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for shape, r in result["open"].items():
            lines.append(
                f"| {shape} | {r['versions_small']:,} | {r['small_table']['partitions']:,} | {r['small_ms']:.1f} | "
                f"{r['versions_large']:,} | {r['large_table']['partitions']:,} | {r['large_ms']:.1f} | "
                f"{r['diff_ms']:.1f} {'ok' if r['pass'] else 'MISS'} |"
            )
    if result.get("scan"):
        sc = result["scan"]
        lines += ["", "### (C) snapshot scan with and without the read-time damage check (medians of alternated runs)", "",
                  sc["description"] + ".", ""]
        lines += markdown_rows(sc["reads"], goal=set(sc["goal_reads"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cpus]))
    import pyarrow as pa

    import ctfile

    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    result: dict = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "started": started,
            "command": " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else " ".join(["bench_core.py", *argv]),
            "sf": args.sf,
            "cpu_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "python": platform.python_version(),
            "pyarrow": pa.__version__,
            "ctfile": ctfile.__version__,
            "platform": platform.platform(),
            "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "calibration_ms_start": calibration_ms(),
        },
        "insert": None,
        "insert_1cpu": None,
        "open": None,
        "scan": None,
        "targets": {"insert_time_ratio_max": 1.05, "insert_bytes_ratio_max": 1.01, "open_diff_ms_max": 100.0,
                    "scan_check_ratio_max": READ_CHECK_GOAL},
    }
    t_start = time.perf_counter()
    if args.only in (None, "insert"):
        result["insert"] = run_insert_part(args)
        if args.one_cpu_run:
            result["insert_1cpu"] = run_insert_one_cpu(args)
    if args.only in (None, "open"):
        result["open"] = bench_open(args)
    if args.only in (None, "scan"):
        result["scan"] = bench_scan(args)
    result["meta"]["elapsed_s"] = time.perf_counter() - t_start
    result["meta"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    result["meta"]["calibration_ms_end"] = calibration_ms()
    passes = [r["pass_time"] and r["pass_bytes"] for r in (result["insert"] or {}).values()]
    passes += [r["pass"] for r in (result["open"] or {}).values()]
    if result["scan"]:
        passes += [result["scan"]["reads"][k]["pass"] for k in result["scan"]["goal_reads"]]
    result["all_pass"] = all(passes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, args.out)
    if not args.no_print:
        print(markdown(result))
        print(f"\nwrote {args.out} in {result['meta']['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
