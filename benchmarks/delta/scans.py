"""Figures (3), (4), (4b) and (5) of ``bench_delta.py``: change scans on the
cached history tables, and the hidden-column bytes.

Each scan figure times its arms with :func:`_timing.interleaved` (a warm-up
of each, then the order rotated every round) on long-lived table objects, as
an application would hold them. The arms of (4) and (4b) are ctfile with
capture off (``ct``), ctfile with ``ctfile.changeCapture = before_after``
(``cc``) and delta-rs ``load_cdf`` (``dl``); their output row counts are
checked to be equal. A capture-on scan over commits that are not captured
(a ctfile build whose DML writes no change files) falls back to the
partitions, so it is then measured as what it is; the results say how many
of the scanned commits were captured (:func:`capture_status`).
"""

from __future__ import annotations

import os
from pathlib import Path
from statistics import median

import pyarrow.parquet as pq

from ctfile.format.actions import ChangeFile
from ctfile.format.change_files import CHANGE_TYPE_COLUMN
from ctfile import ROW_ID_COLUMN

from delta.history import version_key
from delta.sides import TARGETS, Ctfile, Delta, capture_status, consolidate_cdf, entry_files
from _timing import interleaved

SCAN_OPS = ["UPDATE", "DELETE", "MERGE"]


def _open_all(root: Path):
    w_ct, w_dl = Ctfile({}), Delta({})
    return w_ct, w_dl, w_ct.open(root / "ct"), w_ct.open(root / "cc"), w_dl.open(root / "dl")


def _ms(samples: dict) -> dict:
    return {k: median(x) * 1e3 for k, x in samples.items()}


def _interval_capture(cc, v0: int, v1: int) -> dict:
    """How many commits of v0..v1 of the capture-on table are captured, and
    the bytes of the change files they name."""
    st = [capture_status(cc, v) for v in range(v0, v1 + 1)]
    return {"commits": len(st), "captured": sum(s["captured"] for s in st),
            "change_files": sum(s["change_files"] for s in st), "change_bytes": sum(s["change_bytes"] for s in st)}


def bench_append(args, root: Path, info: dict) -> dict:
    """(3) The append-only change scan of the last RF1 commit."""
    import pyarrow.parquet as pq

    w_ct, w_dl, ct, _, dl = _open_all(root)
    last = f"RF1{args.rounds - 1}"
    v, dv = info["versions"][last]["ct"], info["versions"][last]["dl"]
    files = entry_files(ct, v)
    rows = {}

    def run_ct():
        rows["ctfile"] = w_ct.scan(ct, v, v, "append_only").num_rows

    def run_pq():
        rows["pyarrow"] = pq.read_table(files).num_rows

    def run_dl():
        rows["delta"] = w_dl.scan(dl, dv, dv).num_rows

    wall, cpu = interleaved({"ctfile": run_ct, "pyarrow": run_pq, "delta": run_dl}, args.runs)
    if len(set(rows.values())) != 1:
        raise SystemExit(f"append-only scan rows differ: {rows}")
    med, cmed = _ms(wall), _ms(cpu)
    shape = str(ct.changes(start_version=v, end_version=v, information="append_only").plan_shape)
    return {
        "description": f"append_only change scan of the last RF1 commit (ctfile v{v}, delta v{dv})",
        "rows": rows["ctfile"], "files": len(files), "file_bytes": sum(os.path.getsize(f) for f in files),
        "plan_shape": shape,
        "ctfile_ms": med["ctfile"], "pyarrow_ms": med["pyarrow"], "delta_ms": med["delta"],
        "ratio_vs_pyarrow": med["ctfile"] / med["pyarrow"], "ratio_vs_delta": med["ctfile"] / med["delta"],
        "cpu_ratio_vs_pyarrow": cmed["ctfile"] / cmed["pyarrow"], "cpu_ratio_vs_delta": cmed["ctfile"] / cmed["delta"],
        "pass_vs_pyarrow": med["ctfile"] / med["pyarrow"] <= TARGETS["append_vs_pyarrow_max"],
        "pass_vs_delta": med["ctfile"] / med["delta"] <= TARGETS["append_vs_delta_max"],
        "runs_ms": {k: [x * 1e3 for x in xs] for k, xs in wall.items()},
    }


def _net_removed(t, v0: int, v1: int) -> list[str]:
    """The partitions live before ``v0`` and not at ``v1``: where the old
    images of the interval's deleted and updated rows are, without capture."""
    before = {p.path for p in t.snapshot(v0 - 1).partitions}
    after = {p.path for p in t.snapshot(v1).partitions}
    return [os.path.join(t.uri, p) for p in sorted(before - after)]


def bench_mindelta(args, root: Path, info: dict) -> dict:
    """(4) The minimum-delta change scan over RF1..MERGE."""
    import pyarrow.parquet as pq

    w_ct, w_dl, ct, cc, dl = _open_all(root)
    ver = info["versions"]
    v0, dv0, cv0 = ver["RF10"]["ct"], ver["RF10"]["dl"], ver["RF10"]["cc"]
    v1, dv1, cv1 = ver["MERGE"]["ct"], ver["MERGE"]["dl"], ver["MERGE"]["cc"]
    rows = {}

    def run_ct():
        rows["ctfile"] = w_ct.scan(ct, v0, v1).num_rows

    def run_cc():
        rows["ctfile_capture"] = w_ct.scan(cc, cv0, cv1).num_rows

    def run_dl():
        cdf = w_dl.scan(dl, dv0, dv1)
        rows["delta_cdf"] = cdf.num_rows
        rows["delta"] = consolidate_cdf(cdf).num_rows

    def run_dl_raw():
        rows["delta_raw"] = w_dl.scan(dl, dv0, dv1).num_rows

    # The floor of any scan that reads only the interval's partitions: the old
    # images of the deleted and updated rows exist only in the net removed
    # partitions, scattered over all of them, so at least their data columns
    # are decoded once (pyarrow, all threads).
    removed = _net_removed(ct, v0, v1)
    data_cols = ct.schema.names

    def run_removed_decode():
        rows["removed_decoded"] = sum(pq.read_table(f, columns=data_cols).num_rows for f in removed)

    wall, cpu = interleaved({"ctfile": run_ct, "ctfile_capture": run_cc, "delta": run_dl,
                              "delta_load_cdf_only": run_dl_raw, "removed_decode": run_removed_decode}, args.runs)
    if not rows["ctfile"] == rows["ctfile_capture"] == rows["delta"]:
        raise SystemExit(f"minimum-delta rows differ: ctfile {rows['ctfile']}, capture on {rows['ctfile_capture']}, "
                         f"consolidated delta CDF {rows['delta']}")
    med, cmed = _ms(wall), _ms(cpu)
    return {
        "description": (f"default (minimum-delta) change scan over RF1..MERGE (ctfile v{v0}..v{v1}, delta v{dv0}..v{dv1}) "
                        "vs delta-rs load_cdf + consolidation to net changes per (l_orderkey, l_linenumber)"),
        "plan_shape": str(ct.changes(start_version=v0, end_version=v1).plan_shape),
        "ctfile_rows": rows["ctfile"], "delta_cdf_rows": rows["delta_cdf"], "delta_net_rows": rows["delta"],
        "ctfile_ms": med["ctfile"], "delta_ms": med["delta"],
        "delta_load_cdf_only_ms": med["delta_load_cdf_only"],
        "removed_partitions": len(removed), "removed_rows": rows["removed_decoded"],
        "removed_decode_ms": med["removed_decode"],
        "removed_decode_vs_delta": med["removed_decode"] / med["delta"],
        "ratio": med["ctfile"] / med["delta"],
        "ratio_vs_load_cdf_only": med["ctfile"] / med["delta_load_cdf_only"],
        "cpu_ratio": cmed["ctfile"] / cmed["delta"],
        "pass": med["ctfile"] / med["delta"] <= TARGETS["mindelta_vs_delta_max"],
        "capture": {
            "plan_shape": str(cc.changes(start_version=cv0, end_version=cv1).plan_shape),
            "rows": rows["ctfile_capture"], "ms": med["ctfile_capture"],
            "ratio": med["ctfile_capture"] / med["delta"],
            "cpu_ratio": cmed["ctfile_capture"] / cmed["delta"],
            "vs_off": med["ctfile_capture"] / med["ctfile"],
            "pass": med["ctfile_capture"] / med["delta"] <= TARGETS["capture_mindelta_vs_delta_max"],
            **{f"interval_{k}": x for k, x in _interval_capture(cc, cv0, cv1).items()},
        },
        "runs_ms": {k: [x * 1e3 for x in xs] for k, xs in wall.items()},
    }


def _scan_one(args, w_ct, w_dl, tables, op: str, v: dict) -> dict:
    """The three arms of one statement's change scan, interleaved."""
    ct, cc, dl = tables
    rows = {}

    def run_ct():
        rows["ctfile"] = w_ct.scan(ct, v["ct"], v["ct"]).num_rows

    def run_cc():
        rows["ctfile_capture"] = w_ct.scan(cc, v["cc"], v["cc"]).num_rows

    def run_dl():
        rows["delta"] = w_dl.scan(dl, v["dl"], v["dl"]).num_rows

    change_paths = [str(Path(cc.uri) / a.path) for a in cc.log.read_entry(v["cc"]) if isinstance(a, ChangeFile)]
    floor_columns = cc.schema.names + [ROW_ID_COLUMN, CHANGE_TYPE_COLUMN]

    def run_floor():
        # pyarrow alone decoding the commit's change files: the columns a
        # captured scan reads, no checks, no output columns.
        for path in change_paths:
            pq.read_table(path, columns=floor_columns)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    arms = {"ctfile": run_ct, "ctfile_capture": run_cc, "delta": run_dl}
    if change_paths:
        arms["change_file_decode"] = run_floor
    wall, cpu = interleaved(arms, args.runs)
    if len(set(rows.values())) != 1:
        raise SystemExit(f"{op}: change scan rows differ: {rows}")
    med, cmed = _ms(wall), _ms(cpu)
    status = capture_status(cc, v["cc"])
    return {
        "description": (f"minimum-delta change scan of the {op} alone (ctfile changes({v['ct']}, {v['ct']}), capture on "
                        f"changes({v['cc']}, {v['cc']}); delta-rs load_cdf({v['dl']}, {v['dl']}))"),
        "versions": dict(v),
        "plan_shape": str(ct.changes(start_version=v["ct"], end_version=v["ct"]).plan_shape),
        "rows": dict(rows),
        "ctfile_ms": med["ctfile"], "delta_ms": med["delta"],
        "ctfile_cpu_ms": cmed["ctfile"], "delta_cpu_ms": cmed["delta"],
        "ratio": med["ctfile"] / med["delta"],
        "capture": {
            "plan_shape": str(cc.changes(start_version=v["cc"], end_version=v["cc"]).plan_shape),
            "ms": med["ctfile_capture"], "cpu_ms": cmed["ctfile_capture"],
            "ratio": med["ctfile_capture"] / med["delta"],
            "cpu_ratio": cmed["ctfile_capture"] / cmed["delta"],
            "vs_off": med["ctfile_capture"] / med["ctfile"],
            "decode_ms": med.get("change_file_decode"),
            "decode_vs_delta": med["change_file_decode"] / med["delta"] if "change_file_decode" in med else None,
            "pass": med["ctfile_capture"] / med["delta"] <= TARGETS["capture_scan_vs_delta_max"],
            **{k: status[k] for k in ("captured", "change_files", "change_bytes")},
        },
        "loadavg": load,
        "runs_ms": {k: [x * 1e3 for x in xs] for k, xs in wall.items()},
        "cpu_runs_ms": {k: [x * 1e3 for x in xs] for k, xs in cpu.items()},
    }


def bench_scans(args, root: Path, info: dict) -> dict:
    """(4b) The minimum-delta scan of each statement's own version, alone."""
    w_ct, w_dl, ct, cc, dl = _open_all(root)
    return {op: _scan_one(args, w_ct, w_dl, (ct, cc, dl), op, info["versions"][version_key(op, args.rounds)])
            for op in SCAN_OPS}


# ---------------------------------------------------------------- (5) hidden-column bytes


def hidden_bytes(uri: Path, version: int) -> dict:
    import pyarrow.parquet as pq

    import ctfile
    from ctfile.format.schema import ROW_ID_COLUMN, ROW_VERSION_COLUMN

    snap = ctfile.open_table(uri).snapshot(version)
    hidden = {ROW_ID_COLUMN: 0, ROW_VERSION_COLUMN: 0}
    total = files_with = 0
    for p in snap.partitions:
        path = uri / p.path
        total += path.stat().st_size
        md = pq.ParquetFile(path).metadata
        seen = False
        for rg in range(md.num_row_groups):
            g = md.row_group(rg)
            for c in range(g.num_columns):
                col = g.column(c)
                if col.path_in_schema in hidden:
                    hidden[col.path_in_schema] += col.total_compressed_size
                    seen = True
        files_with += seen
    h = sum(hidden.values())
    return {"version": version, "partitions": len(snap.partitions), "partitions_with_hidden": files_with,
            "table_bytes": total, "hidden_bytes": h, "row_id_bytes": hidden[ROW_ID_COLUMN],
            "row_version_bytes": hidden[ROW_VERSION_COLUMN], "fraction": h / total if total else 0.0}


def bench_hidden(root: Path, info: dict) -> dict:
    out = {k: hidden_bytes(root / "ct", info["versions"][k]["ct"]) for k in ("UPDATE", "MERGE", "COMPACT")}
    out["pass"] = out["UPDATE"]["fraction"] <= TARGETS["hidden_fraction_max"]
    return out
