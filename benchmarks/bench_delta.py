#!/usr/bin/env python
"""ctfile vs Delta Lake (delta-rs, the ``deltalake`` package) on the same history (issue 7).

The same TPC-H history is applied to a ctfile table and to a Delta table with
the change data feed on (``delta.enableChangeDataFeed = true``), both writing
zstd Parquet:

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
warm-up run of each, the two sides alternating, ratio = ctfile / other):

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

Usage::

    .venv/bin/python benchmarks/bench_delta.py            # SF 1 (6M rows)
    .venv/bin/python benchmarks/bench_delta.py --quick    # SF 0.01, well under 90 s
    .venv/bin/python benchmarks/bench_delta.py --profile UPDATE   # pyinstrument of ctfile's side
    .venv/bin/python benchmarks/bench_delta.py --only scans         # the change scans alone
    .venv/bin/python benchmarks/bench_delta.py --profile scan-MERGE --profile-tool py-spy

pyinstrument samples the main thread only; a change scan decodes partitions
on a thread pool, so ``--profile-tool py-spy`` (all threads, native frames)
shows where its CPU goes. The profile goes to ``benchmarks/results/profiles/``.

Writes ``benchmarks/results/delta.json`` (``--out``) and prints a markdown
summary. The history tables are cached under ``benchmarks/work/delta/``
(gitignored; rebuilt when the build parameters change or with ``--rebuild``);
lineitem comes from ``bench_core.lineitem_path`` (cached under
``benchmarks/data/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import shutil
import sys
import time
from decimal import Decimal
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _timing import interleaved, quiesce  # noqa: E402 (after the path insert)
DEFAULT_DATA = HERE / "data"
DEFAULT_WORK = HERE / "work"
DEFAULT_OUT = HERE / "results" / "delta.json"

# Bump when the way the history is built changes: cached tables are rebuilt.
BUILD_FORMAT = 1
SEED = 20261122
KEYS = ["l_orderkey", "l_linenumber"]
CDF_CONFIG = {"delta.enableChangeDataFeed": "true"}
MERGE_UPDATE_SHARE = 0.8
TARGETS = {
    "dml_ratio_max": 1.0,
    "e2e_ratio_max": 0.5,
    "append_vs_pyarrow_max": 1.3,
    "append_vs_delta_max": 1.0,
    "mindelta_vs_delta_max": 1.0,
    "hidden_fraction_max": 0.01,
}
DML_OPS = ["UPDATE", "DELETE", "MERGE", "RF1", "COMPACT"]
GOAL_OPS = {"UPDATE", "DELETE", "MERGE"}
SCAN_OPS = ["UPDATE", "DELETE", "MERGE"]
PROFILE_TARGETS = DML_OPS + ["append", "mindelta"] + [f"scan-{op}" for op in SCAN_OPS]


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
    parts = {"dml", "append", "mindelta", "scans", "hidden"}
    a.only = parts if a.only is None else {x.strip() for x in a.only.split(",") if x.strip()}
    if not a.only <= parts:
        p.error(f"--only takes a subset of {sorted(parts)}")
    return a


# ---------------------------------------------------------------- helpers


def clone_table(src: Path, dst: Path, log_dirs=("_ct_log", "_delta_log")) -> None:
    """Copy a table directory cheaply: data files hard-linked, log files copied.

    Neither format ever modifies a data file in place (copy-on-write), so a
    hard link is as good as a copy; the log directories are copied byte for
    byte because ``_last_checkpoint``-style files may be rewritten.
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


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _writer_properties():
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD")


def _pa_table(reader):
    """A delta-rs (arro3) RecordBatchReader as a pyarrow Table (Arrow C stream, no copy)."""
    import pyarrow as pa

    return pa.table(reader) if not isinstance(reader, pa.Table) else reader


# ---------------------------------------------------------------- the workload


def _order_key_mod(k, m: int, r: int):
    """``k % m == r`` as a pyarrow expression (Arrow has no modulo kernel:
    integer division truncates, so k - (k / m) * m is the remainder)."""
    return (k - (k / m) * m) == r


def _replace(t, name: str, values):
    """``t`` with column ``name`` replaced, keeping the field (type, nullability)."""
    i = t.schema.get_field_index(name)
    return t.set_column(i, t.schema.field(i), values)


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
    # MERGE source: 0.5% of the live rows' count; 80% existing original rows (as
    # they are after the UPDATE) with new l_quantity / l_comment, 20% new rows.
    live_mask = ~np.isin(okeys, deleted)
    n_live = int(live_mask.sum()) + sum(t.num_rows for t in rf1)
    n_merge = max(2, round(0.005 * n_live))
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
    upd = _replace(upd, "l_quantity",
                         pc.add(upd.column("l_quantity"), pa.scalar(Decimal("1.00"), qt)).cast(qt))
    upd = _replace(upd, "l_comment",
                         pa.array(["upserted by merge"] * upd.num_rows, pa.string()))
    ins_idx = np.sort(rng.choice(lineitem.num_rows, n_merge - n_upd, replace=False))
    ins = lineitem.take(pa.array(ins_idx))
    ins = _replace(ins, "l_orderkey", pa.array(next_key + np.arange(ins.num_rows), pa.int64()))
    next_key += ins.num_rows
    merge_src = pa.concat_tables([upd, ins])
    return {"rf1": rf1, "rf2": [x.tolist() for x in rf2], "merge": merge_src,
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


# ---------------------------------------------------------------- the statements


class Ctfile:
    name = "ctfile"

    def __init__(self, w: dict):
        self.w = w

    def create(self, uri: Path, lineitem):
        import ctfile

        t = ctfile.create_table(uri, lineitem.schema, compression="zstd")
        r = t.insert(lineitem)
        return t, {"version": r.version, "rows": r.num_inserted_rows}

    def open(self, uri: Path):
        import ctfile

        return ctfile.open_table(uri)

    def step(self, t, op: str, i: int = -1) -> dict:
        import pyarrow as pa
        import pyarrow.compute as pc

        if op == "RF1":
            r = t.insert(self.w["rf1"][i])
        elif op in ("RF2", "DELETE"):
            r = t.delete(pc.field("l_orderkey").isin(pa.array(self.w["rf2"][i], pa.int64())))
        elif op == "UPDATE":
            dec = pa.decimal128(15, 2)
            r = t.update(_order_key_mod(pc.field("l_orderkey"), 100, 7),
                         {"l_discount": pc.field("l_discount") + pa.scalar(Decimal("0.01"), dec)})
        elif op == "MERGE":
            r = t.merge(self.w["merge"], KEYS, when_matched="update", when_not_matched="insert")
        elif op == "COMPACT":
            r = t.compact()
        else:
            raise ValueError(op)
        assert r.committed, (op, r)
        return {"version": r.version, "inserted": r.num_inserted_rows, "updated": r.num_updated_rows,
                "deleted": r.num_deleted_rows, "files_added": r.num_added_partitions,
                "files_removed": r.num_removed_partitions}

    def scan(self, t, v0: int, v1: int, information: str = "default"):
        return t.changes(start_version=v0, end_version=v1, information=information).to_arrow()


class Delta:
    name = "delta-rs"

    def __init__(self, w: dict):
        self.w = w
        self.wp = _writer_properties()

    def create(self, uri: Path, lineitem):
        from deltalake import DeltaTable, write_deltalake

        write_deltalake(str(uri), lineitem, configuration=CDF_CONFIG, writer_properties=self.wp)
        t = DeltaTable(str(uri))
        return t, {"version": t.version(), "rows": lineitem.num_rows}

    def open(self, uri: Path):
        from deltalake import DeltaTable

        return DeltaTable(str(uri))

    def step(self, t, op: str, i: int = -1) -> dict:
        from deltalake import write_deltalake

        m: dict
        if op == "RF1":
            write_deltalake(t, self.w["rf1"][i], mode="append", writer_properties=self.wp)
            m = {"inserted": self.w["rf1"][i].num_rows}
        elif op in ("RF2", "DELETE"):
            keys = ",".join(str(k) for k in self.w["rf2"][i])
            r = t.delete(f"l_orderkey IN ({keys})", writer_properties=self.wp)
            m = {"deleted": r["num_deleted_rows"]}
        elif op == "UPDATE":
            r = t.update(updates={"l_discount": "l_discount + 0.01"}, predicate="l_orderkey % 100 = 7",
                         writer_properties=self.wp)
            m = {"updated": r["num_updated_rows"]}
        elif op == "MERGE":
            r = (t.merge(self.w["merge"], "t.l_orderkey = s.l_orderkey AND t.l_linenumber = s.l_linenumber",
                         source_alias="s", target_alias="t", writer_properties=self.wp)
                 .when_matched_update_all().when_not_matched_insert_all().execute())
            m = {"inserted": r["num_target_rows_inserted"], "updated": r["num_target_rows_updated"]}
        elif op == "COMPACT":
            r = t.optimize.compact(writer_properties=self.wp)
            m = {"files_added": r["numFilesAdded"], "files_removed": r["numFilesRemoved"]}
        else:
            raise ValueError(op)
        return {"version": t.version(), "inserted": 0, "updated": 0, "deleted": 0, **m}

    def scan(self, t, v0: int, v1: int, information: str = "default"):
        return _pa_table(t.load_cdf(starting_version=v0, ending_version=v1))


def consolidate_cdf(cdf):
    """Net changes from a Delta change data feed spanning several commits.

    What a user of ``load_cdf`` must do to get what ctfile's default change
    scan returns (one DELETE per row that existed before and not after, one
    INSERT per row that exists after and not before, and an update as a
    DELETE + INSERT pair): per key (``l_orderkey, l_linenumber``), order the
    events by commit version (within a commit the pre-image / delete before
    the post-image / insert), keep the first and the last event (pyarrow
    ``group_by(..., use_threads=False)`` with ``first`` / ``last``). The first
    event's row is the before-image if it is a ``delete`` or
    ``update_preimage`` (otherwise the key did not exist before); the last
    event's row is the after-image if it is an ``insert`` or
    ``update_postimage``. A key with both images whose data columns are all
    equal is dropped (no net change). delta-rs returns ``string_view``
    columns, which pyarrow cannot ``take``; they are cast to ``string`` first
    (part of the cost). Output: the data columns plus
    ``_action`` (DELETE / INSERT) and ``_isupdate``, DELETEs first.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    data_cols = [c for c in cdf.column_names if c not in ("_change_type", "_commit_version", "_commit_timestamp")]
    # delta-rs returns string_view columns, which pyarrow cannot take() or
    # filter(); a pyarrow user has to cast them to string first.
    views = [c for c in data_cols if pa.types.is_string_view(cdf.schema.field(c).type)]
    if views:
        cdf = cdf.cast(pa.schema([pa.field(f.name, pa.string(), f.nullable) if f.name in views else f for f in cdf.schema]))
    ct = cdf.column("_change_type")
    post = pc.or_(pc.equal(ct, pa.scalar("insert", ct.type)), pc.equal(ct, pa.scalar("update_postimage", ct.type)))
    seq = pc.add(pc.multiply(pc.cast(cdf.column("_commit_version"), pa.int64()), 2), pc.cast(post, pa.int64()))
    n = cdf.num_rows
    ev = pa.table({**{k: cdf.column(k) for k in KEYS}, "_seq": seq, "_i": pa.array(np.arange(n, dtype=np.int64))})
    ev = ev.sort_by([(k, "ascending") for k in KEYS] + [("_seq", "ascending")])
    g = ev.group_by(KEYS, use_threads=False).aggregate([("_i", "first"), ("_i", "last")])
    first = g.column("_i_first").to_numpy()
    last = g.column("_i_last").to_numpy()
    post_np = post.to_numpy(zero_copy_only=False)
    has_before = ~post_np[first]
    has_after = post_np[last]
    both = has_before & has_after
    if both.any():  # drop keys whose before and after images are equal
        bi, ai = first[both], last[both]
        before = cdf.select(data_cols).take(pa.array(bi))
        after = cdf.select(data_cols).take(pa.array(ai))
        same = np.ones(len(bi), dtype=bool)
        for c in data_cols:
            same &= pc.fill_null(pc.equal(before.column(c), after.column(c)), False).to_numpy(zero_copy_only=False)
        keep = np.ones(len(first), dtype=bool)
        keep[np.flatnonzero(both)[same]] = False
        has_before &= keep
        has_after &= keep
        both &= keep
    dels = cdf.select(data_cols).take(pa.array(first[has_before]))
    ins = cdf.select(data_cols).take(pa.array(last[has_after]))
    dels = dels.append_column("_action", pa.array(["DELETE"] * dels.num_rows, pa.string()))
    dels = dels.append_column("_isupdate", pa.array(both[has_before]))
    ins = ins.append_column("_action", pa.array(["INSERT"] * ins.num_rows, pa.string()))
    ins = ins.append_column("_isupdate", pa.array(both[has_after]))
    return pa.concat_tables([dels, ins])


# ---------------------------------------------------------------- the history


def _history_steps(rounds: int) -> list[tuple[str, int]]:
    steps = []
    for i in range(rounds):
        steps += [("RF1", i), ("RF2", i)]
    return steps + [("UPDATE", -1), ("MERGE", -1), ("COMPACT", -1)]


def _timed_step_index(rounds: int) -> dict[str, int]:
    """Which history step each timed DML op repeats (DELETE = the last RF2)."""
    steps = _history_steps(rounds)
    last = {}
    for n, (op, _) in enumerate(steps):
        last["DELETE" if op == "RF2" else op] = n
    return last


def build_history(args, root: Path) -> dict:
    """Apply the history to both formats under ``root``; keep a clone of each
    table as it was before every timed step (``root/pre/<op>/<side>``)."""
    import pyarrow.compute as pc

    from bench_core import load_lineitem

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    lineitem = load_lineitem(args.data_dir, args.sf)
    w = make_workload(lineitem, args.rounds)
    save_workload(w, root / "workload")
    sides = {"ct": Ctfile(w), "dl": Delta(w)}
    info: dict = {"rows": lineitem.num_rows, "orders": w["orders"], "orders_per_rf": w["orders_per_rf"],
                  "rf1_rows": [t.num_rows for t in w["rf1"]], "rf2_orders": [len(k) for k in w["rf2"]],
                  "merge_updates": w["merge_updates"], "merge_inserts": w["merge_inserts"], "steps": []}
    tables, create_s = {}, {}
    for key, side in sides.items():
        quiesce()
        t0 = time.perf_counter()
        tables[key], res = side.create(root / key, lineitem)
        create_s[key] = time.perf_counter() - t0
        info[f"{key}_create"] = res
    info["steps"].append({"op": "INSERT", "ct": info["ct_create"], "dl": info["dl_create"],
                          "ct_s": create_s["ct"], "dl_s": create_s["dl"]})
    del lineitem
    gc.collect()
    timed_at = {n: op for op, n in _timed_step_index(args.rounds).items()}
    for n, (op, i) in enumerate(_history_steps(args.rounds)):
        if n in timed_at:
            for key in sides:
                clone_table(root / key, root / "pre" / timed_at[n] / key)
        entry = {"op": op, "round": i}
        for key, side in sides.items():
            quiesce()
            t0 = time.perf_counter()
            entry[key] = side.step(tables[key], op, i)
            entry[f"{key}_s"] = time.perf_counter() - t0
        for m in ("inserted", "updated", "deleted"):
            if op != "COMPACT" and entry["ct"][m] != entry["dl"][m]:
                raise SystemExit(f"{op}: ctfile {m} {entry['ct'][m]} rows, delta-rs {entry['dl'][m]}: the histories differ")
        info["steps"].append(entry)
    info["versions"] = {
        f"{s['op']}{'' if s.get('round', -1) < 0 else s['round']}": {"ct": s["ct"]["version"], "dl": s["dl"]["version"]}
        for s in info["steps"]
    }
    # Cross-check: both final tables hold the same rows (order-independent aggregates).
    ct_final = tables["ct"].snapshot().to_arrow()
    dl_final = _pa_table(tables["dl"].to_pyarrow_dataset().to_table())

    def agg(t):
        return {"rows": t.num_rows,
                **{c: str(pc.sum(t.column(c)).as_py()) for c in ("l_orderkey", "l_quantity", "l_discount")}}

    a, b = agg(ct_final), agg(dl_final)
    if a != b:
        raise SystemExit(f"final tables differ: ctfile {a}, delta-rs {b}")
    info["final"] = a
    return info


def ensure_history(args) -> tuple[Path, dict, float | None]:
    root = args.work_dir / "delta" / f"sf{args.sf:g}-r{args.rounds}"
    marker = root / "complete.json"
    params = {"sf": args.sf, "rounds": args.rounds, "seed": SEED, "build_format": BUILD_FORMAT}
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


# ---------------------------------------------------------------- (1) + (2) DML and end to end


def bench_dml(args, root: Path, info: dict, w: dict) -> dict:
    sides = {"ct": Ctfile(w), "dl": Delta(w)}
    step_of = _timed_step_index(args.rounds)
    steps = _history_steps(args.rounds)
    scratch = root / "scratch"
    out = {}
    for op in args.ops:
        _, rnd = steps[step_of[op]]
        hist = info["steps"][step_of[op] + 1]  # +1: steps[0] is the bulk insert
        with_scan = op != "COMPACT"
        rec = {k: {"dml": [], "e2e": [], "scan": [], "dml_cpu": [], "e2e_cpu": []} for k in sides}
        counts = {}
        floor_files: list[str] = []
        floor_runs: list[float] = []

        def one(key: str, timed: bool, n: int) -> None:
            side = sides[key]
            d = scratch / f"{op}-{key}-{n}"
            shutil.rmtree(d, ignore_errors=True)
            clone_table(root / "pre" / op / key, d)
            try:
                t = side.open(d)
                quiesce()
                c0, t0 = time.process_time(), time.perf_counter()
                res = side.step(t, op, rnd)
                t1, c1 = time.perf_counter(), time.process_time()
                if key == "ct" and not timed and op in GOAL_OPS:
                    # The files this statement rewrote, as they are in the pre-statement table.
                    floor_files[:] = _entry_files(t, res["version"], root / "pre" / op / key, removed=True)
                rows = None
                if with_scan:
                    rows = side.scan(t, res["version"], res["version"]).num_rows
                t2, c2 = time.perf_counter(), time.process_time()
                counts[key] = {**res, "scan_rows": rows}
                if timed:
                    r = rec[key]
                    r["dml"].append(t1 - t0)
                    r["dml_cpu"].append(c1 - c0)
                    if with_scan:
                        r["scan"].append(t2 - t1)
                        r["e2e"].append(t2 - t0)
                        r["e2e_cpu"].append(c2 - c0)
            finally:
                shutil.rmtree(d, ignore_errors=True)

        def floor(timed: bool) -> None:
            import pyarrow as pa
            import pyarrow.compute as pc

            keep = None
            if op == "DELETE":
                keep = ~pc.field("l_orderkey").isin(pa.array(sides["ct"].w["rf2"][rnd], pa.int64()))
            d = scratch / f"{op}-floor"
            shutil.rmtree(d, ignore_errors=True)
            quiesce()
            t0 = time.perf_counter()
            rewrite_floor(floor_files, d, keep)
            if timed:
                floor_runs.append(time.perf_counter() - t0)
            shutil.rmtree(d, ignore_errors=True)

        one("ct", False, -1)  # warm-up of each side
        one("dl", False, -1)
        if floor_files:
            floor(False)
        for n in range(args.runs):
            for key in (("ct", "dl") if n % 2 == 0 else ("dl", "ct")):
                one(key, True, n)
            if floor_files:
                floor(True)
        if with_scan and counts["ct"]["scan_rows"] != counts["dl"]["scan_rows"]:
            raise SystemExit(f"{op}: change scan rows differ: {counts}")
        med = {k: {m: (median(v) if v else None) for m, v in r.items()} for k, r in rec.items()}
        entry = {
            "op": op,
            "description": {
                "UPDATE": "UPDATE l_discount = l_discount + 0.01 WHERE l_orderkey % 100 = 7",
                "DELETE": "RF2: DELETE WHERE l_orderkey IN (0.1% of the orders)",
                "MERGE": "MERGE of the 0.5% upsert batch ON (l_orderkey, l_linenumber)",
                "RF1": "RF1: INSERT the lineitems of 0.1% new orders",
                "COMPACT": "ctfile Table.compact() vs delta-rs optimize.compact()",
            }[op],
            "goal": op in GOAL_OPS,
            "rows": {k: {m: counts[k].get(m) for m in ("inserted", "updated", "deleted", "scan_rows", "files_added", "files_removed")}
                     for k in counts},
            "history_s": {"ct": hist["ct_s"], "dl": hist["dl_s"]},
            "ctfile_s": med["ct"]["dml"],
            "delta_s": med["dl"]["dml"],
            "ratio": med["ct"]["dml"] / med["dl"]["dml"],
            "cpu_ratio": med["ct"]["dml_cpu"] / med["dl"]["dml_cpu"],
            "runs_s": {"ctfile": rec["ct"]["dml"], "delta": rec["dl"]["dml"]},
            "cpu_s": {"ctfile": med["ct"]["dml_cpu"], "delta": med["dl"]["dml_cpu"]},
        }
        entry["pass"] = entry["ratio"] <= TARGETS["dml_ratio_max"] if op in GOAL_OPS else None
        if floor_runs:
            entry.update({
                "floor_files": len(floor_files),
                "floor_s": median(floor_runs),
                "floor_vs_delta": median(floor_runs) / med["dl"]["dml"],
                "floor_runs_s": floor_runs,
            })
        if with_scan:
            entry.update({
                "ctfile_scan_s": med["ct"]["scan"], "delta_scan_s": med["dl"]["scan"],
                "ctfile_e2e_s": med["ct"]["e2e"], "delta_e2e_s": med["dl"]["e2e"],
                "e2e_ratio": med["ct"]["e2e"] / med["dl"]["e2e"],
                "e2e_cpu_ratio": med["ct"]["e2e_cpu"] / med["dl"]["e2e_cpu"],
                "e2e_runs_s": {"ctfile": rec["ct"]["e2e"], "delta": rec["dl"]["e2e"]},
            })
            entry["e2e_pass"] = entry["e2e_ratio"] <= TARGETS["e2e_ratio_max"] if op in GOAL_OPS else None
            if floor_runs:
                entry["floor_vs_delta_e2e"] = entry["floor_s"] / med["dl"]["e2e"]
        out[op] = entry
    shutil.rmtree(scratch, ignore_errors=True)
    goal = [e for op, e in out.items() if op in GOAL_OPS]
    if goal:  # the pipeline as a whole: the three goal statements and their scans
        ct_sum = sum(e["ctfile_e2e_s"] for e in goal)
        dl_sum = sum(e["delta_e2e_s"] for e in goal)
        out["e2e_total"] = {"ops": [e["op"] for e in goal], "ctfile_s": ct_sum, "delta_s": dl_sum,
                            "ratio": ct_sum / dl_sum, "pass": ct_sum / dl_sum <= TARGETS["e2e_ratio_max"]}
    return out


# ---------------------------------------------------------------- (3) (4) change scans


def _entry_files(t, version: int, root=None, *, removed: bool = False) -> list[str]:
    """The data files the log entry of ``version`` added (or ``removed``),
    under ``root`` (default: the table's own directory)."""
    from ctfile.format.actions import AddPartition, RemovePartition

    kind = RemovePartition if removed else AddPartition
    return [os.path.join(str(root or t.uri), a.path) for a in t.log.read_entry(version) if isinstance(a, kind)]


def rewrite_floor(files: list[str], out_dir: Path, keep=None) -> None:
    """The copy-on-write floor of a statement: pyarrow alone decoding the
    data columns of the files the statement rewrote and encoding them again
    (zstd, 1 Mi-row row groups, two threads as ctfile uses), minus the rows
    ``keep`` (a row predicate) drops. No hidden columns, no checksum, no
    fsync, no log: the part of the work any copy-on-write engine must do."""
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



def bench_append(args, root: Path, info: dict) -> dict:
    import pyarrow.parquet as pq

    w_ct, w_dl = Ctfile({}), Delta({})
    ct, dl = w_ct.open(root / "ct"), w_dl.open(root / "dl")
    last = f"RF1{args.rounds - 1}"
    v, dv = info["versions"][last]["ct"], info["versions"][last]["dl"]
    files = _entry_files(ct, v)
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
    med = {k: median(x) for k, x in wall.items()}
    cmed = {k: median(x) for k, x in cpu.items()}
    shape = str(ct.changes(start_version=v, end_version=v, information="append_only").plan_shape)
    return {
        "description": f"append_only change scan of the last RF1 commit (ctfile v{v}, delta v{dv})",
        "rows": rows["ctfile"], "files": len(files), "file_bytes": sum(os.path.getsize(f) for f in files),
        "plan_shape": shape,
        "ctfile_ms": med["ctfile"] * 1e3, "pyarrow_ms": med["pyarrow"] * 1e3, "delta_ms": med["delta"] * 1e3,
        "ratio_vs_pyarrow": med["ctfile"] / med["pyarrow"], "ratio_vs_delta": med["ctfile"] / med["delta"],
        "cpu_ratio_vs_pyarrow": cmed["ctfile"] / cmed["pyarrow"], "cpu_ratio_vs_delta": cmed["ctfile"] / cmed["delta"],
        "pass_vs_pyarrow": med["ctfile"] / med["pyarrow"] <= TARGETS["append_vs_pyarrow_max"],
        "pass_vs_delta": med["ctfile"] / med["delta"] <= TARGETS["append_vs_delta_max"],
        "runs_ms": {k: [x * 1e3 for x in xs] for k, xs in wall.items()},
    }


def bench_mindelta(args, root: Path, info: dict) -> dict:
    w_ct, w_dl = Ctfile({}), Delta({})
    ct, dl = w_ct.open(root / "ct"), w_dl.open(root / "dl")
    v0, dv0 = info["versions"]["RF10"]["ct"], info["versions"]["RF10"]["dl"]
    v1, dv1 = info["versions"]["MERGE"]["ct"], info["versions"]["MERGE"]["dl"]
    rows = {}

    def run_ct():
        t = w_ct.scan(ct, v0, v1)
        rows["ctfile"] = t.num_rows

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
    import pyarrow.parquet as pq

    plan = ct.changes(start_version=v0, end_version=v1).plan
    removed = [os.path.join(ct.uri, p.path) for p in plan.removed]
    data_cols = ct.snapshot().schema.names

    def run_removed_decode():
        rows["removed_decoded"] = sum(pq.read_table(f, columns=data_cols).num_rows for f in removed)

    wall, cpu = interleaved({"ctfile": run_ct, "delta": run_dl, "delta_load_cdf_only": run_dl_raw,
                              "removed_decode": run_removed_decode}, args.runs)
    if rows["ctfile"] != rows["delta"]:
        raise SystemExit(f"minimum-delta rows differ: ctfile {rows['ctfile']}, consolidated delta CDF {rows['delta']}")
    med = {k: median(x) for k, x in wall.items()}
    cmed = {k: median(x) for k, x in cpu.items()}
    shape = str(ct.changes(start_version=v0, end_version=v1).plan_shape)
    return {
        "description": (f"default (minimum-delta) change scan over RF1..MERGE (ctfile v{v0}..v{v1}, delta v{dv0}..v{dv1}) "
                        "vs delta-rs load_cdf + consolidation to net changes per (l_orderkey, l_linenumber)"),
        "plan_shape": shape,
        "ctfile_rows": rows["ctfile"], "delta_cdf_rows": rows["delta_cdf"], "delta_net_rows": rows["delta"],
        "ctfile_ms": med["ctfile"] * 1e3, "delta_ms": med["delta"] * 1e3,
        "delta_load_cdf_only_ms": med["delta_load_cdf_only"] * 1e3,
        "removed_partitions": len(removed), "removed_rows": rows["removed_decoded"],
        "removed_decode_ms": med["removed_decode"] * 1e3,
        "removed_decode_vs_delta": med["removed_decode"] / med["delta"],
        "ratio": med["ctfile"] / med["delta"],
        "ratio_vs_load_cdf_only": med["ctfile"] / med["delta_load_cdf_only"],
        "cpu_ratio": cmed["ctfile"] / cmed["delta"],
        "pass": med["ctfile"] / med["delta"] <= TARGETS["mindelta_vs_delta_max"],
        "runs_ms": {k: [x * 1e3 for x in xs] for k, xs in wall.items()},
    }


def bench_scans(args, root: Path, info: dict) -> dict:
    """(4b) The minimum-delta scan of each statement's own version, alone."""
    w_ct, w_dl = Ctfile({}), Delta({})
    ct, dl = w_ct.open(root / "ct"), w_dl.open(root / "dl")
    out = {}
    for op in SCAN_OPS:
        key = op if op != "DELETE" else f"RF2{args.rounds - 1}"
        v, dv = info["versions"][key]["ct"], info["versions"][key]["dl"]
        rows = {}

        def run_ct(v=v):
            rows["ctfile"] = w_ct.scan(ct, v, v).num_rows

        def run_dl(dv=dv):
            rows["delta"] = w_dl.scan(dl, dv, dv).num_rows

        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        wall, cpu = interleaved({"ctfile": run_ct, "delta": run_dl}, args.runs)
        med = {k: median(x) for k, x in wall.items()}
        cmed = {k: median(x) for k, x in cpu.items()}
        out[op] = {
            "description": f"minimum-delta change scan of the {op} alone (ctfile changes({v}, {v}); delta-rs load_cdf({dv}, {dv}))",
            "plan_shape": str(ct.changes(start_version=v, end_version=v).plan_shape),
            "rows": dict(rows),
            "ctfile_ms": med["ctfile"] * 1e3, "delta_ms": med["delta"] * 1e3,
            "ctfile_cpu_ms": cmed["ctfile"] * 1e3, "delta_cpu_ms": cmed["delta"] * 1e3,
            "ratio": med["ctfile"] / med["delta"],
            "loadavg": load,
            "runs_ms": {k: [x * 1e3 for x in xs] for k, xs in wall.items()},
            "cpu_runs_ms": {k: [x * 1e3 for x in xs] for k, xs in cpu.items()},
        }
    return out


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


# ---------------------------------------------------------------- profiling


class _NoProfiler:
    def start(self):
        pass

    def stop(self):
        pass


def _py_spy_summary(raw: Path, top: int = 60) -> str:
    """Inclusive share of samples per frame, over all threads, from py-spy's
    raw (collapsed stack) output."""
    import collections
    import re

    total = 0
    incl: collections.Counter = collections.Counter()
    leaf: collections.Counter = collections.Counter()

    def norm(frame: str) -> str:
        m = re.match(r"^(.*) \(([^()]*)\)$", frame)
        if not m:
            return frame[:100]
        name, loc = m.groups()
        return f"{name[:90]} [{re.sub(r':[0-9]+$', '', loc).split('/')[-1]}]"

    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [norm(f) for f in stack.split(";")]
        # The main thread's start-up (imports, loading the workload) is not
        # what is profiled; other threads (the scan's pool) are.
        if "main [bench_delta.py]" in frames and "profile [bench_delta.py]" not in frames:
            continue
        total += int(n)
        for f in set(frames):
            incl[f] += int(n)
        leaf[frames[-1]] += int(n)
    lines = [f"py-spy --native, all threads (main thread from profile() on): {total} samples", "",
             "inclusive (share of all samples):"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(top)]
    lines += ["", "self (leaf frames):"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in leaf.most_common(top // 2)]
    return "\n".join(lines) + "\n"


def profile(args, root: Path, info: dict, w: dict) -> Path:
    """Run ctfile's side of one figure under a profiler; write a text report."""
    target = args.profile
    out = args.out.parent / "profiles" / f"delta-{target}-sf{args.sf:g}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.profile_tool == "py-spy":
        import subprocess

        raw = out.with_suffix(".raw")
        spy = Path(sys.executable).with_name("py-spy")
        argv = [a for a in sys.argv[1:] if not a.startswith("--profile-tool")]
        if "--profile-tool" in sys.argv:  # the separate-value form
            i = sys.argv.index("--profile-tool")
            argv = sys.argv[1:i] + sys.argv[i + 2:]
        cmd = [str(spy if spy.exists() else "py-spy"), "record", "--native", "--format", "raw", "-r", "200",
               "-o", str(raw), "--", sys.executable, str(Path(__file__).resolve()), *argv, "--profile-tool", "none"]
        subprocess.run(cmd, check=True)
        out.write_text(_py_spy_summary(raw))
        return out
    if args.profile_tool == "pyinstrument":
        from pyinstrument import Profiler

        prof = Profiler(interval=0.001)
    else:
        prof = _NoProfiler()
    side = Ctfile(w)
    if target in DML_OPS:
        _, rnd = _history_steps(args.rounds)[_timed_step_index(args.rounds)[target]]
        for n in range(2):  # warm-up, then the profiled run
            d = root / "profile-scratch" / f"{target}-{n}"
            shutil.rmtree(d, ignore_errors=True)
            clone_table(root / "pre" / target / "ct", d)
            t = side.open(d)
            quiesce()
            if n:
                prof.start()
            res = side.step(t, target, rnd)
            if target != "COMPACT":
                side.scan(t, res["version"], res["version"])
            if n:
                prof.stop()
            shutil.rmtree(d, ignore_errors=True)
    else:
        t = side.open(root / "ct")
        if target.startswith("scan-"):
            op = target[len("scan-"):]
            v = info["versions"][op if op != "DELETE" else f"RF2{args.rounds - 1}"]["ct"]
            fn = lambda: side.scan(t, v, v)  # noqa: E731
        elif target == "append":
            v = info["versions"][f"RF1{args.rounds - 1}"]["ct"]
            fn = lambda: side.scan(t, v, v, "append_only")  # noqa: E731
        else:
            fn = lambda: side.scan(t, info["versions"]["RF10"]["ct"], info["versions"]["MERGE"]["ct"])  # noqa: E731
        fn()
        prof.start()
        for _ in range(20 if target == "append" else 3):
            fn()
        prof.stop()
    if isinstance(prof, _NoProfiler):
        return out
    out.write_text(prof.output_text(unicode=False, color=False, show_all=False))
    return out


# ---------------------------------------------------------------- report


def _ok(flag) -> str:
    return "" if flag is None else ("ok" if flag else "MISS")


def markdown(result: dict) -> str:
    meta = result["meta"]
    h = result.get("history") or {}
    lines = [f"## ctfile vs delta-rs {meta.get('deltalake', '')} on the same history ({meta['mode']}, {meta['started']})", "",
             f"`{meta['command']}` — lineitem SF {meta['sf']:g} ({h.get('rows', 0):,} rows), {meta['rounds']} RF1+RF2 rounds, "
             f"medians of {meta['runs']} alternated runs after a warm-up; both formats write zstd; "
             f"load average {meta['loadavg_start'][0]:.1f} at start, {meta['loadavg_end'][0]:.1f} at end", "",
             "Method: the history (bulk insert; RF1 = insert the lineitems of 0.1% new orders, RF2 = delete the "
             "lineitems of 0.1% of the orders by an `l_orderkey IN (...)` list, repeated; UPDATE `l_discount = "
             "l_discount + 0.01 WHERE l_orderkey % 100 = 7`; MERGE of an upsert batch of 0.5% of the rows on "
             "(l_orderkey, l_linenumber), 80% matching rows with a new l_quantity and l_comment, 20% new rows; "
             "compaction) is applied once to a ctfile table and to a Delta table with "
             "`delta.enableChangeDataFeed = true`; the benchmark checks that both report the same row counts per "
             "statement and hold the same rows at the end. Each timed DML run starts from a clone of the table as it "
             "was before that statement (data files hard-linked, logs copied; untimed, followed by `sync`), opens "
             "it (untimed), then times the statement and, right after it, the change scan of the new version "
             "(ctfile `changes(v, v)` minimum delta; delta-rs `load_cdf(v, v)`), alternating which format goes "
             "first. ctfile fsyncs every data file and log entry; delta-rs does not. Net changes from the Delta "
             "change feed (4): per key, events ordered by commit (pre-image before post-image), the first and last "
             "event kept with pyarrow `group_by(..., use_threads=False).aggregate(first, last)`; the first is the "
             "before-image if it is a delete / update_preimage, the last the after-image if it is an insert / "
             "update_postimage; keys whose before and after images are equal are dropped; delta-rs's string_view "
             "columns are cast to string first (pyarrow cannot take() them). The output row counts of both sides "
             "are checked to be equal."]
    if h:
        lines += ["", "History (single untimed build run, seconds):", "",
                  "| step | rows inserted / updated / deleted | ctfile s | delta-rs s | ctfile version | delta version |",
                  "|---|---|---:|---:|---:|---:|"]
        for s in h["steps"]:
            c = s["ct"]
            name = s["op"] + ("" if s.get("round", -1) < 0 else f" #{s['round'] + 1}")
            counts = f"{c.get('inserted', c.get('rows', 0)):,} / {c.get('updated', 0):,} / {c.get('deleted', 0):,}"
            lines.append(f"| {name} | {counts} | {s['ct_s']:.2f} | {s['dl_s']:.2f} | {c['version']} | {s['dl']['version']} |")
    d = result.get("dml")
    if d:
        lines += ["", "### (1) DML and (2) DML + the change scan consuming it (each run from a clone of the same table state)", "",
                  "| statement | ctfile s | delta-rs s | ratio (<= 1.0) | CPU ratio | scan s: ctfile changes / delta-rs load_cdf | ctfile DML+scan s | delta-rs DML+load_cdf s | ratio (<= 0.5) | scan rows |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for op, e in d.items():
            if op == "e2e_total":
                continue
            e2e = (f"{e['ctfile_scan_s']:.3f} / {e['delta_scan_s']:.3f} | "
                   f"{e['ctfile_e2e_s']:.3f} | {e['delta_e2e_s']:.3f} | {e['e2e_ratio']:.2f} {_ok(e['e2e_pass'])} | "
                   f"{e['rows']['ct']['scan_rows']:,}") if "e2e_ratio" in e else " | | | |"
            lines.append(f"| {e['description']} | {e['ctfile_s']:.3f} | {e['delta_s']:.3f} | {e['ratio']:.2f} {_ok(e['pass'])} | "
                         f"{e['cpu_ratio']:.2f} | {e2e} |")
        if "e2e_total" in d:
            t = d["e2e_total"]
            lines.append(f"| **{' + '.join(t['ops'])}, end to end** | | | | | | {t['ctfile_s']:.3f} | {t['delta_s']:.3f} | "
                         f"{t['ratio']:.2f} {_ok(t['pass'])} | |")
        floors = [(op, e) for op, e in d.items() if op != "e2e_total" and "floor_s" in e]
        if floors:
            lines += ["", "Copy-on-write floor: pyarrow alone decoding the data columns of the files the ctfile statement "
                          "rewrote and encoding them again (zstd, 1 Mi-row row groups, 2 threads; DELETE without the deleted "
                          "rows; no hidden columns, checksum, fsync or log), timed in the same rounds. No copy-on-write "
                          "statement can cost less, whatever its change scan costs:", "",
                      "| statement | files | floor s | floor / delta-rs DML | floor / delta-rs DML + load_cdf |",
                      "|---|---:|---:|---:|---:|"]
            for op, e in floors:
                lines.append(f"| {op} | {e['floor_files']} | {e['floor_s']:.3f} | {e['floor_vs_delta']:.2f} | "
                             f"{e.get('floor_vs_delta_e2e', float('nan')):.2f} |")
        c = d.get("COMPACT")
        if c:
            ct_r, dl_r = c["rows"]["ct"], c["rows"]["dl"]
            lines += ["", f"COMPACT (no goal): ctfile rewrote {ct_r.get('files_removed')} small partitions into "
                          f"{ct_r.get('files_added')}; delta-rs optimize.compact() removed {dl_r.get('files_removed')} and "
                          f"added {dl_r.get('files_added')} files (its default target is ~100 MB per file)."]
    a = result.get("append")
    if a:
        lines += ["", f"### (3) append-only change scan of the last RF1 commit ({a['rows']:,} rows, {a['files']} file(s), {a['file_bytes']:,} bytes)", "",
                  "| ctfile ms | pq.read_table(added files) ms | delta-rs load_cdf ms | vs pyarrow (<= 1.3) | vs delta-rs (<= 1.0) | CPU ratios (pq, delta) |",
                  "|---:|---:|---:|---:|---:|---:|",
                  f"| {a['ctfile_ms']:.2f} | {a['pyarrow_ms']:.2f} | {a['delta_ms']:.2f} | {a['ratio_vs_pyarrow']:.2f} {_ok(a['pass_vs_pyarrow'])} | "
                  f"{a['ratio_vs_delta']:.2f} {_ok(a['pass_vs_delta'])} | {a['cpu_ratio_vs_pyarrow']:.2f}, {a['cpu_ratio_vs_delta']:.2f} |"]
    m = result.get("mindelta")
    if m:
        lines += ["", "### (4) minimum-delta change scan over RF1..MERGE", "",
                  "| ctfile ms (rows) | delta-rs load_cdf + consolidation ms (CDF rows -> net rows) | load_cdf alone ms | ratio (<= 1.0) | vs load_cdf alone | CPU ratio |",
                  "|---:|---:|---:|---:|---:|---:|",
                  f"| {m['ctfile_ms']:.1f} ({m['ctfile_rows']:,}) | {m['delta_ms']:.1f} ({m['delta_cdf_rows']:,} -> {m['delta_net_rows']:,}) | "
                  f"{m['delta_load_cdf_only_ms']:.1f} | {m['ratio']:.2f} {_ok(m['pass'])} | {m['ratio_vs_load_cdf_only']:.2f} | {m['cpu_ratio']:.2f} |"]
        if "removed_decode_ms" in m:
            lines += ["", f"Floor of a scan that reads only the interval's partitions: pyarrow `pq.read_table` of the data "
                          f"columns of the {m['removed_partitions']} net removed partitions ({m['removed_rows']:,} rows; "
                          f"the old images of the deleted and updated rows exist only there, scattered over all of them): "
                          f"{m['removed_decode_ms']:.0f} ms, {m['removed_decode_vs_delta']:.2f}x delta-rs's load_cdf + "
                          "consolidation, in the same rounds."]
    sc = result.get("scans")
    if sc:
        lines += ["", "### (4b) the change scan of each statement alone (informational; the goal is (2))", "",
                  "| scan | plan shape | rows (ctfile / delta-rs CDF) | ctfile ms | delta-rs load_cdf ms | ratio | ctfile CPU ms | delta-rs CPU ms | load avg |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for op, e in sc.items():
            load = "" if e["loadavg"] is None else f"{e['loadavg']:.1f}"
            lines.append(f"| {op} | {e['plan_shape']} | {e['rows']['ctfile']:,} / {e['rows']['delta']:,} | {e['ctfile_ms']:.1f} | "
                         f"{e['delta_ms']:.1f} | {e['ratio']:.1f} | {e['ctfile_cpu_ms']:.1f} | {e['delta_cpu_ms']:.1f} | {load} |")
    hb = result.get("hidden")
    if hb:
        lines += ["", "### (5) hidden-column bytes (compressed _ct_row_id + _ct_row_version chunks / live partition bytes)", "",
                  "| after | partitions (with hidden columns) | table bytes | hidden bytes | fraction |", "|---|---:|---:|---:|---:|"]
        for k in ("UPDATE", "MERGE", "COMPACT"):
            r = hb[k]
            flag = f" {_ok(hb['pass'])} (<= 1%)" if k == "UPDATE" else ""
            lines.append(f"| {k} (v{r['version']}) | {r['partitions']} ({r['partitions_with_hidden']}) | {r['table_bytes']:,} | "
                         f"{r['hidden_bytes']:,} | {100 * r['fraction']:.3f}%{flag} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    import deltalake
    import pyarrow as pa

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
    result: dict = {
        "meta": {
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
            "loadavg_start": loadavg_start,
        },
        "history": info,
    }
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
    flags = []
    for op, e in (result.get("dml") or {}).items():
        flags += [e.get("pass"), e.get("e2e_pass")]
    if result.get("append"):
        flags += [result["append"]["pass_vs_pyarrow"], result["append"]["pass_vs_delta"]]
    if result.get("mindelta"):
        flags.append(result["mindelta"]["pass"])
    if result.get("hidden"):
        flags.append(result["hidden"]["pass"])
    result["all_pass"] = all(f for f in flags if f is not None)
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
