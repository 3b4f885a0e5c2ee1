#!/usr/bin/env python
"""ctfile vs Delta Lake (delta-rs, the ``deltalake`` package) on the same history (issue 7).

The same TPC-H history is applied to a ctfile table, to a second ctfile table
with change capture on (``ctfile.changeCapture = before_after``, issue 13) and
to a Delta table with the change data feed on (``delta.enableChangeDataFeed =
true``), all writing zstd Parquet:

    bulk insert of lineitem
    R rounds (default 2) of
        RF1: insert the lineitems of 0.1% new orders (keys beyond the max order key;
             each new order copies the lines of a random existing order)
        RF2: delete the lineitems of 0.1% of the orders (``l_orderkey IN (...)``)
    UPDATE  l_discount = l_discount + 0.01 WHERE l_orderkey % 100 = 7   (1% of rows)
    MERGE   a 0.5%-of-rows upsert batch keyed on (l_orderkey, l_linenumber):
            80% existing rows (l_quantity + 1, new l_comment), 20% new rows
    COMPACT ctfile ``Table.compact()``; delta-rs ``optimize.compact()``

Figures (ctfile vs delta-rs, medians of ``--runs`` (>= 5) runs after one
warm-up run of each, the sides alternating, ratio = ctfile / other):

(1) DML: UPDATE, DELETE (the last RF2), MERGE (goal <= 1.0x each); RF1 insert
    and COMPACT informational. Every run starts from the same table state: the
    table directory as it was before that step is cloned (data files
    hard-linked, log files copied: both formats never modify a file in place)
    and opened, untimed; then the statement is timed.
(2) End to end: the same runs continue with the change scan that consumes the
    statement (ctfile: ``changes(v, v).to_arrow()``; delta-rs:
    ``load_cdf(v, v)`` read into a pyarrow Table); DML + scan (goal <= 0.5x).
    In the same rounds, the copy-on-write floor of UPDATE / DELETE / MERGE:
    pyarrow alone decoding and re-encoding the files the statement rewrote
    (``rewrite_floor``), which no copy-on-write engine can undercut.
(3) Append-only change scan of the last RF1 commit: ctfile
    ``changes(v, v, information="append_only").to_arrow()`` vs
    ``pq.read_table`` of the files that commit added (goal <= 1.3x) and vs
    delta-rs ``load_cdf`` of that version (goal <= 1.0x).
(4) Minimum-delta change scan over RF1..MERGE (every RF1, RF2, the UPDATE and
    the MERGE): ctfile ``changes(first RF1, MERGE).to_arrow()`` vs delta-rs
    ``load_cdf`` of the same versions plus the consolidation a user needs to
    get net changes (:func:`consolidate_cdf`; goal <= 1.0x). Output row counts
    must agree (checked).
(4b) The change scan of each statement alone (informational; its goal is
    part of (2)): ctfile ``changes(v, v).to_arrow()`` vs delta-rs
    ``load_cdf(v, v)`` on the cached history tables, for the versions of the
    UPDATE, the DELETE (the last RF2) and the MERGE, wall and CPU medians.
(5) Hidden-column bytes after the UPDATE: compressed size of the
    ``_ct_row_id`` and ``_ct_row_version`` column chunks over all live
    partitions (from the Parquet footers) / bytes of the live partitions
    (goal <= 1%).
(6) Change capture on (issue 13), timed in the same rounds as (1), (2), (4)
    and (4b) as a third arm, on the capture-on table: the change scans of the
    UPDATE, DELETE and MERGE commits vs delta-rs ``load_cdf(v, v)`` (goal
    <= 1.0x) and vs capture off (informational); the minimum delta over
    RF1..MERGE vs delta-rs load_cdf + consolidation (goal <= 1.0x); the DML
    statements vs the same with capture off (goal <= 1.05x); the change-file
    bytes each statement's log entry names (``change`` sizeBytes) vs the
    ``_change_data`` bytes of delta-rs's entry (``cdc`` sizes; goal <= 1.0x);
    DML + its change scan vs delta-rs's (UPDATE goal <= 0.5x; DELETE and MERGE
    against their copy-on-write floors). Whether each commit is captured is
    read from its entry: a ctfile that writes no change files is measured as
    what it is (its scans fall back to the partitions; bytes 0, no bytes
    figure). Output row counts of the three sides must agree (checked).

Usage::

    .venv/bin/python benchmarks/bench_delta.py            # SF 1 (6M rows)
    .venv/bin/python benchmarks/bench_delta.py --quick    # SF 0.01, well under 90 s
    .venv/bin/python benchmarks/bench_delta.py --profile UPDATE   # pyinstrument of ctfile's side
    .venv/bin/python benchmarks/bench_delta.py --only scans         # the change scans alone
    .venv/bin/python benchmarks/bench_delta.py --profile scan-MERGE --profile-tool py-spy
    .venv/bin/python benchmarks/bench_delta.py --profile scan-UPDATE --profile-capture   # the capture-on table

pyinstrument samples the main thread only; a change scan decodes partitions
on a thread pool, so ``--profile-tool py-spy`` (all threads, native frames)
shows where its CPU goes. The profile goes to ``benchmarks/results/profiles/``.

Writes ``benchmarks/results/delta.json`` (``--out``) and prints a markdown
summary. The history tables are cached under ``benchmarks/work/delta/``
(gitignored; rebuilt when the build parameters or ctfile's writer code change,
or with ``--rebuild``);
lineitem comes from ``bench_core.lineitem_path`` (cached under
``benchmarks/data/``).

Modules: ``delta.sides`` (the engines, change-data bytes of a log entry, the
consolidation of a Delta change feed, the goals), ``delta.history`` (the
workload and the cached history tables), ``delta.dml`` ((1), (2) and the
DML part of (6)), ``delta.scans`` ((3), (4), (4b), (5) and the scan part of
(6)), ``delta.report`` (the markdown), ``delta.profile`` (``--profile``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The modules of this benchmark (after the path insert):
from delta.dml import DML_OPS, bench_dml  # noqa: E402
from delta.history import ensure_history, load_workload  # noqa: E402
from delta.profile import PROFILE_TARGETS, profile  # noqa: E402
from delta.report import markdown  # noqa: E402, F401 (run.py renders delta.json through it)
from delta.scans import bench_append, bench_hidden, bench_mindelta, bench_scans  # noqa: E402
from delta.sides import TARGETS  # noqa: E402

DEFAULT_DATA = HERE / "data"
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "delta.json"
PARTS = {"dml", "append", "mindelta", "scans", "hidden"}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="SF 0.01 (well under 90 s)")
    p.add_argument("--sf", type=float, default=None, help="TPC-H scale factor (default 1; quick 0.01)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per side and figure (default 5, minimum 5)")
    p.add_argument("--rounds", type=int, default=2, help="RF1+RF2 rounds in the history (default 2)")
    p.add_argument("--ops", default=",".join(DML_OPS), help=f"DML statements to time (default {','.join(DML_OPS)})")
    p.add_argument("--only", default=None, help="comma-separated subset of: dml,append,mindelta,scans,hidden")
    p.add_argument("--profile", choices=PROFILE_TARGETS, default=None,
                   help="instead of timing, profile ctfile's side of one figure (scan-OP: the change scan "
                        "of that statement's version alone)")
    p.add_argument("--profile-capture", action="store_true",
                   help="with --profile: profile the capture-on table (ctfile.changeCapture = before_after)")
    p.add_argument("--profile-tool", choices=["pyinstrument", "py-spy", "none"], default="pyinstrument",
                   help="pyinstrument (main thread; default) or py-spy (every thread, native frames); "
                        "none: run the profiled workload unprofiled (what py-spy runs)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached history tables")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-print", action="store_true", help="do not print the markdown summary")
    a = p.parse_args(argv)
    if a.sf is None:
        a.sf = 0.01 if a.quick else 1.0
    if a.runs < 5:
        p.error("--runs must be >= 5 (medians of fewer runs are noise)")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    a.ops = [x.strip().upper() for x in a.ops.split(",") if x.strip()]
    if not set(a.ops) <= set(DML_OPS):
        p.error(f"--ops takes a subset of {DML_OPS}")
    a.only = PARTS if a.only is None else {x.strip() for x in a.only.split(",") if x.strip()}
    if not a.only <= PARTS:
        p.error(f"--only takes a subset of {sorted(PARTS)}")
    return a


def _meta(args, argv, started: str, build_s) -> dict:
    import deltalake
    import pyarrow as pa

    return {
        "mode": "quick" if args.quick else "full",
        "started": started,
        "command": " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else " ".join(["bench_delta.py", *argv]),
        "sf": args.sf,
        "rounds": args.rounds,
        "runs": args.runs,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "deltalake": deltalake.__version__,
        "build_s": build_s,
        "targets": TARGETS,
    }


def _all_pass(result: dict) -> bool:
    """Every goal figure that has a verdict meets it (capture figures included)."""
    flags = []
    for op, e in (result.get("dml") or {}).items():
        c = e.get("capture") or {}
        flags += [e.get("pass"), e.get("e2e_pass"), c.get("pass_vs_off"), c.get("pass_bytes"), c.get("e2e_pass")]
    if result.get("append"):
        flags += [result["append"]["pass_vs_pyarrow"], result["append"]["pass_vs_delta"]]
    if result.get("mindelta"):
        flags += [result["mindelta"]["pass"], (result["mindelta"].get("capture") or {}).get("pass")]
    for e in (result.get("scans") or {}).values():
        flags.append((e.get("capture") or {}).get("pass"))
    if result.get("hidden"):
        flags.append(result["hidden"]["pass"])
    return all(f for f in flags if f is not None)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    loadavg_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    root, info, build_s = ensure_history(args)
    w = load_workload(root / "workload")
    if args.profile:
        path = profile(args, root, info, w)
        if args.profile_tool != "none":
            print(f"wrote {path}")
        return 0
    result: dict = {"meta": {**_meta(args, argv, started, build_s), "loadavg_start": loadavg_start}, "history": info}
    if "dml" in args.only and args.ops:
        result["dml"] = bench_dml(args, root, info, w)
    if "append" in args.only:
        result["append"] = bench_append(args, root, info)
    if "mindelta" in args.only:
        result["mindelta"] = bench_mindelta(args, root, info)
    if "scans" in args.only:
        result["scans"] = bench_scans(args, root, info)
    if "hidden" in args.only:
        result["hidden"] = bench_hidden(root, info)
    result["meta"]["elapsed_s"] = time.perf_counter() - t_start
    result["meta"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    result["all_pass"] = _all_pass(result)
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
