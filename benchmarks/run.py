#!/usr/bin/env python
"""Run the whole ctfile benchmark suite and write ``benchmarks/RESULTS.md``.

    ./dev bench                 # full suite (SF 1; the first run builds cached tables)
    ./dev bench --quick         # tiny scale of every script (smoke run; results kept apart)
    ./dev bench --only delta,spark
    ./dev bench --only schema    # one script; its figures join the others' in the report
    ./dev bench --report-only   # regenerate RESULTS.md from the JSON results already present

Each ``bench_*.py`` runs as its own subprocess with its own flags (``--quick``
in quick mode, ``--out`` where the script has it) and writes its JSON results
under the results directory (``benchmarks/results/``; ``benchmarks/results/quick/``
with ``--quick``). This script records the machine, the load average around
each script and each exit code in ``suite.json``, then renders the markdown
report from the JSON files alone: the figures of issues 7, 12, 13, 14, 16, 17 and 27 against
their goals (``report/figures.py``), the misses first with what limits them
(``report/text.py``, or composed from the run's own measurements), then each
script's own tables. Next to the report, ``plots/<script>.svg`` draw each
script's ratio figures against their goals (``report/plots.py``; needs matplotlib,
the ``bench`` extra) and the report embeds them. Full
runs write ``benchmarks/RESULTS.md``; quick runs write ``RESULTS.md`` inside
their results directory so the committed report is never replaced by a
smoke run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from report.figures import figures, objectstore_figures  # noqa: E402 (after the path insert)
from report.plots import PlotsUnavailable, write_plots  # noqa: E402
from report.text import FINDINGS, FIXES, NOISE_NOTE  # noqa: E402

# name -> (script, result file, what it measures). Order = run order.
SCRIPTS = {
    "core": ("bench_core.py", "core.json", "bulk insert vs pq.write_table; open at 10,000 vs 100 versions; snapshot scans checked vs unchecked"),
    "changes": ("bench_changes.py", "changes.json", "append-only scan, MINIMIZE vs ADDED_ONLY, table size, streaming RSS, change scans checked vs unchecked"),
    "cold": ("bench_cold.py", "cold.json", "cold one-commit change scan and open + snapshot, 10,000 vs 10 live partitions"),
    "schema": ("bench_schema.py", "schema.json", "snapshot reads of a 1,000-partition table before and after add_column / rename_column"),
    "merge": ("bench_merge.py", "merge.json", "issue 27: one conditional upsert-with-delete MERGE vs the two statements it replaces and vs Table.merge of the same batch"),
    "merge_spark": ("bench_merge.py", "merge_spark.json", "issue 27: a 100-row MERGE into 1,000,000 rows through ctfile.spark (run in the driver) vs the Python engine's of the same batch"),
    "clustering": ("bench_clustering.py", "clustering.json", "issue 16: MERGE of recent and of random keys, insert, auto compaction on a table clustered by id vs unclustered; lexicographic vs Z-order keys"),
    "delta": ("bench_delta.py", "delta.json", "ctfile vs delta-rs on the same DML history; hidden-column bytes"),
    "objectstore": ("bench_objectstore.py", "objectstore.json", "object-store (S3 API) figures"),
    "streams": ("bench_streams.py", "streams.json", "exactly-once stream consumption vs changes() + an app transaction, local and S3; many streams"),
    "spark": ("bench_spark.py", "spark.json", "spark.read.format('ctfile') vs spark.read.parquet"),
    "spark_native": ("bench_spark_native.py", "spark_native.json", "issue 15: CtfileTable.to_df() scan and count() vs spark.read.parquet; first-action latency"),
    "spark_changes": ("bench_spark_native.py", "spark_changes.json", "issue 29: CtfileTable.changes_df(information='default') vs spark.read.format('ctfile').option('changes', 'default') at small and large intervals"),
    "spark_dml": ("bench_spark_dml.py", "spark_dml.json", "issue 15: MERGE of a 0.5% upsert batch and a selective UPDATE of lineitem, issue 27: a snapshot sync (NOT MATCHED BY SOURCE), through ctfile.spark vs the Python API vs a native Spark floor"),
}

# Arguments a script takes for one of its entries (one script, several measurements).
SCRIPTS["derived"] = ("bench_derived.py", "derived.json", "issue 29: derived-table refresh (incremental, full, auto) vs Spark recomputing the query, after 0.1%, 1% and 10% of the source changed; NO_DATA latency")
SCRIPT_ARGS = {"merge_spark": ["--spark"], "spark_changes": ["--changes"]}

# ---------------------------------------------------------------- running


def _loadavg() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def _help_text(script: Path) -> str:
    try:
        r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
        return r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("ctfile", "pyarrow", "pyspark", "deltalake", "pandas", "numpy", "tpchgen-cli"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _machine() -> dict:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_bytes": mem,
        "platform": platform.platform(),
    }


def run_script(name: str, results_dir: Path, quick: bool, extra: list[str], log_dir: Path) -> dict:
    script_name, result_file, _ = SCRIPTS[name]
    script = HERE / script_name
    out = results_dir / result_file
    default_out = DEFAULT_RESULTS / result_file
    help_text = _help_text(script)
    cmd = [sys.executable, str(script)] + SCRIPT_ARGS.get(name, [])
    if quick and "--quick" in help_text:
        cmd.append("--quick")
    has_out = "--out" in help_text
    if has_out:
        cmd += ["--out", str(out)]
    cmd += extra
    # A script without --out always writes benchmarks/results/<file>; when this
    # run's results go elsewhere (quick mode), keep that file as it was.
    backup = None
    if not has_out and out.resolve() != default_out.resolve() and default_out.exists():
        backup = default_out.read_bytes()
    log = log_dir / f"{name}.log"
    rec = {"script": script_name, "command": " ".join([Path(sys.executable).name] + cmd[1:]).replace(str(ROOT) + "/", ""),
           "result": str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else str(out),
           "log": str(log.relative_to(ROOT)) if log.is_relative_to(ROOT) else str(log),
           "loadavg_before": _loadavg(), "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    print(f"==> {name}: {rec['command']}", flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as lf:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        assert p.stdout is not None
        for line in p.stdout:
            sys.stdout.write(line)
            lf.write(line)
        rc = p.wait()
    rec.update(rc=rc, elapsed_s=time.perf_counter() - t0, loadavg_after=_loadavg())
    if not has_out and out.resolve() != default_out.resolve() and rc == 0 and default_out.exists():
        shutil.copyfile(default_out, out)
        if backup is not None:
            default_out.write_bytes(backup)
    print(f"==> {name}: exit {rc} in {rec['elapsed_s']:.0f} s", flush=True)
    return rec


# ---------------------------------------------------------------- report


def _load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ok(flag) -> str:
    return "n/a" if flag is None else ("ok" if flag else "**MISS**")


def _objectstore_markdown(r: dict) -> str:
    m = r.get("meta", {})
    lines = [f"## Object-store benchmarks ({m.get('mode')}, {m.get('date')})", "",
             f"S3 server: {m.get('s3_server')}; load average {_fmt_load(m.get('loadavg_start'))} at start, "
             f"{_fmt_load(m.get('loadavg_end'))} at end.", "",
             "| figure | value | detail |", "|---|---:|---|"]
    for f in objectstore_figures(r):
        lines.append(f"| {f['figure']} | {f['value']} | {f['measured']} |")
    o = r.get("open") or {}
    for key in ("with_hint", "without_hint"):
        if key in o:
            lines.append(f"| open, {o[key].get('label', key)}: requests | {o[key].get('requests_total')} | "
                         f"{', '.join(f'{k} {v}' for k, v in (o[key].get('requests') or {}).items())} |")
    return "\n".join(lines)


def _module_markdown(script: str, result: dict) -> str | None:
    """The script's own ``markdown(result)`` rendering, if it has one."""
    path = HERE / script
    if not path.exists():
        return None
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(HERE))
        # registered before it runs, as an import would: dataclasses (and
        # anything else resolving names through sys.modules) need it
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        fn = getattr(mod, "markdown", None)
        return fn(result) if callable(fn) else None
    except Exception as e:  # a report must not fail because one renderer does
        return f"(could not render {script}'s tables: {type(e).__name__}: {e})"


def _spark_markdown(r: dict) -> str:
    return "\n".join([
        f"## Spark snapshot scan ({r.get('date')}, SF {r.get('scale_factor')}, pyspark {r.get('machine', {}).get('pyspark')})", "",
        "Both read the same Parquet files (the micro-partitions of one ctfile snapshot) in one `local[2]` session and "
        "materialise every row through Spark's `noop` sink; medians of alternated runs.", "",
        "| rows | partitions | runs | spark.read.parquet s | spark.read.format('ctfile') s | ratio (<= 1.5) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {r.get('rows', 0):,} | {r.get('partitions')} | {r.get('runs')} | {r['spark_read_parquet_s']:.2f} | "
        f"{r['ctfile_s']:.2f} | {r['ratio']:.2f} {_ok(r['ratio'] <= 1.5)} |",
    ])


def _fmt_load(la) -> str:
    return "n/a" if not la else " / ".join(f"{x:.1f}" for x in la)


def _explanation(f: dict, shown: set[str]) -> str | None:
    """What limits a missed figure: its own note (composed from the run's
    measurements), else the profile findings of ``report.text.FINDINGS``
    (said once; later figures with the same cause point back to it)."""
    if f.get("note"):
        return f["note"]
    key = f["id"] if f["id"] in FINDINGS else next(
        (k for k in FINDINGS if k.endswith("*") and f["id"].startswith(k[:-1])), None)
    if key in shown:
        return "Same cause as the previous item."
    if key:
        shown.add(key)
        return FINDINGS[key]
    return None


def _misses(figs: list[dict]) -> list[str]:
    misses = [f for f in figs if f["pass"] is False]
    L = ["## Misses", ""]
    if not figs:
        return L + ["No results yet.", ""]
    if not misses:
        return L + ["Every measured figure meets its goal.", ""]
    L += [f"{len(misses)} of {len(figs)} figures miss their goal:", ""]
    shown: set[str] = set()
    for f in misses:
        L.append(f"- **{f['figure']}** vs {f['anchor']}: {f['value']} (goal {f['goal']}; {f['measured']}).")
        why = _explanation(f, shown)
        if why:
            L.append(f"  {why}")
    return L + [""]


def _plots_markdown(figs: list[dict], plot_dir: Path, report_dir: Path) -> list[str]:
    """Draw the plots into ``plot_dir`` and the report's section embedding them
    (links relative to ``report_dir``), with the figures no plot can show."""
    L = ["### Plots", "",
         "Each figure's ratio (ctfile / its anchor, log scale) as a bar, green where it meets its goal and red "
         "where it misses it; the black tick across each bar is its goal.", ""]
    try:
        written = write_plots(figs, plot_dir)
    except PlotsUnavailable as e:
        return L + [f"Not drawn: {e}.", ""]
    for group, path in written:
        if path is not None:
            rel = path.relative_to(report_dir) if path.is_relative_to(report_dir) else path
            L += [f"![{group.source}: ctfile vs its anchors, with the goals]({rel.as_posix()})", ""]
        if group.left_out:
            L += [f"Not plotted from {group.source}: "
                  + "; ".join(f"`{fid}` ({why})" for fid, why in group.left_out) + ".", ""]
    return L


def render(results_dir: Path, *, plot_dir: Path | None = None) -> str:
    """The markdown report of the results in ``results_dir``; with ``plot_dir``,
    the plots are drawn there too and embedded (links relative to its parent,
    where the report goes)."""
    suite = _load_json(results_dir / "suite.json") or {}
    res = {name: r for name, (_, f, _) in SCRIPTS.items() if (r := _load_json(results_dir / f)) is not None}
    figs = figures(res)
    meta = suite.get("meta", {})
    machine = meta.get("machine") or _machine()
    versions = meta.get("versions") or _versions()
    L: list[str] = []
    mode = meta.get("mode", "unknown")
    L += ["# ctfile benchmark results", "",
          f"Generated by `benchmarks/run.py` from the JSON files in `{results_dir.relative_to(ROOT) if results_dir.is_relative_to(ROOT) else results_dir}/` "
          f"(last {mode} run: `{meta.get('command', 'benchmarks/run.py')}`, started {meta.get('started', 'n/a')}, "
          f"finished {meta.get('finished', 'n/a')}; each section and the table of scripts at the bottom give "
          f"when its own figures were measured). "
          f"Reproduce with `./dev bench` (`./dev bench --quick` for a smoke run at tiny scale).", ""]
    mem = machine.get("memory_bytes")
    mem_s = f"{mem / 2**30:.1f} GiB memory" if mem else "memory unknown"
    L += [f"**Machine**: {machine.get('cpus')} CPUs ({machine.get('cpu_model') or 'unknown model'}), {mem_s}, "
          f"{machine.get('platform')}. "
          "**Versions**: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v) + ".", "",
          f"**Load average** (1 / 5 / 15 min) at the start of the suite: {_fmt_load(meta.get('loadavg_start'))}; "
          f"at the end: {_fmt_load(meta.get('loadavg_end'))} (on {machine.get('cpus')} CPUs). "
          "Per script in the table at the bottom.", "", NOISE_NOTE, ""]
    L += _misses(figs)
    if FIXES:
        L += ["Fixed in ctfile while measuring:", ""] + [f"- {x}" for x in FIXES] + [""]
    L += ["## Figures", "",
          "| figure | compared with | goal | measured | ratio / value | status | script |",
          "|---|---|---|---|---:|---|---|"]
    for f in figs:
        L.append(f"| {f['figure']} | {f['anchor']} | {f['goal']} | {f['measured']} | {f['value']} | {_ok(f['pass'])} | {f['source']} |")
    if plot_dir is not None and figs:
        L += [""] + _plots_markdown(figs, plot_dir, plot_dir.parent)
    missing = [n for n, (s, fname, _) in SCRIPTS.items() if n not in res and (HERE / s).exists()]
    if missing:
        L += ["", f"No results from: {', '.join(missing)}."]
    L.append("")
    for name, (script, _, what) in SCRIPTS.items():
        r = res.get(name)
        if r is None:
            continue
        L += [f"<!-- {script}: {what} -->"]
        try:
            md = (_spark_markdown(r) if name == "spark" else _objectstore_markdown(r) if name == "objectstore"
                  else _module_markdown(script, r))
        except (KeyError, TypeError, ValueError) as e:
            md = f"(could not render {script}'s results: {type(e).__name__}: {e})"
        if md is None:
            md = f"## {script}\n\n```json\n{json.dumps(r, indent=1)[:4000]}\n```"
        L += [md, ""]
    runs = suite.get("scripts") or {}
    if runs:
        L += ["## Suite run", "", "| script | command | exit | s | load avg before | load avg after |", "|---|---|---:|---:|---|---|"]
        for name, rec in runs.items():
            L.append(f"| {name} | `{rec['command']}` | {rec['rc']} | {rec['elapsed_s']:.0f} | "
                     f"{_fmt_load(rec.get('loadavg_before'))} | {_fmt_load(rec.get('loadavg_after'))} |")
        L.append("")
    return "\n".join(L)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny scale of every script (results in results/quick/)")
    p.add_argument("--only", default=None, help=f"comma-separated scripts to run, of: {','.join(SCRIPTS)}")
    p.add_argument("--skip", default="", help="comma-separated scripts not to run")
    p.add_argument("--report-only", action="store_true",
                   help="only regenerate the report and its plots (plots/ next to it) from existing results")
    p.add_argument("--results-dir", type=Path, default=None, help="default benchmarks/results (quick: benchmarks/results/quick)")
    p.add_argument("--report", type=Path, default=None,
                   help="markdown report path (default benchmarks/RESULTS.md; quick: <results-dir>/RESULTS.md)")
    args = p.parse_args(argv)
    results_dir = (args.results_dir or (DEFAULT_RESULTS / "quick" if args.quick else DEFAULT_RESULTS)).resolve()
    report = args.report or (results_dir / "RESULTS.md" if args.quick or args.results_dir else HERE / "RESULTS.md")
    results_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    if not args.report_only:
        names = list(SCRIPTS) if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
        skip = {n.strip() for n in args.skip.split(",") if n.strip()}
        unknown = (set(names) | skip) - set(SCRIPTS)
        if unknown:
            p.error(f"unknown scripts {sorted(unknown)}; known: {list(SCRIPTS)}")
        names = [n for n in names if n not in skip and (HERE / SCRIPTS[n][0]).exists()]
        log_dir = results_dir / "logs"
        log_dir.mkdir(exist_ok=True)
        suite_path = results_dir / "suite.json"
        prev = _load_json(suite_path) or {}
        suite = {
            "meta": {"mode": "quick" if args.quick else "full",
                     "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "machine": _machine(), "versions": _versions(), "loadavg_start": _loadavg(),
                     "command": " ".join(["benchmarks/run.py", *(sys.argv[1:] if argv is None else argv)])},
            # Keep the records of scripts not run this time (--only): their JSON is still reported.
            "scripts": {k: v for k, v in (prev.get("scripts") or {}).items() if k not in names},
        }
        for name in names:
            rec = run_script(name, results_dir, args.quick, [], log_dir)
            suite["scripts"][name] = rec
            if rec["rc"] != 0:
                failed.append(name)
            suite["meta"]["loadavg_end"] = _loadavg()
            suite["meta"]["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            suite_path.write_text(json.dumps(suite, indent=2) + "\n")
    text = render(results_dir, plot_dir=report.resolve().parent / "plots")
    report.write_text(text + "\n")
    print(f"\nwrote {report}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
