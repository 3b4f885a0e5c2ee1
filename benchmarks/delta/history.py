"""The TPC-H history of ``bench_delta.py``: its statements, and the tables it
is applied to once and cached.

:func:`make_workload` derives the statements (RF1 inserts, RF2 deletes, the
MERGE batch) from lineitem deterministically. :func:`build_history` applies
them to three tables side by side, checking after each statement that all
three report the same rows inserted / updated / deleted:

``ct``
    ctfile, change capture off (the default, ``ctfile.changeCapture = none``);
``cc``
    ctfile with ``ctfile.changeCapture = before_after`` (SPEC §Change capture),
    the same history;
``dl``
    Delta Lake through delta-rs with ``delta.enableChangeDataFeed = true``.

A clone of each table as it was before every timed statement is kept
(``pre/<op>/<side>``), so each timed run starts from the same state.
:func:`ensure_history` rebuilds the cache only when the build parameters
(:data:`BUILD_FORMAT` included) change.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from decimal import Decimal
from pathlib import Path

from delta.sides import Ctfile, Delta, capture_status, delta_cdc, pa_table
from _timing import quiesce

# Bump when the way the history is built changes: cached tables are rebuilt.
# 2: the capture-on table ``cc`` (issue 13).
BUILD_FORMAT = 2
SEED = 20261122
MERGE_UPDATE_SHARE = 0.8
#: The tables the history is applied to, in build order (see the module docstring).
SIDE_KEYS = ("ct", "cc", "dl")


def make_sides(w: dict) -> dict:
    return {"ct": Ctfile(w), "cc": Ctfile(w, capture=True), "dl": Delta(w)}


def clone_table(src: Path, dst: Path, log_dirs=("_ct_log", "_delta_log")) -> None:
    """Copy a table directory cheaply: data files hard-linked, log files copied.

    Neither format ever modifies a data (or change) file in place
    (copy-on-write), so a hard link is as good as a copy; the log directories
    are copied byte for byte because ``_last_checkpoint``-style files may be
    rewritten.
    """
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        in_log = bool(rel.parts) and rel.parts[0] in log_dirs
        for f in filenames:
            s, d = Path(dirpath) / f, dst / rel / f
            if in_log:
                shutil.copy2(s, d)
            else:
                try:
                    os.link(s, d)
                except OSError:
                    shutil.copy2(s, d)


# ---------------------------------------------------------------- the workload


def _replace(t, name: str, values):
    """``t`` with column ``name`` replaced, keeping the field (type, nullability)."""
    i = t.schema.get_field_index(name)
    return t.set_column(i, t.schema.field(i), values)


def _merge_source(lineitem, live_mask, n_merge: int, next_key: int, rng):
    """The MERGE batch: ``n_merge`` rows, 80% existing live rows (as they are
    after the UPDATE) with a new l_quantity / l_comment, 20% new rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n_upd = int(n_merge * MERGE_UPDATE_SHARE)
    upd_idx = np.sort(rng.choice(np.flatnonzero(live_mask), n_upd, replace=False))
    upd = lineitem.take(pa.array(upd_idx))
    dec = upd.schema.field("l_discount").type
    k = upd.column("l_orderkey")
    hit = pc.equal(pc.subtract(k, pc.multiply(pc.divide(k, 100), 100)), 7)
    upd = _replace(upd, "l_discount",
                   pc.if_else(hit, pc.add(upd.column("l_discount"), pa.scalar(Decimal("0.01"), dec)).cast(dec),
                              upd.column("l_discount")))
    qt = upd.schema.field("l_quantity").type
    upd = _replace(upd, "l_quantity", pc.add(upd.column("l_quantity"), pa.scalar(Decimal("1.00"), qt)).cast(qt))
    upd = _replace(upd, "l_comment", pa.array(["upserted by merge"] * upd.num_rows, pa.string()))
    ins_idx = np.sort(rng.choice(lineitem.num_rows, n_merge - n_upd, replace=False))
    ins = lineitem.take(pa.array(ins_idx))
    ins = _replace(ins, "l_orderkey", pa.array(next_key + np.arange(ins.num_rows), pa.int64()))
    return upd, ins


def make_workload(lineitem, rounds: int, seed: int = SEED) -> dict:
    """The statements of the history, deterministic for a given lineitem and seed."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    okeys = lineitem.column("l_orderkey").to_numpy()
    orders = np.unique(okeys)
    n_rf = max(1, round(0.001 * len(orders)))
    next_key = int(orders.max()) + 1
    available = orders.copy()
    rf1, rf2 = [], []
    for _ in range(rounds):
        src = np.sort(rng.choice(orders, n_rf, replace=False))
        rows = lineitem.filter(pc.is_in(lineitem.column("l_orderkey"), pa.array(src)))
        new = next_key + np.searchsorted(src, rows.column("l_orderkey").to_numpy())
        rows = _replace(rows, "l_orderkey", pa.array(new, pa.int64()))
        next_key += n_rf
        rf1.append(rows)
        gone = np.sort(rng.choice(available, n_rf, replace=False))
        available = np.setdiff1d(available, gone, assume_unique=True)
        rf2.append(gone)
    deleted = np.concatenate(rf2)
    # MERGE source: 0.5% of the live rows' count.
    live_mask = ~np.isin(okeys, deleted)
    n_live = int(live_mask.sum()) + sum(t.num_rows for t in rf1)
    upd, ins = _merge_source(lineitem, live_mask, max(2, round(0.005 * n_live)), next_key, rng)
    return {"rf1": rf1, "rf2": [x.tolist() for x in rf2], "merge": pa.concat_tables([upd, ins]),
            "merge_updates": upd.num_rows, "merge_inserts": ins.num_rows, "orders": int(len(orders)),
            "orders_per_rf": n_rf}


def save_workload(w: dict, root: Path) -> None:
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    for i, t in enumerate(w["rf1"]):
        pq.write_table(t, root / f"rf1-{i}.parquet")
    pq.write_table(w["merge"], root / "merge.parquet")
    meta = {k: v for k, v in w.items() if k not in ("rf1", "merge")}
    meta["rounds"] = len(w["rf1"])
    (root / "workload.json").write_text(json.dumps(meta))


def load_workload(root: Path) -> dict:
    import pyarrow.parquet as pq

    meta = json.loads((root / "workload.json").read_text())
    meta["rf1"] = [pq.read_table(root / f"rf1-{i}.parquet") for i in range(meta["rounds"])]
    meta["merge"] = pq.read_table(root / "merge.parquet")
    return meta


# ---------------------------------------------------------------- the history


def history_steps(rounds: int) -> list[tuple[str, int]]:
    steps = []
    for i in range(rounds):
        steps += [("RF1", i), ("RF2", i)]
    return steps + [("UPDATE", -1), ("MERGE", -1), ("COMPACT", -1)]


def timed_step_index(rounds: int) -> dict[str, int]:
    """Which history step each timed DML op repeats (DELETE = the last RF2)."""
    steps = history_steps(rounds)
    last = {}
    for n, (op, _) in enumerate(steps):
        last["DELETE" if op == "RF2" else op] = n
    return last


def version_key(op: str, rounds: int) -> str:
    """The key of ``info["versions"]`` of a timed op (DELETE = the last RF2)."""
    return f"RF2{rounds - 1}" if op == "DELETE" else op


def _check_capture_property(t) -> None:
    from ctfile.format.properties import ChangeCapture, TableProperties

    mode = TableProperties.from_mapping(t.properties).change_capture
    if mode is not ChangeCapture.BEFORE_AFTER:
        raise SystemExit(f"the capture-on table {t.uri} has ctfile.changeCapture = {mode.value}")


def _create_tables(sides: dict, root: Path, lineitem, info: dict) -> dict:
    tables, create_s = {}, {}
    for key, side in sides.items():
        quiesce()
        t0 = time.perf_counter()
        tables[key], res = side.create(root / key, lineitem)
        create_s[key] = time.perf_counter() - t0
        info[f"{key}_create"] = res
    _check_capture_property(tables["cc"])
    info["steps"].append({"op": "INSERT", **{k: info[f"{k}_create"] for k in sides},
                          **{f"{k}_s": create_s[k] for k in sides}})
    return tables


def _run_step(sides: dict, tables: dict, root: Path, op: str, i: int) -> dict:
    """Apply one statement to every table; check they changed the same rows."""
    entry = {"op": op, "round": i}
    for key, side in sides.items():
        quiesce()
        t0 = time.perf_counter()
        entry[key] = side.step(tables[key], op, i)
        entry[f"{key}_s"] = time.perf_counter() - t0
    for key in ("cc", "dl"):
        for m in ("inserted", "updated", "deleted"):
            if op != "COMPACT" and entry["ct"][m] != entry[key][m]:
                raise SystemExit(f"{op}: ctfile {m} {entry['ct'][m]} rows, {sides[key].name} {entry[key][m]}: "
                                 "the histories differ")
    entry["cc_capture"] = capture_status(tables["cc"], entry["cc"]["version"])
    entry["dl_cdc"] = delta_cdc(root / "dl", entry["dl"]["version"])
    return entry


def _final_check(tables: dict) -> dict:
    """All three final tables hold the same rows (order-independent aggregates)."""
    import pyarrow.compute as pc

    def agg(t):
        return {"rows": t.num_rows,
                **{c: str(pc.sum(t.column(c)).as_py()) for c in ("l_orderkey", "l_quantity", "l_discount")}}

    ct = agg(tables["ct"].snapshot().to_arrow())
    cc = agg(tables["cc"].snapshot().to_arrow())
    dl = agg(pa_table(tables["dl"].to_pyarrow_dataset().to_table()))
    if not ct == cc == dl:
        raise SystemExit(f"final tables differ: ctfile {ct}, ctfile capture on {cc}, delta-rs {dl}")
    return ct


def build_history(args, root: Path) -> dict:
    """Apply the history to the three tables under ``root``; keep a clone of
    each table as it was before every timed step (``root/pre/<op>/<side>``)."""
    from bench_core import load_lineitem

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    lineitem = load_lineitem(args.data_dir, args.sf)
    w = make_workload(lineitem, args.rounds)
    save_workload(w, root / "workload")
    sides = make_sides(w)
    info: dict = {"rows": lineitem.num_rows, "orders": w["orders"], "orders_per_rf": w["orders_per_rf"],
                  "rf1_rows": [t.num_rows for t in w["rf1"]], "rf2_orders": [len(k) for k in w["rf2"]],
                  "merge_updates": w["merge_updates"], "merge_inserts": w["merge_inserts"], "steps": [],
                  "sides": {k: s.name for k, s in sides.items()}}
    tables = _create_tables(sides, root, lineitem, info)
    del lineitem
    gc.collect()
    timed_at = {n: op for op, n in timed_step_index(args.rounds).items()}
    for n, (op, i) in enumerate(history_steps(args.rounds)):
        if n in timed_at:
            for key in sides:
                clone_table(root / key, root / "pre" / timed_at[n] / key)
        info["steps"].append(_run_step(sides, tables, root, op, i))
    info["versions"] = {
        f"{s['op']}{'' if s.get('round', -1) < 0 else s['round']}": {k: s[k]["version"] for k in sides}
        for s in info["steps"]
    }
    info["final"] = _final_check(tables)
    return info


def writer_fingerprint() -> str:
    """A hash of the ctfile code that decides what the history's tables hold.

    The sources of ``ctfile.format``, ``log``, ``writer`` and ``table``: a
    cached history written by other writer code (say, before DML wrote change
    files) would be measured as if the current code had written it. Reader
    changes alone keep the cache (the writer only decodes through them).
    """
    import hashlib

    import ctfile

    pkg = Path(ctfile.__file__).resolve().parent
    h = hashlib.sha1()
    for sub in ("format", "log", "writer", "table"):
        for f in sorted((pkg / sub).rglob("*.py")):
            h.update(str(f.relative_to(pkg)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def ensure_history(args) -> tuple[Path, dict, float | None]:
    """The cached history under ``--work-dir``, built first if missing or
    built with other parameters or other writer code (:func:`writer_fingerprint`)."""
    root = args.work_dir / "delta" / f"sf{args.sf:g}-r{args.rounds}"
    marker = root / "complete.json"
    params = {"sf": args.sf, "rounds": args.rounds, "seed": SEED, "build_format": BUILD_FORMAT,
              "writer": writer_fingerprint()}
    if not args.rebuild and marker.exists():
        try:
            m = json.loads(marker.read_text())
            if m.get("params") == params:
                return root, m["info"], None
        except (OSError, ValueError, KeyError):
            pass
    t0 = time.perf_counter()
    info = build_history(args, root)
    build_s = time.perf_counter() - t0
    marker.write_text(json.dumps({"params": params, "info": info, "build_s": build_s}))
    return root, info, build_s
