"""Figures (1) and (2) of ``bench_delta.py``: each DML statement, then the
change scan consuming it, on the three tables of the history, plus the
copy-on-write floor of the statement, all in the same interleaved rounds.

Every run starts from a clone of the table as it was before the statement
(``pre/<op>/<side>``: data files hard-linked, logs copied; untimed), opens it
(untimed), times the statement, then the change scan of the new version
(ctfile ``changes(v, v)``, delta-rs ``load_cdf(v, v)``). Run *n* goes through
the sides in the order ``ct, cc, dl`` rotated by *n*. After each run the
statement's log entry is read (untimed) for the change data it wrote:
ctfile's change files (:func:`capture_status`) and delta-rs's
``_change_data`` files (:func:`delta_cdc`).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from statistics import median

from delta.history import SIDE_KEYS, clone_table, history_steps, make_sides, timed_step_index
from delta.sides import TARGETS, capture_status, delta_cdc, entry_files
from _timing import quiesce

DML_OPS = ["UPDATE", "DELETE", "MERGE", "RF1", "COMPACT"]
GOAL_OPS = {"UPDATE", "DELETE", "MERGE"}
DESCRIPTIONS = {
    "UPDATE": "UPDATE l_discount = l_discount + 0.01 WHERE l_orderkey % 100 = 7",
    "DELETE": "RF2: DELETE WHERE l_orderkey IN (0.1% of the orders)",
    "MERGE": "MERGE of the 0.5% upsert batch ON (l_orderkey, l_linenumber)",
    "RF1": "RF1: INSERT the lineitems of 0.1% new orders",
    "COMPACT": "ctfile Table.compact() vs delta-rs optimize.compact()",
}


def rewrite_floor(files: list[str], out_dir: Path, keep=None) -> None:
    """The copy-on-write floor of a statement: pyarrow alone decoding the
    data columns of the files the statement rewrote and encoding them again
    (zstd, 1 Mi-row row groups, two threads as ctfile uses), minus the rows
    ``keep`` (a row predicate) drops. No hidden columns, no checksum, no
    fsync, no log: the part of the work any copy-on-write engine must do."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)

    def one(f: str) -> None:
        pf = pq.ParquetFile(f)
        data = [c for c in pf.schema_arrow.names if not c.startswith("_ct_")]
        t = pf.read(columns=data, use_threads=False)
        if keep is not None:
            t = t.filter(keep)
        pq.write_table(t, out_dir / os.path.basename(f), compression="zstd", row_group_size=1 << 20)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, files))


class StatementRuns:
    """The timed runs of one statement on every side, and its floor."""

    def __init__(self, root: Path, w: dict, op: str, rnd: int):
        self.root, self.op, self.rnd = root, op, rnd
        self.sides = make_sides(w)
        self.w = w
        self.with_scan = op != "COMPACT"
        self.rec = {k: {"dml": [], "e2e": [], "scan": [], "dml_cpu": [], "e2e_cpu": []} for k in SIDE_KEYS}
        self.counts: dict = {}
        self.written: dict = {}  # what the statement's log entry names, per side
        self.floor_files: list[str] = []
        self.floor_runs: list[float] = []
        self.scratch = root / "scratch"

    def one(self, key: str, timed: bool, n: int) -> None:
        """Clone, open, time the statement and then its change scan."""
        side = self.sides[key]
        pre = self.root / "pre" / self.op / key
        d = self.scratch / f"{self.op}-{key}-{n}"
        shutil.rmtree(d, ignore_errors=True)
        clone_table(pre, d)
        try:
            t = side.open(d)
            quiesce()
            c0, t0 = time.process_time(), time.perf_counter()
            res = side.step(t, self.op, self.rnd)
            t1, c1 = time.perf_counter(), time.process_time()
            rows = side.scan(t, res["version"], res["version"]).num_rows if self.with_scan else None
            t2, c2 = time.perf_counter(), time.process_time()
            self.counts[key] = {**res, "scan_rows": rows}
            self._note_written(key, t, d, res["version"], pre, timed)
            if timed:
                r = self.rec[key]
                r["dml"].append(t1 - t0)
                r["dml_cpu"].append(c1 - c0)
                if self.with_scan:
                    r["scan"].append(t2 - t1)
                    r["e2e"].append(t2 - t0)
                    r["e2e_cpu"].append(c2 - c0)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def _note_written(self, key: str, t, d: Path, version: int, pre: Path, timed: bool) -> None:
        if key == "cc":
            self.written[key] = capture_status(t, version)
        elif key == "dl":
            self.written[key] = delta_cdc(d, version)
        elif not timed and self.op in GOAL_OPS:
            # The files this statement rewrote, as they are in the pre-statement table.
            self.floor_files[:] = entry_files(t, version, pre, removed=True)

    def floor(self, timed: bool) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = None
        if self.op == "DELETE":
            keep = ~pc.field("l_orderkey").isin(pa.array(self.w["rf2"][self.rnd], pa.int64()))
        d = self.scratch / f"{self.op}-floor"
        shutil.rmtree(d, ignore_errors=True)
        quiesce()
        t0 = time.perf_counter()
        rewrite_floor(self.floor_files, d, keep)
        if timed:
            self.floor_runs.append(time.perf_counter() - t0)
        shutil.rmtree(d, ignore_errors=True)

    def run(self, runs: int) -> None:
        for key in SIDE_KEYS:  # warm-up of each side
            self.one(key, False, -1)
        if self.floor_files:
            self.floor(False)
        for n in range(runs):
            k = n % len(SIDE_KEYS)
            for key in SIDE_KEYS[k:] + SIDE_KEYS[:k]:
                self.one(key, True, n)
            if self.floor_files:
                self.floor(True)
        if self.with_scan:
            scan_rows = {key: self.counts[key]["scan_rows"] for key in SIDE_KEYS}
            if len(set(scan_rows.values())) != 1:
                raise SystemExit(f"{self.op}: change scan rows differ between the sides: {scan_rows}")


def _medians(rec: dict) -> dict:
    return {k: {m: (median(v) if v else None) for m, v in r.items()} for k, r in rec.items()}


def _base_entry(op: str, s: StatementRuns, med: dict, hist: dict) -> dict:
    """ctfile (capture off) against delta-rs: figures (1) and (2) of issue 7."""
    e = {
        "op": op,
        "description": DESCRIPTIONS[op],
        "goal": op in GOAL_OPS,
        "rows": {k: {m: s.counts[k].get(m) for m in ("inserted", "updated", "deleted", "scan_rows",
                                                    "files_added", "files_removed")} for k in s.counts},
        "history_s": {k: hist[f"{k}_s"] for k in SIDE_KEYS if f"{k}_s" in hist},
        "ctfile_s": med["ct"]["dml"], "delta_s": med["dl"]["dml"],
        "ratio": med["ct"]["dml"] / med["dl"]["dml"],
        "cpu_ratio": med["ct"]["dml_cpu"] / med["dl"]["dml_cpu"],
        "runs_s": {"ctfile": s.rec["ct"]["dml"], "delta": s.rec["dl"]["dml"], "ctfile_capture": s.rec["cc"]["dml"]},
        "cpu_s": {"ctfile": med["ct"]["dml_cpu"], "delta": med["dl"]["dml_cpu"], "ctfile_capture": med["cc"]["dml_cpu"]},
    }
    e["pass"] = e["ratio"] <= TARGETS["dml_ratio_max"] if op in GOAL_OPS else None
    if s.floor_runs:
        f = median(s.floor_runs)
        e.update({"floor_files": len(s.floor_files), "floor_s": f, "floor_vs_delta": f / med["dl"]["dml"],
                  "floor_runs_s": s.floor_runs})
    if s.with_scan:
        e.update({
            "ctfile_scan_s": med["ct"]["scan"], "delta_scan_s": med["dl"]["scan"],
            "ctfile_e2e_s": med["ct"]["e2e"], "delta_e2e_s": med["dl"]["e2e"],
            "e2e_ratio": med["ct"]["e2e"] / med["dl"]["e2e"],
            "e2e_cpu_ratio": med["ct"]["e2e_cpu"] / med["dl"]["e2e_cpu"],
            "e2e_runs_s": {"ctfile": s.rec["ct"]["e2e"], "delta": s.rec["dl"]["e2e"],
                           "ctfile_capture": s.rec["cc"]["e2e"]},
        })
        e["e2e_pass"] = e["e2e_ratio"] <= TARGETS["e2e_ratio_max"] if op in GOAL_OPS else None
        if s.floor_runs:
            e["floor_vs_delta_e2e"] = e["floor_s"] / med["dl"]["e2e"]
    return e


def _capture_entry(op: str, s: StatementRuns, med: dict) -> dict:
    """ctfile with change capture on (issue 13): against capture off (time),
    against delta-rs (change-data bytes; DML + change scan end to end)."""
    cc, dl = s.written["cc"], s.written["dl"]
    goal = op in GOAL_OPS
    c = {
        "ctfile_s": med["cc"]["dml"],
        "vs_off": med["cc"]["dml"] / med["ct"]["dml"],
        "cpu_vs_off": med["cc"]["dml_cpu"] / med["ct"]["dml_cpu"],
        "pass_vs_off": med["cc"]["dml"] / med["ct"]["dml"] <= TARGETS["capture_dml_vs_off_max"] if goal else None,
        **{k: cc[k] for k in ("captured", "change_files", "change_bytes", "change_rows", "removes", "removes_whole")},
        "delta_cdc_files": dl["cdc_files"], "delta_cdc_bytes": dl["cdc_bytes"],
    }
    # Bytes against delta-rs only where both wrote change data: an uncaptured
    # commit (capture not in this build) wrote none, which is no figure.
    comparable = cc["captured"] and dl["cdc_bytes"] > 0
    c["bytes_vs_delta"] = cc["change_bytes"] / dl["cdc_bytes"] if comparable else None
    c["pass_bytes"] = c["bytes_vs_delta"] <= TARGETS["change_bytes_vs_delta_max"] if comparable and goal else None
    if s.with_scan:
        c.update({"scan_s": med["cc"]["scan"], "e2e_s": med["cc"]["e2e"],
                  "e2e_vs_delta": med["cc"]["e2e"] / med["dl"]["e2e"],
                  "e2e_cpu_vs_delta": med["cc"]["e2e_cpu"] / med["dl"]["e2e_cpu"],
                  "scan_vs_off": med["cc"]["scan"] / med["ct"]["scan"],
                  "scan_vs_delta": med["cc"]["scan"] / med["dl"]["scan"]})
        # UPDATE has a goal; DELETE and MERGE are reported against their floors.
        c["e2e_pass"] = c["e2e_vs_delta"] <= TARGETS["capture_e2e_update_max"] if op == "UPDATE" else None
        if s.floor_runs:
            c["e2e_vs_floor"] = med["cc"]["e2e"] / median(s.floor_runs)
    return c


def _totals(out: dict) -> None:
    """The pipeline as a whole: the three goal statements and their scans."""
    goal = [e for op, e in out.items() if op in GOAL_OPS]
    if not goal:
        return
    ct_sum = sum(e["ctfile_e2e_s"] for e in goal)
    dl_sum = sum(e["delta_e2e_s"] for e in goal)
    cc_sum = sum(e["capture"]["e2e_s"] for e in goal)
    out["e2e_total"] = {"ops": [e["op"] for e in goal], "ctfile_s": ct_sum, "delta_s": dl_sum,
                        "ratio": ct_sum / dl_sum, "pass": ct_sum / dl_sum <= TARGETS["e2e_ratio_max"],
                        "capture_s": cc_sum, "capture_ratio": cc_sum / dl_sum}


def bench_dml(args, root: Path, info: dict, w: dict) -> dict:
    step_of = timed_step_index(args.rounds)
    steps = history_steps(args.rounds)
    out = {}
    for op in args.ops:
        _, rnd = steps[step_of[op]]
        hist = info["steps"][step_of[op] + 1]  # +1: steps[0] is the bulk insert
        s = StatementRuns(root, w, op, rnd)
        s.run(args.runs)
        med = _medians(s.rec)
        entry = _base_entry(op, s, med, hist)
        entry["capture"] = _capture_entry(op, s, med)
        out[op] = entry
    shutil.rmtree(root / "scratch", ignore_errors=True)
    _totals(out)
    return out
