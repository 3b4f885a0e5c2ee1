#!/usr/bin/env python
"""Change-scan benchmarks (issue 3's performance targets).

(1) Append-only scan of one added partition:
    ``t.changes(start_version=v, end_version=v, information="append_only").to_arrow()``
    on a table of 1,000 partitions, vs ``pq.read_table`` of that one Parquet file
    (target <= 1.3x), and vs the same scan on a 10-partition table (target <= 1.2x).
    Narrow lineitem schema (8 columns); every partition holds ``--append-rows``
    rows and the measured (last) partition holds the same rows in both tables.
    The tables are built one partition per commit, so the large one also has
    1,000 versions.
(2) MINIMIZE vs ADDED_ONLY: the default-mode scan of one UPDATE that changes 1%
    of the rows of each of k partitions (k added + k removed partitions) vs the
    default-mode scan of one append of k partitions of the same size (plan shape
    ADDED_ONLY), k = 1, 10, 100 (target ratio <= 2x). Also the MINIMIZE scan vs
    ``pq.read_table`` of the k partitions the update added (full read).
    Full lineitem schema (16 columns).
(4) The read-time damage check: the change scans of (2) for one k (10 if
    measured) with the check (each data file read whole and its XXH3-128
    compared with the log, once per file per scan) vs inside
    ``unchecked_reads()`` (goal <= 1.03x).
(3) Peak RSS of streaming a large change set through ``to_batches()`` in a fresh
    subprocess that keeps no batch (``ru_maxrss``; target < 1 GB): the default
    scan of a full-table UPDATE of lineitem (MINIMIZE, every row an update pair)
    and the append-only scan of the whole history of the 1,000-partition table.

Every timed figure is the median of ``--runs`` runs after one warm-up run of each
side; the measurements compared with each other run in alternation (A B C A B C ...,
rotating which goes first) so drift is shared. Files are read warm (page cache).
A long-lived ``Table`` object is used, as an application would (its log-entry
cache included); ``t.changes()`` itself refreshes the table (one probe of the
log) and plans from the interval's log entries.

Usage::

    .venv/bin/python benchmarks/bench_changes.py            # full (builds ~3 GB of tables once)
    .venv/bin/python benchmarks/bench_changes.py --quick    # small sizes, < 60 s

Results go to ``benchmarks/results/changes.json`` (``--out``) and a markdown
table is printed. TPC-H lineitem is generated with ``tpchgen-cli`` and cached
under ``benchmarks/data/``; tables are cached under ``benchmarks/work/changes/``
(both gitignored) and rebuilt when their build parameters change.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from statistics import median

from _read_check import checked_vs_unchecked, markdown_rows
from _timing import interleaved
from bench_core import load_lineitem  # the core benchmark owns the TPC-H data cache

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data"
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "changes.json"

# Bump when the way tables are built changes: cached tables are rebuilt.
BUILD_FORMAT = 1

NARROW_COLUMNS = [
    "l_orderkey", "l_partkey", "l_suppkey", "l_linenumber",
    "l_quantity", "l_extendedprice", "l_shipdate", "l_comment",
]
UPDATE_SET = {"l_discount": Decimal("0.55")}  # lineitem discounts are 0.00..0.10: every update changes the row
MEMORY_TARGET_BYTES = 1 << 30

TARGETS = {"append_vs_pyarrow": 1.3, "append_vs_small_table": 1.2, "minimize_vs_added_only": 2.0}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (SF 0.01, 100 vs 10 partitions), < 60 s")
    p.add_argument("--sf", type=float, default=None, help="TPC-H scale factor of the lineitem source (default 1; quick 0.01)")
    p.add_argument("--runs", type=int, default=None, help="timed runs per measurement (default 9; quick 5; minimum 5)")
    p.add_argument("--append-partitions", type=int, default=None, help="partitions of the large (1) table (default 1000; quick 100)")
    p.add_argument("--append-small-partitions", type=int, default=10, help="partitions of the small (1) table (default 10)")
    p.add_argument("--append-rows", type=int, default=None, help="rows per partition in (1) (default 50000; quick 1000)")
    p.add_argument("--minimize-rows", type=int, default=None, help="rows per partition in (2) (default 50000; quick 500)")
    p.add_argument("--ks", default="1,10,100", help="comma-separated k for (2) (default 1,10,100)")
    p.add_argument("--measure-ks", default=None, help="measure only these k (default: all of --ks; the table is built for --ks)")
    p.add_argument("--only", default=None, help="comma-separated subset of: append,minimize,stream,check")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached tables")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    p.add_argument("--stream-child", nargs=4, metavar=("TABLE", "START", "END", "INFORMATION"),
                   help=argparse.SUPPRESS)  # internal: one streaming scan, JSON on stdout
    a = p.parse_args(argv)
    if a.stream_child:
        return a
    if a.sf is None:
        a.sf = 0.01 if a.quick else 1.0
    if a.runs is None:
        a.runs = 5 if a.quick else 9
    if a.append_partitions is None:
        a.append_partitions = 100 if a.quick else 1000
    if a.append_rows is None:
        a.append_rows = 1000 if a.quick else 50_000
    if a.minimize_rows is None:
        a.minimize_rows = 500 if a.quick else 50_000
    a.ks = [int(x) for x in a.ks.split(",") if x.strip()]
    a.measure_ks = a.ks if a.measure_ks is None else [int(x) for x in a.measure_ks.split(",") if x.strip()]
    if not set(a.measure_ks) <= set(a.ks):
        p.error("--measure-ks must be a subset of --ks")
    parts = {"append", "minimize", "stream", "check"}
    a.only = parts if a.only is None else {x.strip() for x in a.only.split(",") if x.strip()}
    if not a.only <= parts:
        p.error(f"--only takes a subset of {sorted(parts)}")
    if a.runs < 5:
        p.error("--runs must be >= 5 (medians of fewer runs are noise)")
    if a.append_small_partitions < 1 or a.append_partitions <= a.append_small_partitions:
        p.error("need append-partitions > append-small-partitions >= 1")
    if not a.ks or min(a.ks) < 1:
        p.error("--ks must list positive integers")
    return a


# ---------------------------------------------------------------- data


# ---------------------------------------------------------------- helpers


def _cached_table(root: Path, params: dict, build, rebuild: bool) -> tuple[dict, float | None]:
    """Return the build info of the table under ``root``, building it if the
    cache is missing, stale or ``rebuild`` is set. ``build(uri) -> dict``."""
    marker = root / "complete.json"
    params = dict(params, build_format=BUILD_FORMAT)
    if not rebuild and marker.exists():
        try:
            m = json.loads(marker.read_text())
            if m.get("params") == params:
                return m["info"], None
        except (OSError, ValueError, KeyError):
            pass
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    info = build(root / "table")
    build_s = time.perf_counter() - t0
    marker.write_text(json.dumps({"params": params, "info": info, "build_s": build_s}))
    return info, build_s


def _added_paths(t, version: int) -> list[str]:
    from ctfile.format.actions import AddPartition

    return [a.path for a in t.log.read_entry(version) if isinstance(a, AddPartition)]


def _removed_paths(t, version: int) -> list[str]:
    from ctfile.format.actions import RemovePartition

    return [a.path for a in t.log.read_entry(version) if isinstance(a, RemovePartition)]


# ---------------------------------------------------------------- (1) append-only scan


def _append_slices(source, rows: int, n: int):
    """``n`` partitions of ``rows`` rows cut from ``source`` in a cycle; the
    order keys of each cycle are shifted so they stay distinct."""
    import pyarrow as pa
    import pyarrow.compute as pc

    per_cycle = source.num_rows // rows
    if per_cycle < 1:
        raise SystemExit(f"lineitem has {source.num_rows} rows, fewer than one partition of {rows}")
    for i in range(n):
        cycle, j = divmod(i, per_cycle)
        t = source.slice(j * rows, rows)
        if cycle:
            ok = pc.add(t.column("l_orderkey"), pa.scalar(cycle * 1_000_000_000, pa.int64()))
            t = t.set_column(0, "l_orderkey", ok)
        yield t


def _measured_partition(source, rows: int):
    """The rows of the measured (last) partition: the same in both tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = source.slice(0, rows)
    return t.set_column(0, "l_orderkey", pc.add(t.column("l_orderkey"), pa.scalar(10**15, pa.int64())))


def _build_append_table(uri: Path, source, rows: int, n_parts: int) -> dict:
    import ctfile

    t = ctfile.create_table(uri, source.schema, partition_rows=rows)
    for part in _append_slices(source, rows, n_parts - 1):
        r = t.insert(part)
        assert r.committed and r.num_added_partitions == 1, r
    r = t.insert(_measured_partition(source, rows))
    assert r.committed and r.num_added_partitions == 1, r
    snap = t.snapshot()
    assert len(snap.partitions) == n_parts, (len(snap.partitions), n_parts)
    return {"version": r.version, "partitions": n_parts, "rows": snap.num_records, "partition_rows": rows}


def bench_append(args, lineitem) -> dict:
    import pyarrow.parquet as pq

    import ctfile

    rows = args.append_rows
    tables = {}
    for label, n in (("large", args.append_partitions), ("small", args.append_small_partitions)):
        root = args.work_dir / "changes" / f"append-{n}x{rows}-sf{args.sf:g}"
        params = {"kind": "append", "partitions": n, "rows": rows, "sf": args.sf}
        info, build_s = _cached_table(root, params, lambda uri, n=n: _build_append_table(uri, lineitem().select(NARROW_COLUMNS), rows, n), args.rebuild)
        t = ctfile.open_table(root / "table")
        (path,) = _added_paths(t, info["version"])
        tables[label] = {"t": t, "info": info, "build_s": build_s, "file": root / "table" / path, "uri": root / "table"}
    L, S = tables["large"], tables["small"]
    file_bytes = L["file"].stat().st_size  # the small table's file holds the same rows (same size up to metadata)

    def scan(entry):
        v = entry["info"]["version"]

        def run():
            out = entry["t"].changes(start_version=v, end_version=v, information="append_only").to_arrow()
            assert out.num_rows == rows, out.num_rows
        return run

    def read_pq():
        out = pq.read_table(L["file"])
        assert out.num_rows == rows

    cs = L["t"].changes(start_version=L["info"]["version"], end_version=L["info"]["version"], information="append_only")
    shape = str(cs.plan_shape)
    runs = 3 * args.runs  # tens of milliseconds each: more runs for a steadier median
    times, cpu = interleaved({"ctfile_large": scan(L), "ctfile_small": scan(S), "pyarrow": read_pq}, runs)
    med = {k: median(v) for k, v in times.items()}
    cmed = {k: median(v) for k, v in cpu.items()}
    return {
        "description": (
            f"append_only scan of the 1 partition added by the last commit; narrow lineitem "
            f"({len(NARROW_COLUMNS)} columns), {rows:,} rows per partition, one partition per commit"
        ),
        "partition_rows": rows,
        "columns": NARROW_COLUMNS,
        "file_bytes": file_bytes,
        "plan_shape": shape,
        "large_table": {"partitions": L["info"]["partitions"], "versions": L["info"]["version"] + 1,
                        "rows": L["info"]["rows"], "build_s": L["build_s"]},
        "small_table": {"partitions": S["info"]["partitions"], "versions": S["info"]["version"] + 1,
                        "rows": S["info"]["rows"], "build_s": S["build_s"]},
        "runs": runs,
        "ctfile_large_ms": med["ctfile_large"] * 1e3,
        "ctfile_small_ms": med["ctfile_small"] * 1e3,
        "pyarrow_ms": med["pyarrow"] * 1e3,
        "ratio_vs_pyarrow": med["ctfile_large"] / med["pyarrow"],
        "ratio_vs_small_table": med["ctfile_large"] / med["ctfile_small"],
        "pass_vs_pyarrow": med["ctfile_large"] / med["pyarrow"] <= TARGETS["append_vs_pyarrow"],
        "pass_vs_small_table": med["ctfile_large"] / med["ctfile_small"] <= TARGETS["append_vs_small_table"],
        "cpu_ms": {k: v * 1e3 for k, v in cmed.items()},
        "cpu_ratio_vs_pyarrow": cmed["ctfile_large"] / cmed["pyarrow"],
        "cpu_ratio_vs_small_table": cmed["ctfile_large"] / cmed["ctfile_small"],
        "runs_ms": {k: [x * 1e3 for x in v] for k, v in times.items()},
        "cpu_runs_ms": {k: [x * 1e3 for x in v] for k, v in cpu.items()},
    }


# ---------------------------------------------------------------- (2) MINIMIZE vs ADDED_ONLY


def _update_predicate(orderkeys, rows: int, s: int, k: int):
    """A predicate matching ~1% of the rows of partitions ``s..s+k-1`` (of
    ``rows`` rows each, in lineitem order) and no row elsewhere: the first line
    of every 25th order whose key lies strictly inside those partitions (an
    order has 4 lines on average, so 1/25 of orders' first lines is ~1% of rows).
    """
    import numpy as np
    import pyarrow.compute as pc

    lo = int(orderkeys[s * rows - 1]) + 1 if s > 0 else int(orderkeys[0])
    hi = int(orderkeys[(s + k) * rows]) - 1
    keys = np.unique(orderkeys[s * rows:(s + k) * rows])
    keys = keys[(keys >= lo) & (keys <= hi)][::25]
    return (
        (pc.field("l_orderkey") >= lo) & (pc.field("l_orderkey") <= hi)
        & pc.field("l_orderkey").isin(keys.tolist()) & (pc.field("l_linenumber") == 1)
    )


def _build_minimize_table(uri: Path, source, rows: int, ks: list[int]) -> dict:
    import ctfile

    need = sum(ks) * rows + rows  # + one partition so the last range has a right neighbour
    if source.num_rows < need:
        raise SystemExit(f"(2) needs {need:,} lineitem rows for k={ks} x {rows:,}; lineitem has {source.num_rows:,} (raise --sf)")
    t = ctfile.create_table(uri, source.schema, partition_rows=rows)
    base = t.insert(source)
    orderkeys = source.column("l_orderkey").to_numpy()
    info = {"base_version": base.version, "base_partitions": base.num_added_partitions, "rows": rows,
            "update": {}, "append": {}}
    s = 0
    for k in ks:
        r = t.update(_update_predicate(orderkeys, rows, s, k), UPDATE_SET)
        assert r.committed and r.num_removed_partitions == k and r.num_added_partitions == k, r
        info["update"][str(k)] = {"version": r.version, "first_partition": s, "updated_rows": r.num_updated_rows}
        s += k
    for k in ks:
        r = t.insert(source.slice(0, k * rows))
        assert r.committed and r.num_added_partitions == k, r
        info["append"][str(k)] = {"version": r.version, "rows": k * rows}
    return info


def _minimize_table(args, lineitem) -> tuple[Path, dict, float | None]:
    """The (2) table (built if needed): its URI, build info and build time."""
    rows = args.minimize_rows
    root = args.work_dir / "changes" / f"minimize-{rows}-sf{args.sf:g}-k{'_'.join(map(str, args.ks))}"
    params = {"kind": "minimize", "rows": rows, "sf": args.sf, "ks": args.ks}
    info, build_s = _cached_table(root, params, lambda uri: _build_minimize_table(uri, lineitem(), rows, args.ks), args.rebuild)
    return root / "table", info, build_s


def bench_minimize(args, lineitem) -> dict:
    import pyarrow.parquet as pq

    import ctfile

    rows = args.minimize_rows
    uri, info, build_s = _minimize_table(args, lineitem)
    t = ctfile.open_table(uri)
    out = {
        "description": (
            "default-mode scan of one UPDATE changing ~1% of the rows of each of k partitions (MINIMIZE: k added + "
            "k removed) vs default-mode scan of one append of k partitions (ADDED_ONLY); full lineitem schema "
            f"(16 columns), {rows:,} rows per partition; pyarrow = pq.read_table of the k files the update added"
        ),
        "partition_rows": rows,
        "table_partitions": len(t.snapshot().partitions),
        "build_s": build_s,
        "runs": args.runs,
        "by_k": {},
    }
    for k in args.measure_ks:
        uv = info["update"][str(k)]["version"]
        av = info["append"][str(k)]["version"]
        files = [str(uri / p) for p in _added_paths(t, uv)]
        assert len(files) == k and len(_removed_paths(t, uv)) == k
        shapes = {
            "minimize": str(t.changes(start_version=uv, end_version=uv).plan_shape),
            "added_only": str(t.changes(start_version=av, end_version=av).plan_shape),
        }
        counts = {}

        def scan(v, label):
            def run():
                counts[label] = t.changes(start_version=v, end_version=v).to_arrow().num_rows
            return run

        def read_pq():
            counts["pyarrow"] = pq.read_table(files).num_rows

        times, cpu = interleaved({"minimize": scan(uv, "minimize"), "added_only": scan(av, "added_only"), "pyarrow": read_pq}, args.runs)
        med = {n: median(v) for n, v in times.items()}
        cmed = {n: median(v) for n, v in cpu.items()}
        ratio = med["minimize"] / med["added_only"]
        out["by_k"][str(k)] = {
            "k": k,
            "plan_shapes": shapes,
            "updated_rows": info["update"][str(k)]["updated_rows"],
            "minimize_output_rows": counts["minimize"],
            "added_only_output_rows": counts["added_only"],
            "pyarrow_rows": counts["pyarrow"],
            "minimize_ms": med["minimize"] * 1e3,
            "added_only_ms": med["added_only"] * 1e3,
            "pyarrow_ms": med["pyarrow"] * 1e3,
            "ratio_minimize_vs_added_only": ratio,
            "ratio_minimize_vs_pyarrow": med["minimize"] / med["pyarrow"],
            "pass": ratio <= TARGETS["minimize_vs_added_only"],
            "cpu_ms": {n: v * 1e3 for n, v in cmed.items()},
            "cpu_ratio_minimize_vs_added_only": cmed["minimize"] / cmed["added_only"],
            "cpu_ratio_minimize_vs_pyarrow": cmed["minimize"] / cmed["pyarrow"],
            "runs_ms": {n: [x * 1e3 for x in v] for n, v in times.items()},
            "cpu_runs_ms": {n: [x * 1e3 for x in v] for n, v in cpu.items()},
        }
    return out


# ---------------------------------------------------------------- (3) streaming memory


def _build_stream_table(uri: Path, source) -> dict:
    import ctfile

    t = ctfile.create_table(uri, source.schema)  # default partition size
    base = t.insert(source)
    r = t.update(None, UPDATE_SET)
    assert r.committed and r.num_updated_rows == source.num_rows, r
    return {"base_version": base.version, "update_version": r.version, "rows": source.num_rows,
            "partitions": r.num_added_partitions}


def _vm_hwm() -> int | None:
    """Linux ``VmHWM`` (peak RSS of this address space), a cross-check of ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def stream_child(table: str, start: int, end: int, information: str) -> dict:
    """Run in a fresh interpreter: stream the change set, keep no batch."""
    import ctfile

    t = ctfile.open_table(table)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    rows = nbytes = batches = 0
    cs = t.changes(start_version=start, end_version=end, information=information)
    shape = str(cs.plan_shape)
    for b in cs.to_batches():
        rows += b.num_rows
        nbytes += b.nbytes
        batches += 1
        del b
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"vm_hwm_bytes": _vm_hwm(), "rows": rows, "change_set_bytes": nbytes, "batches": batches, "plan_shape": shape,
            "seconds": elapsed, "peak_rss_bytes": peak, "rss_after_import_bytes": rss_before}


_LAUNCHER = r"""
import json, subprocess, sys
for line in sys.stdin:
    r = subprocess.run(json.loads(line), capture_output=True, text=True)
    sys.stdout.write(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}) + "\n")
    sys.stdout.flush()
"""


class Launcher:
    """A tiny process, started before this one grows, that starts the
    measured subprocesses.

    Linux carries a process's peak RSS across ``fork``/``exec`` (``exec``
    keeps the larger of the old and new high-water marks in ``ru_maxrss``), so
    a child started directly from this process, which holds lineitem and
    pyarrow's pools, would report at least this process's RSS. Children
    started from the launcher inherit only its few MB.
    """

    def __init__(self):
        self._p = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        assert self._p.stdin is not None and self._p.stdout is not None
        self._p.stdin.write(json.dumps(argv) + "\n")
        self._p.stdin.flush()
        r = json.loads(self._p.stdout.readline())
        return r["rc"], r["stdout"], r["stderr"]

    def close(self) -> None:
        if self._p.stdin:
            self._p.stdin.close()
        self._p.wait()


def _run_stream_child(launcher: Launcher, uri: Path, start: int, end: int, information: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stream-child", str(uri), str(start), str(end), information]
    rc, stdout, stderr = launcher.run(cmd)
    if rc != 0:
        raise SystemExit(f"stream child failed ({rc}):\n{stderr}")
    res = json.loads(stdout.strip().splitlines()[-1])
    res["pass"] = res["peak_rss_bytes"] < MEMORY_TARGET_BYTES
    return res


def bench_stream(args, lineitem, launcher: Launcher) -> dict:
    root = args.work_dir / "changes" / f"stream-sf{args.sf:g}"
    info, build_s = _cached_table(root, {"kind": "stream", "sf": args.sf}, lambda uri: _build_stream_table(uri, lineitem()), args.rebuild)
    out = {}
    v = info["update_version"]
    r = _run_stream_child(launcher, root / "table", v, v, "default")
    r.update(description=f"default scan of a full-table UPDATE of lineitem SF {args.sf:g} "
                         f"({info['rows']:,} rows, {info['partitions']} partitions of the default size): "
                         "every row an update pair", build_s=build_s, table_rows=info["rows"])
    out["full_update"] = r
    # The append-only scan of the whole history of the (1) table, if it exists.
    n, rows = args.append_partitions, args.append_rows
    aroot = args.work_dir / "changes" / f"append-{n}x{rows}-sf{args.sf:g}"
    if (aroot / "complete.json").exists():
        ainfo = json.loads((aroot / "complete.json").read_text())["info"]
        r = _run_stream_child(launcher, aroot / "table", 1, ainfo["version"], "append_only")
        r.update(description=f"append_only scan of versions 1..{ainfo['version']} of the (1) table "
                             f"({n:,} partitions x {rows:,} rows, narrow schema)")
        out["append_history"] = r
    return out


# ---------------------------------------------------------------- (4) the read-time damage check


def bench_check(args, lineitem) -> dict:
    """(4): the change scans of (2) for one k, checked vs unchecked."""
    import ctfile

    uri, info, build_s = _minimize_table(args, lineitem)
    t = ctfile.open_table(uri)
    k = 10 if 10 in args.measure_ks else max(args.measure_ks)

    def scan(v):
        def run():
            t.changes(start_version=v, end_version=v).to_arrow()
        return run

    def files(v) -> dict:  # the files the scan opens
        plan = t.changes(start_version=v, end_version=v).plan
        return {"storage": t.storage, "partitions": list(plan.added) + list(plan.removed)}

    uv, av = info["update"][str(k)]["version"], info["append"][str(k)]["version"]
    runs = 3 * args.runs  # a few hundred ms each, and a 3% effect to resolve on a busy machine
    return {
        "description": (
            f"the change scans of (2) for k = {k} ({args.minimize_rows:,} rows per partition, 16 columns) with the "
            "read-time damage check vs inside unchecked_reads(); MINIMIZE opens each of its 2k files several times "
            "(hidden columns, rows, column comparison) and verifies each once"
        ),
        "k": k,
        "build_s": build_s,
        "reads": {
            f"MINIMIZE, k = {k}": checked_vs_unchecked(scan(uv), runs, **files(uv)),
            f"ADDED_ONLY, k = {k}": checked_vs_unchecked(scan(av), runs, **files(av)),
        },
    }


# ---------------------------------------------------------------- report


def _load(la) -> str:
    return "n/a" if not la else f"{la[0]:.1f}"


def _ok(flag: bool) -> str:
    return "ok" if flag else "MISS"


def markdown(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## ctfile change-scan benchmarks ({meta['mode']}, {meta['started']})", "",
             f"`{meta['command']}` — {meta['cpu_count']} CPUs, Python {meta['python']}, pyarrow {meta['pyarrow']}, "
             f"lineitem SF {meta['sf']:g}; medians of {meta['runs']} ((1) and (4): {3 * meta['runs']}) alternated runs after a warm-up, warm page cache; "
             f"load average {_load(meta.get('loadavg_start'))} at start, {_load(meta.get('loadavg_end'))} at end"]
    a = result.get("append")
    if a:
        lines += ["", f"### (1) append_only scan of 1 added partition ({a['partition_rows']:,} rows, "
                      f"{len(a['columns'])} columns, {a['file_bytes']:,} bytes)", "",
                  "| table | partitions | versions | ms | vs pq.read_table (<= 1.3) | vs small table (<= 1.2) | CPU ms | CPU ratios (pq, small) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|",
                  f"| pq.read_table(file) | | | {a['pyarrow_ms']:.2f} | | | {a['cpu_ms']['pyarrow']:.2f} | |",
                  f"| small | {a['small_table']['partitions']:,} | {a['small_table']['versions']:,} | {a['ctfile_small_ms']:.2f} | "
                  f"{a['ctfile_small_ms'] / a['pyarrow_ms']:.2f} | | {a['cpu_ms']['ctfile_small']:.2f} | |",
                  f"| large | {a['large_table']['partitions']:,} | {a['large_table']['versions']:,} | {a['ctfile_large_ms']:.2f} | "
                  f"{a['ratio_vs_pyarrow']:.2f} {_ok(a['pass_vs_pyarrow'])} | "
                  f"{a['ratio_vs_small_table']:.2f} {_ok(a['pass_vs_small_table'])} | {a['cpu_ms']['ctfile_large']:.2f} | "
                  f"{a['cpu_ratio_vs_pyarrow']:.2f}, {a['cpu_ratio_vs_small_table']:.2f} |"]
    m = result.get("minimize")
    if m:
        lines += ["", f"### (2) MINIMIZE (UPDATE of 1% of rows in k partitions) vs ADDED_ONLY (append of k partitions), "
                      f"{m['partition_rows']:,} rows per partition, 16 columns", "",
                  "| k | updated rows | MINIMIZE ms (out rows) | ADDED_ONLY ms (out rows) | ratio (<= 2) | pq.read_table k files ms | MINIMIZE / pq | CPU ratio (MIN/ADD) | CPU MIN / pq |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k, r in m["by_k"].items():
            lines.append(
                f"| {k} | {r['updated_rows']:,} | {r['minimize_ms']:.1f} ({r['minimize_output_rows']:,}) | "
                f"{r['added_only_ms']:.1f} ({r['added_only_output_rows']:,}) | "
                f"{r['ratio_minimize_vs_added_only']:.2f} {_ok(r['pass'])} | {r['pyarrow_ms']:.1f} | "
                f"{r['ratio_minimize_vs_pyarrow']:.2f} | {r['cpu_ratio_minimize_vs_added_only']:.2f} | "
                f"{r['cpu_ratio_minimize_vs_pyarrow']:.2f} |"
            )
    c = result.get("check")
    if c:
        lines += ["", "### (4) change scans with and without the read-time damage check (goal <= 1.03x)", "",
                  c["description"] + ".", ""]
        lines += markdown_rows(c["reads"], goal=set(c["reads"]))
    s = result.get("stream")
    if s:
        lines += ["", "### (3) streaming to_batches() in a fresh subprocess (peak RSS, target < 1 GB)", "",
                  "| scan | shape | rows | change set (sum of batch nbytes) | peak RSS | RSS after import | s |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for name, r in s.items():
            lines.append(
                f"| {name} | {r['plan_shape']} | {r['rows']:,} | {r['change_set_bytes'] / 2**20:,.0f} MiB | "
                f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB {_ok(r['pass'])} | {r['rss_after_import_bytes'] / 2**20:,.0f} MiB | "
                f"{r['seconds']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.stream_child:
        table, start, end, information = args.stream_child
        print(json.dumps(stream_child(table, int(start), int(end), information)))
        return 0
    launcher = Launcher() if "stream" in args.only else None  # before this process grows
    import pyarrow as pa

    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    cache: list = []

    def lineitem():
        """lineitem, loaded on first use (cached tables do not need it)."""
        if not cache:
            cache.append(load_lineitem(args.data_dir, args.sf))
        return cache[0]

    result: dict = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "started": started,
            "command": " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else " ".join(["bench_changes.py", *argv]),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "pyarrow": pa.__version__,
            "sf": args.sf,
            "runs": args.runs,
            "targets": TARGETS | {"stream_peak_rss_bytes": MEMORY_TARGET_BYTES},
            "loadavg_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        }
    }
    sections = {}
    for name, fn in (("append", bench_append), ("minimize", bench_minimize), ("check", bench_check), ("stream", bench_stream)):
        if name in args.only:
            s0 = time.perf_counter()
            result[name] = fn(args, lineitem, launcher) if name == "stream" else fn(args, lineitem)
            sections[name] = time.perf_counter() - s0
    if launcher is not None:
        launcher.close()
    result["meta"]["section_s"] = sections
    result["meta"]["total_s"] = time.perf_counter() - t0
    result["meta"]["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, args.out)
    if not args.no_print:
        print(markdown(result))
        print(f"\n(results in {args.out}; {result['meta']['total_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
